// The fence's cards and what the worker does when the fence stops something: a request the fence
// blocked (./fence.ts), a download it held (./downloads.ts), or a tab the task's pages opened off
// the task's sites. Each becomes a card in the task's conversation naming the site by the one site
// rule and the full address; the tab is taken off the error page (back, forward, or to a page of
// the task's sites it showed), and only the user's Allow opens the address.

import * as conversations from "./conversations";
import * as downloads from "./downloads";
import * as fence from "./fence";
import { agentNavigating } from "./browser-tools";
import { siteKey, siteText } from "./site";
import { fenceBlocked } from "../chat/transcript";

/** What the fence's cards need of the worker's router. */
export interface FenceHost {
  /** Stops the task in `tabId` (the user may be leaving: the browser itself started a navigation). */
  stopTask(tabId: number): Promise<unknown>;
}

/** Starts following the fence's blocks, the held downloads and the tabs a task's pages open. */
export function watch(host: FenceHost): void {
  fence.watch((blocked) => void onFenceBlocked(blocked, host));
  downloads.watch(({ task, id, url, file }) => {
    const list = blockedRequests.get(task) ?? [];
    blockedRequests.set(task, [...list, { tabId: task, inTab: task, opened: false, url, method: "DOWNLOAD", topLevel: false, download: id }].slice(-8));
    void showFenceCard(task, url, "DOWNLOAD", file);
  });
  chrome.tabs.onUpdated.addListener((tabId, change, tab) => {
    if (change.status !== "complete" || !tab.url || !/^https?:/.test(tab.url)) return;
    if (fence.blockedSince(tabId, Date.now() - 10_000) === tab.url) return;
    const url = tab.url;
    loadedPages.set(tabId, [...(loadedPages.get(tabId) ?? []).filter((u) => u !== url), url].slice(-8));
  });
  chrome.tabs.onCreated.addListener((tab) => void onTabOpened(tab));
}

/** A tab went away: what was kept of it goes too. */
export function forgetTab(tabId: number): void {
  for (const perTab of [blockedRequests, loadedPages, takenBack, triedAgain]) perTab.delete(tabId);
}

// A request the fence stopped becomes a card in the task's overlay naming its full address:
// allowed, its site joins the task's set and the user's Allow opens it. The worker never opens an
// address on the page's behalf. One the browser started itself (no initiator: the user's address
// bar or Back button, and equally the page's own history.back()) also stops the task and lifts
// the fence, since it may be the user leaving.
/** The requests the fence blocked in each tab, which a `fence_decision` may answer (once each). */
const blockedRequests = new Map<number, fence.Blocked[]>();

async function onFenceBlocked(blocked: fence.Blocked, host: FenceHost): Promise<void> {
  const { tabId, url } = blocked;
  const list = blockedRequests.get(tabId) ?? [];
  list.push(blocked);
  blockedRequests.set(tabId, list.slice(-8));
  if (blocked.opened) {
    // A tab the task's pages opened tried to leave the task's sites: closed when the task opened
    // it (or it never showed a page), else taken back like the task's own; the task's overlay asks.
    // A tab of the user's that the task acts in (switch_tab) is only ever taken back.
    const adopted = (await fence.openedTabs(tabId)).includes(blocked.inTab);
    const committed = blocked.origin !== undefined;
    if ((await fence.joinedTabs(tabId)).includes(blocked.inTab)) await restorePage(blocked.inTab, url, blocked, committed, tabId);
    else if (adopted || !(await restorePage(blocked.inTab, url, blocked, committed, tabId))) await chrome.tabs.remove(blocked.inTab).catch(() => {});
  } else if (blocked.topLevel) {
    // No initiator: the browser started it (the user's address bar, bookmark or Back button, or
    // the page's own history.back(), which Chrome reports the same way before anything commits).
    // The task stops and the fence lifts, but the tab is never moved on the page's behalf: the
    // card below asks, and only the user's Allow opens the address (or they go there again).
    if (!blocked.initiator && !agentNavigating.has(tabId)) {
      await host.stopTask(tabId);
      await fence.lift(tabId, true);
    }
    await restorePage(tabId, url, blocked, blocked.origin !== undefined);
  }
  await showFenceCard(tabId, url, blocked.method, null, blocked.origin);
}

