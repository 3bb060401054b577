//! Gemma 4's assistant (drafter) for speculative decoding: transformers' `gemma4_assistant`
//! (`Gemma4AssistantForCausalLM`, 5.23), as the spec reads: [`config`] → layers → forward.
//!
//! The drafter has no KV cache of its own. Every draft step runs at one position `p`, the position
//! of the token the main model has just sampled (not yet in its cache), and its 4 layers attend to
//! the main model's keys and values: those of the main model's last full-attention layer (every
//! position `0..p`) and of its last sliding layer (the last `window + 1` positions before `p`:
//! transformers' bidirectional sliding mask, flipped on the key axis), both cached by
//! [`KvCache`](crate::KvCache). One step:
//!
//! ```text
//! x = [ E_main[token] · √H  |  state ]        [1, 2H]   state: the main model's last hidden
//!                                                        state (after its final norm), then
//!                                                        the previous step's `state`
//! x = x · pre_projection                       [1, h]
//! x = layers(x)  (no PLE; queries only)        [1, h]
//! x = RMSNorm(x)                               [1, h]
//! state  = x · post_projection                 [1, H]    the next step's state
//! logits = x · E_draftᵀ (tied), or the centroid-masked head   [1, vocab]
//! ```
//!
//! Shapes: H = the main model's width, h = the drafter's, Hq = query heads, Hkv = key/value heads,
//! d = head dim of the layer, n = keys read.
//!
//! The engine's round: the main model runs its tokens with [`Gemma::forward`] (`Output::AllWithHidden`) (the prompt,
//! or the last token and the drafts it verifies), rewinds its cache to the accepted positions
//! ([`KvCache::truncate`](crate::KvCache::truncate)) and samples the next token from the logits of
//! the last accepted position; [`Drafter::context`] then reads the cache, and [`Drafter::step`]
//! drafts from that token and that position's hidden state, then from each draft and the returned
//! state.

mod config;
mod load;

use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use hearth_kernels::{
    CacheInput, ChunkTable, DecodeQuery, HeadColumns, KeySlots, Slots, add_rms_norm, attention_softmax, copy_ids_into,
    copy_into, decode_attention, fused_decode_applies, gelu_tanh_mul, has_fused_kernels, overwrite, overwrite_ids,
    rms_norm, write_cache,
};

pub use config::{DrafterConfig, DrafterError, DrafterHead};
#[cfg(not(target_family = "wasm"))]
pub use load::load_dir;

use crate::cache::{KvCache, MASKED};
use crate::config::LayerType;
use crate::error::ModelError;
use crate::gemma::{Gemma, device_ids};
use crate::step_recording::{self, Recorded, Recording, RecordingStatus, StepToken};

/// One decoder layer: a Gemma 4 layer whose attention has queries only (keys and values are the
/// main model's) and no per-layer input. Matrices are f32, stored `[in, out]`.
struct DrafterLayer {
    kind: LayerType,
    q_proj: Tensor<2>,
    q_norm: Tensor<1>,
    o_proj: Tensor<2>,
    gate_proj: Tensor<2>,
    up_proj: Tensor<2>,
    down_proj: Tensor<2>,
    input_norm: Tensor<1>,
    post_attention_norm: Tensor<1>,
    pre_feedforward_norm: Tensor<1>,
    post_feedforward_norm: Tensor<1>,
    layer_scalar: f32,
}

/// The drafter's token embedding `[vocab, h]` (its output head) in row blocks that each fit a
/// storage binding (E2B's is 262 144 × 256 f32, 256 MiB).
struct TokenRows {
    /// `[rows_per_block, h]` each (the last may be shorter).
    blocks: Vec<Tensor<2>>,
    rows_per_block: usize,
}

impl TokenRows {
    /// `x · Eᵀ`: [1, h] → [1, vocab]
    fn logits(&self, x: Tensor<2>) -> Tensor<2> {
        let parts: Vec<Tensor<2>> = self.blocks.iter().map(|b| x.clone().matmul(b.clone().transpose())).collect();
        Tensor::cat(parts, 1)
    }

