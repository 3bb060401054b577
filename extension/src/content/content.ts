// Content script entry (registered only for http(s) pages the user has not disabled): mounts the
// overlay in the top frame and runs the page tools the service worker sends for this tab's task.

import type { RuntimeMessage, ToolReply, ToolRequest } from "../generated/protocol";
import { isRuntimeMessage } from "../shared/messages";
import { mountOverlay, openWithSelection } from "./overlay";
import { executeTool, ToolFailure } from "./tools";

/** Tools in progress; stop aborts them. */
const running = new Set<AbortController>();

if (window.top === window && !document.querySelector("hearth-overlay")) {
  mountOverlay();
  chrome.runtime.onMessage.addListener((message: unknown, _sender, sendResponse) => {
    if (!isRuntimeMessage(message) || message.to !== "tab") return false;
    return onTabMessage(message.msg, sendResponse);
  });
}

function onTabMessage(msg: Extract<RuntimeMessage, { to: "tab" }>["msg"], sendResponse: (reply: ToolReply) => void): boolean {
  switch (msg.kind) {
    case "run_tool":
      void runTool(msg.request).then(sendResponse);
      // The worker waits for the reply.
      return true;
    case "open_overlay":
      openWithSelection();
      return false;
    case "cancel_tools":
      for (const controller of running) controller.abort();
      running.clear();
      return false;
    default:
      // Engine status and task updates are the overlay's.
      return false;
  }
}

async function runTool(request: ToolRequest): Promise<ToolReply> {
  const controller = new AbortController();
  running.add(controller);
  try {
    const output = await executeTool(request.name, request.arguments, controller.signal);
    return { status: "ok", output };
  } catch (error) {
    if (controller.signal.aborted) return { status: "failed", message: "Stopped by the user." };
    if (error instanceof ToolFailure) return { status: "failed", message: error.message };
    // An unexpected error is still reported to the model, never thrown into the page.
    return { status: "failed", message: `${request.name} failed unexpectedly: ${String(error)}` };
  } finally {
    running.delete(controller);
  }
}
