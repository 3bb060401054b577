// Model delivery end to end: the overlay offers tiny-chat (the settings choose it, so it comes
// from the model store rather than the build's bundled copy), a local server imitating Hugging
// Face serves it with Range requests, drops the connection once, goes down in the middle of a file
// and corrupts a file once, and the store must refuse a tiny quota, resume within a part and from
// the last stored part, reject the corrupt file, install the rest only after their SHA-256
// matched, never fetch a verified file twice, and, after a browser restart, load the model without
// a single request. Then the options page deletes it and installs it again from a
// folder on disk, offline. Last, the overlay offers the model's assistant (speculative decoding),
// downloads and checks it, and the model drafts with it: the same greedy tokens, sooner.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch } from "../lib/browser.mjs";
import { serveHub } from "../lib/hub-server.mjs";
import { clickInOverlay, clickLauncher, overlayData, overlayHost, overlayText, screenshot, waitForData } from "../lib/overlay.mjs";
import { serve } from "../lib/server.mjs";

const ROOT = resolve(import.meta.dirname, "../../..");
const MODEL_DIR = join(ROOT, "crates/model/fixtures/tiny-chat");
const ASSISTANT_DIR = join(ROOT, "crates/model/fixtures/tiny-chat-assistant");
const manifest = JSON.parse(readFileSync(join(ROOT, "models/test/tiny-chat.json"), "utf8"));
const TOTAL = manifest.files.reduce((sum, f) => sum + f.size, 0);
/** Small parts, so that model.safetensors (372 KB) is stored in six of them. */
const PART_BYTES = 64 * 1024;
/** Bytes as the overlay writes them in English, for the sizes these tests meet (10–999 KB). */
const kb = (bytes) => `${Math.round(bytes / 1000)} KB`;
/** What is stored when the outage below begins: the files before the weights, and three parts of them. */
const STORED_BEFORE_OUTAGE =
  manifest.files.slice(0, manifest.files.findIndex((f) => f.path === "model.safetensors")).reduce((sum, f) => sum + f.size, 0) + 3 * PART_BYTES;
const DROP_AT = 150_000;

let pages;
let hub;
let profile;
let chrome;

before(async () => {
  pages = await serve(resolve(import.meta.dirname, "../pages"));
  const assistant = { repo: manifest.drafter.repo, revision: manifest.drafter.revision, dir: ASSISTANT_DIR };
  hub = await serveHub([{ repo: manifest.repo, revision: manifest.revision, dir: MODEL_DIR }, assistant], { chunkBytes: 8 * 1024, chunkDelayMs: 25 });
  profile = mkdtempSync(join(tmpdir(), "hearth-download-profile-"));
});

after(async () => {
  await chrome?.close();
  await hub?.close();
  await pages?.close();
  rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
});

const inOffscreen = (expression) => chrome.console.evaluate("/offscreen.html", expression);
const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);

/** The test-only hooks of the offscreen document (test builds only). */
const setHooks = (hooks) => inOffscreen(`Object.assign(globalThis.hearthTestHooks ??= {}, ${JSON.stringify(hooks)}), true`);

/** URLs of every entry of the model cache. */
const cacheKeys = () => inOffscreen(`caches.open("hearth-models-v1").then((c) => c.keys()).then((keys) => keys.map((r) => r.url))`);

/** SHA-256 of each file as the store holds it (its parts, in the order its marker lists), or null. */
async function storedHashes() {
  return inOffscreen(`(async () => {
    const cache = await caches.open("hearth-models-v1");
    const base = "https://models.hearth.invalid/tiny-chat@${manifest.revision}/";
    const out = {};
    for (const path of ${JSON.stringify(manifest.files.map((f) => f.path))}) {
      const marker = await cache.match(base + path + "?complete");
      if (!marker) { out[path] = null; continue; }
      const { size, parts } = await marker.json();
      const bytes = new Uint8Array(size);
      for (const [start, end] of parts) {
        const part = await cache.match(base + path + "?range=" + start + "-" + (end - 1));
        bytes.set(new Uint8Array(await part.arrayBuffer()), start);
      }
      const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
      out[path] = [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
    }
    return out;
  })()`);
}

