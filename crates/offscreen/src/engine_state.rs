//! The engine's state in the offscreen document: one GPU device, at most one model, one
//! generation at a time (others wait their turn on the session's lock).

use std::cell::RefCell;
use std::ops::ControlFlow;

use burn::tensor::Device;
use hearth_chat::{Message, RenderRequest};
use hearth_engine::{Decoding, MAX_DRAFT, ModelParts, PartsError, SharedModel, TemplateSource};
use hearth_model::drafter::{Drafter, DrafterConfig};
use hearth_model::generate;
use hearth_model::gpu::AdapterInfo;
use hearth_model::vision::{VisionConfig, VisionTower, has_vision_weights, vision_weight_prefixes};
use hearth_model::{CacheOptions, DeviceMemory, Gemma, SamplingOptions, TextConfig, gpu, self_test};
use hearth_protocol::{
    EngineFailure, EngineStatus, FailureKind, GenerateRequest, GenerationEvent, GenerationStats, ModelInfo, ModelMemory,
};
use hearth_weights::{Checkpoint, MemorySource, Quantization};

use crate::load_failure::LoadFailure;
use crate::streamed::{StreamedWeights, WeightFile};
use hearth_engine::reports;
use wasm_bindgen::prelude::*;

/// A model's files, from JavaScript: the small ones whole, the weights whole (bundled test
/// models, GGUF files given by hand) or read piece by piece from the model store.
#[wasm_bindgen]
pub struct ModelFiles {
    name: String,
    config_json: String,
    generation_config_json: Option<String>,
    weights: Weights,
    tokenizer_json: Vec<u8>,
    /// chat_template.jinja (a folder), or the template that replaces a GGUF file's own.
    chat_template: Option<String>,
    /// tokenizer_config.json (a folder): its `chat_template` (a string or a list of named
    /// templates) when there is no chat_template.jinja, and its `bos_token`.
    tokenizer_config_json: Option<String>,
    /// The model's assistant (speculative decoding), when installed.
    drafter: Option<DrafterFiles>,
}

/// An assistant's files: its config.json and its one safetensors file.
struct DrafterFiles {
    /// Its repository (what the engine's details name).
    name: String,
    config_json: String,
    weights: Weights,
}

enum Weights {
    /// One `model.safetensors` or `.gguf` file in memory.
    Whole(Vec<u8>),
    /// safetensors files (one, or the shards of a sharded model) read by a JavaScript callback.
    Streamed(StreamedWeights),
}

#[wasm_bindgen]
impl ModelFiles {
    #[wasm_bindgen(constructor)]
    pub fn new(
        name: String,
        config_json: String,
        generation_config_json: Option<String>,
        weights: Vec<u8>,
        tokenizer_json: Vec<u8>,
        chat_template: Option<String>,
        tokenizer_config_json: Option<String>,
    ) -> ModelFiles {
        let weights = Weights::Whole(weights);
        ModelFiles {
            name,
            config_json,
            generation_config_json,
            weights,
            tokenizer_json,
            chat_template,
            tokenizer_config_json,
            drafter: None,
        }
    }

    /// A folder whose safetensors files (`weight_files`: JSON `[{path, size}]`) are read by
    /// `read_weights(path, offset, length)`, which returns a Promise of a Uint8Array of exactly
    /// `length` bytes. Only the bytes of one load step are held at a time. The chat template is
    /// chat_template.jinja's text, else tokenizer_config.json's entry (at least one is needed).
    #[allow(clippy::too_many_arguments)]
    pub fn streamed(
        name: String,
        config_json: String,
        generation_config_json: Option<String>,
        weight_files: String,
        read_weights: js_sys::Function,
        tokenizer_json: Vec<u8>,
        chat_template: Option<String>,
        tokenizer_config_json: Option<String>,
    ) -> Result<ModelFiles, JsError> {
        let files: Vec<WeightFile> = serde_json::from_str(&weight_files)
            .map_err(|e| JsError::new(&format!("weight files must be a JSON array of {{path, size}}: {e}")))?;
        if files.is_empty() {
            return Err(JsError::new("a model needs at least one weight file"));
        }
        let weights = Weights::Streamed(StreamedWeights::new(files, read_weights));
        Ok(ModelFiles {
            name,
            config_json,
            generation_config_json,
            weights,
            tokenizer_json,
            chat_template,
            tokenizer_config_json,
            drafter: None,
        })
    }

