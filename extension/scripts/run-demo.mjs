// `cargo xtask run`: serves the demo page on 127.0.0.1 and opens Chromium with the built extension.
//   node scripts/run-demo.mjs            a window for a person; returns when Chromium is closed
//   node scripts/run-demo.mjs --headless opens the overlay, prints the engine's state, saves a screenshot

import { resolve } from "node:path";
import { launch } from "../tests/lib/browser.mjs";
import { serve } from "../tests/lib/server.mjs";
import { clickLauncher, overlayData, screenshot, waitForEngine } from "../tests/lib/overlay.mjs";

const headless = process.argv.includes("--headless");
const server = await serve(resolve(import.meta.dirname, "../demo"));
const demoUrl = `${server.url}/index.html`;

if (!headless && !process.env.DISPLAY && !process.env.WAYLAND_DISPLAY && process.platform === "linux") {
  console.error("No display: run `cargo xtask run --headless`, or start a desktop session (or Xvfb) first.");
  process.exit(1);
}

const chrome = await launch({ headless });
// The browser opens on about:blank; the demo loads once `launch` has seen the content script
// registered, so its tab gets the overlay.
const page = chrome.context.pages()[0] ?? (await chrome.context.newPage());
await page.goto(demoUrl);
console.log(`Hearth demo on ${demoUrl}${headless ? "" : " — close the browser window to stop"}`);
if (headless) {
  try {
    await clickLauncher(page);
    const state = await waitForEngine(page, ["ready", "failed"]);
    console.log(`engine: ${state}; adapter: ${await overlayData(page, "adapter")}; self-test: ${await overlayData(page, "self-test")}`);
    console.log(`screenshot: ${await screenshot(page, "demo")}`);
    if (chrome.console.errors.length) console.log("console errors:", chrome.console.errors);
    process.exitCode = state === "ready" ? 0 : 1;
  } finally {
    await chrome.close();
    await server.close();
  }
} else {
  await chrome.exited;
  await chrome.close();
  await server.close();
}
