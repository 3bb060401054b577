// The model store: downloaded (or imported) model files in Cache Storage, checked against their
// manifest's SHA-256 before they count as installed. Used by the offscreen document (download,
// load) and the options page (install from a folder). Layout, in the cache `hearth-models-v1`:
//
//   https://models.hearth.invalid/<id>@<revision>/<path>?range=<first>-<last>   one part of a file
//   https://models.hearth.invalid/<id>@<revision>/<path>?complete               the file is whole
//   https://models.hearth.invalid/<id>@<revision>/?installed                    every file is
//
// A file is stored as parts of PART_BYTES (the last one shorter), each a separate entry, so an
// interrupted download resumes from the last part stored. The `?complete` marker is written only
// after every part is stored and the whole file's SHA-256 matched; `?installed` only after every
// file's marker. (Cache keys must be http(s) URLs, and a URL's #fragment is ignored when matching,
// hence the query strings; `.invalid` never resolves, and nothing here fetches these URLs.)

import type { EngineFailure, FailureKey, FailureKind, ManifestFile, ModelManifest, ModelProgress } from "../generated/protocol";
import { failure } from "./failures";
import { manifestVariants, totalBytes, unpinnedReason } from "./models";

export const CACHE_NAME = "hearth-models-v1";
export const PART_BYTES = 32 * 2 ** 20;
const KEY_ORIGIN = "https://models.hearth.invalid/";
/** Where `download` fetches `<repo>/resolve/<revision>/<path>` from. */
export const HUGGING_FACE = "https://huggingface.co";
/** Hashing feeds wasm at most this much at once (each call copies its bytes into wasm memory). */
const HASH_SLICE = 8 * 2 ** 20;
const PROGRESS_INTERVAL_MS = 250;
/** Speed is averaged over this window. */
const SPEED_WINDOW_MS = 5_000;

/** An installation that cannot go on, with what the user can do about it (text in the locales). */
export class InstallError extends Error {
  readonly failure: EngineFailure;
  constructor(kind: FailureKind, key: FailureKey, ...args: (string | number)[]) {
    const known = failure(kind, key, ...args);
    super(known.message);
    this.failure = known;
    this.name = "InstallError";
  }
}

/** An incremental SHA-256 (crates/offscreen's `Sha256`: WebCrypto cannot digest piece by piece). */
export interface Hasher {
  update(bytes: Uint8Array): void;
  /** The lowercase hex digest; frees the hasher. */
  finalize(): string;
  free(): void;
}

export interface DownloadOptions {
  /** `https://huggingface.co`, or a test server imitating it. */
  baseUrl: string;
  partBytes: number;
  /** Retries of one part after a network failure, with exponential backoff from `backoffMs`. */
  retries: number;
  backoffMs: number;
  /** `navigator.storage.estimate` (tests make it report a tiny quota). */
  estimate: () => Promise<StorageEstimate>;
}

export const DEFAULT_DOWNLOAD: DownloadOptions = {
  baseUrl: HUGGING_FACE,
  partBytes: PART_BYTES,
  retries: 4,
  backoffMs: 500,
  estimate: () => navigator.storage.estimate(),
};

/** Reads the bytes `[start, end)` of a file, reporting the number of bytes as they arrive. */
type PartSource = (file: ManifestFile, start: number, end: number, onBytes: (n: number) => void) => Promise<Uint8Array>;

interface FileMarker {
  size: number;
  sha256: string;
  /** `[start, end)` of each part, in order. */
  parts: [number, number][];
}

const modelBase = (m: ModelManifest) => `${KEY_ORIGIN}${encodeURIComponent(m.id)}@${m.revision ?? "unpinned"}/`;
const encodePath = (path: string) => path.split("/").map(encodeURIComponent).join("/");
const partKey = (m: ModelManifest, path: string, start: number, end: number) => `${modelBase(m)}${encodePath(path)}?range=${start}-${end - 1}`;
const markerKey = (m: ModelManifest, path: string) => `${modelBase(m)}${encodePath(path)}?complete`;
const installedKey = (m: ModelManifest) => `${modelBase(m)}?installed`;

