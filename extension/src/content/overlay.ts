// The overlay: a launcher button and a panel inside a *closed* shadow root, so the page can neither
// read nor restyle it. The host element <hearth-overlay> carries nothing but its inline style:
// - it and its shadow root are made at document_start (protectOverlay), before any page script
//   could define a look-alike element, and are only ever reached through this module's variables,
//   never looked up in the document (a page may hold <hearth-overlay> elements of its own);
// - its box is set inline with !important (beats any page stylesheet) and set again when the page
//   changes its attributes; it is put back (a few times) when the page removes it;
// - keystrokes, text input, clipboard and focus events from inside never reach page listeners
//   (ui/shield.ts), which is why the overlay's handlers for those events are registered there.
// Test builds (__HEARTH_TEST_BUILD__) mirror the state for tests as data-* attributes of a hidden
// <div class="test-state"> inside the shadow root (read over the DevTools protocol): data-state
// (open/closed), data-view (chat/settings), data-engine, data-adapter, data-self-test, data-values,
// data-fused-error, data-failure, data-model, data-offer, data-download, data-load, data-task,
// data-answer, data-cards, data-pending-call, data-side-panel (a side panel shows this tab).
// Release builds mirror nothing.
//
// The pieces live in ./ui: chat.ts (the chat component, which the side panel mounts too),
// panel.ts (the elements), transcript.ts (the conversation as data), transcript-view.ts (its
// entries on screen), cards.ts (entries → DOM), markdown.ts (safe rendering), composer.ts,
// engine-view.ts, persist.ts; the settings form is shared/ui's.
//
// This file owns the tab's conversation, also while a side panel shows it: the panel is told the
// chat (`panel_chat`, through the worker) and its controls come back as `panel_input`, done here
// with the same handlers as the overlay's own controls; the overlay stays closed meanwhile.

import type { ChatInput, Decision, EngineStatus, SettingsView, TabToWorker, TaskAction, WorkerToTab } from "../generated/protocol";
import { isFromWorker, isMessage, sendFromTab } from "../shared/messages";
import type { OwnModel } from "../shared/own-models";
import { siteOf } from "../shared/settings";
import { OVERLAY_CSS } from "./overlay-style";
import { type Listen } from "./ui/composer";
import { clip, el } from "../shared/ui/builders";
import type { CardActions } from "./ui/cards";
import { createChat } from "./ui/chat";
import type { PanelChat } from "./ui/chat-state";
import { t } from "../shared/ui/i18n";
import { targetOutline } from "./ui/outline";
import { findPassage } from "./ui/passage";
import { TranscriptStore } from "./ui/persist";
import { installShield, type Shield } from "./ui/shield";
import {
  answer,
  applyUpdate,
  continued,
  decide,
  decideFence,
  emptyTranscript,
  fenceBlocked,
  localError,
  markSent,
  pendingAsk,
  sourceOf,
  userMessage,
  type Touched,
  type Transcript,
} from "./ui/transcript";

/** The most page text `openWithSelection` takes into the composer. */
const MAX_QUOTE = 4000;

interface Overlay {
  openWithSelection(): void;
  settingsChanged(view: SettingsView): void;
  /** A side panel shows this tab's chat (true), or no longer does. */
  panelShown(shown: boolean): void;
  /** What the user did in the side panel showing this tab. */
  panelInput(input: ChatInput): void;
  unmount(): void;
}

/** How soon a change reaches the side panel (bursts of tokens go as one message). */
const PANEL_DELAY_MS = 40;

/** The host's box, set inline with !important: `all: initial` first, then what it needs. */
const HOST_STYLE: [string, string][] = [
  ["all", "initial"],
  ["position", "fixed"],
  ["right", "16px"],
  ["bottom", "16px"],
  ["z-index", "2147483647"],
  ["display", "block"],
  ["visibility", "visible"],
  ["opacity", "1"],
  // Not reset by `all`.
  ["direction", "ltr"],
  ["unicode-bidi", "isolate"],
];

/** How many times the host is put back after the page removed it. */
const MAX_REATTACH = 3;

