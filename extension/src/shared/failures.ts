// Failure texts live in the locales (`_locales/*/messages.json`: `<key>` holds the message and
// `<key>Fix` the fix). The offscreen document has no chrome.i18n, so its failures carry only the
// key and its arguments; the service worker fills in the text in the browser's language before any
// tab sees a status, and the options page does the same for its own.

import type { EngineFailure, FailureKey, FailureKind } from "../generated/protocol";

/** A failure known by its locale key (FAILURE_KEYS, generated); `message` and `fix` are filled in by `localizeFailure`. */
export function failure(kind: FailureKind, key: FailureKey, ...args: (string | number)[]): EngineFailure {
  const strings = args.map(String);
  return { kind, message: `${key}(${strings.join(", ")})`, fix: "", text: { key, args: strings } };
}

/** `f` in the browser's language, where the locales have its key (else as it came). */
export function localizeFailure(f: EngineFailure): EngineFailure {
  if (!f.text) return f;
  const message = chrome.i18n.getMessage(f.text.key, f.text.args);
  const fix = chrome.i18n.getMessage(`${f.text.key}Fix`, f.text.args);
  return { ...f, message: message || f.message, fix: fix || f.fix };
}