/**
 * The pages each tab last loaded that the fence did not block, the latest last: where a replaced
 * entry is undone to.
 */
const loadedPages = new Map<number, string[]>();

/**
 * When the worker last took each tab back from a navigation its page started. Going back may load
 * that page again (no back-forward cache: a `no-store` page, a busy machine), and its script tries
 * again: a page that does so this soon after is never taken back to again (the tab opens the latest
 * other page of the task's sites it showed, or stays on the error page), so that the loop ends and
 * nothing replays the attempt once the fence lifts.
 */
const takenBack = new Map<number, { at: number; to: string | undefined }>();
const TRIED_AGAIN_MS = 15_000;
/** The pages of each tab that tried again once taken back to: never taken back to again. */
const triedAgain = new Map<number, Set<string>>();

/**
 * Takes a tab off the error page a blocked top-level navigation committed (just after the error is
 * reported): forward again after a blocked history move, back after a blocked new entry (the
 * agent's own navigation, the page's, or the user's typed address). Where the blocked navigation
 * replaced the entry (a meta refresh, `location.replace`) and history leads off the task's sites,
 * the page the tab was on is opened again (it is on the task's sites). The page reloads. False when
 * there was no page to go to (a new tab whose first request was blocked, or only pages that tried
 * again: `takenBack`). A navigation without a
 * request (`committed`) is already on its document, whose address the worker may not be shown
 * (a `blob:` or `about:blank` tab has no `url` for it): nothing to wait for. `task`: the task whose
 * sites the page goes back to (the tab's own, or the task that acts in it or opened it).
 */
async function restorePage(tabId: number, blockedUrl: string, by: { initiator?: string }, committed = false, task = tabId): Promise<boolean> {
  if (by.initiator === undefined) return takeBack(tabId, blockedUrl, committed, task);
  const last = takenBack.get(tabId);
  let restored: boolean;
  if (last?.to !== undefined && Date.now() - last.at < TRIED_AGAIN_MS) {
    // The page it was taken back to tried again: the latest other page of the task's sites it showed.
    const shunned = triedAgain.get(tabId) ?? new Set<string>();
    triedAgain.set(tabId, shunned.add(last.to));
    restored = (await onErrorPage(tabId, blockedUrl, committed)) && (await openLoadedPage(tabId, shunned, task));
  } else {
    restored = await takeBack(tabId, blockedUrl, committed, task);
  }
  const tab = restored ? await chrome.tabs.get(tabId).catch(() => null) : null;
  takenBack.set(tabId, { at: Date.now(), to: tab?.pendingUrl ?? tab?.url });
  return restored;
}

/** Whether `tabId` shows the error page of `blockedUrl` (waited for briefly), or a document of its own (`committed`). */
async function onErrorPage(tabId: number, blockedUrl: string, committed: boolean): Promise<boolean> {
  const onError = async () => {
    const tab = await chrome.tabs.get(tabId).catch(() => null);
    if (committed) return tab !== null;
    return tab !== null && (tab.url === blockedUrl || tab.url?.startsWith("chrome-error:") === true);
  };
  for (let waited = 0; waited < 3_000 && !(await onError()); waited += 100) await new Promise((r) => setTimeout(r, 100));
  return onError();
}

/** Opens the latest page of the task's sites that `tabId` loaded, but those `shunned`; false when there is none. */
async function openLoadedPage(tabId: number, shunned: Set<string>, task: number): Promise<boolean> {
  for (const url of [...(loadedPages.get(tabId) ?? [])].reverse()) {
    if (shunned.has(url) || !(await fence.onApprovedSite(task, url))) continue;
    return chrome.tabs.update(tabId, { url }).then(() => true, () => false);
  }
  return false;
}

