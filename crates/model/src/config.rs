//! Model configuration from Hugging Face's `config.json`, normalised into one description for
//! every supported family:
//!
//! - `gemma4` (multimodal wrapper: `text_config`, tensors under `model.language_model.`)
//! - `gemma4_text` (tensors under `model.`)
//! - `gemma3_text` (tensors under `model.`; `1 + w` norms, `query_pre_attn_scalar`)
//!
//! A GGUF file has no `config.json`: [`TextConfig::from_gguf`] reads llama.cpp's `gemma3.*` or
//! `gemma4.*` metadata keys ([`gguf`]) into the same description.

mod gguf;

use std::collections::BTreeMap;

use hearth_weights::GgufFile;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("model type `{0}` is not supported (supported: gemma4, gemma4_text, gemma3_text)")]
    UnsupportedModel(String),
    #[error("config.json is inconsistent: {0}")]
    Invalid(String),
    #[error("GGUF architecture `{0}` is not supported (supported: gemma3, gemma4)")]
    UnsupportedGguf(String),
    #[error("the GGUF metadata is inconsistent: {0}")]
    InvalidGguf(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Gemma3,
    Gemma4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerType {
    /// Attends to the last `sliding_window` positions.
    Sliding,
    /// Attends to every earlier position.
    Full,
}

/// Rotary position embedding of one layer type: `inv_freq[i]` for each of the head's `d/2` pairs
/// (zero for pairs that do not rotate).
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub inv_freq: Vec<f32>,
}

impl Rope {
    /// `rope_type: default`: all pairs rotate, `inv_freq[i] = θ^(-2i/d)`, optionally divided by a
    /// linear scaling factor.
    fn default(theta: f64, head_dim: usize, linear_factor: f64) -> Self {
        let inv_freq = (0..head_dim / 2)
            .map(|i| (theta.powf(-(2.0 * i as f64) / head_dim as f64) / linear_factor) as f32)
            .collect();
        Rope { inv_freq }
    }

    /// Gemma 4's `proportional` RoPE: only the first `partial·d/2` pairs rotate, with exponents
    /// divided by the full head dimension; the rest pass through (frequency 0).
    fn proportional(theta: f64, head_dim: usize, partial_rotary_factor: f64) -> Self {
        let rotated = ((partial_rotary_factor * head_dim as f64) as usize) / 2;
        let inv_freq = (0..head_dim / 2)
            .map(|i| if i < rotated { theta.powf(-(2.0 * i as f64) / head_dim as f64) as f32 } else { 0.0 })
            .collect();
        Rope { inv_freq }
    }
}

