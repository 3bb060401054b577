// The service worker: Hearth's message bus, and its router. It owns every tab's conversation
// (./conversations.ts: the engine's task updates and the user's input change it, its views are
// sent the changes), and routes tool calls from the engine to the task's own tab (or runs the
// browser-level tools itself: navigation and run_javascript). Its rooms: the engine's offscreen
// document and status (./engine-link.ts), the downloads it runs (./installs.ts), the fence's cards
// (./fence-cards.ts), voice (./voice.ts). It keeps no state that cannot be rebuilt: Chrome may stop
// it at any time.
//
// Every message is checked by its sender, as the browser reports it (`senderRole`): a tab's
// messages act on that tab only (its id comes from `sender.tab.id`, never from the message), the
// engine's only come from the offscreen document, the chat page's only over a port its page
// opened (`sidepanel.html`: in Chrome's side panel, no tab; or framed in a tab as its overlay,
// that tab only), and anything else is dropped. A tab's content script may say only whether its
// overlay is open: what the person asks, answers or decides comes from the chat page.
// storage.session (every tab's transcript and agent history) stays closed to content scripts: a
// tab's content script is sent its own tab's conversation, and nothing else.

import type { ChatInput, EngineToWorker, OptionsToWorker, PanelToWorker, SettingsView, TabToWorker, TaskAction, WorkerToPanel, WorkerToTab } from "../generated/protocol";
import { dropped, isMessage, senderRole, sendToTab } from "../shared/messages";
import { loadSettings, onSettingsChanged, isSiteDisabled, siteOf, taskSettings, type ChatSurface, type Settings } from "../shared/settings";
import { registerContentScript } from "./register-content-script";
import { runTool } from "./browser-tools";
import * as fence from "./fence";
import * as fenceCards from "./fence-cards";
import * as conversations from "./conversations";
import * as voice from "./voice";
import * as taskTabs from "./task-tabs";
import { engineStatus, ensureEngine, heardFromEngine, offscreenReady, onStatus, settingsChanged, statusFromEngine, toOffscreen, wakeEngine } from "./engine-link";
import { installOffered, modelInstalled } from "./installs";
import { answer, applyUpdate, continued, decide, decideFence, emptyTranscript, localError, markSent, pendingAsk, sourceOf, userMessage } from "../chat/transcript";
import { t as t_ } from "../shared/ui/i18n";

// The settings (storage.sync), the user's own model records (storage.local) and every tab's
// transcript (storage.session) are open to Hearth's own pages only: a content script (the page's
// process, which a hostile page may have compromised) can neither read nor write them. It reads
// its view of the settings (whether Hearth is off on its site) through this worker.
// Set before the content script is registered, and again at every start (Chrome keeps it).
const trusted = Promise.all(
  (["local", "sync", "session"] as const).map((area) => chrome.storage[area].setAccessLevel({ accessLevel: "TRUSTED_CONTEXTS" as chrome.storage.AccessLevel })),
).catch((error: unknown) => console.warn("Hearth: storage could not be closed to content scripts", error));
chrome.runtime.onInstalled.addListener(() => void trusted.then(registerContentScript));
chrome.runtime.onStartup.addListener(() => void trusted.then(registerContentScript));
onSettingsChanged((settings) => {
  void registerContentScript();
  pushSettingsViews(settings);
  setSurface(settings.chatSurface);
  // A site turned off (or on) again: the panels showing it say so.
  for (const [port, tabId] of panels) if (tabId !== null) void watchTab(port, tabId);
  // Another model, or voice input turned on or off: the engine starts again with them.
  settingsChanged(settings);
});

// Every new status of the engine's goes to the chat pages; once it is ready, the messages that waited for it go to it.
onStatus((status) => {
  for (const port of panels.keys()) toPanel(port, { kind: "engine_status", status });
  if (status.state === "ready" && status.model !== null) sendQueued();
});

chrome.runtime.onMessage.addListener((message: unknown, sender, sendResponse) => {
  const reply = dispatch(message, sender);
  if (!reply) return false;
  // Keeps the channel open until the answer is ready (tool calls take a while).
  void reply.then(sendResponse, () => sendResponse(undefined));
  return true;
});

