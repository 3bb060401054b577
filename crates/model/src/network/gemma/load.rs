//! Loading a Gemma checkpoint as a list of steps (the embedding, slices of the per-layer-embedding
//! table, each decoder layer, …), each naming the bytes it reads before it reads them. Natively
//! the steps simply run in order; the browser engine fetches each step's bytes from Cache Storage
//! first and drops them after, so a model file is never held whole in memory.

use std::ops::Range;

use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::{AffineMatrix, has_fused_kernels};
use hearth_weights::{AffineTensor, Checkpoint, FileRange, HostTensor, WeightsError};

use super::*;
use crate::config::{Family, LayerType, TextConfig};

/// Where the text decoder's tensors live: the config's prefix (Hugging Face's layout), or MLX's
/// `language_model.model.` (mlx-vlm drops the outer `model.`).
fn tensor_prefix(checkpoint: &Checkpoint, configured: &str) -> String {
    let candidates = [configured, "language_model.model.", "model.language_model.", "model."];
    candidates
        .into_iter()
        .find(|p| checkpoint.contains(&format!("{p}embed_tokens.weight")))
        .unwrap_or(configured)
        .to_string()
}

/// llama.cpp's per-pair RoPE divisors of full-attention layers (GGUF only; no prefix).
const ROPE_FREQS: &str = "rope_freqs.weight";

/// The largest f32 per-layer table kept on the device as it is (one buffer).
const DEVICE_DENSE_TABLE_BYTES: usize = 64 << 20;

/// Reads tensors by their name under the config's prefix, checking shapes.
struct Loader<'a> {
    checkpoint: &'a mut Checkpoint,
    prefix: &'a str,
    device: &'a Device,
    norm_offset: f32,
}

