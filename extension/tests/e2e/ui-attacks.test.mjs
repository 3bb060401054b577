// Attacks on Hearth's own UI inside the page (docs/threat-model.md, "Hearth's own UI inside the
// page"), one small hostile page each (tests/pages/ui-attacks/), with the person's input trusted
// (Playwright's mouse and keyboard, through the DevTools protocol) and the page's scripts in the
// page's own world. Each asserts what the page observed (nothing) and that no card was approved.
// The overlay's chat is Hearth's own page in a frame (content/overlay.ts, sidepanel/): nothing
// typed, selected or read there is in the page's document, and an Allow counts only once the frame
// has been seen whole and uncovered for 500 ms. No model: cards are played through the worker.
// Also measured: the overlay's opening time, launcher click to composer focused.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import { sidePanel } from "../lib/panel.mjs";
import { chatFrame, clickInOverlay, clickLauncher, overlayEval, overlayHost, overlayPresent, overlayText, screenshot, waitForData } from "../lib/overlay.mjs";

const WORKER = "/service-worker.js";

let server;
let chrome;
before(async () => {
  server = await serve(resolve(import.meta.dirname, "../pages"));
  chrome = await launch({ webgpu: false });
});
after(async () => {
  await chrome?.close();
  await server?.close();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A new tab on attack page `name`, its overlay's host in place. */
async function attackPage(name) {
  const page = await chrome.context.newPage();
  await page.setViewportSize({ width: 1000, height: 760 });
  await page.goto(`${server.url}/ui-attacks/${name}.html`);
  await overlayHost(page);
  return page;
}

/** Opens the overlay with the launcher and puts the focus in the composer, like a person. */
async function openAndFocusComposer(page) {
  await clickLauncher(page);
  await waitForData(page, "state", "open");
  await until(async () => {
    await clickInOverlay(page, "textarea.composer");
    return overlayEval(page, "textarea.composer", "function () { return this.getRootNode().activeElement === this && document.hasFocus(); }");
  }, "the composer to have the focus");
}

const composerValue = (page) => overlayEval(page, "textarea.composer", "function () { return this.value; }");

async function tabIdOf(page) {
  const id = await chrome.console.evaluate(WORKER, `chrome.tabs.query({}).then((tabs) => tabs.find((t) => t.url === ${JSON.stringify(page.url())})?.id)`);
  assert.equal(typeof id, "number", `no tab for ${page.url()}`);
  return id;
}

/** A task update for `tabId`, as if the engine had sent it (the worker owns the conversation). */
const fromEngine = (tabId, update) => chrome.console.evaluate(WORKER, `(hearthTestEngine(${JSON.stringify({ kind: "task_update", tab_id: tabId, update })}), true)`);

/** A confirmation card for a click on the page, waiting for the person (the overlay opens at it). */
async function showCard(page, callId) {
  const tabId = await tabIdOf(page);
  await fromEngine(tabId, {
    update: "event",
    event: {
      type: "confirm_request",
      call_id: callId,
      name: "navigate",
      arguments: { url: "https://evil.example/collect" },
      risk: "medium",
      reasons: [{ kind: "off_site", host: "evil.example" }],
      message: "Allow navigate?",
      target: { description: "the page https://evil.example/collect", index: null, destination: "evil.example", text: null },
    },
  });
  await fromEngine(tabId, { update: "ended", outcome: { kind: "needs_confirmation", call_id: callId } });
  await waitForData(page, "pending-call", callId);
  await waitForData(page, "state", "open");
  return tabId;
}

/** The decision the worker's copy of the conversation holds for card `callId` (null: none). */
async function decisionOf(tabId, callId) {
  return chrome.console.evaluate(
    WORKER,
    `chrome.storage.session.get("transcript:${tabId}").then((s) => s["transcript:${tabId}"]?.entries.find((e) => e.callId === ${JSON.stringify(callId)})?.decision ?? null)`,
  );
}

/** The page coordinates of the center of `selector` in the chat (for a click the page has covered). */
async function centerOf(page, selector) {
  const inFrame = await overlayEval(page, selector, "function () { const r = this.getBoundingClientRect(); return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; }");
  // (The frame's box in the page, from the protocol: the page itself cannot see it.)
  const cdp = await page.context().newCDPSession(page);
  const { root } = await cdp.send("DOM.getDocument", { depth: -1, pierce: true });
  const stack = [root];
  let iframe = null;
  while (stack.length && !iframe) {
    const node = stack.pop();
    if (node.nodeName === "IFRAME" && (node.attributes ?? []).includes("chat-frame")) iframe = node;
    stack.push(...(node.children ?? []), ...(node.shadowRoots ?? []));
  }
  assert.ok(iframe, "the chat's frame");
  const { model } = await cdp.send("DOM.getBoxModel", { nodeId: iframe.nodeId });
  await cdp.detach();
  return { x: model.content[0] + inFrame.x, y: model.content[1] + inFrame.y };
}

/** The launcher's center in the page. */
async function launcherPoint(page) {
  const box = await overlayEval(page, ".launcher", "function () { const r = this.getBoundingClientRect(); return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; }");
  return box;
}

/** Clicks the launcher and returns the ms from the click (as the page saw it) to the composer focused. */
async function timeOpening(page) {
  const { x, y } = await launcherPoint(page);
  await page.mouse.click(x, y);
  await waitForData(page, "state", "open");
  const clickAt = await page.evaluate(() => __clickAt);
  const openedAt = Number(await waitForData(page, "opened-at", null, 5_000, { not: true }));
  assert.equal(await overlayEval(page, "textarea.composer", "function () { return this.getRootNode().activeElement === this; }"), true, "the composer has the focus");
  // Closed again, and the mark cleared for the next opening.
  await page.keyboard.press("Escape");
  await waitForData(page, "state", "closed");
  await chatFrame(page).evaluate(() => document.querySelector(".test-state").removeAttribute("data-opened-at"));
  return Math.round(openedAt - clickAt);
}

test("opening the overlay: launcher click to composer focused", { timeout: 60_000 }, async () => {
  const times = {};
  for (const hover of [false, true]) {
    const page = await attackPage("exec-command");
    // The click's time, as the page's own listener sees it (the launcher's click reaches it retargeted to the host).
    await page.evaluate(() => addEventListener("click", (e) => (window.__clickAt = performance.timeOrigin + e.timeStamp), true));
    if (hover) {
      // A person's pointer rests on the launcher before the click: the frame starts loading then.
      const { x, y } = await launcherPoint(page);
      await page.mouse.move(x, y);
      await sleep(400);
      times["first, after the pointer rested on the launcher"] = await timeOpening(page);
    } else {
      times["first (the frame made on the click)"] = await timeOpening(page);
      times["again (the frame kept)"] = await timeOpening(page);
    }
    await page.close();
  }
  for (const [what, ms] of Object.entries(times)) console.log(`overlay opening time, ${what}: ${ms} ms (launcher click to composer focused; aim: 200 ms)`);
  // A generous bound only: this machine may be busy with a compile.
  for (const ms of Object.values(times)) assert.ok(ms > 0 && ms < 2_000, `the overlay opened in ${ms} ms`);
});

test("document.open(): the rewritten page's keylogger gets nothing, and Hearth keeps working", { timeout: 60_000 }, async () => {
  const page = await attackPage("document-open");
  await page.evaluate(() => attack());
  assert.equal(await page.title(), "Rewritten");
  await until(() => overlayPresent(page), "Hearth's host to be put back in the rewritten document");
  await openAndFocusComposer(page);
  await page.keyboard.type("my card number is 4111");
  assert.equal(await composerValue(page), "my card number is 4111");
  await page.keyboard.press("Enter");
  await until(async () => (await composerValue(page)) === "", "Enter to send the request");
  assert.match(await overlayText(page, ".msg.user"), /my card number is 4111/);
  assert.deepEqual(await page.evaluate(() => __keys), [], "the page's keylogger saw no key");
  await page.close();
});

test("the host moved into the page's element in a loop: no keystroke reaches the page's element", { timeout: 60_000 }, async () => {
  const page = await attackPage("reparent");
  await openAndFocusComposer(page);
  await page.keyboard.type("first half, ");
  await page.evaluate(() => attack());
  await until(() => page.evaluate(() => __moves > 20), "the page to move the host again and again");
  await page.keyboard.type("second half");
  await page.evaluate(() => stopAttack());
  assert.deepEqual(await page.evaluate(() => __inTrap), [], "the page's element saw no event from Hearth");
  assert.equal(await page.evaluate(() => __typed()), "", "the page saw no key");
  // Hearth's host is under the root element again, and the chat works (the page moved it with
  // moveBefore, which keeps the frame's document: what was typed is still there).
  await until(() => page.evaluate(() => [...document.documentElement.children].some((el) => el.localName === "hearth-overlay")), "the host back under <html>");
  assert.equal(await composerValue(page), "first half, second half");
  console.log(`the page moved the host ${await page.evaluate(() => __moves)} times`);
  await page.close();
});

test("the focus stolen to a hidden field: the overlay says so at once, and the page's typing never enters Hearth", { timeout: 60_000 }, async () => {
  const page = await attackPage("focus-steal");
  await openAndFocusComposer(page);
  await page.keyboard.type("my password is ");
  assert.equal(await page.evaluate(() => attack()), true, "the page took the focus");
  await page.keyboard.type("hunter2");
  assert.equal(await waitForData(page, "focus-taken", "true"), "true", "the overlay shows that the page took the keyboard");
  assert.match(await overlayText(page, ".focus-taken"), /page took the keyboard/);
  await screenshot(page, "ui-attack-focus-taken");
  // What was typed before the theft stayed in Hearth; the page's words never entered it.
  assert.equal(await composerValue(page), "my password is ");
  assert.ok(!(await page.evaluate(() => __typed())).includes("my password"), "nothing typed in Hearth reached the page");
  // (What the person typed after the theft went to the page's field: the notice is what tells them.)
  await page.close();
});

test("execCommand selectAll and insertText: the page reads nothing of the request and writes nothing into it", { timeout: 60_000 }, async () => {
  const page = await attackPage("exec-command");
  await openAndFocusComposer(page);
  await page.keyboard.type("summarise my medical record");
  const { selected, inserted } = await page.evaluate(() => attack());
  assert.ok(!selected.includes("medical"), `the page's selection held the request: ${JSON.stringify(selected)}`);
  assert.equal(await composerValue(page), "summarise my medical record", `the page's words entered the request (insertText said ${inserted})`);
  assert.ok(!(await page.evaluate(() => __seen.join("\n"))).includes("medical"), "no event carried the request");
  await page.close();
});

test("selection, getSelection() and window.find(): nothing in Hearth's answers can be read", { timeout: 60_000 }, async () => {
  const page = await attackPage("selection-find");
  const tabId = await tabIdOf(page);
  await clickLauncher(page);
  await waitForData(page, "state", "open");
  const answer = "Your one-time code 73915 expires soon.";
  await fromEngine(tabId, { update: "event", event: { type: "done", result: answer, success: true } });
  await fromEngine(tabId, { update: "ended", outcome: { kind: "done", result: answer, success: true } });
  await waitForData(page, "task", "done");
  // The person selects the answer with the mouse (a triple click selects its paragraph).
  const { x, y } = await centerOf(page, ".result");
  await page.mouse.click(x, y, { clickCount: 3 });
  assert.match(await overlayEval(page, ".result", "function () { return String(getSelection()); }"), /73915/, "the person's selection, in Hearth's frame");
  const found = await page.evaluate(() => attack("one-time"));
  assert.deepEqual(found, { word: false, digits: "" }, "find() found nothing of Hearth's");
  await sleep(100);
  const observed = await page.evaluate(() => [...__selections, ...__seen].join("\n"));
  assert.ok(!/73915|one-time/.test(observed), `the page observed the selection: ${observed.slice(0, 300)}`);
  await page.close();
});

/**
 * The page covers (or fades) Hearth while a card waits, and the person clicks where its Allow is:
 * nothing is approved, the card says the page is covering Hearth, and the side panel opens with
 * the card, where it can be decided.
 */
async function clickjack(name) {
  const page = await attackPage(name);
  const callId = `cj-${name}`;
  const tabId = await showCard(page, callId);
  await waitForData(page, "seen", "true", 5_000);
  const allow = `.confirm[data-call-id="${callId}"] button[data-decision="allow_once"]`;
  const point = await centerOf(page, allow);
  await page.evaluate(() => attack());
  // Longer than the visibility check's delay (100 ms): the frame knows it is covered.
  await waitForData(page, "seen", "false", 5_000);
  await screenshot(page, `ui-attack-${name}`);
  await page.mouse.click(point.x, point.y);
  await waitForData(page, "covered", "1", 5_000);
  assert.equal(await decisionOf(tabId, callId), null, "the card was not approved");
  assert.equal(await waitForData(page, "pending-call", callId), callId, "the card still waits");
  // The decision moved to the side panel (browser UI no page can draw over), opened by that click.
  const { waitPanel, clickInPanel, panelState } = sidePanel(chrome);
  await waitPanel("tab", String(tabId));
  await waitPanel("pendingCall", callId);
  await waitForData(page, "side-panel", "true");
  await page.evaluate(() => stopAttack());
  assert.deepEqual((await page.evaluate(() => __seen)).filter((s) => !s.startsWith("selection")), [], "the page saw no input of Hearth's");
  // There the person denies it (an Allow would count there too: the panel is the browser's).
  await clickInPanel(`.confirm[data-call-id="${callId}"] button[data-decision="deny"]`);
  await until(async () => (await decisionOf(tabId, callId)) === "deny", "the panel's decision");
  assert.equal((await panelState()).tab, String(tabId));
  await chrome.console.evaluate("/sidepanel.html", "(window.close(), true)").catch(() => {});
  await waitForData(page, "side-panel", "false");
  await page.close();
}

test("clickjacking: Hearth faded in a transparent container, the person's click on Allow approves nothing", { timeout: 90_000 }, () => clickjack("clickjack-transparent"));

test("clickjacking: a top-layer popover over the card lets clicks through; Allow approves nothing", { timeout: 90_000 }, () => clickjack("clickjack-popover"));

test("an Allow seen long enough counts (the gate lets the person decide)", { timeout: 60_000 }, async () => {
  const page = await attackPage("clickjack-popover");
  const callId = "seen-ok";
  const tabId = await showCard(page, callId);
  await clickInOverlay(page, `.confirm[data-call-id="${callId}"] button[data-decision="allow_once"]`);
  await until(async () => (await decisionOf(tabId, callId)) === "allow_once", "the Allow recorded");
  await page.close();
});

test("the console stayed clean", () => {
  assert.deepEqual(chrome.console.errors, []);
});
