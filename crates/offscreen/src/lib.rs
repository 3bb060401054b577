//! The offscreen document's engine, compiled to wasm32.
//!
//! JavaScript (extension/src/offscreen/) owns the messaging; this module owns the GPU. Every export
//! returns a JSON string of a `hearth_protocol` type, so the shapes are defined once in Rust.

use std::cell::RefCell;

use burn::tensor::Device;
use hearth_model::{gpu, self_test};
use hearth_protocol::{EngineFailure, EngineStatus, FailureKind};
use wasm_bindgen::prelude::*;

thread_local! {
    /// Burn's wgpu runtime can be initialised once per page; later calls reuse it.
    static GPU: RefCell<Option<(Device, hearth_protocol::AdapterReport)>> = const { RefCell::new(None) };
}

#[wasm_bindgen(start)]
pub fn on_load() {
    console_error_panic_hook::set_once();
}

/// Initialises Burn on the browser's WebGPU, runs the self-test, and returns the resulting
/// `EngineStatus` as JSON (`ready` or `failed`; never throws).
///
/// `vendor` and `architecture` come from the page's `GPUAdapterInfo`, which wgpu does not expose.
#[wasm_bindgen(js_name = startEngine)]
pub async fn start_engine(vendor: String, architecture: String) -> String {
    let status = match ensure_gpu(vendor, architecture).await {
        Ok((device, adapter)) => match self_test::run(&device, js_sys::Date::now).await {
            Ok(report) if report.passed => EngineStatus::Ready { adapter, self_test: report },
            Ok(report) => EngineStatus::Failed {
                failure: EngineFailure {
                    kind: FailureKind::SelfTestFailed,
                    message: format!(
                        "The GPU ({}) computed a wrong answer: error {} > {}.",
                        adapter.name, report.max_abs_error, report.tolerance
                    ),
                    fix: "Update the graphics driver, or disable hardware acceleration quirks in chrome://flags.".into(),
                },
            },
            Err(err) => EngineStatus::Failed {
                failure: EngineFailure {
                    kind: FailureKind::GpuDevice,
                    message: err.to_string(),
                    fix: "Reload the extension; if it persists, restart the browser (the GPU device may be lost).".into(),
                },
            },
        },
        Err(err) => EngineStatus::Failed { failure: err.to_failure() },
    };
    serde_json::to_string(&status).unwrap_or_default()
}

/// The `failed` status for a browser without WebGPU (checked in JavaScript before Burn starts),
/// so that the message and its fix are written once, here.
#[wasm_bindgen(js_name = webgpuUnavailable)]
pub fn webgpu_unavailable(detail: String) -> String {
    let status = EngineStatus::Failed { failure: gpu::GpuError::NoAdapter(detail).to_failure() };
    serde_json::to_string(&status).unwrap_or_default()
}

async fn ensure_gpu(
    vendor: String,
    architecture: String,
) -> Result<(Device, hearth_protocol::AdapterReport), gpu::GpuError> {
    if let Some(ready) = GPU.with(|cell| cell.borrow().clone()) {
        return Ok(ready);
    }
    let gpu = gpu::init_gpu().await?;
    let mut adapter = gpu.adapter;
    adapter.vendor = vendor;
    adapter.architecture = architecture;
    let ready = (gpu.device, adapter);
    GPU.with(|cell| *cell.borrow_mut() = Some(ready.clone()));
    Ok(ready)
}
