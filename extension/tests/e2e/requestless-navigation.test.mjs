// Navigations that make no request (docs/threat-model.md rows 22–23): while a task runs, another
// site's frame in the task's page moves the whole tab to a document of its own origin that no
// network request brings (blob:, about:blank, and the classes Chromium itself refuses: data:,
// javascript:, filesystem:). The fence's rules judge requests only; its webNavigation watch judges
// these by the site of the origin their document belongs to. A fooled model (the scripted one)
// makes one harmless click that shows the frame; the person then clicks in the frame (trusted
// input, by CDP: the frame needs the person's activation to move the top). Each assertion is on
// the tab's address and origin and on the card. And the card of an address with user-info names
// the real site, with the user-info as a warning and the whole address one click away.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { loggingServer } from "../lib/server.mjs";
import { clickInOverlay, overlayEval, overlayText, queryOverlay } from "../lib/overlay.mjs";
import { answerFenceCard, ask, call, decide, done, indexOf, openAgentPage, str, useScript, waitForTask } from "../lib/agent.mjs";

let site;
/** Another site (localhost and 127.0.0.1 are two sites): its frame in the task's page. */
let other;
let chrome;
before(async () => {
  site = await loggingServer("127.0.0.1", true);
  other = await loggingServer("localhost", true);
  chrome = await launch();
});
after(async () => {
  await chrome?.close();
  for (const server of [site, other]) await server?.close();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** The other site, as the one site rule writes it (scheme, host, and the port: a local server). */
const otherSite = () => `http://${new URL(other.url).host}`;
/** The lessons page showing the other site's frame page `frame` (tests/pages/attacks/<frame>.html). */
const taskUrl = (frame) => `${site.url}/attacks/requestless.html?frame=${encodeURIComponent(`${other.url}/attacks/${frame}.html`)}`;
const WORKER = "/service-worker.js";
const tabCount = () => chrome.console.evaluate(WORKER, "chrome.tabs.query({}).then((t) => t.length)");

/**
 * A task on the lessons page whose model clicks "Show video" (harmless: no card) and then waits;
 * the person clicks Play in the other site's frame (`frame`), which reports its `attempt` to its
 * own server and then moves the top (or opens a tab).
 */
async function clickPlayDuringTask(frame, attempt) {
  const url = taskUrl(frame);
  const page = await openAgentPage(chrome, url);
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf('"Show video"')}`), call("wait_for", `text:${str("never shown")},timeout_seconds:8`), done("Shown.")]);
  await ask(page, "Show the video.");
  const player = await until(async () => {
    const f = page.frames().find((x) => x.url().includes(`/${frame}.html`));
    return f && (await f.locator("#play").count().catch(() => 0)) > 0 ? f : null;
  }, "the other site's frame");
  // Trusted input: a real click (CDP) in the middle of the frame's Play button.
  const box = await player.locator("#play").boundingBox();
  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  await until(async () => other.log.some((l) => l.includes(`/attempted-${attempt}`)), `the frame's ${attempt} attempt`);
  return { page, url };
}

/** The tab's address and its document's origin (null while it has none to ask). */
async function where(page) {
  const origin = await page.evaluate(() => self.origin).catch(() => null);
  return { url: page.url(), origin };
}

test("a cross-site frame moving the tab to a blob: document of its own origin is undone and carded with that site", { timeout: 120_000 }, async () => {
  // The issue's attack: no request, so the fence's rules never saw it; the tab ended on the other
  // site's page with no card.
  const { page, url } = await clickPlayDuringTask("move-top-blob", "blob");
  const card = await answerFenceCard(page, [otherSite()], "deny");
  assert.match(card, /blob:/, "the card shows the full address");
  await until(async () => (await where(page)).url === url, "the tab back on the task's page");
  assert.equal((await where(page)).origin, site.url, "the task's page, of the task's origin");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  // Settled: the tab did not go back to the other site's document.
  await sleep(1_000);
  assert.equal(page.url(), url);
  await page.close();
});

test("a cross-site frame moving the tab to about:blank (its own origin) and writing there is undone and carded with that site", { timeout: 120_000 }, async () => {
  // about:blank inherits the origin of the document that started the navigation: the frame's.
  const { page, url } = await clickPlayDuringTask("move-top-about", "about");
  await answerFenceCard(page, [otherSite(), "about:blank"], "deny");
  await until(async () => (await where(page)).url === url, "the tab back on the task's page");
  assert.equal((await where(page)).origin, site.url);
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await page.close();
});

test("a tab a cross-site frame opens to about:blank (its own origin) and writes into is closed and carded with that site", { timeout: 120_000 }, async () => {
  // Ours: not the task's tab but a new one, with no request at all (row 4 fences requests only).
  const tabs = await tabCount();
  const { page } = await clickPlayDuringTask("open-blank-tab", "popup");
  await answerFenceCard(page, [otherSite(), "about:blank"], "deny");
  await until(async () => (await tabCount()) === tabs + 1, "the opened tab to be closed (only the task's own is new)");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await page.close();
});

for (const [move, why] of [
  ["data", "Chromium refuses a page's top-level navigation to data: (BlockedSchemeNavigationThrottle: net::ERR_ABORTED, before commit)"],
  ["javascript", "Chromium runs a javascript: address only for a target of the same origin: another site's frame cannot, and the page's own stays the page's origin"],
  // Chromium 156 still has the filesystem: API (webkitRequestFileSystem); it refuses top-level
  // navigations to filesystem: addresses ("Not allowed to navigate top frame to filesystem URL").
  ["filesystem", "Chromium refuses top-level navigations to filesystem: addresses in the renderer, before any navigation starts"],
]) {
  test(`a cross-site frame moving the tab to a ${move}: address leaves the tab on the task's site (${why})`, { timeout: 120_000 }, async () => {
    const { page, url } = await clickPlayDuringTask(`move-top-${move}`, move);
    if (move === "filesystem") {
      await until(async () => other.log.some((l) => l.includes("/made-filesystem-page") || l.includes("/no-filesystem-api")), "the frame's page in its file system");
      assert.ok(other.log.some((l) => l.includes("/made-filesystem-page?url=filesystem%3A")), "the filesystem: API exists and made the page");
    }
    // Whatever Chromium does, the tab must not end on the other site without a card.
    for (let waited = 0; waited < 3_000; waited += 250) {
      const now = await where(page);
      assert.ok(now.url === url || now.url.startsWith(site.url), `${move}: the tab never left the task's page (${now.url})`);
      await sleep(250);
    }
    assert.equal((await where(page)).origin, site.url);
    assert.equal((await queryOverlay(page, ".card.fence")).length, 0, `${move}: nothing happened, so there is nothing to ask`);
    assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
    await page.close();
  });
}

test("a card for an address with user-info names the real site; the user-info is a warning; the full address is one click away", { timeout: 120_000 }, async () => {
  // The issue's attack: http://<this site>@<other site>/… showed the person's own host.
  const siteHost = new URL(site.url).host;
  const deceptive = `http://${siteHost}@${new URL(other.url).host}/account?d=SECRET-TOKEN-42`;
  const page = await openAgentPage(chrome, taskUrl("move-top-blob"));
  await page.setViewportSize({ width: 1280, height: 900 });
  await useScript(chrome, [call("navigate", `url:${str(deceptive)}`), done("Opened it.")]);
  await ask(page, "Open my account page.");
  await waitForTask(page, ["confirm"]);
  assert.equal(await overlayText(page, ".card.confirm .target-destination .site"), otherSite(), "the destination is the other site");
  const destination = await overlayText(page, ".card.confirm .target-destination");
  assert.ok(!destination.includes(siteHost), `the destination line never shows the user-info: ${destination}`);
  const warning = await overlayText(page, '.card.confirm .address-warning[data-warning="user_info"]');
  assert.ok(warning.includes(siteHost.split(":")[0]) && warning.includes(otherSite()), `the warning names both: ${warning}`);
  assert.ok(!warning.includes("SECRET"), "the warning shows no more than the user-info");
  // The whole address: hidden, then shown by one click.
  assert.equal(await overlayEval(page, ".card.confirm .full-address", "function () { return this.hidden; }"), true);
  const fullHidden = () => overlayEval(page, ".card.confirm .full-address", "function () { return this.hidden; }");
  // (In the middle of the chat's scrolled list: at its edge, a notice below the list may cover it.)
  await overlayEval(page, ".card.confirm .show-address", "function () { this.scrollIntoView({ block: 'center' }); }");
  await clickInOverlay(page, ".card.confirm .show-address");
  await until(async () => !(await fullHidden()), "one click to show the whole address", 3_000);
  assert.equal(await overlayEval(page, ".card.confirm .show-address", "function () { return this.getAttribute('aria-expanded'); }"), "true");
  assert.equal(await overlayText(page, ".card.confirm .full-address"), deceptive);
  await decide(page, "deny");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.deepEqual(other.log.filter((l) => l.includes("/account")), [], "nothing reached the other site");
  await page.close();
});
