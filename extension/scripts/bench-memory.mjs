// Memory of a large GGUF model in the browser engine: the peak size of the engine's
// WebAssembly.Memory (it only grows, so its size after a step is the peak so far) during the load
// and after a generation, the weights on the GPU, the most bytes of the file held at once, and
// the load time. Two sources:
//
// - `--source store` (the default, the path a person takes): the file is chosen in the options
//   page's "Use a model file you already have" (a Gemma GGUF no manifest pins: hashed, checked by
//   the engine, copied into Cache Storage in 32 MiB parts), then the engine loads it from there,
//   by ranges (`ModelFiles.streamed_gguf` over the store's parts). Prints the install and load times.
// - `--source http`: the same streamed load, read with HTTP Range requests from a local server
//   (no copy into the store; for comparison).
//
//   python3 benches/gguf_layout.py e2b /tmp/gemma4-e2b-layout.gguf   # the real file's layout
//   cargo xtask build                                                  # a test build
//   node scripts/bench-memory.mjs --model /tmp/gemma4-e2b-layout.gguf [--source store|http] [--tokens 1]
//
// Prints Markdown rows for benches/RESULTS.md.

import { closeSync, existsSync, mkdtempSync, openSync, readSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer } from "node:http";
import { join, resolve } from "node:path";
import { launch } from "../tests/lib/browser.mjs";
import { clickLauncher, overlayData, overlayHost, waitForEngine } from "../tests/lib/overlay.mjs";

function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : fallback;
}

const model = resolve(option("--model", ""));
const tokens = Number(option("--tokens", "1"));
const source = option("--source", "store");
if (!existsSync(model) || !statSync(model).isFile()) {
  console.error(`usage: node scripts/bench-memory.mjs --model <file.gguf> [--source store|http] [--tokens 1] (no file at ${model})`);
  process.exit(2);
}
const size = statSync(model).size;

