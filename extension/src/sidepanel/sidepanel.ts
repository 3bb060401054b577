// The side panel (sidepanel.html, manifest `side_panel`): the chat component of the overlay
// (content/ui/chat.ts), mounted in this extension page and showing the conversation of its
// window's active tab. It follows tab switches (tabs.onActivated) and page loads (tabs.onUpdated).
//
// The conversation stays the tab's: its content script owns it, as in overlay mode. Over a port
// to the worker this page says which tab it shows (`watch_tab`); the worker tells that tab's
// content script, which sends its chat (`panel_chat`), relayed here as `chat`. What the user does
// here goes back as `input` naming the tab; the worker passes it on only for the tab this port
// watches, and the content script does it with its overlay's handlers (a decision only for the
// card it was shown for). The element a confirmation is about is outlined on the page by the
// content script, as in overlay mode. A site the user turned Hearth off on gets nothing: the
// panel says so.

import type { ChatInput, EngineStatus, PanelToWorker, WorkerToPanel } from "../generated/protocol";
import { createChat } from "../content/ui/chat";
import { changedEntries, revivePanelChat } from "../content/ui/chat-state";
import type { Listen } from "../content/ui/composer";
import { OVERLAY_CSS } from "../content/overlay-style";
import { emptyTranscript, sourceOf, type Transcript } from "../content/ui/transcript";
import { isMessage } from "../shared/messages";
import { watchOwnModels, type OwnModel } from "../shared/own-models";
import { saveSettings, loadSettings } from "../shared/settings";
import { el } from "../shared/ui/builders";
import { t } from "../shared/ui/i18n";

/** The port's name the worker accepts from this page only (by its sender). */
const PORT_NAME = "hearth-panel";

document.documentElement.lang = chrome.i18n.getUILanguage();
document.title = t("panelTitle");

const mirror = __HEARTH_TEST_BUILD__ ? el("div", { class: "test-state", hidden: true, "aria-hidden": "true" }) : null;
const data: DOMStringMap = mirror ? mirror.dataset : {};
if (mirror) document.body.append(mirror);

// The same stylesheet as the overlay's, in a shadow root of this page's own.
const host = el("div", { class: "hearth-side-panel" });
const shadow = host.attachShadow({ mode: "open" });
const sheet = new CSSStyleSheet();
sheet.replaceSync(OVERLAY_CSS);
shadow.adoptedStyleSheets = [sheet];
document.body.append(host);

/** The tab shown, its chat as its content script last sent it. */
let tabId: number | null = null;
let transcript: Transcript = emptyTranscript();
let status: EngineStatus = { state: "idle" };
let site = "";
let ownModels: OwnModel[] = [];

let port: chrome.runtime.Port | null = null;
/**
 * Sends `msg` to the worker over the panel's port, opened again when Chrome stopped the worker
 * (it may at any time): a new port first says which tab it shows, since a worker started afresh
 * knows no panel, and passes on nothing for a tab the port does not watch.
 */
function post(msg: PanelToWorker, retried = false): void {
  if (!port) {
    const opened = chrome.runtime.connect({ name: PORT_NAME });
    port = opened;
    opened.onMessage.addListener((m: unknown) => isMessage(m) && onWorkerMessage(m as WorkerToPanel));
    // The worker went away: connect again at once, so that the tab's chat keeps coming.
    opened.onDisconnect.addListener(() => {
      if (port !== opened) return;
      port = null;
      if (tabId !== null) setTimeout(() => port === null && tabId !== null && post({ kind: "watch_tab", tab_id: tabId }), 100);
    });
    if (msg.kind !== "watch_tab" && tabId !== null) opened.postMessage({ kind: "watch_tab", tab_id: tabId } satisfies PanelToWorker);
  }
  try {
    port.postMessage(msg);
  } catch {
    // Disconnected before its onDisconnect ran: a new port.
    port = null;
    if (!retried) post(msg, true);
  }
}

function input(input: ChatInput): void {
  if (tabId !== null) post({ kind: "input", tab_id: tabId, input });
}

const listen: Listen = (type, handler) => shadow.addEventListener(type, (event) => handler(event, shadow.activeElement), true);

