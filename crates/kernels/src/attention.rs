//! Attention of one new token (decode), split over the keys (flash-decoding): the query's RMSNorm
//! and RoPE, scores, softcap, mask, softmax and the weighted sum of values, for every query head,
//! without writing the scores to device memory. Two launches a layer replace the query's norm +
//! RoPE, two matmuls, two layout copies and the softmax kernel.
//!
//! - **Split pass**: one workgroup per (key/value head, pass over its query heads, key split).
//!   All query heads of a GQA group (up to [`QUERY_FLOATS`] floats of them, else in passes) share
//!   each tile of keys and values, so K and V are read once per pass, not once per query head. The
//!   keys are split so that one launch fills the GPU (about [`TARGET_WORKGROUPS`] workgroups,
//!   at least [`MIN_KEYS_PER_SPLIT`] keys each); the number of splits is fixed per cache, the keys
//!   per split follow the key count in the chunk table, so a recorded step replays at the next
//!   position (a short context leaves the last splits empty). For the scores each thread owns a key of the tile (its dot products against every
//!   query head of the pass, the key read once); for the values each thread owns a slice of the
//!   head's dimensions (reads coalesced across threads). No reduction crosses threads per key, so
//!   the kernel needs no subgroup operations: it runs the same with and without WebGPU's
//!   `subgroups` feature. Each split writes its unnormalised accumulator, its maximum and its sum.
//! - **Combine pass**: one workgroup per query head merges the splits' partial softmaxes.
//!
//! A sliding layer reads only the ring slots holding its window: the chunk table names the first
//! slot and the count, the slots wrap at the cache's capacity. Prefill (many queries) keeps the
//! matmul path, where batching pays.
//!
//! A layer with its own cache whose q, k and v come out of one launch also has the split pass
//! write the token's key and value into the cache ([`decode_attention_writing`]): one launch a
//! layer fewer than the cache write ([`crate::fused::write_keys_values`]) and then the attention.
//! The workgroups whose keys hold the new one make it themselves (norm and RoPE, as the query's),
//! since nothing orders them after the one that writes it.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::chunk_table::ChunkTable;
use crate::fused::HeadColumns;
use crate::launch::{block_reduce, bounded_tanh, bytes_of, empty_output, has_fused_kernels};

/// Threads per workgroup (a power of two: the query norm's reduction is a tree); also the keys
/// of a tile, one per thread.
const THREADS: u32 = 64;
/// Levels of the tree that reduces over [`THREADS`].
const LEVELS: u32 = THREADS.trailing_zeros();
/// The largest head the kernel takes (Gemma 4's global layers: 512).
const MAX_HEAD_DIM: u32 = 512;
/// Shared memory for the normed, rotated query heads of a pass (8 KiB): a group of 8 heads of
/// 256, or 4 of 512.
const QUERY_FLOATS: u32 = 2048;
/// The most query heads one pass takes (accumulators: heads × dimensions per thread ≤ 32).
const MAX_PASS_HEADS: u32 = 8;
/// Workgroups one split launch aims at: twice the compute units of a large GPU (an H200 has 132).
const TARGET_WORKGROUPS: u32 = 256;
/// The fewest keys a split reads (unless the bench chooses otherwise, [`crate::tuning`]): a
/// split's partial results (`group·(d+2)` floats) cost `group / (2·keys)` of the keys and values
/// it stands for, a quarter for Gemma 4's groups of 8 at 16 keys. Short contexts therefore use
/// fewer splits; the rest end at once and write only their (empty) maximum and sum.
const MIN_KEYS_PER_SPLIT: u32 = 16;

/// How a decode attention launch is split: per key/value head, `passes` over its query heads of
/// `heads_per_pass`, each pass over `splits` ranges of keys; then one combining workgroup per
/// query head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeSplit {
    pub kv_heads: u32,
    pub heads_per_pass: u32,
    pub passes: u32,
    pub splits: u32,
    /// The fewest keys a split reads.
    pub min_keys: u32,
}

impl DecodeSplit {
    /// The split for `heads` query heads over `kv_heads` key/value heads of `d` dimensions, in a
    /// cache of `capacity` slots (the most keys a step can see).
    pub fn new(heads: usize, kv_heads: usize, d: usize, capacity: usize) -> Self {
        let group = (heads / kv_heads.max(1)).max(1) as u32;
        let heads_per_pass = group.min(QUERY_FLOATS / (d as u32).max(1)).clamp(1, MAX_PASS_HEADS);
        let passes = group.div_ceil(heads_per_pass);
        let kv_heads = kv_heads.max(1) as u32;
        let min_keys = crate::tuning::decode_split_keys().unwrap_or(MIN_KEYS_PER_SPLIT);
        let by_keys = (capacity as u32).div_ceil(min_keys).max(1);
        let by_target = TARGET_WORKGROUPS.div_ceil(kv_heads * passes).max(1);
        DecodeSplit { kv_heads, heads_per_pass, passes, splits: by_keys.min(by_target), min_keys }
    }

