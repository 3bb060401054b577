// The engine's state above the conversation: starting (with a progress bar), ready (a one-line
// summary, GPU details folded away), needs_model (the model to download, its size, Download),
// installing (bytes, %, speed, time left), loading (the model going onto the GPU, step by step),
// or failed (what happened, what fixes it, and Retry). The state is mirrored into `data` (in test
// builds the dataset of the overlay's hidden test-state element, inside its shadow root): data-engine,
// data-adapter, data-self-test, data-values, data-fused-error, data-failure, data-model,
// data-model-verified ("false" for the user's own model file), data-offer, data-download, data-load,
// data-drafter (the assistant the model drafts with), data-drafter-offer (the assistant offered),
// data-projector-offer (a GGUF model's vision file offered).
// `needs_model` also offers "Use a model file you already have" (the options page, at its models).

import { INSTALL_FAILURES, type EngineStatus } from "../../generated/protocol";
import type { OwnModel } from "../../shared/own-models";
import { button, el } from "../../shared/ui/builders";
import { formatBytes, formatDuration, formatNumber, t } from "../../shared/ui/i18n";

export interface EngineView {
  element: HTMLElement;
  render(status: EngineStatus, data: DOMStringMap): void;
}

/**
 * `retry` starts the engine again; `install` downloads the offered model; `useOwnFile` opens the
 * options page to choose a model file already on the computer; `ownModel(name)` is the user's own
 * model of that name (shown as not verified by Hearth), if the loaded model is one.
 */