/** The `[start, end)` ranges a file of `size` bytes is stored in. */
function partRanges(size: number, partBytes: number): [number, number][] {
  const ranges: [number, number][] = [];
  for (let start = 0; start < size; start += partBytes) ranges.push([start, Math.min(size, start + partBytes)]);
  return ranges;
}

export async function isInstalled(m: ModelManifest): Promise<boolean> {
  if (unpinnedReason(m)) return false;
  const cache = await caches.open(CACHE_NAME);
  return (await cache.match(installedKey(m))) !== undefined;
}

/**
 * The installed variant of `m` (shared/models.ts `manifestVariants`): `m` itself, or an earlier
 * upload of its weights the user brought (installed under that upload's revision); else null.
 */
export async function installedVariant(m: ModelManifest): Promise<ModelManifest | null> {
  for (const variant of manifestVariants(m)) if (await isInstalled(variant)) return variant;
  return null;
}

/**
 * The manifest an installed model of `id` was installed with (the `?installed` marker's body), at
 * whichever revision is installed, or null. The user's own models are known this way where
 * chrome.storage is not available (the offscreen document).
 */
export async function installedManifest(id: string): Promise<ModelManifest | null> {
  const cache = await caches.open(CACHE_NAME);
  const prefix = `${KEY_ORIGIN}${encodeURIComponent(id)}@`;
  for (const request of await cache.keys()) {
    if (!request.url.startsWith(prefix) || !request.url.endsWith("/?installed")) continue;
    const m = (await (await cache.match(request))?.json().catch(() => null)) as ModelManifest | null;
    if (m && m.id === id && request.url === installedKey(m)) return m;
  }
  return null;
}

/**
 * The SHA-256 of a file the user chose, read slice by slice (never whole: it may be gigabytes);
 * `onProgress(bytes, total)` after each slice.
 */
export async function hashBlob(blob: Blob, newHasher: () => Hasher, onProgress: (bytes: number, total: number) => void): Promise<string> {
  const hasher = newHasher();
  let finished = false;
  try {
    for (let at = 0; at < blob.size; at += HASH_SLICE) {
      hasher.update(new Uint8Array(await blob.slice(at, Math.min(blob.size, at + HASH_SLICE)).arrayBuffer()));
      onProgress(Math.min(blob.size, at + HASH_SLICE), blob.size);
    }
    const digest = hasher.finalize();
    finished = true;
    return digest;
  } finally {
    if (!finished) hasher.free();
  }
}

/** Bytes of `m` already stored (whole files and the parts of unfinished ones), without reading them. */
export async function storedBytes(m: ModelManifest): Promise<number> {
  const cache = await caches.open(CACHE_NAME);
  const base = modelBase(m);
  const complete = new Set<string>();
  const parts = new Map<string, number>();
  for (const request of await cache.keys()) {
    if (!request.url.startsWith(base)) continue;
    const url = new URL(request.url);
    const path = decodeURIComponent(url.pathname.slice(new URL(base).pathname.length));
    if (url.search === "?complete") complete.add(path);
    const range = /^\?range=(\d+)-(\d+)$/.exec(url.search);
    if (range) parts.set(path, (parts.get(path) ?? 0) + Number(range[2]) - Number(range[1]) + 1);
  }
  let sum = 0;
  for (const f of m.files) sum += complete.has(f.path) ? (f.size ?? 0) : (parts.get(f.path) ?? 0);
  return sum;
}

/** Downloads, verifies and stores every file of `m` that is not stored yet. */
export async function download(
  m: ModelManifest,
  newHasher: () => Hasher,
  onProgress: (progress: ModelProgress) => void,
  options: DownloadOptions = DEFAULT_DOWNLOAD,
): Promise<void> {
  const source: PartSource = (file, start, end, onBytes) => fetchRange(m, file, start, end, onBytes, options);
  await installWith(m, source, newHasher, onProgress, options, "failureCorrupt");
}

/**
 * Installs `m` from files the user chose (a folder on their computer): sizes are checked first,
 * then every file's SHA-256, exactly as for a download; nothing touches the network.
 */
