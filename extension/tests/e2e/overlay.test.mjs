// The overlay as people use it, in real Chromium with the extension, without a model: task
// updates are sent to the tab from the service worker (as the engine's would be), and what the
// overlay sends back is read in the worker. Covers safe Markdown, tool cards, the confirmation and
// question cards, Stop/Continue, the composer (start and steering), the keyboard, settings and
// per-site disabling, the options page, persistence across a reload, reduced motion, dark theme
// and the Chinese UI. Screenshots of each state go to artifacts/e2e/overlay-*.png.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import {
  clickInOverlay,
  clickLauncher,
  overlayData,
  overlayEval,
  overlayHost,
  overlayText,
  queryOverlay,
  screenshot,
  waitForData,
} from "../lib/overlay.mjs";

const WORKER = "/service-worker.js";

let server;
before(async () => {
  server = await serve(resolve(import.meta.dirname, "../pages"));
});
after(() => server?.close());

// --- the worker's side ------------------------------------------------------------------------

/**
 * Records every message the tabs send to the worker, and the tasks and task controls the worker
 * sends the engine for them (once per browser). The test plays the engine: those are not
 * delivered to the offscreen document.
 */
async function recordWorkerMessages(chrome) {
  await chrome.console.evaluate(
    WORKER,
    `(() => {
      if (!globalThis.__hearthSeen) {
        const send = chrome.runtime.sendMessage.bind(chrome.runtime);
        globalThis.__hearthSeen = [];
        chrome.runtime.sendMessage = (m, ...rest) => {
          if (!m || (m.kind !== "start_task" && m.kind !== "task_control")) return send(m, ...rest);
          globalThis.__hearthSeen.push({ tab: m.tab_id, msg: m });
          return Promise.resolve(undefined);
        };
        chrome.runtime.onMessage.addListener((m, sender) => {
          if (m && typeof m.kind === "string" && sender.tab) globalThis.__hearthSeen.push({ tab: sender.tab.id, msg: m });
          return false;
        });
        // The overlay's chat (Hearth's page in the tab's frame) sends its input over its port:
        // recorded as the tab's chat_input.
        chrome.runtime.onConnect.addListener((port) => {
          const tab = port.sender?.tab?.id;
          if (tab === undefined) return;
          port.onMessage.addListener((m) => {
            if (m && m.kind === "input") globalThis.__hearthSeen.push({ tab, msg: { kind: "chat_input", input: m.input } });
          });
        });
      }
      return true;
    })()`,
  );
}

/** Messages `tabId` sent to the worker, and the worker to the engine for it, since recording began. */
function workerMessages(chrome, tabId) {
  return chrome.console.evaluate(WORKER, `globalThis.__hearthSeen.filter((s) => s.tab === ${tabId}).map((s) => s.msg)`);
}

