//! What the loop tells the UI. Serializable: the protocol crate wraps these for the extension.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

use crate::policy::{ActionTarget, RiskReason};
use crate::tools::RiskLevel;

/// An event of a running task, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// Visible answer text, streamed.
    Token { text: String },
    /// Reasoning text, streamed.
    Thinking { text: String },
    ToolStart {
        call_id: String,
        name: String,
        #[ts(type = "Record<string, unknown>")]
        arguments: Map<String, Value>,
        /// What it acts on, in the user's words (`None` for tools without a target).
        #[serde(default)]
        target: Option<Box<ActionTarget>>,
    },
    /// `output` is what the model sees (or the error it is told).
    ToolResult {
        call_id: String,
        name: String,
        ok: bool,
        output: String,
        /// A small picture of what the tool showed the model (`screenshot`), for its card.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        thumbnail: Option<String>,
    },
    /// The task waits for [`Decision`](crate::policy::Decision) on this action.
    ConfirmRequest {
        call_id: String,
        name: String,
        #[ts(type = "Record<string, unknown>")]
        arguments: Map<String, Value>,
        risk: RiskLevel,
        reasons: Vec<RiskReason>,
        /// What it acts on, in the user's words: the card names it, shows where it leads and
        /// what will be typed, and the overlay outlines the element on the page.
        #[serde(default)]
        target: Option<Box<ActionTarget>>,
    },
    /// The task waits for the user's answer.
    AskUser { call_id: String, question: String, options: Vec<String> },
    /// The task is finished; `result` is the full deliverable.
    Done { result: String, success: bool },
    /// Something went wrong; `recoverable` tasks can be continued.
    Error { error: TaskError, recoverable: bool },
    /// After each generation.
    Usage {
        prompt_tokens: usize,
        /// Prompt tokens the model computed (the engine's count; without one, those after the
        /// common prefix with the previous prompt).
        prefill_tokens: usize,
        completion_tokens: usize,
        tokens_per_second: Option<f64>,
    },
    /// The task paused and keeps its state; continue it to go on.
    Paused { reason: PauseReason },
    /// Older history was shortened to fit the budget.
    Compacted { before_tokens: usize, after_tokens: usize },
    /// The user stopped the task.
    Stopped,
    /// Passages of page text the model was given, numbered as it cites them ([n]).
    Sources { url: String, title: String, passages: Vec<Source> },
}

/// One numbered passage (numbers go on across the conversation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Source {
    pub number: u32,
    pub text: String,
}

/// Why a task stopped on an error. Each kind has its text in the extension's locales (the
/// overlay words it in the browser's language, the command line in English from the same file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskError {
    /// The conversation needs more tokens than the context budget allows; the user's own
    /// messages are never shortened.
    ContextFull { tokens: usize, max: usize, window: usize },
    /// The chat template could not render the conversation.
    Prompt { detail: String },
    /// The model failed while generating.
    Model { detail: String },
    /// The model wrote nothing.
    EmptyAnswer,
    /// The model made an invalid tool call twice in a row.
    InvalidCallTwice { problem: String },
}

/// Why a task paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PauseReason {
    /// The step limit was reached.
    MaxIterations { limit: usize },
    /// The same action was about to run again and again.
    Repetition { name: String, times: usize },
    /// The same action on the same target failed (or changed nothing) this many times in a row.
    SameFailure { name: String, target: String, times: usize },
    /// This many actions in a row failed.
    Failures { times: usize },
}