export async function importFiles(
  m: ModelManifest,
  files: Map<string, Blob>,
  newHasher: () => Hasher,
  onProgress: (progress: ModelProgress) => void,
  options: Pick<DownloadOptions, "partBytes" | "estimate"> = DEFAULT_DOWNLOAD,
): Promise<void> {
  for (const f of m.files) {
    const blob = files.get(f.path);
    if (!blob) throw new InstallError("model_load", "failureFolderMissing", f.path, m.name);
    if (f.size !== null && blob.size !== f.size) {
      throw new InstallError("model_corrupt", "failureFolderSize", f.path, blob.size, m.name, f.size, m.repo, m.revision ?? "");
    }
  }
  const source: PartSource = async (file, start, end, onBytes) => {
    const bytes = new Uint8Array(await files.get(file.path)!.slice(start, end).arrayBuffer());
    onBytes(bytes.length);
    return bytes;
  };
  await installWith(m, source, newHasher, onProgress, { ...DEFAULT_DOWNLOAD, ...options }, "failureCorruptFolder");
}

async function installWith(
  m: ModelManifest,
  source: PartSource,
  newHasher: () => Hasher,
  onProgress: (progress: ModelProgress) => void,
  options: DownloadOptions,
  /** The locale key of a corrupt file's failure (its fix depends on where the file came from). */
  corruptKey: FailureKey,
): Promise<void> {
  const unpinned = unpinnedReason(m);
  if (unpinned) throw new InstallError("model_unpinned", "failureUnpinned", unpinned);
  const cache = await caches.open(CACHE_NAME);
  if (await cache.match(installedKey(m))) return;
  const total = totalBytes(m);
  const stored = await storedBytes(m);
  await checkQuota(m, total - stored, options);
  // Ask the browser not to evict the model under storage pressure (it may say no; then it is
  // kept like any site's data).
  await navigator.storage?.persist?.().catch(() => false);

  const progress = new ProgressMeter(m.id, total, onProgress);
  for (const file of m.files) {
    progress.startFile(file.path);
    await storeFile(cache, m, file, source, newHasher, progress, options, corruptKey);
  }
  progress.report(true);
  await put(cache, installedKey(m), JSON.stringify(m), m, options);
  await pruneOtherRevisions(cache, m);
}

/** Stores one file part by part (skipping parts already stored), then checks its SHA-256. */
async function storeFile(
  cache: Cache,
  m: ModelManifest,
  file: ManifestFile,
  source: PartSource,
  newHasher: () => Hasher,
  progress: ProgressMeter,
  options: DownloadOptions,
  corruptKey: FailureKey,
): Promise<void> {
  const size = file.size!;
  if (await cache.match(markerKey(m, file.path))) {
    progress.add(size, false);
    return;
  }
  const ranges = partRanges(size, options.partBytes);
  const hasher = newHasher();
  let finished = false;
  try {
    for (const [start, end] of ranges) {
      const key = partKey(m, file.path, start, end);
      const cached = await cache.match(key);
      let bytes: Uint8Array | null = cached ? new Uint8Array(await cached.arrayBuffer()) : null;
      if (bytes && bytes.length === end - start) {
        progress.add(bytes.length, false);
      } else {
        const fresh = await source(file, start, end, (n) => progress.add(n, true));
        await put(cache, key, fresh, m, options);
        bytes = fresh;
      }
      for (let at = 0; at < bytes.length; at += HASH_SLICE) hasher.update(bytes.subarray(at, at + HASH_SLICE));
    }
    const digest = hasher.finalize();
    finished = true;
    if (digest !== file.sha256) {
      await Promise.all(ranges.map(([start, end]) => cache.delete(partKey(m, file.path, start, end))));
      throw new InstallError("model_corrupt", corruptKey, file.path, m.name, digest.slice(0, 16), file.sha256!.slice(0, 16), m.repo, m.revision ?? "");
    }
    const marker: FileMarker = { size, sha256: digest, parts: ranges };
    await put(cache, markerKey(m, file.path), JSON.stringify(marker), m, options);
  } finally {
    if (!finished) hasher.free();
  }
}

