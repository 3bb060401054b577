//! GPU bring-up: Burn's wgpu runtime, asynchronously (the browser cannot block), plus a report of
//! the adapter and of the limits that decide how tensors must be laid out.

use burn::tensor::Device;
use burn::tensor::wgpu::{WgpuInitError, WgpuSetup, wgpu};

use crate::cache::DeviceMemory;

/// An initialised GPU: the Burn device to put tensors on, and what it is.
#[derive(Clone)]
pub struct Gpu {
    pub device: Device,
    pub adapter: AdapterInfo,
}

/// The adapter, and the limits that decide how tensors must be laid out (the engine reports it
/// to the extension as the protocol's `AdapterReport`).
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterInfo {
    /// The adapter's description, e.g. "NVIDIA GeForce RTX 4070" or "SwiftShader Device".
    pub name: String,
    /// GPU vendor (e.g. "nvidia", or wgpu's PCI id natively); empty when unknown.
    pub vendor: String,
    /// GPU architecture (e.g. "ampere"); empty when unknown.
    pub architecture: String,
    /// The graphics API under wgpu: "BrowserWebGpu", "Vulkan", "Metal", "Dx12"…
    pub backend: String,
    /// "DiscreteGpu", "IntegratedGpu", "Cpu" (a software rasteriser such as SwiftShader or lavapipe)…
    pub device_type: String,
    /// Whether WGSL `f16` is available (half-precision kernels).
    pub shader_f16: bool,
    /// Largest single buffer, in bytes.
    pub max_buffer_size: u64,
    /// Largest storage-buffer binding, in bytes: no tensor may be bigger than this.
    pub max_storage_buffer_binding_size: u64,
    /// Workgroup shared memory, in bytes.
    pub max_compute_workgroup_storage_size: u32,
}

/// Why there is no GPU (what fixes it is in the extension's locales: `failureNoAdapterFix`,
/// `failureGpuRefusedFix`, which the engine and the command line show).
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no WebGPU adapter is available: {0}")]
    NoAdapter(String),
    #[error("the GPU refused to create a device: {0}")]
    Device(String),
}

impl From<WgpuInitError> for GpuError {
    fn from(err: WgpuInitError) -> Self {
        match err {
            WgpuInitError::AdapterUnavailable { .. } => GpuError::NoAdapter(err.to_string()),
            other => GpuError::Device(other.to_string()),
        }
    }
}

/// Kernel launches encoded before cubecl submits them (its default is 32). A submit is the
/// costliest WebGPU call a token makes in Chrome (about 0.17 ms on SwiftShader on a 2-core VM, as
/// much as 50 dispatches' encoding: benches/log/2026-12-03.md, fifteenth session), and E2B decodes about
/// 380 dispatches a token: 12 submits at 32, 2 at 256 (one more at the readback). Not unbounded:
/// the GPU starts a token's work only at the first submit, and a prompt's chunk must not wait
/// for all its launches.
pub const TASKS_PER_SUBMIT: usize = 256;

/// Initialises Burn on the default wgpu adapter. The only way in the browser; also works natively.
pub async fn init_gpu() -> Result<Gpu, GpuError> {
    let (device, setup) = Device::wgpu_options().tasks_max(TASKS_PER_SUBMIT).init_with_setup_async().await?;
    Ok(Gpu { device, adapter: describe(&setup) })
}

/// Native only: initialises Burn on the default wgpu adapter without an executor. Burn's wgpu
/// runtime can be registered once per process, so later calls (tests in parallel threads) get the
/// same device.
#[cfg(not(target_family = "wasm"))]
pub fn init_gpu_blocking() -> Result<Gpu, GpuError> {
    static GPU: std::sync::Mutex<Option<Gpu>> = std::sync::Mutex::new(None);
    let mut cached = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(gpu) = cached.as_ref() {
        return Ok(gpu.clone());
    }
    let (device, setup) = Device::wgpu_options().tasks_max(TASKS_PER_SUBMIT).init_with_setup()?;
    let gpu = Gpu { device, adapter: describe(&setup) };
    *cached = Some(gpu.clone());
    Ok(gpu)
}

fn describe(setup: &WgpuSetup) -> AdapterInfo {
    let info = setup.adapter.get_info();
    let limits = setup.device.limits();
    AdapterInfo {
        name: info.name.clone(),
        // wgpu's web backend exposes neither; the offscreen document fills them from GPUAdapterInfo.
        vendor: if info.vendor == 0 { String::new() } else { format!("{:#06x}", info.vendor) },
        architecture: String::new(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        shader_f16: setup.device.features().contains(wgpu::Features::SHADER_F16),
        max_buffer_size: limits.max_buffer_size,
        max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
        max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
    }
}

/// What the adapter's limits allow a KV cache.
pub fn device_memory(adapter: &AdapterInfo) -> DeviceMemory {
    DeviceMemory {
        max_buffer_bytes: adapter.max_buffer_size,
        max_binding_bytes: adapter.max_storage_buffer_binding_size,
    }
}
