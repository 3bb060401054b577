//! Affine-quantized matrices (4- or 8-bit codes) kept packed on the device, and the fused kernel
//! that multiplies by them without ever writing the dequantized weights: each thread block reads a
//! row's codes once, dequantizes them in registers (`scale·q + bias` per group) and accumulates in
//! f32.
//!
//! Layout (MLX's, also GGUF's blocks after [`hearth_weights::gguf_affine`] repacks them): codes
//! `[rows, k·bits/32]` u32 with element j of a word in bits `bits·j…`; scales and biases in one
//! buffer of u32 words ([`ScaleLayout`]; one binding: a kernel must stay within WebGPU's 8 storage
//! buffers per shader stage, one of which cubecl keeps): f32 (scale, bias) pairs, or, for a
//! symmetric format whose scales are halves (GGUF's Q4_0 and Q8_0), two f16 scales a word and
//! the bias `−offset · scale` computed, so Q4_0 stays 4.5 bits a weight on the device (not 6).
//!
//! On the cubecl backends (wgpu natively, WebGPU in the browser) the product is one dispatch. On
//! the CPU backend (Flex, used by tests and machines without a GPU) the same maths runs as tensor
//! operations, so both paths are checked against each other and against a host dequantization.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use hearth_weights::{AffineParams, AffineTensor};

use crate::affine_gemm::{self, Epilogue};
use crate::fused::{gelu_tanh_mul, inverse_rms, reference};
use crate::launch::{
    bounded_tanh, bytes_of, chunk_words_of, code_of, declare_reads_of, empty_output, grid, has_fused_kernels,
    load_chunk,
};
pub use crate::scales::ScaleLayout;
use crate::scales::{group_bias, group_scale};
use crate::tuning::ProductKernel;

/// Threads that share one output row (a power of two: they sum in a tree).
const THREADS: u32 = 64;
/// Tokens one thread block multiplies at once (prefill); their weights are dequantized once.
const TOKEN_TILE: u32 = 8;
/// Rows of the GEMV-style kernel per thread block, unless `tuning::set_gemv_rows` says otherwise:
/// one (64 lanes a row) until a GPU's measurement shows more to be faster.
const DEFAULT_ROWS_PER_GROUP: u32 = 1;

/// Where a thread of a GEMV-style block works: the block's index in the grid, the output row it
/// helps multiply (`threads / lanes` rows a block, `lanes` threads a row) and its lane in that row.
#[derive(CubeType, Clone, Copy)]
struct GemvPlace {
    block: u32,
    row: u32,
    segment: u32,
    lane: u32,
}

#[cube]
fn gemv_place(#[comptime] threads: u32, #[comptime] lanes: u32) -> GemvPlace {
    let rows_per_group = comptime!(threads / lanes);
    let block = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let segment = UNIT_POS_X / lanes;
    GemvPlace { block, row: block * rows_per_group + segment, segment, lane: UNIT_POS_X % lanes }
}

/// Chunk `c` of row `row` (`k` codes a row) and its group's dequantization: `(codes, scale, bias)`,
/// a code `q` standing for `scale · q + bias`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn chunk_terms(
    codes: &[u32],
    scale_bias: &[u32],
    row: u32,
    c: u32,
    k: u32,
    offset: f32,
    #[comptime] scale_kind: u32,
    #[comptime] group: u32,
    #[comptime] bits: u32,
) -> (Array<u32>, f32, f32) {
    let chunk_words = comptime!(chunk_words_of(bits));
    let per_chunk = comptime!(chunk_words_of(bits) * 32 / bits);
    let chunk = load_chunk(codes, row * (k * bits / 32) + c * chunk_words, chunk_words);
    let g = (c * per_chunk) / group;
    let scale = group_scale(scale_bias, row, g, k / group, scale_kind);
    let bias = group_bias(scale_bias, row, g, k / group, scale, offset, scale_kind);
    (chunk, scale, bias)
}

/// [`chunk_terms`] of the up matrix's row `up_row` when `gated`; zeros (never read) otherwise.
#[cube]
#[allow(clippy::too_many_arguments)]
fn up_chunk_terms(
    codes_up: &[u32],
    scale_bias_up: &[u32],
    up_row: u32,
    c: u32,
    k: u32,
    offset: f32,
    #[comptime] scale_kind: u32,
    #[comptime] group: u32,
    #[comptime] bits: u32,
    #[comptime] gated: bool,
) -> (Array<u32>, f32, f32) {
    let mut chunk_up = Array::<u32>::new(comptime!(chunk_words_of(bits)) as usize);
    let mut scale_up = f32::new(0.0);
    let mut bias_up = f32::new(0.0);
    if gated {
        let (codes, scale, bias) = chunk_terms(codes_up, scale_bias_up, up_row, c, k, offset, scale_kind, group, bits);
        chunk_up = codes;
        scale_up = scale;
        bias_up = bias;
    }
    (chunk_up, scale_up, bias_up)
}

/// `out[s, r] = Σ_k x[s, k] · (scale[r, g(k)] · q[r, k] + bias[r, g(k)])`, for up to
/// `TOKEN_TILE` tokens of `x` per block. Each row takes `lanes` threads (the block's `threads` in
/// `threads / lanes` rows; at least `tile` lanes, which write the row's tokens). Grid: (row groups
/// x, row groups y, token tiles).
///
/// When `normed`, `x` is first RMS-normalised with the weight in `aux` (the decoder's pre-norms): the
/// weight multiplies each value as it is read and `(mean(x²) + eps)^-½` the finished dot product,
/// with `Σx²` summed in the same pass, so the norm costs no dispatch and no extra read.
///
/// When `gated`, a second matrix of the same shape (`*_up`, the MLP's up projection; its rows from
/// `up_row_offset`, which is the gate's row count when both are one stacked `[gate; up]` bound
/// twice) is multiplied in the same pass and the output is `gelu_tanh(x·Wᵀ) · (x·W_upᵀ)`: the
/// MLP's gate, up and activation in one dispatch. When `gated_by_input`, the output is
/// `gelu_tanh(x·Wᵀ) · m` with `m` `[S, rows]` given in `aux` (Gemma 4's per-layer-input gate;
/// never normed). When `softcap`,
/// the output is `cap · tanh(out / cap)` (the final logits).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn affine_matmul_kernel(
    codes: &[u32],
    scale_bias: &[u32],
    codes_up: &[u32],
    scale_bias_up: &[u32],
    x: &[f32],
    aux: &[f32],
    out: &mut [f32],
    rows: u32,
    up_row_offset: u32,
    k: u32,
    tokens: u32,
    eps: f32,
    cap: f32,
    offset: f32,
    #[comptime] scale_kind: u32,
    #[comptime] normed: bool,
    #[comptime] gated: bool,
    #[comptime] gated_by_input: bool,
    #[comptime] softcap: bool,
    #[comptime] group: u32,
    #[comptime] bits: u32,
    #[comptime] threads: u32,
    #[comptime] lanes: u32,
    #[comptime] levels: u32,
    #[comptime] tile: u32,
) {
    let place = gemv_place(threads, lanes);
    let (row, segment, lane) = (place.row, place.segment, place.lane);
    let first_token = CUBE_POS_Z * tile;
    let thread = UNIT_POS_X;
    // A chunk: the fewest whole words holding whole codes (one word of 4- or 8-bit codes, three
    // of 6-bit ones), never across a group.
    let per_chunk = comptime!(chunk_words_of(bits) * 32 / bits);
    let chunks = k / per_chunk;

    let mut acc = Array::<f32>::new(tile as usize);
    let mut acc_up = Array::<f32>::new(tile as usize);
    let mut squares = Array::<f32>::new(tile as usize);
    #[unroll]
    for s in 0..tile {
        acc[s as usize] = 0.0;
        acc_up[s as usize] = 0.0;
        squares[s as usize] = 0.0;
    }
    if row < rows {
        let mut c = lane;
        while c < chunks {
            let (chunk, scale, bias) = chunk_terms(codes, scale_bias, row, c, k, offset, scale_kind, group, bits);
            let (chunk_up, scale_up, bias_up) = up_chunk_terms(
                codes_up,
                scale_bias_up,
                row + up_row_offset,
                c,
                k,
                offset,
                scale_kind,
                group,
                bits,
                gated,
            );
            #[unroll]
            for s in 0..tile {
                let token = first_token + s;
                if token < tokens {
                    let base = (token * k + c * per_chunk) as usize;
                    let mut dot = 0.0;
                    let mut dot_up = 0.0;
                    let mut sum = 0.0;
                    let mut square = 0.0;
                    #[unroll]
                    for j in 0..per_chunk {
                        let mut value = x[base + j as usize];
                        if normed {
                            square += value * value;
                            value *= aux[(c * per_chunk + j) as usize];
                        }
                        dot += f32::cast_from(code_of(&chunk, 0u32, j, bits)) * value;
                        if gated {
                            dot_up += f32::cast_from(code_of(&chunk_up, 0u32, j, bits)) * value;
                        }
                        sum += value;
                    }
                    acc[s as usize] = acc[s as usize] + scale * dot + bias * sum;
                    if gated {
                        acc_up[s as usize] = acc_up[s as usize] + scale_up * dot_up + bias_up * sum;
                    }
                    if normed {
                        let total = squares[s as usize] + square;
                        squares[s as usize] = total;
                    }
                }
            }
            c += lanes;
        }
    }

    // Sum the lanes' partial dot products (and squares): trees in shared memory, one per token
    // and row.
    let mut partial = Shared::<[f32]>::new_slice((tile * threads) as usize);
    let mut partial_up = Shared::<[f32]>::new_slice((tile * threads) as usize);
    let mut partial_squares = Shared::<[f32]>::new_slice((tile * threads) as usize);
    #[unroll]
    for s in 0..tile {
        partial[(s * threads + thread) as usize] = acc[s as usize];
        if gated {
            partial_up[(s * threads + thread) as usize] = acc_up[s as usize];
        }
        if normed {
            partial_squares[(s * threads + thread) as usize] = squares[s as usize];
        }
    }
    sync_cube();
    #[unroll]
    for level in 0..levels {
        let stride = lanes >> (level + 1);
        if lane < stride {
            #[unroll]
            for s in 0..tile {
                let at = (s * threads + thread) as usize;
                let sum = partial[at] + partial[at + stride as usize];
                partial[at] = sum;
                if gated {
                    let sum_up = partial_up[at] + partial_up[at + stride as usize];
                    partial_up[at] = sum_up;
                }
                if normed {
                    let squares_sum = partial_squares[at] + partial_squares[at + stride as usize];
                    partial_squares[at] = squares_sum;
                }
            }
        }
        sync_cube();
    }
    if lane < tile && row < rows {
        let token = first_token + lane;
        if token < tokens {
            let at = (lane * threads + segment * lanes) as usize;
            let mut value = partial[at];
            let mut value_up = partial_up[at];
            if normed {
                let inv_rms = 1.0 / f32::sqrt(partial_squares[at] / f32::cast_from(k) + eps);
                value *= inv_rms;
                value_up *= inv_rms;
            }
            if gated_by_input {
                value_up = aux[(token * rows + row) as usize];
            }
            if gated || gated_by_input {
                let tanh = bounded_tanh((value + 0.044_715 * value * value * value) * 0.797_884_6);
                value = 0.5 * value * (1.0 + tanh) * value_up;
            }
            if softcap {
                value = bounded_tanh(value / cap) * cap;
            }
            out[(token * rows + row) as usize] = value;
        }
    }
}

