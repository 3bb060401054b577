//! Generation requests and the events that stream back to the tab that asked.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct GenerateRequest {
    /// Chosen by the service worker; events carry it back so it can route them to the tab.
    pub request_id: u32,
    /// The user's message, rendered as a user turn with the model's chat template.
    pub prompt: String,
    pub max_tokens: u32,
    /// Draft with the model's assistant when it has one (the settings' "Draft with the
    /// assistant"; greedy, the answer is the same).
    #[serde(default = "drafting_by_default")]
    pub drafting: bool,
}

fn drafting_by_default() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum GenerationEvent {
    /// One generated token and the text it completed (possibly empty inside a multi-byte character).
    Token { request_id: u32, token_id: u32, text: String },
    /// Generation finished (end of turn or `max_tokens`).
    Done { request_id: u32, token_ids: Vec<u32>, text: String, stats: GenerationStats },
    /// Generation failed; nothing more will come for this request.
    Failed { request_id: u32, message: String },
}

impl GenerationEvent {
    pub fn request_id(&self) -> u32 {
        match self {
            GenerationEvent::Token { request_id, .. }
            | GenerationEvent::Done { request_id, .. }
            | GenerationEvent::Failed { request_id, .. } => *request_id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct GenerationStats {
    pub prompt_tokens: u32,
    pub generated_tokens: u32,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    /// The host's milliseconds per decoded token: building the step and its sampling (Burn's
    /// operations, the kernels' launches), without the waits for the GPU. The median over the
    /// tokens after the first.
    pub decode_host_ms_per_token: f64,
    /// The first decoded token's host milliseconds, apart: its step also creates the one-token
    /// kernels' pipelines and buffers.
    pub first_decode_host_ms: f64,
    /// Tokens the assistant drafted and, of them, the model accepted (0 without an assistant).
    #[serde(default)]
    pub drafted_tokens: u32,
    #[serde(default)]
    pub accepted_tokens: u32,
}
