//! The engine's state in the offscreen document: one GPU device, at most one model, one
//! generation at a time (others wait their turn on the session's lock).

use std::cell::RefCell;

use burn::tensor::Device;
use hearth_engine::loading::{LoadFailure, MAX_CONVERSATION_CACHES};
use hearth_engine::{Engine, Host};
use hearth_model::gpu::AdapterInfo;
use hearth_model::{DeviceMemory, gpu, self_test};
use hearth_protocol::{EngineFailure, EngineStatus, FailureKind};

use crate::model_files::ModelFiles;
use hearth_engine::reports;

/// The wasm instance's linear memory, in bytes (it only grows: this is its peak); 0 natively.
pub fn wasm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size(0) as u64 * 65_536;
    #[cfg(not(target_arch = "wasm32"))]
    0
}

/// The loaded model's engine, if any.
pub fn engine() -> Option<Engine> {
    ENGINE.with(|e| e.borrow().model.clone())
}

#[derive(Default)]
struct State {
    gpu: Option<(Device, AdapterInfo)>,
    model: Option<Engine>,
}

thread_local! {
    static ENGINE: RefCell<State> = RefCell::new(State::default());
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
    let loaded = ENGINE.with(|e| e.borrow().model.as_ref().map(|m| m.info().clone()));
    let model = match (loaded, files) {
        (loaded, None) => loaded,
        (_, Some(files)) => {
            // The old model's GPU buffers and host memory go before the new one's arrive: two
            // models of gigabytes would not fit together.
            ENGINE.with(|e| e.borrow_mut().model = None);
            let name = files.name().to_string();
            match load_model(files, &device, gpu::device_memory(&adapter), on_status).await {
                Ok(model) => {
                    let info = model.info().clone();
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
) -> Result<Engine, LoadFailure> {
    let name = files.name().to_string();
    let on_progress = |done: usize, total: usize| {
        on_status(&EngineStatus::Loading { model: name.clone(), done: done as u32, total: total as u32 })
    };
    let host = Host { memory, clock_ms, wasm_memory_bytes, max_conversations: MAX_CONVERSATION_CACHES };
    Engine::load(files.payload, device, &host, &on_progress).await
}
