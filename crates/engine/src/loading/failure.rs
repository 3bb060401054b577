//! Why a model did not load, as the engine reports it: damage (reinstall) or a model Hearth
//! cannot run (report it).

/// Why a model did not load: its bytes are damaged (reinstall it), or it is a well-formed file of
/// a model Hearth cannot run (say which, and why, to report).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct LoadFailure {
    pub damaged: bool,
    pub message: String,
}

impl LoadFailure {
    pub fn damaged(message: impl Into<String>) -> Self {
        LoadFailure { damaged: true, message: message.into() }
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        LoadFailure { damaged: false, message: message.into() }
    }
}

/// Reading the bytes failed: the store is damaged (its own failure is reported instead when it
/// knows more).
impl From<String> for LoadFailure {
    fn from(message: String) -> Self {
        LoadFailure::damaged(message)
    }
}

impl From<hearth_weights::WeightsError> for LoadFailure {
    fn from(e: hearth_weights::WeightsError) -> Self {
        LoadFailure { damaged: e.is_damage(), message: e.to_string() }
    }
}

impl From<hearth_model::ModelError> for LoadFailure {
    fn from(e: hearth_model::ModelError) -> Self {
        let damaged = matches!(&e, hearth_model::ModelError::Weights(w) if w.is_damage());
        LoadFailure { damaged, message: e.to_string() }
    }
}
