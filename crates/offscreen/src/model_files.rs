//! A model's files as JavaScript hands them over: the small ones whole, the weights whole (bundled
//! test models, a GGUF file given by hand) or read piece by piece from the model store. This is
//! only the transport: the engine builds the model from them ([`hearth_engine::loading`]).

use hearth_engine::loading::{DrafterFiles, InMemory, ModelPayload, PartFiles, ReadRange, StreamedWeights, WeightFile};
use wasm_bindgen::prelude::*;
use wasm_bindgen::{JsCast, JsValue};

/// Where a file's bytes are: whole in wasm memory, or in the model store, read by
/// `read(path, offset, length)`, a JavaScript function returning a Promise of a Uint8Array.
pub enum BrowserBytes {
    Whole(InMemory),
    Store(js_sys::Function),
}

impl ReadRange for BrowserBytes {
    async fn read(&self, path: &str, offset: u64, length: u64) -> Result<Vec<u8>, String> {
        let read = match self {
            BrowserBytes::Whole(bytes) => return bytes.read(path, offset, length).await,
            BrowserBytes::Store(read) => read,
        };
        let failed = |e: JsValue| {
            let detail = e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).or_else(|| e.as_string());
            format!("reading {path} failed: {}", detail.unwrap_or_else(|| format!("{e:?}")))
        };
        let args = (JsValue::from_str(path), JsValue::from_f64(offset as f64), JsValue::from_f64(length as f64));
        let promise = read.call3(&JsValue::NULL, &args.0, &args.1, &args.2).map_err(failed)?;
        let value = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&promise)).await.map_err(failed)?;
        Ok(js_sys::Uint8Array::new(&value).to_vec())
    }
}

fn whole(path: String, bytes: Vec<u8>) -> StreamedWeights<BrowserBytes> {
    let bytes = InMemory::new(path, bytes);
    StreamedWeights::new(vec![bytes.file()], BrowserBytes::Whole(bytes))
}

/// A model's files, from JavaScript: the small ones whole, the weights whole (bundled test
/// models, GGUF files given by hand) or read piece by piece from the model store.
#[wasm_bindgen]
pub struct ModelFiles {
    pub(crate) payload: ModelPayload<BrowserBytes>,
}

impl ModelFiles {
    fn of(name: String, parts: PartFiles, weights: StreamedWeights<BrowserBytes>) -> ModelFiles {
        // The vision tower loads whenever the model has one (the folder's weights, or a
        // projector); the audio tower only when the user takes voice input (`hearing`).
        let payload = ModelPayload { name, parts, weights, vision: true, audio: false, projector: None, drafter: None };
        ModelFiles { payload }
    }

    pub fn name(&self) -> &str {
        &self.payload.name
    }
}

#[wasm_bindgen]
impl ModelFiles {
    #[wasm_bindgen(constructor)]
    pub fn new(
        name: String,
        config_json: String,
        generation_config_json: Option<String>,
        weights: Vec<u8>,
        tokenizer_json: Vec<u8>,
        chat_template: Option<String>,
        tokenizer_config_json: Option<String>,
    ) -> ModelFiles {
        let parts = PartFiles {
            config_json,
            generation_config_json,
            tokenizer_json,
            chat_template,
            tokenizer_config_json,
            ..PartFiles::default()
        };
        let weights = whole(format!("{name}/model.safetensors"), weights);
        ModelFiles::of(name, parts, weights)
    }

