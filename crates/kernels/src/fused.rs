//! Element-wise chains of the decoder fused into single kernels, to cut GPU dispatches per token
//! (what bounds decode speed of a small model as much as memory bandwidth):
//!
//! - RMSNorm: `x · (mean(x²) + eps)^-½ (· w)`, one thread block per row: 1 dispatch instead of 7.
//! - `(residual + RMSNorm(x)) · scale` (the sublayers' outputs; `scale` is Gemma 4's layer
//!   scalar on the last one): 1 dispatch instead of 2 or 3.
//! - Attention weights: `softmax(softcap(scores · scale) + mask)`, one block per row: 1 dispatch
//!   instead of 7 (9 with the softcap).
//! - `gelu_tanh(gate) · up` (the MLP and the per-layer-input gate): 1 dispatch instead of 10.
//! - New keys and values into the KV cache: norm (+ RoPE for keys) written straight into the
//!   cache's buffer, at ring slots: 1 dispatch instead of 8 (keys) or 2 (Gemma 4's normed values).
//!   Prefill queries go through the same kernel into a fresh `[heads, S, d]`.
//!
//! On the cubecl backends the kernels run; elsewhere (the CPU backend) the same maths runs as
//! tensor operations ([`reference`]), which the tests also use as the oracle.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::chunk_table::ChunkTable;
use crate::launch::{block_reduce, bounded_tanh, declare_reads_of, empty_output, grid, has_fused_kernels};

/// Threads per block (a power of two: RMSNorm sums in a tree).
const THREADS: u32 = 64;

/// `(mean(x²) + eps)^-½` of row `row` (`size` values from `base`), in every thread of the block.
#[cube]
pub(crate) fn inverse_rms(
    x: &[f32],
    base: u32,
    size: u32,
    in_range: bool,
    eps: f32,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) -> f32 {
    let mut sum = 0.0;
    if in_range {
        let mut i = UNIT_POS_X;
        while i < size {
            let v = x[(base + i) as usize];
            sum += v * v;
            i += threads;
        }
    }
    let total = block_reduce(sum, false, threads, levels);
    1.0 / f32::sqrt(total / f32::cast_from(size) + eps)
}

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
    let inv_rms = inverse_rms(x, base, size, row < rows, eps, threads, levels);
    if row < rows {
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

/// `out = (residual + RMSNorm(x)·w) · scale`, one block per row.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn add_rms_norm_kernel(
    residual: &[f32],
    x: &[f32],
    weight: &[f32],
    out: &mut [f32],
    rows: u32,
    size: u32,
    eps: f32,
    scale: f32,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) {
    let row = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let base = row * size;
    let inv_rms = inverse_rms(x, base, size, row < rows, eps, threads, levels);
    if row < rows {
        let mut i = UNIT_POS_X;
        while i < size {
            let at = (base + i) as usize;
            out[at] = (residual[at] + x[at] * inv_rms * weight[i as usize]) * scale;
            i += threads;
        }
    }
}

/// Attention weights of one row of scores (`n` keys): `softmax(softcap(s · scale) + mask)`.
/// Row r uses mask row `r % mask_rows` (the scores are `[.., S, n]`, the mask `[S, n]`). Each
/// thread only ever touches its own elements of `out`, so the three passes need no barrier
/// between global writes.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_softmax_kernel(
    scores: &[f32],
    mask: &[f32],
    out: &mut [f32],
    rows: u32,
    n: u32,
    mask_rows: u32,
    scale: f32,
    cap: f32,
    #[comptime] softcap: bool,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) {
    let row = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let in_range = row < rows;
    let base = row * n;
    let mask_base = (row % mask_rows) * n;
    let mut local_max = f32::min_value();
    if in_range {
        let mut i = UNIT_POS_X;
        while i < n {
            let mut v = scores[(base + i) as usize] * scale;
            if softcap {
                v = bounded_tanh(v / cap) * cap;
            }
            v += mask[(mask_base + i) as usize];
            out[(base + i) as usize] = v;
            local_max = f32::max(local_max, v);
            i += threads;
        }
    }
    let row_max = block_reduce(local_max, true, threads, levels);
    let mut local_sum = 0.0;
    if in_range {
        let mut i = UNIT_POS_X;
        while i < n {
            let e = f32::exp(out[(base + i) as usize] - row_max);
            out[(base + i) as usize] = e;
            local_sum += e;
            i += threads;
        }
    }
    let total = block_reduce(local_sum, false, threads, levels);
    if in_range {
        let mut i = UNIT_POS_X;
        while i < n {
            let e = out[(base + i) as usize];
            out[(base + i) as usize] = e / total;
            i += threads;
        }
    }
}