impl Loader<'_> {
    fn host(&mut self, name: &str, expected: &[usize]) -> Result<HostTensor, ModelError> {
        let full = format!("{}{name}", self.prefix);
        let tensor = self.checkpoint.read_f32(&full)?;
        if tensor.shape != expected {
            return Err(ModelError::Shape { name: full, expected: expected.to_vec(), actual: tensor.shape });
        }
        Ok(tensor)
    }

    /// A packed checkpoint matrix, when the module is quantized (MLX, or GGUF blocks with an
    /// affine form); its shape is checked.
    fn affine(&mut self, name: &str, rows: usize, cols: usize) -> Result<Option<AffineTensor>, ModelError> {
        let full = format!("{}{name}", self.prefix);
        let Some(t) = self.checkpoint.read_affine(&full)? else { return Ok(None) };
        if (t.rows, t.cols) != (rows, cols) {
            return Err(ModelError::Shape { name: full, expected: vec![rows, cols], actual: vec![t.rows, t.cols] });
        }
        Ok(Some(t))
    }

    /// A `[out, in]` checkpoint matrix: 4- and 8-bit codes stay packed where the fused kernel
    /// runs; anything else is uploaded as f32 `[in, out]`.
    fn linear(&mut self, name: &str, out_features: usize, in_features: usize) -> Result<Linear, ModelError> {
        if has_fused_kernels(self.device)
            && let Some(q) = self.affine(name, out_features, in_features)?
        {
            if AffineMatrix::holds(&q) {
                return Ok(Linear::Affine(AffineMatrix::upload(q, self.device)));
            }
            return Ok(self.dense_linear(q.dequantize(), out_features, in_features));
        }
        let w = self.host(&format!("{name}.weight"), &[out_features, in_features])?;
        Ok(self.dense_linear(w, out_features, in_features))
    }

    /// Matrices with the same input, as one packed matrix (their rows stacked in order), where the
    /// fused kernels run and all are packed alike; `None` otherwise.
    fn joint(
        &mut self,
        names: &[String],
        rows: &[usize],
        in_features: usize,
    ) -> Result<Option<AffineMatrix>, ModelError> {
        if !has_fused_kernels(self.device) {
            return Ok(None);
        }
        let mut parts = Vec::with_capacity(names.len());
        for (name, &rows) in names.iter().zip(rows) {
            match self.affine(name, rows, in_features)? {
                Some(part) if AffineMatrix::holds(&part) => parts.push(part),
                _ => return Ok(None),
            }
        }
        Ok(AffineTensor::stack_rows(parts).map(|joint| AffineMatrix::upload(joint, self.device)))
    }

    fn dense_linear(&self, w: HostTensor, out_features: usize, in_features: usize) -> Linear {
        let mut transposed = vec![0.0; w.data.len()];
        for (o, row) in w.data.chunks_exact(in_features).enumerate() {
            for (i, value) in row.iter().enumerate() {
                transposed[i * out_features + o] = *value;
            }
        }
        Linear::Dense(Tensor::from_data(TensorData::new(transposed, [in_features, out_features]), self.device))
    }

    /// The token embedding, split to fit storage bindings; packed when its codes are 4- or
    /// 8-bit and the fused kernels run.
    fn embedding(&mut self, vocab: usize, h: usize, max_bytes: usize) -> Result<SplitEmbedding, ModelError> {
        if has_fused_kernels(self.device)
            && let Some(q) = self.affine("embed_tokens", vocab, h)?
            && AffineMatrix::holds(&q)
        {
            return Ok(SplitEmbedding::affine(&q, max_bytes, self.device));
        }
        let embed = self.host("embed_tokens.weight", &[vocab, h])?;
        Ok(SplitEmbedding::dense(embed.data, vocab, h, max_bytes, self.device))
    }

    /// An RMSNorm weight with the family's offset (`1 + w` for Gemma 3) folded in.
    fn norm(&mut self, name: &str, size: usize) -> Result<Tensor<1>, ModelError> {
        let w = self.host(&format!("{name}.weight"), &[size])?;
        let data: Vec<f32> = w.data.iter().map(|v| v + self.norm_offset).collect();
        Ok(Tensor::from_data(TensorData::new(data, [size]), self.device))
    }

    /// Rows `rows` of the quantized table `name` ([vocab, width]), packed, for the host.
    fn table_rows(
        &mut self,
        name: &str,
        rows: Range<usize>,
        vocab: usize,
        width: usize,
    ) -> Result<AffineTensor, ModelError> {
        let full = format!("{}{name}", self.prefix);
        let slice = self
            .checkpoint
            .read_affine_rows(&full, Some(rows))?
            .ok_or_else(|| ModelError::Weights(WeightsError::Missing { name: format!("{full}.scales") }))?;
        if slice.cols != width {
            return Err(ModelError::Shape {
                name: full,
                expected: vec![vocab, width],
                actual: vec![vocab, slice.cols],
            });
        }
        Ok(slice)
    }

    /// Decoder layer `i`.
    fn layer(&mut self, c: &TextConfig, i: usize) -> Result<DecoderLayer, ModelError> {
        let LayerDims { h, d, q_rows, kv_rows, inter, per_layer_input, shared, scalar } = LayerDims::of(c, i);
        let name = |part: &str| format!("layers.{i}.{part}");
        // Real checkpoints still ship k/v weights on shared layers: they are never read.
        let (projections, k_norm) = if shared {
            (Projections::Query(self.linear(&name("self_attn.q_proj"), q_rows, h)?), None)
        } else {
            let names = [name("self_attn.q_proj"), name("self_attn.k_proj"), name("self_attn.v_proj")];
            let rows = [q_rows, kv_rows, kv_rows];
            let projections = match self.joint(&names, &rows, h)? {
                Some(joint) => Projections::Joint(joint),
                None => Projections::Separate {
                    q: self.linear(&names[0], rows[0], h)?,
                    k: self.linear(&names[1], rows[1], h)?,
                    v: self.linear(&names[2], rows[2], h)?,
                },
            };
            (projections, Some(self.norm(&name("self_attn.k_norm"), d)?))
        };
        let o_proj = self.linear(&name("self_attn.o_proj"), h, q_rows)?;
        let q_norm = self.norm(&name("self_attn.q_norm"), d)?;
        // A decoded token's attention split reads both norms from one binding.
        let joined_qk_norm = match (&projections, &k_norm) {
            (Projections::Joint(_), Some(k_norm)) => Some(Tensor::cat(vec![q_norm.clone(), k_norm.clone()], 0)),
            _ => None,
        };
        let attention = Attention { projections, k_norm, o_proj, q_norm, joined_qk_norm };
        let names = [name("mlp.gate_proj"), name("mlp.up_proj")];
        let gate_up = match self.joint(&names, &[inter, inter], h)? {
            Some(stacked) => GateUp::Stacked(stacked),
            None => GateUp::Separate { gate: self.linear(&names[0], inter, h)?, up: self.linear(&names[1], inter, h)? },
        };
        let mlp = Mlp { gate_up, down_proj: self.linear(&name("mlp.down_proj"), h, inter)? };
        let per_layer_input = match per_layer_input {
            Some(p) => Some(LayerPerLayerInput {
                gate: self.linear(&name("per_layer_input_gate"), p, h)?,
                projection: self.linear(&name("per_layer_projection"), h, p)?,
                post_norm: self.norm(&name("post_per_layer_input_norm"), h)?,
            }),
            None => None,
        };
        let layer_scalar = if scalar { Some(self.host(&name("layer_scalar"), &[1])?.data[0]) } else { None };
        let post_attention_norm = self.norm(&name("post_attention_layernorm"), h)?;
        let pre_feedforward_norm = self.norm(&name("pre_feedforward_layernorm"), h)?;
        // The stacked gate and up's launch reads both norms from one binding.
        let joined_mlp_norm = matches!(mlp.gate_up, GateUp::Stacked(_))
            .then(|| Tensor::cat(vec![post_attention_norm.clone(), pre_feedforward_norm.clone()], 0));
        Ok(DecoderLayer {
            attention,
            mlp,
            input_norm: self.norm(&name("input_layernorm"), h)?,
            post_attention_norm,
            pre_feedforward_norm,
            post_feedforward_norm: self.norm(&name("post_feedforward_layernorm"), h)?,
            per_layer_input,
            layer_scalar,
            joined_input_norm: None,
            joined_mlp_norm,
        })
    }
}