    /// Rows `ids` (on the device): [n] → [n, h]. Each block gives the rows it holds (the others
    /// zeroed), so the ids never come back to the host.
    fn rows(&self, ids: Tensor<1, Int>) -> Tensor<2> {
        if let [only] = self.blocks.as_slice() {
            return only.clone().select(0, ids);
        }
        let n = ids.dims()[0];
        let mut sum: Option<Tensor<2>> = None;
        for (b, block) in self.blocks.iter().enumerate() {
            let (start, len) = (b * self.rows_per_block, block.dims()[0]);
            let local = ids.clone().sub_scalar(start as i64);
            let held = local.clone().greater_equal_elem(0).bool_and(local.clone().lower_elem(len as i64));
            let rows = block.clone().select(0, local.clamp(0, len as i64 - 1));
            let rows = rows * held.float().reshape([n, 1]);
            sum = Some(match sum {
                Some(s) => s + rows,
                None => rows,
            });
        }
        sum.expect("an embedding has at least one block")
    }
}

/// The centroid-masked head (`Gemma4AssistantMaskedEmbedder`).
struct CentroidHead {
    /// `[h, C]`
    centroids: Tensor<2>,
    /// `[C, vocab / C]`: cluster `c`'s tokens (`token_ordering` as rows).
    clusters: Tensor<2, Int>,
    top_k: usize,
}

impl CentroidHead {
    /// The top-k clusters' tokens scored as `x · E[t]`, every other token the lowest of those
    /// scores minus one: [1, h] → [1, vocab].
    fn logits(&self, rows: &TokenRows, x: Tensor<2>, vocab: usize) -> Tensor<2> {
        let [clusters, per_cluster] = self.clusters.dims();
        debug_assert_eq!(clusters * per_cluster, vocab);
        let (_, top) = x.clone().matmul(self.centroids.clone()).topk_with_indices(self.top_k, 1); // [1, k]
        let n = self.top_k * per_cluster;
        let ids = self.clusters.clone().select(0, top.reshape([self.top_k])).reshape([n]); // [k·vocab/C]
        let selected = x.matmul(rows.rows(ids.clone()).transpose()); // [1, n]
        let fill = selected.clone().min().sub_scalar(1.0).reshape([1, 1]);
        let out = Tensor::zeros([1, vocab], &selected.device()) + fill;
        out.scatter(1, ids.reshape([1, n]), selected, burn::tensor::IndexingUpdateOp::Assign)
    }
}

#[allow(clippy::large_enum_variant)] // one per drafter
enum Head {
    Tied,
    Centroids(CentroidHead),
}

pub struct Drafter {
    pub config: DrafterConfig,
    device: Device,
    /// `[2H, h]`
    pre_projection: Tensor<2>,
    /// `[h, H]`
    post_projection: Tensor<2>,
    layers: Vec<DrafterLayer>,
    final_norm: Tensor<1>,
    /// The output embedding (tied: the drafter's `model.embed_tokens`).
    embedding: TokenRows,
    head: Head,
    /// The main model's layers whose K/V the drafter reads (index: `LayerType::index`).
    main_layers: [Option<usize>; 2],
    /// Whether draft steps are recorded and replayed (as the main model's one-token steps are).
    recording: Recording,
    /// Draft steps recorded against caches' buffers (one per cache state, the latest
    /// [`MAX_RECORDINGS`]), each replayed for every later step on those buffers: tasks in two tabs
    /// draft in turns without recording again at each turn.
    recorded: Mutex<Vec<RecordedDraft>>,
}

/// What the drafter reads of the main model for one round of drafting: its keys and values up to
/// the position drafted from. It holds the cache's buffers and so borrows the cache: drop it
/// before the main model's next forward (which would otherwise copy those buffers).
pub struct DraftContext<'c> {
    /// The position of every step's input token: the main model's cache length.
    position: usize,
    /// Per layer type (index: `LayerType::index`).
    kinds: [Option<SharedKv>; 2],
    /// The cache's buffers as this context reads them (`KvCache::buffers`): a recording made on
    /// others is not replayed.
    buffers: u64,
    /// This context among all: a recording rewrites its masks and tables once per context.
    serial: u64,
    _cache: PhantomData<&'c KvCache>,
}

impl DraftContext<'_> {
    /// The position every step of this round runs at.
    pub fn position(&self) -> usize {
        self.position
    }
}

/// One main-model layer's keys and values as a drafter layer of the same type reads them.
struct SharedKv {
    /// `[Hkv, n, d]`
    keys: Tensor<3>,
    values: Tensor<3>,
    /// `[1, n]`: 0 where the drafter may look, `MASKED` elsewhere.
    mask: Tensor<2>,
    /// The query's rotation at the context's position, and the slots read.
    table: ChunkTable,
    /// What the mask and the table were made from, for a recording's own copies of them.
    visible: Vec<f32>,
    inv_freq: Vec<f32>,
    slots: KeySlots,
}

