//! Conversations and the model's chat template.
//!
//! The prompt is always produced by the model's own Jinja template (Google's
//! `chat_template.jinja`), never by hand-written formatting: [`ChatTemplate`] renders it with
//! minijinja configured like Hugging Face's `apply_chat_template` (trim_blocks, lstrip_blocks,
//! Python string methods), which matches Python's jinja2 byte for byte
//! (see `fixtures/conversations.json` and `tests/fixtures.rs`).

mod message;
pub mod syntax;
mod template;

pub use message::{ContentPart, FunctionCall, FunctionDeclaration, Message, MessageContent, Role, Tool, ToolCall};
pub use template::{ChatError, ChatTemplate, RenderRequest};

/// Google's Gemma 4 E2B/E4B chat template (July 2026 revision): renders conversations with tools
/// for a Gemma 4 model whose own template cannot ([`ChatTemplate::or_gemma4_for_tools`]), and
/// serves the tests.
pub const GEMMA4_E2B_TEMPLATE: &str = include_str!("../fixtures/gemma4-e2b-chat-template.jinja");
