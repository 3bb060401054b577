//! A model built from its files, the one way for every source: the browser's model store, a
//! bundled test model or a GGUF file given whole, and files on disk (the terminal's
//! [`crate::native`]). The source only says how bytes are read ([`ReadRange`]); what is read, in
//! which order, and what a failure means are decided here:
//!
//! 1. the weights' headers (GGUF metadata, safetensors headers), fetched as the parsers ask;
//! 2. the parts (config, tokenizer, chat template: a folder's files, or the GGUF metadata);
//! 3. the decoder, one load step at a time (each step's bytes fetched, read, dropped);
//! 4. the vision tower: the folder's own weights, or llama.cpp's projector file beside a GGUF;
//! 5. the audio tower, from the same place (the projector file carries both);
//! 6. the assistant that drafts for it.
//!
//! A decoder that fails fails the load ([`LoadFailure`]: damaged, or a model Hearth cannot run);
//! a tower or an assistant that fails leaves the model working without it, and [`Loaded`] says why.

mod failure;
mod streamed;

use burn::tensor::Device;
use hearth_model::audio::{AudioConfig, AudioTower, audio_weight_prefixes, has_audio_weights};
use hearth_model::drafter::{Drafter, DrafterConfig};
use hearth_model::media::{MediaMarkers, Medium};
use hearth_model::tokenizer::Tokenizer;
use hearth_model::vision::{VisionConfig, VisionTower, has_vision_weights, vision_weight_prefixes};
use hearth_model::{CacheOptions, DeviceMemory, Gemma, TextConfig};
use hearth_protocol::{ModelInfo, ModelMemory};
use hearth_weights::{Checkpoint, Quantization};

use crate::parts::{ModelParts, PartsError, TemplateSource};
use crate::shared::SharedModel;

pub use failure::LoadFailure;
pub use streamed::{InMemory, ReadRange, StreamedWeights, WeightFile};

/// A model's small files as texts, besides its weights. A GGUF file's metadata holds its own
/// config, tokenizer and template: `config_json` is empty then.
#[derive(Debug, Clone, Default)]
pub struct PartFiles {
    /// config.json (a folder); empty for a GGUF file.
    pub config_json: String,
    pub generation_config_json: Option<String>,
    /// tokenizer.json: a folder's; for a GGUF file, one that replaces the file's own (empty: the
    /// file's).
    pub tokenizer_json: Vec<u8>,
    /// chat_template.jinja (a folder), or the template that replaces a GGUF file's own.
    pub chat_template: Option<String>,
    /// tokenizer_config.json (a folder): its `chat_template` when there is no
    /// chat_template.jinja, and its `bos_token`.
    pub tokenizer_config_json: Option<String>,
    /// A model without a chat template loads too, for raw prompts only (`hearth generate`
    /// without `--chat`): its template refuses to render ([`NO_TEMPLATE`]).
    pub template_optional: bool,
}

/// The template of a model without one, loaded for raw prompts: asked to render, it says why not.
pub const NO_TEMPLATE: &str = "{{ raise_exception('this model has no chat template: give it a raw prompt') }}";

/// An assistant's files: its config.json and its one safetensors file.
pub struct DrafterFiles<R> {
    /// Its repository (what the engine's details name).
    pub name: String,
    pub config_json: String,
    pub weights: StreamedWeights<R>,
}

/// Everything a model is built from.
pub struct ModelPayload<R> {
    pub name: String,
    pub parts: PartFiles,
    pub weights: StreamedWeights<R>,
    /// Whether to load the vision tower when the model has one.
    pub vision: bool,
    /// Whether to load the audio tower when the model has one: only when spoken requests are
    /// taken (E2B's costs 0.6 GB of GPU memory that text and screenshots never use).
    pub audio: bool,
    /// llama.cpp's projector file (`mmproj…gguf`): the vision and audio towers of a GGUF model.
    pub projector: Option<StreamedWeights<R>>,
    /// The assistant that drafts for the model (speculative decoding).
    pub drafter: Option<DrafterFiles<R>>,
}

