//! Agent tasks: one conversation per tab, driven by the Rust agent loop (crates/agent) with the
//! loaded Burn model as its backend. Tool calls go to the service worker through the host's
//! `runTool` (which runs them itself or in the tab) and come back as a `ToolReply`.
//!
//! A conversation's `Agent` is taken out of the table while its loop runs (no borrow is held
//! across an await); stop and steering reach it through its `AgentControl` meanwhile.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::pin::pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use futures::future::{Either, select};
use futures::stream::{self, LocalBoxStream, StreamExt};
use hearth_agent::{
    Agent, AgentConfig, AgentControl, ApproxTokenCounter, Clock, ContextBudget, Entry, GenerationRequest,
    GenerationStats, ModelBackend, ModelChunk, ModelError, TokenCounter, ToolError, ToolExecutor, ToolInvocation,
    ToolOutput, builtin_tools,
};
use hearth_model::constrain::{CallConstraint, CallGrammar, ConstrainError, ToolSpec, VocabTrie};
use hearth_model::generate::{self, GenerateOptions};
use hearth_model::tokenizer::Tokenizer;
use hearth_model::{Sampler, SamplingOptions};
use hearth_protocol::{Outcome, PageInfo, TaskAction, TaskSettings, TaskUpdate, ToolReply, ToolRequest};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::engine::{self, ModelHandles};

/// The JavaScript side of the offscreen document.
pub struct TaskHost {
    /// `(tabId: number, updateJson: string) => void`
    pub on_update: js_sys::Function,
    /// `(requestJson: string) => Promise<string>`: resolves to a `ToolReply` as JSON.
    pub run_tool: js_sys::Function,
}

struct Conversation {
    /// None while the loop runs.
    agent: Option<Agent>,
    control: AgentControl,
    settings: TaskSettings,
}

#[derive(Default)]
struct Tasks {
    host: Option<Rc<TaskHost>>,
    conversations: HashMap<u32, Conversation>,
    next_tool_request: u32,
    /// Replies of the scripted test model, in queues keyed by a marker ("" for any task); tasks
    /// use the Burn model while this is None.
    #[cfg(feature = "scripted")]
    script: Option<Vec<(String, std::collections::VecDeque<String>)>>,
    /// Every prompt the scripted model received, for the tests to inspect.
    #[cfg(feature = "scripted")]
    script_prompts: Vec<String>,
}

thread_local! {
    static TASKS: RefCell<Tasks> = RefCell::new(Tasks::default());
}

pub fn set_host(host: TaskHost) {
    TASKS.with(|t| t.borrow_mut().host = Some(Rc::new(host)));
}

fn emit(tab_id: u32, update: &TaskUpdate) {
    let Some(host) = TASKS.with(|t| t.borrow().host.clone()) else { return };
    let json = serde_json::to_string(update).unwrap_or_default();
    let _ = host.on_update.call2(&JsValue::NULL, &JsValue::from(tab_id), &JsValue::from_str(&json));
}

fn ended(tab_id: u32, outcome: Outcome) {
    emit(tab_id, &TaskUpdate::Ended { outcome });
}

/// Starts a task in the tab's conversation; while one runs there, the text steers it instead (a
/// selection is not sent to a running task: the overlay offers it only to a new one).
/// `history` (from `TaskUpdate::History`) restores a conversation this engine does not hold.
pub async fn start_task(
    tab_id: u32,
    text: String,
    selection: Option<String>,
    page: Option<PageInfo>,
    settings: TaskSettings,
    history: Option<serde_json::Value>,
) {
    let Some(model) = engine::model() else {
        return ended(
            tab_id,
            Outcome::Failed {
                message: "No model is loaded yet: wait until Hearth says it is ready, then try again.".into(),
            },
        );
    };
    let started = TASKS.with(|t| {
        let mut tasks = t.borrow_mut();
        let conversation = tasks.conversations.entry(tab_id).or_insert_with(|| {
            let mut conversation = new_conversation(&model, &settings);
            if let (Some(agent), Some(entries)) = (conversation.agent.as_mut(), restored(history)) {
                agent.restore_history(entries);
            }
            conversation
        });
        let Some(agent) = conversation.agent.as_mut() else {
            conversation.control.steer(text.clone());
            return false;
        };
        apply_settings(agent.config_mut(), &settings);
        agent.start_task_with_selection(&text, selection.as_deref(), page.clone());
        conversation.settings = settings.clone();
        true
    });
    if started {
        run(tab_id, model).await;
    }
}