/// One layer type's keys and values as a draft step's attention reads them.
#[derive(Clone, Copy)]
struct KvView<'a> {
    keys: &'a Tensor<3>,
    values: &'a Tensor<3>,
    mask: &'a Tensor<2>,
    table: &'a ChunkTable,
}

impl SharedKv {
    fn view(&self) -> KvView<'_> {
        KvView { keys: &self.keys, values: &self.values, mask: &self.mask, table: &self.table }
    }
}

/// A draft step recorded once and replayed for every later step while the main model's cache
/// keeps its buffers: like the main model's one-token step (`crate::step_recording`), everything
/// a step changes lives in buffers rewritten before the replay: the input token's id, the state,
/// and per round each layer type's mask and chunk table (position, key count). The keys and
/// values are the cache's own buffers, named by `buffers`.
struct RecordedDraft {
    graph: BackendGraph<Dispatch>,
    buffers: u64,
    /// The context whose masks and tables the buffers below hold.
    serial: u64,
    id: Tensor<1, Int>,
    state: Tensor<2>,
    /// Per layer type: the mask and the chunk table the recording reads.
    kinds: [Option<(Tensor<2>, ChunkTable)>; 2],
    /// What every replay writes: the logits and the next state, returned as the step's.
    logits: Tensor<2>,
    next_state: Tensor<2>,
}

/// Recordings a drafter keeps: a few caches drafting in turns (tabs), each at its latest state.
const MAX_RECORDINGS: usize = 4;

/// The serial of the next draft context.
fn next_context_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One draft step's output.
pub struct Draft {
    /// `[1, vocab]`
    pub logits: Tensor<2>,
    /// `[1, H]`: the next step's `state`.
    pub state: Tensor<2>,
}

