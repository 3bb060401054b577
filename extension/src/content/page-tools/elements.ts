// Facts about one element: its stable number, role, accessible name, value and whether it can be
// used. Shared by the snapshot and the actions, so both describe an element the same way.

import { ToolFailure } from "./errors";
import { clean, flatChildren, flatParent, frameDocument, is, isCollapsedBox, isElement, isFrame, isHtml, quote, styleOf } from "./flat-tree";

// ---- Stable indices --------------------------------------------------------------------------

const indexOf = new WeakMap<Element, number>();
const byIndex = new Map<number, WeakRef<Element>>();
// Collected elements leave the map; their numbers stay below `nextIndex`, which is how a stale
// number is told from one that never existed.
const forget = new FinalizationRegistry<number>((index) => byIndex.delete(index));
let nextIndex = 1;

/** Whether the element was ever listed (has a number). */
export const hasIndex = (el: Element): boolean => indexOf.has(el);

/** The element's number, assigned on first sight and kept for its whole life. */
export function indexFor(el: Element): number {
  let index = indexOf.get(el);
  if (index === undefined) {
    index = nextIndex++;
    indexOf.set(el, index);
    byIndex.set(index, new WeakRef(el));
    forget.register(el, index);
  }
  return index;
}

/** The element numbered `index`, or a failure telling the model what to do instead. */
export function elementAt(index: unknown): Element {
  // The agent validates arguments; a numeric string is still read the one way it can be.
  if (typeof index === "string" && /^\s*\d+\s*$/.test(index)) index = Number(index);
  if (typeof index !== "number" || !Number.isInteger(index)) {
    throw new ToolFailure(`The element number must be an integer such as 12 (for [12]), got ${JSON.stringify(index)}.`);
  }
  if (index < 1 || index >= nextIndex) throw new ToolFailure(`No element [${index}]; take a snapshot first.`);
  const el = byIndex.get(index)?.deref();
  // A removed frame's document loses its window but its elements stay "connected" to it.
  if (!el || !el.isConnected || !el.ownerDocument.defaultView) {
    throw new ToolFailure(`Element [${index}] is no longer on the page; take a new snapshot.`);
  }
  return el;
}

/** The element numbered `index` while it is on the page, else null (no failure: for the overlay). */
export function elementByIndex(index: number): Element | null {
  const el = byIndex.get(index)?.deref();
  return el && el.isConnected && el.ownerDocument.defaultView ? el : null;
}

// ---- Roles -----------------------------------------------------------------------------------

/** Roles that mean "you can act on this". */
const INTERACTIVE_ROLES = new Set([
  "button", "link", "checkbox", "radio", "switch", "combobox", "listbox", "option", "menuitem", "menuitemcheckbox",
  "menuitemradio", "tab", "textbox", "searchbox", "slider", "spinbutton", "treeitem",
]);

const INPUT_ROLES: Record<string, string> = {
  button: "button", submit: "button", reset: "button", image: "button", checkbox: "checkbox", radio: "radio",
  range: "slider", number: "spinbutton", search: "searchbox", text: "textbox", email: "textbox", tel: "textbox", url: "textbox",
};

/** Input types whose value is free text (or a formatted value set the same way). */
const TEXT_INPUT_TYPES = new Set([
  "text", "search", "email", "url", "tel", "password", "number", "date", "time", "datetime-local", "month", "week",
]);

export const isTextInput = (el: Element): el is HTMLInputElement => is(el, "input") && TEXT_INPUT_TYPES.has(el.type);

/** The root of a contenteditable region (nested editable elements belong to it). */
export function isEditingHost(el: Element): boolean {
  if (!isHtml(el) || !el.isContentEditable) return false;
  const parent = el.parentElement;
  return !parent || !parent.isContentEditable;
}

