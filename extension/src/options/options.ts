// The options page: the same settings as the overlay's settings view, the models (installed or
// not, the user's own model files among them; "Use a model file you already have", "Load from a
// folder on this computer"), the sites where Hearth is off (each can be turned back on), and the
// keyboard shortcut.

import type { GgufInspection, ModelManifest } from "../generated/protocol";
import { settingsForm } from "../shared/ui/settings-view";
import { formatBytes, formatNumber, t } from "../shared/ui/i18n";
import { localizeFailure } from "../shared/failures";
import { sendFromOptions } from "../shared/messages";
import { allManifests, manifestVariants, totalBytes, unpinnedReason } from "../shared/models";
import { ownModelRecord, ownModels, removeOwnModel, saveOwnModel, type OwnModel } from "../shared/own-models";
import { loadSettings, onSettingsChanged, saveSettings, toolMode, type Settings } from "../shared/settings";
import { PAGE_TOOLS, WORKER_TOOLS } from "../shared/tool-executors";
import type { ToolMode } from "../generated/protocol";
import * as store from "../shared/model-store";
import { loadWasm, type Wasm } from "../shared/wasm";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

document.documentElement.lang = chrome.i18n.getUILanguage();
for (const node of document.querySelectorAll<HTMLElement>("[data-i18n]")) node.textContent = t(node.dataset.i18n!);
document.title = t("optionsTitle");

const saved = $<HTMLParagraphElement>("saved");
const form = settingsForm((patch) => void save(patch));
$("settings-form").append(form.element);

async function save(patch: Partial<Settings>): Promise<void> {
  show(await saveSettings(patch));
  saved.textContent = t("settingsSaved");
}

function show(settings: Settings): void {
  form.show(settings);
  const list = $<HTMLUListElement>("sites");
  list.replaceChildren();
  for (const site of settings.disabledSites) {
    const item = document.createElement("li");
    const name = document.createElement("span");
    name.className = "site";
    name.textContent = site;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "remove-site";
    remove.dataset.site = site;
    remove.textContent = t("removeSite");
    remove.setAttribute("aria-label", t("removeSiteLabel", site));
    remove.addEventListener("click", () => {
      void loadSettings().then((s) => save({ disabledSites: s.disabledSites.filter((x) => x !== site) }));
    });
    item.append(name, remove);
    list.append(item);
  }
  $("no-sites").hidden = settings.disabledSites.length > 0;
  showTools(settings);
  document.body.dataset.loaded = "true";
}

/** One row per tool the user can restrict (the loop's own tools are always on). */
function showTools(settings: Settings): void {
  const modes: [ToolMode, string][] = [
    ["on", t("toolModeOn")],
    ["ask", t("toolModeAsk")],
    ["off", t("toolModeOff")],
  ];
  const rows = [...PAGE_TOOLS, ...WORKER_TOOLS].map((tool) => {
    const item = document.createElement("li");
    const name = document.createElement("code");
    name.textContent = tool;
    name.id = `tool-${tool}`;
    const select = document.createElement("select");
    select.className = "tool-mode";
    select.dataset.tool = tool;
    select.setAttribute("aria-labelledby", `tool-${tool}`);
    select.setAttribute("aria-describedby", "tools-help");
    for (const [mode, label] of modes) select.append(new Option(label, mode, false, toolMode(settings, tool) === mode));
    select.addEventListener("change", () => {
      void loadSettings().then((s) => save({ toolModes: { ...s.toolModes, [tool]: select.value as ToolMode } }));
    });
    item.append(name, " ", select);
    return item;
  });
  $("tools").replaceChildren(...rows);
}

async function showShortcut(): Promise<void> {
  const commands = await chrome.commands.getAll();
  // The shortcut is the toolbar button's (`_execute_action`): the overlay, or the side panel.
  const shortcut = commands.find((c) => c.name === "_execute_action")?.shortcut;
  $("shortcut").textContent = shortcut ? t("shortcutIs", shortcut) : t("shortcutNone");
}

