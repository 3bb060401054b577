// The overlay: a launcher button and the chat (chat/view/live-chat.ts) in the page, inside the
// closed shadow root of its host (./overlay-host.ts). It is one view of the tab's conversation,
// which the service worker owns (worker/conversations.ts): it is sent the conversation's changes
// (`chat`) and the engine's state (`engine_status`), and sends what the user does (`chat_input`), as
// a side panel showing the tab does. While a panel shows the tab the overlay stays closed and its
// launcher hidden, but it still follows the conversation: it outlines the page element a
// confirmation is about and scrolls to a cited passage, which only the page's side can do.
// Test builds (__HEARTH_TEST_BUILD__) mirror the state for tests as data-* attributes of a hidden
// <div class="test-state"> inside the shadow root (read over the DevTools protocol): data-state
// (open/closed), data-view (chat/settings), data-engine, data-adapter, data-self-test, data-values,
// data-fused-error, data-failure, data-model, data-offer, data-download, data-load, data-task,
// data-answer, data-cards, data-pending-call, data-side-panel (a side panel shows this tab),
// data-passage, data-recording (the seconds recorded, while the microphone records). Release
// builds mirror nothing.

import type { ChatInput, EngineStatus, SettingsView } from "../generated/protocol";
import { sendFromTab } from "../shared/messages";
import type { OwnModel } from "../shared/own-models";
import { siteOf } from "../shared/settings";
import { clip, el } from "../shared/ui/builders";
import { t } from "../shared/ui/i18n";
import { OVERLAY_CSS } from "../chat/view/style";
import type { Listen } from "../chat/view/composer";
import { createLiveChat } from "../chat/view/live-chat";
import { sourceOf, waitingConfirmation, type Entry, type Transcript } from "../chat/transcript";
import { createHost, keepOnPage, type HostParts } from "./overlay-host";
import { elementByIndex } from "./page-tools/elements";
import { targetOutline } from "./ui/outline";
import { findPassage } from "./ui/passage";

/** The most page text `openWithSelection` takes into the composer. */
const MAX_QUOTE = 4000;

interface Overlay {
  openWithSelection(): void;
  settingsChanged(view: SettingsView): void;
  /** A side panel shows this tab's chat (true), or no longer does. */
  panelShown(shown: boolean): void;
  /** A change of the tab's conversation, from its owner. */
  chat(patch: unknown): void;
  engineStatus(status: EngineStatus): void;
  /** Scrolls to passage `number` and outlines it (a chip clicked in the side panel). */
  showPassage(number: number): void;
  unmount(): void;
}

let parts: HostParts | null = null;
let overlay: Overlay | null = null;
/** Whether a side panel shows this tab (told by the worker; kept for an overlay mounted later). */
let sidePanelShown = false;

/**
 * Run first, at document_start: the shield's capture listeners go in before any page script's, and
 * the host with its closed shadow root is made before a page script could define <hearth-overlay>.
 */
export function protectOverlay(): void {
  parts ??= createHost();
}

/**
 * Hides everything Hearth draws on the page (or shows it again) for a screenshot: the model sees
 * the page as it is. Resolves once a frame without it has been painted.
 */
export async function hideForCapture(hidden: boolean): Promise<void> {
  for (const child of parts?.shadow.children ?? []) {
    if (child instanceof HTMLElement) child.style.visibility = hidden ? "hidden" : "";
  }
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
}

/** Mounts the overlay once the document has its root element and has been parsed. */
export function mountOverlayWhenReady(): void {
  protectOverlay();
  if (document.readyState !== "loading") return mountOverlay();
  // On window, in the capture phase, registered before the page's: the page cannot stop it.
  const ready = () => {
    if (document.readyState === "loading") return;
    window.removeEventListener("DOMContentLoaded", ready, true);
    window.removeEventListener("load", ready, true);
    mountOverlay();
  };
  window.addEventListener("DOMContentLoaded", ready, true);
  window.addEventListener("load", ready, true);
}

/**
 * Mounts the overlay. The worker registers the content script only for sites the user has not
 * disabled; the check here also covers a site disabled since, and brings the overlay back when it
 * is enabled again.
 */
export function mountOverlay(): void {
  if (overlay) return;
  protectOverlay();
  overlay = createOverlay(parts!);
  // The settings are closed to content scripts: the worker tells this tab its view of them.
  sendFromTab({ kind: "get_settings" }).then((view) => settingsChanged(view as SettingsView | undefined), () => {});
}

