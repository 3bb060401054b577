//! The messages on `chrome.runtime`, one enum per sender and receiver.
//!
//! There is no envelope and no `to` field: a receiver never trusts what a message says about who
//! sent it. It classifies the browser's `MessageSender` (extension/src/shared/messages.ts
//! `senderRole`) and parses the message as the enum of that sender, dropping everything else:
//!
//! | sender → receiver              | enum               | sender check (by the receiver)                              |
//! |--------------------------------|--------------------|-------------------------------------------------------------|
//! | tab (content script) → worker  | [`TabToWorker`]    | our id, `sender.tab.id` set, top frame, not an extension page |
//! | offscreen document → worker    | [`EngineToWorker`] | `sender.url` is `offscreen.html`, no `sender.tab`            |
//! | options page → worker          | [`OptionsToWorker`]| `sender.url` is `options.html`                               |
//! | worker → offscreen document    | [`WorkerToEngine`] | `sender.url` is `service-worker.js`, no `sender.tab`         |
//! | worker → tab (content script)  | [`WorkerToTab`]    | our id, no `sender.tab`                                      |
//! | chat page → worker (its port)  | [`PanelToWorker`]  | our id, `sender.url` is `sidepanel.html`: no `sender.tab` (the side panel), or a tab's frame (the overlay, that tab only) |
//! | worker → chat page (the port)  | [`WorkerToPanel`]  | the port the page opened to the worker                       |
//!
//! A tab's messages carry no tab id: the worker takes it from `sender.tab.id`, so a content script
//! (or a compromised renderer speaking as one) can only act on its own tab. Every enum is tagged by
//! `kind` (`{"kind": "watch_chat"}`); `WorkerToEngine` keeps the shape the engine (crates/offscreen)
//! parses.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::{Decision, EngineStatus, PageInfo, TaskAction, TaskSettings, TaskUpdate, ToolRequest};
use hearth_agent::RequestTabs;

/// What a tab's content script (the overlay's host on the page) sends to the service worker. The
/// worker acts on the sender's own tab (`sender.tab.id`) only. The chat itself, with everything
/// the person asks, answers or decides, is Hearth's own page in the host's frame, which speaks
/// over its port (`PanelToWorker`): the page's process never speaks for the person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TabToWorker {
    /// The overlay is mounted on this page: the response is this tab's conversation, whole (a
    /// `ChatPatch`, extension/src/chat/patch.ts); its changes follow as `chat` messages. The page's
    /// side follows it to outline the element a card is about and to open the overlay at a card.
    WatchChat,
    /// The overlay opened or closed (`ChatInput::Shown`); the worker drops any other input from a tab.
    ChatInput { input: ChatInput },
    /// The response is this tab's view of the settings (`SettingsView`). Settings live where only
    /// Hearth's own pages can write them (storage restricted to trusted contexts): a content
    /// script reads them through the worker and never writes them.
    GetSettings,
}

/// What a tab's content script may know of the settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SettingsView {
    /// The user turned Hearth off on this tab's site.
    pub disabled: bool,
}

/// What Hearth's chat page (`sidepanel.html`) sends to the service worker over its port. In the side
/// panel it shows one tab at a time, the active tab of its window; framed in a tab, it is that
/// tab's overlay and shows that tab only. The worker acts only for the tab the port watches now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PanelToWorker {
    /// Show this tab's chat: the worker answers with `tab_state`, the engine's status and the
    /// tab's conversation, whole; its changes follow as `chat` messages.
    WatchTab { tab_id: u32 },
    /// The user acted in the panel on the chat of `tab_id`; dropped unless the port watches that
    /// tab, and done by the worker as the same input from the tab's overlay is.
    Input { tab_id: u32, input: ChatInput },
    /// The composer's tab chooser opened: the worker answers with `open_tabs`, the other web
    /// tabs that could go with a message to `tab_id`.
    ListTabs { tab_id: u32 },
}

/// An open tab the user may attach to a message: what the chooser shows of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TabChoice {
    pub tab_id: u32,
    pub title: String,
    /// Its origin (`https://mail.example`).
    pub site: String,
    /// Its icon from the browser's own favicon cache (an extension address: nothing is fetched
    /// from the site), when it has one.
    pub icon: Option<String>,
    /// Hearth is off on its site: it can be shown, not attached.
    pub disabled: bool,
}

