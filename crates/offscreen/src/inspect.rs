//! "Use a model file you already have": what a GGUF file the user chose is, read from its header
//! by the engine's own parsers (the same ones that load it) before Hearth stores a byte of it.
//!
//! The options page calls [`inspect_gguf`] with a `read(offset, length)` over the chosen `File`;
//! only the header is fetched (grown as the parser asks, by `hearth_model::gemma::open_headers`
//! as for an installed model), never the tensors. The answer is a [`GgufInspection`]: a Gemma 3
//! or Gemma 4 the loader accepts (with what the options page shows of it), or why not: not a GGUF
//! file at all, another architecture (named), or a Gemma GGUF the engine cannot run (a damaged
//! header, a tensor type it cannot read, a missing tensor, no chat template).

use hearth_chat::ChatTemplate;
use hearth_model::TextConfig;
use hearth_model::config::Family;
use hearth_model::gemma::{FetchedFile, open_headers};
use hearth_model::tokenizer::Tokenizer;
use hearth_protocol::{GgufInspection, GgufSummary};
use hearth_weights::{ByteSource, Checkpoint, GgufFile, MetadataValue, Windows};
use wasm_bindgen::prelude::*;

/// Gemma 3's turn format, for the Gemma 3 GGUF files that carry no `tokenizer.chat_template`
/// (early conversions, tiny test files): `<start_of_turn>user` / `model` turns closed by
/// `<end_of_turn>`, the text parts of each message trimmed, as Google's template writes them.
/// Gemma 4's template (thinking, tools) is not guessed: such a file is refused.
pub const GEMMA3_CHAT_TEMPLATE: &str = r#"{{ bos_token }}
{%- for message in messages %}
{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' }}
{%- if message['content'] is string %}
{{- message['content'] | trim }}
{%- elif message['content'] %}
{%- for part in message['content'] if part['type'] == 'text' %}
{{- part['text'] | trim }}
{%- endfor %}
{%- endif %}
{{- '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<start_of_turn>model\n' }}
{%- endif %}"#;

/// No Gemma's header (metadata with a 262k-token vocabulary and its merges, and the tensor table)
/// comes near this; a file whose header asks for more is refused rather than read into memory.
const MAX_HEADER: u64 = 64 << 20;

/// What the file of `size` bytes that `read(offset, length)` (a Promise of a Uint8Array of exactly
/// `length` bytes) reads is: a `GgufInspection` as JSON. `file_name` names it in messages.
#[wasm_bindgen(js_name = inspectGguf)]
pub async fn inspect_gguf(file_name: String, size: f64, read: js_sys::Function) -> String {
    let inspection = match open_header(&file_name, size as u64, &read).await {
        Ok(Some(checkpoint)) => summarize(&checkpoint),
        Ok(None) => GgufInspection::NotGguf,
        Err(reason) => GgufInspection::Invalid { reason },
    };
    serde_json::to_string(&inspection).unwrap_or_default()
}

/// The same for a file already in memory or on disk (native tests, the CLI).
pub fn inspect_source(mut source: Box<dyn ByteSource>) -> GgufInspection {
    if !GgufFile::sniff(source.as_mut()) {
        return GgufInspection::NotGguf;
    }
    match Checkpoint::from_gguf(source) {
        Ok(checkpoint) => summarize(&checkpoint),
        Err(err) => GgufInspection::Invalid { reason: err.to_string() },
    }
}

/// Bytes `offset..offset + len` of the chosen file, from JavaScript.
async fn fetch(read: &js_sys::Function, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let js = |e: JsValue| {
        let detail = e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).or_else(|| e.as_string());
        format!("reading {name} failed: {}", detail.unwrap_or_else(|| format!("{e:?}")))
    };
    let promise =
        read.call2(&JsValue::NULL, &JsValue::from_f64(offset as f64), &JsValue::from_f64(len as f64)).map_err(js)?;
    let value = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&promise)).await.map_err(js)?;
    let bytes = js_sys::Uint8Array::new(&value);
    if u64::from(bytes.length()) != len {
        return Err(format!("reading {name} gave {} bytes where {len} were asked", bytes.length()));
    }
    Ok(bytes.to_vec())
}

