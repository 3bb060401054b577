// A load that cannot hang: the engine crashes (a Rust panic, or an allocation failure: in wasm both
// trap) at start, before and after the GPU self-test, in the middle of a model's load and in the
// middle of a task; it goes silent mid-load; its offscreen document is closed. Each time
// the overlay shows a failure with Retry (never "Loading… step k of N" forever), and Retry gives a
// working engine in a fresh offscreen document, on which a task then completes.
//
// The traps are test builds' (`setTestTrap` in crates/offscreen/src/trap.rs). The installed copy of
// tiny-chat (from a local server imitating Hugging Face) is loaded step by step, with `loading`
// statuses; the bundled copy in one piece. Switching between the two in the settings restarts the
// engine in the same document, which is where an armed trap fires.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch } from "../lib/browser.mjs";
import { serveHub } from "../lib/hub-server.mjs";
import { servePages } from "../lib/pages.mjs";
import { clickInOverlay, clickLauncher, overlayData, overlayHost, overlayText, screenshot, waitForData, waitForEngine } from "../lib/overlay.mjs";
import { ask, done, useScript, waitForTask } from "../lib/agent.mjs";

const ROOT = resolve(import.meta.dirname, "../../..");
const manifest = JSON.parse(readFileSync(join(ROOT, "models/test/tiny-chat.json"), "utf8"));
const MODEL = manifest.name;

let pages;
let hub;
let chrome;
/** The one tab the tests use (its overlay stays open). */
let page;

before(async () => {
  pages = await servePages();
  hub = await serveHub([{ repo: manifest.repo, revision: manifest.revision, dir: join(ROOT, "crates/model/fixtures/tiny-chat") }]);
  chrome = await launch();
});
after(async () => {
  await chrome?.close();
  await hub?.close();
  await pages?.close();
});

const inOffscreen = (expression) => chrome.console.evaluate("/offscreen.html", expression);
const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);
/** The offscreen document's test hooks (test builds only). */
const setHooks = (hooks) => inOffscreen(`(Object.assign(globalThis.hearthTestHooks ??= {}, ${JSON.stringify(hooks)}), true)`);

/** Arms a trap in the current offscreen document's engine: it fires the next time the engine gets there. */
function arm(point, how = "panic") {
  return inOffscreen(
    `import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then((engine) => (engine.setTestTrap(${JSON.stringify(point)}, ${JSON.stringify(how)}), true))`,
  );
}

/** Chooses the model in the settings ("tiny-chat": the installed copy; "": the build's bundled one). */
const chooseModel = (model) => inWorker(`chrome.storage.sync.set({ settings: { model: ${JSON.stringify(model)} } }).then(() => true)`);

/** Waits for the engine's failure; returns what the overlay shows of it. */
async function shownFailure() {
  assert.equal(await waitForEngine(page, ["failed"], 60_000), "failed");
  return {
    kind: await overlayData(page, "failure"),
    headline: await overlayText(page, ".engine .status"),
    message: await overlayText(page, ".engine .error"),
    fix: await overlayText(page, ".engine .fix"),
    retry: await overlayText(page, ".engine button.retry"),
  };
}

/** Presses Retry and waits for the engine to be ready again (in a fresh offscreen document). */
async function retry() {
  const documents = await offscreenDocuments();
  await clickInOverlay(page, "button.retry");
  // The overlay shows the old failure until the worker answers the Retry: wait for it to go.
  await waitForData(page, "engine", "failed", 60_000, { not: true });
  assert.equal(await waitForEngine(page, ["ready", "failed"], 120_000), "ready", `after Retry: ${await overlayData(page, "failure")}`);
  const now = await offscreenDocuments();
  assert.equal(now.length, 1, "one offscreen document");
  assert.ok(!documents.includes(now[0]), "Retry replaced the offscreen document (the crashed instance is not used again)");
}

/** The ids of the offscreen documents that exist. */
function offscreenDocuments() {
  return inWorker(`chrome.runtime.getContexts({ contextTypes: ["OFFSCREEN_DOCUMENT"] }).then((cs) => cs.map((c) => c.documentId))`);
}

