// click and hover: where a person's pointer would land on an element (the first visible point
// of its text or box that is not covered), the events it fires there, and what covers it when it
// cannot.

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { fire, flatChildren, flatParent, frameDocument, is, isElement, isFrame, quote, styleOf } from "./flat-tree";
import { formOf, hasIndex, indexFor, labelOf, roleOf } from "./elements";
import { CHANGED, harmlessLinkWithin, isSubmitter, sameEffect } from "./effects";
import { settle, watchChanges } from "./settle";
import { focusFor, formProblems, result, usable } from "./actions";

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