/// Whether Hearth runs in the tab a side panel watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum PanelTabState {
    /// Its content script answered: its chat follows.
    Ready,
    /// The user turned Hearth off on this site: nothing runs there.
    Disabled,
    /// Not an http(s) page: Hearth never runs there.
    Unsupported,
    /// An http(s) page without Hearth's content script (it was open before Hearth was installed
    /// or enabled): a reload brings it.
    NoScript,
    /// The tab is gone.
    Gone,
}

/// What the service worker sends to a side panel over its port. `chat` and `engine_status` are
/// what a tab's overlay is sent too: the two are equal views of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkerToPanel {
    /// The answer to `watch_tab`; `site` is the tab's origin when it has one.
    TabState { tab_id: u32, state: PanelTabState, site: Option<String> },
    /// A change of the conversation of `tab_id` (a `ChatPatch`, extension/src/chat/patch.ts).
    Chat {
        tab_id: u32,
        #[ts(type = "unknown")]
        chat: serde_json::Value,
    },
    /// The engine's current state.
    EngineStatus { status: EngineStatus },
    /// The answer to `list_tabs`: the other web tabs, the most recently used first.
    OpenTabs { tab_id: u32, tabs: Vec<TabChoice> },
}

/// What the user did in a view of a tab's conversation (its overlay or a side panel showing it),
/// done by the service worker, which owns the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum ChatInput {
    /// The composer: a task, steering, or the answer to a question; `selection` is the text the
    /// user had selected on the page when they opened the overlay (the page's words, kept apart
    /// from what they typed).
    Submit {
        text: String,
        #[serde(default)]
        selection: Option<String>,
        /// Other tabs the user attached to a new task (their readable text goes with it, as those
        /// pages' words); none for steering or an answer.
        #[serde(default)]
        tabs: Vec<u32>,
    },
    Stop,
    /// A confirmation card's button: applied only to the card `entry_id` if it waits on `call_id`.
    Decide {
        entry_id: u32,
        call_id: String,
        decision: Decision,
    },
    /// An `ask_user` card's option: applied only to the question `entry_id` if it waits on `call_id`.
    Choose {
        entry_id: u32,
        call_id: String,
        option: String,
    },
    /// A fence card's button: applied only to a card still waiting, for a request the fence
    /// really blocked in this tab.
    Fence {
        entry_id: u32,
        allow: bool,
    },
    Continue,
    /// "Clear conversation".
    Clear,
    /// Retry a failed engine.
    Retry,
    /// Download this model (the one a `needs_model` status offers), or the loaded model's
    /// assistant (its `drafter_offer`).
    Install {
        model_id: String,
    },
    /// "Use a model file you already have": the options page, at its models section.
    OpenModelOptions,
    /// A citation chip: the passage shown on the tab's page, or another page's in a new tab.
    ShowSource {
        number: u32,
    },
    /// The overlay was opened or closed (kept with the conversation, so that the next page of the
    /// tab opens it again while a task runs).
    Shown {
        open: bool,
    },
    /// The microphone button (start, stop: the clip becomes the task; cancel: Esc), or a voice
    /// message's play button.
    Voice {
        voice: VoiceAction,
    },
}

/// What the user does with their voice. The offscreen document records (under the extension's
/// own origin, never the page's) and keeps the clips in memory only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum VoiceAction {
    Start,
    /// Stop recording: the clip goes to the model as the tab's next task.
    Stop,
    /// Stop recording and drop the clip.
    Cancel,
    /// Play a recorded clip back (in the offscreen document: the sound never reaches the page).
    Play {
        clip: u32,
    },
}

/// The microphone as the offscreen document reports it to the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum VoiceState {
    /// Recording: the seconds so far and the loudness of the last moment (0 to 1).
    Recording { seconds: f32, level: f32 },
    /// Stopped: the clip (16 kHz mono) is held in memory under `clip`; `capped` when it stopped
    /// itself at the longest clip the model hears.
    Recorded { clip: u32, seconds: f32, capped: bool },
    /// Stopped and dropped.
    Cancelled,
    /// Hearth was never allowed the microphone: it must be asked for on a page of Hearth's own
    /// (the offscreen document cannot ask).
    NeedsPermission,
    /// The user (or a policy) blocked the microphone for Hearth.
    Denied { detail: String },
    /// No microphone, or it could not be opened.
    Failed { detail: String },
}

