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
pub mod token_ids;

use std::collections::BTreeMap;

use hearth_weights::GgufFile;
use serde::{Deserialize, Deserializer};

use crate::tokenizer::Tokenizer;
use token_ids::{TokenIdDisagreement, reconcile};

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
    /// A field the family's math depends on and that has no safe default (Gemma 4 is never given
    /// Gemma 3's values).
    #[error("{file} lacks `{field}`, which {family} needs")]
    Missing { file: &'static str, field: String, family: &'static str },
}

/// Gemma 4's stop ids, `<eos>`, `<turn|>` and `<|tool_response>`: what its generation_config.json
/// lists (its config.json lists only the first two), used when no file names them all.
pub const GEMMA4_STOP_IDS: [u32; 3] = [1, 106, 50];

/// The texts of Gemma 4's stop tokens besides `<eos>` (the end of its turn, and a tool's answer
/// opening right after a call), by which a GGUF vocabulary is searched for their ids. The chat
/// syntax names the same markers (`hearth_chat::syntax::STOP_MARKERS`; the engine's tests check
/// that they agree).
pub const GEMMA4_STOP_MARKERS: [&str; 2] = ["<turn|>", "<|tool_response>"];

/// Which file a configuration comes from, for errors that name the missing field and for the
/// stop ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `config.json`; `nested` when the text fields sit under `text_config`.
    ConfigJson { nested: bool },
    /// llama.cpp's metadata, already read into config.json's fields ([`gguf`]).
    Gguf,
}

impl Origin {
    fn missing(self, family: Family, field: &str) -> ConfigError {
        let (file, field) = match self {
            Origin::ConfigJson { nested: true } => ("config.json", format!("text_config.{field}")),
            Origin::ConfigJson { nested: false } => ("config.json", field.to_string()),
            Origin::Gguf => ("the GGUF metadata", field.to_string()),
        };
        let family = match family {
            Family::Gemma3 => "Gemma 3",
            Family::Gemma4 => "Gemma 4",
        };
        ConfigError::Missing { file, field, family }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Gemma3,
    Gemma4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LayerType {
    /// Attends to the last `sliding_window` positions.
    Sliding,
    /// Attends to every earlier position.
    Full,
}

impl LayerType {
    /// As configs spell it (`sliding_attention`, `full_attention`), short.
    pub fn name(self) -> &'static str {
        match self {
            LayerType::Sliding => "sliding",
            LayerType::Full => "full",
        }
    }

    /// 0 or 1: the slot of per-type tables (RoPE, cache geometry).
    pub(crate) fn index(self) -> usize {
        match self {
            LayerType::Sliding => 0,
            LayerType::Full => 1,
        }
    }
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

/// `config.json` fields, as transformers 5.x writes them (older spellings accepted too): the
/// names of `Gemma4TextConfig` (and `Gemma3TextConfig`) in transformers 5.23.
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
    /// Written by transformers before 5.23; 5.23 writes the full layers' heads as
    /// `per_layer_config` overrides instead.
    global_head_dim: Option<usize>,
    /// transformers 5.23's per-layer overrides, keyed by the layer's index zero-padded to the
    /// widest index's digits (`"04"` … `"34"` for E2B's 35 layers).
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
    /// Absent: `None`; `null` (transformers' `None`, `Gemma4TextConfig`'s default): `Some(None)`,
    /// no softcap.
    #[serde(default, deserialize_with = "present")]
    final_logit_softcapping: Option<Option<f64>>,
    attn_logit_softcapping: Option<f64>,
    hidden_size_per_layer_input: Option<usize>,
    num_kv_shared_layers: Option<usize>,
    #[serde(default)]
    use_double_wide_mlp: bool,
    #[serde(default)]
    attention_k_eq_v: bool,
    #[serde(default)]
    enable_moe_block: bool,
    /// Gemma's `gelu_pytorch_tanh` is the only activation Hearth computes.
    hidden_activation: Option<String>,
    /// `"all"` / `"vision"` (Gemma 4) or `true` (Gemma 3): attention that is not causal.
    use_bidirectional_attention: Option<serde_json::Value>,
    #[serde(default)]
    attention_bias: bool,
    /// The output head is the token embedding; an untied `lm_head` is not read.
    tie_word_embeddings: Option<bool>,
    /// Rows of the per-layer embedding table (Gemma 4).
    vocab_size_per_layer_input: Option<usize>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<serde_json::Value>,
}

/// A field that is present, `null` included: `Some(None)` for `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Deserialize, Default, Clone)]
struct LayerOverride {
    head_dim: Option<usize>,
    num_key_value_heads: Option<usize>,
    /// Written by the GGUF reader only (llama.cpp stores one MLP width per layer).
    intermediate_size: Option<usize>,
    /// Any other attribute transformers lets a layer override (`sliding_window`, `skip`…): refused
    /// by name rather than ignored.
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

impl TextConfig {
    /// The configuration a `config.json` describes.
    ///
    /// Gemma 4 (`gemma4`, `gemma4_text`) must state every field its math depends on
    /// ([`ConfigError::Missing`] names the one that is not); Gemma 3 falls back to its defaults.
    /// A Gemma 4's stop ids are those config.json names plus [`GEMMA4_STOP_IDS`];
    /// [`Self::apply_generation_config`] replaces them with generation_config.json's.
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        Self::parse(json, Origin::ConfigJson { nested: false })
    }

