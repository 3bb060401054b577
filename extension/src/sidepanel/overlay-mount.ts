// What the chat page adds when it is the overlay: framed by the closed-shadow host of a tab's
// content script (content/overlay.ts), in the extension's own process.
// - A private channel with the host: a MessagePort the host hands over once, with the secret the
//   host put in this frame's address (the page cannot read the frame's address, and the page's
//   own messages to this window never carry it). Over it the host says "open" (with the page text
//   the person had selected, for the shortcut) and this frame says "close" (×, Esc).
// - Approvals only where they were seen: an Allow (and starting the microphone) counts only when
//   the frame has been fully visible and unobscured for SEEN_MS before a real input
//   (IntersectionObserver v2, which sees opacity, filters, transforms and anything drawn over the
//   frame, the top layer included), its viewport is the size the host gives it, and the input
//   carried the person's activation. Otherwise nothing is approved, the card says the page is
//   covering Hearth, and the side panel (browser UI no page can draw over) opens with this tab.
// - The page can always take the keyboard focus: when it does while the person types a message (or unloads
//   this frame by moving Hearth's host), the chat says so at once, until they type here again
//   (what they type meanwhile goes to the page; nothing the page types enters Hearth).

import type { LiveChat } from "../chat/view/live-chat";
import { waitingEntry } from "../chat/transcript";
import { el } from "../shared/ui/builders";
import { t } from "../shared/ui/i18n";

/** How long the frame must have been seen, whole and uncovered, before an approval counts. */
export const SEEN_MS = 500;
/** IntersectionObserver v2's shortest delay between visibility checks. */
const VISIBILITY_DELAY_MS = 100;
/** Smaller than this, the frame is not the one the host draws (a page squeezed it). */
const MIN_FRAME_PX = 200;
/** A focus lost this soon after a keystroke in the chat was lost while the person typed. */
const TYPING_MS = 2_000;

/** What the host (the content script) says over the channel. */
type HostMessage = { kind: "open"; quote?: string; displaced?: boolean };

export interface OverlayMount {
  /** Focuses the message box (the host focused this frame to open it). */
  focusInitially(): void;
  /** The tab this frame is in (for the side panel's window). */
  setTab(tab: chrome.tabs.Tab): void;
  /** Opens the side panel of this tab's window (in the click's gesture). */
  openSidePanel(): void;
  /** Whether an approval may be taken now (see above). */
  seen(): boolean;
  /** An approval was refused: say so, and move the decision to the side panel. */
  covered(): void;
}

