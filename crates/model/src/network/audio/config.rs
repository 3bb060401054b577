//! The audio tower's configuration: transformers 5.23's `Gemma4AudioConfig` (its defaults are
//! E2B's and E4B's tower), with the text width the embedder projects to and the prompt's audio
//! tokens.

use hearth_weights::{Checkpoint, MetadataValue};
use serde::Deserialize;

use crate::config::ConfigError;
use crate::config::token_ids::TokenIdDisagreement;
use crate::media::{MediaMarkers, Medium};

/// The audio tower and its embedder, as config.json describes them.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioConfig {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    /// The two subsampling convolutions' output channels.
    pub subsampling_channels: [usize; 2],
    pub conv_kernel_size: usize,
    /// The feed-forward blocks' residual weight.
    pub residual_weight: f32,
    /// Attention runs over blocks of this many frames, each seeing `context_left - 1` frames back
    /// and `context_right` ahead.
    pub chunk_size: usize,
    pub context_left: usize,
    pub context_right: usize,
    pub logit_cap: f32,
    pub invalid_logit: f32,
    pub clipped_linears: bool,
    pub rms_norm_eps: f32,
    pub gradient_clipping: f32,
    /// The tower's output width (the embedder's input).
    pub output_dims: usize,
    /// The text model's width (the embedder's output).
    pub text_hidden_size: usize,
    /// Mel bins a feature frame.
    pub feature_size: usize,
    /// The placeholder each soft token replaces in the prompt, and the tokens around a clip
    /// (config.json's `audio_token_id`, `boa_token_id`, `eoa_token_index`).
    pub tokens: MediaMarkers,
}

/// The top level of config.json, by `Gemma4Config`'s field names in transformers 5.23. An id that
/// is absent (or `null`) is the published model's.
#[derive(Deserialize)]
struct RawTop {
    audio_config: Option<RawAudio>,
    text_config: Option<RawText>,
    audio_token_id: Option<u32>,
    boa_token_id: Option<u32>,
    /// `Gemma4Config`'s name for the end-of-audio id (it has no `eoa_token_id`).
    eoa_token_index: Option<u32>,
    /// The same id as files saved by transformers 5.5 also carry it, beside `eoa_token_index`
    /// (e.g. OBLITERATUS/gemma-4-E4B-it-OBLITERATED and ManniX-ITA/gemma-4-A4B-98e-v6-coder-it,
    /// re-saves of Google's gemma-4-E4B-it and gemma-4-26B-A4B-it): read only when
    /// `eoa_token_index` is absent, as transformers 5.23 ignores it.
    eoa_token_id: Option<u32>,
}

impl RawTop {
    fn tokens(&self) -> MediaMarkers {
        MediaMarkers {
            medium: Medium::Clip,
            placeholder: self.audio_token_id.unwrap_or(defaults::AUDIO_TOKEN),
            open: self.boa_token_id.unwrap_or(defaults::BOA_TOKEN),
            close: self.eoa_token_index.or(self.eoa_token_id).unwrap_or(defaults::EOA_TOKEN),
        }
    }
}

#[derive(Deserialize)]
struct RawText {
    hidden_size: usize,
}

#[derive(Deserialize)]
#[serde(default)]
struct RawAudio {
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    hidden_act: String,
    subsampling_conv_channels: Vec<usize>,
    conv_kernel_size: usize,
    residual_weight: f32,
    attention_chunk_size: usize,
    attention_context_left: usize,
    attention_context_right: usize,
    attention_logit_cap: f32,
    attention_invalid_logits_value: f32,
    use_clipped_linears: bool,
    rms_norm_eps: f32,
    gradient_clipping: f32,
    output_proj_dims: usize,
}

impl Default for RawAudio {
    fn default() -> Self {
        RawAudio {
            hidden_size: 1024,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            hidden_act: "silu".into(),
            subsampling_conv_channels: vec![128, 32],
            conv_kernel_size: 5,
            residual_weight: 0.5,
            attention_chunk_size: 12,
            attention_context_left: 13,
            attention_context_right: 0,
            attention_logit_cap: 50.0,
            attention_invalid_logits_value: -1.0e9,
            use_clipped_linears: true,
            rms_norm_eps: 1e-6,
            gradient_clipping: 1e10,
            output_proj_dims: 1536,
        }
    }
}

/// The published model's ids (`Gemma4Config`'s defaults).
mod defaults {
    pub const AUDIO_TOKEN: u32 = 258_881;
    pub const BOA_TOKEN: u32 = 256_000;
    pub const EOA_TOKEN: u32 = 258_883;
}

