/**
 * The snapshot: the page's interactive elements, numbered, for the model to act on.
 *
 * What is listed (in document order, walking the rendered tree):
 * - links (`a[href]`, `area[href]`), buttons, `summary`, inputs (not `type=hidden`), textareas,
 *   selects, contenteditable regions (their root only), and elements with an interactive ARIA
 *   role (button, link, checkbox, radio, switch, combobox, listbox, option, menuitem*, tab,
 *   textbox, searchbox, slider, spinbutton, treeitem) or an `onclick` attribute;
 * - carefully, elements that only look clickable: their own `cursor: pointer` (not inherited), or
 *   `tabindex >= 0` without a role on a non-scrolling element, and then only when they are not
 *   inside another interactive element, contain none, and have a name or at least a hint from
 *   their id or class (shown as a guess: `span "(icon: send forward)"`, see labelOf). When what is
 *   inside such a container looks clickable itself (items with their own pointer cursor or
 *   tabindex, list items, or 2–12 short labelled parts sharing its cursor), those are listed
 *   instead: a jQuery UI menu's `<li>`s, a bar's "Reply" and "Forward", an open tree folder's
 *   entries; the container too, one level up, when it has text of its own (the folder's name);
 * - only when rendered with a size (`checkVisibility` + a non-empty box) and enabled (neither
 *   `:disabled` nor `aria-disabled="true"`); `display: none`, `inert` and collapsed subtrees
 *   (inside a zero-height box that clips its overflow, as accordions close) are skipped whole, so
 *   an option is listed only while its listbox is open. A checkbox or radio hidden
 *   behind its styled label counts as visible when the label is;
 * - inside open shadow roots (in slot order) and same-origin frames, in place; a cross-origin
 *   frame is one element whose text says its contents cannot be accessed;
 * - at most MAX_ELEMENTS: on bigger pages those nearest the visible area are kept.
 *
 * Indices: an element gets a number the first time it is listed and keeps it for its life on the
 * page (a WeakMap), so `[12]` means the same element in every later snapshot. Numbers are never
 * reused: an old number whose element is gone reads as stale, not as another element.
 *
 * Depth: the number of listed ancestors (an option inside a listbox is one deeper), at most 8.
 */

import type { ElementInfo, Snapshot } from "../../generated/protocol";
import { clean, flatChildren, frameDocument, is, isCollapsedBox, isElement, isFrame, isScrollable, pageInfo, styleOf } from "./flat-tree";
import { type Effect, recordJudged, submission } from "./effects";
import {
  attributesOf, formOf, frameOrigin, indexFor, isCrossOriginFrame, isDisabled, isInteractive, isVisible, labelOf, nameOf, roleOf,
  textOf,
} from "./elements";

const MAX_ELEMENTS = 400;
const MAX_DEPTH = 8;

/** Never listed and never entered. */
const SKIPPED = new Set(["head", "script", "style", "noscript", "template", "link", "meta", "hearth-overlay"]);

/** Anything a person could act on; an element containing one is not itself "clickable-looking". */
const INTERACTIVE_SELECTOR = [
  "a[href]", "button", "input:not([type=hidden])", "select", "textarea", "[contenteditable]:not([contenteditable=false])",
  "[onclick]", ...["button", "link", "checkbox", "radio", "switch", "tab", "menuitem", "option", "combobox", "textbox"].map((r) => `[role=${r}]`),
].join(",");

interface Found {
  el: Element;
  depth: number;
}

export function takeSnapshot(): Snapshot {
  const found: Found[] = [];
  visit(document.documentElement, 0, false, false, false, found);
  const kept = found.length > MAX_ELEMENTS ? nearestToViewport(found) : found;
  return { page: pageInfo(), elements: kept.map(toInfo) };
}

/**
 * `inside`: within a listed (or unlistable) interactive element, where nothing looks clickable on
 * its own. `inRegion`: within a clickable-looking container, where list items count as its items.
 */
