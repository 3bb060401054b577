// What browsers do to extensions, during agent tasks: a page with a strict Content-Security-Policy,
// the service worker stopped mid-task, the offscreen document torn down, the GPU device lost, the
// task's tab closed mid-task, and two tabs asking at once. The model is the scripted one of test builds.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch } from "../lib/browser.mjs";
import { servePages } from "../lib/pages.mjs";
import { clickInOverlay, overlayData, overlayEval, overlayText, screenshot, waitForData, waitForEngine } from "../lib/overlay.mjs";
import { ask, call, decide, done, pageText as text, indexOf, openAgentPage, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";

const signUp = (email) => [
  call("snapshot"),
  call("type", `index:${indexOf('"Your email"')},text:${str(email)}`),
  call("click", `index:${indexOf('"Sign up"')}`),
  done(`Signed up as ${email}.`),
];

let pages;
let chrome;
before(async () => {
  pages = await servePages();
  chrome = await launch();
});
after(async () => {
  await chrome?.close();
  await pages?.close();
});

/** Waits until the overlay shows at least `n` tool cards. */
async function waitForCards(page, n) {
  const deadline = Date.now() + 30_000;
  while (!(Number(await overlayData(page, "cards")) >= n)) {
    if (Date.now() > deadline) throw new Error(`fewer than ${n} tool cards after 30 s: ${await overlayData(page, "cards")}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("a page with a strict CSP: the overlay is styled and the tools work", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/strict-csp.html`);
  // The overlay's own stylesheet applies despite the page's style-src.
  assert.equal(await page.evaluate(() => getComputedStyle(document.querySelector("hearth-overlay")).position), "fixed");
  assert.equal(await overlayEval(page, ".panel", "function () { return getComputedStyle(this).display !== 'none' && this.getBoundingClientRect().width > 200; }"), true);
  await useScript(chrome, [
    call("snapshot"),
    call("type", `index:${indexOf('"Message"')},text:${str("Hello from Hearth")}`),
    call("click", `index:${indexOf('"Send message"')}`),
    done("Sent."),
  ]);
  await ask(page, "Send them a hello.");
  // While the card waits, the button it is about is outlined (inside the overlay, despite the CSP).
  await waitForTask(page, ["confirm"]);
  const button = await page.locator('button[type="submit"]').boundingBox();
  const outline = await overlayEval(page, ".target-outline", "function () { const r = this.getBoundingClientRect(); return this.hidden ? null : { x: r.x, y: r.y, width: r.width, height: r.height }; }");
  assert.ok(
    outline && outline.x < button.x && outline.y < button.y && outline.x + outline.width > button.x + button.width && outline.y + outline.height > button.y + button.height,
    `the outline ${JSON.stringify(outline)} surrounds the button ${JSON.stringify(button)}`,
  );
  await decide(page, "allow_once"); // "send"
  assert.equal(await overlayEval(page, ".target-outline", "function () { return this.hidden; }"), true, "the outline goes once the card is decided");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await screenshot(page, "robustness-strict-csp");
  assert.equal(await text(page, "#result"), "Sent: Hello from Hearth");
});

test("the service worker stopped mid-task: the task goes on", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("wait_for", `text:${str("Go ahead")},timeout_seconds:30`),
    ...signUp("sw@example.com").slice(1),
  ]);
  await ask(page, "Sign me up once the page says go ahead.");
  await waitForCards(page, 2);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("ServiceWorker.enable");
  await cdp.send("ServiceWorker.stopAllWorkers");
  await page.evaluate(() => document.body.append("Go ahead"));
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "Signed up: sw@example.com");
});

test("the offscreen document torn down: the engine comes back, the user sees it, the next task runs and remembers the conversation", { timeout: 240_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await useScript(chrome, [done("Noted: your name is Ada Lovelace.")]);
  await ask(page, "Remember that my name is Ada Lovelace.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await chrome.console.evaluate("/service-worker.js", "chrome.offscreen.closeDocument()");
  // Reopening the panel finds the engine gone and starts it again, showing it.
  await page.keyboard.press("Escape");
  await clickInOverlay(page, ".launcher");
  assert.equal(await waitForEngine(page, ["starting"], 30_000), "starting");
  assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready");
  await useScript(chrome, signUp("back@example.com"));
  await ask(page, "Sign me up as back@example.com.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "Signed up: back@example.com");
  // The new engine took the conversation up where the old one left it (the worker kept it).
  const [first] = await scriptedPrompts(chrome);
  assert.match(first, /Remember that my name is Ada Lovelace\.[\s\S]*Noted: your name is Ada Lovelace\.[\s\S]*Sign me up as back@example\.com\./);
});

test("the GPU device lost: the overlay says so, Retry brings the engine back on a new device, the next task runs", { timeout: 240_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  // As a driver reset would: the engine's device is destroyed under it.
  assert.equal(await chrome.console.evaluate("/offscreen.html", "hearthLoseGpuDevice()"), true);
  assert.equal(await waitForEngine(page, ["failed"], 30_000), "failed");
  assert.equal(await overlayData(page, "failure"), "gpu_device");
  assert.match(await overlayText(page, ".engine .error"), /The GPU device was lost \(.+\)\. Your conversation is kept\./);
  assert.match(await overlayText(page, ".engine .fix"), /Press Retry/);
  await screenshot(page, "robustness-device-lost");
  await clickInOverlay(page, "button.retry");
  // The overlay still shows the old failure until the worker answers the Retry: wait for it to go.
  await waitForData(page, "engine", "failed", 60_000, { not: true });
  assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready", `after Retry: ${await overlayData(page, "failure")}`);
  await useScript(chrome, signUp("gpu@example.com"));
  await ask(page, "Sign me up as gpu@example.com.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "Signed up: gpu@example.com");
});

test("the task's tab closed mid-task: nothing breaks, other tabs carry on", { timeout: 90_000 }, async () => {
  const closing = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await useScript(chrome, { "tab-closing": [call("snapshot"), call("wait_for", `text:${str("never")},timeout_seconds:30`), done("unreachable")], "tab-staying": signUp("stay@example.com") });
  await ask(closing, "tab-closing: wait for the page.");
  await waitForCards(closing, 2);
  await closing.close();
  const staying = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await ask(staying, "tab-staying: sign me up.");
  assert.equal(await waitForTask(staying, ["done", "failed", "paused"]), "done");
  assert.equal(await text(staying, "#result"), "Signed up: stay@example.com");
});

test("two tabs asking at once: each answer goes to its own tab", { timeout: 120_000 }, async () => {
  const first = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  const second = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await useScript(chrome, { "tab-one": signUp("one@example.com"), "tab-two": signUp("two@example.com") });
  await Promise.all([ask(first, "tab-one: sign me up."), ask(second, "tab-two: sign me up.")]);
  const states = await Promise.all([first, second].map((p) => waitForTask(p, ["done", "failed", "paused"])));
  // A task that did not finish says why in its transcript.
  const why = await Promise.all([first, second].map((p) => overlayText(p, ".error-card").catch(() => "")));
  assert.deepEqual(states, ["done", "done"], `errors: ${JSON.stringify(why)}`);
  assert.equal(await text(first, "#result"), "Signed up: one@example.com");
  assert.equal(await text(second, "#result"), "Signed up: two@example.com");
  assert.match(await overlayData(first, "answer"), /one@example\.com/);
  assert.match(await overlayData(second, "answer"), /two@example\.com/);
});

test("the console stayed clean", () => {
  assert.deepEqual(chrome.console.errors, []);
});
