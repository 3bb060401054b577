// The overlay, the page's side of it: a launcher button, and a frame that holds Hearth's own chat
// page (sidepanel.html, the page the side panel shows), both inside the closed shadow root of the
// host (./overlay-host.ts), with the outlines of what a card is about. Everything the person types,
// selects, reads or decides is in the frame, which runs in the extension's process and talks to
// the worker itself: none of it is ever in the page's document. The frame is made the first time
// the overlay opens, and kept (hidden while closed) for the rest of the page.
//
// This script follows the tab's conversation (the worker owns it: worker/conversations.ts; it
// sends `chat` patches) only for what the page's side does: it outlines the element a waiting
// confirmation is about, scrolls to a cited passage, marks the launcher, and opens the overlay
// when a card comes to wait. While a side panel shows the tab the overlay stays closed and its
// launcher hidden. To the frame it speaks over a MessagePort it hands over with a secret the
// frame's address carries (the page can read neither): "open" (with the page's selection, for
// the shortcut); the frame answers "ready" to each hand-over and "opened" once its chat is shown,
// and says "close" (×, Esc).
//
// Test builds (__HEARTH_TEST_BUILD__) mirror this side's state as data-* attributes of a hidden
// <div class="test-state"> in the shadow root (read over the DevTools protocol): data-state
// (open once the frame said so, or closed), data-side-panel (a side panel shows this tab),
// data-passage, data-frames (how many frames were made), and the conversation's task, cards,
// answer and pending-call as this side follows them. The chat's own state is mirrored by the
// frame (sidepanel.ts), which tests read first.

import type { SettingsView } from "../generated/protocol";
import { sendFromTab } from "../shared/messages";
import { button, clip, el } from "../shared/ui/builders";
import { t } from "../shared/ui/i18n";
import { applyPatch } from "../chat/patch";
import { mirrorTask } from "../chat/view/task-state";
import { emptyTranscript, sourceOf, waitingConfirmation, waitingEntry, type Entry, type Transcript } from "../chat/transcript";
import { createHost, keepOnPage, type HostParts } from "./overlay-host";
import { elementByIndex } from "./page-tools/elements";
import { HOST_CSS } from "./ui/host-style";
import { targetOutline } from "./ui/outline";
import { findPassage } from "./ui/passage";

/** The most page text `openWithSelection` takes into the composer. */
const MAX_QUOTE = 4000;
/** How long a frame's document may take to answer the hand-over before it is replaced. */
const FRAME_ANSWER_MS = 5_000;

interface Overlay {
  openWithSelection(): void;
  /** A side panel shows this tab's chat (true), or no longer does. */
  panelShown(shown: boolean): void;
  /** A change of the tab's conversation, from its owner. */
  chat(patch: unknown): void;
  /** Scrolls to passage `number` and outlines it (a chip clicked in the chat). */
  showPassage(number: number): void;
  unmount(): void;
}

let parts: HostParts | null = null;
let overlay: Overlay | null = null;
/** Whether a side panel shows this tab (told by the worker; kept for an overlay mounted later). */
let sidePanelShown = false;

/** Run first, at document_start: the host with its closed shadow root is made before a page script could define <hearth-overlay>. */
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
  overlay ??= createOverlay(parts!);
}

/** Opens the overlay with the page's selection (if any) shown above the composer: the keyboard shortcut. */
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

/** A chip clicked in the chat (the worker's `show_passage`). */
export function showPassage(number: number): void {
  overlay?.showPassage(number);
}

/** Removes the overlay from the page (Hearth was disabled on this site). */
export function unmountOverlay(): void {
  overlay?.unmount();
  overlay = null;
}