function visit(el: Element, depth: number, inside: boolean, parentPointer: boolean, inRegion: boolean, out: Found[]): void {
  if (SKIPPED.has(el.localName) || el.hasAttribute("inert")) return;
  const style = styleOf(el);
  // Prune here: computing styles inside display:none subtrees is what makes walks slow.
  if (style.display === "none" || isCollapsedBox(el, style)) return;
  if (isFrame(el)) {
    visitFrame(el, depth, out);
    return;
  }
  const pointer = style.cursor === "pointer";
  const interactive = isInteractive(el);
  if (!interactive && !inside && (looksClickable(el, pointer && !parentPointer) || (inRegion && isItem(el, pointer)))) {
    visitClickable(el, depth, pointer, out);
    return;
  }
  let childDepth = depth;
  if (interactive && isVisible(el) && !isDisabled(el)) {
    out.push({ el, depth });
    childDepth = depth + 1;
  }
  // A select's options are chosen through the select tool; graphics hold nothing to act on.
  if (is(el, "select") || is(el, "textarea") || el.localName === "svg") return;
  for (const child of flatChildren(el)) {
    if (isElement(child)) visit(child, childDepth, inside || interactive, pointer, inRegion && !interactive, out);
  }
}

/**
 * An element that only looks clickable. Listed as one element, unless what is inside looks
 * clickable on its own: items with their own pointer cursor or tabindex, list items (a jQuery UI
 * menu: `<ul tabindex=0><li>`; an open tree folder), or several short labelled parts sharing the
 * container's cursor (`<div style="cursor: pointer"><span>Reply</span> <span>Forward</span></div>`).
 * Then those are listed, and the container too when it has text of its own (a folder's name).
 */
function visitClickable(el: Element, depth: number, pointer: boolean, out: Found[]): void {
  const items: Found[] = [];
  if (el.localName !== "svg") {
    for (const child of flatChildren(el)) if (isElement(child)) visit(child, depth + 1, false, pointer, true, items);
  }
  const listable = isVisible(el) && !isDisabled(el);
  if (items.length === 0) {
    const parts = pointer ? partsOf(el) : [];
    if (parts.length === 0) {
      if (listable) out.push({ el, depth });
      return;
    }
    for (const part of parts) visitClickable(part, depth, styleOf(part).cursor === "pointer", out);
    return;
  }
  const itemEls = new Set(items.map((i) => i.el));
  if (listable && textOf(el, 200, (e) => itemEls.has(e)) !== "") out.push({ el, depth });
  else for (const item of items) item.depth -= 1;
  out.push(...items);
}

/** Labels short enough to be a control's ("Reply", "Mark as read"), not a row of content. */
const MAX_PART_WORDS = 3;
const MAX_PART_CHARS = 30;

/**
 * The parts a pointer-cursor container is made of, when they look like separate controls: its
 * text is all in 2 to 12 visible children, each short and still showing the pointer. Otherwise none.
 */
function partsOf(container: Element): Element[] {
  const parts: Element[] = [];
  for (const child of flatChildren(container)) {
    if (child.nodeType === Node.TEXT_NODE && child.nodeValue?.trim()) return [];
    if (isElement(child) && !SKIPPED.has(child.localName) && isVisible(child) && textOf(child) !== "") parts.push(child);
  }
  if (parts.length < 2 || parts.length > 12) return [];
  const short = (text: string) => text.length <= MAX_PART_CHARS && text.split(" ").length <= MAX_PART_WORDS;
  return parts.every((p) => short(textOf(p)) && styleOf(p).cursor === "pointer") ? parts : [];
}

/** A list item inside a clickable-looking container (a menu's or a tree's entry). */
function isItem(el: Element, pointer: boolean): boolean {
  return pointer && is(el, "li") && isNamed(el);
}

function visitFrame(frame: Element, depth: number, out: Found[]): void {
  if (!isVisible(frame)) return;
  const doc = frameDocument(frame);
  if (doc?.documentElement) visit(doc.documentElement, depth, false, false, false, out);
  else if (!doc) out.push({ el: frame, depth });
}

