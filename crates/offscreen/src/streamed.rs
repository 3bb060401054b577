//! Weight files read piece by piece from JavaScript (the model store in Cache Storage), so that a
//! model of gigabytes is never held whole in wasm memory (whose 4 GiB would not even hold E4B):
//! the headers are fetched as the parsers ask ([`hearth_model::gemma::open_headers`]), then the
//! loader names the bytes of each step, they are fetched, read, and dropped before the next step
//! ([`hearth_model::GemmaLoader::load_with_async`]).

use hearth_model::gemma::{FetchedFile, HeaderError, LoadStep, MAX_TENSOR_BYTES, open_headers};
use hearth_model::{Gemma, GemmaLoader, TextConfig};
use hearth_weights::{Checkpoint, Quantization, Windows};
use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};

use crate::load_failure::LoadFailure;

use burn::tensor::Device;

/// One weight file of a model folder, as the store lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct WeightFile {
    pub path: String,
    pub size: u64,
}

pub struct StreamedWeights {
    files: Vec<FetchedFile>,
    /// `read(path, offset, length)` → `Promise<Uint8Array>` of exactly `length` bytes.
    read: js_sys::Function,
    /// The most bytes held at once (over all files), for the load's report.
    peak_held: std::cell::Cell<u64>,
}

impl StreamedWeights {
    pub fn new(files: Vec<WeightFile>, read: js_sys::Function) -> Self {
        let files = files.into_iter().map(|f| FetchedFile { name: f.path, size: f.size, windows: Windows::default() });
        Self { files: files.collect(), read, peak_held: std::cell::Cell::new(0) }
    }

    /// The files' size in all.
    pub fn file_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The most bytes of the files held in memory at once so far.
    pub fn peak_held_bytes(&self) -> u64 {
        self.peak_held.get()
    }

    /// Fetches bytes `start..end` of file `index` and makes them readable.
    async fn fetch(&self, index: usize, start: u64, end: u64) -> Result<(), String> {
        let Some(file) = self.files.get(index) else {
            return Err(format!("the loader asked for weight file {index}, which does not exist"));
        };
        let js = |e: JsValue| {
            let detail = e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).or_else(|| e.as_string());
            format!("reading {} failed: {}", file.name, detail.unwrap_or_else(|| format!("{e:?}")))
        };
        let args =
            (JsValue::from_str(&file.name), JsValue::from_f64(start as f64), JsValue::from_f64((end - start) as f64));
        let promise = self.read.call3(&JsValue::NULL, &args.0, &args.1, &args.2).map_err(js)?;
        let value = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&promise)).await.map_err(js)?;
        let bytes = js_sys::Uint8Array::new(&value);
        if u64::from(bytes.length()) != end - start {
            return Err(format!(
                "reading {} gave {} bytes where {} were asked",
                file.name,
                bytes.length(),
                end - start
            ));
        }
        file.windows.insert(start, bytes.to_vec());
        let held = self.files.iter().map(|f| f.windows.held_bytes()).sum::<u64>();
        self.peak_held.set(self.peak_held.get().max(held));
        Ok(())
    }

    /// Drops every fetched byte.
    fn release(&self) {
        self.files.iter().for_each(|f| f.windows.clear());
    }

    /// The files' headers, fetched as the parsers ask for them: one GGUF file (its metadata
    /// holds the config, tokenizer and chat template), or safetensors files.
    pub async fn open(&self, quantization: Option<Quantization>) -> Result<Checkpoint, LoadFailure> {
        let opened = open_headers(&self.files, None, |index, start, end| self.fetch(index, start, end)).await;
        let mut checkpoint = opened.map_err(|err| match err {
            HeaderError::Fetch(message) => LoadFailure::from(message),
            HeaderError::Weights(err) => LoadFailure::from(err),
            other => LoadFailure::damaged(other.to_string()),
        })?;
        self.release();
        checkpoint.set_quantization(quantization);
        Ok(checkpoint)
    }

    /// Loads the model step by step: each step's bytes are fetched, read and dropped;
    /// `on_progress(done, total)` before each step.
    pub async fn load(
        &self,
        config: TextConfig,
        checkpoint: &mut Checkpoint,
        device: &Device,
        on_progress: &dyn Fn(usize, usize),
    ) -> Result<Gemma, LoadFailure> {
        let loader = GemmaLoader::new(config, checkpoint, MAX_TENSOR_BYTES);
        let fetch_step = |step: LoadStep<'_>| {
            let (done, total) = step.progress();
            on_progress(done, total);
            self.release();
            let reads = step.reads();
            async move {
                for range in reads? {
                    self.fetch(range.file, range.start, range.end).await?;
                }
                Ok::<(), LoadFailure>(())
            }
        };
        let model = loader.load_with_async(checkpoint, device, fetch_step).await;
        self.release();
        model
    }

    /// Fetches every tensor under `prefixes` (the vision tower's, read in one go after the
    /// decoder: tens of megabytes in 4 bits); [`Self::release_all`] drops them.
    pub async fn fetch_under(&self, checkpoint: &Checkpoint, prefixes: &[String]) -> Result<(), LoadFailure> {
        self.release();
        for range in checkpoint.ranges_under(prefixes) {
            self.fetch(range.file, range.start, range.end).await?;
        }
        Ok(())
    }

    /// Drops every fetched byte.
    pub fn release_all(&self) {
        self.release();
    }
}
