// Browser decode speed of one GGUF model: Hearth (the extension's wasm engine on WebGPU, in its
// offscreen document) beside wllama (llama.cpp compiled to wasm, npm @wllama/wllama) in a page of
// the same headless Chromium, on the same machine. Prints Markdown rows for benches/RESULTS.md.
//
//   cargo xtask build    # a test build in dist/extension
//   node scripts/bench-browser.mjs --model gemma-3-270m-q4_k_m.gguf [--tokens 16] [--hearth-only] [--profile out.cpuprofile] [--prompt text]
//                                   [--speculative 2,4]
//
// `--hearth-only` leaves wllama out (a synthetic file whose figures are only Hearth's host cost).
// `--profile out.cpuprofile` records the offscreen document's thread during Hearth's generation
// (CDP's sampling profiler; open the file in DevTools' Performance panel) and prints the functions
// with the most self time. Build with HEARTH_WASM_NAMES=1 to see wasm functions by name.
//
// `cargo xtask bench -- --browser --model <file.gguf>` does both. wllama is installed on first use
// into ~/.cache/hearth/wllama (npm, pinned version); nothing of it enters the repository.

import { spawnSync } from "node:child_process";
import { createReadStream, existsSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { homedir } from "node:os";
import { extname, join, normalize, resolve } from "node:path";
import { launch } from "../tests/lib/browser.mjs";
import { clickLauncher, overlayData, overlayHost, waitForEngine } from "../tests/lib/overlay.mjs";

const WLLAMA_VERSION = "3.13.0";
// Raw completion on both sides (Gemma 3 270M is a base model and its GGUF has no chat template).
const PROMPT = option("--prompt", "Once upon a time, in a small village,");
const RAW_TEMPLATE = "{{ bos_token }}{{ messages[0]['content'] }}";

function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : fallback;
}

const model = resolve(option("--model", ""));
const tokens = Number(option("--tokens", "16"));
const hearthOnly = process.argv.includes("--hearth-only");
const profile = option("--profile", null);
// `--speculative 2,4`: also a verification of k+1 tokens against one decoded token (speculative decoding's cost).
const speculative = option("--speculative", null)?.split(",").map(Number) ?? null;
if (!existsSync(model) || !statSync(model).isFile()) {
  console.error(`usage: node scripts/bench-browser.mjs --model <file.gguf> [--tokens 16] (no file at ${model})`);
  process.exit(2);
}

/** wllama's ESM build, installed once into the cache. */
function wllamaDir() {
  const cache = join(process.env.HEARTH_CACHE ?? join(homedir(), ".cache/hearth"), "wllama");
  const dir = join(cache, "node_modules/@wllama/wllama/esm");
  if (!existsSync(join(dir, "wasm/wllama.wasm"))) {
    const npm = spawnSync("npm", ["install", "--prefix", cache, "--no-audit", "--no-fund", `@wllama/wllama@${WLLAMA_VERSION}`], { stdio: "inherit" });
    if (npm.status !== 0) throw new Error("npm could not install @wllama/wllama");
  }
  return dir;
}

