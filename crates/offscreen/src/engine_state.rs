//! The engine's state in the offscreen document: one GPU device, at most one model, one
//! generation at a time (others wait their turn on the session's lock).

use std::cell::RefCell;
use std::ops::ControlFlow;

use burn::tensor::Device;
use hearth_chat::{Message, RenderRequest};
use hearth_engine::loading::{self, LoadContext, LoadFailure};
use hearth_engine::{Decoding, MAX_DRAFT, SharedModel};
use hearth_model::generate;
use hearth_model::gpu::AdapterInfo;
use hearth_model::{DeviceMemory, SamplingOptions, gpu, self_test};
use hearth_protocol::{
    EngineFailure, EngineStatus, FailureKind, GenerateRequest, GenerationEvent, GenerationStats, ModelInfo,
};

use crate::model_files::ModelFiles;
use hearth_engine::reports;

/// The wasm instance's linear memory, in bytes (it only grows: this is its peak); 0 natively.
pub fn wasm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size(0) as u64 * 65_536;
    #[cfg(not(target_arch = "wasm32"))]
    0
}

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
            let name = files.name().to_string();
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
    let name = files.name().to_string();
    let on_progress = |done: usize, total: usize| {
        on_status(&EngineStatus::Loading { model: name.clone(), done: done as u32, total: total as u32 })
    };
    let loaded = loading::load(files.payload, device, &on_progress).await?;
    let context =
        LoadContext { name, memory, load_ms: now_ms() - start, wasm_memory_bytes: wasm_memory_bytes(), clock_ms };
    let (shared, info) = loaded.share(context);
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
