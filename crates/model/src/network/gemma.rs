//! The Gemma text decoder (Gemma 4 E2B/E4B and Gemma 3), one implementation with config switches.
//! It follows ../shared/reference/gemma4-architecture.md section by section; batch size is 1.
//!
//! Shapes: S = new tokens in this call, n = keys visible, h = hidden, H = query heads,
//! Hkv = key/value heads, d = head dim of the layer, L = layers, P = per-layer-input width.

use burn::tensor::{DType, Device, Int, Tensor};
use hearth_kernels::{
    AffineMatrix, BlockTable, CacheInput, DecodeQuery, HeadColumns, NewKeys, Slots, add_rms_norm, attention_softmax,
    decode_attention, decode_attention_writing, fused_decode_applies, gelu_tanh_mul, has_fused_kernels, rms_norm,
    write_cache,
};

use crate::cache::{CacheOptions, ChunkGeometry, KvCache};
use crate::config::TextConfig;
pub use crate::error::ModelError;
use crate::step_recording::{self, RecordingStatus, StepToken};

mod embedding;
mod load;
mod load_driver;
use embedding::{EmbeddingBlock, HostTable, SplitEmbedding, TokenTable};
pub use load::{GemmaLoader, PlannedTensor};
pub use load_driver::{FetchedFile, HeaderError, LoadStep, open_headers};

/// Gemma's padding token: what an image placeholder is looked up as.
const PAD_TOKEN: u32 = 0;

/// Rows that stand in for the embeddings of a prompt's placeholder tokens (an image's or a
/// clip's soft tokens): the i-th placeholder in the prompt, of whichever kind, takes row i.
pub struct SoftTokens {
    /// The placeholder tokens (`<|image|>`, `<|audio|>`).
    pub placeholders: Vec<u32>,
    /// [placeholders, h]
    pub rows: Tensor<2>,
}

impl SoftTokens {
    /// Rows for the placeholders of one kind.
    pub fn new(placeholder: u32, rows: Tensor<2>) -> Self {
        SoftTokens { placeholders: vec![placeholder], rows }
    }

    /// Whether `token` is one of the placeholders.
    pub fn holds(&self, token: u32) -> bool {
        self.placeholders.contains(&token)
    }

    /// The same placeholders with rows `range` of these.
    fn rows_in(&self, range: std::ops::Range<usize>) -> SoftTokens {
        let h = self.rows.dims()[1];
        SoftTokens { placeholders: self.placeholders.clone(), rows: self.rows.clone().slice([range, 0..h]) }
    }
}

/// What one forward pass reads ([`Gemma::forward`]).
#[derive(Clone, Copy)]
pub enum Input<'a> {
    /// Token ids from the host; `soft_tokens` take the embeddings of their placeholder tokens (an
    /// image's soft tokens, in the order its placeholders appear in `ids`).
    Ids { ids: &'a [u32], soft_tokens: Option<&'a SoftTokens> },
    /// One token chosen on the device by the last step's sampling, `[1, 1]` ids not read back yet
    /// (needs [`Gemma::steps_on_device`]; never an image's placeholder).
    Chosen(&'a Tensor<2, Int>),
}

impl<'a> Input<'a> {
    /// Text tokens.
    pub fn ids(ids: &'a [u32]) -> Self {
        Input::Ids { ids, soft_tokens: None }
    }

    /// Tokens with images at their placeholders (`None`: text only).
    pub fn with_images(ids: &'a [u32], soft_tokens: Option<&'a SoftTokens>) -> Self {
        Input::Ids { ids, soft_tokens }
    }
}

/// What one forward pass returns ([`Gemma::forward`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The last position's logits, `[1, vocab]` (`[0, vocab]` for no tokens).
    Last,
    /// Every position's logits, `[S, vocab]`.
    All,
    /// Every position's logits and hidden state after the final norm, `[S, vocab]` and `[S, h]`:
    /// a drafter reads the state of the last position it drafts from.
    AllWithHidden,
    /// The last position's logits and hidden state, `[1, vocab]` and `[1, h]`: a prompt a drafter
    /// will draft after.
    LastWithHidden,
}

impl Output {
    fn hidden(self) -> bool {
        matches!(self, Output::AllWithHidden | Output::LastWithHidden)
    }
}

/// A forward pass's result.
pub struct Forwarded {
    /// `[rows, vocab]`, the rows the output asked for.
    pub logits: Tensor<2>,
    /// `[rows, h]` after the final norm, when the output asked for them (nothing is made for a
    /// decoded token's logits).
    pub hidden: Option<Tensor<2>>,
}

impl Forwarded {
    /// `(logits, hidden)` of an output that asked for the hidden states (`[0, 0]` otherwise).
    pub fn into_parts(self) -> (Tensor<2>, Tensor<2>) {
        let hidden = self.hidden.unwrap_or_else(|| self.logits.clone().slice([0..0, 0..0]));
        (self.logits, hidden)
    }
}

/// Weights of a linear layer.
// A few hundred per model, each holding device handles: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Linear {
    /// f32, stored transposed ([in, out]) so that `x · W` needs no transpose.
    Dense(Tensor<2>),
    /// 4- or 8-bit codes as the checkpoint has them ([out, in]), multiplied by the fused kernel.
    Affine(AffineMatrix),
}