/** The functions with the most self time in a CDP profile (sampled time, not exact). */
function printProfile(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  const deltas = profile.timeDeltas ?? [];
  profile.samples.forEach((id, i) => {
    const { functionName, url } = byId.get(id).callFrame;
    const name = functionName || `(anonymous ${url.split("/").pop()})`;
    self.set(name, (self.get(name) ?? 0) + (deltas[i + 1] ?? 0) / 1e3);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  console.log(`\nProfile of the generation (${(total / 1e3).toFixed(1)} s sampled), functions by self time:\n`);
  console.log("| function | self ms | share |");
  console.log("|---|---|---|");
  for (const [name, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(`| \`${name.slice(0, 110)}\` | ${ms.toFixed(0)} | ${((100 * ms) / total).toFixed(1)} % |`);
  }
  printStepFamilies(profile, byId);
}

/** WebGPU calls a step makes, by the JS import wasm-bindgen names after them. */
const WEBGPU_CALLS = [
  [/__wbg_createBindGroup_|__wbg_getBindGroupLayout_/, "WebGPU: bind groups (one per dispatch)"],
  [/__wbg_submit_/, "WebGPU: queue submit"],
  [/__wbg_writeBuffer_/, "WebGPU: buffer writes"],
  [/__wbg_createBuffer_/, "WebGPU: buffer creation"],
  [/__wbg_(createCommandEncoder|beginComputePass|setPipeline|setBindGroup|dispatchWorkgroups|end|finish)_/, "WebGPU: command encoding"],
];

/**
 * The one-token steps' sampled time by kernel family (the launch that the sample is under). Each
 * step is one synchronous run of samples; the first, which creates the step's pipelines, is left out.
 */
function printStepFamilies(profile, byId) {
  const parent = new Map();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const families = new Map();
  let stepMs = 0;
  let steps = 0;
  let inStep = false;
  profile.samples.forEach((id, i) => {
    const stack = [];
    for (let at = id; at !== undefined; at = parent.get(at)) stack.push(byId.get(at).callFrame.functionName);
    const wasInStep = inStep;
    inStep = stack.some((f) => f.includes("Session>::step"));
    if (inStep && !wasInStep) steps += 1;
    if (!inStep || steps === 1) return;
    const ms = (profile.timeDeltas[i + 1] ?? 0) / 1e3;
    stepMs += ms;
    const frames = stack.reverse().join("\n");
    const webgpu = WEBGPU_CALLS.find(([pattern]) => pattern.test(frames));
    let family;
    if (/compile_kernel|create_pipeline/.test(frames)) family = "pipeline creation (first use)";
    else if (webgpu) family = webgpu[1];
    else {
      const hearthKernel = frames.match(/hearth_kernels\[\w+\]::\w+::(\w+)_kernel::launch/);
      const burnKernel = frames.match(/burn_cubecl\[\w+\]::kernel::(\w+)/);
      family = hearthKernel ? `launch: ${hearthKernel[1]}` : burnKernel ? `launch: Burn ${burnKernel[1]}` : "model code (no launch)";
    }
    families.set(family, (families.get(family) ?? 0) + ms);
  });
  if (steps < 2) return;
  const later = steps - 1;
  console.log(`\nThe one-token steps after the first (${later}; ${stepMs.toFixed(0)} ms sampled): WebGPU calls, then the rest by the kernel launching:\n`);
  console.log("| family | ms per token | share |");
  console.log("|---|---|---|");
  for (const [family, ms] of [...families].sort((a, b) => b[1] - a[1])) {
    console.log(`| ${family} | ${(ms / later).toFixed(2)} | ${((100 * ms) / stepMs).toFixed(1)} % |`);
  }
}

const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".wasm": "application/wasm" };

/** The model at /model.gguf, wllama under /wllama/, an empty cross-origin-isolated page at /. */
async function serve(wllama) {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
    // Cross-origin isolation lets wllama run threads; CORS lets the extension fetch the model.
    const headers = {
      "cross-origin-opener-policy": "same-origin",
      "cross-origin-embedder-policy": "require-corp",
      "cross-origin-resource-policy": "cross-origin",
      "access-control-allow-origin": "*",
    };
    const file = path === "/model.gguf" ? model : wllama && path.startsWith("/wllama/") ? join(wllama, path.slice("/wllama/".length)) : null;
    if (path === "/" || path === "/index.html") {
      res.writeHead(200, { ...headers, "content-type": TYPES[".html"] }).end("<!doctype html><title>bench</title>");
    } else if (file && existsSync(file)) {
      const size = statSync(file).size;
      const type = TYPES[extname(file)] ?? "application/octet-stream";
      // Byte ranges: a model over an ArrayBuffer's limit is read piece by piece, as the store does.
      const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? "");
      if (range) {
        const [start, end] = [Number(range[1]), Math.min(Number(range[2]), size - 1)];
        res.writeHead(206, { ...headers, "content-type": type, "content-length": end - start + 1, "content-range": `bytes ${start}-${end}/${size}` });
        createReadStream(file, { start, end }).pipe(res);
        return;
      }
      res.writeHead(200, { ...headers, "content-type": type, "content-length": size });
      if (req.method === "HEAD") res.end();
      else createReadStream(file).pipe(res);
    } else {
      res.writeHead(404, headers).end("not found");
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

async function hearth(chrome, server) {
  const page = await chrome.context.newPage();
  await page.goto(`${server.url}/`);
  await overlayHost(page);
  await clickLauncher(page);
  const state = await waitForEngine(page, ["ready", "failed"]);
  if (state !== "ready") throw new Error(`Hearth's engine did not start: ${state}`);
  await overlayHost(page);
  const adapter = await overlayData(page, "adapter");
  const loaded = await chrome.console.evaluate(
    "/offscreen.html",
    `(async () => {
      const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
      const url = ${JSON.stringify(`${server.url}/model.gguf`)};
      const template = ${JSON.stringify(RAW_TEMPLATE)};
      const size = ${statSync(model).size};
      const fetched = performance.now();
      if (size > 1 << 30) {
        // Larger than one ArrayBuffer may be: streamed in the pieces the loader asks for.
        const read = async (_path, offset, length) => {
          const range = { range: \`bytes=\${offset}-\${offset + length - 1}\` };
          return new Uint8Array(await (await fetch(url, { headers: range })).arrayBuffer());
        };
        const files = engine.ModelFiles.streamed_gguf("model", "model.gguf", size, read, template);
        const status = JSON.parse(await engine.startEngine("", "", files));
        return { status, fetchMs: 0 };
      }
      const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
      const fetchMs = performance.now() - fetched;
      const status = JSON.parse(await engine.startEngine("", "", engine.ModelFiles.gguf("model", bytes, template)));
      return { status, fetchMs };
    })()`,
    3_600_000,
  );
  let result = loaded;
  if (loaded.status.state === "ready") {
    // The sampling profiler covers the generation only (not the load): the offscreen document's
    // thread, wasm functions by name when the module keeps its name section.
    if (profile) {
      await chrome.console.send("/offscreen.html", "Profiler.enable");
      await chrome.console.send("/offscreen.html", "Profiler.setSamplingInterval", { interval: 500 });
      await chrome.console.send("/offscreen.html", "Profiler.start");
    }
    const generated = await chrome.console.evaluate(
      "/offscreen.html",
      `(async () => {
        const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
        const events = [];
        const request = { request_id: 1, prompt: ${JSON.stringify(PROMPT)}, max_tokens: ${tokens} };
        await engine.generate(JSON.stringify(request), (json) => events.push(JSON.parse(json)));
        return events.at(-1);
      })()`,
      3_600_000,
    );
    if (profile) {
      const stopped = await chrome.console.send("/offscreen.html", "Profiler.stop");
      if (!stopped?.profile) throw new Error(`the profiler returned nothing: ${JSON.stringify(stopped)}`);
      writeFileSync(profile, JSON.stringify(stopped.profile));
      printProfile(stopped.profile);
    }
    result = { ...loaded, done: generated };
    if (speculative) {
      const costs = await chrome.console.evaluate(
        "/offscreen.html",
        `(async () => {
          const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
          return JSON.parse(await engine.measureVerification(${JSON.stringify(JSON.stringify(speculative))}, 5));
        })()`,
        3_600_000,
      );
      if (costs.error) throw new Error(`the verification could not be measured: ${costs.error}`);
      result.verification = costs;
    }
  }
  await page.close();
  if (result.status.state !== "ready") throw new Error(`Hearth could not load the model: ${JSON.stringify(result.status)}`);
  if (result.done?.event !== "done") throw new Error(`Hearth's generation failed: ${JSON.stringify(result.done)}`);
  return { adapter, load_ms: result.status.model.load_ms, stats: result.done.stats, text: result.done.text ?? "", verification: result.verification };
}

async function wllama(chrome, server, gpuLayers) {
  const page = await chrome.context.newPage();
  await page.goto(`${server.url}/`);
  return page.evaluate(
    async ({ url, tokens, prompt, gpuLayers }) => {
      const { Wllama } = await import("/wllama/index.js");
      const w = new Wllama({ default: "/wllama/wasm/wllama.wasm" });
      const started = performance.now();
      await w.loadModelFromUrl(url, { n_ctx: 512, n_threads: navigator.hardwareConcurrency, n_gpu_layers: gpuLayers });
      const loadMs = performance.now() - started;
      const r = await w.createCompletion({ prompt, max_tokens: tokens, temperature: 0 });
      await w.exit();
      return { loadMs, timings: r.timings, text: r.choices[0].text, isolated: crossOriginIsolated, threads: navigator.hardwareConcurrency };
    },
    { url: `${server.url}/model.gguf`, tokens, prompt: PROMPT, gpuLayers },
  ).finally(() => page.close());
}

const server = await serve(hearthOnly ? null : wllamaDir());
const chrome = await launch();
try {
  const ours = await hearth(chrome, server);
  const skipped = { error: "left out (--hearth-only)" };
  const cpu = hearthOnly ? skipped : await wllama(chrome, server, 0);
  const gpu = hearthOnly ? skipped : await wllama(chrome, server, 999).catch((e) => ({ error: String(e).split("\n")[0] }));
  const name = model.split("/").pop();
  const ourDecode = ours.stats.decode_tokens_per_s;
  console.log(`# Browser decode, ${name}, ${tokens} tokens, headless Chromium (${ours.adapter})\n`);
  console.log("| engine | load | prefill tokens/s | decode tokens/s | Hearth ÷ this |");
  console.log("|---|---|---|---|---|");
  console.log(`| Hearth (wasm + WebGPU) | ${(ours.load_ms / 1e3).toFixed(1)} s | ${ours.stats.prefill_tokens_per_s.toFixed(2)} | ${ourDecode.toFixed(2)} | 1 |`);
  for (const [label, run] of [[`wllama ${WLLAMA_VERSION}, wasm CPU${hearthOnly ? "" : ` (${cpu.threads} threads${cpu.isolated ? "" : ", not isolated: 1 thread"})`}`, cpu], [`wllama ${WLLAMA_VERSION}, WebGPU`, gpu]]) {
    if (run.error || !run.timings) {
      console.log(`| ${label} | ${run === skipped ? run.error : `failed: ${run.error ?? "no timings"}`} | | | |`);
      continue;
    }
    const t = run.timings;
    console.log(`| ${label} | ${(run.loadMs / 1e3).toFixed(1)} s | ${t.prompt_per_second.toFixed(2)} | ${t.predicted_per_second.toFixed(2)} | ${(ourDecode / t.predicted_per_second).toFixed(3)} |`);
  }
  console.log(`\nHearth's host time per decoded token (the offscreen document's thread building the step and its sampling, GPU waits excluded): ${ours.stats.decode_host_ms_per_token.toFixed(2)} ms (median of the tokens after the first; the first, which also creates the one-token step's pipelines: ${ours.stats.first_decode_host_ms.toFixed(2)} ms).`);
  if (ours.verification) {
    console.log("\nSpeculative decoding's cost in this browser (median of 5 after a warm-up; random weights: the costs, not the acceptance):\n");
    console.log("| k | verify k+1 tokens, ms | one decoded token, ms | ratio |");
    console.log("|---|---|---|---|");
    for (const c of ours.verification) console.log(`| ${c.k} | ${c.verify_ms.toFixed(1)} | ${c.token_ms.toFixed(1)} | ${(c.verify_ms / c.token_ms).toFixed(2)} |`);
  }
  console.log(`\nHearth's text: ${JSON.stringify(ours.text)}`);
  if (!hearthOnly) console.log(`wllama's text (CPU): ${JSON.stringify(cpu.text)}`);
} finally {
  await chrome.close();
  await server.close();
}