/** A task on the engine as it is now completes (the scripted model of test builds answers). */
async function aTaskCompletes(answer) {
  await useScript(chrome, [done(answer)]);
  await ask(page, `Say: ${answer}`);
  assert.equal(await waitForTask(page, ["done", "failed", "paused"], 60_000), "done");
  assert.equal(await overlayData(page, "answer"), answer);
}

test("setup: the installed tiny-chat loads step by step", { timeout: 180_000 }, async () => {
  await chooseModel("tiny-chat");
  page = await chrome.context.newPage();
  await page.goto(`${pages.url}/agent/shadow.html`);
  await overlayHost(page);
  await clickLauncher(page);
  assert.equal(await waitForEngine(page, ["needs_model", "ready", "failed"]), "needs_model", `engine: ${await overlayData(page, "failure")}`);
  await setHooks({ downloadBase: hub.url });
  await clickInOverlay(page, "button.download-model");
  assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready", `engine: ${await overlayData(page, "failure")}`);
  assert.equal(await overlayData(page, "model"), MODEL);
});

test("a panic at start, before the GPU self-test: a failure with Retry; Retry starts a working engine", { timeout: 240_000 }, async () => {
  await arm("start");
  await chooseModel("");
  const failure = await shownFailure();
  await screenshot(page, "crash-at-start");
  assert.equal(failure.kind, "engine_load");
  assert.equal(failure.headline, "The engine cannot run.");
  assert.match(failure.message, new RegExp(`^Hearth cannot run ${literal(MODEL)}: its engine crashed \\(panicked at .*Hearth test trap at start.*\\)\\.$`));
  assert.match(failure.fix, /Press Retry: Hearth starts a fresh engine/);
  assert.match(failure.fix, /report the problem/);
  assert.equal(failure.retry, "Retry");
  await retry();
  await aTaskCompletes("Back after a crash at start.");
});

test("an allocation failure mid-load (load step 3): the load ends in a failure with Retry, not a progress bar", { timeout: 240_000 }, async () => {
  await inWorker(`(globalThis.loadingSeen = [], chrome.runtime.onMessage.addListener((m) => { if (m?.kind === "engine_status" && m.status.state === "loading") loadingSeen.push(m.status.done); }), true)`);
  await arm("load_step:3", "oom");
  await chooseModel("tiny-chat");
  const failure = await shownFailure();
  await screenshot(page, "crash-mid-load");
  const seen = await inWorker(`loadingSeen`);
  assert.deepEqual(seen.slice(0, 4), [0, 1, 2, 3], `the load had begun: ${JSON.stringify(seen)}`);
  assert.equal(failure.kind, "engine_load");
  // Out of memory aborts without a panic message: the reason says what it most likely was.
  assert.match(failure.message, new RegExp(`^Hearth cannot run ${literal(MODEL)}: its engine crashed \\(RuntimeError: unreachable[^,]*, without a panic: most likely out of memory; wasm memory [\\d.]+ [MG]iB\\)\\.$`));
  assert.match(failure.fix, /choose a smaller model/);
  assert.equal(await overlayData(page, "load"), null, "no load progress is shown any more");
  await retry();
  assert.equal(await overlayData(page, "model"), MODEL);
  await aTaskCompletes("Back after a crash mid-load.");
});

test("a panic after the GPU self-test: a failure with Retry; Retry starts a working engine", { timeout: 240_000 }, async () => {
  await arm("self_test");
  await chooseModel("");
  const failure = await shownFailure();
  assert.match(failure.message, /its engine crashed \(panicked at .*Hearth test trap at self_test.*\)\.$/);
  await retry();
});

