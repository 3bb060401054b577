// Driving the overlay from a test. The overlay is two parts: its host on the page (a closed shadow
// root holding the launcher, the outlines and a frame), reached through the DevTools protocol
// (DOM.getDocument with pierce), and in that frame Hearth's chat page (sidepanel.html, an
// extension page in its own process), reached as its own frame target. Test builds mirror each
// part's state as data-* attributes of a hidden <div class="test-state">: the host's (state,
// side-panel, passage, frames, and the task as it follows it) and the chat page's (task, cards,
// engine, seen…); the helpers read them as one, the chat's first. Clicks land at an element's box like a person's, with the frame's offset added for
// the chat's elements. A page may hold look-alike <hearth-overlay> elements: Hearth's is the one
// with a closed shadow root holding the mirror.

import { mkdirSync } from "node:fs";
import { resolve } from "node:path";

export const ARTIFACTS = resolve(import.meta.dirname, "../../../artifacts/e2e");

/** How long `overlayHost` waits for the overlay to be injected. */
const HOST_TIMEOUT_MS = 15_000;

/**
 * Waits for the overlay to be injected. Returns its host as `{ getAttribute, boundingBox }`:
 * `getAttribute("data-<name>")` reads the test-state mirror (`overlayData`), `boundingBox()` is the
 * host's box in the page (null when it has none).
 */
export async function overlayHost(page, timeout = HOST_TIMEOUT_MS) {
  const cdp = await cdpOf(page);
  const deadline = Date.now() + timeout;
  // (While the page navigates, the protocol may fail for a moment.)
  while (!(await hearthHost(cdp).catch(() => null))) {
    if (Date.now() > deadline) throw new Error(`Hearth's overlay was not injected after ${timeout} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    getAttribute: (attribute) => {
      if (!attribute.startsWith("data-")) throw new Error(`the overlay's host has no ${attribute}: only data-* state can be read`);
      return overlayData(page, attribute.slice("data-".length));
    },
    boundingBox: () => hostBox(page),
  };
}

/** Whether Hearth's overlay host is in the page (look-alikes the page made do not count). */
export async function overlayPresent(page) {
  return (await hearthHost(await cdpOf(page))) !== null;
}

/** The box of Hearth's host element in the page's viewport ({ x, y, width, height }), or null. */
export async function hostBox(page) {
  const cdp = await cdpOf(page);
  const host = await hearthHost(cdp);
  if (!host) return null;
  const box = await cdp.send("DOM.getBoxModel", { nodeId: host.nodeId }).catch(() => null);
  if (!box) return null;
  const [x1, y1, , , x3, y3] = box.model.border;
  return { x: x1, y: y1, width: x3 - x1, height: y3 - y1 };
}

/** Clicks the launcher button like a person would. */
export async function clickLauncher(page) {
  await overlayHost(page);
  await clickInOverlay(page, ".launcher");
}

/**
 * The overlay's `data-<name>` state (kebab-case, as the attribute: "pending-call"), or null. Read
 * over the DevTools protocol from the host's and the chat frame's test-state mirrors.
 */
export async function overlayData(page, name) {
  const state = await testState(page);
  return state?.[`data-${name}`] ?? null;
}

/**
 * All of the overlay's data-* state as its dataset would show it (camelCase keys: `pendingCall`),
 * `{}` while the overlay is not in the page.
 */
export async function overlayState(page) {
  const state = (await testState(page)) ?? {};
  const out = {};
  for (const [attribute, value] of Object.entries(state)) {
    if (attribute.startsWith("data-")) out[attribute.slice(5).replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = value;
  }
  return out;
}

/** Longer than the transcript's redraw delay (transcript-view.ts). */
const REDRAW_MS = 50;

/**
 * Waits until the overlay's `data-<name>` is `wanted` (a value, or one of an array; null for
 * absent); returns it. With `{ not: true }`, waits until it is none of them.
 */
export async function waitForData(page, name, wanted, timeout = 15_000, { not = false, polling = 100 } = {}) {
  const values = Array.isArray(wanted) ? wanted : [wanted];
  const deadline = Date.now() + timeout;
  let value = null;
  for (;;) {
    value = (await testState(page).catch(() => null))?.[`data-${name}`] ?? null;
    if (values.includes(value) !== not) {
      // The state is mirrored at once; the transcript is drawn within a frame after it
      // (transcript-view.ts, 16 ms): what a test reads next is on screen.
      await new Promise((r) => setTimeout(r, REDRAW_MS));
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`the overlay's data-${name} is ${JSON.stringify(value)} after ${timeout} ms, waiting for it ${not ? "not " : ""}to be ${values.map((v) => JSON.stringify(v)).join(" or ")}`);
    }
    await new Promise((r) => setTimeout(r, polling));
  }
}

