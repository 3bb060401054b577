//! A model on disk: a folder as Hugging Face ships it (`config.json`, weights as
//! `model.safetensors` or shards, `tokenizer.json`, a chat template), or one GGUF file whose
//! metadata holds the configuration, the tokenizer and possibly a chat template.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hearth_weights::{Checkpoint, MetadataValue};

use crate::audio::{AudioConfig, AudioTower, has_audio_weights};
use crate::config::TextConfig;
use crate::gemma::{Gemma, ModelError};
use crate::media::{MediaMarkers, Medium};
use crate::tokenizer::{Tokenizer, TokenizerError};
use crate::vision::{VisionConfig, VisionTower, has_vision_weights};

#[derive(Debug, thiserror::Error)]
pub enum ModelDirError {
    #[error("{path} does not exist or is not a folder")]
    NotADirectory { path: PathBuf },
    #[error("{path} does not exist or is neither a model folder nor a GGUF file")]
    NotAModel { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}'s vocabulary has no image tokens (<|image|>, <|image>, <image|>): it is not a Gemma 4 that sees")]
    NoImageTokens { path: PathBuf },
    #[error("{path}'s vocabulary has no audio tokens (<|audio|>, <|audio>, <audio|>): it is not a Gemma 4 that hears")]
    NoAudioTokens { path: PathBuf },
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

/// A model folder or GGUF file with its weights' headers read (once: a GGUF's metadata holds the
/// 262k-piece vocabulary).
pub struct ModelFiles {
    path: PathBuf,
    checkpoint: Checkpoint,
    /// A folder's own tokenizer.json, read once when a token id is reconciled with it
    /// (`None`: a GGUF file, or a folder without one).
    own_tokenizer: std::sync::OnceLock<Option<Tokenizer>>,
}

impl ModelFiles {
    /// Opens `path`: a folder, or a file (GGUF, or a lone `.safetensors` next to a config.json).
    pub fn open(path: &Path) -> Result<Self, ModelDirError> {
        if !path.exists() {
            return Err(ModelDirError::NotAModel { path: path.to_path_buf() });
        }
        let checkpoint = Checkpoint::open(path).map_err(ModelError::from)?;
        Ok(ModelFiles { path: path.to_path_buf(), checkpoint, own_tokenizer: std::sync::OnceLock::new() })
    }

    pub fn is_gguf(&self) -> bool {
        self.checkpoint.gguf().is_some()
    }

    /// The folder's config.json (+ generation_config.json), or the GGUF metadata's. Its `<bos>`
    /// and stop ids are config.json's: where the tokenizer is chosen (`ModelParts` in the engine)
    /// they become the tokenizer's where the two differ ([`TextConfig::reconcile_token_ids`]).
    pub fn config(&self) -> Result<TextConfig, ModelDirError> {
        match self.checkpoint.gguf() {
            Some(gguf) => Ok(TextConfig::from_gguf(gguf).map_err(ModelError::from)?),
            None => load_config(self.folder()),
        }
    }

    /// A folder's own tokenizer.json, when it has one that reads (the towers' image and audio
    /// tokens become its ids where config.json's differ).
    fn own_tokenizer(&self) -> Option<&Tokenizer> {
        self.own_tokenizer
            .get_or_init(|| match self.is_gguf() {
                true => None,
                false => load_tokenizer(self.folder()).ok(),
            })
            .as_ref()
    }

    /// The folder's tokenizer.json, or the tokenizer the GGUF metadata describes.
    pub fn tokenizer(&self) -> Result<Tokenizer, ModelDirError> {
        match self.checkpoint.gguf() {
            Some(gguf) => Ok(Tokenizer::from_gguf(gguf)?),
            None => load_tokenizer(self.folder()),
        }
    }

    /// A GGUF file's own chat template (`tokenizer.chat_template`), if it has one.
    pub fn gguf_chat_template(&self) -> Option<&str> {
        self.checkpoint.gguf()?.get("tokenizer.chat_template").and_then(MetadataValue::as_str)
    }

    /// The folder or file opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder holding config.json and the chat template (the path itself, or a file's parent).
    pub fn folder(&self) -> &Path {
        if self.path.is_file() { self.path.parent().unwrap_or(Path::new(".")) } else { &self.path }
    }

    /// The vision tower config.json describes, if the folder's weights carry it (`None` for a
    /// text-only model, and for a GGUF file, whose tower is a separate projector file).
    pub fn vision_config(&self) -> Result<Option<VisionConfig>, ModelDirError> {
        if !has_vision_weights(&self.checkpoint) {
            return Ok(None);
        }
        self.vision_config_json()
    }

    /// Loads the vision tower onto `device` when the model has one ([`Self::vision_config`]).
    pub fn load_vision(&mut self, device: &Device) -> Result<Option<VisionTower>, ModelDirError> {
        let Some(config) = self.vision_config()? else { return Ok(None) };
        Ok(Some(VisionTower::load(config, &mut self.checkpoint, device)?))
    }

    /// Loads a llama.cpp projector file (`mmproj`) as this model's vision tower: its width must be
    /// the text model's, and the image tokens come from the model's vocabulary.
    pub fn load_projector(&self, projector: &Path, device: &Device) -> Result<VisionTower, ModelDirError> {
        let text = self.config()?;
        let tokens = match self.vision_config_json()? {
            Some(config) => config.tokens,
            None => MediaMarkers::from_vocabulary(Medium::Image, &self.tokenizer()?)
                .ok_or_else(|| ModelDirError::NoImageTokens { path: self.path.clone() })?,
        };
        let mut checkpoint = Checkpoint::open(projector).map_err(ModelError::from)?;
        let config = VisionConfig::from_mmproj(&checkpoint, text.hidden_size, tokens).map_err(ModelError::from)?;
        Ok(VisionTower::load(config, &mut checkpoint, device)?)
    }

