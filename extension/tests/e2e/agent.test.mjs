// The agent on real pages, end to end: the overlay sends the task, the Rust loop in the offscreen
// document runs it with the scripted model of test builds (deterministic replies that name elements
// by their snapshot text, as a policy reading the snapshot would), tool calls travel to the tab's
// content script through the service worker, and every test asserts on the page's own state.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch } from "../lib/browser.mjs";
import { servePages } from "../lib/pages.mjs";
import { clickInOverlay, overlayEval, overlayText, screenshot, waitForData } from "../lib/overlay.mjs";
import { answer, ask, call, chooseOption, decide, done, pageText as text, indexOf, openAgentPage, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";

let pages;
let chrome;
before(async () => {
  pages = await servePages();
  chrome = await launch();
});
after(async () => {
  await chrome?.close();
  await pages?.close();
});

test("a long React form: typed values, select and checkbox reach React's state", { timeout: 120_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/react-form.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("type", `index:${indexOf('"Full name"')},text:${str("Grace Hopper")}`),
    call("type", `index:${indexOf('"Email"')},text:${str("grace@example.com")}`),
    call("type", `index:${indexOf('"Password"')},text:${str("correct horse")}`),
    call("type", `index:${indexOf('"Street address"')},text:${str("1 Navy Way")}`),
    call("type", `index:${indexOf('"City"')},text:${str("Arlington")}`),
    call("select", `index:${indexOf('"Country"')},option:${str("United States")}`),
    call("click", `index:${indexOf("Subscribe to the newsletter")}`),
    call("type", `index:${indexOf('"Notes for the team"')},text:${str("Call me Amazing Grace.")}`),
    call("click", `index:${indexOf('"Create account"')}`),
    done("Your account form is filled in and submitted."),
  ]);
  await ask(page, "Sign me up: Grace Hopper, grace@example.com, password 'correct horse', 1 Navy Way, Arlington, United States; subscribe me, and leave the team a note.");
  await decide(page, "allow_once"); // a password field
  await decide(page, "allow_once"); // "subscribe"
  await decide(page, "allow_once"); // "Create account" submits a POST form
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  await screenshot(page, "agent-react-form-done");
  const state = JSON.parse(await text(page, "#result"));
  assert.deepEqual(state, {
    name: "Grace Hopper",
    email: "grace@example.com",
    address: "1 Navy Way",
    city: "Arlington",
    country: "united-states",
    subscribe: true,
    notes: "Call me Amazing Grace.",
    password_length: 13,
  });
  assert.match(await answer(page), /submitted/);
});

test("a custom combobox, a question for the user, and a native select", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/combobox.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("select", `index:${indexOf('"Fruit"')},option:${str("Mango")}`),
    call("ask_user", `question:${str("Which size?")},options:[${str("Medium")},${str("Large")}]`),
    call("select", `index:${indexOf('"Size"')},option:${str("Large")}`),
    done("Mango, large."),
  ]);
  await ask(page, "A mango smoothie please.");
  await chooseOption(page, "Large");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "fruit=Mango; colour=; size=Large");
});

