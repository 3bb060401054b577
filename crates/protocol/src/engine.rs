//! The engine's state as the UI sees it: which GPU, whether it computes correctly, or why not.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::model::{ModelOffer, ModelProgress};

/// Where the engine is in its life.
// A message, built a few times per session: boxing the large variant would only complicate it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EngineStatus {
    /// Nothing asked for the engine yet.
    Idle,
    /// Loading the wasm module and initialising the GPU.
    Starting,
    /// The GPU is initialised and passed its self-test; `model` is loaded when one is installed.
    Ready { adapter: AdapterReport, self_test: SelfTestReport, model: Option<Box<ModelInfo>> },
    /// The GPU works but the chosen model is not installed: the overlay offers to download it
    /// (or it can be loaded from a folder in the options page).
    NeedsModel { model: ModelOffer },
    /// Downloading and checking the model's files.
    Installing { model: ModelOffer, progress: ModelProgress },
    /// Reading the installed model onto the GPU: `done` of `total` load steps (the embedding,
    /// slices of the per-layer-embedding table, one step per decoder layer, the final norm).
    Loading { model: String, done: u32, total: u32 },
    /// The engine cannot run; `failure` says why and what to do.
    Failed { failure: EngineFailure },
}

/// The GPU adapter Burn runs on, and the limits that shape how the model is laid out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct AdapterReport {
    /// The adapter's description, e.g. "NVIDIA GeForce RTX 4070" or "SwiftShader Device".
    pub name: String,
    /// GPU vendor as the browser reports it (e.g. "nvidia", "apple", "google"); empty when unknown.
    pub vendor: String,
    /// GPU architecture as the browser reports it (e.g. "ampere", "swiftshader"); empty when unknown.
    pub architecture: String,
    /// The graphics API under wgpu: "BrowserWebGpu", "Vulkan", "Metal", "Dx12"…
    pub backend: String,
    /// "DiscreteGpu", "IntegratedGpu", "Cpu" (a software rasteriser such as SwiftShader or lavapipe)…
    pub device_type: String,
    /// Whether WGSL `f16` is available (half-precision kernels).
    pub shader_f16: bool,
    /// Largest single buffer, in bytes.
    #[ts(type = "number")]
    pub max_buffer_size: u64,
    /// Largest storage-buffer binding, in bytes: no tensor may be bigger than this.
    #[ts(type = "number")]
    pub max_storage_buffer_binding_size: u64,
    /// Workgroup shared memory, in bytes.
    pub max_compute_workgroup_storage_size: u32,
}

/// The model the engine has loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ModelInfo {
    /// A name for people, e.g. "Gemma 4 E2B (4-bit)".
    pub name: String,
    /// `model_type` from config.json.
    pub architecture: String,
    pub layers: u32,
    pub vocab_size: u32,
    /// Wall time to read the weights onto the GPU, in milliseconds.
    pub load_ms: f64,
    /// Positions the KV cache holds, chosen for this model and adapter: the longest prompt plus
    /// answer a conversation can have (the agent compacts its history to fit).
    pub context_tokens: u32,
    /// Where the model's bytes were during the load, and are now.
    pub memory: ModelMemory,
    /// Whether the model loaded a vision tower: its tasks can take screenshots and click at
    /// points of them (a text-only file, or a GGUF without its projector, cannot).
    #[serde(default)]
    pub sees_images: bool,
    /// Why the model's vision tower did not load, when it has one that failed (the model then
    /// works without screenshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub vision_failure: Option<String>,
    /// Whether the model loaded an audio tower: it takes spoken requests (a text-only file, or a
    /// GGUF without its projector, cannot).
    #[serde(default)]
    pub hears_audio: bool,
    /// Why the model's audio tower did not load, when it has one that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub audio_failure: Option<String>,
    /// The assistant the model drafts with (speculative decoding), when one is installed and
    /// loaded: its repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub drafter: Option<String>,
    /// Why the installed assistant did not load (the model then decodes without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub drafter_failure: Option<String>,
    /// The model's published assistant when it is not installed (its manifest names one): what
    /// the overlay offers to download. Filled in by the offscreen document from the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub drafter_offer: Option<crate::ModelOffer>,
    /// The model's vision tower where it is a file of its own (a GGUF model's projector, its
    /// manifest's `vision_files`) when it is not installed: what the overlay offers to download so
    /// that the model sees the page. Filled in by the offscreen document from the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub projector_offer: Option<crate::ModelOffer>,
}

