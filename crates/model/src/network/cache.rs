//! The KV cache, preallocated: full-attention layers keep every position up to `max_context`;
//! sliding layers keep a ring of `window + max_chunk` slots, enough for a chunk's queries to see
//! their whole window and for the last `max_chunk` positions to be rewound exactly.
//! KV-shared layers have no cache of their own.
//!
//! The context size is chosen per model and adapter ([`CacheOptions::for_device`]), and
//! checkpoints of the rings let a conversation rewind past them: to the end of the last prompt
//! after an answer longer than a chunk (the next prompt renders that answer again, or without its
//! thoughts), so a step prefills only its new tokens; and to the end of its first prompt after a
//! compaction rewrote what follows.

use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::{ChunkTable, HeadColumns, KeySlots, fused_decode_applies, overwrite, write_keys_values};

use crate::config::{LayerType, TextConfig};
use crate::error::ModelError;

/// Additive mask value for keys a query must not see (finite: WGSL handles it like any number).
pub(crate) const MASKED: f32 = -1e30;

#[derive(Debug, Clone, Copy)]
pub struct CacheOptions {
    /// Most positions a conversation can hold.
    pub max_context: usize,
    /// Most tokens run through the model at once (prefill is split into chunks of this size).
    pub max_chunk: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions { max_context: CONTEXT_SIZES[CONTEXT_SIZES.len() - 1], max_chunk: 512 }
    }
}

/// The context sizes the engine offers, largest first: 8K always, more where memory allows.
pub const CONTEXT_SIZES: [usize; 3] = [32_768, 16_384, 8_192];

/// The most GPU memory a model's KV cache may take. WebGPU does not say how much memory an
/// adapter has; 1 GiB beside 3–7 GB of weights fits the machines that run E2B/E4B at all.
pub const KV_BUDGET_BYTES: u64 = 1 << 30;

/// What the adapter allows, from its WebGPU limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The largest buffer (`maxBufferSize`): a cache may take at most this much in all.
    pub max_buffer_bytes: u64,
    /// The largest buffer one kernel can bind (`maxStorageBufferBindingSize`): one layer's keys.
    pub max_binding_bytes: u64,
}

impl DeviceMemory {
    /// WebGPU's guaranteed limits: what any adapter allows.
    pub const MINIMUM: DeviceMemory = DeviceMemory { max_buffer_bytes: 256 << 20, max_binding_bytes: 128 << 20 };
}

impl CacheOptions {
    /// The largest context of [`CONTEXT_SIZES`] whose cache fits the KV budget (at most
    /// [`KV_BUDGET_BYTES`] and the adapter's largest buffer) and whose layers' keys each fit one
    /// binding; the smallest size when none does.
    pub fn for_device(config: &TextConfig, memory: DeviceMemory) -> CacheOptions {
        let smallest = CacheOptions::default();
        let budget = KV_BUDGET_BYTES.min(memory.max_buffer_bytes);
        CONTEXT_SIZES
            .iter()
            .map(|&max_context| CacheOptions { max_context, ..smallest })
            .find(|options| {
                options.bytes(config) <= budget && options.largest_layer_bytes(config) <= memory.max_binding_bytes
            })
            .unwrap_or(smallest)
    }

    /// GPU bytes of a cache with these options for `config` (f32 keys and values).
    pub fn bytes(&self, config: &TextConfig) -> u64 {
        let ring = self.ring_capacity(config);
        config
            .layers
            .iter()
            .filter(|layer| layer.kv_producer.is_none())
            .map(|layer| {
                let positions = match layer.kind {
                    LayerType::Full => self.max_context,
                    LayerType::Sliding => ring,
                };
                2 * 4 * (layer.num_kv_heads * layer.head_dim) as u64 * positions as u64
            })
            .sum()
    }

    /// How many caches of these options fit the KV budget (at least one).
    pub fn caches_within_budget(&self, config: &TextConfig, memory: DeviceMemory) -> usize {
        let budget = KV_BUDGET_BYTES.min(memory.max_buffer_bytes);
        (budget / self.bytes(config).max(1)).max(1) as usize
    }

    fn largest_layer_bytes(&self, config: &TextConfig) -> u64 {
        config
            .layers
            .iter()
            .map(|layer| 4 * (layer.num_kv_heads * layer.head_dim) as u64 * self.max_context as u64)
            .max()
            .unwrap_or(0)
    }