/// Rows are (token, head) pairs; row (t, h) is `x[t·x_stride + x_offset + h·d ..][..d]` (the
/// heads of one projection, possibly a column block of q, k and v computed together) and goes to
/// `cache[h, (start + t) % capacity, :]` after an optional RMSNorm (`norm`, times `weight` when
/// `scaled`) and RoPE (`rope`). `table` is the chunk's [`crate::ChunkTable`] layout `[S + 1, 2d]`;
/// `start` is 0, or its last row's first value when `at_positions` (read on the device, so that a
/// recorded step picks up the next position).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn write_cache_kernel(
    x: &[f32],
    weight: &[f32],
    table: &[f32],
    cache: &mut [f32],
    rows: u32,
    heads: u32,
    size: u32,
    x_stride: u32,
    x_offset: u32,
    capacity: u32,
    eps: f32,
    #[comptime] at_positions: bool,
    #[comptime] norm: bool,
    #[comptime] scaled: bool,
    #[comptime] rope: bool,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) {
    let row = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let base = (row / heads) * x_stride + x_offset + (row % heads) * size;
    let mut inv_rms = f32::new(1.0);
    if norm {
        inv_rms = inverse_rms(x, base, size, row < rows, eps, threads, levels);
    }
    let mut start = 0u32;
    if at_positions {
        start = u32::cast_from(table[((rows / heads) * 2 * size) as usize]);
    }
    if row < rows {
        let token = row / heads;
        let destination = (row % heads) * capacity * size + ((start + token) % capacity) * size;
        // Row `token` of the table `[S, 2·size]`: cos, then sin.
        let (half, row_base) = (size / 2, token * 2 * size);
        let mut i = UNIT_POS_X;
        while i < size {
            let mut value = x[(base + i) as usize] * inv_rms;
            if scaled {
                value *= weight[i as usize];
            }
            if rope {
                let partner = (i + half) % size;
                let mut rotated = x[(base + partner) as usize] * inv_rms;
                if scaled {
                    rotated *= weight[partner as usize];
                }
                if i < half {
                    rotated = -rotated;
                }
                value = value * table[(row_base + i) as usize] + rotated * table[(row_base + size + i) as usize];
            }
            cache[(destination + i) as usize] = value;
            i += threads;
        }
    }
}

/// A chunk's keys and values into their caches in one dispatch: rows `0..rows` are the keys'
/// (token, head) pairs (RMSNorm with `weight`, then RoPE), rows `rows..2·rows` the values' (RMSNorm
/// without a weight when `v_norm`, else as they are), each to slot `(start + t) % capacity` with
/// `start` read from the chunk table, as [`write_cache_kernel`] does for one of them.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn write_keys_values_kernel(
    xk: &[f32],
    xv: &[f32],
    weight: &[f32],
    table: &[f32],
    keys: &mut [f32],
    values: &mut [f32],
    rows: u32,
    heads: u32,
    size: u32,
    k_stride: u32,
    k_offset: u32,
    v_stride: u32,
    v_offset: u32,
    capacity: u32,
    eps: f32,
    #[comptime] v_norm: bool,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) {
    let row = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let is_value = row >= rows;
    let mut local = row;
    if is_value {
        local = row - rows;
    }
    let (token, head) = (local / heads, local % heads);
    let in_range = row < 2 * rows;
    let base_k = token * k_stride + k_offset + head * size;
    let base_v = token * v_stride + v_offset + head * size;
    // Every thread takes part in both reductions (they synchronise the block).
    let inv_k = inverse_rms(xk, base_k, size, in_range && !is_value, eps, threads, levels);
    let mut inv_v = f32::new(1.0);
    if v_norm {
        inv_v = inverse_rms(xv, base_v, size, in_range && is_value, eps, threads, levels);
    }
    let start = u32::cast_from(table[((rows / heads) * 2 * size) as usize]);
    if in_range {
        let destination = head * capacity * size + ((start + token) % capacity) * size;
        let (half, row_base) = (size / 2, token * 2 * size);
        let mut i = UNIT_POS_X;
        while i < size {
            if is_value {
                values[(destination + i) as usize] = xv[(base_v + i) as usize] * inv_v;
            } else {
                let value = x_normed(xk, weight, base_k, i, inv_k);
                let partner = (i + half) % size;
                let mut rotated = x_normed(xk, weight, base_k, partner, inv_k);
                if i < half {
                    rotated = -rotated;
                }
                keys[(destination + i) as usize] =
                    value * table[(row_base + i) as usize] + rotated * table[(row_base + size + i) as usize];
            }
            i += threads;
        }
    }
}

/// Value `i` of the row at `base`, times its inverse RMS and the norm's weight.
#[cube]
fn x_normed(x: &[f32], weight: &[f32], base: u32, i: u32, inv_rms: f32) -> f32 {
    x[(base + i) as usize] * inv_rms * weight[i as usize]
}

