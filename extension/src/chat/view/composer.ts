// The message box: starts a task, steers a running one, or answers the model's question. The text
// the user selected on the page shows above it, apart from what they type (it is sent apart, as
// the page's words, and can be removed). Enter
// sends, Shift+Enter starts a new line; Enter that confirms an IME composition (Chinese, Japanese…)
// does not send. The Stop button shows while a task runs. Its keyboard and input handlers are
// driven by where the chat is mounted (`Listen`): on a page, the overlay's shield
// (content/ui/shield.ts), so those events never reach listeners in the page, nor, therefore,
// listeners on the textarea itself.

import { button, el } from "../../shared/ui/builders";
import { t } from "../../shared/ui/i18n";

/** The events the chat handles through `Listen` (on a page, the shield keeps them from the page). */
export type ChatEvent = "keydown" | "input";

/** Registers a handler for a keyboard or input event inside the chat; `target` is the element it is for. */
export type Listen = (type: ChatEvent, handler: (event: Event, target: Element | null) => void) => void;

export type ComposerMode = "task" | "steer" | "answer";

export interface Composer {
  element: HTMLFormElement;
  textarea: HTMLTextAreaElement;
  setMode(mode: ComposerMode): void;
  readonly running: boolean;
  /** Shows Stop while a task runs; `stopping` greys it out once pressed. */
  setRunning(running: boolean, stopping?: boolean): void;
  /** Shows `selection` (page text) above the box, to go with the next task; focuses the box. */
  setSelection(selection: string): void;
  /** The selection went with a task (an answer or steering leaves it for the next one). */
  clearSelection(): void;
  focus(): void;
}

export function createComposer(handlers: { submit(text: string, selection: string | null): boolean; stop(): void }, listen: Listen): Composer {
  let selection: string | null = null;
  const quote = el("blockquote", { class: "selection-text" });
  const removeSelection = button("selection-remove", "×", t("selectionRemove"));
  const selectionBox = el("div", { class: "selection", "aria-label": t("selectionLabel") }, quote, removeSelection);
  selectionBox.hidden = true;
  const showSelection = (text: string | null) => {
    selection = text;
    quote.textContent = text ?? "";
    selectionBox.hidden = text === null;
  };
  removeSelection.addEventListener("click", () => {
    showSelection(null);
    textarea.focus();
  });
  const textarea = el("textarea", { class: "composer", rows: "2", "aria-label": t("promptLabel"), placeholder: t("promptPlaceholder") });
  const send = el("button", { type: "submit", class: "send" }, t("sendLabel"));
  const stop = button("stop", t("stopLabel"), t("stopHint"));
  stop.hidden = true;
  const form = el("form", { class: "composer-row" }, selectionBox, textarea, el("div", { class: "composer-buttons" }, send, stop));

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
    if (handlers.submit(text, selection)) {
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
    setSelection(text) {
      showSelection(text.trim() || null);
      textarea.focus();
    },
    clearSelection() {
      showSelection(null);
    },
    focus() {
      textarea.focus();
    },
  };
}
