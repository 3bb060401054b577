//! Weight files read piece by piece from where they are (the browser's model store in Cache
//! Storage, bytes in memory, files on disk), so that a model of gigabytes is never held whole (in
//! wasm, whose 4 GiB would not even hold E4B): the headers are fetched as the parsers ask
//! ([`hearth_model::gemma::open_headers`]), then the loader names the bytes of each step, they are
//! fetched, read, and dropped before the next step ([`hearth_model::GemmaLoader::load_with_async`]).

use std::future::Future;

use hearth_model::gemma::{FetchedFile, HeaderError, LoadStep, MAX_TENSOR_BYTES, open_headers};
use hearth_model::{Gemma, GemmaLoader, TextConfig};
use hearth_weights::{Checkpoint, Quantization, Windows};

use super::LoadFailure;

use burn::tensor::Device;

/// Where weight files' bytes come from: the browser's model store (a JavaScript callback), a
/// file given whole, files on disk.
pub trait ReadRange {
    /// Bytes `offset..offset + length` of the file `path`, or why they cannot be read.
    fn read(&self, path: &str, offset: u64, length: u64) -> impl Future<Output = Result<Vec<u8>, String>>;
}

/// One file's bytes, whole in memory (a bundled test model, a GGUF file given by hand).
pub struct InMemory {
    path: String,
    bytes: Vec<u8>,
}

impl InMemory {
    pub fn new(path: impl Into<String>, bytes: Vec<u8>) -> Self {
        InMemory { path: path.into(), bytes }
    }

    /// The file as the loader lists it.
    pub fn file(&self) -> WeightFile {
        WeightFile { path: self.path.clone(), size: self.bytes.len() as u64 }
    }
}

impl ReadRange for InMemory {
    async fn read(&self, path: &str, offset: u64, length: u64) -> Result<Vec<u8>, String> {
        let range = usize::try_from(offset).ok().zip(usize::try_from(offset + length).ok());
        match range.and_then(|(start, end)| self.bytes.get(start..end)) {
            Some(bytes) if path == self.path => Ok(bytes.to_vec()),
            _ => Err(format!("{path} has no bytes {offset}..{}", offset + length)),
        }
    }
}

/// One weight file of a model, as its source lists it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct WeightFile {
    pub path: String,
    pub size: u64,
}

/// Weight files read through `R`, a window at a time.
pub struct StreamedWeights<R> {
    files: Vec<FetchedFile>,
    reader: R,
    /// The most bytes held at once (over all files), for the load's report.
    peak_held: std::cell::Cell<u64>,
}

impl StreamedWeights<InMemory> {
    /// One file whole in memory.
    pub fn in_memory(path: impl Into<String>, bytes: Vec<u8>) -> Self {
        let reader = InMemory::new(path, bytes);
        Self::new(vec![reader.file()], reader)
    }
}

impl<R: ReadRange> StreamedWeights<R> {
    pub fn new(files: Vec<WeightFile>, reader: R) -> Self {
        let files = files.into_iter().map(|f| FetchedFile { name: f.path, size: f.size, windows: Windows::default() });
        Self { files: files.collect(), reader, peak_held: std::cell::Cell::new(0) }
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
        let bytes = self.reader.read(&file.name, start, end - start).await?;
        if bytes.len() as u64 != end - start {
            return Err(format!("reading {} gave {} bytes where {} were asked", file.name, bytes.len(), end - start));
        }
        file.windows.insert(start, bytes);
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