function createOverlay({ host, shadow }: HostParts): Overlay {
  // The state mirror of test builds; release builds write into an object nobody sees.
  const mirror = __HEARTH_TEST_BUILD__ ? el("div", { class: "test-state", hidden: true, "aria-hidden": "true" }) : null;
  const data: DOMStringMap = mirror ? mirror.dataset : {};
  // The page element a waiting confirmation is about, and a cited passage the user asked to see.
  const outline = targetOutline();
  const passageOutline = targetOutline("passage-outline");
  /** This side's copy of the conversation (for the outline, the launcher and opening at a card). */
  let transcript: Transcript = emptyTranscript();
  let open = false;
  let panelShown = false;

  // --- the frame and its channel ---------------------------------------------------------------
  /** Known to this script and the frame only: the frame takes a channel only from whoever has it. */
  const secret = crypto.randomUUID();
  let frame: HTMLIFrameElement | null = null;
  let channel: MessagePort | null = null;
  /** What the frame is told once its channel is up ("open", with the page's selection). */
  let pendingOpen: { quote?: string } | null = null;

  function makeFrame(): HTMLIFrameElement {
    const made = el("iframe", { class: "chat-frame", title: t("panelTitle") });
    made.src = `${chrome.runtime.getURL("sidepanel.html")}#${secret}`;
    // Each document the frame loads (a new one after the page took the host away and it was put
    // back) is handed a new channel; one that does not answer it is not Hearth's page: replaced.
    let loads = 0;
    made.addEventListener("load", () => handOver(made, ++loads > 1));
    data.frames = String(Number(data.frames ?? 0) + 1);
    return made;
  }

  /** The frame, made (hidden until the overlay opens) the first time it is needed. */
  function ensureFrame(): HTMLIFrameElement {
    if (!frame) {
      frame = makeFrame();
      frame.hidden = !open;
      shadow.append(frame);
    }
    return frame;
  }

  /** `reloaded`: the page unloaded the frame's document (by moving or removing the host). */
  function handOver(target: HTMLIFrameElement, reloaded: boolean): void {
    if (target !== frame || !target.contentWindow) return;
    channel?.close();
    const { port1, port2 } = new MessageChannel();
    channel = port1;
    let answered = false;
    port1.onmessage = (event) => {
      const kind = (event.data as { kind?: unknown } | null)?.kind;
      if (kind === "ready") {
        answered = true;
        // The person may have been typing in the document the page unloaded: the chat says so.
        if (open) tellOpen(reloaded);
      } else if (kind === "opened" && open) data.state = "open";
      else if (kind === "close") setOpen(false, { focus: true });
    };
    target.contentWindow.postMessage({ hearth: secret }, `chrome-extension://${chrome.runtime.id}`, [port2]);
    setTimeout(() => {
      if (answered || target !== frame) return;
      frame = makeFrame();
      target.replaceWith(frame);
    }, FRAME_ANSWER_MS);
  }

  function tellOpen(displaced = false): void {
    if (!channel) return;
    channel.postMessage({ kind: "open", ...(pendingOpen ?? {}), ...(displaced ? { displaced } : {}) });
    pendingOpen = null;
  }

  // --- opening and closing ---------------------------------------------------------------------
  /** Opens or closes the overlay; `focus`: the frame takes the focus (or, closing, the launcher). */
  function setOpen(next: boolean, { focus = true, quote }: { focus?: boolean; quote?: string } = {}): void {
    const changed = next !== open;
    // Already open: the frame itself moves to a card that comes to wait; only a quote is news.
    if (!changed && open && !quote) return;
    open = next;
    // (Open once the frame says its chat is shown.)
    if (!open) data.state = "closed";
    launcher.setAttribute("aria-expanded", String(open));
    if (open) {
      const shown = ensureFrame();
      shown.hidden = false;
      pendingOpen = quote ? { quote } : {};
      if (focus) shown.focus();
      tellOpen();
    } else {
      const hadFocus = shadow.activeElement === frame;
      if (frame) frame.hidden = true;
      if (focus && hadFocus) launcher.focus();
    }
    if (changed) send({ kind: "chat_input", input: { input: "shown", open } });
  }

  let launcher = makeLauncher();
  function makeLauncher(): HTMLButtonElement {
    const made = button("launcher", "H", t("launcherLabel"), { "aria-expanded": String(open) });
    made.addEventListener("click", () => setOpen(!open));
    // A pointer over the launcher: the frame starts loading, so the chat is ready on the click.
    made.addEventListener("pointerenter", () => void ensureFrame(), { once: true });
    return made;
  }

  /**
   * The host is back after the page took it out of the document: document.open() dropped every
   * listener of its elements, and the frame's document is gone. New ones, as they were.
   */
  function rebuild(): void {
    const fresh = makeLauncher();
    fresh.hidden = launcher.hidden;
    launcher.replaceWith(fresh);
    launcher = fresh;
    markLauncher();
    frame?.remove();
    frame = null;
    channel?.close();
    channel = null;
    if (open) setOpen(true, { focus: false });
  }

  // --- talking to the worker -------------------------------------------------------------------
  function send(msg: Parameters<typeof sendFromTab>[0]): void {
    // (The extension was reloaded or updated under this page: this old content script is cut off,
    // and so is its frame; the new one shows what happened.)
    try {
      sendFromTab(msg).catch(() => {});
    } catch {
      // Cut off.
    }
  }

  // --- the page's side -------------------------------------------------------------------------
  /** Outlines the page element the waiting confirmation is about, until it is decided. */
  function outlineTarget(): void {
    const confirming = waitingConfirmation(transcript);
    outline.show(confirming ? targetElement(confirming) : null, confirming?.target?.point ?? null);
  }

  function markLauncher(): void {
    const task = transcript.task;
    const attention = task === "confirm" || task === "ask" ? "needs-you" : task === "running" ? "running" : "";
    if (attention) launcher.dataset.attention = attention;
    else delete launcher.dataset.attention;
    launcher.setAttribute("aria-label", attention === "needs-you" ? t("launcherLabelNeedsYou") : t("launcherLabel"));
  }

  function showInPanel(shown: boolean): void {
    panelShown = shown;
    data.sidePanel = String(shown);
    // The chat is in the side panel now: one place at a time.
    launcher.hidden = shown;
    if (shown) setOpen(false, { focus: false });
  }

  const here = (url: string) => url.split("#")[0] === location.href.split("#")[0];

  const sheet = new CSSStyleSheet();
  // A constructed stylesheet: a page's strict CSP (style-src) does not apply to it.
  sheet.replaceSync(HOST_CSS);
  shadow.adoptedStyleSheets = [sheet];
  // The outlines first: the launcher and the frame are drawn over them.
  shadow.replaceChildren(outline.element, outline.marker, passageOutline.element, launcher);
  if (mirror) shadow.append(mirror);
  data.state = "closed";
  markLauncher();
  const stopKeeping = keepOnPage(host, rebuild);
  if (sidePanelShown) showInPanel(true);
  // This page's view of the tab's conversation: the worker sends it whole, then its changes.
  send({ kind: "watch_chat" });

  return {
    openWithSelection() {
      const quote = document.getSelection()?.toString().trim() ?? "";
      setOpen(true, { quote: quote ? clip(quote, MAX_QUOTE) : undefined });
    },
    panelShown: showInPanel,
    chat(patch) {
      const applied = applyPatch(transcript, patch);
      if (!applied) return;
      const full = (patch as { full: boolean }).full;
      const waitingBefore = waitingEntry(transcript)?.id;
      transcript = applied.transcript;
      outlineTarget();
      markLauncher();
      if (__HEARTH_TEST_BUILD__) mirrorTask(data, transcript);
      // The overlay was open on the previous page of this tab while its task ran: open again.
      if (full && transcript.open && !open && !panelShown && transcript.task === "running") setOpen(true, { focus: false });
      const waiting = waitingEntry(transcript);
      if (!waiting || waiting.id === waitingBefore || panelShown) return;
      // A card comes to wait for the user: the overlay opens at it (the side panel does, if it
      // shows this tab). A confirmation or question that waited before this page loaded shows
      // when the user opens the overlay (the launcher is marked); a fence card opens it on the new
      // page too, since the page was loaded again by the fence itself, taking the tab back from
      // where the page tried to go, and the card asks about that.
      if (full && waiting.kind !== "fence") return;
      setOpen(true);
    },
    showPassage(number) {
      const source = sourceOf(transcript, number);
      if (!source || !here(source.url)) return;
      const found = findPassage(source.text);
      data.passage = found ? String(number) : "";
      if (!found) return;
      found.scrollIntoView({ block: "center", behavior: "instant" });
      passageOutline.show(found);
    },
    unmount() {
      outline.show(null);
      stopKeeping();
      channel?.close();
      host.remove();
      shadow.replaceChildren();
      frame = null;
    },
  };
}

/** The page element a confirmation is about: its target's number, or the call's `index`. */
function targetElement(entry: Extract<Entry, { kind: "confirm" }>): Element | null {
  const index = entry.target?.index ?? entry.args.index;
  return typeof index === "number" && Number.isInteger(index) && index > 0 ? elementByIndex(index) : null;
}
