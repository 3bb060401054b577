//! The assistant's `config.json` (`gemma4_assistant`, as transformers 5.23 writes it) → a typed
//! configuration, and its fit to the main model it drafts for.
//!
//! ```text
//! {
//!   "model_type": "gemma4_assistant",
//!   "backbone_hidden_size": 1536,        the main model's width
//!   "use_ordered_embeddings": true,      the centroid-masked head (else the tied one)
//!   "num_centroids": 2048, "centroid_intermediate_top_k": 32,
//!   "text_config": { "model_type": "gemma4_text", … }   the drafter's own decoder
//! }
//! ```

use serde::Deserialize;

use crate::config::{ConfigError, Family, LayerType, TextConfig};
use crate::error::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum DrafterError {
    #[error("the drafter's config.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "config.json's model_type is `{0}`, not `gemma4_assistant`: this is not a Gemma 4 drafter (its repository name ends in -assistant)"
    )]
    NotAnAssistant(String),
    #[error("the drafter's text_config: {0}")]
    TextConfig(#[from] ConfigError),
    #[error("the drafter's config.json is inconsistent: {0}")]
    Invalid(String),
    #[error(
        "this drafter was trained beside a main model {drafter} wide, but the loaded model is {main} wide: use the assistant published with the model (gemma-4-E2B-it-assistant for gemma-4-E2B-it, gemma-4-E4B-it-assistant for gemma-4-E4B-it)"
    )]
    BackboneWidth { drafter: usize, main: usize },
    #[error(
        "this drafter's vocabulary has {drafter} tokens, the loaded model's {main}: use the assistant published with the model (gemma-4-E2B-it-assistant for gemma-4-E2B-it, gemma-4-E4B-it-assistant for gemma-4-E4B-it)"
    )]
    Vocabulary { drafter: usize, main: usize },
    #[error("a drafter runs beside a Gemma 4 model; the loaded model is a Gemma 3")]
    NotGemma4,
    #[error(
        "the drafter's {kind} layers read {drafter_heads} key/value heads of {drafter_dim}, but the loaded model's last {kind} layer with keys of its own has {main_heads} of {main_dim}: use the assistant published with the model"
    )]
    KvShape { kind: &'static str, drafter_heads: usize, drafter_dim: usize, main_heads: usize, main_dim: usize },
    #[error(
        "the drafter has {kind} layers but the loaded model has no {kind} layer with keys of its own to read: use the assistant published with the model"
    )]
    NoKvLayer { kind: &'static str },
    #[error("masked_embedding.token_ordering is not an ordering of the vocabulary ({0}): download the drafter again")]
    TokenOrdering(String),
    #[error("the main model has not seen a token yet: prefill the prompt before drafting")]
    EmptyContext,
    #[error(
        "the main model's cache no longer holds positions {first}..{end}, which the drafter reads: decode this token without drafting"
    )]
    WindowNotHeld { first: usize, end: usize },
    #[error(
        "a draft step's state is {actual:?}, not [1, {width}]: pass the main model's hidden state (a row of Gemma::forward's hidden states) or the last step's"
    )]
    StateShape { width: usize, actual: Vec<usize> },
    #[error("the cache given to the drafter is not the loaded model's: layer {0} caches nothing")]
    CacheMismatch(usize),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("cannot read {path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
}

impl From<hearth_weights::WeightsError> for DrafterError {
    fn from(err: hearth_weights::WeightsError) -> Self {
        DrafterError::Model(err.into())
    }
}

/// How the drafter turns its last hidden state into logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrafterHead {
    /// `x · Eᵀ` over the whole vocabulary, `E` the drafter's own token embedding.
    Tied,
    /// The vocabulary in `centroids` clusters of equal size (`masked_embedding.token_ordering`
    /// lists each cluster's tokens): only the `top_k` clusters nearest to `x` are scored, every
    /// other token gets the lowest score minus one.
    Centroids { centroids: usize, top_k: usize },
}

