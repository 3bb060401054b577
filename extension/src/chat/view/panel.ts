// The chat's elements: the panel (header, engine view, chat, settings), built once. What they do
// is wired by live-chat.ts and the chat page (sidepanel.ts); this file only lays them out.

import { button, el } from "../../shared/ui/builders";
import { t } from "../../shared/ui/i18n";
import { settingsForm, type SettingsForm } from "../../shared/ui/settings-view";
import type { Settings } from "../../shared/settings";
import { createComposer, type Composer, type Listen } from "./composer";
import { engineView, type EngineView } from "./engine-view";
import type { OwnModel } from "../../shared/own-models";
import type { TabChoice } from "../../generated/protocol";

/** What the panel's controls call. */
export interface PanelHandlers {
  /** Retry the engine (its failure card). */
  retry(): void;
  install(modelId: string): void;
  openModelOptions(): void;
  ownModel(name: string): OwnModel | undefined;
  submit(text: string, selection: string | null, tabs: TabChoice[]): boolean;
  /** The composer's "Tabs" button: the other open tabs are asked for. */
  listTabs(): void;
  stop(): void;
  /** The microphone button: start or stop recording a spoken request, or cancel it (Esc). */
  voice(action: "start" | "stop" | "cancel"): void;
  /** The side panel (an extension page) saves the settings itself. */
  saveSettings?(patch: Partial<Settings>): void;
  /** The overlay lives in the page, where settings are never written: "All settings…" opens the options page. */
  openOptions?(): void;
  /** "Open in side panel" (the overlay's header). */
  openSidePanel?(): void;
}

export interface Panel {
  panel: HTMLElement;
  settingsToggle: HTMLButtonElement;
  close: HTMLButtonElement;
  /** "Open in side panel": the overlay's only. */
  toSidePanel: HTMLButtonElement | null;
  engine: EngineView;
  chat: HTMLElement;
  log: HTMLElement;
  empty: HTMLElement;
  usage: HTMLElement;
  continueButton: HTMLButtonElement;
  composer: Composer;
  settingsView: HTMLElement;
  /** The settings form: the side panel's only (the overlay has none). */
  form: SettingsForm | null;
  saved: HTMLElement;
  clear: HTMLButtonElement;
  disableSite: HTMLButtonElement;
  /** The tools this site's pages offer (WebMCP): on, ask every time, or off, for this site. */
  pageTools: HTMLSelectElement;
}

/** `site` is what "Turn off on this site" names; `surface` where the panel is mounted. */
export function buildPanel(handlers: PanelHandlers, listen: Listen, site: string, surface: "overlay" | "panel"): Panel {
  const titleId = "hearth-title";
  const settingsToggle = button("settings", "⚙", t("settingsLabel"), { "aria-expanded": "false", "aria-controls": "hearth-settings" });
  const close = button("close", "×", t("closeLabel"));
  const openSidePanel = handlers.openSidePanel;
  const toSidePanel = surface === "overlay" && openSidePanel ? button("to-side-panel", "⇥", t("openSidePanel")) : null;
  toSidePanel?.addEventListener("click", () => openSidePanel?.());
  const engine = engineView(handlers.retry, handlers.install, handlers.openModelOptions, handlers.ownModel);

  const log = el("div", { class: "transcript", role: "log", "aria-live": "polite", "aria-label": t("transcriptLabel"), tabindex: "0" });
  const empty = el("div", { class: "empty" }, el("p", {}, t("emptyTitle")), el("p", { class: "meta" }, t("emptyHint")));
  const usage = el("p", { class: "usage", "aria-live": "off" });
  const continueButton = button("continue", t("continueLabel"), t("continueHint"));
  continueButton.hidden = true;
  const taskbar = el("div", { class: "taskbar" }, usage, continueButton);
  const composer = createComposer({ submit: handlers.submit, listTabs: handlers.listTabs, stop: handlers.stop, voice: handlers.voice }, listen);
  const chat = el("div", { class: "chat" }, empty, log, taskbar, composer.element);

  const save = handlers.saveSettings;
  const form = surface === "panel" && save ? settingsForm(save) : null;
  const openOptions = handlers.openOptions;
  const allSettings = form ? null : button("open-options", t("openSettings"));
  allSettings?.addEventListener("click", () => openOptions?.());
  const saved = el("p", { class: "meta saved", role: "status" });
  const disableSite = button("disable-site danger", t("disableSite", site));
  const clear = button("clear", t("clearConversation"));
  const pageTools = el("select", { class: "page-tools-mode", id: "hearth-page-tools" }) as HTMLSelectElement;
  for (const [mode, label] of [["on", t("toolModeOn")], ["ask", t("toolModeAsk")], ["off", t("toolModeOff")]]) pageTools.append(new Option(label, mode));
  const settingsView = el(
    "div",
    { class: "settings-view", id: "hearth-settings", hidden: true },
    el("h3", {}, t("settingsTitle")),
    form ? form.element : el("p", { class: "help" }, t("settingsElsewhere")),
    allSettings,
    el("div", { class: "settings-actions" }, clear, disableSite),
    el("p", { class: "help" }, t("disableSiteHelp")),
    el("p", { class: "page-tools-setting" }, el("label", { for: "hearth-page-tools" }, t("pageToolsOnSite")), " ", pageTools),
    saved,
  );

  const panel = el(
    "section",
    { class: "panel", id: "hearth-panel", role: "dialog", "aria-modal": "false", "aria-labelledby": titleId, hidden: true },
    el("header", {}, el("h2", { id: titleId }, t("panelTitle")), el("div", { class: "header-buttons" }, toSidePanel, settingsToggle, close)),
    engine.element,
    chat,
    settingsView,
  );
  return { panel, settingsToggle, close, toSidePanel, engine, chat, log, empty, usage, continueButton, composer, settingsView, form, saved, clear, disableSite, pageTools };
}
