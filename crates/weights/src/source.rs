//! Where the bytes come from: a file (native) or a buffer (tests, small models in the browser).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

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
