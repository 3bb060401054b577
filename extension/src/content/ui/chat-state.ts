// What a tab's overlay sends the side panel that shows the tab (`panel_chat`): its conversation and
// the engine's state as the tab sees them. The panel only draws it (text nodes only, as the
// overlay does), and sends what the user does back to the tab (`ChatInput`).

import type { EngineStatus } from "../../generated/protocol";
import { emptyTranscript, type Transcript } from "./transcript";

export interface PanelChat {
  transcript: Transcript;
  status: EngineStatus;
  /** The tab's site, which "Turn off on this site" names. */
  site: string;
}

/** `value` as a `PanelChat`, or null when it does not have its shape. */
export function revivePanelChat(value: unknown): PanelChat | null {
  if (typeof value !== "object" || value === null) return null;
  const { transcript: t, status, site } = value as Partial<PanelChat>;
  if (typeof t !== "object" || t === null || t.version !== 1 || !Array.isArray(t.entries) || typeof t.task !== "string" || typeof t.nextId !== "number") return null;
  if (typeof status !== "object" || status === null || typeof status.state !== "string" || typeof site !== "string") return null;
  const entries = t.entries.filter((e) => typeof e === "object" && e !== null && typeof e.id === "number" && typeof e.kind === "string");
  return { transcript: { ...emptyTranscript(), ...t, entries }, status, site };
}

/** The entries of `next` that differ from `previous`'s (by id and content), and whether any went away. */
export function changedEntries(previous: Transcript, next: Transcript): { touched: number[]; removed: boolean } {
  const before = new Map(previous.entries.map((e) => [e.id, JSON.stringify(e)]));
  const touched = next.entries.filter((e) => before.get(e.id) !== JSON.stringify(e)).map((e) => e.id);
  const ids = new Set(next.entries.map((e) => e.id));
  const removed = previous.entries.some((e) => !ids.has(e.id));
  return { touched, removed };
}