    /// The sliding layers' ring: the window and one chunk (so every query of a chunk finds its
    /// whole window), at most the context.
    pub fn ring_capacity(&self, config: &TextConfig) -> usize {
        config.window().max(1).saturating_add(self.max_chunk.max(1)).min(self.max_context)
    }

    /// Key/value slots a layer of `kind` holds: every position (full attention) or the ring.
    pub fn slots(&self, config: &TextConfig, kind: LayerType) -> usize {
        match kind {
            LayerType::Full => self.max_context,
            LayerType::Sliding => self.ring_capacity(config),
        }
    }
}

/// Prefill's attention scores (`[heads, chunk, context]`, f32) stay within this: long contexts
/// get shorter chunks rather than a buffer larger than an adapter can bind.
const MAX_SCORE_BYTES: u64 = 128 << 20;

struct LayerKv {
    kind: LayerType,
    /// [Hkv, capacity, d]
    keys: Tensor<3>,
    values: Tensor<3>,
}

pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
    window: usize,
    full_capacity: usize,
    ring_capacity: usize,
    /// Position held by each ring slot.
    ring_positions: Vec<Option<usize>>,
    /// Positions processed so far.
    len: usize,
    /// RoPE frequencies per layer type (index: `LayerType::index`).
    inv_freq: [Option<Vec<f32>>; 2],
    /// The most query heads of any layer (prefill's scores are `[heads, chunk, context]`).
    max_query_heads: usize,
    /// Ways back past the rings: the conversation's first prompt end, and the last one.
    checkpoints: Vec<RingCheckpoint>,
    /// Zeros `[full_capacity]` when the model has full-attention layers: a decoded token sees
    /// every position, so its mask is a prefix of this (no upload per token).
    open_mask: Option<Tensor<1>>,
    /// The one-token step's inputs, rewritten in place per token, when its attention is the fused
    /// kernel (a cubecl device): a recorded step reads them from these buffers.
    decode_inputs: Option<DecodeInputs>,
    /// The one-token step recorded against this cache's buffers (see `crate::step_recording`). Dropped
    /// whenever a buffer it uses may change: a checkpoint (the next write copies the rings) or a
    /// restore (other rings).
    pub(crate) recorded: Option<crate::step_recording::RecordedStep>,
    /// This step writes each layer's keys and values with the cache write's own launch, not in
    /// the attention's (the run after a failed recording: `step_recording::CacheWrites::Apart`).
    pub(crate) writes_apart: bool,
    /// Names the keys' and values' buffers as they are: a new value whenever one may have been
    /// replaced (a checkpoint, a restore, a write that copied a shared buffer), so that a
    /// recording reading them from outside the model (the drafter's) knows it must record again.
    buffers: u64,
    /// An empty `[0, 0, 0]` tensor, made once: what a layer's keys and values are swapped with
    /// while a write takes them by value, so that a write allocates nothing for it (a recorded
    /// step may allocate nothing, and a capture window admits no allocation it has not seen).
    placeholder: Tensor<3>,
}

/// A value no cache's buffers were named by before ([`KvCache::buffers`]).
fn new_buffers_name() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One layer's cache as it stands, for a reader outside the model's own layers (a drafter).
pub(crate) struct CachedKv {
    pub kind: LayerType,
    /// `[Hkv, rows, d]`: the keys normed and rotated, the values as attention reads them.
    pub keys: Tensor<3>,
    pub values: Tensor<3>,
    /// The position row `r` holds (`None`: an empty ring slot).
    pub positions: Vec<Option<usize>>,
}

/// The buffers a one-token step reads its position from, per layer type (index:
/// `LayerType::index`): the chunk table, and for sliding layers the ring's mask `[1, ring]`.
struct DecodeInputs {
    tables: [Option<ChunkTable>; 2],
    sliding_mask: Option<Tensor<2>>,
}

/// The sliding layers' rings as they were at `len` positions. Holding the tensors makes the next
/// write copy a ring once (Burn writes in place only into a buffer nothing else holds), so the
/// checkpoint costs one ring copy per generation, not a copy per token.
struct RingCheckpoint {
    len: usize,
    ring_positions: Vec<Option<usize>>,
    /// Per layer: the ring's keys and values (None for full and KV-shared layers).
    rings: Vec<Option<(Tensor<3>, Tensor<3>)>>,
}