/** The worker's view of the settings for this tab (now, or after a change on Hearth's own pages). */
export function settingsChanged(view: SettingsView | undefined): void {
  if (!view || typeof view !== "object") return;
  if (view.disabled) return unmountOverlay();
  if (!overlay) overlay = createOverlay(parts!);
  overlay.settingsChanged(view);
}

/** Opens the panel with the page's selection (if any) shown above the composer: the keyboard shortcut. */
export function openWithSelection(): void {
  overlay?.openWithSelection();
}

/** A side panel shows this tab's chat, or no longer does (the worker's `panel_attached`). */
export function setPanelAttached(attached: boolean): void {
  sidePanelShown = attached;
  overlay?.panelShown(attached);
}

/** A change of this tab's conversation (the worker's `chat`). */
export function chatChanged(patch: unknown): void {
  overlay?.chat(patch);
}

/** The engine's state (the worker's `engine_status`). */
export function engineStatus(status: EngineStatus): void {
  overlay?.engineStatus(status);
}

/** A chip clicked in the side panel (the worker's `show_passage`). */
export function showPassage(number: number): void {
  overlay?.showPassage(number);
}

/** Removes the overlay from the page (Hearth was disabled on this site). */
export function unmountOverlay(): void {
  overlay?.unmount();
  overlay = null;
}