/** Waits until `tabId` has sent a message matching `predicate`; returns it. */
async function waitForWorkerMessage(chrome, tabId, predicate, what, timeout = 10_000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const found = (await workerMessages(chrome, tabId)).filter(predicate);
    if (found.length) return found.at(-1);
    if (Date.now() > deadline) throw new Error(`the worker never received ${what}; it saw ${JSON.stringify(await workerMessages(chrome, tabId))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const controlOf = (action) => (m) => m.kind === "task_control" && JSON.stringify(m.action) === JSON.stringify(action);

/** The id of the tab showing `page` (its URL is unique per test). */
async function tabIdOf(chrome, page) {
  const id = await chrome.console.evaluate(WORKER, `chrome.tabs.query({}).then((tabs) => tabs.find((t) => t.url === ${JSON.stringify(page.url())})?.id)`);
  assert.ok(typeof id === "number", `no tab for ${page.url()}`);
  return id;
}

/**
 * Sends `msg` to the tab's overlay as the worker does: the engine's status and task updates go
 * through the worker (which owns the conversation), as if the engine had sent them.
 */
async function toTab(chrome, tabId, msg) {
  const delivered = await chrome.console.evaluate(
    WORKER,
    msg.kind === "task_update" || msg.kind === "engine_status"
      ? `(hearthTestEngine(${JSON.stringify({ ...msg, ...(msg.kind === "task_update" ? { tab_id: tabId } : {}) })}), true)`
      : `chrome.tabs.sendMessage(${tabId}, ${JSON.stringify(msg)}, { frameId: 0 }).then(() => true, (e) => String(e))`,
  );
  assert.equal(delivered, true, `message to tab ${tabId} not delivered`);
}

const event = (e) => ({ kind: "task_update", update: { update: "event", event: e } });
const ended = (outcome) => ({ kind: "task_update", update: { update: "ended", outcome } });
const READY = {
  kind: "engine_status",
  status: {
    state: "ready",
    adapter: { name: "Test GPU", vendor: "test", architecture: "", backend: "BrowserWebGpu", device_type: "Cpu", shader_f16: false, max_buffer_size: 2 ** 28, max_storage_buffer_binding_size: 2 ** 27, max_compute_workgroup_storage_size: 16384 },
    self_test: { computation: "softmax(A·B)", passed: true, values: [0.5, 0.5], max_abs_error: 1e-7, tolerance: 1e-5, elapsed_ms: 3 },
    model: { name: "Fake model", architecture: "gemma4_text", layers: 2, vocab_size: 100, load_ms: 12, context_tokens: 8192 },
  },
};

/** A new tab, large enough for the screenshots to show the panel whole. */
async function newPage(chrome) {
  const page = await chrome.context.newPage();
  await page.setViewportSize({ width: 1000, height: 760 });
  return page;
}

/** A new tab on the overlay test page (a unique URL per test), its overlay open. */
async function openOverlay(chrome, name) {
  // The worker's engine as no test left it: idle, so that opening the overlay starts it (and it fails).
  await chrome.console.evaluate(WORKER, `(hearthTestEngine({ kind: "engine_status", status: { state: "idle" } }), true)`);
  const page = await newPage(chrome);
  await page.goto(`${server.url}/overlay.html?${name}`);
  await overlayHost(page);
  await clickLauncher(page);
  await waitForData(page, "state", "open");
  // Without WebGPU the engine fails quickly; tests that need it ready send a ready status.
  await waitForData(page, "engine", "failed", 60_000);
  return { page, tabId: await tabIdOf(chrome, page) };
}

/** Waits for the worker and for its content-script registration (done at install). */
async function extensionReady(chrome) {
  await until(() => chrome.console.extensionId(), "the service worker");
  // Right after start the worker's session may not evaluate yet: try again until it does.
  await until(
    () => chrome.console.evaluate(WORKER, "chrome.scripting.getRegisteredContentScripts().then((s) => s.length > 0)").catch(() => false),
    "the content script's registration",
    30_000,
  );
}

const settingsIn = (chrome) => chrome.console.evaluate(WORKER, `chrome.storage.sync.get("settings").then((s) => s.settings ?? null)`);

// --- English UI -------------------------------------------------------------------------------

describe("the overlay", () => {
  let chrome;
  before(async () => {
    chrome = await launch({ webgpu: false });
    await extensionReady(chrome);
    await recordWorkerMessages(chrome);
  });
  after(async () => {
    const errors = chrome?.console.errors ?? [];
    await chrome?.close();
    assert.deepEqual(errors, [], "no errors in any extension console or page");
  });

  test("an answer is rendered as Markdown, and HTML in it stays text", { timeout: 120_000 }, async () => {
    const { page, tabId } = await openOverlay(chrome, "markdown");
    const answer = [
      "Here is **bold**, *emphasis*, `code` and <img src=x onerror=\"window.__pwned = 1\">.",
      "",
      "- [a safe link](https://example.com/docs)",
      "- [a bad link](javascript:window.__pwned=2)",
      "",
      "```html",
      "<script>window.__pwned = 3</script>",
      "```",
    ].join("\n");
    // Streamed in pieces, as the engine does, then finished with the same text.
    for (const piece of answer.match(/[\s\S]{1,17}/g)) await toTab(chrome, tabId, event({ type: "token", text: piece }));
    await toTab(chrome, tabId, event({ type: "done", result: answer, success: true }));
    await toTab(chrome, tabId, ended({ kind: "done", result: answer, success: true }));

    assert.equal(await waitForData(page, "task", "done"), "done");
    assert.equal(await overlayData(page, "answer"), answer);
    assert.equal((await queryOverlay(page, ".result")).length, 1, "the streamed answer became the result");
    assert.equal((await queryOverlay(page, "img")).length, 0, "no image element from model text");
    assert.equal((await queryOverlay(page, ".result script")).length, 0, "no script element from model text");
    assert.match(await overlayText(page, ".result"), /<img src=x onerror="window.__pwned = 1">/);
    assert.equal(await overlayText(page, ".result strong"), "bold");
    assert.equal(await overlayText(page, ".result em"), "emphasis");
    assert.equal(await overlayText(page, ".result pre code"), "<script>window.__pwned = 3</script>");
    assert.equal((await queryOverlay(page, ".result a")).length, 1, "only the https link is a link");
    assert.deepEqual(await overlayEval(page, ".result a", "function () { return [this.href, this.target, this.rel]; }"), [
      "https://example.com/docs",
      "_blank",
      "noopener noreferrer",
    ]);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await screenshot(page, "overlay-answer");
    await page.close();
  });

  test("tool cards, the confirmation and question cards, Stop and Continue", { timeout: 180_000 }, async () => {
    const { page, tabId } = await openOverlay(chrome, "cards");

    await toTab(chrome, tabId, event({ type: "thinking", text: "The page has a form; " }));
    await toTab(chrome, tabId, event({ type: "thinking", text: "I will look at it first." }));
    await toTab(chrome, tabId, event({ type: "tool_start", call_id: "c1", name: "snapshot", arguments: {} }));
    await waitForData(page, "task", "running");
    assert.equal(await waitForData(page, "cards", "1"), "1");
    await overlayEval(page, ".tool.running", "function () { return true; }");
    await screenshot(page, "overlay-tool-running");
    await new Promise((r) => setTimeout(r, 120));
    await toTab(chrome, tabId, event({ type: "tool_result", call_id: "c1", name: "snapshot", ok: true, output: "[1] button \"Delete account\"" }));
    await toTab(chrome, tabId, event({ type: "tool_start", call_id: "c2", name: "click", arguments: { index: 9 } }));
    await toTab(chrome, tabId, event({ type: "tool_result", call_id: "c2", name: "click", ok: false, output: "Error: No element [9]; take a new snapshot." }));
    await toTab(chrome, tabId, event({ type: "usage", prompt_tokens: 1234, prefill_tokens: 56, completion_tokens: 78, tokens_per_second: 12.5 }));
    await waitForData(page, "cards", "2");
    const first = await overlayText(page, '.tool[data-call-id="c1"]');
    assert.match(first, /snapshot/);
    const ms = Number(/([\d,]+) ms/.exec(first)?.[1].replace(",", ""));
    assert.ok(ms >= 100, `the card shows the time between tool_start and tool_result: ${first}`);
    assert.match(await overlayText(page, '.tool[data-call-id="c2"]'), /failed.*index: 9/s);
    assert.match(await overlayText(page, ".usage"), /1,234 prompt tokens \(56 new\) · 78 generated at 12\.5 tokens\/s/);
    assert.equal((await queryOverlay(page, "details.thinking[open]")).length, 0, "thinking is folded away");
    assert.match(await overlayText(page, "details.thinking"), /The page has a form; I will look at it first\./);

    // Each decision of the confirmation card reaches the worker as task_control.
    for (const decision of ["allow_once", "deny", "allow_for_task"]) {
      const callId = `confirm-${decision}`;
      await toTab(
        chrome,
        tabId,
        event({
          type: "confirm_request",
          call_id: callId,
          name: "click",
          arguments: { index: 1 },
          risk: "high",
          reasons: [{ kind: "dangerous_word", word: "delete" }, { kind: "sensitive_page", host: "bank.example" }],
        }),
      );
      await toTab(chrome, tabId, ended({ kind: "needs_confirmation", call_id: callId }));
      await waitForData(page, "task", "confirm");
      const card = `.confirm[data-call-id="${callId}"]`;
      // Focus moves to the card (its safe button), and stays there when the card is drawn again.
      await until(
        () => overlayEval(page, `${card} button[data-decision="deny"]`, "function () { return this.getRootNode().activeElement === this; }"),
        "focus on the card's safe button",
        3_000,
      );
      assert.match(await overlayText(page, card), /the target mentions “delete”[\s\S]*bank\.example looks like a sensitive site/);
      if (decision === "allow_once") await screenshot(page, "overlay-confirm");
      await clickInOverlay(page, `${card} button[data-decision="${decision}"]`);
      await waitForWorkerMessage(chrome, tabId, controlOf({ action: "confirm", call_id: callId, decision }), `confirm ${decision} for ${callId}`);
      assert.equal(await waitForData(page, "task", "running"), "running");
      // (The card is drawn again with the decision within a frame.)
      await until(() => overlayEval(page, `${card} button[data-decision="allow_once"]`, "function () { return this.disabled; }"), "the card's buttons disabled", 3_000);
    }

    // A question with options; then one answered in the composer.
    await toTab(chrome, tabId, event({ type: "ask_user", call_id: "q1", question: "Which size?", options: ["Small", "Large"] }));
    await toTab(chrome, tabId, ended({ kind: "needs_answer", call_id: "q1" }));
    await waitForData(page, "task", "ask");
    await screenshot(page, "overlay-ask");
    await clickInOverlay(page, '.ask[data-call-id="q1"] button.option:nth-of-type(2)');
    await waitForWorkerMessage(chrome, tabId, controlOf({ action: "answer", text: "Large" }), "the chosen option");
    await toTab(chrome, tabId, event({ type: "ask_user", call_id: "q2", question: "What name goes on the order?", options: [] }));
    await toTab(chrome, tabId, ended({ kind: "needs_answer", call_id: "q2" }));
    await waitForData(page, "task", "ask");
    await clickInOverlay(page, "textarea.composer");
    await page.keyboard.type("Ada Lovelace");
    await page.keyboard.press("Enter");
    await waitForWorkerMessage(chrome, tabId, controlOf({ action: "answer", text: "Ada Lovelace" }), "the typed answer");
    // The card redraws right after the message leaves: poll for it rather than read once.
    for (let tries = 0; !/Ada Lovelace/.test(await overlayText(page, '.ask[data-call-id="q2"]')); tries++) {
      assert.ok(tries < 50, `the answered question does not show the answer: ${await overlayText(page, '.ask[data-call-id="q2"]')}`);
      await new Promise((r) => setTimeout(r, 100));
    }

    // Stop while running; then Continue.
    await toTab(chrome, tabId, event({ type: "token", text: "Working on it" }));
    await waitForData(page, "task", "running");
    await clickInOverlay(page, "button.stop");
    await waitForWorkerMessage(chrome, tabId, controlOf({ action: "stop" }), "stop");
    await toTab(chrome, tabId, event({ type: "stopped" }));
    await toTab(chrome, tabId, ended({ kind: "stopped" }));
    await waitForData(page, "task", "stopped");
    await screenshot(page, "overlay-stopped");
    await clickInOverlay(page, "button.continue");
    await waitForWorkerMessage(chrome, tabId, controlOf({ action: "continue" }), "continue");
    await waitForData(page, "task", "running");

    // Paused at the step limit, and a recoverable failure: both offer Continue.
    await toTab(chrome, tabId, event({ type: "paused", reason: { kind: "max_iterations", limit: 25 } }));
    await toTab(chrome, tabId, ended({ kind: "paused", reason: { kind: "max_iterations", limit: 25 } }));
    await waitForData(page, "task", "paused");
    assert.match(await overlayText(page, ".transcript"), /Paused after 25 steps/);
    await screenshot(page, "overlay-paused");
    await clickInOverlay(page, "button.continue");
    // (The worker records the Continue before the engine could answer it.)
    await waitForData(page, "task", "running");
    await toTab(chrome, tabId, event({ type: "error", error: { kind: "empty_answer" }, recoverable: true }));
    await toTab(chrome, tabId, ended({ kind: "failed", error: { kind: "empty_answer" } }));
    await waitForData(page, "task", "failed");
    assert.equal(await overlayText(page, ".card.error-card .error"), "The model returned an empty answer. Continue to try again.", "worded from the locale, shown once");
    assert.equal(await overlayEval(page, "button.continue", "function () { return this.hidden; }"), false);
    await screenshot(page, "overlay-failed");
    assert.equal(await waitForData(page, "cards", "2"), "2", "done/ask_user are not tool cards");
    await page.close();
  });

  test("the composer starts and steers tasks; keystrokes never reach the page; Escape closes", { timeout: 120_000 }, async () => {
    const { page, tabId } = await openOverlay(chrome, "composer");
    await toTab(chrome, tabId, READY);
    await waitForData(page, "engine", "ready");
    const facts = await overlayEval(page, "details.engine-details dl", "function () { return this.textContent; }");
    assert.match(facts, /Fake model · 2 layers · 8,192-token context · loaded in 12 ms/, "the engine's context is shown");
    await clickInOverlay(page, "textarea.composer");
    await page.keyboard.type("Summarize this page");
    await page.keyboard.press("Enter");
    const submitted = await waitForWorkerMessage(chrome, tabId, (m) => m.kind === "chat_input" && m.input.input === "submit", "the submitted text");
    assert.equal(submitted.input.text, "Summarize this page");
    // The page is the tab's, as the browser reports it: the tab's message names none.
    assert.equal(submitted.input.page, undefined);
    const start = await waitForWorkerMessage(chrome, tabId, (m) => m.kind === "start_task", "start_task", 40_000);
    assert.equal(start.text, "Summarize this page");
    assert.equal(start.page.url, page.url());
    assert.equal(await waitForData(page, "task", "running"), "running");
    assert.equal(await overlayEval(page, "button.stop", "function () { return this.hidden; }"), false, "Stop shows while running");

    // The worker may have started its (absent) engine again for the task: say ready again and steer.
    await toTab(chrome, tabId, READY);
    await waitForData(page, "engine", "ready");
    await clickInOverlay(page, "textarea.composer");
    await page.keyboard.type("Shorter, please");
    await page.keyboard.press("Enter");
    await waitForWorkerMessage(chrome, tabId, (m) => m.kind === "start_task" && m.text === "Shorter, please", "the steering message", 40_000);
    assert.equal(await waitForData(page, "task", "running"), "running", "steering keeps the task running");
    assert.equal(await page.evaluate(() => window.__keys), 0, "no keystroke reached the page's listeners");
    await screenshot(page, "overlay-running");

    await page.keyboard.press("Escape");
    assert.equal(await waitForData(page, "state", "closed"), "closed");
    await page.close();
  });

  test("a message typed before the engine is ready waits for it", { timeout: 120_000 }, async () => {
    const { page, tabId } = await openOverlay(chrome, "queued");
    await clickInOverlay(page, "textarea.composer");
    await page.keyboard.type("Hello");
    await page.keyboard.press("Enter");
    await waitForData(page, "task", "running");
    assert.match(await overlayText(page, ".msg.user.queued"), /Hello[\s\S]*Waiting for the engine/);
    assert.equal((await workerMessages(chrome, tabId)).filter((m) => m.kind === "start_task").length, 0);
    await waitForData(page, "engine", "failed", 30_000);
    await toTab(chrome, tabId, READY);
    const start = await waitForWorkerMessage(chrome, tabId, (m) => m.kind === "start_task", "the queued start_task", 40_000);
    assert.equal(start.text, "Hello");
    // The overlay drops the mark once the worker has the task; that reaches the page a moment
    // after the worker's own record of the message.
    await until(async () => (await queryOverlay(page, ".msg.user.queued")).length === 0, "the queued mark removed");
    await page.close();
  });

  test("the conversation survives a reload of the tab", { timeout: 120_000 }, async () => {
    const { page, tabId } = await openOverlay(chrome, "persist");
    await toTab(chrome, tabId, event({ type: "tool_start", call_id: "p1", name: "read_page", arguments: {} }));
    await toTab(chrome, tabId, event({ type: "tool_result", call_id: "p1", name: "read_page", ok: true, output: "Lanterns." }));
    await toTab(chrome, tabId, event({ type: "done", result: "The shop sells **lanterns**.", success: true }));
    await toTab(chrome, tabId, ended({ kind: "done", result: "The shop sells **lanterns**.", success: true }));
    await waitForData(page, "task", "done");
    const key = `transcript:${tabId}`;
    await until(
      async () => (await chrome.console.evaluate(WORKER, `chrome.storage.session.get(${JSON.stringify(key)}).then((s) => s[${JSON.stringify(key)}]?.entries.length ?? 0)`)) >= 2,
      "the transcript in storage.session",
    );

    await page.reload();
    await overlayHost(page);
    await clickLauncher(page);
    assert.equal(await waitForData(page, "cards", "1"), "1", "the tool card is back");
    assert.equal(await waitForData(page, "task", "done"), "done");
    assert.equal(await overlayText(page, ".result strong"), "lanterns");

    // Clear conversation empties it, and tells the worker to forget the agent's side.
    await clickInOverlay(page, "button.settings");
    await clickInOverlay(page, "button.clear");
    await waitForWorkerMessage(chrome, tabId, controlOf({ action: "forget" }), "forget");
    assert.equal(await waitForData(page, "cards", "0"), "0");
    assert.equal((await queryOverlay(page, ".result")).length, 0);
    await page.close();
  });

  test("the shortcut's open_overlay shows the selection above the composer, apart from what is typed", { timeout: 60_000, skip: !contentCallsOpenWithSelection() && "content.ts does not call openWithSelection yet" }, async () => {
    const page = await newPage(chrome);
    await page.goto(`${server.url}/overlay.html?shortcut`);
    await overlayHost(page);
    const tabId = await tabIdOf(chrome, page);
    await page.evaluate(() => {
      const range = document.createRange();
      range.selectNodeContents(document.getElementById("quote"));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
    });
    await toTab(chrome, tabId, { kind: "open_overlay" });
    await waitForData(page, "state", "open");
    assert.match(await overlayText(page, ".selection-text"), /^Lanterns were lit at dusk\.\s+The shop stayed open late\.$/);
    assert.equal(await overlayEval(page, "textarea.composer", "function () { return this.value; }"), "", "what the user types stays theirs");
    assert.equal(await overlayEval(page, "textarea.composer", "function () { return this.getRootNode().activeElement === this; }"), true);
    await screenshot(page, "overlay-selection");
    // The user can drop it before sending.
    await clickInOverlay(page, ".selection-remove");
    assert.equal(await overlayEval(page, ".selection", "function () { return this.hidden; }"), true);
    await page.close();
  });

  test("settings: the gear view opens the options page (the page itself never writes them), disabling the site removes the overlay, the options page turns it back on", { timeout: 180_000 }, async () => {
    const { page } = await openOverlay(chrome, "settings");
    await clickInOverlay(page, "button.settings");
    assert.equal(await waitForData(page, "view", "settings"), "settings");
    // No settings form in the page's document: "All settings…" opens Hearth's own page.
    assert.equal((await queryOverlay(page, ".settings-form")).length, 0);
    const optionsPage = chrome.context.waitForEvent("page", { predicate: (p) => p.url().endsWith("/options.html") });
    await clickInOverlay(page, "button.open-options");
    const settingsPage = await optionsPage;
    await settingsPage.locator("body[data-loaded]").waitFor();
    await settingsPage.locator(".setting-thinking").check();
    await until(async () => (await settingsIn(chrome))?.thinking === true, "thinking saved");
    await settingsPage.locator(".setting-max-iterations").fill("7");
    await settingsPage.locator(".setting-max-iterations").press("Tab");
    await until(async () => (await settingsIn(chrome))?.maxIterations === 7, "max iterations saved");
    await settingsPage.close();
    await screenshot(page, "overlay-settings");

    const origin = new URL(server.url).origin;
    await clickInOverlay(page, "button.disable-site");
    await page.waitForFunction(() => !document.querySelector("hearth-overlay"), null, { timeout: 10_000 });
    await until(async () => (await settingsIn(chrome))?.disabledSites.includes(origin), "the site in disabledSites");
    await page.reload();
    await page.waitForTimeout(1500);
    assert.equal(await page.locator("hearth-overlay").count(), 0, "no overlay on a disabled site after a reload");

    const options = await newPage(chrome);
    await options.goto(`chrome-extension://${chrome.console.extensionId()}/options.html`);
    await options.locator("body[data-loaded]").waitFor();
    assert.equal(await options.locator("#sites .site").textContent(), origin);
    assert.equal(await options.locator(".setting-max-iterations").inputValue(), "7");
    assert.equal(await options.locator(".setting-thinking").isChecked(), true);
    await screenshot(options, "options-page");
    await options.locator(`button.remove-site[data-site="${origin}"]`).click();
    await until(async () => (await settingsIn(chrome))?.disabledSites.length === 0, "the site removed");
    await options.locator("#no-sites").waitFor();
    // Back to the defaults for the other tests.
    await options.locator(".setting-thinking").uncheck();
    await options.locator(".setting-max-iterations").fill("25");
    await options.locator(".setting-max-iterations").press("Tab");
    await until(async () => (await settingsIn(chrome))?.maxIterations === 25, "max iterations reset");
    await options.close();

    await page.reload();
    await overlayHost(page);
    await page.close();
  });

  test("reduced motion turns animations off; dark mode has a dark theme", { timeout: 120_000 }, async () => {
    const page = await newPage(chrome);
    await page.emulateMedia({ reducedMotion: "reduce", colorScheme: "dark" });
    await page.goto(`${server.url}/overlay.html?motion`);
    await overlayHost(page);
    await clickLauncher(page);
    await waitForData(page, "state", "open");
    assert.equal(await overlayEval(page, ".panel", "function () { return getComputedStyle(this).animationName; }"), "none");
    assert.equal(await overlayEval(page, ".panel", "function () { return getComputedStyle(this).backgroundColor; }"), "rgb(28, 25, 23)");
    await screenshot(page, "overlay-dark");

    await page.emulateMedia({ reducedMotion: "no-preference", colorScheme: "light" });
    await page.keyboard.press("Escape");
    await waitForData(page, "state", "closed");
    await clickLauncher(page);
    assert.equal(await overlayEval(page, ".panel", "function () { return getComputedStyle(this).animationName; }"), "hearth-open");
    assert.equal(await overlayEval(page, ".panel", "function () { return getComputedStyle(this).backgroundColor; }"), "rgb(255, 253, 250)");
    await page.close();
  });
});

