// The fence: while the agent runs a task in a tab, the browser itself (declarativeNetRequest
// session rules scoped to that tab id) blocks
// - top-level navigations to any site outside the task's approved set (the page's own site, and
//   the sites the user allowed on a card), at every redirect hop;
// - form submissions (POST, top level or in a frame) the user did not approve, same site included.
// Whatever the page or the content script does: the DOM-level policy asks first, the fence is the
// guarantee. A blocked request becomes a card in the overlay ("The page tried to open …: allow?");
// allowed, the site joins the set for the task.
//
// The user's own navigation is never trapped: the fence is up only while the agent runs (from a
// run's start to its end, plus a short settling time), and a navigation the browser itself starts
// in that tab (the address bar, a bookmark, back and forward: no initiator) while the agent is not
// navigating is the user's: the task stops, the fence lifts and the navigation is replayed.
//
// Navigations that make no request (the rules never see them) are watched at commit: a top-level
// document of a fenced tab whose address is `blob:`, `data:`, `about:`, `filesystem:` or
// `javascript:` is judged by the site of the origin it belongs to (`documentOrigin`), and one off
// the task's sites is emptied and reported like a blocked request (the worker takes the tab back
// and shows the card; it never stops the task nor lifts the fence). See docs/threat-model.md row 22.
//
// The browser is the store: a tab's rules are found by their tab condition, so a restarted worker
// finds the fences it set (the approved sites live in storage.session beside them).

import type { RiskReason } from "../generated/protocol";
import { approvedSite, onSite, sameSite, siteCondition, siteKey, type SiteKey } from "./site";

/** How long the fence stays up after a run ends (a click's navigation may start late). */
export const SETTLE_MS = 3_000;

/** Rule priorities: a later line beats an earlier one. */
const PRIORITY = { blockNavigation: 1, allowSite: 2, blockPost: 3, allowPost: 4 } as const;

type Rule = chrome.declarativeNetRequest.Rule;

/**
 * A task's rules: those scoped to its tabs (`tabIds`, the task's tab first, then the tabs it opened
 * during the task), and those for tabs not yet known (`excludedTabIds`, the task's tab first, then
 * every tab that existed when the fence went up): a tab the page opens is fenced from its first
 * request, before the worker has even heard of the tab.
 */
async function rulesOf(tabId: number): Promise<Rule[]> {
  const rules = await chrome.declarativeNetRequest.getSessionRules();
  return rules.filter((r) => r.condition.tabIds?.[0] === tabId || r.condition.excludedTabIds?.[0] === tabId);
}

async function freshIds(count: number): Promise<number[]> {
  const used = new Set((await chrome.declarativeNetRequest.getSessionRules()).map((r) => r.id));
  const ids: number[] = [];
  for (let id = 1; ids.length < count; id++) if (!used.has(id)) ids.push(id);
  return ids;
}

const approvedKey = (tabId: number) => `fence:${tabId}`;
const openedKey = (tabId: number) => `fence-opened:${tabId}`;
const joinedKey = (tabId: number) => `fence-joined:${tabId}`;

async function approvedSites(tabId: number): Promise<SiteKey[]> {
  const stored = (await chrome.storage.session.get(approvedKey(tabId)))[approvedKey(tabId)];
  return Array.isArray(stored) ? (stored as SiteKey[]) : [];
}

/** The tabs the task's tab opened while its fence was up (they carry the same fence). */
export async function openedTabs(tabId: number): Promise<number[]> {
  const stored = (await chrome.storage.session.get(openedKey(tabId)))[openedKey(tabId)];
  return Array.isArray(stored) ? (stored as number[]).filter(Number.isInteger) : [];
}

/**
 * The user's tabs the task acts in (`switch_tab`: a tab the user attached, or one the task opened):
 * fenced like the task's own tab whenever its fence is up, until the task ends. Unlike a tab the
 * task's pages opened, a joined tab is the user's: taken back from a blocked page, never closed.
 */
export async function joinedTabs(tabId: number): Promise<number[]> {
  const stored = (await chrome.storage.session.get(joinedKey(tabId)))[joinedKey(tabId)];
  return Array.isArray(stored) ? (stored as number[]).filter(Number.isInteger) : [];
}