    /// One GGUF file of `size` bytes read by `read_weights(path, offset, length)` (as for
    /// [`Self::streamed`]): header, metadata and tensor table as the parser asks, then each load
    /// step's bytes. Its metadata holds the config, tokenizer and chat template.
    pub fn streamed_gguf(
        name: String,
        path: String,
        size: f64,
        read_weights: js_sys::Function,
        chat_template: Option<String>,
    ) -> ModelFiles {
        let files = vec![WeightFile { path, size: size as u64 }];
        let weights = Weights::Streamed(StreamedWeights::new(files, read_weights));
        ModelFiles {
            name,
            config_json: String::new(),
            generation_config_json: None,
            weights,
            tokenizer_json: Vec::new(),
            chat_template,
            tokenizer_config_json: None,
            drafter: None,
        }
    }

    /// One GGUF file: its metadata holds the config, the tokenizer and the chat template
    /// (`chat_template`, when given, replaces the file's; a file without one needs it).
    pub fn gguf(name: String, weights: Vec<u8>, chat_template: Option<String>) -> ModelFiles {
        let (config_json, tokenizer_json) = (String::new(), Vec::new());
        let weights = Weights::Whole(weights);
        ModelFiles {
            name,
            config_json,
            generation_config_json: None,
            weights,
            tokenizer_json,
            chat_template,
            tokenizer_config_json: None,
            drafter: None,
        }
    }

    /// These files with the model's assistant (speculative decoding): its `config_json` and
    /// `model.safetensors` of `size` bytes read by `read_weights(path, offset, length)` (as for
    /// [`Self::streamed`]). A failing assistant leaves the model working without it.
    pub fn with_drafter(
        mut self,
        name: String,
        config_json: String,
        size: f64,
        read_weights: js_sys::Function,
    ) -> ModelFiles {
        let files = vec![WeightFile { path: "model.safetensors".into(), size: size as u64 }];
        let weights = Weights::Streamed(StreamedWeights::new(files, read_weights));
        self.drafter = Some(DrafterFiles { name, config_json, weights });
        self
    }

    /// [`Self::with_drafter`] with the weights whole (a test build's bundled assistant).
    pub fn with_drafter_bytes(mut self, name: String, config_json: String, weights: Vec<u8>) -> ModelFiles {
        self.drafter = Some(DrafterFiles { name, config_json, weights: Weights::Whole(weights) });
        self
    }
}

/// Loads an assistant beside the loaded model; why not, in words, when it cannot.
async fn load_drafter(files: DrafterFiles, main: &TextConfig, device: &Device) -> Result<Drafter, String> {
    let config = DrafterConfig::from_json(&files.config_json).map_err(|e| e.to_string())?;
    let drafter = match files.weights {
        Weights::Whole(bytes) => {
            let source = MemorySource::new(format!("{}/model.safetensors", files.name), bytes);
            let mut checkpoint = Checkpoint::from_sources(vec![Box::new(source)]).map_err(|e| e.to_string())?;
            Drafter::load(config, main, &mut checkpoint, device)
        }
        Weights::Streamed(streamed) => {
            let mut checkpoint = streamed.open(None).await.map_err(|e| e.message)?;
            // Every tensor at once (158 MB in bf16 for E2B's), then dropped.
            streamed.fetch_under(&checkpoint, &[String::new()]).await.map_err(|e| e.message)?;
            let drafter = Drafter::load(config, main, &mut checkpoint, device);
            streamed.release_all();
            drafter
        }
    };
    drafter.map_err(|e| e.to_string())
}

/// A Hugging Face folder's parts: config.json (+ generation_config.json), tokenizer.json, the
/// chat template. (MLX models declare their quantization in config.json.)
fn folder_parts(files: &ModelFiles) -> Result<ModelParts, PartsError> {
    let template = TemplateSource::Folder {
        chat_template_jinja: files.chat_template.as_deref(),
        tokenizer_config_json: files.tokenizer_config_json.as_deref(),
    };
    ModelParts::from_folder_files(
        &files.config_json,
        files.generation_config_json.as_deref(),
        &files.tokenizer_json,
        template,
    )
}