impl Linear {
    /// [S, in] → [S, out]
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        match self {
            Linear::Dense(w) => x.matmul(w.clone()),
            Linear::Affine(w) => w.matmul_transposed(x),
        }
    }
}

/// A sublayer's input and the RMSNorm in front of its projections. Packed projections fold the
/// norm into their kernel (no dispatch of its own); dense ones share one normalised copy,
/// computed on first use.
///
/// The input may still lack the previous layer's last output ([`PendingOutput`]): for one token
/// the first packed projection adds it in its own kernel (the update's launch saved), and the
/// updated residual is kept for what follows.
struct NormedInput<'a> {
    /// [S, h]: the residual stream, before `update` when there is one.
    x: Tensor<2>,
    /// The previous layer's output, and `[its post-norm ‖ this input's norm]` as the fused kernel
    /// reads them.
    update: Option<(PendingOutput<'a>, &'a Tensor<1>)>,
    /// `x` after `update`, once computed.
    updated: std::cell::OnceCell<Tensor<2>>,
    weight: &'a Tensor<1>,
    eps: f32,
    normed: std::cell::OnceCell<Tensor<2>>,
}

impl<'a> NormedInput<'a> {
    fn new(x: Tensor<2>, weight: &'a Tensor<1>, eps: f32) -> Self {
        NormedInput {
            x,
            update: None,
            updated: std::cell::OnceCell::new(),
            weight,
            eps,
            normed: std::cell::OnceCell::new(),
        }
    }

    /// The input `x` after `pending` (added now unless `joined_norms` lets the first projection
    /// add it).
    fn after(
        x: Tensor<2>,
        pending: Option<PendingOutput<'a>>,
        joined_norms: Option<&'a Tensor<1>>,
        weight: &'a Tensor<1>,
        eps: f32,
    ) -> Self {
        match (pending, joined_norms) {
            (Some(output), Some(joined_norms)) => {
                NormedInput { update: Some((output, joined_norms)), ..Self::new(x, weight, eps) }
            }
            (Some(PendingOutput { delta, post_norm, scale }), None) => {
                Self::new(add_rms_norm(x, delta, post_norm, eps, scale), weight, eps)
            }
            (None, _) => Self::new(x, weight, eps),
        }
    }

    fn tokens(&self) -> usize {
        self.x.dims()[0]
    }

    /// The residual stream with the update added: [S, h].
    fn residual(&self) -> Tensor<2> {
        match &self.update {
            None => self.x.clone(),
            Some((u, _)) => self
                .updated
                .get_or_init(|| add_rms_norm(self.x.clone(), u.delta.clone(), u.post_norm, self.eps, u.scale))
                .clone(),
        }
    }

    /// `gelu_tanh(gate(RMSNorm(x))) · up(RMSNorm(x))`: [S, h] → [S, inter]; one dispatch when
    /// both are packed alike, and for one token of a stacked pair a pending update too.
    fn gated(&self, gate_up: &GateUp) -> Tensor<2> {
        match gate_up {
            GateUp::Stacked(w) => {
                if let Some((u, joined_norms)) = &self.update
                    && self.updated.get().is_none()
                    && self.tokens() == 1
                {
                    let (updated, product) = w.residual_normed_gated_stacked(
                        self.x.clone(),
                        u.delta.clone(),
                        joined_norms,
                        self.eps,
                        u.scale,
                    );
                    let _ = self.updated.set(updated);
                    return product;
                }
                w.normed_gated_stacked(self.residual(), self.weight, self.eps)
            }
            GateUp::Separate { gate: Linear::Affine(g), up: Linear::Affine(u) } if g.pairs_with(u) => {
                g.normed_gated_matmul(u, self.residual(), self.weight, self.eps)
            }
            GateUp::Separate { gate, up } => gelu_tanh_mul(self.project(gate), self.project(up)),
        }
    }

    /// `RMSNorm(x) · Wᵀ` for a packed `W` (the norm folded into its kernel, and for one token a
    /// pending update too): [S, h] → [S, rows]
    fn project_packed(&self, w: &AffineMatrix) -> Tensor<2> {
        if let Some((u, joined_norms)) = &self.update
            && self.updated.get().is_none()
            && self.tokens() == 1
        {
            let (updated, product) =
                w.residual_normed_matmul(self.x.clone(), u.delta.clone(), joined_norms, self.eps, u.scale);
            let _ = self.updated.set(updated);
            return product;
        }
        w.normed_matmul_transposed(self.residual(), self.weight, self.eps)
    }

    /// `linear(RMSNorm(x))`: [S, h] → [S, out]
    fn project(&self, linear: &Linear) -> Tensor<2> {
        match linear {
            Linear::Affine(w) => self.project_packed(w),
            Linear::Dense(_) => {
                linear.forward(self.normed.get_or_init(|| rms_norm(self.residual(), self.weight, self.eps)).clone())
            }
        }
    }
}

