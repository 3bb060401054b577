// click_at: a click at a point of the latest screenshot (0–1000 across and down the viewport it
// showed), for what has no element to name (a spot on a canvas, a map, a chart). The agent asks
// first what lies under the point (LOCATE_POINT): the element there is described as a snapshot
// describes it, and the consent policy judges it as it judges a click on it. The click then lands
// only if what it activates is still that element, doing what was judged.

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { CHANGED, activationOf, sameEffect } from "./effects";
import { describe, frameOrigin, indexFor, isCrossOriginFrame } from "./elements";
import { ToolFailure } from "./errors";
import { result } from "./actions";
import { clickPoint, hitFromTop } from "./pointer";
import { settle, watchChanges } from "./settle";
import { describeElement } from "./snapshot";

type Point = ToolArguments["click_at"];

/** What the agent judged at each point it asked about (null: nothing there), until it is clicked. */
const judgedAt = new Map<string, WeakRef<Element> | null>();

const keyOf = (p: Point) => `${p.x},${p.y}`;

/** A page's background: no element a click there is about. */
const isBare = (el: Element) => el.localName === "html" || el.localName === "body";

/** What a click at the point would reach: the element hit, and the one whose action it runs. */
function under(p: Point): { hit: Element | null; judged: Element | null; x: number; y: number } {
  const inRange = (v: unknown) => typeof v === "number" && Number.isFinite(v) && v >= 0 && v <= 1000;
  if (!inRange(p.x) || !inRange(p.y)) throw new ToolFailure("x and y go from 0 to 1000 across and down the screenshot.");
  const { hit, x, y } = hitFromTop((p.x / 1000) * window.innerWidth, (p.y / 1000) * window.innerHeight);
  if (!hit || isBare(hit)) return { hit, judged: null, x, y };
  return { hit, judged: isCrossOriginFrame(hit) ? hit : (activationOf(hit) ?? hit), x, y };
}

/** LOCATE_POINT: the element under the point, for the consent policy. */
export function locatePoint(p: Point): ToolOutput {
  const { judged } = under(p);
  judgedAt.set(keyOf(p), judged ? new WeakRef(judged) : null);
  const base = result("");
  if (!judged) return { ...base, located: { element: null } };
  const element = describeElement(judged);
  return { ...base, located: isCrossOriginFrame(judged) ? { element, frame_origin: frameOrigin(judged) } : { element } };
}

export async function clickAt(p: Point, signal: AbortSignal): Promise<ToolOutput> {
  const key = keyOf(p);
  if (!judgedAt.has(key)) throw new ToolFailure("Nothing was judged at this point; take a screenshot, then call click_at again.");
  const before = judgedAt.get(key) ?? null;
  judgedAt.delete(key);
  const wanted = before?.deref() ?? null;
  const { hit, judged, x, y } = under(p);
  const where = `(${p.x}, ${p.y})`;
  // The consent was given for what was there: anything else now is not clicked.
  if ((before !== null && !wanted) || judged !== wanted || (wanted && !sameEffect(wanted))) {
    throw new ToolFailure(`What is at ${where} ${CHANGED}`);
  }
  if (wanted && isCrossOriginFrame(wanted)) {
    throw new ToolFailure(`${where} is over a frame of ${frameOrigin(wanted)}: its content belongs to another site, and Hearth cannot click inside it. If the user wants it, open the frame's address with navigate.`);
  }
  const target = hit ?? document.documentElement;
  const label = wanted ? describe(wanted, indexFor(wanted)) : "the page's background";
  const changes = watchChanges(target);
  try {
    // Checked again after the page's pointer and mouse handlers ran: a canvas wrapped in a link on
    // mousedown would now lead elsewhere.
    clickPoint(target, x, y, () => !wanted || sameEffect(wanted, target, ["link", "submit"]), label);
  } catch (error) {
    changes();
    throw error;
  }
  await settle(signal);
  const changed = changes();
  return { ...result(`Clicked ${label} at ${where} of the screenshot.${changed ? "" : " Nothing on the page changed."}`), changed };
}