/// Reads the weights (headers first, then tensor by tensor) and puts the model on `device`;
/// also returns the files' size and the most of their bytes held at once.
async fn load_weights(
    mut files: ModelFiles,
    device: &Device,
    on_progress: &dyn Fn(usize, usize),
) -> Result<(Gemma, ModelParts, (u64, u64), Option<Result<VisionTower, String>>), LoadFailure> {
    let vision_config = vision_config_of(&files);
    let weights = std::mem::replace(&mut files.weights, Weights::Whole(Vec::new()));
    let load = |parts: &ModelParts, checkpoint: &mut Checkpoint| -> Result<Gemma, LoadFailure> {
        Ok(Gemma::load(parts.config.clone(), checkpoint, device)?)
    };
    // A config, tokenizer or template Hearth cannot use is the model's, not damage.
    let gguf_parts = |c: &Checkpoint, t: Option<&str>| {
        ModelParts::from_gguf(c, t).map_err(|e| LoadFailure::unsupported(e.to_string()))
    };
    let folder_parts = |f: &ModelFiles| folder_parts(f).map_err(|e| LoadFailure::unsupported(e.to_string()));
    let quantization_of = |f: &ModelFiles| quantization_of(f).map_err(LoadFailure::unsupported);
    match weights {
        Weights::Whole(bytes) if bytes.starts_with(b"GGUF") => {
            let size = bytes.len() as u64;
            let source = MemorySource::new(format!("{}.gguf", files.name), bytes);
            let mut checkpoint = Checkpoint::from_gguf(Box::new(source))?;
            let parts = gguf_parts(&checkpoint, files.chat_template.as_deref())?;
            // A GGUF's tower is a separate projector file.
            Ok((load(&parts, &mut checkpoint)?, parts, (size, size), None))
        }
        Weights::Whole(bytes) => {
            let size = bytes.len() as u64;
            let parts = folder_parts(&files)?;
            let source = MemorySource::new(format!("{}/model.safetensors", files.name), bytes);
            let mut checkpoint = Checkpoint::from_sources(vec![Box::new(source)])?;
            checkpoint.set_quantization(quantization_of(&files)?);
            let model = load(&parts, &mut checkpoint)?;
            let tower = vision_config.and_then(|config| load_tower(config, &mut checkpoint, device));
            Ok((model, parts, (size, size), tower))
        }
        Weights::Streamed(streamed) => {
            let size = streamed.file_bytes();
            let mut checkpoint = streamed.open(quantization_of(&files)?).await?;
            let parts = match checkpoint.gguf() {
                Some(_) => gguf_parts(&checkpoint, files.chat_template.as_deref())?,
                None => folder_parts(&files)?,
            };
            let model = streamed.load(parts.config.clone(), &mut checkpoint, device, on_progress).await?;
            let tower = match vision_config.filter(|_| has_vision_weights(&checkpoint)) {
                Some(config) => {
                    streamed.fetch_under(&checkpoint, &vision_weight_prefixes(&checkpoint)).await?;
                    let tower = load_tower(config, &mut checkpoint, device);
                    streamed.release_all();
                    tower
                }
                None => None,
            };
            Ok((model, parts, (size, streamed.peak_held_bytes()), tower))
        }
    }
}

/// The vision tower config.json describes (a folder's model; a GGUF has none of its own).
fn vision_config_of(files: &ModelFiles) -> Option<VisionConfig> {
    if files.config_json.is_empty() {
        return None;
    }
    VisionConfig::from_json(&files.config_json).ok().flatten()
}

/// The tower, when the weights hold it; one that does not load leaves the model text-only (it
/// still chats and acts, without screenshots), and the model's info says why.
fn load_tower(
    config: VisionConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Option<Result<VisionTower, String>> {
    has_vision_weights(checkpoint).then(|| VisionTower::load(config, checkpoint, device).map_err(|e| e.to_string()))
}

/// The wasm instance's linear memory, in bytes (it only grows: this is its peak); 0 natively.
pub fn wasm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size(0) as u64 * 65_536;
    #[cfg(not(target_arch = "wasm32"))]
    0
}