interface HostParts {
  host: HTMLElement;
  shadow: ShadowRoot;
  shield: Shield;
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
  if (parts) return;
  const shield = installShield();
  const host = document.createElement("hearth-overlay");
  const shadow = host.attachShadow({ mode: "closed" });
  shield.guard(host, shadow);
  parts = { host, shadow, shield };
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

/** What the user did in the side panel showing this tab (the worker's `panel_input`). */
export function panelInput(input: ChatInput): void {
  overlay?.panelInput(input);
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
  const outline = targetOutline();
  // A cited passage the user asked to see (a citation chip).
  const passageOutline = targetOutline("passage-outline");

  // --- state -----------------------------------------------------------------------------------
  /** The user's own model files (chrome.storage.local): the engine view marks them as not verified. */
  let ownModels: OwnModel[] = [];
  const site = siteOf(location.href) ?? location.origin;
  let transcript: Transcript = emptyTranscript();
  let status: EngineStatus = { state: "idle" };
  /** The download `id` asks for: the loaded model's assistant when that is what is offered, else a model. */
  const installMessage = (id: string): TabToWorker =>
    status.state === "ready" && status.model?.drafter_offer?.id === id ? { kind: "install_drafter", model_id: id } : { kind: "install_model", model_id: id };
  /** Messages typed before the model was ready, sent when it is. */
  const queued: TabToWorker[] = [];
  const store = new TranscriptStore();
  // A page leaving (reload, navigation) takes the saves still waiting their turn with it: send the
  // latest now, so that the conversation the page comes back to is the one it left.
  const saveOnLeave = () => void store.flush();
  window.addEventListener("pagehide", saveOnLeave);
  removals.push(() => window.removeEventListener("pagehide", saveOnLeave));
  let restored = false;
  let cutOff = false;
  let connected = false;
  /** A side panel shows this tab: the overlay stays closed and sends it the chat instead. */
  let panelShown = false;

  const engineReady = () => status.state === "ready" && status.model !== null;

  // --- structure -------------------------------------------------------------------------------
  const actions: CardActions = {
    decide(entryId: number, decision: Decision) {
      const entry = transcript.entries.find((e) => e.id === entryId);
      const callId = entry?.kind === "confirm" ? entry.callId : null;
      const touched = decide(transcript, entryId, decision);
      if (!touched.length || callId === null) return;
      commit(touched);
      // The decision names the call it answers: the engine refuses it for any other.
      control({ action: "confirm", call_id: callId, decision });
      composer.focus();
    },
    fence(entryId: number, allow: boolean) {
      const entry = decideFence(transcript, entryId, allow);
      if (!entry) return;
      commit([entryId]);
      send({ kind: "fence_decision", url: entry.url, allow });
      composer.focus();
    },
    choose(entryId: number, option: string) {
      const touched = answer(transcript, entryId, option);
      if (!touched.length) return;
      commit(touched);
      control({ action: "answer", text: option });
      composer.focus();
    },
    hasSource: (number: number) => sourceOf(transcript, number) !== undefined,
    sourceOpens(number: number) {
      const url = sourceOf(transcript, number)?.url;
      return url && url.split("#")[0] !== location.href.split("#")[0] ? url : null;
    },
    showSource(number: number) {
      const source = sourceOf(transcript, number);
      if (!source) return;
      const here = (url: string) => url.split("#")[0] === location.href.split("#")[0];
      // Another page's passage (read_link): that page, in a new tab.
      // (The worker opens it, fenced like any tab the task opens, and never outside the task's sites while it runs.)
      if (!here(source.url)) {
        return void send({ kind: "open_source", url: source.url }, (opened) => {
          if (opened === false) commit(localError(transcript, t("sourceNotOpened", source.url)));
        });
      }
      const found = findPassage(source.text);
      data.passage = found ? String(number) : "";
      if (!found) return;
      found.scrollIntoView({ block: "center", behavior: "instant" });
      passageOutline.show(found);
    },
  };

  const ui = createChat({
    surface: "overlay",
    handlers: {
      retry: () => connect(),
      install: (modelId) => send(installMessage(modelId)),
      openModelOptions: () => send({ kind: "open_model_options" }),
      ownModel: (name) => ownModels.find((m) => m.name === name),
      submit,
      stop,
      openOptions: () => send({ kind: "open_options" }),
      openSidePanel: () => send({ kind: "open_side_panel" }),
    },
    actions,
    listen,
    root: shadow,
    data,
    outline,
    site,
    isOpen: () => !panel.hidden,
    transcript: () => transcript,
    status: () => status,
  });
  const { launcher, panel, close, continueButton, composer, settingsView, saved, clear, disableSite } = ui;
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
    if (e instanceof KeyboardEvent && e.key === "Escape" && !e.isComposing && !panel.hidden) {
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
    transcript.open = open;
    store.schedule(transcript);
    if (open) {
      connect();
      ui.flush();
      ui.view.scrollToEnd();
      if (focus) (settingsView.hidden ? composer.textarea : ui.settingsToggle).focus();
    } else if (focus) {
      launcher.focus();
    }
  }

  /**
   * Watches the engine (starting it on first use, retrying a failed one) and learns the tab id:
   * the worker tells it with a `tab_info` message, or in its answer to `watch_engine`.
   */
  function connect(): void {
    connected = true;
    send({ kind: "watch_engine" }, (reply) => {
      const tabId = (reply as { tab_id?: unknown } | undefined)?.tab_id;
      if (typeof tabId === "number") void restore(tabId);
    });
  }

  launcher.addEventListener("click", () => setOpen(panel.hidden));
  close.addEventListener("click", () => setOpen(false));

  // --- talking to the worker -------------------------------------------------------------------
  function send(msg: TabToWorker, onReply?: (reply: unknown) => void): void {
    const failed = () => {
      // The extension was reloaded or updated under this page: its old content script is cut off.
      if (!cutOff) commit(localError(transcript, t("extensionReloaded")));
      cutOff = true;
    };
    try {
      sendFromTab(msg).then(onReply, failed);
    } catch {
      failed();
    }
  }

  function control(action: TaskAction): void {
    send({ kind: "task_control", action }, (reply) => {
      // The worker voided a decision that came after the page moved the tab off the task's sites.
      const moved = (reply as { void_on?: string } | null)?.void_on;
      if (typeof moved === "string") commit(localError(transcript, t("decisionVoid", moved)));
    });
  }

  const listener = (message: unknown, sender: chrome.runtime.MessageSender) => {
    if (isMessage(message) && isFromWorker(sender)) onTabMessage(message as WorkerToTab);
    return false;
  };
  chrome.runtime.onMessage.addListener(listener);

  function onTabMessage(msg: WorkerToTab): void {
    switch (msg.kind) {
      case "engine_status":
        status = msg.status;
        ui.renderEngine();
        if (engineReady() && queued.length) {
          for (const m of queued.splice(0)) send(m);
          commit(markSent(transcript));
        }
        updateChrome();
        toPanel();
        break;
      case "tab_info":
        void restore(msg.tab_id);
        break;
      case "fence_blocked": {
        const touched = fenceBlocked(transcript, msg.url, msg.host, msg.method, msg.file ?? null);
        commit(touched);
        if (touched.length) needsUser(touched[0]);
        break;
      }
      case "task_update": {
        // After a navigation the task goes on: this page's overlay picks the conversation up.
        if (!connected) connect();
        const touched = applyUpdate(transcript, msg.update);
        commit(touched);
        if (msg.update.update === "event") {
          const type = msg.update.event.type;
          if (type === "confirm_request" || type === "ask_user") needsUser(touched[0]);
        }
        break;
      }
    }
  }

  /** A card waits for the user: open the panel and move focus to it (the side panel does, if it shows this tab). */
  function needsUser(entryId: number | undefined): void {
    if (panelShown) return;
    if (settingsView.hidden === false) ui.showSettings(false);
    setOpen(true, false);
    ui.focusCard(entryId);
  }

  // --- the side panel --------------------------------------------------------------------------
  let panelTimer: ReturnType<typeof setTimeout> | null = null;
  /** Sends the chat to the side panel showing this tab, soon (tokens arrive faster than frames). */
  function toPanel(): void {
    if (!panelShown || panelTimer !== null) return;
    panelTimer = setTimeout(() => {
      panelTimer = null;
      if (!panelShown) return;
      const chat: PanelChat = { transcript, status, site };
      send({ kind: "panel_chat", chat });
    }, PANEL_DELAY_MS);
  }

  function showInPanel(shown: boolean): void {
    panelShown = shown;
    data.sidePanel = String(shown);
    // The chat is in the side panel now: one place at a time.
    launcher.hidden = shown;
    if (shown) {
      setOpen(false, false);
      // Watches the engine (started for the panel as for the overlay) and restores the conversation.
      connect();
      toPanel();
    }
  }

  /** What the user did in the side panel, done as if done here. */
  function fromPanel(input: ChatInput): void {
    // Only while the worker says a panel shows this tab (it passes on only that panel's input).
    if (!panelShown) return;
    const entry = "entry_id" in input ? transcript.entries.find((e) => e.id === input.entry_id) : undefined;
    switch (input.input) {
      case "submit":
        submit(input.text, null);
        break;
      case "stop":
        stop();
        break;
      case "decide":
        // Only the card it was shown for, still waiting on that call.
        if (entry?.kind === "confirm" && entry.callId === input.call_id) actions.decide(entry.id, input.decision);
        break;
      case "choose":
        if (entry?.kind === "ask" && entry.callId === input.call_id) actions.choose(entry.id, input.option);
        break;
      case "fence":
        if (entry?.kind === "fence") actions.fence(entry.id, input.allow);
        break;
      case "continue":
        continueTask();
        break;
      case "clear":
        clearConversation();
        break;
      case "retry":
        connect();
        break;
      case "install":
        send(installMessage(input.model_id));
        break;
      case "open_model_options":
        send({ kind: "open_model_options" });
        break;
      case "show_source":
        actions.showSource(input.number);
        break;
    }
    toPanel();
  }

  // --- user actions ----------------------------------------------------------------------------
  function submit(text: string, selection: string | null): boolean {
    const ask = pendingAsk(transcript);
    if (ask) {
      commit(answer(transcript, ask.id, text));
      control({ action: "answer", text });
      return true;
    }
    // A running task is steered with the text alone: the selection waits for the next task.
    const quoted = transcript.task === "running" ? null : selection;
    if (quoted) composer.clearSelection();
    const message: TabToWorker = { kind: "start_task", text, selection: quoted };
    const ready = engineReady();
    commit(userMessage(transcript, text, !ready, quoted));
    if (ready) send(message);
    else {
      queued.push(message);
      connect();
    }
    return true;
  }

  function stop(): void {
    control({ action: "stop" });
    composer.setRunning(true, true);
  }

  function continueTask(): void {
    commit(continued(transcript));
    control({ action: "continue" });
    composer.focus();
  }

  function clearConversation(): void {
    control({ action: "forget" });
    queued.length = 0;
    const open = transcript.open;
    transcript = emptyTranscript();
    transcript.open = open;
    redrawAll();
    void store.clear().then(() => store.schedule(transcript));
    saved.textContent = t("conversationCleared");
  }

  continueButton.addEventListener("click", continueTask);
  clear.addEventListener("click", clearConversation);

  disableSite.addEventListener("click", () => {
    if (transcript.task === "running") control({ action: "stop" });
    // The one setting a tab may change (towards less): the worker adds this tab's own site.
    send({ kind: "disable_site" });
    unmountOverlay();
  });

  // --- rendering -------------------------------------------------------------------------------
  /** Records what changed; the DOM follows shortly (tokens arrive faster than frames). */
  function commit(touched: Touched): void {
    ui.commit(touched);
    store.schedule(transcript);
    toPanel();
  }

  function redrawAll(): void {
    ui.redrawAll();
    toPanel();
  }

  /** The state around the transcript: composer mode, Stop/Continue, usage, test hooks, launcher. */
  function updateChrome(): void {
    ui.updateChrome();
  }

  /** Restores this tab's stored conversation before what arrived since the page loaded. */
  async function restore(tabId: number): Promise<void> {
    if (restored) return;
    restored = true;
    const stored = await store.open(tabId);
    if (stored && stored.entries.length) {
      const live = transcript;
      const merged = stored;
      for (const entry of live.entries) merged.entries.push({ ...entry, id: merged.nextId++ });
      if (live.entries.length) {
        merged.task = live.task;
        merged.canContinue = live.canContinue;
        merged.answer = live.answer ?? merged.answer;
        merged.usage = live.usage ?? merged.usage;
      }
      merged.open = !panel.hidden;
      const wasOpen = stored.open;
      transcript = merged;
      redrawAll();
      // The panel was open on the previous page of this tab while its task ran: keep it open.
      if (wasOpen && panel.hidden && !panelShown && (transcript.task === "running" || live.entries.length)) setOpen(true, false);
    }
    store.schedule(transcript);
  }

  updateChrome();
  const stopKeeping = keepOnPage(host);
  if (sidePanelShown) showInPanel(true);

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
    panelInput: fromPanel,
    unmount() {
      void store.flush();
      chrome.runtime.onMessage.removeListener(listener);
      for (const remove of removals.splice(0)) remove();
      if (panelTimer !== null) clearTimeout(panelTimer);
      outline.show(null);
      stopKeeping();
      host.remove();
      shadow.replaceChildren();
    },
  };
}