/** Waits until the engine state shown by the overlay is one of `states`; returns it. */
export function waitForEngine(page, states, timeout = 180_000) {
  return waitForData(page, "engine", states, timeout, { polling: 200 });
}

export async function screenshot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = resolve(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path });
  return path;
}

/** How long the helpers below wait for an element to appear inside the overlay. */
const FIND_TIMEOUT_MS = 10_000;

/** The DevTools session of `page` or of a frame target (one each, reused). */
const sessions = new WeakMap();
async function cdpOf(pageOrFrame, page = pageOrFrame) {
  let session = sessions.get(pageOrFrame);
  if (!session) {
    session = await page.context().newCDPSession(pageOrFrame);
    sessions.set(pageOrFrame, session);
  }
  return session;
}

/** The attributes of a DOM.Node as an object. */
const attributesOf = (node) => {
  const out = {};
  const list = node.attributes ?? [];
  for (let i = 0; i + 1 < list.length; i += 2) out[list[i]] = list[i + 1];
  return out;
};

/** The test-state mirror among a shadow root's children, or undefined. */
const mirrorIn = (shadow) => shadow.children?.find((child) => child.nodeName === "DIV" && /(^|\s)test-state(\s|$)/.test(attributesOf(child).class ?? ""));

/**
 * Hearth's host node (with `.shadow`, its shadow root, and `.mirror`, the test-state element), or
 * null while it is not in the page. A <hearth-overlay> of the page's own (no shadow root, an open
 * one, or one without the mirror) is passed over.
 */
async function hearthHost(cdp) {
  const { root } = await cdp.send("DOM.getDocument", { depth: -1, pierce: true });
  const stack = [root];
  while (stack.length) {
    const node = stack.pop();
    if (node.nodeName === "HEARTH-OVERLAY") {
      const shadow = node.shadowRoots?.find((s) => s.shadowRootType === "closed");
      const mirror = shadow && mirrorIn(shadow);
      if (mirror) return Object.assign(node, { shadow, mirror });
    }
    // Not into iframes' documents: Hearth's overlay is only in the top frame.
    stack.push(...(node.children ?? []), ...(node.shadowRoots ?? []));
  }
  return null;
}

/** The chat page's frame in `page` (the one Hearth's host holds), or null before the overlay first opens. */
export function chatFrame(page) {
  return (
    page.frames().find((frame) => {
      if (frame.parentFrame() !== page.mainFrame() || frame.isDetached()) return false;
      try {
        const url = new URL(frame.url());
        return url.protocol === "chrome-extension:" && url.pathname === "/sidepanel.html";
      } catch {
        return false;
      }
    }) ?? null
  );
}

/** Whether `selector` names a part of the host (drawn by the content script) rather than of the chat. */
const IN_HOST = /^\s*(\.launcher|\.target-outline|\.passage-outline|\.point-marker|\.chat-frame)\b/;

/** The chat frame's test-state mirror, or null without a frame. */
async function frameState(page) {
  const frame = chatFrame(page);
  if (!frame) return null;
  return frame
    .evaluate(() => {
      const mirror = document.querySelector(".test-state");
      return mirror ? Object.fromEntries([...mirror.attributes].map((a) => [a.name, a.value])) : null;
    })
    .catch(() => null);
}

/**
 * Both mirrors' attributes, or null without a host: the host's own (state, side-panel, passage,
 * frames), and the conversation's as the chat frame shows it, or as the host follows it while
 * there is no frame (the overlay never opened on this page).
 */
async function testState(page) {
  const host = await hearthHost(await cdpOf(page));
  if (!host) return null;
  return { ...attributesOf(host.mirror), ...((await frameState(page)) ?? {}) };
}

/** The chat's root in its frame: the chat page's open shadow root. */
const CHAT_ROOT = `document.querySelector(".hearth-side-panel")?.shadowRoot`;

/** The elements matching `selector` inside the overlay (an array, maybe empty: count them). */
export async function queryOverlay(page, selector) {
  if (IN_HOST.test(selector)) {
    const cdp = await cdpOf(page);
    const host = await hearthHost(cdp);
    if (!host) return [];
    const { nodeIds } = await cdp.send("DOM.querySelectorAll", { nodeId: host.shadow.nodeId, selector });
    return nodeIds;
  }
  const frame = chatFrame(page);
  if (!frame) return [];
  const count = await frame
    .evaluate((sel) => document.querySelector(".hearth-side-panel")?.shadowRoot?.querySelectorAll(sel).length ?? 0, selector)
    .catch(() => 0);
  return Array.from({ length: count }, (_, i) => i);
}

