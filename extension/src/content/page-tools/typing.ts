// type: text into a field or an editor as a person's typing reaches the page (native setters,
// input events, Enter that submits).

import type { ToolArguments, ToolOutput } from "../../generated/protocol";
import { ToolFailure } from "./errors";
import { clean, fire, is, isHtml, quote } from "./flat-tree";
import { isDisabled, isEditingHost, isTextInput, isVisible } from "./elements";
import { CHANGED, defaultButton, sameEffect } from "./effects";
import { settle } from "./settle";
import { formProblems, result, usable } from "./actions";

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
export function typeInto(field: TextField, text: string, label: string): string {
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
