//! The two things the agent drives: a model that streams text for a prompt, and the tools.
//! Both are executor-agnostic (no runtime, no `Send` bound) so the same loop runs natively and
//! on single-threaded wasm.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

use crate::page::{PageInfo, PointTarget, Snapshot};

/// A stop signal shared by the UI, the loop, the model and the running tool.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<CancelInner>);

#[derive(Debug, Default)]
struct CancelInner {
    cancelled: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        let wakers = std::mem::take(&mut *self.0.wakers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in wakers {
            w.wake();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once [`cancel`](Self::cancel) is called.
    pub fn cancelled(&self) -> Cancelled {
        Cancelled(self.clone())
    }
}

/// Future returned by [`CancelToken::cancelled`].
#[derive(Debug)]
pub struct Cancelled(CancelToken);

impl Future for Cancelled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_cancelled() {
            return Poll::Ready(());
        }
        self.0.0.wakers.lock().unwrap_or_else(|p| p.into_inner()).push(cx.waker().clone());
        // Re-check: cancel() may have run between the check and the registration.
        if self.0.is_cancelled() { Poll::Ready(()) } else { Poll::Pending }
    }
}

/// One generation request: the fully rendered prompt (the model's own chat template applied).
#[derive(Debug, Clone)]
pub struct GenerationRequest {
    pub prompt: String,
    pub max_new_tokens: usize,
    /// Pieces of markup after which this step is over, the piece itself still streamed (a
    /// closed tool call: `<tool_call|>`). A backend stops decoding right after one (a model
    /// backend resolves them to token ids); the agent also stops reading at the first one, so a
    /// backend that runs on only wastes its time.
    pub stop_after: Vec<String>,
    /// Set when the user stops; a backend should stop decoding promptly.
    pub cancel: CancelToken,
    /// The tools the prompt offers, by name (`None`: every built-in tool): a backend that
    /// constrains calls holds them to these.
    pub tools: Option<Vec<String>>,
    /// The page's tools among `tools` (`page.<name>`) with the JSON schema of their arguments
    /// (reduced to what the call grammar reads): a backend that constrains calls compiles them
    /// with Hearth's own, and leaves one whose schema it cannot compile unconstrained.
    pub page_tools: Vec<(String, serde_json::Value)>,
    /// The prompt's images, in the order of its image placeholders (`<|image|>`, as the chat
    /// template writes an image part): a backend that sees encodes them there.
    pub images: Vec<PromptImage>,
    /// The prompt's voice clips, in the order of its audio placeholders (`<|audio|>`): a backend
    /// that hears encodes them there.
    pub clips: Vec<PromptClip>,
}

/// A spoken request in a prompt: 16 kHz mono samples, held in memory for the task only.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptClip {
    /// Names the clip within its conversation.
    pub key: String,
    pub samples: std::sync::Arc<[f32]>,
}

impl PromptClip {
    /// Samples a second.
    pub const RATE: usize = 16_000;
    /// The longest clip Gemma 4 hears, in seconds.
    pub const MAX_SECONDS: usize = 30;

    /// The soft tokens the clip becomes, about (one per 40 ms, and its two boundary tokens):
    /// what the agent budgets for it.
    pub fn tokens(&self) -> usize {
        self.samples.len().div_ceil(Self::RATE / 25) + 2
    }
}

/// An image of a prompt: a screenshot a tool returned.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptImage {
    /// Names the image within its conversation (the tool call that took it).
    pub key: String,
    pub image: std::sync::Arc<ToolImage>,
}

impl GenerationRequest {
    /// The end (byte offset) of the first `stop_after` piece that ends after `from` in `text`,
    /// for backends and readers that match text rather than token ids.
    pub fn stop_end(&self, text: &str, from: usize) -> Option<usize> {
        stop_end(&self.stop_after, text, from)
    }
}

/// The end of the first of `pieces` in `text` that ends after byte `from` (text before `from` was
/// searched already; a piece may straddle it).
pub fn stop_end<S: AsRef<str>>(pieces: &[S], text: &str, from: usize) -> Option<usize> {
    let longest = pieces.iter().map(|p| p.as_ref().len()).max()?;
    let mut start = from.saturating_sub(longest.saturating_sub(1)).min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    pieces
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| !p.is_empty())
        .filter_map(|p| text[start..].find(p).map(|i| start + i + p.len()))
        .filter(|&end| end > from)
        .min()
}

/// What a backend streams back.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelChunk {
    /// Decoded text, special tokens included verbatim (`<|tool_call>`, `<turn|>`…).
    Text(String),
    /// Sent once at the end, when the backend knows its numbers.
    Finished(GenerationStats),
}

/// Measured by the backend (the agent has no clock of its own on wasm).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the KV cache.
    pub cached_prompt_tokens: usize,
    pub completion_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Tokens the model's assistant drafted and, of them, the model accepted (speculative
    /// decoding; 0 without an assistant).
    #[serde(default)]
    pub drafted_tokens: usize,
    #[serde(default)]
    pub accepted_tokens: usize,
}