impl AudioConfig {
    /// The audio tokens replaced by the tokenizer's for the same pieces where they differ (the
    /// tokenizer wins: [`crate::config::token_ids`]); the differences.
    pub fn reconcile_tokens(&mut self, tokenizer: &crate::tokenizer::Tokenizer) -> Vec<TokenIdDisagreement> {
        self.tokens.reconcile(["audio_token_id", "boa_token_id", "eoa_token_index"], tokenizer)
    }

    /// The tower config.json describes (`None`: the model hears nothing).
    pub fn from_json(json: &str) -> Result<Option<Self>, ConfigError> {
        let top: RawTop = serde_json::from_str(json)?;
        let tokens = top.tokens();
        let Some(a) = top.audio_config else { return Ok(None) };
        let invalid = |why: String| ConfigError::Invalid(format!("audio_config: {why}"));
        let text = top.text_config.ok_or_else(|| invalid("there is no text_config".into()))?;
        let unsupported = |what: String| Err(invalid(format!("{what} is not supported")));
        if a.hidden_act != "silu" {
            return unsupported(format!("activation {}", a.hidden_act));
        }
        let [c0, c1] = a.subsampling_conv_channels[..] else {
            return unsupported(format!("{} subsampling convolutions", a.subsampling_conv_channels.len()));
        };
        if a.num_attention_heads == 0 || !a.hidden_size.is_multiple_of(a.num_attention_heads) {
            return unsupported(format!("{} heads over width {}", a.num_attention_heads, a.hidden_size));
        }
        if a.attention_context_left == 0 || a.attention_chunk_size == 0 {
            return unsupported("attention context".into());
        }
        Ok(Some(AudioConfig {
            hidden_size: a.hidden_size,
            num_layers: a.num_hidden_layers,
            num_heads: a.num_attention_heads,
            subsampling_channels: [c0, c1],
            conv_kernel_size: a.conv_kernel_size,
            residual_weight: a.residual_weight,
            chunk_size: a.attention_chunk_size,
            context_left: a.attention_context_left,
            context_right: a.attention_context_right,
            logit_cap: a.attention_logit_cap,
            invalid_logit: a.attention_invalid_logits_value,
            clipped_linears: a.use_clipped_linears,
            rms_norm_eps: a.rms_norm_eps,
            gradient_clipping: a.gradient_clipping,
            output_dims: a.output_proj_dims,
            text_hidden_size: text.hidden_size,
            feature_size: 128,
            tokens,
        }))
    }

