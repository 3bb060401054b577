// The message box: starts a task, steers a running one, or answers the model's question. The text
// the user selected on the page shows above it, apart from what they type (it is sent apart, as
// the page's words, and can be removed). Enter
// sends, Shift+Enter starts a new line; Enter that confirms an IME composition (Chinese, Japanese…)
// does not send. The Stop button shows while a task runs. The microphone records a spoken request
// (the offscreen document records; this only asks): a click starts and a second click sends it,
// holding it down records until it is let go; while it records, a level meter and the length
// show, and Esc or × drops the recording. "Tabs" lists the other open tabs (title, site, icon) to
// attach to the next task: their text goes with it as those pages' words; the attached ones show
// as chips above the box until the task is sent. Its keyboard and input handlers are
// registered by where the chat is mounted (`Listen`).

import type { TabChoice } from "../../generated/protocol";
import { button, el } from "../../shared/ui/builders";
import { formatNumber, t } from "../../shared/ui/i18n";

/** The events the chat handles through `Listen`. */
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
  /** The microphone records (the seconds so far and the loudness now, 0 to 1), or does not (null). */
  setRecording(recording: { seconds: number; level: number } | null, maxSeconds: number): void;
  /** The other open tabs, for the chooser the "Tabs" button opened. */
  showTabChoices(tabs: TabChoice[]): void;
  /** The attached tabs went with a task. */
  clearTabs(): void;
  focus(): void;
}

/** Held down at least this long, the microphone records until it is let go (a click toggles). */
const HOLD_MS = 450;

export interface ComposerHandlers {
  submit(text: string, selection: string | null, tabs: TabChoice[]): boolean;
  /** The "Tabs" button: ask for the list of open tabs (it comes back through `showTabChoices`). */
  listTabs(): void;
  stop(): void;
  voice(action: "start" | "stop" | "cancel"): void;
}

