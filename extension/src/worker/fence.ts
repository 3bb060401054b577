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
// The browser is the store: a tab's rules are found by their tab condition, so a restarted worker
// finds the fences it set (the approved sites live in storage.session beside them).

import type { RiskReason } from "../generated/protocol";

/** How long the fence stays up after a run ends (a click's navigation may start late). */
export const SETTLE_MS = 3_000;

/** Rule priorities: a later line beats an earlier one. */
const PRIORITY = { blockNavigation: 1, allowSite: 2, blockPost: 3, allowPost: 4 } as const;

type Rule = chrome.declarativeNetRequest.Rule;

/** What identifies a site in the fence (the agent's policy compares the same way, policy/site.rs). */
export interface SiteKey {
  scheme: string;
  /** The host without a leading `www.` (its subdomains count as the site), or an IP / localhost with its port. */
  host: string;
  /** Set for IP addresses and localhost, where the port tells two servers apart ("*": any port,
   * for a host the user allowed on a card, which names the host only). */
  port: string | null;
}

const isLocal = (host: string) => host === "localhost" || host.endsWith(".localhost") || /^\d+\.\d+\.\d+\.\d+$/.test(host) || host.startsWith("[");

/** The site of an http(s) URL, or null. */
export function siteKey(url: string): SiteKey | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  const scheme = parsed.protocol.replace(/:$/, "");
  if (scheme !== "http" && scheme !== "https") return null;
  const host = parsed.hostname.toLowerCase();
  if (isLocal(host)) return { scheme, host, port: parsed.port || (scheme === "https" ? "443" : "80") };
  return { scheme, host: host.replace(/^www\./, ""), port: null };
}

export const sameSite = (a: SiteKey | null, b: SiteKey | null): boolean => a !== null && b !== null && JSON.stringify(a) === JSON.stringify(b);

/** The site a card's approval of `host` (an off-site reason) names, on a page using `scheme`. */
export function approvedSite(host: string, scheme: string): SiteKey {
  const lower = host.toLowerCase();
  return isLocal(lower) ? { scheme, host: lower, port: "*" } : { scheme, host: lower.replace(/^www\./, ""), port: null };
}

/** Whether `url` is on `site` as the fence's rules match it (a named host's subdomains count; an
 * https address counts for an http site). */