struct Attention {
    projections: Projections,
    /// None on KV-shared layers: they reuse their producer's keys and values.
    k_norm: Option<Tensor<1>>,
    o_proj: Linear,
    /// RMSNorm weights over the head dimension, with the family's offset applied.
    q_norm: Tensor<1>,
    /// `[q_norm ‖ k_norm]` where q, k and v come out of one launch (a joint projection): a decoded
    /// token's attention split then also writes its key and value into the cache.
    joined_qk_norm: Option<Tensor<1>>,
}

/// The query, key and value projections of a layer.
#[allow(clippy::large_enum_variant)]
enum Projections {
    /// A KV-shared layer: queries only.
    Query(Linear),
    Separate {
        q: Linear,
        k: Linear,
        v: Linear,
    },
    /// q, k and v rows stacked in one packed matrix (packed alike): one launch, whose output
    /// holds q, k and v side by side.
    Joint(AffineMatrix),
}

struct Mlp {
    gate_up: GateUp,
    down_proj: Linear,
}

/// The MLP's gate and up projections.
#[allow(clippy::large_enum_variant)]
enum GateUp {
    /// Their rows stacked in one packed matrix `[gate; up]` (packed alike): one launch, which for
    /// one token also adds the attention's output to the residual stream.
    Stacked(AffineMatrix),
    Separate {
        gate: Linear,
        up: Linear,
    },
}

/// Gemma 4's per-layer input path inside a decoder layer.
struct LayerPerLayerInput {
    gate: Linear,
    projection: Linear,
    post_norm: Tensor<1>,
}

struct DecoderLayer {
    attention: Attention,
    mlp: Mlp,
    input_norm: Tensor<1>,
    post_attention_norm: Tensor<1>,
    pre_feedforward_norm: Tensor<1>,
    post_feedforward_norm: Tensor<1>,
    per_layer_input: Option<LayerPerLayerInput>,
    /// Gemma 4 multiplies the residual stream by a learned scalar at the end of each layer.
    layer_scalar: Option<f32>,
    /// `[the previous layer's last post-norm ‖ input_norm]`, where the fused kernels run: the
    /// previous layer's output joins the residual stream in this layer's first projection.
    joined_input_norm: Option<Tensor<1>>,
    /// `[post-attention norm ‖ pre-feedforward norm]`, where the MLP's first launch adds the
    /// attention's output for one token (a stacked gate and up on a device running the kernels).
    joined_mlp_norm: Option<Tensor<1>>,
}

impl DecoderLayer {
    /// The norm of the layer's last output before it joins the residual stream.
    fn last_post_norm(&self) -> &Tensor<1> {
        self.per_layer_input.as_ref().map_or(&self.post_feedforward_norm, |pli| &pli.post_norm)
    }
}

/// Gemma 4's per-layer embeddings: a [vocab, L·P] table of which only one row per token is
/// needed (it is larger than the rest of the model), plus a projection of the token embedding
/// computed on the device.
struct PerLayerEmbeddings {
    table: TokenTable,
    model_projection: Linear,
    projection_norm: Tensor<1>,
}

/// Where a loaded model's weights live, in bytes (u64: E4B's exceed wasm32's 4 GiB `usize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightBytes {
    pub device: u64,
    pub host: u64,
    /// Of `device`, what a decoded token reads only a row of (the per-layer-embedding table);
    /// `device − looked_up` is what each decoded token reads (every matrix, and the tied head).
    pub looked_up: u64,
}

pub struct Gemma {
    pub config: TextConfig,
    device: Device,
    /// [vocab, h] in row blocks; also the (tied) output head.
    embed_tokens: SplitEmbedding,
    per_layer: Option<PerLayerEmbeddings>,
    layers: Vec<DecoderLayer>,
    final_norm: Tensor<1>,
    /// Whether one-token steps are recorded and replayed (off after a recording failed).
    pub(crate) recording: step_recording::Recording,
}

/// The largest tensor the model puts on the device. WebGPU guarantees storage bindings of 128 MiB
/// (adapters often allow more, some not); Gemma's embedding is 0.4–1.6 GB in f32.
pub const MAX_TENSOR_BYTES: usize = 128 << 20;

/// Ids chosen on the device (`[n, 1]`, a sampler's choice) as the `[n]` ids the lookups read:
/// i32 ids (the wgpu backends' argmax) have the bits of the u32 the kernels read; others are cast.
pub(crate) fn device_ids(chosen: &Tensor<2, Int>) -> Tensor<1, Int> {
    let n = chosen.dims()[0];
    let ids = chosen.clone().reshape([n]);
    if matches!(ids.dtype(), DType::I32 | DType::U32) { ids } else { ids.cast(DType::U32) }
}

