// The models a build knows: their manifests (models/*.json, copied into the build by build.mjs)
// and which one runs when the settings name none. Read by the offscreen document, the options page
// and the service worker (through the settings).

import type { ModelManifest } from "../generated/protocol";

/** The model release builds run when the settings name none: Google's Q4_0 GGUF of E2B. */
export const DEFAULT_MODEL_ID = "gemma-4-e2b-it";

/**
 * The models people choose from in the settings: E2B, E4B as GGUF files (a test model is not
 * listed; the MLX manifests are alternatives installed from a folder in the options page).
 */
export const CHOOSABLE_MODELS = ["gemma-4-e2b-it", "gemma-4-e4b-it"] as const;

/** What `cargo xtask build` (extension/build.mjs) wrote about this build: build-info.json. */
export interface BuildInfo {
  /** Folder of a small model bundled for tests, or null in release builds. */
  bundled_model: string | null;
  /** Ids of the manifests under models/ in this build. */
  models: string[];
}

let info: Promise<BuildInfo> | null = null;

export function buildInfo(): Promise<BuildInfo> {
  info ??= fetch(chrome.runtime.getURL("build-info.json")).then((r) => r.json() as Promise<BuildInfo>);
  return info;
}

/** The manifest of `id`, bundled with the extension (reading it makes no network request). */
export async function loadManifest(id: string): Promise<ModelManifest> {
  const known = (await buildInfo()).models;
  if (!known.includes(id)) {
    throw new Error(`Hearth does not know a model called "${id}" (this build has ${known.join(", ")}).`);
  }
  const response = await fetch(chrome.runtime.getURL(`models/${id}.json`));
  return (await response.json()) as ModelManifest;
}

export async function allManifests(): Promise<ModelManifest[]> {
  return Promise.all((await buildInfo()).models.map(loadManifest));
}

/** Why Hearth will not install `manifest` (it never installs files it cannot verify), or null. */
export function unpinnedReason(manifest: ModelManifest): string | null {
  const missing = manifest.files.filter((f) => f.size === null || f.sha256 === null).map((f) => f.path);
  if (manifest.revision !== null && missing.length === 0) return null;
  const what = manifest.revision === null ? "no pinned revision" : `no size or SHA-256 for ${missing.join(", ")}`;
  return `${manifest.name}'s manifest is not pinned yet (${what}): run models/pin.mjs against a downloaded copy. Hearth never installs weights it cannot verify.`;
}

/** Total bytes of a pinned manifest's files. */
export function totalBytes(manifest: ModelManifest): number {
  return manifest.files.reduce((sum, f) => sum + (f.size ?? 0), 0);
}

/**
 * `manifest` and the variants of it made of its earlier uploads (`known_uploads`): the same id and
 * name, the upload's revision and one file. A user who brings such a file (Ollama's blob of an
 * earlier upload) gets it installed under its variant, and it loads as that model.
 */
export function manifestVariants(manifest: ModelManifest): ModelManifest[] {
  const { known_uploads: uploads = [], ...base } = manifest;
  return [manifest, ...uploads.map(({ revision, path, size, sha256 }) => ({ ...base, revision, files: [{ path, size, sha256 }] }))];
}

/** Ids of the models people add from their own files (shared/own-models.ts): `user-<12 hex>`. */
export const OWN_MODEL_PREFIX = "user-";

export function isOwnModelId(id: string): boolean {
  return /^user-[0-9a-f]{12}$/.test(id);
}
