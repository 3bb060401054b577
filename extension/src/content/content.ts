// Content script entry (registered only for http(s) pages the user has not disabled): mounts the
// overlay in the top frame and runs the page tools the service worker sends for this tab's task.

import type { ToolReply, ToolRequest, WorkerToTab } from "../generated/protocol";
import { isFromWorker, isMessage } from "../shared/messages";
import { chatChanged, hideForCapture, mountOverlayWhenReady, openWithSelection, protectOverlay, setPanelAttached, settingsChanged, showPassage } from "./overlay";
import { executeTool, ToolFailure } from "./page-tools";
import { isPageToolName, listPageTools, runPageTool } from "./page-tools/webmcp";

/** Tools in progress; stop aborts them. */
const running = new Set<AbortController>();

/** Set in this extension's isolated world (never in the DOM, which the page controls) by the first injection. */
const LOADED = "__hearthContentScript";
const world = globalThis as { [LOADED]?: boolean };

// The script runs at document_start: before any page script, so the overlay's host comes first
// (overlay.ts); the overlay itself is mounted once the document is parsed.
if (window.top === window && !world[LOADED]) {
  world[LOADED] = true;
  protectOverlay();
  mountOverlayWhenReady();
  chrome.runtime.onMessage.addListener((message: unknown, sender, sendResponse) => {
    // Only the service worker (our extension, not a tab) may ask this tab to run tools.
    if (!isMessage(message) || !isFromWorker(sender)) return false;
    return onTabMessage(message as WorkerToTab, sendResponse);
  });
}

function onTabMessage(msg: WorkerToTab, sendResponse: (reply: ToolReply | boolean) => void): boolean {
  switch (msg.kind) {
    case "run_tool":
      void runTool(msg.request).then(sendResponse);
      // The worker waits for the reply.
      return true;
    case "open_overlay":
      openWithSelection();
      return false;
    case "panel_attached":
      // A side panel shows this tab (or stopped): the answer tells the worker Hearth runs here.
      setPanelAttached(msg.attached);
      sendResponse(true);
      return false;
    case "chat":
      chatChanged(msg.chat);
      return false;
    case "show_passage":
      showPassage(msg.number);
      return false;
    case "hide_for_capture":
      void hideForCapture(msg.hidden).then(() => sendResponse(true));
      return true;
    case "settings_changed":
      settingsChanged(msg.view);
      return false;
    case "cancel_tools":
      for (const controller of running) controller.abort();
      running.clear();
      return false;
    default:
      return false;
  }
}

async function runTool(request: ToolRequest): Promise<ToolReply> {
  const controller = new AbortController();
  running.add(controller);
  try {
    const output = isPageToolName(request.name)
      ? await runPageTool(request.name, request.arguments, controller.signal)
      : await executeTool(request.name, request.arguments, controller.signal);
    // Every reply lists the tools the page offers now (WebMCP): the model's list follows the page's.
    return { status: "ok", output: { ...output, page_tools: await listPageTools() } };
  } catch (error) {
    if (controller.signal.aborted) return { status: "failed", message: "Stopped by the user." };
    if (error instanceof ToolFailure) return { status: "failed", message: error.message };
    // An unexpected error is still reported to the model, never thrown into the page.
    return { status: "failed", message: `${request.name} failed unexpectedly: ${String(error)}` };
  } finally {
    running.delete(controller);
  }
}