$("change-shortcut").addEventListener("click", () => void chrome.tabs.create({ url: "chrome://extensions/shortcuts" }));

// --- models ------------------------------------------------------------------------------------

/** One row of the models list: its name column (name, then any facts) and its state. */
function modelItem(id: string, name: string, ...facts: HTMLElement[]): { item: HTMLLIElement; state: HTMLSpanElement } {
  const item = document.createElement("li");
  item.dataset.model = id;
  const names = document.createElement("span");
  names.className = "model-name";
  const title = document.createElement("span");
  title.className = "model-title";
  title.textContent = name;
  names.append(title, ...facts);
  const state = document.createElement("span");
  state.className = "model-state";
  item.append(names, state);
  return { item, state };
}

function span(className: string, text: string): HTMLSpanElement {
  const node = document.createElement("span");
  node.className = className;
  node.textContent = text;
  return node;
}

function deleteButton(item: HTMLLIElement, name: string, remove: () => Promise<unknown>): void {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "delete-model";
  button.textContent = t("deleteModel");
  button.setAttribute("aria-label", t("deleteModelLabel", name));
  button.addEventListener("click", () => void remove().then(showModels));
  item.append(button);
}

/** A model of the build's manifests: installed (at its pinned revision or an earlier upload), partly downloaded, missing. */
async function manifestItem(m: ModelManifest): Promise<HTMLLIElement> {
  const { item, state } = modelItem(m.id, m.name);
  const unpinned = unpinnedReason(m) !== null;
  const installed = unpinned ? null : await store.installedVariant(m);
  const stored = unpinned ? 0 : await store.storedBytes(m);
  item.dataset.state = unpinned ? "unpinned" : installed ? "installed" : stored > 0 ? "partial" : "missing";
  if (installed) item.dataset.revision = installed.revision ?? "";
  state.textContent = unpinned
    ? t("modelStateUnpinned")
    : installed && installed.revision !== m.revision
      ? t("modelStateInstalledUpload", formatBytes(totalBytes(installed)))
      : installed
        ? t("modelStateInstalled", formatBytes(totalBytes(m)))
        : stored > 0
          ? t("modelStatePartial", formatBytes(stored), formatBytes(totalBytes(m)))
          : t("modelStateMissing", formatBytes(totalBytes(m)));
  if (installed || stored > 0) deleteButton(item, m.name, () => Promise.all(manifestVariants(m).map((v) => store.remove(v))));
  return item;
}

/** "270M", "4.6B" (or the UI language's compact form). */
const formatCount = (n: number) =>
  new Intl.NumberFormat(chrome.i18n.getUILanguage(), { notation: "compact", maximumFractionDigits: 1 }).format(n);

/** One of the user's own model files: its name, size and architecture, and that Hearth has not verified it. */
async function ownItem(m: OwnModel): Promise<HTMLLIElement> {
  const g = m.gguf;
  const facts = span("model-facts", t("ownModelFacts", g.architecture, String(g.layers), g.quantization, formatCount(g.parameters), m.file_name));
  const notes = [facts, span("model-unverified", t("ownModelUnverified"))];
  if (g.chat_template) notes.push(span("model-facts model-template", t("ownModelSuppliedTemplate")));
  const { item, state } = modelItem(m.id, m.name, ...notes);
  const installed = await store.isInstalled(m);
  item.dataset.state = installed ? "installed" : "missing";
  item.dataset.verified = "false";
  state.textContent = installed ? t("modelStateInstalled", formatBytes(totalBytes(m))) : t("modelStateOwnMissing");
  deleteButton(item, m.name, async () => {
    // The settings must not name a model that is gone for good (it cannot be downloaded).
    if ((await loadSettings()).model === m.id) await saveSettings({ model: "" });
    await store.remove(m);
    await removeOwnModel(m.id);
  });
  return item;
}

