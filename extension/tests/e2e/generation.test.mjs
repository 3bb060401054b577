// The tiny test model (real formats, random weights) generates in the browser on WebGPU through the
// offscreen document, streams its tokens, and produces exactly the tokens the native CLI produces
// for the same model and prompt (greedy): drafting with its bundled assistant (speculative
// decoding, on by default) and without it. A tiny Gemma 3 GGUF (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 blocks)
// then runs through the packed path: GGUF parsed in wasm, tokenizer from its metadata, blocks
// repacked, the fused 4- and 8-bit kernels on WebGPU; its greedy ids are transformers'.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { resolve } from "node:path";
import { launch } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import { clickLauncher, overlayData, overlayHost, waitForEngine } from "../lib/overlay.mjs";

const MODEL_DIR = resolve(import.meta.dirname, "../../../crates/model/fixtures/tiny-chat");
const GGUF_DIR = resolve(import.meta.dirname, "../../../crates/model/fixtures/gemma3-gguf");
const PROMPT = "Say hello to the lantern shop.";
const MAX_TOKENS = 24;

/** Greedy ids from the native CLI (`hearth generate --print-ids`) on the CPU backend. */
function nativeGreedy() {
  const cli = process.env.HEARTH_CLI ?? resolve(import.meta.dirname, "../../../target/fast-build/hearth");
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
    await overlayHost(page);
    await clickLauncher(page);
    assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready");
    assert.match(await overlayData(page, "model"), /tiny-chat/);
    // Generation runs in the offscreen document's wasm module, called as the engine calls it.
    const generate = (drafting) =>
      chrome.console.evaluate(
        "/offscreen.html",
        `(async () => {
          const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
          const events = [];
          const request = { request_id: 7, prompt: ${JSON.stringify(PROMPT)}, max_tokens: ${MAX_TOKENS}, drafting: ${drafting} };
          await engine.generate(JSON.stringify(request), (json) => events.push(JSON.parse(json)));
          return events;
        })()`,
        540_000,
      );
    for (const drafting of [true, false]) {
      const events = await generate(drafting);
      const done = events.at(-1);
      assert.equal(done.event, "done", `generation failed: ${JSON.stringify(done)}`);
      const streamed = events.filter((e) => e.event === "token").map((e) => e.token_id);
      assert.deepEqual(streamed, done.token_ids, "every token was streamed");
      console.log(`browser, drafting ${drafting}: ${done.token_ids.length} tokens, ${JSON.stringify(done.stats)}`);
      assert.deepEqual(done.token_ids, native, `browser tokens equal the native CLI's (drafting ${drafting})`);
      if (drafting) assert.ok(done.stats.drafted_tokens > 0, "the bundled assistant drafted");
      else assert.equal(done.stats.drafted_tokens, 0, "nothing drafted with drafting off");
    }
    assert.deepEqual(chrome.console.errors, []);
  } finally {
    await chrome.close();
  }
});

test("a GGUF model runs packed in the browser and gives transformers' greedy ids", { timeout: 600_000 }, async () => {
  const expected = JSON.parse(readFileSync(resolve(GGUF_DIR, "expected.json"), "utf8"));
  const prompt = expected.tokenizer[0].text;
  const gguf = readFileSync(resolve(GGUF_DIR, "model.gguf")).toString("base64");
  const chrome = await launch();
  try {
    const page = await chrome.context.newPage();
    await page.goto(`${server.url}/smoke.html`);
    await clickLauncher(page);
    assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready");
    const { status, events } = await chrome.console.evaluate(
      "/offscreen.html",
      `(async () => {
        const engine = await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"));
        const bytes = Uint8Array.from(atob(${JSON.stringify(gguf)}), (c) => c.charCodeAt(0));
        // The file has no chat template: the prompt goes in raw, after <bos>.
        const files = engine.ModelFiles.gguf("tiny-gguf", bytes, "{{ bos_token }}{{ messages[0]['content'] }}");
        const status = JSON.parse(await engine.startEngine("", "", files));
        const events = [];
        const request = { request_id: 9, prompt: ${JSON.stringify(prompt)}, max_tokens: ${expected.greedy.length} };
        await engine.generate(JSON.stringify(request), (json) => events.push(JSON.parse(json)));
        return { status, events };
      })()`,
      540_000,
    );
    assert.equal(status.state, "ready", JSON.stringify(status));
    assert.equal(status.model.architecture, "gemma3");
    // The engine sizes the KV cache for the model and adapter: a tiny model's fits the largest.
    assert.equal(status.model.context_tokens, 32768);
    assert.ok(status.model.memory.kv_cache_bytes > 0 && status.model.memory.kv_cache_bytes < 2 ** 30, JSON.stringify(status.model.memory));
    const done = events.at(-1);
    assert.equal(done.event, "done", `generation failed: ${JSON.stringify(done)}`);
    console.log(`browser (GGUF): ${JSON.stringify(done.stats)}`);
    assert.equal(done.stats.prompt_tokens, expected.tokens.length, "bos + the GGUF tokenizer's ids");
    assert.deepEqual(done.token_ids, expected.greedy, "greedy ids equal transformers'");
    // The host's share of a decoded token is measured (building the step cannot take no time,
    // and it is part of the token's whole time).
    const perToken = 1000 / done.stats.decode_tokens_per_s;
    assert.ok(done.stats.decode_host_ms_per_token > 0 && done.stats.decode_host_ms_per_token <= perToken, JSON.stringify(done.stats));
    assert.ok(done.stats.first_decode_host_ms > 0, JSON.stringify(done.stats));
    assert.deepEqual(chrome.console.errors, []);
  } finally {
    await chrome.close();
  }
});