    /// The audio tower config.json describes, if the folder's weights carry it (`None` for a
    /// model that does not hear, and for a GGUF file, whose towers are in a projector file).
    pub fn audio_config(&self) -> Result<Option<AudioConfig>, ModelDirError> {
        if !has_audio_weights(&self.checkpoint) {
            return Ok(None);
        }
        self.audio_config_json()
    }

    /// Loads the audio tower onto `device` when the model has one ([`Self::audio_config`]).
    pub fn load_audio(&mut self, device: &Device) -> Result<Option<AudioTower>, ModelDirError> {
        let Some(config) = self.audio_config()? else { return Ok(None) };
        Ok(Some(AudioTower::load(config, &mut self.checkpoint, device)?))
    }

    /// Loads the audio tower of a llama.cpp projector file (`mmproj`, which carries it beside
    /// the vision tower): `None` when the file has none. The audio tokens come from the model.
    pub fn load_audio_projector(&self, projector: &Path, device: &Device) -> Result<Option<AudioTower>, ModelDirError> {
        let text = self.config()?;
        let mut checkpoint = Checkpoint::open(projector).map_err(ModelError::from)?;
        if !has_audio_weights(&checkpoint) {
            return Ok(None);
        }
        let tokens = match self.audio_config_json()? {
            Some(config) => config.tokens,
            None => MediaMarkers::from_vocabulary(Medium::Clip, &self.tokenizer()?)
                .ok_or_else(|| ModelDirError::NoAudioTokens { path: self.path.clone() })?,
        };
        let Some(config) = AudioConfig::from_mmproj(&checkpoint, text.hidden_size, tokens).map_err(ModelError::from)?
        else {
            return Ok(None);
        };
        Ok(Some(AudioTower::load(config, &mut checkpoint, device)?))
    }

    /// config.json's audio tower, whether or not the weights carry it.
    fn audio_config_json(&self) -> Result<Option<AudioConfig>, ModelDirError> {
        let path = self.folder().join("config.json");
        if self.is_gguf() || !path.is_file() {
            return Ok(None);
        }
        let mut config = AudioConfig::from_json(&String::from_utf8_lossy(&read(&path)?)).map_err(ModelError::from)?;
        if let (Some(config), Some(tokenizer)) = (config.as_mut(), self.own_tokenizer()) {
            config.reconcile_tokens(tokenizer);
        }
        Ok(config)
    }

    /// config.json's vision tower, whether or not the weights carry it.
    fn vision_config_json(&self) -> Result<Option<VisionConfig>, ModelDirError> {
        let path = self.folder().join("config.json");
        if self.is_gguf() || !path.is_file() {
            return Ok(None);
        }
        let mut config = VisionConfig::from_json(&String::from_utf8_lossy(&read(&path)?)).map_err(ModelError::from)?;
        if let (Some(config), Some(tokenizer)) = (config.as_mut(), self.own_tokenizer()) {
            config.reconcile_tokens(tokenizer);
        }
        Ok(config)
    }

    /// Loads the decoder's weights onto `device`, tensor by tensor (dequantizing GGUF blocks to f32).
    pub fn load(mut self, device: &Device) -> Result<Gemma, ModelDirError> {
        let config = self.config()?;
        Ok(Gemma::load(config, &mut self.checkpoint, device)?)
    }
}

/// `config.json`, with the stop tokens of `generation_config.json` when it names any (else a
/// Gemma 4 stops on `<eos>`, `<turn|>` and `<|tool_response>`: [`TextConfig::from_json`]).
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

/// Loads the decoder's weights onto `device`, tensor by tensor, from a folder or a GGUF file.
pub fn load_model(path: &Path, device: &Device) -> Result<Gemma, ModelDirError> {
    ModelFiles::open(path)?.load(device)
}

/// A folder's `tokenizer.json`, or a `tokenizer.json` file itself.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer, ModelDirError> {
    if path.is_file() {
        return Ok(Tokenizer::from_bytes(&read(path)?)?);
    }
    check_dir(path)?;
    Ok(Tokenizer::from_bytes(&read(&path.join("tokenizer.json"))?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GEMMA4_STOP_IDS;

    #[test]
    fn stop_ids_come_from_generation_config_else_gemma4s_own() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-text");
        let dir = std::env::temp_dir().join(format!("hearth-stop-ids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(fixture.join("config.json"), dir.join("config.json")).unwrap();
        // config.json names eos 1 only; without generation_config.json Gemma 4's three apply.
        assert_eq!(load_config(&dir).unwrap().eos_token_ids, GEMMA4_STOP_IDS);
        std::fs::write(dir.join("generation_config.json"), r#"{"eos_token_id": [1, 106]}"#).unwrap();
        assert_eq!(load_config(&dir).unwrap().eos_token_ids, vec![1, 106]);
        std::fs::remove_dir_all(&dir).unwrap();
        // The fixture's own generation_config.json names eos 1.
        assert_eq!(load_config(&fixture).unwrap().eos_token_ids, vec![1]);
    }
}