function looksClickable(el: Element, ownPointer: boolean): boolean {
  const doc = el.ownerDocument;
  if (el === doc.body || el === doc.documentElement) return false;
  const tabbable = !el.hasAttribute("role") && Number.parseInt(el.getAttribute("tabindex") ?? "", 10) >= 0 && !isScrollable(el);
  if (!ownPointer && !tabbable) return false;
  return el.querySelector(INTERACTIVE_SELECTOR) === null && isNamed(el);
}

/** Has a name, or at least a hint from its id or class (shown as a guess). */
const isNamed = (el: Element): boolean => labelOf(el) !== "";

/** Keeps the MAX_ELEMENTS elements nearest the viewport, still in document order. */
function nearestToViewport(found: Found[]): Found[] {
  const distance = ({ el }: Found) => {
    const r = el.getBoundingClientRect();
    const height = el.ownerDocument.defaultView?.innerHeight ?? window.innerHeight;
    return r.bottom < 0 ? -r.bottom : r.top > height ? r.top - height : 0;
  };
  const ranked = found.map((f, order) => ({ f, order, d: distance(f) })).sort((a, b) => a.d - b.d || a.order - b.order);
  return ranked
    .slice(0, MAX_ELEMENTS)
    .sort((a, b) => a.order - b.order)
    .map((r) => r.f);
}

/** One element described as a snapshot describes it (numbered, its effect recorded for the checks
 * at the moment of acting): what lies under a point of a screenshot. */
export function describeElement(el: Element): ElementInfo {
  return toInfo({ el, depth: 0 });
}

function toInfo({ el, depth: found }: Found): ElementInfo {
  const depth = Math.min(found, MAX_DEPTH);
  const index = indexFor(el);
  if (isCrossOriginFrame(el)) {
    const title = nameOf(el);
    const text = `${title ? `${title}: ` : ""}cross-origin frame (${frameOrigin(el)}), contents cannot be accessed`;
    return { index, tag: el.localName, text, depth: Math.min(depth, MAX_DEPTH) };
  }
  const info: ElementInfo = { index, tag: el.localName, text: labelOf(el), depth };
  const role = roleOf(el);
  if (role) info.role = role;
  // Described by its effect (effects.ts), which the policy judges and the action checks again.
  const effect = recordJudged(el);
  const attributes = [...attributesOf(el), ...effectAttributes(el, effect)];
  if (attributes.length > 0) info.attributes = attributes;
  const form = formOf(el);
  const sent = effect.submit ?? effect.fieldSubmit ?? (form ? submission(form, null) : null);
  if (sent) info.form = { action: sent.action, method: sent.method, name: sent.name, ...(sent.target ? { target: sent.target } : {}) };
  return info;
}

/**
 * The policy's view of what acting on `el` does: where its link leads (href, the effective target,
 * ping addresses), whether activating it submits a form (`submits`, the form being `info.form`),
 * the type of the field typing reaches, and its visible text when the accessible name differs
 * (an aria-label "Save draft" on a button that reads "Send money"). Only `href` and `type` are
 * shown to the model (page.rs SHOWN_ATTRIBUTES).
 */
function effectAttributes(el: Element, effect: Effect): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  if (effect.link) {
    out.push(["href", clean(effect.link.href, 300)]);
    if (effect.link.target) out.push(["target", effect.link.target]);
    if (effect.link.ping.length > 0) out.push(["ping", effect.link.ping.join(" ")]);
    if (effect.link.download !== null) out.push(["download", clean(effect.link.download, 100)]);
  }
  if (effect.submit) out.push(["submits", "true"]);
  const typed = effect.field;
  if (typed && !el.hasAttribute("type") && !(is(el, "input") || is(el, "button"))) {
    if (typed.type === "password") out.push(["type", "password"]);
    if (typed.autocomplete && !el.hasAttribute("autocomplete")) out.push(["autocomplete", typed.autocomplete]);
  }
  const visible = clean(textOf(el), 200);
  if (visible && visible !== nameOf(el)) out.push(["text", visible]);
  return out;
}
