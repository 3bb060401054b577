// The service worker: Hearth's message bus. It owns the offscreen document (the engine) and every
// tab's conversation (./conversations.ts: the engine's task updates and the user's input change it,
// its views are sent the changes), and routes tool calls from the engine to the task's own tab (or
// runs the browser-level tools itself: navigation and run_javascript). It keeps no state that
// cannot be rebuilt: Chrome may stop it at any time.
//
// Every message is checked by its sender, as the browser reports it (`senderRole`): a tab's
// messages act on that tab only (its id comes from `sender.tab.id`, never from the message), the
// engine's only come from the offscreen document, the chat page's only over a port its page
// opened (`sidepanel.html`: in Chrome's side panel, no tab; or framed in a tab as its overlay,
// that tab only), and anything else is dropped. A tab's content script may say only whether its
// overlay is open: what the person asks, answers or decides comes from the chat page.
// storage.session (every tab's transcript and agent history) stays closed to content scripts: a
// tab's content script is sent its own tab's conversation, and nothing else.

import { FRESH_ENGINE_FAILURES, type ChatInput, type EngineStatus, type EngineToWorker, type OptionsToWorker, type PanelToWorker, type SettingsView, type TabToWorker, type TaskAction, type WorkerToEngine, type WorkerToPanel, type WorkerToTab } from "../generated/protocol";
import { failure, localizeFailure } from "../shared/failures";
import { dropped, isMessage, senderRole, sendToEngine, sendToTab } from "../shared/messages";
import { loadSettings, onSettingsChanged, isSiteDisabled, siteOf, taskSettings, type ChatSurface, type Settings } from "../shared/settings";
import { registerContentScript } from "./register-content-script";
import { agentNavigating, runTool } from "./browser-tools";
import * as fence from "./fence";
import * as downloads from "./downloads";
import * as conversations from "./conversations";
import * as voice from "./voice";
import { siteKey, siteText } from "./site";
import { answer, applyUpdate, continued, decide, decideFence, emptyTranscript, fenceBlocked, localError, markSent, pendingAsk, sourceOf, userMessage } from "../chat/transcript";
import { t as t_ } from "../shared/ui/i18n";

const OFFSCREEN_URL = "offscreen.html";

let status: EngineStatus = { state: "idle" };
/** The model the engine was last started with (settings.model; null: the build's default). */
let engineModel: string | null = null;
/** Whether that start loaded the audio tower (settings.voice). */
let engineVoice = false;
/** A download runs in the offscreen document: its `installing` statuses are current. */
let installInFlight = false;
/** The offscreen document is starting the engine: its `loading` statuses are current. */
let startInFlight = false;
let offscreenStarting: Promise<void> | null = null;
let onOffscreenReady: (() => void) | null = null;
/** Counts engine starts: the answer of one that a later start replaced is not current. */
let startSeq = 0;

/**
 * The longest the engine may stay silent while the worker waits on it: no answer and no message
 * (each `loading` or `installing` status restarts the clock, so a model of gigabytes may take
 * minutes). Then the wait ends in a failure with Retry, which replaces the document.
 */
const ENGINE_SILENCE_MS = 60_000;
/** The same while a model downloads (a slow server may take a while between two parts). */
const INSTALL_SILENCE_MS = 120_000;
/** How long a new offscreen document may take to load its script and say it is ready. */
const OFFSCREEN_READY_MS = 30_000;
/**
 * How often a wait checks that the offscreen document is still there (a renderer crash ends it;
 * the call also keeps this worker alive while it waits on a silent engine).
 */
const DOCUMENT_CHECK_MS = 2_000;

