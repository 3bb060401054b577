// The user's other tabs in a task: the composer's chooser (`list_tabs`), the tabs the user attaches
// to a message (read through their own content script's read_page: those sites' words), the
// record of each task's tabs, and the tab tools (read_tab, open_tab, switch_tab). The agent's
// record (crates/agent/src/tabs.rs) decides what asks; this one decides what runs: a tool acts in
// another tab only while it is one of the task's (attached by the user, or opened by the task), and
// that tab is under the task's fence (fence.ts `joinTab`). A tab is named by the browser's tab id.

import type { AttachedTab, OpenTab, PageInfo, RequestTabs, RiskReason, TabChoice, ToolReply, ToolRequest } from "../generated/protocol";
import { sendToTab } from "../shared/messages";
import { isSiteDisabled, type Settings } from "../shared/settings";
import * as fence from "./fence";
import { approvedSite, onSite } from "./site";

/** What the worker keeps of a task's tabs (memory only, like the conversation). */
interface TaskTabsRecord {
  /** Attached by the user (and read) or opened by the task: the tabs it may act in. */
  ofTask: number[];
}

const recordKey = (taskTab: number) => `task-tabs:${taskTab}`;

async function recordOf(taskTab: number): Promise<TaskTabsRecord> {
  const stored = (await chrome.storage.session.get(recordKey(taskTab)))[recordKey(taskTab)] as TaskTabsRecord | undefined;
  return { ofTask: Array.isArray(stored?.ofTask) ? stored.ofTask.filter(Number.isInteger) : [] };
}

async function keep(taskTab: number, record: TaskTabsRecord): Promise<void> {
  await chrome.storage.session.set({ [recordKey(taskTab)]: record });
}

/** The tab's conversation was forgotten (cleared, or the tab closed). */
export async function forget(taskTab: number): Promise<void> {
  await chrome.storage.session.remove(recordKey(taskTab));
}

/** At most this many tabs go with one message, and the chooser lists at most this many. */
export const MAX_ATTACHED = 6;
const MAX_LISTED = 40;
/** The other open tabs the model is told of (crates/agent `MAX_OPEN_TABS`). */
const MAX_OPEN_TABS = 12;
/** How long an attached tab's page may take to answer read_page. */
const READ_TIMEOUT_MS = 10_000;

const isWeb = (url: string | undefined): url is string => /^https?:\/\//i.test(url ?? "");

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}

/** The other web tabs, the most recently used first. */
async function otherWebTabs(taskTab: number): Promise<chrome.tabs.Tab[]> {
  const tabs = await chrome.tabs.query({});
  return tabs
    .filter((t) => t.id !== undefined && t.id !== taskTab && isWeb(t.url))
    .sort((a, b) => (b.lastAccessed ?? 0) - (a.lastAccessed ?? 0));
}

/**
 * The chooser's list: title, site and icon of each other web tab. The icon is the browser's own
 * cached favicon (`_favicon`, the `favicon` permission): Hearth's page never fetches from the site.
 */
export async function listTabs(taskTab: number, settings: Settings): Promise<TabChoice[]> {
  return (await otherWebTabs(taskTab)).slice(0, MAX_LISTED).map((t) => ({
    tab_id: t.id!,
    title: (t.title || t.url || "").slice(0, 200),
    site: originOf(t.url!),
    icon: chrome.runtime.getURL(`/_favicon/?pageUrl=${encodeURIComponent(t.url!)}&size=32`),
    disabled: isSiteDisabled(settings, t.url),
  }));
}

/** `read_page` in a tab's top frame, by its own content script: the page's words, its passages. */
async function readInTab(tabId: number): Promise<ToolReply> {
  const request: ToolRequest = { request_id: 0, tab_id: tabId, name: "read_page", arguments: {}, judged_url: null, approved: [], in_tab: null };
  const timeout = new Promise<ToolReply>((resolve) =>
    setTimeout(() => resolve({ status: "failed", message: "the page did not answer (it may still be loading)" }), READ_TIMEOUT_MS),
  );
  const reply = sendToTab(tabId, { kind: "run_tool", request }).then(
    (r) => (r as ToolReply | undefined) ?? { status: "failed" as const, message: "the page did not answer" },
    () => ({ status: "failed" as const, message: "Hearth is not running in that tab (it was open before Hearth was installed: a reload brings it)" }),
  );
  return Promise.race([reply, timeout]);
}

