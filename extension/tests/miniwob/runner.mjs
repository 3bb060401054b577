// Runs MiniWoB++ tasks through Hearth's own DOM tools (src/content/page-tools) in headless Chromium.
//
// The harness does what MiniWoB's Python environment does with page JavaScript: it seeds the
// task's random numbers (`Math.seedrandom`, which core.js bundles), starts an episode
// (`core.startEpisodeReal()`), reads the reward globals, and ends an abandoned episode
// (`core.endEpisode(0)`, as MiniWoB's force_stop does). The policy never touches the DOM: it calls
// tools by name with JSON arguments and reads their results as the text the model would read
// (render.mjs), then decides the next call. The tools run in an isolated world, as the content
// script does.
//
//   node tests/miniwob/runner.mjs [--episodes N] [--concurrency N] [--verbose] [task …]
//   node tests/miniwob/runner.mjs --explore click-button     (prints what the policy would see)

import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { chromium } from "playwright-core";
import { bundleTools } from "../lib/pages.mjs";
import { serve } from "../lib/server.mjs";
import { miniwobHtml } from "./fetch-pages.mjs";
import { POLICIES, GiveUp } from "./policies.mjs";
import { formatResult } from "./render.mjs";

export const RESULTS_FILE = resolve(import.meta.dirname, "../../../artifacts/miniwob/results.json");

/** Tool calls per episode before the harness gives up on the policy. */
const MAX_STEPS = 20;
/** Wall-clock cap on one episode, below MiniWoB's own 10 s timeout (its reward would read -1). */
const EPISODE_MS = 9000;

/** "click-tab:tab-role" is another policy for the page click-tab. */
const pageOf = (task) => task.split(":")[0];

/** Thrown out of a tool call when the episode is already over (the reward is in). */
class EpisodeOver extends Error {}

function chromiumPath() {
  const found = [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => p && existsSync(p));
  if (!found) throw new Error("Chromium not found: install it (Debian: `sudo apt-get install chromium`) or set CHROMIUM=/path/to/chrome");
  return found;
}

/**
 * Math.random from page load on, seeded by the page's path (mulberry32), so whatever a task draws
 * before the harness calls Math.seedrandom is reproducible too.
 */
const SEED_SCRIPT = `(() => {
  let a = Array.from(location.pathname).reduce((h, c) => (Math.imul(h, 31) + c.charCodeAt(0)) | 0, 7) >>> 0;
  Math.random = function () {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
})();`;

/** One browser tab that runs tasks: the task page, the tools in an isolated world, episodes. */
class Tab {
  constructor(page, tools) {
    this.page = page;
    this.tools = tools;
    this.errors = [];
    page.on("pageerror", (e) => this.errors.push(`exception: ${e.message}`));
    page.on("console", (m) => {
      if (m.type() === "error" && !m.location().url.endsWith("/favicon.ico")) this.errors.push(`console: ${m.text()}`);
    });
  }

  static async open(context, tools) {
    const page = await context.newPage();
    const tab = new Tab(page, tools);
    tab.cdp = await context.newCDPSession(page);
    await page.addInitScript(SEED_SCRIPT);
    return tab;
  }

  async load(url) {
    this.errors = [];
    await this.page.goto(url, { waitUntil: "load" });
    // window.onload shows MiniWoB's sync screen ("START") once the task is ready.
    await this.page.waitForFunction(() => typeof core === "object" && document.getElementById("sync-task-cover") !== null, null, { timeout: 10_000 });
    const { frameTree } = await this.cdp.send("Page.getFrameTree");
    const { executionContextId } = await this.cdp.send("Page.createIsolatedWorld", { frameId: frameTree.frame.id, worldName: "hearth" });
    this.world = executionContextId;
    await this.isolated(this.tools);
  }

  async isolated(expression) {
    const r = await this.cdp.send("Runtime.evaluate", { expression, contextId: this.world, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`${r.exceptionDetails.text} ${r.exceptionDetails.exception?.description ?? ""}`);
    return r.result.value;
  }

  /** Runs a tool; `{ output }` or `{ error }` (a ToolFailure's message, what the model reads). */
  callTool(name, args) {
    return this.isolated(`(async () => {
      try {
        return { output: await hearthTools.executeTool(${JSON.stringify(name)}, ${JSON.stringify(args)}, new AbortController().signal) };
      } catch (e) {
        return { error: e instanceof hearthTools.ToolFailure ? e.message : "internal: " + (e?.stack ?? e) };
      }
    })()`);
  }

  // ---- Episode control through MiniWoB's own globals (harness only) ----

  async startEpisode(seed) {
    await this.page.evaluate((s) => {
      Math.seedrandom(s);
      core.startEpisodeReal();
    }, seed);
  }

  state() {
    return this.page.evaluate(() => ({
      done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON,
    }));
  }

  forceEnd() {
    return this.page.evaluate(() => core.endEpisode(0, false, "ended by the harness"));
  }
}

/**
 * What a policy may use: `tool(name, args)` resolves to the result's text exactly as the model
 * would read it, plus conveniences built on it. Throws EpisodeOver once the reward is in.
 */
class Env {
  // Private, so that a policy cannot reach the page.
  #tab;
  #view = { latest: undefined };