/** Test builds only: the e2e suite shortens the silence the worker waits out (`hearthTestHooks`). */
function silenceMs(normal: number): number {
  return __HEARTH_TEST_BUILD__ ? ((globalThis as { hearthTestHooks?: { engineSilenceMs?: number } }).hearthTestHooks?.engineSilenceMs ?? normal) : normal;
}

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
  // Another model was chosen: start the engine again with it (it is offered for download if it
  // is not installed). An engine nobody asked for yet, or one busy starting, picks it up itself.
  // Voice input turned on or off: likewise (the audio tower loads only while it is on).
  const model = settings.model || null;
  const changed = model !== engineModel || settings.voice !== engineVoice;
  if (changed && !["idle", "starting", "installing", "loading"].includes(status.state)) void startEngine();
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
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  const site = siteOf(tab?.url) ?? null;
  let state: "ready" | "disabled" | "unsupported" | "no_script" | "gone";
  if (!tab) state = "gone";
  else if (site === null) state = "unsupported";
  else if (isSiteDisabled(await loadSettings(), tab.url)) state = "disabled";
  else if (overlayFrames.has(port)) state = "ready";
  else state = (await sendToTab(tabId, { kind: "panel_attached", attached: true }).then((r) => r === true, () => false)) ? "ready" : "no_script";
  // The panel moved on meanwhile.
  if (panels.get(port) !== tabId) return;
  toPanel(port, { kind: "tab_state", tab_id: tabId, state, site });
  if (state !== "ready") return;
  toPanel(port, { kind: "engine_status", status });
  const chat = await conversations.snapshot(tabId);
  if (panels.get(port) === tabId) toPanel(port, { kind: "chat", tab_id: tabId, chat });
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
  for (const perTab of [loadedPages, takenBack, triedAgain]) perTab.delete(tabId);
  voice.dropRecording(tabId, voiceHost);
  for (const [port, shown] of panels) if (shown === tabId) toPanel(port, { kind: "tab_state", tab_id: tabId, state: "gone", site: null });
  void toOffscreen({ kind: "task_control", tab_id: tabId, action: { action: "forget" } }).catch(() => {});
  conversations.forget(tabId);
  void chrome.storage.session.remove(historyKey(tabId));
  void fence.forget(tabId).catch(() => {});
});

// A request the fence stopped becomes a card in the task's overlay naming its full address:
// allowed, its site joins the task's set and the user's Allow opens it. The worker never opens an
// address on the page's behalf. One the browser started itself (no initiator: the user's address
// bar or Back button, and equally the page's own history.back()) also stops the task and lifts
// the fence, since it may be the user leaving.
fence.watch((blocked) => void onFenceBlocked(blocked));

/** The requests the fence blocked in each tab, which a `fence_decision` may answer (once each). */
const blockedRequests = new Map<number, fence.Blocked[]>();

async function onFenceBlocked(blocked: fence.Blocked): Promise<void> {
  const { tabId, url } = blocked;
  const list = blockedRequests.get(tabId) ?? [];
  list.push(blocked);
  blockedRequests.set(tabId, list.slice(-8));
  if (blocked.opened) {
    // A tab the task's pages opened tried to leave the task's sites: closed when the task opened
    // it (or it never showed a page), else taken back like the task's own; the task's overlay asks.
    const adopted = (await fence.openedTabs(tabId)).includes(blocked.inTab);
    if (adopted || !(await restorePage(blocked.inTab, url, blocked, blocked.origin !== undefined))) await chrome.tabs.remove(blocked.inTab).catch(() => {});
  } else if (blocked.topLevel) {
    // No initiator: the browser started it (the user's address bar, bookmark or Back button, or
    // the page's own history.back(), which Chrome reports the same way before anything commits).
    // The task stops and the fence lifts, but the tab is never moved on the page's behalf: the
    // card below asks, and only the user's Allow opens the address (or they go there again).
    if (!blocked.initiator && !agentNavigating.has(tabId)) {
      await controlTask(tabId, { action: "stop" });
      await fence.lift(tabId, true);
    }
    await restorePage(tabId, url, blocked, blocked.origin !== undefined);
  }
  await showFenceCard(tabId, url, blocked.method, null, blocked.origin);
}

// A download started while a task's fence is up waits for the user's decision on a card.
downloads.watch(({ task, id, url, file }) => {
  const list = blockedRequests.get(task) ?? [];
  blockedRequests.set(task, [...list, { tabId: task, inTab: task, opened: false, url, method: "DOWNLOAD", topLevel: false, download: id }].slice(-8));
  void showFenceCard(task, url, "DOWNLOAD", file);
});

/**
 * The pages each tab last loaded that the fence did not block, the latest last: where a replaced
 * entry is undone to.
 */