/** Why a tab cannot be read or acted in, or null. */
function refusalFor(tab: chrome.tabs.Tab | null, settings: Settings): string | null {
  if (!tab) return "the tab was closed";
  if (!isWeb(tab.url)) return "it is not a web page";
  if (isSiteDisabled(settings, tab.url)) return "the user turned Hearth off on its site";
  return null;
}

/**
 * A new task in `taskTab`: the tabs the user attached are read now (their text goes with the
 * message), the other open tabs are listed for the model, and the record starts again (a new task
 * acts in its own tab).
 */
export async function begin(taskTab: number, attachedIds: readonly unknown[], settings: Settings): Promise<RequestTabs> {
  const wanted = [...new Set(attachedIds.filter((id): id is number => Number.isInteger(id) && id !== taskTab))].slice(0, MAX_ATTACHED);
  const attached: AttachedTab[] = await Promise.all(
    wanted.map(async (id): Promise<AttachedTab> => {
      const tab = await chrome.tabs.get(id).catch(() => null);
      const base = { tab: id, url: tab?.url ?? "", title: tab?.title ?? "", passages: [] };
      const refused = refusalFor(tab, settings);
      if (refused) return { ...base, unreadable: refused };
      const reply = await readInTab(id);
      if (reply.status !== "ok") return { ...base, unreadable: reply.message };
      const page = reply.output.page ?? { url: base.url, title: base.title };
      return { tab: id, url: page.url, title: page.title, passages: reply.output.passages?.items ?? [] };
    }),
  );
  const open: OpenTab[] = (await otherWebTabs(taskTab))
    .filter((t) => !isSiteDisabled(settings, t.url))
    .slice(0, MAX_OPEN_TABS)
    .map((t) => ({ tab: t.id!, url: t.url!, title: t.title ?? "" }));
  await keep(taskTab, { ofTask: attached.filter((a) => a.unreadable === undefined).map((a) => a.tab) });
  await fence.leaveJoinedTabs(taskTab);
  return { own: taskTab, attached, open };
}

const failed = (message: string): ToolReply => ({ status: "failed", message });

/**
 * The tab a call of `request` acts in: the task's own, or (after switch_tab) another tab of the
 * task that is still open; a string says why not, for the model.
 */
export async function actingTab(request: ToolRequest): Promise<chrome.tabs.Tab | string> {
  const own = request.tab_id;
  const wanted = request.in_tab ?? own;
  if (wanted !== own && !(await recordOf(own)).ofTask.includes(wanted)) {
    return `Tab ${wanted} is not a tab of this task; nothing was done. Use switch_tab with ${own} (this task's tab).`;
  }
  const tab = await chrome.tabs.get(wanted).catch(() => null);
  if (tab) return tab;
  return wanted === own
    ? "The task's tab was closed; the task cannot go on."
    : `Tab ${wanted}, where you were acting, was closed; nothing was done. Use switch_tab with ${own} (this task's tab) to go on there.`;
}

const tabNumber = (request: ToolRequest): number => {
  const tab = (request.arguments as { tab?: unknown }).tab;
  return typeof tab === "number" && Number.isInteger(tab) ? tab : -1;
};

const pageOf = (tab: chrome.tabs.Tab): PageInfo => ({ url: tab.url ?? "", title: tab.title ?? "" });
const tabInfo = (tab: chrome.tabs.Tab): OpenTab => ({ tab: tab.id!, url: tab.url ?? "", title: tab.title ?? "" });

/** Whether the user approved reading the tab on `url` (a `reads_tab` card for its site). */
function approvedToRead(approved: readonly RiskReason[], url: string): boolean {
  const scheme = url.startsWith("http:") ? "http" : "https";
  return approved.some((r) => {
    if (r.kind !== "reads_tab") return false;
    const site = approvedSite(r.host, scheme);
    return site !== null && onSite(url, site);
  });
}

/**
 * read_tab: another tab's text, as numbered passages of its page (its words), read by its own
 * content script; the task's tabs are read as they are, any other only as the user approved.
 */