/** Fetches `[start, end)` of a file with Range requests, retrying a dropped connection from where it stopped. */
async function fetchRange(
  m: ModelManifest,
  file: ManifestFile,
  start: number,
  end: number,
  onBytes: (n: number) => void,
  options: DownloadOptions,
): Promise<Uint8Array> {
  const url = `${options.baseUrl}/${m.repo}/resolve/${m.revision}/${encodePath(file.path)}`;
  const out = new Uint8Array(end - start);
  let got = 0;
  let failures = 0;
  for (;;) {
    const before = got;
    try {
      const from = start + got;
      const response = await fetch(url, { headers: { Range: `bytes=${from}-${end - 1}` }, cache: "no-store", credentials: "omit" });
      if (response.status === 200 && from !== 0) {
        await response.body?.cancel();
        throw new InstallError("model_download", "failureRangeIgnored", options.baseUrl, file.path);
      }
      if (response.status !== 200 && response.status !== 206) {
        await response.body?.cancel();
        const host = new URL(url).host;
        // Server trouble is retried (its detail ends up in the retries' message); anything else is final.
        if (response.status >= 500 || response.status === 429) throw new Error(`HTTP ${response.status} from ${host}`);
        throw new InstallError("model_download", "failureHttp", file.path, m.name, response.status, host);
      }
      const range = response.headers.get("content-range");
      if (response.status === 206 && range && !range.startsWith(`bytes ${from}-`)) {
        await response.body?.cancel();
        throw new Error(`the server sent ${range} for bytes ${from}-${end - 1}`);
      }
      const reader = response.body!.getReader();
      while (got < out.length) {
        const { done, value } = await reader.read();
        if (done) break;
        const n = Math.min(value.length, out.length - got);
        out.set(value.subarray(0, n), got);
        got += n;
        onBytes(n);
      }
      if (got === out.length) {
        await reader.cancel().catch(() => {});
        return out;
      }
      throw new Error(`the connection closed after ${start + got} of ${file.size} bytes`);
    } catch (error) {
      if (error instanceof InstallError) throw error;
      // A connection that made progress before it dropped starts the count again.
      if (got > before) failures = 0;
      if (++failures > options.retries) {
        const detail = error instanceof Error ? error.message : String(error);
        throw new InstallError("model_download", "failureRetries", file.path, m.name, failures, detail);
      }
      await new Promise((r) => setTimeout(r, options.backoffMs * 2 ** (failures - 1)));
    }
  }
}

/** Refuses to start when the browser's quota cannot hold what is left to store. */
async function checkQuota(m: ModelManifest, needed: number, options: DownloadOptions): Promise<void> {
  const available = await availableBytes(options);
  if (available !== null && needed > available) throw quotaError(m, needed, available);
}

async function availableBytes(options: DownloadOptions): Promise<number | null> {
  const estimate = await options.estimate().catch(() => null);
  if (!estimate || estimate.quota === undefined) return null;
  return Math.max(0, estimate.quota - (estimate.usage ?? 0));
}

function quotaError(m: ModelManifest, needed: number, available: number): InstallError {
  return new InstallError("storage_quota", "failureQuota", m.name, describeBytes(needed), describeBytes(available));
}

/** `cache.put`, turning a full disk into the quota message. */
async function put(cache: Cache, key: string, body: Uint8Array | string, m: ModelManifest, options: DownloadOptions): Promise<void> {
  try {
    await cache.put(key, new Response(body as BodyInit));
  } catch (error) {
    if (error instanceof DOMException && error.name === "QuotaExceededError") {
      const size = typeof body === "string" ? body.length : body.length;
      throw quotaError(m, totalBytes(m) - (await storedBytes(m)) + size, (await availableBytes(options)) ?? 0);
    }
    throw error;
  }
}

/** Removes other revisions of the same model (an update replaced them). */
async function pruneOtherRevisions(cache: Cache, m: ModelManifest): Promise<void> {
  const prefix = `${KEY_ORIGIN}${encodeURIComponent(m.id)}@`;
  const keep = modelBase(m);
  for (const request of await cache.keys()) {
    if (request.url.startsWith(prefix) && !request.url.startsWith(keep)) await cache.delete(request);
  }
}

