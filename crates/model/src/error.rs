//! What can go wrong between a checkpoint and a token: the model's one error type.

use hearth_weights::WeightsError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("tensor `{name}` has shape {actual:?}, the config implies {expected:?}")]
    Shape { name: String, expected: Vec<usize>, actual: Vec<usize> },
    /// A caller of [`GemmaLoader`](crate::GemmaLoader) asked for the model before every step had run.
    #[error("the model was asked for after {done} of its {total} load steps; this is a bug in the loading code")]
    LoadIncomplete { done: usize, total: usize },
    #[error("token id {0} is outside the vocabulary")]
    TokenOutOfRange(u32),
    #[error("the prompt has {placeholders} image or audio placeholders but {rows} soft tokens were given")]
    SoftTokens { placeholders: usize, rows: usize },
    #[error("the image cannot be encoded: {0}")]
    Image(String),
    #[error("the sound cannot be encoded: {0}")]
    Clip(String),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "a token chosen on the GPU runs as a recorded step, which keeps no hidden state; this is a bug in the caller"
    )]
    ChosenHidden,
    #[error(
        "the conversation no longer fits the model's context ({0} tokens): clear the conversation (settings) and start again"
    )]
    ContextFull(usize),
    /// A verification was longer than the cache can rewind (a bug in the drafting loop).
    #[error(
        "the cache holds {held} positions and cannot go back to {wanted} exactly; this conversation's cache was cleared and will be recomputed"
    )]
    Rewind { held: usize, wanted: usize },
    /// A token chosen on the device was to be appended by a model whose lookups run on the host
    /// (a bug in the caller: `Gemma::steps_on_device` says which).
    #[error(
        "this model looks its tokens up on the host: a token chosen on the GPU must be read back before it is appended"
    )]
    HostLookups,
}