/// The user acted on the tab's task.
pub async fn control(tab_id: u32, action: TaskAction) {
    enum Next {
        Run,
        Nothing,
        Refused(String),
    }
    let next = TASKS.with(|t| {
        let mut tasks = t.borrow_mut();
        if action == TaskAction::Forget {
            if let Some(c) = tasks.conversations.remove(&tab_id) {
                c.control.stop();
            }
            return Next::Nothing;
        }
        let Some(conversation) = tasks.conversations.get_mut(&tab_id) else {
            return Next::Refused("There is no task in this tab.".into());
        };
        let control = conversation.control.clone();
        let Some(agent) = conversation.agent.as_mut() else {
            // Running: only stop and steering apply now.
            match action {
                TaskAction::Stop => control.stop(),
                TaskAction::Steer { text } => control.steer(text),
                _ => {}
            }
            return Next::Nothing;
        };
        match action {
            TaskAction::Confirm { call_id, decision } => {
                agent.confirm(&call_id, decision).map_or_else(|e| Next::Refused(e.to_string()), |()| Next::Run)
            }
            TaskAction::Answer { text } => {
                agent.answer(&text).map_or_else(|e| Next::Refused(e.to_string()), |()| Next::Run)
            }
            TaskAction::Continue => {
                agent.continue_task();
                Next::Run
            }
            TaskAction::Steer { text } => {
                agent.start_task(&text, None);
                Next::Run
            }
            TaskAction::Stop | TaskAction::Forget => Next::Nothing,
        }
    });
    match next {
        Next::Run => match engine::model() {
            Some(model) => run(tab_id, model).await,
            None => {
                ended(tab_id, Outcome::Failed { message: "The model is not loaded any more; reopen the panel.".into() })
            }
        },
        Next::Refused(message) => ended(tab_id, Outcome::Failed { message }),
        Next::Nothing => {}
    }
}

fn new_conversation(model: &ModelHandles, settings: &TaskSettings) -> Conversation {
    let mut config = AgentConfig::default();
    config.budget = ContextBudget::for_context(model.context_tokens, config.max_new_tokens);
    apply_settings(&mut config, settings);
    let counter = Box::new(TokenizerCounter(model.tokenizer.clone()));
    let agent = Agent::new((*model.template).clone(), builtin_tools(), config, counter, Box::new(BrowserClock));
    Conversation { control: agent.control(), agent: Some(agent), settings: settings.clone() }
}

fn apply_settings(config: &mut AgentConfig, settings: &TaskSettings) {
    config.max_iterations = settings.max_iterations.max(1) as usize;
    config.enable_thinking = settings.enable_thinking;
    // The answer's room comes out of the context (never more than half of it).
    config.max_new_tokens = (settings.max_new_tokens.max(1) as usize).min(config.budget.window_tokens / 2);
    config.budget.reserve_output_tokens = config.max_new_tokens;
}

/// The KV-cache conversation of a tab's tasks (chat replies have their own).
fn tab_conversation(tab_id: u32) -> u64 {
    u64::from(tab_id) + 1
}

/// Runs the loop until it needs the user or ends, then reports the outcome.
async fn run(tab_id: u32, model: ModelHandles) {
    let taken = TASKS.with(|t| {
        let mut tasks = t.borrow_mut();
        let host = tasks.host.clone()?;
        let conversation = tasks.conversations.get_mut(&tab_id)?;
        Some((conversation.agent.take()?, conversation.settings.clone(), host))
    });
    let Some((mut agent, settings, host)) = taken else { return };
    let mut backend = TaskModel::new(model, tab_conversation(tab_id), &settings);
    let mut tools = TabTools { tab_id, host };
    let outcome = agent.run(&mut backend, &mut tools, &mut |event| emit(tab_id, &TaskUpdate::Event { event })).await;
    let history = serde_json::to_value(agent.history()).unwrap_or_default();
    let kept = TASKS.with(|t| {
        // Forgotten meanwhile (tab closed, new chat): drop the agent.
        let mut tasks = t.borrow_mut();
        let conversation = tasks.conversations.get_mut(&tab_id)?;
        conversation.agent = Some(agent);
        Some(())
    });
    if kept.is_some() {
        emit(tab_id, &TaskUpdate::History { history });
    }
    ended(tab_id, outcome);
}

