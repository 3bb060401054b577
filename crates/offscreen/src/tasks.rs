//! Agent tasks: one conversation per tab, driven by the Rust agent loop (crates/agent) with the
//! loaded Burn model as its backend. Tool calls go to the service worker through the host's
//! `runTool` (which runs them itself or in the tab) and come back as a `ToolReply`.
//!
//! A conversation's `Agent` is taken out of the table while its loop runs (no borrow is held
//! across an await); stop and steering reach it through its `AgentControl` meanwhile.

use std::cell::RefCell;
use std::collections::HashMap;
use std::pin::pin;
use std::rc::Rc;

use futures::StreamExt;
use futures::future::{Either, select};
use hearth_agent::backend::LOCATE_POINT;
use hearth_agent::{
    Agent, AgentControl, Clock, Entry, GenerationRequest, ModelBackend, ModelChunk, ModelError, PointTarget,
    RequestTabs, ToolError, ToolExecutor, ToolInvocation, ToolOutput, UserRequest,
};
use hearth_engine::task::apply_settings;
use hearth_engine::{Engine, SharedModel, TaskModel, new_agent, tab_conversation};
use hearth_protocol::{Outcome, PageInfo, TaskAction, TaskRefusal, TaskSettings, TaskUpdate, ToolReply, ToolRequest};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::engine_state;

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
    /// The scripted test model, while a test has set a script; tasks use the Burn model
    /// otherwise.
    #[cfg(feature = "scripted")]
    script: Option<std::rc::Rc<RefCell<hearth_agent::scripted::ScriptedModel>>>,
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

fn refused(tab_id: u32, refusal: TaskRefusal) {
    emit(tab_id, &TaskUpdate::Refused { refusal });
}

/// What the user asked: typed, with the page's words they selected, or spoken (`voice`: 16 kHz
/// mono samples, the typed text beside them), on the page the tab shows, with the tabs that go
/// with it (those the user attached, read by the worker, and the other open ones).
pub struct Request {
    pub text: String,
    pub selection: Option<String>,
    pub page: Option<PageInfo>,
    pub voice: Option<Vec<f32>>,
    pub tabs: RequestTabs,
}