    /// The audio tower of a llama.cpp projector file (`mmproj`, projector type `gemma4a`): its
    /// sizes from the metadata and the tensors' shapes; what the file does not record (the
    /// attention's chunking and context, the logit cap, the residual weight) is Gemma 4's, as
    /// llama.cpp assumes too. `None` when the file holds no audio tower.
    pub fn from_mmproj(
        checkpoint: &Checkpoint,
        text_hidden_size: usize,
        tokens: MediaMarkers,
    ) -> Result<Option<Self>, ConfigError> {
        let invalid = |why: String| ConfigError::InvalidGguf(format!("projector's audio tower: {why}"));
        let gguf = checkpoint.gguf().ok_or_else(|| invalid("not a GGUF file".into()))?;
        let Some(kind) = gguf.get("clip.audio.projector_type").and_then(MetadataValue::as_str) else {
            return Ok(None);
        };
        if kind != "gemma4a" {
            return Err(invalid(format!("projector type `{kind}` is not Gemma 4's audio tower (gemma4a)")));
        }
        let number = |key: &str| {
            gguf.get(key).and_then(MetadataValue::as_usize).ok_or_else(|| invalid(format!("`{key}` is missing")))
        };
        let shape = |name: &str| checkpoint.shape(name).ok_or_else(|| invalid(format!("tensor `{name}` is missing")));
        let hidden_size = number("clip.audio.embedding_length")?;
        let num_heads = number("clip.audio.attention.head_count")?;
        let (first, second) = (shape("a.conv1d.0.weight")?, shape("a.conv1d.1.weight")?);
        let kernel = shape("a.blk.0.conv_dw.weight")?;
        let output = shape("a.pre_encode.out.weight")?;
        let embedder = shape("mm.a.input_projection.weight")?;
        let fits = num_heads > 0
            && hidden_size.is_multiple_of(num_heads)
            && first.len() == 4
            && second.len() == 4
            && kernel.len() == 2
            && output.len() == 2
            && embedder.len() == 2;
        if !fits {
            return Err(invalid(format!(
                "{num_heads} heads over width {hidden_size}, convolutions {first:?} and {second:?}, kernel {kernel:?}"
            )));
        }
        if embedder[0] != text_hidden_size {
            return Err(invalid(format!(
                "it projects to width {}, the model's is {text_hidden_size}: it belongs to another model",
                embedder[0]
            )));
        }
        let gemma = RawAudio::default();
        let eps = gguf.get("clip.audio.attention.layer_norm_epsilon").and_then(MetadataValue::as_f64).unwrap_or(1e-6);
        Ok(Some(AudioConfig {
            hidden_size,
            num_layers: number("clip.audio.block_count")?,
            num_heads,
            subsampling_channels: [first[0], second[0]],
            conv_kernel_size: kernel[1],
            residual_weight: gemma.residual_weight,
            chunk_size: gemma.attention_chunk_size,
            context_left: gemma.attention_context_left,
            context_right: gemma.attention_context_right,
            logit_cap: gemma.attention_logit_cap,
            invalid_logit: gemma.attention_invalid_logits_value,
            clipped_linears: checkpoint.contains("a.blk.0.attn_q.input_min"),
            rms_norm_eps: eps as f32,
            gradient_clipping: gemma.gradient_clipping,
            output_dims: output[0],
            text_hidden_size,
            feature_size: number("clip.audio.num_mel_bins")?,
            tokens,
        }))
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// Soft tokens for `frames` feature frames of which the first `valid` hold sound: the valid
    /// frames that survive the two stride-2 subsamplings (the processor's count).
    pub fn soft_tokens(mask: &[bool]) -> usize {
        let mut mask = mask.to_vec();
        for _ in 0..2 {
            mask = mask.iter().step_by(2).copied().collect();
        }
        mask.iter().filter(|&&m| m).count()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::token_ids::tests::tiny_chat_tokenizer;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)).unwrap()
    }

    fn clip(placeholder: u32, open: u32, close: u32) -> MediaMarkers {
        MediaMarkers { medium: Medium::Clip, placeholder, open, close }
    }

    fn tokens(json: &str) -> MediaMarkers {
        AudioConfig::from_json(json).unwrap().unwrap().tokens
    }

    #[test]
    fn eoa_token_index_is_read_as_transformers_saves_it() {
        // Tiny models saved by transformers 5.23 with ids other than the published model's
        // (crates/model/fixtures/gen_config_json.py).
        let audio = fixture("gemma4-audio/config.json");
        assert!(audio.contains(r#""eoa_token_index": 125"#) && !audio.contains("eoa_token_id"));
        assert_eq!(tokens(&audio), clip(124, 123, 125));
        assert_eq!(tokens(&fixture("gemma4-audio-mlx/config.json")), clip(124, 123, 125));
        assert_eq!(tokens(&fixture("tiny-chat/config.json")), clip(63, 64, 65));
    }

    #[test]
    fn absent_ids_are_the_published_models() {
        let bare = r#"{"text_config": {"hidden_size": 8}, "audio_config": {}}"#;
        assert_eq!(tokens(bare), clip(258_881, 256_000, 258_883));
        let nulls = r#"{"text_config": {"hidden_size": 8}, "audio_config": {}, "eoa_token_index": null}"#;
        assert_eq!(tokens(nulls).close, 258_883);
    }

    #[test]
    fn eoa_token_id_is_read_only_where_eoa_token_index_is_absent() {
        // Files saved by transformers 5.5 carry both; 5.23 reads eoa_token_index.
        let both = r#"{"text_config": {"hidden_size": 8}, "audio_config": {},
            "eoa_token_id": 7, "eoa_token_index": 9}"#;
        assert_eq!(tokens(both).close, 9);
        let older = r#"{"text_config": {"hidden_size": 8}, "audio_config": {}, "eoa_token_id": 7}"#;
        assert_eq!(tokens(older).close, 7);
    }

    #[test]
    fn the_tokenizers_audio_ids_win_over_config_json() {
        // gemma4-audio's config.json (123, 124, 125) beside tiny-chat's tokenizer (63, 64, 65).
        let mut config = AudioConfig::from_json(&fixture("gemma4-audio/config.json")).unwrap().unwrap();
        let found = config.reconcile_tokens(&tiny_chat_tokenizer());
        assert_eq!(config.tokens, clip(63, 64, 65));
        let fields: Vec<_> = found.iter().map(|d| (d.field, d.piece, d.config, d.tokenizer)).collect();
        assert_eq!(
            fields,
            [
                ("audio_token_id", "<|audio|>", 124, 63),
                ("boa_token_id", "<|audio>", 123, 64),
                ("eoa_token_index", "<audio|>", 125, 65)
            ]
        );
        // Where they agree nothing changes.
        let mut agreeing = AudioConfig::from_json(&fixture("tiny-chat/config.json")).unwrap().unwrap();
        assert!(agreeing.reconcile_tokens(&tiny_chat_tokenizer()).is_empty());
        assert_eq!(agreeing.tokens, clip(63, 64, 65));
    }
}
