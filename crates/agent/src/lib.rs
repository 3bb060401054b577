//! The browser agent's core: the tool-calling loop, Gemma 4 output parsing, tool definitions,
//! the context budget and the safety policy. No browser, no model: the extension supplies a
//! [`ModelBackend`] and a [`ToolExecutor`].
//!
//! One job per module:
//! - [`parser`] / [`gemma_value`]: streaming parser of the model's output and call syntax.
//! - [`tools`]: tool definitions and argument validation; [`arguments`]: each tool's typed
//!   arguments (the schemas the model sees are derived from them).
//! - [`page`]: snapshots with stable indices; fencing of untrusted page text.
//! - [`policy`]: which actions need confirmation; grants; the repetition guard.
//! - [`context`]: token counting, budgets, truncation, compaction.
//! - [`tabs`]: the user's other tabs a task reads or acts in.
//! - [`task_loop`]: the loop ([`Agent`]).
//! - [`events`]: what the loop tells the UI.
//! - [`backend`]: the model and tool interfaces, cancellation.

pub mod arguments;
pub mod backend;
pub mod breaker;
pub mod context;
pub mod events;
pub mod gemma_value;
pub mod page;
pub mod page_tools;
pub mod parser;
pub mod policy;
pub mod prompt;
#[cfg(any(test, feature = "scripted"))]
pub mod scripted;
pub mod tabs;
pub mod task_loop;
pub mod tools;

#[cfg(test)]
mod task_loop_tests;

#[cfg(not(target_arch = "wasm32"))]
pub use backend::SystemClock;
pub use backend::{
    CancelToken, Clock, GenerationRequest, GenerationStats, ModelBackend, ModelChunk, ModelError, Passages, PromptClip,
    PromptImage, ToolError, ToolExecutor, ToolImage, ToolInvocation, ToolOutput,
};
pub use context::{ApproxTokenCounter, ContextBudget, Entry, EntryKind, TokenCounter};
pub use events::{AgentEvent, PauseReason, Source, TaskError};
pub use page::{ElementInfo, FormInfo, PageInfo, PointTarget, Snapshot};
pub use page_tools::{PAGE_TOOL_PREFIX, PageToolForm, PageToolInfo};
pub use parser::{ParsedCall, ParsedOutput, StreamParser, parse_output, parse_to_json};
pub use policy::{ActionTarget, AddressWarning, Assessment, Decision, RiskReason};
pub use tabs::{AttachedTab, OpenTab, RequestTabs};
pub use task_loop::{
    Agent, AgentConfig, AgentControl, ContextError, Outcome, PromptStats, STEP_ENDS_AFTER, SessionError, UserRequest,
};
pub use tools::{
    RiskLevel, TimeLimit, ToolDefinition, ToolMode, ToolPlace, VISION_TOOLS, builtin_tools, default_tool_modes,
    tools_for, validate_arguments,
};