/** `tabId`'s task acts in `joined` from now on: it is under the task's fence (re-installed if up). */
export async function joinTab(tabId: number, joined: number): Promise<void> {
  const tabs = await joinedTabs(tabId);
  if (!tabs.includes(joined)) await chrome.storage.session.set({ [joinedKey(tabId)]: [...tabs, joined] });
  if (await isRaised(tabId)) await install(tabId, await approvedSites(tabId));
}

/** A new task acts in its own tab only. */
export async function leaveJoinedTabs(tabId: number): Promise<void> {
  await chrome.storage.session.remove(joinedKey(tabId));
}

/**
 * Puts the fence up around `tabId`. `pageUrl` is the page a task starts on: its site joins the
 * approved set. A run that resumes passes none: only a task's start and the user's Allow on a card
 * add a site (a decision never approves the site the tab happens to be on).
 */
export async function raise(tabId: number, pageUrl?: string): Promise<void> {
  cancelLift(tabId);
  const sites = await approvedSites(tabId);
  const own = pageUrl ? siteKey(pageUrl) : null;
  if (own && !sites.some((s) => sameSite(s, own))) sites.push(own);
  await chrome.storage.session.set({ [approvedKey(tabId)]: sites });
  await install(tabId, sites);
}

/** The hosts that start requests on a site's pages, as `initiatorDomains` names them. */
const initiatorHost = (site: SiteKey) => site.host;

async function install(tabId: number, sites: SiteKey[]): Promise<void> {
  const old = await rulesOf(tabId);
  // Temporary POST allowances of a running call survive a re-install.
  const kept = old.filter((r) => r.priority === PRIORITY.allowPost);
  // The task's tab first (the rules are found by it), then the tabs it opened and those it acts in.
  const tabIds = [...new Set([tabId, ...(await openedTabs(tabId)), ...(await joinedTabs(tabId))])];
  // Tabs not yet opened: every tab but those that exist now (the task's own first).
  const existing = (await chrome.tabs.query({})).flatMap((t) => (t.id !== undefined && !tabIds.includes(t.id) ? [t.id] : []));
  const excludedTabIds = [tabId, ...existing];
  const initiatorDomains = [...new Set(sites.map(initiatorHost))];
  const newTabs = initiatorDomains.length > 0;
  const ids = await freshIds(2 * sites.length + 4);
  const rules: Rule[] = [
    { id: ids[0]!, priority: PRIORITY.blockNavigation, action: { type: "block" }, condition: { tabIds, resourceTypes: ["main_frame"] } },
    {
      id: ids[1]!, priority: PRIORITY.blockPost, action: { type: "block" },
      condition: { tabIds, resourceTypes: ["main_frame", "sub_frame"], requestMethods: ["post"] },
    },
    ...sites.map((site, i): Rule => ({
      id: ids[i + 4]!, priority: PRIORITY.allowSite, action: { type: "allow" },
      condition: { tabIds, resourceTypes: ["main_frame"], requestMethods: ["get", "head"], ...siteCondition(site) },
    })),
  ];
  // A tab the task's pages open (a script's window.open, a link with a target, a form posted to a
  // new window): the same rules, for requests the task's sites start in a tab that is not known yet.
  if (newTabs) {
    rules.push(
      { id: ids[2]!, priority: PRIORITY.blockNavigation, action: { type: "block" }, condition: { excludedTabIds, initiatorDomains, resourceTypes: ["main_frame"] } },
      {
        id: ids[3]!, priority: PRIORITY.blockPost, action: { type: "block" },
        condition: { excludedTabIds, initiatorDomains, resourceTypes: ["main_frame"], requestMethods: ["post"] },
      },
      ...sites.map((site, i): Rule => ({
        id: ids[sites.length + i + 4]!, priority: PRIORITY.allowSite, action: { type: "allow" },
        condition: { excludedTabIds, initiatorDomains, resourceTypes: ["main_frame"], requestMethods: ["get", "head"], ...siteCondition(site) },
      })),
    );
  }
  await chrome.declarativeNetRequest.updateSessionRules({
    removeRuleIds: old.filter((r) => !kept.includes(r)).map((r) => r.id),
    addRules: rules,
  });
}