export function roleOf(el: Element): string | undefined {
  const explicit = el.getAttribute("role")?.trim().split(/\s+/)[0]?.toLowerCase();
  if (explicit && explicit !== "none" && explicit !== "presentation" && explicit !== "generic") return explicit;
  if (is(el, "a") || is(el, "area")) return el.hasAttribute("href") ? "link" : undefined;
  if (is(el, "button") || is(el, "summary")) return "button";
  if (is(el, "select")) return el.multiple || el.size > 1 ? "listbox" : "combobox";
  if (is(el, "textarea")) return "textbox";
  if (is(el, "input")) return el.hasAttribute("list") && TEXT_INPUT_TYPES.has(el.type) ? "combobox" : INPUT_ROLES[el.type];
  if (is(el, "option")) return "option";
  if (isEditingHost(el)) return "textbox";
  return undefined;
}

/** Interactive by its tag or role alone (the snapshot adds a careful pointer-cursor rule). */
export function isInteractive(el: Element): boolean {
  if (is(el, "a") || is(el, "area")) return el.hasAttribute("href") || hasInteractiveRole(el);
  if (is(el, "button") || is(el, "select") || is(el, "textarea")) return true;
  if (is(el, "input")) return el.type !== "hidden";
  if (is(el, "summary")) return is(el.parentElement ?? el, "details");
  return hasInteractiveRole(el) || isEditingHost(el) || el.hasAttribute("onclick");
}

const hasInteractiveRole = (el: Element): boolean => INTERACTIVE_ROLES.has(roleOf(el) ?? "");

// ---- State -----------------------------------------------------------------------------------

export const isDisabled = (el: Element): boolean => el.getAttribute("aria-disabled") === "true" || el.matches(":disabled");

/** Rendered with a size: not display:none, visibility:hidden, in a closed <details>, or zero-sized. */
function rendered(el: Element): boolean {
  if (!el.checkVisibility({ visibilityProperty: true })) return false;
  const r = el.getBoundingClientRect();
  if (r.width > 0 && r.height > 0) return true;
  // An inline wrapper around a block (or a positioned child) can measure zero itself.
  for (const child of el.children) {
    const c = child.getBoundingClientRect();
    if (c.width > 0 && c.height > 0 && child.checkVisibility({ visibilityProperty: true })) return true;
  }
  return false;
}

export function isVisible(el: Element): boolean {
  if (rendered(el)) return true;
  // Custom checkboxes and radios hide the real input and show a styled label; clicking works.
  if (is(el, "input") && (el.type === "checkbox" || el.type === "radio")) return Array.from(el.labels ?? []).some(rendered);
  return false;
}

/** Visible, and not inside a collapsed box (which the snapshot prunes while walking down). */
export function isShown(el: Element): boolean {
  if (!isVisible(el)) return false;
  for (let a = flatParent(el); a; a = flatParent(a)) if (isCollapsedBox(a, styleOf(a))) return false;
  return true;
}

export function isCrossOriginFrame(el: Element): boolean {
  return isFrame(el) && frameDocument(el) === null;
}

/** "localhost:8080" for a frame's address, or a description when it has none. */
export function frameOrigin(frame: Element): string {
  try {
    return new URL((frame as HTMLIFrameElement).src).host || "sandboxed content";
  } catch {
    return "sandboxed content";
  }
}

// ---- Names and values ------------------------------------------------------------------------

const SKIPPED_TEXT = new Set(["script", "style", "noscript", "template", "select", "textarea", "input", "datalist", "svg"]);

/**
 * The rendered text of a subtree in flat-tree order, whitespace collapsed (images count by their
 * alt text). Descendants that are `display: none` or `visibility: hidden` (or in a closed
 * <details>) are left out; the node itself is always read, as an `aria-labelledby` target is even
 * when hidden. Boxes that are not inline (blocks, cells, inline-blocks…) are words of their own.
 * `skip` leaves out the subtrees it accepts (reading as a word break).
 */
