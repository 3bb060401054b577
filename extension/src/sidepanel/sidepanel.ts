// Hearth's chat page (sidepanel.html): one page, two mounts, each a view of one tab's conversation
// (chat/view/live-chat.ts).
// - In Chrome's side panel it shows its window's active tab, following tab switches
//   (tabs.onActivated) and page loads (tabs.onUpdated).
// - In a tab, framed by the overlay's host (content/overlay.ts), it is the overlay: it shows its
//   own tab. The frame runs in the extension's process, so what the person types, selects, reads
//   or decides here never enters the page's document (./overlay-mount.ts: what the overlay adds).
//
// The service worker owns every tab's conversation (worker/conversations.ts). Over a port this
// page says which tab it shows (`watch_tab`); the worker answers with the tab's state, the engine's
// state and the conversation, whole, and sends its changes (`chat`). What the user does here goes
// back as `input` naming the tab; the worker does it only for the tab this port watches (a framed
// page: only the tab the browser says it is in). The element a confirmation is about is outlined
// on the page by the tab's content script, which follows the same conversation. A site the user
// turned Hearth off on gets nothing: the panel says so.

import type { ChatInput, PanelToWorker, WorkerToPanel } from "../generated/protocol";
import { createLiveChat } from "../chat/view/live-chat";
import type { Listen } from "../chat/view/composer";
import { OVERLAY_CSS } from "../chat/view/style";
import { sourceOf } from "../chat/transcript";
import { isMessage } from "../shared/messages";
import { watchOwnModels, type OwnModel } from "../shared/own-models";
import { pageToolsMode, saveSettings, loadSettings } from "../shared/settings";
import type { ToolMode } from "../generated/protocol";
import { el } from "../shared/ui/builders";
import { t } from "../shared/ui/i18n";
import { mountOverlay, type OverlayMount } from "./overlay-mount";

/** The port's name the worker accepts from this page only (by its sender). */
const PORT_NAME = "hearth-panel";

/** Framed in a tab: the overlay. (Chrome's side panel is a top-level document.) */
const framed = window.parent !== window;

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

/** The tab shown, its site and (framed) its page's address. */
let tabId: number | null = null;
let site = "";
let tabUrl = "";
let ownModels: OwnModel[] = [];
/** What the overlay adds (framed only). */
let overlay: OverlayMount | null = null;

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
const here = (url: string) => url.split("#")[0] === tabUrl.split("#")[0];

const live = createLiveChat({
  surface: framed ? "overlay" : "panel",
  send: input,
  listTabs: () => tabId !== null && post({ kind: "list_tabs", tab_id: tabId }),
  handlers: framed
    ? {
        ownModel: (name) => ownModels.find((m) => m.name === name),
        openOptions: () => void chrome.tabs.create({ url: chrome.runtime.getURL("options.html") }),
        openSidePanel: () => overlay?.openSidePanel(),
      }
    : {
        ownModel: (name) => ownModels.find((m) => m.name === name),
        saveSettings: (patch) =>
          void saveSettings(patch).then((s) => {
            ui.form?.show(s);
            ui.saved.textContent = t("settingsSaved");
          }),
      },
  // Framed, a chip of another page's passage names that page (the worker opens it).
  sourceOpens: framed
    ? (transcript, number) => {
        const url = sourceOf(transcript, number)?.url;
        return url && tabUrl && !here(url) ? url : null;
      }
    : undefined,
  onWaiting: (entryId) => ui.focusCard(entryId),
  // Framed, an Allow counts only where the person could see what they allowed.
  approval: framed ? { allowed: () => overlay?.seen() ?? false, refused: () => overlay?.covered() } : undefined,
  listen,
  root: shadow,
  data,
  site: "",
  isOpen: () => true,
});
const { ui } = live;
if (framed) {
  // The chat fills the frame the overlay's host draws.
  ui.panel.hidden = false;
  ui.panel.classList.add("side");
}

// Where the chat cannot be: a notice in its place.
const notice = el("p", { class: "side-notice", role: "status" });
notice.hidden = true;
ui.panel.insertBefore(notice, ui.engine.element);
shadow.append(ui.panel);
data.view = "chat";
if (!framed) data.state = "open";

ui.disableSite.addEventListener("click", () => {
  if (!site) return;
  if (live.transcript().task === "running") input({ input: "stop" });
  void loadSettings().then((s) => saveSettings({ disabledSites: s.disabledSites.includes(site) ? s.disabledSites : [...s.disabledSites, site] }));
});
// The tools pages of this site offer (WebMCP): on, ask every time, or off, for this site only.
const showPageTools = () => {
  if (site) void loadSettings().then((s) => (ui.pageTools.value = pageToolsMode(s, site)));
};
ui.pageTools.addEventListener("change", () => {
  if (!site) return;
  const mode = ui.pageTools.value as ToolMode;
  void loadSettings().then((s) => saveSettings({ pageTools: { ...s.pageTools, [site]: mode } }));
});
watchOwnModels((models) => {
  ownModels = models;
  ui.renderEngine();
});

function onWorkerMessage(msg: WorkerToPanel): void {
  if (msg.kind === "engine_status") return live.setStatus(msg.status);
  if (msg.tab_id !== tabId) return;
  switch (msg.kind) {
    case "tab_state": {
      data.tabState = msg.state;
      if (msg.site && msg.site !== site) {
        site = msg.site;
        ui.disableSite.textContent = t("disableSite", site);
        showPageTools();
      }
      const text = { ready: "", disabled: t("sidePanelSiteOff", msg.site ?? ""), unsupported: t("sidePanelUnsupported"), no_script: t("sidePanelReload"), gone: "" }[msg.state];
      notice.textContent = text;
      notice.hidden = !text;
      // Nothing to act on: no composer, no engine, no conversation.
      ui.chat.hidden = Boolean(text) || !ui.settingsView.hidden;
      ui.engine.element.hidden = Boolean(text);
      ui.disableSite.disabled = msg.state !== "ready";
      break;
    }
    case "chat":
      live.applyChat(msg.chat);
      break;
    case "open_tabs":
      ui.composer.showTabChoices(msg.tabs);
      break;
  }
}

/** Shows tab `id`'s chat. */
function show(id: number): void {
  const switched = id !== tabId;
  tabId = id;
  data.tab = String(id);
  if (switched) {
    live.reset();
    site = "";
  }
  post({ kind: "watch_tab", tab_id: id });
}

if (framed) {
  // The overlay: its own tab, for as long as this frame lives (a new page frames a new one).
  overlay = mountOverlay({ live, data });
  overlay.focusInitially();
  void chrome.tabs.getCurrent().then((tab) => {
    if (tab?.id === undefined) return;
    tabUrl = tab.url ?? "";
    overlay?.setTab(tab);
    show(tab.id);
  });
} else {
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
}