test("a contenteditable editor", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/editor.html`);
  await useScript(chrome, [call("snapshot"), call("type", `index:${indexOf('"Note"')},text:${str("Buy bread and eggs")}`), done("Written.")]);
  await ask(page, "Write 'Buy bread and eggs' in the note.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "Buy bread and eggs");
});

test("a web component's open shadow root", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("type", `index:${indexOf('"Your email"')},text:${str("ada@example.com")}`),
    call("click", `index:${indexOf('"Sign up"')}`),
    done("Signed up."),
  ]);
  await ask(page, "Sign up with ada@example.com.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "Signed up: ada@example.com");
});

test("a same-origin iframe", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/iframe.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("type", `index:${indexOf('"Email"')},text:${str("lin@example.com")}`),
    call("click", `index:${indexOf('"Join"')}`),
    done("Joined."),
  ]);
  await ask(page, "Join the newsletter as lin@example.com.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await page.frameLocator("#newsletter").locator("#result").textContent(), "Joined: lin@example.com");
});

test("an infinite list: the item below the fold is found by scrolling", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/infinite.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("scroll", `direction:${str("bottom")}`),
    call("scroll", `direction:${str("bottom")}`),
    call("scroll", `direction:${str("bottom")}`),
    call("snapshot"),
    call("click", `index:${indexOf('"Open item 57"')}`),
    done("Opened item 57."),
  ]);
  await ask(page, "Open item 57.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "Opened item 57");
});

test("a dead button: the breaker stops the agent after three clicks that change nothing, and says why", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/dead-button.html`);
  const click = call("click", `index:${indexOf('"Load more results"')}`);
  await useScript(chrome, [call("snapshot"), ...Array(20).fill(click), done("Loaded everything.")]);
  await ask(page, "Load all the results.");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "paused");
  assert.equal(await page.evaluate(() => window.clicks), 3, "the page saw three clicks, not the step limit's");
  const notices = await overlayText(page, ".notice");
  assert.match(notices, /Stopped: “click” on .*Load more results.* failed or changed nothing 3 times in a row/);
  await screenshot(page, "agent-breaker");
});

test("Place order: deny leaves the form filled and nothing ordered; allow orders once", { timeout: 120_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/checkout.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("click", `index:${indexOf('"Place order"')}`),
    done("You declined, so the order was not placed.", false),
    call("snapshot"),
    call("click", `index:${indexOf('"Place order"')}`),
    call("wait_for", `text:${str("Order placed")}`),
    done("Your order is placed."),
  ]);
  await ask(page, "Place the order.");
  await waitForTask(page, ["confirm"]);
  // The card shows from its top: what is being approved is in view, above the buttons.
  const titleShown = await overlayEval(
    page,
    ".card.confirm h3",
    "function () { const log = this.closest('.transcript').getBoundingClientRect(); const title = this.getBoundingClientRect(); return title.top >= log.top && title.bottom <= log.bottom; }",
  );
  assert.equal(titleShown, true, "the waiting card's title is in view");
  assert.doesNotMatch(await overlayText(page, ".card.confirm"), /index/, "the card names the button, not its index");
  await screenshot(page, "agent-confirmation-card");
  await decide(page, "deny");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#orders"), "0", "denied: nothing was ordered");
  assert.equal(await page.inputValue("#ship-name"), "Ada Lovelace", "the form is still filled");

  await ask(page, "Place the order, I approve it this time.");
  await decide(page, "allow_once");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#orders"), "1", "allowed: ordered exactly once");
});

