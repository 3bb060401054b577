//! The affine kernels as Burn backend operations (cubecl backends): grids, reads declared, launches.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, backend_extension};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::gemm::{self as affine_gemm, Epilogue};
use crate::launch::{bytes_of, chunk_words_of, declare_reads_of, empty_output, grid};
use crate::scales::ScaleLayout;
use crate::tuning::ProductKernel;

use super::kernels::*;

/// The fused kernels as Burn backend operations (cubecl backends only).
#[backend_extension(Cube)]
pub trait AffineKernels: Backend {
    /// `x · Wᵀ` for a packed `W` of `bits`-bit codes: codes `[rows, k·bits/32]`, the scale words
    /// of `layout` ([`ScaleLayout`]; both matrices alike), x `[S, k]` → `[S, rows]`. When `normed`, x is
    /// RMS-normalised first with the weight `[k]` in `aux` and `eps`. When `gated`, the output is
    /// `gelu_tanh(x·Wᵀ) · (x·W_upᵀ)` (otherwise the `*_up` are not read), W_up's rows from
    /// `up_row_offset` of the `*_up` (0: a matrix of its own; a stacked `[gate; up]` passed as
    /// both, with the gate's row count: the product has those rows); when `gated_by_input`,
    /// `gelu_tanh(x·Wᵀ) · aux` (`[S, rows]`). `aux` is not read when neither needs it.
    #[allow(clippy::too_many_arguments)]
    fn affine_matmul(
        codes: IntTensor<Self>,
        scale_bias: IntTensor<Self>,
        codes_up: IntTensor<Self>,
        scale_bias_up: IntTensor<Self>,
        layout: ScaleLayout,
        gated: bool,
        up_row_offset: usize,
        gated_by_input: bool,
        x: FloatTensor<Self>,
        aux: FloatTensor<Self>,
        eps: f32,
        normed: bool,
        cap: Option<f32>,
        group: usize,
        bits: u32,
        kernel: ProductKernel,
        rows_per_group: u32,
    ) -> FloatTensor<Self>;

