// The chat's pure parts, without a browser: the Markdown parser (what can become a link, what
// stays text), the transcript (events → entries and task state) and the patches its owner sends its
// views. Bundled with esbuild on the fly.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { before, test } from "node:test";
import { build } from "esbuild";

const ROOT = resolve(import.meta.dirname, "../..");
let md;
let tr;
let patch;

async function load(entry) {
  const out = await build({ absWorkingDir: ROOT, entryPoints: [entry], bundle: true, format: "esm", platform: "neutral", write: false, logLevel: "warning" });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

before(async () => {
  md = await load("src/chat/view/markdown.ts");
  tr = await load("src/chat/transcript.ts");
  patch = await load("src/chat/patch.ts");
});

test("a view kept in step by patches holds what the owner holds; a malformed patch is refused", () => {
  // The owner: a task with a streamed answer, each step sent as the patch of what it touched.
  const owner = tr.emptyTranscript();
  let view = tr.emptyTranscript();
  const send = (p) => {
    const applied = patch.applyPatch(view, JSON.parse(JSON.stringify(p)));
    assert.ok(applied, "a patch applies");
    view = applied.transcript;
    return applied;
  };
  send(patch.patchOf(owner, "full"));
  const steps = [
    () => tr.userMessage(owner, "Summarize"),
    () => tr.applyUpdate(owner, { update: "event", event: { type: "tool_start", call_id: "c1", name: "read_page", arguments: {} } }),
    () => tr.applyUpdate(owner, { update: "event", event: { type: "token", text: "The shop" } }),
    () => tr.applyUpdate(owner, { update: "event", event: { type: "token", text: " sells lanterns." } }),
    () => tr.applyUpdate(owner, { update: "event", event: { type: "done", result: "The shop sells lanterns.", success: true } }),
  ];
  let touched = new Set();
  for (const [i, step] of steps.entries()) {
    for (const id of step()) touched.add(id);
    // Patches go every other step (bursts of tokens go as one).
    if (i % 2 === 1 || i === steps.length - 1) {
      const applied = send(patch.patchOf(owner, touched));
      assert.deepEqual(applied.touched, [...touched].sort((a, b) => a - b));
      assert.equal(applied.removed, false);
      touched = new Set();
    }
  }
  assert.deepEqual(view, owner, "the view's copy is the owner's");
  assert.equal(view.task, "done");

  // Old entries dropped by the owner (MAX_ENTRIES) go from the view too; a clear comes whole.
  owner.entries.shift();
  const dropped = send(patch.patchOf(owner, new Set()));
  assert.equal(dropped.removed, true);
  assert.deepEqual(view.entries, owner.entries);
  const cleared = send(patch.patchOf(tr.emptyTranscript(), "full"));
  assert.equal(cleared.removed, true);
  assert.deepEqual(view, tr.emptyTranscript());

  // Not a patch: refused, the copy unchanged.
  for (const junk of [null, "x", { full: true }, { full: false, entries: [], firstId: 1, state: { task: 3, nextId: 1 } }]) assert.equal(patch.applyPatch(view, junk), null);
  // Entries without an id or a kind are dropped; the rest is kept as sent.
  const sent = { full: true, entries: [{ id: 1, kind: "user", text: "hi" }, { kind: "user", text: "no id" }, "x"], firstId: 1, state: { ...tr.emptyTranscript(), nextId: 2 } };
  delete sent.state.entries;
  assert.deepEqual(patch.applyPatch(view, sent).transcript.entries, [{ id: 1, kind: "user", text: "hi" }]);
});

/** All nodes of a parsed tree, depth first. */
function* walk(nodes) {
  for (const node of nodes) {
    yield node;
    if (node.children) yield* walk(node.children);
    if (node.items) for (const item of node.items) yield* walk(item);
  }
}
const textOf = (nodes) => [...walk(nodes)].map((n) => (n.type === "text" || n.type === "code" ? n.text : "")).join("");

test("HTML in model text stays text", () => {
  const blocks = md.parseMarkdown('Look: <img src=x onerror="alert(1)"> and <script>alert(2)</script>');
  assert.deepEqual(blocks.map((b) => b.type), ["paragraph"]);
  assert.equal(textOf(blocks), 'Look: <img src=x onerror="alert(1)"> and <script>alert(2)</script>');
});

test("links: only absolute http(s), everything else is plain text", () => {
  const links = (s) => [...walk(md.parseMarkdown(s))].filter((n) => n.type === "link").map((n) => n.href);
  assert.deepEqual(links("[a](https://example.com/x?y=1)"), ["https://example.com/x?y=1"]);
  assert.deepEqual(links("[a](javascript:alert(1))"), []);
  assert.deepEqual(links("[a](JaVaScRiPt:alert(1))"), []);
  assert.deepEqual(links("[a](data:text/html,<b>x</b>)"), []);
  assert.deepEqual(links("[a](/relative)"), []);
  assert.deepEqual(links("see https://example.org/a_b, then"), ["https://example.org/a_b"]);
  assert.equal(textOf(md.parseMarkdown("[click me](javascript:alert(1))")), "click me");
  assert.equal(md.safeHref("vbscript:x"), null);
  assert.equal(md.safeHref(" http://a.test "), "http://a.test/");
});

test("inline spans, blocks and lists", () => {
  const [p] = md.parseMarkdown("**bold** and *em* and `a<b>` and snake_case_name");
  assert.deepEqual(p.children.map((n) => n.type), ["strong", "text", "em", "text", "code", "text"]);
  assert.equal(p.children[4].text, "a<b>");
  assert.equal(p.children[5].text, " and snake_case_name");

  const blocks = md.parseMarkdown("# Title\n\n- one\n- two\n  - nested\n\n1. first\n2. second\n\n```js\nconst x = '<b>';\n```\n\n> quoted\n> more");
  assert.deepEqual(blocks.map((b) => b.type), ["heading", "list", "list", "code", "quote"]);
  assert.equal(blocks[1].items.length, 2);
  assert.equal(blocks[1].items[1][1].type, "list", "the nested list belongs to the second item");
  assert.equal(blocks[2].ordered, true);
  assert.equal(blocks[3].lang, "js");
  assert.equal(blocks[3].text, "const x = '<b>';");
  assert.equal(textOf(blocks[4].children), "quoted\nmore".replace("\n", ""));
});

test("a code block still streaming (no closing fence) renders what it has", () => {
  const blocks = md.parseMarkdown("Here:\n```\nline 1\nline 2");
  assert.deepEqual(blocks.map((b) => b.type), ["paragraph", "code"]);
  assert.equal(blocks[1].text, "line 1\nline 2");
});

test("unclosed markers mid-stream stay literal", () => {
  assert.equal(textOf(md.parseMarkdown("**bold so far")), "**bold so far");
  assert.equal(textOf(md.parseMarkdown("2 * 3 * 4")), "2 * 3 * 4");
});

const ev = (event) => ({ update: "event", event });
const ended = (outcome) => ({ update: "ended", outcome });

test("transcript: a task with a tool call, a confirmation and a streamed direct answer", () => {
  const t = tr.emptyTranscript();
  tr.userMessage(t, "Delete my draft");
  assert.equal(t.task, "running");
  tr.applyUpdate(t, ev({ type: "thinking", text: "I should " }));
  tr.applyUpdate(t, ev({ type: "thinking", text: "look." }));
  tr.applyUpdate(t, ev({ type: "tool_start", call_id: "c1", name: "snapshot", arguments: {} }), 1000);
  tr.applyUpdate(t, ev({ type: "tool_result", call_id: "c1", name: "snapshot", ok: true, output: "[1] button Delete" }), 1250);
  const tool = t.entries.find((e) => e.kind === "tool");
  assert.equal(tool.ms, 250);
  assert.equal(tool.ok, true);
  assert.equal(tr.toolCardCount(t), 1);

  const [confirmId] = tr.applyUpdate(t, ev({ type: "confirm_request", call_id: "c2", name: "click", arguments: { index: 1 }, risk: "high", reasons: [{ kind: "dangerous_word", word: "delete" }] }));
  tr.applyUpdate(t, ended({ kind: "needs_confirmation", call_id: "c2" }));
  assert.equal(t.task, "confirm");
  assert.deepEqual(tr.decide(t, confirmId, "allow_once"), [confirmId]);
  assert.deepEqual(tr.decide(t, confirmId, "deny"), [], "a decision is made once");
  assert.equal(t.task, "running");

  tr.applyUpdate(t, ev({ type: "token", text: "Deleted " }));
  tr.applyUpdate(t, ev({ type: "token", text: "it." }));
  tr.applyUpdate(t, ev({ type: "usage", prompt_tokens: 900, prefill_tokens: 40, completion_tokens: 12, tokens_per_second: 21.5 }));
  tr.applyUpdate(t, ev({ type: "done", result: "Deleted it.", success: true }));
  tr.applyUpdate(t, ended({ kind: "done", result: "Deleted it.", success: true }));
  assert.equal(t.task, "done");
  assert.equal(t.answer, "Deleted it.");
  assert.deepEqual(t.entries.map((e) => e.kind), ["user", "thinking", "tool", "confirm", "result"]);
  assert.equal(t.entries[1].text, "I should look.");
  assert.equal(t.usage.tokensPerSecond, 21.5);
});

test("transcript: ask_user, pause, continue, failures", () => {
  const t = tr.emptyTranscript();
  tr.userMessage(t, "Book it");
  tr.applyUpdate(t, ev({ type: "ask_user", call_id: "a", question: "Which day?", options: ["Mon", "Tue"] }));
  tr.applyUpdate(t, ended({ kind: "needs_answer", call_id: "a" }));
  assert.equal(tr.pendingAsk(t)?.question, "Which day?");
  tr.answer(t, null, "Tue");
  assert.equal(tr.pendingAsk(t), undefined);
  assert.equal(t.task, "running");

  tr.applyUpdate(t, ev({ type: "tool_start", call_id: "b", name: "click", arguments: { index: 2 } }));
  tr.applyUpdate(t, ev({ type: "paused", reason: { kind: "max_iterations", limit: 25 } }));
  tr.applyUpdate(t, ended({ kind: "paused", reason: { kind: "max_iterations", limit: 25 } }));
  assert.equal(t.task, "paused");
  assert.equal(t.canContinue, true);
  assert.equal(t.entries.find((e) => e.kind === "tool").ms, -1, "a tool without a result is marked interrupted");
  assert.equal(t.entries.filter((e) => e.kind === "notice").length, 1, "the pause is shown once");
  tr.continued(t);
  assert.equal(t.task, "running");

  tr.applyUpdate(t, ev({ type: "error", error: { kind: "empty_answer" }, recoverable: true }));
  tr.applyUpdate(t, ended({ kind: "failed", error: { kind: "empty_answer" } }));
  assert.equal(t.task, "failed");
  assert.equal(t.canContinue, true);
  assert.equal(t.entries.filter((e) => e.kind === "error").length, 1);

  tr.applyUpdate(t, { update: "refused", refusal: { kind: "no_task" } });
  assert.equal(t.canContinue, false, "a refused action cannot be continued");
  assert.deepEqual(t.entries.at(-1).refusal, { kind: "no_task" }, "the refusal is kept as data, shown in the browser's language");
  tr.applyUpdate(t, { update: "refused", refusal: { kind: "no_task" } });
  assert.equal(t.entries.filter((e) => e.kind === "refused").length, 1, "the same refusal again adds no card");
});

test("transcript: steering keeps the task, a new task clears the answer; storage round trip", () => {
  const t = tr.emptyTranscript();
  tr.userMessage(t, "first");
  tr.applyUpdate(t, ev({ type: "done", result: "one", success: true }));
  assert.equal(t.answer, "one");
  tr.userMessage(t, "second");
  assert.equal(t.answer, null);
  tr.userMessage(t, "and also this", false);
  assert.equal(t.task, "running");
  tr.userMessage(t, "queued", true);
  const revived = tr.reviveTranscript(JSON.parse(JSON.stringify(t)));
  assert.deepEqual(revived.entries.map((e) => e.text ?? e.kind), ["first", "one", "second", "and also this"], "unsent messages are not restored");
  assert.equal(tr.reviveTranscript({ version: 2 }), null);
  assert.equal(tr.reviveTranscript("junk"), null);
});

test("transcript: a confirmation's target (what it acts on) is kept when it has the right shape", () => {
  const t = tr.emptyTranscript();
  const confirm = (extra) => {
    const [id] = tr.applyUpdate(t, ev({ type: "confirm_request", call_id: `c${t.nextId}`, name: "click", arguments: { index: 4 }, risk: "high", reasons: [], ...extra }));
    return t.entries.find((e) => e.id === id);
  };
  const full = confirm({ target: { description: "the button “Place order”", index: 4, destination: "shop.example", text: null } });
  assert.deepEqual(full.target, { description: "the button “Place order”", index: 4, destination: "shop.example", text: null });
  assert.equal(confirm({}).target, undefined, "an engine without targets: no target");
  assert.equal(confirm({ target: null }).target, undefined);
  assert.equal(confirm({ target: "junk" }).target, undefined);
  assert.deepEqual(confirm({ target: { description: 7, index: "4", text: "••••••" } }).target, { description: "", index: null, destination: null, text: "••••••" }, "wrong field types are dropped");
  // Stored before targets existed: revived as it was.
  const revived = tr.reviveTranscript(JSON.parse(JSON.stringify(t)));
  assert.equal(revived.entries[1].target, undefined);
  assert.equal(revived.entries[0].target.destination, "shop.example");
});

test("transcript: the code of a run_javascript confirmation is kept whole; other long arguments are cut", () => {
  const t = tr.emptyTranscript();
  const code = `/* ${"x".repeat(5000)} */ document.title`;
  tr.applyUpdate(t, ev({ type: "confirm_request", call_id: "j", name: "run_javascript", arguments: { code, note: "y".repeat(5000) }, risk: "critical", reasons: [{ kind: "runs_javascript" }] }));
  const entry = t.entries.at(-1);
  assert.equal(entry.args.code, code);
  assert.equal(entry.args.note.length, 2001);
  tr.applyUpdate(t, ev({ type: "confirm_request", call_id: "k", name: "type", arguments: { code }, risk: "high", reasons: [] }));
  assert.equal(t.entries.at(-1).args.code.length, 2001, "only run_javascript's code is exempt");
});