#[cube(launch)]
fn gelu_tanh_mul_kernel(gate: &[f32], up: &[f32], out: &mut [f32], n: u32, #[comptime] threads: u32) {
    let i = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    if i < n {
        let g = gate[i as usize];
        let tanh = bounded_tanh((g + 0.044_715 * g * g * g) * 0.797_884_6);
        out[i as usize] = 0.5 * g * (1.0 + tanh) * up[i as usize];
    }
}

#[cube(launch)]
fn copy_kernel(src: &[f32], dst: &mut [f32], n: u32, #[comptime] threads: u32) {
    let i = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    if i < n {
        dst[i as usize] = src[i as usize];
    }
}

#[backend_extension(Cube)]
pub trait FusedOps: Backend {
    /// `src` copied into `dst`'s own buffer (same number of elements; `dst` contiguous), whoever
    /// else holds it; returns `dst`.
    fn fused_copy_into(dst: FloatTensor<Self>, src: FloatTensor<Self>) -> FloatTensor<Self>;
    /// RMSNorm over the last dimension of `x` viewed as `[rows, size]`; `weight` `[size]` is
    /// applied when `scaled`.
    fn fused_rms_norm(x: FloatTensor<Self>, weight: FloatTensor<Self>, eps: f32, scaled: bool) -> FloatTensor<Self>;
    /// `gelu_tanh(gate) · up`, same shapes.
    fn fused_gelu_tanh_mul(gate: FloatTensor<Self>, up: FloatTensor<Self>) -> FloatTensor<Self>;
    /// Writes the heads in columns `column..column + heads·d` of `x` `[S, total]` into `cache`
    /// `[heads, capacity, d]` at slots `(start + t) % capacity` (`start`: the table's, when
    /// `at_positions`; else 0), after RMSNorm (`norm`; times `weight` when `scaled`) and RoPE
    /// (`rope`, with the chunk's table `[S + 1, 2d]`). Returns the cache (written in place when
    /// nothing else holds it). An unread `weight` may be any tensor.
    #[allow(clippy::too_many_arguments)]
    fn fused_write_cache(
        cache: FloatTensor<Self>,
        x: FloatTensor<Self>,
        column: usize,
        weight: FloatTensor<Self>,
        table: FloatTensor<Self>,
        at_positions: bool,
        eps: f32,
        norm: bool,
        scaled: bool,
        rope: bool,
    ) -> FloatTensor<Self>;
    /// Keys (columns `k_column..` of `xk` `[S, ·]`, RMSNorm with `weight`, RoPE) and values
    /// (columns `v_column..` of `xv`, RMSNorm without a weight when `v_norm`) into `keys` and
    /// `values` `[heads, capacity, d]` at the table's slots. Returns both caches (written in place
    /// when nothing else holds them).
    #[allow(clippy::too_many_arguments)]
    fn fused_write_keys_values(
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        xk: FloatTensor<Self>,
        k_column: usize,
        xv: FloatTensor<Self>,
        v_column: usize,
        weight: FloatTensor<Self>,
        table: FloatTensor<Self>,
        eps: f32,
        v_norm: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// `(residual + RMSNorm(x)·w) · scale` over the last dimension.
    fn fused_add_rms_norm(
        residual: FloatTensor<Self>,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        eps: f32,
        scale: f32,
    ) -> FloatTensor<Self>;
    /// `softmax(softcap(scores · scale) + mask)` over the last dimension of `scores` `[.., S, n]`,
    /// with `mask` `[S, n]`; `cap` ≤ 0 means no softcap.
    fn fused_attention_softmax(
        scores: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        scale: f32,
        cap: f32,
    ) -> FloatTensor<Self>;
}

/// A tensor's rows (all but its last dimension) and row size, and a grid of one block per row.
fn one_block_per_row(x: &CubeTensor) -> (usize, usize, CubeCount) {
    let size = *x.meta.shape().last().unwrap_or(&1);
    let rows = x.meta.shape().num_elements() / size.max(1);
    let (grid_x, grid_y) = grid(rows as u32);
    (rows, size, CubeCount::Static(grid_x, grid_y, 1))
}

/// An output tensor shaped like `like`.
fn empty_like(like: &CubeTensor) -> CubeTensor {
    empty_output(like, like.meta.shape().clone())
}

impl FusedOps for CubeBackend {
    fn fused_copy_into(dst: CubeTensor, src: CubeTensor) -> CubeTensor {
        let src = into_contiguous(src);
        let n = src.meta.shape().num_elements();
        let (grid_x, grid_y) = grid((n as u32).div_ceil(THREADS));
        declare_reads_of(&[&src]);
        copy_kernel::launch(
            &src.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            src.into_buffer_arg(),
            dst.clone().into_buffer_arg(),
            n as u32,
            THREADS,
        );
        dst
    }

