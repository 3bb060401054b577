// The user's settings, in chrome.storage.sync (they follow the user's Chrome profile). Read by the
// overlay, the options page and the service worker; written by the overlay and the options page.

import {
  DEFAULT_IMAGE_BUDGET, DEFAULT_TOOL_MODES, IMAGE_BUDGETS, LOOP_TOOLS, TOOL_NAMES, type TaskSettings, type ToolMode, type ToolName,
} from "../generated/protocol";
import { CHOOSABLE_MODELS, DEFAULT_MODEL_ID } from "./models";

/** Where the toolbar button and the keyboard shortcut open the chat. */
export type ChatSurface = "overlay" | "panel";

export interface Settings {
  /**
   * The model to run: a manifest id (models/*.json), or "" for the build's default, which is the
   * bundled test model in test builds and DEFAULT_MODEL_ID otherwise. A model named here always
   * comes from the model store (downloaded, or installed from a folder).
   */
  model: string;
  /** Let the model think before it answers (slower, often better on multi-step tasks). */
  thinking: boolean;
  /** Model calls per task before it pauses and asks to continue. */
  maxIterations: number;
  /** 0 answers deterministically. */
  temperature: number;
  /** Origins (https://example.com) where Hearth injects nothing and runs no tool. */
  disabledSites: string[];
  /** What each tool may do: on, ask every time, or off (not offered, refused if called). */
  toolModes: Partial<Record<ToolName, ToolMode>>;
  /** Where the toolbar button and Ctrl+Shift+K open the chat: the page's overlay or Chrome's side panel. */
  chatSurface: ChatSurface;
  /** Soft tokens a screenshot costs the model: more sees finer detail, and takes longer. */
  imageBudget: ImageBudget;
  /** Draft with the model's assistant when it is installed (faster; at temperature 0 the same answer). */
  drafting: boolean;
  /**
   * Voice input: the microphone button records a spoken request for the model's audio tower, which
   * the engine loads only while this is on (E2B's takes 0.6 GB of GPU memory).
   */
  voice: boolean;
  /**
   * The tools pages offer (WebMCP), by site (origin, as `disabledSites`): "on" offers them (a
   * tool the page did not mark read-only asks first), "ask" asks before every call, "off" never
   * offers them. A site not named is "on"; a site where Hearth is off has none.
   */
  pageTools: Record<string, ToolMode>;
}

export type ImageBudget = (typeof IMAGE_BUDGETS)[number];

export const DEFAULT_SETTINGS: Settings = {
  model: "",
  thinking: false,
  maxIterations: 25,
  temperature: 0,
  disabledSites: [],
  toolModes: { ...DEFAULT_TOOL_MODES },
  chatSurface: "overlay",
  imageBudget: DEFAULT_IMAGE_BUDGET,
  drafting: true,
  voice: false,
  pageTools: {},
};

/** Tokens per model call: enough for a long answer in `done`. */
const MAX_NEW_TOKENS = 1024;

const KEY = "settings";

/** The settings, with defaults for anything missing or malformed (storage is user-editable). */
export async function loadSettings(): Promise<Settings> {
  const stored = (await chrome.storage.sync.get(KEY))[KEY] as Partial<Settings> | undefined;
  return sanitize({ ...DEFAULT_SETTINGS, ...(stored ?? {}) });
}

export async function saveSettings(patch: Partial<Settings>): Promise<Settings> {
  const next = sanitize({ ...(await loadSettings()), ...patch });
  await chrome.storage.sync.set({ [KEY]: next });
  return next;
}

/** Calls `listener` whenever the settings change (in any context). */
export function onSettingsChanged(listener: (settings: Settings) => void): void {
  chrome.storage.onChanged.addListener((changes, area) => {
    if (area === "sync" && KEY in changes) void loadSettings().then(listener);
  });
}