/**
 * Puts the host on the page with its inline style, and keeps both there: the style is set again
 * when the page changes the host's attributes (which it may not add to), and the host is put back
 * when the page removes it, MAX_REATTACH times at most. Returns what stops it.
 */
function keepOnPage(host: HTMLElement): () => void {
  const applyStyle = () => {
    host.style.cssText = "";
    for (const [property, value] of HOST_STYLE) host.style.setProperty(property, value, "important");
  };
  applyStyle();
  const style = host.style.cssText;
  const guard = new MutationObserver(() => {
    for (const name of host.getAttributeNames()) if (name !== "style") host.removeAttribute(name);
    if (host.style.cssText !== style) applyStyle();
  });
  guard.observe(host, { attributes: true });

  let reattached = 0;
  const keeper = new MutationObserver(() => {
    const root = document.documentElement;
    if (!root || host.parentNode === root) return;
    if (reattached++ >= MAX_REATTACH) return keeper.disconnect();
    attach();
  });
  const attach = () => {
    const root = document.documentElement;
    if (!root) return;
    // The page may have replaced its root element: watch the current one.
    keeper.observe(document, { childList: true });
    keeper.observe(root, { childList: true });
    root.append(host);
  };
  attach();
  return () => {
    guard.disconnect();
    keeper.disconnect();
  };
}
