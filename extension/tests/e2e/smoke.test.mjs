// The first path through the whole extension: service worker → offscreen document → Burn on the
// browser's WebGPU → service worker → overlay, in real headless Chromium.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { resolve } from "node:path";
import { launch } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import { clickLauncher, overlayData, overlayHost, screenshot, waitForData, waitForEngine } from "../lib/overlay.mjs";

/** softmax(A·B) over rows for the self-test's fixed data, computed here independently of Rust. */
function expectedSelfTest() {
  const [m, k, n] = [4, 8, 6];
  const a = Array.from({ length: m * k }, (_, i) => (i % 7) * 0.25 - 0.75);
  const b = Array.from({ length: k * n }, (_, i) => (i % 5) * 0.3 - 0.6);
  const out = [];
  for (let i = 0; i < m; i++) {
    const row = Array.from({ length: n }, (_, j) => {
      let sum = 0;
      for (let p = 0; p < k; p++) sum += a[i * k + p] * b[p * n + j];
      return sum;
    });
    const max = Math.max(...row);
    const exps = row.map((x) => Math.exp(x - max));
    const total = exps.reduce((s, x) => s + x, 0);
    out.push(...exps.map((e) => e / total));
  }
  return out;
}

let server;
before(async () => {
  server = await serve(resolve(import.meta.dirname, "../pages"));
});
after(() => server?.close());

test("Burn on WebGPU computes the self-test and the overlay shows it", { timeout: 240_000 }, async () => {
  const chrome = await launch();
  try {
    const page = await chrome.context.newPage();
    await page.goto(`${server.url}/smoke.html`);
    await overlayHost(page);
    assert.equal(await overlayData(page, "state"), "closed");
    // (The overlay's chat, Hearth's own page, is framed only once the person opens it.)
    assert.equal(await chrome.console.evaluate("/service-worker.js", "chrome.offscreen.hasDocument()"), false, "nothing runs on the GPU before the user opens Hearth");
    assert.ok(chrome.console.extensionId(), "the service worker is running");

    await clickLauncher(page);
    assert.equal(await waitForData(page, "state", "open"), "open");
    const state = await waitForEngine(page, ["ready", "failed"]);
    await screenshot(page, "smoke-overlay-ready");
    assert.equal(state, "ready", `engine failed: ${await overlayData(page, "failure")}`);

    assert.equal(await overlayData(page, "self-test"), "passed");
    const values = JSON.parse(await overlayData(page, "values"));
    const expected = expectedSelfTest();
    assert.equal(values.length, expected.length);
    const maxError = Math.max(...values.map((v, i) => Math.abs(v - expected[i])));
    console.log(`adapter: ${await overlayData(page, "adapter")}; max |GPU − JS reference| = ${maxError.toExponential(2)}`);
    console.log(`values read back from the overlay: ${values.map((v) => v.toFixed(5)).join(" ")}`);
    assert.ok(maxError < 1e-5, `GPU result differs from the reference by ${maxError}`);
    // The fused 4- and 8-bit dequantize-matmul kernels (the model's weights go through them) ran
    // on this adapter against a host reference.
    const fusedError = Number(await overlayData(page, "fused-error"));
    console.log(`fused kernels: max |GPU − host reference| = ${fusedError.toExponential(2)}`);
    assert.ok(fusedError < 1e-4, `fused kernels differ from the reference by ${fusedError}`);

    assert.equal(chrome.console.find("/offscreen.html").length, 1, "exactly one offscreen document");
    assert.deepEqual(chrome.console.errors, [], "no errors in any extension console or the page");
  } finally {
    await chrome.close();
  }
});

test("without WebGPU the overlay says so and what to do", { timeout: 120_000 }, async () => {
  const chrome = await launch({ webgpu: false });
  try {
    const page = await chrome.context.newPage();
    await page.goto(`${server.url}/smoke.html`);
    await overlayHost(page);
    await clickLauncher(page);
    assert.equal(await waitForEngine(page, ["ready", "failed"]), "failed");
    assert.equal(await overlayData(page, "failure"), "webgpu_unavailable");
    await screenshot(page, "smoke-overlay-no-webgpu");
    assert.deepEqual(chrome.console.errors, []);
  } finally {
    await chrome.close();
  }
});
