// Tool calls from the engine. Page tools (snapshot, click, type…) run in the task's tab, in its
// top frame's content script; navigation and run_javascript need browser APIs and run here
// (shared/tool-executors.ts says which is which). Every failure becomes a `failed` reply whose message
// tells the model what to do.

import type { Article, PageInfo, RiskReason, ToolArguments, ToolReply, ToolRequest } from "../generated/protocol";
import { sendToEngine, sendToTab } from "../shared/messages";
import { isSiteDisabled, loadSettings, toolMode } from "../shared/settings";
import { BOUND_TO_JUDGED_ORIGIN, isWorkerTool, timeLimitMs, type WorkerTool } from "../shared/tool-executors";
import * as downloads from "./downloads";
import { blockedSince, withApproved } from "./fence";
import { approvedSite, onSite, siteKey, type SiteKey } from "./site";
import { isPageToolName, pageToolRefusal, withPageToolSettings } from "./page-tools";
import * as taskTabs from "./task-tabs";

/**
 * Tabs where the agent itself is navigating, and how (navigate opens, go_back goes back): the
 * fence reads a blocked request without an initiator there as the agent's, not as the user's own
 * navigation, and knows which way undoes it.
 */
export const agentNavigating = new Map<number, "open" | "back">();

/** The origin of a URL, or null. */
function originOf(url: string | null | undefined): string | null {
  try {
    return url ? new URL(url).origin : null;
  } catch {
    return null;
  }
}

/** How long a page may take to load after navigate / go_back. */
const LOAD_TIMEOUT_MS = 30_000;
/** How much of run_javascript's result goes back to the model. */
const SCRIPT_RESULT_LIMIT = 4_000;

const failed = (message: string): ToolReply => ({ status: "failed", message });
const ok = (text: string, page: PageInfo | null, fromPage = false): ToolReply => ({
  status: "ok",
  output: { text, snapshot: null, page, from_page: fromPage },
});

/** Test builds only: the e2e suite shortens the tools' time limits (`hearthTestHooks`). */
function limitMs(request: ToolRequest): number {
  const normal = timeLimitMs(request.name, request.arguments);
  return __HEARTH_TEST_BUILD__ ? ((globalThis as { hearthTestHooks?: { toolTimeLimitMs?: number } }).hearthTestHooks?.toolTimeLimitMs ?? normal) : normal;
}

/**
 * Runs a tool call of the engine, answering for it when it outlasts its time limit (the tab's tool
 * is cancelled then): a page that never settles cannot hold a task forever.
 */