/// A loaded model with what came with it, and why what did not come did not.
pub struct Loaded {
    pub model: Gemma,
    pub parts: ModelParts,
    pub tower: Option<VisionTower>,
    /// Why the model's tower (its weights', or the projector's) did not load.
    pub vision_failure: Option<String>,
    /// The audio tower, when the model's weights or its projector file carry one.
    pub audio: Option<AudioTower>,
    /// Why the audio tower did not load.
    pub audio_failure: Option<String>,
    pub drafter: Option<Drafter>,
    /// The assistant's repository, when it loaded.
    pub drafter_name: Option<String>,
    /// Why the assistant did not load.
    pub drafter_failure: Option<String>,
    /// The decoder's files' size.
    pub file_bytes: u64,
    /// The most of their bytes held in memory at once.
    pub peak_read_bytes: u64,
}

/// Builds the model `payload` describes on `device`; `on_progress(done, total)` before each of
/// the decoder's load steps.
pub async fn load<R: ReadRange>(
    payload: ModelPayload<R>,
    device: &Device,
    on_progress: &dyn Fn(usize, usize),
) -> Result<Loaded, LoadFailure> {
    let ModelPayload { name: _, parts: files, weights, vision, audio, projector, drafter } = payload;
    // A config, tokenizer or template Hearth cannot use is the model's, not damage.
    let unsupported = |e: PartsError| LoadFailure::unsupported(e.to_string());
    let quantization = quantization_of(&files.config_json).map_err(LoadFailure::unsupported)?;
    let mut checkpoint = weights.open(quantization).await?;
    let parts = match checkpoint.gguf() {
        Some(_) => gguf_parts(&checkpoint, &files).map_err(unsupported)?,
        None => folder_parts(&files).map_err(unsupported)?,
    };
    let model = weights.load(parts.config.clone(), &mut checkpoint, device, on_progress).await?;
    let (file_bytes, peak_read_bytes) = (weights.file_bytes(), weights.peak_held_bytes());

    let wanted = WantedTowers { vision, audio };
    let (tower, audio) = match projector {
        Some(_) if !vision && !audio => (None, None),
        Some(projector) => load_projector(&projector, &files, &parts, wanted, device).await,
        None => {
            let tower = match vision_config_of(&files, &parts.tokenizer)
                .filter(|_| vision && has_vision_weights(&checkpoint))
            {
                Some(config) => {
                    let prefixes = vision_weight_prefixes(&checkpoint);
                    Some(
                        own_tower(&weights, &mut checkpoint, &prefixes, |c| VisionTower::load(config, c, device))
                            .await?,
                    )
                }
                None => None,
            };
            let audio =
                match audio_config_of(&files, &parts.tokenizer).filter(|_| audio && has_audio_weights(&checkpoint)) {
                    Some(config) => {
                        let prefixes = audio_weight_prefixes(&checkpoint);
                        Some(
                            own_tower(&weights, &mut checkpoint, &prefixes, |c| AudioTower::load(config, c, device))
                                .await?,
                        )
                    }
                    None => None,
                };
            (tower, audio)
        }
    };
    drop(checkpoint);
    let (tower, vision_failure) = split(tower);
    let (audio, audio_failure) = split(audio);

    let (drafter, drafter_name, drafter_failure) = match drafter {
        Some(files) => {
            let name = files.name.clone();
            match load_drafter(files, &parts.config, device).await {
                Ok(drafter) => (Some(drafter), Some(name), None),
                Err(why) => (None, None, Some(why)),
            }
        }
        None => (None, None, None),
    };
    Ok(Loaded {
        model,
        parts,
        tower,
        vision_failure,
        audio,
        audio_failure,
        drafter,
        drafter_name,
        drafter_failure,
        file_bytes,
        peak_read_bytes,
    })
}

/// A tower in the model's own weights: its tensors (those under `prefixes`) fetched, the tower
/// built from them, the bytes let go. A tower that does not build is the `Err` inside (the model
/// goes on without it); a read that fails fails the load.
async fn own_tower<R: ReadRange, T, E: std::fmt::Display>(
    weights: &StreamedWeights<R>,
    checkpoint: &mut Checkpoint,
    prefixes: &[String],
    build: impl FnOnce(&mut Checkpoint) -> Result<T, E>,
) -> Result<Result<T, String>, LoadFailure> {
    weights.fetch_under(checkpoint, prefixes).await?;
    let tower = build(checkpoint).map_err(|e| e.to_string());
    weights.release_all();
    Ok(tower)
}

