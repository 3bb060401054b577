// A GGUF model delivered as Hearth delivers Gemma 4 E2B/E4B (models/gemma-4-e2b-it.json): one
// pinned .gguf file downloaded from an imitation of Hugging Face, checked by SHA-256, then streamed
// from the model store into the engine by ranges (header, metadata and tensor table as the parser
// asks, then one load step at a time), never whole. The browser's greedy ids must be the native
// CLI's for the same file and prompt. Its vision tower is a file of its own (llama.cpp's projector,
// the manifest's `vision_files`): offered once the model runs, downloaded from the same pinned
// revision when the user asks, and then the model sees a screenshot as soft tokens.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { serveHub } from "../lib/hub-server.mjs";
import { call, done, scriptedImagePrompts, useScript, ask, waitForTask } from "../lib/agent.mjs";
import { clickInOverlay, clickLauncher, overlayData, overlayHost, overlayText, waitForData } from "../lib/overlay.mjs";
import { serve } from "../lib/server.mjs";

const ROOT = resolve(import.meta.dirname, "../../..");
const GGUF_DIR = join(ROOT, "crates/model/fixtures/gemma4-gguf");
const manifest = JSON.parse(readFileSync(join(ROOT, "models/test/tiny-gguf.json"), "utf8"));
const [FILE] = manifest.files;
const [PROJECTOR] = manifest.vision_files;
// The test model's projector: a tiny random tower of the same width (llama.cpp's converter wrote it).
const PROJECTOR_SOURCE = join(ROOT, "crates/model/fixtures/gemma4-vision/mmproj.gguf");
const PROMPT = "Say hello to the lantern shop.";
const MAX_TOKENS = 12;

/** Greedy ids from the native CLI (`hearth generate --print-ids`) on the CPU backend. */
function nativeGreedy() {
  const cli = process.env.HEARTH_CLI ?? join(ROOT, "target/fast-build/hearth");
  const model = join(GGUF_DIR, FILE.path);
  const args = ["generate", "--model", model, "--prompt", PROMPT, "--chat", "--max-tokens", String(MAX_TOKENS), "--print-ids", "--cpu"];
  const run = spawnSync(cli, args, { encoding: "utf8" });
  assert.equal(run.status, 0, `${cli} failed: ${run.error ?? run.stderr}`);
  const ids = /token ids \[([\d, ]*)\]/.exec(run.stderr);
  assert.ok(ids, `no token ids in the CLI's output:\n${run.stderr}`);
  return ids[1].split(",").map((s) => Number(s.trim()));
}

let pages;
let hub;
let profile;
let repo;
let chrome;
let page;

before(async () => {
  pages = await serve(resolve(import.meta.dirname, "../pages"));
  // The imitation hub's repository: the model and its projector at one revision.
  repo = mkdtempSync(join(tmpdir(), "hearth-gguf-repo-"));
  copyFileSync(join(GGUF_DIR, FILE.path), join(repo, FILE.path));
  copyFileSync(PROJECTOR_SOURCE, join(repo, PROJECTOR.path));
  hub = await serveHub([{ repo: manifest.repo, revision: manifest.revision, dir: repo }]);
  profile = mkdtempSync(join(tmpdir(), "hearth-gguf-profile-"));
});

after(async () => {
  await chrome?.close();
  await hub?.close();
  await pages?.close();
  rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
  rmSync(repo, { recursive: true, force: true });
});

const inOffscreen = (expression, timeout) => chrome.console.evaluate("/offscreen.html", expression, timeout);
const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);

