// select: an option of a native <select> or of an ARIA listbox or combobox, picked by its text.

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { allRoots, clean, fire, is, quote } from "./flat-tree";
import { idRefs, isDisabled, isTextInput, isVisible, nameOf, roleOf, textOf } from "./elements";
import { settle, waitUntil } from "./settle";
import { result, usable } from "./actions";
import { clickElement } from "./pointer";
import { typeInto } from "./typing";

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