    fn parse(json: &str, origin: Origin) -> Result<Self, ConfigError> {
        let raw: RawConfig = serde_json::from_str(json)?;
        match raw.model_type.as_str() {
            "gemma4" => {
                let text = raw.text_config.ok_or_else(|| invalid("gemma4 config without text_config"))?;
                let mut text = *text;
                // The wrapper's ids win over text_config's.
                text.eos_token_id = raw.eos_token_id.or(text.eos_token_id);
                if raw.tie_word_embeddings == Some(false) {
                    text.tie_word_embeddings = Some(false);
                }
                let origin = match origin {
                    Origin::ConfigJson { .. } => Origin::ConfigJson { nested: true },
                    Origin::Gguf => Origin::Gguf,
                };
                Self::from_raw(Family::Gemma4, text, "model.language_model.", origin)
            }
            "gemma4_text" => Self::from_raw(Family::Gemma4, raw, "model.", origin),
            "gemma3_text" => Self::from_raw(Family::Gemma3, raw, "model.", origin),
            other => Err(ConfigError::UnsupportedModel(other.to_string())),
        }
    }

    fn from_raw(family: Family, raw: RawConfig, prefix: &str, origin: Origin) -> Result<Self, ConfigError> {
        if raw.attention_k_eq_v || raw.enable_moe_block {
            return Err(invalid("attention_k_eq_v and MoE blocks (Gemma 4 26B/31B) are not supported"));
        }
        if let Some(act) = raw.hidden_activation.as_deref().filter(|a| *a != "gelu_pytorch_tanh") {
            return Err(invalid(&format!("hidden_activation `{act}` is not supported (Gemma's is gelu_pytorch_tanh)")));
        }
        match &raw.use_bidirectional_attention {
            None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => {}
            Some(other) => {
                return Err(invalid(&format!(
                    "use_bidirectional_attention {other} is not supported (Hearth's attention is causal)"
                )));
            }
        }
        if raw.attention_bias {
            return Err(invalid("attention_bias is not supported (Gemma's projections have no bias)"));
        }
        if raw.tie_word_embeddings == Some(false) {
            return Err(invalid("tie_word_embeddings false (a separate lm_head) is not supported"));
        }
        let gemma4 = family == Family::Gemma4;
        let missing = |name: &str| origin.missing(family, name);
        let need = |v: Option<usize>, name: &str| v.ok_or_else(|| missing(name));
        // Required of Gemma 4 (no safe default); Gemma 3 keeps its fallback.
        let strict = |v: Option<usize>, name: &str, fallback: usize| match v {
            Some(v) => Ok(v),
            None if gemma4 => Err(missing(name)),
            None => Ok(fallback),
        };
        let hidden_size = need(raw.hidden_size, "hidden_size")?;
        let num_layers = need(raw.num_hidden_layers, "num_hidden_layers")?;
        let num_heads = need(raw.num_attention_heads, "num_attention_heads")?;
        if num_heads == 0 {
            return Err(invalid("num_attention_heads is 0"));
        }
        let num_kv_heads = strict(raw.num_key_value_heads, "num_key_value_heads", num_heads)?;
        let head_dim = strict(raw.head_dim, "head_dim", hidden_size / num_heads)?;
        let intermediate_size = need(raw.intermediate_size, "intermediate_size")?;
        let sliding_window = strict(raw.sliding_window, "sliding_window", usize::MAX)?;
        let num_kv_shared_layers = strict(raw.num_kv_shared_layers, "num_kv_shared_layers", 0)?;
        if gemma4 {
            if raw.rms_norm_eps.is_none() {
                return Err(missing("rms_norm_eps"));
            }
            // `null` (no softcap) is stated; only an absent field is missing.
            if raw.final_logit_softcapping.is_none() {
                return Err(missing("final_logit_softcapping"));
            }
            if raw.hidden_size_per_layer_input.is_none() {
                return Err(missing("hidden_size_per_layer_input"));
            }
            if raw.layer_types.is_none() {
                return Err(missing("layer_types"));
            }
        }

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

        let producers = kv_producers(&kinds, num_kv_shared_layers)?;
        let overrides = per_layer_overrides(&raw.per_layer_config, num_layers)?;
        let mut layers = Vec::with_capacity(num_layers);
        for (i, &kind) in kinds.iter().enumerate() {
            let overrides = overrides[i].clone();
            let layer_head_dim = match (overrides.head_dim, kind, raw.global_head_dim) {
                (Some(own), _, _) => own,
                (None, LayerType::Full, Some(global)) if gemma4 => global,
                // Gemma 4's full layers have their own (wider) heads: never the sliding ones'.
                (None, LayerType::Full, None) if gemma4 => return Err(missing("global_head_dim")),
                _ => head_dim,
            };
            let shared = producers[i].is_some();
            layers.push(LayerConfig {
                kind,
                head_dim: layer_head_dim,
                num_kv_heads: overrides.num_key_value_heads.unwrap_or(num_kv_heads),
                intermediate_size: overrides
                    .intermediate_size
                    .unwrap_or(intermediate_size * if raw.use_double_wide_mlp && shared { 2 } else { 1 }),
                rope: rope_for(family, &raw, kind, layer_head_dim, &missing)?,
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
        let vocab_size = need(raw.vocab_size, "vocab_size")?;
        if let (Some(_), Some(rows)) = (per_layer_input_size, raw.vocab_size_per_layer_input)
            && rows != vocab_size
        {
            return Err(invalid(&format!(
                "vocab_size_per_layer_input {rows} differs from vocab_size {vocab_size} (a per-layer table of another size is not supported)"
            )));
        }
        let named = raw.eos_token_id.as_ref().map(eos_ids).unwrap_or_default();
        let eos_token_ids = match (family, origin) {
            // config.json lists [1, 106]; the model also ends a tool call with <|tool_response>.
            (Family::Gemma4, Origin::ConfigJson { .. }) => {
                let mut ids = named;
                for id in GEMMA4_STOP_IDS {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                ids
            }
            // The GGUF reader has already looked the markers up in the file's vocabulary.
            _ if named.is_empty() => vec![1],
            _ => named,
        };
        Ok(TextConfig {
            family,
            tensor_prefix: prefix.to_string(),
            vocab_size,
            hidden_size,
            num_layers,
            num_heads,
            layers,
            sliding_window,
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6) as f32,
            norm_weight_offset,
            attention_scale,
            v_norm,
            final_logit_softcap: raw.final_logit_softcapping.flatten().map(|v| v as f32),
            attention_logit_softcap: raw.attn_logit_softcapping.map(|v| v as f32),
            embed_scale: (hidden_size as f32).sqrt(),
            per_layer_input_size,
            bos_token_id: raw.bos_token_id.unwrap_or(2),
            eos_token_ids,
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
        Self::parse(&gguf::config_json(file)?.to_string(), Origin::Gguf)
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

    /// `<bos>` and the stop tokens replaced by the tokenizer's ids where they differ (the
    /// tokenizer wins: [`token_ids`]); the differences. A stop id is replaced only
    /// where it is the published id of a stop piece the tokenizer has elsewhere (`<eos>` 1, and
    /// for Gemma 4 `<turn|>` 106 and `<|tool_response>` 50): ids the files name for other
    /// tokens stay.
    pub fn reconcile_token_ids(&mut self, tokenizer: &Tokenizer) -> Vec<TokenIdDisagreement> {
        let mut found: Vec<TokenIdDisagreement> =
            reconcile("bos_token_id", "<bos>", &mut self.bos_token_id, tokenizer).into_iter().collect();
        let stops: &[(&'static str, u32)] = match self.family {
            Family::Gemma4 => &[("<eos>", 1), ("<turn|>", 106), ("<|tool_response>", 50)],
            Family::Gemma3 => &[("<eos>", 1)],
        };
        for &(piece, published) in stops {
            let Some(theirs) = tokenizer.token_id(piece) else { continue };
            if theirs == published || self.eos_token_ids.contains(&theirs) {
                continue;
            }
            if let Some(id) = self.eos_token_ids.iter_mut().find(|id| **id == published) {
                found.extend(reconcile("eos_token_id", piece, id, tokenizer));
            }
        }
        found
    }
}

/// transformers 5.23's `per_layer_config`, one entry per layer: its keys are layer indices
/// (zero-padded, as 5.23 writes them, or not, as its reader accepts: it parses them as integers).
fn per_layer_overrides(
    config: &BTreeMap<String, LayerOverride>,
    num_layers: usize,
) -> Result<Vec<LayerOverride>, ConfigError> {
    let mut layers = vec![LayerOverride::default(); num_layers];
    for (key, overrides) in config {
        let index = key.parse::<usize>().ok().filter(|&i| i < num_layers).ok_or_else(|| {
            invalid(&format!("per_layer_config has key `{key}`, not a layer index below {num_layers}"))
        })?;
        if let Some(name) = overrides.other.keys().next() {
            return Err(invalid(&format!(
                "per_layer_config overrides `{name}` of layer {index}, which is not supported"
            )));
        }
        layers[index] = overrides.clone();
    }
    Ok(layers)
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

fn rope_for(
    family: Family,
    raw: &RawConfig,
    kind: LayerType,
    head_dim: usize,
    missing: &dyn Fn(&str) -> ConfigError,
) -> Result<Rope, ConfigError> {
    let key = match kind {
        LayerType::Sliding => "sliding_attention",
        LayerType::Full => "full_attention",
    };
    if family == Family::Gemma4 {
        return gemma4_rope(raw, key, head_dim, missing);
    }
    // transformers 5: `rope_parameters` per layer type (or one dict for every layer).
    if let Some(params) = &raw.rope_parameters {
        let params = params.get(key).unwrap_or(params);
        let theta = params.get("rope_theta").and_then(|v| v.as_f64()).ok_or_else(|| invalid("rope_theta missing"))?;
        let partial = params.get("partial_rotary_factor").and_then(|v| v.as_f64()).unwrap_or(1.0);
        let rope_type = params.get("rope_type").and_then(|v| v.as_str()).unwrap_or("default");
        return rope_of_type(rope_type, theta, partial, params, head_dim);
    }
    // Older Gemma 3 spelling: rope_theta for global layers, rope_local_base_freq for local ones.
    match kind {
        LayerType::Sliding => Ok(Rope::default(raw.rope_local_base_freq.unwrap_or(10_000.0), head_dim, 1.0)),
        LayerType::Full => {
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

/// Gemma 4: `rope_parameters.{sliding_attention,full_attention}`, each with its `rope_theta` and
/// `rope_type` (and `partial_rotary_factor` when proportional), all required: the two layer types
/// rotate differently and nothing else says how.
fn gemma4_rope(
    raw: &RawConfig,
    key: &str,
    head_dim: usize,
    missing: &dyn Fn(&str) -> ConfigError,
) -> Result<Rope, ConfigError> {
    let params = raw
        .rope_parameters
        .as_ref()
        .and_then(|p| p.get(key))
        .ok_or_else(|| missing(&format!("rope_parameters.{key}")))?;
    let number = |field: &str| {
        params.get(field).and_then(|v| v.as_f64()).ok_or_else(|| missing(&format!("rope_parameters.{key}.{field}")))
    };
    let theta = number("rope_theta")?;
    let rope_type = params
        .get("rope_type")
        .and_then(|v| v.as_str())
        .ok_or_else(|| missing(&format!("rope_parameters.{key}.rope_type")))?;
    let partial = match rope_type {
        "proportional" => number("partial_rotary_factor")?,
        _ => params.get("partial_rotary_factor").and_then(|v| v.as_f64()).unwrap_or(1.0),
    };
    rope_of_type(rope_type, theta, partial, params, head_dim)
}

fn rope_of_type(
    rope_type: &str,
    theta: f64,
    partial: f64,
    params: &serde_json::Value,
    head_dim: usize,
) -> Result<Rope, ConfigError> {
    match rope_type {
        "default" if partial == 1.0 => Ok(Rope::default(theta, head_dim, 1.0)),
        "linear" => {
            let factor = params.get("factor").and_then(|v| v.as_f64()).unwrap_or(1.0);
            Ok(Rope::default(theta, head_dim, factor))
        }
        "proportional" if partial > 0.0 && partial <= 1.0 => Ok(Rope::proportional(theta, head_dim, partial)),
        other => Err(invalid(&format!("rope_type `{other}` (partial {partial}) is not supported"))),
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
                "rms_norm_eps": 1e-6,
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
        assert_eq!(c.eos_token_ids, vec![1, 106, 50]);
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

    /// `e2b_like()` with the field at `path` (`text_config.rope_parameters.full_attention`) removed.
    fn e2b_without(path: &str) -> String {
        let mut config: serde_json::Value = serde_json::from_str(&e2b_like()).unwrap();
        let (parent, last) = path.rsplit_once('.').unwrap_or(("", path));
        let object = parent.split('.').filter(|k| !k.is_empty()).fold(&mut config, |v, key| &mut v[key]);
        assert!(object.as_object_mut().unwrap().remove(last).is_some(), "{path} is in the test config");
        config.to_string()
    }

    #[test]
    fn gemma4_fields_without_a_safe_default_are_required_by_name() {
        for field in [
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "global_head_dim",
            "layer_types",
            "sliding_window",
            "rms_norm_eps",
            "final_logit_softcapping",
            "hidden_size_per_layer_input",
            "num_kv_shared_layers",
            "rope_parameters",
            "rope_parameters.sliding_attention",
            "rope_parameters.full_attention",
            "rope_parameters.sliding_attention.rope_theta",
            "rope_parameters.sliding_attention.rope_type",
            "rope_parameters.full_attention.rope_theta",
            "rope_parameters.full_attention.rope_type",
            "rope_parameters.full_attention.partial_rotary_factor",
        ] {
            let err = TextConfig::from_json(&e2b_without(&format!("text_config.{field}"))).unwrap_err();
            // The first missing field is named: a removed parent names itself or its first child.
            let ConfigError::Missing { file, field: named, family } = &err else { panic!("{field}: {err}") };
            assert_eq!((*file, *family), ("config.json", "Gemma 4"), "{field}");
            assert!(named.starts_with(&format!("text_config.{field}")), "{field}: {err}");
            assert!(err.to_string().contains("which Gemma 4 needs"), "{err}");
        }
        let err = TextConfig::from_json(&e2b_without("text_config.layer_types")).unwrap_err().to_string();
        assert_eq!(err, "config.json lacks `text_config.layer_types`, which Gemma 4 needs");
    }

    #[test]
    fn gemma4_text_configs_name_fields_at_the_top_level() {
        let mut config: serde_json::Value = serde_json::from_str(&e2b_like()).unwrap();
        let mut text = config["text_config"].take();
        text.as_object_mut().unwrap().remove("sliding_window");
        let err = TextConfig::from_json(&text.to_string()).unwrap_err().to_string();
        assert_eq!(err, "config.json lacks `sliding_window`, which Gemma 4 needs");
    }

    #[test]
    fn a_per_layer_head_dim_stands_in_for_global_head_dim() {
        // transformers 5.23 writes the full layers' heads as per_layer_config overrides.
        let mut config: serde_json::Value = serde_json::from_str(&e2b_without("text_config.global_head_dim")).unwrap();
        let full: serde_json::Map<String, serde_json::Value> =
            (0..35).filter(|i| i % 5 == 4).map(|i| (i.to_string(), serde_json::json!({"head_dim": 512}))).collect();
        config["text_config"]["per_layer_config"] = full.clone().into();
        let c = TextConfig::from_json(&config.to_string()).unwrap();
        assert_eq!((c.layers[3].head_dim, c.layers[4].head_dim, c.layers[34].head_dim), (256, 512, 512));
        // One full layer without its own head dim, and no global_head_dim: refused.
        let mut partial = full;
        partial.remove("34");
        config["text_config"]["per_layer_config"] = partial.into();
        let err = TextConfig::from_json(&config.to_string()).unwrap_err().to_string();
        assert!(err.contains("`text_config.global_head_dim`"), "{err}");
    }

    #[test]
    fn per_layer_config_keys_are_zero_padded_as_transformers_writes_them() {
        // transformers 5.23's `Gemma4TextConfig(num_hidden_layers=35, global_head_dim=512, …)
        // .to_dict()`: no global_head_dim, and the full layers' heads under "04" … "34".
        let mut config: serde_json::Value = serde_json::from_str(&e2b_without("text_config.global_head_dim")).unwrap();
        let full: serde_json::Map<String, serde_json::Value> =
            (0..35).filter(|i| i % 5 == 4).map(|i| (format!("{i:02}"), serde_json::json!({"head_dim": 512}))).collect();
        assert!(full.contains_key("04") && full.contains_key("34"));
        config["text_config"]["per_layer_config"] = full.into();
        let c = TextConfig::from_json(&config.to_string()).unwrap();
        let dims: Vec<usize> = c.layers.iter().map(|l| l.head_dim).collect();
        assert!(dims.iter().enumerate().all(|(i, &d)| d == if i % 5 == 4 { 512 } else { 256 }), "{dims:?}");
        // A key that is no layer, and an override Hearth does not apply, are refused by name.
        config["text_config"]["per_layer_config"] = serde_json::json!({"35": {"head_dim": 512}});
        let err = TextConfig::from_json(&config.to_string()).unwrap_err().to_string();
        assert!(err.contains("key `35`"), "{err}");
        config["text_config"]["per_layer_config"] = serde_json::json!({"4": {"head_dim": 512, "sliding_window": 8}});
        let err = TextConfig::from_json(&config.to_string()).unwrap_err().to_string();
        assert!(err.contains("`sliding_window` of layer 4"), "{err}");
    }

    #[test]
    fn a_null_softcap_is_none_and_an_absent_one_is_missing() {
        // `Gemma4TextConfig`'s default is None, which transformers writes as null.
        let mut config: serde_json::Value = serde_json::from_str(&e2b_like()).unwrap();
        config["text_config"]["final_logit_softcapping"] = serde_json::Value::Null;
        assert_eq!(TextConfig::from_json(&config.to_string()).unwrap().final_logit_softcap, None);
        let err = TextConfig::from_json(&e2b_without("text_config.final_logit_softcapping")).unwrap_err();
        assert!(matches!(err, ConfigError::Missing { .. }), "{err}");
    }

    #[test]
    fn fields_hearth_does_not_compute_are_refused_by_name() {
        for (field, value, named) in [
            ("hidden_activation", serde_json::json!("silu"), "hidden_activation `silu`"),
            ("use_bidirectional_attention", serde_json::json!("vision"), "use_bidirectional_attention"),
            ("use_bidirectional_attention", serde_json::json!("all"), "use_bidirectional_attention"),
            ("attention_bias", serde_json::json!(true), "attention_bias"),
            ("tie_word_embeddings", serde_json::json!(false), "tie_word_embeddings"),
            ("vocab_size_per_layer_input", serde_json::json!(1024), "vocab_size_per_layer_input 1024"),
        ] {
            let mut config: serde_json::Value = serde_json::from_str(&e2b_like()).unwrap();
            config["text_config"][field] = value;
            let err = TextConfig::from_json(&config.to_string()).unwrap_err().to_string();
            assert!(err.contains(named), "{field}: {err}");
        }
        // What transformers writes for the published model passes.
        let mut config: serde_json::Value = serde_json::from_str(&e2b_like()).unwrap();
        for (field, value) in [
            ("hidden_activation", serde_json::json!("gelu_pytorch_tanh")),
            ("use_bidirectional_attention", serde_json::Value::Null),
            ("attention_bias", serde_json::json!(false)),
            ("tie_word_embeddings", serde_json::json!(true)),
            ("vocab_size_per_layer_input", serde_json::json!(262144)),
        ] {
            config["text_config"][field] = value;
        }
        TextConfig::from_json(&config.to_string()).unwrap();
    }

    #[test]
    fn the_tokenizers_bos_and_stop_ids_win_over_config_json() {
        // tiny-chat's tokenizer agrees with the published ids: nothing changes.
        let mut c = TextConfig::from_json(&e2b_like()).unwrap();
        assert!(c.reconcile_token_ids(&token_ids::tests::tiny_chat_tokenizer()).is_empty());
        assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (2, GEMMA4_STOP_IDS.to_vec()));
        // A vocabulary of another model: its <bos>, <eos>, <turn|> and <|tool_response> elsewhere.
        let other = token_ids::tests::tokenizer_of(&[
            ("<pad>", 0),
            ("<bos>", 5),
            ("<eos>", 6),
            ("<turn|>", 7),
            ("<|tool_response>", 8),
        ]);
        let mut config: serde_json::Value = serde_json::from_str(&e2b_like()).unwrap();
        // An id config.json names for a token that is not a stop piece (9) stays.
        config["eos_token_id"] = serde_json::json!([1, 106, 9]);
        let mut c = TextConfig::from_json(&config.to_string()).unwrap();
        assert_eq!(c.eos_token_ids, [1, 106, 9, 50]);
        let found = c.reconcile_token_ids(&other);
        assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (5, vec![6, 7, 9, 8]));
        let found: Vec<_> = found.iter().map(|d| (d.field, d.piece, d.config, d.tokenizer)).collect();
        assert_eq!(
            found,
            [
                ("bos_token_id", "<bos>", 2, 5),
                ("eos_token_id", "<eos>", 1, 6),
                ("eos_token_id", "<turn|>", 106, 7),
                ("eos_token_id", "<|tool_response>", 50, 8)
            ]
        );
        // A list that already holds the tokenizer's id keeps the rest as named.
        let mut c = TextConfig::from_json(&e2b_like()).unwrap();
        c.eos_token_ids = vec![1, 6];
        c.reconcile_token_ids(&other);
        assert_eq!(c.eos_token_ids, [1, 6]);
    }

    #[test]
    fn gemma3_keeps_its_defaults() {
        let c = TextConfig::from_json(
            r#"{"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640, "intermediate_size": 2048,
                "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256}"#,
        )
        .unwrap();
        assert_eq!((c.layers[4].kind, c.layers[5].kind), (LayerType::Sliding, LayerType::Full));
        assert_eq!((c.final_logit_softcap, c.sliding_window, c.per_layer_input_size), (None, usize::MAX, None));
        assert_eq!(c.eos_token_ids, vec![1], "Gemma 3's stop ids are only those config.json names");
        let err = TextConfig::from_json(r#"{"model_type": "gemma3_text", "vocab_size": 8}"#).unwrap_err();
        assert_eq!(err.to_string(), "config.json lacks `hidden_size`, which Gemma 3 needs");
    }

    #[test]
    fn gemma4_stop_ids_from_config_json_include_tool_response() {
        // config.json lists [1, 106]; Gemma 4 also stops after a tool call, on <|tool_response>.
        let c = TextConfig::from_json(&e2b_like()).unwrap();
        assert_eq!(c.eos_token_ids, GEMMA4_STOP_IDS);
        // None named at all: Gemma 4's own.
        let none = e2b_without("eos_token_id");
        assert_eq!(TextConfig::from_json(&none).unwrap().eos_token_ids, GEMMA4_STOP_IDS);
        // Ids config.json names come first and are kept.
        let mut own: serde_json::Value = serde_json::from_str(&none).unwrap();
        own["text_config"]["eos_token_id"] = serde_json::json!(7);
        assert_eq!(TextConfig::from_json(&own.to_string()).unwrap().eos_token_ids, vec![7, 1, 106, 50]);
    }

    #[test]
    fn generation_config_stop_ids_win() {
        let mut c = TextConfig::from_json(&e2b_like()).unwrap();
        c.apply_generation_config(r#"{"eos_token_id": [1, 106]}"#).unwrap();
        assert_eq!(c.eos_token_ids, vec![1, 106], "generation_config.json is the model's own list");
        c.apply_generation_config(r#"{"temperature": 1.0}"#).unwrap();
        assert_eq!(c.eos_token_ids, vec![1, 106], "a file that names none changes nothing");
        c.apply_generation_config(r#"{"eos_token_id": 1}"#).unwrap();
        assert_eq!(c.eos_token_ids, vec![1]);
        assert!(c.apply_generation_config("{").is_err());
    }

    #[test]
    fn unsupported_models_are_named() {
        let err = TextConfig::from_json(r#"{"model_type": "llama"}"#).unwrap_err();
        assert!(err.to_string().contains("llama"));
    }
}