/// What a loaded model costs in memory, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct ModelMemory {
    /// The weight files' size.
    #[ts(type = "number")]
    pub file_bytes: u64,
    /// The most bytes of the weight files held in memory at once during the load (the whole
    /// files when they were given in memory; one load step's when streamed from the store).
    #[ts(type = "number")]
    pub peak_read_bytes: u64,
    /// Weights on the GPU.
    #[ts(type = "number")]
    pub device_bytes: u64,
    /// Weights kept in host (wasm) memory.
    #[ts(type = "number")]
    pub host_bytes: u64,
    /// One conversation's KV cache on the GPU (`context_tokens` positions).
    #[ts(type = "number")]
    pub kv_cache_bytes: u64,
    /// The engine's whole linear memory after the load (wasm memory never shrinks, so this is
    /// its peak so far); 0 in native builds.
    #[ts(type = "number")]
    pub wasm_memory_bytes: u64,
}

/// The result of the known-answer computation run on the GPU at start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SelfTestReport {
    /// What was computed, in words.
    pub computation: String,
    /// Whether every value is within `tolerance` of the reference.
    pub passed: bool,
    /// The values read back from the GPU, row-major.
    pub values: Vec<f32>,
    /// Largest |GPU − reference| over all values.
    pub max_abs_error: f32,
    pub tolerance: f32,
    /// Wall time of the computation including the read-back, in milliseconds.
    pub elapsed_ms: f64,
    /// Largest |GPU − reference| of the fused 4- and 8-bit dequantize-matmul kernels on a small
    /// known matrix (`None` where the backend runs no fused kernels: the CPU). Part of `passed`.
    pub fused_kernels_max_abs_error: Option<f32>,
}

/// Why the engine cannot run, with the action that fixes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct EngineFailure {
    pub kind: FailureKind,
    /// What happened, for a person.
    pub message: String,
    /// What they can do about it.
    pub fix: String,
    /// The same in the extension's locales: the service worker replaces `message` and `fix` by
    /// their text in the browser's language before any tab sees them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub text: Option<FailureText>,
}

/// Where a failure's text is in `_locales/*/messages.json`: `key` holds the message and
/// `key` + `Fix` the fix; `args` fill their placeholders in order (details such as a driver's own
/// error stay as they came).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct FailureText {
    /// One of `FAILURE_KEYS`.
    #[ts(type = "FailureKey")]
    pub key: String,
    pub args: Vec<String>,
}

