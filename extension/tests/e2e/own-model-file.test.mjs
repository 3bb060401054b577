// "Use a model file you already have" end to end, offline. The overlay's download prompt offers it
// and opens the options page at its models; there a person chooses files as they lie on their disk:
// (a) an Ollama-style blob (`sha256-<hex>`, no extension) whose SHA-256 the tiny-gguf manifest pins
//     installs as tiny-gguf without a single request, and the engine loads it; so does an earlier
//     upload of it (the manifest's `known_uploads`), stored under its own revision;
// (b) a Gemma 3 GGUF no manifest knows becomes the user's own model: named, sized, its
//     architecture shown, marked as not verified by Hearth (options list, settings, overlay), and
//     the engine loads it; deleting it removes it everywhere;
// (c) a picture, a text file, a GGUF of another architecture and a truncated Gemma file are
//     refused with what they are, and nothing of them is stored.
// A test hub imitating Hugging Face stands by as the download base: its request log stays empty.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch } from "../lib/browser.mjs";
import { serveHub } from "../lib/hub-server.mjs";
import { clickInOverlay, clickLauncher, overlayData, overlayHost, overlayText, screenshot, waitForData } from "../lib/overlay.mjs";
import { serve } from "../lib/server.mjs";

const ROOT = resolve(import.meta.dirname, "../../..");
const manifest = JSON.parse(readFileSync(join(ROOT, "models/test/tiny-gguf.json"), "utf8"));
const [FILE] = manifest.files;
const [UPLOAD] = manifest.known_uploads;
const TINY_GGUF = readFileSync(join(ROOT, "crates/model/fixtures/gemma4-gguf/model.gguf"));
const GEMMA3_GGUF = readFileSync(join(ROOT, "crates/model/fixtures/gemma3-gguf/model.gguf"));
const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

/** A GGUF v3 header with string metadata and no tensors (a model of another architecture). */
function ggufHeader(metadata) {
  const u32 = (n) => Buffer.from(new Uint32Array([n]).buffer);
  const u64 = (n) => Buffer.from(new BigUint64Array([BigInt(n)]).buffer);
  const string = (s) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
  const entries = Object.entries(metadata).map(([key, value]) => Buffer.concat([string(key), u32(8), string(value)]));
  return Buffer.concat([Buffer.from("GGUF"), u32(3), u64(0), u64(entries.length), ...entries]);
}

let pages;
let hub;
let profile;
let disk;
let chrome;
let options;
let overlay;
/** Where the test's files lie, as on a person's disk. */
const files = {};

before(async () => {
  pages = await serve(resolve(import.meta.dirname, "../pages"));
  // Any download would reach this imitation of Hugging Face (its log must stay empty).
  hub = await serveHub([{ repo: manifest.repo, revision: manifest.revision, dir: join(ROOT, "crates/model/fixtures/gemma4-gguf") }]);
  profile = mkdtempSync(join(tmpdir(), "hearth-own-file-profile-"));
  disk = mkdtempSync(join(tmpdir(), "hearth-own-file-disk-"));
  const put = (name, path, bytes) => {
    mkdirSync(join(disk, path, ".."), { recursive: true });
    writeFileSync(join(disk, path), bytes);
    files[name] = join(disk, path);
  };
  // Ollama's layout: content-addressed blobs, no extension.
  assert.equal(sha256(TINY_GGUF), FILE.sha256, "the fixture is the pinned file");
  put("blob", `ollama/models/blobs/sha256-${FILE.sha256}`, TINY_GGUF);
  // An earlier upload of the same model (the manifest's known upload): the fixture, 64 bytes longer.
  const upload = Buffer.concat([TINY_GGUF, Buffer.alloc(64)]);
  assert.deepEqual([upload.length, sha256(upload)], [UPLOAD.size, UPLOAD.sha256], "the known upload is the padded fixture");
  put("upload", `ollama/models/blobs/sha256-${UPLOAD.sha256}`, upload);
  // LM Studio's layout: <publisher>/<repo>/<file>.gguf.
  put("gemma3", "lmstudio/models/hearth-test/tiny-gemma3-GGUF/tiny-gemma3.gguf", GEMMA3_GGUF);
  // 1x1 transparent PNG.
  put("png", "Pictures/photo.png", Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=", "base64"));
  put("text", "notes.txt", "Remember to buy lamp oil.\n");
  put("llama", "models/llama-3.2-1b.gguf", ggufHeader({ "general.architecture": "llama", "general.name": "Llama 3.2 1B" }));
  put("truncated", "downloads/gemma3-partial.gguf", GEMMA3_GGUF.subarray(0, 4096));
});

after(async () => {
  await chrome?.close();
  await hub?.close();
  await pages?.close();
  rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
  rmSync(disk, { recursive: true, force: true });
});

const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);
/** URLs of every entry of the model cache, sorted. */
const cacheKeys = () => options.evaluate(() => caches.open("hearth-models-v1").then((c) => c.keys()).then((keys) => keys.map((r) => r.url).sort()));
/** The user's own model records (chrome.storage.local). */
const ownRecords = () => options.evaluate(() => chrome.storage.local.get("ownModels").then((s) => s.ownModels ?? {}));
const importStatus = () => options.locator("#model-import-status").textContent();

