// Driving Hearth's chat in Chrome's real side panel (sidepanel.html): found over CDP as its own
// target (no Playwright page), read through its test-state mirror, clicked and typed into with
// real input events on that target.

import assert from "node:assert/strict";
import { until } from "./browser.mjs";

export const PANEL = "/sidepanel.html";
const WORKER = "/service-worker.js";

/** The helpers for `chrome` (from `launch`). */
export function sidePanel(chrome) {
  const inPanel = (expression) => chrome.console.evaluate(PANEL, expression);
  /** Runs `body` in the panel with `root`, the chat's shadow root. */
  const inChat = (body) => inPanel(`(() => { const root = document.querySelector(".hearth-side-panel").shadowRoot; ${body} })()`);
  /** The panel's mirrored state (test builds): tab, tabState, task, pendingCall, cards, answer, engine… */
  const panelState = () => inPanel(`({ ...document.querySelector(".test-state").dataset })`);

  /** The id of the tab showing `page`. */
  async function tabIdOf(page) {
    const id = await chrome.console.evaluate(WORKER, `chrome.tabs.query({}).then((tabs) => tabs.find((t) => t.url === ${JSON.stringify(page.url())})?.id)`);
    assert.equal(typeof id, "number", `no tab for ${page.url()}`);
    return id;
  }

  /** Waits until the panel's `key` (camelCase) is `wanted` (or one of them); returns it. */
  async function waitPanel(key, wanted, timeout = 30_000) {
    const values = Array.isArray(wanted) ? wanted : [wanted];
    let last;
    try {
      return await until(async () => {
        last = (await panelState())[key] ?? null;
        return values.includes(last) ? last ?? "null" : null;
      }, `the panel's ${key}`, timeout);
    } catch {
      throw new Error(`the panel's ${key} is ${JSON.stringify(last)}, waiting for ${values.map((v) => JSON.stringify(v)).join(" or ")}`);
    }
  }

  /** Clicks the center of `selector` in the panel's chat with the mouse (CDP input on the panel's target). */
  async function clickInPanel(selector) {
    const box = await until(
      () => inChat(`const e = root.querySelector(${JSON.stringify(selector)}); if (!e) return null; e.scrollIntoView({ block: "nearest" }); const r = e.getBoundingClientRect(); return r.width > 0 ? { x: r.x + r.width / 2, y: r.y + r.height / 2 } : null;`),
      `${selector} in the panel`,
    );
    for (const type of ["mousePressed", "mouseReleased"]) {
      await chrome.console.send(PANEL, "Input.dispatchMouseEvent", { type, x: box.x, y: box.y, button: "left", clickCount: 1 });
    }
  }

  /**
   * Types `text` into the panel's composer (keyboard input on the panel's target) and sends it. The
   * click is repeated until the composer has the focus: Chrome may still be sliding the panel open
   * (its layout moving under the pointer) when a test starts.
   */
  async function askInPanel(text) {
    await until(async () => {
      await clickInPanel("textarea.composer");
      return inChat(`return root.activeElement === root.querySelector("textarea.composer")`);
    }, "the panel's composer to take the focus");
    await chrome.console.send(PANEL, "Input.insertText", { text });
    await until(() => inChat(`return root.querySelector("textarea.composer").value === ${JSON.stringify(text)}`), "the request in the composer");
    await chrome.console.send(PANEL, "Input.dispatchKeyEvent", { type: "keyDown", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13, text: "\r" });
    await chrome.console.send(PANEL, "Input.dispatchKeyEvent", { type: "keyUp", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13 });
  }

  return { inPanel, inChat, panelState, tabIdOf, waitPanel, clickInPanel, askInPanel };
}
