// What the owner of a conversation (the service worker: worker/conversations.ts) sends its views (a
// tab's overlay, a side panel showing the tab): the whole transcript when a view starts watching
// or the conversation was cleared, else only the entries that changed since the last patch (a
// token touches one entry). A view applies it to its copy and redraws what it names.

import { emptyTranscript, type Entry, type Touched, type Transcript } from "./transcript";

export interface ChatPatch {
  /** The whole transcript: the view drops its copy. */
  full: boolean;
  /** The entries added or changed (all of them when `full`), in order. */
  entries: Entry[];
  /** Entries older than this id are gone (the transcript keeps MAX_ENTRIES). */
  firstId: number;
  /** Everything else of the transcript: the task's state, the answer, usage, whether the overlay is open. */
  state: Omit<Transcript, "entries">;
}

/** The patch that brings a view from what it was sent before to `t`: `touched` changed (or everything). */
export function patchOf(t: Transcript, touched: ReadonlySet<number> | "full"): ChatPatch {
  const { entries, ...state } = t;
  const full = touched === "full";
  return { full, entries: full ? entries : entries.filter((e) => touched.has(e.id)), firstId: entries[0]?.id ?? t.nextId, state };
}

/**
 * Applies `patch` to a view's copy; returns the new copy and what to redraw (`removed`: entries went
 * away or were replaced wholesale, so redraw all). Null when `patch` does not have its shape.
 */
export function applyPatch(copy: Transcript, patch: unknown): { transcript: Transcript; touched: Touched; removed: boolean } | null {
  if (!isPatch(patch)) return null;
  const state = { ...emptyTranscript(), ...patch.state, version: 1 as const };
  const entries = patch.entries.filter((e) => typeof e === "object" && e !== null && typeof e.id === "number" && typeof e.kind === "string");
  if (patch.full) return { transcript: { ...state, entries }, touched: entries.map((e) => e.id), removed: true };
  const kept = copy.entries.filter((e) => e.id >= patch.firstId);
  const removed = kept.length !== copy.entries.length;
  const at = new Map(kept.map((e, i) => [e.id, i]));
  for (const entry of entries) {
    const i = at.get(entry.id);
    if (i === undefined) {
      at.set(entry.id, kept.length);
      kept.push(entry);
    } else kept[i] = entry;
  }
  return { transcript: { ...state, entries: kept }, touched: entries.map((e) => e.id), removed };
}

function isPatch(value: unknown): value is ChatPatch {
  if (typeof value !== "object" || value === null) return false;
  const p = value as Partial<ChatPatch>;
  const s = p.state as Partial<Transcript> | undefined;
  return typeof p.full === "boolean" && Array.isArray(p.entries) && typeof p.firstId === "number" && typeof s === "object" && s !== null && typeof s.task === "string" && typeof s.nextId === "number";
}
