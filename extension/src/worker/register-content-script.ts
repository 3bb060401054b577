// The content script is registered at run time rather than in the manifest, so that sites the
// user disabled get nothing injected at all: their origins are excluded from its matches.

import { loadSettings } from "../shared/settings";

const SCRIPT_ID = "hearth-content";

/** Match patterns for an origin (`https://example.com:8080` → `https://example.com/*`). */
export function excludePattern(origin: string): string | null {
  try {
    const { protocol, hostname } = new URL(origin);
    // Match patterns carry no port: disabling a host disables it on every port.
    return protocol === "http:" || protocol === "https:" ? `${protocol}//${hostname}/*` : null;
  } catch {
    return null;
  }
}

/** (Re-)registers the content script with the current list of disabled sites. */
export async function registerContentScript(): Promise<void> {
  const settings = await loadSettings();
  const excludeMatches = [...new Set(settings.disabledSites.map(excludePattern).filter((p): p is string => p !== null))];
  const script: chrome.scripting.RegisteredContentScript = {
    id: SCRIPT_ID,
    matches: ["http://*/*", "https://*/*"],
    excludeMatches,
    js: ["content.js"],
    // Before any page script: the overlay's host is made before the page could define a
    // look-alike <hearth-overlay>.
    runAt: "document_start",
    allFrames: false,
    persistAcrossSessions: true,
  };
  const existing = await chrome.scripting.getRegisteredContentScripts({ ids: [SCRIPT_ID] });
  if (existing.length > 0) await chrome.scripting.updateContentScripts([script]);
  else await chrome.scripting.registerContentScripts([script]);
}
