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
// data-answer, data-cards, data-pending-call. Release builds mirror nothing.
//
// The pieces live in ./ui: transcript.ts (the conversation as data), cards.ts (entries → DOM),
// markdown.ts (safe rendering), composer.ts, engine-view.ts, settings-view.ts, persist.ts.

import type { Decision, EngineStatus, TabToWorker, TaskAction, WorkerToTab } from "../generated/protocol";
import { isFromWorker, isMessage, sendFromTab } from "../shared/messages";
import { watchOwnModels, type OwnModel } from "../shared/own-models";
import { isSiteDisabled, loadSettings, onSettingsChanged, saveSettings, siteOf, type Settings } from "../shared/settings";
import { OVERLAY_CSS } from "./overlay-style";
import { elementByIndex } from "./page-tools/elements";
import { renderEntry } from "./ui/cards";
import { createComposer, type Listen } from "./ui/composer";
import { button, clip, el } from "../shared/ui/builders";
import { engineView } from "./ui/engine-view";
import { formatNumber, t } from "../shared/ui/i18n";
import { targetOutline } from "./ui/outline";
import { TranscriptStore } from "./ui/persist";
import { settingsForm } from "../shared/ui/settings-view";
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
  toolCardCount,
  userMessage,
  type Entry,
  type Touched,
  type Transcript,
} from "./ui/transcript";

/** The most page text `openWithSelection` takes into the composer. */
const MAX_QUOTE = 4000;

interface Overlay {
  openWithSelection(): void;
  settingsChanged(settings: Settings): void;
  unmount(): void;
}

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
let watchingSettings = false;

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
  if (!watchingSettings) {
    watchingSettings = true;
    onSettingsChanged((next) => {
      if (isSiteDisabled(next, location.href)) unmountOverlay();
      else if (!overlay) overlay = createOverlay(parts!);
      else overlay.settingsChanged(next);
    });
  }
  loadSettings().then(
    (settings) => {
      if (isSiteDisabled(settings, location.href)) unmountOverlay();
    },
    () => {},
  );
}