/// What the offscreen document (the engine) sends to the service worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EngineToWorker {
    /// Its script is loaded and listening.
    OffscreenReady,
    /// The engine's state changed.
    EngineStatus { status: EngineStatus },
    /// Progress of a tab's task.
    TaskUpdate { tab_id: u32, update: TaskUpdate },
    /// Run a tool; the message's response is a `ToolReply`.
    RunTool { request: ToolRequest },
    /// The microphone of the tab's recording.
    Voice { tab_id: u32, state: VoiceState },
}

/// What the options page sends to the service worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OptionsToWorker {
    /// A model was installed from a folder; start the engine again if it was waiting for one.
    ModelInstalled { model_id: String },
}

/// Requests the service worker sends to the offscreen document (the engine).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkerToEngine {
    /// Initialise the GPU, check it with a computation whose answer is known, load the model:
    /// `model_id` is a manifest id from the settings, or `None` for the build's default (the
    /// bundled test model in test builds). The response is the resulting `EngineStatus`, which is
    /// `needs_model` when the model is not installed.
    /// `voice`: load the model's audio tower too (the user turned voice input on).
    StartEngine {
        model_id: Option<String>,
        #[serde(default)]
        voice: bool,
    },
    /// Download, verify and store a model, then load it; `installing` statuses stream meanwhile
    /// and the response is the final `EngineStatus`.
    InstallModel { model_id: String },
    /// Download, verify and store the assistant of `model_id`, then load the model again with it;
    /// the response is the final `EngineStatus`.
    InstallDrafter { model_id: String },
    /// Download, verify and store the vision tower of `model_id` (its projector file), then load
    /// the model again with it; the response is the final `EngineStatus`.
    InstallProjector { model_id: String },
    /// Start a task in the tab's conversation (created on first use).
    StartTask {
        tab_id: u32,
        text: String,
        /// Text the user selected on the page (the page's words, fenced as such).
        #[serde(default)]
        selection: Option<String>,
        page: Option<PageInfo>,
        settings: TaskSettings,
        /// The tab's conversation as last reported (`TaskUpdate::History`), for an engine that no
        /// longer holds it (the offscreen document was recreated); ignored otherwise.
        #[serde(default)]
        #[ts(type = "unknown")]
        history: Option<serde_json::Value>,
        /// The spoken request: a clip the offscreen document recorded for this tab (`Recorded`).
        #[serde(default)]
        voice: Option<u32>,
        /// The task's tab, the tabs the user attached (read by the worker) and the other open ones.
        #[serde(default)]
        tabs: RequestTabs,
    },
    /// Record from the microphone for the tab, stop, cancel, or play a clip back; the state
    /// comes back as `EngineToWorker::Voice`.
    Voice { tab_id: u32, voice: VoiceAction },
    /// The user acted on the tab's task.
    TaskControl { tab_id: u32, action: TaskAction },
    /// The main text of a page the worker fetched for `read_link` (the offscreen document has a
    /// DOM to parse it in; the worker has none). The response is an `Article`.
    ReadArticle { html: String, url: String },
}

/// A page's main text, as a reader view shows it: the title and the passages in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Article {
    pub title: String,
    pub passages: Vec<String>,
}

/// What the service worker sends to a tab's content script (`chrome.tabs.sendMessage`, top frame).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkerToTab {
    /// A change of this tab's conversation (a `ChatPatch`, extension/src/chat/patch.ts).
    Chat {
        #[ts(type = "unknown")]
        chat: serde_json::Value,
    },
    /// Run a page tool (snapshot, click, type…); the message's response is a `ToolReply`.
    RunTool { request: ToolRequest },
    /// Abort the tools running in this tab (the user pressed stop).
    CancelTools,
    /// Hide Hearth's overlay while the tab is captured for a screenshot (the model sees the page,
    /// not Hearth), or show it again; answered once the page has painted.
    HideForCapture { hidden: bool },
    /// Open the overlay with the page's selection as context (the keyboard shortcut).
    OpenOverlay,
    /// A side panel shows this tab (`attached`), or no longer does: while one does, the overlay
    /// stays closed and its launcher hidden. The response is `true`.
    PanelAttached { attached: bool },
    /// A citation chip clicked in the side panel: scroll to passage `number` of the conversation
    /// on this page and outline it.
    ShowPassage { number: u32 },
    /// The settings changed (on Hearth's own pages): this tab's view of them.
    SettingsChanged { view: SettingsView },
}