export function textOf(node: Node, max = 200, skip?: (el: Element) => boolean): string {
  let out = "";
  const walk = (n: Node, shown: boolean) => {
    if (out.length > max) return;
    if (n.nodeType === Node.TEXT_NODE) {
      if (shown) out += n.nodeValue ?? "";
      return;
    }
    if (!isElement(n)) return;
    if (n.hasAttribute("hidden") || n.getAttribute("aria-hidden") === "true") return;
    let separate = false;
    if (n !== node) {
      if (skip?.(n)) {
        out += " ";
        return;
      }
      const style = styleOf(n);
      if (style.display === "none") return;
      shown = style.visibility === "visible";
      separate = style.display !== "inline" && style.display !== "contents";
    }
    if (SKIPPED_TEXT.has(n.localName)) {
      // An icon-only button is often an <svg> with a <title>.
      if (n.localName === "svg" && shown) out += ` ${n.querySelector("title")?.textContent ?? ""} `;
      return;
    }
    if (is(n, "img") || is(n, "area")) {
      if (shown) out += ` ${n.getAttribute("alt") ?? ""} `;
      return;
    }
    if (is(n, "br")) out += " ";
    if (separate) out += " ";
    // A closed <details> shows only its summary.
    const closed = is(n, "details") && !n.open;
    for (const child of flatChildren(n)) if (!closed || (isElement(child) && is(child, "summary"))) walk(child, shown);
    if (separate) out += " ";
  };
  walk(node, true);
  return clean(out, 1000);
}

export function idRefs(el: Element, attr: string): Element[] {
  const ids = el.getAttribute(attr)?.trim().split(/\s+/).filter(Boolean) ?? [];
  const root = el.getRootNode() as Document | ShadowRoot;
  return ids.map((id) => root.getElementById(id)).filter((e): e is HTMLElement => e !== null);
}

/** The accessible name, roughly as a screen reader would announce it (cut to 80 characters). */
export function nameOf(el: Element): string {
  const byRef = idRefs(el, "aria-labelledby").map((r) => textOf(r)).join(" ");
  if (clean(byRef)) return clean(byRef);
  const aria = el.getAttribute("aria-label");
  if (aria?.trim()) return clean(aria);
  if (is(el, "input") && ["submit", "reset", "button"].includes(el.type)) {
    return clean(el.value || (el.type === "submit" ? "Submit" : el.type === "reset" ? "Reset" : ""));
  }
  if (is(el, "input") && el.type === "image") return clean(el.alt || el.value || "Submit");
  if (is(el, "input") || is(el, "textarea") || is(el, "select")) {
    const labels = Array.from(el.labels ?? []).map((l) => textOf(l)).join(" ");
    // A checkbox's or radio's loose label usually follows it ("Gender: (•) Male"): not guessed.
    const loose = labels || (is(el, "input") && (el.type === "checkbox" || el.type === "radio")) ? "" : nearbyLabel(el);
    return clean(labels || loose || el.getAttribute("placeholder") || el.getAttribute("aria-placeholder") || el.title);
  }
  if (is(el, "img")) return clean(el.alt || el.title);
  if (isFrame(el)) return clean(el.title || el.name);
  const text = textOf(el);
  if (text) return clean(text);
  return clean(el.getAttribute("title") || el.getAttribute("aria-placeholder") || el.getAttribute("placeholder") || "");
}

/** How long a text next to a field may be and still be read as its label. */
const MAX_NEARBY_LABEL = 60;

/**
 * A label the page did not tie to the field (no `for`, not wrapping it), read from where it sits:
 * just before the field, or before a wrapper holding only the field, a `<label>`, an element
 * whose class or id says "label", or a text ending with ":" (`<label>Username</label><input>`,
 * `<span>Year:</span><input>`, `Name: <input>`) or the only other thing in its row; just after it,
 * an element whose class or id says "label"; else the header cell of the field's table row (`<tr><th>Email</th><td><input>`).
 */
