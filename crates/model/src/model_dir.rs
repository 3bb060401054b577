//! A model folder as Hugging Face ships it: `config.json`, weights (`model.safetensors` or shards),
//! `tokenizer.json`, and a chat template.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hearth_weights::Checkpoint;

use crate::config::TextConfig;
use crate::gemma::{Gemma, ModelError};
use crate::tokenizer::{Tokenizer, TokenizerError};

#[derive(Debug, thiserror::Error)]
pub enum ModelDirError {
    #[error("{path} does not exist or is not a folder")]
    NotADirectory { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

fn read(path: &Path) -> Result<Vec<u8>, ModelDirError> {
    std::fs::read(path).map_err(|source| ModelDirError::Io { path: path.to_path_buf(), source })
}

pub fn check_dir(dir: &Path) -> Result<(), ModelDirError> {
    if dir.is_dir() { Ok(()) } else { Err(ModelDirError::NotADirectory { path: dir.to_path_buf() }) }
}

/// `config.json`, with the stop tokens of `generation_config.json` when it has them (Gemma 4 -it
/// stops on `<eos>`, `<turn|>` and `<|tool_response>`, which only that file lists).
pub fn load_config(dir: &Path) -> Result<TextConfig, ModelDirError> {
    check_dir(dir)?;
    let json = read(&dir.join("config.json"))?;
    let mut config = TextConfig::from_json(&String::from_utf8_lossy(&json)).map_err(ModelError::from)?;
    let generation = dir.join("generation_config.json");
    if generation.is_file() {
        let text = String::from_utf8_lossy(&read(&generation)?).into_owned();
        config.apply_generation_config(&text).map_err(ModelError::from)?;
    }
    Ok(config)
}

/// Loads the decoder's weights onto `device`, tensor by tensor.
pub fn load_model(dir: &Path, device: &Device) -> Result<Gemma, ModelDirError> {
    let config = load_config(dir)?;
    let mut checkpoint = Checkpoint::open_dir(dir).map_err(ModelError::from)?;
    Ok(Gemma::load(config, &mut checkpoint, device)?)
}

pub fn load_tokenizer(dir: &Path) -> Result<Tokenizer, ModelDirError> {
    check_dir(dir)?;
    Ok(Tokenizer::from_bytes(&read(&dir.join("tokenizer.json"))?)?)
}
