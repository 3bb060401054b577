// The message box: starts a task, steers a running one, or answers the model's question. Enter
// sends, Shift+Enter starts a new line; Enter that confirms an IME composition (Chinese, Japanese…)
// does not send. The Stop button shows while a task runs. Its keyboard and input handlers are
// driven by the overlay's shield (ui/shield.ts): those events never reach listeners in the page,
// nor, therefore, listeners on the textarea itself.

import { button, el } from "./dom";
import { t } from "./i18n";
import type { ShieldHandler, ShieldedEvent } from "./shield";

/** Registers a handler for an event type the shield keeps from the page. */
export type Listen = (type: ShieldedEvent, handler: ShieldHandler) => void;

export type ComposerMode = "task" | "steer" | "answer";

export interface Composer {
  element: HTMLFormElement;
  textarea: HTMLTextAreaElement;
  setMode(mode: ComposerMode): void;
  readonly running: boolean;
  /** Shows Stop while a task runs; `stopping` greys it out once pressed. */
  setRunning(running: boolean, stopping?: boolean): void;
  /** Puts `quote` (page text) before what is typed, as a Markdown quote, and the caret after it. */
  insertQuote(quote: string): void;
  focus(): void;
}

export function createComposer(handlers: { submit(text: string): boolean; stop(): void }, listen: Listen): Composer {
  const textarea = el("textarea", { class: "composer", rows: "2", "aria-label": t("promptLabel"), placeholder: t("promptPlaceholder") });
  const send = el("button", { type: "submit", class: "send" }, t("sendLabel"));
  const stop = button("stop", t("stopLabel"), t("stopHint"));
  stop.hidden = true;
  const form = el("form", { class: "composer-row" }, textarea, el("div", { class: "composer-buttons" }, send, stop));

  const fit = () => {
    textarea.style.height = "auto";
    textarea.style.height = `${Math.min(textarea.scrollHeight + 2, 160)}px`;
  };
  listen("input", (_e, target) => {
    if (target === textarea) fit();
  });
  listen("keydown", (e, target) => {
    if (target !== textarea || !(e instanceof KeyboardEvent)) return;
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = textarea.value.trim();
    if (!text) return;
    if (handlers.submit(text)) {
      textarea.value = "";
      fit();
    }
  });
  stop.addEventListener("click", () => handlers.stop());

  return {
    element: form,
    textarea,
    setMode(mode) {
      const [placeholder, label] = {
        task: [t("promptPlaceholder"), t("sendLabel")],
        steer: [t("steerPlaceholder"), t("steerLabel")],
        answer: [t("answerPlaceholder"), t("answerLabel")],
      }[mode];
      textarea.placeholder = placeholder;
      send.textContent = label;
      form.dataset.mode = mode;
    },
    get running() {
      return !stop.hidden;
    },
    setRunning(running, stopping = false) {
      stop.hidden = !running;
      stop.disabled = stopping;
    },
    insertQuote(quote) {
      const quoted = quote
        .trim()
        .split("\n")
        .map((line) => `> ${line}`.trimEnd())
        .join("\n");
      const rest = textarea.value.trim();
      textarea.value = `${quoted}\n\n${rest}`;
      fit();
      textarea.focus();
      textarea.setSelectionRange(textarea.value.length, textarea.value.length);
    },
    focus() {
      textarea.focus();
    },
  };
}
