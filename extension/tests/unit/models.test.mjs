// The model manifests (models/README.md): the test model's is what models/pin.mjs computes from
// the fixture, and no manifest that Hearth would install lacks a hash. No browser needed.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { contentRevision, pin } from "../../../models/pin.mjs";

const ROOT = resolve(import.meta.dirname, "../../..");
const read = (path) => JSON.parse(readFileSync(join(ROOT, path), "utf8"));

for (const [id, fixture] of [["tiny-chat", "tiny-chat"], ["tiny-gguf", "gemma4-gguf"]]) {
  test(`models/test/${id}.json is pinned to the fixture's bytes (models/pin.mjs)`, async () => {
    const committed = read(`models/test/${id}.json`);
    const pinned = await pin(join(ROOT, `crates/model/fixtures/${fixture}`), committed, { contentRevision: true });
    assert.deepEqual(pinned, committed, `run: node models/pin.mjs crates/model/fixtures/${fixture} models/test/${id}.json --content-revision`);
    assert.equal(committed.revision, contentRevision(committed.files));
  });
}

test("the Gemma 4 defaults are the published GGUF files (../shared/reference/gemma4-published-files.md)", () => {
  const e2b = read("models/gemma-4-e2b-it.json");
  assert.equal(e2b.format, "gguf");
  assert.equal(e2b.revision, "675cff42a74c774d6cb76f76d8eacb49b48c9b93");
  assert.deepEqual(e2b.files, [{ path: "gemma-4-E2B_q4_0-it.gguf", size: 3349516256, sha256: "fa401b55b07ee70a54c6dae3903c783a6e65064312529ea57175cb5f8dec6634" }]);
  assert.equal(e2b.known_uploads[0].sha256, "3646b4c147cd235a44d91df1546d3b7d8e29b547dbe4e1f80856419aa455e6fd");
  const e4b = read("models/gemma-4-e4b-it.json");
  assert.equal(e4b.revision, "2714b5519c6c3516b1000e7c5e1eba998dfe1fe8");
  assert.deepEqual(e4b.files, [{ path: "gemma-4-E4B-it-Q4_K_M.gguf", size: 5335289824, sha256: "90ce98129eb3e8cc57e62433d500c97c624b1e3af1fcc85dd3b55ad7e0313e9f" }]);
  // Their vision towers, llama.cpp's projector files at the same revisions (vision and audio).
  assert.deepEqual(e2b.vision_files, [{ path: "gemma-4-E2B-it-mmproj.gguf", size: 986833664, sha256: "021059cce659fe7f9170d5599761d7bbaf644b798dab9503aca30dc43e6beb14" }]);
  assert.deepEqual(e4b.vision_files, [{ path: "mmproj-gemma-4-E4B-it-Q8_0.gguf", size: 559874528, sha256: "51d4b7fd825e4569f746b200fccc5332bf914e8ef7cbe447272ce4fec6df3db6" }]);
});

test("every manifest has exactly the schema's fields", () => {
  const paths = [
    ...readdirSync(join(ROOT, "models")).filter((n) => n.endsWith(".json")).map((n) => `models/${n}`),
    ...readdirSync(join(ROOT, "models/test")).map((n) => `models/test/${n}`),
  ];
  assert.ok(paths.length >= 3);
  for (const path of paths) {
    const m = read(path);
    const keys = Object.keys(m).filter((k) => k !== "known_uploads" && k !== "vision_files" && k !== "drafter").sort();
    assert.deepEqual(keys, ["files", "format", "id", "name", "repo", "revision"], path);
    assert.ok(m.revision && m.files.every((f) => f.size !== null && f.sha256 !== null), `${path}: no unpinned manifest ships`);
    for (const u of m.known_uploads ?? []) assert.deepEqual(Object.keys(u).sort(), ["note", "path", "revision", "sha256", "size"], `${path}: known upload`);
    assert.equal(`${m.id}.json`, path.split("/").pop(), path);
    for (const f of [...m.files, ...(m.vision_files ?? [])]) assert.deepEqual(Object.keys(f).sort(), ["path", "sha256", "size"], `${path}: ${f.path}`);
    if (m.drafter) {
      assert.deepEqual(Object.keys(m.drafter).sort(), ["config", "repo", "revision", "weights"], `${path}: drafter`);
      assert.deepEqual(Object.keys(m.drafter.weights).sort(), ["path", "sha256", "size"], `${path}: drafter weights`);
      assert.equal(m.drafter.config.model_type, "gemma4_assistant", `${path}: drafter config`);
    }
  }
});

test("the test model's assistant is its fixture, byte for byte", () => {
  const { drafter } = read("models/test/tiny-chat.json");
  const dir = join(ROOT, "crates/model/fixtures/tiny-chat-assistant");
  const weights = readFileSync(join(dir, "model.safetensors"));
  assert.equal(drafter.weights.size, weights.length);
  assert.equal(drafter.weights.sha256, createHash("sha256").update(weights).digest("hex"));
  assert.deepEqual(drafter.config, JSON.parse(readFileSync(join(dir, "config.json"), "utf8")));
});

test("pin refuses a folder that lacks a listed file", async () => {
  const manifest = { ...read("models/test/tiny-chat.json"), files: [{ path: "missing.bin", size: null, sha256: null }] };
  await assert.rejects(pin(join(ROOT, "crates/model/fixtures/tiny-chat"), manifest, { contentRevision: true }), /missing\.bin is listed/);
});
