// The DOM tools the content script runs for the agent: snapshot, click, type, select, scroll,
// hover, press_key, wait_for and read_page (PAGE_TOOLS in shared/tool-executors.ts). Tools that need
// browser APIs (navigate, go_back, run_javascript) belong to the service worker.

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { select } from "./choosing";
import { pressKeyTool } from "./keys";
import { click, hover } from "./pointer";
import { scroll } from "./scroll";
import { typeText } from "./typing";
import type { PageTool } from "../../shared/tool-executors";
import { ToolFailure } from "./errors";
import { readPage } from "./read-page";
import { takeSnapshot } from "./snapshot";
import { waitFor } from "./wait-for";
import { clickAt, locatePoint } from "./point";
import { LOCATE_POINT } from "../../generated/protocol";

export { ToolFailure } from "./errors";

// One entry per page tool, each taking its tool's arguments (generated from the Rust types the
// model's schemas are derived from): the compiler refuses a missing, a stale or a misread one.
const TOOLS: { [K in PageTool]: (args: ToolArguments[K], signal: AbortSignal) => ToolOutput | Promise<ToolOutput> } = {
  snapshot: () => {
    const snapshot = takeSnapshot();
    return { text: "", snapshot, page: snapshot.page, from_page: true };
  },
  click,
  click_at: clickAt,
  type: typeText,
  select,
  scroll,
  hover,
  press_key: pressKeyTool,
  wait_for: waitFor,
  read_page: readPage,
};

/** Runs a page tool. Failures the model can act on are thrown as ToolFailure; so are unexpected
 * errors, with the tool's name, so one broken page never breaks the agent loop. */
export async function executeTool(name: string, args: Record<string, unknown>, signal: AbortSignal): Promise<ToolOutput> {
  // Not a tool of the model's: the agent asks it before judging a click_at.
  if (name === LOCATE_POINT) return locatePoint(args as ToolArguments["click_at"]);
  const tool = Object.hasOwn(TOOLS, name) ? TOOLS[name as PageTool] : undefined;
  if (!tool) throw new ToolFailure(`unknown tool \`${name}\` for the page; it runs ${Object.keys(TOOLS).join(", ")}.`);
  if (signal.aborted) throw new ToolFailure("Cancelled before it started.");
  try {
    // The agent validated the arguments against the schema of this tool's argument type.
    return await (tool as (args: unknown, signal: AbortSignal) => ToolOutput | Promise<ToolOutput>)(args ?? {}, signal);
  } catch (error) {
    if (error instanceof ToolFailure) throw error;
    throw new ToolFailure(`${name} failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
}
