// Hearth's chat in Chrome's side panel (sidepanel.html), the real one: opened from the overlay's
// "Open in side panel" button (a person's click), found over CDP as its own target and driven
// there with real mouse input. The panel shows its window's active tab: it runs a task on that tab,
// follows a switch to another tab, and shows a consent card while the element it is about is
// outlined on the page (asserted in the page); approving or denying in the panel acts on the page.
// A site where Hearth is off gets a notice in the panel, and nothing else.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { servePages } from "../lib/pages.mjs";
import { ARTIFACTS, clickInOverlay, overlayEval, overlayHost, overlayState, waitForData } from "../lib/overlay.mjs";
import { call, done, pageText as text, indexOf, openAgentPage, str, useScript } from "../lib/agent.mjs";
import { PANEL, sidePanel } from "../lib/panel.mjs";

const WORKER = "/service-worker.js";

let pages;
let chrome;
/** Tab A: a note editor; tab B: a checkout whose "Place order" needs the user's consent. */
let pageA;
let pageB;
let tabA;
let tabB;

before(async () => {
  pages = await servePages();
  chrome = await launch();
  ({ inPanel, inChat, panelState, tabIdOf, waitPanel, clickInPanel, askInPanel } = sidePanel(chrome));
});
after(async () => {
  await chrome?.close();
  await pages?.close();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const inWorker = (expression) => chrome.console.evaluate(WORKER, expression);
let inPanel, inChat, panelState, tabIdOf, waitPanel, clickInPanel, askInPanel;

/**
 * The page and the panel beside it, as one picture in artifacts/e2e: the panel is no Playwright
 * page (CDP takes its picture), and the two are laid side by side in a page of another context.
 */
async function panelScreenshot(page, name) {
  const { data: panel } = await chrome.console.send(PANEL, "Page.captureScreenshot", { format: "png" });
  const tab = (await page.screenshot()).toString("base64");
  const context = await chrome.browser.newContext();
  try {
    const canvas = await context.newPage();
    await canvas.setContent(
      `<body style="margin:0"><div id="both" style="display:flex;align-items:flex-start;width:max-content">` +
        `<img src="data:image/png;base64,${tab}"><img style="border-left:1px solid #a8a29e" src="data:image/png;base64,${panel}"></div></body>`,
    );
    await canvas.waitForFunction(() => [...document.images].every((i) => i.complete && i.naturalWidth > 0));
    mkdirSync(ARTIFACTS, { recursive: true });
    await canvas.locator("#both").screenshot({ path: resolve(ARTIFACTS, `${name}.png`) });
  } finally {
    await context.close();
  }
}

/** The target outline's box on `page` (inside the closed shadow root), or null while hidden. */
const outlineBox = (page) =>
  overlayEval(page, ".target-outline", "function () { const r = this.getBoundingClientRect(); return this.hidden ? null : { x: r.x, y: r.y, width: r.width, height: r.height }; }");

test("the side panel opens from the overlay and shows the active tab's chat", { timeout: 180_000 }, async () => {
  pageA = await openAgentPage(chrome, `${pages.url}/agent/editor.html?panel-a`);
  tabA = await tabIdOf(pageA);
  pageB = await chrome.context.newPage();
  await pageB.goto(`${pages.url}/agent/checkout.html?panel-b`);
  await overlayHost(pageB);
  tabB = await tabIdOf(pageB);
  await pageA.bringToFront();
  await until(() => inWorker(`chrome.tabs.get(${tabA}).then((t) => t.active)`), "tab A to be active");

  // "Open in side panel", clicked like a person: Chrome opens its side panel with Hearth's page.
  await clickInOverlay(pageA, ".to-side-panel");
  await until(async () => chrome.console.find(PANEL).length > 0, "the side panel's page");
  // It is the real side panel: an extension page in no tab.
  assert.equal(await inPanel(`chrome.tabs.getCurrent().then((tab) => tab === undefined)`), true, "the panel page is not in a tab");
  await waitPanel("tab", String(tabA));
  await waitPanel("tabState", "ready");
  await waitPanel("engine", "ready", 120_000);
  // The overlay gave way: closed, its launcher hidden while the panel shows its tab.
  await waitForData(pageA, "side-panel", "true");
  assert.equal((await overlayState(pageA)).state, "closed");
});

test("the side panel runs a task on the active tab", { timeout: 90_000 }, async () => {
  await useScript(chrome, [call("snapshot"), call("type", `index:${indexOf('"Note"')},text:${str("Written from the side panel")}`), done("Written.")]);
  await askInPanel("Write 'Written from the side panel' in the note.");
  assert.equal(await waitPanel("task", ["done", "failed", "paused"], 60_000), "done");
  assert.equal(await text(pageA, "#result"), "Written from the side panel");
  assert.equal((await panelState()).answer, "Written.");
  // The conversation is the tab's: its overlay holds it too.
  assert.equal((await overlayState(pageA)).answer, "Written.");
});

test("the panel follows a tab switch; its consent card outlines the element on the page; deny and allow act there", { timeout: 150_000 }, async () => {
  await pageB.bringToFront();
  await waitPanel("tab", String(tabB));
  await waitPanel("tabState", "ready");
  // Tab B's conversation, which is empty: nothing of tab A's.
  await until(async () => (await panelState()).answer === undefined && (await panelState()).task === "idle", "tab B's (empty) chat in the panel");
  assert.equal(await inChat(`return root.querySelectorAll("[data-entry]").length`), 0);
  // Tab A's overlay is its chat again.
  await waitForData(pageA, "side-panel", "false");
  await waitForData(pageB, "side-panel", "true");

  await useScript(chrome, [
    call("snapshot"),
    call("click", `index:${indexOf('"Place order"')}`),
    done("You declined, so the order was not placed.", false),
    call("snapshot"),
    call("click", `index:${indexOf('"Place order"')}`),
    call("wait_for", `text:${str("Order placed")}`),
    done("Your order is placed."),
  ]);
  await askInPanel("Place the order.");
  await waitPanel("task", "confirm", 60_000);
  const callId = (await panelState()).pendingCall;
  assert.ok(callId, "the card waits on a call");
  const card = await inChat(`return root.querySelector('.card.confirm[data-call-id="${callId}"]')?.textContent ?? ""`);
  assert.match(card, /Place order/, `the card names the button: ${card}`);
  // On the page, the button the card is about is outlined (the overlay's outline; its panel stays closed).
  const button = await pageB.locator("button", { hasText: "Place order" }).boundingBox();
  const outline = await until(() => outlineBox(pageB), "the outline on tab B");
  assert.ok(
    outline.x < button.x && outline.y < button.y && outline.x + outline.width > button.x + button.width && outline.y + outline.height > button.y + button.height,
    `the outline ${JSON.stringify(outline)} surrounds the button ${JSON.stringify(button)}`,
  );
  assert.equal((await overlayState(pageB)).state, "closed", "the card is in the panel, not in the overlay");
  await panelScreenshot(pageB, "side-panel");

  // Away to tab A and back: the card is shown again, for the same call.
  await pageA.bringToFront();
  await waitPanel("tab", String(tabA));
  await until(async () => (await panelState()).answer === "Written.", "tab A's chat in the panel");
  await pageB.bringToFront();
  await waitPanel("tab", String(tabB));
  await waitPanel("pendingCall", callId);

  await clickInPanel(`.card.confirm[data-call-id="${callId}"] button[data-decision="deny"]`);
  assert.equal(await waitPanel("task", ["done", "failed", "paused"], 60_000), "done");
  assert.equal(await text(pageB, "#orders"), "0", "denied in the panel: nothing was ordered");
  assert.equal(await outlineBox(pageB), null, "the outline goes once the card is decided");

  await askInPanel("Place the order, I approve it this time.");
  await waitPanel("task", "confirm", 60_000);
  const second = (await panelState()).pendingCall;
  assert.notEqual(second, callId);
  await clickInPanel(`.card.confirm[data-call-id="${second}"] button[data-decision="allow_once"]`);
  assert.equal(await waitPanel("task", ["done", "failed", "paused"], 60_000), "done");
  assert.equal(await text(pageB, "#orders"), "1", "allowed in the panel: ordered exactly once");
});

test("a question answered in the panel, and Stop from the panel", { timeout: 120_000 }, async () => {
  await useScript(chrome, [
    call("ask_user", `question:${str("Gift wrap?")},options:[${str("Yes")},${str("No")}]`),
    done("No gift wrap, then."),
    call("snapshot"),
    call("wait_for", `text:${str("Never on this page")},timeout_seconds:30`),
    done("Gave up waiting."),
  ]);
  await askInPanel("Should it be gift wrapped?");
  await waitPanel("task", "ask", 60_000);
  const question = (await panelState()).pendingCall;
  await clickInPanel(`.card.ask[data-call-id="${question}"] button.option[data-option="No"]`);
  assert.equal(await waitPanel("task", ["done", "failed", "paused"], 60_000), "done");
  assert.equal((await panelState()).answer, "No gift wrap, then.");

  const cards = Number((await panelState()).cards);
  await askInPanel("Wait for it.");
  await waitPanel("task", "running", 30_000);
  // The wait_for is under way in the page: Stop in the panel ends it there.
  await until(async () => Number((await panelState()).cards) >= cards + 2, "the wait_for card");
  const clicked = Date.now();
  await clickInPanel("button.stop");
  // Stop reaches the tab at once: its wait_for (30 s) is cancelled and the task ends stopped (the
  // engine hears of the stop before the cancelled tool's reply, so it does not go on to `done`).
  const ended = await waitPanel("task", ["stopped", "done", "failed", "paused"], 10_000);
  assert.equal(ended, "stopped", `the task ended ${ended}`);
  assert.ok(Date.now() - clicked < 10_000, "the wait was cut short");
  // Its card: cut off (failed, or interrupted when the engine took the stop first), never "ok".
  const waitCard = await inChat(`return [...root.querySelectorAll('.card.tool[data-tool="wait_for"]')].pop()?.className ?? ""`);
  assert.match(waitCard, /\b(failed|interrupted)\b/, `the wait_for was stopped in the page: ${waitCard}`);
  assert.equal((await overlayState(pageB)).task, ended, "the tab's own conversation is the panel's");
});

test("the service worker stopped: the panel connects again and goes on", { timeout: 90_000 }, async () => {
  const cdp = await pageB.context().newCDPSession(pageB);
  await cdp.send("ServiceWorker.enable");
  await cdp.send("ServiceWorker.stopAllWorkers");
  await cdp.detach();
  await useScript(chrome, [call("snapshot"), done("Still here.")]);
  await askInPanel("Are you still there?");
  await until(async () => (await panelState()).answer === "Still here.", "the answer after the worker's restart", 60_000);
  assert.equal((await panelState()).tab, String(tabB));
  assert.equal((await overlayState(pageB)).answer, "Still here.");
});

test("the tab shown reloads: its new page's content script takes the panel up, with the conversation", { timeout: 150_000 }, async () => {
  const entries = await inChat(`return root.querySelectorAll("[data-entry]").length`);
  // The answer is stored before the page goes (a save waits 250 ms for more changes; the page's
  // leaving sends it at once too).
  await until(async () => (await inWorker(`chrome.storage.session.get("transcript:${tabB}").then((s) => s["transcript:${tabB}"]?.answer ?? null)`)) === "Still here.", "the answer stored", 60_000);
  await pageB.reload();
  await overlayHost(pageB);
  // The new page's overlay is told about the panel, stays closed and sends the restored chat.
  await waitForData(pageB, "side-panel", "true");
  await waitForData(pageB, "answer", "Still here.");
  assert.equal((await overlayState(pageB)).state, "closed");
  await waitPanel("tabState", "ready");
  await until(async () => (await panelState()).answer === "Still here." && (await inChat(`return root.querySelectorAll("[data-entry]").length`)) === entries, "the conversation in the panel again", 60_000);
  // And it still acts on the tab.
  await useScript(chrome, [done("After the reload.")]);
  await askInPanel("And now?");
  await until(async () => (await panelState()).answer === "After the reload.", "the answer after the reload", 60_000);
});

test("the tab relays nothing; the panel closed at a question loses nothing: the overlay takes it up", { timeout: 120_000 }, async () => {
  await pageB.bringToFront();
  await waitPanel("tab", String(tabB));
  await waitPanel("tabState", "ready");
  // What tab B's content script sends the worker from now on.
  await inWorker(`(() => {
    globalThis.__fromTabB = [];
    chrome.runtime.onMessage.addListener((m, sender) => {
      if (sender.tab?.id === ${tabB} && m && typeof m.kind === "string") globalThis.__fromTabB.push(m.kind);
      return false;
    });
    return true;
  })()`);
  await useScript(chrome, [call("snapshot"), call("ask_user", `question:${str("Gift wrap the lantern?")},options:[${str("Yes")},${str("No")}]`), done("Wrapped.")]);
  await askInPanel("Should the lantern be wrapped?");
  await waitPanel("task", "ask", 60_000);
  const question = (await panelState()).pendingCall;
  // The panel's task, its tokens and its cards came from the worker: the page's side sent nothing.
  assert.deepEqual(await inWorker("globalThis.__fromTabB"), [], "tab B's content script relayed the chat");

  // The user closes the panel while the question waits: the overlay is the chat again, with it.
  await inPanel("(window.close(), true)").catch(() => {});
  await waitForData(pageB, "side-panel", "false");
  await clickInOverlay(pageB, ".launcher");
  await waitForData(pageB, "state", "open");
  assert.equal((await overlayState(pageB)).pendingCall, question, "the question is in the overlay");
  await clickInOverlay(pageB, `.card.ask[data-call-id="${question}"] button.option[data-option="Yes"]`);
  await waitForData(pageB, "answer", "Wrapped.", 60_000);

  // The panel again, for the tests below.
  await clickInOverlay(pageB, ".to-side-panel");
  await until(async () => chrome.console.find(PANEL).length > 0, "the side panel's page");
  await waitPanel("tab", String(tabB));
  await waitPanel("tabState", "ready");
  await waitPanel("answer", "Wrapped.");
});

test("the setting: with the side panel chosen, the toolbar button opens the panel", { timeout: 30_000 }, async () => {
  const behavior = () => inWorker(`chrome.sidePanel.getPanelBehavior().then((b) => b.openPanelOnActionClick === true)`);
  assert.equal(await behavior(), false, "by default the toolbar button opens the overlay");
  // The shortcut is the toolbar button's click: it opens whatever the button opens.
  const shortcut = await inWorker(`chrome.commands.getAll().then((all) => all.find((c) => c.name === "_execute_action")?.shortcut ?? null)`);
  assert.equal(shortcut, "Ctrl+Shift+K");
  // The panel's own settings form (the same as the overlay's and the options page's).
  await clickInPanel("button.settings");
  await waitPanel("view", "settings");
  const choose = (value) =>
    inChat(`const s = root.querySelector("select.setting-chat-surface"); s.value = ${JSON.stringify(value)}; s.dispatchEvent(new Event("change")); return true;`);
  await choose("panel");
  await until(() => behavior(), "the toolbar button to open the side panel");
  assert.equal(await inWorker(`chrome.storage.sync.get("settings").then((s) => s.settings.chatSurface)`), "panel");
  await choose("overlay");
  await until(async () => !(await behavior()), "the toolbar button to open the overlay again");
  await clickInPanel("button.settings");
  await waitPanel("view", "chat");
});

test("a site where Hearth is off, and a page it never runs on: the panel says so", { timeout: 60_000 }, async () => {
  const off = await chrome.context.newPage();
  await off.goto(`${pages.crossOriginUrl}/agent/editor.html?panel-off`);
  await overlayHost(off);
  const site = new URL(pages.crossOriginUrl).origin;
  await inWorker(`chrome.storage.sync.get("settings").then((s) => chrome.storage.sync.set({ settings: { ...(s.settings ?? {}), disabledSites: [${JSON.stringify(site)}] } }))`);
  await off.bringToFront();
  await waitPanel("tabState", "disabled");
  const notice = await inChat(`return root.querySelector(".side-notice").textContent`);
  assert.ok(notice.includes(site), `the notice names the site: ${notice}`);
  assert.equal(await inChat(`return root.querySelector(".chat").hidden`), true, "no composer on a site Hearth is off on");

  const blank = await chrome.context.newPage();
  await blank.goto("about:blank");
  await blank.bringToFront();
  await waitPanel("tabState", "unsupported");
});

test("the console stayed clean", () => {
  // The panel's page is watched too (an extension page): an error there fails here.
  assert.ok(chrome.console.find(PANEL).length > 0, "the side panel was watched");
  assert.deepEqual(chrome.console.errors, []);
});
