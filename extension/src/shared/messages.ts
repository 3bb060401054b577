// Typed helpers over chrome.runtime messaging. The shapes come from the generated protocol: one
// enum per sender and receiver (crates/protocol/src/bus.rs), with no address and no claim about
// who sent it. Receivers classify the browser's MessageSender with `senderRole` and never trust the
// message's own fields for that: a compromised renderer can send anything a content script can.

import type { EngineToWorker, OptionsToWorker, PanelToWorker, TabToWorker, WorkerToEngine, WorkerToPanel, WorkerToTab } from "../generated/protocol";

export type { EngineToWorker, OptionsToWorker, PanelToWorker, TabToWorker, WorkerToEngine, WorkerToPanel, WorkerToTab };

/** Who sent a message, as the browser says (`chrome.runtime.MessageSender`). */
export type SenderRole = "tab" | "engine" | "options" | "worker" | "panel" | "overlay";

/** The extension's own pages and scripts, by file. */
const PAGES = { engine: "offscreen.html", options: "options.html", worker: "service-worker.js", panel: "sidepanel.html" } as const;

/**
 * The extension's own origin under its fixed id. (`chrome.runtime.getURL` gives a web-accessible
 * page with `use_dynamic_url` under the session's dynamic id, while the browser reports every
 * page of ours under the fixed one.)
 */
const ownOrigin = () => `chrome-extension://${chrome.runtime.id}`;

/** True when `url` is the extension's file `file` (a query or a fragment aside). */
function isOwnFile(url: string | undefined, file: string): boolean {
  if (!url) return false;
  try {
    const parsed = new URL(url);
    return parsed.origin === ownOrigin() && parsed.pathname === `/${file}`;
  } catch {
    return false;
  }
}

/**
 * Who sent a message, from what the browser filled in (never from the message):
 * - `tab`: a content script in a tab's top frame (the overlay), `sender.tab.id` being its tab;
 * - `engine`: the offscreen document; `options`: the options page;
 * - `worker`: the service worker (Chromium gives its script's URL as `sender.url`, and no tab);
 * - `panel`: the side panel, `sidepanel.html` in Chrome's side panel (no tab: a page's content
 *   script always has one, and `sender.url` is the browser's, so no page can pass for it);
 * - `overlay`: the same chat page in a frame of a tab (the overlay's host holds it), `sender.tab.id`
 *   being the tab it may show; it runs in the extension's process, not the page's;
 * - `null`: anything else (another frame, another extension page, an extension page in a tab
 *   other than the options page): drop its message.
 */
export function senderRole(sender: chrome.runtime.MessageSender): SenderRole | null {
  if (sender.id !== chrome.runtime.id) return null;
  const ownPage = sender.url?.startsWith(`${ownOrigin()}/`) ?? false;
  if (sender.tab) {
    // The options page opens in a tab (options_ui.open_in_tab); the chat page in a tab's frame is its overlay.
    if (ownPage && isOwnFile(sender.url, PAGES.panel) && sender.frameId !== undefined && sender.frameId > 0) return sender.tab.id !== undefined && sender.tab.id >= 0 ? "overlay" : null;
    if (ownPage) return isOwnFile(sender.url, PAGES.options) && sender.frameId === 0 ? "options" : null;
    return sender.tab.id !== undefined && sender.tab.id >= 0 && sender.frameId === 0 ? "tab" : null;
  }
  if (isOwnFile(sender.url, PAGES.engine)) return "engine";
  if (isOwnFile(sender.url, PAGES.worker)) return "worker";
  if (isOwnFile(sender.url, PAGES.options)) return "options";
  if (isOwnFile(sender.url, PAGES.panel)) return "panel";
  return null;
}

/** For content scripts: true when the message comes from the service worker (our id, no tab). */
export function isFromWorker(sender: chrome.runtime.MessageSender): boolean {
  return sender.id === chrome.runtime.id && !sender.tab;
}

/** True when `value` has the shape of one of Hearth's messages (`{kind: …}`). */
export function isMessage(value: unknown): value is { kind: string } {
  return typeof value === "object" && value !== null && typeof (value as { kind?: unknown }).kind === "string";
}

/** In test builds, says why a message was dropped (a warning: the e2e suite fails on errors). */
export function dropped(where: string, message: unknown, sender: chrome.runtime.MessageSender): void {
  if (__HEARTH_TEST_BUILD__) {
    const kind = isMessage(message) ? message.kind : typeof message;
    console.warn(`Hearth ${where}: dropped a "${kind}" message from ${sender.url ?? "?"} (tab ${sender.tab?.id ?? "none"}, frame ${sender.frameId ?? "none"})`);
  }
}

/** A tab's content script to the service worker (which acts on the sender's tab only). */
export function sendFromTab(msg: TabToWorker): Promise<unknown> {
  return chrome.runtime.sendMessage(msg);
}

/** The offscreen document to the service worker. */
export function sendFromEngine(msg: EngineToWorker): Promise<unknown> {
  return chrome.runtime.sendMessage(msg);
}

/** The options page to the service worker. */
export function sendFromOptions(msg: OptionsToWorker): Promise<unknown> {
  return chrome.runtime.sendMessage(msg);
}

/** The service worker to the offscreen document. */
export function sendToEngine(msg: WorkerToEngine): Promise<unknown> {
  return chrome.runtime.sendMessage(msg);
}

/** The service worker to a tab's top-frame content script (the overlay lives there). */
export function sendToTab(tabId: number, msg: WorkerToTab): Promise<unknown> {
  return chrome.tabs.sendMessage(tabId, msg, { frameId: 0 });
}
