// MiniWoB++ tasks solved through Hearth's DOM tools by scripted policies that read only the tools'
// text (tests/miniwob). Every task in EXPECTED must reach exactly its expected number of
// successes: fewer is a regression, more is an improvement to record here. The pages come from the
// `miniwob` wheel on PyPI, cached under $HEARTH_CACHE (see tests/miniwob/fetch-pages.mjs).
// Results: artifacts/miniwob/results.json; the table is printed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { formatResult, oneLine, renderSnapshot } from "../miniwob/render.mjs";
import { runSuite, table, writeResults } from "../miniwob/runner.mjs";

const EPISODES = 5;

/** Successes out of EPISODES per task; below 5, why (the tool-layer gap or the task's limit). */
const EXPECTED = {
  "click-button": 5,
  "click-button-sequence": 5,
  "click-test-2": 5,
  "click-link": 5,
  "click-checkboxes": 5,
  "click-option": 5,
  "click-tab": 5,
  // Clicks land on what is on top at the element's text (the <a> inside the role=tab <li>).
  "click-tab:tab-role": 5,
  "click-tab-2": 5,
  "click-collapsible": 5,
  "click-dialog": 5,
  "click-dialog-2": 5,
  "click-widget": 5,
  // Submenus open when the pointer rests on their parent (hover, which waits out the 300 ms delay).
  "click-menu": 5,
  "click-menu-2": {
    successes: 4,
    why: "half the instructions name the item by an icon (an empty span drawn by its class), which neither read_page nor the snapshot shows; items named by their label pass, in submenus too",
  },
  "enter-text": 5,
  "enter-text-2": 5,
  "enter-password": 5,
  "login-user": 5,
  "login-user-popup": 5,
  "focus-text": 5,
  "focus-text-2": 5,
  "choose-list": 5,
  "click-scroll-list": 5,
  "enter-date": 5,
  "enter-time": 5,
  "read-table": 5,
  "multi-layouts": 5,
  // type waits out the widget's 300 ms delay; the <li>s of its <ul tabindex=0> are listed one by one.
  "use-autocomplete": 5,
  "use-autocomplete:click-suggestion": 5,
  "search-engine": 5,
  "navigate-tree": {
    successes: 3,
    why: "an open folder lists its entries, but a closed one shows only its name and nothing tells a folder from a file (class and icon only), so names inside closed folders are not found; top-level items pass",
  },
  // Reply/Forward are listed as the parts of their pointer bar; send, star and trash by class or id.
  "email-inbox": 5,
  // jQuery UI's slider handle, listed as span "(icon: slider handle)", moves with PageUp/PageDown
  // and the arrows (press_key); its value is the number beside it in read_page's text.
  "form-sequence": 5,
  "use-slider": 5,
  "use-slider-2": 5,
  // The page refuses typed text; the arrow keys step jQuery UI's spinner.
  "use-spinner": 5,
  "social-media": {
    successes: 0,
    why: "every control is an icon (CSS content image, no name) with a pointer cursor only on :hover and no tabindex, so nothing looks clickable: the snapshot is empty",
  },
};

test("the renderer matches Snapshot::render (crates/agent/src/page.rs)", () => {
  const snapshot = {
    page: { url: "https://shop.test/", title: "Shop" },
    elements: [
      { index: 3, tag: "a", text: "Home", depth: 0 },
      { index: 12, tag: "button", text: "Place   order", attributes: [["type", "submit"]], depth: 0 },
    ],
  };
  assert.equal(renderSnapshot(snapshot), '[3] a "Home"\n[12] button "Place order" type="submit"\n');
  assert.equal(renderSnapshot(snapshot, new Set([3])), '[3] a "Home"\n*[12] button "Place order" type="submit"\n');
  const field = {
    index: 5, tag: "input", role: "textbox", text: 'Say "hi"', depth: 2,
    attributes: [["type", "input"], ["id", "q"], ["placeholder", "x".repeat(70)], ["value", ""]],
  };
  // Depth indents; ids and empty values are not shown; `type` equal to the tag is left out; caps.
  assert.equal(renderSnapshot({ page: snapshot.page, elements: [field] }), `    [5] textbox "Say 'hi'" placeholder="${"x".repeat(59)}…"\n`);
  assert.equal(oneLine("a\u00a0 b\u2003c", 80), "a b c");
  const combo = { index: 4, tag: "input", role: "combobox", text: "Fruit", depth: 0, attributes: [["expanded", "false"], ["id", "fruit"]] };
  assert.equal(renderSnapshot({ page: snapshot.page, elements: [combo] }), '[4] combobox "Fruit" expanded="false"\n');
  const state = {};
  const out = formatResult({ output: { text: "", snapshot, page: snapshot.page, from_page: true } }, state);
  assert.ok(out.startsWith("<<<UNTRUSTED PAGE CONTENT from https://shop.test/>>>\nPage: Shop — https://shop.test/\n[3] a"), out);
  assert.deepEqual([...state.latest], [3, 12]);
  assert.equal(formatResult({ error: "No element [9]; take a snapshot first." }, state), "Error: No element [9]; take a snapshot first.");
});

test("MiniWoB++ tasks through the DOM tools", { timeout: 150_000 }, async () => {
  const suite = await runSuite({ tasks: Object.keys(EXPECTED), episodes: EPISODES });
  console.log(table(suite));
  console.log(`results: ${writeResults(suite)}`);
  const problems = [];
  for (const t of suite.tasks) {
    const want = typeof EXPECTED[t.task] === "number" ? { successes: EXPECTED[t.task] } : EXPECTED[t.task];
    if (t.pageErrors.length > 0) problems.push(`${t.task}: the page logged errors: ${t.pageErrors.join("; ")}`);
    if (t.successes < want.successes) {
      problems.push(`${t.task}: ${t.successes}/${t.episodes}, expected ${want.successes} (regression): ${Object.keys(t.failures).join(" | ")}`);
    } else if (t.successes > want.successes) {
      problems.push(`${t.task}: ${t.successes}/${t.episodes}, expected ${want.successes} (improved: update EXPECTED; it failed because ${want.why})`);
    }
  }
  assert.deepEqual(problems, []);
});
