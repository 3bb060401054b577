//! The GEMV-style kernels of a packed affine matrix (decode, and prompts where the GEMM does not
//! apply): a row's codes read once and dequantized in registers, the fusions as their epilogue.

use cubecl::prelude::*;

use crate::fused::inverse_rms;
use crate::launch::{bounded_tanh, chunk_words_of, code_of, load_chunk};
use crate::scales::{group_bias, group_scale};

/// Threads that share one output row (a power of two: they sum in a tree).
pub(super) const THREADS: u32 = 64;
/// Tokens one thread block multiplies at once (prefill); their weights are dequantized once.
pub(super) const TOKEN_TILE: u32 = 8;
/// Rows of the GEMV-style kernel per thread block, unless `tuning::set_gemv_rows` says otherwise:
/// one (64 lanes a row) until a GPU's measurement shows more to be faster.
pub(super) const DEFAULT_ROWS_PER_GROUP: u32 = 1;

/// Where a thread of a GEMV-style block works: the block's index in the grid, the output row it
/// helps multiply (`threads / lanes` rows a block, `lanes` threads a row) and its lane in that row.
#[derive(CubeType, Clone, Copy)]
pub(super) struct GemvPlace {
    block: u32,
    row: u32,
    segment: u32,
    lane: u32,
}

#[cube]
pub(super) fn gemv_place(#[comptime] threads: u32, #[comptime] lanes: u32) -> GemvPlace {
    let rows_per_group = comptime!(threads / lanes);
    let block = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let segment = UNIT_POS_X / lanes;
    GemvPlace { block, row: block * rows_per_group + segment, segment, lane: UNIT_POS_X % lanes }
}

/// Chunk `c` of row `row` (`k` codes a row) and its group's dequantization: `(codes, scale, bias)`,
/// a code `q` standing for `scale · q + bias`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn chunk_terms(
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
pub(super) fn up_chunk_terms(
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
pub(super) fn affine_matmul_kernel(
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
pub(super) fn affine_residual_matmul_kernel(
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

/// One token's post-feed-forward update and Gemma 4's per-layer-input gate that reads it, in one
/// dispatch: `x' = x + RMSNorm(delta)·w_post` (the MLP's output joining the residual stream, as
/// `fused::add_rms_norm` computes it) and `gelu_tanh(x'·Wᵀ) · m` (the gate, never normed; `m`
/// `[1, rows]` the layer's per-layer input). Both go to the one output binding: `x'` at `out[0..k]`
/// (the first block writes it) and the product at `out[product_at..product_at + rows]`, so the
/// kernel stays within WebGPU's 8 storage buffers (one is cubecl's); the host reads the two parts
/// as two tensors at their offsets. Every block computes `x'` itself with the same sums in the same
/// order as the one it writes. Grid and lanes as [`affine_residual_matmul_kernel`]'s.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn affine_residual_gated_by_kernel(
    codes: &[u32],
    scale_bias: &[u32],
    x: &[f32],
    delta: &[f32],
    post_norm: &[f32],
    multiplier: &[f32],
    out: &mut [f32],
    rows: u32,
    k: u32,
    product_at: u32,
    eps: f32,
    offset: f32,
    #[comptime] scale_kind: u32,
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
    if row < rows {
        let mut c = lane;
        while c < chunks {
            let (chunk, group_scale_value, bias) =
                chunk_terms(codes, scale_bias, row, c, k, offset, scale_kind, group, bits);
            let base = c * per_chunk;
            let mut dot = 0.0;
            let mut sum = 0.0;
            #[unroll]
            for j in 0..per_chunk {
                let i = (base + j) as usize;
                let updated = x[i] + delta[i] * inv_delta * post_norm[i];
                dot += f32::cast_from(code_of(&chunk, 0u32, j, bits)) * updated;
                sum += updated;
            }
            acc += group_scale_value * dot + bias * sum;
            c += lanes;
        }
    }

    let mut partial = Shared::<[f32]>::new_slice(threads as usize);
    partial[thread as usize] = acc;
    sync_cube();
    #[unroll]
    for level in 0..levels {
        let stride = lanes >> (level + 1);
        if lane < stride {
            let at = thread as usize;
            let sum = partial[at] + partial[at + stride as usize];
            partial[at] = sum;
        }
        sync_cube();
    }
    if lane == 0 && row < rows {
        let value = partial[thread as usize];
        let tanh = bounded_tanh((value + 0.044_715 * value * value * value) * 0.797_884_6);
        out[(product_at + row) as usize] = 0.5 * value * (1.0 + tanh) * multiplier[row as usize];
    }
    if block == 0 {
        let mut i = thread;
        while i < k {
            let at = i as usize;
            out[at] = x[at] + delta[at] * inv_delta * post_norm[at];
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
pub(super) fn affine_rows_kernel(
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