/// A conversation kept by the worker; one that does not parse (another version of Hearth wrote
/// it) is dropped rather than trusted in part.
fn restored(history: Option<serde_json::Value>) -> Option<Vec<Entry>> {
    serde_json::from_value(history?).ok()
}

/// Exact token counts from the model's own tokenizer (the budget is in model tokens).
struct TokenizerCounter(Rc<Tokenizer>);

impl TokenCounter for TokenizerCounter {
    fn count(&self, text: &str) -> usize {
        self.0.encode(text).map_or_else(|_| ApproxTokenCounter.count(text), |ids| ids.len())
    }

    fn special_tokens(&self) -> Vec<String> {
        self.0.added_tokens()
    }
}

struct BrowserClock;

impl Clock for BrowserClock {
    fn now_ms(&self) -> u64 {
        engine::now_ms() as u64
    }
}

/// The model behind a task: the loaded Burn model, or in test builds the scripted one.
enum TaskModel {
    Burn {
        model: ModelHandles,
        /// Whose KV cache to use (one per tab while memory allows).
        conversation: u64,
        sampling: SamplingOptions,
    },
    #[cfg(feature = "scripted")]
    Scripted,
}

impl TaskModel {
    fn new(model: ModelHandles, conversation: u64, settings: &TaskSettings) -> Self {
        #[cfg(feature = "scripted")]
        if TASKS.with(|t| t.borrow().script.is_some()) {
            return TaskModel::Scripted;
        }
        let sampling = if settings.temperature > 0.0 {
            SamplingOptions { temperature: settings.temperature, top_k: 64, top_p: 0.95, seed: engine::now_ms() as u64 }
        } else {
            SamplingOptions::greedy()
        };
        TaskModel::Burn { model, conversation, sampling }
    }
}

impl ModelBackend for TaskModel {
    fn generate(&mut self, request: GenerationRequest) -> impl futures::Stream<Item = Result<ModelChunk, ModelError>> {
        let chunks = match self {
            TaskModel::Burn { model, conversation, sampling } => {
                burn_generate(model.clone(), *conversation, *sampling, request)
            }
            #[cfg(feature = "scripted")]
            TaskModel::Scripted => scripted::generate(request),
        };
        // Test builds can trap here, at the first piece of output: a crash in the middle of a task.
        chunks.inspect(|_| crate::trap::maybe_trap("generate"))
    }
}

/// Streams the Burn model's tokens for `request`. The generation runs inside the stream (polled
/// with it), so dropping the stream stops it; stop is checked between tokens.
pub(crate) fn burn_generate(
    model: ModelHandles,
    conversation: u64,
    sampling: SamplingOptions,
    request: GenerationRequest,
) -> LocalBoxStream<'static, Result<ModelChunk, ModelError>> {
    let (sender, receiver) = futures::channel::mpsc::unbounded();
    let run = async move {
        let mut session = model.session.lock().await;
        session.use_conversation(conversation);
        let result = async {
            let ids = model.tokenizer.encode(&request.prompt).map_err(|e| e.to_string())?;
            let mut sampler = Sampler::new(sampling);
            let mut calls = call_constraint(&model.tokenizer);
            let options = GenerateOptions {
                max_tokens: request.max_new_tokens,
                stop_tokens: &model.stop_tokens,
                tool_calls: calls.as_mut(),
            };
            let mut stop = StopAfter::new(&model.tokenizer, &request.stop_after);
            let on_token = |id, text: &str| {
                if !text.is_empty() {
                    let _ = sender.unbounded_send(Ok(ModelChunk::Text(text.to_owned())));
                }
                // The token that ends the step is kept (the parser needs it), then decoding ends.
                if request.cancel.is_cancelled() || stop.after(id, text) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            let generation = generate::generate(
                &mut session,
                &mut sampler,
                &model.tokenizer,
                &ids,
                options,
                engine::clock_ms,
                on_token,
            )
            .await
            .map_err(|e| e.to_string());
            if let Some(calls) = calls {
                keep_call_constraint(&model.tokenizer, calls);
            }
            generation
        }
        .await;
        let last = match result {
            Ok(g) => Ok(ModelChunk::Finished(GenerationStats {
                prompt_tokens: g.prompt_tokens,
                cached_prompt_tokens: g.prompt_tokens.saturating_sub(g.prefilled_tokens),
                completion_tokens: g.token_ids.len(),
                prefill_ms: g.prefill_ms,
                decode_ms: g.decode_ms,
            })),
            Err(message) => Err(ModelError(message)),
        };
        let _ = sender.unbounded_send(last);
    };
    // The driver yields nothing; it ends when the generation does, and so does the channel.
    let driver = stream::once(run).filter_map(|()| async { None });
    stream::select(receiver, driver).boxed_local()
}

