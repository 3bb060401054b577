//! A model's parts besides its weights (config, tokenizer, chat template), assembled one way for
//! the browser, which reads the files from its model store, and the terminal, which reads them
//! from disk.

use hearth_chat::{ChatError, ChatTemplate};
use hearth_model::TextConfig;
use hearth_model::config::{ConfigError, Family};
use hearth_model::tokenizer::{Tokenizer, TokenizerError};
use hearth_weights::{Checkpoint, MetadataValue};

/// Why a model's config, tokenizer or template cannot be used (the model's fault, not damage).
#[derive(Debug, thiserror::Error)]
pub enum PartsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Template(#[from] ChatError),
    #[error("this GGUF file has no chat template (tokenizer.chat_template)")]
    NoGgufTemplate,
}

/// What a model needs besides its weights.
pub struct ModelParts {
    pub config: TextConfig,
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
}

/// Where the chat template's text comes from.
pub enum TemplateSource<'a> {
    /// A Hugging Face folder: `chat_template.jinja` (it wins, as in transformers), else the
    /// `chat_template` entry of `tokenizer_config.json` (which may also name the BOS token).
    Folder { chat_template_jinja: Option<&'a str>, tokenizer_config_json: Option<&'a str> },
    /// A GGUF file: a template the user gave (it replaces the file's), else the file's own.
    Gguf { given: Option<&'a str>, own: Option<&'a str> },
}

impl<'a> TemplateSource<'a> {
    /// A GGUF checkpoint's own template, replaced by `given` when that is not empty.
    pub fn gguf(checkpoint: &'a Checkpoint, given: Option<&'a str>) -> Self {
        let own = checkpoint.gguf().and_then(|g| g.get("tokenizer.chat_template")).and_then(MetadataValue::as_str);
        TemplateSource::Gguf { given: given.filter(|t| !t.is_empty()), own }
    }
}

impl ModelParts {
    /// The one assembly: the template is compiled with the model's BOS token, and a Gemma 4 model
    /// whose own template cannot declare tools renders conversations with tools through the
    /// official Gemma 4 template, so the agent's tools reach the model (other families keep their
    /// own markup).
    pub fn assemble(config: TextConfig, tokenizer: Tokenizer, source: TemplateSource) -> Result<Self, PartsError> {
        let bos = tokenizer.decode(&[config.bos_token_id])?;
        let template = match source {
            TemplateSource::Folder { chat_template_jinja, tokenizer_config_json } => {
                ChatTemplate::from_parts(chat_template_jinja, tokenizer_config_json, &bos)?
            }
            TemplateSource::Gguf { given, own } => {
                ChatTemplate::from_str(given.or(own).ok_or(PartsError::NoGgufTemplate)?, &bos)?
            }
        };
        let template = match config.family {
            Family::Gemma4 => template.or_gemma4_for_tools()?,
            Family::Gemma3 => template,
        };
        Ok(ModelParts { config, tokenizer, template })
    }

    /// A folder's files as texts: config.json (+ generation_config.json), tokenizer.json, the
    /// template's sources.
    pub fn from_folder_files(
        config_json: &str,
        generation_config_json: Option<&str>,
        tokenizer_json: &[u8],
        template: TemplateSource,
    ) -> Result<Self, PartsError> {
        let mut config = TextConfig::from_json(config_json)?;
        if let Some(generation) = generation_config_json {
            config.apply_generation_config(generation)?;
        }
        let tokenizer = Tokenizer::from_bytes(tokenizer_json)?;
        // Where config.json and the tokenizer disagree on `<bos>` or a stop id, the tokenizer wins.
        config.reconcile_token_ids(&tokenizer);
        Self::assemble(config, tokenizer, template)
    }

    /// A GGUF file: config and tokenizer from its metadata; `chat_template` and `tokenizer`
    /// replace its own when given.
    pub fn from_gguf(
        checkpoint: &Checkpoint,
        chat_template: Option<&str>,
        tokenizer: Option<Tokenizer>,
    ) -> Result<Self, PartsError> {
        let gguf = checkpoint.gguf().ok_or(PartsError::NoGgufTemplate)?;
        let config = TextConfig::from_gguf(gguf)?;
        let tokenizer = match tokenizer {
            Some(tokenizer) => tokenizer,
            None => Tokenizer::from_gguf(gguf)?,
        };
        Self::assemble(config, tokenizer, TemplateSource::gguf(checkpoint, chat_template))
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod on_disk {
    use std::path::Path;

    use hearth_model::model_dir::{ModelDirError, ModelFiles, load_tokenizer};

    use super::*;

    /// Why a model on disk cannot be assembled.
    #[derive(Debug, thiserror::Error)]
    pub enum DiskPartsError {
        #[error(transparent)]
        Files(#[from] ModelDirError),
        #[error(transparent)]
        Parts(#[from] PartsError),
        #[error("cannot read {path}: {source}")]
        Io { path: std::path::PathBuf, source: std::io::Error },
    }

    impl ModelParts {
        /// The parts of a model on disk (a folder or a GGUF file), with `tokenizer` (a
        /// tokenizer.json) in place of the model's own when given.
        pub fn read(files: &ModelFiles, tokenizer: Option<&Path>) -> Result<Self, DiskPartsError> {
            let mut config = files.config()?;
            let tokenizer = match tokenizer {
                Some(path) => load_tokenizer(path)?,
                None => files.tokenizer()?,
            };
            if !files.is_gguf() {
                // Where config.json and the tokenizer disagree on `<bos>` or a stop id, the
                // tokenizer (the one given, else the folder's) wins.
                config.reconcile_token_ids(&tokenizer);
            }
            if files.is_gguf() {
                let source = TemplateSource::Gguf { given: None, own: files.gguf_chat_template() };
                return Ok(Self::assemble(config, tokenizer, source)?);
            }
            let read = |name: &str| -> Result<Option<String>, DiskPartsError> {
                let path = files.folder().join(name);
                if !path.is_file() {
                    return Ok(None);
                }
                std::fs::read_to_string(&path).map(Some).map_err(|source| DiskPartsError::Io { path, source })
            };
            let (jinja, tokenizer_config) = (read("chat_template.jinja")?, read("tokenizer_config.json")?);
            let source = TemplateSource::Folder {
                chat_template_jinja: jinja.as_deref(),
                tokenizer_config_json: tokenizer_config.as_deref(),
            };
            Ok(Self::assemble(config, tokenizer, source)?)
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub use on_disk::DiskPartsError;