/// Starts a task in the tab's conversation; while one runs there, the text steers it instead (a
/// selection or a clip is not sent to a running task: the views offer them only to a new one).
/// `history` (from `TaskUpdate::History`) restores a conversation this engine does not hold.
pub async fn start_task(tab_id: u32, request: Request, settings: TaskSettings, history: Option<serde_json::Value>) {
    let Request { text, selection, page, voice, tabs } = request;
    let Some(engine) = engine_state::engine() else {
        return refused(tab_id, TaskRefusal::NoModel);
    };
    let started = TASKS.with(|t| {
        let mut tasks = t.borrow_mut();
        let conversation = tasks.conversations.entry(tab_id).or_insert_with(|| {
            let mut conversation = new_conversation(engine.model(), &settings);
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
        agent.start_request(UserRequest { text: text.clone(), selection, page, voice: voice.map(Into::into), tabs });
        conversation.settings = settings.clone();
        true
    });
    if started {
        run(tab_id, engine).await;
    }
}

/// The user acted on the tab's task.
pub async fn control(tab_id: u32, action: TaskAction) {
    enum Next {
        Run,
        Nothing,
        Refused(TaskRefusal),
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
            return Next::Refused(TaskRefusal::NoTask);
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
                agent.confirm(&call_id, decision).map_or(Next::Refused(TaskRefusal::NotWaiting), |()| Next::Run)
            }
            TaskAction::Answer { text } => {
                agent.answer(&text).map_or(Next::Refused(TaskRefusal::NotWaiting), |()| Next::Run)
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
        Next::Run => match engine_state::engine() {
            Some(engine) => run(tab_id, engine).await,
            None => refused(tab_id, TaskRefusal::ModelGone),
        },
        Next::Refused(refusal) => refused(tab_id, refusal),
        Next::Nothing => {}
    }
}

fn new_conversation(model: &SharedModel, settings: &TaskSettings) -> Conversation {
    let clock = Box::new(BrowserClock);
    let sees_images = model.vision.is_some();
    let agent = new_agent(&model.template, model.tokenizer.clone(), model.context_tokens, settings, sees_images, clock);
    Conversation { control: agent.control(), agent: Some(agent), settings: settings.clone() }
}

/// Runs the loop until it needs the user or ends, then reports the outcome.
async fn run(tab_id: u32, engine: Engine) {
    let taken = TASKS.with(|t| {
        let mut tasks = t.borrow_mut();
        let host = tasks.host.clone()?;
        let conversation = tasks.conversations.get_mut(&tab_id)?;
        Some((conversation.agent.take()?, conversation.settings.clone(), host))
    });
    let Some((mut agent, settings, host)) = taken else { return };
    let mut backend = TabModel::new(&engine, tab_conversation(tab_id), &settings);
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

struct BrowserClock;

impl Clock for BrowserClock {
    fn now_ms(&self) -> u64 {
        engine_state::now_ms() as u64
    }
}

/// The model behind a tab's task steps: the engine's (the loaded Burn model, or in test builds
/// the scripted one while a test has set a script).
struct TabModel(TaskModel);

impl TabModel {
    fn new(engine: &Engine, conversation: u64, settings: &TaskSettings) -> Self {
        #[cfg(feature = "scripted")]
        if let Some(script) = TASKS.with(|t| t.borrow().script.clone()) {
            return TabModel(TaskModel::Scripted(script));
        }
        TabModel(engine.task(conversation, settings, engine_state::now_ms() as u64))
    }
}

impl ModelBackend for TabModel {
    fn generate(&mut self, request: GenerationRequest) -> impl futures::Stream<Item = Result<ModelChunk, ModelError>> {
        #[cfg(feature = "scripted")]
        if let TaskModel::Scripted(_) = &self.0 {
            scripted::prepare_images(&request);
        }
        // Test builds can trap here, at the first piece of output: a crash in the middle of a task.
        self.0.step(request).inspect(|_| crate::trap::maybe_trap("generate"))
    }
}

/// Runs tools through the service worker, for one tab.
struct TabTools {
    tab_id: u32,
    host: Rc<TaskHost>,
}

impl ToolExecutor for TabTools {
    async fn locate(&mut self, call: &ToolInvocation) -> Result<PointTarget, ToolError> {
        let probe = ToolInvocation { name: LOCATE_POINT.to_owned(), ..call.clone() };
        let output = self.execute(&probe).await?;
        output
            .located
            .map(|l| *l)
            .ok_or_else(|| ToolError("The page did not say what is at that point; take a new screenshot.".into()))
    }

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
            in_tab: call.in_tab,
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
        Some(Ok(ToolReply::Ok { output })) => Ok(*output),
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

/// The scripted test model (the agent crate's, shared with its tests and `hearth agent`), set by
/// the end-to-end tests.
#[cfg(feature = "scripted")]
pub mod scripted {
    use std::cell::RefCell;
    use std::rc::Rc;

    use hearth_agent::scripted::ScriptedModel;

    use super::TASKS;

    /// Replaces the script (the next tasks use it until it runs out), or removes it; a new
    /// script starts a new list of prompts.
    pub fn load(script: Option<ScriptedModel>) {
        let script = script.map(|mut model| {
            // As the end-to-end suite has always had it streamed.
            model.chunk_chars = 7;
            Rc::new(RefCell::new(model))
        });
        TASKS.with(|t| t.borrow_mut().script = script);
    }

    /// The prompts received since the script was loaded.
    pub fn prompts() -> Vec<String> {
        TASKS.with(|t| t.borrow().script.as_ref().map(|s| s.borrow().prompts.clone()).unwrap_or_default())
    }

    /// What the engine made of a scripted step's prompt with images or a spoken request, as the
    /// model would take it.
    #[derive(Debug, Clone, serde::Serialize)]
    pub struct ImagePrompt {
        /// The prompt's tokens as the template rendered it (one placeholder per image).
        pub text_tokens: usize,
        /// After each image's placeholder became its soft tokens (and their two boundaries).
        pub model_tokens: usize,
        /// Each image's soft tokens, in prompt order.
        pub soft_tokens: Vec<usize>,
        /// Each voice clip's soft tokens, in prompt order.
        pub clip_tokens: Vec<usize>,
        /// Why the images could not be made ready, if they could not.
        pub error: Option<String>,
    }

    thread_local! {
        static IMAGE_PROMPTS: RefCell<Vec<ImagePrompt>> = const { RefCell::new(Vec::new()) };
    }

    /// The scripted model reads no pixels, but the end-to-end suite checks that the engine turns
    /// a step's screenshots into soft tokens: the same preparation as a Burn step (decode, the
    /// loaded model's tower at the task's budget, placeholders expanded), recorded here.
    pub fn prepare_images(request: &hearth_agent::GenerationRequest) {
        if request.images.is_empty() && request.clips.is_empty() {
            return;
        }
        let Some(engine) = crate::engine_state::engine() else { return };
        let model = engine.model();
        let budget = hearth_engine::task::image_budget(&hearth_protocol::TaskSettings::default());
        let text_tokens = model.tokenizer.encode(&request.prompt).map_or(0, |ids| ids.len());
        let prepared = hearth_engine::images::prepare_prompt(
            &model.tokenizer,
            model.towers(),
            &mut model.encoded.borrow_mut(),
            &request.prompt,
            &request.images,
            &request.clips,
            budget,
        );
        let record = match prepared {
            Ok(p) => ImagePrompt {
                text_tokens,
                model_tokens: p.ids.len(),
                soft_tokens: p.soft_tokens,
                clip_tokens: p.clip_tokens,
                error: None,
            },
            Err(e) => ImagePrompt {
                text_tokens,
                model_tokens: 0,
                soft_tokens: Vec::new(),
                clip_tokens: Vec::new(),
                error: Some(e.to_string()),
            },
        };
        IMAGE_PROMPTS.with(|p| p.borrow_mut().push(record));
    }

    /// Every scripted step's image preparation since the page loaded.
    pub fn image_prompts() -> Vec<ImagePrompt> {
        IMAGE_PROMPTS.with(|p| p.borrow().clone())
    }
}
