//! Weight files read piece by piece from JavaScript (the model store in Cache Storage), so that a
//! model of gigabytes is never held whole in wasm memory (whose 4 GiB would not even hold E4B):
//! the loader names the bytes of each step ([`hearth_model::GemmaLoader::next_reads`]), they are
//! fetched, read, and dropped before the next step.

use hearth_model::gemma::MAX_TENSOR_BYTES;
use hearth_model::{Gemma, GemmaLoader, TextConfig};
use hearth_weights::{ByteSource, Checkpoint, Quantization, WeightsError, WindowedSource, Windows};
use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};

use crate::engine::LoadFailure;

use burn::tensor::{Device, Tensor};

/// One weight file of a model folder, as the store lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct WeightFile {
    pub path: String,
    pub size: u64,
}

/// How much of each file is fetched first for its header (at most, and never more than a 32nd
/// of the file, nor less than 64 KiB); more is fetched when the header is longer (a GGUF file's
/// metadata holds the whole tokenizer: about 10 MB for Gemma 4).
const HEADER_GUESS: u64 = 1 << 20;

fn header_guess(size: u64) -> u64 {
    (size / 32).clamp(64 << 10, HEADER_GUESS).min(size)
}

pub struct StreamedWeights {
    files: Vec<(WeightFile, Windows)>,
    /// `read(path, offset, length)` → `Promise<Uint8Array>` of exactly `length` bytes.
    read: js_sys::Function,
    /// The most bytes held at once (over all files), for the load's report.
    peak_held: std::cell::Cell<u64>,
}

impl StreamedWeights {
    pub fn new(files: Vec<WeightFile>, read: js_sys::Function) -> Self {
        let files = files.into_iter().map(|f| (f, Windows::default())).collect();
        Self { files, read, peak_held: std::cell::Cell::new(0) }
    }

    /// The files' size in all.
    pub fn file_bytes(&self) -> u64 {
        self.files.iter().map(|(f, _)| f.size).sum()
    }

    /// The most bytes of the files held in memory at once so far.
    pub fn peak_held_bytes(&self) -> u64 {
        self.peak_held.get()
    }

    fn sources(&self) -> Vec<Box<dyn ByteSource>> {
        let source = |(file, windows): &(WeightFile, Windows)| -> Box<dyn ByteSource> {
            Box::new(WindowedSource::new(file.path.clone(), file.size, windows.clone()))
        };
        self.files.iter().map(source).collect()
    }

    /// Fetches bytes `start..end` of file `index` and makes them readable.
    async fn fetch(&self, index: usize, start: u64, end: u64) -> Result<(), String> {
        let Some((file, windows)) = self.files.get(index) else {
            return Err(format!("the loader asked for weight file {index}, which does not exist"));
        };
        let js = |e: JsValue| {
            let detail = e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).or_else(|| e.as_string());
            format!("reading {} failed: {}", file.path, detail.unwrap_or_else(|| format!("{e:?}")))
        };
        let args =
            (JsValue::from_str(&file.path), JsValue::from_f64(start as f64), JsValue::from_f64((end - start) as f64));
        let promise = self.read.call3(&JsValue::NULL, &args.0, &args.1, &args.2).map_err(js)?;
        let value = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&promise)).await.map_err(js)?;
        let bytes = js_sys::Uint8Array::new(&value);
        if u64::from(bytes.length()) != end - start {
            return Err(format!(
                "reading {} gave {} bytes where {} were asked",
                file.path,
                bytes.length(),
                end - start
            ));
        }
        windows.insert(start, bytes.to_vec());
        let held = self.files.iter().map(|(_, w)| w.held_bytes()).sum::<u64>();
        self.peak_held.set(self.peak_held.get().max(held));
        Ok(())
    }

    /// Drops every fetched byte.
    fn release(&self) {
        self.files.iter().for_each(|(_, windows)| windows.clear());
    }

    /// The files' headers, fetched as the parsers ask for them: one GGUF file (its metadata
    /// holds the config, tokenizer and chat template), or safetensors files.
    pub async fn open(&self, quantization: Option<Quantization>) -> Result<Checkpoint, LoadFailure> {
        for (index, (file, _)) in self.files.iter().enumerate() {
            self.fetch(index, 0, header_guess(file.size)).await?;
        }
        let gguf = {
            let mut first = self.sources().remove(0);
            self.files.len() == 1 && hearth_weights::GgufFile::sniff(first.as_mut())
        };
        loop {
            let opened = match gguf {
                true => Checkpoint::from_gguf(self.sources().remove(0)),
                false => Checkpoint::from_sources(self.sources()),
            };
            match opened {
                Ok(mut checkpoint) => {
                    self.release();
                    checkpoint.set_quantization(quantization);
                    return Ok(checkpoint);
                }
                Err(WeightsError::NotFetched { file, offset, len }) => {
                    let index = self
                        .files
                        .iter()
                        .position(|(f, _)| f.path == file)
                        .ok_or_else(|| LoadFailure::damaged("the parser asked for an unknown weight file"))?;
                    let (file, windows) = &self.files[index];
                    let have = windows.prefix_len();
                    let want = (offset + len).max(have * 2).min(file.size);
                    if want <= have {
                        return Err(LoadFailure::damaged(format!(
                            "the header of {} asks for bytes it does not have",
                            file.path
                        )));
                    }
                    windows.clear();
                    self.fetch(index, 0, want).await?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// Loads the model step by step: each step's bytes are fetched, read and dropped;
    /// `on_progress(done, total)` before each step.
    pub async fn load(
        &self,
        config: TextConfig,
        mut checkpoint: Checkpoint,
        device: &Device,
        on_progress: &dyn Fn(usize, usize),
    ) -> Result<Gemma, LoadFailure> {
        let mut loader = GemmaLoader::new(config, &checkpoint, MAX_TENSOR_BYTES);
        while let Some(reads) = loader.next_reads(&checkpoint) {
            let (done, total) = loader.progress();
            on_progress(done, total);
            self.release();
            for range in reads? {
                self.fetch(range.file, range.start, range.end).await?;
            }
            loader.step(&mut checkpoint, device)?;
            // Wait for the device to take this step's uploads before the next step's arrive: until
            // a submission, their staged copies stay in wasm memory.
            let _ = Tensor::<1>::zeros([1], device).into_data_async().await;
        }
        self.release();
        Ok(loader.finish(device)?)
    }
}