impl Gemma {
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of weights on the device and on the host (the per-layer-embedding table).
    pub fn weight_bytes(&self) -> WeightBytes {
        fn dense<const D: usize>(t: &Tensor<D>) -> u64 {
            t.shape().num_elements() as u64 * 4
        }
        let linear = |l: &Linear| match l {
            Linear::Dense(w) => dense(w),
            Linear::Affine(w) => w.device_bytes() as u64,
        };
        let mut device = dense(&self.final_norm);
        device += self.embed_tokens.blocks.iter().map(|b| b.device_bytes() as u64).sum::<u64>();
        let (mut host, mut looked_up) = (0, 0);
        if let Some(ple) = &self.per_layer {
            device += linear(&ple.model_projection) + dense(&ple.projection_norm);
            let (on_device, on_host) = ple.table.bytes();
            (device, host, looked_up) = (device + on_device, host + on_host, on_device);
        }
        for layer in &self.layers {
            let a = &layer.attention;
            device += linear(&a.o_proj) + dense(&a.q_norm) + a.k_norm.as_ref().map_or(0, dense);
            device += match &a.projections {
                Projections::Query(q) => linear(q),
                Projections::Separate { q, k, v } => linear(q) + linear(k) + linear(v),
                Projections::Joint(qkv) => qkv.device_bytes() as u64,
            };
            device += match &layer.mlp.gate_up {
                GateUp::Stacked(gate_up) => gate_up.device_bytes() as u64,
                GateUp::Separate { gate, up } => linear(gate) + linear(up),
            };
            device += linear(&layer.mlp.down_proj);
            if let Some(pli) = &layer.per_layer_input {
                device += linear(&pli.gate) + linear(&pli.projection) + dense(&pli.post_norm);
            }
            for norm in [
                &layer.input_norm,
                &layer.post_attention_norm,
                &layer.pre_feedforward_norm,
                &layer.post_feedforward_norm,
            ] {
                device += dense(norm);
            }
        }
        WeightBytes { device, host, looked_up }
    }

    /// The decoder's one entry point: runs `input` (at positions `cache.len()..`) through the
    /// layers, appending to `cache` in chunks it can take, and returns what `output` asks for
    /// (logits after the softcap, and the hidden states after the final norm that a drafter
    /// reads). A single host token and a token chosen on the device run as the cache's recorded
    /// step where the model records; hidden states are computed launch by launch.
    pub fn forward(&self, input: Input, cache: &mut KvCache, output: Output) -> Result<Forwarded, ModelError> {
        match input {
            Input::Chosen(chosen) => {
                if output.hidden() {
                    return Err(ModelError::ChosenHidden);
                }
                self.forward_chosen(chosen, cache).map(|logits| Forwarded { logits, hidden: None })
            }
            Input::Ids { ids, soft_tokens } => {
                if let Some(&bad) = ids.iter().find(|&&t| t as usize >= self.config.vocab_size) {
                    return Err(ModelError::TokenOutOfRange(bad));
                }
                if let Some(soft) = soft_tokens {
                    let placeholders = ids.iter().filter(|&&t| soft.holds(t)).count();
                    let rows = soft.rows.dims()[0];
                    if placeholders != rows || soft.rows.dims()[1] != self.config.hidden_size {
                        return Err(ModelError::SoftTokens { placeholders, rows });
                    }
                }
                match output {
                    Output::LastWithHidden => self.forward_last_hidden(ids, soft_tokens, cache),
                    _ => self.forward_ids(ids, soft_tokens, cache, output),
                }
            }
        }
    }

