// scroll: the page, or the box a person would scroll, by a screen or to an end.

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { allRoots, isScrollable, quote, styleOf } from "./flat-tree";
import { describe, elementAt, indexFor, isShown, isVisible } from "./elements";
import { settle } from "./settle";
import { hostOf, result } from "./actions";

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
