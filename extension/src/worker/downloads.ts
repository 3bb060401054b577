// Downloads are effects. While a task's fence is up, a download the browser starts (an agent's
// click on a `download` link the user did not approve, a page script's blob link, a server's
// `Content-Disposition: attachment`) is held before its file gets a name on disk
// (`downloads.onDeterminingFilename` waits for the worker, and the transfer is paused) until the
// user decides on a card in the task's overlay: Allow names and resumes it, Deny cancels and
// erases it (nothing is left in the downloads folder). A download the user approved on the
// agent's own card (the call's `download` reason) goes through while that call runs.

import * as fence from "./fence";
import { SETTLE_MS } from "./fence";

interface Held {
  task: number;
  url: string;
  release: () => void;
}

/** Downloads waiting for the user's decision, by download id. */
const held = new Map<number, Held>();
/** Task tabs whose running call the user approved a download for, and until when. */
const approvedUntil = new Map<number, number>();

/** A held download, for the task's card. */
export interface HeldDownload {
  task: number;
  id: number;
  url: string;
  file: string;
}

/** Lets downloads through for `tabId`'s task while a call the user approved a download for runs. */
export function approveDuring<T>(tabId: number, run: () => Promise<T>): Promise<T> {
  approvedUntil.set(tabId, Number.POSITIVE_INFINITY);
  return run().finally(() => approvedUntil.set(tabId, Date.now() + SETTLE_MS));
}

/** Holds downloads started while a fence is up; `onHeld` shows the card. */
export function watch(onHeld: (download: HeldDownload) => void): void {
  chrome.downloads.onDeterminingFilename.addListener((item, suggest) => {
    void judge(item, suggest, onHeld);
    // The name is suggested later (now, or after the user's decision).
    return true;
  });
}

async function judge(
  item: chrome.downloads.DownloadItem,
  suggest: (suggestion?: chrome.downloads.FilenameSuggestion) => void,
  onHeld: (download: HeldDownload) => void,
): Promise<void> {
  const release = () => {
    try {
      suggest();
    } catch {
      // Already named (the download was cancelled meanwhile).
    }
  };
  const task = await taskOf(item);
  if (task === null || (approvedUntil.get(task) ?? 0) > Date.now()) return release();
  await chrome.downloads.pause(item.id).catch(() => {});
  const url = item.finalUrl || item.url;
  held.set(item.id, { task, url, release });
  onHeld({ task, id: item.id, url, file: item.filename.split(/[\\/]/).pop() || url });
}

/**
 * The task a download belongs to: the fenced task whose sites the page that started it is on, or
 * the only fenced task. None when no fence is up (the user's own downloads are never held).
 */
async function taskOf(item: chrome.downloads.DownloadItem): Promise<number | null> {
  const tasks = await fence.raisedTasks();
  if (tasks.length === 0) return null;
  for (const task of tasks) if (await fence.onApprovedSite(task, item.referrer || item.url)) return task;
  return tasks[0]!;
}

/** The user's decision on a held download of `task`; false when there is none. */
export async function decide(task: number, id: number, allow: boolean): Promise<boolean> {
  const download = held.get(id);
  if (!download || download.task !== task) return false;
  held.delete(id);
  if (allow) {
    download.release();
    await chrome.downloads.resume(id).catch(() => {});
  } else {
    await chrome.downloads.cancel(id).catch(() => {});
    download.release();
    await chrome.downloads.erase({ id }).catch(() => {});
  }
  return true;
}