test("a panic mid-task: the task ends failed in the overlay, the engine fails with Retry, and the next task runs", { timeout: 240_000 }, async () => {
  await arm("generate");
  await useScript(chrome, [done("never said")]);
  await ask(page, "Say something (the engine crashes meanwhile).");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"], 60_000), "failed");
  assert.match(await overlayText(page, ".card.error-card .error"), /^The engine crashed \(panicked at .*Hearth test trap at generate.*\)\. Press Retry above the conversation/);
  const failure = await shownFailure();
  await screenshot(page, "crash-mid-task");
  assert.match(failure.message, new RegExp(`^Hearth cannot run ${literal(MODEL)}: its engine crashed \\(panicked at .*Hearth test trap at generate`));
  await retry();
  await aTaskCompletes("Back after a crash mid-task.");
});

test("a load slower than the watchdog is not cut, one that goes silent mid-load is: a failure with Retry; Retry replaces the stuck document", { timeout: 240_000 }, async () => {
  // The worker waits out 60 s of silence; 3 s here. Each read of the installed weights takes 0.8 s:
  // the load takes longer than 3 s in all, but its `loading` statuses keep the watchdog quiet.
  await inWorker(`(globalThis.hearthTestHooks = { engineSilenceMs: 3000 }, globalThis.loadingAt = [], chrome.runtime.onMessage.addListener((m) => { if (m?.kind === "engine_status" && m.status.state === "loading") loadingAt.push(Date.now()); }), true)`);
  try {
    await setHooks({ readDelayMs: 800 });
    await chooseModel("tiny-chat");
    await waitForData(page, "load", ["5/10", "6/10", "7/10", "8/10", "9/10"], 60_000);
    // Then the reads never return: the engine is stuck in the middle of the load.
    await setHooks({ readDelayMs: 10 * 60_000 });
    const failure = await shownFailure();
    await screenshot(page, "crash-silent-load");
    const loadingAt = await inWorker(`loadingAt`);
    assert.ok(loadingAt.at(-1) - loadingAt[0] > 3000, `the load went on for longer than the watchdog's 3 s: ${JSON.stringify(loadingAt)}`);
    assert.match(failure.message, /^The engine stopped answering: nothing happened for 3 seconds\.$/);
    assert.match(failure.fix, /closes the stuck engine/);
  } finally {
    // (A fresh document compiles the engine for longer than 3 s before it says anything.)
    await inWorker(`(delete globalThis.hearthTestHooks, true)`);
  }
  await retry();
  assert.equal(await overlayData(page, "model"), MODEL);
  await aTaskCompletes("Back after a stuck load.");
});

test("the offscreen document closed while the engine starts: a failure with Retry at once; Retry starts the engine", { timeout: 240_000 }, async () => {
  // The engine's next start waits for a GPU adapter that never comes: it is in the middle of starting.
  await inOffscreen(`(navigator.gpu.requestAdapter = () => new Promise(() => {}), globalThis.startsSeen = 0, chrome.runtime.onMessage.addListener((m) => { if (m?.kind === "start_engine") startsSeen++; }), true)`);
  await chooseModel("");
  const deadline = Date.now() + 30_000;
  while ((await inOffscreen(`startsSeen`)) === 0) {
    assert.ok(Date.now() < deadline, "the engine was asked to start");
    await new Promise((r) => setTimeout(r, 100));
  }
  const closedAt = Date.now();
  await inWorker(`chrome.offscreen.closeDocument().then(() => true)`);
  const failure = await shownFailure();
  assert.ok(Date.now() - closedAt < 15_000, `the failure came ${Date.now() - closedAt} ms after the document closed`);
  assert.match(failure.message, /^The engine's page closed or crashed \(.+\)\.$/);
  assert.match(failure.fix, /Press Retry/);
  await retry();
  await aTaskCompletes("Back after the engine's page closed.");
});

test("the console stayed clean, but for the crashes caused on purpose", () => {
  const expected = (e) => e.url.endsWith("/offscreen.html") && /Hearth test trap|panicked at|the engine crashed|RuntimeError: unreachable/.test(e.text);
  assert.deepEqual(chrome.console.errors.filter((e) => !expected(e)), []);
});

/** `text` as a literal in a regular expression. */
function literal(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
