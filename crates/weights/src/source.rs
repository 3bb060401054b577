//! Where the bytes come from: a file (native), a buffer (tests, small models in the browser), or
//! windows of a file fetched piece by piece (models in the browser's Cache Storage).

use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::WeightsError;

/// Random access to a weight file's bytes.
pub trait ByteSource {
    /// A name for error messages.
    fn name(&self) -> String;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buffer` with the bytes at `offset` (exactly `buffer.len()` of them).
    fn read_into(&mut self, offset: u64, buffer: &mut [u8]) -> Result<(), WeightsError>;
    /// Reads exactly `len` bytes at `offset`.
    fn read_at(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, WeightsError> {
        let mut buffer = vec![0; len];
        self.read_into(offset, &mut buffer)?;
        Ok(buffer)
    }
}

pub struct FileSource {
    path: PathBuf,
    file: File,
    len: u64,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        let io = |source| WeightsError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(Self { path: path.to_path_buf(), file, len })
    }
}

impl ByteSource for FileSource {
    fn name(&self) -> String {
        self.path.display().to_string()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_into(&mut self, offset: u64, buffer: &mut [u8]) -> Result<(), WeightsError> {
        let io = |source| WeightsError::Io { path: self.path.clone(), source };
        self.file.seek(SeekFrom::Start(offset)).map_err(io)?;
        self.file.read_exact(buffer).map_err(io)
    }
}

/// A whole file already in memory.
pub struct MemorySource {
    name: String,
    bytes: Vec<u8>,
}

impl MemorySource {
    pub fn new(name: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self { name: name.into(), bytes }
    }
}

impl ByteSource for MemorySource {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_into(&mut self, offset: u64, buffer: &mut [u8]) -> Result<(), WeightsError> {
        let len = buffer.len();
        let start = usize::try_from(offset).ok().filter(|s| s.checked_add(len).is_some_and(|e| e <= self.bytes.len()));
        match start {
            Some(start) => {
                buffer.copy_from_slice(&self.bytes[start..start + len]);
                Ok(())
            }
            None => Err(WeightsError::Truncated {
                file: self.name.clone(),
                expected: offset + len as u64,
                actual: self.bytes.len() as u64,
            }),
        }
    }
}

/// The windows of a [`WindowedSource`] that have arrived: `(offset, bytes)`, shared with whoever
/// fetches them (the browser engine reads model files from Cache Storage asynchronously, while
/// the loaders read synchronously).
#[derive(Clone, Default)]
pub struct Windows(Rc<RefCell<Vec<Window>>>);

/// Bytes of a file and the offset they start at.
type Window = (u64, Vec<u8>);

impl Windows {
    /// Makes `bytes`, which lie at `offset` in the file, readable.
    pub fn insert(&self, offset: u64, bytes: Vec<u8>) {
        self.0.borrow_mut().push((offset, bytes));
    }

    /// Forgets every window: what a load step read is dropped before the next one is fetched.
    pub fn clear(&self) {
        self.0.borrow_mut().clear();
    }

    /// Bytes held now.
    pub fn held_bytes(&self) -> u64 {
        self.0.borrow().iter().map(|(_, bytes)| bytes.len() as u64).sum()
    }

    /// The end of the window that starts at 0, if any: how much of a header has arrived.
    pub fn prefix_len(&self) -> u64 {
        self.0.borrow().iter().filter(|(offset, _)| *offset == 0).map(|(_, b)| b.len() as u64).max().unwrap_or(0)
    }
}

/// A file of known length whose bytes arrive in windows fetched by someone else. Reading bytes
/// outside every window is [`WeightsError::NotFetched`]: the caller fetches them and tries again,
/// so a model is loaded without ever holding its whole file.
pub struct WindowedSource {
    name: String,
    len: u64,
    windows: Windows,
}

impl WindowedSource {
    pub fn new(name: impl Into<String>, len: u64, windows: Windows) -> Self {
        Self { name: name.into(), len, windows }
    }
}

impl ByteSource for WindowedSource {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_into(&mut self, offset: u64, buffer: &mut [u8]) -> Result<(), WeightsError> {
        let end = offset.saturating_add(buffer.len() as u64);
        if end > self.len {
            return Err(WeightsError::Truncated { file: self.name.clone(), expected: end, actual: self.len });
        }
        let windows = self.windows.0.borrow();
        let covering = windows.iter().find(|(start, bytes)| *start <= offset && end <= start + bytes.len() as u64);
        match covering {
            Some((start, bytes)) => {
                let from = (offset - start) as usize;
                buffer.copy_from_slice(&bytes[from..from + buffer.len()]);
                Ok(())
            }
            None => Err(WeightsError::NotFetched { file: self.name.clone(), offset, len: buffer.len() as u64 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windowed_reads_come_from_one_window_or_ask_for_the_bytes() {
        let windows = Windows::default();
        let mut source = WindowedSource::new("m.safetensors", 100, windows.clone());
        assert!(matches!(source.read_at(10, 4), Err(WeightsError::NotFetched { offset: 10, len: 4, .. })));
        windows.insert(8, (8..20).collect());
        assert_eq!(source.read_at(10, 4).unwrap(), [10, 11, 12, 13]);
        assert!(matches!(source.read_at(18, 4), Err(WeightsError::NotFetched { .. })), "straddles the window end");
        assert!(matches!(source.read_at(98, 4), Err(WeightsError::Truncated { .. })), "past the file's end");
        assert_eq!(windows.held_bytes(), 12);
        windows.clear();
        assert!(matches!(source.read_at(10, 4), Err(WeightsError::NotFetched { .. })));
    }
}