/** GET /model.gguf with `Range: bytes=a-b` (206), CORS open for the extension. */
async function serve() {
  const fd = openSync(model, "r");
  const server = createServer((req, res) => {
    const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? "");
    if (!range) return void res.writeHead(416, { "access-control-allow-origin": "*" }).end();
    const [start, end] = [Number(range[1]), Math.min(Number(range[2]), size - 1)];
    const body = Buffer.alloc(end - start + 1);
    readSync(fd, body, 0, body.length, start);
    res.writeHead(206, { "access-control-allow-origin": "*", "content-range": `bytes ${start}-${end}/${size}`, "content-length": body.length });
    res.end(body);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}/model.gguf`, close: () => new Promise((r) => server.close(() => (closeSync(fd), r()))) };
}

/** The engine's wasm memory, in the offscreen document (the module is already instantiated there). */
const WASM_MEMORY = `import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then((m) => m.default()).then((w) => w.memory.buffer.byteLength)`;

/** Generates `tokens` tokens with the loaded model, in the offscreen document; the last event. */
const GENERATE = `(async () => {
  const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
  const events = [];
  await engine.generate(JSON.stringify({ request_id: 1, prompt: "Hi", max_tokens: ${tokens} }), (json) => events.push(JSON.parse(json)));
  return events.at(-1);
})()`;

/** `--source http`: the offscreen document streams the file from a local server by ranges. */
async function loadOverHttp(chrome) {
  const server = await serve();
  try {
    const result = await chrome.console.evaluate(
      "/offscreen.html",
      `(async () => {
        const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
        const read = async (path, offset, length) => {
          const r = await fetch(${JSON.stringify(server.url)}, { headers: { range: "bytes=" + offset + "-" + (offset + length - 1) } });
          return new Uint8Array(await r.arrayBuffer());
        };
        const files = engine.ModelFiles.streamed_gguf("layout", "model.gguf", ${size}, read, undefined);
        return JSON.parse(await engine.startEngine("", "", files, () => {}));
      })()`,
      3_600_000,
    );
    return { status: result, installMs: null };
  } finally {
    await server.close();
  }
}

/**
 * `--source store`: the file is chosen in the options page as a person would; the engine then
 * loads it from Cache Storage (the worker starts it once the install changed the settings).
 */
async function loadFromStore(chrome, bundledName) {
  await chrome.console.evaluate("/offscreen.html", `Object.assign(globalThis.hearthTestHooks ??= {}, { statuses: [] }), true`);
  const [worker] = chrome.context.serviceWorkers();
  const options = await chrome.context.newPage();
  await options.goto(new URL("options.html#models", worker.url()).href);
  const started = performance.now();
  // Over the DevTools protocol by path (Playwright will not send gigabytes to a browser it
  // reached over CDP); Chromium fires the input's change event as for a person's choice.
  const cdp = await chrome.context.newCDPSession(options);
  const { root } = await cdp.send("DOM.getDocument");
  const { nodeId } = await cdp.send("DOM.querySelector", { nodeId: root.nodeId, selector: "#model-file" });
  await cdp.send("DOM.setFileInputFiles", { nodeId, files: [model] });
  const status = options.locator('#model-import-status[data-state="done"], #model-import-status[data-state="failed"]');
  await status.waitFor({ timeout: 3_600_000 });
  const installMs = performance.now() - started;
  if ((await status.getAttribute("data-state")) !== "done") throw new Error(`the install failed: ${await status.textContent()}`);
  // The worker asks the engine for the new model; its answer is recorded by the test hook.
  const deadline = Date.now() + 3_600_000;
  for (;;) {
    const answers = await chrome.console.evaluate("/offscreen.html", `globalThis.hearthTestHooks.statuses`);
    const last = answers.find((a) => a.state !== "ready" || a.model?.name !== bundledName);
    if (last) return { status: last, installMs };
    if (Date.now() > deadline) throw new Error("the engine never answered with the chosen model");
    await new Promise((r) => setTimeout(r, 500));
  }
}

const profile = mkdtempSync(join(tmpdir(), "hearth-bench-memory-"));
const chrome = await launch({ profile });
try {
  const page = await chrome.context.newPage();
  // The overlay starts the engine (GPU + self-test) with the bundled test model.
  const site = createServer((_, res) => res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>bench</title>"));
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  await page.goto(`http://127.0.0.1:${site.address().port}/`);
  await overlayHost(page);
  await clickLauncher(page);
  if ((await waitForEngine(page, ["ready", "failed"])) !== "ready") throw new Error(`the engine did not start: ${await overlayData(page, "failure")}`);
  const adapter = await overlayData(page, "adapter");
  const bundledName = await overlayData(page, "model");
  site.close();
  const before = await chrome.console.evaluate("/offscreen.html", WASM_MEMORY);
  const { status, installMs } = source === "http" ? await loadOverHttp(chrome) : await loadFromStore(chrome, bundledName);
  if (status.state !== "ready") throw new Error(`the engine could not load the model: ${JSON.stringify(status)}`);
  const afterLoad = await chrome.console.evaluate("/offscreen.html", WASM_MEMORY);
  // (`--tokens 0`: the load only; SwiftShader prefills a real-size model at ~0.02 tokens/s.)
  const done = tokens > 0 ? await chrome.console.evaluate("/offscreen.html", GENERATE, 3_600_000) : null;
  const afterGenerate = await chrome.console.evaluate("/offscreen.html", WASM_MEMORY);

  const m = status.model.memory;
  const gb = (n) => `${(n / 1e9).toFixed(2)} GB`;
  const name = model.split("/").pop();
  const from = source === "http" ? "streamed by ranges over HTTP" : "streamed by ranges from Cache Storage";
  console.log(`# Browser memory, ${name} (${gb(size)}), headless Chromium (${adapter}), source: ${source}\n`);
  console.log("| what | figure |\n|---|---|");
  if (installMs !== null) console.log(`| install: "Use a model file you already have" (SHA-256, engine check, copy into Cache Storage with a second SHA-256) | ${(installMs / 1e3).toFixed(1)} s (${(size / 1e6 / (installMs / 1e3)).toFixed(0)} MB/s) |`);
  console.log(`| load, ${from} (${status.model.layers} layers) | ${(status.model.load_ms / 1e3).toFixed(1)} s |`);
  console.log(`| most bytes of the file held at once | ${gb(m.peak_read_bytes)} (${((100 * m.peak_read_bytes) / size).toFixed(1)} % of the file) |`);
  console.log(`| weights on the GPU / in wasm memory | ${gb(m.device_bytes)} / ${gb(m.host_bytes)} |`);
  console.log(`| wasm memory: engine started / after the load (peak) / after ${tokens} generated token(s) (peak) | ${gb(before)} / ${gb(afterLoad)} / ${gb(afterGenerate)} |`);
  if (done?.event === "done") console.log(`| generation | ${done.stats.prompt_tokens} prompt tokens, ${done.stats.generated_tokens} generated; prefill ${done.stats.prefill_tokens_per_s.toFixed(3)} tokens/s |`);
  else if (done) console.log(`| generation | failed: ${JSON.stringify(done)} |`);
} finally {
  await chrome.close();
  rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
}
