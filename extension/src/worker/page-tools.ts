// The worker's part in the tools pages offer (WebMCP): the user's per-site setting decides
// whether the model is offered them at all, and whether every call asks. The content script
// lists them and runs them through the browser's `executeTool` (content/page-tools/webmcp.ts);
// the agent judges each call (`policy::assess_page_tool`); the fence holds whatever the page's
// code does while it runs, as the page's own act.

import type { ToolReply, ToolRequest } from "../generated/protocol";
import { isSiteDisabled, pageToolsMode, type Settings } from "../shared/settings";

/** What the model calls a page's tool (`PAGE_TOOL_PREFIX` in crates/agent). */
export function isPageToolName(name: string): boolean {
  return name.startsWith("page.");
}

function originOf(url: string | null | undefined): string | null {
  try {
    return url ? new URL(url).origin : null;
  } catch {
    return null;
  }
}

/**
 * Why a page tool's call must not run, or null: page tools off on this site (or Hearth off
 * there), "ask" without this call's approval, or the tab on another origin than the one the call
 * was judged on (a page tool acts with the page's powers: it is bound to that page).
 */
export function pageToolRefusal(settings: Settings, request: ToolRequest, tabUrl: string | undefined): string | null {
  const mode = isSiteDisabled(settings, tabUrl) ? "off" : pageToolsMode(settings, tabUrl);
  if (mode === "off") return "The user has switched page tools off on this site: do the task with Hearth's own tools.";
  if (mode === "ask" && !request.approved.some((r) => r.kind === "user_asks_every_time")) {
    return `The user wants to approve every use of the page's tools on this site, and this call of \`${request.name}\` was not approved; nothing was done.`;
  }
  const judged = originOf(request.judged_url);
  if (judged !== null && originOf(tabUrl) !== judged) {
    return `The tab is now on ${originOf(tabUrl) ?? "another page"}, not on ${judged} where \`${request.name}\` was judged; nothing was done. Take a new snapshot.`;
  }
  return null;
}

/**
 * A page-side reply with its list of the page's tools as the settings allow: none where page
 * tools are off on the tab's site; each marked to ask where the setting says ask (whatever the
 * content script claimed).
 */
export function withPageToolSettings(reply: ToolReply, settings: Settings, tabUrl: string | undefined): ToolReply {
  if (reply.status !== "ok" || !reply.output.page_tools) return reply;
  const mode = isSiteDisabled(settings, tabUrl) ? "off" : pageToolsMode(settings, tabUrl);
  const tools = mode === "off" ? [] : reply.output.page_tools.map((tool) => ({ ...tool, ask: mode === "ask" }));
  return { ...reply, output: { ...reply.output, page_tools: tools } };
}