/** Deletes everything stored for `m`. */
export async function remove(m: ModelManifest): Promise<void> {
  const cache = await caches.open(CACHE_NAME);
  const base = modelBase(m);
  // The marker goes first: a half-deleted model must not count as installed.
  await cache.delete(installedKey(m));
  for (const request of await cache.keys()) if (request.url.startsWith(base)) await cache.delete(request);
}

/** An installed file, read from the cache only (no network). */
export interface StoredFile {
  size: number;
  /** Bytes `offset`…`offset + length`: only the parts they lie in are touched, sliced as Blobs. */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** Opens an installed file of `m`; a missing or damaged part is an error that asks for a Retry. */
export async function openFile(m: ModelManifest, path: string): Promise<StoredFile> {
  const cache = await caches.open(CACHE_NAME);
  // The model is no longer installed, and this file no longer complete: a download fetches only
  // the parts that are missing, then checks the whole file again.
  const broken = async (what: string) => {
    await cache.delete(installedKey(m));
    await cache.delete(markerKey(m, path));
    return new InstallError("model_load", "failureStoredIncomplete", m.name, what);
  };
  const marker = await cache.match(markerKey(m, path));
  if (!marker) throw await broken(`${path} is missing`);
  const { size, parts } = (await marker.json()) as FileMarker;
  const read = async (offset: number, length: number): Promise<Uint8Array> => {
    if (offset < 0 || length < 0 || offset + length > size) throw await broken(`${path} has no bytes ${offset}–${offset + length}`);
    const out = new Uint8Array(length);
    for (const [start, end] of parts) {
      const from = Math.max(start, offset);
      const to = Math.min(end, offset + length);
      if (from >= to) continue;
      const part = await cache.match(partKey(m, path, start, end));
      if (!part) throw await broken(`bytes ${start}–${end} of ${path} are missing`);
      // A Blob from Cache Storage stays on disk: slicing it reads only the bytes asked for.
      const blob = await part.blob();
      if (blob.size !== end - start) throw await broken(`bytes ${start}–${end} of ${path} are damaged`);
      out.set(new Uint8Array(await blob.slice(from - start, to - start).arrayBuffer()), from - offset);
    }
    return out;
  };
  return { size, read };
}

/** A whole installed file (a small one: configs, tokenizers), from the cache only. */
export async function readFile(m: ModelManifest, path: string): Promise<Uint8Array> {
  const file = await openFile(m, path);
  return file.read(0, file.size);
}

/** Counts stored bytes, measures the download speed and reports at most every PROGRESS_INTERVAL_MS. */
class ProgressMeter {
  private bytes = 0;
  private file = "";
  private fresh = 0;
  private samples: [number, number][] = [];
  private last = 0;

  constructor(
    private readonly modelId: string,
    private readonly total: number,
    private readonly onProgress: (progress: ModelProgress) => void,
  ) {}

  startFile(path: string): void {
    this.file = path;
    this.report(true);
  }

  /** `n` more bytes are stored; `fresh` when they came over the network (or from a chosen file). */
  add(n: number, fresh: boolean): void {
    this.bytes += n;
    if (fresh) {
      this.fresh += n;
      const now = performance.now();
      this.samples.push([now, this.fresh]);
      while (this.samples.length > 2 && now - this.samples[0][0] > SPEED_WINDOW_MS) this.samples.shift();
    }
    this.report(false);
  }

  report(force: boolean): void {
    const now = performance.now();
    if (!force && now - this.last < PROGRESS_INTERVAL_MS) return;
    this.last = now;
    const first = this.samples[0];
    const latest = this.samples[this.samples.length - 1];
    const seconds = first && latest ? (latest[0] - first[0]) / 1000 : 0;
    const speed = seconds > 0.2 ? (latest[1] - first[1]) / seconds : 0;
    const left = this.total - this.bytes;
    this.onProgress({
      model_id: this.modelId,
      file: this.file,
      bytes: this.bytes,
      total: this.total,
      bytes_per_s: speed,
      eta_s: speed > 0 ? left / speed : left === 0 ? 0 : null,
    });
  }
}

/** "1.2 GB", "326 KB": for messages (the overlay formats for the user's language itself). */
export function describeBytes(n: number): string {
  const units = ["bytes", "KB", "MB", "GB", "TB"];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}
