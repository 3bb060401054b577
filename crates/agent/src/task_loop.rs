//! The tool-calling loop.
//!
//! [`Agent::run`] drives the model and the tools until the task needs the user (a confirmation
//! or an answer), finishes, pauses, fails or is stopped, and returns an [`Outcome`]. The state
//! stays in the agent, so the UI resolves the request ([`Agent::confirm`], [`Agent::answer`],
//! [`Agent::continue_task`]) and calls `run` again. Stop and steering messages arrive at any
//! time through an [`AgentControl`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::{Either, select};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

use hearth_chat::{ChatError, ChatTemplate, Message, MessageContent, RenderRequest, Tool, ToolCall};

use crate::arguments::{self, AskUserArgs, DoneArgs, RunJavascriptArgs};
use crate::backend::{
    CancelToken, Clock, GenerationRequest, ModelBackend, ModelChunk, PromptClip, PromptImage, ToolExecutor, ToolImage,
    ToolInvocation, ToolOutput,
};
use crate::breaker::FailureBreaker;
use crate::context::{
    ContextBudget, Entry, EntryKind, TokenCounter, clip_keys, drop_oldest_step, full_page_results, image_keys,
    prefill_tokens, prune_old_results, prune_page_results, prune_screenshots, remove_clips, remove_images,
    truncate_head_tail,
};
use crate::events::{AgentEvent, PauseReason, Source, TaskError};
use crate::page::PointTarget;
use crate::page::{GEMMA_MARKUP, Neutralizer, PageInfo, Snapshot};
use crate::page_tools::{MAX_RESULT_CHARS, PageToolInfo, is_page_tool, page_tool_definitions};
use crate::parser::{ParseEvent, ParsedOutput, ParserOptions, StreamParser};
use crate::policy::grants::GrantScope;
use crate::policy::{
    Assessment, Decision, Grants, RepetitionGuard, RiskReason, assess, assess_point, describe_target, site_of_url,
    web_url,
};
use crate::policy::{assess_page_tool, assess_tab};
use crate::prompt::default_system_prompt;
use crate::tabs::{AttachedTab, MAX_OPEN_TABS, OpenTab, RequestTabs, TaskTabs};
use crate::tools::{
    ASK_USER, OPEN_TAB, READ_LINK, READ_PAGE, READ_TAB, RiskLevel, SWITCH_TAB, ToolDefinition, ToolMode,
    always_offered, default_tool_modes, validate_arguments,
};
use hearth_chat::ContentPart;
use hearth_chat::syntax::defuse_media_markers;

/// Settings of an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// Model calls per run before the task pauses (it can be continued).
    pub max_iterations: usize,
    pub enable_thinking: bool,
    pub max_new_tokens: usize,
    pub budget: ContextBudget,
    /// The same action this many times within `repeat_window_ms` pauses the task.
    pub repeat_limit: usize,
    pub repeat_window_ms: u64,
    /// Failures in a row of one action on one target that pause the task (an action that
    /// changed nothing counts as failed).
    pub same_failure_limit: usize,
    /// Failed actions in a row that pause the task.
    pub failure_limit: usize,
    /// What the user lets each tool do (a tool not named is on).
    pub tool_modes: BTreeMap<String, ToolMode>,
    pub system_prompt: String,
}

impl AgentConfig {
    /// What the user lets `tool` do (the loop's own tools are always on).
    pub fn mode(&self, tool: &str) -> ToolMode {
        if always_offered(tool) {
            return ToolMode::On;
        }
        self.tool_modes.get(tool).copied().unwrap_or_default()
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 25,
            enable_thinking: false,
            max_new_tokens: 1024,
            budget: ContextBudget::default(),
            repeat_limit: 3,
            repeat_window_ms: 60_000,
            same_failure_limit: 3,
            failure_limit: 5,
            tool_modes: default_tool_modes(),
            system_prompt: default_system_prompt(),
        }
    }
}

/// Why `run` returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Done {
        result: String,
        success: bool,
    },
    /// Waiting for [`Agent::confirm`].
    NeedsConfirmation {
        call_id: String,
    },
    /// Waiting for [`Agent::answer`].
    NeedsAnswer {
        call_id: String,
    },
    /// Continue with [`Agent::continue_task`].
    Paused {
        reason: PauseReason,
    },
    Stopped,
    /// A visible error; [`Agent::continue_task`] retries from the same state.
    Failed {
        error: TaskError,
    },
    /// Nothing to do: no task, or the task is finished.
    Idle,
}

/// Misuse of the agent's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("no action is waiting for confirmation")]
    NothingToConfirm,
    #[error("no question is waiting for an answer")]
    NothingToAnswer,
    #[error("the decision is for {answered}, but the action waiting for confirmation is {waiting}")]
    WrongCall { answered: String, waiting: String },
}

/// The prompt does not fit.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error(
        "the conversation needs {tokens} tokens but the context budget allows {max}. Your own messages are never shortened: shorten them or start a new conversation (this model and GPU hold {window} tokens)"
    )]
    Overflow { tokens: usize, max: usize, window: usize },
    #[error(transparent)]
    Template(#[from] ChatError),
}

/// The highest passage number a restored page-text result holds (lines `[n] …`).
fn last_passage(entry: &Entry) -> Option<u32> {
    match &entry.kind {
        EntryKind::ToolResult { tool, .. } if [READ_PAGE, READ_LINK, READ_TAB].contains(&tool.as_str()) => {}
        // The tabs the user attached to a message.
        EntryKind::User => {}
        _ => return None,
    }
    let text = entry.message.text()?;
    text.lines().filter_map(|line| line.strip_prefix('[')?.split_once("] ")?.0.parse::<u32>().ok()).max()
}

/// What an action acts on, for the breaker: the element as the card names it, else the arguments.
fn action_target(call: &PendingCall) -> String {
    call.target.as_ref().map_or_else(|| Value::Object(call.arguments.clone()).to_string(), |t| t.description.clone())
}

impl From<ContextError> for TaskError {
    fn from(error: ContextError) -> Self {
        match error {
            ContextError::Overflow { tokens, max, window } => TaskError::ContextFull { tokens, max, window },
            ContextError::Template(e) => TaskError::Prompt { detail: e.to_string() },
        }
    }
}

/// Stop and steer a running agent from elsewhere (the UI). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct AgentControl(Arc<Mutex<ControlState>>);

#[derive(Debug, Default)]
struct ControlState {
    cancel: CancelToken,
    steering: VecDeque<String>,
}

impl AgentControl {
    fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the running task: cancels generation and the running tool.
    pub fn stop(&self) {
        self.lock().cancel.cancel();
    }