/// One token's residual update and the normed product that reads it, in one dispatch: `x' =
/// (x + RMSNorm(delta)·w_post)·scale` (a sublayer's output joining the residual stream, as
/// `fused::add_rms_norm` computes it), written to `x_out` by the first block, and
/// `out = RMSNorm(x')·w_pre · Wᵀ` (the next sublayer's normed projection). `norms` is `[w_post ‖
/// w_pre]` (`2k`). Every block computes `x'` itself with the same sums in the same order, so all
/// agree with what the first block writes; the update's launch is saved. When `gated`, `codes`
/// holds a stacked `[gate; up]` (the up rows from `rows`) and `out = gelu_tanh(gate) · up` (the
/// MLP's first launch, within WebGPU's 8 bindings). Grid and lanes as [`affine_matmul_kernel`]'s
/// for one token.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn affine_residual_matmul_kernel(
    codes: &[u32],
    scale_bias: &[u32],
    x: &[f32],
    delta: &[f32],
    norms: &[f32],
    x_out: &mut [f32],
    out: &mut [f32],
    rows: u32,
    k: u32,
    eps: f32,
    scale: f32,
    offset: f32,
    #[comptime] scale_kind: u32,
    #[comptime] gated: bool,
    #[comptime] group: u32,
    #[comptime] bits: u32,
    #[comptime] threads: u32,
    #[comptime] block_levels: u32,
    #[comptime] lanes: u32,
    #[comptime] levels: u32,
) {
    let place = gemv_place(threads, lanes);
    let (block, row, lane) = (place.block, place.row, place.lane);
    let thread = UNIT_POS_X;
    let per_chunk = comptime!(chunk_words_of(bits) * 32 / bits);
    let chunks = k / per_chunk;

    // RMSNorm(delta)'s factor, summed by the whole block as `add_rms_norm` sums it.
    let inv_delta = inverse_rms(delta, 0u32, k, true, eps, threads, block_levels);

    let mut acc = 0.0;
    let mut acc_up = 0.0;
    let mut squares = 0.0;
    if row < rows {
        let mut c = lane;
        while c < chunks {
            let (chunk, group_scale_value, bias) =
                chunk_terms(codes, scale_bias, row, c, k, offset, scale_kind, group, bits);
            // A stacked pair's up rows follow its gate rows in the same binding.
            let (chunk_up, scale_up, bias_up) =
                up_chunk_terms(codes, scale_bias, row + rows, c, k, offset, scale_kind, group, bits, gated);
            let base = c * per_chunk;
            let mut dot = 0.0;
            let mut dot_up = 0.0;
            let mut sum = 0.0;
            #[unroll]
            for j in 0..per_chunk {
                let i = (base + j) as usize;
                let updated = (x[i] + delta[i] * inv_delta * norms[i]) * scale;
                squares += updated * updated;
                let value = updated * norms[k as usize + i];
                dot += f32::cast_from(code_of(&chunk, 0u32, j, bits)) * value;
                if gated {
                    dot_up += f32::cast_from(code_of(&chunk_up, 0u32, j, bits)) * value;
                }
                sum += value;
            }
            acc += group_scale_value * dot + bias * sum;
            if gated {
                acc_up += scale_up * dot_up + bias_up * sum;
            }
            c += lanes;
        }
    }

    let mut partial = Shared::<[f32]>::new_slice(threads as usize);
    let mut partial_up = Shared::<[f32]>::new_slice(threads as usize);
    let mut partial_squares = Shared::<[f32]>::new_slice(threads as usize);
    partial[thread as usize] = acc;
    if gated {
        partial_up[thread as usize] = acc_up;
    }
    partial_squares[thread as usize] = squares;
    sync_cube();
    #[unroll]
    for level in 0..levels {
        let stride = lanes >> (level + 1);
        if lane < stride {
            let at = thread as usize;
            let sum = partial[at] + partial[at + stride as usize];
            partial[at] = sum;
            if gated {
                let sum_up = partial_up[at] + partial_up[at + stride as usize];
                partial_up[at] = sum_up;
            }
            let squares_sum = partial_squares[at] + partial_squares[at + stride as usize];
            partial_squares[at] = squares_sum;
        }
        sync_cube();
    }
    if lane == 0 && row < rows {
        let inv_rms = 1.0 / f32::sqrt(partial_squares[thread as usize] / f32::cast_from(k) + eps);
        let mut value = partial[thread as usize] * inv_rms;
        if gated {
            let tanh = bounded_tanh((value + 0.044_715 * value * value * value) * 0.797_884_6);
            value = 0.5 * value * (1.0 + tanh) * (partial_up[thread as usize] * inv_rms);
        }
        out[row as usize] = value;
    }
    if block == 0 {
        let mut i = thread;
        while i < k {
            let at = i as usize;
            x_out[at] = (x[at] + delta[at] * inv_delta * norms[at]) * scale;
            i += threads;
        }
    }
}