const expectedHashes = Object.fromEntries(manifest.files.map((f) => [f.path, f.sha256]));

/** The errors of the consoles, less those the dropped connection causes on purpose. */
const unexpectedErrors = () => chrome.console.errors.filter((e) => !(e.text.includes(hub.url) && /net::ERR_|status of 503/.test(e.text)));

async function openOverlay() {
  const page = await chrome.context.newPage();
  await page.goto(`${pages.url}/smoke.html`);
  await overlayHost(page);
  await clickLauncher(page);
  return page;
}

test("model download: quota, drop and resume, a corrupt file, install, and no request after a restart", { timeout: 120_000 }, async () => {
  chrome = await launch({ profile });
  // The settings choose the test model by id: it comes from the store, not the bundled copy.
  await inWorker(`chrome.storage.sync.set({ settings: { model: "tiny-chat" } }).then(() => true)`);
  // Every `installing` and `loading` status the offscreen document sends, as the worker receives them.
  await inWorker(`(globalThis.progressSeen = [], globalThis.loadingSeen = [], chrome.runtime.onMessage.addListener((m) => {
    if (m?.kind === "engine_status" && m.status.state === "installing") progressSeen.push(m.status.progress);
    if (m?.kind === "engine_status" && m.status.state === "loading") loadingSeen.push(m.status);
  }), true)`);

  const page = await openOverlay();
  await overlayHost(page);
  assert.equal(await waitForData(page, "engine", ["needs_model", "ready", "failed"], 60_000), "needs_model", `engine: ${await overlayData(page, "failure")}`);
  assert.equal(await overlayData(page, "offer"), "tiny-chat");
  const offer = await overlayText(page, ".engine .offer");
  assert.ok(offer.startsWith("Download tiny-chat") && offer.includes(`(${kb(TOTAL)})?`), offer);
  await screenshot(page, "download-offer");
  assert.equal(hub.requests.length, 0, "nothing is downloaded before the user agrees");

  // 1. A quota too small for the model: refused before any request, with needed vs available.
  await setHooks({ downloadBase: hub.url, partBytes: PART_BYTES, backoffMs: 50, quotaBytes: 1000 });
  await clickInOverlay(page, "button.download-model");
  assert.equal(await waitForData(page, "failure", "storage_quota", 30_000), "storage_quota");
  const quota = await overlayText(page, ".engine .error");
  assert.ok(quota.includes(`needs ${kb(TOTAL)} more, and the browser allows Hearth 1.0 KB`), quota);
  assert.match(await overlayText(page, ".engine .fix"), /Free disk space/);
  await screenshot(page, "download-quota");
  assert.equal(hub.requests.length, 0, "the quota is checked before the first request");

  // 2. The connection drops in the middle of model.safetensors (the store resumes inside the
  //    part), then the server goes down from its fourth part on, for longer than the store retries.
  await inOffscreen(`delete globalThis.hearthTestHooks.quotaBytes, true`);
  hub.dropOnce.set("model.safetensors", DROP_AT);
  hub.outage.set("model.safetensors", { from: 3 * PART_BYTES, times: 5 });
  await clickInOverlay(page, "button.retry");
  await waitForData(page, "engine", "needs_model", 30_000);
  await clickInOverlay(page, "button.download-model");
  await waitForData(page, "engine", ["installing", "failed"], 10_000);
  await screenshot(page, "download-progress");
  assert.equal(await waitForData(page, "failure", "model_download", 60_000), "model_download");
  assert.match(await overlayText(page, ".engine .error"), /Downloading model\.safetensors of tiny-chat .* failed 5 times in a row: .*HTTP 503/);
  assert.match(await overlayText(page, ".engine .fix"), /the download resumes/);

  assert.deepEqual(hub.dropped, [{ path: "model.safetensors", at: DROP_AT }], "the server dropped the connection once");
  const weights = hub.requests.filter((r) => r.path === "model.safetensors");
  const dropIndex = weights.findIndex((r) => r.start === 2 * PART_BYTES);
  const resumed = weights[dropIndex + 1];
  console.log(`model.safetensors requests: ${weights.map((r) => r.range).join(", ")}`);
  assert.ok(resumed && resumed.start > 0, "after the drop the store asks for a range starting past 0");
  assert.ok(resumed.start > 2 * PART_BYTES && resumed.start <= DROP_AT, `it resumes inside the part, where the connection dropped (${resumed.range})`);
  assert.ok(weights.every((r) => r.range !== null), "every request is a Range request");
  let keys = await cacheKeys();
  const storedParts = keys.filter((k) => k.includes("/model.safetensors?range=")).map((k) => k.split("?range=")[1]).sort();
  assert.deepEqual(storedParts, ["0-65535", "131072-196607", "65536-131071"], "the parts received before the outage are stored");
  assert.ok(!keys.some((k) => k.includes("/model.safetensors?complete")));

  const progress = await inWorker(`progressSeen`);
  assert.ok(progress.length >= 4, `progress events arrive (${progress.length})`);
  assert.ok(progress.every((p, i) => p.model_id === "tiny-chat" && p.total === TOTAL && (i === 0 || p.bytes >= progress[i - 1].bytes)), "bytes only grow");
  assert.ok(progress.some((p) => p.bytes_per_s > 0 && p.eta_s !== null), "a speed and a time left are reported");

  // 3. Retry resumes from the last stored part; tokenizer.json arrives corrupt: rejected, nothing
  //    of it is kept, nothing is installed.
  hub.corrupt.add("tokenizer.json");
  let sent = hub.requests.length;
  await clickInOverlay(page, "button.retry");
  await waitForData(page, "engine", "needs_model", 30_000);
  const resume = await overlayText(page, ".engine .offer");
  assert.ok(resume.startsWith("Resume downloading tiny-chat") && resume.includes(`? ${kb(STORED_BEFORE_OUTAGE)} of ${kb(TOTAL)} are already stored.`), resume);
  assert.match(await overlayText(page, "button.download-model"), /Resume download/);
  await clickInOverlay(page, "button.download-model");
  assert.equal(await waitForData(page, "failure", "model_corrupt", 60_000), "model_corrupt");
  const corrupt = await overlayText(page, ".engine .error");
  const pinned = manifest.files.find((f) => f.path === "tokenizer.json").sha256.slice(0, 16);
  assert.match(corrupt, new RegExp(`tokenizer\\.json of tiny-chat .* is corrupt: its SHA-256 is [0-9a-f]{16}…, the manifest pins ${pinned}…`), corrupt);
  await screenshot(page, "download-corrupt");
  const again = hub.requests.slice(sent);
  assert.equal(again.find((r) => r.path === "model.safetensors")?.start, 3 * PART_BYTES, "the download resumes from the last stored part");
  assert.ok(!again.some((r) => r.path === "config.json" || r.path === "generation_config.json"), "verified files are not requested again");

  keys = await cacheKeys();
  assert.ok(!keys.some((k) => k.endsWith("?installed")), "a model with a corrupt file is not installed");
  assert.ok(!keys.some((k) => k.includes("/tokenizer.json")), "the corrupt file's parts are deleted");
  const hashes = await storedHashes();
  for (const path of ["config.json", "generation_config.json", "model.safetensors"]) assert.equal(hashes[path], expectedHashes[path], `${path} verified`);
  assert.equal(hashes["tokenizer.json"], null);

  // 4. Retry: only the files not verified yet are requested; then the model loads.
  hub.corrupt.clear();
  sent = hub.requests.length;
  await clickInOverlay(page, "button.retry");
  await waitForData(page, "engine", "needs_model", 30_000);
  await clickInOverlay(page, "button.download-model");
  assert.equal(await waitForData(page, "engine", ["ready", "failed"], 60_000), "ready", `engine: ${await overlayData(page, "failure")}`);
  assert.equal(await overlayData(page, "model"), "tiny-chat (test model, random weights)");
  await screenshot(page, "download-ready");
  // The installed model was streamed onto the GPU step by step from the store, with progress: one
  // `loading` status per step (embedding, per-layer table, its projection, 6 layers, final norm).
  const loading = await inWorker(`loadingSeen`);
  assert.ok(loading.length >= 8, `loading statuses: ${JSON.stringify(loading)}`);
  assert.deepEqual(loading.map((l) => l.done), [...loading.keys()], "one status per step, in order");
  assert.ok(loading.every((l) => l.total === loading.length && l.model === "tiny-chat (test model, random weights)"));
  assert.deepEqual([...new Set(hub.requests.slice(sent).map((r) => r.path))], ["tokenizer.json", "chat_template.jinja"], "verified files are never downloaded again");

  keys = await cacheKeys();
  assert.ok(keys.some((k) => k.endsWith(`/tiny-chat@${manifest.revision}/?installed`)), "installed under a versioned key");
  assert.deepEqual(await storedHashes(), expectedHashes, "every stored file hashes to the manifest");
  assert.deepEqual(unexpectedErrors(), []);

  // 5. A browser restart: the engine loads the model from the store without a single request.
  await chrome.close();
  chrome = null;
  const requests = hub.requests.length;
  chrome = await launch({ profile });
  const restarted = await openOverlay();
  assert.equal(await waitForData(restarted, "engine", ["ready", "failed", "needs_model"], 60_000), "ready");
  assert.equal(await overlayData(restarted, "model"), "tiny-chat (test model, random weights)");
  assert.equal(hub.requests.length, requests, "an installed model makes no network request");

  // 6. A part of the stored weights goes missing (the browser evicted it, the disk failed): the
  //    load stops with the store's own message, and Retry downloads that part alone.
  //    (A part of the decoder's: the first ones hold the audio tower, which loads only with voice input on.)
  await inOffscreen(`caches.open("hearth-models-v1").then((c) => c.keys().then((keys) => c.delete(keys.find((r) => r.url.endsWith("/model.safetensors?range=393216-458751")))))`);
  await inWorker(`chrome.offscreen.closeDocument().then(() => true)`);
  const damaged = await openOverlay();
  assert.equal(await waitForData(damaged, "engine", ["ready", "failed", "needs_model"], 60_000), "failed");
  assert.equal(await overlayData(damaged, "failure"), "model_load");
  assert.match(await overlayText(damaged, ".engine .error"), /The stored copy of tiny-chat .* is incomplete \(bytes 393216–458752 of model\.safetensors are missing\)\./);
  assert.match(await overlayText(damaged, ".engine .fix"), /download the missing part again/);
  await screenshot(damaged, "download-damaged-store");
  const beforeRepair = hub.requests.length;
  // The offscreen document is a new one: point its downloads at the test hub again, and slow the
  // weights' reads down so that the load's progress can be seen.
  await setHooks({ downloadBase: hub.url, partBytes: PART_BYTES, backoffMs: 50, readDelayMs: 300 });
  await clickInOverlay(damaged, "button.retry");
  await waitForData(damaged, "engine", "needs_model", 30_000);
  await clickInOverlay(damaged, "button.download-model");
  await waitForData(damaged, "engine", "loading", 30_000);
  assert.match(await overlayText(damaged, ".engine .status"), /^Loading tiny-chat .* onto your GPU…$/);
  assert.match(await overlayText(damaged, ".engine .load-progress"), /^Step \d+ of 10$/);
  await screenshot(damaged, "download-loading");
  assert.equal(await waitForData(damaged, "engine", ["ready", "failed"], 60_000), "ready", `engine: ${await overlayData(damaged, "failure")}`);
  const repair = hub.requests.slice(beforeRepair);
  assert.deepEqual(repair.map((r) => [r.path, r.start]), [["model.safetensors", 393216]], "only the missing part is downloaded again");
  assert.deepEqual(await storedHashes(), expectedHashes);
  assert.deepEqual(unexpectedErrors(), []);
});

