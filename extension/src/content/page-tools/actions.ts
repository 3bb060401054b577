// What the page actions share: resolving an index to an element that can be acted on (or a
// message the model can act on), focusing it, what a form says is wrong, and the plain result of
// an action. The actions, one file per family: pointer.ts (click, hover), typing.ts (type),
// choosing.ts (select), scroll.ts, keys.ts (press_key). Each acts the way a person's input would
// reach the page's handlers, then waits for the page to settle.

import type { ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { isHtml, pageInfo } from "./flat-tree";
import { describe, elementAt, frameOrigin, indexFor, isCrossOriginFrame, isDisabled, isShown } from "./elements";
import { CHANGED, sameEffect } from "./effects";

export const result = (text: string): ToolOutput => ({ text, snapshot: null, page: pageInfo(), from_page: false });

/** The element behind `index`, if it can be acted on, with its description for messages. */
export function usable(index: unknown): { el: Element; label: string } {
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

/** Focuses the element or its nearest focusable ancestor, as a mouse press does. */
export function focusFor(el: Element): void {
  for (let t: Element | null = el; t; t = t.parentElement ?? hostOf(t)) {
    if (isHtml(t) && (t.hasAttribute("tabindex") || t.tabIndex >= 0 || t.isContentEditable)) {
      t.focus({ preventScroll: true });
      return;
    }
  }
  const active = el.ownerDocument.activeElement;
  if (active && isHtml(active)) active.blur();
}

export const hostOf = (el: Element): Element | null => {
  const root = el.getRootNode();
  return root.nodeType === Node.DOCUMENT_FRAGMENT_NODE ? (root as ShadowRoot).host : null;
};

/** Why the browser will refuse to send `form` (its built-in validation), or "". */
export function formProblems(form: HTMLFormElement): string {
  if (form.noValidate) return "";
  const invalid = Array.from(form.elements).filter((e) => {
    const field = e as HTMLInputElement;
    return field.willValidate && !field.validity.valid;
  });
  if (invalid.length === 0) return "";
  const list = invalid.slice(0, 3).map((e) => `${describe(e, indexFor(e))}: ${(e as HTMLInputElement).validationMessage}`);
  return ` The browser will not send the form until these are fixed: ${list.join("; ")}.`;
}
