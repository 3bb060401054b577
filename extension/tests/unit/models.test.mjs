// The model manifests (models/README.md): the test model's is what models/pin.mjs computes from
// the fixture, and no manifest that Hearth would install lacks a hash. No browser needed.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { contentRevision, pin } from "../../../models/pin.mjs";

const ROOT = resolve(import.meta.dirname, "../../..");
const read = (path) => JSON.parse(readFileSync(join(ROOT, path), "utf8"));

test("models/test/tiny-chat.json is pinned to the fixture's bytes (models/pin.mjs)", async () => {
  const committed = read("models/test/tiny-chat.json");
  const pinned = await pin(join(ROOT, "crates/model/fixtures/tiny-chat"), committed, { contentRevision: true });
  assert.deepEqual(pinned, committed, "run: node models/pin.mjs crates/model/fixtures/tiny-chat models/test/tiny-chat.json --content-revision");
  assert.equal(committed.revision, contentRevision(committed.files));
});

test("every manifest has exactly the schema's fields", () => {
  const paths = [
    ...readdirSync(join(ROOT, "models")).filter((n) => n.endsWith(".json")).map((n) => `models/${n}`),
    ...readdirSync(join(ROOT, "models/test")).map((n) => `models/test/${n}`),
  ];
  assert.ok(paths.length >= 3);
  for (const path of paths) {
    const m = read(path);
    assert.deepEqual(Object.keys(m).sort(), ["files", "format", "id", "name", "repo", "revision"], path);
    assert.equal(`${m.id}.json`, path.split("/").pop(), path);
    for (const f of m.files) assert.deepEqual(Object.keys(f).sort(), ["path", "sha256", "size"], `${path}: ${f.path}`);
  }
});

test("pin refuses a folder that lacks a listed file", async () => {
  const manifest = { ...read("models/test/tiny-chat.json"), files: [{ path: "missing.bin", size: null, sha256: null }] };
  await assert.rejects(pin(join(ROOT, "crates/model/fixtures/tiny-chat"), manifest, { contentRevision: true }), /missing\.bin is listed/);
});
