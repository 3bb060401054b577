//! A model from files on disk, for the terminal (`hearth generate`, `hearth agent`): the disk is
//! one more source of [`Engine::load`], which builds the model (decoder and parts, the folder's tower or a
//! projector file, the assistant) the same way from the browser's model store.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hearth_model::model_dir::{ModelDirError, ModelFiles};
use hearth_model::{DeviceMemory, Gemma};

use crate::engine::{Engine, Host};
use crate::loading::{DrafterFiles, LoadFailure, ModelPayload, PartFiles, ReadRange, StreamedWeights, WeightFile};
use crate::parts::ModelParts;
use crate::shared::monotonic_ms;

/// Where a model's files are.
#[derive(Debug, Clone, Default)]
pub struct ModelSource {
    /// A model folder or a GGUF file.
    pub model: PathBuf,
    /// A tokenizer.json in place of the model's own.
    pub tokenizer: Option<PathBuf>,
    /// The towers as llama.cpp's projector file (`mmproj…gguf`: vision, and audio where it
    /// carries one), for a GGUF model; a folder's own towers are used without it.
    pub mmproj: Option<PathBuf>,
    /// The assistant's folder: generations draft with it.
    pub drafter: Option<PathBuf>,
    /// Load the audio tower too, where the model has one (a spoken request is coming).
    pub hearing: bool,
    /// Load a model without a chat template too (raw prompts only).
    pub template_optional: bool,
}

/// Whether the vision tower is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vision {
    /// Text only.
    Off,
    /// When the model has one (the folder's weights carry it, or a projector file is given).
    IfPresent,
    /// Images are coming: a model without a tower is an error.
    Required,
}

/// Why a model on disk cannot be loaded, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Files(#[from] ModelDirError),
    #[error("{path} holds no weights (model.safetensors, or model.safetensors.index.json and its shards)")]
    NoWeights { path: PathBuf },
    #[error("{path}: {reason}")]
    ShardIndex { path: PathBuf, reason: String },
    #[error("{0}")]
    Load(#[from] LoadFailure),
    #[error("{0}")]
    Parts(String),
    #[error("the drafter in {dir}: {why}")]
    Drafter { dir: PathBuf, why: String },
    #[error("the vision tower did not load: {0}")]
    Tower(String),
    #[error("this GGUF file holds the text model only: give its vision tower with --mmproj <projector.gguf>")]
    NoProjector,
    #[error("this model has no vision tower (its config.json or weights lack one): it cannot see images")]
    NoTower,
    #[error("the audio tower did not load: {0}")]
    AudioTower(String),
    #[error(
        "{path} has no audio tower Hearth can read (a model folder whose config.json has `audio_config` and whose weights carry it, or a GGUF model with its projector file given by --mmproj): it cannot hear"
    )]
    NoAudioTower { path: PathBuf },
}

/// Loads the model `source` names onto `device` through [`Engine::load`]: its parts, its
/// weights, the tower as `vision` asks, and the assistant when one is named; KV caches sized for
/// `memory`, one conversation's kept (the terminal has one). On disk a tower or an assistant that
/// was asked for and does not load is an error (the browser goes on without it and says why).
pub fn load(source: &ModelSource, vision: Vision, device: &Device, memory: DeviceMemory) -> Result<Engine, LoadError> {
    let payload = payload(source, vision)?;
    let gguf = payload.parts.config_json.is_empty();
    let host = Host { memory, clock_ms: monotonic_ms, wasm_memory_bytes: || 0, max_conversations: 1 };
    let engine = pollster::block_on(Engine::load(payload, device, &host, &|_, _| {}))?;
    let info = engine.info();
    if let Some(why) = &info.vision_failure {
        return Err(LoadError::Tower(why.clone()));
    }
    if let (Some(dir), Some(why)) = (&source.drafter, &info.drafter_failure) {
        return Err(LoadError::Drafter { dir: dir.clone(), why: why.clone() });
    }
    if vision == Vision::Required && !info.sees_images {
        return Err(if gguf { LoadError::NoProjector } else { LoadError::NoTower });
    }
    if let Some(why) = &info.audio_failure {
        return Err(LoadError::AudioTower(why.clone()));
    }
    if source.hearing && !info.hears_audio {
        return Err(LoadError::NoAudioTower { path: source.mmproj.clone().unwrap_or_else(|| source.model.clone()) });
    }
    Ok(engine)
}

/// The decoder alone, from a model folder or a GGUF file, its parts unread (`hearth logits`,
/// whose folders may lack a tokenizer and a template).
pub fn load_decoder(path: &Path, device: &Device) -> Result<Gemma, LoadError> {
    Ok(ModelFiles::open(path)?.load(device)?)
}

/// The parts of the model `source` names (config, tokenizer, chat template), its weights unread
/// (`hearth agent --script`).
pub fn read_parts(source: &ModelSource) -> Result<ModelParts, LoadError> {
    let files = ModelFiles::open(&source.model)?;
    ModelParts::read(&files, source.tokenizer.as_deref()).map_err(|e| LoadError::Parts(e.to_string()))
}