/**
 * A tab `tabId`'s task opened while its fence is up: it carries the same fence (the rules for
 * unknown tabs covered its first request).
 */
export async function adoptOpenedTab(tabId: number, opened: number): Promise<void> {
  if (!(await isRaised(tabId))) return;
  const tabs = await openedTabs(tabId);
  if (!tabs.includes(opened)) await chrome.storage.session.set({ [openedKey(tabId)]: [...tabs, opened] });
  await install(tabId, await approvedSites(tabId));
}

/**
 * The task whose fence covers `tabId`: its own tab, a tab it opened, or (for a tab not known yet)
 * the task whose sites started the request (`initiator`).
 */
export async function taskOf(tabId: number, initiator?: string): Promise<number | null> {
  const rules = await chrome.declarativeNetRequest.getSessionRules();
  // Its own task first, then a task that adopted it.
  const own = rules.find((r) => r.condition.tabIds?.[0] === tabId) ?? rules.find((r) => r.condition.tabIds?.includes(tabId));
  if (own?.condition.tabIds) return own.condition.tabIds[0]!;
  let host = "";
  try {
    host = initiator ? new URL(initiator).hostname.replace(/^\[|\]$/g, "") : "";
  } catch {
    // No initiator: no task.
  }
  const fresh = rules.find(
    (r) => r.condition.excludedTabIds && !r.condition.excludedTabIds.includes(tabId) && r.condition.initiatorDomains?.some((d) => host === d || host.endsWith(`.${d}`)),
  );
  return fresh?.condition.excludedTabIds?.[0] ?? null;
}

/** Whether `tabId` had a task (its approved set exists until the conversation is forgotten). */
export async function hasTask(tabId: number): Promise<boolean> {
  return (await approvedSites(tabId)).length > 0;
}

/** Whether `url` is on a site of `tabId`'s task (its own page's, or one the user allowed). */
export async function onApprovedSite(tabId: number, url: string | undefined): Promise<boolean> {
  return url !== undefined && (await approvedSites(tabId)).some((site) => onSite(url, site));
}

/** The tabs whose task has its fence up. */
export async function raisedTasks(): Promise<number[]> {
  const rules = await chrome.declarativeNetRequest.getSessionRules();
  return [...new Set(rules.flatMap((r) => (r.condition.tabIds?.length ? [r.condition.tabIds[0]!] : [])))];
}

/** Whether the fence is up around `tabId`. */
export async function isRaised(tabId: number): Promise<boolean> {
  return (await rulesOf(tabId)).length > 0;
}

/** Adds a site to the task's approved set (a card the user allowed); re-installs a raised fence. */
export async function approve(tabId: number, url: string): Promise<void> {
  const site = siteKey(url);
  if (site) await approveSite(tabId, site);
}

async function approveSite(tabId: number, site: SiteKey): Promise<void> {
  const sites = await approvedSites(tabId);
  if (!sites.some((s) => sameSite(s, site))) sites.push(site);
  await chrome.storage.session.set({ [approvedKey(tabId)]: sites });
  if (await isRaised(tabId)) await install(tabId, sites);
}

/**
 * Lets through, while `run` lasts, what the user approved for one tool call: an off-site
 * destination joins the task's set, a form may post to the approved host (top level or frame).
 */
export async function withApproved<T>(tabId: number, approved: readonly RiskReason[], pageUrl: string | undefined, run: () => Promise<T>, inTab = tabId): Promise<T> {
  const scheme = pageUrl?.startsWith("http:") ? "http" : "https";
  for (const reason of approved) {
    if (reason.kind !== "off_site") continue;
    const site = approvedSite(reason.host, scheme);
    if (site) await approveSite(tabId, site);
  }
  // A form may post to the server the card named: its domain, or exactly its host and port.
  const posts = approved.flatMap((r) => (r.kind === "posts_form" ? [approvedSite(r.host, scheme)] : [])).filter((s): s is SiteKey => s !== null);
  let ids: number[] = [];
  if (posts.length > 0 && (await isRaised(tabId))) {
    ids = await freshIds(posts.length);
    await chrome.declarativeNetRequest.updateSessionRules({
      addRules: posts.map((site, i): Rule => ({
        id: ids[i]!, priority: PRIORITY.allowPost, action: { type: "allow" },
        condition: { tabIds: [...new Set([tabId, inTab])], resourceTypes: ["main_frame", "sub_frame"], requestMethods: ["post"], ...siteCondition(site) },
      })),
    });
  }
  try {
    return await run();
  } finally {
    if (ids.length > 0) {
      // The submission may still be on its way when the click returns: the allowance outlives it briefly.
      setTimeout(() => void chrome.declarativeNetRequest.updateSessionRules({ removeRuleIds: ids }).catch(() => {}), SETTLE_MS);
    }
  }
}