/// The shapes decoder layer `i` is read with: one description for [`Loader::layer`] and
/// [`GemmaLoader::plan`].
struct LayerDims {
    h: usize,
    /// Head dimension (Gemma 4: 256 on sliding layers, 512 on full ones).
    d: usize,
    q_rows: usize,
    kv_rows: usize,
    inter: usize,
    per_layer_input: Option<usize>,
    /// KV-shared: no k/v projections or k norm of its own.
    shared: bool,
    /// Gemma 4's `layer_scalar`.
    scalar: bool,
}

impl LayerDims {
    fn of(c: &TextConfig, i: usize) -> Self {
        let layer = &c.layers[i];
        LayerDims {
            h: c.hidden_size,
            d: layer.head_dim,
            q_rows: c.num_heads * layer.head_dim,
            kv_rows: layer.num_kv_heads * layer.head_dim,
            inter: layer.intermediate_size,
            per_layer_input: c.per_layer_input_size,
            shared: layer.kv_producer.is_some(),
            scalar: c.family == Family::Gemma4,
        }
    }

    /// What [`Loader::layer`] reads, in its order: (name under `layers.{i}.`, shape).
    fn tensors(&self) -> Vec<(&'static str, Vec<usize>)> {
        let LayerDims { h, d, q_rows, kv_rows, inter, .. } = *self;
        let mut tensors = vec![("self_attn.q_proj.weight", vec![q_rows, h])];
        if !self.shared {
            tensors.push(("self_attn.k_proj.weight", vec![kv_rows, h]));
            tensors.push(("self_attn.v_proj.weight", vec![kv_rows, h]));
            tensors.push(("self_attn.k_norm.weight", vec![d]));
        }
        tensors.extend([
            ("self_attn.o_proj.weight", vec![h, q_rows]),
            ("self_attn.q_norm.weight", vec![d]),
            ("mlp.gate_proj.weight", vec![inter, h]),
            ("mlp.up_proj.weight", vec![inter, h]),
            ("mlp.down_proj.weight", vec![h, inter]),
        ]);
        if let Some(p) = self.per_layer_input {
            tensors.extend([
                ("per_layer_input_gate.weight", vec![p, h]),
                ("per_layer_projection.weight", vec![h, p]),
                ("post_per_layer_input_norm.weight", vec![h]),
            ]);
        }
        if self.scalar {
            tensors.push(("layer_scalar", vec![1]));
        }
        tensors.extend(
            [
                "input_layernorm.weight",
                "post_attention_layernorm.weight",
                "pre_feedforward_layernorm.weight",
                "post_feedforward_layernorm.weight",
            ]
            .map(|norm| (norm, vec![h])),
        );
        tensors
    }
}