/// The file's GGUF header as a checkpoint (no tensor bytes), `None` when it is not a GGUF file,
/// or why the header cannot be read.
async fn open_header(name: &str, size: u64, read: &js_sys::Function) -> Result<Option<Checkpoint>, String> {
    if size < 4 || fetch(read, name, 0, 4).await? != b"GGUF" {
        return Ok(None);
    }
    let file = FetchedFile { name: name.to_string(), size, windows: Windows::default() };
    let fetch_header = |_: usize, start: u64, end: u64| {
        let windows = file.windows.clone();
        async move {
            windows.insert(start, fetch(read, name, start, end - start).await?);
            Ok::<(), String>(())
        }
    };
    let opened = open_headers(std::slice::from_ref(&file), Some(MAX_HEADER), fetch_header).await;
    opened.map(Some).map_err(|err| err.to_string())
}

/// What the engine would make of `checkpoint`, a GGUF header.
pub fn summarize(checkpoint: &Checkpoint) -> GgufInspection {
    let Some(gguf) = checkpoint.gguf() else { return GgufInspection::NotGguf };
    let architecture = gguf.architecture().unwrap_or("(none)").to_string();
    if !matches!(architecture.as_str(), "gemma3" | "gemma4") {
        return GgufInspection::UnsupportedArchitecture { architecture };
    }
    match loadable(checkpoint, gguf, architecture) {
        Ok(model) => GgufInspection::Loadable { model },
        Err(reason) => GgufInspection::Invalid { reason },
    }
}