  constructor(tab) {
    this.#tab = tab;
    this.transcript = [];
    this.notes = [];
  }

  /** After the episode: a policy still running (past the deadline) can no longer act. */
  close() {
    this.#tab = undefined;
  }

  async tool(name, args = {}) {
    if (!this.#tab) throw new GiveUp("the episode is over");
    if (this.transcript.length >= MAX_STEPS) throw new GiveUp(`step limit (${MAX_STEPS} tool calls)`);
    // A round trip through JSON, as the agent's arguments are.
    const result = await this.#tab.callTool(name, JSON.parse(JSON.stringify(args)));
    const text = formatResult(result, this.#view);
    this.transcript.push({ call: `${name} ${JSON.stringify(args)}`, result: text, ok: result.error === undefined });
    if ((await this.#tab.state()).done) throw new EpisodeOver();
    return text;
  }

  snapshot() {
    return this.tool("snapshot");
  }

  readPage() {
    return this.tool("read_page");
  }

  /** A remark kept with the episode's result (why the policy chose what it chose). */
  note(text) {
    this.notes.push(text);
  }
}

async function runEpisode(tab, task, policy, seed) {
  const env = new Env(tab);
  // Variants of a task see the same problems.
  await tab.startEpisode(`${pageOf(task)}#${seed}`);
  const started = performance.now();
  let failure;
  let timer;
  try {
    const deadline = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new GiveUp(`episode took over ${EPISODE_MS / 1000} s`)), EPISODE_MS);
    });
    await Promise.race([policy(env), deadline]);
  } catch (error) {
    if (error instanceof GiveUp) failure = error.message;
    else if (!(error instanceof EpisodeOver)) failure = `harness error: ${error.message}`;
  } finally {
    clearTimeout(timer);
    env.close();
  }
  let state = await tab.state();
  if (!state.done) {
    // Some pages end the episode a moment after the last action.
    await tab.page.waitForFunction(() => WOB_DONE_GLOBAL, null, { timeout: 300 }).catch(() => {});
    state = await tab.state();
  }
  if (!state.done) {
    await tab.forceEnd();
    failure ??= `the policy finished but the page gave no reward${env.notes.length ? ` (policy: ${env.notes.join("; ")})` : ""}`;
    state = { ...(await tab.state()), raw: 0, reward: 0 };
  }
  const success = state.raw > 0;
  if (!success && !failure) {
    const last = env.transcript.at(-1);
    failure = `the page rejected the answer (raw reward ${state.raw}${state.reason ? `, ${state.reason}` : ""})${env.notes.length ? `; policy: ${env.notes.join("; ")}` : ""}`;
    if (last) failure += `; last call: ${last.call}`;
  }
  return {
    seed, success, reward: state.reward, raw: state.raw, steps: env.transcript.length,
    ms: Math.round(performance.now() - started), failure: success ? undefined : failure,
    transcript: success ? undefined : env.transcript,
  };
}

async function runTask(tab, base, task, episodes) {
  const policy = POLICIES[task];
  const started = performance.now();
  const results = [];
  try {
    await tab.load(`${base}/miniwob/${pageOf(task)}.html`);
    for (let seed = 1; seed <= episodes; seed++) {
      const result = await runEpisode(tab, task, policy, seed);
      results.push(result);
      // A failed episode can leave the page dirty (an open menu, a half-filled form) for the
      // next one; a fresh page keeps episodes independent.
      if (!result.success && seed < episodes) await tab.load(`${base}/miniwob/${pageOf(task)}.html`);
    }
  } catch (error) {
    results.push({ seed: results.length + 1, success: false, reward: 0, raw: 0, steps: 0, ms: 0, failure: `harness error: ${error.message}` });
  }
  const successes = results.filter((r) => r.success).length;
  const reasons = {};
  for (const r of results) if (r.failure) reasons[reasonKind(r.failure)] = (reasons[reasonKind(r.failure)] ?? 0) + 1;
  return {
    task, episodes: results.length, successes, successRate: successes / results.length,
    meanReward: results.reduce((s, r) => s + r.reward, 0) / results.length,
    ms: Math.round(performance.now() - started), failures: reasons, pageErrors: [...new Set(tab.errors)], results,
  };
}

/**
 * Runs `tasks` (default: every task with a policy), `episodes` seeds each, over `concurrency`
 * tabs of one browser. Resolves to { tasks: [...], ms }.
 */
export async function runSuite({ tasks = Object.keys(POLICIES), episodes = 5, concurrency = 4, log = () => {} } = {}) {
  const unknown = tasks.filter((t) => !POLICIES[t]);
  if (unknown.length > 0) throw new Error(`no policy for ${unknown.join(", ")}; known: ${Object.keys(POLICIES).join(", ")}`);
  const started = performance.now();
  const html = miniwobHtml({ log });
  const missing = tasks.filter((t) => !existsSync(join(html, "miniwob", `${pageOf(t)}.html`)));
  if (missing.length > 0) throw new Error(`${html}/miniwob has no page for ${missing.join(", ")}`);
  const [tools, server, browser] = await Promise.all([
    bundleTools(),
    serve(html),
    chromium.launch({ executablePath: chromiumPath(), headless: true, args: ["--no-sandbox"] }),
  ]);
  try {
    // Pinned: enter-time's instruction is written with toLocaleTimeString.
    const context = await browser.newContext({ viewport: { width: 800, height: 600 }, locale: "en-US", timezoneId: "UTC" });
    const queue = [...tasks];
    const done = [];
    const worker = async () => {
      const tab = await Tab.open(context, tools);
      for (let task = queue.shift(); task; task = queue.shift()) {
        const r = await runTask(tab, server.url, task, episodes);
        log(`${task}: ${r.successes}/${r.episodes} in ${(r.ms / 1000).toFixed(1)} s`);
        done.push(r);
      }
      await tab.page.close();
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, tasks.length) }, worker));
    done.sort((a, b) => tasks.indexOf(a.task) - tasks.indexOf(b.task));
    return { miniwob: "1.1.0", episodes, tasks: done, ms: Math.round(performance.now() - started) };
  } finally {
    await browser.close();
    await server.close();
  }
}