async function showModels(): Promise<void> {
  const list = $<HTMLUListElement>("models");
  const pinned = await Promise.all((await allManifests()).map(manifestItem));
  const own = await Promise.all((await ownModels()).map(ownItem));
  list.replaceChildren(...pinned, ...own);
}

let wasm: Promise<Wasm> | null = null;

/** The relative path of a file the user picked in a folder, without the folder's own name. */
function pathInFolder(file: File): string {
  const parts = (file.webkitRelativePath || file.name).split("/");
  return parts.length > 1 ? parts.slice(1).join("/") : parts[0];
}

/** Installs the model whose files the chosen folder holds: checked like a download, no network. */
async function importFolder(files: File[]): Promise<void> {
  const status = $<HTMLParagraphElement>("model-import-status");
  const bar = $<HTMLProgressElement>("model-import-progress");
  const say = (state: string, text: string) => {
    status.dataset.state = state;
    status.textContent = text;
  };
  const byPath = new Map<string, Blob>(files.map((f) => [pathInFolder(f), f]));
  const manifests = await allManifests();
  const holds = (m: ModelManifest) => m.files.every((f) => byPath.has(f.path));
  const pinned = (m: ModelManifest) => unpinnedReason(m) === null;
  const sizesMatch = (m: ModelManifest) => m.files.every((f) => byPath.get(f.path)?.size === f.size);
  // The model whose pinned sizes the folder matches; else one whose files it holds (the store then
  // says which file differs, or that the manifest is not pinned).
  const model =
    manifests.find((m) => pinned(m) && holds(m) && sizesMatch(m)) ?? manifests.find((m) => pinned(m) && holds(m)) ?? manifests.find(holds);
  if (!model) {
    say("failed", t("importNoMatch", manifests.map((m) => m.name).join(", ")));
    return;
  }
  say("checking", t("importChecking", model.name, "", "0"));
  bar.hidden = false;
  try {
    wasm ??= loadWasm();
    const { Sha256 } = await wasm;
    await store.importFiles(model, byPath, () => new Sha256(), (p) => {
      const percent = p.total > 0 ? (100 * p.bytes) / p.total : 100;
      bar.value = percent;
      say("checking", t("importChecking", model.name, p.file, formatNumber(percent)));
    });
    await saveSettings({ model: model.id });
    await sendFromOptions({ kind: "model_installed", model_id: model.id }).catch(() => {});
    say("done", t("importDone", model.name));
  } catch (error) {
    const known = error instanceof store.InstallError ? localizeFailure(error.failure) : null;
    const detail = known ? `${known.message} ${known.fix}` : String(error);
    say("failed", t("importFailed", model.name, detail));
  } finally {
    bar.hidden = true;
    await showModels();
  }
}

/** Bytes `offset`…`offset + length` of a chosen file (for the engine's header reader). */
const reader = (file: Blob) => async (offset: number, length: number) => new Uint8Array(await file.slice(offset, offset + length).arrayBuffer());

/** Why a file the engine judged is not a model Hearth can run, as an installation failure. */
function refusal(file: File, verdict: Exclude<GgufInspection, { verdict: "loadable" }>): store.InstallError {
  switch (verdict.verdict) {
    case "not_gguf":
      return new store.InstallError("model_load", "failureOwnNotGguf", file.name);
    case "unsupported_architecture":
      return new store.InstallError("model_load", "failureOwnArchitecture", file.name, verdict.architecture);
    case "invalid":
      return new store.InstallError("model_load", "failureOwnInvalid", file.name, verdict.reason);
  }
}

/**
 * "Use a model file you already have": a file whose size and SHA-256 are a pinned manifest's (or
 * one of its known uploads) becomes that model; any other GGUF the engine can run becomes the
 * user's own model (not verified by Hearth); anything else is refused before a byte is stored. The
 * file is copied into the model store (checked again by SHA-256 as it is copied), like a download.
 */