    /// Adds a user message, inserted before the next model call; the current step finishes.
    pub fn steer(&self, text: impl Into<String>) {
        self.lock().steering.push_back(text.into());
    }

    fn begin_run(&self) -> CancelToken {
        let token = CancelToken::new();
        self.lock().cancel = token.clone();
        token
    }

    fn take_steering(&self) -> Vec<String> {
        self.lock().steering.drain(..).collect()
    }
}

/// Prompt numbers of one model call (telemetry and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptStats {
    pub prompt_tokens: usize,
    pub prefill_tokens: usize,
    pub compacted: bool,
}

/// What the gate decides for a model's tool call ([`Agent::gate`]).
enum Gate {
    /// The call ends without running: its result for the model (invalid, refused, denied, or
    /// the user's answer to `ask_user`).
    Closed(Result<String, String>),
    /// `done`: the task ends.
    Finish { result: String, success: bool },
    /// The run waits for the user (a question, a card, a repetition); `announce` is the event
    /// that asks, the first time only.
    Wait { outcome: Outcome, announce: Option<AgentEvent> },
    /// `click_at`: the executor says what lies under the point, then the gate judges again.
    Locate(ToolInvocation),
    /// Runs, with exactly what the user allowed.
    Run { invocation: ToolInvocation, changes_state: bool },
}

#[derive(Debug, Clone)]
struct PendingCall {
    id: String,
    name: String,
    arguments: Map<String, Value>,
    /// The arguments read as the tool's argument type, once, when the model's turn was taken in
    /// (`None` for the page's own tools, and for a call that is invalid or does not fit its type).
    call: Option<arguments::ToolCall>,
    /// Why the call cannot run (fed back to the model).
    invalid: Option<String>,
    repetition_checked: bool,
    assessment: Option<Assessment>,
    /// What the user allowed this call to do (the reasons of its card, or of the grant that
    /// covered it): the worker's fence lets exactly these through (a site to open, a form to post).
    approved: Vec<RiskReason>,
    /// The call's target in the user's words (for the cards).
    target: Option<Box<crate::policy::ActionTarget>>,
    /// Where the call was judged (the grant it may receive covers only this).
    scope: GrantScope,
    decision: Option<Decision>,
    answer: Option<String>,
    awaiting: bool,
    /// For `click_at`: what the executor found under the point, judged before it runs.
    located: Option<PointTarget>,
}

/// A step ends as soon as a tool call closes: one call per step, and nothing the model writes
/// after it (a made-up tool response, more calls) is decoded.
pub const STEP_ENDS_AFTER: &[&str] = &[hearth_chat::syntax::CALL_CLOSE];

enum GenError {
    Stopped,
    Failed(String),
}

/// A conversation with the browser agent.
pub struct Agent {
    template: ChatTemplate,
    tools: Vec<ToolDefinition>,
    config: AgentConfig,
    counter: Box<dyn TokenCounter>,
    clock: Box<dyn Clock>,
    control: AgentControl,
    entries: Vec<Entry>,
    pending: VecDeque<PendingCall>,
    grants: Grants,
    repetition: RepetitionGuard,
    breaker: FailureBreaker,
    page: Option<PageInfo>,
    latest_snapshot: Option<Snapshot>,
    /// Defuses the tokenizer's control tokens in everything that comes from a page.
    neutralizer: Neutralizer,
    iterations: usize,
    bad_turns: usize,
    next_call: u64,
    /// The number of the conversation's last passage given to the model.
    next_passage: u32,
    finished: bool,
    last_prompt: Option<String>,
    stats: Vec<PromptStats>,
    /// The screenshots the conversation shows the model, by the key of their image part (the
    /// call that took them). Kept in memory only: a restored conversation has notes instead.
    images: BTreeMap<String, Arc<ToolImage>>,
    /// The user's spoken requests, by the key of their audio part. In memory only, like the
    /// screenshots: a restored conversation has a note instead.
    clips: BTreeMap<String, Arc<[f32]>>,
    /// The number of the next spoken request's clip: keys never repeat, even after older clips
    /// were dropped from the conversation.
    next_clip: u32,
    /// The URL of the page the latest screenshot shows (`click_at` aims at it).
    screenshot_of: Option<String>,
    /// The tools the page offers (WebMCP), as the latest page-side result listed them, and
    /// what the model is offered for them (`page.<name>`).
    page_tools: Vec<PageToolInfo>,
    page_tool_defs: Vec<ToolDefinition>,
    /// The tabs this task knows and works in (attached, opened, the one it acts in).
    tabs: TaskTabs,
    /// Events of the task's start (the attached tabs' sources), told at the next run.
    start_events: Vec<AgentEvent>,
}

/// What the user asks: typed (or spoken: `voice`, 16 kHz mono), the page's words they selected,
/// on the page their tab shows, with the tabs that come with it.
#[derive(Debug, Clone, Default)]
pub struct UserRequest {
    pub text: String,
    pub selection: Option<String>,
    pub page: Option<PageInfo>,
    pub voice: Option<Arc<[f32]>>,
    pub tabs: RequestTabs,
}

impl Agent {
    pub fn new(
        template: ChatTemplate,
        tools: Vec<ToolDefinition>,
        config: AgentConfig,
        counter: Box<dyn TokenCounter>,
        clock: Box<dyn Clock>,
    ) -> Self {
        let repetition = RepetitionGuard::new(config.repeat_limit, config.repeat_window_ms);
        let breaker = FailureBreaker::new(config.same_failure_limit, config.failure_limit);
        let special = counter.special_tokens();
        let neutralizer = Neutralizer::new(special.iter().map(String::as_str).chain(GEMMA_MARKUP.iter().copied()));
        Self {
            template,
            tools,
            config,
            counter,
            clock,
            control: AgentControl::default(),
            entries: Vec::new(),
            pending: VecDeque::new(),
            grants: Grants::default(),
            repetition,
            breaker,
            page: None,
            latest_snapshot: None,
            neutralizer,
            iterations: 0,
            bad_turns: 0,
            next_call: 0,
            next_passage: 0,
            finished: false,
            last_prompt: None,
            stats: Vec::new(),
            images: BTreeMap::new(),
            clips: BTreeMap::new(),
            next_clip: 1,
            screenshot_of: None,
            page_tools: Vec::new(),
            page_tool_defs: Vec::new(),
            tabs: TaskTabs::default(),
            start_events: Vec::new(),
        }
    }

    /// The tools the page offers as the model sees them (`page.<name>`), for tests and the UI.
    pub fn page_tools(&self) -> &[ToolDefinition] {
        &self.page_tool_defs
    }