/** A failure reason without what varies between episodes (quoted text, element numbers, the last call). */
export function reasonKind(reason) {
  return reason
    .replace(/; last call: .*$/s, "")
    .replace(/"[^"]*"/g, '"…"')
    .replace(/\[\d+\]/g, "[n]")
    .replace(/@\w+/g, "@…")
    .replace(/\(besides the field and buttons: .*\)$/, "(only the list itself)");
}

/** The results as a table, one task a line. */
export function table(suite) {
  const rows = suite.tasks.map((t) => [
    t.task, String(t.episodes), String(t.successes), t.meanReward.toFixed(2),
    Object.entries(t.failures).map(([why, n]) => `${n}× ${why}`).join(" | ") || "-",
  ]);
  const head = ["task", "episodes", "successes", "mean reward", "failure reasons"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (i < 4 ? r[i].length : 0))));
  const line = (r) => r.map((c, i) => (i < 4 ? c.padEnd(widths[i]) : c)).join("  ");
  const total = suite.tasks.reduce((s, t) => s + t.successes, 0);
  const episodes = suite.tasks.reduce((s, t) => s + t.episodes, 0);
  return [line(head), ...rows.map(line), `${total}/${episodes} episodes succeeded over ${suite.tasks.length} tasks in ${(suite.ms / 1000).toFixed(1)} s`].join("\n");
}

export function writeResults(suite, file = RESULTS_FILE) {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(suite, null, 2)}\n`);
  return file;
}

/** Opens one task, starts an episode and prints what a policy would read: read_page and a snapshot. */
async function explore(task, seed = 1) {
  const html = miniwobHtml();
  const [tools, server, browser] = await Promise.all([bundleTools(), serve(html), chromium.launch({ executablePath: chromiumPath(), args: ["--no-sandbox"] })]);
  try {
    const tab = await Tab.open(await browser.newContext({ viewport: { width: 800, height: 600 }, locale: "en-US", timezoneId: "UTC" }), tools);
    await tab.load(`${server.url}/miniwob/${pageOf(task)}.html`);
    // Variants of a task see the same problems.
  await tab.startEpisode(`${pageOf(task)}#${seed}`);
    const env = new Env(tab);
    console.log(await env.readPage());
    console.log(await env.snapshot());
    if (tab.errors.length) console.log(tab.errors);
  } finally {
    await browser.close();
    await server.close();
  }
}

async function main(argv) {
  const options = { episodes: 5, concurrency: 4, tasks: [] };
  let verbose = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--episodes") options.episodes = Number(argv[++i]);
    else if (a === "--concurrency") options.concurrency = Number(argv[++i]);
    else if (a === "--verbose") verbose = true;
    else if (a === "--explore") return explore(argv[++i], Number(argv[i + 1] ?? 1));
    else options.tasks.push(a);
  }
  if (options.tasks.length === 0) delete options.tasks;
  const suite = await runSuite({ ...options, log: (m) => console.error(m) });
  console.log(table(suite));
  if (verbose) {
    for (const t of suite.tasks) {
      for (const r of t.results.filter((e) => !e.success)) {
        console.log(`\n--- ${t.task} seed ${r.seed}: ${r.failure}`);
        for (const step of r.transcript ?? []) console.log(`> ${step.call}\n${step.result}`);
      }
    }
  }
  console.log(`results: ${writeResults(suite)}`);
}

if (process.argv[1] === import.meta.filename) {
  main(process.argv.slice(2)).catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });
}