test("instructions in the page are data: fenced for the model, and a fooled model still needs consent", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/injection.html`);
  // The worst case: the model obeys the page.
  await useScript(chrome, [call("read_page"), call("snapshot"), call("click", `index:${indexOf('"Delete account"')}`), done("Summarised.")]);
  await ask(page, "Summarise this article.");
  await decide(page, "deny");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  assert.equal(await text(page, "#result"), "", "the account was not deleted");
  const prompts = await scriptedPrompts(chrome);
  const afterRead = prompts[1];
  const at = afterRead.indexOf("IGNORE PREVIOUS INSTRUCTIONS");
  assert.ok(at > 0, "the page text reached the model");
  const open = afterRead.lastIndexOf("<<<", at);
  const close = afterRead.indexOf(">>>", at);
  assert.ok(open >= 0 && close > at, "the page text sits inside the untrusted-content fence");
});

test("a disabled site: no tool runs there, and no overlay is injected", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/shadow.html`);
  await useScript(chrome, [
    call("snapshot"),
    call("wait_for", `text:${str("Go ahead")},timeout_seconds:30`),
    call("type", `index:${indexOf('"Your email"')},text:${str("ada@example.com")}`),
    call("click", `index:${indexOf('"Sign up"')}`),
    done("Could not sign up: Hearth is disabled here.", false),
  ]);
  await ask(page, "Sign me up with ada@example.com.");
  // While the task waits for the page, the user disables Hearth on this site.
  await waitForData(page, "cards", "2", 30_000);
  const origin = new URL(pages.url).origin;
  await chrome.console.evaluate("/service-worker.js", `chrome.storage.sync.set({ settings: { disabledSites: [${JSON.stringify(origin)}] } })`);
  await page.waitForFunction(() => !document.querySelector("hearth-overlay"), null, { timeout: 10_000 });
  await page.evaluate(() => document.body.append("Go ahead"));
  // The task runs to its end: every later tool call is refused by the worker.
  let prompts = [];
  for (const deadline = Date.now() + 30_000; prompts.length < 5; ) {
    assert.ok(Date.now() < deadline, `the task did not finish: ${prompts.length} model calls`);
    await new Promise((r) => setTimeout(r, 200));
    prompts = await scriptedPrompts(chrome);
  }
  assert.match(prompts[3], /disabled on this site/, "the model is told why the tool did not run");
  assert.equal(await text(page, "#result"), "", "no tool ran on the disabled site");
  assert.equal(await page.evaluate(() => document.querySelector("signup-card").shadowRoot.getElementById("email").value), "");

  // The worker re-registers the content script without this host; then a reload gets nothing.
  const deadline = Date.now() + 10_000;
  for (;;) {
    const excluded = await chrome.console.evaluate(
      "/service-worker.js",
      `chrome.scripting.getRegisteredContentScripts().then((s) => s[0]?.excludeMatches ?? [])`,
    );
    if (excluded.includes(`http://${new URL(pages.url).hostname}/*`)) break;
    assert.ok(Date.now() < deadline, `the content script was not re-registered: ${excluded}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await page.reload({ waitUntil: "load" });
  assert.equal(await page.locator("hearth-overlay").count(), 0, "nothing is injected on a disabled site");
  await chrome.console.evaluate("/service-worker.js", `chrome.storage.sync.set({ settings: { disabledSites: [] } })`);
});

test("sources: a cited passage is a chip that scrolls the page to it; a citation of nothing is unverified; a claim of reading with nothing read is marked", { timeout: 90_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/article.html`);
  await useScript(chrome, [call("read_page"), done("The colony has forty-two nests [3]; herons also nest upriver [9].")]);
  await ask(page, "How many nests are there?");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  const prompts = await scriptedPrompts(chrome);
  assert.match(prompts[1], /\[3\] The volunteers counted forty-two nests/, "the passages are numbered for the model");
  assert.match(await overlayText(page, ".sources summary"), /Read: Herons of the estuary \(4 passages\)/);
  assert.equal(await overlayText(page, ".cite.unverified"), "[9]", "no tool returned a passage 9");
  const inView = () => page.evaluate(() => {
    const r = document.getElementById("count").getBoundingClientRect();
    return r.top >= 0 && r.bottom <= innerHeight;
  });
  assert.equal(await inView(), false, "the passage starts below the fold");
  await clickInOverlay(page, 'button.cite[data-cite="3"]');
  await waitForData(page, "passage", "3");
  assert.equal(await inView(), true, "the chip scrolled the page to passage 3");
  await screenshot(page, "agent-sources");

  // An answer that says it read the page, in a task that read nothing.
  await useScript(chrome, [done("I read the page: it is about herons.")]);
  await ask(page, "What is this page about? Answer from memory.");
  let badge = null;
  for (const deadline = Date.now() + 30_000; !badge; await new Promise((r) => setTimeout(r, 200))) {
    assert.ok(Date.now() < deadline, "no badge on the unbacked answer");
    badge = await overlayText(page, ".unbacked").catch(() => null);
  }
  assert.match(badge, /Hearth read nothing for it/);
});

test("a tool that outlasts its time limit: the worker answers for it (and cancels it in the tab), the model is told", { timeout: 90_000 }, async () => {
  const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);
  await inWorker(`globalThis.hearthTestHooks = { ...globalThis.hearthTestHooks, toolTimeLimitMs: 1500 }`);
  try {
    const page = await openAgentPage(chrome, `${pages.url}/agent/dead-button.html`);
    await useScript(chrome, [call("wait_for", `text:${str("All results loaded")},timeout_seconds:30`), done("The page never finished.", false)]);
    await ask(page, "Wait until all results are loaded.");
    assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
    const prompts = await scriptedPrompts(chrome);
    assert.match(prompts[1], /`wait_for` took longer than 1\.5 s and was stopped/);
  } finally {
    await inWorker(`delete globalThis.hearthTestHooks.toolTimeLimitMs`);
  }
});

