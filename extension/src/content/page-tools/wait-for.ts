// wait_for: until some text or a CSS selector is visible on the page, or the timeout.

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { result } from "./actions";
import { ToolFailure } from "./errors";
import { allRoots, clean, quote } from "./flat-tree";
import { renderedText } from "./read-page";
import { isVisible } from "./elements";
import { waitUntil } from "./settle";
import { waitForSeconds } from "../../shared/tool-executors";

export async function waitFor(args: ToolArguments["wait_for"], signal: AbortSignal): Promise<ToolOutput> {
  const seconds = waitForSeconds(args);
  const started = performance.now();
  const took = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
  if (typeof args.text === "string" && args.text.trim() !== "") {
    const wanted = clean(args.text, 10_000).toLowerCase();
    const found = await waitUntil(() => (pageText().includes(wanted) ? true : undefined), seconds * 1000, signal);
    if (!found) throw new ToolFailure(`Waited ${seconds} s, but the text ${quote(args.text)} did not appear on the page.`);
    return result(`The text ${quote(args.text)} is on the page (after ${took()}).`);
  }
  if (typeof args.selector === "string" && args.selector.trim() !== "") {
    const selector = args.selector;
    try {
      document.querySelector(selector);
    } catch {
      throw new ToolFailure(`${quote(selector)} is not a valid CSS selector.`);
    }
    const visibleMatch = () => allRoots().flatMap((r) => Array.from(r.querySelectorAll(selector))).find(isVisible);
    const found = await waitUntil(visibleMatch, seconds * 1000, signal);
    if (!found) throw new ToolFailure(`Waited ${seconds} s, but no visible element matches ${quote(selector)}.`);
    return result(`An element matching ${quote(selector)} is visible (after ${took()}).`);
  }
  throw new ToolFailure("Give `text` or `selector` to wait for.");
}

/** The rendered text of the page (with open shadow roots and same-origin frames), lower-cased. */
function pageText(): string {
  return clean(document.body ? renderedText(document.body) : "", 10_000_000).toLowerCase();
}