    fn fused_rms_norm(x: CubeTensor, weight: CubeTensor, eps: f32, scaled: bool) -> CubeTensor {
        let x = into_contiguous(x);
        let (rows, size, blocks) = one_block_per_row(&x);
        let out = empty_like(&x);
        declare_reads_of(&[&x, &weight]);
        rms_norm_kernel::launch(
            &x.client.clone(),
            blocks,
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

    fn fused_write_cache(
        cache: CubeTensor,
        x: CubeTensor,
        column: usize,
        weight: CubeTensor,
        table: CubeTensor,
        at_positions: bool,
        eps: f32,
        norm: bool,
        scaled: bool,
        rope: bool,
    ) -> CubeTensor {
        // Like Burn's slice_assign: write in place when this is the only reference.
        let cache = if cache.can_mut() && cache.is_contiguous() { cache } else { into_contiguous(cache.copy()) };
        let x = into_contiguous(x);
        let (tokens, total) = (x.meta.shape()[0], x.meta.shape()[1]);
        let (heads, size, capacity) = (cache.meta.shape()[0], cache.meta.shape()[2], cache.meta.shape()[1]);
        let rows = tokens * heads;
        let (grid_x, grid_y) = grid(rows as u32);
        declare_reads_of(&[&x, &weight, &table]);
        write_cache_kernel::launch(
            &x.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            x.into_buffer_arg(),
            into_contiguous(weight).into_buffer_arg(),
            into_contiguous(table).into_buffer_arg(),
            cache.clone().into_buffer_arg(),
            rows as u32,
            heads as u32,
            size as u32,
            total as u32,
            column as u32,
            capacity as u32,
            eps,
            at_positions,
            norm,
            scaled,
            rope,
            THREADS,
            THREADS.trailing_zeros(),
        );
        cache
    }

    fn fused_write_keys_values(
        keys: CubeTensor,
        values: CubeTensor,
        xk: CubeTensor,
        k_column: usize,
        xv: CubeTensor,
        v_column: usize,
        weight: CubeTensor,
        table: CubeTensor,
        eps: f32,
        v_norm: bool,
    ) -> (CubeTensor, CubeTensor) {
        let writable = |cache: CubeTensor| {
            if cache.can_mut() && cache.is_contiguous() { cache } else { into_contiguous(cache.copy()) }
        };
        let (keys, values) = (writable(keys), writable(values));
        let (xk, xv) = (into_contiguous(xk), into_contiguous(xv));
        let tokens = xk.meta.shape()[0];
        let (k_stride, v_stride) = (xk.meta.shape()[1], xv.meta.shape()[1]);
        let (heads, size, capacity) = (keys.meta.shape()[0], keys.meta.shape()[2], keys.meta.shape()[1]);
        debug_assert_eq!(keys.meta.shape(), values.meta.shape(), "keys and values caches alike");
        let rows = tokens * heads;
        let (grid_x, grid_y) = grid(2 * rows as u32);
        declare_reads_of(&[&xk, &xv, &weight, &table]);
        write_keys_values_kernel::launch(
            &xk.client.clone(),
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            xk.into_buffer_arg(),
            xv.into_buffer_arg(),
            into_contiguous(weight).into_buffer_arg(),
            into_contiguous(table).into_buffer_arg(),
            keys.clone().into_buffer_arg(),
            values.clone().into_buffer_arg(),
            rows as u32,
            heads as u32,
            size as u32,
            k_stride as u32,
            k_column as u32,
            v_stride as u32,
            v_column as u32,
            capacity as u32,
            eps,
            v_norm,
            THREADS,
            THREADS.trailing_zeros(),
        );
        (keys, values)
    }

    fn fused_add_rms_norm(residual: CubeTensor, x: CubeTensor, weight: CubeTensor, eps: f32, scale: f32) -> CubeTensor {
        let x = into_contiguous(x);
        let (rows, size, blocks) = one_block_per_row(&x);
        let out = empty_like(&x);
        declare_reads_of(&[&residual, &x, &weight]);
        add_rms_norm_kernel::launch(
            &x.client.clone(),
            blocks,
            CubeDim::new_1d(THREADS),
            into_contiguous(residual).into_buffer_arg(),
            x.into_buffer_arg(),
            into_contiguous(weight).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            rows as u32,
            size as u32,
            eps,
            scale,
            THREADS,
            THREADS.trailing_zeros(),
        );
        out
    }

    fn fused_attention_softmax(scores: CubeTensor, mask: CubeTensor, scale: f32, cap: f32) -> CubeTensor {
        let scores = into_contiguous(scores);
        let (rows, n, blocks) = one_block_per_row(&scores);
        let mask_rows = mask.meta.shape()[0];
        let out = empty_like(&scores);
        declare_reads_of(&[&scores, &mask]);
        attention_softmax_kernel::launch(
            &scores.client.clone(),
            blocks,
            CubeDim::new_1d(THREADS),
            scores.into_buffer_arg(),
            into_contiguous(mask).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            rows as u32,
            n as u32,
            mask_rows as u32,
            scale,
            cap,
            cap > 0.0,
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
        declare_reads_of(&[&gate, &up]);
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

/// What happens to new keys or values on their way into the cache.
pub enum CacheInput<'a> {
    /// Written as they are (Gemma 3's values).
    Plain,
    /// RMSNorm without a weight (Gemma 4's values).
    Normed,
    /// RMSNorm with this weight, then RoPE with the chunk table's rotations.
    NormedRotated { weight: &'a Tensor<1> },
}

/// Where a chunk's rows go in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slots {
    /// Token `t` to slot `t` (a fresh `[heads, S, d]`).
    FromZero,
    /// Token `t` to slot `(start + t) % capacity`, `start` read from the chunk table on the
    /// device.
    AtPositions,
}

/// The heads of one projection inside a projection's output `x` `[S, total]`: columns
/// `column..column + heads·head_dim` (q, k and v may come out of one packed matmul, side by side).
pub struct HeadColumns {
    pub x: Tensor<2>,
    pub column: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl HeadColumns {
    /// All of `x` `[S, heads·head_dim]`.
    pub fn whole(x: Tensor<2>, heads: usize, head_dim: usize) -> Self {
        HeadColumns { x, column: 0, heads, head_dim }
    }

    /// As a `[S, heads, d]` tensor (a column slice: the tensor-op path).
    pub fn to_heads(&self) -> Tensor<3> {
        let s = self.x.dims()[0];
        let columns = self.column..self.column + self.heads * self.head_dim;
        self.x.clone().slice([0..s, columns]).reshape([s, self.heads, self.head_dim])
    }
}

/// `cache[h, slot(t), :] = f(x[t, h, :])` for the heads `x` and `cache` `[heads, capacity, d]`,
/// with `f` as `input` says and the slots as `slots` says; returns the cache. One dispatch,
/// writing into the cache's own buffer when the caller passes its only reference, and reading the
/// heads where they lie in the projection's output.
pub fn write_cache(
    cache: Tensor<3>,
    x: HeadColumns,
    input: CacheInput,
    table: &ChunkTable,
    slots: Slots,
    eps: f32,
) -> Tensor<3> {
    let device = x.x.device();
    if !has_fused_kernels(&device) {
        let x = x.to_heads();
        let [s, heads, d] = x.dims();
        let capacity = cache.dims()[1];
        let x = match input {
            CacheInput::Plain => x,
            CacheInput::Normed => reference::rms_norm_unscaled(x, eps),
            CacheInput::NormedRotated { weight } => {
                let (cos, sin) = reference::split_cos_sin(&table.rotations());
                reference::rope(reference::rms_norm(x, weight, eps), &cos, &sin)
            }
        }
        .swap_dims(0, 1);
        let start = match slots {
            Slots::FromZero => 0,
            Slots::AtPositions => table.start(),
        };
        // The chunk may wrap around the end of a ring: at most two pieces.
        let mut cache = cache;
        let mut written = 0;
        while written < s {
            let slot = (start + written) % capacity;
            let count = (s - written).min(capacity - slot);
            let piece = x.clone().slice([0..heads, written..written + count, 0..d]);
            cache = cache.slice_assign([0..heads, slot..slot + count, 0..d], piece);
            written += count;
        }
        return cache;
    }
    let HeadColumns { x, column, .. } = x;
    // An unread weight binds `x` again (no allocation, no dispatch).
    let flat = || x.clone().reshape([x.shape().num_elements()]);
    let (weight, norm, scaled, rope) = match input {
        CacheInput::Plain => (flat(), false, false, false),
        CacheInput::Normed => (flat(), true, false, false),
        CacheInput::NormedRotated { weight } => (weight.clone(), true, true, true),
    };
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_write_cache(
        cache.into_dispatch(),
        x.into_dispatch(),
        column,
        weight.into_dispatch(),
        table.table.clone().into_dispatch(),
        slots == Slots::AtPositions,
        eps,
        norm,
        scaled,
        rope,
    ))
}

/// A chunk's keys and values into their caches `[heads, capacity, d]` at the table's slots
/// (`(start + t) % capacity`): the keys RMS-normed with `k_norm` and rotated, the values normed
/// without a weight when `v_normed` (Gemma 4) or as they are (Gemma 3). One dispatch on the cubecl
/// backends, two [`write_cache`]s elsewhere. Returns (keys, values), written into the caches' own
/// buffers when the caller passes their only references.
#[allow(clippy::too_many_arguments)]
pub fn write_keys_values(
    keys: Tensor<3>,
    values: Tensor<3>,
    k: HeadColumns,
    k_norm: &Tensor<1>,
    v: HeadColumns,
    v_normed: bool,
    table: &ChunkTable,
    eps: f32,
) -> (Tensor<3>, Tensor<3>) {
    let v_input = if v_normed { CacheInput::Normed } else { CacheInput::Plain };
    if !has_fused_kernels(&k.x.device()) {
        let keys = write_cache(keys, k, CacheInput::NormedRotated { weight: k_norm }, table, Slots::AtPositions, eps);
        let values = write_cache(values, v, v_input, table, Slots::AtPositions, eps);
        return (keys, values);
    }
    let (keys, values) = <Dispatch as FusedOps>::fused_write_keys_values(
        keys.into_dispatch(),
        values.into_dispatch(),
        k.x.into_dispatch(),
        k.column,
        v.x.into_dispatch(),
        v.column,
        k_norm.clone().into_dispatch(),
        table.table.clone().into_dispatch(),
        eps,
        v_normed,
    );
    (Tensor::from_dispatch(keys), Tensor::from_dispatch(values))
}

/// Copies `src` into `dst` (same shape). On the cubecl backends the values go into `dst`'s own
/// buffer, whoever else holds it (the input of a recorded step); elsewhere `dst` becomes `src`.
pub fn copy_into<const D: usize>(dst: &mut Tensor<D>, src: Tensor<D>) {
    assert_eq!(dst.shape(), src.shape(), "copy_into: shapes differ");
    if !has_fused_kernels(&src.device()) {
        *dst = src;
        return;
    }
    let target = dst.clone().into_dispatch();
    *dst = Tensor::from_dispatch(<Dispatch as FusedOps>::fused_copy_into(target, src.into_dispatch()));
}

/// `(residual + RMSNorm(x)·w) · scale`: a sublayer's output joining the residual stream.
pub fn add_rms_norm(residual: Tensor<2>, x: Tensor<2>, weight: &Tensor<1>, eps: f32, scale: f32) -> Tensor<2> {
    if !has_fused_kernels(&x.device()) {
        let sum = residual + reference::rms_norm(x, weight, eps);
        return if scale == 1.0 { sum } else { sum.mul_scalar(scale) };
    }
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_add_rms_norm(
        residual.into_dispatch(),
        x.into_dispatch(),
        weight.clone().into_dispatch(),
        eps,
        scale,
    ))
}

/// Attention weights from raw scores `[Hkv, group, S, n]`: `softmax(softcap(s · scale) + mask)`
/// over the keys, with `mask` `[S, n]` (0 or a large negative number).
pub fn attention_softmax(scores: Tensor<4>, mask: Tensor<2>, scale: f32, softcap: Option<f32>) -> Tensor<4> {
    if !has_fused_kernels(&scores.device()) {
        return reference::attention_softmax(scores, mask, scale, softcap);
    }
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_attention_softmax(
        scores.into_dispatch(),
        mask.into_dispatch(),
        scale,
        softcap.unwrap_or(0.0),
    ))
}

/// `cap · tanh(x / cap)`, Gemma's logit softcap, in tensor ops: for the dense (f32) LM head, where
/// no fused product applies. The input is clamped to ±15 first, where tanh is ±1 in f32 anyway:
/// some GPU implementations compute tanh from exponentials and return NaN for large inputs.
pub fn softcap<const D: usize>(x: Tensor<D>, cap: f32) -> Tensor<D> {
    x.div_scalar(cap).clamp(-15.0, 15.0).tanh().mul_scalar(cap)
}

/// The same maths as tensor operations: the CPU backend's path and the kernels' test oracle.
pub mod reference {
    use burn::tensor::Tensor;
    use burn::tensor::activation::softmax;

    /// The cos and sin tables `[S, 1, d]` of a table `[S, 2·d]` (each row's cos, then sin).
    pub fn split_cos_sin(cos_sin: &Tensor<2>) -> (Tensor<3>, Tensor<3>) {
        let [s, width] = cos_sin.dims();
        let d = width / 2;
        let half = |range| cos_sin.clone().slice([0..s, range]).reshape([s, 1, d]);
        (half(0..d), half(d..width))
    }

    /// `x·cos + rotate_half(x)·sin`, x `[S, heads, d]`, tables `[S, 1, d]`.
    pub fn rope(x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<3> {
        let [s, heads, d] = x.dims();
        let first = x.clone().slice([0..s, 0..heads, 0..d / 2]);
        let second = x.clone().slice([0..s, 0..heads, d / 2..d]);
        let rotated = Tensor::cat(vec![second.neg(), first], 2);
        x * cos.clone() + rotated * sin.clone()
    }

    pub fn attention_softmax(scores: Tensor<4>, mask: Tensor<2>, scale: f32, softcap: Option<f32>) -> Tensor<4> {
        let [_, _, s, n] = scores.dims();
        let scores = scores.mul_scalar(scale);
        let scores = match softcap {
            Some(cap) => bounded_tanh(scores.div_scalar(cap)).mul_scalar(cap),
            None => scores,
        };
        softmax(scores + mask.reshape([1, 1, s, n]), 3)
    }

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
    use burn::tensor::{Device, TensorData};

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) / 150.0).collect()
    }

    fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        pollster::block_on(t.into_data_async()).expect("readback").try_to_vec().expect("f32")
    }

    fn inv_freq(d: usize) -> Vec<f32> {
        (0..d / 2).map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / d as f32)).collect()
    }

    /// A recorded step reads its inputs from the buffers it was recorded with: `copy_into` and
    /// `overwrite` change the values every holder of the buffer sees.
    #[test]
    fn copies_and_rewrites_land_in_the_shared_buffer() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        let mut input = Tensor::<2>::zeros([2, 300], &gpu);
        let recorded = input.clone();
        let fresh = Tensor::<2>::from_data(TensorData::new(values(600, 1), [2, 300]), &gpu);
        copy_into(&mut input, fresh.clone());
        assert_eq!(read(recorded.clone()), read(fresh));
        crate::overwrite(&mut input, values(600, 2));
        assert_eq!(read(recorded), values(600, 2));
        // On the CPU the tensor itself takes the values.
        let mut cpu = Tensor::<2>::zeros([2, 3], &Device::flex());
        crate::overwrite(&mut cpu, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        copy_into(&mut cpu, Tensor::<2>::ones([2, 3], &Device::flex()));
        assert_eq!(read(cpu), vec![1.0; 6]);
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    /// The kernels against the tensor-op path on the same GPU: norm sizes below, at and above the
    /// block's 64 threads; GELU over ±6.7 (tanh saturates).
    #[test]
    fn fused_kernels_match_the_tensor_operations() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
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

        // Norm + RoPE into a fresh [heads, S, d] (prefill queries at positions 5..8): 3 tokens × 2
        // heads, head sizes below and above the block.
        for d in [8, 256] {
            let (s, heads) = (3, 2);
            let x = Tensor::<3>::from_data(TensorData::new(values(s * heads * d, d), [s, heads, d]), &gpu);
            let w = Tensor::<1>::from_data(TensorData::new(values(d, 5), [d]), &gpu);
            let table = ChunkTable::new(&inv_freq(d), 5, s, 5 + s, &gpu);
            let (cos, sin) = reference::split_cos_sin(&table.rotations());
            let input = CacheInput::NormedRotated { weight: &w };
            let columns = HeadColumns::whole(x.clone().reshape([s, heads * d]), heads, d);
            let fresh = Tensor::empty([heads, s, d], &gpu);
            let fused = read(write_cache(fresh, columns, input, &table, Slots::FromZero, 1e-6));
            let want = read(reference::rope(reference::rms_norm(x, &w, 1e-6), &cos, &sin).swap_dims(0, 1));
            assert!(max_diff(&fused, &want) < 1e-4, "norm+rope d {d}: {}", max_diff(&fused, &want));
        }

        // Keys and values into a ring of 5 slots at positions 4..7 (the kernel reads the start from
        // the table): the chunk wraps to slots 0 and 1. The heads are a column block (from column
        // d) of a wider projection output, as when q, k and v come out of one matmul.
        let (s, heads, d, capacity) = (3, 2, 8, 5);
        let total = (heads + 2) * d;
        let x = Tensor::<2>::from_data(TensorData::new(values(s * total, 6), [s, total]), &gpu);
        let w = Tensor::<1>::from_data(TensorData::new(values(d, 7), [d]), &gpu);
        let table = ChunkTable::new(&inv_freq(d), 4, s, capacity, &gpu);
        let ring =
            || Tensor::<3>::from_data(TensorData::new(values(heads * capacity * d, 8), [heads, capacity, d]), &gpu);
        let cpu = Device::flex();
        let to_cpu = |t: Tensor<3>| Tensor::<3>::from_data(t.into_data(), &cpu);
        let w_cpu = Tensor::<1>::from_data(w.clone().into_data(), &cpu);
        let table_cpu = ChunkTable::new(&inv_freq(d), 4, s, capacity, &cpu);
        let x_cpu = Tensor::<2>::from_data(x.clone().into_data(), &cpu);
        for i in 0..3 {
            let input = |w| match i {
                0 => CacheInput::Plain,
                1 => CacheInput::Normed,
                _ => CacheInput::NormedRotated { weight: w },
            };
            let columns = |x: &Tensor<2>| HeadColumns { x: x.clone(), column: d, heads, head_dim: d };
            let fused = read(write_cache(ring(), columns(&x), input(&w), &table, Slots::AtPositions, 1e-6));
            let cpu_input = input(&w_cpu);
            let want =
                read(write_cache(to_cpu(ring()), columns(&x_cpu), cpu_input, &table_cpu, Slots::AtPositions, 1e-6));
            assert!(max_diff(&fused, &want) < 1e-5, "cache write {i}: {}", max_diff(&fused, &want));
            // Slots 2 and 3 were not written.
            let before = read(ring());
            assert_eq!(fused[2 * d..4 * d], before[2 * d..4 * d], "cache write {i}: untouched slots");
        }

        // Keys and values in one dispatch, from one projection output (k at column d, v after
        // it) and from two: the same caches as two writes on the CPU.
        for v_normed in [false, true] {
            let v_column = (heads + 1) * d;
            let from_one = |x: &Tensor<2>, column| HeadColumns { x: x.clone(), column, heads: 1, head_dim: d };
            let narrow = |x: &Tensor<2>, column| x.clone().slice([0..s, column..column + d]);
            let on_cpu = |keys, values, xk: &Tensor<2>, kc, xv: &Tensor<2>, vc| {
                let (k, v) = (from_one(xk, kc), from_one(xv, vc));
                write_keys_values(keys, values, k, &w_cpu, v, v_normed, &table_cpu, 1e-6)
            };
            let ring1 =
                |seed| Tensor::<3>::from_data(TensorData::new(values(capacity * d, seed), [1, capacity, d]), &gpu);
            let (want_k, want_v) = on_cpu(to_cpu(ring1(10)), to_cpu(ring1(11)), &x_cpu, d, &x_cpu, v_column);
            let (want_k, want_v) = (read(want_k), read(want_v));
            let (k, v) = (from_one(&x, d), from_one(&x, v_column));
            let (got_k, got_v) = write_keys_values(ring1(10), ring1(11), k, &w, v, v_normed, &table, 1e-6);
            assert!(max_diff(&read(got_k), &want_k) < 1e-5, "keys+values {v_normed}: keys");
            assert!(max_diff(&read(got_v), &want_v) < 1e-5, "keys+values {v_normed}: values");
            // Separate projection outputs (k and v `[S, d]` each).
            let (xk, xv) = (narrow(&x, d), narrow(&x, v_column));
            let (k, v) = (from_one(&xk, 0), from_one(&xv, 0));
            let (got_k, got_v) = write_keys_values(ring1(10), ring1(11), k, &w, v, v_normed, &table, 1e-6);
            assert!(max_diff(&read(got_k), &want_k) < 1e-5, "separate keys+values {v_normed}: keys");
            assert!(max_diff(&read(got_v), &want_v) < 1e-5, "separate keys+values {v_normed}: values");
        }

        // The same table rewritten for positions 6..9 moves the writes without a new tensor: the
        // first token lands in slot 1.
        let mut moved = ChunkTable::new(&inv_freq(d), 4, s, capacity, &gpu);
        let held = moved.table.clone();
        moved.rewrite(&inv_freq(d), 6, capacity);
        let columns = HeadColumns { x: x.clone(), column: d, heads, head_dim: d };
        let keys = HeadColumns { x: x_cpu.clone(), column: d, heads, head_dim: d };
        let fused = read(write_cache(ring(), columns, CacheInput::Plain, &moved, Slots::AtPositions, 1e-6));
        let cpu_moved = ChunkTable::new(&inv_freq(d), 6, s, capacity, &cpu);
        let want = read(write_cache(to_cpu(ring()), keys, CacheInput::Plain, &cpu_moved, Slots::AtPositions, 1e-6));
        assert!(max_diff(&fused, &want) < 1e-6, "rewritten table: {}", max_diff(&fused, &want));
        assert_eq!(read(held), read(moved.table.clone()), "rewritten in the buffer others hold");

        // Residual + norm, scaled.
        let (rows, size) = (4, 1536);
        let residual = Tensor::<2>::from_data(TensorData::new(values(rows * size, 8), [rows, size]), &gpu);
        let x = Tensor::<2>::from_data(TensorData::new(values(rows * size, 9), [rows, size]), &gpu);
        let w = Tensor::<1>::from_data(TensorData::new(values(size, 4), [size]), &gpu);
        let fused = read(add_rms_norm(residual.clone(), x.clone(), &w, 1e-6, 0.75));
        let want = read((residual + reference::rms_norm(x, &w, 1e-6)).mul_scalar(0.75));
        assert!(max_diff(&fused, &want) < 1e-4, "add+norm: {}", max_diff(&fused, &want));

        // Attention weights: 2 kv heads × 3 query heads × 5 tokens over 7 and 600 keys, a causal
        // mask, with and without the softcap.
        for n in [7, 600] {
            let (kv, group, s) = (2, 3, 5);
            let scores =
                Tensor::<4>::from_data(TensorData::new(values(kv * group * s * n, n), [kv, group, s, n]), &gpu);
            let mask: Vec<f32> = (0..s * n).map(|i| if i % n > n - s + i / n { -1e30 } else { 0.0 }).collect();
            let mask = Tensor::<2>::from_data(TensorData::new(mask, [s, n]), &gpu);
            for softcap in [None, Some(5.0)] {
                let fused = read(attention_softmax(scores.clone(), mask.clone(), 0.3, softcap));
                let want = read(reference::attention_softmax(scores.clone(), mask.clone(), 0.3, softcap));
                assert!(max_diff(&fused, &want) < 1e-5, "softmax n {n} {softcap:?}: {}", max_diff(&fused, &want));
            }
        }
    }
}