export async function runTool(request: ToolRequest): Promise<ToolReply> {
  const limit = limitMs(request);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<ToolReply>((resolve) => {
    timer = setTimeout(() => {
      void sendToTab(request.in_tab ?? request.tab_id, { kind: "cancel_tools" }).catch(() => {});
      const seconds = Math.round(limit / 100) / 10;
      resolve(failed(`\`${request.name}\` took longer than ${seconds} s and was stopped: the page may be busy or still loading. Take a new snapshot, then try another way.`));
    }, limit);
  });
  try {
    return await Promise.race([runWithin(request), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function runWithin(request: ToolRequest): Promise<ToolReply> {
  const task = await chrome.tabs.get(request.tab_id).catch(() => null);
  if (!task?.id) return failed("The task's tab was closed; the task cannot go on.");
  // The tab the call acts in: the task's own, or another tab of the task after switch_tab.
  const tab = await taskTabs.actingTab(request);
  if (typeof tab === "string") return failed(tab);
  if (!tab.id) return failed("The task's tab was closed; the task cannot go on.");
  // Checked on every call: the user may disable the site, or switch a tool off, while the task runs.
  const settings = await loadSettings();
  if (isSiteDisabled(settings, tab.url)) {
    return failed("Hearth is disabled on this site by the user, or the page is not a web page: no tool runs here. Tell the user.");
  }
  const mode = toolMode(settings, request.name);
  if (mode === "off") return failed(`The user has switched \`${request.name}\` off in Hearth's settings: do the task without it.`);
  // A tool set to ask every time runs only with the user's approval of this very call.
  if (mode === "ask" && !request.approved.some((r) => r.kind === "user_asks_every_time")) {
    return failed(`The user wants to approve every use of \`${request.name}\`, and this call was not approved; nothing was done.`);
  }
  const args = request.arguments;
  const tabId = tab.id;
  const name = request.name;
  const pageToolRefused = isPageToolName(name) ? pageToolRefusal(settings, request, tab.url) : null;
  if (pageToolRefused !== null) return failed(pageToolRefused);
  // An action judged (and perhaps approved) on one page runs on that page's origin only: a page
  // that moved the tab elsewhere meanwhile gets nothing done there.
  const judged = originOf(request.judged_url);
  if ((BOUND_TO_JUDGED_ORIGIN as readonly string[]).includes(name) && judged !== null && originOf(tab.url) !== judged) {
    return failed(`The tab is now on ${originOf(tab.url) ?? "another page"}, not on ${judged} where this ${name} was judged; nothing was done. Take a new snapshot.`);
  }
  // Reading another page fetches it here: nothing in the tab changes, and the tab's fence is not
  // opened for the site the user allowed to be read.
  if (name === "read_link") return readLink(argumentsOf<"read_link">(args).url ?? "", request.judged_url ?? tab.url ?? "", request.approved);
  // Another tab's text, read by its own content script: nothing in either tab changes.
  if (name === "read_tab") return taskTabs.readTab(request, settings);
  // What the user approved for this call passes the fence while it runs (a download included).
  const approvedDownload = request.approved.some((r) => r.kind === "download");
  const run = (body: () => Promise<ToolReply>) => (approvedDownload ? downloads.approveDuring(tabId, body) : body());
  return withApproved(task.id, request.approved, request.judged_url ?? tab.url, () => run(async () => {
    if (!isWorkerTool(name)) return withPageToolSettings(await inTab(tabId, request), settings, tab.url);
    // One entry per worker tool: the compiler refuses a missing or a stale one.
    const workerTools: Record<WorkerTool, () => Promise<ToolReply>> = {
      screenshot: () => screenshot(tabId),
      navigate: () => navigate(tabId, argumentsOf<"navigate">(args).url ?? ""),
      go_back: () => goBack(tabId),
      read_link: () => Promise.resolve(failed("read_link runs outside the tab.")),
      read_tab: () => Promise.resolve(failed("read_tab runs outside the tab.")),
      open_tab: () => taskTabs.openTab(request, task),
      switch_tab: () => taskTabs.switchTab(request, settings),
      run_javascript: () => runJavascript(tabId, argumentsOf<"run_javascript">(args).code ?? "", judged ?? originOf(tab.url) ?? ""),
    };
    try {
      return await workerTools[name]();
    } catch (error) {
      return failed(`${request.name} failed: ${error instanceof Error ? error.message : String(error)}`);
    }
  }), tabId);
}

/** Runs a page tool in the tab's content script. */
async function inTab(tabId: number, request: ToolRequest): Promise<ToolReply> {
  try {
    const reply = (await sendToTab(tabId, { kind: "run_tool", request })) as ToolReply | undefined;
    return reply ?? failed("The page did not answer; it may still be loading. Wait, then take a new snapshot.");
  } catch {
    return failed("The page is not reachable (it navigated, reloaded or is still loading). Take a new snapshot.");
  }
}

/** How much of a page `read_link` reads, and how many passages it returns. */
const READ_LIMIT_BYTES = 2_000_000;
const MAX_PASSAGES = 300;

/**
 * read_link: fetches a page without cookies (a reader sees the public page, and no other site
 * learns who the user is), only from the page's own site or a site the user approved for this call;
 * a redirect is not followed (where it leads cannot be judged before the request is sent). A
 * reader view of the page comes back as numbered passages.
 */
async function readLink(rawUrl: string, pageUrl: string, approved: readonly RiskReason[]): Promise<ToolReply> {
  let url: URL;
  try {
    url = new URL(rawUrl, pageUrl || undefined);
  } catch {
    return failed(`"${rawUrl}" is not an address.`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return failed("Only http:// and https:// pages can be read.");
  const scheme = pageUrl.startsWith("http:") ? "http" : "https";
  const page = siteKey(pageUrl);
  // The page's own site, and exactly the sites this call's card named (a local server's port included).
  const sites = [page, ...approved.map((r) => (r.kind === "off_site" ? approvedSite(r.host, scheme) : null))].filter((s): s is SiteKey => s !== null);
  const permitted = (address: string) => sites.some((site) => onSite(address, site));
  if (!permitted(url.href)) return failed(`Reading ${url.host} (another site) needs the user's approval; nothing was fetched.`);
  let response: Response;
  try {
    response = await fetch(url.href, { credentials: "omit", redirect: "manual", cache: "no-store", signal: AbortSignal.timeout(30_000) });
  } catch (error) {
    return failed(`${url.href} could not be read: ${error instanceof Error ? error.message : String(error)}.`);
  }
  if (response.type === "opaqueredirect") {
    return failed(`${url.href} redirects elsewhere, and read_link does not follow redirects (where one leads cannot be judged before it is sent). Read the final address instead, or open it with navigate.`);
  }
  if (!response.ok) return failed(`${url.href} answered ${response.status} ${response.statusText}.`);
  const type = (response.headers.get("content-type") ?? "").toLowerCase();
  const html = type.startsWith("text/html") || type.startsWith("application/xhtml+xml");
  if (!html && !type.startsWith("text/plain")) return failed(`${url.href} is not a web page (${type || "no content type"}).`);
  const body = await readCapped(response, READ_LIMIT_BYTES);
  const article: Article = html
    ? ((await sendToEngine({ kind: "read_article", html: body, url: response.url })) as Article)
    : { title: "", passages: body.split(/\n\s*\n/).map((p) => p.replace(/\s+/g, " ").trim()).filter(Boolean) };
  if (!article?.passages?.length) return failed(`${response.url} has no readable text.`);
  const title = article.title || "(untitled)";
  // `page` stays unset: the tab did not move. The agent numbers the passages.
  const reply = ok(`Page: ${title} — ${response.url}`, null, true);
  if (reply.status === "ok") reply.output.passages = { url: response.url, title, items: article.passages.slice(0, MAX_PASSAGES) };
  return reply;
}

/** The body's text, at most `limit` bytes of it. */
async function readCapped(response: Response, limit: number): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  while (size < limit) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
  }
  void reader.cancel().catch(() => {});
  const bytes = new Uint8Array(Math.min(size, limit));
  let at = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, bytes.length - at);
    bytes.set(part, at);
    at += part.length;
  }
  return new TextDecoder().decode(bytes);
}

async function navigate(tabId: number, url: string): Promise<ToolReply> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return failed(`"${url}" is not a full address; use one starting with https:// or http://.`);
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") {
    return failed("Only http:// and https:// addresses can be opened.");
  }
  return afterLoad(tabId, "open", () => chrome.tabs.update(tabId, { url: parsed.href }), `Opened ${parsed.href}.`);
}

