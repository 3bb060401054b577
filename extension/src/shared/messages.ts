// Typed helpers over chrome.runtime messaging. The shapes come from the generated protocol.

import type { RuntimeMessage, ToOffscreen, ToTab, ToWorker } from "../generated/protocol";

export type { RuntimeMessage, ToOffscreen, ToTab, ToWorker };

/** True when `value` looks like one of Hearth's messages (other extensions' messages are ignored). */
export function isRuntimeMessage(value: unknown): value is RuntimeMessage {
  if (typeof value !== "object" || value === null) return false;
  const { to, msg } = value as { to?: unknown; msg?: unknown };
  return (to === "offscreen" || to === "worker" || to === "tab") && typeof msg === "object" && msg !== null;
}

/** Sends to the service worker (from a tab or the offscreen document). */
export function sendToWorker(msg: ToWorker): Promise<unknown> {
  const message: RuntimeMessage = { to: "worker", msg };
  return chrome.runtime.sendMessage(message);
}