/** Routes a message by who the browser says sent it; returns a promise when the sender waits for an answer. */
function dispatch(message: unknown, sender: chrome.runtime.MessageSender): Promise<unknown> | undefined {
  const role = isMessage(message) ? senderRole(sender) : null;
  const tabId = sender.tab?.id;
  // The tab's identity (id, committed URL, title) is the browser's, never the message's.
  if (role === "tab" && tabId !== undefined) return fromTab(message as TabToWorker, tabId, sender.tab);
  if (role === "engine") return fromEngine(message as EngineToWorker);
  if (role === "options") return fromOptions(message as OptionsToWorker);
  dropped("worker", message, sender);
  return undefined;
}

// The toolbar button and the keyboard shortcut (manifest `commands`: `_execute_action`, which is
// the button's click) open the chat where settings.chatSurface says. The side panel: Chrome opens
// it itself (`setPanelBehavior`; `action.onClicked` does not fire then), in the click's gesture
// and without waiting for this worker to start and read the settings. The overlay: onClicked,
// which opens the active tab's, the page's selection quoted.
function setSurface(surface: ChatSurface): void {
  void chrome.sidePanel.setPanelBehavior({ openPanelOnActionClick: surface === "panel" }).catch(() => {});
}
void loadSettings().then((s) => setSurface(s.chatSurface), () => {});
chrome.action.onClicked.addListener((tab) => {
  if (tab.id !== undefined) toTab(tab.id, { kind: "open_overlay" });
});

// --- the chat page: the side panel, and the overlay's frame -------------------------------------
// sidepanel.html connects a port and names the tab it shows. The port is accepted from that page
// only, by its sender (the browser's account): in Chrome's side panel (no tab) it shows its
// window's active tab; framed in a tab (the overlay's host holds it) it is that tab's overlay and
// may show that tab only (`sender.tab.id`). A content script cannot pass for either. It is sent
// the tab's conversation, and its input is done (`onChatInput`), only for the tab its port watches
// now, and never on a site the user turned Hearth off on.

/** Each chat page's port and the tab it shows (null before its first `watch_tab`). */
const panels = new Map<chrome.runtime.Port, number | null>();
/** Each chat page's latest `watchTab`: an earlier one still waiting (on a tab that was loading) says nothing. */
const watches = new Map<chrome.runtime.Port, number>();
/** The ports of overlay frames, with the one tab each may show. */
const overlayFrames = new Map<chrome.runtime.Port, number>();

chrome.runtime.onConnect.addListener((port) => {
  const role = port.name === "hearth-panel" && port.sender ? senderRole(port.sender) : null;
  const frameTab = role === "overlay" ? port.sender?.tab?.id : undefined;
  if (role !== "panel" && frameTab === undefined) {
    dropped("worker", { kind: `port ${port.name}` }, port.sender ?? {});
    port.disconnect();
    return;
  }
  panels.set(port, null);
  if (frameTab !== undefined) overlayFrames.set(port, frameTab);
  port.onMessage.addListener((message: unknown) => {
    if (isMessage(message)) void fromPanel(port, message as PanelToWorker);
  });
  port.onDisconnect.addListener(() => {
    const tabId = panels.get(port);
    panels.delete(port);
    watches.delete(port);
    // (An overlay's frame going away releases nothing: the overlay is the tab's own view.)
    if (overlayFrames.delete(port)) return;
    if (tabId !== null && tabId !== undefined) release(tabId);
  });
});

async function fromPanel(port: chrome.runtime.Port, msg: PanelToWorker): Promise<void> {
  if (!panels.has(port) || !Number.isInteger(msg.tab_id) || msg.tab_id < 0) return;
  // An overlay's frame shows the tab it is in, and no other.
  const frameTab = overlayFrames.get(port);
  if (frameTab !== undefined && msg.tab_id !== frameTab) return dropped("worker", msg, port.sender ?? {});
  switch (msg.kind) {
    case "watch_tab": {
      const before = panels.get(port);
      panels.set(port, msg.tab_id);
      if (frameTab === undefined && before !== null && before !== undefined && before !== msg.tab_id) release(before);
      await watchTab(port, msg.tab_id);
      break;
    }
    case "list_tabs": {
      // The composer's tab chooser: the other web tabs, for a message to the tab the port shows.
      if (panels.get(port) !== msg.tab_id) return dropped("worker", msg, port.sender ?? {});
      const tabs = await taskTabs.listTabs(msg.tab_id, await loadSettings());
      if (panels.get(port) === msg.tab_id) toPanel(port, { kind: "open_tabs", tab_id: msg.tab_id, tabs });
      break;
    }
    case "input": {
      // Only the tab the panel shows now: an answer is for the card shown there, in that tab.
      if (panels.get(port) !== msg.tab_id) return dropped("worker", msg, port.sender ?? {});
      const tab = await chrome.tabs.get(msg.tab_id).catch(() => null);
      if (!tab || isSiteDisabled(await loadSettings(), tab.url)) return;
      // (The panel may have moved to another tab meanwhile.)
      if (panels.get(port) === msg.tab_id) await onChatInput(msg.tab_id, msg.input);
      break;
    }
  }
}

