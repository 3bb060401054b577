//! The vision tower's configuration: config.json's `vision_config` (transformers'
//! `Gemma4VisionConfig`, whose defaults are E2B/E4B's tower) and the image tokens of the prompt.

use hearth_weights::{Checkpoint, MetadataValue};
use serde::Deserialize;

use crate::config::ConfigError;
use crate::config::token_ids::TokenIdDisagreement;
use crate::media::{MediaMarkers, Medium};

/// Gemma 4's vision tower and how its soft tokens enter the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// Width of the tower (768 in E2B/E4B).
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Side of a square patch, in pixels.
    pub patch_size: usize,
    /// Side of the square of patches averaged into one soft token.
    pub pooling_kernel_size: usize,
    /// Rows of each of the x and y position tables.
    pub position_embedding_size: usize,
    /// Base of the 2-D rotary embedding.
    pub rope_theta: f32,
    pub rms_norm_eps: f32,
    /// Whether the pooled features are standardized (`(h − std_bias) · std_scale`).
    pub standardize: bool,
    /// Whether each linear layer clamps its input and output to stored bounds.
    pub clipped_linears: bool,
    /// The text model's width: the multimodal embedder projects to it.
    pub text_hidden_size: usize,
    /// The placeholder each soft token replaces in the prompt, and the tokens around an image
    /// (config.json's `image_token_id`, `boi_token_id`, `eoi_token_id`).
    pub tokens: MediaMarkers,
}

/// The top level of config.json, by `Gemma4Config`'s field names in transformers 5.23. An id that
/// is absent (or `null`) is the published model's.
#[derive(Deserialize)]
struct RawTop {
    vision_config: Option<RawVision>,
    text_config: Option<RawText>,
    image_token_id: Option<u32>,
    boi_token_id: Option<u32>,
    eoi_token_id: Option<u32>,
}

#[derive(Deserialize)]
struct RawText {
    hidden_size: usize,
}

/// transformers 5.23's `Gemma4VisionConfig` defaults.
#[derive(Deserialize)]
#[serde(default)]
struct RawVision {
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    patch_size: usize,
    pooling_kernel_size: usize,
    position_embedding_size: usize,
    rms_norm_eps: f32,
    rope_parameters: Option<RawRope>,
    /// Where a file keeps the base outside `rope_parameters` (transformers moves it in).
    rope_theta: Option<f32>,
    standardize: bool,
    use_clipped_linears: bool,
    hidden_activation: String,
}

#[derive(Deserialize)]
struct RawRope {
    rope_type: Option<String>,
    rope_theta: Option<f32>,
}

impl Default for RawVision {
    fn default() -> Self {
        RawVision {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 16,
            num_attention_heads: 12,
            num_key_value_heads: 12,
            head_dim: 64,
            patch_size: 16,
            pooling_kernel_size: 3,
            position_embedding_size: 10 * 1024,
            rms_norm_eps: 1e-6,
            rope_parameters: None,
            rope_theta: None,
            standardize: false,
            use_clipped_linears: false,
            hidden_activation: "gelu_pytorch_tanh".into(),
        }
    }
}

/// The published model's ids (`Gemma4Config`'s defaults).
mod defaults {
    pub const IMAGE_TOKEN: u32 = 258_880;
    pub const BOI_TOKEN: u32 = 255_999;
    pub const EOI_TOKEN: u32 = 258_882;
}