const loadedPages = new Map<number, string[]>();
chrome.tabs.onUpdated.addListener((tabId, change, tab) => {
  if (change.status !== "complete" || !tab.url || !/^https?:/.test(tab.url)) return;
  if (fence.blockedSince(tabId, Date.now() - 10_000) === tab.url) return;
  const url = tab.url;
  loadedPages.set(tabId, [...(loadedPages.get(tabId) ?? []).filter((u) => u !== url), url].slice(-8));
});

/**
 * When the worker last took each tab back from a navigation its page started. Going back may load
 * that page again (no back-forward cache: a `no-store` page, a busy machine), and its script tries
 * again: a page that does so this soon after is never taken back to again (the tab opens the latest
 * other page of the task's sites it showed, or stays on the error page), so that the loop ends and
 * nothing replays the attempt once the fence lifts.
 */
const takenBack = new Map<number, { at: number; to: string | undefined }>();
const TRIED_AGAIN_MS = 15_000;
/** The pages of each tab that tried again once taken back to: never taken back to again. */
const triedAgain = new Map<number, Set<string>>();

/**
 * Takes a tab off the error page a blocked top-level navigation committed (just after the error is
 * reported): forward again after a blocked history move, back after a blocked new entry (the
 * agent's own navigation, the page's, or the user's typed address). Where the blocked navigation
 * replaced the entry (a meta refresh, `location.replace`) and history leads off the task's sites,
 * the page the tab was on is opened again (it is on the task's sites). The page reloads. False when
 * there was no page to go to (a new tab whose first request was blocked, or only pages that tried
 * again: `takenBack`). A navigation without a
 * request (`committed`) is already on its document, whose address the worker may not be shown
 * (a `blob:` or `about:blank` tab has no `url` for it): nothing to wait for.
 */
async function restorePage(tabId: number, blockedUrl: string, by: { initiator?: string }, committed = false): Promise<boolean> {
  if (by.initiator === undefined) return takeBack(tabId, blockedUrl, committed);
  const last = takenBack.get(tabId);
  let restored: boolean;
  if (last?.to !== undefined && Date.now() - last.at < TRIED_AGAIN_MS) {
    // The page it was taken back to tried again: the latest other page of the task's sites it showed.
    const shunned = triedAgain.get(tabId) ?? new Set<string>();
    triedAgain.set(tabId, shunned.add(last.to));
    restored = (await onErrorPage(tabId, blockedUrl, committed)) && (await openLoadedPage(tabId, shunned));
  } else {
    restored = await takeBack(tabId, blockedUrl, committed);
  }
  const tab = restored ? await chrome.tabs.get(tabId).catch(() => null) : null;
  takenBack.set(tabId, { at: Date.now(), to: tab?.pendingUrl ?? tab?.url });
  return restored;
}

/** Whether `tabId` shows the error page of `blockedUrl` (waited for briefly), or a document of its own (`committed`). */
async function onErrorPage(tabId: number, blockedUrl: string, committed: boolean): Promise<boolean> {
  const onError = async () => {
    const tab = await chrome.tabs.get(tabId).catch(() => null);
    if (committed) return tab !== null;
    return tab !== null && (tab.url === blockedUrl || tab.url?.startsWith("chrome-error:") === true);
  };
  for (let waited = 0; waited < 3_000 && !(await onError()); waited += 100) await new Promise((r) => setTimeout(r, 100));
  return onError();
}

/** Opens the latest page of the task's sites that `tabId` loaded, but those `shunned`; false when there is none. */
async function openLoadedPage(tabId: number, shunned: Set<string>): Promise<boolean> {
  for (const url of [...(loadedPages.get(tabId) ?? [])].reverse()) {
    if (shunned.has(url) || !(await fence.onApprovedSite(tabId, url))) continue;
    return chrome.tabs.update(tabId, { url }).then(() => true, () => false);
  }
  return false;
}

