// Who runs each tool the model is offered (TOOL_NAMES, generated from crates/agent/src/tools.rs):
// the tab's content script, the service worker, or the agent loop itself (LOOP_TOOLS, generated). A unit test checks that
// together they are exactly the offered tools, so a tool is never offered without an executor and
// no executor outlives its tool.

import type { ToolArguments, ToolName } from "../generated/protocol";

export { LOOP_TOOLS } from "../generated/protocol";

/** DOM tools, run by the content script in the task's top frame (content/page-tools/). */
export const PAGE_TOOLS = ["read_page", "snapshot", "click", "click_at", "type", "select", "scroll", "hover", "press_key", "wait_for"] as const satisfies readonly ToolName[];

/** Tools that need browser APIs, run by the service worker (worker/browser-tools.ts). */
export const WORKER_TOOLS = ["screenshot", "navigate", "go_back", "read_link", "run_javascript"] as const satisfies readonly ToolName[];

/**
 * Tools that act on the page the policy judged them on: the worker runs them only while the tab's
 * committed URL has that page's origin (read-only tools and navigations go anywhere).
 */
export const BOUND_TO_JUDGED_ORIGIN = ["click", "click_at", "type", "select", "scroll", "hover", "press_key", "run_javascript"] as const satisfies readonly ToolName[];

/** How long `wait_for` waits: its `timeout_seconds`, 10 s by default, at most 60 s. */
export function waitForSeconds(args: ToolArguments["wait_for"]): number {
  const seconds = args.timeout_seconds;
  return typeof seconds === "number" && Number.isFinite(seconds) ? Math.min(Math.max(seconds, 0), 60) : 10;
}

/**
 * How long a tool may run before the worker answers for it and cancels it in the tab: `wait_for`
 * its own wait and a margin, navigations their page load and a margin, everything else 20 s.
 */
export function timeLimitMs(name: string, args: Record<string, unknown>): number {
  if (name === "wait_for") return waitForSeconds(args as ToolArguments["wait_for"]) * 1000 + 10_000;
  if (name === "navigate" || name === "go_back" || name === "read_link") return 45_000;
  return 20_000;
}

export type PageTool = (typeof PAGE_TOOLS)[number];
export type WorkerTool = (typeof WORKER_TOOLS)[number];

export function isWorkerTool(name: string): name is WorkerTool {
  return (WORKER_TOOLS as readonly string[]).includes(name);
}