    /// Workgroups of the split pass.
    pub fn split_workgroups(&self) -> u32 {
        self.kv_heads * self.passes * self.splits
    }

    /// Keys each split reads when the step sees `keys` of them (the last split may read fewer).
    pub fn keys_per_split(&self, keys: usize) -> usize {
        keys.div_ceil(self.splits as usize).max(self.min_keys as usize)
    }

    /// Splits that read any key when the step sees `keys` of them.
    pub fn active_splits(&self, keys: usize) -> usize {
        keys.div_ceil(self.keys_per_split(keys).max(1))
    }
}

/// The split pass (see the module's notes). Query head `h` of the pass is head
/// `kv_head·group + pass·heads_per_pass + h`; `q_h = RoPE(RMSNorm(q_raw_h) · q_norm)` (`table`:
/// the token's [`crate::ChunkTable`], its cos then sin, then its position, the key count `n` and
/// the first slot). The `j`-th key is slot `(first + j) % capacity` of `[Hkv, capacity, d]` with
/// `kv_stride` elements between heads; head h of q at `q_offset + h·d`. `partials` is
/// `[H, splits, d + 2]`: the split's accumulator `Σ_t e^(s_t − m)·v_t`, then `m`, then
/// `Σ_t e^(s_t − m)`. Seven storage buffers: WebGPU guarantees eight per stage and cubecl keeps
/// one.
///
/// `writes_new`: the new token's raw key and value lie in `q` too (head h at `k_offset + h·d`,
/// `v_offset + h·d`: a joint q/k/v output) and `norms` is `[q_norm ‖ k_norm]`; the kernel writes
/// key `n − 1` (`RoPE(RMSNorm(k) · k_norm)`) and its value (`RMSNorm(v)` when `v_norm`, else as
/// it is) into slot `(first + n − 1) % capacity`, which saves the cache write's launch. Every
/// workgroup whose keys hold key `n − 1` makes it itself (workgroups run in no set order, so none
/// may read it from the cache); pass 0's also writes it. No workgroup reads the slot's old
/// contents: a ring holds a window and a chunk, so the overwritten key is outside the window.
#[cube(launch)]
// `div_ceil` is not a cube function.
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
fn decode_attention_split_kernel(
    q: &[f32],
    norms: &[f32],
    table: &[f32],
    keys: &mut [f32],
    values: &mut [f32],
    mask: &[f32],
    partials: &mut [f32],
    group: u32,
    d: u32,
    q_offset: u32,
    k_offset: u32,
    v_offset: u32,
    kv_stride: u32,
    capacity: u32,
    passes: u32,
    min_keys: u32,
    scale: f32,
    cap: f32,
    eps: f32,
    #[comptime] softcap: bool,
    #[comptime] heads_per_pass: u32,
    #[comptime] dims_per_thread: u32,
    #[comptime] writes_new: bool,
    #[comptime] v_norm: bool,
) {
    let thread = UNIT_POS_X;
    let kv_head = CUBE_POS_X / passes;
    let pass = CUBE_POS_X % passes;
    let split = CUBE_POS_Y;
    let splits = CUBE_COUNT_Y;
    let first_head = kv_head * group + pass * heads_per_pass;
    let pass_heads = u32::min(heads_per_pass, group - pass * heads_per_pass);
    let kv_base = kv_head * kv_stride;
    let n = u32::cast_from(table[(2 * d + 1) as usize]);
    let first_slot = u32::cast_from(table[(2 * d + 2) as usize]);
    let per_split = u32::max((n + splits - 1) / splits, min_keys);
    let begin = u32::min(n, split * per_split);
    let end = u32::min(n, begin + per_split);

    // The pass's query heads, normed and rotated, into shared memory (heads beyond the group: 0).
    let mut query = Shared::<[f32]>::new_slice(QUERY_FLOATS as usize);
    let half = d / 2;
    for h in 0..heads_per_pass {
        let q_base = q_offset + (first_head + h) * d;
        let live = h < pass_heads;
        let mut square = f32::new(0.0);
        let mut i = thread;
        while i < d {
            if live {
                let v = q[(q_base + i) as usize];
                square += v * v;
            }
            i += THREADS;
        }
        let inv_rms = 1.0 / f32::sqrt(block_reduce(square, false, THREADS, LEVELS) / f32::cast_from(d) + eps);
        let mut i = thread;
        while i < d {
            let mut value = f32::new(0.0);
            if live {
                let partner = (i + half) % d;
                let normed = q[(q_base + i) as usize] * inv_rms * norms[i as usize];
                let mut rotated = q[(q_base + partner) as usize] * inv_rms * norms[partner as usize];
                if i < half {
                    rotated = -rotated;
                }
                value = normed * table[i as usize] + rotated * table[(d + i) as usize];
            }
            query[(h * d + i) as usize] = value;
            i += THREADS;
        }
        // Every thread has read the reduction's result before the next head's reduction.
        sync_cube();
    }

    // The new token's key (key `n − 1`), normed and rotated, and its value's inverse RMS: made
    // here by every workgroup whose keys hold it (other workgroups of this launch may not have
    // written it yet, so none reads it from the cache), and written to its slot by pass 0's.
    let mut new_key = Shared::<[f32]>::new_slice(MAX_HEAD_DIM as usize);
    let mut inv_v = f32::new(1.0);
    let fresh = n - 1;
    let k_base = k_offset + kv_head * d;
    let v_base = v_offset + kv_head * d;
    if writes_new {
        // The same for every thread of the workgroup.
        if begin < end && end == n {
            let mut square = f32::new(0.0);
            let mut i = thread;
            while i < d {
                let v = q[(k_base + i) as usize];
                square += v * v;
                i += THREADS;
            }
            let inv_k = 1.0 / f32::sqrt(block_reduce(square, false, THREADS, LEVELS) / f32::cast_from(d) + eps);
            // Every thread has read the reduction's result before another reduction may reuse its
            // shared memory.
            sync_cube();
            if v_norm {
                let mut square = f32::new(0.0);
                let mut i = thread;
                while i < d {
                    let v = q[(v_base + i) as usize];
                    square += v * v;
                    i += THREADS;
                }
                inv_v = 1.0 / f32::sqrt(block_reduce(square, false, THREADS, LEVELS) / f32::cast_from(d) + eps);
            }
            let slot_base = kv_base + ((first_slot + fresh) % capacity) * d;
            let mut i = thread;
            while i < d {
                // The key's position is the query's: the same rotation.
                let partner = (i + half) % d;
                let normed = q[(k_base + i) as usize] * inv_k * norms[(d + i) as usize];
                let mut rotated = q[(k_base + partner) as usize] * inv_k * norms[(d + partner) as usize];
                if i < half {
                    rotated = -rotated;
                }
                let key = normed * table[i as usize] + rotated * table[(d + i) as usize];
                new_key[i as usize] = key;
                if pass == 0 {
                    keys[(slot_base + i) as usize] = key;
                    values[(slot_base + i) as usize] = q[(v_base + i) as usize] * inv_v;
                }
                i += THREADS;
            }
            sync_cube();
        }
    }

    // Scores of a tile (head-major), then each head's correction for the tile.
    let mut weights = Shared::<[f32]>::new_slice((MAX_PASS_HEADS * THREADS) as usize);
    let mut corrections = Shared::<[f32]>::new_slice(MAX_PASS_HEADS as usize);
    let mut acc = Array::<f32>::new((heads_per_pass * dims_per_thread) as usize);
    #[unroll]
    for a in 0..heads_per_pass * dims_per_thread {
        acc[a as usize] = 0.0;
    }
    let mut dots = Array::<f32>::new(heads_per_pass as usize);
    // Thread h < pass_heads keeps head h's running maximum and sum.
    let mut running_max = f32::min_value();
    let mut running_sum = f32::new(0.0);
    let mut tile = begin;
    while tile < end {
        let count = u32::min(THREADS, end - tile);
        // One key per thread, dotted with every query head of the pass.
        #[unroll]
        for h in 0..heads_per_pass {
            dots[h as usize] = 0.0;
        }
        if thread < count {
            let slot = (first_slot + tile + thread) % capacity;
            let row = kv_base + slot * d;
            if writes_new {
                let is_new = tile + thread == fresh;
                for i in 0..d {
                    let k = if is_new { new_key[i as usize] } else { keys[(row + i) as usize] };
                    #[unroll]
                    for h in 0..heads_per_pass {
                        dots[h as usize] += query[(h * d + i) as usize] * k;
                    }
                }
            } else {
                for i in 0..d {
                    let k = keys[(row + i) as usize];
                    #[unroll]
                    for h in 0..heads_per_pass {
                        dots[h as usize] += query[(h * d + i) as usize] * k;
                    }
                }
            }
            #[unroll]
            for h in 0..heads_per_pass {
                let mut score = dots[h as usize] * scale;
                if softcap {
                    score = bounded_tanh(score / cap) * cap;
                }
                weights[(h * THREADS + thread) as usize] = score + mask[slot as usize];
            }
        }
        sync_cube();
        // Head `thread`'s softmax over the tile: new maximum, weights, sum.
        if thread < pass_heads {
            let base = thread * THREADS;
            let mut tile_max = f32::min_value();
            for t in 0..count {
                tile_max = f32::max(tile_max, weights[(base + t) as usize]);
            }
            let new_max = f32::max(running_max, tile_max);
            let correction = f32::exp(running_max - new_max);
            let mut tile_sum = f32::new(0.0);
            for t in 0..count {
                let p = f32::exp(weights[(base + t) as usize] - new_max);
                weights[(base + t) as usize] = p;
                tile_sum += p;
            }
            running_sum = running_sum * correction + tile_sum;
            running_max = new_max;
            corrections[thread as usize] = correction;
        }
        sync_cube();
        // Values: each thread its dimensions, every head of the pass.
        #[unroll]
        for h in 0..heads_per_pass {
            let correction = corrections[h as usize];
            #[unroll]
            for j in 0..dims_per_thread {
                acc[(h * dims_per_thread + j) as usize] *= correction;
            }
        }
        for t in 0..count {
            let row = kv_base + ((first_slot + tile + t) % capacity) * d;
            #[unroll]
            for j in 0..dims_per_thread {
                let dim = thread + j * THREADS;
                if dim < d {
                    if writes_new {
                        // The new value is not read from the cache: pass 0 may be writing it.
                        let v = if tile + t == fresh {
                            q[(v_base + dim) as usize] * inv_v
                        } else {
                            values[(row + dim) as usize]
                        };
                        #[unroll]
                        for h in 0..heads_per_pass {
                            acc[(h * dims_per_thread + j) as usize] += weights[(h * THREADS + t) as usize] * v;
                        }
                    } else {
                        let v = values[(row + dim) as usize];
                        #[unroll]
                        for h in 0..heads_per_pass {
                            acc[(h * dims_per_thread + j) as usize] += weights[(h * THREADS + t) as usize] * v;
                        }
                    }
                }
            }
        }
        // Every thread is done with this tile's weights before the next overwrites them.
        sync_cube();
        tile += THREADS;
    }

    let width = d + 2;
    #[unroll]
    for h in 0..heads_per_pass {
        if h < pass_heads {
            let base = ((first_head + h) * splits + split) * width;
            // An empty split's accumulator is never read (its sum is 0).
            if begin < end {
                #[unroll]
                for j in 0..dims_per_thread {
                    let dim = thread + j * THREADS;
                    if dim < d {
                        partials[(base + dim) as usize] = acc[(h * dims_per_thread + j) as usize];
                    }
                }
            }
            if thread == h {
                partials[(base + d) as usize] = running_max;
                partials[(base + d + 1) as usize] = running_sum;
            }
        }
    }
}

