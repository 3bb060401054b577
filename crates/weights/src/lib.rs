//! Weight files, bytes to host tensors. The first step of the data path: nothing here knows about
//! Burn or the GPU, so loaders can be tested on corrupt files quickly and reused natively and in wasm.
//!
//! - [`safetensors`]: the header of a `.safetensors` file, parsed and validated on its own so the
//!   tensors can then be read one at a time (the whole file is never in memory).
//! - [`gguf`]: llama.cpp's GGUF file (header, metadata, tensor table), with [`quant`] for its
//!   block formats (dequantized to f32) and [`gguf_names`] for Hugging Face tensor names.
//! - [`gguf_affine`]: GGUF's 4- to 8-bit blocks repacked into MLX's affine layout, so one set of
//!   kernels multiplies both without widening to f32.
//! - [`mlx`]: MLX affine quantization (codes, scales and biases per group), as mlx-community ships
//!   Gemma 4.
//! - [`checkpoint`]: a model folder (`model.safetensors` or sharded with
//!   `model.safetensors.index.json`) or one GGUF file, read tensor by tensor as f32 under Hugging
//!   Face's tensor names.

pub mod checkpoint;
pub mod gguf;
pub mod gguf_affine;
pub mod gguf_names;
pub mod mlx;
pub mod quant;
pub mod safetensors;
mod source;

impl WeightsError {
    /// Whether the bytes themselves are wrong (a damaged or truncated file: reinstall it), as
    /// opposed to a well-formed file of something Hearth cannot read.
    pub fn is_damage(&self) -> bool {
        match self {
            WeightsError::Io { .. }
            | WeightsError::Corrupt { .. }
            | WeightsError::Truncated { .. }
            | WeightsError::Quantization { .. }
            | WeightsError::NotFetched { .. } => true,
            WeightsError::Gguf(e) => matches!(
                e,
                GgufError::BadMagic { .. }
                    | GgufError::Truncated { .. }
                    | GgufError::BadShape { .. }
                    | GgufError::Corrupt { .. }
            ),
            _ => false,
        }
    }
}

pub use checkpoint::{BlockRows, Checkpoint, FileRange, HalfFormat, HalfTensor, HostTensor};
pub use gguf::{GgufError, GgufFile, GgufTensor, MetadataValue};
pub use mlx::{AffineParams, AffineTensor, Quantization};
pub use quant::GgmlType;
pub use safetensors::{DType, Header, TensorInfo};
pub use source::{ByteSource, FileSource, MemorySource, WindowedSource, Windows};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{file} is not a valid safetensors file: {reason}. Download it again.")]
    Corrupt { file: String, reason: String },
    #[error("{file} is truncated: it has {actual} bytes but its header describes {expected}. Download it again.")]
    Truncated { file: String, expected: u64, actual: u64 },
    #[error("tensor `{name}` is missing from the checkpoint")]
    Missing { name: String },
    #[error("tensor `{name}` is stored as {dtype:?}, which cannot be read as f32")]
    UnsupportedDType { name: String, dtype: DType },
    #[error("{path} has neither model.safetensors nor model.safetensors.index.json")]
    NoWeights { path: PathBuf },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("`{name}` is not valid MLX quantized data: {reason}. Download the model again.")]
    Quantization { name: String, reason: String },
    #[error("the model uses `{mode}` quantization; Hearth reads MLX affine (4- or 8-bit) and GGUF models")]
    UnsupportedQuantization { mode: String },
    /// Only from a [`WindowedSource`]: the caller fetches these bytes and reads again.
    #[error("bytes {offset}..+{len} of {file} have not been fetched yet")]
    NotFetched { file: String, offset: u64, len: u64 },
    #[error("tensor `{name}` is in a GGUF file: its raw bytes are ggml blocks, not a safetensors dtype")]
    NotSafetensors { name: String },
}