/**
 * A remote object of the first `selector` in the overlay, in the session that can act on it (the
 * page's for the host's parts, the frame's for the chat's), waiting for it to appear.
 */
async function findInOverlay(page, selector, timeout = FIND_TIMEOUT_MS) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const found = await findOnce(page, selector).catch(() => null);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`no ${selector} in the overlay after ${timeout} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function findOnce(page, selector) {
  if (IN_HOST.test(selector)) {
    const cdp = await cdpOf(page);
    const host = await hearthHost(cdp);
    if (!host) return null;
    const { nodeId } = await cdp.send("DOM.querySelector", { nodeId: host.shadow.nodeId, selector });
    if (!nodeId) return null;
    const { object } = await cdp.send("DOM.resolveNode", { nodeId });
    return { cdp, objectId: object.objectId, frame: null };
  }
  const frame = chatFrame(page);
  if (!frame) return null;
  const cdp = await cdpOf(frame, page);
  const { result, exceptionDetails } = await cdp.send("Runtime.evaluate", { expression: `${CHAT_ROOT}?.querySelector(${JSON.stringify(selector)})` });
  if (exceptionDetails || !result.objectId) return null;
  return { cdp, objectId: result.objectId, frame };
}

/** Calls `fn` (source of a function; `this` is the element) on the first `selector` in the overlay. */
export async function overlayEval(page, selector, fn, ...args) {
  // The chat redraws a card by replacing its nodes, and a frame may load anew: retry a lost node.
  for (let attempt = 0; ; attempt++) {
    try {
      const { cdp, objectId } = await findInOverlay(page, selector);
      const { result, exceptionDetails } = await cdp.send("Runtime.callFunctionOn", {
        objectId,
        functionDeclaration: fn,
        arguments: args.map((value) => ({ value })),
        returnByValue: true,
      });
      await cdp.send("Runtime.releaseObject", { objectId }).catch(() => {});
      if (exceptionDetails) throw new Error(`${selector}: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
      return result.value;
    } catch (error) {
      // (A frame that loaded anew has a new session.)
      const frame = chatFrame(page);
      if (frame) sessions.delete(frame);
      if (attempt >= 5 || !/Could not find (node|object)|No node with given id|Target closed|Session closed|detached|Cannot find context/i.test(String(error))) throw error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** The chat frame's viewport in the page ({ x, y }: its content box's corner), or null. */
async function frameOffset(page) {
  const cdp = await cdpOf(page);
  const host = await hearthHost(cdp);
  const frameNode = host?.shadow.children?.find((child) => child.nodeName === "IFRAME");
  if (!frameNode) return null;
  const box = await cdp.send("DOM.getBoxModel", { nodeId: frameNode.nodeId }).catch(() => null);
  return box ? { x: box.model.content[0], y: box.model.content[1] } : null;
}

/** How long a click in the chat waits for the frame to count as seen (approvals need it). */
const SEEN_WAIT_MS = 3_000;

/**
 * Clicks the center of `selector` inside the overlay with the mouse (waits until it is visible).
 * In the chat, it first waits (a while, then clicks anyway) until the frame has been seen long
 * enough for an approval to count, as a person takes that long to read a card.
 */
export async function clickInOverlay(page, selector) {
  if (!IN_HOST.test(selector)) await waitForData(page, "seen", "true", SEEN_WAIT_MS).catch(() => {});
  const deadline = Date.now() + FIND_TIMEOUT_MS;
  for (;;) {
    const point = await overlayEval(
      page,
      selector,
      `function () {
        this.scrollIntoView({ block: "nearest" });
        const r = this.getBoundingClientRect();
        return r.width > 0 && r.height > 0 ? { x: r.x + r.width / 2, y: r.y + r.height / 2 } : null;
      }`,
    ).catch((error) => (Date.now() > deadline ? Promise.reject(error) : null));
    const offset = IN_HOST.test(selector) ? { x: 0, y: 0 } : await frameOffset(page);
    if (point && offset) return page.mouse.click(offset.x + point.x, offset.y + point.y);
    if (Date.now() > deadline) throw new Error(`no visible ${selector} in the overlay after ${FIND_TIMEOUT_MS} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The text content of `selector` inside the overlay. */
export function overlayText(page, selector) {
  return overlayEval(page, selector, "function () { return this.textContent; }");
}