/**
 * Tells `port` whether Hearth runs in `tabId`, and (a side panel) that tab's content script that
 * a panel shows it. An overlay's frame is in the tab: Hearth runs there.
 */
async function watchTab(port: chrome.runtime.Port, tabId: number): Promise<void> {
  const watch = (watches.get(port) ?? 0) + 1;
  watches.set(port, watch);
  // The panel moved on meanwhile, or a later watch of the same tab has the newer answer.
  const current = () => panels.get(port) === tabId && watches.get(port) === watch;
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  const site = siteOf(tab?.url) ?? null;
  let state: "ready" | "disabled" | "unsupported" | "no_script" | "gone";
  if (!tab) state = "gone";
  else if (site === null) state = "unsupported";
  else if (isSiteDisabled(await loadSettings(), tab.url)) state = "disabled";
  else if (overlayFrames.has(port)) state = "ready";
  else state = (await sendToTab(tabId, { kind: "panel_attached", attached: true }).then((r) => r === true, () => false)) ? "ready" : "no_script";
  if (!current()) return;
  toPanel(port, { kind: "tab_state", tab_id: tabId, state, site });
  if (state !== "ready") return;
  toPanel(port, { kind: "engine_status", status: engineStatus() });
  const chat = await conversations.snapshot(tabId);
  if (current()) toPanel(port, { kind: "chat", tab_id: tabId, chat });
  // The chat is shown: the engine starts.
  wakeEngine();
}

/** A panel no longer shows `tabId`: its overlay shows the chat again, unless another panel shows it. */
function release(tabId: number): void {
  const stillShown = [...panels].some(([port, shown]) => shown === tabId && !overlayFrames.has(port));
  if (!stillShown) toTab(tabId, { kind: "panel_attached", attached: false });
}

function toPanel(port: chrome.runtime.Port, msg: WorkerToPanel): void {
  try {
    port.postMessage(msg);
  } catch {
    panels.delete(port);
    overlayFrames.delete(port);
    watches.delete(port);
  }
}

// Every change of a tab's conversation goes to its views: the tab's overlay and the panels showing it.
conversations.onPatch((tabId, chat) => {
  toTab(tabId, { kind: "chat", chat });
  for (const [port, shown] of panels) if (shown === tabId) toPanel(port, { kind: "chat", tab_id: tabId, chat });
});

// A task belongs to its tab: when the tab goes away, so does its conversation.
chrome.tabs.onRemoved.addListener((tabId) => {
  queued.delete(tabId);
  fenceCards.forgetTab(tabId);
  voice.dropRecording(tabId, voiceHost);
  for (const [port, shown] of panels) if (shown === tabId) toPanel(port, { kind: "tab_state", tab_id: tabId, state: "gone", site: null });
  void toOffscreen({ kind: "task_control", tab_id: tabId, action: { action: "forget" } }).catch(() => {});
  conversations.forget(tabId);
  void chrome.storage.session.remove(historyKey(tabId));
  void fence.forget(tabId).catch(() => {});
  void taskTabs.forget(tabId).catch(() => {});
});

// What the fence stops becomes a card in the task's conversation (./fence-cards.ts).
fenceCards.watch({ stopTask: (tabId) => controlTask(tabId, { action: "stop" }) });

/** Where the agent's record of a tab's conversation is kept (memory only, like the transcript). */
const historyKey = (tabId: number) => `agent:${tabId}`;

