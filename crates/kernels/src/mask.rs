//! A token mask applied to the logits on the device: the bitset (one bit per token, 32 KB for a
//! 262k vocabulary) is uploaded, and the tokens whose bit is clear get a logit no sampler picks.
//! Nothing is read back.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::launch::{declare_reads_of, grid, has_fused_kernels};

/// The logit of a masked token: far below any real one (Gemma's are softcapped to ±30), finite so
/// that temperature scaling and softmax stay free of NaN.
pub const MASKED: f32 = -1e30;

const THREADS: u32 = 256;

#[cube(launch)]
fn mask_logits_kernel(logits: &mut [f32], bits: &[u32], n: u32, #[comptime] threads: u32) {
    let i = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    if i < n {
        let word = bits[(i / 32) as usize];
        if (word >> (i % 32)) & 1 == 0 {
            logits[i as usize] = f32::new(-1e30);
        }
    }
}

#[backend_extension(Cube)]
pub trait MaskOps: Backend {
    /// `logits` (any shape, f32) with every element whose bit in `bits` (u32 words) is clear set
    /// to [`MASKED`]; `bits` covers every element.
    fn mask_logits(logits: FloatTensor<Self>, bits: IntTensor<Self>) -> FloatTensor<Self>;
}

impl MaskOps for CubeBackend {
    fn mask_logits(logits: CubeTensor, bits: CubeTensor) -> CubeTensor {
        // In place when nothing else holds the logits (the usual case: they were just computed).
        let logits = if logits.can_mut() && logits.is_contiguous() { logits } else { into_contiguous(logits.copy()) };
        let n = logits.meta.shape().num_elements();
        let (grid_x, grid_y) = grid((n as u32).div_ceil(THREADS));
        declare_reads_of(&[&logits, &bits]);
        mask_logits_kernel::launch(
            &logits.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            logits.clone().into_buffer_arg(),
            into_contiguous(bits).into_buffer_arg(),
            n as u32,
            THREADS,
        );
        logits
    }
}

/// `logits` `[1, vocab]` with the tokens outside `words` (bit `id % 32` of word `id / 32`)
/// masked. Missing words count as cleared.
pub fn mask_logits(logits: Tensor<2>, words: &[u32]) -> Tensor<2> {
    let [rows, vocab] = logits.dims();
    let device = logits.device();
    let count = vocab.div_ceil(32);
    let mut words = words.to_vec();
    words.resize(count, 0);
    let bits = Tensor::<1, Int>::from_data(TensorData::new(words, [count]), (&device, DType::U32));
    if rows == 1 && logits.dtype() == DType::F32 && has_fused_kernels(&device) {
        return Tensor::from_dispatch(<Dispatch as MaskOps>::mask_logits(logits.into_dispatch(), bits.into_dispatch()));
    }
    // Tensor operations: bit j of every word, as a [words, 32] grid read row by row.
    let fields: Vec<Tensor<2, Int>> = (0..32i64)
        .map(|j| bits.clone().bitwise_right_shift_scalar(j).bitwise_and_scalar(1).reshape([count, 1]))
        .collect();
    let cleared = Tensor::cat(fields, 1).reshape([1, count * 32]).slice([0..1, 0..vocab]).equal_elem(0);
    logits.mask_fill(cleared.expand([rows, vocab]), MASKED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    fn run(device: &Device, vocab: usize, allowed: &[u32]) -> Vec<f32> {
        let values: Vec<f32> = (0..vocab).map(|i| (i % 7) as f32 - 3.0).collect();
        let logits = Tensor::<2>::from_data(TensorData::new(values.clone(), [1, vocab]), device);
        let mut words = vec![0u32; vocab.div_ceil(32)];
        for &id in allowed {
            words[id as usize / 32] |= 1 << (id % 32);
        }
        let out = mask_logits(logits, &words);
        let data = pollster::block_on(out.into_data_async()).unwrap();
        let got: Vec<f32> = data.try_into_vec().unwrap();
        for (i, (g, v)) in got.iter().zip(&values).enumerate() {
            let want = if allowed.contains(&(i as u32)) { *v } else { MASKED };
            assert_eq!(*g, want, "token {i}");
        }
        got
    }

    #[test]
    fn masked_tokens_get_the_masked_logit_on_the_cpu() {
        run(&Device::flex(), 77, &[0, 5, 31, 32, 33, 63, 64, 76]);
    }

    #[test]
    fn the_kernel_masks_like_the_tensor_operations() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        // A vocabulary that is not a multiple of 32 or of the block, and one of 262,144.
        let allowed: Vec<u32> = (0..4099).filter(|i| i % 13 == 0 || i % 32 == 31).collect();
        run(&gpu, 4099, &allowed);
        let cpu = run(&Device::flex(), 4099, &allowed);
        assert_eq!(run(&gpu, 4099, &allowed), cpu);
        run(&gpu, 262_144, &[48, 49, 52, 262_143]);
    }
}