impl Drafter {
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The main model's keys and values as this drafter reads them, from `cache` (the main
    /// model's, holding the positions before the token drafted from).
    pub fn context<'c>(&self, cache: &'c KvCache) -> Result<DraftContext<'c>, DrafterError> {
        let p = cache.len();
        if p == 0 {
            return Err(DrafterError::EmptyContext);
        }
        let window = self.config.text.sliding_window;
        // The fused attention reads the key count from the chunk table: a full layer's whole
        // buffer is handed over (its shape the same every round, as a recording needs) and only
        // the positions held are read.
        let whole = has_fused_kernels(&self.device);
        let mut kinds = [None, None];
        for layer in &self.config.text.layers {
            let slot = layer.kind.index();
            if kinds[slot].is_some() {
                continue;
            }
            let main_layer =
                self.main_layers[slot].ok_or(DrafterError::NoKvLayer { kind: config::kind_name(layer.kind) })?;
            let kv = cache.layer_kv(main_layer, whole).ok_or(DrafterError::CacheMismatch(main_layer))?;
            if kv.kind != layer.kind {
                return Err(DrafterError::CacheMismatch(main_layer));
            }
            // Full: every position. Sliding: transformers' bidirectional window (|q − k| ≤ window
            // from the key axis' far end), i.e. the last `window + 1` positions.
            let first = match layer.kind {
                LayerType::Full => 0,
                LayerType::Sliding => p.saturating_sub(window + 1),
            };
            let visible: Vec<f32> = kv
                .positions
                .iter()
                .map(|pos| if pos.is_some_and(|q| q >= first && q < p) { 0.0 } else { MASKED })
                .collect();
            let held = visible.iter().filter(|&&v| v == 0.0).count();
            if held != p - first {
                return Err(DrafterError::WindowNotHeld { first, end: p });
            }
            let n = visible.len();
            let slots = match layer.kind {
                LayerType::Full if whole => KeySlots { first: 0, count: p },
                _ => n.into(),
            };
            let inv_freq = layer.rope.inv_freq.clone();
            kinds[slot] = Some(SharedKv {
                keys: kv.keys,
                values: kv.values,
                mask: Tensor::from_data(TensorData::new(visible.clone(), [1, n]), &self.device),
                table: ChunkTable::new(&inv_freq, p, 1, slots, &self.device),
                visible,
                inv_freq,
                slots,
            });
        }
        Ok(DraftContext {
            position: p,
            kinds,
            buffers: cache.buffers(),
            serial: next_context_serial(),
            _cache: PhantomData,
        })
    }

    /// One draft step at the context's position: `token` is the input token (the main model's
    /// sampled token, then each draft), `state` `[1, H]` the main model's hidden state at the
    /// position before (a row of [`Gemma::forward`] (`Output::AllWithHidden`)), then the previous step's.
    pub fn step(
        &self,
        main: &Gemma,
        context: &DraftContext,
        token: u32,
        state: Tensor<2>,
    ) -> Result<Draft, DrafterError> {
        if token as usize >= self.config.text.vocab_size {
            return Err(ModelError::TokenOutOfRange(token).into());
        }
        self.step_from(main, context, StepToken::Host(token), state)
    }

    /// [`Self::step`] from a token chosen on the device (`[1, 1]`: the last draft's choice, not
    /// read back), so that a chain of draft steps needs no readback between them. Needs
    /// [`Gemma::steps_on_device`].
    pub fn step_chosen(
        &self,
        main: &Gemma,
        context: &DraftContext,
        chosen: &Tensor<2, Int>,
        state: Tensor<2>,
    ) -> Result<Draft, DrafterError> {
        if !main.steps_on_device() {
            return Err(ModelError::HostLookups.into());
        }
        self.step_from(main, context, StepToken::Device(&device_ids(chosen)), state)
    }

    fn step_from(
        &self,
        main: &Gemma,
        context: &DraftContext,
        token: StepToken,
        state: Tensor<2>,
    ) -> Result<Draft, DrafterError> {
        let (width, main_width) = (self.config.backbone_hidden_size, main.config.hidden_size);
        if main_width != width {
            return Err(DrafterError::BackboneWidth { drafter: width, main: main_width });
        }
        if state.dims() != [1, width] {
            return Err(DrafterError::StateShape { width, actual: state.dims().to_vec() });
        }
        if main.steps_on_device() && has_fused_kernels(&self.device) && self.recording.take_turn() {
            return self.recorded_step(main, context, token, state);
        }
        let embedded = embed(main, token);
        self.forward(embedded, state, context.kinds.each_ref().map(|kind| kind.as_ref().map(SharedKv::view)))
    }

    /// A draft step through the recording: replayed when one was made on the context's cache
    /// buffers, else recorded now (and run). A recording that fails leaves the drafter launching
    /// its steps one by one; the step's own result stands (a draft step writes nothing the
    /// cache keeps).
    fn recorded_step(
        &self,
        main: &Gemma,
        context: &DraftContext,
        token: StepToken,
        state: Tensor<2>,
    ) -> Result<Draft, DrafterError> {
        let mut recordings = self.recorded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(recorded) = recordings.iter_mut().find(|r| r.buffers == context.buffers) {
            recorded.rewrite(context, token, state);
            // A replay writes into the buffers the last step returned: if the caller still holds
            // them, this step runs launch by launch from the recording's inputs instead.
            if !(recorded.logits.can_mut() && recorded.next_state.can_mut()) {
                let embedded = main.token_embedding_ids(&recorded.id);
                return self.forward(embedded, recorded.state.clone(), recorded.views(context));
            }
            // Safety: every buffer the recording touched is alive and unchanged: the weights (the
            // drafter and the main model outlive their steps), the cache's keys and values (the
            // context holds them, and `buffers` names them as they were recorded), and the
            // inputs and outputs held in `recorded`. Everything runs on this one device stream.
            let replayed = unsafe { Dispatch::graph_replay(self.device.as_dispatch(), &recorded.graph) };
            match replayed {
                Ok(()) => return Ok(Draft { logits: recorded.logits.clone(), state: recorded.next_state.clone() }),
                Err(err) => {
                    // The replay's outputs carry the failure: this step launches its kernels
                    // from the recording's inputs, and the recording goes.
                    self.recording.failed("replaying a draft step", err.to_string());
                    let embedded = main.token_embedding_ids(&recorded.id);
                    let draft = self.forward(embedded, recorded.state.clone(), recorded.views(context));
                    recordings.retain(|r| r.buffers != context.buffers);
                    return draft;
                }
            }
        }
        let inputs = DraftInputs::new(context, token, state, &self.device);
        let mut run = || {
            let embedded = main.token_embedding_ids(&inputs.id);
            self.forward(embedded, inputs.state.clone(), inputs.views(context))
        };
        // A failed recording wrote nothing the cache keeps (a draft step's outputs are its own):
        // the first run's draft stands.
        match step_recording::record(&self.device, &self.recording, "recording a draft step", &mut run) {
            Recorded::Not(draft) | Recorded::Failed { first: draft } => draft,
            Recorded::Graph { first, graph, outputs } => {
                let outputs = outputs?;
                let DraftInputs { id, state, kinds } = inputs;
                // The oldest goes: most likely a cache state that has moved on (a checkpoint, a
                // restore and a copied ring name the buffers anew).
                if recordings.len() >= MAX_RECORDINGS {
                    recordings.remove(0);
                }
                recordings.push(RecordedDraft {
                    graph,
                    buffers: context.buffers,
                    serial: context.serial,
                    id,
                    state,
                    kinds,
                    logits: outputs.logits,
                    next_state: outputs.state,
                });
                first
            }
        }
    }

    /// Whether draft steps are recorded and replayed (on by default, where the kernels run and
    /// the main model looks its tokens up on the device; off, every step launches its kernels).
    pub fn set_step_recording(&self, enabled: bool) {
        self.recording.set_enabled(enabled);
        if !enabled {
            self.recorded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
        }
    }

    /// Whether draft steps are recorded and replayed now (on, and not paused after a failed
    /// recording).
    pub fn records_steps(&self) -> bool {
        self.recording.active()
    }

    /// What became of this drafter's recordings.
    pub fn recording_status(&self) -> RecordingStatus {
        self.recording.status()
    }

    /// Whether a recorded draft step is ready to replay on `cache` as it is now.
    pub fn holds_recorded_step(&self, cache: &KvCache) -> bool {
        self.recorded.lock().map(|all| all.iter().any(|r| r.buffers == cache.buffers())).unwrap_or(false)
    }

    /// Makes the next recording of a draft step fail as a device's may (a test of the fallback).
    pub fn fail_next_recording(&self) {
        self.recording.fail_next();
    }

    /// The step's layers from the token's embedding `[1, H]` and the state `[1, H]`, the keys and
    /// values of each layer type as `kinds` gives them.
    fn forward(
        &self,
        embedded: Tensor<2>,
        state: Tensor<2>,
        kinds: [Option<KvView>; 2],
    ) -> Result<Draft, DrafterError> {
        let c = &self.config.text;
        let eps = c.rms_norm_eps;
        let input = Tensor::cat(vec![embedded, state], 1); // [1, 2H]
        let mut x = input.matmul(self.pre_projection.clone()); // [1, h]
        for (i, layer) in self.layers.iter().enumerate() {
            let shared = kinds[layer.kind.index()].ok_or(DrafterError::CacheMismatch(i))?;
            let attn = self.attention(i, layer, rms_norm(x.clone(), &layer.input_norm, eps), shared);
            x = add_rms_norm(x, attn, &layer.post_attention_norm, eps, 1.0);
            let m = rms_norm(x.clone(), &layer.pre_feedforward_norm, eps);
            let m = gelu_tanh_mul(m.clone().matmul(layer.gate_proj.clone()), m.matmul(layer.up_proj.clone()));
            // Gemma 4 scales the layer's output: folded into the last residual add.
            x = add_rms_norm(
                x,
                m.matmul(layer.down_proj.clone()),
                &layer.post_feedforward_norm,
                eps,
                layer.layer_scalar,
            );
        }
        let x = rms_norm(x, &self.final_norm, eps);
        let state = x.clone().matmul(self.post_projection.clone()); // [1, H]
        let logits = match &self.head {
            Head::Tied => self.embedding.logits(x),
            Head::Centroids(head) => head.logits(&self.embedding, x, c.vocab_size),
        };
        Ok(Draft { logits, state })
    }

    /// Layer `i`'s attention of the one query over the main model's keys: [1, h] (normed) → [1, h]
    fn attention(&self, i: usize, layer: &DrafterLayer, normed: Tensor<2>, shared: KvView) -> Tensor<2> {
        let c = &self.config.text;
        let (heads, d) = (c.num_heads, c.layers[i].head_dim);
        let q = HeadColumns::whole(normed.matmul(layer.q_proj.clone()), heads, d);
        let (scale, softcap) = (c.attention_scale, c.attention_logit_softcap);
        if fused_decode_applies(&self.device, 1, d) {
            let query = DecodeQuery { q, norm: &layer.q_norm, table: shared.table, eps: c.rms_norm_eps };
            let out = decode_attention(
                query,
                shared.keys.clone(),
                shared.values.clone(),
                shared.mask.clone(),
                scale,
                softcap,
            );
            return out.matmul(layer.o_proj.clone());
        }
        // q normed and rotated at the context's position: [H, 1, d]
        let q_input = CacheInput::NormedRotated { weight: &layer.q_norm };
        let q = write_cache(
            Tensor::empty([heads, 1, d], &self.device),
            q,
            q_input,
            shared.table,
            Slots::FromZero,
            c.rms_norm_eps,
        );
        // GQA: query head h reads key/value head h / group.  [Hkv, group, d]
        let [kv_heads, n, _] = shared.keys.dims();
        let group = heads / kv_heads;
        let q = q.reshape([kv_heads, group, d]);
        let scores = q.matmul(shared.keys.clone().swap_dims(1, 2)).reshape([kv_heads, group, 1, n]);
        let probs = attention_softmax(scores, shared.mask.clone(), scale, softcap).reshape([kv_heads, group, n]);
        let out = probs.matmul(shared.values.clone()); // [Hkv, group, d]
        out.reshape([1, heads * d]).matmul(layer.o_proj.clone())
    }
}

