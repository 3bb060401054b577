//! A deterministic model and tool executor for tests: the model replays scripted outputs (in
//! small chunks, so special tokens get split), the tools answer through a closure. A test tool,
//! compiled only for tests or with the `scripted` feature. The one scripted model: the agent's
//! tests, the extension's end-to-end suite (through the engine) and `hearth agent` use it.

use std::collections::{BTreeMap, VecDeque};
use std::task::Poll;

use futures::{Stream, StreamExt, stream};
use serde_json::{Map, Value};

use crate::backend::{
    Clock, GenerationRequest, GenerationStats, ModelBackend, ModelChunk, ModelError, ToolError, ToolExecutor,
    ToolInvocation, ToolOutput,
};
use crate::context::{ApproxTokenCounter, TokenCounter};
use crate::task_loop::AgentControl;

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
///
/// `{{index:TEXT}}` in a reply becomes the number of the latest snapshot line of the prompt
/// containing TEXT, as a model reading the snapshot would choose it (indices depend on the page,
/// so scripts name elements instead).
pub struct ScriptedModel {
    /// Queues keyed by a marker the prompt must contain ("" for any prompt): tasks running in
    /// several tabs at once each get their own replies (the marker is in the user's message).
    queues: Vec<(String, VecDeque<Reply>)>,
    /// The prompts received, in order.
    pub prompts: Vec<String>,
    /// The `stop_after` pieces of every request, in order.
    pub stops_asked: Vec<Vec<String>>,
    /// The images of every request, in order (a script sees no picture, a test sees that one
    /// was sent).
    pub images_sent: Vec<Vec<crate::PromptImage>>,
    /// The voice clips of every request, in order.
    pub clips_sent: Vec<Vec<crate::PromptClip>>,
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
            queues: vec![(String::new(), replies.into_iter().collect())],
            prompts: Vec::new(),
            stops_asked: Vec::new(),
            images_sent: Vec::new(),
            clips_sent: Vec::new(),
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

