// What a site is, for the worker: the twin of the agent's rule (crates/agent/src/policy/site.rs,
// `site_of_url` and `host_for_site`), held to it by one table both sides are tested against
// (crates/agent/src/policy/site-cases.json; extension/tests/unit/site.test.mjs). Grants, the
// fence's rules, POST allowances and read_link all compare sites with these functions only.
//
// A site is the scheme and the registrable domain by the public-suffix list (private suffixes
// included: two users of github.io are two sites); for IP addresses and `localhost` it is the
// scheme, the host and the port, since nothing else tells two servers on one machine apart.

import { getDomain } from "tldts";

export interface SiteKey {
  scheme: string;
  /** The registrable domain (its subdomains belong to the site), or an IP / localhost host (IPv6 without brackets). */
  host: string;
  /** The port, for IP addresses and localhost only. */
  port: string | null;
}

const isIp = (host: string) => /^\d+\.\d+\.\d+\.\d+$/.test(host) || host.includes(":");
const sitedByPort = (host: string) => isIp(host) || host === "localhost" || host.endsWith(".localhost");

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
  const host = parsed.hostname.toLowerCase().replace(/\.$/, "").replace(/^\[|\]$/g, "");
  if (host === "") return null;
  if (sitedByPort(host)) return { scheme, host, port: parsed.port || (scheme === "https" ? "443" : "80") };
  return { scheme, host: getDomain(host, { allowPrivateDomains: true }) ?? host, port: null };
}

/** The site as the agent writes it (`site_of_url`): `https://example.com`, `http://127.0.0.1:8080`, `http://[::1]:5000`. */
export const siteText = (site: SiteKey): string =>
  `${site.scheme}://${site.host.includes(":") ? `[${site.host}]` : site.host}${site.port === null ? "" : `:${site.port}`}`;

export const sameSite = (a: SiteKey | null, b: SiteKey | null): boolean => a !== null && b !== null && siteText(a) === siteText(b);

/**
 * The site a card's approval names: `host` is what the agent's reason carries (`host_for_site`:
 * the host, with its port for IP addresses and localhost), on a page using `scheme`. Null when it
 * is not a host (a form action that is not a web address).
 */
export function approvedSite(host: string, scheme: string): SiteKey | null {
  if (!/^[\w.\-[\]:]+$/.test(host)) return null;
  return siteKey(`${scheme}://${host}/`);
}

/**
 * Whether `url` is on `site`, as the fence's rules (`siteCondition`) match it: an https address
 * counts for an http site named by its domain (an upgrade), never another port of a local server.
 */
export function onSite(url: string, site: SiteKey): boolean {
  const key = siteKey(url);
  if (key === null || key.host !== site.host || key.port !== site.port) return false;
  return key.scheme === site.scheme || (site.port === null && site.scheme === "http" && key.scheme === "https");
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * The declarativeNetRequest condition matching a site's URLs (an https upgrade of an http site
 * counts): the registrable domain and its subdomains, or the exact host and port of a local server.
 */
export function siteCondition(site: SiteKey): chrome.declarativeNetRequest.RuleCondition {
  if (site.port !== null) {
    const host = site.host.includes(":") ? `\\[${escape(site.host)}\\]` : escape(site.host);
    const defaultPort = site.port === (site.scheme === "https" ? "443" : "80");
    const port = defaultPort ? `(:${site.port})?` : `:${site.port}`;
    return { regexFilter: `^${site.scheme}://${host}${port}[/?#]` };
  }
  return { requestDomains: [site.host], ...(site.scheme === "https" ? { urlFilter: "|https://" } : {}) };
}