/// A tensor a load reads, with the shape the loader requires of it ([`GemmaLoader::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTensor {
    /// Its name in the checkpoint: Hugging Face's under the checkpoint's prefix (llama.cpp's
    /// `rope_freqs.weight` as it is). A quantized `module.weight` is read with the module's
    /// scales and biases where it has them.
    pub name: String,
    /// Dequantized and row-major: `[out, in]` for a matrix.
    pub shape: Vec<usize>,
    /// The decoder layer that reads it (`None`: the embeddings, the final norm).
    pub layer: Option<usize>,
}

/// One part of a load. Each reads only its own tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Embedding,
    /// Rows of a quantized token embedding (one storage binding's worth: E2B's 330 MB of Q6_K
    /// never sits in wasm memory whole, repacked beside its stored bytes).
    EmbeddingRows(Range<usize>),
    /// Rows of the quantized per-layer-embedding table (the whole table is never read at once).
    TableRows(Range<usize>),
    /// The per-layer-embedding table stored as plain floats (small models).
    DenseTable,
    PerLayerProjection,
    Layer(usize),
    FinalNorm,
}

/// A Gemma model being loaded step by step ([`GemmaLoader::step`]), for callers that fetch the
/// bytes of each step first ([`GemmaLoader::next_reads`]): [`GemmaLoader::load_with`] and
/// [`GemmaLoader::load_with_async`] drive it. [`Gemma::load`] runs it in one go.
pub struct GemmaLoader {
    config: TextConfig,
    prefix: String,
    /// Whether the checkpoint has llama.cpp's `rope_freqs` (read with the first step).
    rope_freqs: bool,
    max_tensor_bytes: usize,
    parts: std::collections::VecDeque<Part>,
    total_steps: usize,
    embed_tokens: Option<SplitEmbedding>,
    embed_blocks: Vec<EmbeddingBlock>,
    embed_rows_per_block: usize,
    /// The per-layer-embedding table's slices, wherever they go: host, device, stored blocks.
    table_slices: Vec<AffineTensor>,
    device_slices: Vec<EmbeddingBlock>,
    block_table: Option<BlockTable>,
    rows_per_slice: usize,
    dense_table: Option<HostTensor>,
    per_layer_projection: Option<(Linear, Tensor<1>)>,
    layers: Vec<DecoderLayer>,
    final_norm: Option<Tensor<1>>,
}

impl GemmaLoader {
    /// Plans the load of `config`'s decoder from `checkpoint` (headers only are read), with
    /// device tensors of at most `max_tensor_bytes`.
    pub fn new(config: TextConfig, checkpoint: &Checkpoint, max_tensor_bytes: usize) -> Self {
        let prefix = tensor_prefix(checkpoint, &config.tensor_prefix);
        let vocab = config.vocab_size.max(1);
        let embedding = format!("{prefix}embed_tokens");
        let mut embed_rows_per_block = vocab;
        let mut parts = match checkpoint.packed_row_bytes(&embedding) {
            Some(row_bytes) if checkpoint.is_quantized(&embedding) => {
                embed_rows_per_block = (max_tensor_bytes / row_bytes.max(1)).clamp(1, vocab);
                let blocks = (0..vocab).step_by(embed_rows_per_block);
                blocks.map(|start| Part::EmbeddingRows(start..(start + embed_rows_per_block).min(vocab))).collect()
            }
            _ => vec![Part::Embedding],
        };
        let mut rows_per_slice = config.vocab_size.max(1);
        if config.per_layer_input_size.is_some() {
            let table = format!("{prefix}embed_tokens_per_layer");
            if checkpoint.is_quantized(&table) {
                // Sliced by the larger of the row's two forms, from the header: a slice is kept
                // either in its stored GGUF blocks (Q6_K: 6.56 bits a value) or repacked (6-bit
                // codes and their scales' words), and neither may outgrow a storage binding.
                let packed = checkpoint.packed_row_bytes(&table).unwrap_or(1);
                let stored = checkpoint.stored_blocks(&table).map_or(0, |(_, row_bytes)| row_bytes);
                let row_bytes = packed.max(stored).max(1);
                rows_per_slice = (max_tensor_bytes / row_bytes).clamp(1, config.vocab_size.max(1));
                let vocab = config.vocab_size;
                let slices = (0..vocab).step_by(rows_per_slice);
                parts.extend(slices.map(|start| Part::TableRows(start..(start + rows_per_slice).min(vocab))));
            } else {
                parts.push(Part::DenseTable);
            }
            parts.push(Part::PerLayerProjection);
        }
        parts.extend((0..config.num_layers).map(Part::Layer));
        parts.push(Part::FinalNorm);
        GemmaLoader {
            total_steps: parts.len(),
            parts: parts.into(),
            rope_freqs: checkpoint.contains(ROPE_FREQS),
            prefix,
            max_tensor_bytes,
            rows_per_slice,
            embed_tokens: None,
            embed_blocks: Vec::new(),
            embed_rows_per_block,
            table_slices: Vec::new(),
            device_slices: Vec::new(),
            block_table: None,
            dense_table: None,
            per_layer_projection: None,
            layers: Vec::with_capacity(config.num_layers),
            final_norm: None,
            config,
        }
    }

