//! The agent on a model: one implementation for the browser (the offscreen document's wasm) and
//! the terminal (`hearth agent`).
//!
//! - [`engine`]: the one door: [`Engine`] loads a model from any source of bytes, answers a
//!   request ([`Engine::reply`], planned in one place: [`Engine::plan`]), runs an agent's steps
//!   ([`Engine::task`]) and probes the call constraint ([`Engine::probe`]).
//! - [`loading`]: a model built from its files (decoder, parts, vision tower, assistant) the one
//!   way for every source: the browser's model store, bytes given whole, files on disk.
//! - [`parts`]: a model's config, tokenizer and chat template, assembled one way from a folder's
//!   files or a GGUF file's metadata.
//! - [`shared`]: the loaded model as chat replies and agent tasks share it (one session, one
//!   generation at a time, a KV cache per conversation).
//! - [`decoding`]: how one generation decodes (sampler, call constraint, drafts), set up in one
//!   place for every caller.
//! - [`generation`]: an agent step's tokens as a stream, ended by the step's stops and held to
//!   the tools' call grammar.
//! - [`images`]: a step's screenshots as the model's soft tokens.
//! - [`task`]: an agent for a conversation, and the model behind its steps (Burn, or the
//!   scripted test model).

/// Tool calls held to the offered tools' syntax while they are sampled: the decode loops'
/// [`hearth_model::decode::TokenConstraint`].
pub mod constrain;
pub mod decoding;
pub mod engine;
pub mod generation;
/// A step's screenshots decoded, encoded by the vision tower (kept for the next steps) and put
/// at the prompt's image placeholders.
pub mod images;
pub mod loading;
/// Files on disk as a source of [`loading`] (the terminal's).
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
pub mod parts;
/// The tests' probe of the call constraint: a call decoded with it and without it, judged by the
/// agent's parser and validator.
pub mod probe;
/// The model crate's results and failures as protocol messages (the command line prints them too).
pub mod reports;
pub mod shared;
pub mod task;

pub use decoding::{Decoding, MAX_DRAFT};
pub use engine::{CHAT_CONVERSATION, ChatPrompt, Engine, Host, Plan, Reply, ReplyPrompt};
pub use parts::{ModelParts, PartsError, TemplateSource};
pub use shared::SharedModel;
pub use task::{TaskModel, new_agent, tab_conversation};

#[cfg(all(test, not(target_arch = "wasm32")))]
mod real_model_tests;
