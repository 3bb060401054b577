// Eyes for the agent. The scripted model asks for a screenshot of a page whose chart is drawn on a
// canvas: the worker captures the tab, the engine decodes it and encodes it with the test model's
// (tiny, random) vision tower, and the prompt holds the image's soft tokens (the engine's own
// counts, through a test hook). click_at on the canvas hits the drawn target (the page records
// where); click_at over another site's frame asks, and a denial holds (the frame's button is
// never clicked). The screenshot's card shows its thumbnail. With another tab in front of the
// task's, a screenshot is refused: the model never sees another tab (threat model row 19).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch, until } from "../lib/browser.mjs";
import { overlayEval, overlayText, queryOverlay, screenshot } from "../lib/overlay.mjs";
import { ask, call, decide, done, openAgentPage, scriptedImagePrompts, scriptedPrompts, str, useScript, waitForTask } from "../lib/agent.mjs";
import { servePages } from "../lib/pages.mjs";

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

/** The point of the viewport at (x, y) CSS pixels, as click_at takes it: 0–1000 across and down. */
const normalized = (page, x, y) => page.evaluate(([x, y]) => [Math.round((x / innerWidth) * 1000), Math.round((y / innerHeight) * 1000)], [x, y]);

test("the model sees a screenshot and clicks a canvas by position; another site's frame asks", { timeout: 600_000 }, async () => {
  const frameUrl = `${pages.crossOriginUrl}/agent/frame-button.html`;
  const page = await openAgentPage(chrome, `${pages.url}/agent/canvas.html?frame=${encodeURIComponent(frameUrl)}`);
  // The red target is drawn at (300, 90) of the canvas, whose box starts at (41, 61) (its border).
  const [tx, ty] = await normalized(page, 41 + 300, 61 + 90);
  const [fx, fy] = await normalized(page, 40 + 150, 380 + 50);
  await useScript(chrome, [call("screenshot"), call("click_at", `x:${tx},y:${ty}`), call("click_at", `x:${fx},y:${fy}`), done("Clicked the red target.")]);
  await ask(page, "Click the red target on the chart.");

  // Over the other site's frame: the card asks, names the origin, and the point is marked.
  await waitForTask(page, ["confirm"], 300_000);
  const card = await overlayText(page, ".card.confirm");
  assert.match(card, new RegExp(new URL(pages.crossOriginUrl).host.replace(/[.:]/g, "\\$&")), card);
  assert.equal(await overlayEval(page, ".point-marker", "function () { return this.hidden; }"), false, "the point is marked on the page");
  await screenshot(page, "agent-vision");
  await decide(page, "deny");
  await waitForTask(page, ["done"], 120_000);

  // The canvas got one click, on the target; the frame's button none.
  const clicks = await page.locator("#clicks").textContent();
  assert.match(clicks, /^hit \d+,\d+;$/, clicks);
  const frame = page.frames().find((f) => f.url().startsWith(pages.crossOriginUrl));
  assert.equal(await frame.locator("#buy").textContent(), "Buy now", "the denied click never reached the frame");

  // The engine turned the screenshot into the tower's soft tokens at the placeholder.
  const prepared = await scriptedImagePrompts(chrome);
  assert.ok(prepared.length >= 1, JSON.stringify(prepared));
  for (const p of prepared) {
    assert.equal(p.error, null, p.error);
    assert.equal(p.soft_tokens.length, 1, "one screenshot in each prompt after it was taken");
    assert.ok(p.soft_tokens[0] > 0 && p.soft_tokens[0] <= 280, `${p.soft_tokens[0]} soft tokens`);
    assert.equal(p.model_tokens, p.text_tokens + p.soft_tokens[0] + 1, "the placeholder became <|image>, its soft tokens and <image|>");
  }
  const prompts = await scriptedPrompts(chrome);
  assert.equal(prompts[0].split("<|image|>").length - 1, 0);
  assert.equal(prompts[1].split("<|image|>").length - 1, 1, "the screenshot follows its tool response");
  assert.match(prompts[0], /declaration:screenshot/, "a model that sees is offered screenshot");

  // The screenshot's card shows what the model saw.
  await until(async () => (await queryOverlay(page, '.card.tool[data-tool="screenshot"] img.tool-thumbnail')).length === 1, "the thumbnail");
  const src = await overlayEval(page, '.card.tool[data-tool="screenshot"] img.tool-thumbnail', "function () { return this.getAttribute(\"src\"); }");
  assert.match(src, /^data:image\/jpeg;base64,/);
  await page.close();
});

test("a chart wrapped in another site's link while the click is on its way is not clicked", { timeout: 300_000 }, async () => {
  const requests = [];
  const offSite = `${pages.crossOriginUrl}/agent/frame-button.html?from=wrap`;
  const page = await openAgentPage(chrome, `${pages.url}/agent/canvas.html?wrap=${encodeURIComponent(offSite)}`);
  page.on("request", (r) => requests.push(r.url()));
  const [tx, ty] = await normalized(page, 41 + 300, 61 + 90);
  await useScript(chrome, [call("screenshot"), call("click_at", `x:${tx},y:${ty}`), done("Tried.")]);
  await ask(page, "Click the red target on the chart.");
  await waitForTask(page, ["done"], 300_000);
  // The chart was judged a harmless canvas; the page made it a link on mousedown: the click was not sent.
  assert.equal(await page.locator("#clicks").textContent(), "", "the canvas got no click");
  assert.ok(page.url().startsWith(pages.url), page.url());
  assert.ok(!requests.some((u) => u.includes("from=wrap")), requests.join("\n"));
  const prompts = await scriptedPrompts(chrome);
  assert.match(prompts.at(-1), /changed since the snapshot/, "the model is told what happened");
  await page.close();
});

test("a screenshot shows only the task's tab: with another site's tab in front, nothing is captured", { timeout: 300_000 }, async () => {
  const page = await openAgentPage(chrome, `${pages.url}/agent/canvas.html`);
  const prepared = (await scriptedImagePrompts(chrome)).length;
  await useScript(chrome, [call("wait_for", `text:${str("Go on")},timeout_seconds:60`), call("screenshot"), done("Looked.")]);
  await ask(page, "Look at the chart when it says go on.");
  // The user turns to their other tab (another site: what it shows is theirs, not the task's)
  // while the task waits; then the task's page lets the task go on in the background.
  const other = await chrome.context.newPage();
  await other.goto(`${pages.crossOriginUrl}/agent/article.html`);
  await other.bringToFront();
  const active = () => chrome.console.evaluate("/service-worker.js", `chrome.tabs.query({ active: true, lastFocusedWindow: true }).then(([t]) => t?.url ?? "")`);
  await until(async () => (await active()).startsWith(pages.crossOriginUrl), "the other tab in front");
  await page.evaluate(() => document.body.insertAdjacentHTML("beforeend", "<p>Go on</p>"));
  assert.equal(await waitForTask(page, ["done", "failed", "paused"], 120_000), "done");

  // No picture reached the engine, and the model was told why.
  assert.equal((await scriptedImagePrompts(chrome)).length, prepared, "no screenshot was prepared for the model");
  const prompts = await scriptedPrompts(chrome);
  assert.match(prompts.at(-1), /not the one shown in its window/, "the model is told it cannot see now");
  assert.equal(prompts.at(-1).split("<|image|>").length - 1, 0, "no image in the prompt");
  await other.close();
  await page.close();
});