async function importFile(file: File): Promise<void> {
  const status = $<HTMLParagraphElement>("model-import-status");
  const bar = $<HTMLProgressElement>("model-import-progress");
  const say = (state: string, text: string, percent?: number) => {
    status.dataset.state = state;
    status.textContent = text;
    bar.hidden = percent === undefined;
    if (percent !== undefined) bar.value = percent;
  };
  const percentOf = (bytes: number, total: number) => (total > 0 ? (100 * bytes) / total : 100);
  let own: OwnModel | null = null;
  try {
    say("checking", t("ownFileReading", file.name));
    wasm ??= loadWasm();
    const engine = await wasm;
    const newHasher = () => new engine.Sha256();
    let sha256: string | null = null;
    const hash = async () =>
      (sha256 ??= await store.hashBlob(file, newHasher, (bytes, total) => {
        const percent = percentOf(bytes, total);
        say("checking", t("ownFileHashing", file.name, formatNumber(percent)), percent);
      }));
    const copy = (m: ModelManifest) =>
      store.importFiles(m, new Map([[m.files[0].path, file]]), newHasher, (p) => {
        const percent = percentOf(p.bytes, p.total);
        say("checking", t("ownFileCopying", file.name, m.name, formatNumber(percent)), percent);
      });
    const installed = async (m: ModelManifest) => {
      await saveSettings({ model: m.id });
      await sendFromOptions({ kind: "model_installed", model_id: m.id }).catch(() => {});
    };

    // 1. A file Hearth knows: the size first (free), then the SHA-256.
    const manifests = (await allManifests()).filter((m) => unpinnedReason(m) === null);
    const sameSize = manifests.flatMap(manifestVariants).filter((v) => v.files.length === 1 && v.files[0].size === file.size);
    if (sameSize.length > 0) {
      const digest = await hash();
      const known = sameSize.find((v) => v.files[0].sha256 === digest);
      if (known) {
        await copy(known);
        await installed(known);
        const upload = manifests.find((m) => m.id === known.id)?.revision !== known.revision;
        say("done", upload ? t("ownFileKnownUpload", file.name, known.name) : t("ownFileKnown", file.name, known.name));
        return;
      }
    }

    // 2. Any other file: the engine reads its header and says whether it can run it.
    say("checking", t("ownFileInspecting", file.name));
    const verdict = JSON.parse(await engine.inspectGguf(file.name, file.size, reader(file))) as GgufInspection;
    if (verdict.verdict !== "loadable") throw refusal(file, verdict);
    own = ownModelRecord(file, await hash(), verdict.model);
    await copy(own);
    await saveOwnModel(own);
    await installed(own);
    const g = own.gguf;
    say("done", t("ownFileAdded", file.name, own.name, g.architecture, String(g.layers), formatBytes(file.size)));
  } catch (error) {
    // A copy cut short leaves nothing of the user's own file (it has no download to resume).
    if (own) await store.remove(own).catch(() => {});
    const known = error instanceof store.InstallError ? localizeFailure(error.failure) : null;
    say("failed", t("ownFileFailed", known ? `${known.message} ${known.fix}` : String(error)));
  } finally {
    await showModels();
  }
}

const chosenFile = $<HTMLInputElement>("model-file");
chosenFile.addEventListener("change", () => {
  const [file] = [...(chosenFile.files ?? [])];
  chosenFile.value = "";
  if (file) void importFile(file);
});

const folder = $<HTMLInputElement>("model-folder");
folder.addEventListener("change", () => {
  const files = [...(folder.files ?? [])];
  folder.value = "";
  if (files.length) void importFolder(files);
});

// The overlay's "Use a model file you already have" opens this page at its models.
void showModels().then(() => {
  if (location.hash !== "#models") return;
  $("models-section").scrollIntoView();
  chosenFile.focus();
});
void loadSettings().then(show);
void showShortcut();
onSettingsChanged(show);