    /// Every tensor the load reads, in order, with the shape it requires: what can be checked
    /// against a checkpoint's headers (or a published layout) before a byte of weights is read.
    pub fn plan(&self) -> Vec<PlannedTensor> {
        let c = &self.config;
        let (h, vocab) = (c.hidden_size, c.vocab_size);
        let named = |name: String, shape: Vec<usize>, layer: Option<usize>| PlannedTensor { name, shape, layer };
        let global = |name: &str, shape: Vec<usize>| named(format!("{}{name}", self.prefix), shape, None);
        let mut plan = vec![global("embed_tokens.weight", vec![vocab, h])];
        if self.rope_freqs {
            // One divisor per rotated pair of a full-attention head.
            let pairs = c.layers.iter().find(|l| l.kind == LayerType::Full).map_or(0, |l| l.rope.inv_freq.len());
            plan.push(named(ROPE_FREQS.to_string(), vec![pairs], None));
        }
        if let Some(p) = c.per_layer_input_size {
            plan.push(global("embed_tokens_per_layer.weight", vec![vocab, c.num_layers * p]));
            plan.push(global("per_layer_model_projection.weight", vec![c.num_layers * p, h]));
            plan.push(global("per_layer_projection_norm.weight", vec![p]));
        }
        for i in 0..c.num_layers {
            let layer = LayerDims::of(c, i).tensors().into_iter();
            plan.extend(layer.map(|(part, shape)| named(format!("{}layers.{i}.{part}", self.prefix), shape, Some(i))));
        }
        plan.push(global("norm.weight", vec![h]));
        plan
    }

    /// Rows of the per-layer-embedding table each load step reads and uploads as one tensor.
    pub fn table_rows_per_slice(&self) -> usize {
        self.rows_per_slice
    }

    /// Steps done and steps in all (for progress).
    pub fn progress(&self) -> (usize, usize) {
        (self.total_steps - self.parts.len(), self.total_steps)
    }

    /// The bytes the next step reads, or `None` when every step has run.
    pub fn next_reads(&self, checkpoint: &Checkpoint) -> Option<Result<Vec<FileRange>, ModelError>> {
        let under = |names: &[&str]| {
            let prefixes: Vec<String> = names.iter().map(|n| format!("{}{n}", self.prefix)).collect();
            Ok(checkpoint.ranges_under(&prefixes))
        };
        Some(match self.parts.front()? {
            Part::Embedding => {
                let mut ranges = checkpoint.ranges_under(&[format!("{}embed_tokens.", self.prefix)]);
                ranges.extend(checkpoint.ranges_under(&[ROPE_FREQS.to_string()]));
                Ok(ranges)
            }
            Part::EmbeddingRows(rows) => {
                let ranges = checkpoint.row_ranges(&format!("{}embed_tokens", self.prefix), rows.clone());
                ranges.map_err(ModelError::from).map(|mut ranges| {
                    if rows.start == 0 {
                        ranges.extend(checkpoint.ranges_under(&[ROPE_FREQS.to_string()]));
                    }
                    ranges
                })
            }
            Part::TableRows(rows) => checkpoint
                .row_ranges(&format!("{}embed_tokens_per_layer", self.prefix), rows.clone())
                .map_err(ModelError::from),
            Part::DenseTable => under(&["embed_tokens_per_layer."]),
            Part::PerLayerProjection => under(&["per_layer_model_projection.", "per_layer_projection_norm."]),
            Part::Layer(i) => under(&[&format!("layers.{i}.")]),
            Part::FinalNorm => under(&["norm."]),
        })
    }