/// The model failed; the message is shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model failed: {0}")]
pub struct ModelError(pub String);

/// Streaming text generation from a rendered prompt.
pub trait ModelBackend {
    /// Starts generating. The stream ends when the model stops (a stop token, the token limit,
    /// or cancellation).
    fn generate(&mut self, request: GenerationRequest) -> impl Stream<Item = Result<ModelChunk, ModelError>>;
}

/// A validated tool call handed to the executor.
#[derive(Debug, Clone)]
pub struct ToolInvocation {
    pub call_id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
    /// The page the policy judged the call on (its URL, as the last tool result reported it).
    /// The executor runs the call only while the tab is still on that page's origin: an approval
    /// given for one site never runs on another the page moved the tab to.
    pub judged_url: Option<String>,
    /// What the user allowed the call to do (its card's reasons, or a grant's): the browser-level
    /// fence lets exactly these effects through.
    pub approved: Vec<crate::policy::RiskReason>,
    /// The tab the call acts in when it is not the task's own (after `switch_tab`); the worker
    /// runs it there only if that tab is one of the task's.
    pub in_tab: Option<u32>,
    /// Set when the user stops; the executor should abort its work.
    pub cancel: CancelToken,
}

/// A tool's result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct ToolOutput {
    /// Text for the model. For snapshots it is generated from `snapshot` instead.
    pub text: String,
    /// For `snapshot`: the elements; the agent renders them with stable indices and marks.
    pub snapshot: Option<Snapshot>,
    /// The page after the action (URL and title), if the executor knows it.
    pub page: Option<PageInfo>,
    /// The text comes from the page (untrusted): it is fenced and labelled for the model.
    pub from_page: bool,
    /// Whether the action changed anything on the page (the DOM, the URL, the focus, the
    /// element's value or checked state); `None` where the executor does not watch. An action
    /// that changed nothing counts as a failure for the breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub changed: Option<bool>,
    /// Page text split into passages (`read_page`, `read_link`): the agent numbers them, the model
    /// cites them as [n], the overlay links each citation to its passage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub passages: Option<Passages>,
    /// An image for the model (`screenshot`): it enters the conversation after the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub image: Option<Box<ToolImage>>,
    /// What is under a point of the latest screenshot (the executor's answer to
    /// [`ToolExecutor::locate`]), for the consent policy to judge before `click_at` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub located: Option<Box<PointTarget>>,
    /// The tools the page offers (WebMCP) at the time of the reply; `None` where the executor
    /// did not look (a worker tool). The agent offers them as `page.<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub page_tools: Option<Vec<crate::page_tools::PageToolInfo>>,
    /// The tab a tab tool concerns: the one `open_tab` opened, the one `switch_tab` now acts in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub tab: Option<crate::tabs::OpenTab>,
}

/// A picture a tool took, as the browser gives it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct ToolImage {
    /// `data:image/png;base64,…`: what the model sees, never sent anywhere.
    pub data_url: String,
    /// A small JPEG of it for the tool card (a data URL too).
    pub thumbnail: String,
    pub width: u32,
    pub height: u32,
}

/// Passages of a page's text, in order, and the page they come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct Passages {
    pub url: String,
    pub title: String,
    pub items: Vec<String>,
}

impl ToolOutput {
    /// A plain message such as "Clicked."
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Self::default() }
    }

    /// Content read from the page (read_page, run_javascript results…).
    pub fn page_text(page: PageInfo, text: impl Into<String>) -> Self {
        Self { text: text.into(), page: Some(page), from_page: true, ..Self::default() }
    }

    pub fn snapshot(snapshot: Snapshot) -> Self {
        Self { page: Some(snapshot.page.clone()), snapshot: Some(snapshot), from_page: true, ..Self::default() }
    }
}

/// A tool failed; the message goes back to the model, so make it actionable
/// ("no element [12]; take a new snapshot").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// The request an executor sends the page for [`ToolExecutor::locate`] (not a tool the model is
/// offered: it reads, and only the loop asks it).
pub const LOCATE_POINT: &str = "locate_point";

/// Runs tools (in the extension: content script, service worker).
pub trait ToolExecutor {
    // No Send bound on purpose: the executor runs on the browser's single thread.
    #[allow(async_fn_in_trait)]
    async fn execute(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError>;

    /// What lies under the point (`x`, `y`: 0–1000 of the latest screenshot) of the page `call`
    /// acts on: `click_at` is judged on it before it runs. Executors without screenshots have none.
    #[allow(async_fn_in_trait)]
    async fn locate(&mut self, _call: &ToolInvocation) -> Result<PointTarget, ToolError> {
        Err(ToolError(
            "This browser cannot tell what is at a point of the page; use click with a snapshot number.".into(),
        ))
    }
}

/// Milliseconds since some fixed point (the repetition guard's clock). `std::time::Instant`
/// panics on wasm32-unknown-unknown, so the host supplies the time.
pub trait Clock {
    fn now_ms(&self) -> u64;
}

/// The system clock (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[cfg(not(target_arch = "wasm32"))]
impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }
}