/// Where a step ends: after any token that is one of the request's `stop_after` pieces, or, for
/// a piece the tokenizer has no single token for, after the text that completes it.
struct StopAfter {
    ids: Vec<u32>,
    texts: Vec<String>,
    /// The output so far, for the text pieces only.
    seen: String,
}

impl StopAfter {
    fn new(tokenizer: &Tokenizer, pieces: &[String]) -> Self {
        let (mut ids, mut texts) = (Vec::new(), Vec::new());
        for piece in pieces {
            match tokenizer.token_id(piece) {
                Some(id) => ids.push(id),
                None => texts.push(piece.clone()),
            }
        }
        StopAfter { ids, texts, seen: String::new() }
    }

    /// Whether decoding ends after token `id`, whose final text is `text`.
    fn after(&mut self, id: u32, text: &str) -> bool {
        if self.ids.contains(&id) {
            return true;
        }
        if self.texts.is_empty() {
            return false;
        }
        let from = self.seen.len();
        self.seen.push_str(text);
        hearth_agent::backend::stop_end(&self.texts, &self.seen, from).is_some()
    }
}

/// The grammar of calls to the agent's tools and a tokenizer's vocabulary trie.
type CallTables = (Arc<CallGrammar>, Arc<VocabTrie>);

/// The call constraint of the loaded tokenizer, kept between generations so that its masks
/// (cached by grammar state: a string's first walk covers the whole vocabulary) are computed once
/// per conversation, not once per agent step.
struct CallCache {
    /// The Weak keeps the old tokenizer's allocation, so a new one never shares its address.
    owner: Weak<Tokenizer>,
    /// `None`: a tokenizer without Gemma 4's call tokens.
    tables: Option<CallTables>,
    /// The constraint between generations (taken while one runs).
    idle: Option<CallConstraint>,
}

thread_local! {
    static CALLS: RefCell<Option<CallCache>> = const { RefCell::new(None) };
}

fn owns(cache: &CallCache, tokenizer: &Rc<Tokenizer>) -> bool {
    std::ptr::eq(cache.owner.as_ptr(), Rc::as_ptr(tokenizer))
}

/// What holds the calls of one generation to the tools the agent offers, if the model can write
/// Gemma 4 calls. Built on the first generation with a tokenizer (the grammar and the vocabulary
/// trie), then reused with its masks; give it back with [`keep_call_constraint`].
pub(crate) fn call_constraint(tokenizer: &Rc<Tokenizer>) -> Option<CallConstraint> {
    CALLS.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|cache| !owns(cache, tokenizer)) {
            let tables = call_grammar(tokenizer).ok();
            *cell = Some(CallCache { owner: Rc::downgrade(tokenizer), tables, idle: None });
        }
        let cache = cell.as_mut()?;
        let (grammar, vocab) = cache.tables.as_ref()?;
        Some(cache.idle.take().unwrap_or_else(|| CallConstraint::new(grammar.clone(), vocab.clone())))
    })
}

/// Keeps `calls` (and the masks it computed) for the next generation with the same tokenizer.
pub(crate) fn keep_call_constraint(tokenizer: &Rc<Tokenizer>, calls: CallConstraint) {
    CALLS.with(|cell| {
        if let Some(cache) = cell.borrow_mut().as_mut().filter(|cache| owns(cache, tokenizer)) {
            cache.idle = Some(calls);
        }
    });
}

fn call_grammar(tokenizer: &Tokenizer) -> Result<CallTables, ConstrainError> {
    // The list every conversation's agent is given (`new_conversation`).
    let tools = builtin_tools();
    let specs: Vec<ToolSpec> =
        tools.iter().map(|t| ToolSpec { name: &t.name, parameters: Some(&t.parameters) }).collect();
    Ok((Arc::new(CallGrammar::new(&specs)?), Arc::new(VocabTrie::from_tokenizer(tokenizer)?)))
}

