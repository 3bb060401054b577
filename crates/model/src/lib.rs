//! Burn compute for Hearth: the Gemma decoder and what it needs from the device. Three rooms,
//! in the order a request's bytes go through them:
//!
//! - [`network`]: the networks as the spec reads them, configuration → layers → forward:
//!   [`config`] → [`gemma`] → [`cache`] (the KV cache); [`vision`] and [`audio`], what an image
//!   and a sound become before the decoder takes them (their towers share `tower_weights`; what
//!   both are in a prompt, [`media`]);
//!   [`drafter`], Gemma 4's assistant, which drafts tokens from the main model's hidden state.
//! - [`running`]: running them on a device: [`gpu`] brings up Burn's wgpu runtime (the browser's
//!   WebGPU in wasm, Vulkan/Metal/DX12 natively) and describes the adapter; [`self_test`], a
//!   computation whose answer is known, run at start-up so that a broken driver is caught before
//!   the user waits for a model; [`session`], the model and a KV cache that lives across calls;
//!   [`step_recording`], the one-token step recorded once and replayed per token; [`warnings`],
//!   where the model's warnings go (the program names the sink).
//! - [`decoding`]: tokens out: [`tokenizer`]; [`sampling`], the next token chosen on the device;
//!   [`decode`], what every decode loop shares (options, the result, the token constraint a loop
//!   is held to) and the plain loop with the readback a step behind; [`generate`], the entry,
//!   plain or drafting; [`drafting`], what a generation drafts with and what drafting did;
//!   [`speculative`], drafts verified in one chunk, the accepted prefix kept.
//!
//! [`error`] is the model's one error type; `model_dir` reads a model from disk (natively).
//! Each room's modules are also the crate's own names (`hearth_model::cache`, …).
//!
//! The model knows no chat syntax: the tool-call grammar a generation is held to is the engine's
//! (`hearth_engine::constrain`), behind [`decode::TokenConstraint`].
//!
//! The kernels (packed matrices, fused element-wise chains, decode attention, the per-layer
//! table, the logit mask) are [`hearth_kernels`]'s.

pub mod decoding;
pub mod error;
#[cfg(not(target_family = "wasm"))]
pub mod model_dir;
pub mod network;
pub mod running;

pub use decoding::{decode, drafting, generate, sampling, speculative, tokenizer};
pub(crate) use network::tower_weights;
pub use network::{audio, cache, config, drafter, gemma, media, vision};
pub use running::{gpu, self_test, session, step_recording, warnings};

pub use cache::{CONTEXT_SIZES, CacheOptions, DeviceMemory, KvCache};
pub use config::TextConfig;
pub use error::ModelError;
pub use gemma::{Forwarded, Gemma, GemmaLoader, Input, Output, SoftTokens, WeightBytes};
pub use gpu::{Gpu, GpuError};
pub use media::{MediaMarkers, Medium, PromptMedia, PromptMedium};
pub use sampling::{Sampler, SamplingOptions};
pub use session::{PrefillStats, Session};
pub use step_recording::RecordingStatus;
