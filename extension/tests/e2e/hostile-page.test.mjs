// A page that tries to hide, read and steer Hearth's overlay (tests/pages/hostile/index.html): it
// makes look-alike <hearth-overlay> elements (one a custom element of its own with an open shadow
// root) before Hearth mounts, hides `hearth-overlay` with !important CSS, listens to every
// keystroke, text input, clipboard and focus event on window and document (capture and bubble,
// registered before anything else of the page's) and polls every <hearth-overlay> for data-*
// attributes. Hearth's overlay must still mount and show, take typing and pasting, and leak none
// of it (the page may see the focus move to Hearth's host: that Hearth is open, and nothing else). No model: the engine fails without WebGPU, and a message typed then waits for it.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import {
  clickInOverlay,
  clickLauncher,
  hostBox,
  overlayEval,
  overlayHost,
  overlayPresent,
  overlayText,
  screenshot,
  waitForData,
} from "../lib/overlay.mjs";

let server;
let chrome;
before(async () => {
  server = await serve(resolve(import.meta.dirname, "../pages"));
  chrome = await launch({ webgpu: false });
});
after(async () => {
  await chrome?.close();
  await server?.close();
});

/** The events that say only where the focus is: the page may see Hearth's host take it (Hearth is open). */
const FOCUS_MOVES = ["focus", "blur", "focusin", "focusout"];

/**
 * What the page's listeners saw whose target was a <hearth-overlay> (Hearth's host, retargeted),
 * besides the focus moving to or from it.
 */
const leaked = (page) =>
  page.evaluate((moves) => __seen.filter((s) => (s.target === "hearth-overlay" || s.path.includes("hearth-overlay")) && !moves.includes(s.type)), FOCUS_MOVES);

test("on a hostile page the overlay mounts, shows, types and pastes, and the page learns nothing", { timeout: 120_000 }, async () => {
  const page = await chrome.context.newPage();
  await page.setViewportSize({ width: 1000, height: 760 });
  await page.goto(`${server.url}/hostile/index.html`);

  // Mounted despite the look-alikes, and visible despite the page's CSS.
  await overlayHost(page);
  assert.ok((await page.evaluate(() => document.querySelectorAll("hearth-overlay").length)) >= 3, "the look-alikes and Hearth's host");
  assert.equal(await page.evaluate(() => __others().length), 1, "exactly one <hearth-overlay> the page did not make");
  const box = await hostBox(page);
  assert.ok(box && box.width > 0 && box.height > 0, `Hearth's host has a box: ${JSON.stringify(box)}`);
  assert.ok(box.x >= 0 && box.y >= 0 && box.x + box.width <= 1000 && box.y + box.height <= 760, `and it is on screen: ${JSON.stringify(box)}`);
  assert.deepEqual(
    await page.evaluate(() => __others().map((el) => ({ shadowRoot: el.shadowRoot, attributes: el.getAttributeNames() }))),
    [{ shadowRoot: null, attributes: ["style"] }],
    "the page sees a closed shadow root and no attribute but the inline style",
  );

  // The page's listeners work: typing in its own field is seen.
  await page.click("#page-input");
  await page.keyboard.type("Pasted from the page");
  assert.ok((await page.evaluate(() => __seen.filter((s) => s.type === "keydown" && s.target === "input").length)) > 0, "the page sees its own keystrokes");
  // Something to paste into the overlay.
  await page.keyboard.press("Control+A");
  await page.keyboard.press("Control+C");
  assert.ok((await page.evaluate(() => __seen.some((s) => s.type === "copy"))), "the page's copy was seen");

  // Open the overlay with the launcher, type, paste and send a message.
  await clickLauncher(page);
  assert.equal(await waitForData(page, "state", "open"), "open");
  await waitForData(page, "engine", "failed", 60_000);
  const seenBefore = await page.evaluate(() => __seen.length);
  await clickInOverlay(page, "textarea.composer");
  await page.keyboard.type("Hello from Hearth. ");
  await page.keyboard.press("Control+V");
  assert.equal(await overlayEval(page, "textarea.composer", "function () { return this.value; }"), "Hello from Hearth. Pasted from the page");
  await page.keyboard.press("Enter");
  // The composer's own Enter handler (in Hearth's frame) sent it: it waits for the engine.
  await until(async () => (await overlayEval(page, "textarea.composer", "function () { return this.value; }")) === "", "the composer to be emptied by Enter");
  assert.match(await overlayText(page, ".msg.user"), /Hello from Hearth\. Pasted from the page/);
  await screenshot(page, "hostile-page");

  assert.deepEqual(await leaked(page), [], "no keystroke, input or paste event from the overlay reached the page");
  const seenWhileTyping = await page.evaluate((from) => __seen.slice(from).filter((s) => !["focusin", "focusout", "focus", "blur"].includes(s.type)).map((s) => `${s.type}@${s.target}`), seenBefore);
  assert.deepEqual(seenWhileTyping, [], "nothing but the focus moving while typing in the overlay");

  // Escape (in the frame too) closes the panel; the page sees no keystroke.
  await page.keyboard.press("Escape");
  assert.equal(await waitForData(page, "state", "closed"), "closed");
  assert.deepEqual(await leaked(page), []);

  // Restyling, hiding and marking the host are undone at once.
  await page.evaluate(() => {
    for (const el of __others()) {
      el.style.setProperty("display", "none", "important");
      el.setAttribute("hidden", "");
      el.setAttribute("inert", "");
      el.dataset.probe = "1";
    }
  });
  await until(async () => {
    const b = await hostBox(page);
    return b && b.width > 0 && b.height > 0;
  }, "the host's style to be restored");
  await until(
    async () => JSON.stringify(await page.evaluate(() => __others().map((el) => el.getAttributeNames()))) === JSON.stringify([["style"]]),
    "the page's attributes to be removed from the host",
  );
  await page.evaluate(() => (__dataFound = __dataFound.filter((d) => d !== "data-probe=1")));

  // Removed, the host comes back, with the conversation.
  await page.evaluate(() => document.querySelectorAll("hearth-overlay").forEach((el) => el.remove()));
  await until(() => overlayPresent(page), "Hearth's host to be put back");
  await clickLauncher(page);
  assert.equal(await waitForData(page, "state", "open"), "open");
  assert.match(await overlayText(page, ".msg.user"), /Hello from Hearth/);

  await new Promise((r) => setTimeout(r, 100)); // one more poll of the page's
  assert.deepEqual(await page.evaluate(() => __dataFound), [], "no data-* state on any <hearth-overlay>");
  assert.deepEqual(await leaked(page), []);
  console.log(`custom-element upgrades of the page's: ${JSON.stringify(await page.evaluate(() => __upgrades))}`);
  await page.close();
});