/// The combine pass: `out[h] = Σ_s e^(m_s − M)·acc_s / Σ_s e^(m_s − M)·sum_s` over the splits of
/// head `h` (`M`: their largest maximum). An empty split (maximum `f32::MIN`, sum 0) adds nothing
/// and its accumulator is not read.
#[cube(launch)]
fn decode_attention_combine_kernel(partials: &[f32], out: &mut [f32], d: u32, splits: u32) {
    let head = CUBE_POS_X;
    let width = d + 2;
    let base = head * splits * width;
    let mut largest = f32::min_value();
    for s in 0..splits {
        largest = f32::max(largest, partials[(base + s * width + d) as usize]);
    }
    let mut denominator = f32::new(0.0);
    for s in 0..splits {
        let at = base + s * width + d;
        denominator += f32::exp(partials[at as usize] - largest) * partials[(at + 1) as usize];
    }
    let mut dim = UNIT_POS_X;
    while dim < d {
        let mut sum = f32::new(0.0);
        for s in 0..splits {
            let at = base + s * width;
            // Empty splits (sum 0) wrote no accumulator.
            if partials[(at + d + 1) as usize] > 0.0 {
                sum += f32::exp(partials[(at + d) as usize] - largest) * partials[(at + dim) as usize];
            }
        }
        out[(head * d + dim) as usize] = sum / denominator;
        dim += THREADS;
    }
}

