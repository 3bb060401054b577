// Downloads are effects. While a task's fence is up, a download the browser starts (a page
// script's blob link, a server's `Content-Disposition: attachment`) is held before its file gets a
// name on disk (`downloads.onDeterminingFilename` waits for the worker, and the transfer is
// paused) until the user decides on a card in the task's overlay: Allow names and resumes it, Deny
// cancels it, removes what reached the disk and erases it (nothing is left in the downloads folder). A download the user approved on the
// agent's own card (the call's `download` reason) goes through while that call runs.

import * as fence from "./fence";
import { SETTLE_MS } from "./fence";

interface Held {
  task: number;
  url: string;
  /** The name suggestions waiting for the decision (onDeterminingFilename). */
  releases: Array<() => void>;
}

/** Downloads waiting for the user's decision, by download id. */
const held = new Map<number, Held>();
/** Each download judged once (both hooks see it): the task holding it, or null. */
const judged = new Map<number, Promise<number | null>>();
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

/**
 * Holds downloads started while a fence is up; `onHeld` shows the card. Two hooks: the name is not
 * given before the decision (`onDeterminingFilename`), and the transfer is paused as soon as it is
 * created (`onCreated`: also where the browser names files itself, as under DevTools' download
 * behaviour); Deny cancels it and removes whatever reached the disk.
 */
export function watch(onHeld: (download: HeldDownload) => void): void {
  chrome.downloads.onDeterminingFilename.addListener((item, suggest) => {
    const release = () => {
      try {
        suggest();
      } catch {
        // Already named (the download was cancelled meanwhile).
      }
    };
    void judge(item, onHeld).then((task) => {
      const waiting = task === null ? undefined : held.get(item.id);
      if (waiting) waiting.releases.push(release);
      else release();
    });
    // The name is suggested later (now, or after the user's decision).
    return true;
  });
  chrome.downloads.onCreated.addListener((item) => void judge(item, onHeld));
}

function judge(item: chrome.downloads.DownloadItem, onHeld: (download: HeldDownload) => void): Promise<number | null> {
  let task = judged.get(item.id);
  if (!task) {
    task = hold(item, onHeld);
    judged.set(item.id, task);
  }
  return task;
}

async function hold(item: chrome.downloads.DownloadItem, onHeld: (download: HeldDownload) => void): Promise<number | null> {
  const task = await taskOf(item);
  if (task === null || (approvedUntil.get(task) ?? 0) > Date.now()) return null;
  await chrome.downloads.pause(item.id).catch(() => {});
  const url = item.finalUrl || item.url;
  held.set(item.id, { task, url, releases: [] });
  onHeld({ task, id: item.id, url, file: await fileName(item) });
  return task;
}

/** The file's name as the browser will save it (the page's suggestion), once it is known. */
async function fileName(item: chrome.downloads.DownloadItem): Promise<string> {
  const base = (path: string) => path.split(/[\\/]/).pop() ?? "";
  for (let waited = 0; waited <= 1_000; waited += 100) {
    const [now] = await chrome.downloads.search({ id: item.id }).catch(() => []);
    const name = base(now?.filename || item.filename);
    if (name) return name;
    await new Promise((r) => setTimeout(r, 100));
  }
  return base(new URL(item.finalUrl || item.url).pathname) || item.url;
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
    for (const release of download.releases) release();
    await chrome.downloads.resume(id).catch(() => {});
  } else {
    await chrome.downloads.cancel(id).catch(() => {});
    for (const release of download.releases) release();
    // A small file may have reached the disk before the pause took hold.
    await chrome.downloads.removeFile(id).catch(() => {});
    await chrome.downloads.erase({ id }).catch(() => {});
  }
  return true;
}