export function engineView(
  retry: () => void,
  install: (modelId: string) => void,
  useOwnFile: () => void = () => {},
  ownModel: (name: string) => OwnModel | undefined = () => undefined,
): EngineView {
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
      delete data.fusedError;
      delete data.failure;
      delete data.model;
      delete data.modelVerified;
      delete data.offer;
      delete data.download;
      delete data.load;
      delete data.drafter;
      delete data.drafterOffer;
      delete data.projectorOffer;
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
          data.fusedError = String(test.fused_kernels_max_abs_error ?? "none");
          const gpu = adapter.name || adapter.backend;
          line.textContent = model ? t("engineReadyModel", model.name, gpu) : t("engineReady", gpu);
          if (!model) body.append(el("p", { class: "notice" }, t("noModelYet")));
          const own = model ? ownModel(model.name) : undefined;
          if (model && own) {
            data.modelVerified = "false";
            body.append(el("p", { class: "model-unverified" }, t("ownModelReady", model.name, own.file_name)));
          }
          const facts = el("dl");
          const fact = (term: string, value: string) => facts.append(el("dt", {}, term), el("dd", {}, value));
          fact(t("factBackend"), `${adapter.backend} · ${adapter.device_type}`);
          if (adapter.vendor || adapter.architecture) fact(t("factGpu"), `${adapter.vendor} ${adapter.architecture}`.trim());
          fact(t("factShaderF16"), adapter.shader_f16 ? t("yes") : t("no"));
          fact(t("factMaxBinding"), `${formatNumber(adapter.max_storage_buffer_binding_size / 2 ** 20)} MiB`);
          fact(t("factMaxBuffer"), `${formatNumber(adapter.max_buffer_size / 2 ** 20)} MiB`);
          fact(
            t("factModel"),
            model ? t("modelFacts", model.name, String(model.layers), formatNumber(model.context_tokens), formatNumber(model.load_ms)) : t("noModel"),
          );
          const sight = model && (model.sees_images ? t("sightYes") : model.vision_failure ? t("sightFailed", model.vision_failure) : model.projector_offer ? t("sightOffered") : t("sightNo"));
          if (sight) fact(t("factSight"), sight);
          const projector = model?.projector_offer;
          if (projector) {
            // A GGUF model's vision tower is a file of its own: offered, never fetched unasked.
            data.projectorOffer = projector.id;
            const download = button("download-projector", t("projectorDownload", formatBytes(projector.total_bytes)));
            download.dataset.model = projector.id;
            download.addEventListener("click", () => {
              download.disabled = true;
              install(projector.id);
            });
            body.append(el("p", { class: "projector-offer" }, t("projectorPrompt"), " ", download));
          }
          if (model) {
            const offer = model.drafter_offer;
            fact(t("factDrafter"), model.drafter ? t("drafterYes", model.drafter) : model.drafter_failure ? t("drafterFailed", model.drafter_failure) : offer ? t("drafterOffered") : t("drafterNo"));
            data.drafter = model.drafter ?? "";
            if (offer) {
              // The model's published assistant: a small download that makes replies faster.
              data.drafterOffer = offer.id;
              const download = button("download-drafter", t("drafterDownload", formatBytes(offer.total_bytes)));
              download.dataset.model = offer.id;
              download.addEventListener("click", () => {
                download.disabled = true;
                install(offer.id);
              });
              body.append(el("p", { class: "drafter-offer" }, t("drafterPrompt"), " ", download));
            }
          }
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
        case "needs_model": {
          const { model } = status;
          data.offer = model.id;
          line.textContent = t("modelNeeded");
          const resume = model.stored_bytes > 0;
          const question = resume
            ? t("downloadResumePrompt", model.name, formatBytes(model.stored_bytes), formatBytes(model.total_bytes))
            : t("downloadPrompt", model.name, formatBytes(model.total_bytes));
          const download = button("download-model", resume ? t("resumeButton") : t("downloadButton"));
          download.dataset.model = model.id;
          download.addEventListener("click", () => {
            download.disabled = true;
            install(model.id);
          });
          const useFile = button("use-own-file", t("useOwnFileButton"));
          useFile.addEventListener("click", useOwnFile);
          body.append(
            el("p", { class: "offer" }, question),
            el("p", { class: "help" }, t("downloadHelp")),
            download,
            useFile,
            el("p", { class: "help use-own-file-help" }, t("useOwnFileHelp")),
          );
          break;
        }
        case "installing": {
          const { model, progress } = status;
          const percent = progress.total > 0 ? Math.min(100, (100 * progress.bytes) / progress.total) : 0;
          data.offer = model.id;
          data.download = percent.toFixed(1);
          line.textContent = t("modelInstalling", model.name);
          const bar = el("progress", { class: "download", max: "100", value: percent.toFixed(1), "aria-label": t("modelInstalling", model.name) });
          const amounts = t("downloadProgress", formatBytes(progress.bytes), formatBytes(progress.total), formatNumber(percent, 0));
          const rate =
            progress.bytes_per_s > 0 && progress.eta_s !== null
              ? t("downloadSpeed", formatBytes(progress.bytes_per_s), formatDuration(progress.eta_s))
              : t("downloadSpeedUnknown");
          body.append(
            bar,
            el("p", { class: "download-amounts" }, amounts),
            el("p", { class: "download-rate meta" }, rate),
          );
          if (progress.file) body.append(el("p", { class: "download-file meta" }, t("downloadFile", progress.file)));
          break;
        }
        case "loading": {
          const percent = status.total > 0 ? (100 * status.done) / status.total : 0;
          data.load = `${status.done}/${status.total}`;
          line.textContent = t("modelLoading", status.model);
          body.append(
            el("progress", { class: "download", max: "100", value: percent.toFixed(1), "aria-label": t("modelLoading", status.model) }),
            // `done` steps are done: the one being read is the next.
            el("p", { class: "load-progress meta" }, t("loadProgress", String(Math.min(status.done + 1, status.total)), String(status.total))),
          );
          break;
        }
        case "failed": {
          data.failure = status.failure.kind;
          const installing = INSTALL_FAILURES.includes(status.failure.kind);
          line.textContent = installing ? t("modelInstallFailed") : t("engineFailed");
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
