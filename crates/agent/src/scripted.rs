//! A deterministic model and tool executor for tests: the model replays scripted outputs (in
//! small chunks, so special tokens get split), the tools answer through a closure. A test tool,
//! compiled only for tests or with the `scripted` feature.

use std::collections::VecDeque;
use std::task::Poll;

use futures::{Stream, StreamExt, stream};
use serde_json::{Map, Value};

use crate::backend::{
    Clock, GenerationRequest, GenerationStats, ModelBackend, ModelChunk, ModelError, ToolError, ToolExecutor,
    ToolInvocation, ToolOutput,
};
use crate::context::{ApproxTokenCounter, TokenCounter};
use crate::session::AgentControl;

/// One scripted generation.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Streams this raw output (special tokens included), then finishes.
    Text(String),
    /// Streams this text, then the user presses stop while the model is still generating.
    StopAfter(String),
    /// The backend fails.
    Fail(String),
}

/// Replays [`Reply`]s in order and records every prompt it was given.
pub struct ScriptedModel {
    replies: VecDeque<Reply>,
    /// The prompts received, in order.
    pub prompts: Vec<String>,
    /// The `stop_after` pieces of every request, in order.
    pub stops_asked: Vec<Vec<String>>,
    /// Whether a reply ends after the first `stop_after` piece, as a model backend stops
    /// decoding there (on by default; off plays a backend that runs on).
    pub honor_stop_after: bool,
    /// Characters per streamed chunk.
    pub chunk_chars: usize,
    control: Option<AgentControl>,
}

impl ScriptedModel {
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> Self {
        Self {
            replies: replies.into_iter().collect(),
            prompts: Vec::new(),
            stops_asked: Vec::new(),
            honor_stop_after: true,
            chunk_chars: 5,
            control: None,
        }
    }

    /// Outputs only (`Reply::Text`).
    pub fn texts<S: Into<String>>(outputs: impl IntoIterator<Item = S>) -> Self {
        Self::new(outputs.into_iter().map(|s| Reply::Text(s.into())))
    }

    /// The control whose stop button [`Reply::StopAfter`] presses.
    pub fn with_control(mut self, control: AgentControl) -> Self {
        self.control = Some(control);
        self
    }

    pub fn push(&mut self, reply: Reply) {
        self.replies.push_back(reply);
    }

    pub fn remaining(&self) -> usize {
        self.replies.len()
    }
}

fn chunks(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

impl ModelBackend for ScriptedModel {
    fn generate(&mut self, request: GenerationRequest) -> impl Stream<Item = Result<ModelChunk, ModelError>> {
        self.prompts.push(request.prompt.clone());
        self.stops_asked.push(request.stop_after.clone());
        let cut = |t: String| match request.stop_end(&t, 0) {
            Some(end) if self.honor_stop_after => t[..end].to_owned(),
            _ => t,
        };
        let reply = match self.replies.pop_front() {
            Some(Reply::Text(t)) => Some(Reply::Text(cut(t))),
            other => other,
        };
        let counter = ApproxTokenCounter;
        let (items, hang): (Vec<Result<ModelChunk, ModelError>>, Option<AgentControl>) = match reply {
            Some(Reply::Text(t)) => {
                let n = counter.count(&t);
                let mut items: Vec<_> =
                    chunks(&t, self.chunk_chars).into_iter().map(|c| Ok(ModelChunk::Text(c))).collect();
                items.push(Ok(ModelChunk::Finished(GenerationStats {
                    prompt_tokens: counter.count(&request.prompt),
                    cached_prompt_tokens: 0,
                    completion_tokens: n,
                    prefill_ms: 1.0,
                    decode_ms: 10.0 * n as f64,
                })));
                (items, None)
            }
            Some(Reply::StopAfter(t)) => (
                chunks(&t, self.chunk_chars).into_iter().map(|c| Ok(ModelChunk::Text(c))).collect(),
                Some(self.control.clone().expect("Reply::StopAfter needs ScriptedModel::with_control")),
            ),
            Some(Reply::Fail(m)) => (vec![Err(ModelError(m))], None),
            None => (vec![Err(ModelError("the script has no more replies".into()))], None),
        };
        // After the items: end, or press stop and hang until cancelled.
        let tail = stream::poll_fn(move |_| match &hang {
            Some(control) => {
                control.stop();
                Poll::Pending
            }
            None => Poll::Ready(None),
        });
        stream::iter(items).chain(tail)
    }
}

type Handler = Box<dyn FnMut(&ToolInvocation) -> Result<ToolOutput, ToolError>>;

/// Answers tool calls through a closure and records them.
pub struct ScriptedTools {
    handler: Handler,
    /// (name, arguments) of every call, in order.
    pub calls: Vec<(String, Map<String, Value>)>,
    /// When a call of this tool arrives, press stop and never finish (the tool is cancelled).
    pub stop_during: Option<(String, AgentControl)>,
}

impl ScriptedTools {
    pub fn new(handler: impl FnMut(&ToolInvocation) -> Result<ToolOutput, ToolError> + 'static) -> Self {
        Self { handler: Box::new(handler), calls: Vec::new(), stop_during: None }
    }

    pub fn names(&self) -> Vec<&str> {
        self.calls.iter().map(|(n, _)| n.as_str()).collect()
    }
}

impl ToolExecutor for ScriptedTools {
    async fn execute(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        self.calls.push((call.name.clone(), call.arguments.clone()));
        if let Some((name, control)) = &self.stop_during
            && *name == call.name
        {
            control.stop();
            futures::future::pending::<()>().await;
        }
        (self.handler)(call)
    }
}

/// A clock the test moves by hand (shared through `Rc`).
#[derive(Debug, Clone, Default)]
pub struct ManualClock(pub std::rc::Rc<std::cell::Cell<u64>>);

impl ManualClock {
    pub fn advance(&self, ms: u64) {
        self.0.set(self.0.get() + ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}
