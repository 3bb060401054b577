//! A `config.json` equivalent of a GGUF file's metadata: llama.cpp's `{arch}.*` keys, as its
//! converter (`convert_hf_to_gguf.py`) writes them, read back into the fields transformers uses,
//! so that one parser ([`TextConfig::from_json`](super::TextConfig::from_json)) serves both.

use hearth_weights::{GgufFile, MetadataValue};
use serde_json::{Value, json};

use super::{ConfigError, GEMMA4_STOP_IDS, GEMMA4_STOP_MARKERS};

/// The `config.json` a GGUF file's metadata describes (`gemma3` or `gemma4`).
pub(super) fn config_json(file: &GgufFile) -> Result<Value, ConfigError> {
    match file.architecture() {
        Some("gemma3") => gemma3(&Metadata { file, arch: "gemma3" }),
        Some("gemma4") => gemma4(&Metadata { file, arch: "gemma4" }),
        other => Err(ConfigError::UnsupportedGguf(other.unwrap_or("(none)").to_string())),
    }
}

/// Gemma 3 (see [`TextConfig::from_gguf`](super::TextConfig::from_gguf) for what is taken from
/// where). A key that is missing falls back to Gemma 3 270M's value.
fn gemma3(meta: &Metadata) -> Result<Value, ConfigError> {
    let hidden = meta.count("embedding_length", Some(640))?;
    let layers = meta.count("block_count", Some(18))?;
    let heads = meta.count("attention.head_count", Some(4))?;
    let head_dim = meta.count("attention.key_length", Some(256))?;
    if meta.count("attention.value_length", Some(head_dim))? != head_dim {
        return Err(meta.bad("attention.value_length", "key_length (they differ)"));
    }
    let layer_types = meta.layer_types(layers, Some(6))?;
    // llama.cpp (`llm_load_hparams`, LLM_ARCH_GEMMA3): the 27B model scales queries by
    // (hidden / heads)^-½, every other size by key_length^-½.
    let query_pre_attn_scalar = if layers == 62 { hidden as f64 / heads as f64 } else { head_dim as f64 };

    let mut full_rope = json!({"rope_type": "default", "rope_theta": meta.number("rope.freq_base")?.unwrap_or(1e6)});
    match meta.value("rope.scaling.type").and_then(MetadataValue::as_str) {
        None | Some("none") => {}
        Some("linear") => {
            full_rope["rope_type"] = json!("linear");
            full_rope["factor"] = json!(meta.number("rope.scaling.factor")?.unwrap_or(1.0));
        }
        Some(other) => return Err(ConfigError::InvalidGguf(format!("RoPE scaling `{other}` is not supported"))),
    }
    let sliding_rope = json!({"rope_type": "default", "rope_theta": meta.number("rope.freq_base_swa")?.unwrap_or(1e4)});
    Ok(json!({
        "model_type": "gemma3_text",
        "vocab_size": meta.vocab_size()?,
        "hidden_size": hidden,
        "intermediate_size": meta.count("feed_forward_length", Some(2048))?,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": meta.count("attention.head_count_kv", Some(1))?,
        "head_dim": head_dim,
        "layer_types": layer_types,
        "sliding_window": meta.count("attention.sliding_window", Some(512))?,
        "rms_norm_eps": meta.number("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-6),
        "rope_parameters": {"sliding_attention": sliding_rope, "full_attention": full_rope},
        "query_pre_attn_scalar": query_pre_attn_scalar,
        "final_logit_softcapping": meta.number("final_logit_softcapping")?,
        "attn_logit_softcapping": meta.number("attn_logit_softcapping")?,
        "bos_token_id": meta.token_id("bos_token_id").unwrap_or(2),
        "eos_token_id": meta.stop_ids(&["<end_of_turn>"]),
    }))
}

/// Gemma 4 (E2B, E4B): llama.cpp's converter (`Gemma4Model.set_gguf_parameters`) writes
/// - the shape: `embedding_length`, `block_count`, `attention.head_count`;
/// - per-layer arrays where layers differ: `feed_forward_length` (doubled on KV-shared layers
///   when `use_double_wide_mlp`), `attention.head_count_kv`;
/// - head dims `attention.key_length` (full layers, HF's `global_head_dim`) and
///   `attention.key_length_swa` (sliding layers, HF's `head_dim`);
/// - `attention.sliding_window_pattern` (one bool per layer, true = sliding),
///   `attention.sliding_window`, `attention.shared_kv_layers`,
///   `embedding_length_per_layer_input` (0 = no per-layer embeddings);
/// - RoPE bases `rope.freq_base` (full) and `rope.freq_base_swa` (sliding), every pair rotated
///   (`rope.dimension_count` = key_length). The full layers' proportional RoPE is not in the
///   metadata: it is the `rope_freqs` tensor, per-pair frequency divisors (1 where a pair rotates,
///   1e30 where it does not), which the loader applies ([`TextConfig::apply_rope_freq_factors`]).
///
/// These keys are required, and so are `attention.layer_norm_rms_epsilon`,
/// `final_logit_softcapping` and both RoPE bases: a Gemma 4 has no size to fall back to, and
/// Gemma 3's values would give fluent wrong text ([`ConfigError::Missing`] names the key).
/// Queries are not scaled (Gemma 4's scale is 1), norms are stored as `w`.
///
/// Stop ids: `tokenizer.ggml.eos_token_id` (else 1) and `eot_token_id`, then `<turn|>` and
/// `<|tool_response>` where the vocabulary has them (Gemma 4's generation_config.json stops on
/// all three); [`GEMMA4_STOP_IDS`] when the metadata names none of them.
///
/// [`TextConfig::apply_rope_freq_factors`]: super::TextConfig::apply_rope_freq_factors
fn gemma4(meta: &Metadata) -> Result<Value, ConfigError> {
    if meta.value("expert_count").is_some() {
        return Err(ConfigError::InvalidGguf(
            "this is a mixture-of-experts Gemma 4 (26B A4B), which Hearth does not run; use E2B or E4B".into(),
        ));
    }
    let layers = meta.count("block_count", None)?;
    let full_dim = meta.count("attention.key_length", None)?;
    let sliding_dim = meta.count("attention.key_length_swa", None)?;
    if meta.count("attention.value_length", Some(full_dim))? != full_dim {
        return Err(meta.bad("attention.value_length", "key_length (they differ)"));
    }
    if meta.count("attention.value_length_swa", Some(sliding_dim))? != sliding_dim {
        return Err(meta.bad("attention.value_length_swa", "key_length_swa (they differ)"));
    }
    // Partial rotation reaches full layers through `rope_freqs`; none is defined for sliding ones.
    if meta.count("rope.dimension_count", Some(full_dim))? != full_dim {
        return Err(meta.bad("rope.dimension_count", "key_length (Hearth rotates full layers via rope_freqs)"));
    }
    if meta.count("rope.dimension_count_swa", Some(sliding_dim))? != sliding_dim {
        return Err(meta.bad("rope.dimension_count_swa", "key_length_swa (partial RoPE on sliding layers)"));
    }
    let kv_heads = meta.counts_per_layer("attention.head_count_kv", layers)?;
    let intermediate = meta.counts_per_layer("feed_forward_length", layers)?;
    // Per-layer values go in per-layer overrides (the converter has already doubled the MLPs).
    let per_layer: serde_json::Map<String, Value> = (0..layers)
        .map(|i| (i.to_string(), json!({"num_key_value_heads": kv_heads[i], "intermediate_size": intermediate[i]})))
        .collect();
    let per_layer_input = match meta.number("embedding_length_per_layer_input")? {
        None => return Err(meta.missing("embedding_length_per_layer_input")),
        Some(0.0) => None,
        Some(_) => Some(meta.count("embedding_length_per_layer_input", None)?),
    };
    let shared = match meta.number("attention.shared_kv_layers")? {
        Some(0.0) => 0,
        _ => meta.count("attention.shared_kv_layers", None)?,
    };
    Ok(json!({
        "model_type": "gemma4_text",
        "vocab_size": meta.vocab_size()?,
        "hidden_size": meta.count("embedding_length", None)?,
        "intermediate_size": intermediate[0],
        "num_hidden_layers": layers,
        "num_attention_heads": meta.count("attention.head_count", None)?,
        "num_key_value_heads": kv_heads[0],
        "head_dim": sliding_dim,
        "global_head_dim": full_dim,
        "per_layer_config": per_layer,
        "layer_types": meta.layer_types(layers, None)?,
        "sliding_window": meta.count("attention.sliding_window", None)?,
        "num_kv_shared_layers": shared,
        "hidden_size_per_layer_input": per_layer_input,
        "rms_norm_eps": meta.required_number("attention.layer_norm_rms_epsilon")?,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": meta.required_number("rope.freq_base_swa")?},
            "full_attention": {"rope_type": "default", "rope_theta": meta.required_number("rope.freq_base")?},
        },
        "final_logit_softcapping": meta.required_number("final_logit_softcapping")?,
        "bos_token_id": meta.token_id("bos_token_id").unwrap_or(2),
        "eos_token_id": meta.gemma4_stop_ids(),
    }))
}

