//! Burn compute for Hearth: the Gemma decoder and what it needs from the device.
//!
//! - [`gpu`]: brings up Burn's wgpu runtime (the browser's WebGPU in wasm, Vulkan/Metal/DX12
//!   natively) and describes the adapter.
//! - [`self_test`]: a computation whose answer is known, run on the device at start-up so that a
//!   broken driver is caught before the user waits for a model.
//! - [`config`] → [`gemma`] → [`cache`]: the model, as the spec reads: configuration, layers,
//!   forward pass, KV cache; [`step_recording`]: the one-token step recorded once and replayed per
//!   token; [`error`]: the model's error.
//! - [`drafter`]: Gemma 4's assistant, which drafts tokens from the main model's hidden state and
//!   keys and values for speculative decoding.
//! - [`decode`]: what every decode loop shares (options, the result, the token constraint a loop
//!   is held to, choosing and reading tokens) and the plain loop's token after token with the
//!   readback a step behind; [`generate`]: the entry, plain or drafting.
//! - [`drafting`]: what a generation drafts with and what drafting did.
//! - [`speculative`]: speculative decoding: drafts (the assistant's, or a lookup's) verified in
//!   one chunk, the accepted prefix kept.
//! - [`vision`] and [`audio`]: what an image and a sound become before the decoder takes them.
//! - [`warnings`]: where the model's warnings go (the program names the sink).
//!
//! The model knows no chat syntax: the tool-call grammar a generation is held to is the engine's
//! (`hearth_engine::constrain`), behind [`decode::TokenConstraint`].
//!
//! The kernels (packed matrices, fused element-wise chains, decode attention, the per-layer
//! table, the logit mask) are [`hearth_kernels`]'s.

pub mod audio;
pub mod cache;
pub mod config;
pub mod decode;
pub mod drafter;
pub mod drafting;
pub mod error;
pub mod gemma;
pub mod generate;
pub mod gpu;
#[cfg(not(target_family = "wasm"))]
pub mod model_dir;
pub mod sampling;
pub mod self_test;
pub mod session;
pub mod speculative;
pub mod step_recording;
pub mod tokenizer;
mod tower_weights;
pub mod vision;
pub mod warnings;

pub use cache::{CONTEXT_SIZES, CacheOptions, DeviceMemory, KvCache};
pub use config::TextConfig;
pub use error::ModelError;
pub use gemma::{Forwarded, Gemma, GemmaLoader, Input, Output, SoftTokens, WeightBytes};
pub use gpu::{Gpu, GpuError};
pub use sampling::{Sampler, SamplingOptions};
pub use session::{PrefillStats, PromptImage, PromptImages, Session};
pub use step_recording::RecordingStatus;