/// `out[i, :] = dequantized row ids[i] − first_row` for the ids this matrix holds (rows
/// `first_row..first_row + rows` of a table split in blocks); the other rows of `out` are left as
/// they are. One thread per chunk of codes: the embedding lookup of a packed block in one dispatch.
/// Grid: (blocks x, blocks y) of `threads` threads.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn affine_rows_kernel(
    codes: &[u32],
    scale_bias: &[u32],
    ids: &[u32],
    out: &mut [f32],
    k: u32,
    first_row: u32,
    rows: u32,
    offset: f32,
    #[comptime] scale_kind: u32,
    #[comptime] group: u32,
    #[comptime] bits: u32,
    #[comptime] threads: u32,
) {
    let per_chunk = comptime!(chunk_words_of(bits) * 32 / bits);
    let chunks = k / per_chunk;
    let position = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    let token = position / chunks;
    let mut id = first_row + rows;
    if position < ids.len() as u32 * chunks {
        id = ids[token as usize];
    }
    if id >= first_row && id < first_row + rows {
        let c = position % chunks;
        let row = id - first_row;
        let (chunk, scale, bias) = chunk_terms(codes, scale_bias, row, c, k, offset, scale_kind, group, bits);
        let base = (token * k + c * per_chunk) as usize;
        #[unroll]
        for j in 0..per_chunk {
            out[base + j as usize] = scale * f32::cast_from(code_of(&chunk, 0u32, j, bits)) + bias;
        }
    }
}

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

/// A `[rows, k]` matrix stored as 4- or 8-bit codes with a scale and a bias per group of
/// `group` values of a row.
#[derive(Clone)]
pub struct AffineMatrix {
    /// `[rows, k·bits/32]` u32
    codes: Tensor<2, Int>,
    scales: Scales,
    group: usize,
    bits: u32,
}

/// A packed matrix's scales and biases: as the kernels read them where they run, else as f32
/// pairs for the tensor operations.
#[derive(Clone)]
enum Scales {
    /// The cubecl backends: scale words in `layout`.
    Words { words: Tensor<2, Int>, layout: ScaleLayout },
    /// The CPU backend: `[rows, 2·groups]` f32, scale, bias, scale, bias, …
    Pairs(Tensor<2>),
}

impl AffineMatrix {
    /// Whether codes of this width stay packed: 2- to 6- and 8-bit codes (MLX's widths; GGUF's
    /// Q6_K as 6-bit codes) in groups of whole chunks (the fewest whole words holding whole
    /// codes: one word of 4-bit codes, three of 6-bit ones). Loaders dequantize anything else.
    pub fn holds(t: &AffineTensor) -> bool {
        let bits = t.params.bits;
        let per_chunk = (chunk_words_of(bits) * 32 / bits.max(1)) as usize;
        matches!(bits, 2..=6 | 8) && t.params.group_size.is_multiple_of(per_chunk)
    }

    /// Uploads a host tensor of a width [`Self::holds`] (taken by value: its codes become the
    /// upload's buffer without another copy).
    pub fn upload(t: AffineTensor, device: &Device) -> Self {
        assert!(Self::holds(&t), "AffineMatrix holds 2- to 6- and 8-bit codes in whole chunks");
        Self::from_parts(t.rows, t.cols, t.params, t.codes, &t.scales, &t.biases, device)
    }

    /// Rows `range` of a host tensor (a block of a split matrix).
    pub fn upload_rows(t: &AffineTensor, range: std::ops::Range<usize>, device: &Device) -> Self {
        assert!(Self::holds(t), "AffineMatrix holds 2- to 6- and 8-bit codes in whole chunks");
        let (words, groups) = (t.words_per_row(), t.groups_per_row());
        Self::from_parts(
            range.len(),
            t.cols,
            t.params,
            t.codes[range.start * words..range.end * words].to_vec(),
            &t.scales[range.start * groups..range.end * groups],
            &t.biases[range.start * groups..range.end * groups],
            device,
        )
    }

    fn from_parts(
        rows: usize,
        k: usize,
        params: AffineParams,
        codes: Vec<u32>,
        scales: &[f32],
        biases: &[f32],
        device: &Device,
    ) -> Self {
        let fused = has_fused_kernels(device);
        // The tensor operations read codes word by word: odd widths widen to bytes there.
        let (codes, params) = if !fused && !32u32.is_multiple_of(params.bits) {
            (widen_to_bytes(&codes, rows, k, params.bits), AffineParams { bits: 8, ..params })
        } else {
            (codes, params)
        };
        let (words, groups) = (k * params.bits as usize / 32, k / params.group_size);
        let scales = if fused {
            let layout = ScaleLayout::fitting(scales, biases, params.bits, groups);
            let (data, per_row) = layout.words(scales, biases, groups);
            Scales::Words {
                words: Tensor::from_data(TensorData::new(data, [rows, per_row]), (device, DType::U32)),
                layout,
            }
        } else {
            let interleaved: Vec<f32> = scales.iter().zip(biases).flat_map(|(&s, &b)| [s, b]).collect();
            Scales::Pairs(Tensor::from_data(TensorData::new(interleaved, [rows, 2 * groups]), device))
        };
        AffineMatrix {
            codes: Tensor::from_data(TensorData::new(codes, [rows, words]), (device, DType::U32)),
            scales,
            group: params.group_size,
            bits: params.bits,
        }
    }

    /// How the scales lie on the device (`None` on the CPU backend, f32 pairs).
    pub fn scale_layout(&self) -> Option<ScaleLayout> {
        match &self.scales {
            Scales::Words { layout, .. } => Some(*layout),
            Scales::Pairs(_) => None,
        }
    }

    /// The scale words and their layout (the cubecl backends only).
    fn words(&self) -> (&Tensor<2, Int>, ScaleLayout) {
        match &self.scales {
            Scales::Words { words, layout } => (words, *layout),
            Scales::Pairs(_) => panic!("packed kernels run only where the scales are uploaded as words"),
        }
    }

    pub fn rows(&self) -> usize {
        self.codes.dims()[0]
    }

    pub fn k(&self) -> usize {
        self.codes.dims()[1] * 32 / self.bits as usize
    }

    /// Codes per u32 word.
    fn per_word(&self) -> usize {
        32 / self.bits as usize
    }

    /// Bytes this matrix occupies on the device.
    pub fn device_bytes(&self) -> usize {
        let [rows, words] = self.codes.dims();
        let scales = match &self.scales {
            Scales::Words { words, .. } => words.shape().num_elements(),
            Scales::Pairs(pairs) => pairs.shape().num_elements(),
        };
        (rows * words + scales) * 4
    }