    /// A script as JSON: an array of raw outputs for every task, or an object of such arrays
    /// keyed by a marker that the task's prompt contains.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Script {
            Shared(Vec<String>),
            ByMarker(BTreeMap<String, Vec<String>>),
        }
        let texts = |replies: Vec<String>| replies.into_iter().map(Reply::Text).collect::<VecDeque<_>>();
        let queues = match serde_json::from_str(json)? {
            Script::Shared(replies) => vec![(String::new(), texts(replies))],
            Script::ByMarker(map) => map.into_iter().map(|(marker, replies)| (marker, texts(replies))).collect(),
        };
        Ok(Self { queues, ..Self::new([]) })
    }

    pub fn push(&mut self, reply: Reply) {
        match self.queues.iter_mut().find(|(marker, _)| marker.is_empty()) {
            Some((_, queue)) => queue.push_back(reply),
            None => self.queues.push((String::new(), VecDeque::from([reply]))),
        }
    }

    pub fn remaining(&self) -> usize {
        self.queues.iter().map(|(_, queue)| queue.len()).sum()
    }

    /// The next reply for `prompt`: from the first queue whose marker it contains, else from the
    /// queue for any prompt.
    fn next_reply(&mut self, prompt: &str) -> Option<Reply> {
        let chosen = self
            .queues
            .iter()
            .position(|(marker, _)| !marker.is_empty() && prompt.contains(marker.as_str()))
            .or_else(|| self.queues.iter().position(|(marker, _)| marker.is_empty()))?;
        self.queues[chosen].1.pop_front()
    }

    /// The next reply for `request`, recorded, with its `{{index:…}}` resolved against the prompt
    /// and cut after the first `stop_after` piece (when honoured).
    fn next_for(&mut self, request: &GenerationRequest) -> Option<Reply> {
        self.prompts.push(request.prompt.clone());
        self.stops_asked.push(request.stop_after.clone());
        self.images_sent.push(request.images.clone());
        self.clips_sent.push(request.clips.clone());
        let honor_stop_after = self.honor_stop_after;
        let cut = |t: String| match request.stop_end(&t, 0) {
            Some(end) if honor_stop_after => t[..end].to_owned(),
            _ => t,
        };
        match self.next_reply(&request.prompt) {
            Some(Reply::Text(t)) => match resolve_indices(&t, &request.prompt) {
                Ok(t) => Some(Reply::Text(cut(t))),
                Err(message) => Some(Reply::Fail(message)),
            },
            other => other,
        }
    }

    /// The text the next reply writes for `request` (as [`ScriptedModel::reply`] streams it), for
    /// a caller that forces it through a real model's cache instead of streaming it.
    pub fn next_text(&mut self, request: &GenerationRequest) -> Result<String, String> {
        match self.next_for(request) {
            Some(Reply::Text(text) | Reply::StopAfter(text)) => Ok(text),
            Some(Reply::Fail(message)) => Err(message),
            None => Err("the script has no more replies".into()),
        }
    }

    /// The stream of one generation; owns everything it needs, so a caller may keep the model
    /// elsewhere (shared by several tasks) while the stream runs.
    pub fn reply(&mut self, request: GenerationRequest) -> impl Stream<Item = Result<ModelChunk, ModelError>> + use<> {
        let reply = self.next_for(&request);
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
                    ..Default::default()
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

/// `reply` with each `{{index:TEXT}}` replaced by the index of the latest snapshot line of
/// `prompt` that contains TEXT, and each `{{tab:TEXT}}` by the number of the latest tab line (the
/// user's list of tabs, an attached tab, `open_tab`'s result) that contains TEXT: indices and tab
/// numbers depend on the page and the browser, so scripts name elements and tabs by their text.
pub fn resolve_indices(reply: &str, prompt: &str) -> Result<String, String> {
    let indices = resolve(reply, prompt, "index", "snapshot", line_index)?;
    resolve(&indices, prompt, "tab", "tab", crate::tabs::tab_number_in)
}

/// `reply` with each `{{<tag>:TEXT}}` replaced by `number` of the latest line of `prompt` that
/// contains TEXT and has one.
fn resolve(
    reply: &str,
    prompt: &str,
    tag: &str,
    what: &str,
    number: fn(&str) -> Option<u32>,
) -> Result<String, String> {
    let open = format!("{{{{{tag}:");
    let mut out = String::new();
    let mut rest = reply;
    while let Some(start) = rest.find(&open) {
        out.push_str(&rest[..start]);
        let after = &rest[start + open.len()..];
        let end = after.find("}}").ok_or_else(|| format!("unclosed {open} in the test script"))?;
        let needle = &after[..end];
        let found =
            prompt.lines().rev().filter(|line| line.contains(needle)).find_map(number).ok_or_else(|| {
                format!("the test script wants a {what} line with {needle:?}, but the prompt has none")
            })?;
        out.push_str(&found.to_string());
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `12` from a snapshot line such as `  *[12] button "Place order"`.
fn line_index(line: &str) -> Option<u32> {
    let line = line.trim_start().trim_start_matches('*');
    let digits = line.strip_prefix('[')?.split(']').next()?;
    digits.parse().ok()
}

fn chunks(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

impl ModelBackend for ScriptedModel {
    fn generate(&mut self, request: GenerationRequest) -> impl Stream<Item = Result<ModelChunk, ModelError>> {
        self.reply(request)
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

    /// Asks the handler as a call of [`LOCATE_POINT`](crate::backend::LOCATE_POINT) with the
    /// point's arguments; its `located` is the answer.
    async fn locate(&mut self, call: &ToolInvocation) -> Result<crate::PointTarget, ToolError> {
        let probe = ToolInvocation { name: crate::backend::LOCATE_POINT.to_owned(), ..call.clone() };
        self.calls.push((probe.name.clone(), probe.arguments.clone()));
        (self.handler)(&probe)?.located.map(|l| *l).ok_or_else(|| ToolError("nothing was located".into()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_the_latest_matching_index() {
        let prompt = "[1] button \"Old\"\n[3] button \"Place order\"\nlater:\n  *[7] button \"Place order\"\n";
        assert_eq!(resolve_indices("click{index:{{index:Place order}}}", prompt).unwrap(), "click{index:7}");
        assert!(resolve_indices("{{index:Missing}}", prompt).is_err());
        assert!(resolve_indices("{{index:Place", prompt).is_err());
    }

    #[test]
    fn a_marker_in_the_prompt_picks_its_queue() {
        let mut model = ScriptedModel::from_json(r#"{"": ["any"], "tab-b": ["b1", "b2"]}"#).unwrap();
        let texts = |model: &mut ScriptedModel, prompt: &str| {
            let request = GenerationRequest {
                page_tools: Vec::new(),
                prompt: prompt.into(),
                max_new_tokens: 16,
                stop_after: Vec::new(),
                cancel: crate::CancelToken::new(),
                tools: None,
                images: Vec::new(),
                clips: Vec::new(),
            };
            let chunks = futures::executor::block_on(model.reply(request).collect::<Vec<_>>());
            chunks
                .into_iter()
                .filter_map(|c| match c {
                    Ok(ModelChunk::Text(t)) => Some(t),
                    _ => None,
                })
                .collect::<String>()
        };
        assert_eq!(texts(&mut model, "task for tab-b"), "b1");
        assert_eq!(texts(&mut model, "another task"), "any");
        assert_eq!(texts(&mut model, "tab-b again"), "b2");
        assert_eq!(model.remaining(), 0);
        assert!(ScriptedModel::from_json("3").is_err());
    }
}