impl VisionConfig {
    /// The vision tower config.json describes, or `None` for a text-only model.
    pub fn from_json(json: &str) -> Result<Option<Self>, ConfigError> {
        let raw: RawTop = serde_json::from_str(json)?;
        let (Some(v), Some(text)) = (raw.vision_config, raw.text_config) else { return Ok(None) };
        let invalid = |why: String| ConfigError::Invalid(format!("vision_config: {why}"));
        if v.hidden_activation != "gelu_pytorch_tanh" {
            return Err(invalid(format!("activation `{}` is not Gemma 4's gelu_pytorch_tanh", v.hidden_activation)));
        }
        let rope = v.rope_parameters.unwrap_or(RawRope { rope_type: None, rope_theta: None });
        // Files saved before transformers named it `axial` say `default` (5.23 reads that as
        // axial, "to keep BC with old ckpt that require axial rope type").
        if let Some(kind) = rope.rope_type.filter(|k| k != "axial" && k != "default") {
            return Err(invalid(format!("rope type `{kind}` is not the axial 2-D rotary embedding")));
        }
        if v.num_attention_heads == 0
            || v.num_key_value_heads == 0
            || v.num_attention_heads % v.num_key_value_heads != 0
            || v.head_dim % 4 != 0
            || v.patch_size == 0
            || v.pooling_kernel_size == 0
        {
            return Err(invalid(format!(
                "{} heads, {} key/value heads, head size {}, patch {}, pooling {} do not fit together",
                v.num_attention_heads, v.num_key_value_heads, v.head_dim, v.patch_size, v.pooling_kernel_size
            )));
        }
        Ok(Some(VisionConfig {
            hidden_size: v.hidden_size,
            intermediate_size: v.intermediate_size,
            num_layers: v.num_hidden_layers,
            num_heads: v.num_attention_heads,
            num_kv_heads: v.num_key_value_heads,
            head_dim: v.head_dim,
            patch_size: v.patch_size,
            pooling_kernel_size: v.pooling_kernel_size,
            position_embedding_size: v.position_embedding_size,
            rope_theta: rope.rope_theta.or(v.rope_theta).unwrap_or(100.0),
            rms_norm_eps: v.rms_norm_eps,
            standardize: v.standardize,
            clipped_linears: v.use_clipped_linears,
            text_hidden_size: text.hidden_size,
            tokens: MediaMarkers {
                medium: Medium::Image,
                placeholder: raw.image_token_id.unwrap_or(defaults::IMAGE_TOKEN),
                open: raw.boi_token_id.unwrap_or(defaults::BOI_TOKEN),
                close: raw.eoi_token_id.unwrap_or(defaults::EOI_TOKEN),
            },
        }))
    }

    /// The tower a llama.cpp projector file (`mmproj`, projector type `gemma4v`) describes, for a
    /// text model of width `text_hidden_size` whose vocabulary gives `tokens`. What its metadata
    /// leaves out is taken as llama.cpp takes it: pooling 3 (unless `clip.vision.projector.scale_factor`
    /// says otherwise) and a rotary base of 100; the head size and position table size come from
    /// the tensors' shapes, standardization and clipping from whether their tensors are present.
    pub fn from_mmproj(
        checkpoint: &Checkpoint,
        text_hidden_size: usize,
        tokens: MediaMarkers,
    ) -> Result<Self, ConfigError> {
        let invalid = |why: String| ConfigError::InvalidGguf(format!("projector: {why}"));
        let gguf = checkpoint.gguf().ok_or_else(|| invalid("not a GGUF file".into()))?;
        let kind = gguf.get("clip.vision.projector_type").and_then(MetadataValue::as_str).unwrap_or_default();
        if kind != "gemma4v" {
            return Err(invalid(format!("projector type `{kind}` is not Gemma 4's vision tower (gemma4v)")));
        }
        let number = |key: &str| {
            gguf.get(key).and_then(MetadataValue::as_usize).ok_or_else(|| invalid(format!("`{key}` is missing")))
        };
        let shape = |name: &str| checkpoint.shape(name).ok_or_else(|| invalid(format!("tensor `{name}` is missing")));
        let hidden_size = number("clip.vision.embedding_length")?;
        let head_dim = shape("v.blk.0.attn_q_norm.weight")?[0];
        let q_rows = shape("v.blk.0.attn_q.weight")?[0];
        let kv_rows = shape("v.blk.0.attn_k.weight")?[0];
        let table = shape("v.position_embd.weight")?;
        if head_dim == 0 || head_dim % 4 != 0 || q_rows % head_dim != 0 || kv_rows % head_dim != 0 || table.len() != 3 {
            return Err(invalid(format!("head size {head_dim}, {q_rows} query rows, position table {table:?}")));
        }
        let eps = gguf.get("clip.vision.attention.layer_norm_epsilon").and_then(MetadataValue::as_f64).unwrap_or(1e-6);
        Ok(VisionConfig {
            hidden_size,
            intermediate_size: number("clip.vision.feed_forward_length")?,
            num_layers: number("clip.vision.block_count")?,
            num_heads: q_rows / head_dim,
            num_kv_heads: kv_rows / head_dim,
            head_dim,
            patch_size: number("clip.vision.patch_size")?,
            pooling_kernel_size: gguf
                .get("clip.vision.projector.scale_factor")
                .and_then(MetadataValue::as_usize)
                .unwrap_or(3),
            position_embedding_size: table[1],
            rope_theta: 100.0,
            rms_norm_eps: eps as f32,
            standardize: checkpoint.contains("v.std_bias"),
            clipped_linears: checkpoint.contains("v.blk.0.attn_q.input_min"),
            text_hidden_size,
            tokens,
        })
    }

