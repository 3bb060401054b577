//! Messages that cross the extension's process boundaries: offscreen document ⇄ service worker ⇄ tabs.
//!
//! This crate is the single source of truth for their shapes. The TypeScript side imports
//! `extension/src/generated/protocol.ts`, generated from these types by
//! `cargo xtask gen-types` (the `generated_typescript_is_fresh` test fails when it is stale).
//!
//! The runtime messages have one enum per sender and receiver ([`bus`]): [`TabToWorker`],
//! [`EngineToWorker`], [`OptionsToWorker`], [`WorkerToEngine`] and [`WorkerToTab`], each tagged by
//! `kind`. They carry no address and no claim about their sender: `chrome.runtime.sendMessage`
//! reaches every extension page at once (a content script's reaches the offscreen document too),
//! so each receiver decides from the browser's `MessageSender` who sent a message, parses it as
//! that sender's enum, and drops the rest.

pub mod bus;
mod engine;
pub mod english;
mod generation;
mod model;
mod task;
pub mod typescript;

pub use bus::{
    Article, BusMessage, ChatInput, EngineToWorker, OptionsToWorker, PanelTabState, PanelToWorker, SettingsView,
    TabChoice, TabToWorker, VoiceAction, VoiceState, WorkerToEngine, WorkerToPanel, WorkerToTab,
};
pub use engine::{
    AdapterReport, EngineFailure, EngineStatus, FAILURE_KEYS, FailureKind, FailureText, ModelInfo, ModelMemory,
    SelfTestReport,
};
pub use generation::{GenerateRequest, GenerationEvent, GenerationStats};
pub use model::{
    BUNDLED_ASSISTANT_FILES, BUNDLED_MODEL_FILES, DrafterManifest, GgufInspection, GgufSummary, KnownUpload,
    ManifestFile, ModelFormat, ModelManifest, ModelOffer, ModelProgress,
};
pub use task::{
    ActionTarget, AddressWarning, AgentEvent, Decision, ElementInfo, FormInfo, IMAGE_BUDGETS, Outcome, PageInfo,
    Passages, PauseReason, RiskLevel, RiskReason, Snapshot, Source, TaskAction, TaskError, TaskRefusal, TaskSettings,
    TaskUpdate, ToolMode, ToolOutput, ToolReply, ToolRequest, default_image_budget,
};