/// What [`loading::load`] reads for `source`: the small files now, the weights through
/// [`DiskFiles`] as the loader asks.
pub fn payload(source: &ModelSource, vision: Vision) -> Result<ModelPayload<DiskFiles>, LoadError> {
    let path = &source.model;
    if !path.exists() {
        return Err(ModelDirError::NotAModel { path: path.clone() }.into());
    }
    let gguf = path.is_file() && is_gguf(path)?;
    let weights = if path.is_file() { vec![path.clone()] } else { weight_files_in(path)? };
    let tokenizer_override = source.tokenizer.as_deref().map(tokenizer_json).transpose()?;
    let parts = if gguf {
        PartFiles {
            tokenizer_json: tokenizer_override.unwrap_or_default(),
            template_optional: source.template_optional,
            ..PartFiles::default()
        }
    } else {
        // A folder, or a lone .safetensors file beside its config.json.
        let folder = if path.is_file() { path.parent().unwrap_or(Path::new(".")) } else { path.as_path() };
        PartFiles {
            config_json: read_text(&folder.join("config.json"))?,
            generation_config_json: read_optional(&folder.join("generation_config.json"))?,
            tokenizer_json: match tokenizer_override {
                Some(json) => json,
                None => tokenizer_json(folder)?,
            },
            chat_template: read_optional(&folder.join("chat_template.jinja"))?,
            tokenizer_config_json: read_optional(&folder.join("tokenizer_config.json"))?,
            template_optional: source.template_optional,
        }
    };
    let projector = match (&source.mmproj, vision) {
        (Some(path), Vision::IfPresent | Vision::Required) => Some(on_disk(vec![path.clone()])?),
        (Some(path), Vision::Off) if source.hearing => Some(on_disk(vec![path.clone()])?),
        _ => None,
    };
    let drafter = match &source.drafter {
        Some(dir) => {
            let failed = |e: LoadError| LoadError::Drafter { dir: dir.clone(), why: e.to_string() };
            Some(DrafterFiles {
                name: dir.display().to_string(),
                config_json: read_text(&dir.join("config.json")).map_err(failed)?,
                weights: on_disk(vec![dir.join("model.safetensors")]).map_err(failed)?,
            })
        }
        None => None,
    };
    Ok(ModelPayload {
        name: path.display().to_string(),
        parts,
        weights: on_disk(weights)?,
        vision: vision != Vision::Off,
        audio: source.hearing,
        projector,
        drafter,
    })
}

/// Files on disk, read by the names the loader asks for.
pub struct DiskFiles {
    paths: Vec<PathBuf>,
}

impl ReadRange for DiskFiles {
    async fn read(&self, path: &str, offset: u64, length: u64) -> Result<Vec<u8>, String> {
        let Some(file) = self.paths.iter().find(|p| p.to_string_lossy() == path) else {
            return Err(format!("{path} is not one of the model's files"));
        };
        let failed = |e: std::io::Error| format!("cannot read {path}: {e}");
        let mut handle = std::fs::File::open(file).map_err(failed)?;
        handle.seek(SeekFrom::Start(offset)).map_err(failed)?;
        let mut bytes = vec![0; usize::try_from(length).map_err(|e| e.to_string())?];
        handle.read_exact(&mut bytes).map_err(failed)?;
        Ok(bytes)
    }
}

fn on_disk(paths: Vec<PathBuf>) -> Result<StreamedWeights<DiskFiles>, LoadError> {
    let files = paths
        .iter()
        .map(|path| {
            let size = std::fs::metadata(path).map_err(|source| io(path, source))?.len();
            Ok(WeightFile { path: path.to_string_lossy().into_owned(), size })
        })
        .collect::<Result<Vec<_>, LoadError>>()?;
    Ok(StreamedWeights::new(files, DiskFiles { paths }))
}

/// A folder's weight files: `model.safetensors`, or the shards its index names.
fn weight_files_in(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(LoadError::NoWeights { path: dir.to_path_buf() });
    }
    #[derive(serde::Deserialize)]
    struct ShardIndex {
        weight_map: std::collections::BTreeMap<String, String>,
    }
    let parsed: ShardIndex = serde_json::from_str(&read_text(&index)?)
        .map_err(|e| LoadError::ShardIndex { path: index.clone(), reason: e.to_string() })?;
    let shards: std::collections::BTreeSet<&String> = parsed.weight_map.values().collect();
    Ok(shards.into_iter().map(|shard| dir.join(shard)).collect())
}

fn is_gguf(path: &Path) -> Result<bool, LoadError> {
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|source| io(path, source))?;
    Ok(file.read_exact(&mut magic).is_ok() && &magic == b"GGUF")
}

/// A tokenizer.json, or a folder's.
fn tokenizer_json(path: &Path) -> Result<Vec<u8>, LoadError> {
    let file = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
    std::fs::read(&file).map_err(|source| io(&file, source))
}

fn read_text(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| io(path, source))
}

fn read_optional(path: &Path) -> Result<Option<String>, LoadError> {
    if path.is_file() { read_text(path).map(Some) } else { Ok(None) }
}

fn io(path: &Path, source: std::io::Error) -> LoadError {
    ModelDirError::Io { path: path.to_path_buf(), source }.into()
}

/// Every source builds the same model (the disk's, whole bytes, the model crate's own loader).
#[cfg(test)]
#[path = "native_tests.rs"]
mod tests;
