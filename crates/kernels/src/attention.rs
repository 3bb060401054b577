//! Attention of one new token (decode) in one kernel: the query's RMSNorm and RoPE, scores,
//! softcap, mask, softmax and the weighted sum of values, for every query head, without writing
//! the scores to device memory. It replaces the query's norm + RoPE, two matmuls, two layout
//! copies and the softmax kernel (6 dispatches a layer).
//!
//! One thread block per query head walks the keys in chunks held in shared memory with an online
//! softmax: a running maximum and sum, and per-thread accumulators for a slice of the head's
//! dimensions, rescaled when the maximum grows. Context length is therefore unbounded by shared
//! memory. Prefill (many queries) keeps the matmul path, where batching pays.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::chunk_table::ChunkTable;
use crate::fused::HeadColumns;
use crate::launch::{block_reduce, bounded_tanh, empty_output, has_fused_kernels};

/// Threads per query head (a power of two: reductions are trees).
const THREADS: u32 = 64;
/// Keys scored per pass; their weights live in shared memory (4 KiB).
const CHUNK: u32 = 1024;
/// The largest head the kernel takes (Gemma 4's global layers: 512); 2 KiB of shared memory.
const MAX_HEAD_DIM: u32 = 512;

/// `out[h] = Σ_t softmax_t(softcap(q_h·k_t · scale) + mask_t) · v_t` for query head `h`, with
/// key/value head `h / group` and `q_h = RoPE(RMSNorm(q_raw_h) · q_norm)` (`table`: the token's
/// [`crate::ChunkTable`] `[2, 2d]`, its cos then sin, then its position and the key count `n`;
/// head h of q at `q_offset + h·d`, q may be the start of a joint q/k/v projection). Keys and
/// values are the first `n` rows of `[Hkv, capacity, d]` with `kv_stride` elements between heads
/// (a cache); out is `[H, d]`. `n` comes from the table, so a recorded step replays at the next
/// position. Seven storage buffers: WebGPU guarantees eight per stage and cubecl keeps one.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn decode_attention_kernel(
    q: &[f32],
    q_norm: &[f32],
    table: &[f32],
    keys: &[f32],
    values: &[f32],
    mask: &[f32],
    out: &mut [f32],
    group: u32,
    d: u32,
    q_offset: u32,
    kv_stride: u32,
    scale: f32,
    cap: f32,
    eps: f32,
    #[comptime] softcap: bool,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
    #[comptime] dims_per_thread: u32,
) {
    let head = CUBE_POS_X;
    let thread = UNIT_POS_X;
    let q_base = q_offset + head * d;
    let out_base = head * d;
    let kv_base = (head / group) * kv_stride;
    let n = u32::cast_from(table[(2 * d + 1) as usize]);

    // The query head, normed and rotated, into shared memory (read once per key below).
    let mut query = Shared::<[f32]>::new_slice(MAX_HEAD_DIM as usize);
    let mut square = f32::new(0.0);
    let mut i = thread;
    while i < d {
        let v = q[(q_base + i) as usize];
        square += v * v;
        i += threads;
    }
    let inv_rms = 1.0 / f32::sqrt(block_reduce(square, false, threads, levels) / f32::cast_from(d) + eps);
    let half = d / 2;
    let mut i = thread;
    while i < d {
        let partner = (i + half) % d;
        let normed = q[(q_base + i) as usize] * inv_rms * q_norm[i as usize];
        let mut rotated = q[(q_base + partner) as usize] * inv_rms * q_norm[partner as usize];
        if i < half {
            rotated = -rotated;
        }
        query[i as usize] = normed * table[i as usize] + rotated * table[(d + i) as usize];
        i += threads;
    }
    sync_cube();

    let mut weights = Shared::<[f32]>::new_slice(CHUNK as usize);
    let mut acc = Array::<f32>::new(dims_per_thread as usize);
    #[unroll]
    for j in 0..dims_per_thread {
        acc[j as usize] = 0.0;
    }
    let mut running_max = f32::min_value();
    let mut running_sum = f32::new(0.0);
    let mut start = 0u32;
    while start < n {
        // Scores of this chunk's keys, one key per thread at a time.
        let mut local_max = f32::min_value();
        let mut t = thread;
        while t < CHUNK {
            let key = start + t;
            let mut score = f32::min_value();
            if key < n {
                let row = kv_base + key * d;
                let mut dot = f32::new(0.0);
                for i in 0..d {
                    dot += query[i as usize] * keys[(row + i) as usize];
                }
                score = dot * scale;
                if softcap {
                    score = bounded_tanh(score / cap) * cap;
                }
                score += mask[key as usize];
            }
            weights[t as usize] = score;
            local_max = f32::max(local_max, score);
            t += threads;
        }
        // The reductions' barriers also publish `weights` to every thread.
        let new_max = f32::max(running_max, block_reduce(local_max, true, threads, levels));
        let correction = f32::exp(running_max - new_max);
        let mut local_sum = f32::new(0.0);
        let mut t = thread;
        while t < CHUNK {
            let p = f32::exp(weights[t as usize] - new_max);
            weights[t as usize] = p;
            local_sum += p;
            t += threads;
        }
        running_sum = running_sum * correction + block_reduce(local_sum, false, threads, levels);
        running_max = new_max;
        let count = u32::min(CHUNK, n - start);
        #[unroll]
        for j in 0..dims_per_thread {
            let dim = thread + j * threads;
            if dim < d {
                let mut sum = acc[j as usize] * correction;
                for t in 0..count {
                    sum += weights[t as usize] * values[(kv_base + (start + t) * d + dim) as usize];
                }
                acc[j as usize] = sum;
            }
        }
        // Every thread is done with this chunk's weights before the next overwrites them.
        sync_cube();
        start += CHUNK;
    }
    #[unroll]
    for j in 0..dims_per_thread {
        let dim = thread + j * threads;
        if dim < d {
            out[(out_base + dim) as usize] = acc[j as usize] / running_sum;
        }
    }
}

