// The overlay's host on the page: <hearth-overlay> with a *closed* shadow root, so the page can
// neither read nor restyle what is inside (the launcher, the outlines, and the frame that holds
// Hearth's chat page: ./overlay.ts). It carries nothing but its inline style:
// - it and its shadow root are made at document_start (protectOverlay in overlay.ts), before any
//   page script could define a look-alike element, and are only ever reached through the
//   overlay's variables, never looked up in the document (a page may hold <hearth-overlay>
//   elements of its own);
// - its box is set inline with !important (beats any page stylesheet) and set again when the page
//   changes its attributes;
// - it is put back under the root element whenever the page moves or removes it, rewrites the
//   document (document.open()) or replaces its root, for as long as the page keeps at it: the
//   observers watch, they do not count. Where the browser can move a node without unloading it
//   (moveBefore), the frame inside survives the move; elsewhere it loads again.

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

export interface HostParts {
  host: HTMLElement;
  shadow: ShadowRoot;
}

/** Makes the host and its closed shadow root. */
export function createHost(): HostParts {
  const host = document.createElement("hearth-overlay");
  const shadow = host.attachShadow({ mode: "closed" });
  return { host, shadow };
}

type Movable = Element & { moveBefore?(node: Node, child: Node | null): void };

/**
 * Put back more often than this in a second, the host is contested: a page's own observer moving
 * it as soon as it is put back would bounce it with the keeper forever (hanging the tab), so it
 * is then put back on a timer instead, as long as that goes on.
 */
const PUT_BACKS_PER_SECOND = 30;
const CONTESTED_DELAY_MS = 200;

/**
 * Puts the host on the page with its inline style, and keeps both there: the style is set again
 * when the page changes the host's attributes (which it may not add to), and the host is put back
 * under the root element whenever it is anywhere else. `restored` runs after the host was put back
 * from outside the document (document.open() also drops the listeners of every element in it).
 * Returns what stops it.
 */
export function keepOnPage(host: HTMLElement, restored: () => void): () => void {
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

  let second = 0;
  let putBacks = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // A move into the page's own element shows as a removal from the root; document.open() or a new
  // root element as a change of the document's children.
  const keeper = new MutationObserver(() => {
    if (host.parentNode === document.documentElement) return;
    const now = performance.now();
    if (now - second > 1_000) [second, putBacks] = [now, 0];
    if (++putBacks <= PUT_BACKS_PER_SECOND) return putBack();
    timer ??= setTimeout(() => {
      timer = undefined;
      putBack();
    }, CONTESTED_DELAY_MS);
  });
  const putBack = () => {
    const root = document.documentElement as Movable | null;
    keeper.observe(document, { childList: true });
    if (!root) return;
    // (The page may have replaced its root element: watch the current one.)
    keeper.observe(root, { childList: true });
    if (host.parentNode === root) return;
    // A move keeps the frame's document where the browser can (a connected host, the same document).
    if (host.isConnected && typeof root.moveBefore === "function") {
      try {
        root.moveBefore(host, null);
        return;
      } catch {
        // Not movable from there: appended below.
      }
    }
    const wasOut = !host.isConnected;
    root.append(host);
    if (wasOut) restored();
  };
  putBack();
  return () => {
    clearTimeout(timer);
    guard.disconnect();
    keeper.disconnect();
  };
}
