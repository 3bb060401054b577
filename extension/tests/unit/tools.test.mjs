// The tools the model is offered (TOOL_NAMES) and the extension's executors (PAGE_TOOLS,
// WORKER_TOOLS, LOOP_TOOLS), all generated from the one record per tool in
// crates/agent/src/tools.rs, are the same set: no tool without an executor, no executor without a
// tool (the executors' tables are typed by them: the compiler refuses a missing one). Each tool's
// time limit comes from the same record. Bundled with esbuild on the fly.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { test } from "node:test";
import { build } from "esbuild";

const ROOT = resolve(import.meta.dirname, "../..");

async function load(entry) {
  const out = await build({ absWorkingDir: ROOT, entryPoints: [entry], bundle: true, format: "esm", platform: "neutral", write: false, logLevel: "warning" });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

test("every offered tool has exactly one executor, and every executor an offered tool", async () => {
  const { TOOL_NAMES } = await load("src/generated/protocol.ts");
  const { PAGE_TOOLS, WORKER_TOOLS, LOOP_TOOLS } = await load("src/shared/tool-executors.ts");
  const executors = [...PAGE_TOOLS, ...WORKER_TOOLS, ...LOOP_TOOLS];
  assert.equal(new Set(executors).size, executors.length, "a tool has two executors");
  assert.deepEqual([...executors].sort(), [...TOOL_NAMES].sort());
});

test("the vision tools are offered tools with executors (the engine drops them for a text-only model)", async () => {
  const { TOOL_NAMES, VISION_TOOLS } = await load("src/generated/protocol.ts");
  assert.deepEqual([...VISION_TOOLS].sort(), ["click_at", "screenshot"]);
  for (const tool of VISION_TOOLS) assert.ok(TOOL_NAMES.includes(tool), tool);
});

test("each tool's time limit is its record's: its own wait, a page load, or the standard 20 s", async () => {
  const { timeLimitMs } = await load("src/shared/tool-executors.ts");
  assert.equal(timeLimitMs("wait_for", { timeout_seconds: 30 }), 40_000);
  assert.equal(timeLimitMs("wait_for", {}), 20_000);
  assert.equal(timeLimitMs("navigate", { url: "https://example.com" }), 45_000);
  assert.equal(timeLimitMs("read_link", { url: "https://example.com" }), 45_000);
  assert.equal(timeLimitMs("click", { index: 3 }), 20_000);
});