export async function readTab(request: ToolRequest, settings: Settings): Promise<ToolReply> {
  const number = tabNumber(request);
  const tab = await chrome.tabs.get(number).catch(() => null);
  const refused = refusalFor(tab, settings);
  if (refused || !tab) return failed(`Tab ${number} cannot be read: ${refused}.`);
  const ofTask = (await recordOf(request.tab_id)).ofTask.includes(number);
  if (!ofTask && !approvedToRead(request.approved, tab.url!)) return failed(`Reading tab ${number} needs the user's approval; nothing was read.`);
  const reply = await readInTab(number);
  if (reply.status !== "ok") return failed(`Tab ${number} could not be read: ${reply.message}.`);
  const page = reply.output.page ?? pageOf(tab);
  // `page` stays unset: the task's tab did not move. The agent numbers the passages.
  return {
    status: "ok",
    output: {
      text: `Tab ${number}: ${page.title} — ${page.url}`,
      snapshot: null,
      page: null,
      from_page: true,
      passages: { url: page.url, title: page.title, items: reply.output.passages?.items ?? [] },
    },
  };
}

/** How long a tab open_tab opened may take to load. */
const LOAD_TIMEOUT_MS = 30_000;

/**
 * open_tab: a new tab of the task (behind the task's, in its window), fenced like any tab the
 * task's pages open; the policy judged its address as a navigation (another site asked).
 */
export async function openTab(request: ToolRequest, task: chrome.tabs.Tab): Promise<ToolReply> {
  const raw = String((request.arguments as { url?: unknown }).url ?? "");
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return failed(`"${raw}" is not a full address; use one starting with https:// or http://.`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return failed("Only http:// and https:// addresses can be opened.");
  const opened = await chrome.tabs.create({ url: url.href, openerTabId: task.id!, windowId: task.windowId, active: false });
  if (opened.id === undefined) return failed("The browser did not open a tab.");
  const id = opened.id;
  await fence.adoptOpenedTab(task.id!, id);
  const record = await recordOf(task.id!);
  await keep(task.id!, { ofTask: [...record.ofTask, id] });
  const loaded = await waitForLoad(id);
  if (!loaded) return failed(`The tab for ${url.href} was closed before it loaded: the browser's fence may have stopped it (a card asks the user).`);
  return {
    status: "ok",
    output: { text: `Opened tab ${id}: "${loaded.title ?? ""}" — ${loaded.url ?? url.href}. Use switch_tab to act in it, or read_tab to read it.`, snapshot: null, page: null, from_page: true, tab: tabInfo(loaded) },
  };
}

/** The tab once it has loaded (or after the time limit), or null once it is closed. */
async function waitForLoad(tabId: number): Promise<chrome.tabs.Tab | null> {
  const started = Date.now();
  for (;;) {
    const tab = await chrome.tabs.get(tabId).catch(() => null);
    if (!tab || tab.status === "complete" || Date.now() - started > LOAD_TIMEOUT_MS) return tab;
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
}

/**
 * switch_tab: the page tools act in that tab from now on. Only a tab of the task (or the task's
 * own); it joins the task's fence, and its site the task's sites (the user attached it, or the
 * task opened it; the agent asked first when it is on another site).
 */
export async function switchTab(request: ToolRequest, settings: Settings): Promise<ToolReply> {
  const number = tabNumber(request);
  const own = request.tab_id;
  if (number !== own && !(await recordOf(own)).ofTask.includes(number)) {
    return failed(`Tab ${number} is not a tab of this task: only tabs the user attached or that open_tab opened can be acted in.`);
  }
  const tab = await chrome.tabs.get(number).catch(() => null);
  const refused = refusalFor(tab, settings);
  if (refused || !tab) return failed(`Tab ${number} cannot be acted in: ${refused}.`);
  if (number !== own) {
    await fence.approve(own, tab.url!);
    await fence.joinTab(own, number);
  }
  const where = number === own ? "this task's own tab" : `tab ${number}`;
  return {
    status: "ok",
    output: {
      text: `Now acting in ${where}: "${tab.title ?? ""}" — ${tab.url}. Take a snapshot before acting on it.`,
      snapshot: null,
      page: pageOf(tab),
      from_page: true,
      tab: tabInfo(tab),
    },
  };
}
