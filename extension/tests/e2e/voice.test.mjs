// Voice input end to end, in Chromium with a fake microphone playing a WAV this suite writes (a
// tone that swells and fades, like a voice). The microphone button asks the worker; the offscreen
// document records under the extension's own origin (the first press opens Hearth's own page that
// asks for the permission; the test then grants it to the extension's origin, as the user would
// in that page's prompt), resamples to 16 kHz and holds the clip; the spoken request reaches the
// engine as the test model's audio tower's soft tokens (the engine's own counts, through a test
// hook), and the scripted model acts on it: the page's lamp goes on. The page itself never gets
// the microphone. A recording stops itself at the longest clip the model hears (shortened by a
// test hook) and says so. A blocked microphone is reported and nothing hangs; voice input that is
// off, or a task running, refuse the button in words.

import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { clickInOverlay, overlayData, overlayEval, overlayText, queryOverlay, screenshot, waitForData } from "../lib/overlay.mjs";
import { ask, call, done, indexOf, openAgentPage, scriptedImagePrompts, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";
import { servePages } from "../lib/pages.mjs";
import { PANEL, sidePanel } from "../lib/panel.mjs";

/** A mono 16-bit WAV of `seconds` at `rate`: a 220 Hz tone under a 3 Hz swell. */
function toneWav(seconds, rate = 48_000) {
  const n = Math.round(seconds * rate);
  const data = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    const swell = 0.5 - 0.5 * Math.cos(2 * Math.PI * 3 * t);
    data.writeInt16LE(Math.round(12_000 * swell * Math.sin(2 * Math.PI * 220 * t)), i * 2);
  }
  const header = Buffer.alloc(44);
  header.write("RIFF", 0);
  header.writeUInt32LE(36 + data.length, 4);
  header.write("WAVEfmt ", 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write("data", 36);
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}

let pages;
let chrome;
let dir;
let origin;
before(async () => {
  pages = await servePages();
  dir = mkdtempSync(join(tmpdir(), "hearth-voice-"));
  const wav = join(dir, "request.wav");
  writeFileSync(wav, toneWav(2));
  chrome = await launch({ args: ["--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${wav}`] });
  origin = `chrome-extension://${chrome.console.extensionId()}`;
  // Voice input on before the engine first starts: it loads the audio tower.
  await chrome.console.evaluate("/service-worker.js", `chrome.storage.sync.set({ settings: { voice: true } })`);
});
after(async () => {
  await chrome?.close();
  await pages?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);
/** How many error cards the overlay shows. */
const errors = async (page) => (await queryOverlay(page, ".error-card")).length;
/** The text of the overlay's latest error card. */
const lastError = (page) => overlayEval(page, ".transcript", "function () { return [...this.querySelectorAll('.error-card')].pop()?.textContent ?? ''; }");
/** The seconds the overlay shows recorded (0 while it does not record). */
const recorded = async (page) => Number((await overlayData(page, "recording")) || 0);
/** The toolbar badge of the tab in front. */
const badge = () => inWorker(`chrome.tabs.query({ active: true, lastFocusedWindow: true }).then(([tab]) => chrome.action.getBadgeText({ tabId: tab.id }))`);

test("a spoken request reaches the model as audio soft tokens and the model acts on it; the page never gets the microphone", { timeout: 600_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/lamp.html`);

  // Hearth was never allowed the microphone: its own page asks (not the site's).
  const before = await errors(page);
  await clickInOverlay(page, "button.mic");
  const asking = await until(() => chrome.context.pages().find((p) => p.url().startsWith(`${origin}/microphone.html`)), "Hearth's microphone page");
  await until(async () => (await errors(page)) > before, "the note to allow the microphone");
  assert.match(await lastError(page), /allow it in the window that opened/);
  assert.equal(await overlayData(page, "recording"), "", "nothing records without the permission");
  await asking.close();
  // The user allows it in that page's prompt: the permission is the extension origin's.
  const cdp = await chrome.browser.newBrowserCDPSession();
  await cdp.send("Browser.grantPermissions", { origin, permissions: ["audioCapture"] });

  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf("Turn the lamp on")}`), done("The lamp is on.")]);
  // Click to start, watch the meter and the length, click to send.
  const errorsBefore = await errors(page);
  await clickInOverlay(page, "button.mic");
  await until(async () => (await recorded(page)) >= 1.2 || (await errors(page)) > errorsBefore, "1.2 s recorded", 30_000);
  assert.ok((await recorded(page)) >= 1.2, await lastError(page));
  assert.equal(await badge(), "REC", "the toolbar says the microphone records");
  // The meter moves with the sound.
  await until(async () => Number(await overlayEval(page, ".level", "function () { return this.getAttribute('aria-valuenow'); }")) > 0, "the level meter");
  assert.match(await overlayText(page, ".rec-length"), /of 30 s/);
  await clickInOverlay(page, "button.mic");
  const ended = await waitForTask(page, ["done", "failed", "stopped", "paused"], 120_000);
  assert.equal(ended, "done", await overlayText(page, ".transcript"));
  assert.equal(await page.locator("#lamp").textContent(), "on", "the model's click reached the page");
  assert.equal(await badge(), "", "the badge goes with the recording");

  // The transcript shows a voice message with its length and a play button.
  const message = await overlayText(page, ".voice-message");
  const seconds = Number(/([\d.]+)\s*s/.exec(message)?.[1]);
  assert.ok(seconds >= 1.2 && seconds <= 30, message);
  assert.equal((await queryOverlay(page, "button.voice-play")).length, 1);
  const errorsBeforePlay = await errors(page);
  await clickInOverlay(page, "button.voice-play");
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await errors(page), errorsBeforePlay, "the clip plays back (in the offscreen document)");
  await screenshot(page, "voice-message");

  // The engine heard it: one clip at the prompt's audio placeholder, n soft tokens for its length
  // (one per 40 ms), in every step of the task.
  const prompts = await scriptedPrompts(chrome);
  assert.equal(prompts[0].split("<|audio|>").length - 1, 1, "one clip in the prompt");
  const prepared = await scriptedImagePrompts(chrome);
  assert.equal(prepared.length, prompts.length, JSON.stringify(prepared));
  for (const p of prepared) {
    assert.equal(p.error, null, p.error);
    assert.equal(p.clip_tokens.length, 1);
    const expected = (seconds * 1000) / 40;
    assert.ok(Math.abs(p.clip_tokens[0] - expected) <= 3, `${p.clip_tokens[0]} soft tokens for ${seconds} s`);
    assert.equal(p.model_tokens, p.text_tokens + p.clip_tokens[0] + 1, "the placeholder became <|audio>, its soft tokens and <audio|>");
  }

  // The page asked nothing and was granted nothing.
  const state = await page.evaluate(() => navigator.permissions.query({ name: "microphone" }).then((s) => s.state));
  assert.notEqual(state, "granted", "the page has no microphone permission");
  await page.close();
});

test("Esc drops a recording; a running task refuses the microphone", { timeout: 300_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/lamp.html`);
  await clickInOverlay(page, "button.mic");
  await until(async () => (await recorded(page)) > 1, "a moment recorded", 30_000);
  await screenshot(page, "voice-recording");
  await page.keyboard.press("Escape");
  await waitForData(page, "recording", "", 10_000);
  assert.equal(await overlayData(page, "state"), "open", "Esc dropped the recording, not the overlay");
  assert.equal(await overlayData(page, "task"), "idle", "nothing was sent");
  assert.equal((await queryOverlay(page, ".voice-message")).length, 0);

  // A task waiting on the user: the microphone is refused in words, nothing records.
  await useScript(chrome, [call("ask_user", `question:${str("Which lamp?")},options:[${str("Desk")},${str("Floor")}]`)]);
  await ask(page, "Turn on a lamp.");
  await waitForTask(page, ["ask"], 60_000);
  const before = await errors(page);
  await clickInOverlay(page, "button.mic");
  await until(async () => (await errors(page)) > before, "the busy message");
  assert.match(await lastError(page), /A task is running/);
  assert.equal(await overlayData(page, "recording"), "");
  await page.close();
});

test("a recording stops itself at the longest clip the model hears, says so, and goes to the model", { timeout: 300_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/lamp.html`);
  // (The model hears 30 s; the test build's hook makes it 1.5 s here.)
  await chrome.console.evaluate("/offscreen.html", `(Object.assign(globalThis.hearthTestHooks ??= {}, { voiceMaxSeconds: 1.5 }), true)`);
  await useScript(chrome, [done("Heard you.")]);
  await clickInOverlay(page, "button.mic");
  assert.equal(await waitForTask(page, ["done", "failed"], 120_000), "done", await overlayText(page, ".transcript"));
  assert.match(await lastError(page), /stopped at 2 s, the longest the model hears/);
  assert.match(await overlayText(page, ".voice-message"), /1\.5 s/);
  assert.equal(await overlayData(page, "recording"), "");
  await chrome.console.evaluate("/offscreen.html", `(delete globalThis.hearthTestHooks.voiceMaxSeconds, true)`);
  await page.close();
});