const WORKER = "/service-worker.js";

/** The id of the tab showing `page`. */
async function tabIdOf(page) {
  const id = await chrome.console.evaluate(WORKER, `chrome.tabs.query({}).then((tabs) => tabs.find((t) => t.url === ${JSON.stringify(page.url())})?.id)`);
  assert.equal(typeof id, "number", `no tab for ${page.url()}`);
  return id;
}

/**
 * Sends `msg` to the tab's content script as the worker does; resolves to its reply. Task updates
 * go through the worker (which owns the conversation), as if the engine had sent them.
 */
function toTab(tabId, msg) {
  if (msg.kind === "task_update") return chrome.console.evaluate(WORKER, `(hearthTestEngine(${JSON.stringify({ ...msg, tab_id: tabId })}), true)`);
  return chrome.console.evaluate(WORKER, `chrome.tabs.sendMessage(${tabId}, ${JSON.stringify(msg)}, { frameId: 0 })`);
}

const event = (e) => ({ kind: "task_update", update: { update: "event", event: e } });
const needsConfirmation = (callId) => ({ kind: "task_update", update: { update: "ended", outcome: { kind: "needs_confirmation", call_id: callId } } });

/**
 * The cards here are sent by the test, so the engine has no task to go on with after a decision
 * and answers it with a failure. Wait for that answer: arriving after the next card, it would end
 * that card's task.
 */
const engineAnswered = (page) => waitForData(page, "task", "failed");

/** The box of `selector` inside the overlay, or null while it is hidden. */
const boxInOverlay = (page, selector) =>
  overlayEval(page, selector, "function () { const r = this.getBoundingClientRect(); return this.hidden ? null : { x: r.x, y: r.y, width: r.width, height: r.height }; }");

