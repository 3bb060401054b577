//! Agent tasks: a conversation per tab, run by the offscreen document; tool calls travel
//! offscreen → service worker → the task's tab and back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

pub use hearth_agent::{
    ActionTarget, AddressWarning, AgentEvent, Decision, ElementInfo, FormInfo, Outcome, PageInfo, Passages,
    PauseReason, RiskLevel, RiskReason, Snapshot, Source, TaskError, ToolMode, ToolOutput, default_tool_modes,
};

/// The user's settings a task runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(default)]
pub struct TaskSettings {
    /// Model calls per run before the task pauses (it can be continued).
    pub max_iterations: u32,
    pub enable_thinking: bool,
    /// 0 samples greedily.
    pub temperature: f32,
    /// Tokens per model call.
    pub max_new_tokens: u32,
    /// What the user lets each tool do (a tool not named is on).
    #[serde(default = "default_tool_modes")]
    pub tool_modes: BTreeMap<String, ToolMode>,
    /// Soft tokens a screenshot costs the model (Gemma 4's budgets: 70, 140, 280, 560, 1,120):
    /// more sees finer detail and takes longer to encode and to read.
    #[serde(default = "default_image_budget")]
    pub image_budget: u32,
    /// Draft with the model's assistant when it is installed (speculative decoding: faster, and
    /// at temperature 0 the same answer).
    #[serde(default = "default_drafting")]
    pub drafting: bool,
}

fn default_drafting() -> bool {
    true
}

/// The soft-token budgets Gemma 4's image processor supports (the engine checks that the model
/// crate's `SOFT_TOKEN_BUDGETS` are these).
pub const IMAGE_BUDGETS: [u32; 5] = [70, 140, 280, 560, 1120];

/// Gemma 4's own default.
pub fn default_image_budget() -> u32 {
    280
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            max_iterations: 25,
            enable_thinking: false,
            temperature: 0.0,
            max_new_tokens: 1024,
            tool_modes: default_tool_modes(),
            image_budget: default_image_budget(),
            drafting: default_drafting(),
        }
    }
}

/// What the user does to the task of their tab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum TaskAction {
    /// Answers the confirmation card of `call_id` (a decision for any other call is refused).
    Confirm { call_id: String, decision: Decision },
    /// Answers an `ask_user` question.
    Answer { text: String },
    /// Stops generation and the running tool; the conversation is kept.
    Stop,
    /// A message for the running task, read before its next model call.
    Steer { text: String },
    /// Resumes a paused, stopped or failed task.
    Continue,
    /// Forgets the conversation (new chat, or the tab was closed).
    Forget,
}

/// A tool call for the service worker to run (itself, or in the task's tab).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ToolRequest {
    /// Chosen by the offscreen document; `cancel_tool` refers to it.
    pub request_id: u32,
    pub tab_id: u32,
    pub name: String,
    #[ts(type = "Record<string, unknown>")]
    pub arguments: Map<String, Value>,
    /// The URL of the page the consent policy judged the call on. The worker runs the call only
    /// while the tab's committed URL has that origin (a script in the top frame of that origin
    /// only): an approval never travels to a site the page moved the tab to.
    #[serde(default)]
    pub judged_url: Option<String>,
    /// What the user allowed this call to do (the reasons on the card they approved, or of the
    /// grant that covered it): the worker's fence lets exactly these effects through (a site
    /// joins the task's set, a form may post to its host while the call runs).
    #[serde(default)]
    pub approved: Vec<RiskReason>,
    /// The tab the call acts in when it is not `tab_id` (after the agent's `switch_tab`): the
    /// worker runs it there only while that tab is one of the task's (attached by the user or
    /// opened by the task), under the task's fence.
    #[serde(default)]
    pub in_tab: Option<u32>,
}

/// The answer to a [`ToolRequest`] (the response of the message that carried it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolReply {
    Ok {
        output: Box<ToolOutput>,
    },
    /// An actionable message for the model ("No element [12]; take a new snapshot.").
    Failed {
        message: String,
    },
}

/// Why a task message was refused before the agent saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskRefusal {
    /// No model is loaded yet.
    NoModel,
    /// The model was unloaded while the tab's conversation was open.
    ModelGone,
    /// An action for a task this tab does not have.
    NoTask,
    /// A decision or an answer for a card that no longer waits for one.
    NotWaiting,
    /// The worker could not start the engine.
    EngineNotRunning { detail: String },
    /// The engine crashed; Retry starts a fresh one and keeps the conversation.
    EngineCrashed { detail: String },
    /// The engine failed on the message.
    EngineFailed { detail: String },
}

/// Progress of a tab's task, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "update", rename_all = "snake_case")]
pub enum TaskUpdate {
    /// Something the loop did (tokens, tool cards, questions…).
    Event { event: AgentEvent },
    /// The run returned: the task waits for the user, or is over.
    Ended { outcome: Outcome },
    /// The message could not reach a task: the engine's side refused it, not the agent. Each
    /// reason has its text in the extension's locales.
    Refused { refusal: TaskRefusal },
    /// The conversation as it stands, after each run: the agent's entries, which only the Rust
    /// agent reads (a JSON value, not a string of JSON). The worker keeps it (storage.session)
    /// and hands it back with the tab's next `start_task`, so the conversation survives the
    /// offscreen document being torn down. Not sent to tabs.
    History {
        #[ts(type = "unknown")]
        history: serde_json::Value,
    },
}
