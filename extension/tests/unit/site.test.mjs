// The worker's site rule (src/worker/site.ts) is the agent's (crates/agent/src/policy/site.rs): both
// are tested against one table, crates/agent/src/policy/site-cases.json (the Rust side in
// `the_shared_site_table`). Bundled with esbuild on the fly, tldts included.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";
import { build } from "esbuild";

const ROOT = resolve(import.meta.dirname, "../..");
const CASES = JSON.parse(readFileSync(resolve(ROOT, "../crates/agent/src/policy/site-cases.json"), "utf8"));

async function load(entry) {
  const out = await build({ absWorkingDir: ROOT, entryPoints: [entry], bundle: true, format: "esm", platform: "neutral", write: false, logLevel: "warning" });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

const { siteKey, siteText, approvedSite, onSite, siteCondition } = await load("src/worker/site.ts");

test("the site of every URL in the shared table is the agent's", () => {
  assert.ok(CASES.length >= 20);
  for (const { url, site } of CASES) {
    const key = siteKey(url);
    assert.equal(key === null ? null : siteText(key), site, url);
  }
});

test("the host a card names (the agent's host_for_site) reads back as the same site", () => {
  for (const { url, site, host } of CASES) {
    if (host === null) continue;
    const scheme = new URL(url).protocol.slice(0, -1);
    assert.equal(siteText(approvedSite(host, scheme)), site, `${host} (${url})`);
  }
  assert.equal(approvedSite("javascript:alert(1)", "https"), null, "a form action that is not a host names no site");
});

test("another port of a local server is another site, everywhere", () => {
  const approved = approvedSite("127.0.0.1:8080", "http");
  assert.ok(onSite("http://127.0.0.1:8080/x", approved));
  assert.ok(!onSite("http://127.0.0.1:9000/x", approved), "another port");
  assert.ok(!onSite("https://127.0.0.1:8080/x", approved), "another scheme");
  const condition = siteCondition(approved);
  const matches = (url) => new RegExp(condition.regexFilter).test(url);
  assert.ok(matches("http://127.0.0.1:8080/a"));
  assert.ok(!matches("http://127.0.0.1:9000/a"));
  assert.ok(!matches("http://127.0.0.1:80801/a"));
  const localhost = siteCondition(approvedSite("localhost:80", "http"));
  assert.ok(new RegExp(localhost.regexFilter).test("http://localhost/a"), "the default port is the same as none");
  assert.ok(!new RegExp(localhost.regexFilter).test("http://localhost:81/a"));
  assert.ok(new RegExp(siteCondition(siteKey("http://[::1]:5000/")).regexFilter).test("http://[::1]:5000/"));
});

test("a domain's site covers its subdomains and an https upgrade, not a look-alike", () => {
  const site = siteKey("http://www.example.com/");
  assert.ok(onSite("https://shop.example.com/", site));
  assert.ok(!onSite("https://example.com.evil.test/", site));
  assert.ok(!onSite("https://alice.github.io/", siteKey("https://mallory.github.io/")));
  assert.deepEqual(siteCondition(siteKey("https://a.example.com/")), { requestDomains: ["example.com"], urlFilter: "|https://" });
});