/// The token's scaled main-model embedding `[1, H]`.
fn embed(main: &Gemma, token: StepToken) -> Tensor<2> {
    match token {
        StepToken::Host(token) => main.token_embedding(&[token]),
        StepToken::Device(ids) => main.token_embedding_ids(ids),
    }
}

/// A recorded step's inputs in buffers of its own: the token's id, the state, and each layer
/// type's mask and chunk table.
struct DraftInputs {
    id: Tensor<1, Int>,
    state: Tensor<2>,
    kinds: [Option<(Tensor<2>, ChunkTable)>; 2],
}

impl DraftInputs {
    fn new(context: &DraftContext, token: StepToken, state: Tensor<2>, device: &Device) -> Self {
        let mut id = Tensor::from_data(TensorData::new(vec![0u32], [1]), (device, DType::U32));
        write_id(&mut id, token);
        let mut own_state = Tensor::zeros(state.shape(), device);
        copy_into(&mut own_state, state);
        let kinds = context.kinds.each_ref().map(|kind| {
            kind.as_ref().map(|kv| {
                let n = kv.visible.len();
                let mask = Tensor::from_data(TensorData::new(kv.visible.clone(), [1, n]), device);
                (mask, ChunkTable::new(&kv.inv_freq, context.position, 1, kv.slots, device))
            })
        });
        DraftInputs { id, state: own_state, kinds }
    }