export function mountOverlay({ live, data }: { live: LiveChat; data: DOMStringMap }): OverlayMount {
  const { ui } = live;
  const secret = location.hash.slice(1);
  let channel: MessagePort | null = null;
  let windowId: number | undefined;

  // --- the channel with the host ---------------------------------------------------------------
  window.addEventListener("message", (event) => {
    if (channel || !secret || event.source !== window.parent || event.ports.length !== 1) return;
    if ((event.data as { hearth?: unknown } | null)?.hearth !== secret) return;
    channel = event.ports[0]!;
    channel.onmessage = (e) => onHostMessage(e.data as HostMessage);
    channel.postMessage({ kind: "ready" });
  });
  const close = () => channel?.postMessage({ kind: "close" });
  ui.close.addEventListener("click", close);
  // Esc closes on its release: the key's last event stays here, not on the page the focus returns to.
  let closing = false;
  window.addEventListener("keydown", (e) => {
    // (An Esc that dropped a recording closes nothing.)
    closing = e.key === "Escape" && !e.isComposing && !e.defaultPrevented;
    if (closing) e.preventDefault();
  });
  window.addEventListener("keyup", (e) => {
    if (e.key !== "Escape" || !closing) return;
    closing = false;
    close();
  });

  function onHostMessage(msg: HostMessage): void {
    if (msg?.kind !== "open") return;
    watchVisibility();
    if (!ui.settingsView.hidden) ui.showSettings(false);
    const waiting = waitingEntry(live.transcript());
    if (typeof msg.quote === "string" && msg.quote) ui.composer.setSelection(msg.quote);
    else if (waiting) ui.focusCard(waiting.id);
    else ui.composer.focus();
    // The page unloaded the frame the person may have been typing in (it moved Hearth's host).
    if (msg.displaced) showFocusTaken(true);
    channel?.postMessage({ kind: "opened" });
  }

  // (Test builds: when the message box took the focus first after the tests cleared it, for the opening time.)
  if (__HEARTH_TEST_BUILD__) {
    ui.composer.textarea.addEventListener("focus", () => {
      if (document.hasFocus()) data.openedAt ??= String(performance.timeOrigin + performance.now());
    });
  }

  // The frame got the focus with nothing in it focused (the host focused the frame): the message box.
  window.addEventListener("focus", () => {
    const inner = (document.querySelector(".hearth-side-panel") as HTMLElement | null)?.shadowRoot?.activeElement;
    if (!inner) ui.composer.focus();
  });

  // --- seen before approved --------------------------------------------------------------------
  let visibleSince: number | null = null;
  let observer: IntersectionObserver | null = null;
  let seenTimer: ReturnType<typeof setTimeout> | undefined;
  /** Starts watching anew (a new observer reports at once): the host shows the frame again. */
  function watchVisibility(): void {
    observer?.disconnect();
    visibleSince = null;
    data.seen = "false";
    observer = new IntersectionObserver(
      (entries) => {
        // (IntersectionObserver v2: `isVisible` is not in TypeScript's DOM types yet.)
        const entry = entries[entries.length - 1]! as IntersectionObserverEntry & { isVisible?: boolean };
        const visible = entry.isVisible === true && entry.intersectionRatio >= 0.99;
        if (!visible) {
          visibleSince = null;
          data.seen = "false";
          clearTimeout(seenTimer);
        } else if (visibleSince === null) {
          visibleSince = entry.time;
          seenTimer = setTimeout(() => (data.seen = String(seenNow())), SEEN_MS + 20);
        }
      },
      { trackVisibility: true, delay: VISIBILITY_DELAY_MS, threshold: [0, 0.99, 1] } as IntersectionObserverInit,
    );
    observer.observe(document.documentElement);
  }
  watchVisibility();

  /** Seen whole and uncovered for SEEN_MS, at the size the host draws. */
  function seenNow(): boolean {
    if (visibleSince === null || performance.now() - visibleSince < SEEN_MS) return false;
    if (document.visibilityState !== "visible") return false;
    return window.innerWidth >= MIN_FRAME_PX && window.innerHeight >= MIN_FRAME_PX;
  }

  // --- the focus taken while typing ------------------------------------------------------------
  const focusTaken = el("p", { class: "focus-taken", role: "alert" }, t("focusTakenByPage"));
  focusTaken.hidden = true;
  ui.chat.insertBefore(focusTaken, ui.composer.element);
  let lastKey = -Infinity;
  window.addEventListener("keydown", () => (lastKey = performance.now()), true);
  function showFocusTaken(taken: boolean): void {
    focusTaken.hidden = !taken;
    data.focusTaken = String(taken);
  }
  window.addEventListener("blur", () => {
    // Mid-sentence only: a request just sent leaves the box empty (and Hearth's own tools move the
    // focus to the page's fields while they run).
    if (performance.now() - lastKey <= TYPING_MS && ui.composer.textarea.value !== "") showFocusTaken(true);
  });
  // (Typing here again clears it: the person is back.)
  window.addEventListener("keydown", () => showFocusTaken(false));

  const openSidePanel = () => {
    if (windowId !== undefined) void chrome.sidePanel.open({ windowId }).catch(() => {});
  };

  return {
    focusInitially: () => ui.composer.focus(),
    setTab(tab) {
      windowId = tab.windowId;
    },
    openSidePanel,
    seen: () => seenNow() && navigator.userActivation.isActive,
    covered() {
      live.showLocalError(t("pageCoversHearth"));
      data.covered = String(Number(data.covered ?? 0) + 1);
      openSidePanel();
    },
  };
}