    /// `x · Wᵀ`: [S, k] → [S, rows].
    pub fn matmul_transposed(&self, x: Tensor<2>) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.fused_matmul(x, None)
        } else {
            x.matmul(self.dequantize().transpose())
        }
    }

    /// `x · Wᵀ` by the given kernel where the kernels run (the benchmark's comparison).
    pub fn matmul_transposed_by(&self, x: Tensor<2>, kernel: ProductKernel) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.launch_in_groups(Gate::None, x, None, None, kernel, 0)
        } else {
            self.matmul_transposed(x)
        }
    }

    /// `x · Wᵀ` by the GEMV-style kernel with `rows_per_group` rows per thread block (1, 2, 4 or
    /// 8: 64, 32, 16 or 8 lanes a row) where the kernels run (its tests and the benchmark).
    pub fn matmul_transposed_in_groups(&self, x: Tensor<2>, rows_per_group: u32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.launch_in_groups(Gate::None, x, None, None, ProductKernel::TokenTiles, rows_per_group.max(1))
        } else {
            self.matmul_transposed(x)
        }
    }

    /// One token's residual update and the next sublayer's normed projection of it: `x' = (x +
    /// RMSNorm(delta)·w_post)·scale` and `RMSNorm(x')·w_pre · Wᵀ`, with `norms` `[w_post ‖ w_pre]`
    /// (`2k`). Returns `(x', product)`: [1, k] and [1, rows]. One dispatch where the kernels run
    /// (the update's own launch saved); elsewhere, and for more than one token, the two steps.
    pub fn residual_normed_matmul(
        &self,
        x: Tensor<2>,
        delta: Tensor<2>,
        norms: &Tensor<1>,
        eps: f32,
        scale: f32,
    ) -> (Tensor<2>, Tensor<2>) {
        self.residual_normed_matmul_in_groups(false, x, delta, norms, eps, scale, 0)
    }

    /// The same update, and [`Self::normed_gated_stacked`] of it: this matrix a stacked `[gate;
    /// up]`, the product `[1, rows / 2]`.
    pub fn residual_normed_gated_stacked(
        &self,
        x: Tensor<2>,
        delta: Tensor<2>,
        norms: &Tensor<1>,
        eps: f32,
        scale: f32,
    ) -> (Tensor<2>, Tensor<2>) {
        self.residual_normed_matmul_in_groups(true, x, delta, norms, eps, scale, 0)
    }

    /// The same with `rows_per_group` rows a block (0: the tuned default; its test), gated
    /// (a stacked `[gate; up]`) or not.
    #[allow(clippy::too_many_arguments)]
    fn residual_normed_matmul_in_groups(
        &self,
        gated: bool,
        x: Tensor<2>,
        delta: Tensor<2>,
        norms: &Tensor<1>,
        eps: f32,
        scale: f32,
        rows_per_group: u32,
    ) -> (Tensor<2>, Tensor<2>) {
        let k = x.dims()[1];
        if has_fused_kernels(&x.device()) && x.dims()[0] == 1 {
            let (words, layout) = self.words();
            let (updated, product) = <Dispatch as AffineKernels>::affine_residual_matmul(
                self.codes.clone().into_dispatch(),
                words.clone().into_dispatch(),
                layout,
                gated,
                x.into_dispatch(),
                delta.into_dispatch(),
                norms.clone().into_dispatch(),
                eps,
                scale,
                self.group,
                self.bits,
                rows_per_group,
            );
            return (Tensor::from_dispatch(updated), Tensor::from_dispatch(product));
        }
        let (post, pre) = (norms.clone().narrow(0, 0, k), norms.clone().narrow(0, k, k));
        let updated = crate::fused::add_rms_norm(x, delta, &post, eps, scale);
        let product = if gated {
            self.normed_gated_stacked(updated.clone(), &pre, eps)
        } else {
            self.normed_matmul_transposed(updated.clone(), &pre, eps)
        };
        (updated, product)
    }

    /// `RMSNorm(x) · Wᵀ` with the norm's weight `[k]`: [S, k] → [S, rows], the norm fused into
    /// the product where the kernels run.
    pub fn normed_matmul_transposed(&self, x: Tensor<2>, norm_weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.fused_matmul(x, Some((norm_weight, eps)))
        } else {
            self.matmul_transposed(reference::rms_norm(x, norm_weight, eps))
        }
    }

    /// `gelu_tanh(RMSNorm(x)·Wᵀ) · (RMSNorm(x)·W_upᵀ)` with `self` as W (the gate): the MLP's
    /// gate, up and activation, in one dispatch where the kernels run. Both matrices must have the
    /// same shape and packing ([`Self::pairs_with`]).
    pub fn normed_gated_matmul(&self, up: &AffineMatrix, x: Tensor<2>, norm_weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) && self.pairs_with(up) {
            return self.launch(Gate::ByMatrix(up), x, Some((norm_weight, eps)));
        }
        let gate = self.normed_matmul_transposed(x.clone(), norm_weight, eps);
        gelu_tanh_mul(gate, up.normed_matmul_transposed(x, norm_weight, eps))
    }

    /// `gelu_tanh(RMSNorm(x)·Gᵀ) · (RMSNorm(x)·Uᵀ)` for this matrix a stacked `[G; U]` (the MLP's
    /// gate and up, rows stacked at load): [S, k] → [S, rows / 2], one dispatch where the kernels
    /// run.
    pub fn normed_gated_stacked(&self, x: Tensor<2>, norm_weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            return self.launch(Gate::Stacked, x, Some((norm_weight, eps)));
        }
        let both = self.normed_matmul_transposed(x, norm_weight, eps);
        let [s, rows] = both.dims();
        let half = rows / 2;
        gelu_tanh_mul(both.clone().slice([0..s, 0..half]), both.slice([0..s, half..rows]))
    }

    /// Whether `other` can share a gated launch with `self`: same shape, width, groups and scale
    /// layout.
    pub fn pairs_with(&self, other: &AffineMatrix) -> bool {
        self.codes.dims() == other.codes.dims()
            && (self.bits, self.group) == (other.bits, other.group)
            && self.scale_layout() == other.scale_layout()
    }

    /// `gelu_tanh(x·Wᵀ) · multiplier`, multiplier `[S, rows]`: one dispatch where the kernels run.
    pub fn gelu_gated_by(&self, x: Tensor<2>, multiplier: Tensor<2>) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            return self.launch(Gate::ByInput(&multiplier), x, None);
        }
        gelu_tanh_mul(self.matmul_transposed(x), multiplier)
    }

    /// `cap · tanh(x·Wᵀ / cap)`: the tied head's logits with Gemma's final softcap, in the same
    /// dispatch where the kernels run.
    pub fn softcapped_matmul_transposed(&self, x: Tensor<2>, cap: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            return self.launch_capped(Gate::None, x, None, Some(cap));
        }
        reference::bounded_tanh(self.matmul_transposed(x).div_scalar(cap)).mul_scalar(cap)
    }

    fn fused_matmul(&self, x: Tensor<2>, norm: Option<(&Tensor<1>, f32)>) -> Tensor<2> {
        self.launch(Gate::None, x, norm)
    }

    fn launch(&self, gate: Gate, x: Tensor<2>, norm: Option<(&Tensor<1>, f32)>) -> Tensor<2> {
        self.launch_capped(gate, x, norm, None)
    }

    fn launch_capped(&self, gate: Gate, x: Tensor<2>, norm: Option<(&Tensor<1>, f32)>, cap: Option<f32>) -> Tensor<2> {
        self.launch_in_groups(gate, x, norm, cap, ProductKernel::Auto, 0)
    }

    /// The product by `kernel`, with `rows_per_group` rows per block of the GEMV-style kernel (0:
    /// the tuned default).
    fn launch_in_groups(
        &self,
        gate: Gate,
        x: Tensor<2>,
        norm: Option<(&Tensor<1>, f32)>,
        cap: Option<f32>,
        kernel: ProductKernel,
        rows_per_group: u32,
    ) -> Tensor<2> {
        // Inputs the kernel does not read are bound to tensors at hand: this matrix in the second
        // matrix's place, its scales in `aux`'s. `aux` is the norm weight or the gate's multiplier
        // (a per-layer-input gate is never normed).
        let second = match &gate {
            Gate::ByMatrix(up) => *up,
            _ => self,
        };
        let up_row_offset = if matches!(gate, Gate::Stacked) { self.rows() / 2 } else { 0 };
        let (aux, eps) = match (norm, &gate) {
            (Some((weight, eps)), _) => (weight.clone().reshape([1, weight.dims()[0]]), eps),
            (None, Gate::ByInput(multiplier)) => ((*multiplier).clone(), 0.0),
            (None, _) => (x.clone(), 0.0),
        };
        debug_assert!(!(norm.is_some() && matches!(gate, Gate::ByInput(_))), "aux holds one of the two");
        let (words, layout) = self.words();
        let (second_words, second_layout) = second.words();
        debug_assert_eq!(layout, second_layout, "a gated launch reads both matrices' scales alike");
        Tensor::from_dispatch(<Dispatch as AffineKernels>::affine_matmul(
            self.codes.clone().into_dispatch(),
            words.clone().into_dispatch(),
            second.codes.clone().into_dispatch(),
            second_words.clone().into_dispatch(),
            layout,
            matches!(gate, Gate::ByMatrix(_) | Gate::Stacked),
            up_row_offset,
            matches!(gate, Gate::ByInput(_)),
            x.into_dispatch(),
            aux.into_dispatch(),
            eps,
            norm.is_some(),
            cap,
            self.group,
            self.bits,
            kernel,
            rows_per_group,
        ))
    }

    /// Rows `ids` of W, dequantized: [S] → [S, k].
    pub fn select_rows(&self, ids: &[u32]) -> Tensor<2> {
        let device = self.codes.device();
        let n = ids.len();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids.to_vec(), [n]), (&device, DType::U32));
        if has_fused_kernels(&device) {
            let mut out = Tensor::empty([n, self.k()], &device);
            self.rows_into(&mut out, &ids, 0);
            return out;
        }
        let Scales::Pairs(pairs) = &self.scales else {
            unreachable!("scale words are uploaded only where the kernels run")
        };
        let picked = AffineMatrix {
            codes: self.codes.clone().select(0, ids.clone()),
            scales: Scales::Pairs(pairs.clone().select(0, ids)),
            group: self.group,
            bits: self.bits,
        };
        picked.dequantize()
    }

    /// Writes into `out` `[n, k]` (in its own buffer, whoever else holds it) the dequantized rows
    /// of the ids `[n]` (u32, on the device) that W holds, W being rows `first_row..first_row +
    /// rows` of a table split in blocks; the other rows of `out` are left as they are. The ids
    /// never reach the host, so the launch can be recorded and replayed on new ids. Cubecl
    /// backends only (elsewhere [`Self::select_rows`] looks rows up from host ids).
    pub fn rows_into(&self, out: &mut Tensor<2>, ids: &Tensor<1, Int>, first_row: usize) {
        assert!(has_fused_kernels(&self.codes.device()), "rows_into runs on the cubecl backends");
        assert_eq!(out.dims(), [ids.dims()[0], self.k()], "rows_into: output shape");
        let (words, layout) = self.words();
        *out = Tensor::from_dispatch(<Dispatch as AffineKernels>::affine_rows(
            self.codes.clone().into_dispatch(),
            words.clone().into_dispatch(),
            layout,
            ids.clone().into_dispatch(),
            out.clone().into_dispatch(),
            first_row,
            self.group,
            self.bits,
        ));
    }

    /// W as f32: [rows, k] (by the row kernel where the kernels run, else tensor operations).
    pub fn dequantize(&self) -> Tensor<2> {
        let [rows, words] = self.codes.dims();
        let Scales::Pairs(pairs) = &self.scales else {
            let device = self.codes.device();
            let ids: Vec<u32> = (0..rows as u32).collect();
            let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [rows]), (&device, DType::U32));
            let mut out = Tensor::empty([rows, self.k()], &device);
            self.rows_into(&mut out, &ids, 0);
            return out;
        };
        let groups = self.k() / self.group;
        let (bits, mask) = (i64::from(self.bits), (1i64 << self.bits) - 1);
        // [rows, words, per_word]: field j of each word.
        let fields: Vec<Tensor<3, Int>> = (0..self.per_word() as i64)
            .map(|j| {
                self.codes
                    .clone()
                    .bitwise_right_shift_scalar(bits * j)
                    .bitwise_and_scalar(mask)
                    .reshape([rows, words, 1])
            })
            .collect();
        let q = Tensor::cat(fields, 2).float().reshape([rows, groups, self.group]);
        let pairs = pairs.clone().reshape([rows, groups, 2]);
        let scales = pairs.clone().slice([0..rows, 0..groups, 0..1]);
        let biases = pairs.slice([0..rows, 0..groups, 1..2]);
        let w = q * scales + biases;
        w.reshape([rows, self.k()])
    }
}

