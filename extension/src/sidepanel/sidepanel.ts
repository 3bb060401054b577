// The side panel (sidepanel.html, manifest `side_panel`): a view of the conversation of its window's
// active tab (chat/view/live-chat.ts), as that tab's overlay is. It follows tab switches
// (tabs.onActivated) and page loads (tabs.onUpdated).
//
// The service worker owns every tab's conversation (worker/conversations.ts). Over a port this
// page says which tab it shows (`watch_tab`); the worker answers with the tab's state, the engine's
// state and the conversation, whole, and sends its changes (`chat`) as it does to the tab's
// overlay. What the user does here goes back as `input` naming the tab; the worker does it only for
// the tab this port watches. The element a confirmation is about is outlined on the page by the
// tab's overlay, which follows the same conversation. A site the user turned Hearth off on gets
// nothing: the panel says so.

import type { ChatInput, PanelToWorker, WorkerToPanel } from "../generated/protocol";
import { createLiveChat } from "../chat/view/live-chat";
import type { Listen } from "../chat/view/composer";
import { OVERLAY_CSS } from "../chat/view/style";
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

/** The tab shown, and its site. */
let tabId: number | null = null;
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

const live = createLiveChat({
  surface: "panel",
  send: input,
  handlers: {
    ownModel: (name) => ownModels.find((m) => m.name === name),
    saveSettings: (patch) =>
      void saveSettings(patch).then((s) => {
        ui.form?.show(s);
        ui.saved.textContent = t("settingsSaved");
      }),
  },
  onWaiting: (entryId) => ui.focusCard(entryId),
  listen,
  root: shadow,
  data,
  site: "",
  isOpen: () => true,
});
const { ui } = live;

// Where the chat cannot be: a notice in its place.
const notice = el("p", { class: "side-notice", role: "status" });
notice.hidden = true;
ui.panel.insertBefore(notice, ui.engine.element);
shadow.append(ui.panel);
data.state = "open";
data.view = "chat";

ui.disableSite.addEventListener("click", () => {
  if (!site) return;
  if (live.transcript().task === "running") input({ input: "stop" });
  void loadSettings().then((s) => saveSettings({ disabledSites: s.disabledSites.includes(site) ? s.disabledSites : [...s.disabledSites, site] }));
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
  }
}

/** Shows tab `id`'s chat (the window's active tab). */
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