const ui = createChat({
  surface: "panel",
  handlers: {
    retry: () => input({ input: "retry" }),
    install: (modelId) => input({ input: "install", model_id: modelId }),
    openModelOptions: () => input({ input: "open_model_options" }),
    ownModel: (name) => ownModels.find((m) => m.name === name),
    submit(text) {
      input({ input: "submit", text });
      return true;
    },
    stop() {
      input({ input: "stop" });
      ui.composer.setRunning(true, true);
    },
    saveSettings: (patch) =>
      void saveSettings(patch).then((s) => {
        ui.form?.show(s);
        ui.saved.textContent = t("settingsSaved");
      }),
  },
  actions: {
    decide(entryId, decision) {
      const entry = transcript.entries.find((e) => e.id === entryId);
      if (entry?.kind === "confirm" && entry.decision === undefined) input({ input: "decide", entry_id: entryId, call_id: entry.callId, decision });
    },
    choose(entryId, option) {
      const entry = transcript.entries.find((e) => e.id === entryId);
      if (entry?.kind === "ask" && entry.answer === undefined) input({ input: "choose", entry_id: entryId, call_id: entry.callId, option });
    },
    fence: (entryId, allow) => input({ input: "fence", entry_id: entryId, allow }),
    hasSource: (number) => sourceOf(transcript, number) !== undefined,
    showSource(number) {
      const source = sourceOf(transcript, number);
      const shown = tabId;
      if (!source || shown === null) return;
      void chrome.tabs.get(shown).then((tab) => {
        // On the tab's page: the tab scrolls to it and outlines it. Another page's (read_link):
        // that page in a new tab (as the overlay does), which the panel then follows.
        if (tab.url?.split("#")[0] === source.url.split("#")[0]) input({ input: "show_source", number });
        else if (/^https?:\/\//.test(source.url)) void chrome.tabs.create({ url: source.url, openerTabId: shown });
      });
    },
  },
  listen,
  root: shadow,
  data,
  outline: null,
  site: "",
  isOpen: () => true,
  transcript: () => transcript,
  status: () => status,
});

// Where the chat cannot be: a notice in its place.
const notice = el("p", { class: "side-notice", role: "status" });
notice.hidden = true;
ui.panel.insertBefore(notice, ui.engine.element);
shadow.append(ui.panel);
data.state = "open";
data.view = "chat";

ui.continueButton.addEventListener("click", () => input({ input: "continue" }));
ui.clear.addEventListener("click", () => {
  input({ input: "clear" });
  ui.saved.textContent = t("conversationCleared");
});
ui.disableSite.addEventListener("click", () => {
  if (!site) return;
  if (transcript.task === "running") input({ input: "stop" });
  void loadSettings().then((s) => saveSettings({ disabledSites: s.disabledSites.includes(site) ? s.disabledSites : [...s.disabledSites, site] }));
});
watchOwnModels((models) => {
  ownModels = models;
  ui.renderEngine();
});

function onWorkerMessage(msg: WorkerToPanel): void {
  if (msg.tab_id !== tabId) return;
  switch (msg.kind) {
    case "tab_state": {
      data.tabState = msg.state;
      const text = { ready: "", disabled: t("sidePanelSiteOff", msg.site ?? ""), unsupported: t("sidePanelUnsupported"), no_script: t("sidePanelReload"), gone: "" }[msg.state];
      notice.textContent = text;
      notice.hidden = !text;
      // Nothing to act on: no composer, no engine, no conversation.
      ui.chat.hidden = Boolean(text) || !ui.settingsView.hidden;
      ui.engine.element.hidden = Boolean(text);
      ui.disableSite.disabled = msg.state !== "ready";
      break;
    }
    case "chat": {
      const chat = revivePanelChat(msg.chat);
      if (!chat) return;
      const { touched, removed } = changedEntries(transcript, chat.transcript);
      const waitingBefore = waitingOn(transcript);
      transcript = chat.transcript;
      if (chat.site !== site) {
        site = chat.site;
        ui.disableSite.textContent = t("disableSite", site);
      }
      if (JSON.stringify(chat.status) !== JSON.stringify(status)) {
        status = chat.status;
        ui.renderEngine();
      }
      if (removed) ui.redrawAll();
      else ui.commit(touched);
      // A card waits for the user: focus it.
      const waiting = waitingOn(transcript);
      if (waiting !== undefined && waiting !== waitingBefore) ui.focusCard(waiting);
      break;
    }
  }
}

/** The entry a confirmation card or a question waits on, if any. */
function waitingOn(t: Transcript): number | undefined {
  return t.entries.find((e) => (e.kind === "confirm" && e.decision === undefined) || (e.kind === "ask" && e.answer === undefined) || (e.kind === "fence" && e.allowed === undefined))?.id;
}

/** Shows tab `id`'s chat (the window's active tab). */
function show(id: number): void {
  const switched = id !== tabId;
  tabId = id;
  data.tab = String(id);
  if (switched) {
    transcript = emptyTranscript();
    status = { state: "idle" };
    site = "";
    ui.redrawAll();
    ui.renderEngine();
  }
  post({ kind: "watch_tab", tab_id: id });
}

// The window this panel is in, and its active tab.
void chrome.windows.getCurrent().then(async ({ id: windowId }) => {
  if (windowId === undefined) return;
  chrome.tabs.onActivated.addListener((info) => {
    if (info.windowId === windowId) show(info.tabId);
  });
  chrome.tabs.onUpdated.addListener((id, change) => {
    // A new page in the tab shown: its content script is a new one, told again.
    if (id === tabId && (change.status === "complete" || change.url !== undefined)) show(id);
  });
  const [active] = await chrome.tabs.query({ active: true, windowId });
  if (active?.id !== undefined) show(active.id);
});