/**
 * Goes back one page. The page before may be on a site outside the task's set: the fence blocks
 * it like any navigation (Chrome never restores a tab with session rules from its back-forward
 * cache, so going back is always a request; the e2e test "going back…" holds it to that).
 */
const goBack = (tabId: number) => afterLoad(tabId, "back", () => chrome.tabs.goBack(tabId), "Went back.");

const fenceStopped = (url: string): ToolReply =>
  failed(`The browser's fence stopped ${url}: it is on a site outside this task's. The user is asked on a card; nothing else was done. Go on with the current page.`);

/** How long a navigation still counts as the agent's after it ended (a late block report). */
const AGENT_NAVIGATION_GRACE_MS = 2_000;

/**
 * Starts a navigation and waits until the tab has loaded. When the fence blocks it, the worker
 * takes the tab back off the error page (service-worker.ts): the wait lasts until then, and the
 * tab counts as navigated by the agent a little longer, so that a block reported late is never
 * read as the user's own navigation.
 */
async function afterLoad(tabId: number, how: "open" | "back", start: () => Promise<unknown>, text: string): Promise<ToolReply> {
  const started = Date.now();
  const navigation = Symbol(how);
  let cleanup = () => {};
  const settled = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`the page did not finish loading in ${LOAD_TIMEOUT_MS / 1000} s`));
    }, LOAD_TIMEOUT_MS);
    const check = async () => {
      const tab = await chrome.tabs.get(tabId).catch(() => null);
      if (!tab) return reject(new Error("the tab was closed"));
      if (tab.status !== "complete") return;
      const blocked = blockedSince(tabId, started);
      // Blocked: done once the tab has left the error page (the blocked address).
      if (blocked && (tab.url === blocked || tab.url?.startsWith("chrome-error:"))) return;
      cleanup();
      resolve();
    };
    const listener = (id: number, change: chrome.tabs.OnUpdatedInfo) => {
      if (id === tabId && change.status === "complete") void check();
    };
    // A block's undo may complete before its report arrives: look again now and then.
    const poll = setInterval(() => void (blockedSince(tabId, started) ? check() : undefined), 200);
    cleanup = () => {
      clearTimeout(timer);
      clearInterval(poll);
      chrome.tabs.onUpdated.removeListener(listener);
    };
    chrome.tabs.onUpdated.addListener(listener);
  });
  agentNavigating.set(tabId, how);
  latestNavigation.set(tabId, navigation);
  try {
    // What decides is the tab's state: `start`'s promise only reports a refusal (no page to go
    // back to), and may stay pending when the navigation it started was blocked and undone.
    const refused = start().then(() => new Promise<never>(() => {}));
    await Promise.race([settled, refused]);
  } finally {
    cleanup();
    setTimeout(() => {
      if (latestNavigation.get(tabId) !== navigation) return;
      agentNavigating.delete(tabId);
      latestNavigation.delete(tabId);
    }, AGENT_NAVIGATION_GRACE_MS);
  }
  // The fence stopped it (at the first address or a redirect's hop): the worker restored the page.
  const blocked = blockedSince(tabId, started);
  if (blocked) return fenceStopped(blocked);
  const tab = await chrome.tabs.get(tabId);
  return ok(`${text} The page is "${tab.title ?? ""}". Take a snapshot before acting on it.`, {
    url: tab.url ?? "",
    title: tab.title ?? "",
  });
}

