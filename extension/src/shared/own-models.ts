// The user's own models: GGUF files they chose ("Use a model file you already have") that no
// manifest pins, which the engine checked it can run (crates/offscreen/src/inspect.rs). Each is a
// manifest-like record, kept in chrome.storage.local (the options page, the overlay's settings and
// its engine view read it; the offscreen document, which has no chrome.storage, reads the same
// record from the model store, where it is the `?installed` marker's body). Its file is copied into
// the model store like a download, under `user-<12 hex of its SHA-256>@<40 hex of it>/model.gguf`.

import type { GgufSummary, ModelManifest } from "../generated/protocol";
import { isOwnModelId, OWN_MODEL_PREFIX } from "./models";

/** A model from the user's own file: pinned to the bytes they chose, and not verified by Hearth. */
export interface OwnModel extends ModelManifest {
  /** Hearth never verified where these bytes come from, only that the engine can run them. */
  verified: false;
  /** The file's name when it was chosen (an Ollama blob's is `sha256-<hex>`). */
  file_name: string;
  /** What the engine read from its header (architecture, layers, quantization…). */
  gguf: GgufSummary;
  /** When it was added (ms since 1970). */
  added_ms: number;
}

/** The name of the file inside the store (the store reads GGUF files by their `.gguf` name). */
export const OWN_MODEL_PATH = "model.gguf";

const KEY = "ownModels";

/** The record for a file with SHA-256 `sha256` that the engine described as `gguf`. */
export function ownModelRecord(file: { name: string; size: number }, sha256: string, gguf: GgufSummary): OwnModel {
  return {
    id: `${OWN_MODEL_PREFIX}${sha256.slice(0, 12)}`,
    name: gguf.name ?? file.name,
    repo: "local/own-file",
    revision: sha256.slice(0, 40),
    format: "gguf",
    files: [{ path: OWN_MODEL_PATH, size: file.size, sha256 }],
    verified: false,
    file_name: file.name,
    gguf,
    added_ms: Date.now(),
  };
}

/** Whether `m` is one of the user's own models (not verified by Hearth). */
export function isOwnModel(m: ModelManifest | null | undefined): m is OwnModel {
  return !!m && isOwnModelId(m.id) && (m as Partial<OwnModel>).verified === false;
}

/** The chat template the engine supplies for `m`'s file (it has none of its own), if any. */
export function ownChatTemplate(m: ModelManifest): string | undefined {
  return isOwnModel(m) ? (m.gguf.chat_template ?? undefined) : undefined;
}

/** Every own model, oldest first (an empty list where chrome.storage is missing). */
export async function ownModels(): Promise<OwnModel[]> {
  if (!chrome.storage?.local) return [];
  const stored = ((await chrome.storage.local.get(KEY))[KEY] ?? {}) as Record<string, OwnModel>;
  // (The storage is the user's to edit: keep only well-formed records.)
  return Object.values(stored)
    .filter((m) => isOwnModel(m) && Array.isArray(m.files) && m.files.length === 1 && typeof m.gguf === "object")
    .sort((a, b) => a.added_ms - b.added_ms);
}

export async function ownModel(id: string): Promise<OwnModel | null> {
  return (await ownModels()).find((m) => m.id === id) ?? null;
}

export async function saveOwnModel(m: OwnModel): Promise<void> {
  const stored = ((await chrome.storage.local.get(KEY))[KEY] ?? {}) as Record<string, OwnModel>;
  await chrome.storage.local.set({ [KEY]: { ...stored, [m.id]: m } });
}

export async function removeOwnModel(id: string): Promise<void> {
  const stored = { ...(((await chrome.storage.local.get(KEY))[KEY] ?? {}) as Record<string, OwnModel>) };
  delete stored[id];
  await chrome.storage.local.set({ [KEY]: stored });
}

/** Calls `listener` with the own models now and whenever they change (in any context); returns the unsubscribe. */
export function watchOwnModels(listener: (models: OwnModel[]) => void): () => void {
  if (!chrome.storage?.local) return () => {};
  const changed = (changes: Record<string, chrome.storage.StorageChange>, area: string) => {
    if (area === "local" && KEY in changes) void ownModels().then(listener, () => {});
  };
  chrome.storage.onChanged.addListener(changed);
  void ownModels().then(listener, () => {});
  return () => chrome.storage.onChanged.removeListener(changed);
}