test("a confirmation card says what will happen and outlines the element on the page", { timeout: 120_000 }, async () => {
  const page = await chrome.context.newPage();
  await page.setViewportSize({ width: 1000, height: 760 });
  await page.goto(`${server.url}/hostile/index.html?confirm`);
  await overlayHost(page);
  const tabId = await tabIdOf(page);
  // The page's elements get their numbers from a snapshot, as in a task.
  const reply = await toTab(tabId, { kind: "run_tool", request: { request_id: 1, tab_id: tabId, name: "snapshot", arguments: {} } });
  assert.equal(reply?.status, "ok", JSON.stringify(reply));
  const index = reply.output.snapshot.elements.find((e) => e.tag === "input")?.index;
  assert.ok(Number.isInteger(index), `the page's field in the snapshot: ${JSON.stringify(reply.output.snapshot.elements)}`);

  // Typing a password: the card says into what, shows the masked text only, and outlines the field.
  await toTab(tabId, event({
    type: "confirm_request",
    call_id: "t1",
    name: "type",
    arguments: { index, text: "hunter2" },
    risk: "high",
    reasons: [{ kind: "password_field" }],
    target: { description: "the text field “The page's own field”", index, destination: null, text: "•••••••" },
  }));
  await toTab(tabId, needsConfirmation("t1"));
  assert.equal(await waitForData(page, "task", "confirm"), "confirm");
  const card = '.confirm[data-call-id="t1"]';
  assert.equal(await overlayText(page, `${card} h3`), "type the text field “The page's own field”");
  assert.match(await overlayText(page, `${card} .target-text`), /“•••••••”/);
  assert.doesNotMatch(await overlayText(page, card), /hunter2/, "the masked text only");
  assert.match(await overlayText(page, `${card} .reasons`), /it touches a password field/);
  const field = await page.locator("#page-input").boundingBox();
  let outline = await boxInOverlay(page, ".target-outline");
  assert.ok(
    outline && outline.x < field.x && outline.y < field.y && outline.x + outline.width > field.x + field.width && outline.y + outline.height > field.y + field.height,
    `the outline ${JSON.stringify(outline)} surrounds the field ${JSON.stringify(field)}`,
  );
  // It follows the element when the page scrolls.
  await page.evaluate(() => {
    document.body.style.height = "3000px";
    scrollBy(0, 40);
  });
  await until(async () => {
    outline = await boxInOverlay(page, ".target-outline");
    const moved = await page.locator("#page-input").boundingBox();
    return outline && Math.abs(outline.y - (moved.y - 3)) < 1;
  }, "the outline to follow the scroll");
  await screenshot(page, "hostile-confirm-outline");
  await clickInOverlay(page, `${card} button[data-decision="deny"]`);
  await waitForData(page, "pending-call", "t1", 10_000, { not: true });
  await engineAnswered(page);
  assert.equal(await boxInOverlay(page, ".target-outline"), null, "the outline goes once the card is decided");

  // A link to another site: the destination is shown; no element, no outline.
  await toTab(tabId, event({
    type: "confirm_request",
    call_id: "t2",
    name: "navigate",
    arguments: { url: "https://pay.example.net/checkout" },
    risk: "medium",
    reasons: [{ kind: "off_site", host: "pay.example.net" }],
    message: "Allow navigate?",
    target: { description: "the page https://pay.example.net/checkout", index: null, destination: "pay.example.net", text: null },
  }));
  await toTab(tabId, needsConfirmation("t2"));
  await waitForData(page, "pending-call", "t2");
  assert.match(await overlayText(page, '.confirm[data-call-id="t2"] .target-destination'), /→ pay\.example\.net/);
  assert.equal(await boxInOverlay(page, ".target-outline"), null);
  await clickInOverlay(page, '.confirm[data-call-id="t2"] button[data-decision="deny"]');
  await waitForData(page, "pending-call", "t2", 10_000, { not: true });
  await engineAnswered(page);

  // run_javascript: the whole code, scrollable; and an older engine's card without a target.
  const code = Array.from({ length: 120 }, (_, i) => `document.title += "line ${i}";`).join("\n");
  await toTab(tabId, event({ type: "confirm_request", call_id: "t3", name: "run_javascript", arguments: { code }, risk: "critical", reasons: [{ kind: "runs_javascript" }], message: "Allow run_javascript?" }));
  await toTab(tabId, needsConfirmation("t3"));
  await waitForData(page, "pending-call", "t3");
  const shown = await overlayEval(page, '.confirm[data-call-id="t3"] pre.code', "function () { return { text: this.textContent, scrolls: this.scrollHeight > this.clientHeight }; }");
  assert.deepEqual(shown, { text: code, scrolls: true }, "the whole code, in a scrollable box");
  assert.equal(await overlayText(page, '.confirm[data-call-id="t3"] h3'), "Allow run_javascript?", "without a target the message is the headline");
  await screenshot(page, "hostile-confirm-code");
  await page.close();
});

test("the console stayed clean", () => {
  assert.deepEqual(chrome.console.errors, []);
});
