//! Loading a drafter from its safetensors (Hugging Face's layout of
//! `google/gemma-4-E2B-it-assistant`), f32 on the device:
//!
//! ```text
//! pre_projection.weight                       [h, 2H]
//! post_projection.weight                      [H, h]
//! model.embed_tokens.weight                   [vocab, h]   (lm_head.weight when not tied)
//! model.norm.weight                           [h]
//! model.layers.{i}.self_attn.{q_proj,o_proj,q_norm}, mlp.{gate,up,down}_proj, layer_scalar,
//!   {input,post_attention,pre_feedforward,post_feedforward}_layernorm
//! masked_embedding.centroids.weight           [C, h]       (centroid head)
//! masked_embedding.token_ordering             [vocab]      (i64: each cluster's tokens in turn)
//! ```

use burn::tensor::{Device, Int, Tensor, TensorData};
use hearth_weights::{Checkpoint, DType};

use super::{CentroidHead, Drafter, DrafterConfig, DrafterError, DrafterHead, DrafterLayer, Head, TokenRows};
use crate::config::TextConfig;
use crate::error::ModelError;
use crate::gemma::MAX_TENSOR_BYTES;

/// Reads tensors by name, checking their shapes.
struct Reader<'a> {
    checkpoint: &'a mut Checkpoint,
    device: &'a Device,
    norm_offset: f32,
}

impl Reader<'_> {
    fn host(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, DrafterError> {
        let tensor = self.checkpoint.read_f32(name)?;
        if tensor.shape != shape {
            let (expected, actual) = (shape.to_vec(), tensor.shape);
            return Err(ModelError::Shape { name: name.to_string(), expected, actual }.into());
        }
        Ok(tensor.data)
    }

    /// A `[out, in]` matrix as `[in, out]`, so that `x · W` needs no transpose.
    fn linear(&mut self, name: &str, out_features: usize, in_features: usize) -> Result<Tensor<2>, DrafterError> {
        let w = self.host(name, &[out_features, in_features])?;
        let mut transposed = vec![0.0; w.len()];
        for (o, row) in w.chunks_exact(in_features).enumerate() {
            for (i, value) in row.iter().enumerate() {
                transposed[i * out_features + o] = *value;
            }
        }
        Ok(Tensor::from_data(TensorData::new(transposed, [in_features, out_features]), self.device))
    }

    fn norm(&mut self, name: &str, size: usize) -> Result<Tensor<1>, DrafterError> {
        let w: Vec<f32> = self.host(name, &[size])?.into_iter().map(|v| v + self.norm_offset).collect();
        Ok(Tensor::from_data(TensorData::new(w, [size]), self.device))
    }

    /// `[vocab, h]` in blocks of at most `max_bytes`.
    fn token_rows(&mut self, name: &str, vocab: usize, h: usize, max_bytes: usize) -> Result<TokenRows, DrafterError> {
        let data = self.host(name, &[vocab, h])?;
        let rows_per_block = (max_bytes / (h * 4).max(1)).clamp(1, vocab.max(1));
        let blocks = data
            .chunks(rows_per_block * h)
            .map(|rows| Tensor::from_data(TensorData::new(rows.to_vec(), [rows.len() / h, h]), self.device))
            .collect();
        Ok(TokenRows { blocks, rows_per_block })
    }

    /// `token_ordering` (integers as stored) checked to be a permutation of the vocabulary, as
    /// `[C, vocab / C]` rows of ids.
    fn clusters(&mut self, name: &str, vocab: usize, centroids: usize) -> Result<Tensor<2, Int>, DrafterError> {
        let (info, bytes) = self.checkpoint.read_raw(name)?;
        if info.shape != [vocab] {
            return Err(ModelError::Shape { name: name.to_string(), expected: vec![vocab], actual: info.shape }.into());
        }
        let ids: Vec<i64> = match info.dtype {
            DType::I64 => bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect(),
            DType::I32 => {
                bytes.chunks_exact(4).map(|b| i64::from(i32::from_le_bytes(b.try_into().unwrap_or([0; 4])))).collect()
            }
            other => return Err(DrafterError::TokenOrdering(format!("stored as {other:?}, not integers"))),
        };
        let mut seen = vec![false; vocab];
        for &id in &ids {
            let slot = usize::try_from(id).ok().and_then(|i| seen.get_mut(i));
            match slot {
                Some(seen) if !*seen => *seen = true,
                Some(_) => return Err(DrafterError::TokenOrdering(format!("token {id} appears twice"))),
                None => return Err(DrafterError::TokenOrdering(format!("token {id} is outside the vocabulary"))),
            }
        }
        let ids: Vec<i32> = ids.into_iter().map(|id| id as i32).collect();
        Ok(Tensor::from_data(TensorData::new(ids, [centroids, vocab / centroids]), self.device))
    }
}