    /// [`Self::forward`] of host ids (checked) in chunks: each chunk's share of the soft tokens
    /// goes with it; the rows `output` asks for are kept.
    fn forward_ids(
        &self,
        tokens: &[u32],
        soft_tokens: Option<&SoftTokens>,
        cache: &mut KvCache,
        output: Output,
    ) -> Result<Forwarded, ModelError> {
        let (all_positions, hidden) = (output != Output::Last, output.hidden());
        let (mut logits, mut states) = (Vec::new(), Vec::new());
        let mut rest = tokens;
        let mut placed = 0;
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(cache.next_chunk(rest.len()));
            rest = after;
            // This chunk's share of the soft tokens.
            let soft = soft_tokens.and_then(|soft| {
                let count = chunk.iter().filter(|&&t| soft.holds(t)).count();
                placed += count;
                (count > 0).then(|| soft.rows_in(placed - count..placed))
            });
            if hidden {
                // Launch by launch: a verification takes several tokens, which a recorded
                // one-token step does not.
                let geometry = cache.plan(chunk.len(), &self.device)?;
                let (x0, token_rows) = self.embed_with(chunk, soft.as_ref());
                let x = self.layers_and_norm(x0, token_rows, cache, &geometry, true);
                cache.commit(&geometry);
                logits.push(self.head(x.clone()));
                states.push(x);
            } else if all_positions || rest.is_empty() {
                logits.push(self.forward_chunk(chunk, soft.as_ref(), cache, all_positions)?);
            } else {
                self.forward_chunk(chunk, soft.as_ref(), cache, false)?;
            }
        }
        let cat = |mut rows: Vec<Tensor<2>>, width: usize| match rows.len() {
            0 => Tensor::zeros([0, width], &self.device),
            1 => rows.remove(0),
            _ => Tensor::cat(rows, 0),
        };
        let (vocab, h) = (self.config.vocab_size, self.config.hidden_size);
        Ok(Forwarded { logits: cat(logits, vocab), hidden: hidden.then(|| cat(states, h)) })
    }

    /// The last position's logits and hidden state, for a prompt a drafter will draft after:
    /// the tokens before the last as a prompt, the last launch by launch.
    fn forward_last_hidden(
        &self,
        tokens: &[u32],
        soft_tokens: Option<&SoftTokens>,
        cache: &mut KvCache,
    ) -> Result<Forwarded, ModelError> {
        let Some((&last, before)) = tokens.split_last() else { return Err(ModelError::EmptyPrompt) };
        let placeholders_before = soft_tokens.map_or(0, |soft| before.iter().filter(|&&t| soft.holds(t)).count());
        let soft_before =
            soft_tokens.filter(|_| placeholders_before > 0).map(|soft| soft.rows_in(0..placeholders_before));
        let soft_last = soft_tokens.filter(|soft| soft.holds(last)).map(|soft| {
            let rows = soft.rows.dims()[0];
            soft.rows_in(rows.saturating_sub(1)..rows)
        });
        self.forward_ids(before, soft_before.as_ref(), cache, Output::Last)?;
        let geometry = cache.plan(1, &self.device)?;
        let (x0, token_rows) = self.embed_with(&[last], soft_last.as_ref());
        let x = self.layers_and_norm(x0, token_rows, cache, &geometry, false);
        cache.commit(&geometry);
        Ok(Forwarded { logits: self.head(x.clone()), hidden: Some(x) })
    }

    fn forward_chunk(
        &self,
        tokens: &[u32],
        soft_tokens: Option<&SoftTokens>,
        cache: &mut KvCache,
        all_positions: bool,
    ) -> Result<Tensor<2>, ModelError> {
        let geometry = cache.plan(tokens.len(), &self.device)?;
        let logits = match tokens {
            _ if soft_tokens.is_some() => {
                let (x0, token_rows) = self.embed_with(tokens, soft_tokens);
                self.layers_and_head(x0, token_rows, cache, &geometry, all_positions)
            }
            [token] => self.one_token_step(StepToken::Host(*token), cache, &geometry)?,
            _ => {
                let (x0, token_rows) = self.embed(tokens);
                self.layers_and_head(x0, token_rows, cache, &geometry, all_positions)
            }
        };
        cache.commit(&geometry);
        Ok(logits)
    }

    /// Whether a token chosen on the device can be appended without reading it back
    /// ([`Self::forward_chosen`]): the lookups read their id from a device buffer.
    pub fn steps_on_device(&self) -> bool {
        self.looks_up_on_device()
    }

    /// Appends the token `chosen` (`[1, 1]` ids, chosen on the device by the last step's
    /// sampling and not read back yet) and returns the logits after it `[1, vocab]`: the
    /// recorded step replayed on the id where the model records, else its launches. Needs
    /// [`Self::steps_on_device`]. A chosen id is never an image's placeholder.
    fn forward_chosen(&self, chosen: &Tensor<2, Int>, cache: &mut KvCache) -> Result<Tensor<2>, ModelError> {
        if !self.steps_on_device() {
            return Err(ModelError::HostLookups);
        }
        let ids = device_ids(chosen);
        let geometry = cache.plan(1, &self.device)?;
        let logits = self.one_token_step(StepToken::Device(&ids), cache, &geometry)?;
        cache.commit(&geometry);
        Ok(logits)
    }

    /// One token's logits `[1, vocab]` at the geometry's position: the cache's recorded step
    /// replayed (or recorded now) where the model records, else its launches.
    fn one_token_step(
        &self,
        token: StepToken,
        cache: &mut KvCache,
        geometry: &ChunkGeometry,
    ) -> Result<Tensor<2>, ModelError> {
        if step_recording::applies(self, geometry.is_recordable()) {
            // The recording is the cache's; taken out while the step runs on the cache.
            let mut slot = cache.recorded.take();
            let logits = step_recording::step(self, token, &mut slot, |x0, token_rows, writes| {
                cache.writes_apart = writes == step_recording::CacheWrites::Apart;
                self.layers_and_head(x0, token_rows, cache, geometry, false)
            });
            cache.writes_apart = false;
            cache.recorded = slot;
            return Ok(logits);
        }
        let (x0, token_rows) = match token {
            StepToken::Host(token) => self.embed(&[token]),
            StepToken::Device(ids) => self.embed_ids(ids),
        };
        Ok(self.layers_and_head(x0, token_rows, cache, geometry, false))
    }

    /// Whether this model records its one-token steps and replays them (on by default; off, every
    /// kernel is launched one by one as for a prompt).
    pub fn set_step_recording(&self, enabled: bool) {
        self.recording.set_enabled(enabled);
    }

    /// Whether one-token steps are recorded and replayed now (on, and not paused after a failed
    /// recording).
    pub fn records_steps(&self) -> bool {
        self.recording.active()
    }

    /// What became of this model's recordings (failures are never the caller's: a step whose
    /// recording fails runs launch by launch, and its result is the same).
    pub fn recording_status(&self) -> RecordingStatus {
        self.recording.status()
    }

    /// Makes the next recording of a step fail as a device's may: a host write inside the capture
    /// window, which the device refuses (a test of the fallback: the step's result stands, and
    /// steps run launch by launch for a while).
    pub fn fail_next_recording(&self) {
        self.recording.fail_next();
    }

    /// The logits after each of `tokens`, fed one at a time to a new cache: `[1, vocab]` each.
    pub fn step_by_step_logits(&self, tokens: &[u32], options: CacheOptions) -> Result<Vec<Tensor<2>>, ModelError> {
        let mut cache = KvCache::new(&self.config, options, self.device());
        tokens.iter().map(|&t| self.forward(Input::ids(&[t]), &mut cache, Output::All).map(|f| f.logits)).collect()
    }

    /// The tokens' embeddings `[S, h]` (scaled) and, for Gemma 4, their rows of the per-layer
    /// table `[S, L·P]` (scaled by √P): the lookups, which depend on the ids.
    pub(crate) fn embed(&self, tokens: &[u32]) -> (Tensor<2>, Option<Tensor<2>>) {
        let c = &self.config;
        let x0 = self.token_embedding(tokens);
        let token_rows = self.per_layer.as_ref().map(|ple| {
            let p = ple.table.width() / c.num_layers;
            ple.table.lookup(tokens, (p as f32).sqrt(), &self.device)
        });
        (x0, token_rows)
    }

    /// The tokens' embeddings, scaled as the first layer takes them.  [S, h]
    pub(crate) fn token_embedding(&self, tokens: &[u32]) -> Tensor<2> {
        self.embed_tokens.lookup(tokens, &self.device).mul_scalar(self.config.embed_scale)
    }

    /// [`Self::token_embedding`] of ids on the device (`[S]`, where [`Self::looks_up_on_device`]).
    pub(crate) fn token_embedding_ids(&self, ids: &Tensor<1, Int>) -> Tensor<2> {
        self.embed_tokens.rows_of(ids).mul_scalar(self.config.embed_scale)
    }

    /// [`Self::embed`], with the placeholders' rows replaced by the soft tokens (as transformers
    /// does: their per-layer rows are the pad token's, id 0).
    fn embed_with(&self, tokens: &[u32], soft_tokens: Option<&SoftTokens>) -> (Tensor<2>, Option<Tensor<2>>) {
        let Some(soft) = soft_tokens else { return self.embed(tokens) };
        let ids: Vec<u32> = tokens.iter().map(|&t| if soft.holds(t) { PAD_TOKEN } else { t }).collect();
        let (mut x0, token_rows) = self.embed(&ids);
        let h = self.config.hidden_size;
        let mut used = 0;
        let mut i = 0;
        while i < tokens.len() {
            if !soft.holds(tokens[i]) {
                i += 1;
                continue;
            }
            let run = tokens[i..].iter().take_while(|&&t| soft.holds(t)).count();
            let rows = soft.rows.clone().slice([used..used + run, 0..h]);
            x0 = x0.slice_assign([i..i + run, 0..h], rows);
            used += run;
            i += run;
        }
        (x0, token_rows)
    }

    /// Whether the lookups can take their ids from a device buffer ([`Self::embed_ids`]), so that
    /// a recorded step includes them: the embedding and the per-layer table on the device, on
    /// the cubecl backends.
    pub(crate) fn looks_up_on_device(&self) -> bool {
        has_fused_kernels(&self.device)
            && self.embed_tokens.looks_up_on_device()
            && self.per_layer.as_ref().is_none_or(|ple| ple.table.looks_up_on_device())
    }

    /// [`Self::embed`] for ids `[S]` already on the device (u32), where
    /// [`Self::looks_up_on_device`]: one launch per embedding block and table slice, each
    /// writing the rows it holds, so the launches do not depend on the ids.
    pub(crate) fn embed_ids(&self, ids: &Tensor<1, Int>) -> (Tensor<2>, Option<Tensor<2>>) {
        let c = &self.config;
        let x0 = self.token_embedding_ids(ids);
        let token_rows = self.per_layer.as_ref().and_then(|ple| {
            let p = ple.table.width() / c.num_layers;
            ple.table.rows_of(ids, (p as f32).sqrt())
        });
        (x0, token_rows)
    }

    /// Everything after the lookups: the per-layer inputs' context half, the layers (writing the
    /// cache), the final norm and the head → logits `[S or 1, vocab]`. Its launches depend on no
    /// id or position (those are in `x0`, `token_rows` and the geometry's buffers), which is what
    /// lets a one-token step be recorded once and replayed.
    pub(crate) fn layers_and_head(
        &self,
        x0: Tensor<2>,
        token_rows: Option<Tensor<2>>,
        cache: &mut KvCache,
        geometry: &ChunkGeometry,
        all_positions: bool,
    ) -> Tensor<2> {
        let x = self.layers_and_norm(x0, token_rows, cache, geometry, all_positions);
        self.head(x)
    }

    /// Tied head: logits = cap · tanh(x · Eᵀ / cap).  [rows, h] → [rows, vocab]
    fn head(&self, x: Tensor<2>) -> Tensor<2> {
        self.embed_tokens.logits(x, self.config.final_logit_softcap)
    }

    /// [`Self::layers_and_head`] up to the final norm: the hidden states the head reads
    /// `[S or 1, h]`.
    fn layers_and_norm(
        &self,
        x0: Tensor<2>,
        token_rows: Option<Tensor<2>>,
        cache: &mut KvCache,
        geometry: &ChunkGeometry,
        all_positions: bool,
    ) -> Tensor<2> {
        let c = &self.config;
        let s = x0.dims()[0];
        let per_layer_inputs = token_rows.and_then(|rows| self.per_layer_inputs(rows, x0.clone()));

        let mut x = x0;
        // Each layer's last output, added to the residual stream by the next layer's first
        // projection (or just below, after the last layer).
        let mut pending: Option<PendingOutput> = None;
        let mut chunk =
            ChunkContext { config: c, cache, geometry, produced: vec![None; c.num_layers], device: &self.device };
        for (i, layer) in self.layers.iter().enumerate() {
            // This layer's per-layer input `[S, P]` (Gemma 4).
            let per_layer_input = per_layer_inputs.as_ref().map(|inputs| {
                let p = inputs.dims()[2];
                inputs.clone().slice([0..s, i..i + 1, 0..p]).reshape([s, p])
            });
            let (residual, output) = layer.forward(i, x, pending.take(), per_layer_input, &mut chunk);
            x = residual;
            pending = Some(output);
        }
        if let Some(PendingOutput { delta, post_norm, scale }) = pending {
            x = add_rms_norm(x, delta, post_norm, c.rms_norm_eps, scale);
        }

        let x = if all_positions { x } else { x.slice([s - 1..s, 0..c.hidden_size]) };
        rms_norm(x, &self.final_norm, c.rms_norm_eps)
    }

    /// Gemma 4 PLE: `(rmsnorm(x0 · Wpmp · h^-½) + table[t] · √P) · 2^-½`, as [S, L, P], from the
    /// tokens' table rows (already times √P) `[S, L·P]`.
    fn per_layer_inputs(&self, token_rows: Tensor<2>, x0: Tensor<2>) -> Option<Tensor<3>> {
        let ple = self.per_layer.as_ref()?;
        let c = &self.config;
        let (s, l) = (x0.dims()[0], c.num_layers);
        let p = ple.table.width() / l;
        let context =
            ple.model_projection.forward(x0).mul_scalar((c.hidden_size as f32).powf(-0.5)).reshape([s * l, p]);
        // (token part + RMSNorm(context)) · 2^-½ in one kernel.
        let token_part = token_rows.reshape([s * l, p]);
        let inputs =
            add_rms_norm(token_part, context, &ple.projection_norm, c.rms_norm_eps, std::f32::consts::FRAC_1_SQRT_2);
        Some(inputs.reshape([s, l, p]))
    }
}

