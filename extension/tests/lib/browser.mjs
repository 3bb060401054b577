// Launches Debian's Chromium (or $HEARTH_CHROME, or $CHROMIUM) with the built extension and connects Playwright over CDP.
// Shared by the e2e tests and `cargo xtask run`.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";
import { ConsoleWatcher } from "./console-watcher.mjs";

/** The unpacked extension: dist/extension, or $HEARTH_EXTENSION_DIR (a build elsewhere). */
export const EXTENSION_DIR = resolve(process.env.HEARTH_EXTENSION_DIR ?? resolve(import.meta.dirname, "../../../dist/extension"));

function chromiumPath() {
  const candidates = [process.env.HEARTH_CHROME, process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"];
  const found = candidates.find((p) => p && existsSync(p));
  if (!found) throw new Error("Chromium not found: install it (Debian: `sudo apt-get install chromium`) or set HEARTH_CHROME=/path/to/chrome");
  return found;
}

/**
 * @param {{ headless?: boolean, webgpu?: boolean, extensionDir?: string, args?: string[], env?: Record<string, string>, profile?: string }} options
 *   `args` are extra Chromium flags; `env` extra environment variables (e.g. LANGUAGE for the UI
 *   language); `profile` a user-data folder to use and keep (a second launch on it is a browser
 *   restart), instead of a fresh temporary one removed on close.
 */
export async function launch({ headless = true, webgpu = true, extensionDir = EXTENSION_DIR, args: extraArgs = [], env, profile: keptProfile } = {}) {
  if (!existsSync(join(extensionDir, "manifest.json"))) {
    throw new Error(`${extensionDir} has no manifest.json: run \`cargo xtask build\` first`);
  }
  const profile = keptProfile ?? mkdtempSync(join(tmpdir(), "hearth-profile-"));
  const args = [
    `--user-data-dir=${profile}`,
    "--remote-debugging-port=0",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-gpu-sandbox",
    `--disable-extensions-except=${extensionDir}`,
    `--load-extension=${extensionDir}`,
    // WebMCP (`document.modelContext`): pages' own tools, which Hearth offers to the model.
    "--enable-features=WebMCP",
  ];
  if (process.getuid?.() === 0) args.push("--no-sandbox");
  if (headless) args.push("--headless=new");
  // The one flag WebGPU needs on Linux; leaving it out is how the tests get a browser without WebGPU.
  if (webgpu) args.push("--enable-unsafe-webgpu", "--enable-dawn-features=disable_robustness");
  // The first tab stays on about:blank: a tab still loading its first page when Playwright
  // attaches can leave connectOverCDP waiting forever for a navigation it missed (2 hangs in 55
  // launches on a page URL, none in 40 on about:blank). Callers navigate once connected.
  args.push(...extraArgs, "about:blank");

  const child = spawn(chromiumPath(), args, { stdio: ["ignore", "ignore", "pipe"], env: env ? { ...process.env, ...env } : process.env });
  const wsEndpoint = await new Promise((resolveEndpoint, reject) => {
    let stderr = "";
    const timer = setTimeout(() => reject(new Error(`Chromium did not start in 30 s:\n${stderr}`)), 30_000);
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
      const match = /DevTools listening on (ws:\/\/\S+)/.exec(stderr);
      if (match) {
        clearTimeout(timer);
        resolveEndpoint(match[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`Chromium exited (${code}):\n${stderr}`)));
  });

  const watcher = await ConsoleWatcher.connect(wsEndpoint);
  // The worker registers the content script when installed; pages opened before that get none.
  // (Right after start the worker's global may not have its `chrome` bindings yet: retry.)
  for (let attempt = 0; ; attempt++) {
    try {
      await watcher.evaluate(
        "/service-worker.js",
        `(async () => {
          while ((await chrome.scripting.getRegisteredContentScripts()).length === 0) await new Promise((r) => setTimeout(r, 50));
        })()`,
      );
      break;
    } catch (error) {
      if (attempt >= 50) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  // Playwright's default of 30 s was once too short for a 2-core machine busy with a compile.
  const browser = await chromium.connectOverCDP(wsEndpoint, { timeout: 90_000 });
  const context = browser.contexts()[0];
  const exited = new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
  const close = async () => {
    await browser.close().catch(() => {});
    // Browser.close shuts Chromium down with its helper processes; kill it if it hangs.
    await watcher.closeBrowser();
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
    if (keptProfile) return;
    // Chromium's helper processes may still be writing the profile for a moment.
    try {
      rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
    } catch (error) {
      console.warn(`could not remove ${profile}: ${error}`);
    }
  };
  return { browser, context, console: watcher, close, exited };
}

/**
 * Polls `check` every 100 ms until it returns something truthy, and returns that. A check that
 * throws (a page mid-navigation, a worker waking up) counts as "not yet"; after `timeout` ms the
 * wait fails, naming `what` and the check's last error.
 */
export async function until(check, what, timeout = 20_000) {
  const deadline = Date.now() + timeout;
  let lastError = null;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${lastError ? ` (last error: ${lastError.message ?? lastError})` : ""}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