/// Everything the decoder needs to know, per layer where it varies.
#[derive(Debug, Clone)]
pub struct TextConfig {
    pub family: Family,
    /// Prefix of every text-decoder tensor name, e.g. `model.language_model.`.
    pub tensor_prefix: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub layers: Vec<LayerConfig>,
    pub sliding_window: usize,
    pub rms_norm_eps: f32,
    /// Added to every RMSNorm weight: 1 for Gemma 3 (`1 + w`), 0 for Gemma 4.
    pub norm_weight_offset: f32,
    /// Multiplies q·k: 1.0 for Gemma 4, `query_pre_attn_scalar^-0.5` for Gemma 3.
    pub attention_scale: f32,
    /// Gemma 4 normalises V per head (without a weight).
    pub v_norm: bool,
    pub final_logit_softcap: Option<f32>,
    pub attention_logit_softcap: Option<f32>,
    /// The token embedding is multiplied by this (√hidden).
    pub embed_scale: f32,
    /// Per-layer embeddings (Gemma 4 E2B/E4B): the width of each layer's slice.
    pub per_layer_input_size: Option<usize>,
    pub bos_token_id: u32,
    pub eos_token_ids: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct LayerConfig {
    pub kind: LayerType,
    pub head_dim: usize,
    pub num_kv_heads: usize,
    pub intermediate_size: usize,
    pub rope: Rope,
    /// For a KV-shared layer: the earlier layer whose keys and values it reuses.
    pub kv_producer: Option<usize>,
}

/// `config.json` fields, as transformers 5.x writes them (older spellings accepted too).
#[derive(Deserialize)]
struct RawConfig {
    model_type: String,
    text_config: Option<Box<RawConfig>>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    global_head_dim: Option<usize>,
    #[serde(default)]
    per_layer_config: BTreeMap<String, LayerOverride>,
    layer_types: Option<Vec<String>>,
    sliding_window: Option<usize>,
    sliding_window_pattern: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_parameters: Option<serde_json::Value>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    query_pre_attn_scalar: Option<f64>,
    final_logit_softcapping: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    hidden_size_per_layer_input: Option<usize>,
    #[serde(default)]
    num_kv_shared_layers: usize,
    #[serde(default)]
    use_double_wide_mlp: bool,
    #[serde(default)]
    attention_k_eq_v: bool,
    #[serde(default)]
    enable_moe_block: bool,
    bos_token_id: Option<u32>,
    eos_token_id: Option<serde_json::Value>,
}

#[derive(Deserialize, Default, Clone)]
struct LayerOverride {
    head_dim: Option<usize>,
    num_key_value_heads: Option<usize>,
    /// Written by the GGUF reader only (llama.cpp stores one MLP width per layer).
    intermediate_size: Option<usize>,
}

impl TextConfig {
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = serde_json::from_str(json)?;
        match raw.model_type.as_str() {
            "gemma4" => {
                let text = raw.text_config.ok_or_else(|| invalid("gemma4 config without text_config"))?;
                let eos = raw.eos_token_id.or(text.eos_token_id.clone());
                let mut config = Self::from_raw(Family::Gemma4, *text, "model.language_model.")?;
                if let Some(eos) = eos {
                    config.eos_token_ids = eos_ids(&eos);
                }
                Ok(config)
            }
            "gemma4_text" => Self::from_raw(Family::Gemma4, raw, "model."),
            "gemma3_text" => Self::from_raw(Family::Gemma3, raw, "model."),
            other => Err(ConfigError::UnsupportedModel(other.to_string())),
        }
    }