fn split<T>(result: Option<Result<T, String>>) -> (Option<T>, Option<String>) {
    match result {
        Some(Ok(value)) => (Some(value), None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    }
}

/// A Hugging Face folder's parts: config.json (+ generation_config.json), tokenizer.json, the
/// chat template.
fn folder_parts(files: &PartFiles) -> Result<ModelParts, PartsError> {
    let missing = files.chat_template.is_none() && files.tokenizer_config_json.is_none();
    let stand_in = (missing && files.template_optional).then_some(NO_TEMPLATE);
    let template = TemplateSource::Folder {
        chat_template_jinja: files.chat_template.as_deref().or(stand_in),
        tokenizer_config_json: files.tokenizer_config_json.as_deref(),
    };
    ModelParts::from_folder_files(
        &files.config_json,
        files.generation_config_json.as_deref(),
        &files.tokenizer_json,
        template,
    )
}

/// A GGUF file's parts from its metadata; a tokenizer or template given replaces the file's.
fn gguf_parts(checkpoint: &Checkpoint, files: &PartFiles) -> Result<ModelParts, PartsError> {
    let tokenizer = match files.tokenizer_json.is_empty() {
        true => None,
        false => Some(Tokenizer::from_bytes(&files.tokenizer_json)?),
    };
    let own = checkpoint.gguf().and_then(|g| g.get("tokenizer.chat_template")).is_some();
    let stand_in = (!own && files.template_optional).then_some(NO_TEMPLATE);
    ModelParts::from_gguf(checkpoint, files.chat_template.as_deref().or(stand_in), tokenizer)
}

/// The MLX quantization a folder's config.json declares (a GGUF's blocks say their own).
fn quantization_of(config_json: &str) -> Result<Option<Quantization>, String> {
    if config_json.is_empty() {
        return Ok(None);
    }
    Quantization::from_config_json(config_json).map_err(|e| e.to_string())
}

/// The vision tower config.json describes (a folder's model; a GGUF has none of its own), its
/// image tokens the tokenizer's where the two disagree.
fn vision_config_of(files: &PartFiles, tokenizer: &Tokenizer) -> Option<VisionConfig> {
    if files.config_json.is_empty() {
        return None;
    }
    let mut config = VisionConfig::from_json(&files.config_json).ok().flatten()?;
    config.reconcile_tokens(tokenizer);
    Some(config)
}

/// The audio tower config.json describes (a folder's model), its audio tokens the tokenizer's
/// where the two disagree.
fn audio_config_of(files: &PartFiles, tokenizer: &Tokenizer) -> Option<AudioConfig> {
    if files.config_json.is_empty() {
        return None;
    }
    let mut config = AudioConfig::from_json(&files.config_json).ok().flatten()?;
    config.reconcile_tokens(tokenizer);
    Some(config)
}

type Towers = (Option<Result<VisionTower, String>>, Option<Result<AudioTower, String>>);

/// Which of the towers a load builds, where the model has them.
#[derive(Clone, Copy)]
struct WantedTowers {
    vision: bool,
    audio: bool,
}

/// llama.cpp's projector file as the model's towers: the vision tower (its width must be the
/// text model's, the image tokens from config.json, else the model's vocabulary), and the audio
/// tower beside it when the file carries one (likewise). All of the file is read at once.
async fn load_projector<R: ReadRange>(
    projector: &StreamedWeights<R>,
    files: &PartFiles,
    parts: &ModelParts,
    wanted: WantedTowers,
    device: &Device,
) -> Towers {
    // A file that cannot be read fails each tower that was wanted from it.
    let unread = |why: String| (wanted.vision.then(|| Err(why.clone())), wanted.audio.then(|| Err(why.clone())));
    let mut checkpoint = match projector.open(None).await {
        Ok(checkpoint) => checkpoint,
        Err(e) => return unread(e.message),
    };
    if let Err(e) = projector.fetch_under(&checkpoint, &[String::new()]).await {
        return unread(e.message);
    }
    let vision = wanted.vision.then(|| {
        let tokens = match vision_config_of(files, &parts.tokenizer) {
            Some(config) => config.tokens,
            None => MediaMarkers::from_vocabulary(Medium::Image, &parts.tokenizer)
                .ok_or("the model's vocabulary has no image tokens: it is not a Gemma 4 that sees")?,
        };
        let config =
            VisionConfig::from_mmproj(&checkpoint, parts.config.hidden_size, tokens).map_err(|e| e.to_string())?;
        VisionTower::load(config, &mut checkpoint, device).map_err(|e| e.to_string())
    });
    let audio = (wanted.audio && has_audio_weights(&checkpoint)).then(|| {
        let tokens = match audio_config_of(files, &parts.tokenizer) {
            Some(config) => config.tokens,
            None => MediaMarkers::from_vocabulary(Medium::Clip, &parts.tokenizer)
                .ok_or("the model's vocabulary has no audio tokens: it is not a Gemma 4 that hears")?,
        };
        let config = AudioConfig::from_mmproj(&checkpoint, parts.config.hidden_size, tokens)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the projector file's audio tower is not Gemma 4's".to_string())?;
        AudioTower::load(config, &mut checkpoint, device).map_err(|e| e.to_string())
    });
    projector.release_all();
    (vision, audio)
}

/// An assistant beside the loaded model; why not, in words, when it cannot.
async fn load_drafter<R: ReadRange>(
    files: DrafterFiles<R>,
    main: &TextConfig,
    device: &Device,
) -> Result<Drafter, String> {
    let config = DrafterConfig::from_json(&files.config_json).map_err(|e| e.to_string())?;
    let mut checkpoint = files.weights.open(None).await.map_err(|e| e.message)?;
    // Every tensor at once (158 MB in bf16 for E2B's), then dropped.
    files.weights.fetch_under(&checkpoint, &[String::new()]).await.map_err(|e| e.message)?;
    let drafter = Drafter::load(config, main, &mut checkpoint, device);
    files.weights.release_all();
    drafter.map_err(|e| e.to_string())
}

/// Conversations (tabs) whose KV caches are kept at once, at most; fewer when the memory budget
/// holds fewer (E2B at 32K: two).
pub const MAX_CONVERSATION_CACHES: usize = 4;

/// What the host measured around a load, for the model's report.
pub struct LoadContext {
    pub name: String,
    /// The device's memory, which sizes the KV caches.
    pub memory: DeviceMemory,
    pub load_ms: f64,
    /// The wasm instance's linear memory after the load (0 natively).
    pub wasm_memory_bytes: u64,
    pub clock_ms: fn() -> f64,
}

impl Loaded {
    /// The model as chat replies and agent tasks share it (the KV caches of at most
    /// `max_conversations` kept at once), and what the engine reports of it.
    pub fn share(self, context: LoadContext, max_conversations: usize) -> (SharedModel, ModelInfo) {
        let config = &self.parts.config;
        let cache = CacheOptions::for_device(config, context.memory);
        let weights = self.model.weight_bytes();
        let memory = ModelMemory {
            file_bytes: self.file_bytes,
            peak_read_bytes: self.peak_read_bytes,
            device_bytes: weights.device,
            host_bytes: weights.host,
            kv_cache_bytes: cache.bytes(config),
            wasm_memory_bytes: context.wasm_memory_bytes,
        };
        let conversation_caches = cache.caches_within_budget(config, context.memory).min(max_conversations);
        let info = ModelInfo {
            name: context.name,
            architecture: format!("{:?}", config.family).to_lowercase(),
            layers: config.num_layers as u32,
            vocab_size: config.vocab_size as u32,
            load_ms: context.load_ms,
            context_tokens: cache.max_context as u32,
            memory,
            sees_images: self.tower.is_some(),
            vision_failure: self.vision_failure,
            hears_audio: self.audio.is_some(),
            audio_failure: self.audio_failure,
            drafter: self.drafter_name,
            drafter_failure: self.drafter_failure,
            drafter_offer: None,
            projector_offer: None,
        };
        let shared = SharedModel::new(self.model, self.parts, cache, conversation_caches, context.clock_ms)
            .with_vision(self.tower)
            .with_audio(self.audio)
            .with_drafter(self.drafter);
        (shared, info)
    }
}