    /// The context's keys and values with these masks and tables.
    fn views<'a>(&'a self, context: &'a DraftContext) -> [Option<KvView<'a>>; 2] {
        views(&self.kinds, context)
    }
}

impl RecordedDraft {
    /// Rewrites the inputs, in their own buffers, for this step: the id and the state, and the
    /// masks and tables once per context.
    fn rewrite(&mut self, context: &DraftContext, token: StepToken, state: Tensor<2>) {
        write_id(&mut self.id, token);
        copy_into(&mut self.state, state);
        if self.serial != context.serial {
            for (own, kind) in self.kinds.iter_mut().zip(&context.kinds) {
                if let (Some((mask, table)), Some(kv)) = (own.as_mut(), kind.as_ref()) {
                    overwrite(mask, kv.visible.clone());
                    table.rewrite(&kv.inv_freq, context.position, kv.slots);
                }
            }
            self.serial = context.serial;
        }
    }

    fn views<'a>(&'a self, context: &'a DraftContext) -> [Option<KvView<'a>>; 2] {
        views(&self.kinds, context)
    }
}

/// Each layer type's keys and values from the context, its mask and table from `own`.
fn views<'a>(own: &'a [Option<(Tensor<2>, ChunkTable)>; 2], context: &'a DraftContext) -> [Option<KvView<'a>>; 2] {
    let mut views = [None, None];
    for ((view, own), kind) in views.iter_mut().zip(own).zip(&context.kinds) {
        if let (Some((mask, table)), Some(kv)) = (own, kind) {
            *view = Some(KvView { keys: &kv.keys, values: &kv.values, mask, table });
        }
    }
    views
}

/// Writes the token's id into a recording's one-id buffer.
fn write_id(id: &mut Tensor<1, Int>, token: StepToken) {
    match token {
        StepToken::Host(token) => overwrite_ids(id, vec![token]),
        StepToken::Device(chosen) => copy_ids_into(id, chosen.clone()),
    }
}