impl EngineFailure {
    /// A failure by its locale key: `message` and `fix` in English from the extension's own
    /// locale (the command line prints them), and the key the extension shows in the browser's
    /// language instead.
    pub fn localized(kind: FailureKind, key: &str, args: Vec<String>) -> Self {
        let message = crate::english::text(key, &args);
        let fix = crate::english::text(&format!("{key}Fix"), &[]);
        EngineFailure { kind, message, fix, text: Some(FailureText { key: key.into(), args }) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The browser exposes no WebGPU, or no adapter.
    WebgpuUnavailable,
    /// WebGPU exists but the device could not be created or was lost.
    GpuDevice,
    /// The GPU computed a wrong answer.
    SelfTestFailed,
    /// The wasm module failed to load.
    EngineLoad,
    /// The model's files are missing or invalid.
    ModelLoad,
    /// The model could not be downloaded (network, server); what was stored so far is kept.
    ModelDownload,
    /// A downloaded or chosen file does not match the SHA-256 in the model's manifest.
    ModelCorrupt,
    /// The browser has not enough storage for the model.
    StorageQuota,
    /// The model's manifest has no pinned revision or hashes yet: nothing unverified is installed.
    ModelUnpinned,
}

impl FailureKind {
    /// Every kind, in declaration order.
    pub const ALL: [FailureKind; 9] = [
        FailureKind::WebgpuUnavailable,
        FailureKind::GpuDevice,
        FailureKind::SelfTestFailed,
        FailureKind::EngineLoad,
        FailureKind::ModelLoad,
        FailureKind::ModelDownload,
        FailureKind::ModelCorrupt,
        FailureKind::StorageQuota,
        FailureKind::ModelUnpinned,
    ];

    /// A failure to install a model (download, check, store): the overlay says the install
    /// failed, not the engine.
    pub fn is_install(self) -> bool {
        matches!(
            self,
            FailureKind::ModelDownload
                | FailureKind::ModelCorrupt
                | FailureKind::StorageQuota
                | FailureKind::ModelUnpinned
        )
    }

    /// A failure after which Retry needs a fresh engine (the worker replaces the offscreen
    /// document): a lost GPU device cannot be replaced in place, nor a trapped instance be used again.
    pub fn needs_fresh_engine(self) -> bool {
        matches!(self, FailureKind::GpuDevice | FailureKind::EngineLoad)
    }

    /// The name on the wire (`model_download`).
    pub fn wire_name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    }
}

/// Every failure's locale key ([`FailureText::key`]), the engine's and the extension's: each has
/// a message and a fix (`<key>Fix`) in `extension/static/_locales/*/messages.json`. TypeScript
/// takes a key only from this list (`FailureKey`, generated).
pub const FAILURE_KEYS: &[&str] = &[
    // The GPU and the engine (crates/model, crates/offscreen, the offscreen document).
    "failureNoAdapter",
    "failureGpuRefused",
    "failureSelfTest",
    "failureSelfTestError",
    "failureDeviceLost",
    "failureEngineLoad",
    "failureEngineStart",
    "failureEngineCrashed",
    "failureEngineCrashedNoModel",
    "failureEngineGone",
    "failureEngineSilent",
    // A model's files.
    "failureModelInvalid",
    "failureModelUnsupported",
    "failureModelRead",
    "failureModelFiles",
    "failureNoTemplate",
    "failureUnpinned",
    "failureOwnNotGguf",
    "failureOwnArchitecture",
    "failureOwnInvalid",
    "failureOwnModelMissing",
    "failureFolderMissing",
    "failureFolderSize",
    // Installing a model.
    "failureCorrupt",
    "failureCorruptFolder",
    "failureRangeIgnored",
    "failureHttp",
    "failureRetries",
    "failureQuota",
    "failureStoredIncomplete",
    "failureDownloadStopped",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    #[test]
    fn all_lists_every_kind_once() {
        // Exhaustive: a new kind does not compile until it is placed here and in ALL.
        let index = |kind: FailureKind| match kind {
            FailureKind::WebgpuUnavailable => 0,
            FailureKind::GpuDevice => 1,
            FailureKind::SelfTestFailed => 2,
            FailureKind::EngineLoad => 3,
            FailureKind::ModelLoad => 4,
            FailureKind::ModelDownload => 5,
            FailureKind::ModelCorrupt => 6,
            FailureKind::StorageQuota => 7,
            FailureKind::ModelUnpinned => 8,
        };
        for (i, kind) in FailureKind::ALL.iter().enumerate() {
            assert_eq!(index(*kind), i);
        }
        assert_eq!(FailureKind::ModelDownload.wire_name(), "model_download");
    }

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The failure keys quoted in `text` (a quote, `failure`, a capital, letters and digits, a quote).
    fn keys_in(text: &str) -> Vec<String> {
        let mut keys = Vec::new();
        for (at, _) in text.match_indices("\"failure") {
            let rest = &text[at + 1..];
            let Some(end) = rest.find('"') else { continue };
            let key = &rest[..end];
            let after = key["failure".len()..].chars().next();
            if after.is_some_and(|c| c.is_ascii_uppercase()) && key.chars().all(|c| c.is_ascii_alphanumeric()) {
                keys.push(key.to_owned());
            }
        }
        keys
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("target") {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The Rust crates name their failures by literal keys (`EngineFailure::localized`): each must
    /// be one of FAILURE_KEYS (TypeScript's are checked by the compiler).
    #[test]
    fn every_failure_key_in_the_crates_is_listed() {
        let listed: BTreeSet<&str> = FAILURE_KEYS.iter().copied().collect();
        assert_eq!(listed.len(), FAILURE_KEYS.len(), "a key is listed twice");
        let mut files = Vec::new();
        rust_files(&repo().join("crates"), &mut files);
        let mut unlisted = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            unlisted.extend(keys_in(&text).into_iter().filter(|k| !listed.contains(k.as_str())));
        }
        assert!(unlisted.is_empty(), "failure keys missing from FAILURE_KEYS: {unlisted:?}");
    }

    #[test]
    fn every_failure_key_has_a_message_and_a_fix() {
        let path = repo().join("extension/static/_locales/en/messages.json");
        let messages: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for key in FAILURE_KEYS {
            assert!(messages.get(*key).is_some(), "{key} has no message in {}", path.display());
            assert!(messages.get(format!("{key}Fix")).is_some(), "{key}Fix has no message in {}", path.display());
        }
    }
}
