// Driving the overlay from a test. Its shadow root is closed: tests read the state the overlay
// mirrors onto its host element as data-* attributes, and reach inside the shadow root through the
// DevTools protocol (DOM.getDocument with pierce), clicking at an element's box like a person.

import { mkdirSync } from "node:fs";
import { resolve } from "node:path";

export const ARTIFACTS = resolve(import.meta.dirname, "../../../artifacts/e2e");

/** Waits for the overlay to be injected and returns its host element's locator. */
export async function overlayHost(page) {
  const host = page.locator("hearth-overlay");
  await host.waitFor({ state: "attached", timeout: 15_000 });
  return host;
}

/** Clicks the launcher button like a person would (it fills the host element while closed). */
export async function clickLauncher(page) {
  const host = await overlayHost(page);
  const box = await host.boundingBox();
  if (!box) throw new Error("the overlay host has no box: is the launcher visible?");
  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
}

/** Waits until the engine state shown by the overlay is one of `states`; returns it. */
export async function waitForEngine(page, states, timeout = 180_000) {
  const handle = await page.waitForFunction(
    (wanted) => {
      const state = document.querySelector("hearth-overlay")?.dataset.engine;
      return wanted.includes(state) ? state : null;
    },
    states,
    { timeout, polling: 200 },
  );
  return handle.jsonValue();
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

/** The overlay's shadow root node, or null while it is not in the page. */
async function shadowRootOf(cdp) {
  const { root } = await cdp.send("DOM.getDocument", { depth: -1, pierce: true });
  const stack = [root];
  while (stack.length) {
    const node = stack.pop();
    if (node.nodeName === "HEARTH-OVERLAY") return node.shadowRoots?.[0] ?? null;
    stack.push(...(node.children ?? []), ...(node.shadowRoots ?? []));
  }
  return null;
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

/** Waits until the host's `data-<name>` is `wanted` (a value, or one of an array); returns it. */
export async function waitForData(page, name, wanted, timeout = 15_000) {
  const values = Array.isArray(wanted) ? wanted : [wanted];
  const handle = await page.waitForFunction(
    ([key, accepted]) => {
      const value = document.querySelector("hearth-overlay")?.getAttribute(`data-${key}`) ?? null;
      return accepted.includes(value) ? { value } : null;
    },
    [name, values],
    { timeout, polling: 100 },
  );
  return (await handle.jsonValue()).value;
}