test("a pinned GGUF file is downloaded, verified, streamed from the store by ranges, and gives the CLI's greedy ids", { timeout: 300_000 }, async () => {
  const expected = nativeGreedy();
  chrome = await launch({ profile });
  await inWorker(`chrome.storage.sync.set({ settings: { model: "tiny-gguf" } }).then(() => true)`);
  page = await chrome.context.newPage();
  await page.goto(`${pages.url}/smoke.html`);
  await overlayHost(page);
  await clickLauncher(page);
  assert.equal(await waitForData(page, "engine", ["needs_model", "ready", "failed"], 60_000), "needs_model", `engine: ${await overlayData(page, "failure")}`);
  assert.equal(await overlayData(page, "offer"), "tiny-gguf");
  assert.match(await overlayText(page, ".engine .offer"), /Download tiny-gguf .*\(152 KB\)\?/);

  // Every read of the installed file's bytes, as the engine asks for them (test builds record them).
  await inOffscreen(`Object.assign(globalThis.hearthTestHooks ??= {}, { downloadBase: ${JSON.stringify(hub.url)}, reads: [] }), true`);
  await clickInOverlay(page, "button.download-model");
  assert.equal(await waitForData(page, "engine", ["ready", "failed"], 120_000), "ready", `engine: ${await overlayData(page, "failure")}`);

  // Downloaded from the pinned revision only, and not the projector: nobody asked for it.
  const gets = hub.requests.filter((r) => r.method === "GET");
  assert.ok(gets.length > 0);
  for (const r of gets) assert.deepEqual([r.repo, r.revision, r.path], [manifest.repo, manifest.revision, FILE.path]);

  const reads = await inOffscreen(`globalThis.hearthTestHooks.reads`);
  console.log(`reads: ${JSON.stringify(reads)}`);
  assert.ok(reads.length >= 5, `the file is read in many pieces: ${JSON.stringify(reads)}`);
  const largest = Math.max(...reads.map(([, , length]) => length));
  assert.ok(largest <= FILE.size / 2, `no read takes more than half the file (largest ${largest} of ${FILE.size})`);
  for (const [path, offset, length] of reads) {
    assert.equal(path, FILE.path);
    assert.ok(offset >= 0 && offset + length <= FILE.size, `read ${offset}+${length} is inside the file`);
  }

  // The engine's own account of the load: what it held at once, and where the weights went.
  const { model, ids } = await inOffscreen(
    `(async () => {
      const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
      const status = JSON.parse(await engine.startEngine("", "", undefined, () => {}));
      const events = [];
      const request = { request_id: 3, prompt: ${JSON.stringify(PROMPT)}, max_tokens: ${MAX_TOKENS} };
      await engine.generate(JSON.stringify(request), (json) => events.push(JSON.parse(json)));
      const done = events.at(-1);
      return { model: status.model, ids: done.token_ids ?? done };
    })()`,
    120_000,
  );
  assert.equal(model.architecture, "gemma4", JSON.stringify(model));
  assert.equal(model.memory.file_bytes, FILE.size);
  assert.ok(model.memory.peak_read_bytes > 0 && model.memory.peak_read_bytes <= FILE.size / 2, `held at most half the file at once: ${JSON.stringify(model.memory)}`);
  assert.ok(model.memory.wasm_memory_bytes > 0);
  console.log(`tiny-gguf from the store: ${JSON.stringify(model.memory)}, ${reads.length} reads, largest ${largest} B`);
  assert.deepEqual(ids, expected, "greedy ids equal the native CLI's");
  assert.deepEqual(chrome.console.errors, []);
});

test("the GGUF model's vision file is offered, downloaded when asked, and then the model sees a screenshot", { timeout: 300_000 }, async () => {
  assert.ok(page, "the first test installed the model");
  // Offered beside the running model, with its size; the model is text-only meanwhile.
  assert.equal(await waitForData(page, "projector-offer", `${manifest.id}--vision`, 10_000), `${manifest.id}--vision`);
  assert.match(await overlayText(page, ".engine .projector-offer"), /Let Hearth see the page.*Download it \(101 KB\)/);
  const before = await inOffscreen(`import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then(async (e) => JSON.parse(await e.startEngine("", "", undefined, () => {})).model)`);
  assert.equal(before.sees_images, false, JSON.stringify(before));

  hub.requests.length = 0;
  await clickInOverlay(page, "button.download-projector");
  await until(async () => (await overlayData(page, "projector-offer")) === null && (await overlayData(page, "engine")) === "ready", "the model loaded again with its vision file", 120_000);
  const gets = hub.requests.filter((r) => r.method === "GET");
  assert.ok(gets.length > 0, "the projector was downloaded");
  for (const r of gets) assert.deepEqual([r.repo, r.revision, r.path], [manifest.repo, manifest.revision, PROJECTOR.path]);
  const after_ = await inOffscreen(`import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then(async (e) => JSON.parse(await e.startEngine("", "", undefined, () => {})).model)`);
  assert.equal(after_.sees_images, true, JSON.stringify(after_));
  assert.equal(after_.vision_failure, undefined);

  // A task's screenshot reaches the model as soft tokens from the downloaded tower.
  await useScript(chrome, [call("screenshot"), done("Looked at the page.")]);
  await ask(page, "Look at the page.");
  assert.equal(await waitForTask(page, ["done", "failed"], 120_000), "done");
  const prepared = await scriptedImagePrompts(chrome);
  assert.ok(prepared.length >= 1, JSON.stringify(prepared));
  for (const p of prepared) {
    assert.equal(p.error, null, p.error);
    assert.ok(p.soft_tokens.length === 1 && p.soft_tokens[0] > 0, `soft tokens for the screenshot: ${JSON.stringify(p)}`);
  }
  assert.deepEqual(chrome.console.errors, []);
});