export function createComposer(handlers: ComposerHandlers, listen: Listen): Composer {
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
  const mic = button("mic", "", t("micLabel"), { "aria-pressed": "false" });
  mic.append(micIcon());
  // While recording: how loud, how long, and the ways out (send with the microphone, or drop).
  const level = el("span", { class: "level-bar" });
  const meter = el("span", { class: "level", role: "meter", "aria-label": t("micLevel"), "aria-valuemin": "0", "aria-valuemax": "100" }, level);
  const length = el("span", { class: "rec-length" });
  const cancel = button("rec-cancel", "×", t("micCancel"));
  const recordingRow = el("div", { class: "recording", role: "status" }, el("span", { class: "rec-dot", "aria-hidden": "true" }), el("span", {}, t("micRecording")), meter, length, cancel);
  recordingRow.hidden = true;
  // The tabs attached to the next task, and the chooser that attaches them.
  let attached: TabChoice[] = [];
  const tabChips = el("div", { class: "tab-chips", "aria-label": t("tabsAttachedLabel") });
  tabChips.hidden = true;
  const tabsButton = button("tabs-button", t("tabsButton"), t("tabsButtonHint"), { "aria-expanded": "false", "aria-haspopup": "true" });
  const chooserList = el("div", { class: "tab-choices", role: "group", "aria-label": t("tabsChooserLabel") });
  const chooserDone = button("tabs-done", t("tabsDone"), t("tabsDone"));
  const chooser = el("div", { class: "tab-chooser" }, el("p", { class: "tab-chooser-title" }, t("tabsChooserLabel")), chooserList, chooserDone);
  chooser.hidden = true;
  const drawChips = () => {
    tabChips.replaceChildren(
      ...attached.map((tab) => {
        const remove = button("tab-chip-remove", "×", t("tabsRemove", tab.title));
        remove.addEventListener("click", () => {
          attached = attached.filter((a) => a.tab_id !== tab.tab_id);
          drawChips();
          textarea.focus();
        });
        return el("span", { class: "tab-chip", "data-tab-id": String(tab.tab_id), title: tab.site }, tabIcon(tab), el("span", { class: "tab-chip-title" }, tab.title), remove);
      }),
    );
    tabChips.hidden = attached.length === 0;
  };
  const closeChooser = (focus: HTMLElement) => {
    chooser.hidden = true;
    tabsButton.setAttribute("aria-expanded", "false");
    focus.focus();
  };
  tabsButton.addEventListener("click", () => {
    if (!chooser.hidden) return closeChooser(tabsButton);
    chooserList.replaceChildren(el("p", { class: "meta" }, t("tabsLoading")));
    chooser.hidden = false;
    tabsButton.setAttribute("aria-expanded", "true");
    handlers.listTabs();
  });
  chooserDone.addEventListener("click", () => closeChooser(textarea));
  listen("keydown", (e, target) => {
    if (chooser.hidden || !(e instanceof KeyboardEvent) || e.key !== "Escape" || !target || !chooser.contains(target)) return;
    e.preventDefault();
    closeChooser(tabsButton);
  });
  const form = el("form", { class: "composer-row" }, selectionBox, tabChips, chooser, recordingRow, textarea, el("div", { class: "composer-buttons" }, send, tabsButton, mic, stop));
  let recording = false;

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
    if (handlers.submit(text, selection, attached)) {
      textarea.value = "";
      fit();
    }
  });
  stop.addEventListener("click", () => handlers.stop());

  // A click toggles; a press held past HOLD_MS records until it is let go (the click that follows
  // the press is the press's own, not a second toggle).
  let pressedAt = 0;
  let pressStarted = false;
  mic.addEventListener("pointerdown", () => {
    pressedAt = performance.now();
    pressStarted = !recording;
    if (pressStarted) handlers.voice("start");
  });
  mic.addEventListener("pointerup", () => {
    if (pressStarted && performance.now() - pressedAt >= HOLD_MS) handlers.voice("stop");
  });
  mic.addEventListener("click", () => {
    if (pressStarted) return void (pressStarted = false);
    handlers.voice(recording ? "stop" : "start");
  });
  cancel.addEventListener("click", () => handlers.voice("cancel"));
  listen("keydown", (e) => {
    if (!recording || !(e instanceof KeyboardEvent) || e.key !== "Escape") return;
    // Esc drops the recording (and only that: the overlay stays open).
    e.preventDefault();
    handlers.voice("cancel");
  });

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
    setRecording(now, maxSeconds) {
      recording = now !== null;
      recordingRow.hidden = !recording;
      mic.setAttribute("aria-pressed", String(recording));
      mic.classList.toggle("on", recording);
      mic.setAttribute("aria-label", recording ? t("micStop") : t("micLabel"));
      mic.title = mic.getAttribute("aria-label") ?? "";
      if (!now) return;
      const percent = Math.round(Math.min(1, Math.max(0, now.level)) * 100);
      level.style.width = `${percent}%`;
      meter.setAttribute("aria-valuenow", String(percent));
      length.textContent = t("micLength", formatNumber(now.seconds, 1), String(maxSeconds));
    },
    showTabChoices(tabs) {
      if (chooser.hidden) return;
      if (tabs.length === 0) return void chooserList.replaceChildren(el("p", { class: "meta" }, t("tabsNone")));
      chooserList.replaceChildren(
        ...tabs.map((tab) => {
          const box = el("input", { type: "checkbox", "data-tab-id": String(tab.tab_id) });
          box.checked = attached.some((a) => a.tab_id === tab.tab_id);
          box.disabled = tab.disabled;
          box.addEventListener("change", () => {
            attached = box.checked ? [...attached.filter((a) => a.tab_id !== tab.tab_id), tab].slice(0, MAX_ATTACHED) : attached.filter((a) => a.tab_id !== tab.tab_id);
            box.checked = attached.some((a) => a.tab_id === tab.tab_id);
            drawChips();
          });
          const site = el("span", { class: "tab-choice-site" }, tab.disabled ? t("tabsSiteOff", tab.site) : tab.site);
          return el("label", { class: "tab-choice" }, box, tabIcon(tab), el("span", { class: "tab-choice-title" }, tab.title), site);
        }),
      );
      chooserList.querySelector<HTMLInputElement>("input:not([disabled])")?.focus();
    },
    clearTabs() {
      attached = [];
      drawChips();
    },
    focus() {
      textarea.focus();
    },
  };
}

/** At most this many tabs go with one message (the worker's `MAX_ATTACHED`). */
const MAX_ATTACHED = 6;

/** A tab's icon from the browser's favicon cache (an extension address), or nothing. */
function tabIcon(tab: TabChoice): HTMLElement | null {
  if (!tab.icon) return null;
  return el("img", { class: "tab-icon", src: tab.icon, alt: "", width: "16", height: "16" });
}

/** A microphone, drawn (an emoji depends on the system's fonts). */
function micIcon(): SVGSVGElement {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  for (const [name, value] of Object.entries({ viewBox: "0 0 24 24", width: "16", height: "16", fill: "currentColor", "aria-hidden": "true" })) svg.setAttribute(name, value);
  const path = document.createElementNS(ns, "path");
  // The capsule, the stand's curve and its foot.
  path.setAttribute("d", "M12 2a3 3 0 0 0-3 3v6a3 3 0 0 0 6 0V5a3 3 0 0 0-3-3zM6 11H4a8 8 0 0 0 7 7.94V22h2v-3.06A8 8 0 0 0 20 11h-2a6 6 0 0 1-12 0z");
  svg.append(path);
  return svg;
}
