// What acting on an element will actually do, read the way the browser reads it: which element a
// click activates (a label's control, the link around a span), where that leads (the resolved
// href, the effective target with <base target>, ping addresses), what it submits (the browser's
// parsed button type, the submitter's form owner by the `form` attribute, formaction…), and the
// form a typed field belongs to. The snapshot describes an element by its effect, so the consent
// policy judges the effect; the actions compare the effect at the moment they act with the one
// judged, so a page that swaps a link, a label's control or a form's action in between gets
// nothing done.

import { flatParent, is } from "./flat-tree";
import { formOf, isEditingHost, isTextInput, isVisible } from "./elements";

/** A link's destination. */
export interface LinkEffect {
  href: string;
  /** The browsing context it opens in: its own `target`, else the document's `<base target>`. */
  target: string;
  /** `<a ping>` addresses the browser notifies when the link is followed. */
  ping: string[];
  /** `<a download>`: the file name it suggests ("" for none); null when it is not a download. */
  download: string | null;
}

/** A form submission: destination, method and browsing context. */
export interface SubmitEffect {
  action: string;
  method: string;
  target: string;
  /** The form's id, name or aria-label (danger words in it are judged too). */
  name: string;
}

export interface Effect {
  link: LinkEffect | null;
  /** Set when activating the element submits a form (a submit control, or a label of one). */
  submit: SubmitEffect | null;
  /** The submission a field's Enter (or `type … submit:true`) makes: its form's default button. */
  fieldSubmit: SubmitEffect | null;
  /** The field that typing reaches (itself, a label's control, a wrapper's one field): type, autocomplete. */
  field: { type: string; autocomplete: string } | null;
}

const parentOf = (el: Element): Element | null => flatParent(el) ?? el.ownerDocument.defaultView?.frameElement ?? null;

/**
 * The element whose activation behaviour a click on `el` runs, as the browser picks it: the
 * nearest inclusive ancestor that is a link, a button, an input, a select, a textarea or a
 * summary; a label stands for its control. Null when nothing on the way up activates.
 */
export function activationOf(el: Element): Element | null {
  for (let e: Element | null = el, hops = 0; e && hops < 64; e = parentOf(e), hops++) {
    if (is(e, "label")) {
      const control = e.control;
      if (control && control !== el) return activationOf(control);
      continue;
    }
    if ((is(e, "a") || is(e, "area")) && e.hasAttribute("href")) return e;
    if (is(e, "button") || is(e, "select") || is(e, "textarea") || is(e, "summary")) return e;
    if (is(e, "input")) return e;
  }
  return null;
}

/** The field that typing into `el` reaches: itself, a label's control, or the one field a wrapper holds. */
export function typingFieldOf(el: Element): Element | null {
  if (isTextInput(el) || is(el, "textarea") || isEditingHost(el)) return el;
  if (is(el, "label")) return el.control && (isTextInput(el.control) || is(el.control, "textarea")) ? el.control : null;
  if (is(el, "input") || is(el, "select") || is(el, "button")) return null;
  const inner = Array.from(el.querySelectorAll("input, textarea, [contenteditable]")).filter(
    (f) => (isTextInput(f) || is(f, "textarea") || isEditingHost(f)) && isVisible(f),
  );
  return inner.length === 1 ? (inner[0] ?? null) : null;
}

/** The browsing context a link or form opens in when it names none: the document's `<base target>`. */
function baseTarget(doc: Document): string {
  return doc.querySelector("base[target]")?.getAttribute("target") ?? "";
}

function linkEffect(a: HTMLAnchorElement | HTMLAreaElement): LinkEffect {
  const ping = (a.getAttribute("ping") ?? "")
    .split(/\s+/)
    .filter(Boolean)
    .map((p) => resolved(p, a.baseURI));
  return { href: a.href, target: a.getAttribute("target") || baseTarget(a.ownerDocument), ping, download: a.getAttribute("download") };
}

/** Whether the browser treats `el` as a submit button (its parsed type, not the raw attribute). */
export function isSubmitter(el: Element): el is HTMLButtonElement | HTMLInputElement {
  if (is(el, "button")) return el.type === "submit";
  return is(el, "input") && (el.type === "submit" || el.type === "image");
}

