//! Loading from bytes that are fetched as they are needed (the browser's model store, a file the
//! user chose): the headers grown until the parsers have them ([`open_headers`]), then the
//! decoder step by step, each step's bytes fetched first ([`GemmaLoader::load_with`] natively,
//! [`GemmaLoader::load_with_async`] in the browser). [`Gemma::load`] is the same driver with
//! nothing to fetch.

use burn::tensor::{Device, Tensor};
use hearth_weights::{ByteSource, Checkpoint, FileRange, GgufFile, WeightsError, WindowedSource, Windows};

use super::{Gemma, GemmaLoader, ModelError};

/// A file read in windows fetched by the caller: its name (what [`WeightsError::NotFetched`]
/// names), its size, and the windows fetched so far.
#[derive(Clone)]
pub struct FetchedFile {
    pub name: String,
    pub size: u64,
    pub windows: Windows,
}

impl FetchedFile {
    fn source(&self) -> Box<dyn ByteSource> {
        Box::new(WindowedSource::new(self.name.clone(), self.size, self.windows.clone()))
    }
}

/// Why [`open_headers`] found no checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError<E> {
    /// The caller's fetch failed.
    #[error("{0}")]
    Fetch(E),
    #[error("the parser asked for an unknown weight file")]
    UnknownFile,
    #[error("the header of {name} asks for bytes it does not have")]
    BeyondFile { name: String },
    #[error("its header is larger than {} MiB, more than any Gemma's: it is damaged", .max >> 20)]
    TooLarge { max: u64 },
    /// The header is there, and wrong.
    #[error(transparent)]
    Weights(WeightsError),
}

/// How much of each file is fetched first for its header (at most, and never more than a 32nd
/// of the file, nor less than 64 KiB); more is fetched when the header is longer (a GGUF file's
/// metadata holds the whole tokenizer: about 10 MB for Gemma 4).
const HEADER_GUESS: u64 = 1 << 20;

fn header_guess(size: u64) -> u64 {
    (size / 32).clamp(64 << 10, HEADER_GUESS).min(size)
}

/// The checkpoint of `files` (one GGUF file, or safetensors files) from their headers alone:
/// each file's first bytes are fetched, then, while a parser asks for bytes not yet there, the
/// file's start again, at least twice as much (never more than `max_header`, when given).
/// `fetch(file, start, end)` makes bytes `start..end` of `files[file]` readable in its windows;
/// the fetched bytes stay there (the caller drops them).
pub async fn open_headers<E, F>(
    files: &[FetchedFile],
    max_header: Option<u64>,
    mut fetch: impl FnMut(usize, u64, u64) -> F,
) -> Result<Checkpoint, HeaderError<E>>
where
    F: Future<Output = Result<(), E>>,
{
    for (index, file) in files.iter().enumerate() {
        fetch(index, 0, header_guess(file.size)).await.map_err(HeaderError::Fetch)?;
    }
    let sources = || files.iter().map(FetchedFile::source).collect::<Vec<_>>();
    let gguf = files.len() == 1 && GgufFile::sniff(files[0].source().as_mut());
    loop {
        let opened = match gguf {
            true => Checkpoint::from_gguf(sources().remove(0)),
            false => Checkpoint::from_sources(sources()),
        };
        match opened {
            Ok(checkpoint) => return Ok(checkpoint),
            Err(WeightsError::NotFetched { file, offset, len }) => {
                let index = files.iter().position(|f| f.name == file).ok_or(HeaderError::UnknownFile)?;
                let file = &files[index];
                let have = file.windows.prefix_len();
                let want = (offset + len).max(have * 2).min(file.size);
                if want <= have {
                    return Err(HeaderError::BeyondFile { name: file.name.clone() });
                }
                if let Some(max) = max_header
                    && want > max
                {
                    return Err(HeaderError::TooLarge { max });
                }
                file.windows.clear();
                fetch(index, 0, want).await.map_err(HeaderError::Fetch)?;
            }
            Err(err) => return Err(HeaderError::Weights(err)),
        }
    }
}

/// A load step about to run: where it stands in the load, and the bytes it reads.
pub struct LoadStep<'a> {
    loader: &'a GemmaLoader,
    checkpoint: &'a Checkpoint,
}

impl LoadStep<'_> {
    /// Steps done before this one, and steps in all.
    pub fn progress(&self) -> (usize, usize) {
        self.loader.progress()
    }

    /// The byte ranges this step reads: what to fetch before it runs.
    pub fn reads(&self) -> Result<Vec<FileRange>, ModelError> {
        self.loader.next_reads(self.checkpoint).unwrap_or_else(|| Ok(Vec::new()))
    }
}

impl GemmaLoader {
    fn is_done(&self) -> bool {
        let (done, total) = self.progress();
        done >= total
    }

    /// Runs every step, `fetch(step)` before each (to report progress, and to make the bytes the
    /// step reads readable), then returns the model.
    pub fn load_with<E: From<ModelError>>(
        mut self,
        checkpoint: &mut Checkpoint,
        device: &Device,
        mut fetch: impl FnMut(LoadStep<'_>) -> Result<(), E>,
    ) -> Result<Gemma, E> {
        while !self.is_done() {
            fetch(LoadStep { loader: &self, checkpoint: &*checkpoint })?;
            self.step(checkpoint, device)?;
        }
        Ok(self.finish(device)?)
    }

    /// As [`load_with`](Self::load_with) with an asynchronous fetch (the browser's). After each
    /// step it waits for the device to take the step's uploads before the next step's bytes
    /// arrive: until a submission, their staged copies stay in (wasm) memory.
    pub async fn load_with_async<E: From<ModelError>, F: Future<Output = Result<(), E>>>(
        mut self,
        checkpoint: &mut Checkpoint,
        device: &Device,
        mut fetch: impl FnMut(LoadStep<'_>) -> F,
    ) -> Result<Gemma, E> {
        while !self.is_done() {
            fetch(LoadStep { loader: &self, checkpoint: &*checkpoint }).await?;
            self.step(checkpoint, device)?;
            let _ = Tensor::<1>::zeros([1], device).into_data_async().await;
        }
        Ok(self.finish(device)?)
    }
}
