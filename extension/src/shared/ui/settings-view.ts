// The settings form shared by the overlay's settings view and the options page. Values are saved
// to chrome.storage.sync through shared/settings.ts (which clamps them) as soon as they change.

import { CHOOSABLE_MODELS, DEFAULT_MODEL_ID, isOwnModelId } from "../models";
import { watchOwnModels, type OwnModel } from "../own-models";
import type { ImageBudget, Settings } from "../settings";
import { IMAGE_BUDGETS } from "../../generated/protocol";
import { el, uid } from "./builders";
import { t } from "./i18n";

export interface SettingsForm {
  element: HTMLElement;
  /** Shows `settings` in the controls. */
  show(settings: Settings): void;
}

export function settingsForm(onChange: (patch: Partial<Settings>) => void): SettingsForm {
  const field = (control: HTMLElement, label: string, help: string) => {
    const id = uid("setting");
    const helpId = uid("setting-help");
    control.id = id;
    control.setAttribute("aria-describedby", helpId);
    const isCheckbox = control instanceof HTMLInputElement && control.type === "checkbox";
    return el(
      "div",
      { class: isCheckbox ? "field check" : "field" },
      isCheckbox ? control : null,
      el("label", { for: id }, label),
      isCheckbox ? null : control,
      el("p", { class: "help", id: helpId }, help),
    );
  };

  const model = el(
    "select",
    { class: "setting-model", name: "model" },
    el("option", { value: CHOOSABLE_MODELS[0] }, t("modelE2B")),
    el("option", { value: CHOOSABLE_MODELS[1] }, t("modelE4B")),
  );
  // The user's own model files (options page, "Use a model file you already have"), marked as
  // not verified by Hearth; kept current as they are added and deleted.
  const own = el("optgroup", { label: t("ownModelsGroup") });
  let shown: Settings | null = null;
  const showOwn = (models: OwnModel[]) => {
    own.replaceChildren(...models.map((m) => el("option", { value: m.id, "data-verified": "false" }, t("ownModelOption", m.name))));
    // An own model's id shown bare (before the list arrived) goes: it is in the list now, or gone.
    for (const option of [...model.options]) if (option.parentElement === model && isOwnModelId(option.value)) option.remove();
    if (models.length) model.append(own);
    else own.remove();
    if (shown) show(shown);
  };
  watchOwnModels(showOwn);
  const thinking = el("input", { class: "setting-thinking", name: "thinking", type: "checkbox" });
  const maxIterations = el("input", { class: "setting-max-iterations", name: "maxIterations", type: "number", min: "1", max: "100", step: "1", inputmode: "numeric" });
  const temperature = el("input", { class: "setting-temperature", name: "temperature", type: "number", min: "0", max: "2", step: "0.1", inputmode: "decimal" });

  const surface = el(
    "select",
    { class: "setting-chat-surface", name: "chatSurface" },
    el("option", { value: "overlay" }, t("chatSurfaceOverlay")),
    el("option", { value: "panel" }, t("chatSurfacePanel")),
  );
  // What a screenshot costs the model: offered only to a model that sees (the engine says).
  const imageBudget = el(
    "select",
    { class: "setting-image-budget", name: "imageBudget" },
    ...IMAGE_BUDGETS.map((b) => el("option", { value: String(b) }, t("imageBudgetOption", String(b)))),
  );
  imageBudget.addEventListener("change", () => onChange({ imageBudget: Number(imageBudget.value) as ImageBudget }));
  const drafting = el("input", { class: "setting-drafting", name: "drafting", type: "checkbox" });
  drafting.addEventListener("change", () => onChange({ drafting: drafting.checked }));
  const voice = el("input", { class: "setting-voice", name: "voice", type: "checkbox" });
  voice.addEventListener("change", () => onChange({ voice: voice.checked }));
  surface.addEventListener("change", () => onChange({ chatSurface: surface.value === "panel" ? "panel" : "overlay" }));
  model.addEventListener("change", () => onChange({ model: model.value }));
  thinking.addEventListener("change", () => onChange({ thinking: thinking.checked }));
  const numeric = (input: HTMLInputElement, key: "maxIterations" | "temperature") =>
    input.addEventListener("change", () => {
      const value = input.valueAsNumber;
      if (Number.isFinite(value)) onChange({ [key]: value });
    });
  numeric(maxIterations, "maxIterations");
  numeric(temperature, "temperature");

  const element = el(
    "div",
    { class: "settings-form" },
    field(model, t("modelSetting"), t("modelHelp")),
    field(thinking, t("thinkingSetting"), t("thinkingHelp")),
    field(maxIterations, t("maxIterationsSetting"), t("maxIterationsHelp")),
    field(temperature, t("temperatureSetting"), t("temperatureHelp")),
    field(surface, t("chatSurfaceSetting"), t("chatSurfaceHelp")),
    field(imageBudget, t("imageBudgetSetting"), t("imageBudgetHelp")),
    field(drafting, t("draftingSetting"), t("draftingHelp")),
    field(voice, t("voiceSetting"), t("voiceHelp")),
  );
  function show(settings: Settings): void {
    shown = settings;
    // "" is the build's default; a model chosen elsewhere (a test model) is shown as it is.
    const id = settings.model || DEFAULT_MODEL_ID;
    // (An own model shown bare because the settings named it goes once they name another.)
    for (const option of [...model.options]) if (option.parentElement === model && isOwnModelId(option.value) && option.value !== id) option.remove();
    if (![...model.options].some((o) => o.value === id)) model.insertBefore(el("option", { value: id }, id), own.parentElement ? own : null);
    model.value = id;
    thinking.checked = settings.thinking;
    maxIterations.value = String(settings.maxIterations);
    temperature.value = String(settings.temperature);
    surface.value = settings.chatSurface;
    imageBudget.value = String(settings.imageBudget);
    drafting.checked = settings.drafting;
    voice.checked = settings.voice;
  }
  return { element, show };
}