/// Everything about one chunk that is the same for all layers: positions, masks, chunk tables.
pub struct ChunkGeometry {
    start: usize,
    len: usize,
    masks: [Option<Tensor<2>>; 2],
    tables: [Option<ChunkTable>; 2],
    ring_positions_after: Vec<Option<usize>>,
    /// A one-token step whose attention reads the cache's first `n` rows itself (the fused
    /// kernel, `n` from the table): full layers hand it their whole cache, not a slice.
    whole_cache: bool,
}

impl ChunkGeometry {
    pub(crate) fn mask(&self, kind: LayerType) -> Tensor<2> {
        self.masks[kind.index()].clone().expect("a mask for every layer type in the model")
    }

    /// A one-token step that reads its position from the cache's decode inputs (the recordable
    /// kind).
    pub(crate) fn is_recordable(&self) -> bool {
        // Only one-token chunks read the whole cache.
        self.whole_cache
    }

    /// A one-token step whose attention reads each layer's whole cache (`[Hkv, capacity, d]`)
    /// and its key count from the table: the fused decode attention, which may also write the
    /// token's key and value ([`KvCache::attend_writing`]).
    pub(crate) fn reads_whole_cache(&self) -> bool {
        self.whole_cache
    }

    pub(crate) fn table(&self, kind: LayerType, head_dim: usize) -> &ChunkTable {
        let table = self.tables[kind.index()].as_ref().expect("a chunk table for every layer type in the model");
        debug_assert_eq!(table.head_dim(), head_dim);
        table
    }
}

impl KvCache {
    pub fn new(config: &TextConfig, options: CacheOptions, device: &Device) -> Self {
        let full_capacity = options.max_context;
        let ring_capacity = options.ring_capacity(config);
        let mut inv_freq: [Option<Vec<f32>>; 2] = [None, None];
        let layers = config
            .layers
            .iter()
            .map(|layer| {
                inv_freq[layer.kind.index()].get_or_insert_with(|| layer.rope.inv_freq.clone());
                if layer.kv_producer.is_some() {
                    return None;
                }
                let shape = [layer.num_kv_heads, options.slots(config, layer.kind), layer.head_dim];
                Some(LayerKv {
                    kind: layer.kind,
                    keys: Tensor::zeros(shape, device),
                    values: Tensor::zeros(shape, device),
                })
            })
            .collect();
        let open_mask = inv_freq[LayerType::Full.index()].as_ref().map(|_| Tensor::zeros([full_capacity], device));
        let fused_decode = config.layers.iter().all(|layer| fused_decode_applies(device, 1, layer.head_dim));
        let decode_inputs = fused_decode.then(|| {
            let table = |kind: LayerType| {
                let keys = match kind {
                    LayerType::Full => 1,
                    LayerType::Sliding => ring_capacity,
                };
                inv_freq[kind.index()].as_ref().map(|f| ChunkTable::new(f, 0, 1, keys, device))
            };
            DecodeInputs {
                tables: [table(LayerType::Sliding), table(LayerType::Full)],
                sliding_mask: inv_freq[LayerType::Sliding.index()]
                    .as_ref()
                    .map(|_| Tensor::full([1, ring_capacity], MASKED, device)),
            }
        });
        KvCache {
            layers,
            window: config.window().max(1),
            full_capacity,
            ring_capacity,
            ring_positions: vec![None; ring_capacity],
            len: 0,
            inv_freq,
            max_query_heads: config.num_heads.max(1),
            checkpoints: Vec::new(),
            open_mask,
            decode_inputs,
            recorded: None,
            writes_apart: false,
            buffers: new_buffers_name(),
            placeholder: Tensor::empty([0, 0, 0], device),
        }
    }

    /// The name of the keys' and values' buffers as they are now: it changes whenever one of them
    /// may have been replaced.
    pub(crate) fn buffers(&self) -> u64 {
        self.buffers
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.full_capacity
    }

    /// Whether a recorded one-token step is ready to replay on this cache.
    pub fn holds_recorded_step(&self) -> bool {
        self.recorded.is_some()
    }

