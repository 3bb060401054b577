// The overlay's host on the page: <hearth-overlay> with a *closed* shadow root, so the page can
// neither read nor restyle what is inside. It carries nothing but its inline style:
// - it and its shadow root are made at document_start (protectOverlay in overlay.ts), before any
//   page script could define a look-alike element, and are only ever reached through the
//   overlay's variables, never looked up in the document (a page may hold <hearth-overlay>
//   elements of its own);
// - its box is set inline with !important (beats any page stylesheet) and set again when the page
//   changes its attributes; it is put back (a few times) when the page removes it;
// - keystrokes, text input, clipboard and focus events from inside never reach page listeners
//   (ui/shield.ts).

import { installShield, type Shield } from "./ui/shield";

/** The host's box, set inline with !important: `all: initial` first, then what it needs. */
const HOST_STYLE: [string, string][] = [
  ["all", "initial"],
  ["position", "fixed"],
  ["right", "16px"],
  ["bottom", "16px"],
  ["z-index", "2147483647"],
  ["display", "block"],
  ["visibility", "visible"],
  ["opacity", "1"],
  // Not reset by `all`.
  ["direction", "ltr"],
  ["unicode-bidi", "isolate"],
];

/** How many times the host is put back after the page removed it. */
const MAX_REATTACH = 3;

export interface HostParts {
  host: HTMLElement;
  shadow: ShadowRoot;
  shield: Shield;
}

/** Makes the host, its closed shadow root and the shield that guards them. */
export function createHost(): HostParts {
  const shield = installShield();
  const host = document.createElement("hearth-overlay");
  const shadow = host.attachShadow({ mode: "closed" });
  shield.guard(host, shadow);
  return { host, shadow, shield };
}

/**
 * Puts the host on the page with its inline style, and keeps both there: the style is set again
 * when the page changes the host's attributes (which it may not add to), and the host is put back
 * when the page removes it, MAX_REATTACH times at most. Returns what stops it.
 */
export function keepOnPage(host: HTMLElement): () => void {
  const applyStyle = () => {
    host.style.cssText = "";
    for (const [property, value] of HOST_STYLE) host.style.setProperty(property, value, "important");
  };
  applyStyle();
  const style = host.style.cssText;
  const guard = new MutationObserver(() => {
    for (const name of host.getAttributeNames()) if (name !== "style") host.removeAttribute(name);
    if (host.style.cssText !== style) applyStyle();
  });
  guard.observe(host, { attributes: true });

  let reattached = 0;
  const keeper = new MutationObserver(() => {
    const root = document.documentElement;
    if (!root || host.parentNode === root) return;
    if (reattached++ >= MAX_REATTACH) return keeper.disconnect();
    attach();
  });
  const attach = () => {
    const root = document.documentElement;
    if (!root) return;
    // The page may have replaced its root element: watch the current one.
    keeper.observe(document, { childList: true });
    keeper.observe(root, { childList: true });
    root.append(host);
  };
  attach();
  return () => {
    guard.disconnect();
    keeper.disconnect();
  };
}