/** A message from the content script in `tabId`'s top frame: it acts on that tab only. */
function fromTab(msg: TabToWorker, tabId: number, tab: chrome.tabs.Tab | undefined): Promise<unknown> | undefined {
  const url = tab?.url;
  switch (msg.kind) {
    case "watch_chat":
      // Whole, on the channel its changes come by (so none of them can overtake it).
      void conversations.snapshot(tabId).then((chat) => toTab(tabId, { kind: "chat", chat }));
      // A new page's content script (a reload, a busy machine) may start after a side panel
      // showing its tab asked for it and found none: the panel asks again now.
      for (const [port, shown] of panels) if (shown === tabId && !overlayFrames.has(port)) void watchTab(port, tabId);
      break;
    case "chat_input":
      // The page's side only says whether the overlay is open. What the person asks, answers or
      // decides comes from Hearth's chat page (the overlay's frame, the side panel), never from
      // the page's process, which a hostile page may have compromised.
      if (msg.input.input !== "shown") {
        dropped("worker", msg, { tab, url });
        return undefined;
      }
      return loadSettings().then((settings) => (isSiteDisabled(settings, url) ? undefined : onChatInput(tabId, msg.input)));
    case "get_settings":
      return loadSettings().then((settings) => settingsView(url, settings));
  }
  return undefined;
}

/** Messages typed in a tab before the engine was ready, sent when it is (memory only: a restarted worker drops them, as storage does). */
const queued = new Map<number, QueuedTask[]>();

/** A task typed before the engine was ready: what `startTask` takes. */
interface QueuedTask {
  text: string;
  selection: string | null;
  /** The other tabs the user attached to it. */
  tabs: number[];
}

/**
 * What the user did in a view of `tabId`'s conversation (its overlay, or a side panel showing it):
 * the same input does the same thing from either. Decisions and answers apply only to the card they
 * were shown on, while it still waits on the same call.
 */
async function onChatInput(tabId: number, input: ChatInput): Promise<unknown> {
  // What the input is judged by, copied out of the record (the one entry it names, not the whole).
  const { entry, asking, running, source } = await conversations.look(tabId, (t) => {
    const named = "entry_id" in input ? t.entries.find((e) => e.id === input.entry_id) : undefined;
    return {
      entry: named && structuredClone(named),
      asking: pendingAsk(t) !== undefined,
      running: t.task === "running",
      source: input.input === "show_source" ? sourceOf(t, input.number) : undefined,
    };
  });
  switch (input.input) {
    case "submit": {
      const text = typeof input.text === "string" ? input.text : "";
      if (!text.trim()) return;
      if (asking) {
        await conversations.change(tabId, (t) => answer(t, null, text));
        await controlTask(tabId, { action: "answer", text });
        return;
      }
      // A running task is steered with the text alone: the selection and the tabs wait for the next task.
      const selection = running || typeof input.selection !== "string" || !input.selection ? null : input.selection;
      const attached = running || !Array.isArray(input.tabs) ? [] : input.tabs.filter(Number.isInteger).slice(0, taskTabs.MAX_ATTACHED);
      const shown = await attachedTitles(attached);
      const status = engineStatus();
      const ready = status.state === "ready" && status.model !== null;
      await conversations.change(tabId, (t) => userMessage(t, text, !ready, selection, shown));
      if (ready) return startTask(tabId, { text, selection, tabs: attached });
      queued.set(tabId, [...(queued.get(tabId) ?? []), { text, selection, tabs: attached }]);
      wakeEngine();
      return;
    }
    case "stop":
      return controlTask(tabId, { action: "stop" });
    case "decide": {
      if (entry?.kind !== "confirm" || entry.decision !== undefined || entry.callId !== input.call_id) return;
      await conversations.change(tabId, (t) => decide(t, entry.id, input.decision));
      // A decision after the page moved the tab off the task's sites approves nothing: the card says so.
      const voided = await controlTask(tabId, { action: "confirm", call_id: input.call_id, decision: input.decision });
      if (voided) await conversations.change(tabId, (t) => localError(t, t_("decisionVoid", voided.void_on)));
      return;
    }
    case "choose":
      if (entry?.kind !== "ask" || entry.answer !== undefined || entry.callId !== input.call_id) return;
      await conversations.change(tabId, (t) => answer(t, entry.id, input.option));
      return controlTask(tabId, { action: "answer", text: input.option });
    case "fence": {
      if (entry?.kind !== "fence" || entry.allowed !== undefined) return;
      await conversations.change(tabId, (t) => (decideFence(t, entry.id, input.allow) ? [entry.id] : []));
      return fenceCards.fenceDecision(tabId, entry.url, input.allow);
    }
    case "continue":
      await conversations.change(tabId, continued);
      return controlTask(tabId, { action: "continue" });
    case "clear": {
      queued.delete(tabId);
      await taskTabs.forget(tabId);
      voice.dropRecording(tabId, voiceHost);
      await controlTask(tabId, { action: "forget" });
      await conversations.change(tabId, (t) => ({ ...emptyTranscript(), open: t.open }));
      return;
    }
    case "retry":
      wakeEngine();
      return;
    case "install":
      installOffered(input.model_id);
      return;
    case "open_model_options":
      // "Use a model file you already have": the file is chosen in the options page, at its models.
      void chrome.tabs.create({ url: chrome.runtime.getURL("options.html#models") });
      return;
    case "voice":
      return voice.voiceInput(tabId, input.voice, voiceHost);
    case "show_source": {
      if (!source) return false;
      const tab = await chrome.tabs.get(tabId).catch(() => null);
      const here = (url: string | undefined) => url?.split("#")[0] === source.url.split("#")[0];
      // On the tab's page: the tab scrolls to it and outlines it. Another page's (read_link, an
      // attached tab): the tab showing it comes to the front, or it opens in a new tab, fenced
      // like any tab the task opens.
      if (here(tab?.url)) return toTab(tabId, { kind: "show_passage", number: input.number });
      const opened = await openSource(tabId, source.url);
      if (!opened) await conversations.change(tabId, (t) => localError(t, t_("sourceNotOpened", source.url)));
      return opened;
    }
    case "shown":
      await conversations.change(tabId, (t) => {
        t.open = input.open === true;
        return [];
      });
      // The overlay opened: the engine starts, or comes back if Chrome tore its document down.
      if (input.open === true) wakeEngine();
      return;
  }
}

