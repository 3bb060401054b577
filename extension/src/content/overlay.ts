// The overlay: a launcher button and a panel inside a *closed* shadow root, so the page can neither
// read nor restyle it. Its state is mirrored as data-* attributes on the host element for tests.

import type { EngineStatus, GenerationEvent, RuntimeMessage } from "../generated/protocol";
import { isRuntimeMessage, sendToWorker } from "../shared/messages";
import { OVERLAY_CSS } from "./overlay-style";

/** Tokens per reply until the settings page lets people choose (and the agent loop stops on `done`). */
const REPLY_TOKEN_LIMIT = 24;

const t = (key: string, ...substitutions: string[]): string => chrome.i18n.getMessage(key, substitutions) || key;

/** Builds an element with text content only: page- or engine-supplied text never becomes HTML. */
function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  text?: string,
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

export function mountOverlay(): void {
  const host = document.createElement("hearth-overlay");
  const shadow = host.attachShadow({ mode: "closed" });
  const style = el("style", {}, OVERLAY_CSS);

  const launcher = el("button", { class: "launcher", type: "button", "aria-label": t("launcherLabel"), "aria-expanded": "false" }, "H");
  const panel = el("section", { class: "panel", role: "dialog", "aria-label": t("panelTitle"), hidden: "" });
  const header = el("header");
  const title = el("h2", {}, t("panelTitle"));
  const close = el("button", { class: "close", type: "button", "aria-label": t("closeLabel") }, "×");
  header.append(title, close);
  const statusLine = el("p", { class: "status", role: "status", "aria-live": "polite" }, t("engineIdle"));
  const details = el("div", { class: "details" });
  const output = el("div", { class: "output", role: "log", "aria-live": "polite", hidden: "" });
  const reply = el("p", { class: "reply" });
  const stats = el("p", { class: "stats" });
  output.append(reply, stats);
  const form = el("form", { class: "ask", hidden: "" });
  const input = el("textarea", { rows: "2", "aria-label": t("promptLabel"), placeholder: t("promptPlaceholder") });
  const send = el("button", { type: "submit" }, t("sendLabel"));
  form.append(input, send);
  panel.append(header, statusLine, details, output, form);
  shadow.append(style, launcher, panel);

  host.dataset.state = "closed";
  host.dataset.engine = "idle";
  // Keystrokes typed in the overlay belong to it, not to the page's shortcuts.
  for (const type of ["keydown", "keyup", "keypress"]) host.addEventListener(type, (e) => e.stopPropagation());

  let watching = false;
  const setOpen = (open: boolean) => {
    panel.hidden = !open;
    launcher.setAttribute("aria-expanded", String(open));
    host.dataset.state = open ? "open" : "closed";
    if (open) {
      (form.hidden ? close : input).focus();
      // The engine starts on first use, not on every page load.
      if (!watching) {
        watching = true;
        void sendToWorker({ kind: "watch_engine" });
      }
    } else {
      launcher.focus();
    }
  };
  launcher.addEventListener("click", () => setOpen(panel.hidden));
  close.addEventListener("click", () => setOpen(false));

  /** Token ids of the reply being streamed, for tests to compare with the final list. */
  const streamedIds: number[] = [];
  // Enter sends; Shift+Enter starts a new line.
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const prompt = input.value.trim();
    if (!prompt || host.dataset.generation === "running") return;
    host.dataset.generation = "running";
    delete host.dataset.outputIds;
    streamedIds.length = 0;
    output.hidden = false;
    reply.textContent = "";
    stats.textContent = "";
    send.disabled = true;
    void sendToWorker({ kind: "generate", prompt, max_tokens: REPLY_TOKEN_LIMIT });
  });

  chrome.runtime.onMessage.addListener((message: unknown) => {
    if (isRuntimeMessage(message) && message.to === "tab") onTabMessage(message);
    return false;
  });

  function onTabMessage(message: Extract<RuntimeMessage, { to: "tab" }>): void {
    if (message.msg.kind === "engine_status") render(message.msg.status);
    else if (message.msg.kind === "generation") onGeneration(message.msg.event);
  }

  function onGeneration(event: GenerationEvent): void {
    switch (event.event) {
      case "token":
        streamedIds.push(event.token_id);
        reply.textContent += event.text;
        break;
      case "done":
        host.dataset.generation = "done";
        host.dataset.outputIds = JSON.stringify(event.token_ids);
        host.dataset.streamedIds = JSON.stringify(streamedIds);
        host.dataset.generationStats = JSON.stringify(event.stats);
        reply.textContent = event.text;
        stats.textContent = t(
          "generationStats",
          String(event.stats.prompt_tokens),
          event.stats.prefill_tokens_per_s.toFixed(1),
          String(event.stats.generated_tokens),
          event.stats.decode_tokens_per_s.toFixed(1),
        );
        send.disabled = false;
        break;
      case "failed":
        host.dataset.generation = "failed";
        stats.textContent = event.message;
        stats.classList.add("error");
        send.disabled = false;
        break;
    }
  }

  function render(status: EngineStatus): void {
    host.dataset.engine = status.state;
    details.replaceChildren();
    delete host.dataset.adapter;
    delete host.dataset.selfTest;
    delete host.dataset.values;
    delete host.dataset.failure;
    delete host.dataset.model;
    switch (status.state) {
      case "idle":
        statusLine.textContent = t("engineIdle");
        break;
      case "starting":
        statusLine.textContent = t("engineStarting");
        break;
      case "ready": {
        const { adapter, self_test: test, model } = status;
        host.dataset.adapter = adapter.name;
        if (model) host.dataset.model = model.name;
        form.hidden = !model;
        if (model && !panel.hidden) input.focus();
        host.dataset.selfTest = test.passed ? "passed" : "failed";
        host.dataset.values = JSON.stringify(test.values);
        statusLine.textContent = t("engineReady", adapter.name || adapter.backend);
        const facts = el("dl");
        const fact = (term: string, value: string) => facts.append(el("dt", {}, term), el("dd", {}, value));
        fact("backend", `${adapter.backend} · ${adapter.device_type}`);
        if (adapter.vendor || adapter.architecture) fact("gpu", `${adapter.vendor} ${adapter.architecture}`.trim());
        fact("shader-f16", adapter.shader_f16 ? "yes" : "no");
        fact("max binding", `${(adapter.max_storage_buffer_binding_size / 2 ** 20).toFixed(0)} MiB`);
        fact("max buffer", `${(adapter.max_buffer_size / 2 ** 20).toFixed(0)} MiB`);
        const result = el("p", { class: "self-test" }, t("selfTestPassed", test.max_abs_error.toExponential(1), test.elapsed_ms.toFixed(0)));
        if (!test.passed) result.classList.add("bad");
        const values = el("pre", { class: "values", "aria-label": test.computation }, formatMatrix(test.values, 6));
        fact("model", model ? `${model.name} · ${model.layers} layers · loaded in ${model.load_ms.toFixed(0)} ms` : t("noModel"));
        details.append(facts, result, el("p", { class: "caption" }, test.computation), values);
        break;
      }
      case "failed": {
        host.dataset.failure = status.failure.kind;
        statusLine.textContent = t("engineFailed");
        details.append(el("p", { class: "error" }, status.failure.message), el("p", { class: "fix" }, `${t("fixLabel")} ${status.failure.fix}`));
        break;
      }
    }
  }

  document.documentElement.append(host);
}

function formatMatrix(values: number[], columns: number): string {
  const rows: string[] = [];
  for (let i = 0; i < values.length; i += columns) {
    rows.push(values.slice(i, i + columns).map((v) => v.toFixed(4)).join("  "));
  }
  return rows.join("\n");
}
