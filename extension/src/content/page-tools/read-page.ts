// read_page: the page's title and URL, the user's selection, then the main text as passages (one
// per block of text), within a budget. The text is the page's own (untrusted); the agent fences it
// and numbers the passages for citations.

import type { ToolOutput } from "../../generated/protocol";
import { allRoots, flatChildren, flatParent, frameDocument, is, isElement, isFrame, isHtml, pageInfo, styleOf } from "./flat-tree";
import { isVisible } from "./elements";

/** Characters of page text per call (about 2,000 tokens). */
export const READ_BUDGET = 8000;
const SELECTION_BUDGET = 3000;
/** A region shorter than this is not taken for the page's main content. */
const MIN_MAIN_TEXT = 200;

export function readPage(): ToolOutput {
  const page = pageInfo();
  const parts = [`Title: ${page.title}`, `URL: ${page.url}`];
  let budget = READ_BUDGET;
  const selected = tidy(selectionText());
  if (selected) {
    const cut = cutTo(selected, SELECTION_BUDGET);
    parts.push(`\nSelected text:\n${cut}`);
    budget -= Math.min(selected.length, SELECTION_BUDGET);
  }
  const { label, text } = mainText();
  const items: string[] = [];
  let left = budget;
  for (const line of text.split("\n")) {
    const passage = line.trim();
    if (!passage) continue;
    if (left <= 0) break;
    items.push(cutTo(passage, left));
    left -= passage.length;
  }
  const omitted = text.length > budget ? ` (the first ${budget} of ${text.length} characters)` : "";
  parts.push(`\n${label}${omitted}:${items.length ? "" : " (no text)"}`);
  return { text: parts.join("\n"), snapshot: null, page, from_page: true, passages: { url: page.url, title: page.title, items } };
}

function selectionText(): string {
  for (const root of allRoots()) {
    if (root.nodeType !== Node.DOCUMENT_NODE) continue;
    const text = (root as Document).getSelection()?.toString() ?? "";
    if (text.trim()) return text;
  }
  return "";
}

/** A single article, else main / [role=main], else the whole body. */
function mainText(): { label: string; text: string } {
  const substantial = (el: Element | null | undefined): el is HTMLElement =>
    !!el && isVisible(el) && renderedText(el).trim().length >= MIN_MAIN_TEXT;
  const articles = Array.from(document.querySelectorAll("article")).filter(isVisible);
  if (articles.length === 1 && substantial(articles[0])) return { label: "Main content (article)", text: tidy(renderedText(articles[0])) };
  const main = Array.from(document.querySelectorAll("main, [role=main]")).find(substantial);
  if (main) return { label: "Main content", text: tidy(renderedText(main)) };
  return { label: "Page text", text: tidy(document.body ? renderedText(document.body) : "") };
}

const INLINE = new Set(["inline", "contents", "inline-block", "inline-flex", "inline-grid"]);

/**
 * The rendered text of `root`, including open shadow roots (in slot order) and same-origin
 * frames, which `innerText` leaves out. Subtrees without either are read with `innerText`.
 */
export function renderedText(root: Element): string {
  // Elements on the path from `root` to a shadow host, slot or frame are walked by hand.
  const walked = new Set<Element>();
  const mark = (el: Element) => {
    for (let a: Element | null = el; a && !walked.has(a); a = a === root ? null : flatParent(a)) walked.add(a);
  };
  const collect = (scope: Element | ShadowRoot) => {
    for (const el of scope.querySelectorAll("*")) {
      if (el.shadowRoot) {
        mark(el);
        collect(el.shadowRoot);
      } else if (is(el, "slot") || isFrame(el)) {
        mark(el);
      }
    }
  };
  collect(root);
  const walk = (node: Node): string => {
    // Source whitespace collapses as the browser renders it (pre-formatted text aside).
    if (node.nodeType === Node.TEXT_NODE) return (node.nodeValue ?? "").replace(/\s+/g, " ");
    if (!isElement(node) || !isHtml(node)) return "";
    if (isFrame(node)) {
      const body = frameDocument(node)?.body;
      return body && isVisible(node) ? `\n[Frame${node.title ? ` "${node.title}"` : ""}]\n${renderedText(body)}\n` : "";
    }
    if (!walked.has(node)) return node.checkVisibility() ? node.innerText : "";
    const display = styleOf(node).display;
    if (display === "none") return "";
    const inner = Array.from(flatChildren(node), walk).join("");
    return INLINE.has(display) ? inner : `\n${inner}\n`;
  };
  return walked.size === 0 && isHtml(root) ? root.innerText : walk(root);
}

/** Collapses runs of spaces and blank lines (layout whitespace costs tokens and says nothing). */
function tidy(text: string): string {
  return text
    .replace(/[ \t\u00a0]+/g, " ")
    .replace(/ ?\n ?/g, "\n")
    .replace(/\n{3,}/g, "\n\n")
    .trim();
}

/** Cuts at a word boundary and says how much was left out. */
function cutTo(text: string, budget: number): string {
  if (text.length <= budget) return text;
  let end = Math.max(0, budget);
  const space = text.lastIndexOf(" ", end);
  const newline = text.lastIndexOf("\n", end);
  const boundary = Math.max(space, newline);
  if (boundary > end * 0.8) end = boundary;
  return `${text.slice(0, end).trimEnd()}\n[… ${text.length - end} more characters left out]`;
}
