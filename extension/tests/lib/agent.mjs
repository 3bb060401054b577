// Driving agent tasks end to end: the test page's overlay is used as a person would (composer,
// confirmation and answer buttons), and the model is the scripted one of test builds, loaded
// into the offscreen document's engine.

import assert from "node:assert/strict";
import { until } from "./browser.mjs";
import { clickInOverlay, clickLauncher, overlayData, overlayHost, overlayText, queryOverlay, screenshot, waitForData, waitForEngine } from "./overlay.mjs";

/** A tool call as Gemma 4 writes it. */
export const call = (name, args = "") => `<|tool_call>call:${name}{${args}}<tool_call|>`;
/** A string argument in Gemma 4's call syntax. */
export const str = (text) => `<|"|>${text}<|"|>`;
/** The task's end, as the model writes it. */
export const done = (result, success = true) => call("done", `result:${str(result)},success:${success}`);
/** The page's own text at `selector` (what the tests assert on). */
export const pageText = (page, selector) => page.locator(selector).textContent();
/** The number of the latest snapshot line containing `text` (resolved by the scripted model). */
export const indexOf = (text) => `{{index:${text}}}`;

/** Opens `url` in a new tab, opens the overlay and waits for the engine. */
export async function openAgentPage(chrome, url, { after } = {}) {
  const page = await chrome.context.newPage();
  // The page the tab showed before (its history's previous entry).
  if (after) await page.goto(after);
  await page.goto(url);
  await overlayHost(page);
  await clickLauncher(page);
  const state = await waitForEngine(page, ["ready", "failed"]);
  if (state !== "ready") throw new Error(`engine failed: ${await overlayData(page, "failure")}`);
  return page;
}

/** The next tasks replay `replies` (model outputs) instead of running the model. */
export async function useScript(chrome, replies) {
  await chrome.console.evaluate(
    "/offscreen.html",
    `import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then((engine) => engine.useScriptedModel(${JSON.stringify(JSON.stringify(replies))}))`,
  );
}

/** The prompts the scripted model received since `useScript`. */
export async function scriptedPrompts(chrome) {
  const json = await chrome.console.evaluate(
    "/offscreen.html",
    `import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then((engine) => engine.scriptedPrompts())`,
  );
  return JSON.parse(json);
}

/** What the engine made of each scripted step's screenshots: token counts before and after each
 * image's placeholder became its soft tokens (`scriptedImagePrompts`). */
export async function scriptedImagePrompts(chrome) {
  const json = await chrome.console.evaluate(
    "/offscreen.html",
    `import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then((engine) => engine.scriptedImagePrompts())`,
  );
  return JSON.parse(json);
}

/** Types a message into the overlay's composer and sends it. */
export async function ask(page, text) {
  await clickInOverlay(page, "textarea.composer");
  await page.keyboard.type(text);
  await page.keyboard.press("Enter");
}

/** Waits until the overlay's task state is one of `states`; returns it. */
export function waitForTask(page, states, timeout = 60_000) {
  return waitForData(page, "task", states, timeout);
}

/** The overlay's final answer (`done`'s result). */
export async function answer(page) {
  await overlayHost(page);
  return overlayData(page, "answer");
}

/** Answers the confirmation card and waits until the overlay has moved past it. */
export async function decide(page, decision) {
  await waitForTask(page, ["confirm"]);
  const callId = await overlayData(page, "pending-call");
  await clickInOverlay(page, `.card.confirm[data-call-id="${callId}"] button[data-decision="${decision}"]`);
  await waitForData(page, "pending-call", callId, 10_000, { not: true, polling: 50 });
}

/** Picks an `ask_user` option and waits until the overlay has moved past the question. */
export async function chooseOption(page, text) {
  await waitForTask(page, ["ask"]);
  const callId = await overlayData(page, "pending-call");
  await clickInOverlay(page, `.card.ask[data-call-id="${callId}"] button.option[data-option="${text}"]`);
  await waitForData(page, "pending-call", callId, 10_000, { not: true, polling: 50 });
}

/** Waits for the confirmation card, checks that it says each of `expected`, and denies it; returns its text. */
export async function denyCard(page, expected) {
  await waitForTask(page, ["confirm"]);
  const callId = await overlayData(page, "pending-call");
  const card = await overlayText(page, `.card.confirm[data-call-id="${callId}"]`);
  for (const words of expected) {
    if (!card.includes(words)) throw new Error(`the card for ${callId} does not say ${JSON.stringify(words)}: ${card}`);
  }
  await decide(page, "deny");
  return card;
}

/** Waits for the fence's card in the overlay (saving a screenshot as `picture`) and answers it. */
export async function answerFenceCard(page, expected, decision, picture) {
  await until(async () => (await queryOverlay(page, ".card.fence")).length > 0, "the fence's card");
  const card = await overlayText(page, ".card.fence");
  for (const words of expected) assert.ok(card.includes(words), `the fence card says ${JSON.stringify(words)}: ${card}`);
  if (picture) await screenshot(page, picture);
  await clickInOverlay(page, `.card.fence button[data-fence="${decision}"]`);
  return card;
}