async function takeBack(tabId: number, blockedUrl: string, committed: boolean, task: number): Promise<boolean> {
  if (!(await onErrorPage(tabId, blockedUrl, committed))) return false;
  // (A blocked new entry leaves nothing to go forward to.)
  const forward = agentNavigating.get(tabId) !== "open" && (await chrome.tabs.goForward(tabId).then(() => true, () => false));
  const moved = forward || (await chrome.tabs.goBack(tabId).then(() => true, () => false));
  const before = loadedPages.get(tabId)?.filter((url) => !triedAgain.get(tabId)?.has(url)).at(-1);
  if (!before || !(await fence.onApprovedSite(task, before))) return moved;
  let landed: string | undefined;
  for (let waited = 0; waited < 5_000; waited += 100) {
    const tab = await chrome.tabs.get(tabId).catch(() => null);
    if (!tab) return false;
    if (moved && tab.status === "complete" && tab.url !== undefined && tab.url !== blockedUrl) {
      landed = tab.url;
      break;
    }
    if (!moved) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (landed !== undefined && (await fence.onApprovedSite(task, landed))) return true;
  await chrome.tabs.update(tabId, { url: before }).catch(() => {});
  return true;
}

/**
 * The fence's card in `tabId`'s conversation, naming the full address and, as its title, the site
 * as the one site rule writes it: the address's, or for a navigation without a request the site of
 * the origin its document belongs to (`origin`; an opaque one has no site: the address is named).
 */
async function showFenceCard(tabId: number, url: string, method: string, file: string | null = null, origin?: string): Promise<void> {
  let host = url.slice(0, 80);
  try {
    // A blob: or filesystem: address names the page's origin inside it.
    const parsed = new URL(url);
    host = parsed.host || new URL(parsed.pathname).host || host;
  } catch {
    // Shown whole.
  }
  const site = siteKey(origin === undefined ? url : `${origin}/`);
  if (site) host = siteText(site);
  await conversations.change(tabId, (t) => fenceBlocked(t, url, host, method, file));
}

// A tab that a task's tab (or a tab it opened) opens while the fence is up carries the same fence.
// Its first request was already judged by the rules for unknown tabs when the task's sites started
// it; one started otherwise (another site's frame in the page) and leading off the task's sites is
// closed, and the task's overlay asks.
async function onTabOpened(tab: chrome.tabs.Tab): Promise<void> {
  // (A tab opened to a web address: not the browser's new-tab page, nor a blank tab made by a tool.)
  // (A tab opened to a document without a request, about:blank or blob:, is judged by its
  // document's origin when it commits: fence.ts, by its opener's task.)
  const url = tab.pendingUrl ?? tab.url ?? "";
  if (tab.id === undefined || tab.openerTabId === undefined || !/^https?:/.test(url)) return;
  const task = await fence.taskOf(tab.openerTabId);
  if (task === null) return;
  await fence.adoptOpenedTab(task, tab.id);
  if (await fence.onApprovedSite(task, url)) return;
  // The rules may have blocked it already (its block report closes the tab): give it a moment.
  await new Promise((r) => setTimeout(r, 500));
  if (!(await chrome.tabs.get(tab.id).then(() => true, () => false)) || fence.blockedSince(tab.id, Date.now() - 2_000)) return;
  await chrome.tabs.remove(tab.id).catch(() => {});
  const list = blockedRequests.get(task) ?? [];
  blockedRequests.set(task, [...list, { tabId: task, inTab: tab.id, opened: true, url, method: "GET", topLevel: true }].slice(-8));
  await showFenceCard(task, url, "GET");
}

/**
 * The user's answer to a fence card. Only a request this tab really had blocked can be allowed
 * (a page cannot approve a site by sending the message itself); allowed, its site joins the
 * task's set, and a blocked page is opened.
 */
export async function fenceDecision(tabId: number, url: string, allow: boolean): Promise<boolean> {
  const list = blockedRequests.get(tabId) ?? [];
  const at = list.findIndex((b) => b.url === url);
  if (at < 0) return false;
  const [blocked] = list.splice(at, 1);
  if (blocked?.download !== undefined) return downloads.decide(tabId, blocked.download, allow);
  if (!allow || !blocked) return true;
  // A navigation without a request (blob:, about:blank…): its origin's site is approved; the
  // document is not made again (the page may go there again, and now may).
  await fence.approve(tabId, blocked.origin === undefined ? url : `${blocked.origin}/`);
  // The user's Allow opens it where the page tried to: this tab, or a new one (which the fence follows).
  if (blocked.topLevel && blocked.method === "GET" && /^https?:/i.test(url)) {
    if (blocked.opened) await chrome.tabs.create({ url, openerTabId: tabId });
    else await chrome.tabs.update(tabId, { url });
  }
  return true;
}