#[backend_extension(Cube)]
pub trait AttentionKernels: Backend {
    /// One query token: `heads` heads of q `[1, total]` from column `column`, before their norm
    /// (`q_norm` `[d]`, `eps`) and RoPE (the token's chunk table `[2, 2d]`, which also holds the
    /// key count `n` and the first slot), keys and values `[Hkv, capacity, d]` read from slot
    /// `first` for `n` slots (wrapping; `keys_read` is `n` as the host knows it, for the profile), mask `[1, capacity]` → `[1, H·d]`. `cap` ≤ 0 means no
    /// softcap.
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
        keys_read: usize,
        mask: FloatTensor<Self>,
        scale: f32,
        cap: f32,
    ) -> FloatTensor<Self>;

    /// The same, writing the new token's key and value into the cache first (in effect): its raw
    /// key and value lie in `q` too, at columns `k_column` and `v_column` (`Hkv` heads each),
    /// `norms` is `[q_norm ‖ k_norm]` `[2d]`, and the values are normed when `v_norm`. Returns
    /// the output and the keys and values (written in their own buffers when nothing else holds
    /// them). `keys` and `values` are whole caches `[Hkv, capacity, d]`.
    #[allow(clippy::too_many_arguments)]
    fn fused_decode_attention_writing(
        q: FloatTensor<Self>,
        heads: usize,
        column: usize,
        k_column: usize,
        v_column: usize,
        norms: FloatTensor<Self>,
        table: FloatTensor<Self>,
        eps: f32,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        v_norm: bool,
        keys_read: usize,
        mask: FloatTensor<Self>,
        scale: f32,
        cap: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
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

/// Where the new token's key and value lie in the split's `q` binding, when the split writes
/// them into the cache.
struct NewKeyValue {
    k_column: usize,
    v_column: usize,
    v_norm: bool,
}

/// The split and combine launches; with `new`, the split also writes the new key and value.
#[allow(clippy::too_many_arguments)]
fn launch_decode_attention(
    q: CubeTensor,
    heads: usize,
    column: usize,
    norms: CubeTensor,
    table: CubeTensor,
    eps: f32,
    (keys, values): (CubeTensor, CubeTensor),
    keys_read: usize,
    mask: CubeTensor,
    scale: f32,
    cap: f32,
    new: Option<NewKeyValue>,
) -> (CubeTensor, CubeTensor, CubeTensor) {
    let q = into_contiguous(q);
    let d = keys.meta.shape()[2];
    let (kv_heads, rows) = (keys.meta.shape()[0], keys.meta.shape()[1]);
    let (mut keys, mut stride) = head_strided(keys);
    let (mut values, value_stride) = head_strided(values);
    if value_stride != stride {
        // One stride for both.
        (keys, values, stride) = (into_contiguous(keys), into_contiguous(values), rows * d);
    }
    let split = DecodeSplit::new(heads, kv_heads, d, rows);
    let client = q.client.clone();
    let partials = empty_output(&q, burn::tensor::Shape::new([heads, split.splits as usize, d + 2]));
    let mask = into_contiguous(mask);
    // Each pass reads the keys and values it sees once for all its heads.
    let kv_read = (2 * kv_heads * keys_read.min(rows) * d * size_of::<f32>()) as u64 * u64::from(split.passes);
    crate::launch::declare_reads(kv_read + bytes_of(&q) + bytes_of(&mask) + bytes_of(&table));
    let (k_offset, v_offset, v_norm) = new.as_ref().map_or((0, 0, false), |n| (n.k_column, n.v_column, n.v_norm));
    decode_attention_split_kernel::launch(
        &client,
        CubeCount::Static(split.kv_heads * split.passes, split.splits, 1),
        CubeDim::new_1d(THREADS),
        q.clone().into_buffer_arg(),
        into_contiguous(norms).into_buffer_arg(),
        into_contiguous(table).into_buffer_arg(),
        keys.clone().into_buffer_arg(),
        values.clone().into_buffer_arg(),
        mask.into_buffer_arg(),
        partials.clone().into_buffer_arg(),
        (heads / kv_heads) as u32,
        d as u32,
        column as u32,
        k_offset as u32,
        v_offset as u32,
        stride as u32,
        rows as u32,
        split.passes,
        split.min_keys,
        scale,
        cap,
        eps,
        cap > 0.0,
        split.heads_per_pass,
        (d as u32).div_ceil(THREADS),
        new.is_some(),
        v_norm,
    );
    let out = empty_output(&q, burn::tensor::Shape::new([1, heads * d]));
    // Every split's maximum and sum, the accumulators of the splits that saw keys.
    let active = split.active_splits(keys_read.min(rows));
    crate::launch::declare_reads((heads * (split.splits as usize * 2 + active * d) * size_of::<f32>()) as u64);
    decode_attention_combine_kernel::launch(
        &client,
        CubeCount::Static(heads as u32, 1, 1),
        CubeDim::new_1d(THREADS),
        partials.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        d as u32,
        split.splits,
    );
    (out, keys, values)
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
        keys_read: usize,
        mask: CubeTensor,
        scale: f32,
        cap: f32,
    ) -> CubeTensor {
        let kv = (keys, values);
        launch_decode_attention(q, heads, column, q_norm, table, eps, kv, keys_read, mask, scale, cap, None).0
    }

    fn fused_decode_attention_writing(
        q: CubeTensor,
        heads: usize,
        column: usize,
        k_column: usize,
        v_column: usize,
        norms: CubeTensor,
        table: CubeTensor,
        eps: f32,
        keys: CubeTensor,
        values: CubeTensor,
        v_norm: bool,
        keys_read: usize,
        mask: CubeTensor,
        scale: f32,
        cap: f32,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        // Written in place only where nothing else holds the cache (a checkpoint's ring does).
        let writable = |cache: CubeTensor| {
            if cache.can_mut() && cache.is_contiguous() { cache } else { into_contiguous(cache.copy()) }
        };
        let kv = (writable(keys), writable(values));
        let new = Some(NewKeyValue { k_column, v_column, v_norm });
        launch_decode_attention(q, heads, column, norms, table, eps, kv, keys_read, mask, scale, cap, new)
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
        query.table.keys(),
        mask.into_dispatch(),
        scale,
        softcap.unwrap_or(0.0),
    ))
}