/// Runs tools through the service worker, for one tab.
struct TabTools {
    tab_id: u32,
    host: Rc<TaskHost>,
}

impl ToolExecutor for TabTools {
    async fn execute(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        let request_id = TASKS.with(|t| {
            let mut tasks = t.borrow_mut();
            tasks.next_tool_request = tasks.next_tool_request.wrapping_add(1);
            tasks.next_tool_request
        });
        let request = ToolRequest {
            request_id,
            tab_id: self.tab_id,
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            judged_url: call.judged_url.clone(),
            approved: call.approved.clone(),
        };
        let json = serde_json::to_string(&request).unwrap_or_default();
        let promise = self
            .host
            .run_tool
            .call1(&JsValue::NULL, &JsValue::from_str(&json))
            .ok()
            .and_then(|p| p.dyn_into::<js_sys::Promise>().ok())
            .ok_or_else(|| ToolError("The extension could not send the tool call (reload the tab).".into()))?;
        let reply = pin!(JsFuture::from(promise));
        match select(reply, call.cancel.cancelled()).await {
            Either::Left((Ok(value), _)) => parse_reply(value.as_string().as_deref()),
            Either::Left((Err(err), _)) => Err(ToolError(format!(
                "The tool did not answer: {}. The tab may have closed or navigated; take a new snapshot.",
                js_error_message(&err)
            ))),
            Either::Right(((), _)) => Err(ToolError("Stopped by the user.".into())),
        }
    }
}

fn parse_reply(json: Option<&str>) -> Result<ToolOutput, ToolError> {
    match json.map(serde_json::from_str::<ToolReply>) {
        Some(Ok(ToolReply::Ok { output })) => Ok(output),
        Some(Ok(ToolReply::Failed { message })) => Err(ToolError(message)),
        Some(Err(err)) => Err(ToolError(format!("The tool's answer was malformed: {err}"))),
        None => Err(ToolError("The tool gave no answer.".into())),
    }
}

fn js_error_message(err: &JsValue) -> String {
    err.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| err.as_string())
        .unwrap_or_else(|| format!("{err:?}"))
}

/// The scripted test model: replays outputs set by the end-to-end tests. `{{index:TEXT}}` in a
/// reply becomes the number of the latest snapshot line containing TEXT, as a policy reading the
/// snapshot would choose it (indices depend on the page, so scripts name elements instead).
#[cfg(feature = "scripted")]
pub mod scripted {
    use super::*;

    /// A script: one queue for every task, or queues keyed by a marker that the task's prompt
    /// contains (tests running tasks in several tabs at once put the marker in the user's message).
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    pub enum Script {
        Shared(Vec<String>),
        ByMarker(std::collections::BTreeMap<String, Vec<String>>),
    }

    /// Replaces the script (the next tasks use it until it runs out), or removes it.
    pub fn load(script: Option<Script>) {
        let queues = script.map(|s| match s {
            Script::Shared(replies) => vec![(String::new(), replies.into())],
            Script::ByMarker(map) => map.into_iter().map(|(marker, replies)| (marker, replies.into())).collect(),
        });
        TASKS.with(|t| {
            let mut tasks = t.borrow_mut();
            tasks.script = queues;
            tasks.script_prompts.clear();
        });
    }

    /// The prompts received since the script was loaded.
    pub fn prompts() -> Vec<String> {
        TASKS.with(|t| t.borrow().script_prompts.clone())
    }