#[backend_extension(Cube)]
pub trait AttentionKernels: Backend {
    /// One query token: `heads` heads of q `[1, total]` from column `column`, before their norm
    /// (`q_norm` `[d]`, `eps`) and RoPE (the token's chunk table `[2, 2d]`, which also holds the
    /// key count `n`), keys and values `[Hkv, ≥ n, d]`, mask `[1, ≥ n]` → `[1, H·d]`. `cap` ≤ 0
    /// means no softcap.
    #[allow(clippy::too_many_arguments)]
    fn fused_decode_attention(
        q: FloatTensor<Self>,
        heads: usize,
        column: usize,
        q_norm: FloatTensor<Self>,
        table: FloatTensor<Self>,
        eps: f32,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        scale: f32,
        cap: f32,
    ) -> FloatTensor<Self>;
}

/// Keys or values as the kernel reads them: rows of `d` contiguous, heads `stride` apart. A view
/// of the first `n` positions of a larger cache qualifies as it is; anything else is copied.
fn head_strided(t: CubeTensor) -> (CubeTensor, usize) {
    let strides = t.meta.strides().to_vec();
    let d = t.meta.shape()[2];
    if strides[2] == 1 && strides[1] == d {
        let stride = strides[0];
        (t, stride)
    } else {
        let t = into_contiguous(t);
        let stride = t.meta.shape()[1] * d;
        (t, stride)
    }
}

impl AttentionKernels for CubeBackend {
    fn fused_decode_attention(
        q: CubeTensor,
        heads: usize,
        column: usize,
        q_norm: CubeTensor,
        table: CubeTensor,
        eps: f32,
        keys: CubeTensor,
        values: CubeTensor,
        mask: CubeTensor,
        scale: f32,
        cap: f32,
    ) -> CubeTensor {
        let q = into_contiguous(q);
        let d = q_norm.meta.shape()[0];
        let (kv_heads, rows) = (keys.meta.shape()[0], keys.meta.shape()[1]);
        let (mut keys, mut stride) = head_strided(keys);
        let (mut values, value_stride) = head_strided(values);
        if value_stride != stride {
            // One stride for both.
            (keys, values, stride) = (into_contiguous(keys), into_contiguous(values), rows * d);
        }
        let client = q.client.clone();
        let out = empty_output(&q, burn::tensor::Shape::new([1, heads * d]));
        decode_attention_kernel::launch(
            &client,
            CubeCount::Static(heads as u32, 1, 1),
            CubeDim::new_1d(THREADS),
            q.into_buffer_arg(),
            into_contiguous(q_norm).into_buffer_arg(),
            into_contiguous(table).into_buffer_arg(),
            keys.into_buffer_arg(),
            values.into_buffer_arg(),
            into_contiguous(mask).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            (heads / kv_heads) as u32,
            d as u32,
            column as u32,
            stride as u32,
            scale,
            cap,
            eps,
            cap > 0.0,
            THREADS,
            THREADS.trailing_zeros(),
            (d as u32).div_ceil(THREADS),
        );
        out
    }
}

/// Whether [`decode_attention`] runs on `device` for `tokens` new tokens of heads of `head_dim`
/// (one token, on a cubecl backend, heads up to 512).
pub fn fused_decode_applies(device: &burn::tensor::Device, tokens: usize, head_dim: usize) -> bool {
    tokens == 1 && head_dim <= MAX_HEAD_DIM as usize && head_dim.is_multiple_of(2) && has_fused_kernels(device)
}

/// A decoded token's query as the q projection gives it, with what turns it into the attention's
/// query: RMSNorm with `norm` `[d]`, then RoPE with the token's chunk table (which also says how
/// many keys it sees).
pub struct DecodeQuery<'a> {
    /// The H query heads of the one token (possibly beside its keys and values).
    pub q: HeadColumns,
    pub norm: &'a Tensor<1>,
    pub table: &'a ChunkTable,
    pub eps: f32,
}