    fn from_raw(family: Family, raw: RawConfig, prefix: &str) -> Result<Self, ConfigError> {
        if raw.attention_k_eq_v || raw.enable_moe_block {
            return Err(invalid("attention_k_eq_v and MoE blocks (Gemma 4 26B/31B) are not supported"));
        }
        let need = |v: Option<usize>, name: &str| v.ok_or_else(|| invalid(&format!("missing `{name}`")));
        let hidden_size = need(raw.hidden_size, "hidden_size")?;
        let num_layers = need(raw.num_hidden_layers, "num_hidden_layers")?;
        let num_heads = need(raw.num_attention_heads, "num_attention_heads")?;
        let num_kv_heads = raw.num_key_value_heads.unwrap_or(num_heads);
        let head_dim = raw.head_dim.unwrap_or(hidden_size / num_heads);
        let intermediate_size = need(raw.intermediate_size, "intermediate_size")?;
        let sliding_window = raw.sliding_window.unwrap_or(usize::MAX);

        let kinds: Vec<LayerType> = match &raw.layer_types {
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    "sliding_attention" => Ok(LayerType::Sliding),
                    "full_attention" => Ok(LayerType::Full),
                    other => Err(invalid(&format!("unknown layer type `{other}`"))),
                })
                .collect::<Result<_, _>>()?,
            None => {
                let pattern = raw.sliding_window_pattern.unwrap_or(6);
                (0..num_layers)
                    .map(|i| if (i + 1) % pattern == 0 { LayerType::Full } else { LayerType::Sliding })
                    .collect()
            }
        };
        if kinds.len() != num_layers {
            return Err(invalid("layer_types has a different length than num_hidden_layers"));
        }

        let producers = kv_producers(&kinds, raw.num_kv_shared_layers)?;
        let mut layers = Vec::with_capacity(num_layers);
        for (i, &kind) in kinds.iter().enumerate() {
            let overrides = raw.per_layer_config.get(&i.to_string()).cloned().unwrap_or_default();
            let layer_head_dim = overrides.head_dim.unwrap_or(match (kind, raw.global_head_dim) {
                (LayerType::Full, Some(global)) if family == Family::Gemma4 => global,
                _ => head_dim,
            });
            let shared = producers[i].is_some();
            layers.push(LayerConfig {
                kind,
                head_dim: layer_head_dim,
                num_kv_heads: overrides.num_key_value_heads.unwrap_or(num_kv_heads),
                intermediate_size: overrides
                    .intermediate_size
                    .unwrap_or(intermediate_size * if raw.use_double_wide_mlp && shared { 2 } else { 1 }),
                rope: rope_for(family, &raw, kind, layer_head_dim)?,
                kv_producer: producers[i],
            });
        }
        for layer in &layers {
            if num_heads % layer.num_kv_heads != 0 {
                return Err(invalid("num_attention_heads is not a multiple of num_key_value_heads"));
            }
        }

        let (norm_weight_offset, attention_scale, v_norm) = match family {
            Family::Gemma4 => (0.0, 1.0, true),
            Family::Gemma3 => {
                let scalar = raw.query_pre_attn_scalar.unwrap_or(head_dim as f64);
                (1.0, scalar.powf(-0.5) as f32, false)
            }
        };
        let per_layer_input_size = match family {
            Family::Gemma4 => raw.hidden_size_per_layer_input.filter(|&n| n > 0),
            Family::Gemma3 => None,
        };
        Ok(TextConfig {
            family,
            tensor_prefix: prefix.to_string(),
            vocab_size: need(raw.vocab_size, "vocab_size")?,
            hidden_size,
            num_layers,
            num_heads,
            layers,
            sliding_window,
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6) as f32,
            norm_weight_offset,
            attention_scale,
            v_norm,
            final_logit_softcap: raw.final_logit_softcapping.map(|v| v as f32),
            attention_logit_softcap: raw.attn_logit_softcapping.map(|v| v as f32),
            embed_scale: (hidden_size as f32).sqrt(),
            per_layer_input_size,
            bos_token_id: raw.bos_token_id.unwrap_or(2),
            eos_token_ids: raw.eos_token_id.as_ref().map(eos_ids).unwrap_or_else(|| vec![1]),
        })
    }

    /// The configuration a GGUF file's metadata describes (llama.cpp's `{arch}.*` keys).
    ///
    /// `gemma4`: see [`gguf`] for the keys; they are required, and full layers' partial RoPE
    /// comes from the `rope_freqs` tensor at load time ([`Self::apply_rope_freq_factors`]).
    ///
    /// `gemma3`: llama.cpp writes the shape (`embedding_length`, `block_count`,
    /// `feed_forward_length`, `attention.head_count`, `attention.head_count_kv`,
    /// `attention.key_length`), `attention.layer_norm_rms_epsilon`, `rope.freq_base` (global
    /// layers) and `attention.sliding_window`; the rest is fixed per architecture in llama.cpp and
    /// taken here as it does:
    /// - sliding layers' RoPE base `rope.freq_base_swa`, else 10 000;
    /// - the layer pattern `attention.sliding_window_pattern` (a period, or one bool per layer,
    ///   true = sliding), else every 6th layer full;
    /// - the query scale: `(hidden / heads)^-½` for the 62-layer (27B) model, else
    ///   `key_length^-½` (what `query_pre_attn_scalar` is for every other Gemma 3);
    /// - linear RoPE scaling of global layers from `rope.scaling.type` / `rope.scaling.factor`;
    /// - softcaps from `final_logit_softcapping` / `attn_logit_softcapping` when present (Gemma 3
    ///   has none);
    /// - vocabulary size from `vocab_size`, else the tokenizer's piece count;
    /// - ids from `tokenizer.ggml.bos_token_id` / `eos_token_id`, plus `<end_of_turn>` as a stop
    ///   token when the vocabulary has it (Gemma 3's generation_config.json stops on both).
    ///
    /// A Gemma 3 key that is missing falls back to Gemma 3 270M's value (hidden 640, 18 layers, 4
    /// heads, 1 KV head, head dim 256, MLP 2048, eps 1e-6, RoPE 1e6 / 1e4, window 512, vocab
    /// 262 144, bos 2, eos 1): the loader's shape checks then catch a file that is not that model.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ConfigError> {
        Self::from_json(&gguf::config_json(file)?.to_string())
    }

    /// Applies llama.cpp's `rope_freqs` tensor (a GGUF's per-pair frequency divisors, one per
    /// rotated pair of a full-attention head) to every full-attention layer. Gemma 4's converter
    /// spells proportional RoPE this way: 1 for the pairs that rotate, 1e30 for the rest.
    pub fn apply_rope_freq_factors(&mut self, factors: &[f32]) -> Result<(), ConfigError> {
        if factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
            return Err(ConfigError::InvalidGguf("rope_freqs holds a factor that is not a positive number".into()));
        }
        for (i, layer) in self.layers.iter_mut().enumerate().filter(|(_, l)| l.kind == LayerType::Full) {
            let pairs = layer.rope.inv_freq.len();
            if factors.len() != pairs {
                return Err(ConfigError::InvalidGguf(format!(
                    "rope_freqs has {} factors but layer {i}'s heads rotate {pairs} pairs",
                    factors.len()
                )));
            }
            for (freq, factor) in layer.rope.inv_freq.iter_mut().zip(factors) {
                *freq /= factor;
            }
        }
        Ok(())
    }

    /// Takes the stop tokens from a `generation_config.json`, when it names any.
    pub fn apply_generation_config(&mut self, json: &str) -> Result<(), ConfigError> {
        let value: serde_json::Value = serde_json::from_str(json)?;
        if let Some(eos) = value.get("eos_token_id") {
            let ids = eos_ids(eos);
            if !ids.is_empty() {
                self.eos_token_ids = ids;
            }
        }
        Ok(())
    }

    /// How many positions each sliding layer must see.
    pub fn window(&self) -> usize {
        self.sliding_window
    }
}

