// Driving the overlay from a test. Its shadow root is closed, so tests click by coordinates and
// read the state the overlay mirrors onto its host element as data-* attributes.

import { mkdirSync } from "node:fs";
import { resolve } from "node:path";

export const ARTIFACTS = resolve(import.meta.dirname, "../../../artifacts/e2e");

/** Waits for the overlay to be injected and returns its host element's locator. */
export async function overlayHost(page) {
  const host = page.locator("hearth-overlay");
  await host.waitFor({ state: "attached", timeout: 15_000 });
  return host;
}

/** Clicks the launcher button like a person would (it fills the host element while closed). */
export async function clickLauncher(page) {
  const host = await overlayHost(page);
  const box = await host.boundingBox();
  if (!box) throw new Error("the overlay host has no box: is the launcher visible?");
  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
}

/** Waits until the engine state shown by the overlay is one of `states`; returns it. */
export async function waitForEngine(page, states, timeout = 180_000) {
  const handle = await page.waitForFunction(
    (wanted) => {
      const state = document.querySelector("hearth-overlay")?.dataset.engine;
      return wanted.includes(state) ? state : null;
    },
    states,
    { timeout, polling: 200 },
  );
  return handle.jsonValue();
}

export async function screenshot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = resolve(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path });
  return path;
}