fn quantization_of(files: &ModelFiles) -> Result<Option<Quantization>, String> {
    if files.config_json.is_empty() {
        return Ok(None); // a GGUF file: its blocks say how they are quantized
    }
    Quantization::from_config_json(&files.config_json).map_err(|e| e.to_string())
}

/// Conversations (tabs) whose KV caches are kept at once, at most; fewer when the memory budget
/// holds fewer (E2B at 32K: two).
const MAX_CONVERSATION_CACHES: usize = 4;

/// The conversation of chat replies (`generate`); agent tasks use their tab's.
pub const CHAT_CONVERSATION: u64 = 0;

struct LoadedModel {
    shared: SharedModel,
    info: ModelInfo,
}

/// The loaded model, if any.
pub fn model() -> Option<SharedModel> {
    ENGINE.with(|e| e.borrow().model.as_ref().map(|m| m.shared.clone()))
}

#[derive(Default)]
struct Engine {
    gpu: Option<(Device, AdapterInfo)>,
    model: Option<LoadedModel>,
}

thread_local! {
    static ENGINE: RefCell<Engine> = RefCell::new(Engine::default());
}

/// A monotonic clock for the generation's timings: `performance.now()`, which the browser gives
/// in 0.1 ms steps or finer (`Date.now()` has whole milliseconds, too coarse for a token's host
/// time of about one).
pub fn clock_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    return performance_now();
    #[cfg(not(target_arch = "wasm32"))]
    now_ms()
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

pub fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    return js_sys::Date::now();
    // Native builds (tests): wall-clock milliseconds.
    #[cfg(not(target_arch = "wasm32"))]
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Brings up the GPU, runs the self-test and loads `files` if given; `on_status` hears the load's
/// progress (`loading`), the result is returned.
pub async fn start(
    vendor: String,
    architecture: String,
    files: Option<ModelFiles>,
    on_status: &dyn Fn(&EngineStatus),
) -> EngineStatus {
    let (device, adapter) = match ensure_gpu(vendor, architecture).await {
        Ok(ready) => ready,
        Err(err) => return EngineStatus::Failed { failure: reports::gpu_failure(&err) },
    };
    let report = match self_test::run(&device, now_ms).await {
        Ok(report) if report.passed => reports::self_test_report(report),
        Ok(report) => {
            let (error, tolerance) = (report.max_abs_error.to_string(), report.tolerance.to_string());
            return failed(
                FailureKind::SelfTestFailed,
                "failureSelfTest",
                vec![adapter.name.clone(), error, tolerance],
            );
        }
        Err(err) => {
            return failed(FailureKind::GpuDevice, "failureSelfTestError", vec![err.to_string()]);
        }
    };
    crate::trap::maybe_trap("self_test");
    // Files replace the loaded model (the settings chose another one); without files the loaded
    // model, if any, stays.
    let loaded = ENGINE.with(|e| e.borrow().model.as_ref().map(|m| m.info.clone()));
    let model = match (loaded, files) {
        (loaded, None) => loaded,
        (_, Some(files)) => {
            // The old model's GPU buffers and host memory go before the new one's arrive: two
            // models of gigabytes would not fit together.
            ENGINE.with(|e| e.borrow_mut().model = None);
            let name = files.name.clone();
            match load_model(files, &device, gpu::device_memory(&adapter), on_status).await {
                Ok(model) => {
                    let info = model.info.clone();
                    ENGINE.with(|e| e.borrow_mut().model = Some(model));
                    Some(info)
                }
                Err(LoadFailure { damaged: true, message }) => {
                    return failed(FailureKind::ModelCorrupt, "failureModelInvalid", vec![message]);
                }
                Err(LoadFailure { damaged: false, message }) => {
                    return failed(FailureKind::ModelLoad, "failureModelUnsupported", vec![name, message]);
                }
            }
        }
    };
    EngineStatus::Ready { adapter: reports::adapter_report(adapter), self_test: report, model: model.map(Box::new) }
}

