// The service worker: Hearth's message bus. It owns the offscreen document (the engine) and relays
// the engine's state to the tabs that watch it. It keeps no state that cannot be rebuilt: Chrome
// may stop it at any time.

import type { EngineStatus, GenerationEvent, RuntimeMessage, ToWorker } from "../generated/protocol";
import { isRuntimeMessage } from "../shared/messages";

const OFFSCREEN_URL = "offscreen.html";

let status: EngineStatus = { state: "idle" };
const watchers = new Set<number>();
let offscreenStarting: Promise<void> | null = null;
let onOffscreenReady: (() => void) | null = null;
/** Which tab asked for each generation in flight. */
const generations = new Map<number, number>();
let nextRequestId = 1;

chrome.runtime.onMessage.addListener((message: unknown, sender) => {
  if (isRuntimeMessage(message) && message.to === "worker") handle(message.msg, sender);
  return false;
});

function handle(msg: ToWorker, sender: chrome.runtime.MessageSender): void {
  switch (msg.kind) {
    case "offscreen_ready":
      onOffscreenReady?.();
      break;
    case "engine_status":
      setStatus(msg.status);
      break;
    case "watch_engine": {
      const tabId = sender.tab?.id;
      if (tabId === undefined) return;
      watchers.add(tabId);
      pushStatus(tabId);
      // A failed engine is retried when someone asks again: the cause (a lost device, a driver) may be gone.
      if (status.state === "idle" || status.state === "failed") void startEngine();
      break;
    }
    case "generate": {
      const tabId = sender.tab?.id;
      if (tabId === undefined) return;
      const requestId = nextRequestId++;
      generations.set(requestId, tabId);
      const message: RuntimeMessage = {
        to: "offscreen",
        msg: { kind: "generate", request: { request_id: requestId, prompt: msg.prompt, max_tokens: msg.max_tokens } },
      };
      chrome.runtime.sendMessage(message).catch((error: unknown) =>
        routeGeneration({ event: "failed", request_id: requestId, message: `The engine is not running: ${String(error)}` }),
      );
      break;
    }
    case "generation":
      routeGeneration(msg.event);
      break;
  }
}

/** Sends a generation event to the tab that asked for it. */
function routeGeneration(event: GenerationEvent): void {
  const tabId = generations.get(event.request_id);
  if (tabId === undefined) return;
  if (event.event !== "token") generations.delete(event.request_id);
  const message: RuntimeMessage = { to: "tab", msg: { kind: "generation", event } };
  chrome.tabs.sendMessage(tabId, message).catch(() => generations.delete(event.request_id));
}

function setStatus(next: EngineStatus): void {
  status = next;
  for (const tabId of watchers) pushStatus(tabId);
}

function pushStatus(tabId: number): void {
  const message: RuntimeMessage = { to: "tab", msg: { kind: "engine_status", status } };
  // A closed or navigated tab has no listener any more: stop telling it.
  chrome.tabs.sendMessage(tabId, message).catch(() => watchers.delete(tabId));
}

async function startEngine(): Promise<void> {
  setStatus({ state: "starting" });
  try {
    await ensureOffscreenDocument();
    const start: RuntimeMessage = { to: "offscreen", msg: { kind: "start_engine" } };
    await chrome.runtime.sendMessage(start);
  } catch (error) {
    setStatus({
      state: "failed",
      failure: {
        kind: "engine_load",
        message: `The engine could not start: ${String(error)}`,
        fix: "Reload Hearth from chrome://extensions; if it persists, reinstall it.",
      },
    });
  }
}

/** Creates the offscreen document once and waits until its script listens. */
async function ensureOffscreenDocument(): Promise<void> {
  if (offscreenStarting) return offscreenStarting;
  offscreenStarting = (async () => {
    if (await chrome.offscreen.hasDocument()) return;
    const ready = new Promise<void>((resolve) => (onOffscreenReady = resolve));
    await chrome.offscreen.createDocument({
      url: OFFSCREEN_URL,
      reasons: [chrome.offscreen.Reason.WORKERS],
      justification: "Runs Hearth's language model on the GPU with WebGPU.",
    });
    await ready;
  })();
  try {
    await offscreenStarting;
  } finally {
    offscreenStarting = null;
  }
}
