// The options page: the same settings as the overlay's settings view, the models (installed or
// not, and "Load from a folder on this computer"), the sites where Hearth is off (each can be
// turned back on), and the keyboard shortcut.

import type { ModelManifest } from "../generated/protocol";
import { settingsForm } from "../content/ui/settings-view";
import { formatBytes, formatNumber, t } from "../content/ui/i18n";
import { localizeFailure } from "../shared/failures";
import { sendFromOptions } from "../shared/messages";
import { allManifests, totalBytes, unpinnedReason } from "../shared/models";
import { loadSettings, onSettingsChanged, saveSettings, type Settings } from "../shared/settings";
import * as store from "../offscreen/model-store";
import { loadWasm, type Wasm } from "../offscreen/wasm";

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
  document.body.dataset.loaded = "true";
}

async function showShortcut(): Promise<void> {
  const commands = await chrome.commands.getAll();
  const shortcut = commands.find((c) => c.name === "open-overlay")?.shortcut;
  $("shortcut").textContent = shortcut ? t("shortcutIs", shortcut) : t("shortcutNone");
}

$("change-shortcut").addEventListener("click", () => void chrome.tabs.create({ url: "chrome://extensions/shortcuts" }));

// --- models ------------------------------------------------------------------------------------

async function showModels(): Promise<void> {
  const list = $<HTMLUListElement>("models");
  const items = await Promise.all(
    (await allManifests()).map(async (m) => {
      const item = document.createElement("li");
      item.dataset.model = m.id;
      const name = document.createElement("span");
      name.textContent = m.name;
      const state = document.createElement("span");
      state.className = "model-state";
      const stored = unpinnedReason(m) ? 0 : await store.storedBytes(m);
      const installed = await store.isInstalled(m);
      item.dataset.state = unpinnedReason(m) ? "unpinned" : installed ? "installed" : stored > 0 ? "partial" : "missing";
      state.textContent = unpinnedReason(m)
        ? t("modelStateUnpinned")
        : installed
          ? t("modelStateInstalled", formatBytes(totalBytes(m)))
          : stored > 0
            ? t("modelStatePartial", formatBytes(stored), formatBytes(totalBytes(m)))
            : t("modelStateMissing", formatBytes(totalBytes(m)));
      item.append(name, state);
      if (stored > 0) {
        const remove = document.createElement("button");
        remove.type = "button";
        remove.className = "delete-model";
        remove.textContent = t("deleteModel");
        remove.setAttribute("aria-label", t("deleteModelLabel", m.name));
        remove.addEventListener("click", () => void store.remove(m).then(showModels));
        item.append(remove);
      }
      return item;
    }),
  );
  list.replaceChildren(...items);
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

const folder = $<HTMLInputElement>("model-folder");
folder.addEventListener("change", () => {
  const files = [...(folder.files ?? [])];
  folder.value = "";
  if (files.length) void importFolder(files);
});

void showModels();
void loadSettings().then(show);
void showShortcut();
onSettingsChanged(show);