    /// Takes the page's current list of tools (what `getTools()` gave on `url`).
    fn set_page_tools(&mut self, tools: Vec<PageToolInfo>, url: &str) {
        self.page_tool_defs = page_tool_definitions(&tools, url, &self.neutralizer);
        self.page_tools = tools;
    }

    /// Hearth's tools and the page's.
    fn all_tools(&self) -> impl Iterator<Item = &ToolDefinition> {
        self.tools.iter().chain(self.page_tool_defs.iter())
    }

    /// The handle for stop and steering.
    pub fn control(&self) -> AgentControl {
        self.control.clone()
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Changed settings apply from the next model call.
    pub fn config_mut(&mut self) -> &mut AgentConfig {
        &mut self.config
    }

    /// The conversation as the template sees it (without the system message).
    pub fn messages(&self) -> Vec<Message> {
        self.entries.iter().map(|e| e.message.clone()).collect()
    }

    /// The conversation as it stands (messages and what compaction knows of them), for keeping
    /// outside the engine: the offscreen document holding it may be torn down at any time.
    pub fn history(&self) -> &[Entry] {
        &self.entries
    }

    /// Gives an agent without a conversation yet the one [`Self::history`] returned; it then
    /// waits for the next task. Grants, pending calls and the latest snapshot are not kept: a
    /// restored task asks again before risky actions and takes a new snapshot. `false` (and
    /// nothing changes) when this agent has a conversation already.
    pub fn restore_history(&mut self, entries: Vec<Entry>) -> bool {
        if !self.entries.is_empty() {
            return false;
        }
        // Call ids go on from the restored ones (`call_<n>`, counted from 1).
        self.next_call = entries.iter().map(|e| e.message.tool_calls.len() as u64).sum();
        self.next_passage = entries.iter().filter_map(last_passage).max().unwrap_or(0);
        self.entries = entries;
        // The pictures were not kept with the conversation: their notes stay.
        self.entries.iter_mut().filter(|e| !image_keys(e).is_empty()).for_each(remove_images);
        self.entries.iter_mut().filter(|e| !clip_keys(e).is_empty()).for_each(remove_clips);
        self.finished = true;
        true
    }

    /// The last prompt sent to the model.
    pub fn last_prompt(&self) -> Option<&str> {
        self.last_prompt.as_deref()
    }

    /// Prompt numbers of every model call so far.
    pub fn prompt_stats(&self) -> &[PromptStats] {
        &self.stats
    }

    /// Starts a task in this conversation: the user's message (with the current page), fresh
    /// step count, and no grants from earlier tasks.
    pub fn start_task(&mut self, text: &str, page: Option<PageInfo>) {
        self.start_task_with_selection(text, None, page);
    }

    /// [`Self::start_task`] with the text the user had selected on the page, which is the page's
    /// words and is fenced as such (what the user typed is theirs, whatever it starts with).
    pub fn start_task_with_selection(&mut self, text: &str, selection: Option<&str>, page: Option<PageInfo>) {
        self.start_task_with_voice(None, text, selection, page);
    }

    /// [`Self::start_task_with_selection`] for a request the user spoke: `samples` (16 kHz mono)
    /// go to the model as the audio part of their message, before what they typed and the page.
    pub fn start_task_with_voice(
        &mut self,
        samples: Option<Arc<[f32]>>,
        text: &str,
        selection: Option<&str>,
        page: Option<PageInfo>,
    ) {
        self.start_request(UserRequest {
            text: text.to_owned(),
            selection: selection.map(str::to_owned),
            page,
            voice: samples,
            tabs: RequestTabs::default(),
        });
    }

    /// Starts a task for `request`: [`Self::start_task_with_voice`] with the tabs the user
    /// attached (their text goes with the message as those sites' words, in numbered passages
    /// that the UI is told of as sources at the next run) and the other open tabs the model may name.
    pub fn start_request(&mut self, request: UserRequest) {
        let UserRequest { text, selection, page, voice: samples, tabs } = request;
        let (text, selection) = (text.as_str(), selection.as_deref());
        self.abandon_pending("Not run: the user started a new task.");
        // The page tools go back to the task's own tab: a snapshot of another tab names none of its elements.
        if self.tabs.acting().is_some() {
            self.latest_snapshot = None;
        }
        self.tabs = TaskTabs::for_request(&tabs);
        self.grants.clear();
        self.repetition.reset();
        self.breaker.reset();
        self.iterations = 0;
        self.bad_turns = 0;
        self.finished = false;
        let mut message = self.user_turn(text, selection, page.as_ref(), tabs.own);
        message.push_str(&self.attached_tabs(&tabs.attached));
        message.push_str(&self.open_tabs(&tabs));
        self.page = page;
        let message = match samples {
            Some(samples) => {
                let key = format!("voice_{}", self.next_clip);
                self.next_clip += 1;
                self.clips.insert(key.clone(), samples);
                let mut audio = Map::new();
                audio.insert("audio".into(), Value::String(key));
                let parts =
                    vec![ContentPart::Audio { extra: audio }, ContentPart::Text { text: message, extra: Map::new() }];
                Message { content: Some(MessageContent::Parts(parts)), ..Message::user("") }
            }
            None => Message::user(message),
        };
        self.entries.push(Entry { message, kind: EntryKind::User });
    }

    /// The user's turn: what they typed, with page-derived parts fenced: the text they selected
    /// on the page, and the page's title and URL, are the page's words, not the user's.
    fn user_turn(&self, text: &str, selection: Option<&str>, page: Option<&PageInfo>, own_tab: Option<u32>) -> String {
        let source = page.map_or("the page", |p| p.url.as_str());
        let mut message = String::new();
        if let Some(selection) = selection.map(str::trim).filter(|s| !s.is_empty()) {
            message.push_str("Text the user selected on the page:\n");
            message.push_str(&self.neutralizer.fence(source, selection));
            message.push_str("\n\n");
        }
        message.push_str(&defuse_media_markers(text.trim()));
        if let Some(p) = page {
            match own_tab {
                Some(tab) => message.push_str(&format!("\n\nThe current page (this task's tab, tab {tab}):\n")),
                None => message.push_str("\n\nThe current page:\n"),
            }
            message.push_str(&self.neutralizer.fence(&p.url, &format!("{} — {}", p.title, p.url)));
        }
        message
    }

    /// The tabs the user attached, each fenced as its site's words, its passages numbered on from
    /// the conversation's last (cited like `read_page`'s); each becomes a sources event. A tab's
    /// passages stop where the per-result budget ends.
    fn attached_tabs(&mut self, attached: &[AttachedTab]) -> String {
        let mut text = String::new();
        for tab in attached {
            if let Some(why) = &tab.unreadable {
                text.push_str(&format!("\n\nThe user attached tab {}, which could not be read: {why}", tab.tab));
                continue;
            }
            let max = self.config.budget.max_tool_result_tokens;
            let mut body = format!("Tab {}: {} — {}\n", tab.tab, tab.title, tab.url);
            let mut sources = Vec::new();
            for passage in &tab.passages {
                let line = format!("[{}] {}\n", self.next_passage + 1, passage);
                if self.counter.count(&body) + self.counter.count(&line) > max {
                    break;
                }
                self.next_passage += 1;
                body.push_str(&line);
                sources.push(Source { number: self.next_passage, text: passage.clone() });
            }
            text.push_str(&format!("\n\nA tab the user attached to this message (tab {}):\n", tab.tab));
            text.push_str(&self.neutralizer.fence(&tab.url, body.trim_end()));
            self.start_events.push(AgentEvent::Sources {
                url: tab.url.clone(),
                title: tab.title.clone(),
                passages: sources,
            });
        }
        text
    }

    /// The other open tabs, which `read_tab` may read (asking first) and `switch_tab` names: their
    /// titles and addresses are their pages' words.
    fn open_tabs(&self, tabs: &RequestTabs) -> String {
        let attached: BTreeSet<u32> = tabs.attached.iter().map(|t| t.tab).collect();
        let others: Vec<&OpenTab> = tabs
            .open
            .iter()
            .filter(|t| !attached.contains(&t.tab) && Some(t.tab) != tabs.own)
            .take(MAX_OPEN_TABS)
            .collect();
        if others.is_empty() {
            return String::new();
        }
        let list: Vec<String> = others.iter().map(|t| format!("tab {}: {} — {}", t.tab, t.title, t.url)).collect();
        format!(
            "\n\nThe user's other open tabs:\n{}",
            self.neutralizer.fence("the open tabs' titles", &list.join("\n"))
        )
    }

    /// Approves or denies the action waiting for confirmation, named by its call id (a decision
    /// for another call is refused); then call `run` again.
    pub fn confirm(&mut self, call_id: &str, decision: Decision) -> Result<(), SessionError> {
        let call = self
            .pending
            .front_mut()
            .filter(|c| c.awaiting && c.assessment.is_some())
            .ok_or(SessionError::NothingToConfirm)?;
        if call.id != call_id {
            return Err(SessionError::WrongCall { answered: call_id.to_owned(), waiting: call.id.clone() });
        }
        call.awaiting = false;
        call.decision = Some(decision);
        if decision == Decision::AllowForTask
            && let Some(a) = &call.assessment
        {
            self.grants.grant(&call.name, a, &call.scope);
        }
        Ok(())
    }

    /// The id of the call waiting for confirmation, if one is.
    pub fn awaiting_confirmation(&self) -> Option<&str> {
        self.pending.front().filter(|c| c.awaiting && c.assessment.is_some()).map(|c| c.id.as_str())
    }

    /// Answers the pending `ask_user` question; then call `run` again.
    pub fn answer(&mut self, text: &str) -> Result<(), SessionError> {
        let call = self
            .pending
            .front_mut()
            .filter(|c| c.awaiting && c.name == ASK_USER)
            .ok_or(SessionError::NothingToAnswer)?;
        call.awaiting = false;
        call.answer = Some(text.to_owned());
        Ok(())
    }

    /// Resumes a paused, stopped or failed task with its state intact.
    pub fn continue_task(&mut self) {
        self.iterations = 0;
        self.bad_turns = 0;
        self.repetition.reset();
        self.breaker.reset();
    }

    /// The tools the model is offered: every one the user has not switched off.
    fn offered(&self) -> impl Iterator<Item = &ToolDefinition> {
        self.all_tools().filter(|t| self.config.mode(&t.name) != ToolMode::Off)
    }

    /// Runs until the task needs the user, ends, pauses or is stopped.
    pub async fn run<M: ModelBackend, T: ToolExecutor>(
        &mut self,
        model: &mut M,
        executor: &mut T,
        on_event: &mut dyn FnMut(AgentEvent),
    ) -> Outcome {
        let cancel = self.control.begin_run();
        for event in self.start_events.drain(..) {
            on_event(event);
        }
        if self.entries.is_empty() || (self.finished && self.pending.is_empty()) {
            return Outcome::Idle;
        }
        loop {
            if cancel.is_cancelled() {
                return self.stopped(on_event);
            }
            if let Some(outcome) = self.process_pending(executor, &cancel, on_event).await {
                return outcome;
            }
            for text in self.control.take_steering() {
                self.entries.push(Entry { message: Message::user(text), kind: EntryKind::User });
            }
            if let Some(reason) = self.breaker.tripped() {
                on_event(AgentEvent::Paused { reason: reason.clone() });
                return Outcome::Paused { reason };
            }
            if self.iterations >= self.config.max_iterations {
                let reason = PauseReason::MaxIterations { limit: self.config.max_iterations };
                on_event(AgentEvent::Paused { reason: reason.clone() });
                return Outcome::Paused { reason };
            }
            let (prompt, stats) = match self.build_prompt(on_event) {
                Ok(p) => p,
                Err(e) => return self.fail(e.into(), on_event),
            };
            self.iterations += 1;
            match self.generate(model, prompt, stats, &cancel, on_event).await {
                Ok(output) => {
                    if let Some(outcome) = self.absorb(output, on_event) {
                        return outcome;
                    }
                }
                Err(GenError::Stopped) => return self.stopped(on_event),
                Err(GenError::Failed(detail)) => return self.fail(TaskError::Model { detail }, on_event),
            }
        }
    }

    fn fail(&mut self, error: TaskError, on_event: &mut dyn FnMut(AgentEvent)) -> Outcome {
        on_event(AgentEvent::Error { error: error.clone(), recoverable: true });
        Outcome::Failed { error }
    }

    fn stopped(&mut self, on_event: &mut dyn FnMut(AgentEvent)) -> Outcome {
        on_event(AgentEvent::Stopped);
        Outcome::Stopped
    }

    /// Renders the prompt, compacting history when needed.
    fn build_prompt(&mut self, on_event: &mut dyn FnMut(AgentEvent)) -> Result<(String, PromptStats), ContextError> {
        let budget = self.config.budget.clone();
        let mut prompt = self.render()?;
        let mut tokens = self.prompt_tokens(&prompt);
        let before = tokens;
        let piled_up = full_page_results(&self.entries) > budget.keep_full_snapshots + budget.snapshot_slack
            || self.shown_images().len() > budget.keep_screenshots + budget.screenshot_slack;
        let mut compacted = false;
        if tokens > budget.compact_threshold() || piled_up {
            compacted = true;
            // Old screenshots go first: the costliest results, and a new one is cheap to take.
            prune_screenshots(&mut self.entries, budget.keep_screenshots);
            prune_page_results(&mut self.entries, budget.keep_full_snapshots);
            prompt = self.render()?;
            tokens = self.prompt_tokens(&prompt);
            if tokens > budget.compact_threshold() {
                prune_old_results(&mut self.entries, budget.keep_recent_results);
                prompt = self.render()?;
                tokens = self.prompt_tokens(&prompt);
                while tokens > budget.compact_target() && drop_oldest_step(&mut self.entries) {
                    prompt = self.render()?;
                    tokens = self.prompt_tokens(&prompt);
                }
            }
            // Pictures no entry shows any more are let go.
            let shown: BTreeSet<String> = self.entries.iter().flat_map(image_keys).collect();
            self.images.retain(|key, _| shown.contains(key));
            let heard: BTreeSet<String> = self.entries.iter().flat_map(clip_keys).collect();
            self.clips.retain(|key, _| heard.contains(key));
            on_event(AgentEvent::Compacted { before_tokens: before, after_tokens: tokens });
        }
        if tokens > budget.max_prompt_tokens() {
            return Err(ContextError::Overflow {
                tokens,
                max: budget.max_prompt_tokens(),
                window: budget.window_tokens,
            });
        }
        let stats = PromptStats {
            prompt_tokens: tokens,
            prefill_tokens: prefill_tokens(self.last_prompt.as_deref(), &prompt, self.counter.as_ref()),
            compacted,
        };
        self.stats.push(stats);
        self.last_prompt = Some(prompt.clone());
        Ok((prompt, stats))
    }

    /// The prompt's size in model tokens: its text, each image's soft tokens and each clip's.
    fn prompt_tokens(&self, prompt: &str) -> usize {
        let clips: usize = self.shown_clips().iter().map(PromptClip::tokens).sum();
        self.counter.count(prompt) + self.shown_images().len() * self.config.budget.image_tokens + clips
    }

    /// The voice clips the prompt holds, in the order the template writes their placeholders.
    fn shown_clips(&self) -> Vec<PromptClip> {
        self.entries
            .iter()
            .flat_map(clip_keys)
            .filter_map(|key| self.clips.get(&key).map(|samples| PromptClip { key, samples: samples.clone() }))
            .collect()
    }

    /// The images the prompt shows, in the order the template writes their placeholders (the
    /// order of the entries).
    fn shown_images(&self) -> Vec<PromptImage> {
        self.entries
            .iter()
            .flat_map(image_keys)
            .filter_map(|key| self.images.get(&key).map(|image| PromptImage { key, image: image.clone() }))
            .collect()
    }

    fn render(&self) -> Result<String, ChatError> {
        let mut messages = Vec::with_capacity(self.entries.len() + 1);
        messages.push(Message::system(self.config.system_prompt.clone()));
        messages.extend(self.entries.iter().map(|e| e.message.clone()));
        let tools: Vec<Tool> = self.offered().map(ToolDefinition::to_chat_tool).collect();
        self.template.render(&RenderRequest {
            messages: &messages,
            tools: &tools,
            enable_thinking: self.config.enable_thinking,
            preserve_thinking: self.config.enable_thinking,
            add_generation_prompt: true,
        })
    }

    async fn generate<M: ModelBackend>(
        &mut self,
        model: &mut M,
        prompt: String,
        stats: PromptStats,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(AgentEvent),
    ) -> Result<ParsedOutput, GenError> {
        // After a tool response with thinking on, the template opens the thought channel.
        let options = ParserOptions { starts_in_thought: prompt.ends_with("<|channel>thought\n") };
        let mut parser = StreamParser::new(options);
        let mut events = Vec::new();
        let mut raw = String::new();
        let mut gen_stats = None;
        let request = GenerationRequest {
            prompt,
            max_new_tokens: self.config.max_new_tokens,
            stop_after: STEP_ENDS_AFTER.iter().map(|p| (*p).to_owned()).collect(),
            cancel: cancel.clone(),
            tools: Some(self.offered().map(|t| t.name.clone()).collect()),
            page_tools: self
                .offered()
                .filter(|t| is_page_tool(&t.name))
                .map(|t| (t.name.clone(), t.parameters.clone()))
                .collect(),
            images: self.shown_images(),
            clips: self.shown_clips(),
        };
        let mut closed = false;
        {
            let mut stream = pin!(model.generate(request.clone()));
            let mut cancelled = pin!(cancel.cancelled());
            loop {
                match select(stream.next(), cancelled.as_mut()).await {
                    Either::Right(_) => return Err(GenError::Stopped),
                    Either::Left((None, _)) => break,
                    Either::Left((Some(Err(e)), _)) => return Err(GenError::Failed(e.to_string())),
                    Either::Left((Some(Ok(ModelChunk::Finished(s))), _)) => gen_stats = Some(s),
                    // Text after the close: this backend ignores `stop_after`; dropping the
                    // stream stops it.
                    Either::Left((Some(Ok(ModelChunk::Text(_))), _)) if closed => break,
                    Either::Left((Some(Ok(ModelChunk::Text(t))), _)) => {
                        let from = raw.len();
                        raw.push_str(&t);
                        if let Some(end) = request.stop_end(&raw, from) {
                            raw.truncate(end);
                            closed = true;
                        }
                        for ev in parser.push(&raw[from..]) {
                            forward(&ev, on_event);
                            events.push(ev);
                        }
                    }
                }
            }
        }
        if cancel.is_cancelled() {
            return Err(GenError::Stopped);
        }
        for ev in parser.finish() {
            forward(&ev, on_event);
            events.push(ev);
        }
        let completion_tokens = gen_stats.as_ref().map_or_else(|| self.counter.count(&raw), |s| s.completion_tokens);
        let tokens_per_second =
            gen_stats.as_ref().filter(|s| s.decode_ms > 0.0).map(|s| s.completion_tokens as f64 * 1000.0 / s.decode_ms);
        // The engine's own count of what it computed, where it reports one.
        let prefill_tokens =
            gen_stats.as_ref().map_or(stats.prefill_tokens, |s| s.prompt_tokens.saturating_sub(s.cached_prompt_tokens));
        on_event(AgentEvent::Usage {
            prompt_tokens: stats.prompt_tokens,
            prefill_tokens,
            completion_tokens,
            tokens_per_second,
        });
        Ok(ParsedOutput::collect(&events))
    }

    /// Records a model turn. Returns an outcome when the turn ends the run.
    fn absorb(&mut self, output: ParsedOutput, on_event: &mut dyn FnMut(AgentEvent)) -> Option<Outcome> {
        if output.calls.is_empty() && output.malformed.is_empty() {
            if output.content.is_empty() {
                return Some(self.fail(TaskError::EmptyAnswer, on_event));
            }
            // A direct answer: the deliverable is the text itself (kept for the next prompt with
            // its media markers defused: a marker there would stand for a picture that is not).
            let mut msg = Message::assistant(defuse_media_markers(&output.content).into_owned());
            msg.reasoning_content = output.thinking;
            self.entries.push(Entry { message: msg, kind: EntryKind::Model });
            self.finished = true;
            self.bad_turns = 0;
            on_event(AgentEvent::Done { result: output.content.clone(), success: true });
            return Some(Outcome::Done { result: output.content, success: true });
        }
        let mut calls = Vec::new();
        for c in output.calls {
            let mut arguments = c.arguments;
            let invalid = if self.config.mode(&c.name) == ToolMode::Off {
                Some(format!("The user has switched `{}` off in Hearth's settings: do the task without it.", c.name))
            } else {
                let tools: Vec<ToolDefinition> = self.all_tools().cloned().collect();
                validate_arguments(&tools, &c.name, &mut arguments)
                    .err()
                    .map(|e| format!("{e}. Correct the call and try again."))
            };
            calls.push(self.pending_call(c.name, arguments, invalid));
        }
        for m in output.malformed {
            let raw: String = m.raw.chars().take(200).collect();
            let invalid = format!(
                "Your tool call could not be read: {}. You wrote: {}. Write calls as call:NAME{{key:value,…}} with each text value between string delimiters.",
                m.error, raw
            );
            calls.push(self.pending_call(m.name.unwrap_or_else(|| "invalid_call".into()), Map::new(), Some(invalid)));
        }
        if let Some(problem) = calls.iter().find_map(|c| c.invalid.clone()) {
            if self.bad_turns >= 1 {
                // One self-correction was allowed; drop this output so a retry starts clean.
                self.bad_turns = 0;
                return Some(self.fail(TaskError::InvalidCallTwice { problem }, on_event));
            }
            self.bad_turns += 1;
        } else {
            self.bad_turns = 0;
        }
        let tool_calls = calls
            .iter()
            .map(|c| ToolCall::new(c.id.clone(), c.name.clone(), defuse_arguments(c.arguments.clone())))
            .collect();
        // Text written before the calls was already streamed to the user. It is not kept:
        // Gemma's template renders it after the tool responses and then closes the model turn,
        // which would rewrite the prompt (and the KV cache) at every step.
        let mut msg = Message::assistant_calls(None, tool_calls);
        msg.reasoning_content = output.thinking;
        self.entries.push(Entry { message: msg, kind: EntryKind::Model });
        self.pending.extend(calls);
        None
    }

    fn pending_call(&mut self, name: String, arguments: Map<String, Value>, invalid: Option<String>) -> PendingCall {
        self.next_call += 1;
        PendingCall {
            id: format!("call_{}", self.next_call),
            call: if invalid.is_none() { arguments::ToolCall::parse(&name, &arguments).ok() } else { None },
            name,
            arguments,
            invalid,
            repetition_checked: false,
            assessment: None,
            approved: Vec::new(),
            target: None,
            scope: GrantScope::default(),
            decision: None,
            answer: None,
            awaiting: false,
            located: None,
        }
    }

    /// Runs the calls of the last model turn, in order: each passes the [gate](Self::gate), then
    /// runs. Returns an outcome when one of them needs the user or ends the run.
    async fn process_pending<T: ToolExecutor>(
        &mut self,
        executor: &mut T,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(AgentEvent),
    ) -> Option<Outcome> {
        while let Some(gate) = self.gate(cancel) {
            match gate {
                Gate::Closed(result) => self.finish_call(result, false, on_event),
                Gate::Finish { result, success } => {
                    self.finish_call(Ok("Task finished.".into()), false, on_event);
                    self.abandon_pending("Not run: the task was already finished.");
                    self.finished = true;
                    on_event(AgentEvent::Done { result: result.clone(), success });
                    return Some(Outcome::Done { result, success });
                }
                Gate::Wait { outcome, announce } => {
                    if let Some(event) = announce {
                        on_event(event);
                    }
                    return Some(outcome);
                }
                Gate::Locate(probe) => match executor.locate(&probe).await {
                    Ok(located) => {
                        if let Some(call) = self.pending.front_mut() {
                            call.located = Some(located);
                        }
                    }
                    Err(e) => {
                        let message = self.fenced_failure(&e.0);
                        self.finish_call(Err(message), false, on_event);
                    }
                },
                Gate::Run { invocation, changes_state } => {
                    if let Some(outcome) = self.run_call(executor, invocation, changes_state, cancel, on_event).await {
                        return Some(outcome);
                    }
                }
            }
        }
        None
    }

    /// Decides what happens to the front call: closed without running (invalid, refused,
    /// denied, answered), the end of the task, a wait for the user (a question, a card, a
    /// repetition), a look under `click_at`'s point first, or a run with what the user allowed.
    /// `None` when no call is waiting.
    fn gate(&mut self, cancel: &CancelToken) -> Option<Gate> {
        let call = self.pending.front_mut()?;
        if let Some(problem) = call.invalid.clone() {
            return Some(Gate::Closed(Err(problem)));
        }
        match &call.call {
            Some(arguments::ToolCall::Done(DoneArgs { result, success })) => {
                return Some(Gate::Finish { result: result.clone(), success: success.unwrap_or(true) });
            }
            Some(arguments::ToolCall::AskUser(AskUserArgs { question, options })) => {
                if let Some(answer) = call.answer.take() {
                    return Some(Gate::Closed(Ok(answer)));
                }
                let call_id = call.id.clone();
                let announce = (!call.awaiting).then(|| AgentEvent::AskUser {
                    call_id: call_id.clone(),
                    question: question.clone(),
                    options: options.clone(),
                });
                call.awaiting = true;
                return Some(Gate::Wait { outcome: Outcome::NeedsAnswer { call_id }, announce });
            }
            _ => {}
        }
        // Read-only loops are bounded by max_iterations; the guard is for actions that change
        // something (clicking "Pay" again and again).
        let changes_state =
            self.tools.iter().chain(&self.page_tool_defs).any(|t| t.name == call.name && t.risk > RiskLevel::Low);
        if !call.repetition_checked && changes_state {
            call.repetition_checked = true;
            if self.repetition.would_repeat(&call.name, &call.arguments, self.clock.now_ms()) {
                let reason = PauseReason::Repetition { name: call.name.clone(), times: self.repetition.max_repeats };
                return Some(Gate::Wait {
                    announce: Some(AgentEvent::Paused { reason: reason.clone() }),
                    outcome: Outcome::Paused { reason },
                });
            }
        }
        // click_at is judged on what lies under its point, which only the page knows: asked
        // first, then judged like a click on it.
        if matches!(call.call, Some(arguments::ToolCall::ClickAt(_))) && call.located.is_none() {
            let page_url = self.page.as_ref().map(|p| p.url.clone());
            if self.screenshot_of.is_none() || self.screenshot_of != page_url {
                return Some(Gate::Closed(Err(
                    "click_at aims at the latest screenshot of this page, and there is none: take a screenshot first."
                        .into(),
                )));
            }
            return Some(Gate::Locate(ToolInvocation {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                judged_url: page_url,
                approved: Vec::new(),
                in_tab: self.tabs.acting(),
                cancel: cancel.clone(),
            }));
        }
        if call.decision.is_none() {
            let Some(tool) = self.tools.iter().chain(&self.page_tool_defs).find(|t| t.name == call.name) else {
                // Validation rejects unknown tools; this only guards against a changed tool list.
                return Some(Gate::Closed(Err(format!("unknown tool `{}`", call.name))));
            };
            let typed = call.call.as_ref();
            let element = match &call.located {
                Some(located) => located.element.as_ref(),
                None => typed
                    .and_then(arguments::ToolCall::element_index)
                    .and_then(|i| self.latest_snapshot.as_ref()?.element(i)),
            };
            let page_tool = self.page_tools.iter().find(|p| p.model_name() == call.name);
            let mut assessment = match (page_tool, typed, &call.located) {
                (Some(info), _, _) => assess_page_tool(info, self.page.as_ref()),
                (None, Some(typed @ (arguments::ToolCall::ReadTab(_) | arguments::ToolCall::SwitchTab(_))), None) => {
                    assess_tab(tool, typed, &self.tabs, self.page.as_ref())
                }
                (None, Some(typed), Some(located)) => assess_point(tool, typed, located, self.page.as_ref()),
                (None, Some(typed), None) => assess(tool, typed, element, self.page.as_ref()),
                // What does not fit the tool's argument type is never judged, so never run.
                (None, None, _) => {
                    return Some(Gate::Closed(Err(
                        "The arguments do not fit this tool; call it again as its declaration says.".into(),
                    )));
                }
            };
            if self.config.mode(&call.name) == ToolMode::Ask && assessment.refusal.is_none() {
                assessment.reasons.push(RiskReason::UserAsksEveryTime);
            }
            if let Some(refusal) = assessment.refusal.clone() {
                return Some(Gate::Closed(Err(refusal)));
            }
            let scope = GrantScope {
                site: site_of_page(self.page.as_ref()).unwrap_or_default(),
                script: match typed {
                    Some(arguments::ToolCall::RunJavascript(RunJavascriptArgs { code })) => Some(code.clone()),
                    _ => None,
                },
            };
            let target = typed.and_then(|t| describe_target(t, element, self.page.as_ref())).map(Box::new);
            call.target = target;
            if assessment.needs_confirmation() && !self.grants.covers(&call.name, &assessment, &scope) {
                let call_id = call.id.clone();
                let announce = (!call.awaiting).then(|| AgentEvent::ConfirmRequest {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    risk: assessment.risk,
                    reasons: assessment.reasons.clone(),
                    target: call.target.clone(),
                });
                if !call.awaiting {
                    call.awaiting = true;
                    call.assessment = Some(assessment);
                    call.scope = scope;
                }
                return Some(Gate::Wait { outcome: Outcome::NeedsConfirmation { call_id }, announce });
            }
            // Run without a card: nothing to ask, or a grant of this task covers every reason.
            call.approved = assessment.reasons;
        } else if call.decision != Some(Decision::Deny) {
            call.approved = call.assessment.as_ref().map(|a| a.reasons.clone()).unwrap_or_default();
        }
        if call.decision == Some(Decision::Deny) {
            return Some(Gate::Closed(Err(
                "The user denied this action. Do not try it again; choose another way or ask the user.".into(),
            )));
        }
        Some(Gate::Run {
            invocation: ToolInvocation {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                judged_url: self.page.as_ref().map(|p| p.url.clone()),
                approved: call.approved.clone(),
                in_tab: self.tabs.acting(),
                cancel: cancel.clone(),
            },
            changes_state,
        })
    }

    /// Runs the front call, which passed the gate, and records its result. Returns an outcome
    /// when the user stopped the task while it ran.
    async fn run_call<T: ToolExecutor>(
        &mut self,
        executor: &mut T,
        invocation: ToolInvocation,
        changes_state: bool,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(AgentEvent),
    ) -> Option<Outcome> {
        let call = self.pending.front()?;
        let target = action_target(call);
        on_event(AgentEvent::ToolStart {
            call_id: invocation.call_id.clone(),
            name: invocation.name.clone(),
            arguments: invocation.arguments.clone(),
            target: call.target.clone(),
        });
        let result = {
            let run = pin!(executor.execute(&invocation));
            match select(run, pin!(cancel.cancelled())).await {
                Either::Left((r, _)) => Some(r),
                Either::Right(_) => None,
            }
        };
        match result {
            None => {
                self.finish_call(Err("Stopped by the user before this action finished.".into()), false, on_event);
                self.abandon_pending("Not run: the user stopped the task.");
                return Some(self.stopped(on_event));
            }
            Some(Ok(output)) => {
                let changed_nothing = output.changed == Some(false);
                self.breaker.record(&invocation.name, &target, changed_nothing);
                if changes_state && !changed_nothing {
                    self.repetition.record(&invocation.name, &invocation.arguments, self.clock.now_ms());
                }
                let (text, page, sources, image) = self.format_output(&invocation.name, output);
                self.finish_call_with_image(Ok(text), page, image, on_event);
                if let Some(sources) = sources {
                    on_event(sources);
                }
            }
            Some(Err(e)) => {
                self.breaker.record(&invocation.name, &target, true);
                let message = self.fenced_failure(&e.0);
                self.finish_call(Err(message), false, on_event);
            }
        }
        None
    }

    /// Turns a tool's output into the text the model sees: snapshots rendered with marks, page
    /// content fenced, everything within the per-result budget.
    fn format_output(
        &mut self,
        tool: &str,
        mut output: ToolOutput,
    ) -> (String, bool, Option<AgentEvent>, Option<ToolImage>) {
        // The tab a tab tool concerns, as the worker reports it: one the task opened is the
        // task's; the one switched to is where the page tools act now (its elements are new).
        match (tool, output.tab.take()) {
            (OPEN_TAB, Some(tab)) => self.tabs.opened(tab.tab, PageInfo { url: tab.url, title: tab.title }),
            (SWITCH_TAB, Some(tab)) => {
                self.tabs.switch_to(tab.tab);
                self.latest_snapshot = None;
            }
            _ => {}
        }
        if let Some(p) = &output.page {
            let before = site_of_page(self.page.as_ref());
            // The page's tools belong to its document: another page has its own (or none).
            if self.page.as_ref().is_none_or(|old| old.url != p.url) && output.page_tools.is_none() {
                self.set_page_tools(Vec::new(), &p.url);
            }
            self.page = Some(p.clone());
            // "Allow for this task" was given on a site: it never outlives leaving it.
            if before != site_of_page(self.page.as_ref()) {
                self.grants.clear();
            }
        }
        if let Some(tools) = output.page_tools.take() {
            let url = output.page.as_ref().or(self.page.as_ref()).map(|p| p.url.clone()).unwrap_or_default();
            self.set_page_tools(tools, &url);
        }
        if is_page_tool(tool) && output.text.chars().count() > MAX_RESULT_CHARS {
            output.text = output.text.chars().take(MAX_RESULT_CHARS).collect::<String>() + " …(cut)";
        }
        let max = self.config.budget.max_tool_result_tokens;
        if let Some(snapshot) = output.snapshot {
            let previous = self.latest_snapshot.as_ref().map(Snapshot::indices);
            let mut body = format!("Page: {} — {}\n", snapshot.page.title, snapshot.page.url);
            body.push_str(&snapshot.render(previous.as_ref()));
            let body = truncate_head_tail(&body, max, self.counter.as_ref());
            let text = self.neutralizer.fence(&snapshot.page.url, &body);
            self.latest_snapshot = Some(snapshot);
            return (text, true, None, None);
        }
        // Passages are numbered on from the conversation's last: the model cites them as [n].
        let sources = output.passages.take().map(|p| {
            let passages: Vec<Source> = p
                .items
                .into_iter()
                .map(|text| {
                    self.next_passage += 1;
                    Source { number: self.next_passage, text }
                })
                .collect();
            for s in &passages {
                output.text.push_str(&format!("\n[{}] {}", s.number, s.text));
            }
            AgentEvent::Sources { url: p.url, title: p.title, passages }
        });
        let body = truncate_head_tail(&output.text, max, self.counter.as_ref());
        // Every result that comes back over the bus is the page's words or quotes them (an
        // action's result names its element by the page's label, a navigation the page's title):
        // all of it is fenced, not only what the executor marks `from_page`.
        let source = output.page.as_ref().or(self.page.as_ref()).map_or("the page", |p| p.url.as_str()).to_owned();
        if output.image.is_some() {
            self.screenshot_of = self.page.as_ref().map(|p| p.url.clone());
        }
        (
            self.neutralizer.fence(&source, &body),
            tool == READ_PAGE || tool == READ_LINK || tool == READ_TAB,
            sources,
            output.image.map(|i| *i),
        )
    }

    /// A tool's failure as the model sees it: the executor's message quotes the page too.
    fn fenced_failure(&self, message: &str) -> String {
        let source = self.page.as_ref().map_or("the page", |p| p.url.as_str());
        self.neutralizer.fence(source, message)
    }

    /// Records the front call's result and removes it from the queue.
    fn finish_call(&mut self, result: Result<String, String>, page: bool, on_event: &mut dyn FnMut(AgentEvent)) {
        self.finish_call_with_image(result, page, None, on_event);
    }

    /// [`Self::finish_call`] for a result that shows the model a picture: the tool's answer is
    /// its text, then the image (Gemma 4's template writes the image's placeholder after the
    /// response).
    fn finish_call_with_image(
        &mut self,
        result: Result<String, String>,
        page: bool,
        image: Option<ToolImage>,
        on_event: &mut dyn FnMut(AgentEvent),
    ) {
        let Some(call) = self.pending.pop_front() else { return };
        let (ok, text) = match result {
            Ok(t) => (true, t),
            Err(e) => (false, format!("Error: {}", self.neutralizer.neutralize(&e))),
        };
        on_event(AgentEvent::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            ok,
            output: text.clone(),
            thumbnail: image.as_ref().map(|i| i.thumbnail.clone()).filter(|t| !t.is_empty()),
        });
        let content = match image {
            Some(image) => {
                self.images.insert(call.id.clone(), Arc::new(image));
                let mut key = Map::new();
                key.insert("image".into(), Value::String(call.id.clone()));
                MessageContent::Parts(vec![
                    ContentPart::Text { text, extra: Map::new() },
                    ContentPart::Image { extra: key },
                ])
            }
            None => MessageContent::Text(text),
        };
        self.entries.push(Entry {
            message: Message::tool(call.id, call.name.clone(), content),
            kind: EntryKind::ToolResult { tool: call.name, page, compacted: false },
        });
    }

