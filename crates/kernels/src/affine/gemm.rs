//! The prefill product of a packed affine matrix: a tiled dequantize-GEMM.
//!
//! A prompt's tokens all multiply the same weights. The GEMV-style kernel in [`crate::affine`]
//! decodes a row's codes again for every 8 tokens. Here a block of `threads` owns a tile of
//! `threads · rows_per_thread` output rows × `tokens` tokens and walks `k` in slices of `depth`: per
//! slice the block stages the tile's inputs in shared memory, then each thread decodes the code
//! words of its own rows once (`scale·q + bias`, in registers) and multiplies every value by all
//! the tile's tokens, accumulating in f32. A weight is decoded once per 16 tokens (instead of 8);
//! an input is read from global memory once per tile of rows, then broadcast from shared memory.
//!
//! The same fusions as the GEMV kernel, as its epilogue: the RMS pre-norm (its weight folded into
//! the decoded weights, `Σx²` summed from the staged inputs), the MLP's gate and up matrices in one
//! pass with the GELU, the per-layer-input gate, the final softcap.
//!
//! Shared memory: `depth · tokens + tokens` f32 (1.1 KiB for the default 16 × 16); 64 threads:
//! within WebGPU's minimum limits. The shape was tuned on lavapipe (a CPU); a GPU run may prefer others (the bench bundle
//! measures it).

use burn::tensor::Shape;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::launch::{bounded_tanh, bytes_of, chunk_words_of, code_of, empty_output, grid};
use crate::scales::{ScaleLayout, group_bias, group_scale};
use crate::tuning::{self, GemmTile};

/// The tile for a matrix of `rows` (every thread multiplies its rows by the same tokens, so a
/// staged input is read at an address that is the same for the whole block: one broadcast read
/// serves all): 8 rows per thread (128 accumulators) × 16 tokens × slices of 16, on 64 threads (a
/// tile of 512 rows), or on 32 where 512 would leave most threads idle (the 256-row k/v and
/// per-layer-input gate); 4 rows per thread in gated launches, which keep two sets of
/// accumulators. Measured on lavapipe (benches/RESULTS.md): at 16 tokens per tile 2 rows per
/// thread ran at 2.1 GFLOP/s, 4 at 4.3, 8 at 8.9; on 256 rows, 32 threads × 8 rows ran at
/// 5.7–6.1 GFLOP/s where 64 × 4 ran at 3.5–4.2. `hearth bench --gemm-tile` tries others
/// ([`crate::tuning`]).
fn tile_for(rows: usize, gated: bool) -> GemmTile {
    if let Some(tile) = tuning::gemm_tile() {
        return tile;
    }
    let (threads, rows_per_thread) = match (gated, rows) {
        (true, _) => (64, 4),
        (false, ..1024) => (32, 8),
        (false, _) => (64, 8),
    };
    GemmTile { threads, rows_per_thread, tokens: 16, depth: 16 }
}

/// Prompts from this many tokens (one default tile) take the tiled kernel: below it a tile would
/// be part empty and the 8-token kernel reads the weights about as often.
pub(crate) const MIN_TOKENS: usize = 16;

/// What the tiled kernel fuses around `x · Wᵀ` (the GEMV kernel's options).
#[derive(Clone, Copy)]
pub(crate) struct Epilogue {
    pub normed: bool,
    pub gated: bool,
    /// Where the up matrix's rows start in its codes (0: its own matrix; the gate's rows for a
    /// stacked `[gate; up]`, whose first rows alone are the product's).
    pub up_row_offset: usize,
    pub gated_by_input: bool,
    pub softcap: Option<f32>,
    pub eps: f32,
}