export function onSite(url: string, site: SiteKey): boolean {
  const key = siteKey(url);
  if (key === null || (key.scheme !== site.scheme && !(site.scheme === "http" && key.scheme === "https"))) return false;
  if (site.port !== null) return key.port !== null && key.host === site.host && (site.port === "*" || key.port === site.port);
  return key.port === null && (key.host === site.host || key.host.endsWith(`.${site.host}`));
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** The request condition matching a site's URLs (an https upgrade of an http site counts). */
function siteCondition(site: SiteKey): chrome.declarativeNetRequest.RuleCondition {
  if (site.port !== null) {
    const defaultPort = site.port === (site.scheme === "https" ? "443" : "80");
    const port = site.port === "*" ? "(:[0-9]+)?" : defaultPort ? `(:${site.port})?` : `:${site.port}`;
    return { regexFilter: `^${site.scheme}://${escape(site.host)}${port}[/?#]` };
  }
  return { requestDomains: [site.host], ...(site.scheme === "https" ? { urlFilter: "|https://" } : {}) };
}

async function rulesOf(tabId: number): Promise<Rule[]> {
  const rules = await chrome.declarativeNetRequest.getSessionRules();
  return rules.filter((r) => r.condition.tabIds?.length === 1 && r.condition.tabIds[0] === tabId);
}

async function freshIds(count: number): Promise<number[]> {
  const used = new Set((await chrome.declarativeNetRequest.getSessionRules()).map((r) => r.id));
  const ids: number[] = [];
  for (let id = 1; ids.length < count; id++) if (!used.has(id)) ids.push(id);
  return ids;
}

const approvedKey = (tabId: number) => `fence:${tabId}`;

async function approvedSites(tabId: number): Promise<SiteKey[]> {
  const stored = (await chrome.storage.session.get(approvedKey(tabId)))[approvedKey(tabId)];
  return Array.isArray(stored) ? (stored as SiteKey[]) : [];
}

/** Puts the fence up around `tabId` for a run whose page is `pageUrl` (its site is approved). */
export async function raise(tabId: number, pageUrl: string | undefined): Promise<void> {
  cancelLift(tabId);
  const sites = await approvedSites(tabId);
  const own = pageUrl ? siteKey(pageUrl) : null;
  if (own && !sites.some((s) => sameSite(s, own))) sites.push(own);
  await chrome.storage.session.set({ [approvedKey(tabId)]: sites });
  await install(tabId, sites);
}

async function install(tabId: number, sites: SiteKey[]): Promise<void> {
  const old = await rulesOf(tabId);
  // Temporary POST allowances of a running call survive a re-install.
  const kept = old.filter((r) => r.priority === PRIORITY.allowPost);
  const ids = await freshIds(sites.length + 2);
  const tabIds = [tabId];
  const rules: Rule[] = [
    { id: ids[0]!, priority: PRIORITY.blockNavigation, action: { type: "block" }, condition: { tabIds, resourceTypes: ["main_frame"] } },
    {
      id: ids[1]!, priority: PRIORITY.blockPost, action: { type: "block" },
      condition: { tabIds, resourceTypes: ["main_frame", "sub_frame"], requestMethods: ["post"] },
    },
    ...sites.map((site, i): Rule => ({
      id: ids[i + 2]!, priority: PRIORITY.allowSite, action: { type: "allow" },
      condition: { tabIds, resourceTypes: ["main_frame"], requestMethods: ["get", "head"], ...siteCondition(site) },
    })),
  ];
  await chrome.declarativeNetRequest.updateSessionRules({
    removeRuleIds: old.filter((r) => !kept.includes(r)).map((r) => r.id),
    addRules: rules,
  });
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
export async function withApproved<T>(tabId: number, approved: readonly RiskReason[], pageUrl: string | undefined, run: () => Promise<T>): Promise<T> {
  const scheme = pageUrl?.startsWith("http:") ? "http" : "https";
  for (const reason of approved) {
    if (reason.kind !== "off_site") continue;
    const host = reason.host;
    await approveSite(tabId, approvedSite(host, scheme));
  }
  const posts = approved.flatMap((r) => (r.kind === "posts_form" ? [r.host] : []));
  let ids: number[] = [];
  if (posts.length > 0 && (await isRaised(tabId))) {
    ids = await freshIds(posts.length);
    await chrome.declarativeNetRequest.updateSessionRules({
      addRules: posts.map((host, i): Rule => ({
        id: ids[i]!, priority: PRIORITY.allowPost, action: { type: "allow" },
        condition: { tabIds: [tabId], resourceTypes: ["main_frame", "sub_frame"], requestMethods: ["post"], requestDomains: [host.replace(/^\[|\]$/g, "")] },
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
    const rules = await rulesOf(tabId);
    if (rules.length > 0) await chrome.declarativeNetRequest.updateSessionRules({ removeRuleIds: rules.map((r) => r.id) });
  };
  if (now) return remove();
  lifts.set(tabId, setTimeout(() => void remove().catch(() => {}), SETTLE_MS));
}

/** Forgets a task's approved sites (the conversation was forgotten, or the tab closed). */
export async function forget(tabId: number): Promise<void> {
  await lift(tabId, true);
  await chrome.storage.session.remove(approvedKey(tabId));
}

/** A request the fence stopped, as the browser reported it. */
export interface Blocked {
  tabId: number;
  url: string;
  method: string;
  /** The top-level page (false: a frame's form). */
  topLevel: boolean;
  /** Set when the page started it; unset when the browser did (the address bar, back, a bookmark, an extension). */
  initiator?: string;
}

/** When each tab last had a request blocked (read by a navigation to tell how it ended). */
const lastBlocked = new Map<number, { url: string; at: number }>();

/** The request blocked in `tabId` since `since` (a `Date.now()`), if any. */
export const blockedSince = (tabId: number, since: number): string | null => {
  const last = lastBlocked.get(tabId);
  return last && last.at >= since ? last.url : null;
};

/** Calls `onBlocked` for each request the fence stops (`net::ERR_BLOCKED_BY_CLIENT` in a fenced tab). */
export function watch(onBlocked: (blocked: Blocked) => void): void {
  chrome.webRequest.onErrorOccurred.addListener(
    (details) => {
      if (details.error !== "net::ERR_BLOCKED_BY_CLIENT" || details.tabId < 0) return;
      if (details.type === "main_frame") lastBlocked.set(details.tabId, { url: details.url, at: Date.now() });
      void isRaised(details.tabId).then((raised) => {
        if (!raised) return;
        onBlocked({
          tabId: details.tabId,
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