async function takeBack(tabId: number, blockedUrl: string, committed: boolean): Promise<boolean> {
  if (!(await onErrorPage(tabId, blockedUrl, committed))) return false;
  // (A blocked new entry leaves nothing to go forward to.)
  const forward = agentNavigating.get(tabId) !== "open" && (await chrome.tabs.goForward(tabId).then(() => true, () => false));
  const moved = forward || (await chrome.tabs.goBack(tabId).then(() => true, () => false));
  const before = loadedPages.get(tabId)?.filter((url) => !triedAgain.get(tabId)?.has(url)).at(-1);
  if (!before || !(await fence.onApprovedSite(tabId, before))) return moved;
  let landed: string | undefined;
  for (let waited = 0; waited < 5_000; waited += 100) {
    const tab = await chrome.tabs.get(tabId).catch(() => null);
    if (!tab) return false;
    if (moved && tab.status === "complete" && tab.url !== undefined && tab.url !== blockedUrl) {
      landed = tab.url;
      break;
    }
    if (!moved) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (landed !== undefined && (await fence.onApprovedSite(tabId, landed))) return true;
  await chrome.tabs.update(tabId, { url: before }).catch(() => {});
  return true;
}

/**
 * The fence's card in `tabId`'s conversation, naming the full address and, as its title, the site
 * as the one site rule writes it: the address's, or for a navigation without a request the site of
 * the origin its document belongs to (`origin`; an opaque one has no site: the address is named).
 */
async function showFenceCard(tabId: number, url: string, method: string, file: string | null = null, origin?: string): Promise<void> {
  let host = url.slice(0, 80);
  try {
    // A blob: or filesystem: address names the page's origin inside it.
    const parsed = new URL(url);
    host = parsed.host || new URL(parsed.pathname).host || host;
  } catch {
    // Shown whole.
  }
  const site = siteKey(origin === undefined ? url : `${origin}/`);
  if (site) host = siteText(site);
  await conversations.change(tabId, (t) => fenceBlocked(t, url, host, method, file));
}

// A tab that a task's tab (or a tab it opened) opens while the fence is up carries the same fence.
// Its first request was already judged by the rules for unknown tabs when the task's sites started
// it; one started otherwise (another site's frame in the page) and leading off the task's sites is
// closed, and the task's overlay asks.
chrome.tabs.onCreated.addListener((tab) => void onTabOpened(tab));

async function onTabOpened(tab: chrome.tabs.Tab): Promise<void> {
  // (A tab opened to a web address: not the browser's new-tab page, nor a blank tab made by a tool.)
  // (A tab opened to a document without a request, about:blank or blob:, is judged by its
  // document's origin when it commits: fence.ts, by its opener's task.)
  const url = tab.pendingUrl ?? tab.url ?? "";
  if (tab.id === undefined || tab.openerTabId === undefined || !/^https?:/.test(url)) return;
  const task = await fence.taskOf(tab.openerTabId);
  if (task === null) return;
  await fence.adoptOpenedTab(task, tab.id);
  if (await fence.onApprovedSite(task, url)) return;
  // The rules may have blocked it already (its block report closes the tab): give it a moment.
  await new Promise((r) => setTimeout(r, 500));
  if (!(await chrome.tabs.get(tab.id).then(() => true, () => false)) || fence.blockedSince(tab.id, Date.now() - 2_000)) return;
  await chrome.tabs.remove(tab.id).catch(() => {});
  const list = blockedRequests.get(task) ?? [];
  blockedRequests.set(task, [...list, { tabId: task, inTab: tab.id, opened: true, url, method: "GET", topLevel: true }].slice(-8));
  await showFenceCard(task, url, "GET");
}

/** Where the agent's record of a tab's conversation is kept (memory only, like the transcript). */
const historyKey = (tabId: number) => `agent:${tabId}`;

/** A message from the content script in `tabId`'s top frame: it acts on that tab only. */
function fromTab(msg: TabToWorker, tabId: number, tab: chrome.tabs.Tab | undefined): Promise<unknown> | undefined {
  const url = tab?.url;
  switch (msg.kind) {
    case "watch_chat":
      // Whole, on the channel its changes come by (so none of them can overtake it).
      void conversations.snapshot(tabId).then((chat) => toTab(tabId, { kind: "chat", chat }));
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

/** Starts the engine if nothing runs yet (a failed one is retried: its cause may be gone), or brings back a torn-down one. */
function wakeEngine(): void {
  if (status.state === "idle" || status.state === "failed") void startEngine();
  // Chrome may have torn the offscreen document down: bring the engine back (the views show it starting).
  else if (status.state === "ready") void restartIfGone();
}

/** Messages typed in a tab before the engine was ready, sent when it is (memory only: a restarted worker drops them, as storage does). */
const queued = new Map<number, { text: string; selection: string | null }[]>();

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
      // A running task is steered with the text alone: the selection waits for the next task.
      const selection = running || typeof input.selection !== "string" || !input.selection ? null : input.selection;
      const ready = status.state === "ready" && status.model !== null;
      await conversations.change(tabId, (t) => userMessage(t, text, !ready, selection));
      if (ready) return startTask(tabId, text, selection);
      queued.set(tabId, [...(queued.get(tabId) ?? []), { text, selection }]);
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
      return fenceDecision(tabId, entry.url, input.allow);
    }
    case "continue":
      await conversations.change(tabId, continued);
      return controlTask(tabId, { action: "continue" });
    case "clear": {
      queued.delete(tabId);
      voice.dropRecording(tabId, voiceHost);
      await controlTask(tabId, { action: "forget" });
      await conversations.change(tabId, (t) => ({ ...emptyTranscript(), open: t.open }));
      return;
    }
    case "retry":
      wakeEngine();
      return;
    case "install":
      // The loaded model's assistant, when that is what is offered; else the model a `needs_model` status offers.
      if (status.state === "ready" && status.model?.drafter_offer?.id === input.model_id) void install({ kind: "drafter" });
      else if (status.state === "ready" && status.model?.projector_offer?.id === input.model_id) void install({ kind: "projector" });
      else if (status.state === "needs_model" && status.model.id === input.model_id) void install({ kind: "model", modelId: input.model_id });
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
      // On the tab's page: the tab scrolls to it and outlines it. Another page's (read_link): that
      // page in a new tab, fenced like any tab the task opens.
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
    for (const { text, selection } of messages) void startTask(tabId, text, selection);
  }
}