    /// One token's `x' = (x + RMSNorm(delta)·w_post)·scale` and `RMSNorm(x')·w_pre · Wᵀ` (`norms`
    /// `[w_post ‖ w_pre]`), in one dispatch: returns `(x', product)`, `[1, k]` and `[1, rows]`.
    /// When `gated`, W is a stacked `[gate; up]` and the product `gelu_tanh(gate) · up`, half
    /// its rows.
    #[allow(clippy::too_many_arguments)]
    fn affine_residual_matmul(
        codes: IntTensor<Self>,
        scale_bias: IntTensor<Self>,
        layout: ScaleLayout,
        gated: bool,
        x: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        norms: FloatTensor<Self>,
        eps: f32,
        scale: f32,
        group: usize,
        bits: u32,
        rows_per_group: u32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// One token's `x' = x + RMSNorm(delta)·w_post` and `gelu_tanh(x'·Wᵀ) · m` (Gemma 4's
    /// per-layer-input gate, `m` `[1, rows]`), in one dispatch: returns `(x', product)`, `[1, k]`
    /// and `[1, rows]`, two parts of one allocation (the kernel's one output binding).
    #[allow(clippy::too_many_arguments)]
    fn affine_residual_gated_by(
        codes: IntTensor<Self>,
        scale_bias: IntTensor<Self>,
        layout: ScaleLayout,
        x: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        post_norm: FloatTensor<Self>,
        multiplier: FloatTensor<Self>,
        eps: f32,
        group: usize,
        bits: u32,
        rows_per_group: u32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// Rows `ids` of a packed `W` (rows `first_row..` of a larger table), dequantized, written
    /// into `out` `[n, k]` in its own buffer (contiguous); rows of ids outside `W` are left as
    /// they are. ids `[n]` u32. Returns `out`.
    #[allow(clippy::too_many_arguments)]
    fn affine_rows(
        codes: IntTensor<Self>,
        scale_bias: IntTensor<Self>,
        layout: ScaleLayout,
        ids: IntTensor<Self>,
        out: FloatTensor<Self>,
        first_row: usize,
        group: usize,
        bits: u32,
    ) -> FloatTensor<Self>;
}

impl AffineKernels for CubeBackend {
    fn affine_rows(
        codes: CubeTensor,
        scale_bias: CubeTensor,
        layout: ScaleLayout,
        ids: CubeTensor,
        out: CubeTensor,
        first_row: usize,
        group: usize,
        bits: u32,
    ) -> CubeTensor {
        let per_chunk = (chunk_words_of(bits) * 32 / bits) as usize;
        let n = ids.meta.shape()[0];
        let (rows, k) = (codes.meta.shape()[0], codes.meta.shape()[1] * 32 / bits as usize);
        let client = ids.client.clone();
        debug_assert!(out.is_contiguous() && out.meta.shape().num_elements() == n * k);
        let (grid_x, grid_y) = grid(((n * k / per_chunk) as u32).div_ceil(THREADS));
        // At most the ids' rows (a block of a larger table reads only those it holds).
        let row_bytes = (bytes_of(&codes) + bytes_of(&scale_bias)) / rows.max(1) as u64;
        crate::launch::declare_reads(bytes_of(&ids) + n.min(rows) as u64 * row_bytes);
        affine_rows_kernel::launch(
            &client,
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            into_contiguous(codes).into_buffer_arg(),
            into_contiguous(scale_bias).into_buffer_arg(),
            into_contiguous(ids).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            k as u32,
            first_row as u32,
            rows as u32,
            layout.offset(),
            layout.kind(),
            group as u32,
            bits,
            THREADS,
        );
        out
    }

    fn affine_residual_matmul(
        codes: CubeTensor,
        scale_bias: CubeTensor,
        layout: ScaleLayout,
        gated: bool,
        x: CubeTensor,
        delta: CubeTensor,
        norms: CubeTensor,
        eps: f32,
        scale: f32,
        group: usize,
        bits: u32,
        rows_per_group: u32,
    ) -> (CubeTensor, CubeTensor) {
        let (x, delta) = (into_contiguous(x), into_contiguous(delta));
        let rows = codes.meta.shape()[0] / if gated { 2 } else { 1 };
        let k = x.meta.shape()[1];
        debug_assert_eq!(x.meta.shape()[0], 1, "one token");
        debug_assert_eq!(codes.meta.shape()[1] * 32 / bits as usize, k, "codes and input disagree on k");
        let client = x.client.clone();
        let x_out = empty_output(&x, burn::tensor::Shape::new([1, k]));
        let out = empty_output(&x, burn::tensor::Shape::new([1, rows]));
        let rows_per_group = match rows_per_group {
            0 => crate::tuning::gemv_rows().unwrap_or(DEFAULT_ROWS_PER_GROUP),
            r => r,
        }
        .clamp(1, THREADS);
        let lanes = THREADS / rows_per_group;
        let (grid_x, grid_y) = grid((rows as u32).div_ceil(rows_per_group));
        declare_reads_of(&[&codes, &scale_bias, &x, &delta, &norms]);
        affine_residual_matmul_kernel::launch(
            &client,
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            into_contiguous(codes).into_buffer_arg(),
            into_contiguous(scale_bias).into_buffer_arg(),
            x.into_buffer_arg(),
            delta.into_buffer_arg(),
            into_contiguous(norms).into_buffer_arg(),
            x_out.clone().into_buffer_arg(),
            out.clone().into_buffer_arg(),
            rows as u32,
            k as u32,
            eps,
            scale,
            layout.offset(),
            layout.kind(),
            gated,
            group as u32,
            bits,
            THREADS,
            THREADS.trailing_zeros(),
            lanes,
            lanes.trailing_zeros(),
        );
        (x_out, out)
    }

    fn affine_residual_gated_by(
        codes: CubeTensor,
        scale_bias: CubeTensor,
        layout: ScaleLayout,
        x: CubeTensor,
        delta: CubeTensor,
        post_norm: CubeTensor,
        multiplier: CubeTensor,
        eps: f32,
        group: usize,
        bits: u32,
        rows_per_group: u32,
    ) -> (CubeTensor, CubeTensor) {
        let (x, delta, multiplier) = (into_contiguous(x), into_contiguous(delta), into_contiguous(multiplier));
        let rows = codes.meta.shape()[0];
        let k = x.meta.shape()[1];
        debug_assert_eq!(x.meta.shape()[0], 1, "one token");
        debug_assert_eq!(codes.meta.shape()[1] * 32 / bits as usize, k, "codes and input disagree on k");
        debug_assert_eq!(multiplier.meta.shape().num_elements(), rows, "one multiplier a row");
        let client = x.client.clone();
        // x' first, the product from the next offset a binding may start at.
        let align = (client.properties().memory.alignment as usize).max(size_of::<f32>());
        let product_at = (k * size_of::<f32>()).next_multiple_of(align) / size_of::<f32>();
        let whole = client.empty((product_at + rows) * size_of::<f32>());
        let part = |handle, columns| {
            CubeTensor::new_contiguous(
                client.clone(),
                x.device.clone(),
                burn::tensor::Shape::new([1, columns]),
                handle,
                burn::tensor::DType::F32,
            )
        };
        let updated = part(whole.clone().offset_end(((product_at + rows - k) * size_of::<f32>()) as u64), k);
        let product = part(whole.clone().offset_start((product_at * size_of::<f32>()) as u64), rows);
        let out = part(whole, product_at + rows);
        let rows_per_group = match rows_per_group {
            0 => crate::tuning::gemv_rows().unwrap_or(DEFAULT_ROWS_PER_GROUP),
            r => r,
        }
        .clamp(1, THREADS);
        let lanes = THREADS / rows_per_group;
        let (grid_x, grid_y) = grid((rows as u32).div_ceil(rows_per_group));
        declare_reads_of(&[&codes, &scale_bias, &x, &delta, &post_norm, &multiplier]);
        affine_residual_gated_by_kernel::launch(
            &client,
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            into_contiguous(codes).into_buffer_arg(),
            into_contiguous(scale_bias).into_buffer_arg(),
            x.into_buffer_arg(),
            delta.into_buffer_arg(),
            into_contiguous(post_norm).into_buffer_arg(),
            multiplier.into_buffer_arg(),
            out.into_buffer_arg(),
            rows as u32,
            k as u32,
            product_at as u32,
            eps,
            layout.offset(),
            layout.kind(),
            group as u32,
            bits,
            THREADS,
            THREADS.trailing_zeros(),
            lanes,
            lanes.trailing_zeros(),
        );
        (updated, product)
    }

    fn affine_matmul(
        codes: CubeTensor,
        scale_bias: CubeTensor,
        codes_up: CubeTensor,
        scale_bias_up: CubeTensor,
        layout: ScaleLayout,
        gated: bool,
        up_row_offset: usize,
        gated_by_input: bool,
        x: CubeTensor,
        aux: CubeTensor,
        eps: f32,
        normed: bool,
        cap: Option<f32>,
        group: usize,
        bits: u32,
        kernel: ProductKernel,
        rows_per_group: u32,
    ) -> CubeTensor {
        let tiled = match kernel {
            ProductKernel::Auto => {
                x.meta.shape()[0] >= affine_gemm::MIN_TOKENS
                    && crate::tuning::prefill_kernel() != Some(ProductKernel::TokenTiles)
            }
            ProductKernel::TokenTiles => false,
            ProductKernel::Tiled => true,
        };
        if tiled {
            let epilogue = Epilogue { normed, gated, up_row_offset, gated_by_input, softcap: cap, eps };
            let scales = (scale_bias, scale_bias_up, layout);
            return affine_gemm::launch(codes, codes_up, scales, x, aux, epilogue, group, bits);
        }
        let x = into_contiguous(x);
        let (rows, words) = (codes.meta.shape()[0] - up_row_offset, codes.meta.shape()[1]);
        let (tokens, k) = (x.meta.shape()[0], x.meta.shape()[1]);
        debug_assert_eq!(words * 32 / bits as usize, k, "codes and input disagree on k");
        let client = x.client.clone();
        let out = empty_output(&x, burn::tensor::Shape::new([tokens, rows]));
        // A single token needs no token tile: a smaller kernel with fewer registers.
        let tile = if tokens == 1 { 1 } else { TOKEN_TILE };
        // Rows a block multiplies: its threads split in as many groups of lanes, each at least
        // the tile (the lanes that write a row's tokens).
        let rows_per_group = match rows_per_group {
            0 => crate::tuning::gemv_rows().unwrap_or(DEFAULT_ROWS_PER_GROUP),
            r => r,
        }
        .clamp(1, THREADS / tile);
        let lanes = THREADS / rows_per_group;
        let (grid_x, grid_y) = grid((rows as u32).div_ceil(rows_per_group));
        let tiles = (tokens as u32).div_ceil(TOKEN_TILE).max(1);
        let tiles = if tokens == 1 { 1 } else { tiles };
        let mut inputs = vec![&codes, &scale_bias, &x];
        if gated && up_row_offset == 0 {
            inputs.extend([&codes_up, &scale_bias_up]);
        }
        if normed || gated_by_input {
            inputs.push(&aux);
        }
        declare_reads_of(&inputs);
        affine_matmul_kernel::launch(
            &client,
            CubeCount::Static(grid_x, grid_y, tiles),
            CubeDim::new_1d(THREADS),
            into_contiguous(codes).into_buffer_arg(),
            into_contiguous(scale_bias).into_buffer_arg(),
            into_contiguous(codes_up).into_buffer_arg(),
            into_contiguous(scale_bias_up).into_buffer_arg(),
            x.into_buffer_arg(),
            into_contiguous(aux).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            rows as u32,
            up_row_offset as u32,
            k as u32,
            tokens as u32,
            eps,
            cap.unwrap_or(1.0),
            layout.offset(),
            layout.kind(),
            normed,
            gated,
            gated_by_input,
            cap.is_some(),
            group as u32,
            bits,
            THREADS,
            lanes,
            lanes.trailing_zeros(),
            tile,
        );
        out
    }
}
