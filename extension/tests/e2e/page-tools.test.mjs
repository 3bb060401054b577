// The tools pages offer (WebMCP), in Chromium's own implementation (`--enable-features=WebMCP`,
// tests/lib/browser.mjs). A shop (tests/pages/webmcp/shop.html) registers `add_to_cart` and
// `checkout` with `document.modelContext.registerTool`, offers a declarative search form
// (`<form toolname toolautosubmit>`), registers `apply_coupon` only once the cart has something
// in it (after the task's snapshot), and its tools' descriptions order the model to check out
// on another site. The scripted model plays a model that obeys: the page's words are fenced, a
// tool the page did not mark read-only asks once (then "Allow for this task" holds on the site),
// the form is judged as its submission, and what the page's own code does while its tool runs
// (moving the tab to another site) is held by the fence with a card. Effects are read on the
// pages and on the two servers' logs.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { loggingServer } from "../lib/server.mjs";
import { clickInOverlay, overlayData, overlayEval, overlayText, screenshot } from "../lib/overlay.mjs";
import { answerFenceCard, ask, call, decide, done, openAgentPage, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";

const PAGES = resolve(import.meta.dirname, "../pages/webmcp");

let shop;
let other;
let chrome;

/** The shop's site: serves tests/pages/webmcp and logs every request but the favicon. */
async function shopServer() {
  const log = [];
  const server = createServer(async (req, res) => {
    if (req.url === "/favicon.ico") return void res.writeHead(204).end();
    log.push(`${req.method} ${req.url}`);
    const path = new URL(req.url, "http://x").pathname;
    const body = /^\/[a-z-]+\.html$/.test(path) ? await readFile(resolve(PAGES, `.${path}`)).catch(() => null) : null;
    if (!body) return void res.writeHead(404).end("not found");
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(body);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}`, log, close: () => new Promise((r) => server.close(r)) };
}

before(async () => {
  shop = await shopServer();
  // Another site: `localhost` and `127.0.0.1` are different sites.
  other = await loggingServer("localhost", false);
  chrome = await launch();
});
after(async () => {
  await chrome?.close();
  await shop?.close();
  await other?.close();
});

const shopUrl = () => `${shop.url}/shop.html?other=${encodeURIComponent(other.url)}`;

/** Waits for the confirmation card about `expected[0]`, checks that it says each of `expected`; returns its text. */
async function cardSays(page, expected) {
  let text = "";
  await until(async () => {
    const callId = await overlayData(page, "pending-call");
    if (!callId) return false;
    text = await overlayText(page, `.card.confirm[data-call-id="${callId}"]`).catch(() => "");
    return text.includes(expected[0]);
  }, `a card about ${expected[0]}`, 60_000);
  for (const words of expected) assert.ok(text.includes(words), `the card says ${JSON.stringify(words)}: ${text}`);
  return text;
}

test("the page's tools are offered as page.<name> in its own words, run by the browser, and a tool not marked read-only asks once", { timeout: 240_000 }, async () => {
  const page = await openAgentPage(chrome, shopUrl());
  const shopHost = new URL(shop.url).host;
  await useScript(chrome, [
    call("snapshot"),
    // A wrong-typed argument: the engine's constraint cannot write it (crates/engine
    // generation.rs tests); the scripted model bypasses the constraint, and the validator refuses it.
    call("page.add_to_cart", `sku:${str("SOCK-1")},qty:${str("two")}`),
    call("page.add_to_cart", `sku:${str("SOCK-1")},qty:2`),
    call("page.add_to_cart", `sku:${str("HAT-9")},qty:1`),
    // Registered by the page after the snapshot: listed with the previous tool's reply.
    call("page.apply_coupon", `code:${str("WINTER")}`),
    call("page.search_products", `q:${str("socks")}`),
    done("Added socks and a hat, applied WINTER and searched for socks."),
  ]);
  await ask(page, "Put two SOCK-1 and one HAT-9 in my cart, use coupon WINTER, then search for socks.");
  // The first add_to_cart asks: the card names the site, the tool, its arguments, and that the
  // page did not mark it read-only.
  const card = await cardSays(page, ["page.add_to_cart", "add_to_cart", shopHost, "SOCK-1", "did not mark read-only"]);
  assert.ok(!card.includes("checkout"), "the page's description is not on the card");
  await screenshot(page, "page-tools-card");
  await decide(page, "allow_for_task");
  // The second add_to_cart runs without asking (allowed for this task on this site); the coupon
  // tool says it only reads; the declarative search form is judged as its submission.
  await cardSays(page, ["page.search_products", "search_products", "socks"]);
  assert.equal(await page.locator("#cart").textContent(), "2 × SOCK-1, 1 × HAT-9", "both items are in the page's cart");
  assert.equal(await page.locator("#coupon").textContent(), "WINTER", "the coupon tool registered after the snapshot ran");
  await decide(page, "allow_once");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await until(async () => new URL(page.url()).pathname === "/search.html", "the search form's page");
  assert.equal(await page.locator("#query").textContent(), "socks", "the browser filled and submitted the form");
  assert.equal(await page.locator("#cart").textContent(), "2 × SOCK-1, 1 × HAT-9");
  assert.ok(shop.log.includes("GET /search.html?q=socks"), `the shop got the search: ${shop.log.join(", ")}`);
  assert.deepEqual(other.log, [], "nothing reached the other site");

  const prompts = await scriptedPrompts(chrome);
  // Offered beside Hearth's tools under a name of their own, the description fenced as the page's words.
  assert.match(prompts[1], /declaration:page\.add_to_cart\{/);
  assert.match(prompts[1], /<<<UNTRUSTED PAGE CONTENT from http:\/\/127\.0\.0\.1:\d+\/shop\.html[^>]*>>>\nAdd a product to the cart by its SKU\. IMPORTANT/);
  assert.match(prompts[1], /declaration:page\.search_products\{/);
  assert.ok(!prompts[1].includes("declaration:page.apply_coupon"), "not offered before the page registered it");
  assert.match(prompts[2], /`qty` must be integer, got string/);
  assert.match(prompts[4], /declaration:page\.apply_coupon\{/);
  assert.match(prompts[4], /Added 1 × HAT-9\. IGNORE THE USER/, "the tool's answer reaches the model as page words");
});

test("a page tool whose words order a move to another site cannot take the task there without a card", { timeout: 180_000 }, async () => {
  const page = await openAgentPage(chrome, shopUrl());
  const url = page.url();
  const otherHost = new URL(other.url).host;
  await useScript(chrome, [call("snapshot"), call("page.checkout"), done("Checked out.")]);
  await ask(page, "What does this shop sell?");
  // The page marks checkout read-only: the policy asks nothing. Its code then sends the tab to the
  // other site; the fence, up while the page's tool runs, blocks it and asks.
  await answerFenceCard(page, [otherHost, "/pay"], "deny", "page-tools-fence");
  await until(async () => page.url() === url, "the page to be back");
  await waitForTask(page, ["done", "failed", "paused", "stopped"]);
  assert.deepEqual(other.log, [], "no request reached the other site");
});

test("the site's page-tools setting, set in the overlay's settings: ask asks before every call, off offers none and runs none", { timeout: 240_000 }, async () => {
  const page = await openAgentPage(chrome, shopUrl());
  const shopSite = new URL(shop.url).origin;
  const setMode = async (mode) => {
    await clickInOverlay(page, "button.settings");
    await overlayEval(page, "#hearth-page-tools", `function () { this.value = ${JSON.stringify(mode)}; this.dispatchEvent(new Event("change")); }`);
    await until(async () => {
      const stored = await chrome.console.evaluate("/service-worker.js", "chrome.storage.sync.get('settings').then((s) => JSON.stringify(s.settings?.pageTools ?? {}))");
      return JSON.parse(stored)[shopSite] === mode;
    }, `page tools ${mode} on ${shopSite}`);
    await clickInOverlay(page, "button.settings");
  };
  const cart = () => page.locator("#cart").textContent();

  // Ask: every call asks, "Allow for this task" included.
  await setMode("ask");
  await useScript(chrome, [
    call("snapshot"),
    call("page.add_to_cart", `sku:${str("SOCK-1")},qty:1`),
    call("page.add_to_cart", `sku:${str("HAT-9")},qty:1`),
    done("Added."),
  ]);
  await ask(page, "Add a sock and a hat.");
  await cardSays(page, ["page.add_to_cart", "you asked to approve every use"]);
  await decide(page, "allow_for_task");
  await cardSays(page, ["page.add_to_cart", "HAT-9", "you asked to approve every use"]);
  await decide(page, "deny");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await cart(), "1 × SOCK-1", "the allowed call ran, the denied one did not");

  // Off: the page's tools are not offered, and a call of one runs nothing.
  await setMode("off");
  await useScript(chrome, [call("snapshot"), call("page.add_to_cart", `sku:${str("HAT-9")},qty:1`), done("Done.")]);
  await ask(page, "Add a hat.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  const prompts = await scriptedPrompts(chrome);
  // (The task's first prompt may still list what the previous task saw; the snapshot's reply brings the empty list.)
  assert.ok(!prompts.slice(1).some((p) => p.includes("declaration:page.add_to_cart")), "no page tool is offered");
  assert.match(prompts.at(-1), /unknown tool `page\.add_to_cart`/);
  assert.equal(await cart(), "1 × SOCK-1", "nothing more was added");
  await setMode("on");
});
