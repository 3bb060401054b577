// The actions: click, type, select and scroll. Each resolves an index to a usable element (or
// fails with a message the model can act on), acts the way a person's input would reach the
// page's handlers, then waits for the page to settle.

import type { PressKey, ToolArguments, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { allRoots, clean, fire, flatChildren, flatParent, frameDocument, is, isElement, isFrame, isHtml, isScrollable, pageInfo, quote, styleOf } from "./flat-tree";
import {
  describe, elementAt, formOf, frameOrigin, hasIndex, idRefs, indexFor, isCrossOriginFrame, isDisabled, isEditingHost, isTextInput,
  isShown, isVisible, labelOf, nameOf, roleOf, textOf,
} from "./elements";
import { CHANGED, defaultButton, harmlessLinkWithin, isSubmitter, sameEffect } from "./effects";
import { settle, waitUntil, watchChanges } from "./settle";

export const result = (text: string): ToolOutput => ({ text, snapshot: null, page: pageInfo(), from_page: false });

/** The element behind `index`, if it can be acted on, with its description for messages. */
function usable(index: unknown): { el: Element; label: string } {
  const el = elementAt(index);
  if (isCrossOriginFrame(el)) {
    const src = (el as HTMLIFrameElement).src;
    throw new ToolFailure(
      `[${indexFor(el)}] is a cross-origin frame (${frameOrigin(el)}): its contents cannot be accessed from this page.` +
        (src ? ` To use it, navigate to ${src}.` : ""),
    );
  }
  const label = describe(el, indexFor(el));
  // The consent policy judged the element as the snapshot described it: one that now leads,
  // submits or types elsewhere (a page swapping a link after the snapshot) is not acted on.
  if (!sameEffect(el)) throw new ToolFailure(`${label} ${CHANGED}`);
  if (!isShown(el)) {
    throw new ToolFailure(`${label} is not visible (hidden, collapsed or in a closed menu); open what contains it, or take a new snapshot.`);
  }
  if (isDisabled(el)) throw new ToolFailure(`${label} is disabled; the page may need something else first, such as a required field.`);
  return { el, label };
}

// ---- click -----------------------------------------------------------------------------------

export async function click(args: ToolArguments["click"], signal: AbortSignal): Promise<ToolOutput> {
  const { el, label } = usable(args.index);
  const form = isSubmitter(el) && !el.hasAttribute("formnovalidate") ? formOf(el) : null;
  const problems = form ? formProblems(form) : "";
  const changes = watchChanges(el);
  try {
    clickElement(el);
  } catch (error) {
    changes(); // stops watching
    throw error;
  }
  await settle(signal);
  const changed = changes();
  // Said to the model, and counted by the agent's breaker: a dead button clicked again and again.
  return { ...result(`Clicked ${label}.${problems}${changed ? "" : " Nothing on the page changed."}`), changed };
}

/**
 * The events a mouse click produces, after scrolling the element into view, sent where a real
 * click would land: to whatever is on top at a visible point of the element (one of its
 * descendants, say the link inside a tab). Fails when something else covers it (a dialog, a
 * banner); `who` names the element in that message.
 */
export function clickElement(el: Element, who = `Element [${indexFor(el)}]`, judged: Element = el): void {
  el.scrollIntoView({ block: "center", inline: "center", behavior: "instant" });
  const aim = aimAt(el);
  if ("cover" in aim) {
    throw new ToolFailure(`${who} is covered by ${describeCover(aim.cover)}; close it first or scroll.`);
  }
  const { target, x, y } = aim;
  // What the click will activate (a link inside a wrapper, a label's control, an option that is a
  // link) must be what the policy judged `judged` to do, or a link the policy would not ask about
  // (same origin, this tab); checked again before the click itself, after the page's pointer and
  // mouse handlers ran (an href swapped on mousedown).
  const activates = (): boolean => sameEffect(judged, target, ["link", "submit"]) || harmlessLinkWithin(judged, target);
  if (!activates()) throw new ToolFailure(`${who} ${CHANGED}`);
  clickPoint(target, x, y, activates, who);
}

/** The events of a mouse click at (x, y) of `target`'s frame, as clickElement sends them. */
export function clickPoint(target: Element, x: number, y: number, activates: () => boolean, who: string): void {
  const view = target.ownerDocument.defaultView;
  const mouse: MouseEventInit = {
    bubbles: true, cancelable: true, composed: true, view, clientX: x, clientY: y, screenX: x, screenY: y, button: 0, detail: 1,
  };
  const pointer: PointerEventInit = { ...mouse, pointerId: 1, pointerType: "mouse", isPrimary: true, width: 1, height: 1 };
  const local = { bubbles: false, cancelable: false };
  fire(target, new PointerEvent("pointerover", pointer));
  fire(target, new PointerEvent("pointerenter", { ...pointer, ...local }));
  fire(target, new MouseEvent("mouseover", mouse));
  fire(target, new MouseEvent("mouseenter", { ...mouse, ...local }));
  fire(target, new PointerEvent("pointermove", pointer));
  fire(target, new MouseEvent("mousemove", mouse));
  const down = fire(target, new PointerEvent("pointerdown", { ...pointer, buttons: 1, pressure: 0.5 }));
  // A cancelled pointerdown suppresses the mouse events after it, but not the click; a cancelled
  // mousedown keeps the focus where it was.
  if (down && fire(target, new MouseEvent("mousedown", { ...mouse, buttons: 1 }))) focusFor(target);
  fire(target, new PointerEvent("pointerup", pointer));
  if (down) fire(target, new MouseEvent("mouseup", mouse));
  if (!activates()) throw new ToolFailure(`${who} ${CHANGED}`);
  // A dispatched click runs the default action too: links follow, checkboxes toggle, forms submit.
  fire(target, new MouseEvent("click", mouse));
}

type Aim = { target: Element; x: number; y: number } | { cover: Element };

/**
 * Where to click `el` (coordinates in its own frame) and what receives the click there. Points are
 * tried in order: on its first visible text (see textBox), the centre of its box and of each of
 * its boxes (lines of a link), then a grid over its first box, all clipped to the viewport.
 * Landing on `el` or inside it is a hit. Landing on an ancestor (`el` lets the pointer through) or
 * on the label of a checkbox sends the click to `el` itself, as does an element with no area to
 * aim at (a checkbox hidden behind its styled label). Anything else at every point covers it.
 */
function aimAt(el: Element): Aim {
  const view = el.ownerDocument.defaultView ?? window;
  const clip = (r: DOMRect) => {
    const left = Math.max(r.left, 0);
    const top = Math.max(r.top, 0);
    const right = Math.min(r.right, view.innerWidth);
    const bottom = Math.min(r.bottom, view.innerHeight);
    return right - left >= 1 && bottom - top >= 1 ? { left, top, right, bottom } : null;
  };
  const boxes = Array.from(el.getClientRects(), clip).filter((b) => b !== null);
  const centre = (b: { left: number; top: number; right: number; bottom: number }): [number, number] => [(b.left + b.right) / 2, (b.top + b.bottom) / 2];
  const points: Array<[number, number]> = [];
  const text = textBox(el);
  const onText = text && clip(text);
  if (onText) points.push(centre(onText));
  const whole = clip(el.getBoundingClientRect());
  if (whole) {
    const [x, y] = centre(whole);
    if (boxes.some((b) => x >= b.left && x <= b.right && y >= b.top && y <= b.bottom)) points.push([x, y]);
  }
  points.push(...boxes.slice(0, 8).map(centre));
  // Then the rest of the first box, nearest the centre first, for an element partly under another.
  if (boxes[0]) {
    const { left, top, right, bottom } = boxes[0];
    const steps = [0.5, 0.3, 0.7, 0.1, 0.9];
    const grid = steps.flatMap((fy) => steps.map((fx) => [fx, fy]));
    grid.sort((a, b) => Math.hypot(a[0] - 0.5, a[1] - 0.5) - Math.hypot(b[0] - 0.5, b[1] - 0.5));
    points.push(...grid.map(([fx, fy]): [number, number] => [left + (right - left) * fx, top + (bottom - top) * fy]));
  }
  const fallback = () => {
    const r = el.getBoundingClientRect();
    return { target: el, x: r.left + r.width / 2, y: r.top + r.height / 2 };
  };
  let cover: Element | undefined;
  for (const [x, y] of points) {
    const hit = hitAt(el, x, y);
    if (!hit || hit === el || containsFlat(el, hit)) return { target: hit ?? el, x, y };
    if (containsFlat(hit, el) || labelFor(hit) === el) return { target: el, x, y };
    cover ??= hit;
  }
  return cover ? { cover: layerOf(cover, el) } : fallback();
}

/** Where text cannot be aimed at: form controls draw their own, scripts and styles draw none. */
const NO_TEXT = new Set(["select", "textarea", "input", "script", "style", "noscript", "template", "option", "datalist"]);

/**
 * The box of the element's first visible text, as a person aims at a label: text outside its
 * numbered descendants first (an open folder's own name, not an entry inside it), else any (the
 * link that fills a tab).
 */
function textBox(el: Element): DOMRect | undefined {
  const doc = el.ownerDocument;
  let own: DOMRect | undefined;
  let any: DOMRect | undefined;
  let budget = 300;
  const boxOf = (text: Node) => {
    const range = doc.createRange();
    range.selectNodeContents(text);
    return Array.from(range.getClientRects()).find((r) => r.width >= 1 && r.height >= 1);
  };
  const walk = (n: Node, nested: boolean) => {
    for (const child of flatChildren(n)) {
      if (own || budget-- <= 0) return;
      if (isElement(child)) {
        if (!NO_TEXT.has(child.localName)) walk(child, nested || hasIndex(child));
      } else if (child.nodeType === Node.TEXT_NODE && child.nodeValue?.trim() && (!nested || !any)) {
        const box = boxOf(child);
        if (box && !nested) own = box;
        else if (box) any = box;
      }
    }
  };
  walk(el, false);
  return own ?? any;
}

/**
 * The element a click at (x, y) in `el`'s frame lands on: hit-tested from the tools' document
 * down (frames above `el`'s can cover it too), into open shadow roots and same-origin frames,
 * never stopping at Hearth's own overlay. Null when the point cannot be tested.
 */
function hitAt(el: Element, x: number, y: number): Element | null {
  // The point in the top document's coordinates.
  let doc = el.ownerDocument;
  while (doc !== document) {
    const frame = doc.defaultView?.frameElement;
    if (!frame) return null;
    const [dx, dy] = frameOffset(frame);
    [x, y] = [x + dx, y + dy];
    doc = frame.ownerDocument;
  }
  return hitFromTop(x, y, el).hit;
}

/**
 * What a click at (x, y) of the top document's viewport lands on: hit-tested into open shadow
 * roots and same-origin frames (stopping at `stopAt`), never at Hearth's own overlay; `x`, `y`
 * are returned in the hit element's own frame.
 */
export function hitFromTop(x: number, y: number, stopAt: Element | null = null): { hit: Element | null; x: number; y: number } {
  let root: Document | ShadowRoot = document;
  let hit: Element | null = null;
  for (let depth = 0; depth < 32; depth++) {
    const inRoot = (e: Element) => e.getRootNode() === root && e.localName !== "hearth-overlay";
    const found: Element | undefined = root.elementsFromPoint(x, y).find(inRoot);
    if (!found) break;
    hit = found;
    if (hit === stopAt) break;
    if (hit.shadowRoot) {
      root = hit.shadowRoot;
      continue;
    }
    const inner: Document | null = isFrame(hit) ? frameDocument(hit) : null;
    if (!inner) break;
    const [dx, dy] = frameOffset(hit);
    [x, y] = [x - dx, y - dy];
    root = inner;
  }
  return { hit, x, y };
}

/** Where a frame's content starts, in its parent's viewport. */
function frameOffset(frame: Element): [number, number] {
  const r = frame.getBoundingClientRect();
  const style = styleOf(frame);
  return [r.left + frame.clientLeft + Number.parseFloat(style.paddingLeft), r.top + frame.clientTop + Number.parseFloat(style.paddingTop)];
}

/** The parent in the rendered tree, and a frame's document's parent is its frame. */
const parentAcross = (e: Element): Element | null => flatParent(e) ?? e.ownerDocument.defaultView?.frameElement ?? null;

/** Whether `inner` is `outer` or inside it in the rendered tree (slots, shadow roots, frames). */
function containsFlat(outer: Element, inner: Element): boolean {
  for (let e: Element | null = inner; e; e = parentAcross(e)) if (e === outer) return true;
  return false;
}

/** The control a label (at or around `el`) clicks. */
function labelFor(el: Element): Element | null {
  const label = el.closest("label");
  return label && is(label, "label") ? label.control : null;
}

/**
 * What covers the target, for the message: the outermost ancestor of `hit` that is not also around
 * the target (a dialog, a banner, a backdrop), below the body, or the dialog it is in.
 */
function layerOf(hit: Element, target: Element): Element {
  let layer = hit;
  for (let p = parentAcross(layer); p && !containsFlat(p, target); p = parentAcross(p)) {
    if (p === p.ownerDocument.body || p === p.ownerDocument.documentElement) break;
    layer = p;
    if (roleOf(p) === "dialog" || roleOf(p) === "alertdialog" || is(p, "dialog")) break;
  }
  return layer;
}

function describeCover(layer: Element): string {
  const name = labelOf(layer);
  return `${roleOf(layer) ?? layer.localName}${name ? ` ${quote(name)}` : ""}`;
}

/** Focuses the element or its nearest focusable ancestor, as a mouse press does. */
function focusFor(el: Element): void {
  for (let t: Element | null = el; t; t = t.parentElement ?? hostOf(t)) {
    if (isHtml(t) && (t.hasAttribute("tabindex") || t.tabIndex >= 0 || t.isContentEditable)) {
      t.focus({ preventScroll: true });
      return;
    }
  }
  const active = el.ownerDocument.activeElement;
  if (active && isHtml(active)) active.blur();
}

const hostOf = (el: Element): Element | null => {
  const root = el.getRootNode();
  return root.nodeType === Node.DOCUMENT_FRAGMENT_NODE ? (root as ShadowRoot).host : null;
};

/** Why the browser will refuse to send `form` (its built-in validation), or "". */
function formProblems(form: HTMLFormElement): string {
  if (form.noValidate) return "";
  const invalid = Array.from(form.elements).filter((e) => {
    const field = e as HTMLInputElement;
    return field.willValidate && !field.validity.valid;
  });
  if (invalid.length === 0) return "";
  const list = invalid.slice(0, 3).map((e) => `${describe(e, indexFor(e))}: ${(e as HTMLInputElement).validationMessage}`);
  return ` The browser will not send the form until these are fixed: ${list.join("; ")}.`;
}

// ---- type ------------------------------------------------------------------------------------

/** What each formatted input type expects, for the message when it refuses a text. */
const FORMATS: Record<string, string> = {
  number: "a number", date: "a date as YYYY-MM-DD", time: "a time as HH:MM", "datetime-local": "YYYY-MM-DDTHH:MM",
  month: "YYYY-MM", week: "YYYY-Www", color: "a colour as #rrggbb", range: "a number",
};

type TextField = HTMLInputElement | HTMLTextAreaElement;

/** The quiet period that ends the wait after typing: longer than the usual 300 ms debounce. */
const AFTER_TYPING_MS = 400;

const isValueField = (el: Element): el is TextField =>
  isTextInput(el) || is(el, "textarea") || (is(el, "input") && (el.type === "range" || el.type === "color"));

export async function typeText(args: ToolArguments["type"], signal: AbortSignal): Promise<ToolOutput> {
  const { el, label } = usable(args.index);
  if (typeof args.text !== "string") throw new ToolFailure("`text` must be a string.");
  const text = args.text;
  const field = textField(el, label);
  // The field typed into (a wrapper's, a label's) must be the one judged: same form, same kind.
  if (field !== el && !sameEffect(el, field, ["field", "fieldSubmit"])) throw new ToolFailure(`${label} ${CHANGED}`);
  field.scrollIntoView({ block: "center", behavior: "instant" });
  let note = "";
  if (isValueField(field)) {
    if (field.readOnly) throw new ToolFailure(`${label} is read-only.`);
    note = typeInto(field, text, label);
  } else {
    typeIntoEditor(field, text);
  }
  const secret = is(field, "input") && field.type === "password";
  const entered = secret ? `${text.length} characters` : quote(text);
  // The page's input and change handlers ran: a form whose destination changed is not sent.
  if (args.submit === true && !sameEffect(el, field, ["fieldSubmit"])) {
    throw new ToolFailure(`Typed into ${label}, but its form ${CHANGED}`);
  }
  const enter = args.submit === true ? pressEnter(field) : "";
  // Suggestions usually wait for a pause in typing (jQuery UI's autocomplete: 300 ms).
  await settle(signal, AFTER_TYPING_MS);
  return result(`Typed ${entered} into ${label}.${note}${enter}`);
}

/** The field to type into: the element itself, its editing host, or the one field it wraps. */
function textField(el: Element, label: string): TextField | HTMLElement {
  if (isValueField(el)) return el;
  if (isHtml(el) && el.isContentEditable) {
    let host: HTMLElement = el;
    while (!isEditingHost(host) && host.parentElement) host = host.parentElement;
    return host;
  }
  if (is(el, "input")) {
    const hint =
      el.type === "checkbox" || el.type === "radio" ? "use click to toggle it" : el.type === "file" ? "file uploads are not supported" : "use click";
    throw new ToolFailure(`${label} is a ${el.type} input, not a text field; ${hint}.`);
  }
  if (is(el, "select")) throw new ToolFailure(`${label} is a dropdown, not a text field; use select to choose an option.`);
  // A custom widget (a combobox, a labelled box) wrapping exactly one field.
  const inner = Array.from(el.querySelectorAll("input, textarea, [contenteditable]")).filter(
    (f) => (isValueField(f) || isEditingHost(f)) && isVisible(f) && !isDisabled(f),
  );
  if (inner.length === 1) return inner[0] as TextField | HTMLElement;
  throw new ToolFailure(`${label} is not a text field; use click for buttons, links and checkboxes, select for dropdowns.`);
}

/**
 * Sets the value through the prototype's native setter, then fires input and change. Frameworks
 * (React) shadow `value` on the element to track it; the native setter leaves their copy stale, so
 * they see the input event as a real change.
 */
function typeInto(field: TextField, text: string, label: string): string {
  field.focus({ preventScroll: true });
  const before = field.value;
  setNativeValue(field, text);
  if (text !== "" && field.value === "") {
    setNativeValue(field, before);
    const format = FORMATS[field.type];
    throw new ToolFailure(`${label} did not accept ${quote(text)}${format ? `; it expects ${format}` : ""}.`);
  }
  fire(field, new InputEvent("input", { bubbles: true, composed: true, inputType: "insertText", data: text }));
  fire(field, new Event("change", { bubbles: true }));
  const now = field.value;
  const same = clean(now, 1000) === clean(text, 1000);
  return same || field.type === "password" ? "" : ` The field now shows ${quote(now)}.`;
}

function setNativeValue(field: TextField, value: string): void {
  const proto = is(field, "textarea") ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  const setter = Object.getOwnPropertyDescriptor(proto, "value")?.set;
  if (setter) setter.call(field, value);
  else field.value = value;
}

/** Replaces an editor's content through the browser's editing commands (which rich-text editors
 * handle as typing), falling back to setting the text when the editor refuses. */
function typeIntoEditor(host: HTMLElement, text: string): void {
  const doc = host.ownerDocument;
  host.focus({ preventScroll: true });
  const selection = doc.getSelection();
  if (selection) {
    const range = doc.createRange();
    range.selectNodeContents(host);
    selection.removeAllRanges();
    selection.addRange(range);
  }
  const ok = text === "" ? doc.execCommand("delete", false) : doc.execCommand("insertText", false, text);
  const norm = (s: string) => clean(s, 100_000);
  if (!ok || !norm(host.innerText).includes(norm(text))) {
    host.textContent = text;
    fire(host, new InputEvent("input", { bubbles: true, composed: true, inputType: "insertText", data: text }));
  }
}

/** Enter as a keyboard sends it; in a single-line field of a form, also the implicit submission. */
function pressEnter(field: HTMLElement): string {
  const init: KeyboardEventInit = {
    key: "Enter", code: "Enter", keyCode: 13, bubbles: true, cancelable: true, composed: true, view: field.ownerDocument.defaultView,
  };
  const down = fire(field, new KeyboardEvent("keydown", init));
  const press = down && fire(field, new KeyboardEvent("keypress", { ...init, charCode: 13 }));
  fire(field, new KeyboardEvent("keyup", init));
  const form = is(field, "input") && field.isConnected ? field.form : null;
  if (!down || !press || !form) return " Pressed Enter.";
  const problems = formProblems(form);
  // As browsers do: click the default button (its handlers run), or submit when there is none.
  const button = defaultButton(form);
  if (button && isDisabled(button)) return " Pressed Enter; the form's submit button is disabled, so nothing was sent.";
  if (button) HTMLElement.prototype.click.call(button as HTMLElement);
  else HTMLFormElement.prototype.requestSubmit.call(form);
  return ` Pressed Enter to submit the form.${problems}`;
}

// ---- select ----------------------------------------------------------------------------------

export async function select(args: ToolArguments["select"], signal: AbortSignal): Promise<ToolOutput> {
  const { el, label } = usable(args.index);
  if (typeof args.option !== "string" || args.option.trim() === "") throw new ToolFailure("`option` must be the visible text of an option.");
  if (is(el, "select")) return selectNative(el, label, args.option, signal);
  const role = roleOf(el);
  const popup = el.getAttribute("aria-haspopup");
  if (role === "combobox" || role === "listbox" || (popup && popup !== "false")) return selectAria(el, label, args.option, signal);
  const inner = el.querySelector("select");
  if (inner && isVisible(inner) && !isDisabled(inner)) return selectNative(inner, label, args.option, signal);
  throw new ToolFailure(`${label} is not a dropdown; click it to open it, take a snapshot, then click the option.`);
}

const norm = (s: string) => clean(s, 1000).toLowerCase();

/** Case-insensitive exact match first, then a unique partial match (or a unique prefix). */
function pick<T>(items: readonly T[], text: (item: T) => string, wanted: string): { match?: T; several: T[] } {
  const w = norm(wanted);
  const exact = items.find((i) => norm(text(i)) === w);
  if (exact !== undefined) return { match: exact, several: [] };
  const partial = items.filter((i) => norm(text(i)).includes(w));
  if (partial.length === 1) return { match: partial[0], several: [] };
  const prefix = partial.filter((i) => norm(text(i)).startsWith(w));
  if (prefix.length === 1) return { match: prefix[0], several: [] };
  return { several: partial };
}

function listed(texts: string[]): string {
  const shown = texts.slice(0, 25).map((t) => quote(t));
  return shown.join(", ") + (texts.length > 25 ? ` and ${texts.length - 25} more` : "");
}

function noMatch(label: string, wanted: string, texts: string[], several: string[]): ToolFailure {
  if (several.length > 1) return new ToolFailure(`${quote(wanted)} matches several options of ${label}: ${listed(several)}; give the full text.`);
  return new ToolFailure(`No option ${quote(wanted)} in ${label}. Options: ${listed(texts)}.`);
}

async function selectNative(sel: HTMLSelectElement, label: string, wanted: string, signal: AbortSignal): Promise<ToolOutput> {
  const options = Array.from(sel.options);
  const textOfOption = (o: HTMLOptionElement) => o.label || o.text;
  let { match, several } = pick(options, textOfOption, wanted);
  match ??= options.find((o) => o.value === wanted);
  if (!match) throw noMatch(label, wanted, options.map(textOfOption), several.map(textOfOption));
  const name = clean(textOfOption(match));
  if (match.disabled) throw new ToolFailure(`Option ${quote(name)} of ${label} is disabled.`);
  sel.scrollIntoView({ block: "center", behavior: "instant" });
  sel.focus({ preventScroll: true });
  match.selected = true;
  fire(sel, new Event("input", { bubbles: true, composed: true }));
  fire(sel, new Event("change", { bubbles: true }));
  await settle(signal);
  // A controlled component may put its own value back.
  if (!match.selected) {
    return result(`Chose ${quote(name)} in ${label}, but the page changed it back to ${quote(Array.from(sel.selectedOptions, textOfOption).join(", "))}.`);
  }
  return result(`Selected ${quote(name)} in ${label}.`);
}

/** Visible options of the popup a combobox controls (or, failing that, any visible on the page). */
function optionsFor(el: Element): Element[] | undefined {
  const refs = (e: Element) => [...idRefs(e, "aria-controls"), ...idRefs(e, "aria-owns")];
  const inner = el.querySelector("[aria-controls], [aria-owns]");
  const popups = [el, ...refs(el), ...(inner ? refs(inner) : [])];
  const within = (root: Element | Document | ShadowRoot, selector: string) =>
    root.nodeType === Node.ELEMENT_NODE && (root as Element).matches(selector) ? [root as Element] : Array.from(root.querySelectorAll(selector));
  for (const selector of ["[role=option]", "[role^=menuitem]"]) {
    let found = popups.flatMap((p) => within(p, selector)).filter(isVisible);
    if (found.length === 0) found = allRoots().flatMap((r) => within(r, selector)).filter(isVisible);
    if (found.length > 0) return [...new Set(found)];
  }
  return undefined;
}

/** The text field of a combobox (itself, or the one inside it), for filtering by typing. */
function comboInput(el: Element): HTMLInputElement | undefined {
  if (isTextInput(el)) return el;
  const inner = el.querySelector("input");
  return inner && isTextInput(inner) && isVisible(inner) ? inner : undefined;
}

async function selectAria(el: Element, label: string, wanted: string, signal: AbortSignal): Promise<ToolOutput> {
  const input = comboInput(el);
  const matching = (options: Element[] | undefined) => (options ? pick(options, nameOf, wanted) : { several: [] as Element[] });
  let options = optionsFor(el);
  const wasOpen = options !== undefined;
  if (!options) {
    clickElement(el, label);
    options = await waitUntil(() => optionsFor(el), 1500, signal);
  }
  // Names now: typing below may filter the list down to nothing.
  const seen = (options ?? []).map(nameOf);
  // Long or lazy lists show the option only after typing part of it.
  let typedOver: string | undefined;
  if (input && !input.readOnly && !matching(options).match) {
    typedOver = input.value;
    typeInto(input, wanted, label);
    options = (await waitUntil(() => (matching(optionsFor(el)).match ? optionsFor(el) : undefined), 1500, signal)) ?? optionsFor(el);
  }
  if (!options && seen.length === 0) {
    pressKey(input ?? el, "ArrowDown", true);
    options = await waitUntil(() => optionsFor(el), 1000, signal);
  }
  const { match, several } = matching(options);
  if (!match) {
    // Leave the widget as it was: the field without the unmatched text, the popup closed.
    if (input && typedOver !== undefined) typeInto(input, typedOver, label);
    if (!wasOpen) pressKey(input ?? el, "Escape");
    const names = options?.length ? options.map(nameOf) : seen;
    if (names.length === 0) {
      throw new ToolFailure(`${label} showed no options after a click${typedOver !== undefined ? ", typing" : ""} and ArrowDown; take a snapshot to see what opened.`);
    }
    throw noMatch(label, wanted, names, several.map(nameOf));
  }
  const name = nameOf(match);
  if (isDisabled(match)) throw new ToolFailure(`Option ${quote(name)} of ${label} is disabled.`);
  clickElement(match, `Option ${quote(name)} of ${label}`, el);
  await settle(signal);
  const shown = input ? input.value : textOf(el);
  const chosen = norm(shown).includes(norm(name)) || (match.isConnected && match.getAttribute("aria-selected") === "true");
  return result(`Selected ${quote(name)} in ${label}.${chosen ? "" : ` It now shows ${quote(shown)}; check with a snapshot.`}`);
}

function pressKey(target: Element, key: string, altKey = false): void {
  const init: KeyboardEventInit = { key, code: key, altKey, bubbles: true, cancelable: true, composed: true };
  fire(target, new KeyboardEvent("keydown", init));
  fire(target, new KeyboardEvent("keyup", init));
}

// ---- scroll ----------------------------------------------------------------------------------

const DIRECTIONS = ["up", "down", "top", "bottom"];

export async function scroll(args: ToolArguments["scroll"], signal: AbortSignal): Promise<ToolOutput> {
  if (args.to_index !== undefined && args.to_index !== null) {
    const el = elementAt(args.to_index);
    const label = describe(el, indexFor(el));
    if (!isShown(el)) throw new ToolFailure(`${label} is not visible (hidden or collapsed), so it cannot be scrolled to.`);
    el.scrollIntoView({ block: "center", inline: "nearest", behavior: "instant" });
    await settle(signal);
    return result(`Scrolled ${label} into view.`);
  }
  const direction = args.direction ?? "down";
  if (typeof direction !== "string" || !DIRECTIONS.includes(direction)) {
    throw new ToolFailure(`\`direction\` must be one of ${DIRECTIONS.join(", ")}.`);
  }
  const { box, view, name } = scroller();
  const [start, startHeight] = [box.scrollTop, box.scrollHeight];
  const step = Math.round(view * 0.8);
  const target = { up: start - step, down: start + step, top: 0, bottom: box.scrollHeight }[direction as "up"];
  box.scrollTo({ top: target, behavior: "instant" });
  await settle(signal);
  const [end, height] = [Math.round(box.scrollTop), box.scrollHeight];
  const where = `${name ? `${name}: ` : ""}now at ${end}–${Math.min(end + view, height)} of ${height} px`;
  const grew = height > startHeight + 1 ? ` More content loaded (from ${startHeight} to ${height} px).` : "";
  if (Math.abs(end - start) < 1) {
    const edge = direction === "up" || direction === "top" ? "the top" : "the bottom";
    return result(`Could not scroll ${direction}: already at ${edge} (${where}).${grew}`);
  }
  return result(`Scrolled ${direction}; ${where}.${grew}`);
}

/** The page if it scrolls; otherwise the scrollable container under the centre of the viewport,
 * or the largest one (apps often scroll a panel, not the page). */
function scroller(): { box: Element; view: number; name: string } {
  const page = document.scrollingElement ?? document.documentElement;
  if (pageScrolls(page)) return { box: page, view: window.innerHeight, name: "" };
  let box: Element | null = null;
  for (let e = document.elementFromPoint(window.innerWidth / 2, window.innerHeight / 2); e; e = e.parentElement ?? hostOf(e)) {
    if (e !== page && isScrollable(e)) {
      box = e;
      break;
    }
  }
  if (!box) {
    let best = 0;
    for (const root of allRoots(document)) {
      for (const e of root.querySelectorAll("*")) {
        const area = e.clientWidth * e.clientHeight;
        if (area > best && isScrollable(e) && isVisible(e)) [box, best] = [e, area];
      }
    }
  }
  if (!box) return { box: page, view: window.innerHeight, name: "" };
  const label = box.getAttribute("aria-label") ?? (box.id ? `#${box.id}` : "");
  return { box, view: box.clientHeight, name: `the scrollable ${box.localName}${label ? ` ${quote(label)}` : ""} (the page itself does not scroll)` };
}

function pageScrolls(page: Element): boolean {
  if (page.scrollHeight <= window.innerHeight + 1) return false;
  const html = styleOf(document.documentElement).overflowY;
  const body = document.body ? styleOf(document.body).overflowY : "visible";
  // With html left visible, the body's overflow applies to the viewport.
  return html !== "hidden" && html !== "clip" && !(html === "visible" && (body === "hidden" || body === "clip"));
}

// ---- hover and keys --------------------------------------------------------------------------

/**
 * The quiet period that ends the wait after hovering: longer than the usual hover-intent delay
 * before a submenu opens (jQuery UI's menu: 300 ms), which the highlight's own change would
 * otherwise cut short.
 */
const HOVER_INTENT_MS = 400;

/** Moves the pointer onto an element (menus that open on hover, tooltips), where a real pointer would land. */
export async function hover(args: ToolArguments["hover"], signal: AbortSignal): Promise<ToolOutput> {
  const { el, label } = usable(args.index);
  el.scrollIntoView({ block: "center", inline: "center", behavior: "instant" });
  const aim = aimAt(el);
  if ("cover" in aim) throw new ToolFailure(`${label} is covered by ${describeCover(aim.cover)}; close it first or scroll.`);
  const { target, x, y } = aim;
  const mouse: MouseEventInit = { bubbles: true, cancelable: true, composed: true, view: target.ownerDocument.defaultView, clientX: x, clientY: y };
  const pointer: PointerEventInit = { ...mouse, pointerId: 1, pointerType: "mouse", isPrimary: true };
  const local = { bubbles: false, cancelable: false };
  fire(target, new PointerEvent("pointerover", pointer));
  fire(target, new PointerEvent("pointerenter", { ...pointer, ...local }));
  fire(target, new MouseEvent("mouseover", mouse));
  fire(target, new MouseEvent("mouseenter", { ...mouse, ...local }));
  // jQuery's mouseenter emulation walks up from mouseover; plain listeners get their own event.
  for (let up = target.parentElement; up && up !== target.ownerDocument.body; up = up.parentElement) {
    up.dispatchEvent(new MouseEvent("mouseenter", { ...mouse, ...local }));
  }
  fire(target, new PointerEvent("pointermove", pointer));
  fire(target, new MouseEvent("mousemove", mouse));
  await settle(signal, HOVER_INTENT_MS);
  return result(`Hovered over ${label}.`);
}

type KeySpec = { key: string; code: string; keyCode: number };

/**
 * The keys `press_key` offers (PRESS_KEYS, generated from crates/agent: the compiler refuses a
 * missing or a stale one), as KeyboardEvent `key` and `code` (and the legacy keyCode jQuery UI reads).
 */
const KEYS: Record<PressKey, KeySpec> = {
  Enter: { key: "Enter", code: "Enter", keyCode: 13 },
  Escape: { key: "Escape", code: "Escape", keyCode: 27 },
  Tab: { key: "Tab", code: "Tab", keyCode: 9 },
  Space: { key: " ", code: "Space", keyCode: 32 },
  Backspace: { key: "Backspace", code: "Backspace", keyCode: 8 },
  Delete: { key: "Delete", code: "Delete", keyCode: 46 },
  ArrowUp: { key: "ArrowUp", code: "ArrowUp", keyCode: 38 },
  ArrowDown: { key: "ArrowDown", code: "ArrowDown", keyCode: 40 },
  ArrowLeft: { key: "ArrowLeft", code: "ArrowLeft", keyCode: 37 },
  ArrowRight: { key: "ArrowRight", code: "ArrowRight", keyCode: 39 },
  Home: { key: "Home", code: "Home", keyCode: 36 },
  End: { key: "End", code: "End", keyCode: 35 },
  PageUp: { key: "PageUp", code: "PageUp", keyCode: 33 },
  PageDown: { key: "PageDown", code: "PageDown", keyCode: 34 },
};

/**
 * Presses a key on an element (focused first) or on whatever has the focus. Pages see keydown and
 * keyup; synthetic keys have no default action in browsers, so the ones a page relies on are done
 * here: Enter submits the field's form (as `type` with submit does), Space clicks a button-like
 * element, and the arrows and Home/End move a native range or number input.
 */
export async function pressKeyTool(args: ToolArguments["press_key"], signal: AbortSignal): Promise<ToolOutput> {
  const spec = (KEYS as Record<string, KeySpec | undefined>)[String(args.key ?? "")];
  if (!spec) throw new ToolFailure(`Unknown key "${String(args.key)}"; use one of ${Object.keys(KEYS).join(", ")}.`);
  let el: Element;
  let label: string;
  if (args.index !== undefined && args.index !== null) {
    ({ el, label } = usable(args.index));
    el.scrollIntoView({ block: "center", inline: "center", behavior: "instant" });
    if (isHtml(el)) el.focus({ preventScroll: true });
  } else {
    el = deepActiveElement() ?? document.body;
    label = el === document.body ? "the page" : `the focused ${el.localName}`;
  }
  const init: KeyboardEventInit & { keyCode: number; which: number } = {
    key: spec.key, code: spec.code, keyCode: spec.keyCode, which: spec.keyCode, bubbles: true, cancelable: true, composed: true,
  };
  // Watched from here: the element is in view and focused; a key that scrolls counts as an effect.
  const changes = watchChanges(el, { scroll: true });
  const proceed = fire(el, new KeyboardEvent("keydown", init));
  if (proceed && (spec.key === "Enter" || spec.key === " ")) fire(el, new KeyboardEvent("keypress", init));
  // Enter submits and Space clicks: after the page's key handlers, the effect must still be the judged one.
  if (proceed && (spec.key === "Enter" || spec.key === " ") && !sameEffect(el)) {
    fire(el, new KeyboardEvent("keyup", init));
    changes();
    throw new ToolFailure(`${label} ${CHANGED}`);
  }
  if (proceed) defaultAction(el, spec.key);
  fire(el, new KeyboardEvent("keyup", init));
  await settle(signal);
  const changed = changes();
  return { ...result(`Pressed ${args.key} on ${label}.${changed ? "" : " Nothing on the page changed."}`), changed };
}

function deepActiveElement(): Element | null {
  let active: Element | null = document.activeElement;
  while (active?.shadowRoot?.activeElement) active = active.shadowRoot.activeElement;
  const frame = active && isFrame(active) ? frameDocument(active) : null;
  return frame?.activeElement ?? active;
}

/** What the browser would have done for a trusted key press, where pages depend on it. */
function defaultAction(el: Element, key: string): void {
  if (key === "Enter" && (is(el, "input") || is(el, "select"))) {
    const form = (el as HTMLInputElement).form;
    if (form) form.requestSubmit();
  } else if (key === " " && (is(el, "button") || el.getAttribute("role") === "button" || el.getAttribute("role") === "checkbox")) {
    (el as HTMLElement).click();
  } else if (is(el, "input") && ["range", "number"].includes((el as HTMLInputElement).type)) {
    const input = el as HTMLInputElement;
    const step = { ArrowUp: 1, ArrowRight: 1, ArrowDown: -1, ArrowLeft: -1 }[key];
    if (step) input.stepUp(step);
    else if (key === "Home" && input.min !== "") input.value = input.min;
    else if (key === "End" && input.max !== "") input.value = input.max;
    else return;
    fire(input, new Event("input", { bubbles: true, composed: true }));
    fire(input, new Event("change", { bubbles: true }));
  }
}