/// What every layer of one chunk's forward pass shares: the configuration, the cache it appends
/// to, the chunk's positions, and the keys and values each producer layer wrote (for the
/// KV-shared layers after it).
struct ChunkContext<'c> {
    config: &'c TextConfig,
    cache: &'c mut KvCache,
    geometry: &'c ChunkGeometry,
    produced: Vec<Option<(Tensor<3>, Tensor<3>)>>,
    device: &'c Device,
}

/// A layer's last output, not yet added to the residual stream: `(x + RMSNorm(delta)·post_norm)·scale`.
struct PendingOutput<'a> {
    /// [S, h]
    delta: Tensor<2>,
    post_norm: &'a Tensor<1>,
    scale: f32,
}

impl DecoderLayer {
    /// Layer `i` on the residual stream `x` ([S, h]) with the previous layer's output still to be
    /// added (`pending`), and this layer's per-layer input `[S, P]` (Gemma 4): the residual after
    /// attention and the MLP, and this layer's own last output, pending in turn.
    ///
    /// ```text
    /// x += post_attention_norm(attention(input_norm(x)))
    /// x += post_feedforward_norm(down(gelu(gate(pre_feedforward_norm(x))) · up(…)))
    /// x += post_per_layer_input_norm(projection(gelu(gate(x)) · per_layer_input))   (Gemma 4)
    /// x *= layer_scalar                                                             (Gemma 4)
    /// ```
    fn forward<'a>(
        &'a self,
        i: usize,
        x: Tensor<2>,
        pending: Option<PendingOutput<'a>>,
        per_layer_input: Option<Tensor<2>>,
        chunk: &mut ChunkContext,
    ) -> (Tensor<2>, PendingOutput<'a>) {
        let eps = chunk.config.rms_norm_eps;
        // Gemma 4 scales the layer's output: folded into the last residual add.
        let scale = self.layer_scalar.unwrap_or(1.0);
        let a = NormedInput::after(x, pending, self.joined_input_norm.as_ref(), &self.input_norm, eps);
        let attn = self.attention.forward(i, &a, chunk);
        let attended = PendingOutput { delta: attn, post_norm: &self.post_attention_norm, scale: 1.0 };
        let m = NormedInput::after(
            a.residual(),
            Some(attended),
            self.joined_mlp_norm.as_ref(),
            &self.pre_feedforward_norm,
            eps,
        );
        let gated = m.gated(&self.mlp.gate_up);
        let x = m.residual();
        let m = self.mlp.down_proj.forward(gated);
        let (Some(pli), Some(input)) = (&self.per_layer_input, per_layer_input) else {
            return (x, PendingOutput { delta: m, post_norm: &self.post_feedforward_norm, scale });
        };
        // A packed gate adds the MLP's output itself (for one token, in its own launch).
        let (x, g) = match &pli.gate {
            Linear::Affine(gate) => gate.residual_gelu_gated_by(x, m, &self.post_feedforward_norm, eps, input),
            Linear::Dense(_) => {
                let x = add_rms_norm(x, m, &self.post_feedforward_norm, eps, 1.0);
                (x.clone(), gelu_tanh_mul(pli.gate.forward(x), input))
            }
        };
        (x, PendingOutput { delta: pli.projection.forward(g), post_norm: &pli.post_norm, scale })
    }
}