function nearbyLabel(field: Element): string {
  let el: Element | null = field;
  for (let level = 0; el && level < 3; level++) {
    const previous = adjacent(el, "previousSibling");
    const before = labelText(previous, false) || pairedText(el, previous);
    if (before) return before;
    const after = labelText(adjacent(el, "nextSibling"), true);
    if (after) return after;
    // Up through a wrapper that holds nothing else with text or fields.
    const parent: Element | null = el.parentElement;
    if (!parent || is(parent, "form") || is(parent, "body") || is(parent, "td") || is(parent, "th")) break;
    if (parent.querySelectorAll("input, select, textarea, button").length > 1 || textOf(parent, 100) !== "") break;
    el = parent;
  }
  const cell = field.closest("td");
  const header = cell?.parentElement ? Array.from(cell.parentElement.children).find((c) => is(c, "th")) : undefined;
  if (header) {
    const text = textOf(header, MAX_NEARBY_LABEL + 20);
    if (text.length <= MAX_NEARBY_LABEL) return text;
  }
  return "";
}

/**
 * The text of the one element sharing a row with the field: `<div><b>Year</b><input></div>`,
 * when the row holds nothing else (no other text, no other field).
 */
function pairedText(el: Element, previous: Node | null): string {
  const row = el.parentElement;
  if (!row || !isElement(previous) || is(row, "form") || is(row, "body") || adjacent(el, "nextSibling")) return "";
  if (row.querySelectorAll("input, select, textarea, button").length > 1 || adjacent(previous, "previousSibling")) return "";
  const text = textOf(previous, MAX_NEARBY_LABEL + 20);
  return text && text.length <= MAX_NEARBY_LABEL ? text : "";
}

/** The nearest sibling node that is neither blank text nor a line break. */
function adjacent(el: Element, way: "previousSibling" | "nextSibling"): Node | null {
  let n = el[way];
  while (n && ((n.nodeType === Node.TEXT_NODE && !n.nodeValue?.trim()) || n.nodeType === Node.COMMENT_NODE || (isElement(n) && is(n, "br")))) n = n[way];
  return n;
}

const saysLabel = (el: Element) => /(^|[^a-z])label([^a-z]|$)/i.test(`${el.id} ${el.getAttribute("class") ?? ""}`);

/** The text of a node next to a field, when it reads as the field's label. */
function labelText(node: Node | null, after: boolean): string {
  if (!node) return "";
  if (node.nodeType === Node.TEXT_NODE) {
    const text = clean(node.nodeValue ?? "", 1000);
    return !after && text.endsWith(":") && text.length <= MAX_NEARBY_LABEL ? text : "";
  }
  if (!isElement(node) || node.querySelector("input, select, textarea, button")) return "";
  const labelled = (is(node, "label") && !node.hasAttribute("for")) || saysLabel(node);
  if (after && !labelled) return "";
  const text = textOf(node, MAX_NEARBY_LABEL + 20);
  return text && text.length <= MAX_NEARBY_LABEL && (labelled || text.endsWith(":")) ? text : "";
}

/** Words that say nothing about what a control does (class-name plumbing), left out of hints. */
const NOISE = new Set([
  "icon", "icons", "ico", "glyphicon", "material", "symbols", "outlined", "rounded", "sharp", "fas", "far", "fab", "fal", "svg", "img",
  "wrapper", "wrap", "container", "inner", "outer", "default", "corner", "corners", "all", "state", "widget", "content", "helper",
  "clearfix", "active", "hover", "focus", "selected", "disabled", "hidden", "visible", "show", "hide", "pull", "float", "left", "right",
  "top", "bottom", "small", "large", "big", "item", "element", "elem", "component", "comp", "btn", "action", "actions", "control",
]);

/** The words of an identifier: "send-forward" → send forward, "closeBtn" → close (noise dropped). */
function identifierWords(id: string): string[] {
  return id
    .replace(/([a-z])([A-Z])/g, "$1 $2")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => /^[a-z]{3,}$/.test(w) && !NOISE.has(w));
}

/**
 * A guess at what an unnamed control does, from its id, its first telling class, or its image's
 * file name ("send-forward" → "send forward", class "trash" → "trash"); "" when nothing tells.
 */