/** A message from the offscreen document (the engine). */
function fromEngine(msg: EngineToWorker): Promise<unknown> | undefined {
  // Any message shows the engine is alive: the waits on it start counting its silence again.
  for (const heard of engineHeard) heard();
  switch (msg.kind) {
    case "offscreen_ready":
      onOffscreenReady?.();
      break;
    case "engine_status":
      // Progress that arrives after the download or the load ended (messages may cross) is stale.
      if (msg.status.state === "installing" ? installInFlight : msg.status.state === "loading" ? startInFlight || installInFlight : true) setStatus(msg.status);
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
      if (status.state === "needs_model" || status.state === "failed") void startEngine();
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
  if ((await fence.isRaised(tabId)) && !(await fence.onApprovedSite(tabId, url))) return false;
  await chrome.tabs.create({ url, openerTabId: tabId });
  return true;
}

/** What the voice module needs of this worker. */
const voiceHost: voice.VoiceHost = {
  status: () => status,
  toOffscreen,
  startSpokenTask: (tabId, clip) => startTask(tabId, "", null, clip),
};

/**
 * Starts a task in `tabId` on the page it shows now (its committed URL and title, as the browser
 * reports them); `voice`: the clip of a spoken request, which the offscreen document holds.
 */
async function startTask(tabId: number, text: string, selection: string | null, voiceClip: number | null = null): Promise<void> {
  const settings = await loadSettings();
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  const url = tab?.url;
  if (!tab || isSiteDisabled(settings, url)) return;
  const page = url ? { url, title: tab.title ?? "" } : null;
  try {
    await ensureEngine();
    await fence.raise(tabId, url);
    // An engine that lost the tab's conversation (its document was recreated) takes it up again.
    const history: unknown = (await chrome.storage.session.get(historyKey(tabId)))[historyKey(tabId)] ?? null;
    await toOffscreen({ kind: "start_task", tab_id: tabId, text, selection, page, settings: taskSettings(settings), history, voice: voiceClip });
  } catch (error) {
    void fence.lift(tabId, true).catch(() => {});
    await conversations.change(tabId, (t) => applyUpdate(t, { update: "refused", refusal: { kind: "engine_not_running", detail: String(error) } }));
  }
}

/**
 * The user's answer to a fence card. Only a request this tab really had blocked can be allowed
 * (a page cannot approve a site by sending the message itself); allowed, its site joins the
 * task's set, and a blocked page is opened.
 */
async function fenceDecision(tabId: number, url: string, allow: boolean): Promise<boolean> {
  const list = blockedRequests.get(tabId) ?? [];
  const at = list.findIndex((b) => b.url === url);
  if (at < 0) return false;
  const [blocked] = list.splice(at, 1);
  if (blocked?.download !== undefined) return downloads.decide(tabId, blocked.download, allow);
  if (!allow || !blocked) return true;
  // A navigation without a request (blob:, about:blank…): its origin's site is approved; the
  // document is not made again (the page may go there again, and now may).
  await fence.approve(tabId, blocked.origin === undefined ? url : `${blocked.origin}/`);
  // The user's Allow opens it where the page tried to: this tab, or a new one (which the fence follows).
  if (blocked.topLevel && blocked.method === "GET" && /^https?:/i.test(url)) {
    if (blocked.opened) await chrome.tabs.create({ url, openerTabId: tabId });
    else await chrome.tabs.update(tabId, { url });
  }
  return true;
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
  if (action.action === "forget") {
    await fence.forget(tabId).catch(() => {});
    await chrome.storage.session.remove(historyKey(tabId)).catch(() => {});
  } else {
    await fence.lift(tabId, true).catch(() => {});
  }
  await told;
  return undefined;
}

function toOffscreen(msg: WorkerToEngine): Promise<unknown> {
  return sendToEngine(msg);
}

function toTab(tabId: number, msg: WorkerToTab): void {
  // Only the top frame's content script shows the overlay.
  sendToTab(tabId, msg).catch(() => {});
}

function setStatus(next: EngineStatus): void {
  // Failures reach tabs in the browser's language (the offscreen document has no chrome.i18n).
  status = next.state === "failed" ? { ...next, failure: localizeFailure(next.failure) } : next;
  for (const port of panels.keys()) toPanel(port, { kind: "engine_status", status });
  if (status.state === "ready" && status.model !== null) sendQueued();
}

async function restartIfGone(): Promise<void> {
  if (!(await chrome.offscreen.hasDocument())) await startEngine();
}

/** Makes sure the engine runs (a restarted worker or a torn-down offscreen document start it again). */
async function ensureEngine(): Promise<void> {
  if (!(status.state === "ready" && (await chrome.offscreen.hasDocument()))) await startEngine();
  // A model that is not installed is not replaced by whichever one the engine still holds.
  const now = status as EngineStatus;
  if (now.state === "needs_model" || now.state === "installing") throw new Error(`${now.model.name} is not installed yet: open Hearth and download it`);
}

async function startEngine(): Promise<void> {
  // A lost GPU device cannot be replaced inside the engine, nor a crashed (trapped) wasm instance
  // be used again, nor a stuck document be trusted: a fresh offscreen document starts from scratch.
  const recreate = status.state === "failed" && FRESH_ENGINE_FAILURES.includes(status.failure.kind);
  const seq = ++startSeq;
  const current = () => seq === startSeq;
  setStatus({ state: "starting" });
  startInFlight = true;
  let next: EngineStatus;
  try {
    if (recreate && (await chrome.offscreen.hasDocument())) await chrome.offscreen.closeDocument();
    await ensureOffscreenDocument();
    const settings = await loadSettings();
    engineModel = settings.model || null;
    engineVoice = settings.voice;
    // The offscreen document answers once the engine is ready (or failed), or with the model to
    // install; it sends `loading` statuses meanwhile.
    const answer = toOffscreen({ kind: "start_engine", model_id: engineModel, voice: engineVoice }) as Promise<EngineStatus | undefined>;
    next = (await fromTheEngine(answer, silenceMs(ENGINE_SILENCE_MS))) ?? engineFailure(new Error("the engine gave no answer"));
  } catch (error) {
    next = engineFailure(error);
  }
  // A later start (a Retry meanwhile) owns the status now.
  if (!current()) return;
  startInFlight = false;
  setStatus(next);
}

/** The engine did not answer the worker: it went silent, its document went away, or it was never created. */
class EngineSilent extends Error {
  constructor(readonly ms: number) {
    super(`the engine said nothing for ${Math.round(ms / 1000)} s`);
  }
}
class EngineGone extends Error {}

/** The failure for an error of `startEngine`'s (all of them offer Retry, which replaces the document). */
function engineFailure(error: unknown): EngineStatus {
  if (error instanceof EngineSilent) return { state: "failed", failure: failure("engine_load", "failureEngineSilent", Math.round(error.ms / 1000)) };
  // The message channel closed before the answer, or no document answered at all.
  const gone = error instanceof EngineGone || /message (port|channel) closed|Receiving end does not exist/i.test(String(error));
  if (gone) return { state: "failed", failure: failure("engine_load", "failureEngineGone", errorText(error)) };
  return { state: "failed", failure: failure("engine_load", "failureEngineStart", errorText(error)) };
}

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Called by `fromEngine` on every message of the engine's, for the waits below. */
const engineHeard = new Set<() => void>();

/**
 * `answer`, from the offscreen document, or a rejection: `EngineSilent` once the engine has sent
 * nothing for `silence` ms (every message it sends restarts the clock), `EngineGone` once the
 * document is gone (closed, or its renderer crashed). Never waits forever.
 */
function fromTheEngine<T>(answer: Promise<T>, silence: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let heard = Date.now();
    const onHeard = () => (heard = Date.now());
    engineHeard.add(onHeard);
    const check = setInterval(() => {
      if (Date.now() - heard > silence) return settle(() => reject(new EngineSilent(silence)));
      void chrome.offscreen.hasDocument().then((present) => present || settle(() => reject(new EngineGone("the offscreen document is gone"))));
    }, Math.min(DOCUMENT_CHECK_MS, silence / 2));
    const settle = (then: () => void) => {
      clearInterval(check);
      engineHeard.delete(onHeard);
      then();
    };
    answer.then(
      (value) => settle(() => resolve(value)),
      (error: unknown) => settle(() => reject(error)),
    );
  });
}

