//! Element-wise chains of the decoder fused into single kernels, to cut GPU dispatches per token
//! (what bounds decode speed of a small model as much as memory bandwidth):
//!
//! - RMSNorm: `x · (mean(x²) + eps)^-½ (· w)`, one thread block per row: 1 dispatch instead of 7.
//! - `gelu_tanh(gate) · up` (the MLP and the per-layer-input gate): 1 dispatch instead of 10.
//!
//! On the cubecl backends the kernels run; elsewhere (the CPU backend) the same maths runs as
//! tensor operations ([`reference`]), which the tests also use as the oracle.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::affine::{grid, has_fused_kernels};

/// Threads per block (a power of two: RMSNorm sums in a tree).
const THREADS: u32 = 64;

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_kernel(
    x: &[f32],
    weight: &[f32],
    out: &mut [f32],
    rows: u32,
    size: u32,
    eps: f32,
    #[comptime] scaled: bool,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) {
    let row = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let thread = UNIT_POS_X;
    let base = row * size;
    let mut sum = 0.0;
    if row < rows {
        let mut i = thread;
        while i < size {
            let v = x[(base + i) as usize];
            sum += v * v;
            i += threads;
        }
    }
    let mut partial = Shared::<[f32]>::new_slice(threads as usize);
    partial[thread as usize] = sum;
    sync_cube();
    #[unroll]
    for level in 0..levels {
        let stride = threads >> (level + 1);
        if thread < stride {
            let s = partial[thread as usize] + partial[(thread + stride) as usize];
            partial[thread as usize] = s;
        }
        sync_cube();
    }
    if row < rows {
        let inv_rms = 1.0 / f32::sqrt(partial[0] / f32::cast_from(size) + eps);
        let mut i = thread;
        while i < size {
            let mut v = x[(base + i) as usize] * inv_rms;
            if scaled {
                v *= weight[i as usize];
            }
            out[(base + i) as usize] = v;
            i += threads;
        }
    }
}

#[cube(launch)]
fn gelu_tanh_mul_kernel(gate: &[f32], up: &[f32], out: &mut [f32], n: u32, #[comptime] threads: u32) {
    let i = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    if i < n {
        let g = gate[i as usize];
        // tanh from exp on an input clamped to ±15 (where tanh is ±1 in f32): never NaN.
        let inner = f32::clamp((g + 0.044_715 * g * g * g) * 0.797_884_6, -15.0, 15.0);
        let e = f32::exp(2.0 * inner);
        let tanh = (e - 1.0) / (e + 1.0);
        out[i as usize] = 0.5 * g * (1.0 + tanh) * up[i as usize];
    }
}

#[backend_extension(Cube)]
pub trait FusedOps: Backend {
    /// RMSNorm over the last dimension of `x` viewed as `[rows, size]`; `weight` `[size]` is
    /// applied when `scaled`.
    fn fused_rms_norm(x: FloatTensor<Self>, weight: FloatTensor<Self>, eps: f32, scaled: bool) -> FloatTensor<Self>;
    /// `gelu_tanh(gate) · up`, same shapes.
    fn fused_gelu_tanh_mul(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// An output tensor shaped like `like`.
fn empty_like(like: &CubeTensor) -> CubeTensor {
    let shape = like.meta.shape().clone();
    let handle = like.client.empty(shape.num_elements() * size_of::<f32>());
    CubeTensor::new_contiguous(like.client.clone(), like.device.clone(), shape, handle, DType::F32)
}

impl FusedOps for CubeBackend {
    fn fused_rms_norm(x: CubeTensor, weight: CubeTensor, eps: f32, scaled: bool) -> CubeTensor {
        let x = into_contiguous(x);
        let size = *x.meta.shape().last().unwrap_or(&1);
        let rows = x.meta.shape().num_elements() / size.max(1);
        let out = empty_like(&x);
        let (grid_x, grid_y) = grid(rows as u32);
        rms_norm_kernel::launch(
            &x.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            x.into_buffer_arg(),
            into_contiguous(weight).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            rows as u32,
            size as u32,
            eps,
            scaled,
            THREADS,
            THREADS.trailing_zeros(),
        );
        out
    }

    fn fused_gelu_tanh_mul(gate: CubeTensor, up: CubeTensor) -> CubeTensor {
        let gate = into_contiguous(gate);
        let n = gate.meta.shape().num_elements();
        let out = empty_like(&gate);
        let (grid_x, grid_y) = grid((n as u32).div_ceil(THREADS));
        gelu_tanh_mul_kernel::launch(
            &gate.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            gate.into_buffer_arg(),
            into_contiguous(up).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            n as u32,
            THREADS,
        );
        out
    }
}

/// `x · (mean(x²) + eps)^-½ · w` over the last dimension (any offset is already in `w`).
pub fn rms_norm<const D: usize>(x: Tensor<D>, weight: &Tensor<1>, eps: f32) -> Tensor<D> {
    if !has_fused_kernels(&x.device()) {
        return reference::rms_norm(x, weight, eps);
    }
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_rms_norm(
        x.into_dispatch(),
        weight.clone().into_dispatch(),
        eps,
        true,
    ))
}

/// `x · (mean(x²) + eps)^-½` over the last dimension.
pub fn rms_norm_unscaled<const D: usize>(x: Tensor<D>, eps: f32) -> Tensor<D> {
    if !has_fused_kernels(&x.device()) {
        return reference::rms_norm_unscaled(x, eps);
    }
    // The kernel reads no weight when unscaled; it still needs a buffer to bind.
    let unused = Tensor::<1>::ones([1], &x.device());
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_rms_norm(x.into_dispatch(), unused.into_dispatch(), eps, false))
}