/** Opens the panel with the page's selection (if any) shown above the composer: the keyboard shortcut. */
export function openWithSelection(): void {
  overlay?.openWithSelection();
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

  // --- structure -------------------------------------------------------------------------------
  const launcher = button("launcher", "H", t("launcherLabel"), { "aria-expanded": "false", "aria-controls": "hearth-panel" });
  const titleId = "hearth-title";
  const settingsToggle = button("settings", "⚙", t("settingsLabel"), { "aria-expanded": "false", "aria-controls": "hearth-settings" });
  const close = button("close", "×", t("closeLabel"));
  /** The user's own model files (chrome.storage.local): the engine view marks them as not verified. */
  let ownModels: OwnModel[] = [];
  const engine = engineView(
    () => connect(),
    (modelId) => send({ kind: "install_model", model_id: modelId }),
    () => send({ kind: "open_model_options" }),
    (name) => ownModels.find((m) => m.name === name),
  );

  const log = el("div", { class: "transcript", role: "log", "aria-live": "polite", "aria-label": t("transcriptLabel"), tabindex: "0" });
  const empty = el("div", { class: "empty" }, el("p", {}, t("emptyTitle")), el("p", { class: "meta" }, t("emptyHint")));
  const usage = el("p", { class: "usage", "aria-live": "off" });
  const continueButton = button("continue", t("continueLabel"), t("continueHint"));
  continueButton.hidden = true;
  const taskbar = el("div", { class: "taskbar" }, usage, continueButton);
  const composer = createComposer({ submit, stop }, listen);
  const chat = el("div", { class: "chat" }, empty, log, taskbar, composer.element);

  const form = settingsForm((patch) => void saveSettings(patch).then((s) => {
    form.show(s);
    saved.textContent = t("settingsSaved");
  }));
  const saved = el("p", { class: "meta saved", role: "status" });
  const site = siteOf(location.href) ?? location.origin;
  const disableSite = button("disable-site danger", t("disableSite", location.host));
  const clear = button("clear", t("clearConversation"));
  const settingsView = el(
    "div",
    { class: "settings-view", id: "hearth-settings", hidden: true },
    el("h3", {}, t("settingsTitle")),
    form.element,
    el("div", { class: "settings-actions" }, clear, disableSite),
    el("p", { class: "help" }, t("disableSiteHelp")),
    saved,
  );

  const panel = el(
    "section",
    { class: "panel", id: "hearth-panel", role: "dialog", "aria-modal": "false", "aria-labelledby": titleId, hidden: true },
    el("header", {}, el("h2", { id: titleId }, t("panelTitle")), el("div", { class: "header-buttons" }, settingsToggle, close)),
    engine.element,
    chat,
    settingsView,
  );
  // A constructed stylesheet, not a <style> element: a page's strict CSP (style-src) would block
  // the element's inline CSS, but does not apply to stylesheets built through the CSSOM.
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(OVERLAY_CSS);
  shadow.adoptedStyleSheets = [sheet];
  // The outline first: the launcher and the panel are drawn over it.
  shadow.replaceChildren(outline.element, launcher, panel);
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

  // --- state -----------------------------------------------------------------------------------
  let transcript: Transcript = emptyTranscript();
  let status: EngineStatus = { state: "idle" };
  removals.push(
    watchOwnModels((models) => {
      ownModels = models;
      engine.render(status, data);
    }),
  );
  /** Messages typed before the model was ready, sent when it is. */
  const queued: TabToWorker[] = [];
  const store = new TranscriptStore();
  let restored = false;
  let cutOff = false;
  let connected = false;
  const nodes = new Map<number, HTMLElement>();
  const dirty = new Set<number>();
  let flushTimer: ReturnType<typeof setTimeout> | null = null;

  const engineReady = () => status.state === "ready" && status.model !== null;

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
      flush();
      scrollToEnd();
      if (focus) (settingsView.hidden ? composer.textarea : settingsToggle).focus();
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

  function showSettings(show: boolean): void {
    settingsView.hidden = !show;
    chat.hidden = show;
    data.view = show ? "settings" : "chat";
    settingsToggle.setAttribute("aria-expanded", String(show));
    saved.textContent = "";
    if (show) {
      void loadSettings().then((s) => form.show(s));
      settingsView.querySelector<HTMLElement>("select, input, button")?.focus();
    } else {
      composer.focus();
    }
  }

  launcher.addEventListener("click", () => setOpen(panel.hidden));
  close.addEventListener("click", () => setOpen(false));
  settingsToggle.addEventListener("click", () => showSettings(settingsView.hidden));

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
    send({ kind: "task_control", action });
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
        engine.render(status, data);
        if (engineReady() && queued.length) {
          for (const m of queued.splice(0)) send(m);
          commit(markSent(transcript));
        }
        updateChrome();
        break;
      case "tab_info":
        void restore(msg.tab_id);
        break;
      case "fence_blocked": {
        const touched = fenceBlocked(transcript, msg.url, msg.host, msg.method);
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

  /** A card waits for the user: open the panel and move focus to it. */
  function needsUser(entryId: number | undefined): void {
    if (settingsView.hidden === false) showSettings(false);
    setOpen(true, false);
    flush();
    const node = entryId === undefined ? undefined : nodes.get(entryId);
    const target = node?.querySelector<HTMLElement>('button[data-decision="deny"], button.option') ?? composer.textarea;
    node?.scrollIntoView({ block: "nearest" });
    target.focus();
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

  const actions = {
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
  };

  continueButton.addEventListener("click", () => {
    commit(continued(transcript));
    control({ action: "continue" });
    composer.focus();
  });

  clear.addEventListener("click", () => {
    control({ action: "forget" });
    queued.length = 0;
    const open = transcript.open;
    transcript = emptyTranscript();
    transcript.open = open;
    redrawAll();
    void store.clear().then(() => store.schedule(transcript));
    saved.textContent = t("conversationCleared");
  });

  disableSite.addEventListener("click", () => {
    if (transcript.task === "running") control({ action: "stop" });
    void loadSettings().then((s) => {
      const sites = s.disabledSites.includes(site) ? s.disabledSites : [...s.disabledSites, site];
      unmountOverlay();
      return saveSettings({ disabledSites: sites });
    });
  });

  // --- rendering -------------------------------------------------------------------------------
  /** Records what changed; the DOM follows shortly (tokens arrive faster than frames). */
  function commit(touched: Touched): void {
    for (const id of touched) dirty.add(id);
    updateChrome();
    store.schedule(transcript);
    if (flushTimer === null && !panel.hidden) flushTimer = setTimeout(flush, 16);
  }

  function flush(): void {
    if (flushTimer !== null) clearTimeout(flushTimer);
    flushTimer = null;
    if (!dirty.size) return;
    const stuck = log.scrollTop + log.clientHeight >= log.scrollHeight - 48;
    const firstId = transcript.entries[0]?.id ?? Infinity;
    for (const [id, node] of nodes) {
      if (id < firstId) {
        node.remove();
        nodes.delete(id);
      }
    }
    for (const entry of transcript.entries) {
      if (!dirty.has(entry.id)) continue;
      const fresh = renderEntry(entry, actions);
      const old = nodes.get(entry.id);
      if (old) {
        keepDisclosures(old, fresh);
        const hadFocus = old.contains(shadow.activeElement);
        old.replaceWith(fresh);
        if (hadFocus) composer.focus();
      } else {
        log.append(fresh);
      }
      nodes.set(entry.id, fresh);
    }
    dirty.clear();
    empty.hidden = transcript.entries.length > 0;
    if (stuck) scrollToEnd();
  }

  function redrawAll(): void {
    for (const node of nodes.values()) node.remove();
    nodes.clear();
    for (const entry of transcript.entries) dirty.add(entry.id);
    flush();
    updateChrome();
    scrollToEnd();
  }

  function scrollToEnd(): void {
    log.scrollTop = log.scrollHeight;
  }

  /** The state around the transcript: composer mode, Stop/Continue, usage, test hooks, launcher. */
  function updateChrome(): void {
    const task = transcript.task;
    data.task = task;
    data.cards = String(toolCardCount(transcript));
    if (transcript.answer !== null) data.answer = transcript.answer;
    else delete data.answer;
    // The call a confirmation card or a question waits on (tests wait for it to change).
    const waiting = [...transcript.entries].reverse().find((e) => (e.kind === "confirm" && e.decision === undefined) || (e.kind === "ask" && e.answer === undefined));
    if ((task === "confirm" || task === "ask") && waiting && "callId" in waiting) data.pendingCall = waiting.callId;
    else delete data.pendingCall;
    // The page element the waiting confirmation is about, outlined until it is decided.
    outline.show(task === "confirm" && waiting?.kind === "confirm" ? targetElement(waiting) : null);
    const running = task === "running";
    composer.setMode(pendingAsk(transcript) ? "answer" : running ? "steer" : "task");
    if (running !== composer.running) composer.setRunning(running);
    continueButton.hidden = !(transcript.canContinue && (task === "paused" || task === "stopped" || task === "failed"));
    log.setAttribute("aria-busy", String(running));
    empty.hidden = transcript.entries.length > 0;
    const u = transcript.usage;
    usage.textContent = !u
      ? ""
      : u.tokensPerSecond !== null
        ? t("usageLine", formatNumber(u.promptTokens), formatNumber(u.prefillTokens), formatNumber(u.completionTokens), formatNumber(u.tokensPerSecond, 1))
        : t("usageLineNoRate", formatNumber(u.promptTokens), formatNumber(u.prefillTokens), formatNumber(u.completionTokens));
    const attention = task === "confirm" || task === "ask" ? "needs-you" : running ? "running" : "";
    if (attention) launcher.dataset.attention = attention;
    else delete launcher.dataset.attention;
    launcher.setAttribute("aria-label", attention === "needs-you" ? t("launcherLabelNeedsYou") : t("launcherLabel"));
    if (!engineReady() && status.state === "ready") composer.textarea.placeholder = t("noModelYet");
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
      if (wasOpen && panel.hidden && (transcript.task === "running" || live.entries.length)) setOpen(true, false);
    }
    store.schedule(transcript);
  }

  updateChrome();
  const stopKeeping = keepOnPage(host);

  return {
    openWithSelection() {
      const selection = document.getSelection();
      const inside = selection?.anchorNode ? host.contains(selection.anchorNode) || selection.anchorNode === host : false;
      const quote = inside ? "" : (selection?.toString().trim() ?? "");
      if (!settingsView.hidden) showSettings(false);
      setOpen(true);
      if (quote) composer.setSelection(clip(quote, MAX_QUOTE));
      else composer.focus();
    },
    settingsChanged(settings) {
      if (!settingsView.hidden) form.show(settings);
    },
    unmount() {
      void store.flush();
      chrome.runtime.onMessage.removeListener(listener);
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

/** Keeps <details> the user opened open when their card is redrawn. */
function keepDisclosures(old: HTMLElement, fresh: HTMLElement): void {
  const before = [...old.querySelectorAll("details")].map((d) => d.open);
  if (old instanceof HTMLDetailsElement) before.unshift(old.open);
  const after = [...fresh.querySelectorAll("details")];
  if (fresh instanceof HTMLDetailsElement) after.unshift(fresh);
  after.forEach((d, i) => (d.open = before[i] ?? d.open));
}
