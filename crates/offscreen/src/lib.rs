//! The offscreen document's engine, compiled to wasm32.
//!
//! JavaScript (extension/src/offscreen/) owns the messaging and fetching files; this module owns
//! the GPU, the model and generation. Every export returns JSON of a `hearth_protocol` type, so the
//! shapes are defined once, in Rust. Nothing here reads the GPU synchronously.

mod engine;

use hearth_model::gpu;
use hearth_protocol::{EngineStatus, GenerateRequest, GenerationEvent};
use wasm_bindgen::prelude::*;

pub use engine::ModelFiles;

#[wasm_bindgen(start)]
pub fn on_load() {
    console_error_panic_hook::set_once();
}

/// Initialises Burn on the browser's WebGPU (once), runs the self-test, loads `model` if given and
/// none is loaded yet, and returns the resulting `EngineStatus` as JSON (`ready` or `failed`).
///
/// `vendor` and `architecture` come from the page's `GPUAdapterInfo`, which wgpu does not expose.
#[wasm_bindgen(js_name = startEngine)]
pub async fn start_engine(vendor: String, architecture: String, model: Option<ModelFiles>) -> String {
    to_json(&engine::start(vendor, architecture, model).await)
}

/// The `failed` status for a browser without WebGPU (checked in JavaScript before Burn starts),
/// so that the message and its fix are written once, here.
#[wasm_bindgen(js_name = webgpuUnavailable)]
pub fn webgpu_unavailable(detail: String) -> String {
    to_json(&EngineStatus::Failed { failure: gpu::GpuError::NoAdapter(detail).to_failure() })
}

/// Generates a reply to `request` (a `GenerateRequest` as JSON), calling `on_event` with each
/// `GenerationEvent` as JSON: tokens as they come, then `done` or `failed`.
#[wasm_bindgen]
pub async fn generate(request: String, on_event: js_sys::Function) {
    let emit = |event: &GenerationEvent| {
        let _ = on_event.call1(&JsValue::NULL, &JsValue::from_str(&to_json(event)));
    };
    match serde_json::from_str::<GenerateRequest>(&request) {
        Ok(request) => emit(&engine::generate(&request, &emit).await),
        Err(err) => emit(&GenerationEvent::Failed { request_id: 0, message: format!("malformed request: {err}") }),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Protocol types are plain data: serialising them cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}
