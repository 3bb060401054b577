//! Messages that cross the extension's process boundaries: offscreen document ⇄ service worker ⇄ tabs.
//!
//! This crate is the single source of truth for their shapes. The TypeScript side imports
//! `extension/src/generated/protocol.ts`, generated from these types by
//! `cargo xtask gen-types` (the `generated_typescript_is_fresh` test fails when it is stale).
//!
//! Every runtime message is a [`RuntimeMessage`]: `{ "to": <endpoint>, "msg": { "kind": …, … } }`.
//! `chrome.runtime.sendMessage` reaches every extension page at once, so each receiver keeps only
//! the messages addressed to it.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

mod engine;
mod generation;
mod model;
mod task;
pub mod typescript;

pub use engine::{AdapterReport, EngineFailure, EngineStatus, FailureKind, FailureText, ModelInfo, SelfTestReport};
pub use generation::{GenerateRequest, GenerationEvent, GenerationStats};
pub use model::{ManifestFile, ModelFormat, ModelManifest, ModelOffer, ModelProgress};
pub use task::{
    AgentEvent, Decision, ElementInfo, FormInfo, Outcome, PageInfo, PauseReason, RiskLevel, RiskReason, Snapshot,
    TaskAction, TaskSettings, TaskUpdate, ToolOutput, ToolReply, ToolRequest,
};

/// A message on `chrome.runtime`, with the endpoint it is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "to", content = "msg", rename_all = "snake_case")]
pub enum RuntimeMessage {
    /// For the offscreen document (the engine).
    Offscreen(ToOffscreen),
    /// For the service worker (the bus).
    Worker(ToWorker),
    /// For a tab's content script (the overlay).
    Tab(ToTab),
}

/// Requests the service worker sends to the offscreen document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToOffscreen {
    /// Initialise the GPU, check it with a computation whose answer is known, load the model:
    /// `model_id` is a manifest id from the settings, or `None` for the build's default (the
    /// bundled test model in test builds). The response is the resulting `EngineStatus`, which is
    /// `needs_model` when the model is not installed.
    StartEngine { model_id: Option<String> },
    /// Download, verify and store a model, then load it; `installing` statuses stream meanwhile
    /// and the response is the final `EngineStatus`.
    InstallModel { model_id: String },
    /// Start a task in the tab's conversation (created on first use).
    StartTask {
        tab_id: u32,
        text: String,
        page: Option<PageInfo>,
        settings: TaskSettings,
        /// The tab's conversation as last reported (`TaskUpdate::History`), for an engine that no
        /// longer holds it (the offscreen document was recreated); ignored otherwise.
        #[serde(default)]
        history: Option<String>,
    },
    /// The user acted on the tab's task.
    TaskControl { tab_id: u32, action: TaskAction },
}

/// What the service worker receives from the offscreen document and from tabs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToWorker {
    /// From the offscreen document: its script is loaded and listening.
    OffscreenReady,
    /// From the offscreen document: the engine's state changed.
    EngineStatus { status: EngineStatus },
    /// From a tab: send me the engine's state now and whenever it changes.
    WatchEngine,
    /// From a tab: the user agreed to download this model (the one a `needs_model` status offered).
    InstallModel { model_id: String },
    /// From the options page: a model was installed from a folder; start the engine again if it
    /// was waiting for one.
    ModelInstalled { model_id: String },
    /// From a tab: start a task with this message (the worker adds the tab and the settings).
    StartTask { text: String, page: Option<PageInfo> },
    /// From a tab: the user acted on its task.
    TaskControl { action: TaskAction },
    /// From the offscreen document: progress of a tab's task.
    TaskUpdate { tab_id: u32, update: TaskUpdate },
    /// From the offscreen document: run a tool; the message's response is a `ToolReply`.
    RunTool { request: ToolRequest },
}

/// What the service worker pushes to a tab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToTab {
    /// The engine's current state.
    EngineStatus { status: EngineStatus },
    /// Progress of this tab's task.
    TaskUpdate { update: TaskUpdate },
    /// Run a page tool (snapshot, click, type…); the message's response is a `ToolReply`.
    RunTool { request: ToolRequest },
    /// Abort the tools running in this tab (the user pressed stop).
    CancelTools,
    /// Open the overlay with the page's selection as context (the keyboard shortcut).
    OpenOverlay,
}

impl RuntimeMessage {
    /// Parses a message received from JavaScript; `None` when it is not one of ours.
    pub fn from_json(json: &str) -> Option<Self> {
        serde_json::from_str(json).ok()
    }

    pub fn to_json(&self) -> String {
        // Serialising these plain enums cannot fail: no maps with non-string keys, no foreign types.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_is_tagged_by_endpoint_and_kind() {
        let msg = RuntimeMessage::Offscreen(ToOffscreen::StartEngine { model_id: None });
        assert_eq!(msg.to_json(), r#"{"to":"offscreen","msg":{"kind":"start_engine","model_id":null}}"#);
        let back = RuntimeMessage::from_json(r#"{"to":"worker","msg":{"kind":"watch_engine"}}"#);
        assert_eq!(back, Some(RuntimeMessage::Worker(ToWorker::WatchEngine)));
    }

    #[test]
    fn foreign_messages_are_ignored() {
        assert_eq!(RuntimeMessage::from_json(r#"{"type":"something-else"}"#), None);
        assert_eq!(RuntimeMessage::from_json("not json"), None);
    }
}
