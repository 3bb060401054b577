//! A matrix stored in 16 bits (f16 or bf16: the towers' linears in a Hugging Face folder or in
//! llama.cpp's projector for E2B) kept at that size on the device, two halves a u32 word (the
//! shaders need no `shader-f16`), and widened to f32 only for the product it takes part in: one
//! dispatch writes it transposed, `[in, out]`, the matmul reads it and it goes back to the pool.
//! At rest it holds half the bytes of the f32 matrix it used to be; a product costs one extra
//! dispatch and a transient matrix, which a tower (encoded once per picture or clip, not once per
//! token) can afford.
//!
//! The widening is exact (an f16 or bf16 value is an f32 value), so products equal those of the
//! matrix read as f32 on the host ([`hearth_weights::Checkpoint::read_f32`]). On the CPU backend
//! the matrix is widened once, on the host, and kept as f32.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use half::{bf16, f16};
use hearth_weights::{HalfFormat, HalfTensor};

use crate::launch::{bytes_of, empty_output, grid, has_fused_kernels};
use crate::scales::half_to_f32;

const THREADS: u32 = 64;
/// The kernel's comptime code for bfloat16 (else IEEE half).
const BF16: u32 = 1;

/// `out[i, o] = W[o, i]` widened to f32, one thread per value: `W` is `[rows, cols]` of halves,
/// two a word (the even column in the low half), `out` `[cols, rows]`.
#[cube(launch)]
fn widen_transposed_kernel(
    words: &[u32],
    out: &mut [f32],
    rows: u32,
    cols: u32,
    #[comptime] format: u32,
    #[comptime] threads: u32,
) {
    let position = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    if position < rows * cols {
        let input = position / rows;
        let output = position % rows;
        let index = output * cols + input;
        let bits = (words[(index / 2) as usize] >> ((index % 2) * 16)) & 0xffff;
        if format == BF16 {
            out[position as usize] = f32::reinterpret(bits << 16);
        } else {
            out[position as usize] = half_to_f32(bits);
        }
    }
}

/// The kernel as a Burn backend operation (cubecl backends only).
#[backend_extension(Cube)]
pub trait HalfKernels: Backend {
    /// `words` (`[rows · cols / 2]` u32, halves of `format`: 1 for bf16, 0 for f16) widened to
    /// f32 and transposed: `[cols, rows]`.
    fn widen_transposed(words: IntTensor<Self>, rows: usize, cols: usize, format: u32) -> FloatTensor<Self>;
}

impl HalfKernels for CubeBackend {
    fn widen_transposed(words: CubeTensor, rows: usize, cols: usize, format: u32) -> CubeTensor {
        let words = into_contiguous(words);
        let out = empty_output(&words, [cols, rows].into());
        let (grid_x, grid_y) = grid(((rows * cols) as u32).div_ceil(THREADS));
        crate::launch::declare_reads(bytes_of(&words));
        widen_transposed_kernel::launch(
            &words.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            words.into_buffer_arg(),
            out.clone().into_buffer_arg(),
            rows as u32,
            cols as u32,
            format,
            THREADS,
        );
        out
    }
}

/// A `[rows, cols]` matrix of halves: on the device as stored, or (CPU backend) as f32.
pub struct HalfMatrix {
    stored: Stored,
    rows: usize,
    cols: usize,
    format: HalfFormat,
}

// A few hundred per tower: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
enum Stored {
    /// `[rows · cols / 2]` u32 words.
    Device(Tensor<1, Int>),
    /// `[cols, rows]` f32 (transposed, as the product takes it).
    Widened(Tensor<2>),
}

impl HalfMatrix {
    /// Uploads `t` (taken by value: its words become the upload's buffer without another copy).
    pub fn upload(t: HalfTensor, device: &Device) -> Self {
        let HalfTensor { format, rows, cols, words } = t;
        assert_eq!(words.len() * 2, rows * cols, "HalfMatrix: {rows}×{cols} halves in {} words", words.len());
        let stored = if has_fused_kernels(device) {
            let n = words.len();
            Stored::Device(Tensor::from_data(TensorData::new(words, [n]), (device, DType::U32)))
        } else {
            let values = widen_on_host(&words, format);
            let mut transposed = vec![0.0; rows * cols];
            for (o, row) in values.chunks_exact(cols.max(1)).enumerate() {
                for (i, v) in row.iter().enumerate() {
                    transposed[i * rows + o] = *v;
                }
            }
            Stored::Widened(Tensor::from_data(TensorData::new(transposed, [cols, rows]), device))
        };
        HalfMatrix { stored, rows, cols, format }
    }

