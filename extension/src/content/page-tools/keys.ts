// press_key: one key to the focused element, with the default action a browser would take.

import type { PressKey, ToolArguments, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { fire, frameDocument, is, isFrame, isHtml } from "./flat-tree";
import { CHANGED, sameEffect } from "./effects";
import { settle, watchChanges } from "./settle";
import { result, usable } from "./actions";

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