impl Drafter {
    /// Loads a drafter for the main model `main` (refused by name when it was made for another:
    /// [`DrafterConfig::main_kv_layers`]) from `checkpoint`.
    pub fn load(
        config: DrafterConfig,
        main: &TextConfig,
        checkpoint: &mut Checkpoint,
        device: &Device,
    ) -> Result<Self, DrafterError> {
        Self::load_with_tensor_limit(config, main, checkpoint, device, MAX_TENSOR_BYTES)
    }

    /// As [`load`](Self::load), with the token embedding in blocks of at most `max_tensor_bytes`.
    pub fn load_with_tensor_limit(
        config: DrafterConfig,
        main: &TextConfig,
        checkpoint: &mut Checkpoint,
        device: &Device,
        max_tensor_bytes: usize,
    ) -> Result<Self, DrafterError> {
        let main_layers = config.main_kv_layers(main)?;
        let c = &config.text;
        let (h, backbone, vocab, heads) = (c.hidden_size, config.backbone_hidden_size, c.vocab_size, c.num_heads);
        let mut r = Reader { checkpoint, device, norm_offset: c.norm_weight_offset };
        let mut layers = Vec::with_capacity(c.num_layers);
        for (i, spec) in c.layers.iter().enumerate() {
            let name = |part: &str| format!("model.layers.{i}.{part}");
            let (q_rows, inter) = (heads * spec.head_dim, spec.intermediate_size);
            layers.push(DrafterLayer {
                kind: spec.kind,
                q_proj: r.linear(&name("self_attn.q_proj.weight"), q_rows, h)?,
                q_norm: r.norm(&name("self_attn.q_norm.weight"), spec.head_dim)?,
                o_proj: r.linear(&name("self_attn.o_proj.weight"), h, q_rows)?,
                gate_proj: r.linear(&name("mlp.gate_proj.weight"), inter, h)?,
                up_proj: r.linear(&name("mlp.up_proj.weight"), inter, h)?,
                down_proj: r.linear(&name("mlp.down_proj.weight"), h, inter)?,
                input_norm: r.norm(&name("input_layernorm.weight"), h)?,
                post_attention_norm: r.norm(&name("post_attention_layernorm.weight"), h)?,
                pre_feedforward_norm: r.norm(&name("pre_feedforward_layernorm.weight"), h)?,
                post_feedforward_norm: r.norm(&name("post_feedforward_layernorm.weight"), h)?,
                layer_scalar: r.host(&name("layer_scalar"), &[1])?[0],
            });
        }
        let output = if config.tied_embeddings { "model.embed_tokens.weight" } else { "lm_head.weight" };
        let embedding = r.token_rows(output, vocab, h, max_tensor_bytes)?;
        let head = match config.head {
            DrafterHead::Tied => Head::Tied,
            DrafterHead::Centroids { centroids, top_k } => Head::Centroids(CentroidHead {
                centroids: r.linear("masked_embedding.centroids.weight", centroids, h)?,
                clusters: r.clusters("masked_embedding.token_ordering", vocab, centroids)?,
                top_k,
            }),
        };
        Ok(Drafter {
            pre_projection: r.linear("pre_projection.weight", h, 2 * backbone)?,
            post_projection: r.linear("post_projection.weight", backbone, h)?,
            final_norm: r.norm("model.norm.weight", h)?,
            layers,
            embedding,
            head,
            main_layers,
            device: device.clone(),
            config,
            recording: Default::default(),
            recorded: Default::default(),
        })
    }
}

/// Loads the drafter in folder `dir` (its `config.json` and safetensors) for the main model
/// `main`.
#[cfg(not(target_family = "wasm"))]
pub fn load_dir(dir: &std::path::Path, main: &TextConfig, device: &Device) -> Result<Drafter, DrafterError> {
    let path = dir.join("config.json");
    let json = std::fs::read_to_string(&path).map_err(|source| DrafterError::Io { path, source })?;
    let config = DrafterConfig::from_json(&json)?;
    let mut checkpoint = Checkpoint::open(dir)?;
    Drafter::load(config, main, &mut checkpoint, device)
}