/** The newest navigation the agent started in each tab (the grace period belongs to it). */
const latestNavigation = new Map<number, symbol>();

/**
 * Runs in the page's MAIN world (the agent's policy has asked the user first), in the top frame,
 * and only when that document is still of the origin the script was judged (and approved) on.
 */
function evaluateInPage(code: string, origin: string): Promise<{ ok: boolean; value: string }> {
  if (location.origin !== origin) return Promise.resolve({ ok: false, value: `wrong-origin:${location.origin}` });
  const describe = (value: unknown): string => {
    if (value === undefined) return "undefined";
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value) ?? String(value);
    } catch {
      return String(value);
    }
  };
  try {
    // Indirect eval: global scope, the value of the last expression.
    const result: unknown = (0, eval)(code);
    return Promise.resolve(result).then(
      (value) => ({ ok: true, value: describe(value) }),
      (error: unknown) => ({ ok: false, value: String(error) }),
    );
  } catch (error) {
    return Promise.resolve({ ok: false, value: String(error) });
  }
}

async function runJavascript(tabId: number, code: string, origin: string): Promise<ToolReply> {
  const [injection] = await chrome.scripting.executeScript({
    target: { tabId, frameIds: [0] },
    world: "MAIN",
    func: evaluateInPage,
    args: [code, origin],
  });
  const result = injection?.result as { ok: boolean; value: string } | undefined;
  if (!result) return failed("The script produced no result (the page may block scripts with its Content-Security-Policy).");
  if (!result.ok && result.value.startsWith("wrong-origin:")) {
    return failed(`The tab is now on ${result.value.slice("wrong-origin:".length)}, not on ${origin} where the script was approved; it did not run. Take a new snapshot.`);
  }
  if (!result.ok) return failed(`The script threw: ${result.value.slice(0, 500)}`);
  const tab = await chrome.tabs.get(tabId);
  const value = result.value.length > SCRIPT_RESULT_LIMIT ? `${result.value.slice(0, SCRIPT_RESULT_LIMIT)}… (cut)` : result.value;
  return ok(value, { url: tab.url ?? "", title: tab.title ?? "" }, true);
}

