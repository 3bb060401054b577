// Memory of a large GGUF model in the browser engine: the peak size of the engine's
// WebAssembly.Memory (it only grows, so its size after a step is the peak so far) during the load
// and after a generation, the weights on the GPU, the most bytes of the file held at once, and
// the load time. The file is streamed into the engine by ranges exactly as an installed model is
// (`ModelFiles.streamed_gguf`: header as the parser asks, then one load step at a time), read
// here with HTTP Range requests from a local server instead of from Cache Storage.
//
//   python3 benches/gguf_layout.py e2b /tmp/gemma4-e2b-layout.gguf   # the real file's layout
//   cargo xtask build                                                  # a test build
//   node scripts/bench-memory.mjs --model /tmp/gemma4-e2b-layout.gguf [--tokens 1]
//
// Prints Markdown rows for benches/RESULTS.md.

import { existsSync, openSync, readSync, closeSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { resolve } from "node:path";
import { launch } from "../tests/lib/browser.mjs";
import { clickLauncher, overlayData, overlayHost, waitForEngine } from "../tests/lib/overlay.mjs";

function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : fallback;
}

const model = resolve(option("--model", ""));
const tokens = Number(option("--tokens", "1"));
if (!existsSync(model) || !statSync(model).isFile()) {
  console.error(`usage: node scripts/bench-memory.mjs --model <file.gguf> [--tokens 1] (no file at ${model})`);
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

const server = await serve();
const chrome = await launch();
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
  site.close();
  const result = await chrome.console.evaluate(
    "/offscreen.html",
    `(async () => {
      const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
      const memory = (await engine.default()).memory;
      const before = memory.buffer.byteLength;
      const read = async (path, offset, length) => {
        const r = await fetch(${JSON.stringify(server.url)}, { headers: { range: "bytes=" + offset + "-" + (offset + length - 1) } });
        return new Uint8Array(await r.arrayBuffer());
      };
      const files = engine.ModelFiles.streamed_gguf("layout", "model.gguf", ${size}, read, undefined);
      const status = JSON.parse(await engine.startEngine("", "", files, () => {}));
      if (status.state !== "ready") return { status };
      const afterLoad = memory.buffer.byteLength;
      const events = [];
      const request = { request_id: 1, prompt: "Hi", max_tokens: ${tokens} };
      await engine.generate(JSON.stringify(request), (json) => events.push(JSON.parse(json)));
      return { status, before, afterLoad, afterGenerate: memory.buffer.byteLength, done: events.at(-1) };
    })()`,
    3_600_000,
  );
  if (result.status.state !== "ready") throw new Error(`the engine could not load the model: ${JSON.stringify(result.status)}`);
  const m = result.status.model.memory;
  const gb = (n) => `${(n / 1e9).toFixed(2)} GB`;
  const name = model.split("/").pop();
  console.log(`# Browser memory, ${name} (${gb(size)}), headless Chromium (${adapter})\n`);
  console.log("| what | figure |\n|---|---|");
  console.log(`| load, streamed by ranges (${result.status.model.layers} layers) | ${(result.status.model.load_ms / 1e3).toFixed(1)} s |`);
  console.log(`| most bytes of the file held at once | ${gb(m.peak_read_bytes)} (${((100 * m.peak_read_bytes) / size).toFixed(1)} % of the file) |`);
  console.log(`| weights on the GPU / in wasm memory | ${gb(m.device_bytes)} / ${gb(m.host_bytes)} |`);
  console.log(`| wasm memory: engine started / after the load (peak) / after ${tokens} generated token(s) (peak) | ${gb(result.before)} / ${gb(result.afterLoad)} / ${gb(result.afterGenerate)} |`);
  const done = result.done;
  if (done?.event === "done") console.log(`| generation | ${done.stats.prompt_tokens} prompt tokens, ${done.stats.generated_tokens} generated; prefill ${done.stats.prefill_tokens_per_s.toFixed(3)} tokens/s |`);
  else console.log(`| generation | failed: ${JSON.stringify(done)} |`);
} finally {
  await chrome.close();
  await server.close();
}
