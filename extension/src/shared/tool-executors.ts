// Who runs each tool the model is offered, and for how long: the tab's content script
// (PAGE_TOOLS), the service worker (WORKER_TOOLS) or the agent loop itself (LOOP_TOOLS), each
// tool's origin binding and time limit, all generated from the one record per tool in
// crates/agent/src/tools.rs. A unit test checks that together the executors are exactly the
// offered tools, so a tool is never offered without an executor and no executor outlives its tool.

import type { ToolArguments, ToolName } from "../generated/protocol";
import { TIME_LIMIT_MS, TOOL_TIME_LIMITS, WORKER_TOOLS, type WorkerTool } from "../generated/protocol";

export { BOUND_TO_JUDGED_ORIGIN, LOOP_TOOLS, PAGE_TOOLS, WORKER_TOOLS } from "../generated/protocol";
export type { PageTool, WorkerTool } from "../generated/protocol";

/** How long `wait_for` waits: its `timeout_seconds`, 10 s by default, at most 60 s. */
export function waitForSeconds(args: ToolArguments["wait_for"]): number {
  const seconds = args.timeout_seconds;
  return typeof seconds === "number" && Number.isFinite(seconds) ? Math.min(Math.max(seconds, 0), 60) : 10;
}

/**
 * How long a tool may run before the worker answers for it and cancels it in the tab: its time
 * limit (`wait_for` its own wait and a margin, navigations their page load and a margin,
 * everything else 20 s).
 */
export function timeLimitMs(name: string, args: Record<string, unknown>): number {
  const limit = TOOL_TIME_LIMITS[name as ToolName] ?? "standard";
  const own = limit === "own_wait" ? waitForSeconds(args as ToolArguments["wait_for"]) * 1000 : 0;
  return own + TIME_LIMIT_MS[limit];
}

export function isWorkerTool(name: string): name is WorkerTool {
  return (WORKER_TOOLS as readonly string[]).includes(name);
}