/// A failure by its locale key and arguments (English from the extension's English locale).
fn failed(kind: FailureKind, key: &str, args: Vec<String>) -> EngineStatus {
    EngineStatus::Failed { failure: EngineFailure::localized(kind, key, args) }
}

async fn ensure_gpu(vendor: String, architecture: String) -> Result<(Device, AdapterInfo), gpu::GpuError> {
    if let Some(ready) = ENGINE.with(|e| e.borrow().gpu.clone()) {
        return Ok(ready);
    }
    let gpu = gpu::init_gpu().await?;
    // Browsers often leave the description empty; name the GPU by vendor and architecture then.
    let name = match gpu.adapter.name.trim() {
        "" => format!("{vendor} {architecture}").trim().to_string(),
        name => name.to_string(),
    };
    let adapter = AdapterInfo { name, vendor, architecture, ..gpu.adapter };
    let ready = (gpu.device, adapter);
    ENGINE.with(|e| e.borrow_mut().gpu = Some(ready.clone()));
    Ok(ready)
}

async fn load_model(
    files: ModelFiles,
    device: &Device,
    memory: DeviceMemory,
    on_status: &dyn Fn(&EngineStatus),
) -> Result<LoadedModel, LoadFailure> {
    let start = now_ms();
    let name = files.name.clone();
    let on_progress = |done: usize, total: usize| {
        on_status(&EngineStatus::Loading { model: name.clone(), done: done as u32, total: total as u32 })
    };
    let mut files = files;
    let drafter_files = files.drafter.take();
    let (model, parts, (file_bytes, peak_read_bytes), tower) = load_weights(files, device, &on_progress).await?;
    let (drafter, drafter_name, drafter_failure) = match drafter_files {
        Some(d) => {
            let repo = d.name.clone();
            match load_drafter(d, &parts.config, device).await {
                Ok(drafter) => (Some(drafter), Some(repo), None),
                Err(why) => (None, None, Some(why)),
            }
        }
        None => (None, None, None),
    };
    let (tower, vision_failure) = match tower {
        Some(Ok(tower)) => (Some(tower), None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };
    let sees_images = tower.is_some();
    let config = &parts.config;
    let architecture = format!("{:?}", config.family).to_lowercase();
    let (layers, vocab_size) = (config.num_layers as u32, config.vocab_size as u32);
    let weights = model.weight_bytes();
    let memory_limits = memory;
    let cache = CacheOptions::for_device(config, memory_limits);
    let memory = ModelMemory {
        file_bytes,
        peak_read_bytes,
        device_bytes: weights.device,
        host_bytes: weights.host,
        kv_cache_bytes: cache.bytes(config),
        wasm_memory_bytes: wasm_memory_bytes(),
    };
    let context_tokens = cache.max_context as u32;
    let conversation_caches = cache.caches_within_budget(config, memory_limits).min(MAX_CONVERSATION_CACHES);
    let info = ModelInfo {
        name,
        architecture,
        layers,
        vocab_size,
        load_ms: now_ms() - start,
        context_tokens,
        memory,
        sees_images,
        vision_failure,
        drafter: drafter_name,
        drafter_failure,
        drafter_offer: None,
    };
    let shared =
        SharedModel::new(model, parts, cache, conversation_caches, clock_ms).with_vision(tower).with_drafter(drafter);
    Ok(LoadedModel { shared, info })
}

/// One row of [`measure_verification`].
#[derive(serde::Serialize)]
pub struct VerificationCost {
    k: usize,
    verify_ms: f64,
    token_ms: f64,
}

/// The conversation the measurement uses (its cache only).
const BENCH_CONVERSATION: u64 = u64::MAX - 1;

/// Times verifications of k+1 tokens against decoded tokens on the loaded model (see
/// `measureVerification` in lib.rs). Each figure is the median of `repeats`, after a warm-up.
pub async fn measure_verification(ks: &[usize], repeats: usize) -> Result<Vec<VerificationCost>, String> {
    let model = model().ok_or("no model is loaded")?;
    let mut session = model.session.lock().await;
    session.use_conversation(BENCH_CONVERSATION);
    let vocab = session.model().config.vocab_size as u32;
    let token = |i: usize| 2 + (i as u32 * 7919) % (vocab - 2);
    let prompt: Vec<u32> = (0..32).map(token).collect();
    let read = |ids: burn::tensor::Tensor<2, burn::tensor::Int>| async move {
        let data = ids.into_data_async().await.map_err(|e| e.to_string())?;
        Ok::<u32, String>(data.iter::<i64>().next().unwrap_or(0) as u32)
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (logits, _) = session.prefill(&prompt).map_err(|e| e.to_string())?;
    let mut next = read(logits.argmax(1)).await?;
    // Decoded tokens: two to warm up (pipelines, the recorded step), then timed.
    let mut token_times = Vec::new();
    for i in 0..repeats + 2 {
        let start = now_ms();
        let logits = session.step(next).map_err(|e| e.to_string())?;
        next = read(logits.argmax(1)).await?;
        if i >= 2 {
            token_times.push(now_ms() - start);
        }
    }
    let token_ms = median(token_times);
    let mut rows = Vec::new();
    for &k in ks {
        if k + 1 > session.max_verify() {
            return Err(format!("a verification of {} tokens does not fit the cache's chunk", k + 1));
        }
        let held = session.tokens().len();
        let chunk: Vec<u32> = (0..=k).map(|i| token(held + i)).collect();
        let mut times = Vec::new();
        for i in 0..repeats + 1 {
            let start = now_ms();
            let (logits, _) = session.verify(&chunk).map_err(|e| e.to_string())?;
            read(logits.argmax(1)).await?;
            session.truncate(held).map_err(|e| e.to_string())?;
            if i >= 1 {
                times.push(now_ms() - start);
            }
        }
        rows.push(VerificationCost { k, verify_ms: median(times), token_ms });
    }
    Ok(rows)
}

/// Runs one generation and returns its final event (`done` or `failed`); `emit` gets the tokens.
pub async fn generate(request: &GenerateRequest, emit: &impl Fn(&GenerationEvent)) -> GenerationEvent {
    let request_id = request.request_id;
    let fail = |message: String| GenerationEvent::Failed { request_id, message };
    let Some(model) = model() else {
        return fail("No model is installed yet.".into());
    };
    let mut session = model.session.lock().await;
    session.use_conversation(CHAT_CONVERSATION);
    let (tokenizer, template, stop_tokens) = (&model.tokenizer, &model.template, &model.stop_tokens);

    let messages = [Message::user(request.prompt.clone())];
    let render = RenderRequest {
        messages: &messages,
        tools: &[],
        enable_thinking: false,
        preserve_thinking: false,
        add_generation_prompt: true,
    };
    let result = async {
        let prompt = template.render(&render).map_err(|e| e.to_string())?;
        let ids = tokenizer.encode(&prompt).map_err(|e| e.to_string())?;
        let mut decoding = Decoding::new(SamplingOptions::greedy())
            .drafting_with(model.drafter.as_deref().filter(|_| request.drafting), MAX_DRAFT);
        let (sampler, options) = decoding.options(request.max_tokens as usize, stop_tokens, None);
        let on_token = |token_id, text: &str| {
            emit(&GenerationEvent::Token { request_id, token_id, text: text.into() });
            ControlFlow::Continue(())
        };
        generate::generate(&mut session, sampler, tokenizer, &ids, options, clock_ms, on_token)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    drop(session);
    match result {
        Ok(generation) => GenerationEvent::Done {
            request_id,
            stats: GenerationStats {
                prompt_tokens: generation.prompt_tokens as u32,
                generated_tokens: generation.token_ids.len() as u32,
                prefill_tokens_per_s: generation.prefill_tokens_per_s(),
                decode_tokens_per_s: generation.decode_tokens_per_s(),
                decode_host_ms_per_token: generation.decode_host_ms_per_token(),
                first_decode_host_ms: generation.first_decode_host_ms(),
                drafted_tokens: generation.speculation.as_ref().map_or(0, |s| s.drafted as u32),
                accepted_tokens: generation.speculation.as_ref().map_or(0, |s| s.accepted as u32),
            },
            token_ids: generation.token_ids,
            text: generation.text,
        },
        Err(message) => fail(message),
    }
}