    pub(super) fn generate(request: GenerationRequest) -> LocalBoxStream<'static, Result<ModelChunk, ModelError>> {
        let reply = TASKS.with(|t| {
            let mut tasks = t.borrow_mut();
            tasks.script_prompts.push(request.prompt.clone());
            let queues = tasks.script.as_mut()?;
            let chosen = queues
                .iter()
                .position(|(marker, _)| !marker.is_empty() && request.prompt.contains(marker.as_str()))
                .or_else(|| queues.iter().position(|(marker, _)| marker.is_empty()))?;
            queues[chosen].1.pop_front()
        });
        let Some(reply) = reply else {
            return stream::iter([Err(ModelError("the test script has no reply left".into()))]).boxed_local();
        };
        let text = match resolve_indices(&reply, &request.prompt) {
            Ok(text) => text,
            Err(message) => return stream::iter([Err(ModelError(message))]).boxed_local(),
        };
        // Like a model, the script stops decoding where the step ends.
        let text = match request.stop_end(&text, 0) {
            Some(end) => text[..end].to_owned(),
            None => text,
        };
        let chars: Vec<char> = text.chars().collect();
        let mut items: Vec<_> = chars.chunks(7).map(|c| Ok(ModelChunk::Text(c.iter().collect::<String>()))).collect();
        let counter = ApproxTokenCounter;
        items.push(Ok(ModelChunk::Finished(GenerationStats {
            prompt_tokens: counter.count(&request.prompt),
            completion_tokens: counter.count(&text),
            ..GenerationStats::default()
        })));
        stream::iter(items).boxed_local()
    }

    pub(crate) fn resolve_indices(reply: &str, prompt: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = reply;
        while let Some(start) = rest.find("{{index:") {
            out.push_str(&rest[..start]);
            let after = &rest[start + "{{index:".len()..];
            let end = after.find("}}").ok_or("unclosed {{index: in the test script")?;
            let needle = &after[..end];
            let index =
                prompt.lines().rev().filter(|line| line.contains(needle)).find_map(line_index).ok_or_else(|| {
                    format!("the test script wants an element with {needle:?}, but no snapshot line has it")
                })?;
            out.push_str(&index.to_string());
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

    #[cfg(test)]
    mod tests {
        use super::resolve_indices;

        #[test]
        fn placeholders_become_the_latest_matching_index() {
            let prompt = "[1] button \"Old\"\n[3] button \"Place order\"\nlater:\n  *[7] button \"Place order\"\n";
            assert_eq!(resolve_indices("click{index:{{index:Place order}}}", prompt).unwrap(), "click{index:7}");
            assert!(resolve_indices("{{index:Missing}}", prompt).is_err());
            assert!(resolve_indices("{{index:Place", prompt).is_err());
        }
    }
}

/// The agent loop driven by the real Burn model (the tiny test model: real tokenizer and chat
/// template, random weights) on the CPU. Whatever the model writes, the loop must stay
/// well-formed. (The browser runs the same code; on SwiftShader a 5,000-token agent prompt takes
/// too long for CI, so the browser suite drives the loop with the scripted model.)
#[cfg(all(test, not(target_arch = "wasm32")))]
mod real_model_tests {
    use std::path::Path;

    use burn::tensor::Device;
    use futures::lock::Mutex;
    use hearth_agent::{AgentEvent, ElementInfo, Snapshot};
    use hearth_chat::ChatTemplate;
    use hearth_model::model_dir::{load_model, load_tokenizer};
    use hearth_model::{CacheOptions, Session};

    use super::*;

    /// Every tool answers with the same small page.
    struct OnePage;

    impl ToolExecutor for OnePage {
        async fn execute(&mut self, _call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
            let page = PageInfo { url: "http://127.0.0.1/".into(), title: "Test".into() };
            let go = ElementInfo { index: 1, tag: "button".into(), text: "Go".into(), ..Default::default() };
            Ok(ToolOutput::snapshot(Snapshot { page, elements: vec![go] }))
        }
    }

    /// The tiny test model on the CPU, as the engine holds it.
    fn tiny_model() -> ModelHandles {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat");
        let device = Device::flex();
        let model = load_model(&dir, &device).expect("the tiny model loads");
        let stop_tokens: Rc<[u32]> = model.config.eos_token_ids.clone().into();
        let template = std::fs::read_to_string(dir.join("chat_template.jinja")).expect("template");
        ModelHandles {
            session: Rc::new(Mutex::new(Session::new(model, CacheOptions::default()))),
            tokenizer: Rc::new(load_tokenizer(&dir).expect("tokenizer")),
            template: Rc::new(ChatTemplate::from_str(&template, "<bos>").expect("template parses")),
            stop_tokens,
            context_tokens: CacheOptions::default().max_context,
        }
    }

    /// The text `burn_generate` streams and the number of tokens it decoded.
    fn decode(model: &ModelHandles, seed: u64, stop_after: &[&str]) -> (String, usize) {
        let sampling = SamplingOptions { temperature: 50.0, top_k: 0, top_p: 1.0, seed };
        let request = GenerationRequest {
            prompt: "<bos><|turn>user\nHi<turn|>\n<|turn>model\n".into(),
            max_new_tokens: 64,
            stop_after: stop_after.iter().map(|p| (*p).to_owned()).collect(),
            cancel: hearth_agent::CancelToken::new(),
        };
        let chunks = pollster::block_on(
            burn_generate(model.clone(), tab_conversation(1), sampling, request).collect::<Vec<_>>(),
        );
        let mut text = String::new();
        let mut tokens = None;
        for chunk in chunks {
            match chunk.expect("the tiny model generates") {
                ModelChunk::Text(t) => text.push_str(&t),
                ModelChunk::Finished(stats) => tokens = Some(stats.completion_tokens),
            }
        }
        (text, tokens.expect("the stream ends with its numbers"))
    }

    /// The engine's decoding ends right after `<tool_call|>` (id 49) when the agent asks: the
    /// same seed that writes on past it without the request stops there with it.
    #[test]
    fn decoding_ends_after_the_token_that_closes_a_call() {
        let model = tiny_model();
        assert_eq!(model.tokenizer.token_id("<tool_call|>"), Some(49));
        // Near-uniform sampling over the tiny vocabulary: find a run that writes token 49 and
        // then goes on.
        let (seed, free, free_tokens, close_end) = (0..300)
            .find_map(|seed| {
                let (text, tokens) = decode(&model, seed, &[]);
                let end = text.find("<tool_call|>")? + "<tool_call|>".len();
                (end < text.len()).then_some((seed, text, tokens, end))
            })
            .expect("some seed writes <tool_call|> before the end");
        let (stopped, tokens) = decode(&model, seed, hearth_agent::STEP_ENDS_AFTER);
        assert_eq!(stopped, free[..close_end], "cut right after the close, nothing decoded after it");
        assert!(tokens < free_tokens, "{tokens} tokens decoded, {free_tokens} without the stop");
    }

    #[test]
    fn the_real_model_drives_the_loop_and_it_stays_well_formed() {
        let handles = tiny_model();
        let settings = TaskSettings { max_iterations: 3, enable_thinking: false, temperature: 0.0, max_new_tokens: 24 };
        let mut agent = new_conversation(&handles, &settings).agent.expect("a new conversation has its agent");
        agent.start_task(
            "Click the Go button.",
            Some(PageInfo { url: "http://127.0.0.1/".into(), title: "Test".into() }),
        );
        let mut backend = TaskModel::new(handles.clone(), tab_conversation(1), &settings);
        let mut events = Vec::new();
        let outcome = pollster::block_on(agent.run(&mut backend, &mut OnePage, &mut |e| events.push(e)));

        // One usage report per model call, each within the token limit, prompts counted by the
        // model's own tokenizer.
        let usages: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Usage { prompt_tokens, completion_tokens, .. } => {
                    Some((*prompt_tokens, *completion_tokens))
                }
                _ => None,
            })
            .collect();
        assert!(!usages.is_empty() && usages.len() <= 3, "{events:?}");
        let prompt = agent.last_prompt().expect("a prompt was rendered");
        assert!(prompt.starts_with("<bos>"), "rendered with the model's own template");
        for (prompt_tokens, completion_tokens) in &usages {
            assert!(*prompt_tokens > 1000, "the system prompt and tools are in the prompt");
            assert!(*completion_tokens <= 24);
        }
        // Every tool that started has its result, in order.
        let call_ids = |starts: bool| -> Vec<&String> {
            events
                .iter()
                .filter_map(|e| match e {
                    AgentEvent::ToolStart { call_id, .. } if starts => Some(call_id),
                    AgentEvent::ToolResult { call_id, .. } if !starts => Some(call_id),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(call_ids(true), call_ids(false));
        // Random weights write anything; the run ends in a state the overlay can show.
        match &outcome {
            Outcome::Done { result, .. } => assert!(!result.is_empty()),
            Outcome::Failed { message } => assert!(!message.is_empty()),
            Outcome::Paused { .. } | Outcome::NeedsConfirmation { .. } | Outcome::NeedsAnswer { .. } => {}
            other => panic!("unexpected outcome {other:?}"),
        }
        println!("outcome: {outcome:?}; model calls: {}; usage: {usages:?}", usages.len());
    }
}
