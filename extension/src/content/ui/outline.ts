// The outline drawn over the page element a confirmation card is about, so people see what they
// allow. A fixed-position box inside the overlay's shadow root (the page's DOM is left alone),
// placed over the element's bounding box and moved with scrolling and resizing.

import { el } from "../../shared/ui/builders";

export interface TargetOutline {
  element: HTMLElement;
  /** The mark of a point of the screenshot (`click_at`), drawn where the click will land. */
  marker: HTMLElement;
  /** Outlines `target`, or removes the outline (null); marks `point` (0–1000 across and down the
   * viewport) when given. */
  show(target: Element | null, point?: readonly [number, number] | null): void;
}

/** How far the outline sits outside the element's box, in CSS pixels. */
const GAP = 3;

export function targetOutline(className = "target-outline"): TargetOutline {
  const element = el("div", { class: className, hidden: true, "aria-hidden": "true" });
  const marker = el("div", { class: "point-marker", hidden: true, "aria-hidden": "true" });
  const mark = (point: readonly [number, number] | null | undefined) => {
    marker.hidden = !point;
    if (!point) return;
    marker.style.left = `${(point[0] / 1000) * window.innerWidth}px`;
    marker.style.top = `${(point[1] / 1000) * window.innerHeight}px`;
  };
  let target: Element | null = null;
  let frame = 0;

  const place = () => {
    frame = 0;
    const box = target?.isConnected ? viewportBox(target) : null;
    if (!box || (box.width <= 0 && box.height <= 0)) {
      element.hidden = true;
      return;
    }
    element.hidden = false;
    element.style.left = `${box.left - GAP}px`;
    element.style.top = `${box.top - GAP}px`;
    element.style.width = `${box.width + 2 * GAP}px`;
    element.style.height = `${box.height + 2 * GAP}px`;
  };
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(place);
  };
  const listen = (on: boolean) => {
    const method = on ? "addEventListener" : "removeEventListener";
    // Capture: scrolling inside any container of the page moves the element too.
    window[method]("scroll", schedule, { capture: true, passive: true } as AddEventListenerOptions);
    window[method]("resize", schedule, { passive: true } as AddEventListenerOptions);
  };

  return {
    element,
    marker,
    show(next, point) {
      mark(point);
      if (next === target) {
        if (next) schedule();
        return;
      }
      if (!target && next) listen(true);
      if (target && !next) listen(false);
      target = next;
      if (frame) cancelAnimationFrame(frame);
      frame = 0;
      if (target) place();
      else element.hidden = true;
    },
  };
}

/** The element's box in the top window's viewport (same-origin frames add their offsets). */
function viewportBox(target: Element): { left: number; top: number; width: number; height: number } | null {
  try {
    const r = target.getBoundingClientRect();
    let left = r.left;
    let top = r.top;
    for (let view = target.ownerDocument.defaultView; view && view !== window; ) {
      const frame = view.frameElement;
      if (!frame) return null;
      const f = frame.getBoundingClientRect();
      left += f.left + frame.clientLeft;
      top += f.top + frame.clientTop;
      view = frame.ownerDocument.defaultView;
    }
    return { left, top, width: r.width, height: r.height };
  } catch {
    return null;
  }
}
