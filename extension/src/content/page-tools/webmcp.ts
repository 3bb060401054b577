// The tools a page offers through WebMCP: `document.modelContext` (Chromium's own
// implementation, behind `--enable-features=WebMCP`), imperative (`registerTool`) and
// declarative (`<form toolname>`). The content script's isolated world sees the same registry as
// the page (measured in Chromium 156): it lists the tools with `getTools()` and runs one with the
// browser's `executeTool()`, which calls the page's `execute()` in the page's own world (or fills
// and submits its form). Hearth never calls a function the page handed over.
//
// Everything read here is the page's claim (name, description, schema, read-only hint): the agent
// offers the tools as `page.<name>`, fences their words and judges each call
// (crates/agent/src/page_tools.rs, `policy::assess_page_tool`).

import type { PageToolForm, PageToolInfo, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";

/** What the model calls a page's tool (`PAGE_TOOL_PREFIX` in crates/agent). */
export const PAGE_TOOL_PREFIX = "page.";
/** Tools listed at most (the agent offers fewer). */
const MAX_LISTED = 48;
/** Characters of a description or schema passed on (the agent cuts descriptions further). */
const MAX_DESCRIPTION_CHARS = 2_000;
const MAX_SCHEMA_CHARS = 8_000;
/** Characters of a result given back (`MAX_RESULT_CHARS` in crates/agent). */
const MAX_RESULT_CHARS = 4_000;

interface ModelContextTool {
  name: string;
  description?: unknown;
  inputSchema?: unknown;
  annotations?: { readOnlyHint?: unknown } | null;
}

interface ModelContext extends EventTarget {
  getTools(): ModelContextTool[] | Promise<ModelContextTool[]>;
  executeTool(tool: ModelContextTool, args: Record<string, unknown>): Promise<unknown>;
}

/** The document's model context, where this browser has WebMCP. */
function modelContext(): ModelContext | null {
  const context = (document as unknown as { modelContext?: ModelContext }).modelContext;
  return context && typeof context.getTools === "function" && typeof context.executeTool === "function" ? context : null;
}

export function isPageToolName(name: string): boolean {
  return name.startsWith(PAGE_TOOL_PREFIX);
}

async function tools(context: ModelContext): Promise<ModelContextTool[]> {
  const list = await context.getTools();
  return Array.isArray(list) ? list.filter((t) => t && typeof t.name === "string") : [];
}

/** The form a declarative tool fills, found by its `toolname`. */
function formOf(name: string): HTMLFormElement | null {
  for (const form of document.querySelectorAll("form[toolname]")) {
    if (form instanceof HTMLFormElement && form.getAttribute("toolname") === name) return form;
  }
  return null;
}

/** Where a form's submission goes, as the policy judges it. */
function formInfo(form: HTMLFormElement): PageToolForm {
  const target = (form.getAttribute("target") ?? "").trim().toLowerCase();
  return {
    method: form.method.toLowerCase(),
    action: form.action,
    new_window: target !== "" && !["_self", "_top", "_parent"].includes(target),
  };
}

function schemaOf(value: unknown): unknown {
  let schema = value;
  if (typeof schema === "string") {
    if (schema.length > MAX_SCHEMA_CHARS) return undefined;
    try {
      schema = JSON.parse(schema);
    } catch {
      return undefined;
    }
  }
  if (typeof schema !== "object" || schema === null) return undefined;
  try {
    const text = JSON.stringify(schema);
    return text.length > MAX_SCHEMA_CHARS ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The tools the page offers now; none where the browser has no WebMCP (or it fails). */
export async function listPageTools(): Promise<PageToolInfo[]> {
  const context = modelContext();
  if (!context) return [];
  try {
    const listed = await tools(context);
    return listed.slice(0, MAX_LISTED).map((tool) => {
      const form = formOf(tool.name);
      const info: PageToolInfo = {
        name: tool.name.slice(0, 128),
        description: typeof tool.description === "string" ? tool.description.slice(0, MAX_DESCRIPTION_CHARS) : "",
        read_only: tool.annotations?.readOnlyHint === true,
        ask: false,
      };
      const schema = schemaOf(tool.inputSchema);
      if (schema !== undefined) info.input_schema = schema;
      if (form) info.form = formInfo(form);
      return info;
    });
  } catch {
    return [];
  }
}

/** Runs the page's tool `page.<name>` through the browser's `executeTool`. */
export async function runPageTool(modelName: string, args: Record<string, unknown>, signal: AbortSignal): Promise<ToolOutput> {
  const context = modelContext();
  if (!context) throw new ToolFailure("This page offers no tools (WebMCP is not available here). Take a snapshot and use Hearth's own tools.");
  const name = modelName.slice(PAGE_TOOL_PREFIX.length);
  const tool = (await tools(context)).find((t) => t.name === name);
  if (!tool) throw new ToolFailure(`The page no longer offers \`${modelName}\`. Take a snapshot to see what it offers now.`);
  const form = formOf(name);
  // A declarative tool with `toolautosubmit` submits its form and the tab navigates: the reply
  // goes as soon as the submission starts, before this document unloads.
  const submitted = form
    ? new Promise<string>((resolve) => {
        form.addEventListener("submit", () => resolve(`The page's form was submitted to ${form.action}. Take a snapshot of the page it leads to.`), { once: true, capture: true });
      })
    : new Promise<string>(() => {});
  const stopped = new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(new ToolFailure("Stopped by the user.")), { once: true }));
  let result: unknown;
  try {
    result = await Promise.race([context.executeTool(tool, args), submitted, stopped]);
  } catch (error) {
    if (error instanceof ToolFailure) throw error;
    const message = error instanceof Error ? error.message : String(error);
    throw new ToolFailure(`The page's tool \`${modelName}\` failed: ${message.slice(0, 500)}`);
  }
  let text = typeof result === "string" ? result : result === undefined ? "" : safeJson(result);
  if (text.length > MAX_RESULT_CHARS) text = `${text.slice(0, MAX_RESULT_CHARS)} …(cut)`;
  return {
    text: `The page's tool \`${modelName}\` answered: ${text || "(nothing)"}`,
    snapshot: null,
    page: { url: location.href, title: document.title },
    from_page: true,
  };
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? "";
  } catch {
    return String(value);
  }
}