/// Where a decoded token's raw key and value lie beside its query (a joint q/k/v output), for
/// [`decode_attention_writing`].
pub struct NewKeys {
    /// The column of the key's first head, then the value's (`Hkv` heads of `d` each).
    pub k_column: usize,
    pub v_column: usize,
    /// The values are RMS-normed without a weight (Gemma 4), else cached as they are.
    pub v_normed: bool,
}

/// [`decode_attention`] for a token whose own key and value go into the cache, in one launch
/// fewer: `write_keys_values` of the token (its slot: the table's last key, `(first + n − 1) %
/// capacity`) and then the attention. `query.norm` is `[q_norm ‖ k_norm]` `[2d]`, `query.q.x`
/// holds the key and value too (at `new`'s columns); `keys` and `values` are the whole caches
/// `[Hkv, capacity, d]`, returned with the token written (in their own buffers when the caller
/// passes their only references). Only where [`fused_decode_applies`].
pub fn decode_attention_writing(
    query: DecodeQuery,
    new: NewKeys,
    (keys, values): (Tensor<3>, Tensor<3>),
    mask: Tensor<2>,
    scale: f32,
    softcap: Option<f32>,
) -> (Tensor<2>, Tensor<3>, Tensor<3>) {
    let (d, heads, column) = (query.q.head_dim, query.q.heads, query.q.column);
    assert!(d <= MAX_HEAD_DIM as usize && d.is_multiple_of(2), "head dimension {d} (at most {MAX_HEAD_DIM}, even)");
    assert_eq!(query.norm.dims()[0], 2 * d, "the query's and the key's norms, joined");
    let (out, keys, values) = <Dispatch as AttentionKernels>::fused_decode_attention_writing(
        query.q.x.into_dispatch(),
        heads,
        column,
        new.k_column,
        new.v_column,
        query.norm.clone().into_dispatch(),
        query.table.table.clone().into_dispatch(),
        query.eps,
        keys.into_dispatch(),
        values.into_dispatch(),
        new.v_normed,
        query.table.keys(),
        mask.into_dispatch(),
        scale,
        softcap.unwrap_or(0.0),
    );
    (Tensor::from_dispatch(out), Tensor::from_dispatch(keys), Tensor::from_dispatch(values))
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

    /// The split launch against the matmul path over the same keys in order: the keys are the
    /// `n` slots from `first`, wrapping at the capacity (a sliding layer's window in its ring),
    /// for GQA groups of 1, 4 and 8 (8 heads of 512: two passes), key counts that leave splits
    /// empty, fill one tile, or span several tiles per split, with a partly masked window.
    #[test]
    fn decode_attention_reads_wrapped_slots_in_splits() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        // (heads, kv heads, d, capacity, first slot, keys)
        let cases = [
            (8, 1, 256, 1040, 1000, 512),
            (8, 2, 256, 1040, 700, 511),
            (8, 1, 512, 4096, 0, 3),
            (8, 1, 512, 600, 590, 377),
            (4, 4, 64, 64, 63, 64),
            (6, 2, 32, 4096, 17, 2049),
        ];
        for (heads, kv_heads, d, capacity, first, n) in cases {
            let split = DecodeSplit::new(heads, kv_heads, d, capacity);
            let q = Tensor::<3>::from_data(TensorData::new(values(heads * d, d + n), [1, heads, d]), &gpu);
            let norm = Tensor::<1>::from_data(TensorData::new(values(d, 5), [d]), &gpu);
            let inv_freq: Vec<f32> = (0..d / 2).map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / d as f32)).collect();
            let table = ChunkTable::new(&inv_freq, 4000, 1, crate::KeySlots { first, count: n }, &gpu);
            let (cos, sin) = crate::fused::reference::split_cos_sin(&table.rotations());
            let (key_data, value_data) = (values(kv_heads * capacity * d, 7), values(kv_heads * capacity * d, 9));
            // The first tenth of the window masked, as a sliding mask may.
            let mask_data: Vec<f32> = (0..capacity)
                .map(|slot| if (slot + capacity - first) % capacity < n / 10 { -1e30 } else { 0.0 })
                .collect();
            let in_order = |data: &[f32]| -> Vec<f32> {
                (0..kv_heads)
                    .flat_map(|h| (0..n).map(move |j| (h, (first + j) % capacity)))
                    .flat_map(|(h, slot)| data[(h * capacity + slot) * d..(h * capacity + slot + 1) * d].to_vec())
                    .collect()
            };
            let ordered =
                |data: &[f32]| Tensor::<3>::from_data(TensorData::new(in_order(data), [kv_heads, n, d]), &gpu);
            let ordered_mask: Vec<f32> = (0..n).map(|j| mask_data[(first + j) % capacity]).collect();
            let whole = |data: Vec<f32>| Tensor::<3>::from_data(TensorData::new(data, [kv_heads, capacity, d]), &gpu);
            for softcap in [None, Some(5.0)] {
                let want = read(reference(
                    q.clone(),
                    (&norm, &cos, &sin),
                    ordered(&key_data),
                    ordered(&value_data),
                    Tensor::<2>::from_data(TensorData::new(ordered_mask.clone(), [1, n]), &gpu),
                    softcap,
                ));
                let columns = HeadColumns { x: q.clone().reshape([1, heads * d]), column: 0, heads, head_dim: d };
                let query = DecodeQuery { q: columns, norm: &norm, table: &table, eps: 1e-6 };
                let mask = Tensor::<2>::from_data(TensorData::new(mask_data.clone(), [1, capacity]), &gpu);
                let got = read(decode_attention(
                    query,
                    whole(key_data.clone()),
                    whole(value_data.clone()),
                    mask,
                    0.3,
                    softcap,
                ));
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(diff < 1e-4, "H {heads}/{kv_heads} d {d} slots {first}+{n} of {capacity} {split:?}: {diff}");
            }
        }
    }

    /// The split launch that writes the token's key and value against the cache write and the
    /// attention apart: on the CPU (the reference), and on the GPU as two launches. The same cache
    /// (the one slot `(first + n − 1) % capacity` written, every other slot untouched) and the same
    /// output, for sliding windows that wrap the ring, a global layer of two passes over an
    /// unwrapped cache, several splits and tiles, GQA groups of 1 to 8, a first token (one key),
    /// values normed and not; and a cache held elsewhere is copied, not written.
    #[test]
    fn decode_attention_writing_the_new_key_matches_the_write_then_the_attention() {
        use crate::fused::write_keys_values;
        let Some(gpu) = crate::launch::test_gpu() else { return };
        let cpu = burn::tensor::Device::flex();
        // (heads, kv heads, d, capacity, first slot, keys, values normed)
        let cases = [
            (8, 1, 256, 1040, 1000, 512, true),
            (8, 2, 256, 1040, 700, 511, false),
            (8, 1, 512, 4096, 0, 377, true),
            (8, 1, 512, 600, 590, 40, true),
            (4, 4, 64, 64, 63, 64, false),
            (6, 2, 32, 4096, 17, 1, true),
            (6, 2, 32, 4096, 4000, 2049, true),
        ];
        for (case, (heads, kv_heads, d, capacity, first, n, v_normed)) in cases.into_iter().enumerate() {
            let slot = (first + n - 1) % capacity;
            // The token's position: the slot the cache write puts it in is the attention's last key.
            let position = 3 * capacity + slot;
            let split = DecodeSplit::new(heads, kv_heads, d, capacity);
            let width = (heads + 2 * kv_heads) * d;
            let (k_column, v_column) = (heads * d, (heads + kv_heads) * d);
            let joint_data = values(width, d + n);
            let (q_norm_data, k_norm_data) = (values(d, 5), values(d, 6));
            let inv_freq: Vec<f32> = (0..d / 2).map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / d as f32)).collect();
            let (key_data, value_data) = (values(kv_heads * capacity * d, 7), values(kv_heads * capacity * d, 9));
            let mask_data: Vec<f32> = (0..capacity)
                .map(|slot| if (slot + capacity - first) % capacity < n / 10 { -1e30 } else { 0.0 })
                .collect();
            let on = |device: &burn::tensor::Device| {
                let joint = Tensor::<2>::from_data(TensorData::new(joint_data.clone(), [1, width]), device);
                let norm = |data: &[f32]| Tensor::<1>::from_data(TensorData::new(data.to_vec(), [d]), device);
                let cache = |data: &[f32]| {
                    Tensor::<3>::from_data(TensorData::new(data.to_vec(), [kv_heads, capacity, d]), device)
                };
                let table = ChunkTable::new(&inv_freq, position, 1, crate::KeySlots { first, count: n }, device);
                let mask = Tensor::<2>::from_data(TensorData::new(mask_data.clone(), [1, capacity]), device);
                (joint, norm(&q_norm_data), norm(&k_norm_data), cache(&key_data), cache(&value_data), table, mask)
            };
            let columns =
                |joint: &Tensor<2>, column, heads| HeadColumns { x: joint.clone(), column, heads, head_dim: d };
            let label = format!("case {case}: H {heads}/{kv_heads} d {d} slots {first}+{n} of {capacity} {split:?}");
            let read3 = |t: Tensor<3>| -> Vec<f32> {
                pollster::block_on(t.into_data_async()).expect("readback").try_to_vec().expect("f32")
            };

            // The reference: the cache write on the CPU, then the matmul path over the keys in order.
            let (joint, q_norm, k_norm, keys, vals, table, _) = on(&cpu);
            let (k, v) = (columns(&joint, k_column, kv_heads), columns(&joint, v_column, kv_heads));
            let (keys, vals) = write_keys_values(keys, vals, k, &k_norm, v, v_normed, &table, 1e-6);
            let (want_keys, want_values) = (read3(keys), read3(vals));
            let ordered = |data: &[f32]| -> Tensor<3> {
                let rows: Vec<f32> = (0..kv_heads)
                    .flat_map(|h| (0..n).map(move |j| (h, (first + j) % capacity)))
                    .flat_map(|(h, slot)| data[(h * capacity + slot) * d..(h * capacity + slot + 1) * d].to_vec())
                    .collect();
                Tensor::<3>::from_data(TensorData::new(rows, [kv_heads, n, d]), &cpu)
            };
            let ordered_mask: Vec<f32> = (0..n).map(|j| mask_data[(first + j) % capacity]).collect();
            let (cos, sin) = crate::fused::reference::split_cos_sin(&table.rotations());
            let q = joint.clone().slice([0..1, 0..heads * d]).reshape([1, heads, d]);
            let want = read(reference(
                q,
                (&q_norm, &cos, &sin),
                ordered(&want_keys),
                ordered(&want_values),
                Tensor::<2>::from_data(TensorData::new(ordered_mask, [1, n]), &cpu),
                Some(5.0),
            ));
            // Only the token's slot changed.
            for (name, want, before) in [("keys", &want_keys, &key_data), ("values", &want_values, &value_data)] {
                for h in 0..kv_heads {
                    for s in (0..capacity).filter(|&s| s != slot) {
                        let at = (h * capacity + s) * d;
                        assert_eq!(want[at..at + d], before[at..at + d], "{label}: reference {name} slot {s}");
                    }
                }
            }

            // The GPU, two launches: the cache write, then the attention.
            let (joint, q_norm, k_norm, keys, vals, table, mask) = on(&gpu);
            let (k, v) = (columns(&joint, k_column, kv_heads), columns(&joint, v_column, kv_heads));
            let (keys, vals) = write_keys_values(keys, vals, k, &k_norm, v, v_normed, &table, 1e-6);
            let query = DecodeQuery { q: columns(&joint, 0, heads), norm: &q_norm, table: &table, eps: 1e-6 };
            let apart = read(decode_attention(query, keys, vals, mask.clone(), 0.3, Some(5.0)));

            // The GPU, one launch fewer; the second round with the caches held elsewhere too.
            let joined = Tensor::cat(vec![q_norm.clone(), k_norm.clone()], 0);
            for held in [false, true] {
                let (_, _, _, keys, vals, _, _) = on(&gpu);
                let holders = held.then(|| (keys.clone(), vals.clone()));
                let query = DecodeQuery { q: columns(&joint, 0, heads), norm: &joined, table: &table, eps: 1e-6 };
                let new = NewKeys { k_column, v_column, v_normed };
                let (out, keys, vals) =
                    decode_attention_writing(query, new, (keys, vals), mask.clone(), 0.3, Some(5.0));
                let (out, keys, vals) = (read(out), read3(keys), read3(vals));
                let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
                assert!(diff(&keys, &want_keys) < 1e-5, "{label} held {held}: keys {}", diff(&keys, &want_keys));
                assert!(diff(&vals, &want_values) < 1e-5, "{label} held {held}: values {}", diff(&vals, &want_values));
                assert!(diff(&out, &want) < 1e-4, "{label} held {held}: vs the reference {}", diff(&out, &want));
                assert!(diff(&out, &apart) < 1e-5, "{label} held {held}: vs two launches {}", diff(&out, &apart));
                if let Some((keys, vals)) = holders {
                    assert_eq!(read3(keys), key_data, "{label}: a held cache is not written");
                    assert_eq!(read3(vals), value_data, "{label}: a held cache is not written");
                }
            }
        }
    }

    /// The split a launch takes: the group's heads in passes that fit shared memory, splits that
    /// fill a large GPU, never under 16 keys a split (a short context leaves splits empty).
    #[test]
    fn decode_split_fills_the_gpu_within_its_bounds() {
        // E2B's global layers: 8 heads of 512 over one KV head, an 8 K cache.
        let global = DecodeSplit::new(8, 1, 512, 8192);
        assert_eq!((global.heads_per_pass, global.passes, global.splits), (4, 2, 128));
        assert_eq!(global.split_workgroups(), 256);
        assert_eq!((global.keys_per_split(4096), global.active_splits(4096)), (32, 128));
        assert_eq!((global.keys_per_split(65), global.active_splits(65)), (16, 5));
        // E2B's sliding layers: one pass of 8 heads of 256 over a 1,024-slot ring, 512 keys read.
        let sliding = DecodeSplit::new(8, 1, 256, 1024);
        assert_eq!((sliding.heads_per_pass, sliding.passes, sliding.splits), (8, 1, 64));
        assert_eq!(sliding.active_splits(512), 32);
        // A short cache: one split per 16 slots.
        assert_eq!(DecodeSplit::new(8, 2, 256, 64).splits, 4);
    }
}