/// `out[s, r] = Σ_k x[s, k] · (scale[r, g(k)] · q[r, k] + bias[r, g(k)])` with the epilogue;
/// grid: (row tiles x, row tiles y, token tiles). See the module's documentation.
#[cube(launch)]
// `if comptime { if runtime }` keeps the comptime branch out of the generated shader; `+=` is
// not available on indexed cube arrays.
#[allow(clippy::too_many_arguments, clippy::collapsible_if, clippy::assign_op_pattern)]
fn affine_gemm_kernel(
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
    #[comptime] rows_per_thread: u32,
    #[comptime] tile_tokens: u32,
    #[comptime] depth: u32,
) {
    let chunk_words = comptime!(chunk_words_of(bits));
    let per_chunk = comptime!(chunk_words_of(bits) * 32 / bits);
    let slice_chunks = comptime!(depth / per_chunk);
    let x_loads = comptime!(tile_tokens * depth / threads);
    let words = k * bits / 32;
    let chunks = k / per_chunk;
    let groups = k / group;

    let first_row = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads * rows_per_thread;
    let first_token = CUBE_POS_Z * tile_tokens;
    let thread = UNIT_POS_X;

    // The tile's inputs for one slice of k, `depth`-major: [depth][tokens].
    let mut xs = Shared::<[f32]>::new_slice((depth * tile_tokens) as usize);
    let mut inv_rms = Shared::<[f32]>::new_slice(tile_tokens as usize);

    // acc[r·tokens + t]: row `first_row + thread + threads·r`, token `first_token + t`.
    let mut acc = Array::<f32>::new((rows_per_thread * tile_tokens) as usize);
    let mut acc_up = Array::<f32>::new((rows_per_thread * tile_tokens) as usize);
    #[unroll]
    for e in 0..rows_per_thread * tile_tokens {
        acc[e as usize] = 0.0;
        acc_up[e as usize] = 0.0;
    }
    let mut squares = f32::new(0.0);

    let mut k0 = 0u32;
    while k0 < k {
        // Stage the inputs: consecutive threads read consecutive k of a token.
        #[unroll]
        for e in 0..x_loads {
            let at = thread + e * threads;
            let token_local = at / depth;
            let kk = at % depth;
            let token = first_token + token_local;
            let mut value = f32::new(0.0);
            if token < tokens && k0 + kk < k {
                value = x[(token * k + k0 + kk) as usize];
            }
            xs[(kk * tile_tokens + token_local) as usize] = value;
        }
        sync_cube();
        if normed {
            if thread < tile_tokens {
                #[unroll]
                for kk in 0..depth {
                    let value = xs[(kk * tile_tokens + thread) as usize];
                    squares += value * value;
                }
            }
        }

        // Chunk by chunk of the slice: this thread's rows' chunks of codes (a chunk never
        // straddles two groups), then per value the tile's inputs, read once for all the rows.
        #[unroll]
        for chunk_in_slice in 0..slice_chunks {
            let c = k0 / per_chunk + chunk_in_slice;
            let mut chunk = Array::<u32>::new((rows_per_thread * chunk_words) as usize);
            let mut scale = Array::<f32>::new(rows_per_thread as usize);
            let mut bias = Array::<f32>::new(rows_per_thread as usize);
            let mut chunk_up = Array::<u32>::new((rows_per_thread * chunk_words) as usize);
            let mut scale_up = Array::<f32>::new(rows_per_thread as usize);
            let mut bias_up = Array::<f32>::new(rows_per_thread as usize);
            #[unroll]
            for r in 0..rows_per_thread {
                let row = first_row + thread + threads * r;
                #[unroll]
                for i in 0..chunk_words {
                    chunk[(r * chunk_words + i) as usize] = 0u32;
                    chunk_up[(r * chunk_words + i) as usize] = 0u32;
                }
                scale[r as usize] = 0.0;
                bias[r as usize] = 0.0;
                scale_up[r as usize] = 0.0;
                bias_up[r as usize] = 0.0;
                if row < rows && c < chunks {
                    #[unroll]
                    for i in 0..chunk_words {
                        chunk[(r * chunk_words + i) as usize] = codes[(row * words + c * chunk_words + i) as usize];
                    }
                    let g = (c * per_chunk) / group;
                    let group_scale_value = group_scale(scale_bias, row, g, groups, scale_kind);
                    scale[r as usize] = group_scale_value;
                    bias[r as usize] = group_bias(scale_bias, row, g, groups, group_scale_value, offset, scale_kind);
                    if gated {
                        let up_row = row + up_row_offset;
                        #[unroll]
                        for i in 0..chunk_words {
                            chunk_up[(r * chunk_words + i) as usize] =
                                codes_up[(up_row * words + c * chunk_words + i) as usize];
                        }
                        let up_scale = group_scale(scale_bias_up, up_row, g, groups, scale_kind);
                        scale_up[r as usize] = up_scale;
                        bias_up[r as usize] =
                            group_bias(scale_bias_up, up_row, g, groups, up_scale, offset, scale_kind);
                    }
                }
            }
            #[unroll]
            for j in 0..per_chunk {
                let kk = chunk_in_slice * per_chunk + j;
                let mut norm = f32::new(1.0);
                if normed {
                    if k0 + kk < k {
                        norm = aux[(k0 + kk) as usize];
                    }
                }
                let mut inputs = Array::<f32>::new(tile_tokens as usize);
                #[unroll]
                for t in 0..tile_tokens {
                    inputs[t as usize] = xs[(kk * tile_tokens + t) as usize];
                }
                #[unroll]
                for r in 0..rows_per_thread {
                    let code = f32::cast_from(code_of(&chunk, r * chunk_words, j, bits));
                    let weight = (scale[r as usize] * code + bias[r as usize]) * norm;
                    let mut weight_up = f32::new(0.0);
                    if gated {
                        let code_up = f32::cast_from(code_of(&chunk_up, r * chunk_words, j, bits));
                        weight_up = (scale_up[r as usize] * code_up + bias_up[r as usize]) * norm;
                    }
                    #[unroll]
                    for t in 0..tile_tokens {
                        let at = (r * tile_tokens + t) as usize;
                        acc[at] = acc[at] + weight * inputs[t as usize];
                        if gated {
                            acc_up[at] = acc_up[at] + weight_up * inputs[t as usize];
                        }
                    }
                }
            }
        }
        sync_cube();
        k0 += depth;
    }

    if normed {
        if thread < tile_tokens {
            inv_rms[thread as usize] = 1.0 / f32::sqrt(squares / f32::cast_from(k) + eps);
        }
        sync_cube();
    }
    #[unroll]
    for r in 0..rows_per_thread {
        let row = first_row + thread + threads * r;
        #[unroll]
        for t in 0..tile_tokens {
            let token = first_token + t;
            if token < tokens && row < rows {
                let at = (r * tile_tokens + t) as usize;
                let mut value = acc[at];
                let mut value_up = acc_up[at];
                if normed {
                    let inv = inv_rms[t as usize];
                    value *= inv;
                    value_up *= inv;
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
}

/// Launches the tiled kernel: `x` `[S, k]` times the packed `[rows, k]` → `[S, rows]`. The
/// arguments are those of `AffineKernels::affine_matmul` (`launch.rs`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    codes: CubeTensor,
    codes_up: CubeTensor,
    (scale_bias, scale_bias_up, layout): (CubeTensor, CubeTensor, ScaleLayout),
    x: CubeTensor,
    aux: CubeTensor,
    epilogue: Epilogue,
    group: usize,
    bits: u32,
) -> CubeTensor {
    let x = into_contiguous(x);
    let rows = codes.meta.shape()[0] - epilogue.up_row_offset;
    let (tokens, k) = (x.meta.shape()[0], x.meta.shape()[1]);
    let client = x.client.clone();
    let out = empty_output(&x, Shape::new([tokens, rows]));
    let mut tile = tile_for(rows, epilogue.gated);
    // A slice of k holds whole chunks of codes (16 values of 6-bit codes).
    let per_chunk = chunk_words_of(bits) * 32 / bits;
    if !tile.depth.is_multiple_of(per_chunk) {
        tile.depth = tile.depth.next_multiple_of(per_chunk);
    }
    let (grid_x, grid_y) = grid((rows as u32).div_ceil(tile.threads * tile.rows_per_thread));
    // The weights once a token tile, the input once a block of rows.
    let token_tiles = (tokens as u32).div_ceil(tile.tokens) as u64;
    let mut weights = bytes_of(&codes) + bytes_of(&scale_bias);
    if epilogue.gated && epilogue.up_row_offset == 0 {
        weights += bytes_of(&codes_up) + bytes_of(&scale_bias_up);
    }
    crate::launch::declare_reads(weights * token_tiles + bytes_of(&x) * u64::from(grid_x * grid_y));
    affine_gemm_kernel::launch(
        &client,
        CubeCount::Static(grid_x, grid_y, (tokens as u32).div_ceil(tile.tokens)),
        CubeDim::new_1d(tile.threads),
        into_contiguous(codes).into_buffer_arg(),
        into_contiguous(scale_bias).into_buffer_arg(),
        into_contiguous(codes_up).into_buffer_arg(),
        into_contiguous(scale_bias_up).into_buffer_arg(),
        x.into_buffer_arg(),
        into_contiguous(aux).into_buffer_arg(),
        out.clone().into_buffer_arg(),
        rows as u32,
        epilogue.up_row_offset as u32,
        k as u32,
        tokens as u32,
        epilogue.eps,
        epilogue.softcap.unwrap_or(1.0),
        layout.offset(),
        layout.kind(),
        epilogue.normed,
        epilogue.gated,
        epilogue.gated_by_input,
        epilogue.softcap.is_some(),
        group as u32,
        bits,
        tile.threads,
        tile.rows_per_thread,
        tile.tokens,
        tile.depth,
    );
    out
}
