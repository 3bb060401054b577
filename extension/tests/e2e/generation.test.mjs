// The tiny test model (real formats, random weights) generates in the browser on WebGPU through the
// offscreen document, streams its tokens to the overlay, and produces exactly the tokens the native
// CLI produces for the same model and prompt (greedy).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { resolve } from "node:path";
import { launch } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import { clickLauncher, overlayHost, screenshot, waitForEngine } from "../lib/overlay.mjs";

const MODEL_DIR = resolve(import.meta.dirname, "../../../crates/model/fixtures/tiny-chat");
const PROMPT = "Say hello to the lantern shop.";
const MAX_TOKENS = 24; // the overlay asks for 24 tokens

/** Greedy ids from the native CLI (`hearth generate --print-ids`) on the CPU backend. */
function nativeGreedy() {
  const cli = process.env.HEARTH_CLI ?? resolve(import.meta.dirname, "../../../target/release/hearth");
  const args = ["generate", "--model", MODEL_DIR, "--prompt", PROMPT, "--chat", "--max-tokens", String(MAX_TOKENS), "--print-ids", "--cpu"];
  const run = spawnSync(cli, args, { encoding: "utf8" });
  assert.equal(run.status, 0, `${cli} failed: ${run.error ?? run.stderr}`);
  const ids = /token ids \[([\d, ]*)\]/.exec(run.stderr);
  assert.ok(ids, `no token ids in the CLI's output:\n${run.stderr}`);
  console.log(`native: ${run.stderr.trim().split("\n").pop()}`);
  return ids[1].split(",").map((s) => Number(s.trim()));
}

let server;
before(async () => {
  server = await serve(resolve(import.meta.dirname, "../pages"));
});
after(() => server?.close());

test("the browser generates the native CLI's greedy tokens", { timeout: 600_000 }, async () => {
  const native = nativeGreedy();
  // The CLI itself matches transformers (crates/model/fixtures/tiny-chat/expected.json).
  const reference = JSON.parse(readFileSync(resolve(MODEL_DIR, "expected.json"), "utf8")).greedy;
  assert.deepEqual(native, reference.slice(0, native.length));

  const chrome = await launch();
  try {
    const page = await chrome.context.newPage();
    await page.goto(`${server.url}/smoke.html`);
    const host = await overlayHost(page);
    await clickLauncher(page);
    assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready");
    assert.match(await host.getAttribute("data-model"), /tiny-chat/);
    // The prompt box has focus once the model is ready; typing goes to the overlay, not the page.
    await page.keyboard.type(PROMPT);
    await page.keyboard.press("Enter");
    await page.waitForFunction(
      () => ["done", "failed"].includes(document.querySelector("hearth-overlay")?.dataset.generation),
      null,
      { timeout: 540_000, polling: 250 },
    );
    await screenshot(page, "overlay-generation-done");
    assert.equal(await host.getAttribute("data-generation"), "done");
    const browser = JSON.parse(await host.getAttribute("data-output-ids"));
    assert.deepEqual(JSON.parse(await host.getAttribute("data-streamed-ids")), browser, "every token was streamed");
    console.log(`browser: ${browser.length} tokens, ${await host.getAttribute("data-generation-stats")}`);
    assert.deepEqual(browser, native, "browser tokens equal the native CLI's");
    assert.deepEqual(chrome.console.errors, []);
  } finally {
    await chrome.close();
  }
});