/// One query token's attention over the first `n` keys of a cache (`n`: the table's key count):
/// keys and values `[Hkv, ≥ n, d]`, mask `[1, ≥ n]` → `[1, H·d]`, ready for the output
/// projection.
pub fn decode_attention(
    query: DecodeQuery,
    keys: Tensor<3>,
    values: Tensor<3>,
    mask: Tensor<2>,
    scale: f32,
    softcap: Option<f32>,
) -> Tensor<2> {
    let (d, heads, column) = (query.q.head_dim, query.q.heads, query.q.column);
    assert!(d <= MAX_HEAD_DIM as usize && d.is_multiple_of(2), "head dimension {d} (at most {MAX_HEAD_DIM}, even)");
    Tensor::from_dispatch(<Dispatch as AttentionKernels>::fused_decode_attention(
        query.q.x.into_dispatch(),
        heads,
        column,
        query.norm.clone().into_dispatch(),
        query.table.table.clone().into_dispatch(),
        query.eps,
        keys.into_dispatch(),
        values.into_dispatch(),
        mask.into_dispatch(),
        scale,
        softcap.unwrap_or(0.0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) / 700.0).collect()
    }

    fn read(t: Tensor<2>) -> Vec<f32> {
        pollster::block_on(t.into_data_async()).expect("readback").try_to_vec().expect("f32")
    }

    /// The matmul path the model takes for prefill, from the raw query: [1, H·d].
    fn reference(
        q: Tensor<3>,
        (norm, cos, sin): (&Tensor<1>, &Tensor<3>, &Tensor<3>),
        keys: Tensor<3>,
        values: Tensor<3>,
        mask: Tensor<2>,
        softcap: Option<f32>,
    ) -> Tensor<2> {
        use crate::fused::reference::{rms_norm, rope};
        let q = rope(rms_norm(q, norm, 1e-6), cos, sin);
        let [_, heads, d] = q.dims();
        let [kv_heads, n, _] = keys.dims();
        let group = heads / kv_heads;
        let q = q.swap_dims(0, 1).reshape([kv_heads, group, d]);
        let scores = q.matmul(keys.swap_dims(1, 2)).reshape([kv_heads, group, 1, n]);
        let probs = crate::fused::reference::attention_softmax(scores, mask, 0.3, softcap);
        probs.reshape([kv_heads, group, n]).matmul(values).reshape([1, heads * d])
    }

    /// Head sizes below and above the block, GQA groups, a sliding mask, one chunk and three
    /// (2,500 keys), the keys as a view of their first `n` rows and as the whole longer cache (the
    /// kernel stops at the table's key count), with and without the softcap.
    #[test]
    fn decode_attention_matches_the_matmul_path() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        for (heads, kv_heads, n, d, capacity) in [(4, 2, 7, 8, 7), (8, 1, 300, 256, 512), (2, 2, 2500, 512, 2600)] {
            let q = Tensor::<3>::from_data(TensorData::new(values(heads * d, d), [1, heads, d]), &gpu);
            let norm = Tensor::<1>::from_data(TensorData::new(values(d, 3), [d]), &gpu);
            let inv_freq: Vec<f32> = (0..d / 2).map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / d as f32)).collect();
            let table = ChunkTable::new(&inv_freq, n - 1, 1, n, &gpu);
            let (cos, sin) = crate::fused::reference::split_cos_sin(&table.rotations());
            let whole = |seed| {
                Tensor::<3>::from_data(
                    TensorData::new(values(kv_heads * capacity * d, seed), [kv_heads, capacity, d]),
                    &gpu,
                )
            };
            let view = |t: Tensor<3>| t.slice([0..kv_heads, 0..n, 0..d]);
            let (keys, vals) = (whole(1), whole(2));
            // A sliding window: the oldest fifth of the keys is masked; beyond n, junk.
            let mask: Vec<f32> = (0..capacity).map(|t| if t < n / 5 { -1e30 } else { 0.0 }).collect();
            let mask = Tensor::<2>::from_data(TensorData::new(mask, [1, capacity]), &gpu);
            let mask_view = mask.clone().slice([0..1, 0..n]);
            for softcap in [None, Some(5.0)] {
                let tables = (&norm, &cos, &sin);
                let want = read(reference(
                    q.clone(),
                    tables,
                    view(keys.clone()),
                    view(vals.clone()),
                    mask_view.clone(),
                    softcap,
                ));
                for whole_cache in [false, true] {
                    // q heads after d junk columns, as in a joint q/k/v output.
                    let joint =
                        Tensor::cat(vec![Tensor::<2>::ones([1, d], &gpu), q.clone().reshape([1, heads * d])], 1);
                    let columns = HeadColumns { x: joint, column: d, heads, head_dim: d };
                    let query = DecodeQuery { q: columns, norm: &norm, table: &table, eps: 1e-6 };
                    let fused = if whole_cache {
                        decode_attention(query, keys.clone(), vals.clone(), mask.clone(), 0.3, softcap)
                    } else {
                        decode_attention(query, view(keys.clone()), view(vals.clone()), mask_view.clone(), 0.3, softcap)
                    };
                    let fused = read(fused);
                    let diff = fused.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                    assert!(diff < 1e-4, "H {heads}/{kv_heads} n {n} d {d} {softcap:?} whole {whole_cache}: {diff}");
                }
            }
        }
    }
}