const lifts = new Map<number, ReturnType<typeof setTimeout>>();

function cancelLift(tabId: number): void {
  const timer = lifts.get(tabId);
  if (timer !== undefined) clearTimeout(timer);
  lifts.delete(tabId);
}

/** Lifts the fence around `tabId` after the settling time (at once with `now`). */
export async function lift(tabId: number, now = false): Promise<void> {
  cancelLift(tabId);
  const remove = async () => {
    lifts.delete(tabId);
    // The tabs opened during this run are the user's once it is over.
    await chrome.storage.session.remove(openedKey(tabId));
    const rules = await rulesOf(tabId);
    if (rules.length > 0) await chrome.declarativeNetRequest.updateSessionRules({ removeRuleIds: rules.map((r) => r.id) });
  };
  if (now) return remove();
  lifts.set(tabId, setTimeout(() => void remove().catch(() => {}), SETTLE_MS));
}

/** Forgets a task's approved sites and opened tabs (the conversation was forgotten, or the tab closed). */
export async function forget(tabId: number): Promise<void> {
  await lift(tabId, true);
  await chrome.storage.session.remove([approvedKey(tabId), openedKey(tabId), joinedKey(tabId)]);
}

/** A request the fence stopped, as the browser reported it. */
export interface Blocked {
  /** The task's tab, whose overlay asks the user. */
  tabId: number;
  /** The tab the request was made in: the task's, or one its pages opened (`opened`). */
  inTab: number;
  opened: boolean;
  url: string;
  method: string;
  /** The top-level page (false: a frame's form). */
  topLevel: boolean;
  /** Set when the page started it; unset when the browser did (the address bar, back, a bookmark, an extension). */
  initiator?: string;
  /** A held download (downloads.ts): its id. */
  download?: number;
  /**
   * For a navigation without a request (`blob:`, `about:blank`…): the origin its document belongs
   * to, whose site the card names and an Allow approves ("null" for an opaque origin).
   */
  origin?: string;
}

/** When each tab last had a request blocked (read by a navigation to tell how it ended). */
const lastBlocked = new Map<number, { url: string; at: number }>();

/** The request blocked in `tabId` since `since` (a `Date.now()`), if any. */
export const blockedSince = (tabId: number, since: number): string | null => {
  const last = lastBlocked.get(tabId);
  return last && last.at >= since ? last.url : null;
};

/** Schemes whose navigations make no network request, so no rule of the fence can see them. */
const WITHOUT_REQUEST = /^(blob|data|about|filesystem|javascript):/i;

/**
 * The origin a document without a request of its own belongs to, as a string (`http://a.test:8080`;
 * "null" for an opaque origin, null when Chrome tells nothing):
 * - `blob:` and `filesystem:` addresses carry it: `blob:https://other.example/<uuid>` belongs to
 *   https://other.example (only that origin can make the address);
 * - `about:blank`, `data:` and the rest inherit it from the document that started the navigation
 *   where Chrome gives them that origin (about:blank does; a data: document's is opaque). Chrome's
 *   events do not name the initiator, so the committed document is asked (`self.origin`, read by
 *   an injected function in exactly that document).
 */
export async function documentOrigin(url: string, tabId: number, documentId: string | undefined): Promise<string | null> {
  if (/^(blob|filesystem):/i.test(url)) {
    try {
      const inner = new URL(new URL(url).pathname);
      if (inner.protocol === "http:" || inner.protocol === "https:") return inner.origin;
    } catch {
      // Not a web origin inside: asked below.
    }
  }
  const target = documentId ? { tabId, documentIds: [documentId] } : { tabId, frameIds: [0] };
  const read = await chrome.scripting
    .executeScript({ target, injectImmediately: true, func: () => self.origin })
    .catch(() => []);
  const origin = read[0]?.result;
  return typeof origin === "string" ? origin : null;
}

