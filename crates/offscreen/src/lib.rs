//! The offscreen document's engine, compiled to wasm32.
//!
//! JavaScript (extension/src/offscreen/) owns the messaging and fetching files; this module owns
//! the GPU, the model and generation. Every export returns JSON of a `hearth_protocol` type, so the
//! shapes are defined once, in Rust. Nothing here reads the GPU synchronously.

mod engine_state;
/// "Use a model file you already have": a chosen GGUF file's header, judged by the engine's parsers.
pub mod inspect;
mod model_files;
mod sha256;
mod tasks;
/// What only test and bench builds export: the chat reply and the bench's timings.
#[cfg(feature = "test-exports")]
mod test_exports;
mod trap;
mod warnings;

use hearth_model::gpu;
use hearth_protocol::{EngineStatus, WorkerToEngine};
use wasm_bindgen::prelude::*;

pub use model_files::ModelFiles;
pub use sha256::Sha256;

// Synthesised by wasm-ld: runs the module's static constructors (CubeCL's IR registers its
// operations with `inventory` constructors).
#[cfg(target_family = "wasm")]
unsafe extern "C" {
    fn __wasm_call_ctors();
}

#[wasm_bindgen(start)]
pub fn on_load() {
    // Run the constructors once, here. A module that never calls them from an export is linked
    // "command-style": wasm-ld then reruns every constructor at the top of every export, including
    // the externref-table exports the JS glue calls for each WebGPU object; that was two thirds of
    // the browser's host time per token (benches/RESULTS.md). `xtask build` checks the linkage.
    #[cfg(target_family = "wasm")]
    // SAFETY: called once, at instantiation, before any other export runs.
    unsafe {
        __wasm_call_ctors()
    };
    trap::install_panic_hook();
    warnings::install();
}

/// Initialises Burn on the browser's WebGPU (once), runs the self-test, loads `model` if given (in
/// place of any loaded one), and returns the resulting `EngineStatus` as JSON (`ready` or `failed`).
/// `on_status`, if given, receives `loading` statuses as JSON while the model is read.
///
/// `vendor` and `architecture` come from the page's `GPUAdapterInfo`, which wgpu does not expose.
#[wasm_bindgen(js_name = startEngine)]
pub async fn start_engine(
    vendor: String,
    architecture: String,
    model: Option<ModelFiles>,
    on_status: Option<js_sys::Function>,
) -> String {
    let emit = |status: &EngineStatus| {
        if let Some(on_status) = &on_status {
            let _ = on_status.call1(&JsValue::NULL, &JsValue::from_str(&to_json(status)));
        }
        if let EngineStatus::Loading { done, .. } = status {
            trap::maybe_trap_step("load_step", Some(*done as usize));
        }
    };
    trap::maybe_trap("start");
    to_json(&engine_state::start(vendor, architecture, model, &emit).await)
}

/// The `failed` status for a browser without WebGPU (checked in JavaScript before Burn starts),
/// so that the message and its fix are written once, here.
#[wasm_bindgen(js_name = webgpuUnavailable)]
pub fn webgpu_unavailable(detail: String) -> String {
    to_json(&EngineStatus::Failed { failure: hearth_engine::reports::gpu_failure(&gpu::GpuError::NoAdapter(detail)) })
}

/// Generates a reply to `request` (a `GenerateRequest` as JSON), calling `on_event` with each
/// `GenerationEvent` as JSON: tokens as they come, then `done` or `failed`.
#[cfg(feature = "test-exports")]
#[wasm_bindgen]
pub async fn generate(request: String, on_event: js_sys::Function) {
    use hearth_protocol::{GenerateRequest, GenerationEvent};
    let emit = |event: &GenerationEvent| {
        let _ = on_event.call1(&JsValue::NULL, &JsValue::from_str(&to_json(event)));
    };
    match serde_json::from_str::<GenerateRequest>(&request) {
        Ok(request) => emit(&test_exports::generate(&request, &emit).await),
        Err(err) => emit(&GenerationEvent::Failed { request_id: 0, message: format!("malformed request: {err}") }),
    }
}

/// Speculative decoding's cost in this browser, on the loaded model
/// (`extension/scripts/bench-browser.mjs --speculative`): for each k of `ks` (a JSON array), the
/// median milliseconds of a verification of k+1 tokens (ids read back, then rewound) beside one
/// decoded token (the recorded step and its 4-byte readback), as JSON
/// `[{k, verify_ms, token_ms}]`, or `{error}`.
#[cfg(feature = "test-exports")]
#[wasm_bindgen(js_name = measureVerification)]
pub async fn measure_verification(ks: String, repeats: u32) -> String {
    let result = match serde_json::from_str::<Vec<usize>>(&ks) {
        Ok(ks) => test_exports::measure_verification(&ks, repeats.max(1) as usize).await,
        Err(err) => Err(format!("ks must be a JSON array of numbers: {err}")),
    };
    match result {
        Ok(rows) => serde_json::to_string(&rows).unwrap_or_default(),
        Err(error) => serde_json::json!({ "error": error }).to_string(),
    }
}

