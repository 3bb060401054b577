// A confirmation card's destination (docs/threat-model.md, "Cards say where"): the engine's
// `ActionTarget` carries the site by the one site rule, the whole address, and warnings for the
// parts of the address that could mislead; the conversation keeps them only in their known shapes.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { test } from "node:test";
import { build } from "esbuild";

const ROOT = resolve(import.meta.dirname, "../..");

async function load(entry) {
  const out = await build({ absWorkingDir: ROOT, entryPoints: [entry], bundle: true, format: "esm", platform: "neutral", write: false, logLevel: "warning" });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

const tr = await load("src/chat/transcript.ts");

test("a target's address and its warnings are kept in their known shapes, anything else dropped", () => {
  const target = {
    description: "the address http://shop.test@evil.example/login",
    index: null,
    destination: "http://evil.example",
    address: "http://shop.test@evil.example/login",
    address_warnings: [{ kind: "user_info", text: "shop.test" }, { kind: "international_name", unicode: "аpple.com" }, { kind: "backslash" }],
    text: null,
  };
  assert.deepEqual(tr.confirmTarget(target).target, target);
  const junk = tr.confirmTarget({ ...target, address: 7, address_warnings: [{ kind: "user_info" }, { kind: "other", text: "x" }, "user_info", null] }).target;
  assert.equal(junk.address, undefined);
  assert.equal(junk.address_warnings, undefined);
  assert.equal(tr.confirmTarget({ ...target, address_warnings: "backslash" }).target.address_warnings, undefined);
  // An older engine's target (no address, no warnings) stays as it was.
  assert.deepEqual(tr.confirmTarget({ description: "the link “Help”", index: 2, destination: "https://shop.test", text: null }).target, {
    description: "the link “Help”",
    index: 2,
    destination: "https://shop.test",
    text: null,
  });
});