/** The thumbnail's width on the tool card, at most. */
const THUMBNAIL_WIDTH = 320;

/**
 * screenshot: the visible part of the task's tab as the model will see it (a PNG, never sent
 * anywhere but the offscreen engine), with Hearth's overlay hidden while it is taken, and a small
 * JPEG of it for the tool card. Chrome captures only the tab in front of its window.
 */
async function screenshot(tabId: number): Promise<ToolReply> {
  const tab = await chrome.tabs.get(tabId);
  if (!tab.active) {
    return failed("The task's tab is not the one shown in its window, so it cannot be seen now: ask the user to bring it to the front, or use snapshot and read_page.");
  }
  await sendToTab(tabId, { kind: "hide_for_capture", hidden: true }).catch(() => {});
  let dataUrl: string;
  try {
    dataUrl = await capture(tab.windowId);
  } catch (error) {
    return failed(`The page could not be captured: ${error instanceof Error ? error.message : String(error)}. Use snapshot and read_page instead.`);
  } finally {
    void sendToTab(tabId, { kind: "hide_for_capture", hidden: false }).catch(() => {});
  }
  const bitmap = await createImageBitmap(await (await fetch(dataUrl)).blob());
  const { width, height } = bitmap;
  const scale = Math.min(1, THUMBNAIL_WIDTH / width);
  const canvas = new OffscreenCanvas(Math.max(1, Math.round(width * scale)), Math.max(1, Math.round(height * scale)));
  canvas.getContext("2d")?.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  const thumbnail = await dataUrlOf(await canvas.convertToBlob({ type: "image/jpeg", quality: 0.7 }));
  const page = { url: tab.url ?? "", title: tab.title ?? "" };
  return {
    status: "ok",
    output: {
      text: `A screenshot of the visible part of the page (${width} × ${height} pixels) follows. click_at takes points of it: x and y from 0 to 1000 across and down.`,
      snapshot: null,
      page,
      from_page: true,
      image: { data_url: dataUrl, thumbnail, width, height },
    },
  };
}

/** Captures the window's visible tab as PNG; Chrome allows two captures a second, so a refused one is tried again once. */
async function capture(windowId: number): Promise<string> {
  try {
    return await chrome.tabs.captureVisibleTab(windowId, { format: "png" });
  } catch (error) {
    if (!String(error).includes("MAX_CAPTURE_VISIBLE_TAB_CALLS_PER_SECOND")) throw error;
    await new Promise((resolve) => setTimeout(resolve, 600));
    return chrome.tabs.captureVisibleTab(windowId, { format: "png" });
  }
}

async function dataUrlOf(blob: Blob): Promise<string> {
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return `data:${blob.type};base64,${btoa(binary)}`;
}

/** A call's arguments as its tool's type: the agent validated them against the schema derived from
 * that type (crates/agent/src/arguments.rs). */
function argumentsOf<K extends keyof ToolArguments>(args: ToolRequest["arguments"]): Partial<ToolArguments[K]> {
  return args as Partial<ToolArguments[K]>;
}