/// `rows` rows of `k` codes of `bits` bits (each row a little-endian bit stream) as 8-bit codes.
fn widen_to_bytes(codes: &[u32], rows: usize, k: usize, bits: u32) -> Vec<u32> {
    let words_per_row = k * bits as usize / 32;
    let mask = (1u64 << bits) - 1;
    let mut out = vec![0u32; rows * k / 4];
    for r in 0..rows {
        let row = &codes[r * words_per_row..(r + 1) * words_per_row];
        for j in 0..k {
            let bit = j * bits as usize;
            let (word, shift) = (bit / 32, bit % 32);
            let mut wide = u64::from(row[word]);
            if shift + bits as usize > 32 {
                wide |= u64::from(row[word + 1]) << 32;
            }
            out[(r * k + j) / 4] |= (((wide >> shift) & mask) as u32) << (8 * (j % 4));
        }
    }
    out
}

/// What multiplies `gelu_tanh(x·Wᵀ)` in a gated launch.
enum Gate<'a> {
    None,
    /// `x·W_upᵀ`, a second matrix multiplied in the same pass.
    ByMatrix(&'a AffineMatrix),
    /// This matrix is a stacked `[gate; up]`: its second half's rows are the up matrix's.
    Stacked,
    /// A given `[S, rows]` tensor.
    ByInput(&'a Tensor<2>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A random-looking matrix of `bits`-bit codes, and its host dequantization.
    fn matrix(rows: usize, k: usize, group: usize, bits: u32, seed: u32) -> (AffineTensor, Vec<f32>) {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let words = k * bits as usize / 32;
        let codes: Vec<u32> = (0..rows * words).map(|_| next()).collect();
        let groups = rows * k / group;
        let scales: Vec<f32> = (0..groups).map(|_| (next() % 1000) as f32 / 20_000.0 + 0.001).collect();
        let biases: Vec<f32> = (0..groups).map(|_| -((next() % 1000) as f32) / 5_000.0).collect();
        let params = AffineParams { group_size: group, bits };
        let t = AffineTensor::new(
            "test",
            params,
            (vec![rows, words], codes),
            (vec![rows, k / group], scales),
            (vec![rows, k / group], biases),
        )
        .expect("consistent shapes");
        let dense = t.dequantize().data;
        (t, dense)
    }

    fn inputs(tokens: usize, k: usize) -> Vec<f32> {
        (0..tokens * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect()
    }

    /// f64 reference of x · Wᵀ.
    fn reference(x: &[f32], w: &[f32], tokens: usize, rows: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0.0; tokens * rows];
        for s in 0..tokens {
            for r in 0..rows {
                let dot: f64 = (0..k).map(|i| f64::from(x[s * k + i]) * f64::from(w[r * k + i])).sum();
                out[s * rows + r] = dot as f32;
            }
        }
        out
    }

    fn devices() -> Vec<(&'static str, Device)> {
        let mut devices = vec![("cpu", Device::flex())];
        if let Some(gpu) = crate::launch::test_gpu() {
            devices.push(("wgpu", gpu));
        }
        devices
    }

    fn read(t: Tensor<2>) -> Vec<f32> {
        pollster::block_on(t.into_data_async()).expect("readback").try_to_vec().expect("f32")
    }

    /// Decode (1 token), a partial token tile, several tiles; 4-bit groups of 32, 64 and 128,
    /// 8-bit groups of 16 and 32 (GGUF's Q8_0 repacked), 6-bit ones (Q6_K); a k that is not a multiple of
    /// the threads' stride.
    #[test]
    fn fused_matmul_matches_a_host_dequantization() {
        let cases = [
            (1, 40, 256, 64, 4),
            (3, 17, 96, 32, 4),
            (19, 9, 384, 128, 4),
            (1, 300, 1536, 64, 4),
            (1, 33, 640, 32, 8),
            (11, 7, 256, 16, 8),
            // Odd widths in a bit stream: 6-bit (GGUF's Q6_K, MLX), 3-, 5- and 2-bit (MLX).
            (1, 21, 96, 16, 6),
            (5, 9, 192, 32, 6),
            (1, 11, 128, 32, 3),
            (3, 6, 64, 32, 5),
            (1, 5, 64, 16, 2),
        ];
        for (name, device) in devices() {
            for (tokens, rows, k, group, bits) in cases {
                let (t, dense) = matrix(rows, k, group, bits, (tokens * rows + k) as u32);
                let x = inputs(tokens, k);
                let m = AffineMatrix::upload(t, &device);
                let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), &device);
                let got = read(m.matmul_transposed(xt));
                let want = reference(&x, &dense, tokens, rows, k);
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
                assert!(
                    diff <= 1e-5 * scale * (k as f32).sqrt(),
                    "{name} {tokens}x{rows}x{k}/{group} {bits}-bit: {diff}"
                );
            }
        }
    }

    /// The profile's bytes read: a product's launch declares its weights and input, a launch of
    /// Burn's own declares nothing (and is not charged a declaration left over from before).
    #[test]
    fn a_profiled_product_reads_its_weights_and_input() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        let m = AffineMatrix::upload(symmetric_matrix(40, 512, 32, 4, 8.0).0, &gpu);
        let x = Tensor::<2>::from_data(TensorData::new(inputs(1, 512), [1, 512]), &gpu);
        // Declared outside any profile: must not reach the profile's first launch.
        crate::dispatches::declare_reads(1);
        let (_, times) = crate::dispatches::profile_dispatches(|| {
            let scaled = read(x.clone() * 2.0);
            let product = read(m.matmul_transposed(x.clone()));
            (scaled, product)
        });
        let reads: Vec<(String, Option<u64>)> =
            times.iter().map(|t| (t.kernel.rsplit("::").next().unwrap_or(t.kernel).to_owned(), t.bytes_read)).collect();
        let product: Vec<_> = reads.iter().filter(|(name, _)| name.contains("AffineMatmul")).collect();
        assert_eq!(product.len(), 1, "one product launch in {reads:?}");
        assert_eq!(product[0].1, Some((m.device_bytes() + 512 * 4) as u64), "{reads:?}");
        let others: Vec<_> = reads.iter().filter(|(name, _)| !name.contains("AffineMatmul")).collect();
        assert!(!others.is_empty() && others.iter().all(|(_, bytes)| bytes.is_none()), "{reads:?}");
    }

    /// The GEMV-style kernel with several rows per block (fewer lanes a row): the same products
    /// for 1, 2, 4 and 8 rows, with row counts that leave the last block part empty, one token
    /// and token tiles, and the chunk loop's stride not dividing `k`.
    #[test]
    fn rows_per_block_leave_the_product_unchanged() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        let cases = [(1, 41, 256, 64, 4), (1, 300, 1536, 64, 4), (9, 13, 640, 32, 8), (3, 7, 96, 16, 6)];
        for (tokens, rows, k, group, bits) in cases {
            let (t, dense) = matrix(rows, k, group, bits, (tokens * 31 + rows + k) as u32);
            let x = inputs(tokens, k);
            let m = AffineMatrix::upload(t, &gpu);
            let want = reference(&x, &dense, tokens, rows, k);
            let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
            for rows_per_block in [1, 2, 4, 8] {
                let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), &gpu);
                let got = read(m.matmul_transposed_in_groups(xt, rows_per_block));
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(
                    diff <= 1e-5 * scale * (k as f32).sqrt(),
                    "{rows_per_block} rows a block, {tokens}x{rows}x{k}/{group} {bits}-bit: {diff}"
                );
            }
        }
    }

    /// Both product kernels on prompt shapes: partial tiles of tokens and rows, a `k` that ends
    /// inside a staged slice (40 = 2.5 slices), 4-bit and 8-bit groups; each against the host.
    #[test]
    fn tiled_and_token_tile_kernels_match_a_host_dequantization() {
        let cases = [
            (70, 65, 384, 64, 4),
            (64, 64, 256, 32, 4),
            (33, 9, 40, 8, 4),
            (3, 130, 640, 16, 8),
            (100, 40, 96, 32, 8),
            (40, 70, 160, 16, 6),
            (20, 9, 96, 32, 3),
        ];
        for (name, device) in devices() {
            for (tokens, rows, k, group, bits) in cases {
                let (t, dense) = matrix(rows, k, group, bits, (tokens + rows * k) as u32);
                let x = inputs(tokens, k);
                let m = AffineMatrix::upload(t, &device);
                let want = reference(&x, &dense, tokens, rows, k);
                let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
                for kernel in [ProductKernel::Tiled, ProductKernel::TokenTiles, ProductKernel::Auto] {
                    let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), &device);
                    let got = read(m.matmul_transposed_by(xt, kernel));
                    let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                    assert!(
                        diff <= 1e-5 * scale * (k as f32).sqrt(),
                        "{name} {kernel:?} {tokens}x{rows}x{k}/{group} {bits}-bit: {diff}"
                    );
                }
            }
        }
    }

    /// The pre-norm fused into the product equals RMSNorm then the product.
    #[test]
    fn normed_matmul_matches_norm_then_matmul() {
        for (name, device) in devices() {
            for (tokens, rows, k, bits) in [(1, 40, 256, 4), (10, 33, 640, 8), (45, 70, 256, 4), (80, 33, 640, 8)] {
                let (t, _) = matrix(rows, k, 32, bits, 3);
                let m = AffineMatrix::upload(t, &device);
                let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
                let weight: Vec<f32> = (0..k).map(|i| 0.5 + (i % 13) as f32 * 0.1).collect();
                let weight = Tensor::<1>::from_data(TensorData::new(weight, [k]), &device);
                let got = read(m.normed_matmul_transposed(x.clone(), &weight, 1e-6));
                let want = read(m.matmul_transposed(crate::fused::reference::rms_norm(x, &weight, 1e-6)));
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
                assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{name} {tokens}x{rows}x{k} {bits}-bit: {diff}");
            }
        }
    }

    /// Gate, up and the activation in one launch equal the three steps.
    #[test]
    fn gated_matmul_matches_gate_up_then_gelu() {
        for (name, device) in devices() {
            for (tokens, rows, k, bits) in [(1, 40, 256, 4), (9, 21, 640, 8), (70, 21, 640, 8), (33, 80, 256, 4)] {
                let (gate, up) = (matrix(rows, k, 32, bits, 4).0, matrix(rows, k, 32, bits, 5).0);
                let joint = stacked(&gate, &up, &device);
                let (gate, up) = (AffineMatrix::upload(gate, &device), AffineMatrix::upload(up, &device));
                let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
                let weight = Tensor::<1>::from_data(TensorData::new(vec![0.9; k], [k]), &device);
                let got = read(gate.normed_gated_matmul(&up, x.clone(), &weight, 1e-6));
                let got_stacked = read(joint.normed_gated_stacked(x.clone(), &weight, 1e-6));
                let normed = crate::fused::reference::rms_norm(x, &weight, 1e-6);
                let want = read(
                    crate::fused::reference::gelu_tanh(gate.matmul_transposed(normed.clone()))
                        * up.matmul_transposed(normed),
                );
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
                assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{name} {tokens}x{rows}x{k} {bits}-bit: {diff}");
                let diff = got_stacked.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(
                    got_stacked.len() == want.len() && diff <= 1e-5 * scale * (k as f32).sqrt(),
                    "{name} {tokens}x{rows}x{k} {bits}-bit, stacked: {diff}"
                );
            }
        }
    }

    /// The final softcap in the head's launch equals the product then the tensor-op softcap.
    #[test]
    fn softcapped_matmul_matches_matmul_then_softcap() {
        for (name, device) in devices() {
            for (tokens, rows, k) in [(2, 50, 640), (40, 50, 640)] {
                let head = AffineMatrix::upload(matrix(rows, k, 32, 8, 7).0, &device);
                let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
                let got = read(head.softcapped_matmul_transposed(x.clone(), 3.0));
                let want = read(
                    crate::fused::reference::bounded_tanh(head.matmul_transposed(x).div_scalar(3.0)).mul_scalar(3.0),
                );
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(diff <= 1e-5, "{name} {tokens} tokens: {diff}");
                assert!(got.iter().all(|v| v.abs() <= 3.0), "{name}: capped");
            }
        }
    }

    /// The per-layer-input gate: `gelu_tanh(x·Wᵀ) · m` in one launch.
    #[test]
    fn gated_by_input_matches_matmul_then_gelu() {
        for (name, device) in devices() {
            for (tokens, rows, k) in [(3, 24, 256), (66, 24, 256)] {
                let gate = AffineMatrix::upload(matrix(rows, k, 64, 4, 6).0, &device);
                let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
                let m = Tensor::<2>::from_data(TensorData::new(inputs(tokens, rows), [tokens, rows]), &device);
                let got = read(gate.gelu_gated_by(x.clone(), m.clone()));
                let want = read(crate::fused::reference::gelu_tanh(gate.matmul_transposed(x)) * m);
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(diff <= 1e-4, "{name} {tokens} tokens: {diff}");
            }
        }
    }

    #[test]
    fn dequantized_rows_equal_the_host_values() {
        for (name, device) in devices() {
            let (t, dense) = matrix(12, 128, 32, 4, 5);
            let m = AffineMatrix::upload_rows(&t, 2..12, &device);
            let got = read(m.select_rows(&[7, 0, 3]));
            let want: Vec<f32> = [9usize, 2, 5].iter().flat_map(|&r| dense[r * 128..(r + 1) * 128].to_vec()).collect();
            assert_eq!(got, want, "{name}");

            // Many rows (a prefill): the gather spans hundreds of thread blocks.
            let (t, dense) = matrix(300, 1536, 64, 4, 9);
            let m = AffineMatrix::upload(t, &device);
            let ids: Vec<u32> = (0..70).map(|i| (i * 37 % 300) as u32).collect();
            let got = read(m.select_rows(&ids));
            let want: Vec<f32> =
                ids.iter().flat_map(|&r| dense[r as usize * 1536..(r as usize + 1) * 1536].to_vec()).collect();
            assert_eq!(got, want, "{name}: 70 rows");

            // 8-bit codes (GGUF's Q8_0 embedding, repacked).
            let (t, dense) = matrix(50, 640, 32, 8, 11);
            let m = AffineMatrix::upload(t, &device);
            let got = read(m.select_rows(&[49, 0, 17]));
            let want: Vec<f32> =
                [49usize, 0, 17].iter().flat_map(|&r| dense[r * 640..(r + 1) * 640].to_vec()).collect();
            assert_eq!(got, want, "{name}: 8-bit rows");

            // 6-bit codes, straddling words (GGUF's Q6_K embedding, repacked).
            let (t, dense) = matrix(20, 96, 16, 6, 13);
            let m = AffineMatrix::upload(t, &device);
            let got = read(m.select_rows(&[19, 4]));
            let want: Vec<f32> = [19usize, 4].iter().flat_map(|&r| dense[r * 96..(r + 1) * 96].to_vec()).collect();
            assert_eq!(got, want, "{name}: 6-bit rows");
        }
    }

    /// A table split in two blocks, ids on the device: each block writes the rows it holds into
    /// the shared output and leaves the others alone, whichever block an id falls in.
    #[test]
    fn rows_into_writes_only_the_rows_a_block_holds() {
        let Some(device) = crate::launch::test_gpu() else { return };
        let (t, dense) = matrix(12, 128, 32, 4, 21);
        let blocks =
            [(0, AffineMatrix::upload_rows(&t, 0..5, &device)), (5, AffineMatrix::upload_rows(&t, 5..12, &device))];
        let ids = [7u32, 0, 11, 4];
        let on_device = Tensor::<1, Int>::from_data(TensorData::new(ids.to_vec(), [4]), (&device, DType::U32));
        let row = |r: u32| dense[r as usize * 128..(r as usize + 1) * 128].to_vec();

        let mut out = Tensor::<2>::zeros([4, 128], &device);
        let (first, second) = (&blocks[0], &blocks[1]);
        second.1.rows_into(&mut out, &on_device, second.0);
        let want: Vec<f32> = ids.iter().flat_map(|&r| if r >= 5 { row(r) } else { vec![0.0; 128] }).collect();
        assert_eq!(read(out.clone()), want, "only the second block's rows");

        first.1.rows_into(&mut out, &on_device, first.0);
        let want: Vec<f32> = ids.iter().flat_map(|&r| row(r)).collect();
        assert_eq!(read(out), want, "both blocks");
    }

    /// A matrix in a symmetric format (GGUF's Q4_0, Q8_0 once repacked): f16 scales, some
    /// negative and some subnormal, biases `−offset · scale`.
    fn symmetric_matrix(rows: usize, k: usize, group: usize, bits: u32, offset: f32) -> (AffineTensor, Vec<f32>) {
        symmetric_matrix_scaled(rows, k, group, bits, offset, 1.0)
    }

    /// The same with every scale times `factor` (1.0001: products no half holds, as Q6_K's).
    fn symmetric_matrix_scaled(
        rows: usize,
        k: usize,
        group: usize,
        bits: u32,
        offset: f32,
        factor: f32,
    ) -> (AffineTensor, Vec<f32>) {
        let (t, _) = matrix(rows, k, group, bits, 7);
        let groups = t.scales.len();
        let scales: Vec<f32> = (0..groups)
            .map(|g| {
                let magnitude = if g % 7 == 3 { 3.0e-6 } else { 0.0004 + (g % 13) as f32 * 0.0007 };
                let s = if g % 5 == 1 { -magnitude } else { magnitude };
                half::f16::from_f32(s).to_f32() * factor
            })
            .collect();
        let biases: Vec<f32> = scales.iter().map(|&s| -offset * s).collect();
        let shape = vec![rows, k / group];
        let t = AffineTensor::new(
            "sym",
            t.params,
            (vec![rows, t.codes.len() / rows], t.codes),
            (shape.clone(), scales),
            (shape, biases),
        )
        .expect("consistent shapes");
        let dense = t.dequantize().data;
        (t, dense)
    }

    #[test]
    fn symmetric_scales_fit_halves_and_nothing_else_does() {
        let (q4_0, _) = symmetric_matrix(4, 96, 32, 4, 8.0);
        assert_eq!(ScaleLayout::fitting(&q4_0.scales, &q4_0.biases, 4, 3), ScaleLayout::Half { offset: 8 });
        let (q8_0, _) = symmetric_matrix(4, 64, 32, 8, 128.0);
        assert_eq!(ScaleLayout::fitting(&q8_0.scales, &q8_0.biases, 8, 2), ScaleLayout::Half { offset: 128 });
        // MLX's free biases; one bias off by an ulp.
        let (mlx, _) = matrix(4, 96, 32, 4, 3);
        assert_eq!(ScaleLayout::fitting(&mlx.scales, &mlx.biases, 4, 3), ScaleLayout::Pairs);
        let mut off = q4_0.biases.clone();
        off[5] = f32::from_bits(off[5].to_bits() + 1);
        assert_eq!(ScaleLayout::fitting(&q4_0.scales, &off, 4, 3), ScaleLayout::Pairs);
        // Q6_K's scales are products no half holds: one f32 a group, the bias still implied.
        let mut wide = q4_0.scales.clone();
        wide[2] = 0.1;
        let biases: Vec<f32> = wide.iter().map(|s| -32.0 * s).collect();
        assert_eq!(ScaleLayout::fitting(&wide, &biases, 8, 3), ScaleLayout::Single { offset: 32 });
    }

    /// `m`'s decode product, prompt products and gated pair (with `up`) against the host
    /// products of their dequantizations `dense` and `dense_up`.
    /// The product, and the gated pair both as two matrices and as one stacked `[gate; up]`
    /// (`stacked`), against the host's, for one token, a token tile and the prompt kernel.
    fn multiplies_like(
        m: &AffineMatrix,
        dense: &[f32],
        (up, stacked): (&AffineMatrix, &AffineMatrix),
        dense_up: &[f32],
        what: &str,
        gpu: &Device,
    ) {
        let (rows, k) = (m.rows(), m.k());
        for tokens in [1, 3, 19] {
            let x = inputs(tokens, k);
            let xt = || Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), gpu);
            let want = reference(&x, dense, tokens, rows, k);
            let close = |got: Vec<f32>, want: &[f32], kind: &str| {
                let scale = want.iter().map(|v| v.abs()).fold(1e-3, f32::max);
                let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{kind} {tokens}x{rows}x{k} {what}: {diff}");
            };
            close(read(m.matmul_transposed(xt())), &want, "product");
            let gelu = |v: f32| 0.5 * v * (1.0 + ((v + 0.044_715 * v * v * v) * 0.797_884_6).tanh());
            let ones = Tensor::<1>::ones([k], gpu);
            // RMSNorm with unit weight, as the reference sees it: x scaled per token.
            let normed: Vec<f32> = x
                .chunks(k)
                .flat_map(|row| {
                    let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / k as f32 + 1e-6).sqrt();
                    row.iter().map(move |v| v * inv).collect::<Vec<_>>()
                })
                .collect();
            let gated_normed: Vec<f32> = reference(&normed, dense, tokens, rows, k)
                .iter()
                .zip(&reference(&normed, dense_up, tokens, rows, k))
                .map(|(&g, &u)| gelu(g) * u)
                .collect();
            close(read(m.normed_gated_matmul(up, xt(), &ones, 1e-6)), &gated_normed, "gated");
            close(read(stacked.normed_gated_stacked(xt(), &ones, 1e-6)), &gated_normed, "gated, stacked");
        }
    }

    /// `[gate; up]` as one matrix.
    fn stacked(gate: &AffineTensor, up: &AffineTensor, device: &Device) -> AffineMatrix {
        let joint = AffineTensor::stack_rows(vec![gate.clone(), up.clone()]).expect("packed alike");
        AffineMatrix::upload(joint, device)
    }

    /// Random Q6_K blocks (codes and byte scales at random, each block's `d` a normal half) as
    /// GGUF stores them, `rows` rows of `k` values.
    fn q6_k_blocks(rows: usize, k: usize, seed: u32) -> Vec<u8> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let mut bytes: Vec<u8> = (0..rows * k / 256 * 210).map(|_| next() as u8).collect();
        // f16 bits: 0.0499, −0.00189, 0.5, 0.0699.
        let halves: [u16; 4] = [0x2A66, 0x97BE, 0x3800, 0x2C7B];
        for (b, block) in bytes.chunks_exact_mut(210).enumerate() {
            block[208..210].copy_from_slice(&halves[b % halves.len()].to_le_bytes());
        }
        bytes
    }

    /// GGUF's Q6_K repacked keeps the file's own size on the device (6-bit codes, a byte scale a
    /// group of 16, a half a block: 210 bytes a block of 256, E2B's 6 a row) and multiplies like its host
    /// dequantization; runs that do not factor fall back to one f32 a group.
    #[test]
    fn q6_k_scales_keep_the_file_size() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        // A row of an odd number of blocks pads its last half to a word: 2 bytes a row more.
        for (rows, k, padding) in [(5, 512, 0), (9, 1536, 0), (3, 768, 2)] {
            let repack = |seed| {
                let blocks = q6_k_blocks(rows, k, seed);
                let t = hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, rows, k)
                    .expect("whole blocks")
                    .expect("Q6_K repacks");
                let dense = t.dequantize().data;
                (t, dense)
            };
            let ((t, dense), (up, dense_up)) = (repack(3), repack(4));
            let groups = k / 16;
            assert_eq!(ScaleLayout::fitting(&t.scales, &t.biases, 6, groups), ScaleLayout::Factored { offset: 32 });
            let joint = stacked(&t, &up, &gpu);
            let (m, up) = (AffineMatrix::upload(t, &gpu), AffineMatrix::upload(up, &gpu));
            assert_eq!(m.scale_layout(), Some(ScaleLayout::Factored { offset: 32 }));
            assert_eq!(m.device_bytes(), rows * (k / 256 * 210 + padding), "{rows}x{k}: the file's bytes");
            assert_eq!(read(m.dequantize()), dense, "rows of {rows}x{k} Q6_K");
            multiplies_like(&m, &dense, (&up, &joint), &dense_up, "Q6_K", &gpu);
        }
        // One scale that is no byte multiple of its run's half: that run, so the matrix, stays f32.
        let blocks = q6_k_blocks(2, 256, 5);
        let t = hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, 2, 256)
            .expect("whole blocks")
            .expect("Q6_K repacks");
        let mut scales = t.scales.clone();
        scales[3] = 0.1;
        let biases: Vec<f32> = scales.iter().map(|s| -32.0 * s).collect();
        assert_eq!(ScaleLayout::fitting(&scales, &biases, 6, 16), ScaleLayout::Single { offset: 32 });
    }

    /// The residual update and the next normed projection, fused (one token on the GPU) or in two
    /// steps (the CPU, or two tokens), give the host's updated residual and product, alone or as
    /// the gated pair of a stacked `[gate; up]`: Q4_0's half scales, Q6_K's factored ones and MLX's
    /// pairs, 1 to 8 rows a block, with and without a layer scalar.
    #[test]
    fn a_residual_update_fused_into_the_product_changes_nothing() {
        let q6_k = || {
            let blocks = q6_k_blocks(24, 512, 9);
            hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, 24, 512)
                .expect("whole blocks")
                .expect("Q6_K repacks")
        };
        let inverse_rms = |v: &[f32]| 1.0 / (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32 + 1e-6).sqrt();
        for (device_name, device) in devices() {
            let matrices = [
                ("Q4_0", symmetric_matrix(40, 512, 32, 4, 8.0).0),
                ("Q6_K", q6_k()),
                ("MLX", matrix(33, 512, 64, 4, 5).0),
            ];
            for (name, t) in matrices {
                // The matrix, and stacked on itself reversed as a gated pair `[t; t′]`.
                let up = {
                    let mut up = t.clone();
                    let words = up.words_per_row();
                    let rows: Vec<&[u32]> = t.codes.chunks(words).rev().collect();
                    up.codes = rows.concat();
                    up
                };
                let joint = stacked(&t, &up, &device);
                let m = AffineMatrix::upload(t, &device);
                let (rows, k) = (m.rows(), m.k());
                let dense = read(m.dequantize());
                let dense_up = read(AffineMatrix::upload(up, &device).dequantize());
                let post: Vec<f32> = (0..k).map(|i| 0.5 + (i % 11) as f32 / 10.0).collect();
                let pre: Vec<f32> = (0..k).map(|i| 1.5 - (i % 7) as f32 / 10.0).collect();
                let norms =
                    Tensor::<1>::from_data(TensorData::new([post.clone(), pre.clone()].concat(), [2 * k]), &device);
                // One token takes the fused kernel where it runs; two take the two steps everywhere.
                for tokens in [1, 2] {
                    let x: Vec<f32> = (0..tokens * k).map(|i| ((i * 31 % 97) as f32 - 48.0) / 20.0).collect();
                    let delta: Vec<f32> = (0..tokens * k).map(|i| ((i * 17 % 89) as f32 - 44.0) / 7.0).collect();
                    let tensor =
                        |values: &[f32]| Tensor::<2>::from_data(TensorData::new(values.to_vec(), [tokens, k]), &device);
                    for scale in [1.0, 0.75] {
                        // The host's x' = (x + RMSNorm(delta)·post)·scale and RMSNorm(x')·pre · Wᵀ.
                        let mut want_x = vec![0.0; tokens * k];
                        let mut normed = vec![0.0; tokens * k];
                        for s in 0..tokens {
                            let (x, delta) = (&x[s * k..][..k], &delta[s * k..][..k]);
                            let inv_delta = inverse_rms(delta);
                            let updated = &mut want_x[s * k..][..k];
                            for i in 0..k {
                                updated[i] = (x[i] + delta[i] * inv_delta * post[i]) * scale;
                            }
                            let inv = inverse_rms(updated);
                            for i in 0..k {
                                normed[s * k + i] = updated[i] * inv * pre[i];
                            }
                        }
                        let want = reference(&normed, &dense, tokens, rows, k);
                        let gelu = |v: f32| 0.5 * v * (1.0 + ((v + 0.044_715 * v * v * v) * 0.797_884_6).tanh());
                        let want_gated: Vec<f32> = want
                            .iter()
                            .zip(&reference(&normed, &dense_up, tokens, rows, k))
                            .map(|(&g, &u)| gelu(g) * u)
                            .collect();
                        // (The CPU has no blocks of rows.)
                        let blocks: &[u32] = if device_name == "cpu" { &[1] } else { &[1, 2, 4, 8] };
                        for (gated, rows_per_group) in
                            [false, true].into_iter().flat_map(|g| blocks.iter().map(move |&r| (g, r)))
                        {
                            let matrix = if gated { &joint } else { &m };
                            let (got_x, got) = matrix.residual_normed_matmul_in_groups(
                                gated,
                                tensor(&x),
                                tensor(&delta),
                                &norms,
                                1e-6,
                                scale,
                                rows_per_group,
                            );
                            let what = format!(
                                "{name} on {device_name}, {tokens} tokens, {rows_per_group} rows a block, scale {scale}, \
                                 gated {gated}"
                            );
                            let want = if gated { &want_gated } else { &want };
                            let close = |got: &[f32], want: &[f32], part: &str| {
                                let top = want.iter().map(|v| v.abs()).fold(1e-3, f32::max);
                                let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                                assert!(
                                    got.len() == want.len() && diff <= 1e-5 * top,
                                    "{part} of {what}: {diff} of {top}"
                                );
                            };
                            close(&read(got_x), &want_x, "the residual");
                            close(&read(got), want, "the product");
                        }
                    }
                }
            }
        }
    }

    /// Symmetric formats' scales on the device (half scales: 4.5 bits a weight for Q4_0, 5 with
    /// the odd group's padding here; one f32 scale a group for Q6_K's products, 10 bits): the
    /// rows, the decode product, the prompt products and the gated pair against the host
    /// dequantization.
    #[test]
    fn symmetric_scales_multiply_like_the_host_dequantization() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        let cases = [
            (9, 96, 32, 4, 8.0, 1.0),
            (40, 256, 32, 4, 8.0, 1.0),
            (5, 64, 32, 8, 128.0, 1.0),
            (7, 64, 16, 8, 32.0, 1.0001),
        ];
        for (rows, k, group, bits, offset, factor) in cases {
            let (t, dense) = symmetric_matrix_scaled(rows, k, group, bits, offset, factor);
            let (up, dense_up) = symmetric_matrix_scaled(rows, k, group, bits, offset, factor);
            let joint = stacked(&t, &up, &gpu);
            let m = AffineMatrix::upload(t, &gpu);
            let up = AffineMatrix::upload(up, &gpu);
            let offset_code = offset as u32;
            let (layout, scale_words) = if factor == 1.0 {
                (ScaleLayout::Half { offset: offset_code }, rows * (k / group).div_ceil(2))
            } else {
                (ScaleLayout::Single { offset: offset_code }, rows * k / group)
            };
            assert_eq!(m.scale_layout(), Some(layout));
            assert_eq!(m.device_bytes(), (rows * k * bits as usize / 32 + scale_words) * 4);
            assert_eq!(read(m.dequantize()), dense, "rows of {rows}x{k}/{group} {bits}-bit");
            multiplies_like(&m, &dense, (&up, &joint), &dense_up, &format!("{bits}-bit /{group}"), &gpu);
        }
    }
}