    /// Whether the recorded step (if any) includes the token's lookups, reading only its id;
    /// `false` when the rows are looked up before each replay (a table on the host).
    pub fn recorded_step_reads_the_id(&self) -> bool {
        self.recorded.as_ref().is_some_and(crate::step_recording::RecordedStep::reads_the_id)
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The largest chunk for which every query still finds its whole window in the ring.
    pub fn max_chunk(&self) -> usize {
        if self.ring_capacity >= self.full_capacity { self.full_capacity } else { self.ring_capacity - self.window + 1 }
    }

    /// How many of `remaining` tokens to run next: at most [`Self::max_chunk`], and fewer late in
    /// a long context, where prefill's attention scores would outgrow [`MAX_SCORE_BYTES`].
    pub fn next_chunk(&self, remaining: usize) -> usize {
        let mut s = remaining.min(self.max_chunk()).max(1);
        while s > 1 && 4 * (self.max_query_heads * s) as u64 * (self.len + s) as u64 > MAX_SCORE_BYTES {
            s /= 2;
        }
        s
    }

    /// Layer `layer`'s keys and values: positions `0..len` for a full-attention layer (with
    /// `whole`, its whole buffer, the rows past `len` empty), the whole ring for a sliding one;
    /// `None` for a KV-shared layer, which caches nothing. The tensors share the cache's buffers,
    /// so a write while they are held copies them first.
    pub(crate) fn layer_kv(&self, layer: usize, whole: bool) -> Option<CachedKv> {
        let kv = self.layers.get(layer)?.as_ref()?;
        let [heads, rows, d] = kv.keys.dims();
        Some(match kv.kind {
            LayerType::Full if whole => CachedKv {
                kind: kv.kind,
                keys: kv.keys.clone(),
                values: kv.values.clone(),
                positions: (0..rows).map(|p| (p < self.len).then_some(p)).collect(),
            },
            LayerType::Full => CachedKv {
                kind: kv.kind,
                keys: kv.keys.clone().slice([0..heads, 0..self.len, 0..d]),
                values: kv.values.clone().slice([0..heads, 0..self.len, 0..d]),
                positions: (0..self.len).map(Some).collect(),
            },
            LayerType::Sliding => CachedKv {
                kind: kv.kind,
                keys: kv.keys.clone(),
                values: kv.values.clone(),
                positions: self.ring_positions.clone(),
            },
        })
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.len = 0;
        self.ring_positions.iter_mut().for_each(|p| *p = None);
        self.checkpoints.clear();
    }

    /// Remembers the rings as they are now, so that [`Self::rewind`] can come back here after
    /// decoding more than a chunk past this point. Two are kept: the conversation's first (the end
    /// of its first prompt: system prompt, tools, task, which compaction never rewrites) and the
    /// latest (the end of the last prompt, which a re-rendered answer leaves).
    pub fn checkpoint(&mut self) {
        let rings = self
            .layers
            .iter()
            .map(|layer| match layer {
                Some(kv) if kv.kind == LayerType::Sliding => Some((kv.keys.clone(), kv.values.clone())),
                _ => None,
            })
            .collect();
        let checkpoint = RingCheckpoint { len: self.len, ring_positions: self.ring_positions.clone(), rings };
        if self.checkpoints.len() >= 2 || self.checkpoints.last().is_some_and(|c| c.len >= checkpoint.len) {
            self.checkpoints.pop();
        }
        self.checkpoints.push(checkpoint);
        // The rings are shared now: the next write copies them into new buffers.
        self.recorded = None;
        self.buffers = new_buffers_name();
    }

    /// Keeps as many of positions `0..n` as can be kept exactly and returns how many: `n` when the
    /// rings (or a checkpoint's) still hold the window before `n`; else the length of the latest
    /// checkpoint before `n` (positions after it must be computed again); else 0 (cleared).
    pub fn rewind(&mut self, n: usize) -> usize {
        let kept = self.rewind_to(n.min(self.len));
        if kept > 0 && self.checkpoints.is_empty() {
            // Rewound before the first checkpoint: this point becomes it (free: it shares the
            // rings' buffers), so a later compaction still finds its way back here.
            self.checkpoint();
        }
        kept
    }

    fn rewind_to(&mut self, n: usize) -> usize {
        if self.truncate(n) {
            return n;
        }
        // Latest first; one that ends after `n` goes stale once positions before its end are
        // written again, so it is dropped unless its own rings reach back to `n`.
        while let Some(checkpoint) = self.checkpoints.pop() {
            if checkpoint.len > self.len {
                continue;
            }
            if n >= checkpoint.len || self.window_held(&checkpoint.ring_positions, n) {
                self.restore(&checkpoint);
                if n >= checkpoint.len {
                    self.checkpoints.push(checkpoint);
                    return self.len;
                }
                let kept = self.truncate(n);
                debug_assert!(kept, "the checkpoint's rings hold the window before n");
                return n;
            }
        }
        self.clear();
        0
    }

    /// Puts a checkpoint's rings back; full layers hold every position, so only the length goes
    /// back for them.
    fn restore(&mut self, checkpoint: &RingCheckpoint) {
        // The recording writes the rings about to be let go: it goes first.
        self.recorded = None;
        self.buffers = new_buffers_name();
        for (layer, ring) in self.layers.iter_mut().zip(&checkpoint.rings) {
            if let (Some(kv), Some((keys, values))) = (layer.as_mut(), ring) {
                kv.keys = keys.clone();
                kv.values = values.clone();
            }
        }
        self.ring_positions.clone_from(&checkpoint.ring_positions);
        self.len = checkpoint.len;
    }

    /// Whether `ring_positions` hold the window of positions before `n` (always true without
    /// sliding layers).
    fn window_held(&self, ring_positions: &[Option<usize>], n: usize) -> bool {
        let has_sliding = self.layers.iter().flatten().any(|l| l.kind == LayerType::Sliding);
        !has_sliding
            || (n.saturating_sub(self.window - 1)..n).all(|p| ring_positions[p % self.ring_capacity] == Some(p))
    }

    /// Keeps only positions `0..n`, if that is exact: full layers always can; sliding layers only
    /// if the ring still holds the window before `n`. Returns false (cache unchanged) otherwise.
    pub fn truncate(&mut self, n: usize) -> bool {
        if n > self.len || !self.window_held(&self.ring_positions, n) {
            return false;
        }
        for slot in &mut self.ring_positions {
            if slot.is_some_and(|p| p >= n) {
                *slot = None;
            }
        }
        self.len = n;
        // Positions before their ends will be written again.
        self.checkpoints.retain(|c| c.len <= n);
        true
    }

    /// What a chunk of `s` tokens after the cache's positions needs: masks and chunk tables. A
    /// one-token step on a device with the fused attention rewrites the cache's own decode inputs
    /// in place (no new tensors), so a recorded step replays at this position.
    pub(crate) fn plan(&mut self, s: usize, device: &Device) -> Result<ChunkGeometry, ModelError> {
        let start = self.len;
        if start + s > self.full_capacity {
            return Err(ModelError::ContextFull(self.full_capacity));
        }
        debug_assert!(s <= self.max_chunk());
        let mut ring_positions_after = self.ring_positions.clone();
        for p in start..start + s {
            ring_positions_after[p % self.ring_capacity] = Some(p);
        }
        let queries = start..start + s;
        let window = self.window;
        let sliding_mask_values = || -> Vec<f32> {
            queries
                .clone()
                .flat_map(|q| {
                    ring_positions_after.iter().map(move |slot| match slot {
                        Some(k) if *k <= q && q - k < window => 0.0,
                        _ => MASKED,
                    })
                })
                .collect()
        };
        let keys = |kind: LayerType| match kind {
            LayerType::Full => start + s,
            LayerType::Sliding => self.ring_capacity,
        };

        if let (1, Some(inputs)) = (s, self.decode_inputs.as_mut()) {
            let mut masks = [None, None];
            for kind in [LayerType::Sliding, LayerType::Full] {
                let (Some(inv_freq), Some(table)) =
                    (&self.inv_freq[kind.index()], inputs.tables[kind.index()].as_mut())
                else {
                    continue;
                };
                // A sliding layer reads only the slots of its window (the mask stays exact).
                let slots = match kind {
                    LayerType::Full => KeySlots::from(start + 1),
                    LayerType::Sliding => {
                        let count = (start + 1).min(window);
                        KeySlots { first: (start + 1 - count) % self.ring_capacity, count }
                    }
                };
                table.rewrite(inv_freq, start, slots);
                masks[kind.index()] = match kind {
                    LayerType::Sliding => inputs.sliding_mask.as_mut().map(|mask| {
                        overwrite(mask, sliding_mask_values());
                        mask.clone()
                    }),
                    LayerType::Full => self.open_mask.clone().map(|open| open.reshape([1, self.full_capacity])),
                };
            }
            let tables = inputs.tables.clone();
            return Ok(ChunkGeometry { start, len: s, masks, tables, ring_positions_after, whole_cache: true });
        }

        let full_mask = || {
            let n = start + s;
            if let (1, Some(open)) = (s, &self.open_mask) {
                return open.clone().narrow(0, 0, n).reshape([1, n]);
            }
            let data: Vec<f32> =
                queries.clone().flat_map(|q| (0..n).map(move |k| if k <= q { 0.0 } else { MASKED })).collect();
            Tensor::from_data(TensorData::new(data, [s, n]), device)
        };
        let mut masks = [None, None];
        let mut tables = [None, None];
        for kind in [LayerType::Sliding, LayerType::Full] {
            if let Some(inv_freq) = &self.inv_freq[kind.index()] {
                masks[kind.index()] = Some(match kind {
                    LayerType::Sliding => {
                        Tensor::from_data(TensorData::new(sliding_mask_values(), [s, self.ring_capacity]), device)
                    }
                    LayerType::Full => full_mask(),
                });
                tables[kind.index()] = Some(ChunkTable::new(inv_freq, start, s, keys(kind), device));
            }
        }
        Ok(ChunkGeometry { start, len: s, masks, tables, ring_positions_after, whole_cache: false })
    }

    /// Writes a chunk's keys and values (`Hkv` heads each, before their norms and RoPE) into layer
    /// `layer`'s cache (keys normed with `k_norm` and rotated, values normed when `v_normed`) and
    /// returns the keys and values attention reads: `[Hkv, n, d]` (the cache so far, or the whole
    /// ring).
    pub(crate) fn write(
        &mut self,
        layer: usize,
        geometry: &ChunkGeometry,
        (k, k_norm): (HeadColumns, &Tensor<1>),
        (v, v_normed): (HeadColumns, bool),
        eps: f32,
    ) -> (Tensor<3>, Tensor<3>) {
        let kv = self.layers[layer].as_mut().expect("only layers with their own K/V write to the cache");
        let (heads, d) = (k.heads, k.head_dim);
        let table = geometry.table(kv.kind, d);
        // Slots are (start + t) % capacity: a full-attention cache never wraps, a ring may. Burn
        // writes in place only into a tensor nothing else references: the caches are handed over.
        if !(kv.keys.can_mut() && kv.values.can_mut()) {
            // Held elsewhere too (a checkpoint's ring): this write copies them into new buffers.
            self.buffers = new_buffers_name();
        }
        let keys = std::mem::replace(&mut kv.keys, self.placeholder.clone());
        let values = std::mem::replace(&mut kv.values, self.placeholder.clone());
        (kv.keys, kv.values) = write_keys_values(keys, values, k, k_norm, v, v_normed, table, eps);
        match kv.kind {
            LayerType::Full if geometry.whole_cache => (kv.keys.clone(), kv.values.clone()),
            LayerType::Full => {
                let start = geometry.start;
                let end = start + geometry.len;
                (kv.keys.clone().slice([0..heads, 0..end, 0..d]), kv.values.clone().slice([0..heads, 0..end, 0..d]))
            }
            LayerType::Sliding => (kv.keys.clone(), kv.values.clone()),
        }
    }

    /// [`Self::write`] left to the attention of a one-token step that reads the whole cache
    /// ([`ChunkGeometry::reads_whole_cache`]): `attend` gets layer `layer`'s whole keys and values
    /// `[Hkv, capacity, d]`, writes the token's key and value at its slot while it reads them (the
    /// decode attention's split launch), and returns its output with the keys and values, which
    /// the cache keeps. Returns the output and the keys and values, as [`Self::write`] does.
    pub(crate) fn attend_writing<R>(
        &mut self,
        layer: usize,
        attend: impl FnOnce(Tensor<3>, Tensor<3>) -> (R, Tensor<3>, Tensor<3>),
    ) -> (R, Tensor<3>, Tensor<3>) {
        let kv = self.layers[layer].as_mut().expect("only layers with their own K/V write to the cache");
        if !(kv.keys.can_mut() && kv.values.can_mut()) {
            // Held elsewhere too (a checkpoint's ring): this write copies them into new buffers.
            self.buffers = new_buffers_name();
        }
        // Handed over whole (no new tensor: a recorded step may allocate nothing), as in `write`.
        let keys = std::mem::replace(&mut kv.keys, self.placeholder.clone());
        let values = std::mem::replace(&mut kv.values, self.placeholder.clone());
        let out;
        (out, kv.keys, kv.values) = attend(keys, values);
        (out, kv.keys.clone(), kv.values.clone())
    }

    pub(crate) fn commit(&mut self, geometry: &ChunkGeometry) {
        self.ring_positions.clone_from(&geometry.ring_positions_after);
        self.len = geometry.start + geometry.len;
    }
}
