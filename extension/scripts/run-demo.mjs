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

const chrome = await launch({ headless, url: demoUrl });
if (!headless) {
  // A person's window: the tab that opened with the browser predates the content script's
  // registration (launch waits for it), so load it again to get the overlay.
  const first = chrome.context.pages().find((p) => p.url() === demoUrl);
  await first?.reload();
}
console.log(`Hearth demo on ${demoUrl}${headless ? "" : " — close the browser window to stop"}`);
if (headless) {
  try {
    const page = chrome.context.pages().find((p) => p.url() === demoUrl) ?? (await chrome.context.newPage());
    // The demo tab opened with the browser, before the worker registered the content script:
    // load it again now that `launch` has waited for the registration.
    await page.goto(demoUrl);
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