function contentCallsOpenWithSelection() {
  return readFileSync(resolve(import.meta.dirname, "../../src/content/content.ts"), "utf8").includes("openWithSelection");
}

// --- Chinese UI -------------------------------------------------------------------------------

describe("the overlay in Simplified Chinese", () => {
  test("every string comes from the zh_CN locale", { timeout: 120_000 }, async () => {
    const chrome = await launch({ webgpu: false, args: ["--lang=zh-CN"], env: { LANGUAGE: "zh_CN", LANG: "zh_CN.UTF-8" } });
    try {
      await extensionReady(chrome);
      const page = await newPage(chrome);
      await page.goto(`${server.url}/overlay.html?zh`);
      await overlayHost(page);
      assert.equal(await overlayEval(page, ".launcher", "function () { return this.getAttribute('aria-label'); }"), "打开 Hearth");
      await clickLauncher(page);
      await waitForData(page, "engine", "failed", 60_000);
      assert.equal(await overlayEval(page, "textarea.composer", "function () { return this.placeholder; }"), "询问此页面，或告诉 Hearth 要做什么…");
      assert.equal(await overlayText(page, "button.send"), "发送");
      assert.equal(await overlayText(page, ".engine .status"), "引擎无法运行。");
      // The failure itself (from the Rust engine) is in Chinese too: the worker localizes it.
      assert.match(await overlayText(page, ".engine .error"), /^没有可用的 WebGPU 适配器：/);
      assert.match(await overlayText(page, ".engine .fix"), /Hearth 需要 WebGPU/);
      const tabId = await tabIdOf(chrome, page);
      await toTab(chrome, tabId, event({ type: "confirm_request", call_id: "z1", name: "click", arguments: { index: 2 }, risk: "high", reasons: [{ kind: "password_field" }] }));
      await waitForData(page, "task", "confirm");
      assert.equal(await overlayText(page, 'button[data-decision="allow_for_task"]'), "本次任务中始终允许");
      assert.equal(await overlayText(page, ".confirm h3"), "允许 click？", "a card without a described target is titled from the locale");
      assert.match(await overlayText(page, ".confirm .reasons"), /涉及密码输入框/);
      await screenshot(page, "overlay-zh");
      // A refusal by the engine's side is worded by the locale too.
      await toTab(chrome, tabId, { kind: "task_update", update: { update: "refused", refusal: { kind: "engine_crashed", detail: "RuntimeError: unreachable" } } });
      assert.match(await overlayText(page, ".card.error-card .error"), /^引擎已崩溃（RuntimeError: unreachable）/);
      assert.deepEqual(chrome.console.errors, []);
    } finally {
      await chrome.close();
    }
  });
});