test("the side panel's microphone: the same recording, the same task", { timeout: 300_000 }, async () => {
  const panel = sidePanel(chrome);
  const page = await openAgentPage(chrome, `${pages.url}/agent/lamp.html?panel`);
  const tab = await panel.tabIdOf(page);
  await clickInOverlay(page, ".to-side-panel");
  await until(async () => chrome.console.find(PANEL).length > 0, "the side panel's page");
  await panel.waitPanel("tab", String(tab));
  await panel.waitPanel("engine", "ready", 120_000);
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf("Turn the lamp on")}`), done("The lamp is on.")]);
  await panel.clickInPanel("button.mic");
  await until(async () => Number((await panel.panelState()).recording || 0) >= 1, "1 s recorded in the panel", 30_000);
  await panel.clickInPanel("button.mic");
  await panel.waitPanel("task", "done", 120_000);
  assert.equal(await page.locator("#lamp").textContent(), "on", "the panel's spoken request acted on the tab");
  assert.match(await panel.inChat(`return root.querySelector(".voice-message")?.textContent ?? ""`), /Voice message/);
  await panel.inPanel("(window.close(), true)").catch(() => {});
  await waitForData(page, "side-panel", "false");
  await page.close();
});

test("a blocked microphone is reported, and nothing hangs; voice input off says how to turn it on", { timeout: 300_000 }, async () => {
  const cdp = await chrome.browser.newBrowserCDPSession();
  await cdp.send("Browser.setPermission", { permission: { name: "microphone" }, setting: "denied", origin });
  const page = await openAgentPage(chrome, `${pages.url}/agent/lamp.html`);
  const before = await errors(page);
  await clickInOverlay(page, "button.mic");
  await until(async () => (await errors(page)) > before, "the blocked-microphone message");
  assert.match(await lastError(page), /microphone is blocked for Hearth/);
  assert.equal(await overlayData(page, "recording"), "");
  assert.equal(await overlayData(page, "task"), "idle");

  // Voice input off (the default): the button says how to turn it on.
  await inWorker(`chrome.storage.sync.set({ settings: { voice: false } })`);
  await clickInOverlay(page, "button.mic");
  await until(async () => /Voice input is off/.test(await lastError(page)), "the voice-off message");
  assert.equal(await overlayData(page, "recording"), "");
  await page.close();
});