/**
 * What an install downloads in the offscreen document: a model, which streams `installing`
 * statuses and then loads; or the loaded model's assistant or vision file, after which the
 * document loads the model again with it (`loading` statuses meanwhile; a failed download leaves the model as it was).
 */
type Install = { kind: "model"; modelId: string } | { kind: "drafter" } | { kind: "projector" };

/** Runs one install at a time; its outcome becomes the status (Retry when the document was lost). */
async function install(what: Install): Promise<void> {
  if (installInFlight) return;
  installInFlight = true;
  const offered = what.kind === "model" && status.state === "needs_model" ? status.model : null;
  if (offered && what.kind === "model") {
    const progress = { model_id: what.modelId, file: "", bytes: offered.stored_bytes, total: offered.total_bytes, bytes_per_s: 0, eta_s: null };
    setStatus({ state: "installing", model: offered, progress });
  }
  let next: EngineStatus | undefined;
  try {
    await ensureOffscreenDocument();
    // A drafter or a projector belongs to the settings' model ("" is the build's default), which offered it.
    const message: WorkerToEngine =
      what.kind === "model"
        ? { kind: "install_model", model_id: what.modelId }
        : { kind: what.kind === "drafter" ? "install_drafter" : "install_projector", model_id: (await loadSettings()).model };
    const answer = toOffscreen(message) as Promise<EngineStatus | undefined>;
    next = await fromTheEngine(answer, silenceMs(INSTALL_SILENCE_MS));
  } catch (error) {
    // A document that went away or went silent is replaced by Retry, as after a failed start.
    const lost = error instanceof EngineSilent || error instanceof EngineGone;
    next = lost ? engineFailure(error) : { state: "failed", failure: failure("model_download", "failureDownloadStopped", String(error)) };
  } finally {
    installInFlight = false;
  }
  if (next) setStatus(next);
}

/** Creates the offscreen document once and waits (a bounded time) until its script listens. */
async function ensureOffscreenDocument(): Promise<void> {
  if (offscreenStarting) return offscreenStarting;
  offscreenStarting = (async () => {
    if (await chrome.offscreen.hasDocument()) return;
    const ready = new Promise<void>((resolve) => (onOffscreenReady = resolve));
    await chrome.offscreen.createDocument({
      url: OFFSCREEN_URL,
      reasons: [chrome.offscreen.Reason.WORKERS, chrome.offscreen.Reason.USER_MEDIA],
      justification: "Runs Hearth's language model on the GPU with WebGPU, and records a spoken request when the user presses Hearth's microphone button.",
    });
    await fromTheEngine(ready, silenceMs(OFFSCREEN_READY_MS));
  })();
  try {
    await offscreenStarting;
  } finally {
    offscreenStarting = null;
  }
}
