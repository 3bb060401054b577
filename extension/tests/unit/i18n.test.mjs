// Both locales carry the same messages with the same placeholders, and every key the code, the
// options page and the manifest use exists. No browser needed: node --test tests/unit/

import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";

const ROOT = resolve(import.meta.dirname, "../..");
const load = (locale) => JSON.parse(readFileSync(join(ROOT, "static/_locales", locale, "messages.json"), "utf8"));
const en = load("en");
const zh = load("zh_CN");

function files(dir, ext) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path, ext) : path.endsWith(ext) ? [path] : [];
  });
}

/** Placeholder names a message uses ($NAME$), sorted. */
const placeholdersIn = (message) => [...new Set([...message.matchAll(/\$([A-Za-z0-9_]+)\$/g)].map((m) => m[1].toLowerCase()))].sort();

test("en and zh_CN have the same keys", () => {
  assert.deepEqual(Object.keys(zh).sort(), Object.keys(en).sort());
});

test("every message has text and declares exactly the placeholders it uses", () => {
  for (const [locale, messages] of [["en", en], ["zh_CN", zh]]) {
    for (const [key, { message, placeholders = {} }] of Object.entries(messages)) {
      assert.ok(typeof message === "string" && message.trim(), `${locale}/${key} is empty`);
      assert.deepEqual(placeholdersIn(message), Object.keys(placeholders).map((p) => p.toLowerCase()).sort(), `${locale}/${key}`);
    }
  }
  for (const key of Object.keys(en)) {
    assert.deepEqual(placeholdersIn(zh[key].message), placeholdersIn(en[key].message), `zh_CN/${key} placeholders differ from en`);
    assert.deepEqual(zh[key].placeholders ?? {}, en[key].placeholders ?? {}, `zh_CN/${key} placeholder contents differ from en`);
  }
});

test("zh_CN is translated", () => {
  const same = Object.keys(en).filter((key) => en[key].message === zh[key].message && /[a-z]{4,}/.test(en[key].message));
  // Names and technical terms stay as they are.
  assert.deepEqual(same.filter((key) => !["extensionName", "panelTitle", "factShaderF16"].includes(key)), []);
});

test("every t(\"key\") in src/ and every key of the options page and manifest exists", () => {
  const used = new Map();
  const note = (key, where) => used.set(key, [...(used.get(key) ?? []), where]);
  for (const file of files(join(ROOT, "src"), ".ts")) {
    const source = readFileSync(file, "utf8");
    for (const m of source.matchAll(/\bt\(\s*"([^"]+)"/g)) note(m[1], file);
    for (const m of source.matchAll(/\bgetMessage\(\s*"([^"]+)"/g)) note(m[1], file);
  }
  for (const file of files(join(ROOT, "static"), ".html")) {
    for (const m of readFileSync(file, "utf8").matchAll(/data-i18n="([^"]+)"/g)) note(m[1], file);
  }
  for (const m of readFileSync(join(ROOT, "static/manifest.json"), "utf8").matchAll(/__MSG_(\w+)__/g)) note(m[1], "manifest.json");
  assert.ok(used.size > 50, `only ${used.size} keys found: is the pattern still right?`);
  const missing = [...used].filter(([key]) => !(key in en)).map(([key, where]) => `${key} (${where.join(", ")})`);
  assert.deepEqual(missing, []);
});

test("every failure key the engine, the store and the worker use has a message and a fix", () => {
  const sources = [...files(join(ROOT, "src"), ".ts"), ...files(join(ROOT, "../crates"), ".rs")];
  const keys = new Set();
  for (const file of sources) {
    for (const m of readFileSync(file, "utf8").matchAll(/"(failure[A-Z]\w*)"/g)) keys.add(m[1]);
  }
  assert.ok(keys.size >= 20, `only ${keys.size} failure keys found: is the pattern still right?`);
  const missing = [...keys].filter((key) => !(key in en) || !(`${key}Fix` in en));
  assert.deepEqual(missing, [], "failure keys without a message or a fix in the locales");
});
