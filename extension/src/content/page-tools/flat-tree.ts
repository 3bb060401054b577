// DOM helpers that work across same-origin frames. A frame's elements come from another JavaScript
// realm, where `instanceof HTMLInputElement` is false, so types are told apart by tag name.

import type { PageInfo } from "../../generated/protocol";

const HTML_NS = "http://www.w3.org/1999/xhtml";

export const isElement = (node: Node | null | undefined): node is Element => node?.nodeType === Node.ELEMENT_NODE;

/** `is(el, "input")` narrows like `instanceof`, but also for elements of other frames. */
export function is<K extends keyof HTMLElementTagNameMap>(el: Element, tag: K): el is HTMLElementTagNameMap[K] {
  return el.localName === tag && el.namespaceURI === HTML_NS;
}

export const isHtml = (el: Element): el is HTMLElement => el.namespaceURI === HTML_NS;

export const isFrame = (el: Element): el is HTMLIFrameElement => is(el, "iframe") || (isHtml(el) && el.localName === "frame");

/** The document inside a frame, or null when it is cross-origin (or sandboxed). */
export function frameDocument(frame: Element): Document | null {
  try {
    return (frame as HTMLIFrameElement).contentDocument;
  } catch {
    return null;
  }
}

/** Children in the rendered (flat) tree: a shadow host's shadow content, a slot's assigned nodes. */
export function flatChildren(node: Node): Iterable<Node> {
  if (isElement(node)) {
    if (node.shadowRoot) return node.shadowRoot.childNodes;
    if (is(node, "slot")) {
      const assigned = node.assignedNodes();
      if (assigned.length > 0) return assigned;
    }
  }
  return node.childNodes;
}

/** The parent in the rendered tree: a slotted element's slot, a shadow root's host. */
export function flatParent(el: Element): Element | null {
  if (el.assignedSlot) return el.assignedSlot;
  if (el.parentElement) return el.parentElement;
  const root = el.getRootNode();
  return root.nodeType === Node.DOCUMENT_FRAGMENT_NODE ? (root as ShadowRoot).host : null;
}

/** A box that clips its overflow and has no room on that axis: a collapsed accordion or menu. */
export function isCollapsedBox(el: Element, style: CSSStyleDeclaration): boolean {
  const clipsY = style.overflowY === "hidden" || style.overflowY === "clip";
  const clipsX = style.overflowX === "hidden" || style.overflowX === "clip";
  if ((!clipsX && !clipsY) || style.display === "contents") return false;
  const r = el.getBoundingClientRect();
  return (clipsY && r.height === 0) || (clipsX && r.width === 0);
}

/** The document and every open shadow root and same-origin frame document below it. */
export function allRoots(doc: Document = document): Array<Document | ShadowRoot> {
  const roots: Array<Document | ShadowRoot> = [];
  const visit = (root: Document | ShadowRoot) => {
    roots.push(root);
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) visit(el.shadowRoot);
      if (isFrame(el)) {
        const inner = frameDocument(el);
        if (inner) visit(inner);
      }
    }
  };
  visit(doc);
  return roots;
}

export const styleOf = (el: Element): CSSStyleDeclaration => (el.ownerDocument.defaultView ?? window).getComputedStyle(el);

/** Dispatches `event`; false when a handler cancelled it. */
export const fire = (target: EventTarget, event: Event): boolean => target.dispatchEvent(event);

/** Collapses whitespace and cuts to `max` characters with an ellipsis. */
export function clean(text: string, max = 80): string {
  const s = text.replace(/\s+/g, " ").trim();
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

export const quote = (text: string): string => `"${clean(text, 60).replace(/"/g, "'")}"`;

/** Scrolls vertically by itself: overflow auto/scroll with more content than room. */
export function isScrollable(el: Element): boolean {
  if (el.scrollHeight <= el.clientHeight + 1) return false;
  const overflow = styleOf(el).overflowY;
  return overflow === "auto" || overflow === "scroll" || overflow === "overlay";
}

export const pageInfo = (): PageInfo => ({ url: location.href, title: document.title });
