//! Burn compute for Hearth: the Gemma decoder and what it needs from the device.
//!
//! - [`gpu`]: brings up Burn's wgpu runtime (the browser's WebGPU in wasm, Vulkan/Metal/DX12
//!   natively) and describes the adapter.
//! - [`self_test`]: a computation whose answer is known, run on the device at start-up so that a
//!   broken driver is caught before the user waits for a model.
//! - [`config`] → [`gemma`] → [`cache`]: the model, as the spec reads: configuration, layers,
//!   forward pass, KV cache.
//! - [`fused`]: element-wise chains as single kernels: RMSNorm, residual add + norm, the
//!   attention softmax, the GELU gate, keys/values/queries normed and rotated into the cache
//!   (fewer dispatches per token).
//! - [`attention`]: a decoded token's whole attention in one kernel.
//! - [`dispatches`]: kernel launches counted by name (for the benchmark).
//! - [`affine`]: 4- and 8-bit matrices kept packed on the device and the fused
//!   dequantize-multiply kernel.
//! - [`constrain`]: tool calls held to the offered tools' syntax while they are sampled.
//! - [`block_table`]: a large lookup table (Gemma 4's per-layer embeddings) kept on the device in
//!   its stored GGUF blocks, rows decoded by a kernel when looked up.

pub mod affine;
pub mod attention;
pub mod block_table;
pub mod cache;
pub mod config;
pub mod constrain;
#[cfg(not(target_family = "wasm"))]
pub mod dispatches;
pub mod fused;
pub mod gemma;
pub mod generate;
pub mod gpu;
#[cfg(not(target_family = "wasm"))]
pub mod model_dir;
pub mod sampling;
pub mod self_test;
pub mod session;
pub mod tokenizer;

pub use cache::{CONTEXT_SIZES, CacheOptions, DeviceMemory, KvCache};
pub use config::TextConfig;
pub use gemma::{Gemma, GemmaLoader, ModelError, WeightBytes};
pub use gpu::{Gpu, GpuError};
pub use sampling::{Sampler, SamplingOptions};
pub use session::{PrefillStats, Session};