/// Typed, bounded reads of one architecture's `{arch}.*` keys.
struct Metadata<'a> {
    file: &'a GgufFile,
    arch: &'static str,
}

impl Metadata<'_> {
    fn value(&self, key: &str) -> Option<&MetadataValue> {
        self.file.get(&format!("{}.{key}", self.arch))
    }

    fn bad(&self, key: &str, what: &str) -> ConfigError {
        ConfigError::InvalidGguf(format!("{}.{key} is not {what}", self.arch))
    }

    /// A key the converter always writes and the architecture has no default for.
    fn missing(&self, key: &str) -> ConfigError {
        let family = if self.arch == "gemma4" { "Gemma 4" } else { "Gemma 3" };
        ConfigError::Missing { file: "the GGUF metadata", field: format!("{}.{key}", self.arch), family }
    }

    fn required_number(&self, key: &str) -> Result<f64, ConfigError> {
        self.number(key)?.ok_or_else(|| self.missing(key))
    }

    /// A number, or a per-layer array whose entries agree.
    fn number(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        match self.numbers(key)?.as_deref() {
            None => Ok(None),
            Some([first, rest @ ..]) if rest.iter().all(|v| v == first) => Ok(Some(*first)),
            Some(_) => Err(self.bad(key, "one number (per-layer values differ)")),
        }
    }

    /// A number or an array of numbers, as a list.
    fn numbers(&self, key: &str) -> Result<Option<Vec<f64>>, ConfigError> {
        match self.value(key) {
            None => Ok(None),
            Some(MetadataValue::Array(items)) => {
                let numbers: Option<Vec<f64>> = items.iter().map(MetadataValue::as_f64).collect();
                numbers.map(Some).ok_or_else(|| self.bad(key, "an array of numbers"))
            }
            Some(v) => v.as_f64().map(|v| Some(vec![v])).ok_or_else(|| self.bad(key, "a number")),
        }
    }

    /// A count, bounded far above any Gemma so that a corrupt file cannot ask for absurd
    /// allocations; `default` when the key is missing (`None`: the key is required).
    fn count(&self, key: &str, default: Option<usize>) -> Result<usize, ConfigError> {
        match self.number(key)? {
            None => default.ok_or_else(|| self.missing(key)),
            Some(v) => self.checked_count(key, v),
        }
    }

    /// One count per layer: a single value for every layer, or an array of `layers` values.
    fn counts_per_layer(&self, key: &str, layers: usize) -> Result<Vec<usize>, ConfigError> {
        let numbers = self.numbers(key)?.ok_or_else(|| self.missing(key))?;
        let counts = numbers.iter().map(|&v| self.checked_count(key, v)).collect::<Result<Vec<_>, _>>()?;
        match counts.len() {
            1 => Ok(vec![counts[0]; layers]),
            n if n == layers => Ok(counts),
            n => Err(self.bad(key, &format!("one value or {layers} (one per layer); it has {n}"))),
        }
    }

    fn checked_count(&self, key: &str, v: f64) -> Result<usize, ConfigError> {
        let limit = match key {
            "block_count" => 1 << 10,
            "vocab_size" => 1 << 24,
            _ => 1 << 20,
        };
        if v >= 1.0 && v.fract() == 0.0 && v <= limit as f64 {
            Ok(v as usize)
        } else {
            Err(self.bad(key, &format!("a count from 1 to {limit}")))
        }
    }

    /// `attention.sliding_window_pattern`: one bool per layer (true = sliding), or a period
    /// (every n-th layer full), else `default_period`.
    fn layer_types(&self, layers: usize, default_period: Option<usize>) -> Result<Vec<&'static str>, ConfigError> {
        let key = "attention.sliding_window_pattern";
        let kind = |sliding: bool| if sliding { "sliding_attention" } else { "full_attention" };
        if let Some(MetadataValue::Array(flags)) = self.value(key) {
            let types: Vec<&str> = flags
                .iter()
                .map(|f| f.as_bool().map(kind))
                .collect::<Option<_>>()
                .ok_or_else(|| self.bad(key, "an array of bools"))?;
            if types.len() != layers {
                return Err(self.bad(key, &format!("{layers} bools (one per layer); it has {}", types.len())));
            }
            return Ok(types);
        }
        let period = self.count(key, default_period)?;
        Ok((0..layers).map(|i| kind((i + 1) % period != 0)).collect())
    }

    fn tokens(&self) -> Option<&[MetadataValue]> {
        self.file.get("tokenizer.ggml.tokens").and_then(MetadataValue::as_array)
    }

    /// `vocab_size`, else the tokenizer's piece count (the converter drops padding rows from the
    /// embedding so that both agree).
    fn vocab_size(&self) -> Result<usize, ConfigError> {
        self.count("vocab_size", Some(self.tokens().map_or(262_144, <[MetadataValue]>::len)))
    }

    fn token_id(&self, key: &str) -> Option<u64> {
        self.file.get(&format!("tokenizer.ggml.{key}")).and_then(MetadataValue::as_u64)
    }

    /// `eos_token_id` (else 1), then `eot_token_id` and each of `markers` the vocabulary holds:
    /// the -it models' generation_config.json stops on their end-of-turn markers too.
    fn stop_ids(&self, markers: &[&str]) -> Vec<u64> {
        let mut ids = vec![self.token_id("eos_token_id").unwrap_or(1)];
        ids.extend(self.token_id("eot_token_id"));
        ids.extend(self.marker_ids(markers));
        let mut seen = std::collections::BTreeSet::new();
        ids.retain(|id| seen.insert(*id));
        ids
    }

    /// The ids of those of `markers` the vocabulary holds.
    fn marker_ids(&self, markers: &[&str]) -> Vec<u64> {
        let Some(tokens) = self.tokens() else { return Vec::new() };
        markers
            .iter()
            .filter_map(|marker| tokens.iter().position(|v| v.as_str() == Some(marker)))
            .map(|i| i as u64)
            .collect()
    }

    /// Gemma 4's stop ids (see [`gemma4`]): Gemma 4's own when the metadata names none.
    fn gemma4_stop_ids(&self) -> Vec<u64> {
        const MARKERS: [&str; 2] = GEMMA4_STOP_MARKERS;
        let named = self.token_id("eos_token_id").is_some()
            || self.token_id("eot_token_id").is_some()
            || !self.marker_ids(&MARKERS).is_empty();
        if named { self.stop_ids(&MARKERS) } else { GEMMA4_STOP_IDS.iter().map(|&id| u64::from(id)).collect() }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{LayerType, TextConfig};
    use super::*;

    fn gguf(metadata: &[(&str, MetadataValue)]) -> GgufFile {
        GgufFile {
            version: 3,
            metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            tensors: BTreeMap::new(),
            alignment: 32,
            data_offset: 0,
        }
    }

    #[test]
    fn gguf_metadata_falls_back_to_gemma3_270m() {
        let arch = ("general.architecture", MetadataValue::String("gemma3".into()));
        let c = TextConfig::from_gguf(&gguf(std::slice::from_ref(&arch))).unwrap();
        assert_eq!((c.hidden_size, c.num_layers, c.num_heads, c.vocab_size), (640, 18, 4, 262_144));
        assert_eq!((c.layers[0].head_dim, c.layers[0].num_kv_heads, c.layers[0].intermediate_size), (256, 1, 2048));
        assert_eq!((c.layers[4].kind, c.layers[5].kind), (LayerType::Sliding, LayerType::Full));
        assert_eq!((c.sliding_window, c.attention_scale, c.norm_weight_offset), (512, 1.0 / 16.0, 1.0));
        assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (2, vec![1]));

        // The 27B layout scales queries by (hidden / heads)^-½; linear RoPE scaling on global layers.
        let big = gguf(&[
            arch.clone(),
            ("gemma3.block_count", MetadataValue::U32(62)),
            ("gemma3.embedding_length", MetadataValue::U32(5376)),
            ("gemma3.attention.head_count", MetadataValue::U32(32)),
            ("gemma3.attention.head_count_kv", MetadataValue::U32(16)),
            ("gemma3.attention.key_length", MetadataValue::U32(128)),
            ("gemma3.rope.scaling.type", MetadataValue::String("linear".into())),
            ("gemma3.rope.scaling.factor", MetadataValue::F32(8.0)),
        ]);
        let c = TextConfig::from_gguf(&big).unwrap();
        assert_eq!(c.attention_scale, 168f32.powf(-0.5));
        let full = &c.layers[5].rope.inv_freq;
        assert!((full[0] - 1.0 / 8.0).abs() < 1e-9);

        let absurd = gguf(&[arch.clone(), ("gemma3.block_count", MetadataValue::U64(u64::MAX))]);
        assert!(matches!(TextConfig::from_gguf(&absurd), Err(ConfigError::InvalidGguf(_))));
        let other = gguf(&[("general.architecture", MetadataValue::String("llama".into()))]);
        assert!(TextConfig::from_gguf(&other).unwrap_err().to_string().contains("llama"));
    }

    /// Gemma 4 E2B's metadata as llama.cpp's converter writes it from the real config.json
    /// (35 layers, every 5th full, 20 KV-shared layers with double-wide MLPs).
    fn e2b_metadata() -> Vec<(&'static str, MetadataValue)> {
        use MetadataValue::{Array, Bool, F32, String as Str, U32};
        let sliding: Vec<bool> = (0..35).map(|i| (i + 1) % 5 != 0).collect();
        let ff: Vec<MetadataValue> = (0..35).map(|i| U32(if i < 15 { 6144 } else { 12288 })).collect();
        let mut tokens: Vec<MetadataValue> = (0..262_144).map(|i| Str(format!("t{i}"))).collect();
        tokens[106] = Str("<turn|>".into());
        tokens[50] = Str("<|tool_response>".into());
        vec![
            ("general.architecture", Str("gemma4".into())),
            ("gemma4.block_count", U32(35)),
            ("gemma4.context_length", U32(131_072)),
            ("gemma4.embedding_length", U32(1536)),
            ("gemma4.feed_forward_length", Array(ff)),
            ("gemma4.attention.head_count", U32(8)),
            ("gemma4.attention.head_count_kv", U32(1)),
            ("gemma4.attention.layer_norm_rms_epsilon", F32(1e-6)),
            ("gemma4.attention.key_length", U32(512)),
            ("gemma4.attention.value_length", U32(512)),
            ("gemma4.attention.key_length_swa", U32(256)),
            ("gemma4.attention.value_length_swa", U32(256)),
            ("gemma4.attention.sliding_window", U32(512)),
            ("gemma4.attention.sliding_window_pattern", Array(sliding.into_iter().map(Bool).collect())),
            ("gemma4.attention.shared_kv_layers", U32(20)),
            ("gemma4.embedding_length_per_layer_input", U32(256)),
            ("gemma4.rope.freq_base", F32(1e6)),
            ("gemma4.rope.freq_base_swa", F32(1e4)),
            ("gemma4.rope.dimension_count", U32(512)),
            ("gemma4.rope.dimension_count_swa", U32(256)),
            ("gemma4.final_logit_softcapping", F32(30.0)),
            ("tokenizer.ggml.model", Str("gemma4".into())),
            ("tokenizer.ggml.tokens", Array(tokens)),
            ("tokenizer.ggml.bos_token_id", U32(2)),
            ("tokenizer.ggml.eos_token_id", U32(1)),
        ]
    }

    #[test]
    fn gemma4_e2b_metadata_gives_the_config_json_shapes() {
        let from_gguf = TextConfig::from_gguf(&gguf(&e2b_metadata())).unwrap();
        // The same model from config.json (config.rs's own E2B test config).
        let from_json = TextConfig::from_json(&super::super::tests::e2b_like()).unwrap();
        let c = &from_gguf;
        assert_eq!((c.hidden_size, c.num_layers, c.num_heads, c.vocab_size), (1536, 35, 8, 262_144));
        assert_eq!(c.tensor_prefix, "model.");
        assert_eq!((c.per_layer_input_size, c.final_logit_softcap, c.sliding_window), (Some(256), Some(30.0), 512));
        assert_eq!((c.norm_weight_offset, c.attention_scale, c.v_norm), (0.0, 1.0, true));
        assert_eq!(c.eos_token_ids, vec![1, 106, 50]);
        for (i, (a, b)) in from_gguf.layers.iter().zip(&from_json.layers).enumerate() {
            assert_eq!(
                (a.kind, a.head_dim, a.num_kv_heads, a.intermediate_size, a.kv_producer),
                (b.kind, b.head_dim, b.num_kv_heads, b.intermediate_size, b.kv_producer),
                "layer {i}"
            );
            if a.kind == LayerType::Sliding {
                assert_eq!(a.rope, b.rope, "layer {i}");
            }
        }
        // Full layers rotate every pair until rope_freqs (1 for the first quarter, 1e30 after)
        // makes them proportional, as config.json says.
        let mut c = from_gguf;
        assert!(c.layers[4].rope.inv_freq.iter().all(|&f| f > 0.0));
        let factors: Vec<f32> = (0..256).map(|i| if i < 64 { 1.0 } else { 1e30 }).collect();
        c.apply_rope_freq_factors(&factors).unwrap();
        let (got, want) = (&c.layers[4].rope.inv_freq, &from_json.layers[4].rope.inv_freq);
        assert_eq!(got[..64], want[..64]);
        assert!(got[64..].iter().all(|&f| f < 1e-30) && want[64..].iter().all(|&f| f == 0.0));
        assert_eq!(c.layers[0].rope, from_json.layers[0].rope, "sliding layers keep theirs");
        assert!(c.apply_rope_freq_factors(&factors[..10]).unwrap_err().to_string().contains("10 factors"));
        assert!(c.apply_rope_freq_factors(&[0.0; 256]).is_err());
    }

    #[test]
    fn gemma4_stop_ids_come_from_the_metadata_and_vocabulary() {
        use MetadataValue::{Array, String as Str, U32};
        let stops =
            |meta: Vec<(&'static str, MetadataValue)>| TextConfig::from_gguf(&gguf(&meta)).unwrap().eos_token_ids;
        let with = |changes: Vec<(&'static str, Option<MetadataValue>)>| {
            let mut meta = e2b_metadata();
            for (key, value) in changes {
                meta.retain(|(k, _)| *k != key);
                meta.extend(value.map(|v| (key, v)));
            }
            meta
        };
        // The markers where this vocabulary has them, after the file's eos.
        let mut tokens: Vec<MetadataValue> = (0..300).map(|i| Str(format!("t{i}"))).collect();
        tokens[210] = Str("<turn|>".into());
        tokens[7] = Str("<|tool_response>".into());
        let moved = with(vec![
            ("tokenizer.ggml.tokens", Some(Array(tokens.clone()))),
            ("tokenizer.ggml.eos_token_id", Some(U32(3))),
        ]);
        assert_eq!(stops(moved), vec![3, 210, 7]);
        // A vocabulary without them: only the eos the file names.
        let plain: Vec<MetadataValue> = (0..300).map(|i| Str(format!("t{i}"))).collect();
        let bare = with(vec![("tokenizer.ggml.tokens", Some(Array(plain.clone())))]);
        assert_eq!(stops(bare), vec![1]);
        // Nothing named at all: Gemma 4's own.
        let silent = with(vec![("tokenizer.ggml.tokens", Some(Array(plain))), ("tokenizer.ggml.eos_token_id", None)]);
        assert_eq!(stops(silent), GEMMA4_STOP_IDS);
    }

    #[test]
    fn gemma4_metadata_that_cannot_be_run_is_refused_by_name() {
        let without = |key: &str| {
            let meta: Vec<_> = e2b_metadata().into_iter().filter(|(k, _)| *k != key).collect();
            TextConfig::from_gguf(&gguf(&meta)).unwrap_err().to_string()
        };
        assert!(without("gemma4.attention.key_length_swa").contains("gemma4.attention.key_length_swa"));
        assert!(without("gemma4.attention.shared_kv_layers").contains("shared_kv_layers"));
        // Keys whose absence Gemma 3's defaults would hide (no softcap, other RoPE bases).
        for key in [
            "gemma4.final_logit_softcapping",
            "gemma4.attention.layer_norm_rms_epsilon",
            "gemma4.rope.freq_base",
            "gemma4.rope.freq_base_swa",
            "gemma4.attention.sliding_window",
            "gemma4.attention.sliding_window_pattern",
            "gemma4.embedding_length_per_layer_input",
            "gemma4.feed_forward_length",
        ] {
            assert_eq!(without(key), format!("the GGUF metadata lacks `{key}`, which Gemma 4 needs"));
        }
        let with = |key: &'static str, value: MetadataValue| {
            let mut meta = e2b_metadata();
            meta.retain(|(k, _)| *k != key);
            meta.push((key, value));
            TextConfig::from_gguf(&gguf(&meta)).unwrap_err().to_string()
        };
        assert!(with("gemma4.expert_count", MetadataValue::U32(128)).contains("mixture-of-experts"));
        let short = MetadataValue::Array(vec![MetadataValue::U32(6144); 3]);
        assert!(with("gemma4.feed_forward_length", short).contains("it has 3"));
        assert!(with("gemma4.rope.dimension_count_swa", MetadataValue::U32(64)).contains("partial RoPE"));
        let flags = MetadataValue::Array(vec![MetadataValue::Bool(true); 34]);
        assert!(with("gemma4.attention.sliding_window_pattern", flags).contains("35 bools"));
    }
}