    /// The image tokens replaced by the tokenizer's for the same pieces where they differ (the
    /// tokenizer wins: [`crate::config::token_ids`]); the differences.
    pub fn reconcile_tokens(&mut self, tokenizer: &crate::tokenizer::Tokenizer) -> Vec<TokenIdDisagreement> {
        self.tokens.reconcile(["image_token_id", "boi_token_id", "eoi_token_id"], tokenizer)
    }

    /// The image processor that feeds this tower, at a budget of `max_soft_tokens`.
    pub fn processor(&self, max_soft_tokens: usize) -> super::image::ImageProcessor {
        super::image::ImageProcessor {
            patch_size: self.patch_size,
            pooling_kernel_size: self.pooling_kernel_size,
            max_soft_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_only_config_has_no_tower() {
        let json = r#"{"model_type": "gemma4_text", "hidden_size": 32}"#;
        assert_eq!(VisionConfig::from_json(json).unwrap(), None);
    }

    #[test]
    fn published_defaults_fill_what_the_file_leaves_out() {
        let json = r#"{"text_config": {"hidden_size": 1536}, "vision_config": {"standardize": true}}"#;
        let config = VisionConfig::from_json(json).unwrap().unwrap();
        assert_eq!((config.hidden_size, config.num_layers, config.patch_size), (768, 16, 16));
        assert_eq!((config.text_hidden_size, config.tokens.placeholder), (1536, 258_880));
        assert!(config.standardize);
    }

    #[test]
    fn another_rope_is_refused_by_name() {
        let json = r#"{"text_config": {"hidden_size": 8},
            "vision_config": {"rope_parameters": {"rope_type": "linear", "rope_theta": 10.0}}}"#;
        let err = VisionConfig::from_json(json).unwrap_err().to_string();
        assert!(err.contains("rope type `linear`"), "{err}");
    }

    #[test]
    fn an_older_files_default_rope_is_the_axial_one() {
        // What files saved before transformers 5.23 named it say; 5.23 reads it as axial.
        let json = r#"{"text_config": {"hidden_size": 8},
            "vision_config": {"rope_parameters": {"rope_type": "default", "rope_theta": 10.0}}}"#;
        assert_eq!(VisionConfig::from_json(json).unwrap().unwrap().rope_theta, 10.0);
        let json = r#"{"text_config": {"hidden_size": 8}, "vision_config": {"rope_theta": 20.0}}"#;
        assert_eq!(VisionConfig::from_json(json).unwrap().unwrap().rope_theta, 20.0);
    }

    #[test]
    fn image_ids_by_transformers_names_and_the_tokenizer_wins() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-vision/config.json");
        let mut config = VisionConfig::from_json(&std::fs::read_to_string(path).unwrap()).unwrap().unwrap();
        // Saved by transformers with ids other than the published model's.
        assert_eq!((config.tokens.placeholder, config.tokens.open, config.tokens.close), (121, 120, 122));
        let nulls = r#"{"text_config": {"hidden_size": 8}, "vision_config": {}, "image_token_id": null}"#;
        assert_eq!(VisionConfig::from_json(nulls).unwrap().unwrap().tokens.placeholder, 258_880);
        // tiny-chat's tokenizer has them at 60, 61, 62: its ids are used.
        let found = config.reconcile_tokens(&crate::config::token_ids::tests::tiny_chat_tokenizer());
        assert_eq!((config.tokens.placeholder, config.tokens.open, config.tokens.close), (60, 61, 62));
        let fields: Vec<_> = found.iter().map(|d| (d.field, d.config, d.tokenizer)).collect();
        assert_eq!(fields, [("image_token_id", 121, 60), ("boi_token_id", 120, 61), ("eoi_token_id", 122, 62)]);
    }
}