#[derive(Debug, Clone)]
pub struct DrafterConfig {
    /// The drafter's decoder: its layers, heads, window and RoPE (no layer has K/V of its own).
    pub text: TextConfig,
    /// The main model's width: the input is its token embedding joined with its hidden state.
    pub backbone_hidden_size: usize,
    pub head: DrafterHead,
    /// Whether the head is the token embedding (`model.embed_tokens`) rather than `lm_head`.
    pub tied_embeddings: bool,
}

/// `config.json` as transformers writes it; absent fields take transformers 5.23's defaults.
#[derive(Deserialize)]
struct RawAssistant {
    model_type: String,
    text_config: Option<serde_json::Value>,
    #[serde(default = "default_backbone")]
    backbone_hidden_size: usize,
    #[serde(default)]
    use_ordered_embeddings: bool,
    #[serde(default = "default_centroids")]
    num_centroids: usize,
    #[serde(default = "default_top_k")]
    centroid_intermediate_top_k: usize,
    #[serde(default = "default_tied")]
    tie_word_embeddings: bool,
}

fn default_backbone() -> usize {
    1536
}
fn default_centroids() -> usize {
    2048
}
fn default_top_k() -> usize {
    32
}
fn default_tied() -> bool {
    true
}

impl DrafterConfig {
    pub fn from_json(json: &str) -> Result<Self, DrafterError> {
        let raw: RawAssistant = serde_json::from_str(json)?;
        if raw.model_type != "gemma4_assistant" {
            return Err(DrafterError::NotAnAssistant(raw.model_type));
        }
        let mut text = raw.text_config.ok_or_else(|| invalid("no text_config"))?;
        let fields = text.as_object_mut().ok_or_else(|| invalid("text_config is not an object"))?;
        if fields.get("model_type").and_then(|v| v.as_str()) != Some("gemma4_text") {
            return Err(invalid("text_config's model_type is not gemma4_text"));
        }
        if fields.get("hidden_size_per_layer_input").and_then(|v| v.as_u64()).is_some_and(|p| p != 0) {
            return Err(invalid(
                "the drafter's layers take no per-layer inputs (hidden_size_per_layer_input must be 0)",
            ));
        }
        // Every layer reads the main model's K/V (transformers marks them all KV-shared); within
        // the drafter no layer shares with another. Its head applies no softcap, which
        // `TextConfig` requires Gemma 4 to state.
        fields.insert("num_kv_shared_layers".into(), 0.into());
        // The head is the assistant's own matter (`tie_word_embeddings` at its top level).
        fields.remove("tie_word_embeddings");
        fields.insert("final_logit_softcapping".into(), 0.0.into());
        let mut text = TextConfig::from_json(&text.to_string())?;
        text.final_logit_softcap = None;
        if text.hidden_size == 0 || raw.backbone_hidden_size == 0 {
            return Err(invalid("a width of 0"));
        }

        let head = if raw.use_ordered_embeddings {
            let (centroids, top_k) = (raw.num_centroids, raw.centroid_intermediate_top_k);
            if centroids == 0 || text.vocab_size % centroids != 0 {
                return Err(invalid(&format!(
                    "{centroids} centroids do not split a vocabulary of {}",
                    text.vocab_size
                )));
            }
            if top_k == 0 || top_k > centroids {
                return Err(invalid(&format!("top {top_k} of {centroids} centroids")));
            }
            DrafterHead::Centroids { centroids, top_k }
        } else {
            DrafterHead::Tied
        };
        Ok(DrafterConfig {
            text,
            backbone_hidden_size: raw.backbone_hidden_size,
            head,
            tied_embeddings: raw.tie_word_embeddings,
        })
    }