/// Connects agent tasks to JavaScript: `on_update(tabId, taskUpdateJson)` receives every
/// `TaskUpdate`; `run_tool(toolRequestJson)` returns a Promise of a `ToolReply` as JSON.
#[wasm_bindgen(js_name = setTaskHost)]
pub fn set_task_host(on_update: js_sys::Function, run_tool: js_sys::Function) {
    tasks::set_host(tasks::TaskHost { on_update, run_tool });
}

/// Handles a `WorkerToEngine` task message (`start_task`, `task_control`) as JSON. Resolves when the
/// run it starts returns (the task waits for the user, or is over); updates stream meanwhile.
/// `voice`: the samples (16 kHz mono) of the clip a `start_task` names, which the document holds.
#[wasm_bindgen(js_name = taskMessage)]
pub async fn task_message(message: String, voice: Option<Vec<f32>>) -> Result<(), JsError> {
    match serde_json::from_str::<WorkerToEngine>(&message) {
        Ok(WorkerToEngine::StartTask { tab_id, text, selection, page, settings, history, voice: clip, tabs }) => {
            let voice = match (clip, voice) {
                (Some(_), Some(samples)) => Some(samples),
                (Some(clip), None) => {
                    return Err(JsError::new(&format!("the recording {clip} is gone: record the request again")));
                }
                (None, _) => None,
            };
            let request = tasks::Request { text, selection, page, voice, tabs };
            tasks::start_task(tab_id, request, settings, history).await
        }
        Ok(WorkerToEngine::TaskControl { tab_id, action }) => tasks::control(tab_id, action).await,
        Ok(other) => return Err(JsError::new(&format!("not a task message: {other:?}"))),
        Err(err) => return Err(JsError::new(&format!("malformed task message: {err}"))),
    }
    Ok(())
}

/// Test builds only: the next agent tasks replay these outputs instead of running the model: a
/// JSON array of strings for every task, or an object of such arrays keyed by a marker that the
/// task's prompt contains; `null` goes back to the model.
#[cfg(feature = "scripted")]
#[wasm_bindgen(js_name = useScriptedModel)]
pub fn use_scripted_model(replies: String) -> Result<(), JsError> {
    let script = match replies.trim() {
        "null" => None,
        json => Some(hearth_agent::scripted::ScriptedModel::from_json(json).map_err(|e| {
            JsError::new(&format!("the script must be null, an array of strings, or an object of such arrays: {e}"))
        })?),
    };
    tasks::scripted::load(script);
    Ok(())
}

/// Test builds only: the prompts the scripted model received, as a JSON array.
#[cfg(feature = "scripted")]
#[wasm_bindgen(js_name = scriptedPrompts)]
pub fn scripted_prompts() -> String {
    to_json(&tasks::scripted::prompts())
}

/// Test builds only: what the engine made of each scripted step's screenshots (token counts
/// before and after the soft tokens), as a JSON array.
#[cfg(feature = "scripted")]
#[wasm_bindgen(js_name = scriptedImagePrompts)]
pub fn scripted_image_prompts() -> String {
    to_json(&tasks::scripted::image_prompts())
}

/// Test builds only: with the loaded model, renders a user message (declaring the agent's tools
/// when `render_tools`) with the model's template, opens a call (`<|tool_call>`), and decodes it as
/// an agent step does (the call constraint of the agent's tools, hot sampling with `seed`, at most
/// `max_tokens`), then the same without the constraint (`free_tokens`, none when 0). Resolves to
/// JSON (`hearth_engine::probe::Probe`): the texts, whether each closed with `<tool_call|>`, and the agent
/// parser's and validator's verdict on each.
#[cfg(feature = "scripted")]
#[wasm_bindgen(js_name = constrainedCallProbe)]
pub async fn constrained_call_probe(
    seed: u32,
    max_tokens: u32,
    free_tokens: u32,
    render_tools: bool,
) -> Result<String, JsError> {
    let engine = engine_state::engine().ok_or_else(|| JsError::new("no model is loaded"))?;
    let probe = engine.probe(seed, max_tokens, free_tokens, render_tools).await.map_err(|e| JsError::new(&e))?;
    Ok(to_json(&probe))
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Protocol types are plain data: serialising them cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}