test("options: delete the model, then load it from a folder on this computer, offline", { timeout: 60_000 }, async () => {
  const requests = hub.requests.length;
  const options = await chrome.context.newPage();
  await options.goto(`chrome-extension://${chrome.console.extensionId()}/options.html`);
  await options.locator('#models li[data-model="tiny-chat"][data-state="installed"]').waitFor({ timeout: 10_000 });
  await options.locator('#models li[data-model="tiny-chat"] button.delete-model').click();
  await options.locator('#models li[data-model="tiny-chat"][data-state="missing"]').waitFor({ timeout: 10_000 });
  assert.deepEqual(await cacheKeys(), [], "deleting removes every entry");

  // A folder with the wrong bytes in one file is refused, and nothing is installed.
  const bad = mkdtempSync(join(tmpdir(), "hearth-folder-"));
  try {
    const folder = join(bad, "tiny-chat");
    cpSync(MODEL_DIR, folder, { recursive: true });
    const config = readFileSync(join(folder, "config.json"));
    config[10] ^= 1;
    writeFileSync(join(folder, "config.json"), config);
    await options.locator("#model-folder").setInputFiles(folder);
    await options.locator('#model-import-status[data-state="failed"]').waitFor({ timeout: 20_000 });
    assert.match(await options.locator("#model-import-status").textContent(), /config\.json of tiny-chat .* is corrupt/);
  } finally {
    rmSync(bad, { recursive: true, force: true });
  }
  assert.ok(!(await cacheKeys()).some((k) => k.endsWith("?installed")));

  await options.locator("#model-folder").setInputFiles(MODEL_DIR);
  await options.locator('#model-import-status[data-state="done"]').waitFor({ timeout: 20_000 });
  await options.locator('#models li[data-model="tiny-chat"][data-state="installed"]').waitFor({ timeout: 10_000 });
  await screenshot(options, "options-folder-import");
  assert.deepEqual(await storedHashes(), expectedHashes);
  assert.equal(hub.requests.length, requests, "installing from a folder makes no network request");
  // The pinned hashes are the fixture's (what models/pin.mjs wrote).
  for (const f of manifest.files) {
    assert.equal(createHash("sha256").update(readFileSync(join(MODEL_DIR, f.path))).digest("hex"), f.sha256, f.path);
  }
  assert.deepEqual(unexpectedErrors(), []);
});