/// `gelu_tanh(gate) · up` (GELU with the tanh approximation, `gelu_pytorch_tanh`).
pub fn gelu_tanh_mul<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    if !has_fused_kernels(&gate.device()) {
        return reference::gelu_tanh(gate) * up;
    }
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_gelu_tanh_mul(gate.into_dispatch(), up.into_dispatch()))
}

/// The same maths as tensor operations: the CPU backend's path and the kernels' test oracle.
pub mod reference {
    use burn::tensor::Tensor;

    pub fn rms_norm<const D: usize>(x: Tensor<D>, weight: &Tensor<1>, eps: f32) -> Tensor<D> {
        let size = weight.dims()[0];
        let mut shape = [1; D];
        shape[D - 1] = size;
        rms_norm_unscaled(x, eps) * weight.clone().reshape(shape)
    }

    pub fn rms_norm_unscaled<const D: usize>(x: Tensor<D>, eps: f32) -> Tensor<D> {
        let inv_rms = x.clone().square().mean_dim(D - 1).add_scalar(eps).sqrt().recip();
        x * inv_rms
    }

    pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        // x·x·x, not pow(x, 3): WGSL's pow is undefined for negative bases (NaN on SwiftShader).
        let cube = x.clone() * x.clone() * x.clone();
        let inner = (x.clone() + cube.mul_scalar(0.044_715)).mul_scalar(SQRT_2_OVER_PI);
        x.mul_scalar(0.5) * bounded_tanh(inner).add_scalar(1.0)
    }

    /// tanh with its input clamped to ±15, where it is ±1 in f32 anyway: some GPU
    /// implementations compute tanh from exponentials and return NaN for large inputs.
    pub fn bounded_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
        x.clamp(-15.0, 15.0).tanh()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) / 150.0).collect()
    }

    fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        pollster::block_on(t.into_data_async()).expect("readback").try_to_vec().expect("f32")
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    /// The kernels against the tensor-op path on the same GPU: norm sizes below, at and above the
    /// block's 64 threads; GELU over ±6.7 (tanh saturates).
    #[test]
    fn fused_kernels_match_the_tensor_operations() {
        let gpu = match crate::gpu::init_gpu_blocking() {
            Ok(gpu) => gpu.device,
            Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => return eprintln!("no GPU: {err}"),
            Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
        };
        assert!(has_fused_kernels(&gpu), "wgpu runs the kernels, not the fallback");
        for (rows, size) in [(3, 8), (5, 64), (2, 1536), (70, 256)] {
            let x = Tensor::<2>::from_data(TensorData::new(values(rows * size, size), [rows, size]), &gpu);
            let w = Tensor::<1>::from_data(TensorData::new(values(size, 3), [size]), &gpu);
            let fused = read(rms_norm(x.clone(), &w, 1e-6));
            let want = read(reference::rms_norm(x.clone(), &w, 1e-6));
            assert!(max_diff(&fused, &want) < 1e-4, "rms_norm {rows}x{size}: {}", max_diff(&fused, &want));
            let fused = read(rms_norm_unscaled(x.clone(), 1e-6));
            let want = read(reference::rms_norm_unscaled(x, 1e-6));
            assert!(max_diff(&fused, &want) < 1e-5, "unscaled {rows}x{size}: {}", max_diff(&fused, &want));
        }
        let n = 3 * 1000;
        let gate = Tensor::<2>::from_data(TensorData::new(values(n, 1), [3, 1000]), &gpu);
        let up = Tensor::<2>::from_data(TensorData::new(values(n, 2), [3, 1000]), &gpu);
        let fused = read(gelu_tanh_mul(gate.clone(), up.clone()));
        let want = read(reference::gelu_tanh(gate) * up);
        assert!(max_diff(&fused, &want) < 1e-4, "gelu·up: {}", max_diff(&fused, &want));
    }
}
