// Tasks across tabs: the composer's "Tabs" chooser attaches other open tabs to a message (their
// text goes with it as those pages' words, cited like the page's own passages), the model may ask
// to read a tab the user did not attach (a card asks first), and may act in a tab of the task
// (`switch_tab`), which is then under the task's fence: what that tab's page does off the task's
// sites is held, and the tab is taken back, never closed. A tab closed mid-task is told to the
// model. Effects are read on the pages and on the other site's log.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { servePages } from "../lib/pages.mjs";
import { loggingServer } from "../lib/server.mjs";
import { clickInOverlay, overlayEval, overlayHost, overlayText, queryOverlay, screenshot } from "../lib/overlay.mjs";
import { answerFenceCard, ask, call, chooseOption, decide, done, indexOf, openAgentPage, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";

let pages;
let other;
let chrome;
before(async () => {
  pages = await servePages();
  // Another site: `localhost` and `127.0.0.1` are different sites.
  other = await loggingServer("localhost", false);
  chrome = await launch();
});
after(async () => {
  await chrome?.close();
  await pages?.close();
  await other?.close();
});

/** Opens `path` in a background tab and waits for Hearth's content script there. */
async function openTab(path) {
  const page = await chrome.context.newPage();
  await page.goto(`${pages.url}/tabs/${path}`);
  await overlayHost(page);
  return page;
}

/** The browser's id of the tab whose title is `title`. */
async function tabIdOf(title) {
  const tabs = JSON.parse(await chrome.console.evaluate("/service-worker.js", "chrome.tabs.query({}).then((tabs) => JSON.stringify(tabs.map((t) => [t.id, t.title])))"));
  const found = tabs.find(([, t]) => t === title);
  assert.ok(found, `a tab titled ${title}: ${JSON.stringify(tabs)}`);
  return found[0];
}

/** Opens the composer's tab chooser and attaches the tabs titled `titles`, in that order. */
async function attach(page, titles) {
  await clickInOverlay(page, "button.tabs-button");
  await until(async () => (await queryOverlay(page, ".tab-choice")).length >= titles.length, "the open tabs in the chooser");
  for (const title of titles) await clickInOverlay(page, `.tab-choice input[data-tab-id="${await tabIdOf(title)}"]`);
  await until(async () => (await queryOverlay(page, ".tab-chips .tab-chip")).length === titles.length, "a chip for each attached tab");
}

test("two attached tabs go with the message as their sites' words and are cited; reading a tab not attached asks", { timeout: 180_000 }, async () => {
  const mail = await openTab("mail.html");
  const notes = await openTab("notes.html");
  const bank = await openTab("bank.html");
  const page = await openAgentPage(chrome, `${pages.url}/tabs/form.html`);
  await useScript(chrome, [
    call("read_tab", "tab:{{tab:Bank statement}}"),
    done("Ship it to 12 Heron Lane, Leith [2], for order 4471 [4]; your balance is enough [6]."),
  ]);
  await attach(page, ["Your order shipped", "Notes"]);
  const chooser = await overlayText(page, ".tab-choices");
  for (const title of ["Your order shipped", "Notes", "Bank statement"]) assert.ok(chooser.includes(title), `the chooser lists ${title}: ${chooser}`);
  assert.ok(chooser.includes(new URL(pages.url).origin), `each with its site: ${chooser}`);
  await screenshot(page, "tabs-chooser");
  // Keyboard: the focus is on the box last checked; Esc closes the chooser, the attached tabs stay.
  await page.keyboard.press("Escape");
  await until(async () => !(await overlayEval(page, ".tab-chooser", "function () { return !this.hidden; }")), "the chooser closed");

  await ask(page, "Which address and order is this about, and can I pay?");
  await decide(page, "allow_once"); // read_tab of the bank tab, which was not attached
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  const prompts = await scriptedPrompts(chrome);
  const first = prompts[0];
  assert.match(first, /A tab the user attached to this message \(tab \d+\):\n<<</, "an attached tab is fenced as its page's words");
  assert.match(first, /\[2\] Ship to 12 Heron Lane, Leith\./);
  assert.match(first, /\[4\] Order number 4471\./);
  assert.doesNotMatch(first, /Balance/, "a tab not attached is not read with the message");
  assert.match(first, /tab \d+: Bank statement/, "the other open tabs are listed for the model");
  assert.match(prompts[1], /\[6\] Balance: 1,234\.56\./, "read_tab's passages are numbered on");
  const bubble = await overlayText(page, ".msg.user .attached-tabs");
  assert.ok(bubble.includes("Your order shipped") && bubble.includes("Notes"), `the message shows its tabs: ${bubble}`);
  // Each cited passage is a source: no citation is unverified.
  for (const n of ["2", "4", "6"]) assert.equal((await queryOverlay(page, `button.cite[data-cite="${n}"]`)).length, 1, `[${n}] is a chip`);
  assert.equal((await queryOverlay(page, ".cite.unverified")).length, 0);
  // The answer with its chips in view.
  await overlayEval(page, ".transcript", "function () { this.scrollTop = this.scrollHeight; }");
  await screenshot(page, "tabs-answer");
  // Reading changed nothing in the tabs read.
  for (const [tab, path] of [[mail, "mail.html"], [notes, "notes.html"], [bank, "bank.html"]]) assert.equal(new URL(tab.url()).pathname, `/tabs/${path}`);
  for (const tab of [mail, notes, bank, page]) await tab.close();
});

test("acting in an attached tab: the page tools work there under the task's fence, and a closed tab is told to the model", { timeout: 180_000 }, async () => {
  const cart = await openTab(`gifts.html?other=${encodeURIComponent(other.url)}`);
  const page = await openAgentPage(chrome, `${pages.url}/tabs/form.html`);
  await useScript(chrome, [
    call("switch_tab", "tab:{{tab:Gift options}}"),
    call("snapshot"),
    call("click", `index:${indexOf('"Add gift wrap"')}`),
    // The button's script moves the tab to another site: the fence holds it.
    call("click", `index:${indexOf('"Continue"')}`),
    call("ask_user", `question:${str("Anything else?")},options:[${str("No")},${str("Yes")}]`),
    // The cart tab is closed by now.
    call("click", `index:${indexOf('"Add gift wrap"')}`),
    done("Gift wrap added."),
  ]);
  await attach(page, ["Gift options"]);
  await ask(page, "Add gift wrap in my gift options tab");
  await answerFenceCard(page, ["localhost"], "deny", "tabs-fence");
  assert.equal(await waitForTask(page, ["ask", "done", "failed", "paused"]), "ask");
  await until(async () => (await cart.evaluate(() => sessionStorage.getItem("gift")).catch(() => null)) === "yes", "the click acted in the gift options tab");
  assert.equal(other.log.filter((line) => line.includes("/leak")).length, 0, "the other site got nothing");
  assert.equal(cart.isClosed(), false, "the user's tab is taken back, never closed");
  await until(async () => new URL(cart.url()).pathname === "/tabs/gifts.html", "the gift options tab back on its page");
  // The task's own tab was not touched.
  assert.equal(await page.evaluate(() => document.getElementById("street").value), "");
  await cart.close();
  await chooseOption(page, "No");
  assert.equal(await waitForTask(page, ["done", "failed", "paused"]), "done");
  const prompts = await scriptedPrompts(chrome);
  assert.match(prompts.at(-1), /where you were acting, was closed/, "the model is told the tab is gone");
  assert.match(prompts[1], /Now acting in tab \d+: "Gift options"/);
  await page.close();
});

test("a fooled model cannot act in a tab the user did not give the task: switch_tab is refused without a card, and nothing happens there", { timeout: 180_000 }, async () => {
  const gifts = await openTab(`gifts.html?other=${encodeURIComponent(other.url)}`);
  await gifts.evaluate(() => sessionStorage.removeItem("gift"));
  const mail = await openTab("mail.html");
  const page = await openAgentPage(chrome, `${pages.url}/tabs/form.html`);
  // The model plays one that obeys words it read: act in the gift options tab, which is open but
  // was not attached, then look at the page it would act on.
  await useScript(chrome, [call("switch_tab", "tab:{{tab:Gift options}}"), call("snapshot"), done("Done.")]);
  await attach(page, ["Your order shipped"]);
  await ask(page, "Where does my order ship to?");
  assert.equal(await waitForTask(page, ["done", "failed", "paused", "confirm"]), "done", "no card was shown for it");
  const prompts = await scriptedPrompts(chrome);
  assert.match(prompts[1], /Tab \d+ is not a tab of this task/);
  // The page tools still act in the task's own tab: its snapshot, not the gift options'.
  assert.match(prompts[2], /Page: Delivery address/);
  assert.doesNotMatch(prompts[2], /Add gift wrap/);
  assert.equal(await gifts.evaluate(() => sessionStorage.getItem("gift")), null, "nothing was done in the tab not given");
  assert.equal(await gifts.evaluate(() => document.getElementById("state").textContent), "gift wrap: no");
  for (const tab of [gifts, mail, page]) await tab.close();
});