    pub fn dims(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// Bytes held on the device while the matrix is not in use.
    pub fn device_bytes(&self) -> usize {
        match &self.stored {
            Stored::Device(words) => words.dims()[0] * 4,
            Stored::Widened(w) => w.shape().num_elements() * 4,
        }
    }

    /// The matrix as f32, transposed: `[cols, rows]` (one dispatch where the kernels run).
    pub fn widened_transposed(&self) -> Tensor<2> {
        match &self.stored {
            Stored::Widened(w) => w.clone(),
            Stored::Device(words) => {
                let format = match self.format {
                    HalfFormat::Bf16 => BF16,
                    HalfFormat::F16 => 0,
                };
                Tensor::from_dispatch(<Dispatch as HalfKernels>::widen_transposed(
                    words.clone().into_dispatch(),
                    self.rows,
                    self.cols,
                    format,
                ))
            }
        }
    }

    /// `x · Wᵀ`: `[S, cols]` → `[S, rows]`.
    pub fn matmul_transposed(&self, x: Tensor<2>) -> Tensor<2> {
        x.matmul(self.widened_transposed())
    }
}

/// The halves of `words` as f32, in order.
fn widen_on_host(words: &[u32], format: HalfFormat) -> Vec<f32> {
    let widen = |bits: u32| match format {
        HalfFormat::F16 => f16::from_bits(bits as u16).to_f32(),
        HalfFormat::Bf16 => bf16::from_bits(bits as u16).to_f32(),
    };
    words.iter().flat_map(|&w| [widen(w & 0xffff), widen(w >> 16)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices() -> Vec<(&'static str, Device)> {
        let mut devices = vec![("cpu", Device::flex())];
        if let Some(gpu) = crate::launch::test_gpu() {
            devices.push(("wgpu", gpu));
        }
        devices
    }

    /// Values that test the widening: normal, subnormal and zero halves of both signs, and
    /// bfloat16's range far beyond f16's.
    fn values(format: HalfFormat, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = ((i * 37 % 101) as f32 - 50.0) / 7.0;
                match (format, i % 9) {
                    (_, 0) => 0.0,
                    (_, 1) => -0.0,
                    (HalfFormat::F16, 2) => 3.0e-6 * if i % 2 == 0 { 1.0 } else { -1.0 }, // subnormal
                    (HalfFormat::Bf16, 2) => 1.0e30 * x,
                    _ => x,
                }
            })
            .collect()
    }

    fn halves(format: HalfFormat, values: &[f32]) -> Vec<u32> {
        let bits: Vec<u32> = values
            .iter()
            .map(|&v| match format {
                HalfFormat::F16 => u32::from(f16::from_f32(v).to_bits()),
                HalfFormat::Bf16 => u32::from(bf16::from_f32(v).to_bits()),
            })
            .collect();
        bits.chunks_exact(2).map(|pair| pair[0] | (pair[1] << 16)).collect()
    }

    /// Widened on the device, the matrix equals the host's widening bit for bit, transposed; its
    /// products equal those of the f32 matrix; at rest it holds half its bytes.
    #[test]
    fn a_matrix_of_halves_widens_exactly_and_keeps_half_the_bytes() {
        let (rows, cols, tokens) = (24, 70, 3);
        for (name, device) in devices() {
            for format in [HalfFormat::F16, HalfFormat::Bf16] {
                let words = halves(format, &values(format, rows * cols));
                let host = widen_on_host(&words, format);
                let matrix = HalfMatrix::upload(HalfTensor { format, rows, cols, words }, &device);
                let widened: Vec<f32> = matrix.widened_transposed().into_data().try_to_vec().expect("f32");
                for i in 0..cols {
                    for o in 0..rows {
                        let (got, want) = (widened[i * rows + o], host[o * cols + i]);
                        assert_eq!(got.to_bits(), want.to_bits(), "{name} {format:?}: W[{o}, {i}] {got} ≠ {want}");
                    }
                }
                if format == HalfFormat::F16 {
                    let x: Vec<f32> = (0..tokens * cols).map(|i| ((i % 13) as f32 - 6.0) / 5.0).collect();
                    let x = Tensor::<2>::from_data(TensorData::new(x, [tokens, cols]), &device);
                    let dense = Tensor::<2>::from_data(TensorData::new(host.clone(), [rows, cols]), &device);
                    let want: Vec<f32> = x.clone().matmul(dense.transpose()).into_data().try_to_vec().expect("f32");
                    let got: Vec<f32> = matrix.matmul_transposed(x).into_data().try_to_vec().expect("f32");
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{name}: {g} ≠ {w}");
                    }
                }
                let expected_bytes = if name == "cpu" { rows * cols * 4 } else { rows * cols * 2 };
                assert_eq!(matrix.device_bytes(), expected_bytes, "{name} {format:?}");
            }
        }
    }
}