impl Attention {
    /// Self-attention of layer `i` over the cache plus the new tokens. `a`: [S, h] (before the
    /// input norm) → [S, h].
    fn forward(&self, i: usize, a: &NormedInput, chunk: &mut ChunkContext) -> Tensor<2> {
        let c = chunk.config;
        let (cache, geometry) = (&mut *chunk.cache, chunk.geometry);
        let produced = &mut chunk.produced;
        let spec = &c.layers[i];
        let (s, heads, d) = (a.tokens(), c.num_heads, spec.head_dim);
        let table = geometry.table(spec.kind, d);

        // The heads before their norms and RoPE (the kernels that consume them apply both).
        let kv_heads = spec.num_kv_heads;
        let (q, kv) = match &self.projections {
            Projections::Query(q) => (HeadColumns::whole(a.project(q), heads, d), None),
            Projections::Separate { q, k, v } => (
                HeadColumns::whole(a.project(q), heads, d),
                Some((HeadColumns::whole(a.project(k), kv_heads, d), HeadColumns::whole(a.project(v), kv_heads, d))),
            ),
            Projections::Joint(qkv) => {
                // [S, (H + 2·Hkv)·d]: q, then k, then v.
                let out = a.project_packed(qkv);
                let at = |column, heads| HeadColumns { x: out.clone(), column, heads, head_dim: d };
                (at(0, heads), Some((at(heads * d, kv_heads), at((heads + kv_heads) * d, kv_heads))))
            }
        };

        let mask = geometry.mask(spec.kind);
        let fused_decode = fused_decode_applies(chunk.device, s, d);
        // One launch fewer: the attention's split writes the token's key and value, read from
        // the joint q/k/v output beside the query.
        if let (Some((k, v)), Some(norms), Projections::Joint(_)) = (&kv, &self.joined_qk_norm, &self.projections)
            && fused_decode
            && geometry.reads_whole_cache()
            && !cache.writes_apart
        {
            let new = NewKeys { k_column: k.column, v_column: v.column, v_normed: c.v_norm };
            let query = DecodeQuery { q, norm: norms, table, eps: c.rms_norm_eps };
            let (out, keys, values) = cache.attend_writing(i, |keys, values| {
                decode_attention_writing(query, new, (keys, values), mask, c.attention_scale, c.attention_logit_softcap)
            });
            produced[i] = Some((keys, values));
            return self.o_proj.forward(out);
        }

        let (keys, values) = match (kv, &self.k_norm, spec.kv_producer) {
            (Some((k, v)), Some(k_norm), _) => {
                let (keys, values) = cache.write(i, geometry, (k, k_norm), (v, c.v_norm), c.rms_norm_eps);
                produced[i] = Some((keys.clone(), values.clone()));
                (keys, values)
            }
            (None, _, Some(producer)) => {
                produced[producer].clone().expect("producers run before the layers sharing them")
            }
            _ => unreachable!("a layer without K/V weights always has a producer"),
        };

        if fused_decode {
            let query = DecodeQuery { q, norm: &self.q_norm, table, eps: c.rms_norm_eps };
            let out = decode_attention(query, keys, values, mask, c.attention_scale, c.attention_logit_softcap);
            return self.o_proj.forward(out);
        }
        // Normed and rotated into [H, S, d] by the kernel that fills the cache.
        let q_input = CacheInput::NormedRotated { weight: &self.q_norm };
        let fresh = Tensor::empty([heads, s, d], chunk.device);
        let q = write_cache(fresh, q, q_input, table, Slots::FromZero, c.rms_norm_eps);

        // GQA: query head h uses key/value head h / group.  q: [H, S, d] → [Hkv, group·S, d]
        let kv_heads = keys.dims()[0];
        let group = heads / kv_heads;
        let n = keys.dims()[1];
        let q = q.reshape([kv_heads, group * s, d]);
        let scores = q.matmul(keys.swap_dims(1, 2)).reshape([kv_heads, group, s, n]);
        let probs = attention_softmax(scores, mask, c.attention_scale, c.attention_logit_softcap).reshape([
            kv_heads,
            group * s,
            n,
        ]);
        let out = probs.matmul(values); // [Hkv, group·S, d]
        let out = out.reshape([heads, s, d]).swap_dims(0, 1).reshape([s, heads * d]);
        self.o_proj.forward(out)
    }
}

impl step_recording::StepModel for Gemma {
    fn device(&self) -> &Device {
        &self.device
    }

    fn recording(&self) -> &step_recording::Recording {
        &self.recording
    }

    fn looks_up_on_device(&self) -> bool {
        Gemma::looks_up_on_device(self)
    }

    fn embed(&self, tokens: &[u32]) -> (Tensor<2>, Option<Tensor<2>>) {
        Gemma::embed(self, tokens)
    }

    fn embed_ids(&self, ids: &Tensor<1, Int>) -> (Tensor<2>, Option<Tensor<2>>) {
        Gemma::embed_ids(self, ids)
    }
}