/** Chooses `path` in "Use a model file you already have"; resolves to the final status (done or failed). */
async function chooseFile(path) {
  await options.locator("#model-file").setInputFiles(path);
  await options.locator('#model-import-status[data-state="done"], #model-import-status[data-state="failed"]').waitFor({ timeout: 60_000 });
  return { state: await options.locator("#model-import-status").getAttribute("data-state"), text: await importStatus() };
}

test("(a) a file Hearth pins, named like an Ollama blob, installs as that model without a request, and the engine loads it", { timeout: 180_000 }, async () => {
  chrome = await launch({ profile });
  await inWorker(`chrome.storage.sync.set({ settings: { model: "tiny-gguf" } }).then(() => true)`);
  overlay = await chrome.context.newPage();
  await overlay.goto(`${pages.url}/smoke.html`);
  await overlayHost(overlay);
  await clickLauncher(overlay);
  assert.equal(await waitForData(overlay, "engine", ["needs_model", "ready", "failed"], 60_000), "needs_model", `engine: ${await overlayData(overlay, "failure")}`);
  await chrome.console.evaluate("/offscreen.html", `Object.assign(globalThis.hearthTestHooks ??= {}, { downloadBase: ${JSON.stringify(hub.url)} }), true`);
  assert.match(await overlayText(overlay, "button.use-own-file"), /^Use a model file you already have$/);
  assert.match(await overlayText(overlay, ".engine .use-own-file-help"), /Ollama, LM Studio or hf download/);
  await screenshot(overlay, "own-file-offer");

  // The button opens the options page at its models.
  const opened = chrome.context.waitForEvent("page", { predicate: (p) => p.url().includes("/options.html"), timeout: 15_000 });
  await clickInOverlay(overlay, "button.use-own-file");
  options = await opened;
  assert.match(options.url(), /^chrome-extension:\/\/[a-p]{32}\/options\.html#models$/);
  await options.locator('#models li[data-model="tiny-gguf"][data-state="missing"]').waitFor({ timeout: 10_000 });
  assert.equal(await options.locator("#model-file").getAttribute("accept"), null, "any file name is accepted (Ollama's blobs have no extension)");
  await options.waitForFunction(() => document.activeElement?.id === "model-file", null, { timeout: 10_000 });
  assert.match(await options.locator("#import-file-where").textContent(), /~\/\.ollama\/models\/blobs\/.*~\/\.lmstudio\/models\/.*~\/\.cache\/huggingface\/hub\/models--/);
  assert.match(await options.locator("#import-file-copy").textContent(), /copies the file into its own storage.*delete the original/);

  const { state, text } = await chooseFile(files.blob);
  assert.equal(state, "done", text);
  assert.match(text, new RegExp(`^sha256-${FILE.sha256} is tiny-gguf \\(test model, random weights\\) \\(its SHA-256 is the one Hearth ships with\\)\\. It is installed without a download`));
  await options.locator('#models li[data-model="tiny-gguf"][data-state="installed"]').waitFor({ timeout: 10_000 });
  assert.match(await options.locator('#models li[data-model="tiny-gguf"] .model-state').textContent(), /^Installed \(152 KB\)$/);
  await screenshot(options, "own-file-known");

  // Stored as a download would store it, and loaded by the engine from there.
  const keys = await cacheKeys();
  const base = `https://models.hearth.invalid/tiny-gguf@${manifest.revision}/`;
  assert.ok(keys.includes(`${base}?installed`) && keys.includes(`${base}model.gguf?complete`), keys.join("\n"));
  assert.ok(keys.every((k) => k.startsWith(base)), "nothing else is stored");
  assert.equal(await waitForData(overlay, "engine", ["ready", "failed"], 60_000), "ready", `engine: ${await overlayData(overlay, "failure")}`);
  assert.equal(await overlayData(overlay, "model"), manifest.name);
  assert.equal(await overlayData(overlay, "model-verified"), null, "a pinned model is not marked");
  assert.equal((await inWorker(`chrome.storage.sync.get("settings").then((s) => s.settings.model)`)), "tiny-gguf");
  assert.deepEqual(await ownRecords(), {}, "a pinned file is not the user's own model");
  assert.deepEqual(hub.requests, [], "no network request at all");
  assert.deepEqual(chrome.console.errors, []);
});

test("(a) an earlier upload of a pinned model is recognised and stored under its own revision", { timeout: 120_000 }, async () => {
  await options.locator('#models li[data-model="tiny-gguf"] button.delete-model').click();
  await options.locator('#models li[data-model="tiny-gguf"][data-state="missing"]').waitFor({ timeout: 10_000 });
  assert.deepEqual(await cacheKeys(), []);

  const { state, text } = await chooseFile(files.upload);
  assert.equal(state, "done", text);
  assert.match(text, /is tiny-gguf .*, from an earlier upload of the same weights that Hearth recognises by its SHA-256\. It is installed without a download/);
  const item = options.locator('#models li[data-model="tiny-gguf"][data-state="installed"]');
  await item.waitFor({ timeout: 10_000 });
  assert.equal(await item.getAttribute("data-revision"), UPLOAD.revision);
  assert.match(await item.locator(".model-state").textContent(), /^Installed \(152 KB, an earlier upload of the same weights\)$/);
  const keys = await cacheKeys();
  assert.ok(keys.includes(`https://models.hearth.invalid/tiny-gguf@${UPLOAD.revision}/?installed`), keys.join("\n"));

  // A fresh engine (its document closed, as Chrome may close it) finds the installed variant: the
  // pinned revision is not stored at all any more.
  await inWorker(`chrome.offscreen.closeDocument().then(() => true)`);
  overlay = await chrome.context.newPage();
  await overlay.goto(`${pages.url}/smoke.html`);
  await clickLauncher(overlay);
  assert.equal(await waitForData(overlay, "engine", ["ready", "failed", "needs_model"], 60_000), "ready", `engine: ${await overlayData(overlay, "failure")}`);
  assert.equal(await overlayData(overlay, "model"), manifest.name);
  assert.ok((await cacheKeys()).every((k) => k.includes(`/tiny-gguf@${UPLOAD.revision}/`)), "loaded from the earlier upload's keys");
  assert.deepEqual(hub.requests, []);
  assert.deepEqual(chrome.console.errors, []);
});

test("(b) an unknown Gemma 3 GGUF becomes the user's own model: shown with its name, size and architecture, not verified, and loaded", { timeout: 180_000 }, async () => {
  const digest = sha256(GEMMA3_GGUF);
  const id = `user-${digest.slice(0, 12)}`;
  const before = await cacheKeys();
  const { state, text } = await chooseFile(files.gemma3);
  assert.equal(state, "done", text);
  assert.match(text, /^tiny-gemma3\.gguf is added as your own model “tiny-gemma3\.gguf” \(gemma3, 6 layers, 107 KB\), and Hearth now uses it\. .*Hearth has not verified where it comes from\.$/);

  const item = options.locator(`#models li[data-model="${id}"][data-state="installed"]`);
  await item.waitFor({ timeout: 10_000 });
  assert.equal(await item.getAttribute("data-verified"), "false");
  assert.equal(await item.locator(".model-title").textContent(), "tiny-gemma3.gguf");
  assert.match(await item.locator(".model-facts").first().textContent(), /^gemma3 · 6 layers · (F16|Q\w+) · [\d.]+[KM]? parameters · from tiny-gemma3\.gguf$/);
  assert.equal(await item.locator(".model-unverified").textContent(), "Your own file: not verified by Hearth");
  assert.match(await item.locator(".model-template").textContent(), /no chat template: Hearth uses Gemma 3's standard turns/);
  assert.equal(await item.locator(".model-state").textContent(), "Installed (107 KB)");
  // The settings choose it, and list it as the user's own file.
  await options.locator(`.setting-model option[value="${id}"]`).waitFor({ state: "attached", timeout: 10_000 });
  assert.equal(await options.locator(".setting-model").inputValue(), id);
  assert.equal(await options.locator(`.setting-model option[value="${id}"]`).textContent(), "tiny-gemma3.gguf (your file, not verified)");
  await screenshot(options, "own-file-added");

  // The record: manifest-like, pinned to the chosen bytes, not verified.
  const records = await ownRecords();
  assert.deepEqual(Object.keys(records), [id]);
  const record = records[id];
  assert.equal(record.verified, false);
  assert.equal(record.format, "gguf");
  assert.equal(record.revision, digest.slice(0, 40));
  assert.deepEqual(record.files, [{ path: "model.gguf", size: GEMMA3_GGUF.length, sha256: digest }]);
  assert.equal(record.file_name, "tiny-gemma3.gguf");
  assert.equal(record.gguf.architecture, "gemma3");
  const added = (await cacheKeys()).filter((k) => !before.includes(k));
  assert.ok(added.includes(`https://models.hearth.invalid/${id}@${record.revision}/?installed`), added.join("\n"));
  assert.ok(added.every((k) => k.startsWith(`https://models.hearth.invalid/${id}@`)));

  // The engine loads it (the settings changed), and the overlay says whose file it is.
  await overlay.bringToFront();
  assert.equal(await waitForData(overlay, "model", "tiny-gemma3.gguf", 60_000), "tiny-gemma3.gguf");
  assert.equal(await overlayData(overlay, "engine"), "ready");
  assert.equal(await overlayData(overlay, "model-verified"), "false");
  assert.match(await overlayText(overlay, ".engine .model-unverified"), /^tiny-gemma3\.gguf is your own model file \(tiny-gemma3\.gguf\): Hearth's engine runs it, but Hearth has not verified it\.$/);
  await screenshot(overlay, "own-file-ready");
  assert.deepEqual(hub.requests, []);
  assert.deepEqual(chrome.console.errors, []);
});

test("(c) a picture, a text file, another architecture and a truncated file are refused, and nothing is stored", { timeout: 120_000 }, async () => {
  await options.bringToFront();
  const keys = await cacheKeys();
  const records = await ownRecords();
  const cases = [
    [files.png, /^Not added: photo\.png is not a model file Hearth can use: it is not a GGUF file\. Choose a GGUF model file .* Nothing was stored\.$/],
    [files.text, /^Not added: notes\.txt is not a model file Hearth can use: it is not a GGUF file\./],
    [files.llama, /^Not added: llama-3\.2-1b\.gguf is a GGUF model of architecture “llama”, which Hearth cannot run\. Hearth runs Gemma 3 and Gemma 4 text models/],
    [files.truncated, /^Not added: gemma3-partial\.gguf is a Gemma GGUF file that Hearth cannot run: .*truncated.* download it again/],
  ];
  for (const [path, expected] of cases) {
    const { state, text } = await chooseFile(path);
    assert.equal(state, "failed", text);
    assert.match(text, expected);
    assert.deepEqual(await cacheKeys(), keys, `nothing of ${path} is stored`);
    assert.deepEqual(await ownRecords(), records);
  }
  await screenshot(options, "own-file-refused");
  assert.deepEqual(hub.requests, []);
  assert.deepEqual(chrome.console.errors, []);
});

test("(b) deleting the user's own model removes its file, its record and the setting", { timeout: 60_000 }, async () => {
  const id = `user-${sha256(GEMMA3_GGUF).slice(0, 12)}`;
  await options.locator(`#models li[data-model="${id}"] button.delete-model`).click();
  await options.locator(`#models li[data-model="${id}"]`).waitFor({ state: "detached", timeout: 10_000 });
  assert.deepEqual(await ownRecords(), {});
  assert.ok(!(await cacheKeys()).some((k) => k.includes(`/${id}@`)));
  assert.equal(await inWorker(`chrome.storage.sync.get("settings").then((s) => s.settings.model)`), "");
  await options.locator(`.setting-model option[value="${id}"]`).waitFor({ state: "detached", timeout: 10_000 });
  assert.deepEqual(chrome.console.errors, []);
});
