// The options page: the same settings as the overlay's settings view, the sites where Hearth is
// off (each can be turned back on), and the keyboard shortcut.

import { settingsForm } from "../content/ui/settings-view";
import { t } from "../content/ui/i18n";
import { loadSettings, onSettingsChanged, saveSettings, type Settings } from "../shared/settings";

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

void loadSettings().then(show);
void showShortcut();
onSettingsChanged(show);