/// The checks the engine's load makes before it reads a tensor: config, tokenizer and chat
/// template from the metadata (as `engine.rs` builds them), every tensor's type, and the tensors
/// the decoder reads for each layer.
fn loadable(checkpoint: &Checkpoint, gguf: &GgufFile, architecture: String) -> Result<GgufSummary, String> {
    let config = TextConfig::from_gguf(gguf).map_err(|e| e.to_string())?;
    let tokenizer = Tokenizer::from_gguf(gguf).map_err(|e| e.to_string())?;
    let own = gguf.get("tokenizer.chat_template").and_then(MetadataValue::as_str).filter(|t| !t.trim().is_empty());
    let supplied = match (own, config.family) {
        (Some(_), _) => None,
        (None, Family::Gemma3) => Some(GEMMA3_CHAT_TEMPLATE),
        (None, Family::Gemma4) => {
            return Err("it has no chat template (tokenizer.chat_template), which every Gemma 4 file needs".into());
        }
    };
    let bos = tokenizer.decode(&[config.bos_token_id]).map_err(|e| e.to_string())?;
    ChatTemplate::from_str(own.or(supplied).unwrap_or_default(), &bos)
        .map_err(|e| format!("its chat template cannot be used: {e}"))?;

    if let Some((name, tensor)) = gguf.tensors.iter().find(|(_, t)| !t.ggml_type.can_dequantize()) {
        return Err(format!("tensor `{name}` is stored as {}, which Hearth cannot read yet", tensor.ggml_type));
    }
    let prefix = [config.tensor_prefix.as_str(), "model."]
        .into_iter()
        .find(|p| checkpoint.contains(&format!("{p}embed_tokens.weight")))
        .ok_or("it has no token embedding (token_embd.weight)")?;
    for layer in 0..config.num_layers {
        for (hf, ggml) in [("self_attn.q_proj.weight", "attn_q.weight"), ("mlp.down_proj.weight", "ffn_down.weight")] {
            if !checkpoint.contains(&format!("{prefix}layers.{layer}.{hf}")) {
                return Err(format!("it has {} layers but no blk.{layer}.{ggml}", config.num_layers));
            }
        }
    }

    // The type that holds most of the bytes names the quantization ("Q4_0" for a Q4_0 file whose
    // norms are F32).
    let mut bytes_by_type = std::collections::BTreeMap::<&str, u64>::new();
    for tensor in gguf.tensors.values() {
        *bytes_by_type.entry(tensor.ggml_type.name()).or_default() += tensor.len as u64;
    }
    let quantization = bytes_by_type.iter().max_by_key(|(_, bytes)| **bytes).map(|(ty, _)| ty.to_string());
    let context_length = gguf.get(&format!("{architecture}.context_length")).and_then(MetadataValue::as_u64);
    Ok(GgufSummary {
        name: gguf
            .get("general.name")
            .and_then(MetadataValue::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from),
        layers: config.num_layers as u32,
        hidden_size: config.hidden_size as u32,
        vocab_size: config.vocab_size as u32,
        context_length: context_length.map(|c| c.min(u64::from(u32::MAX)) as u32),
        quantization: quantization.unwrap_or_default(),
        parameters: gguf.tensors.values().map(|t| t.element_count() as u64).sum(),
        chat_template: supplied.map(String::from),
        architecture,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_chat::{Message, RenderRequest};
    use hearth_weights::MemorySource;
    use std::path::Path;

    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures").join(name).join("model.gguf");
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn inspect(bytes: Vec<u8>) -> GgufInspection {
        inspect_source(Box::new(MemorySource::new("model.gguf", bytes)))
    }

    /// A GGUF v3 header with string metadata only and no tensors.
    fn header(metadata: &[(&str, &str)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((metadata.len() as u64).to_le_bytes());
        let string = |out: &mut Vec<u8>, s: &str| {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        };
        for (key, value) in metadata {
            string(&mut out, key);
            out.extend(8u32.to_le_bytes()); // a string
            string(&mut out, value);
        }
        out
    }

    #[test]
    fn the_tiny_gemma_files_are_loadable() {
        let GgufInspection::Loadable { model } = inspect(fixture("gemma3-gguf")) else { panic!("gemma3-gguf") };
        assert_eq!((model.architecture.as_str(), model.layers, model.name.as_deref()), ("gemma3", 6, None));
        assert!(model.parameters > 0 && !model.quantization.is_empty(), "{model:?}");
        // The file has no chat template: Gemma 3's turns are supplied.
        assert_eq!(model.chat_template.as_deref(), Some(GEMMA3_CHAT_TEMPLATE));

        let GgufInspection::Loadable { model } = inspect(fixture("gemma4-gguf")) else { panic!("gemma4-gguf") };
        assert_eq!((model.architecture.as_str(), model.layers), ("gemma4", 6));
        assert_eq!(model.chat_template, None, "its own template is used");
    }

    #[test]
    fn other_files_are_refused_with_a_reason() {
        assert_eq!(inspect(b"\x89PNG\r\n\x1a\n rest of a picture".to_vec()), GgufInspection::NotGguf);
        assert_eq!(inspect(b"GG".to_vec()), GgufInspection::NotGguf);
        let llama = header(&[("general.architecture", "llama"), ("general.name", "Llama")]);
        assert_eq!(inspect(llama), GgufInspection::UnsupportedArchitecture { architecture: "llama".into() });
        assert_eq!(inspect(header(&[])), GgufInspection::UnsupportedArchitecture { architecture: "(none)".into() });

        let mut truncated = fixture("gemma3-gguf");
        truncated.truncate(truncated.len() / 2);
        let GgufInspection::Invalid { reason } = inspect(truncated) else { panic!("a truncated file is invalid") };
        assert!(reason.contains("truncated"), "{reason}");

        // A Gemma 3 header without the model's tensors.
        let empty = header(&[("general.architecture", "gemma3")]);
        assert!(matches!(inspect(empty), GgufInspection::Invalid { .. }));
    }

    #[test]
    fn the_supplied_gemma3_template_renders_gemma_turns() {
        let template = ChatTemplate::from_str(GEMMA3_CHAT_TEMPLATE, "<bos>").unwrap();
        let messages = [Message::user("  Hello  "), Message::assistant("Hi."), Message::user("Bye")];
        let render = |add_generation_prompt| {
            let request = RenderRequest {
                messages: &messages,
                tools: &[],
                enable_thinking: false,
                preserve_thinking: false,
                add_generation_prompt,
            };
            template.render(&request).unwrap()
        };
        let turns = "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi.<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n";
        assert_eq!(render(false), turns);
        assert_eq!(render(true), format!("{turns}<start_of_turn>model\n"));
    }
}