/** Sends the messages that waited for the engine, now ready. */
function sendQueued(): void {
  for (const [tabId, messages] of queued) {
    queued.delete(tabId);
    void conversations.change(tabId, markSent);
    for (const message of messages) void startTask(tabId, message);
  }
}

/** A message from the offscreen document (the engine). */
function fromEngine(msg: EngineToWorker): Promise<unknown> | undefined {
  // Any message shows the engine is alive: the waits on it start counting its silence again.
  heardFromEngine();
  switch (msg.kind) {
    case "offscreen_ready":
      offscreenReady();
      break;
    case "engine_status":
      statusFromEngine(msg.status);
      break;
    case "task_update":
      // The agent's own record of the conversation stays here (for a recreated engine), not in the tab.
      if (msg.update.update === "history") void chrome.storage.session.set({ [historyKey(msg.tab_id)]: msg.update.history }).catch(() => {});
      else {
        const update = msg.update;
        void conversations.change(msg.tab_id, (t) => applyUpdate(t, update));
      }
      // The run returned (done, a card, a question, paused, failed) or never started: the fence
      // lifts once the page settles.
      if (msg.update.update === "ended" || msg.update.update === "refused") void fence.lift(msg.tab_id).catch(() => {});
      break;
    case "run_tool":
      return runTool(msg.request);
    case "voice":
      void voice.heard(msg.tab_id, msg.state, voiceHost);
      break;
  }
  return undefined;
}

// Test builds only: the e2e suite plays the engine's part for the overlay's own tests
// (`hearthTestEngine(message)` in this worker's console, as if the offscreen document had sent it).
if (__HEARTH_TEST_BUILD__) (globalThis as { hearthTestEngine?: (msg: EngineToWorker) => unknown }).hearthTestEngine = fromEngine;

/** A message from the options page. */
function fromOptions(msg: OptionsToWorker): Promise<unknown> | undefined {
  switch (msg.kind) {
    case "model_installed":
      // Installed from a folder in the options page: an engine waiting for a model can load it now.
      modelInstalled();
      break;
  }
  return undefined;
}

/** Every tab's content script hears its view of the settings (a site turned off unmounts). */
function pushSettingsViews(settings: Settings): void {
  void chrome.tabs.query({}).then((tabs) => {
    for (const tab of tabs) {
      const id = tab.id;
      if (id !== undefined) sendToTab(id, { kind: "settings_changed", view: settingsView(tab.url, settings) }).catch(() => {});
    }
  });
}
/** What a tab on `url` may know of the settings. */
function settingsView(url: string | undefined, settings: Settings): SettingsView {
  return { disabled: isSiteDisabled(settings, url) };
}

/**
 * A citation chip's other page, in a new tab that the fence follows like any tab the task opens;
 * while a task runs in `tabId`, never outside its sites.
 */
