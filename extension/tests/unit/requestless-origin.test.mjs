// The origin a navigation without a request belongs to (src/worker/fence.ts `documentOrigin`), by
// which the fence judges it (docs/threat-model.md row 22): a blob: or filesystem: address carries
// its origin; anything else (about:blank, data:) is asked of the committed document. No browser:
// `chrome.scripting` is a stand-in that answers as Chromium would.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { test } from "node:test";
import { build } from "esbuild";

const ROOT = resolve(import.meta.dirname, "../..");

async function load(entry) {
  const out = await build({ absWorkingDir: ROOT, entryPoints: [entry], bundle: true, format: "esm", platform: "neutral", write: false, logLevel: "warning" });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

/** What the stand-in's injected function returns, and the targets it was asked for. */
let answer;
const asked = [];
globalThis.chrome = {
  scripting: {
    executeScript: async ({ target }) => {
      asked.push(target);
      if (answer instanceof Error) throw answer;
      return [{ result: answer }];
    },
  },
};
const { documentOrigin } = await load("src/worker/fence.ts");

test("blob: and filesystem: addresses belong to the origin inside them, without asking the document", async () => {
  answer = "http://never.asked";
  asked.length = 0;
  assert.equal(await documentOrigin("blob:https://other.example/4a1c7e52-0000-4000-8000-000000000000", 1, "D"), "https://other.example");
  assert.equal(await documentOrigin("blob:http://localhost:8080/uuid", 1, "D"), "http://localhost:8080");
  assert.equal(await documentOrigin("filesystem:http://127.0.0.1:9000/temporary/page.html", 1, "D"), "http://127.0.0.1:9000");
  assert.deepEqual(asked, []);
});

test("about:blank, data: and a blob: of no web origin are asked of exactly the committed document", async () => {
  asked.length = 0;
  answer = "http://localhost:8080";
  assert.equal(await documentOrigin("about:blank", 7, "DOC-1"), "http://localhost:8080");
  assert.deepEqual(asked.at(-1), { tabId: 7, documentIds: ["DOC-1"] });
  answer = "null";
  assert.equal(await documentOrigin("data:text/html,hi", 7, "DOC-2"), "null", "an opaque origin is reported as such");
  assert.equal(await documentOrigin("blob:null/uuid", 7, undefined), "null");
  assert.deepEqual(asked.at(-1), { tabId: 7, frameIds: [0] }, "without a document id: the top frame");
});

test("a document that cannot be asked has no origin (the fence counts it off the task's sites)", async () => {
  answer = new Error("Cannot access contents of the page");
  assert.equal(await documentOrigin("about:blank", 7, "DOC-3"), null);
  answer = 42;
  assert.equal(await documentOrigin("about:blank", 7, "DOC-4"), null);
});