    /// Runs the next step; `false` once every step has run.
    pub fn step(&mut self, checkpoint: &mut Checkpoint, device: &Device) -> Result<bool, ModelError> {
        let Some(part) = self.parts.pop_front() else { return Ok(false) };
        let first = matches!(&part, Part::Embedding) || matches!(&part, Part::EmbeddingRows(r) if r.start == 0);
        if first && checkpoint.contains(ROPE_FREQS) {
            let factors = checkpoint.read_f32(ROPE_FREQS)?;
            self.config.apply_rope_freq_factors(&factors.data)?;
        }
        let c = &self.config;
        let h = c.hidden_size;
        let mut loader = Loader { checkpoint, prefix: &self.prefix, device, norm_offset: c.norm_weight_offset };
        match part {
            Part::Embedding => {
                self.embed_tokens = Some(loader.embedding(c.vocab_size, h, self.max_tensor_bytes)?);
            }
            Part::EmbeddingRows(rows) => {
                let slice = loader.table_rows("embed_tokens", rows, c.vocab_size, h)?;
                // Packed where the kernels run (the codes become the upload without a copy).
                let block = if has_fused_kernels(device) && AffineMatrix::holds(&slice) {
                    EmbeddingBlock::Affine(AffineMatrix::upload(slice, device))
                } else {
                    let (rows, dense) = (slice.rows, slice.dequantize());
                    EmbeddingBlock::Dense(Tensor::from_data(TensorData::new(dense.data, [rows, h]), device))
                };
                self.embed_blocks.push(block);
            }
            Part::TableRows(rows) => {
                let width = c.num_layers * c.per_layer_input_size.unwrap_or(0);
                let name = format!("{}embed_tokens_per_layer", self.prefix);
                // GGUF blocks stay as stored, on the device: never widened nor repacked larger.
                if let Some((ty, _)) = loader.checkpoint.stored_blocks(&name)
                    && BlockTable::holds(ty, device)
                {
                    let slice = loader
                        .checkpoint
                        .read_block_rows(&name, rows)?
                        .ok_or_else(|| ModelError::Weights(WeightsError::Missing { name: format!("{name}.weight") }))?;
                    if slice.cols != width {
                        let (expected, actual) = (vec![c.vocab_size, width], vec![c.vocab_size, slice.cols]);
                        return Err(ModelError::Shape { name, expected, actual });
                    }
                    let per_slice = self.rows_per_slice;
                    let table =
                        self.block_table.get_or_insert_with(|| BlockTable::new(ty, width, slice.row_bytes, per_slice));
                    table.push_slice(slice, device);
                } else {
                    let slice = loader.table_rows("embed_tokens_per_layer", rows, c.vocab_size, width)?;
                    // Packed on the device where the kernels run; on the host otherwise.
                    if has_fused_kernels(device) && AffineMatrix::holds(&slice) {
                        self.device_slices.push(EmbeddingBlock::Affine(AffineMatrix::upload(slice, device)));
                    } else {
                        self.table_slices.push(slice);
                    }
                }
            }
            Part::DenseTable => {
                let width = c.num_layers * c.per_layer_input_size.unwrap_or(0);
                self.dense_table = Some(loader.host("embed_tokens_per_layer.weight", &[c.vocab_size, width])?);
            }
            Part::PerLayerProjection => {
                let p = c.per_layer_input_size.unwrap_or(0);
                let projection = loader.linear("per_layer_model_projection", c.num_layers * p, h)?;
                self.per_layer_projection = Some((projection, loader.norm("per_layer_projection_norm", p)?));
            }
            Part::Layer(i) => {
                let mut layer = loader.layer(c, i)?;
                if has_fused_kernels(loader.device)
                    && let Some(previous) = self.layers.last()
                {
                    let norms = vec![previous.last_post_norm().clone(), layer.input_norm.clone()];
                    layer.joined_input_norm = Some(Tensor::cat(norms, 0));
                }
                self.layers.push(layer);
            }
            Part::FinalNorm => self.final_norm = Some(loader.norm("norm", h)?),
        }
        Ok(!self.parts.is_empty())
    }

