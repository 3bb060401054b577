// Code run as Hearth's content script: the isolated world Chromium gives it in a page's top frame,
// reached over CDP as a renderer exploit could reach it. Shared by the suites that play a
// compromised content script (forged-messages, channels).

import assert from "node:assert/strict";
import { until } from "./browser.mjs";

/**
 * A function evaluating code in the isolated world Chromium gives Hearth's content script in the
 * top frame of `page` (the world whose `chrome.runtime` speaks as the content script).
 */
export async function contentScriptWorld(chrome, page) {
  const extensionId = chrome.console.extensionId();
  const name = await chrome.console.evaluate("/service-worker.js", `chrome.i18n.getMessage("extensionName")`);
  const cdp = await page.context().newCDPSession(page);
  const contexts = [];
  cdp.on("Runtime.executionContextCreated", ({ context }) => contexts.push(context));
  cdp.on("Runtime.executionContextDestroyed", ({ executionContextId }) => {
    const at = contexts.findIndex((c) => c.id === executionContextId);
    if (at >= 0) contexts.splice(at, 1);
  });
  const { frameTree } = await cdp.send("Page.getFrameTree");
  await cdp.send("Runtime.enable");
  let world;
  await until(() => {
    world = contexts.find(
      (c) =>
        c.auxData?.type === "isolated" &&
        c.auxData?.frameId === frameTree.frame.id &&
        (c.name === name || c.origin === `chrome-extension://${extensionId}`),
    );
    return world !== undefined;
  }, `the content script's isolated world (contexts: ${JSON.stringify(contexts.map((c) => [c.name, c.auxData]))})`);
  const evaluate = async (expression) => {
    const { result, exceptionDetails } = await cdp.send("Runtime.evaluate", { expression, contextId: world.id, awaitPromise: true, returnByValue: true });
    if (exceptionDetails) throw new Error(`in the content script: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
    return result.value;
  };
  // It is the content script's world: our extension's runtime, and the overlay's host in its DOM.
  assert.equal(await evaluate("chrome.runtime.id"), extensionId);
  assert.equal(await evaluate(`typeof chrome.runtime.sendMessage`), "function");
  return evaluate;
}