test("the model's assistant: offered, downloaded and checked, loaded beside the model; drafting keeps the greedy tokens", { timeout: 120_000 }, async () => {
  const page = await openOverlay();
  assert.equal(await waitForData(page, "engine", ["ready", "failed"], 60_000), "ready", `engine: ${await overlayData(page, "failure")}`);
  assert.equal(await waitForData(page, "drafter-offer", "tiny-chat--assistant", 10_000), "tiny-chat--assistant");
  assert.equal(await overlayData(page, "drafter"), "", "no assistant loaded before the download");
  const offer = await overlayText(page, ".engine .drafter-offer");
  assert.ok(offer.includes(`Download the assistant (${kb(manifest.drafter.weights.size)})`), offer);
  const before = hub.requests.length;
  await setHooks({ downloadBase: hub.url });
  await clickInOverlay(page, "button.download-drafter");
  // Downloaded, checked, then the model loads again with it.
  assert.equal(await waitForData(page, "drafter", "hearth-test/tiny-chat-assistant", 60_000), "hearth-test/tiny-chat-assistant");
  assert.equal(await overlayData(page, "engine"), "ready");
  assert.equal(await overlayData(page, "drafter-offer"), null, "nothing offered once installed");
  const fetched = hub.requests.slice(before);
  assert.ok(fetched.length > 0 && fetched.every((r) => r.repo === manifest.drafter.repo && r.path === "model.safetensors"), JSON.stringify(fetched));
  await screenshot(page, "drafter-installed");

  // The engine drafts with it: the same greedy tokens as without, and it says what it drafted.
  const generate = (drafting) =>
    inOffscreen(`(async () => {
      const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
      const events = [];
      await engine.generate(JSON.stringify({ request_id: 3, prompt: "Say hello to the lantern shop.", max_tokens: 16, drafting: ${drafting} }), (json) => events.push(JSON.parse(json)));
      return events.at(-1);
    })()`);
  const drafted = await generate(true);
  const plain = await generate(false);
  assert.equal(drafted.event, "done", JSON.stringify(drafted));
  assert.deepEqual(drafted.token_ids, plain.token_ids);
  assert.ok(drafted.stats.drafted_tokens > 0, JSON.stringify(drafted.stats));
  assert.equal(plain.stats.drafted_tokens, 0);
  assert.deepEqual(unexpectedErrors(), []);
});