function sanitize(s: Settings): Settings {
  const number = (value: unknown, fallback: number, min: number, max: number) =>
    typeof value === "number" && Number.isFinite(value) ? Math.min(max, Math.max(min, value)) : fallback;
  return {
    model: modelId(s.model),
    thinking: s.thinking === true,
    maxIterations: Math.round(number(s.maxIterations, DEFAULT_SETTINGS.maxIterations, 1, 100)),
    temperature: number(s.temperature, DEFAULT_SETTINGS.temperature, 0, 2),
    disabledSites: Array.isArray(s.disabledSites) ? s.disabledSites.filter((o) => typeof o === "string") : [],
    toolModes: toolModes(s.toolModes),
    chatSurface: s.chatSurface === "panel" ? "panel" : "overlay",
    imageBudget: IMAGE_BUDGETS.find((b) => b === s.imageBudget) ?? DEFAULT_IMAGE_BUDGET,
    drafting: s.drafting !== false,
    voice: s.voice === true,
    pageTools: pageTools(s.pageTools),
  };
}

const MODES: readonly ToolMode[] = ["on", "ask", "off"];

/** The user's tools' modes over the defaults; the loop's own tools are always on. */
function toolModes(value: unknown): Partial<Record<ToolName, ToolMode>> {
  const modes: Partial<Record<ToolName, ToolMode>> = { ...DEFAULT_TOOL_MODES };
  if (typeof value !== "object" || value === null) return modes;
  for (const [tool, mode] of Object.entries(value)) {
    const name = TOOL_NAMES.find((n) => n === tool);
    if (name && !(LOOP_TOOLS as readonly string[]).includes(name) && MODES.includes(mode as ToolMode)) modes[name] = mode as ToolMode;
  }
  return modes;
}

function pageTools(value: unknown): Record<string, ToolMode> {
  const modes: Record<string, ToolMode> = {};
  if (typeof value !== "object" || value === null) return modes;
  for (const [site, mode] of Object.entries(value)) {
    if (siteOf(site) === site && MODES.includes(mode as ToolMode)) modes[site] = mode as ToolMode;
  }
  return modes;
}

/** What the user lets the tools of the page at `url` do (off where Hearth is off). */
export function pageToolsMode(settings: Settings, url: string | undefined): ToolMode {
  if (isSiteDisabled(settings, url)) return "off";
  const site = siteOf(url);
  return (site !== null && settings.pageTools[site]) || "on";
}

/** What the user lets `tool` do. */
export function toolMode(settings: Settings, tool: string): ToolMode {
  return settings.toolModes[tool as ToolName] ?? "on";
}

/** A well-formed model id or "" (the manifest itself is checked where the model is loaded). */
function modelId(value: unknown): string {
  // Versions before model downloads stored "e2b" or "e4b"; before the GGUF defaults, the
  // (never installable) MLX ids.
  if (value === "e2b" || value === "gemma-4-e2b-it-4bit") return DEFAULT_MODEL_ID;
  if (value === "e4b" || value === "gemma-4-e4b-it-4bit") return CHOOSABLE_MODELS[1];
  return typeof value === "string" && /^[a-z0-9][a-z0-9._-]{0,99}$/.test(value) ? value : "";
}

/** The origin settings are keyed by, or null for pages Hearth never runs on. */
export function siteOf(url: string | undefined): string | null {
  if (!url) return null;
  try {
    const { protocol, origin } = new URL(url);
    return protocol === "http:" || protocol === "https:" ? origin : null;
  } catch {
    return null;
  }
}

export function isSiteDisabled(settings: Settings, url: string | undefined): boolean {
  const site = siteOf(url);
  return site === null || settings.disabledSites.includes(site);
}

/** What a task runs with. */
export function taskSettings(settings: Settings): TaskSettings {
  return {
    max_iterations: settings.maxIterations,
    enable_thinking: settings.thinking,
    temperature: settings.temperature,
    max_new_tokens: MAX_NEW_TOKENS,
    tool_modes: settings.toolModes,
    image_budget: settings.imageBudget,
    drafting: settings.drafting,
  };
}