/** Empties a document the fence judged off the task's sites, at once (the worker then takes the tab back). */
async function emptyDocument(tabId: number, documentId: string | undefined): Promise<void> {
  const target = documentId ? { tabId, documentIds: [documentId] } : { tabId, frameIds: [0] };
  await chrome.scripting
    .executeScript({
      target,
      injectImmediately: true,
      func: () => {
        window.stop();
        document.documentElement?.replaceChildren();
      },
    })
    .catch(() => {});
}

/**
 * A top-level navigation without a request in a fenced tab (at its commit, or a same-document
 * move): judged by the site of the origin its document belongs to; one off the task's sites (or
 * of no site: an opaque or unreadable origin) is emptied and reported to `onBlocked`.
 */
async function judgeWithoutRequest(
  details: { tabId: number; frameId: number; url: string; documentId?: string },
  onBlocked: (blocked: Blocked) => void,
): Promise<void> {
  if (details.frameId !== 0 || details.tabId < 0 || !WITHOUT_REQUEST.test(details.url)) return;
  // A tab the page opened to about:blank may commit before the worker adopts it: its opener's task.
  const opener = async () => {
    const tab = await chrome.tabs.get(details.tabId).catch(() => null);
    return tab?.openerTabId === undefined ? null : taskOf(tab.openerTabId);
  };
  const task = (await taskOf(details.tabId)) ?? (await opener());
  if (task === null) return;
  const origin = await documentOrigin(details.url, details.tabId, details.documentId);
  if (origin !== null && origin !== "null" && (await onApprovedSite(task, `${origin}/`))) return;
  // An about:blank of an opaque origin, or of one Hearth cannot read (every web origin it can), is
  // no site's: no web page can write into it (the tab's first entry, which going back may reach,
  // is one).
  if ((origin === null || origin === "null") && /^about:/i.test(details.url)) return;
  await emptyDocument(details.tabId, details.documentId);
  lastBlocked.set(details.tabId, { url: details.url, at: Date.now() });
  onBlocked({
    tabId: task,
    inTab: details.tabId,
    opened: task !== details.tabId,
    url: details.url,
    method: "GET",
    topLevel: true,
    // Never taken for the user's own navigation (which would stop the task and lift the fence):
    // the browser's own navigations make requests; a document of no readable origin is judged
    // off the task's sites and taken back like the page's.
    initiator: origin ?? "null",
    origin: origin ?? "null",
  });
}

/**
 * Calls `onBlocked` for each request the fence stops (`net::ERR_BLOCKED_BY_CLIENT` in a fenced
 * tab), and for each navigation without a request that leaves the task's sites.
 */
export function watch(onBlocked: (blocked: Blocked) => void): void {
  const withoutRequest = (details: { tabId: number; frameId: number; url: string; documentId?: string }) =>
    void judgeWithoutRequest(details, onBlocked).catch(() => {});
  chrome.webNavigation.onCommitted.addListener(withoutRequest);
  chrome.webNavigation.onHistoryStateUpdated.addListener(withoutRequest);
  chrome.webNavigation.onReferenceFragmentUpdated.addListener(withoutRequest);
  chrome.webRequest.onErrorOccurred.addListener(
    (details) => {
      if (details.error !== "net::ERR_BLOCKED_BY_CLIENT" || details.tabId < 0) return;
      if (details.type === "main_frame") lastBlocked.set(details.tabId, { url: details.url, at: Date.now() });
      void taskOf(details.tabId, details.initiator).then((task) => {
        if (task === null) return;
        onBlocked({
          tabId: task,
          inTab: details.tabId,
          opened: task !== details.tabId,
          url: details.url,
          method: details.method,
          topLevel: details.type === "main_frame",
          ...(details.initiator ? { initiator: details.initiator } : {}),
        });
      });
    },
    { urls: ["http://*/*", "https://*/*"], types: ["main_frame", "sub_frame"] },
  );
}
