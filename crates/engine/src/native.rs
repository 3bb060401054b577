//! A model from files on disk, assembled in one place for the terminal (`hearth agent`, `hearth
//! generate`) as the browser's engine assembles one from its store: the decoder with its parts
//! (config, tokenizer, chat template), the vision tower (the folder's own, or llama.cpp's projector
//! file beside a GGUF model) and the assistant that drafts for it.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hearth_model::drafter::{Drafter, DrafterError};
use hearth_model::model_dir::{ModelDirError, ModelFiles};
use hearth_model::vision::VisionTower;
use hearth_model::{CacheOptions, Gemma};

use crate::parts::{DiskPartsError, ModelParts};
use crate::shared::SharedModel;

/// Where a model's files are.
#[derive(Debug, Clone, Default)]
pub struct ModelSource {
    /// A model folder or a GGUF file.
    pub model: PathBuf,
    /// A tokenizer.json in place of the model's own.
    pub tokenizer: Option<PathBuf>,
    /// The vision tower as llama.cpp's projector file (`mmproj…gguf`), for a GGUF model; a
    /// folder's own tower is used without it.
    pub mmproj: Option<PathBuf>,
    /// The assistant's folder: generations draft with it.
    pub drafter: Option<PathBuf>,
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
    #[error(transparent)]
    Parts(#[from] DiskPartsError),
    #[error("the drafter in {dir}: {source}")]
    Drafter { dir: PathBuf, source: DrafterError },
    #[error("this GGUF file holds the text model only: give its vision tower with --mmproj <projector.gguf>")]
    NoProjector,
    #[error("this model has no vision tower (its config.json or weights lack one): it cannot see images")]
    NoTower,
}

/// A model loaded from disk, with what came with it.
pub struct LoadedModel {
    pub model: Gemma,
    pub parts: ModelParts,
    pub tower: Option<VisionTower>,
    pub drafter: Option<Drafter>,
}

impl LoadedModel {
    /// The model as the agent's steps share it: a KV cache of `cache` per conversation and at
    /// most `caches` of them kept, the tower and the assistant with it.
    pub fn shared(self, cache: CacheOptions, caches: usize, clock_ms: fn() -> f64) -> SharedModel {
        SharedModel::new(self.model, self.parts, cache, caches, clock_ms)
            .with_vision(self.tower)
            .with_drafter(self.drafter)
    }
}

/// Loads the model `source` names onto `device`: its parts, its weights, the tower as `vision`
/// asks, and the assistant when one is named.
pub fn load(source: &ModelSource, vision: Vision, device: &Device) -> Result<LoadedModel, LoadError> {
    let mut files = ModelFiles::open(&source.model)?;
    let parts = ModelParts::read(&files, source.tokenizer.as_deref())?;
    let tower = match vision {
        Vision::Off => None,
        Vision::Required => Some(load_tower(&mut files, source.mmproj.as_deref(), device)?),
        Vision::IfPresent => match load_tower(&mut files, source.mmproj.as_deref(), device) {
            Ok(tower) => Some(tower),
            Err(LoadError::NoProjector | LoadError::NoTower) => None,
            Err(other) => return Err(other),
        },
    };
    let model = files.load(device)?;
    let drafter = match &source.drafter {
        Some(dir) => Some(load_drafter(dir, &model, device)?),
        None => None,
    };
    Ok(LoadedModel { model, parts, tower, drafter })
}

/// The model's vision tower: llama.cpp's projector file when `mmproj` is given, else the one in
/// the model's own weights (a folder).
pub fn load_tower(files: &mut ModelFiles, mmproj: Option<&Path>, device: &Device) -> Result<VisionTower, LoadError> {
    if let Some(path) = mmproj {
        return Ok(files.load_projector(path, device)?);
    }
    match files.load_vision(device)? {
        Some(tower) => Ok(tower),
        None if files.is_gguf() => Err(LoadError::NoProjector),
        None => Err(LoadError::NoTower),
    }
}

/// The assistant in `dir`, for `model` (an assistant made for another model is refused by name).
pub fn load_drafter(dir: &Path, model: &Gemma, device: &Device) -> Result<Drafter, LoadError> {
    hearth_model::drafter::load_dir(dir, &model.config, device)
        .map_err(|source| LoadError::Drafter { dir: dir.to_path_buf(), source })
}