    /// The main model's layers whose keys and values this drafter reads (index:
    /// `LayerType::index`): the last layer of each type that computes its own, as transformers'
    /// `kv_sharing_modes` marks them `store`. Refuses a main model the drafter was not made for.
    pub fn main_kv_layers(&self, main: &TextConfig) -> Result<[Option<usize>; 2], DrafterError> {
        if main.family != Family::Gemma4 {
            return Err(DrafterError::NotGemma4);
        }
        if self.backbone_hidden_size != main.hidden_size {
            return Err(DrafterError::BackboneWidth { drafter: self.backbone_hidden_size, main: main.hidden_size });
        }
        if self.text.vocab_size != main.vocab_size {
            return Err(DrafterError::Vocabulary { drafter: self.text.vocab_size, main: main.vocab_size });
        }
        let mut layers = [None, None];
        for kind in [LayerType::Sliding, LayerType::Full] {
            let name = kind_name(kind);
            let Some(own) = self.text.layers.iter().find(|l| l.kind == kind) else { continue };
            let (index, theirs) = main
                .layers
                .iter()
                .enumerate()
                .rev()
                .find(|(_, l)| l.kind == kind && l.kv_producer.is_none())
                .ok_or(DrafterError::NoKvLayer { kind: name })?;
            for own in self.text.layers.iter().filter(|l| l.kind == kind) {
                if (own.num_kv_heads, own.head_dim) != (theirs.num_kv_heads, theirs.head_dim) {
                    return Err(DrafterError::KvShape {
                        kind: name,
                        drafter_heads: own.num_kv_heads,
                        drafter_dim: own.head_dim,
                        main_heads: theirs.num_kv_heads,
                        main_dim: theirs.head_dim,
                    });
                }
            }
            debug_assert_eq!(own.kind, kind);
            layers[kind.index()] = Some(index);
        }
        Ok(layers)
    }
}

/// A layer type as the errors name it.
pub(super) fn kind_name(kind: LayerType) -> &'static str {
    match kind {
        LayerType::Sliding => "sliding-attention",
        LayerType::Full => "full-attention",
    }
}

fn invalid(message: &str) -> DrafterError {
    DrafterError::Invalid(message.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name).join("config.json");
        std::fs::read_to_string(path).unwrap()
    }

    fn main_config() -> TextConfig {
        TextConfig::from_json(&fixture("gemma4-text")).unwrap()
    }

    #[test]
    fn reads_the_assistant_config() {
        let tied = DrafterConfig::from_json(&fixture("gemma4-drafter/tied")).unwrap();
        assert_eq!(tied.head, DrafterHead::Tied);
        assert_eq!(tied.backbone_hidden_size, 32);
        assert_eq!(tied.text.hidden_size, 24);
        assert_eq!(tied.text.sliding_window, 6);
        assert_eq!(tied.text.final_logit_softcap, None);
        assert!(tied.text.layers.iter().all(|l| l.kv_producer.is_none()));
        let kinds: Vec<LayerType> = tied.text.layers.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, [LayerType::Sliding, LayerType::Sliding, LayerType::Sliding, LayerType::Full]);
        let centroids = DrafterConfig::from_json(&fixture("gemma4-drafter/centroids")).unwrap();
        assert_eq!(centroids.head, DrafterHead::Centroids { centroids: 8, top_k: 2 });
        // gemma4-text: S S F S S F, the last two reuse layers 3 and 2.
        assert_eq!(tied.main_kv_layers(&main_config()).unwrap(), [Some(3), Some(2)]);
    }

    #[test]
    fn refuses_a_drafter_made_for_another_model() {
        let drafter = DrafterConfig::from_json(&fixture("gemma4-drafter/tied")).unwrap();
        let mut wider = main_config();
        wider.hidden_size = 48;
        let err = drafter.main_kv_layers(&wider).unwrap_err();
        assert!(matches!(err, DrafterError::BackboneWidth { drafter: 32, main: 48 }), "{err}");
        assert!(err.to_string().contains("gemma-4-E2B-it-assistant"), "{err}");

        let mut other_vocab = main_config();
        other_vocab.vocab_size = 256;
        let err = drafter.main_kv_layers(&other_vocab).unwrap_err();
        assert!(matches!(err, DrafterError::Vocabulary { drafter: 128, main: 256 }), "{err}");

        let mut other_heads = main_config();
        other_heads.layers[2].head_dim = 32;
        let err = drafter.main_kv_layers(&other_heads).unwrap_err();
        assert!(matches!(err, DrafterError::KvShape { kind: "full-attention", main_dim: 32, .. }), "{err}");

        let not_assistant = fixture("gemma4-text");
        let err = DrafterConfig::from_json(&not_assistant).unwrap_err();
        assert!(matches!(err, DrafterError::NotAnAssistant(ref t) if t == "gemma4_text"), "{err}");
    }
}