    /// The model, once every step has run.
    pub fn finish(self, device: &Device) -> Result<Gemma, ModelError> {
        let (done, total) = self.progress();
        let unfinished = || ModelError::LoadIncomplete { done, total };
        if done < total {
            return Err(unfinished());
        }
        let per_layer = match self.per_layer_projection {
            Some((model_projection, projection_norm)) => {
                let rows_per_slice = self.rows_per_slice;
                let table = match (self.dense_table, self.block_table) {
                    // A small f32 table (the test models') is one block on the device where the
                    // kernels run, so its lookups read ids from the device as packed tables'
                    // do; a large one (a bf16 checkpoint's: gigabytes) stays on the host.
                    (Some(dense), _)
                        if has_fused_kernels(device) && dense.data.len() * 4 <= DEVICE_DENSE_TABLE_BYTES =>
                    {
                        let [vocab, width] = [dense.shape[0], dense.shape[1]];
                        TokenTable::Device(SplitEmbedding::dense(dense.data, vocab, width, usize::MAX, device))
                    }
                    (Some(dense), _) => TokenTable::Host(HostTable::Dense(dense)),
                    (None, Some(blocks)) => TokenTable::Blocks(blocks),
                    (None, None) if !self.device_slices.is_empty() => TokenTable::Device(SplitEmbedding {
                        blocks: self.device_slices,
                        rows_per_block: rows_per_slice,
                    }),
                    (None, None) => TokenTable::Host(HostTable::Affine { slices: self.table_slices, rows_per_slice }),
                };
                Some(PerLayerEmbeddings { table, model_projection, projection_norm })
            }
            None => None,
        };
        Ok(Gemma {
            config: self.config,
            device: device.clone(),
            embed_tokens: match self.embed_tokens {
                Some(whole) => whole,
                None if !self.embed_blocks.is_empty() => {
                    SplitEmbedding { blocks: self.embed_blocks, rows_per_block: self.embed_rows_per_block }
                }
                None => return Err(unfinished()),
            },
            per_layer,
            layers: self.layers,
            final_norm: self.final_norm.ok_or_else(unfinished)?,
            recording: crate::step_recording::Recording::default(),
        })
    }
}

impl Gemma {
    /// Loads the text decoder from `checkpoint`, one tensor at a time.
    pub fn load(config: TextConfig, checkpoint: &mut Checkpoint, device: &Device) -> Result<Self, ModelError> {
        Self::load_with_tensor_limit(config, checkpoint, device, MAX_TENSOR_BYTES)
    }

