// Driving the overlay from a test. Its shadow root is closed and its host element carries no state:
// tests reach inside the shadow root through the DevTools protocol (DOM.getDocument with pierce),
// reading the state test builds mirror as data-* attributes of a hidden <div class="test-state">
// there, and clicking at an element's box like a person. A page may hold look-alike
// <hearth-overlay> elements: Hearth's is the one with a closed shadow root holding that mirror.

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
 * over the DevTools protocol from the hidden test-state element inside the closed shadow root.
 */
export async function overlayData(page, name) {
  const state = await testState(await cdpOf(page));
  return state?.[`data-${name}`] ?? null;
}

/**
 * All of the overlay's data-* state as its dataset would show it (camelCase keys: `pendingCall`),
 * `{}` while the overlay is not in the page.
 */
export async function overlayState(page) {
  const state = (await testState(await cdpOf(page))) ?? {};
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
  const cdp = await cdpOf(page);
  const deadline = Date.now() + timeout;
  let value = null;
  for (;;) {
    value = (await testState(cdp).catch(() => null))?.[`data-${name}`] ?? null;
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

/** The DevTools session of `page` (one per page, reused). */
const sessions = new WeakMap();
async function cdpOf(page) {
  let session = sessions.get(page);
  if (!session) {
    session = await page.context().newCDPSession(page);
    sessions.set(page, session);
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

/** The overlay's shadow root node, or null while it is not in the page. */
async function shadowRootOf(cdp) {
  return (await hearthHost(cdp))?.shadow ?? null;
}

/** The test-state mirror's attributes, or null while the overlay is not in the page. */
async function testState(cdp) {
  const host = await hearthHost(cdp);
  return host ? attributesOf(host.mirror) : null;
}

/** Node ids of the elements matching `selector` inside the overlay's shadow root (may be empty). */
export async function queryOverlay(page, selector) {
  const cdp = await cdpOf(page);
  const shadow = await shadowRootOf(cdp);
  if (!shadow) return [];
  const { nodeIds } = await cdp.send("DOM.querySelectorAll", { nodeId: shadow.nodeId, selector });
  return nodeIds;
}

/** Waits for `selector` inside the overlay and returns the first match's node id. */
async function findInOverlay(page, selector, { visible = false, timeout = FIND_TIMEOUT_MS } = {}) {
  const cdp = await cdpOf(page);
  const deadline = Date.now() + timeout;
  for (;;) {
    const [nodeId] = await queryOverlay(page, selector);
    if (nodeId) {
      if (!visible) return nodeId;
      const box = await cdp.send("DOM.getBoxModel", { nodeId }).catch(() => null);
      if (box) return nodeId;
    }
    if (Date.now() > deadline) throw new Error(`no ${visible ? "visible " : ""}${selector} in the overlay after ${timeout} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Calls `fn` (source of a function; `this` is the element) on the first `selector` in the overlay. */
export async function overlayEval(page, selector, fn, ...args) {
  // The overlay redraws a card by replacing its nodes: a node found a moment ago may be gone.
  for (let attempt = 0; ; attempt++) {
    try {
      return await overlayEvalOnce(page, selector, fn, ...args);
    } catch (error) {
      if (attempt >= 5 || !/No node with given id|Could not find node/.test(String(error))) throw error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

async function overlayEvalOnce(page, selector, fn, ...args) {
  const cdp = await cdpOf(page);
  const nodeId = await findInOverlay(page, selector);
  const { object } = await cdp.send("DOM.resolveNode", { nodeId });
  const { result, exceptionDetails } = await cdp.send("Runtime.callFunctionOn", {
    objectId: object.objectId,
    functionDeclaration: fn,
    arguments: args.map((value) => ({ value })),
    returnByValue: true,
  });
  await cdp.send("Runtime.releaseObject", { objectId: object.objectId });
  if (exceptionDetails) throw new Error(`${selector}: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
  return result.value;
}

/** Clicks the center of `selector` inside the overlay with the mouse (waits until it is visible). */
export async function clickInOverlay(page, selector) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await clickInOverlayOnce(page, selector);
    } catch (error) {
      // As in overlayEval: the node may have been replaced by a redraw between two calls.
      if (attempt >= 5 || !/No node with given id|Could not find node|Could not compute box model/.test(String(error))) throw error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

async function clickInOverlayOnce(page, selector) {
  const cdp = await cdpOf(page);
  const nodeId = await findInOverlay(page, selector, { visible: true });
  await cdp.send("DOM.scrollIntoViewIfNeeded", { nodeId }).catch(() => {});
  const { model } = await cdp.send("DOM.getBoxModel", { nodeId });
  const [x1, y1, , , x3, y3] = model.content;
  await page.mouse.click((x1 + x3) / 2, (y1 + y3) / 2);
}

/** The text content of `selector` inside the overlay. */
export function overlayText(page, selector) {
  return overlayEval(page, selector, "function () { return this.textContent; }");
}
