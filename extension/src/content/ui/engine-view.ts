// The engine's state above the conversation: starting (with a progress bar), ready (a one-line
// summary, GPU details folded away), or failed (what happened, what fixes it, and Retry). The
// state is mirrored on the host element (data-engine, data-adapter, data-self-test, data-values,
// data-failure, data-model) for tests.

import type { EngineStatus } from "../../generated/protocol";
import { button, el } from "./dom";
import { formatNumber, t } from "./i18n";

export interface EngineView {
  element: HTMLElement;
  render(status: EngineStatus, data: DOMStringMap): void;
}

export function engineView(retry: () => void): EngineView {
  const line = el("p", { class: "status", role: "status", "aria-live": "polite" }, t("engineIdle"));
  const body = el("div", { class: "engine-body" });
  const element = el("div", { class: "engine" }, line, body);

  return {
    element,
    render(status, data) {
      element.dataset.state = status.state;
      body.replaceChildren();
      delete data.adapter;
      delete data.selfTest;
      delete data.values;
      delete data.failure;
      delete data.model;
      data.engine = status.state;
      switch (status.state) {
        case "idle":
          line.textContent = t("engineIdle");
          break;
        case "starting":
          line.textContent = t("engineStarting");
          body.append(el("progress", { class: "loading", "aria-label": t("engineStarting") }));
          break;
        case "ready": {
          const { adapter, self_test: test, model } = status;
          data.adapter = adapter.name;
          if (model) data.model = model.name;
          data.selfTest = test.passed ? "passed" : "failed";
          data.values = JSON.stringify(test.values);
          const gpu = adapter.name || adapter.backend;
          line.textContent = model ? t("engineReadyModel", model.name, gpu) : t("engineReady", gpu);
          if (!model) body.append(el("p", { class: "notice" }, t("noModelYet")));
          const facts = el("dl");
          const fact = (term: string, value: string) => facts.append(el("dt", {}, term), el("dd", {}, value));
          fact(t("factBackend"), `${adapter.backend} · ${adapter.device_type}`);
          if (adapter.vendor || adapter.architecture) fact(t("factGpu"), `${adapter.vendor} ${adapter.architecture}`.trim());
          fact(t("factShaderF16"), adapter.shader_f16 ? t("yes") : t("no"));
          fact(t("factMaxBinding"), `${formatNumber(adapter.max_storage_buffer_binding_size / 2 ** 20)} MiB`);
          fact(t("factMaxBuffer"), `${formatNumber(adapter.max_buffer_size / 2 ** 20)} MiB`);
          fact(
            t("factModel"),
            model ? t("modelFacts", model.name, String(model.layers), formatNumber(model.load_ms)) : t("noModel"),
          );
          const result = el(
            "p",
            { class: test.passed ? "self-test" : "self-test bad" },
            test.passed
              ? t("selfTestPassed", test.max_abs_error.toExponential(1), test.elapsed_ms.toFixed(0))
              : t("selfTestFailed", test.max_abs_error.toExponential(1)),
          );
          const values = el("pre", { class: "values", "aria-label": test.computation }, formatMatrix(test.values, 6));
          body.append(
            el(
              "details",
              { class: "engine-details" },
              el("summary", {}, t("engineDetails")),
              facts,
              result,
              el("p", { class: "caption" }, test.computation),
              values,
            ),
          );
          if (!test.passed) body.append(el("p", { class: "error" }, t("selfTestFailedHelp")));
          break;
        }
        case "failed": {
          data.failure = status.failure.kind;
          line.textContent = t("engineFailed");
          const again = button("retry", t("retryLabel"));
          again.addEventListener("click", retry);
          body.append(
            el("p", { class: "error", role: "alert" }, status.failure.message),
            el("p", { class: "fix" }, el("strong", {}, t("fixLabel")), " ", status.failure.fix),
            again,
          );
          break;
        }
      }
    },
  };
}

function formatMatrix(values: number[], columns: number): string {
  const rows: string[] = [];
  for (let i = 0; i < values.length; i += columns) {
    rows.push(values.slice(i, i + columns).map((v) => v.toFixed(4)).join("  "));
  }
  return rows.join("\n");
}