    /// Answers every queued call with `reason` so the history stays well formed.
    fn abandon_pending(&mut self, reason: &str) {
        while let Some(call) = self.pending.pop_front() {
            self.entries.push(Entry {
                message: Message::tool(call.id, call.name.clone(), MessageContent::Text(format!("Error: {reason}"))),
                kind: EntryKind::ToolResult { tool: call.name, page: false, compacted: false },
            });
        }
    }

    /// Snapshot indices known to the agent (for the UI's highlights).
    pub fn latest_snapshot_indices(&self) -> BTreeSet<u32> {
        self.latest_snapshot.as_ref().map(Snapshot::indices).unwrap_or_default()
    }
}

/// The site of the page a task is on (scheme, registrable domain, the port for local hosts).
fn site_of_page(page: Option<&PageInfo>) -> Option<String> {
    page.and_then(|p| web_url(&p.url, None)).and_then(|u| site_of_url(&u))
}

/// A call's arguments as the next prompt writes them: media markers in its strings defused.
fn defuse_arguments(mut arguments: Map<String, Value>) -> Map<String, Value> {
    fn defuse(value: &mut Value) {
        match value {
            Value::String(s) => {
                if let std::borrow::Cow::Owned(fixed) = defuse_media_markers(s) {
                    *s = fixed;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(defuse),
            Value::Object(map) => map.values_mut().for_each(defuse),
            _ => {}
        }
    }
    arguments.values_mut().for_each(defuse);
    arguments
}

fn forward(event: &ParseEvent, on_event: &mut dyn FnMut(AgentEvent)) {
    match event {
        ParseEvent::Content(t) => on_event(AgentEvent::Token { text: t.clone() }),
        ParseEvent::Thinking(t) => on_event(AgentEvent::Thinking { text: t.clone() }),
        _ => {}
    }
}