    /// As [`load`](Self::load), with device tensors (embedding blocks) and host slices (the
    /// per-layer-embedding table) of at most `max_tensor_bytes`.
    pub fn load_with_tensor_limit(
        config: TextConfig,
        checkpoint: &mut Checkpoint,
        device: &Device,
        max_tensor_bytes: usize,
    ) -> Result<Self, ModelError> {
        let loader = GemmaLoader::new(config, checkpoint, max_tensor_bytes);
        loader.load_with(checkpoint, device, |_| Ok::<(), ModelError>(()))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use hearth_weights::{ByteSource, GgufFile, MemorySource, Quantization, WindowedSource, Windows};

    use super::*;

    /// A fixture as the browser streams it: headers fetched, tensor bytes only when fetched.
    struct Streamed {
        files: Vec<Vec<u8>>,
        windows: Vec<Windows>,
        checkpoint: Checkpoint,
        config: TextConfig,
    }

    impl Streamed {
        fn open(case: &str) -> Self {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(case);
            let gguf = dir.join("model.gguf");
            let window = |bytes: &[u8], header: usize| {
                let windows = Windows::default();
                windows.insert(0, bytes[..header].to_vec());
                windows
            };
            if gguf.is_file() {
                let bytes = std::fs::read(&gguf).unwrap();
                let header = GgufFile::read(&mut MemorySource::new("m", bytes.clone())).unwrap().data_offset;
                let windows = window(&bytes, header as usize);
                let source = WindowedSource::new("model.gguf", bytes.len() as u64, windows.clone());
                let checkpoint = Checkpoint::from_gguf(Box::new(source)).unwrap();
                let config = TextConfig::from_gguf(checkpoint.gguf().unwrap()).unwrap();
                return Streamed { files: vec![bytes], windows: vec![windows], checkpoint, config };
            }
            let mut paths: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
                .collect();
            paths.sort();
            let files: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
            let windows: Vec<Windows> =
                files.iter().map(|f| window(f, 8 + u64::from_le_bytes(f[..8].try_into().unwrap()) as usize)).collect();
            let sources = files.iter().zip(&windows).map(|(f, w)| {
                Box::new(WindowedSource::new("model.safetensors", f.len() as u64, w.clone())) as Box<dyn ByteSource>
            });
            let mut checkpoint = Checkpoint::from_sources(sources.collect()).unwrap();
            let json = std::fs::read_to_string(dir.join("config.json")).unwrap();
            checkpoint.set_quantization(Quantization::from_config_json(&json).unwrap());
            Streamed { files, windows, checkpoint, config: TextConfig::from_json(&json).unwrap() }
        }

        /// Fetches every byte of the planned tensors (a module's scales and biases too) but `skip`.
        fn fetch_plan(&self, plan: &[PlannedTensor], skip: Option<&str>) {
            let prefixes: Vec<String> = plan
                .iter()
                .filter(|t| Some(t.name.as_str()) != skip)
                .map(|t| t.name.strip_suffix("weight").unwrap_or(&t.name).to_string())
                .collect();
            for r in self.checkpoint.ranges_under(&prefixes) {
                self.windows[r.file].insert(r.start, self.files[r.file][r.start as usize..r.end as usize].to_vec());
            }
        }
    }

    const CASES: [&str; 6] =
        ["gemma4-text", "gemma4-multimodal", "gemma4-mlx-4bit", "gemma4-gguf", "gemma3-text", "gemma3-gguf"];

    #[test]
    fn the_plan_is_what_the_load_reads() {
        for case in CASES {
            let mut streamed = Streamed::open(case);
            let plan = GemmaLoader::new(streamed.config.clone(), &streamed.checkpoint, MAX_TENSOR_BYTES).plan();
            for t in &plan {
                assert_eq!(streamed.checkpoint.shape(&t.name).as_ref(), Some(&t.shape), "{case}: {}", t.name);
            }
            // With only the planned tensors fetched the whole load runs: it reads nothing else.
            streamed.fetch_plan(&plan, None);
            let config = streamed.config.clone();
            Gemma::load(config, &mut streamed.checkpoint, &Device::flex()).unwrap_or_else(|e| panic!("{case}: {e}"));

            // And it reads what the plan names: one tensor left out stops it.
            let skipped = &plan[plan.len() / 2].name;
            let mut streamed = Streamed::open(case);
            streamed.fetch_plan(&plan, Some(skipped));
            let config = streamed.config.clone();
            let err = Gemma::load(config, &mut streamed.checkpoint, &Device::flex()).err();
            let not_fetched = matches!(err, Some(ModelError::Weights(WeightsError::NotFetched { .. })));
            assert!(not_fetched, "{case}: {skipped} was not fetched, yet the load gave {err:?}");
        }
    }

    #[test]
    fn shared_layers_plan_no_keys_or_values() {
        let streamed = Streamed::open("gemma4-multimodal");
        let plan = GemmaLoader::new(streamed.config.clone(), &streamed.checkpoint, MAX_TENSOR_BYTES).plan();
        // The checkpoint holds garbage k/v on shared layers 4 and 5 (as Google's do): never read.
        assert!(streamed.checkpoint.contains("model.language_model.layers.4.self_attn.k_proj.weight"));
        let kv = |i: usize| plan.iter().filter(|t| t.layer == Some(i) && t.name.contains("k_proj")).count();
        assert_eq!((kv(3), kv(4), kv(5)), (1, 0, 0));
        assert!(plan.iter().all(|t| t.name.starts_with("model.language_model.")), "no tower tensor is planned");
    }
}