fn invalid(message: &str) -> ConfigError {
    ConfigError::Invalid(message.to_string())
}

fn eos_ids(value: &serde_json::Value) -> Vec<u32> {
    match value {
        serde_json::Value::Array(ids) => ids.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
        other => other.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
    }
}

/// KV sharing: the last `shared` layers reuse the keys and values of the last earlier layer of the
/// same type (transformers' `kv_sharing_modes`).
fn kv_producers(kinds: &[LayerType], shared: usize) -> Result<Vec<Option<usize>>, ConfigError> {
    let first_shared = kinds.len().checked_sub(shared).ok_or_else(|| invalid("num_kv_shared_layers > layers"))?;
    kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            if i < first_shared {
                return Ok(None);
            }
            (0..first_shared)
                .rev()
                .find(|&j| kinds[j] == *kind)
                .map(Some)
                .ok_or_else(|| invalid("a KV-shared layer has no earlier layer of its type to share with"))
        })
        .collect()
}

fn rope_for(family: Family, raw: &RawConfig, kind: LayerType, head_dim: usize) -> Result<Rope, ConfigError> {
    let key = match kind {
        LayerType::Sliding => "sliding_attention",
        LayerType::Full => "full_attention",
    };
    // transformers 5: `rope_parameters` per layer type (or one dict for every layer).
    if let Some(params) = &raw.rope_parameters {
        let params = params.get(key).unwrap_or(params);
        let theta = params.get("rope_theta").and_then(|v| v.as_f64()).ok_or_else(|| invalid("rope_theta missing"))?;
        let partial = params.get("partial_rotary_factor").and_then(|v| v.as_f64()).unwrap_or(1.0);
        return match params.get("rope_type").and_then(|v| v.as_str()).unwrap_or("default") {
            "default" if partial == 1.0 => Ok(Rope::default(theta, head_dim, 1.0)),
            "linear" => {
                let factor = params.get("factor").and_then(|v| v.as_f64()).unwrap_or(1.0);
                Ok(Rope::default(theta, head_dim, factor))
            }
            "proportional" => Ok(Rope::proportional(theta, head_dim, partial)),
            other => Err(invalid(&format!("rope_type `{other}` (partial {partial}) is not supported"))),
        };
    }
    // Older Gemma 3 spelling: rope_theta for global layers, rope_local_base_freq for local ones.
    match (family, kind) {
        (Family::Gemma3, LayerType::Sliding) => {
            Ok(Rope::default(raw.rope_local_base_freq.unwrap_or(10_000.0), head_dim, 1.0))
        }
        _ => {
            let factor = raw
                .rope_scaling
                .as_ref()
                .filter(|s| s.get("rope_type").and_then(|t| t.as_str()) == Some("linear"))
                .and_then(|s| s.get("factor").and_then(|f| f.as_f64()))
                .unwrap_or(1.0);
            Ok(Rope::default(raw.rope_theta.unwrap_or(1_000_000.0), head_dim, factor))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn e2b_like() -> String {
        let mut types = Vec::new();
        for _ in 0..7 {
            types.extend(["sliding_attention"; 4]);
            types.push("full_attention");
        }
        serde_json::json!({
            "model_type": "gemma4",
            "eos_token_id": [1, 106],
            "text_config": {
                "model_type": "gemma4_text", "vocab_size": 262144, "hidden_size": 1536, "intermediate_size": 6144,
                "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
                "global_head_dim": 512, "layer_types": types, "sliding_window": 512, "num_kv_shared_layers": 20,
                "use_double_wide_mlp": true, "hidden_size_per_layer_input": 256, "final_logit_softcapping": 30.0,
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}
                }
            }
        })
        .to_string()
    }

    #[test]
    fn gemma4_e2b_shapes_follow_the_spec() {
        let c = TextConfig::from_json(&e2b_like()).unwrap();
        assert_eq!(c.tensor_prefix, "model.language_model.");
        assert_eq!(c.eos_token_ids, vec![1, 106]);
        assert_eq!((c.layers[0].head_dim, c.layers[4].head_dim), (256, 512));
        // Producers: sliding → 13, full → 14; layers 15..35 share.
        assert_eq!(c.layers[14].kv_producer, None);
        assert_eq!(c.layers[15].kv_producer, Some(13));
        assert_eq!(c.layers[19].kv_producer, Some(14));
        assert_eq!(c.layers[34].kv_producer, Some(14));
        assert_eq!((c.layers[14].intermediate_size, c.layers[15].intermediate_size), (6144, 12288));
        assert_eq!(c.per_layer_input_size, Some(256));
        assert_eq!(c.attention_scale, 1.0);
    }

    #[test]
    fn proportional_rope_rotates_only_the_first_quarter() {
        let c = TextConfig::from_json(&e2b_like()).unwrap();
        let full = &c.layers[4].rope.inv_freq;
        assert_eq!(full.len(), 256);
        assert!(full[..64].iter().all(|&f| f > 0.0));
        assert!(full[64..].iter().all(|&f| f == 0.0));
        // Exponent divided by the full head dim (512), not by the rotated width.
        assert!((full[1] - 1e6f64.powf(-2.0 / 512.0) as f32).abs() < 1e-9);
        assert_eq!(c.layers[0].rope.inv_freq.len(), 128);
    }

    #[test]
    fn unsupported_models_are_named() {
        let err = TextConfig::from_json(r#"{"model_type": "llama"}"#).unwrap_err();
        assert!(err.to_string().contains("llama"));
    }
}