/**
 * Where submitting `form` by `submitter` goes. Read through attributes: a form's properties can be
 * shadowed by controls named "action" or "method".
 */
export function submission(form: HTMLFormElement, submitter: Element | null): SubmitEffect {
  const own = (name: string) => (submitter?.hasAttribute(name) ? submitter.getAttribute(name) : null);
  const method = (own("formmethod") ?? form.getAttribute("method") ?? "get").toLowerCase();
  const action = own("formaction") ?? form.getAttribute("action") ?? "";
  return {
    action: resolved(action, (submitter ?? form).baseURI),
    method: ["get", "post", "dialog"].includes(method) ? method : "get",
    target: own("formtarget") ?? (form.getAttribute("target") || baseTarget(form.ownerDocument)),
    name: form.getAttribute("id") || form.getAttribute("name") || form.getAttribute("aria-label") || "",
  };
}

/** The button Enter in one of the form's fields presses: its first submit button. */
export function defaultButton(form: HTMLFormElement): Element | null {
  return Array.from(form.elements).find(isSubmitter) ?? null;
}

/** What acting on `el` does (see the file's comment). */
export function effectOf(el: Element): Effect {
  const active = activationOf(el);
  const link = active && (is(active, "a") || is(active, "area")) ? linkEffect(active) : null;
  const submitForm = active && isSubmitter(active) ? active.form : null;
  const submit = active && submitForm ? submission(submitForm, active) : null;
  const field = typingFieldOf(el) ?? (active && (is(active, "input") || is(active, "select")) ? active : null);
  const fieldForm = field ? formOf(field) : null;
  const fieldSubmit = fieldForm ? submission(fieldForm, defaultButton(fieldForm)) : null;
  const fieldFacts = field
    ? { type: is(field, "input") ? field.type : field.localName, autocomplete: field.getAttribute("autocomplete") ?? "" }
    : null;
  return { link, submit, fieldSubmit, field: fieldFacts };
}

/** `url` resolved against `base`, as the browser will resolve it (unchanged if it cannot be). */
function resolved(url: string, base: string): string {
  try {
    return new URL(url, base).href;
  } catch {
    return url;
  }
}

// ---- What the policy judged ------------------------------------------------------------------

/** The effect each element of the latest snapshot was described (and judged) with. */
const judged = new WeakMap<Element, string>();

const signature = (effect: Effect): string => JSON.stringify(effect);

/** Records the effect a snapshot described `el` with, for the checks at the moment of acting. */
export function recordJudged(el: Element): Effect {
  const effect = effectOf(el);
  judged.set(el, signature(effect));
  return effect;
}

/**
 * Whether acting on `el` through `actual` (the element the event will really reach: the one hit
 * under the pointer, the field typed into, the option clicked) does what the snapshot described
 * for `el`. An element never listed has nothing judged: its effect now is compared with `el`'s now.
 */
export function sameEffect(el: Element, actual: Element = el, parts: Array<keyof Effect> = ["link", "submit", "fieldSubmit", "field"]): boolean {
  const before = JSON.parse(judged.get(el) ?? signature(effectOf(el))) as Effect;
  const now = effectOf(actual);
  return parts.every((part) => JSON.stringify(before[part]) === JSON.stringify(now[part]));
}

/**
 * Whether a click judged on `el` (which itself neither leads nor submits anywhere) may land on a
 * link inside it that the policy would have let through without asking anyway: same origin as
 * the page, this tab, no ping (a tab whose label is a `#panel` link). Anything else is refused.
 */
export function harmlessLinkWithin(el: Element, actual: Element): boolean {
  const before = JSON.parse(judged.get(el) ?? signature(effectOf(el))) as Effect;
  if (before.link || before.submit) return false;
  const { link, submit } = effectOf(actual);
  if (!link || submit) return false;
  const target = link.target.trim().toLowerCase();
  let origin: string | null = null;
  try {
    origin = new URL(link.href).origin;
  } catch {
    return false;
  }
  return origin === actual.ownerDocument.location.origin && link.ping.length === 0 && link.download === null && ["", "_self", "_top", "_parent"].includes(target);
}

/** The failure when the effect differs from the one judged: nothing was done. */
export const CHANGED = "changed since the snapshot (what it would now do is not what was judged: where it leads, what it submits or which field it types into); nothing was done. Take a new snapshot.";