async function openSource(tabId: number, url: string): Promise<boolean> {
  if (!/^https?:\/\//.test(url)) return false;
  const [shown] = (await chrome.tabs.query({})).filter((t) => t.id !== undefined && t.url?.split("#")[0] === url.split("#")[0]);
  if (shown?.id !== undefined) {
    await chrome.tabs.update(shown.id, { active: true });
    await chrome.windows.update(shown.windowId, { focused: true }).catch(() => {});
    return true;
  }
  if ((await fence.isRaised(tabId)) && !(await fence.onApprovedSite(tabId, url))) return false;
  await chrome.tabs.create({ url, openerTabId: tabId });
  return true;
}

/** What the voice module needs of this worker. */
const voiceHost: voice.VoiceHost = {
  status: engineStatus,
  toOffscreen,
  startSpokenTask: (tabId, clip) => startTask(tabId, { text: "", selection: null, tabs: [] }, clip),
};

/** How the attached tabs show on the user's message: title and site, as the browser has them now. */
async function attachedTitles(ids: number[]): Promise<{ title: string; site: string }[]> {
  const tabs = await Promise.all(ids.map((id) => chrome.tabs.get(id).catch(() => null)));
  return tabs.flatMap((t) => (t?.url ? [{ title: (t.title || t.url).slice(0, 200), site: siteOf(t.url) ?? t.url }] : []));
}

/**
 * Starts a task in `tabId` on the page it shows now (its committed URL and title, as the browser
 * reports them); `voice`: the clip of a spoken request, which the offscreen document holds.
 */
async function startTask(tabId: number, { text, selection, tabs: attached }: QueuedTask, voiceClip: number | null = null): Promise<void> {
  const settings = await loadSettings();
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  const url = tab?.url;
  if (!tab || isSiteDisabled(settings, url)) return;
  const page = url ? { url, title: tab.title ?? "" } : null;
  try {
    await ensureEngine();
    // The tabs the user attached are read now, by their own content scripts: their words go with
    // the message. (First: a new task acts in its own tab only, and its fence says so.)
    const tabs = await taskTabs.begin(tabId, attached, settings);
    await fence.raise(tabId, url);
    // An engine that lost the tab's conversation (its document was recreated) takes it up again.
    const history: unknown = (await chrome.storage.session.get(historyKey(tabId)))[historyKey(tabId)] ?? null;
    await toOffscreen({ kind: "start_task", tab_id: tabId, text, selection, page, settings: taskSettings(settings), history, voice: voiceClip, tabs });
  } catch (error) {
    void fence.lift(tabId, true).catch(() => {});
    await conversations.change(tabId, (t) => applyUpdate(t, { update: "refused", refusal: { kind: "engine_not_running", detail: String(error) } }));
  }
}

async function controlTask(tabId: number, action: TaskAction): Promise<{ void_on: string } | undefined> {
  if (action.action !== "stop" && action.action !== "forget") {
    const tab = await chrome.tabs.get(tabId).catch(() => null);
    // A decision decides only what its card showed: one that arrives after the page moved the tab
    // off the task's sites approves nothing (it goes to the engine as a Deny, and the card says so).
    let voided: { void_on: string } | undefined;
    const moved = (await fence.hasTask(tabId)) && !(await fence.onApprovedSite(tabId, tab?.url));
    if (action.action === "confirm" && action.decision !== "deny" && moved) {
      voided = { void_on: tab?.url ?? "" };
      action = { ...action, decision: "deny" };
    }
    // The run goes on (a decision, an answer, continue, steer): the fence is up while it runs,
    // around the task's sites only (never the site the tab happens to be on now).
    if (tab) await fence.raise(tabId).catch(() => {});
    await toOffscreen({ kind: "task_control", tab_id: tabId, action }).catch(() => {});
    return voided;
  }
  // The engine is told first, then the running tool is cancelled in the tab at once (whatever the
  // engine is doing): the cancelled tool's reply reaches the engine after the stop, so the task
  // ends stopped rather than taking that reply and going on.
  const told = toOffscreen({ kind: "task_control", tab_id: tabId, action }).catch(() => {});
  toTab(tabId, { kind: "cancel_tools" });
  // (And in the tabs the task acts in: switch_tab.)
  for (const joined of await fence.joinedTabs(tabId).catch(() => [])) toTab(joined, { kind: "cancel_tools" });
  if (action.action === "forget") {
    await fence.forget(tabId).catch(() => {});
    await chrome.storage.session.remove(historyKey(tabId)).catch(() => {});
  } else {
    await fence.lift(tabId, true).catch(() => {});
  }
  await told;
  return undefined;
}

function toTab(tabId: number, msg: WorkerToTab): void {
  // Only the top frame's content script shows the overlay.
  sendToTab(tabId, msg).catch(() => {});
}
