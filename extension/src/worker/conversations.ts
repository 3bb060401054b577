// The owner of every tab's conversation. Each tab has one transcript (chat/transcript.ts), kept
// here and in storage.session (memory only, gone when the browser quits) under `transcript:<tab>`:
// it survives the page's navigations and reloads (the page holds no part of it), this worker's
// restarts (read back on first use) and the offscreen document's (the engine only sends updates),
// and it goes when the tab closes. Its views, the tab's overlay and any side panel showing the
// tab, are sent the same patches (chat/patch.ts) and send the same input (`ChatInput`); none of
// them keeps anything the others need.
//
// Changes to one tab's conversation are applied in the order they were asked for (one chain per
// tab, through its first load from storage); views are sent what changed soon after (tokens come
// faster than frames), and storage a little later.

import { patchOf, type ChatPatch } from "../chat/patch";
import { emptyTranscript, reviveTranscript, type Touched, type Transcript } from "../chat/transcript";

/** How soon a change reaches the views (bursts of tokens go as one patch). */
const PUBLISH_DELAY_MS = 40;
/** How soon a change is stored. */
const SAVE_DELAY_MS = 250;
/**
 * A transcript larger than this is not stored (storage.session holds 10 MB for every tab
 * together: one tab must not be able to crowd the others out).
 */
const MAX_STORED_CHARS = 2_000_000;

/** Where a tab's transcript is kept. */
export const transcriptKey = (tabId: number) => `transcript:${tabId}`;

interface Conversation {
  transcript: Transcript;
  /** Entries changed since the views were last sent a patch. */
  touched: Set<number>;
  /** The views get the whole transcript next (it was replaced). */
  full: boolean;
  publishTimer: ReturnType<typeof setTimeout> | null;
  saveTimer: ReturnType<typeof setTimeout> | null;
}

const conversations = new Map<number, Promise<Conversation>>();
let publish: (tabId: number, patch: ChatPatch) => void = () => {};

/** Where patches go: the tab's overlay and the side panels showing the tab (service-worker.ts). */
export function onPatch(send: (tabId: number, patch: ChatPatch) => void): void {
  publish = send;
}

function conversation(tabId: number): Promise<Conversation> {
  let found = conversations.get(tabId);
  if (!found) {
    found = chrome.storage.session.get(transcriptKey(tabId)).then(
      (stored) => reviveTranscript(stored[transcriptKey(tabId)]) ?? emptyTranscript(),
      () => emptyTranscript(),
    ).then((transcript) => ({ transcript, touched: new Set<number>(), full: false, publishTimer: null, saveTimer: null }));
    conversations.set(tabId, found);
  }
  return found;
}

/** The whole conversation of `tabId`, for a view that starts watching it. */
export async function snapshot(tabId: number): Promise<ChatPatch> {
  return patchOf((await conversation(tabId)).transcript, "full");
}

/**
 * What `see` finds in the conversation of `tabId` as it is now (after the changes asked for
 * before), without copying it (it may hold megabytes): `see` must return values, not the
 * transcript's own objects, which later changes edit in place.
 */
export async function look<T>(tabId: number, see: (t: Readonly<Transcript>) => T): Promise<T> {
  return see((await conversation(tabId)).transcript);
}

/**
 * Changes the conversation of `tabId`: `edit` returns the entries it changed, or a new transcript
 * to take its place. Resolves to what `edit` returned once it is applied.
 */
export async function change<T extends Touched | Transcript>(tabId: number, edit: (t: Transcript) => T): Promise<T> {
  const c = await conversation(tabId);
  const result = edit(c.transcript);
  if (Array.isArray(result)) {
    for (const id of result) c.touched.add(id);
  } else {
    c.transcript = result as Transcript;
    c.full = true;
    c.touched.clear();
  }
  schedule(tabId, c);
  return result;
}

function schedule(tabId: number, c: Conversation): void {
  if (c.publishTimer === null) {
    c.publishTimer = setTimeout(() => {
      c.publishTimer = null;
      const patch = patchOf(c.transcript, c.full ? "full" : c.touched);
      c.full = false;
      c.touched.clear();
      publish(tabId, patch);
    }, PUBLISH_DELAY_MS);
  }
  if (c.saveTimer === null) {
    c.saveTimer = setTimeout(() => {
      c.saveTimer = null;
      void save(tabId, c.transcript);
    }, SAVE_DELAY_MS);
  }
}

async function save(tabId: number, transcript: Transcript): Promise<void> {
  if (JSON.stringify(transcript).length > MAX_STORED_CHARS) return;
  // A save that crosses the tab's closing must not outlive it.
  if (!(await chrome.tabs.get(tabId).then(() => true, () => false))) return;
  if (conversations.has(tabId)) await chrome.storage.session.set({ [transcriptKey(tabId)]: transcript }).catch(() => {});
}

/** The tab closed: its conversation goes, from memory and storage. */
export function forget(tabId: number): void {
  const c = conversations.get(tabId);
  conversations.delete(tabId);
  void c?.then((c) => {
    if (c.publishTimer !== null) clearTimeout(c.publishTimer);
    if (c.saveTimer !== null) clearTimeout(c.saveTimer);
  });
  void chrome.storage.session.remove(transcriptKey(tabId)).catch(() => {});
}

/** The tabs whose conversation this worker holds now. */
export function heldTabs(): number[] {
  return [...conversations.keys()];
}