function createOverlay({ host, shadow, shield }: HostParts): Overlay {
  // Handlers for the events the shield keeps from the page (removed on unmount).
  const removals: (() => void)[] = [];
  const listen: Listen = (type, handler) => void removals.push(shield.on(type, handler));
  // The state mirror of test builds; release builds write into an object nobody sees.
  const mirror = __HEARTH_TEST_BUILD__ ? el("div", { class: "test-state", hidden: true, "aria-hidden": "true" }) : null;
  const data: DOMStringMap = mirror ? mirror.dataset : {};
  // The page element a waiting confirmation is about, and a cited passage the user asked to see.
  const outline = targetOutline();
  const passageOutline = targetOutline("passage-outline");
  /** The user's own model files (chrome.storage.local): the engine view marks them as not verified. */
  let ownModels: OwnModel[] = [];
  /** This view watches the engine's state (the user opened it, or a task runs). */
  let connected = false;
  let cutOff = false;
  let panelShown = false;

  const here = (url: string) => url.split("#")[0] === location.href.split("#")[0];

  const live = createLiveChat({
    surface: "overlay",
    send: input,
    handlers: {
      ownModel: (name) => ownModels.find((m) => m.name === name),
      openOptions: () => send({ kind: "open_options" }),
      openSidePanel: () => send({ kind: "open_side_panel" }),
    },
    sourceOpens(transcript, number) {
      const url = sourceOf(transcript, number)?.url;
      return url && !here(url) ? url : null;
    },
    showSourceHere(transcript, number) {
      const source = sourceOf(transcript, number);
      // Another page's passage (read_link): the worker opens that page in a new tab, fenced like
      // any tab the task opens, and never outside the task's sites while it runs.
      if (!source || !here(source.url)) return false;
      showFound(number, source.text);
      return true;
    },
    onWaiting(entryId, full) {
      // A card comes to wait for the user: the overlay opens at it (the side panel does, if it shows
      // this tab). A confirmation or question that waited before this page loaded shows when the
      // user opens the overlay (the launcher is marked); a fence card opens it on the new page too,
      // since the page was loaded again by the fence itself, taking the tab back from where the
      // page tried to go, and the card asks about that.
      const fence = live.transcript().entries.find((e) => e.id === entryId)?.kind === "fence";
      if (panelShown || (full && !fence)) return;
      if (!ui.settingsView.hidden) ui.showSettings(false);
      setOpen(true, false);
      ui.focusCard(entryId);
    },
    onPatch(transcript, full) {
      outlineTarget(transcript);
      // Something is happening in this tab's conversation: follow the engine too.
      if (!connected && (!full || ["running", "confirm", "ask"].includes(transcript.task))) connect();
      // The overlay was open on the previous page of this tab while its task ran: open again.
      if (full && transcript.open && panel.hidden && !panelShown && transcript.task === "running") setOpen(true, false);
    },
    listen,
    root: shadow,
    data,
    site: siteOf(location.href) ?? location.origin,
    isOpen: () => !panel.hidden,
  });
  const { ui } = live;
  const { launcher, panel, close, composer, settingsView, disableSite } = ui;
  // A constructed stylesheet, not a <style> element: a page's strict CSP (style-src) would block
  // the element's inline CSS, but does not apply to stylesheets built through the CSSOM.
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(OVERLAY_CSS);
  shadow.adoptedStyleSheets = [sheet];
  // The outline first: the launcher and the panel are drawn over it.
  shadow.replaceChildren(outline.element, outline.marker, passageOutline.element, launcher, panel);
  if (mirror) shadow.append(mirror);

  data.state = "closed";
  data.view = "chat";
  data.engine = "idle";
  listen("keydown", (e) => {
    // (An Esc that dropped a recording closes nothing.)
    if (e instanceof KeyboardEvent && e.key === "Escape" && !e.isComposing && !e.defaultPrevented && !panel.hidden) {
      e.preventDefault();
      setOpen(false);
    }
  });

  // --- opening and closing ---------------------------------------------------------------------
  function setOpen(open: boolean, focus = true): void {
    if (open === !panel.hidden) return;
    panel.hidden = !open;
    launcher.setAttribute("aria-expanded", String(open));
    data.state = open ? "open" : "closed";
    input({ input: "shown", open });
    if (open) {
      connect();
      ui.flush();
      ui.view.scrollToEnd();
      if (focus) (settingsView.hidden ? composer.textarea : ui.settingsToggle).focus();
    } else if (focus) {
      launcher.focus();
    }
  }

  /** Watches the engine's state (starting the engine on first use, retrying a failed one). */
  function connect(): void {
    connected = true;
    send({ kind: "watch_engine" });
  }

  launcher.addEventListener("click", () => setOpen(panel.hidden));
  close.addEventListener("click", () => setOpen(false));

  // --- talking to the worker -------------------------------------------------------------------
  function send(msg: Parameters<typeof sendFromTab>[0]): void {
    const failed = () => {
      // The extension was reloaded or updated under this page: its old content script is cut off.
      if (!cutOff) live.showLocalError(t("extensionReloaded"));
      cutOff = true;
    };
    try {
      sendFromTab(msg).then(undefined, failed);
    } catch {
      failed();
    }
  }

  function input(chatInput: ChatInput): void {
    send({ kind: "chat_input", input: chatInput });
  }

  disableSite.addEventListener("click", () => {
    if (live.transcript().task === "running") input({ input: "stop" });
    // The one setting a tab may change (towards less): the worker adds this tab's own site.
    send({ kind: "disable_site" });
    unmountOverlay();
  });

  // --- the page's side -------------------------------------------------------------------------
  /** Outlines the page element the waiting confirmation is about, until it is decided. */
  function outlineTarget(transcript: Transcript): void {
    const confirming = waitingConfirmation(transcript);
    outline.show(confirming ? targetElement(confirming) : null, confirming?.target?.point ?? null);
  }

  function showFound(number: number, text: string): void {
    const found = findPassage(text);
    data.passage = found ? String(number) : "";
    if (!found) return;
    found.scrollIntoView({ block: "center", behavior: "instant" });
    passageOutline.show(found);
  }

  function showInPanel(shown: boolean): void {
    panelShown = shown;
    data.sidePanel = String(shown);
    // The chat is in the side panel now: one place at a time.
    launcher.hidden = shown;
    if (shown) setOpen(false, false);
  }

  ui.updateChrome();
  const stopKeeping = keepOnPage(host);
  if (sidePanelShown) showInPanel(true);
  // This page's view of the tab's conversation: the worker sends it whole, then its changes.
  send({ kind: "watch_chat" });

  return {
    openWithSelection() {
      const selection = document.getSelection();
      const inside = selection?.anchorNode ? host.contains(selection.anchorNode) || selection.anchorNode === host : false;
      const quote = inside ? "" : (selection?.toString().trim() ?? "");
      if (!settingsView.hidden) ui.showSettings(false);
      setOpen(true);
      if (quote) composer.setSelection(clip(quote, MAX_QUOTE));
      else composer.focus();
    },
    settingsChanged(view) {
      ownModels = Array.isArray(view.own_models) ? (view.own_models as OwnModel[]) : [];
      ui.renderEngine();
    },
    panelShown: showInPanel,
    chat: (patch) => void live.applyChat(patch),
    engineStatus: (status) => live.setStatus(status),
    showPassage(number) {
      const source = sourceOf(live.transcript(), number);
      if (source && here(source.url)) showFound(number, source.text);
    },
    unmount() {
      for (const remove of removals.splice(0)) remove();
      outline.show(null);
      stopKeeping();
      host.remove();
      shadow.replaceChildren();
    },
  };
}

/** The page element a confirmation is about: its target's number, or the call's `index`. */
function targetElement(entry: Extract<Entry, { kind: "confirm" }>): Element | null {
  const index = entry.target?.index ?? entry.args.index;
  return typeof index === "number" && Number.isInteger(index) && index > 0 ? elementByIndex(index) : null;
}