test("a tool the user switched off: not offered, refused when the model calls it anyway, and by the worker whatever the engine says", { timeout: 90_000 }, async () => {
  const inWorker = (expression) => chrome.console.evaluate("/service-worker.js", expression);
  await inWorker(`chrome.storage.sync.set({ settings: { toolModes: { run_javascript: "off" } } })`);
  try {
    const page = await openAgentPage(chrome, `${pages.url}/agent/editor.html`);
    await useScript(chrome, [call("run_javascript", `code:${str("document.title = 'changed by a script'")}`), done("I could not run a script.", false)]);
    await ask(page, "Change the page's title.");
    assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
    const prompts = await scriptedPrompts(chrome);
    assert.doesNotMatch(prompts[0], /run_javascript/, "not declared to the model");
    assert.match(prompts[0], /declaration:snapshot/, "the other tools are");
    assert.match(prompts[1], /switched `run_javascript` off/, "the model is told why");
    assert.notEqual(await page.title(), "changed by a script");
    // A run_tool the worker receives from the engine's side, approved or not, is refused too.
    const tabId = await inWorker(`chrome.tabs.query({}).then((tabs) => tabs.find((t) => t.url === ${JSON.stringify(page.url())})?.id)`);
    const request = { request_id: 1, tab_id: tabId, name: "run_javascript", arguments: { code: "document.title = 'changed by a script'" }, judged_url: page.url(), approved: [{ kind: "runs_javascript" }, { kind: "user_asks_every_time" }] };
    const reply = await chrome.console.evaluate("/offscreen.html", `chrome.runtime.sendMessage(${JSON.stringify({ kind: "run_tool", request })})`);
    assert.equal(reply?.status, "failed", JSON.stringify(reply));
    assert.match(reply.message, /switched `run_javascript` off/);
    // Set back to "ask every time" (the default), a call without that approval is refused as well.
    await inWorker(`chrome.storage.sync.set({ settings: { toolModes: { run_javascript: "ask" } } })`);
    const unapproved = { ...request, approved: [{ kind: "runs_javascript" }] };
    const refused = await chrome.console.evaluate("/offscreen.html", `chrome.runtime.sendMessage(${JSON.stringify({ kind: "run_tool", request: unapproved })})`);
    assert.match(refused?.message ?? "", /approve every use of `run_javascript`/, JSON.stringify(refused));
    assert.notEqual(await page.title(), "changed by a script", "the page never ran it");
  } finally {
    await inWorker(`chrome.storage.sync.set({ settings: {} })`);
  }
});

test("the page's selection goes with the task as the page's words; what the user types stays theirs", { timeout: 120_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/editor.html?selection`);
  await useScript(chrome, [done("Noted.")]);
  await page.evaluate(() => {
    const range = document.createRange();
    range.selectNodeContents(document.querySelector("h1"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
  });
  // The keyboard shortcut's message: open the overlay with the selection.
  const url = page.url();
  await chrome.console.evaluate("/service-worker.js", `chrome.tabs.query({}).then((tabs) => chrome.tabs.sendMessage(tabs.find((t) => t.url === ${JSON.stringify(url)}).id, { kind: "open_overlay" }, { frameId: 0 }))`);
  await waitForData(page, "state", "open");
  await ask(page, "> my own words, not the page's");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  const prompt = (await scriptedPrompts(chrome))[0];
  const turn = prompt.slice(prompt.lastIndexOf("<|turn>user\n"));
  assert.match(turn, /^<\|turn>user\nText the user selected on the page:\n<<<UNTRUSTED PAGE CONTENT from [^>]+>>>\nWrite a note\n<<<END UNTRUSTED PAGE CONTENT>>>\n\n> my own words, not the page's\n/, turn);
});

test("the console stayed clean", () => {
  assert.deepEqual(chrome.console.errors, []);
});