/// JSON in and out, for every message enum.
pub trait BusMessage: Serialize + serde::de::DeserializeOwned {
    /// Parses a message received from JavaScript; `None` when it is not one of this enum's.
    fn from_json(json: &str) -> Option<Self> {
        serde_json::from_str(json).ok()
    }

    fn to_json(&self) -> String {
        // Serialising these plain enums cannot fail: no maps with non-string keys, no foreign types.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl BusMessage for TabToWorker {}
impl BusMessage for EngineToWorker {}
impl BusMessage for OptionsToWorker {}
impl BusMessage for WorkerToEngine {}
impl BusMessage for WorkerToTab {}
impl BusMessage for PanelToWorker {}
impl BusMessage for WorkerToPanel {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire<T: BusMessage>(msg: &T) -> serde_json::Value {
        serde_json::from_str(&msg.to_json()).unwrap()
    }

    #[test]
    fn tab_messages_are_tagged_by_kind_and_carry_no_tab() {
        assert_eq!(TabToWorker::from_json(r#"{"kind":"watch_engine"}"#), None);
        assert_eq!(TabToWorker::WatchChat.to_json(), r#"{"kind":"watch_chat"}"#);
        let submit = ChatInput::Submit { text: "hi".into(), selection: Some("quoted".into()), tabs: vec![4] };
        assert_eq!(
            wire(&TabToWorker::ChatInput { input: submit }),
            json!({"kind": "chat_input", "input": {"input": "submit", "text": "hi", "selection": "quoted", "tabs": [4]}})
        );
        assert_eq!(
            TabToWorker::from_json(r#"{"kind":"chat_input","input":{"input":"submit","text":"hi"}}"#),
            Some(TabToWorker::ChatInput {
                input: ChatInput::Submit { text: "hi".into(), selection: None, tabs: vec![] }
            })
        );
        // The old shapes, from the time the tab owned its conversation, are not messages any more.
        for old in [
            r#"{"kind":"start_task","text":"hi"}"#,
            r#"{"kind":"load_transcript"}"#,
            r#"{"kind":"panel_chat","chat":{}}"#,
        ] {
            assert_eq!(TabToWorker::from_json(old), None, "{old}");
        }
    }

    #[test]
    fn a_tab_cannot_name_another_tab() {
        // The tab id a forged message carries is not part of a tab's messages: serde drops it,
        // and the engine's messages (which carry one) are not tab messages at all.
        let forged = TabToWorker::from_json(r#"{"kind":"chat_input","tab_id":7,"input":{"input":"stop"}}"#);
        assert_eq!(forged, Some(TabToWorker::ChatInput { input: ChatInput::Stop }));
        assert_eq!(
            TabToWorker::from_json(r#"{"kind":"task_update","tab_id":7,"update":{"update":"history","history":""}}"#),
            None
        );
        assert_eq!(TabToWorker::from_json(r#"{"kind":"offscreen_ready"}"#), None);
        assert_eq!(TabToWorker::from_json(r#"{"kind":"model_installed","model_id":"m"}"#), None);
        let run_tool =
            r#"{"kind":"run_tool","request":{"request_id":1,"tab_id":7,"name":"run_javascript","arguments":{}}}"#;
        assert_eq!(TabToWorker::from_json(run_tool), None);
    }

    #[test]
    fn engine_messages_keep_their_shapes() {
        assert_eq!(EngineToWorker::OffscreenReady.to_json(), r#"{"kind":"offscreen_ready"}"#);
        assert_eq!(
            wire(&EngineToWorker::EngineStatus { status: EngineStatus::Starting }),
            json!({"kind": "engine_status", "status": {"state": "starting"}})
        );
        assert_eq!(
            EngineToWorker::from_json(
                r#"{"kind":"task_update","tab_id":3,"update":{"update":"history","history":[{"role":"user"}]}}"#
            ),
            Some(EngineToWorker::TaskUpdate {
                tab_id: 3,
                update: TaskUpdate::History { history: json!([{"role": "user"}]) }
            })
        );
        assert_eq!(EngineToWorker::from_json(r#"{"kind":"watch_engine"}"#), None);
    }

    #[test]
    fn options_messages() {
        let msg = OptionsToWorker::ModelInstalled { model_id: "gemma".into() };
        assert_eq!(msg.to_json(), r#"{"kind":"model_installed","model_id":"gemma"}"#);
        assert_eq!(OptionsToWorker::from_json(r#"{"kind":"start_task","text":"x","page":null}"#), None);
    }

    #[test]
    fn panel_messages_name_their_tab_and_tab_messages_do_not() {
        let input = ChatInput::Decide { entry_id: 4, call_id: "c1".into(), decision: Decision::Deny };
        assert_eq!(
            wire(&PanelToWorker::Input { tab_id: 7, input: input.clone() }),
            json!({"kind": "input", "tab_id": 7, "input": {"input": "decide", "entry_id": 4, "call_id": "c1", "decision": "deny"}})
        );
        assert_eq!(
            PanelToWorker::from_json(r#"{"kind":"watch_tab","tab_id":3}"#),
            Some(PanelToWorker::WatchTab { tab_id: 3 })
        );
        // A tab's input is the panel's, naming no tab: it acts on its own.
        assert_eq!(
            wire(&TabToWorker::ChatInput { input }),
            json!({"kind": "chat_input", "input": {"input": "decide", "entry_id": 4, "call_id": "c1", "decision": "deny"}})
        );
        assert_eq!(
            wire(&WorkerToPanel::TabState { tab_id: 3, state: PanelTabState::Disabled, site: None }),
            json!({"kind": "tab_state", "tab_id": 3, "state": "disabled", "site": null})
        );
        // A panel's messages are not a tab's, nor the other way round.
        assert_eq!(TabToWorker::from_json(r#"{"kind":"watch_tab","tab_id":3}"#), None);
        assert_eq!(PanelToWorker::from_json(r#"{"kind":"start_task","text":"x"}"#), None);
    }

    #[test]
    fn engine_requests_keep_the_wire_format_the_engine_parses() {
        assert_eq!(
            WorkerToEngine::StartEngine { model_id: None, voice: false }.to_json(),
            r#"{"kind":"start_engine","model_id":null,"voice":false}"#
        );
        assert_eq!(
            wire(&WorkerToEngine::Voice { tab_id: 2, voice: VoiceAction::Play { clip: 7 } }),
            json!({"kind": "voice", "tab_id": 2, "voice": {"action": "play", "clip": 7}})
        );
        assert_eq!(
            wire(&WorkerToEngine::TaskControl { tab_id: 4, action: TaskAction::Forget }),
            json!({"kind": "task_control", "tab_id": 4, "action": {"action": "forget"}})
        );
        // `history` may be left out.
        let settings = serde_json::to_value(TaskSettings::default()).unwrap();
        let start =
            json!({"kind": "start_task", "tab_id": 4, "text": "go", "page": null, "settings": settings}).to_string();
        match WorkerToEngine::from_json(&start) {
            Some(WorkerToEngine::StartTask { tab_id: 4, history: None, voice: None, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tab_pushes() {
        assert_eq!(WorkerToTab::CancelTools.to_json(), r#"{"kind":"cancel_tools"}"#);
        assert_eq!(WorkerToTab::OpenOverlay.to_json(), r#"{"kind":"open_overlay"}"#);
        assert_eq!(WorkerToTab::ShowPassage { number: 2 }.to_json(), r#"{"kind":"show_passage","number":2}"#);
        assert_eq!(WorkerToTab::from_json(r#"{"kind":"engine_status","status":{"state":"idle"}}"#), None);
    }

    #[test]
    fn the_old_envelope_and_foreign_messages_are_not_messages() {
        let old = r#"{"to":"offscreen","msg":{"kind":"task_control","tab_id":7,"action":{"action":"forget"}}}"#;
        assert_eq!(WorkerToEngine::from_json(old), None);
        assert_eq!(TabToWorker::from_json(r#"{"to":"worker","msg":{"kind":"watch_engine"}}"#), None);
        assert_eq!(WorkerToTab::from_json(r#"{"type":"something-else"}"#), None);
        assert_eq!(EngineToWorker::from_json("not json"), None);
    }
}