export function hintOf(el: Element): string {
  const fromId = identifierWords(el.id);
  if (fromId.length > 0) return fromId.slice(0, 4).join(" ");
  for (const cls of Array.from(el.classList)) {
    const words = identifierWords(cls);
    if (words.length > 0) return [...new Set(words)].slice(0, 4).join(" ");
  }
  const image = is(el, "img") ? el : el.querySelector("img");
  const file = image?.getAttribute("src")?.split(/[?#]/)[0]?.split("/").pop()?.replace(/\.[a-z0-9]+$/i, "") ?? "";
  return identifierWords(file).slice(0, 4).join(" ");
}

/** Form fields have labels, values and placeholders; a hint from their id is left to those. */
const isField = (el: Element) => is(el, "input") || is(el, "textarea") || is(el, "select") || isEditingHost(el);

/**
 * The text the model sees for an element: its name, or for a control without one, the guess from
 * its id or class, marked as a guess: `(icon: send forward)`.
 */
export function labelOf(el: Element): string {
  const name = nameOf(el);
  if (name || isField(el)) return name;
  const hint = hintOf(el);
  return hint ? `(icon: ${hint})` : "";
}

/** The current value, as a person would read it (never a password's). */
export function valueOf(el: Element): string | undefined {
  if (is(el, "input")) {
    if (el.type === "password") return undefined;
    if (["checkbox", "radio", "submit", "reset", "button", "image", "file", "hidden"].includes(el.type)) return undefined;
    return clean(el.value, 200);
  }
  if (is(el, "textarea")) return clean(el.value, 200);
  if (is(el, "select")) return clean(Array.from(el.selectedOptions, (o) => o.label || o.text).join(", "), 200);
  if (isEditingHost(el)) return clean((el as HTMLElement).innerText, 200);
  const now = el.getAttribute("aria-valuetext") ?? el.getAttribute("aria-valuenow");
  return now ? clean(now, 200) : undefined;
}

/** `[12] button "Place order"`, for messages. */
export function describe(el: Element, index: number): string {
  const name = labelOf(el);
  return `[${index}] ${roleOf(el) ?? el.localName}${name ? ` ${quote(name)}` : ""}`;
}

/** The attributes the model and the safety policy see, only those present. */
export function attributesOf(el: Element): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const add = (key: string, value: string | null | undefined) => {
    if (value !== null && value !== undefined && value !== "") out.push([key, value]);
  };
  // The browser's parsed type: `<button type="sumbit">` is a submit button.
  if (is(el, "input")) add("type", el.type);
  else if (is(el, "button")) add("type", el.hasAttribute("type") || el.form ? el.type : null);
  for (const name of ["name", "id", "placeholder", "autocomplete"]) add(name, el.getAttribute(name));
  // The name usually is the aria-label; repeating it only costs tokens.
  const aria = el.getAttribute("aria-label");
  if (aria && clean(aria) !== nameOf(el)) add("aria-label", aria);
  // Where a link leads and what a control submits come from its effect (effects.ts), added by
  // the snapshot: the policy judges what the browser will do, not the raw attributes.
  add("value", valueOf(el));
  const role = roleOf(el);
  if (is(el, "input") && (el.type === "checkbox" || el.type === "radio")) add("checked", String(el.checked));
  else if (role === "checkbox" || role === "radio" || role === "switch" || role === "menuitemcheckbox" || role === "menuitemradio") {
    add("checked", el.getAttribute("aria-checked") ?? "false");
  }
  if (role === "option" || role === "tab" || role === "treeitem") add("selected", el.getAttribute("aria-selected"));
  if (is(el, "summary") && is(el.parentElement ?? el, "details")) add("expanded", String((el.parentElement as HTMLDetailsElement).open));
  else add("expanded", el.getAttribute("aria-expanded"));
  return out;
}

/** The form an element belongs to (form-associated controls first, then the enclosing <form>). */
export function formOf(el: Element): HTMLFormElement | null {
  const owner = (el as Partial<HTMLInputElement>).form;
  if (isElement(owner) && is(owner, "form")) return owner;
  const closest = el.closest("form");
  return closest && is(closest, "form") ? closest : null;
}