    /// A folder whose safetensors files (`weight_files`: JSON `[{path, size}]`) are read by
    /// `read_weights(path, offset, length)`, which returns a Promise of a Uint8Array of exactly
    /// `length` bytes. Only the bytes of one load step are held at a time. The chat template is
    /// chat_template.jinja's text, else tokenizer_config.json's entry (at least one is needed).
    #[allow(clippy::too_many_arguments)]
    pub fn streamed(
        name: String,
        config_json: String,
        generation_config_json: Option<String>,
        weight_files: String,
        read_weights: js_sys::Function,
        tokenizer_json: Vec<u8>,
        chat_template: Option<String>,
        tokenizer_config_json: Option<String>,
    ) -> Result<ModelFiles, JsError> {
        let files: Vec<WeightFile> = serde_json::from_str(&weight_files)
            .map_err(|e| JsError::new(&format!("weight files must be a JSON array of {{path, size}}: {e}")))?;
        if files.is_empty() {
            return Err(JsError::new("a model needs at least one weight file"));
        }
        let parts = PartFiles {
            config_json,
            generation_config_json,
            tokenizer_json,
            chat_template,
            tokenizer_config_json,
            ..PartFiles::default()
        };
        let weights = StreamedWeights::new(files, BrowserBytes::Store(read_weights));
        Ok(ModelFiles::of(name, parts, weights))
    }

    /// One GGUF file of `size` bytes read by `read_weights(path, offset, length)` (as for
    /// [`Self::streamed`]): header, metadata and tensor table as the parser asks, then each load
    /// step's bytes. Its metadata holds the config, tokenizer and chat template.
    pub fn streamed_gguf(
        name: String,
        path: String,
        size: f64,
        read_weights: js_sys::Function,
        chat_template: Option<String>,
    ) -> ModelFiles {
        let files = vec![WeightFile { path, size: size as u64 }];
        let weights = StreamedWeights::new(files, BrowserBytes::Store(read_weights));
        ModelFiles::of(name, PartFiles { chat_template, ..PartFiles::default() }, weights)
    }

    /// One GGUF file: its metadata holds the config, the tokenizer and the chat template
    /// (`chat_template`, when given, replaces the file's; a file without one needs it).
    pub fn gguf(name: String, weights: Vec<u8>, chat_template: Option<String>) -> ModelFiles {
        let weights = whole(format!("{name}.gguf"), weights);
        ModelFiles::of(name, PartFiles { chat_template, ..PartFiles::default() }, weights)
    }

    /// These files with the model's assistant (speculative decoding): its `config_json` and
    /// `model.safetensors` of `size` bytes read by `read_weights(path, offset, length)` (as for
    /// [`Self::streamed`]). A failing assistant leaves the model working without it.
    pub fn with_drafter(
        mut self,
        name: String,
        config_json: String,
        size: f64,
        read_weights: js_sys::Function,
    ) -> ModelFiles {
        let files = vec![WeightFile { path: "model.safetensors".into(), size: size as u64 }];
        let weights = StreamedWeights::new(files, BrowserBytes::Store(read_weights));
        self.payload.drafter = Some(DrafterFiles { name, config_json, weights });
        self
    }

    /// These files with the model's vision tower as a file of its own (llama.cpp's projector,
    /// `mmproj…gguf`, beside a GGUF model): `path` of `size` bytes read by
    /// `read_weights(path, offset, length)` (as for [`Self::streamed`]). A tower that fails
    /// leaves the model text-only, and its info says why.
    pub fn with_projector(mut self, path: String, size: f64, read_weights: js_sys::Function) -> ModelFiles {
        let files = vec![WeightFile { path, size: size as u64 }];
        self.payload.projector = Some(StreamedWeights::new(files, BrowserBytes::Store(read_weights)));
        self
    }

    /// These files with the audio tower loaded too, where the model has one (the user turned
    /// voice input on).
    pub fn hearing(mut self, hearing: bool) -> ModelFiles {
        self.payload.audio = hearing;
        self
    }

    /// [`Self::with_drafter`] with the weights whole (a test build's bundled assistant).
    pub fn with_drafter_bytes(mut self, name: String, config_json: String, weights: Vec<u8>) -> ModelFiles {
        let weights = whole(format!("{name}/model.safetensors"), weights);
        self.payload.drafter = Some(DrafterFiles { name, config_json, weights });
        self
    }
}
