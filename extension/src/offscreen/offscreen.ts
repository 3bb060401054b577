// The offscreen document: loads the Rust engine (wasm), finds the model's files (bundled with a
// test build, or installed in the model store), downloads models, and answers the service
// worker. Engine logic lives in Rust (crates/offscreen); model files live in ./model-store.ts.
//
// It takes requests from the service worker only (`senderRole(sender) === "worker"`): a content
// script's chrome.runtime.sendMessage reaches this document too, and must not start or control
// tasks, or install models.

import { readArticle } from "./article";
import type { BundledAssistantFile, BundledModelFile, EngineFailure, EngineStatus, FailureKey, ModelManifest, ModelOffer, ModelProgress, TaskUpdate, ToolReply, ToolRequest, WorkerToEngine } from "../generated/protocol";
import { failure } from "../shared/failures";
import { dropped, isMessage, sendFromEngine, senderRole } from "../shared/messages";
import { buildInfo, DEFAULT_MODEL_ID, isOwnModelId, loadManifest, totalBytes, unpinnedReason } from "../shared/models";
import { ownChatTemplate } from "../shared/own-models";
import { crashedStatus, EngineCrashed, guardWasm, hasCrashed, isTrap, noteCrash, onCrash } from "./crash";
import * as store from "../shared/model-store";
import { clipOf, forgetClips, voice } from "./voice";
import { loadWasm, type ModelFiles, type Wasm } from "../shared/wasm";

/** The slice of the WebGPU API used here (the DOM typings do not include WebGPU yet). */
interface Gpu {
  requestAdapter(): Promise<{ info?: { vendor: string; architecture: string } } | null>;
}

/** The part of a WebGPU device watched here. */
interface GpuDevice {
  lost: Promise<{ reason?: string; message?: string }>;
  destroy(): void;
}

/**
 * The engine's GPU device, watched for loss (a driver reset, the GPU process crashing, a laptop
 * switching GPUs). wgpu does not tell the glue, so `requestDevice` is wrapped before the engine
 * starts. A device cannot be replaced inside a running engine (Burn keeps one per module), so a
 * loss ends this document's engine: it reports a `gpu_device` failure, and Retry makes the worker
 * create a fresh offscreen document.
 */
let gpuDevice: GpuDevice | null = null;
let deviceLost: string | null = null;

function watchGpuDevices(): void {
  type RequestDevice = (this: unknown, ...args: unknown[]) => Promise<GpuDevice>;
  const adapter = (globalThis as { GPUAdapter?: { prototype: { requestDevice: RequestDevice } } }).GPUAdapter?.prototype;
  if (!adapter) return;
  const requestDevice = adapter.requestDevice;
  adapter.requestDevice = async function (this: unknown, ...args: unknown[]) {
    const device = await requestDevice.apply(this, args);
    gpuDevice = device;
    void device.lost.then((info) => {
      deviceLost = (info.message || info.reason || "no reason given").replace(/\.$/, "");
      void sendFromEngine({ kind: "engine_status", status: lostStatus() });
    });
    return device;
  };
}
watchGpuDevices();

function lostStatus(): EngineStatus {
  return failed("gpu_device", "failureDeviceLost", deviceLost ?? "unknown");
}

if (__HEARTH_TEST_BUILD__) {
  // Test builds only: the e2e suite loses the device on purpose, as a driver reset would.
  (globalThis as { hearthLoseGpuDevice?: () => boolean }).hearthLoseGpuDevice = () => (gpuDevice?.destroy(), gpuDevice !== null);
}

let engine: Promise<Wasm> | null = null;
/** Which model the engine holds: `bundled:<folder>` or `store:<id>@<revision>`. */
let loadedModel: string | null = null;
let installing: Promise<EngineStatus> | null = null;
/** Whether the last start asked for the audio tower (voice input on): installs load the model the same way. */
let hearingWanted = false;
/** Set when reading an installed model's weights found the store damaged during the last load. */
let storeFailure: store.InstallError | null = null;

function loadEngine(): Promise<Wasm> {
  engine ??= (async () => {
    // Every call into the module is guarded: after a trap none reaches it again (./crash.ts).
    const module = await guardWasm(await loadWasm());
    module.setTaskHost(
      (tabId: number, update: string) => void sendFromEngine({ kind: "task_update", tab_id: tabId, update: JSON.parse(update) as TaskUpdate }),
      (request: string) => runTool(JSON.parse(request) as ToolRequest),
    );
    return module;
  })();
  return engine;
}

/**
 * Test builds only (the code is not in release bundles): tests set `globalThis.hearthTestHooks`
 * in this document over the DevTools protocol to download from a local server, to store smaller
 * parts, or to make the store see a tiny quota.
 */
interface TestHooks {
  downloadBase?: string;
  partBytes?: number;
  backoffMs?: number;
  quotaBytes?: number;
  /** Each read of an installed model's weights waits this long (to catch the `loading` state). */
  readDelayMs?: number;
  /** When set, every read of an installed model's weights is recorded here: [path, offset, length]. */
  reads?: [string, number, number][];
  /** When set, every answer to `start_engine` is recorded here (the memory bench reads the loaded model's figures). */
  statuses?: EngineStatus[];
}

const testHooks = (): TestHooks => (__HEARTH_TEST_BUILD__ ? ((globalThis as { hearthTestHooks?: TestHooks }).hearthTestHooks ?? {}) : {});

function downloadOptions(): store.DownloadOptions {
  if (!__HEARTH_TEST_BUILD__) return store.DEFAULT_DOWNLOAD;
  const hooks = testHooks();
  const quota = hooks.quotaBytes;
  return {
    ...store.DEFAULT_DOWNLOAD,
    baseUrl: hooks.downloadBase ?? store.DEFAULT_DOWNLOAD.baseUrl,
    partBytes: hooks.partBytes ?? store.DEFAULT_DOWNLOAD.partBytes,
    backoffMs: hooks.backoffMs ?? store.DEFAULT_DOWNLOAD.backoffMs,
    estimate: quota === undefined ? store.DEFAULT_DOWNLOAD.estimate : async () => ({ quota, usage: 0 }),
  };
}

async function fetchBytes(url: string): Promise<Uint8Array> {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

/** The model bundled with a test build, from the extension's own files (BUNDLED_MODEL_FILES). */
async function bundledModel(wasm: Wasm, folder: string): Promise<ModelFiles> {
  const base = chrome.runtime.getURL(`${folder}/`);
  const bytes = (file: BundledModelFile) => fetchBytes(base + file);
  const text = async (file: BundledModelFile) => new TextDecoder().decode(await bytes(file));
  const name = folder.split("/").pop() ?? "model";
  const files = new wasm.ModelFiles(
    `${name} (test model, random weights)`,
    await text("config.json"),
    await text("generation_config.json"),
    await bytes("model.safetensors"),
    await bytes("tokenizer.json"),
    await text("chat_template.jinja"),
  );
  // Its assistant (random weights too): test builds draft with it.
  const assistant = (file: BundledAssistantFile) => fetchBytes(`${base}assistant/${file}`);
  const config = new TextDecoder().decode(await assistant("config.json"));
  return files.with_drafter_bytes(`${name}-assistant (test model)`, config, await assistant("model.safetensors"));
}

/**
 * An installed model, read from the store only: no network request. The engine reads the weights
 * piece by piece as it loads them (one layer at a time), never the whole file at once.
 */
async function storedModel(wasm: Wasm, m: ModelManifest): Promise<ModelFiles> {
  if (m.format === "gguf") return storedGguf(wasm, m);
  const has = (path: string) => m.files.some((f) => f.path === path);
  const text = async (path: string) => new TextDecoder().decode(await store.readFile(m, path));
  // One model.safetensors, or the shards listed beside model.safetensors.index.json.
  const weightPaths = m.files.map((f) => f.path).filter((path) => path.endsWith(".safetensors"));
  if (weightPaths.length === 0 || !has("config.json") || !has("tokenizer.json")) {
    throw new store.InstallError("model_load", "failureModelFiles", m.name);
  }
  // The engine reads the template (and the BOS token) from these files itself.
  if (!has("chat_template.jinja") && !has("tokenizer_config.json")) throw new store.InstallError("model_load", "failureNoTemplate", m.name);
  const template = has("chat_template.jinja") ? await text("chat_template.jinja") : undefined;
  const tokenizerConfig = has("tokenizer_config.json") ? await text("tokenizer_config.json") : undefined;
  const weights = new Map<string, store.StoredFile>();
  for (const path of weightPaths) weights.set(path, await store.openFile(m, path));
  const weightFiles = [...weights].map(([path, file]) => ({ path, size: file.size }));
  return wasm.ModelFiles.streamed(
    m.name,
    await text("config.json"),
    has("generation_config.json") ? await text("generation_config.json") : undefined,
    JSON.stringify(weightFiles),
    weightReader(m, weights),
    await store.readFile(m, "tokenizer.json"),
    template,
    tokenizerConfig,
  );
}

/** An installed GGUF file: one file holding weights, config, tokenizer and chat template. */
async function storedGguf(wasm: Wasm, m: ModelManifest): Promise<ModelFiles> {
  const [only] = m.files;
  if (m.files.length !== 1 || !only.path.endsWith(".gguf")) throw new store.InstallError("model_load", "failureModelFiles", m.name);
  const file = await store.openFile(m, only.path);
  // (The user's own Gemma 3 files without a chat template get the one the engine supplied.)
  return wasm.ModelFiles.streamed_gguf(m.name, only.path, file.size, weightReader(m, new Map([[only.path, file]])), ownChatTemplate(m));
}

/** `read(path, offset, length)` over the stored weight files, as the engine asks for their bytes. */
function weightReader(m: ModelManifest, weights: Map<string, store.StoredFile>) {
  return async (path: string, offset: number, length: number): Promise<Uint8Array> => {
    const file = weights.get(path);
    if (!file) throw new Error(`${path} is not a weight file of ${m.name}`);
    if (__HEARTH_TEST_BUILD__) {
      const hooks = testHooks();
      if (hooks.readDelayMs) await new Promise((r) => setTimeout(r, hooks.readDelayMs));
      hooks.reads?.push([path, offset, length]);
    }
    try {
      return await file.read(offset, length);
    } catch (error) {
      // A damaged store is the store's failure (with its own fix), not the model's.
      if (error instanceof store.InstallError) storeFailure = error;
      throw error;
    }
  };
}

/**
 * The manifest of `id`: one of the build's (models/*.json), or the user's own model, known here
 * by its record in the store (this document has no chrome.storage); one that is no longer stored
 * cannot be downloaded: its file must be chosen again.
 */
async function manifestOf(id: string): Promise<ModelManifest> {
  if (!isOwnModelId(id)) return loadManifest(id);
  const own = await store.installedManifest(id);
  if (!own) throw new store.InstallError("model_load", "failureOwnModelMissing", id);
  return own;
}

/** Why `m` cannot be offered at all, as a status, or null. */
function manifestProblem(m: ModelManifest): EngineStatus | null {
  const unpinned = unpinnedReason(m);
  if (unpinned) return failed("model_unpinned", "failureUnpinned", unpinned);
  // Every format loads: MLX 4-bit models say in config.json how they are quantized, GGUF blocks say it themselves.
  return null;
}

async function offerOf(m: ModelManifest): Promise<ModelOffer> {
  return { id: m.id, name: m.name, total_bytes: totalBytes(m), stored_bytes: await store.storedBytes(m) };
}

/** A failure by its locale key (the worker puts it in the user's language). */
function failed(kind: EngineFailure["kind"], key: FailureKey, ...args: (string | number)[]): EngineStatus {
  return { state: "failed", failure: failure(kind, key, ...args) };
}

function failureOf(error: unknown): EngineStatus {
  if (error instanceof store.InstallError) return { state: "failed", failure: error.failure };
  // (A method of the module's objects, such as Sha256's, can trap too.)
  if (error instanceof EngineCrashed || isTrap(error, true)) return (noteCrash(error), crashedStatus());
  return failed("model_load", "failureModelRead", String(error));
}

/** The GPU's vendor and architecture, or the status saying there is no WebGPU. */
async function adapterOf(wasm: Wasm): Promise<{ vendor: string; architecture: string } | EngineStatus> {
  const gpu = (navigator as Navigator & { gpu?: Gpu }).gpu;
  if (!gpu) return JSON.parse(wasm.webgpuUnavailable("navigator.gpu is undefined")) as EngineStatus;
  const adapter = await gpu.requestAdapter();
  if (!adapter) return JSON.parse(wasm.webgpuUnavailable("requestAdapter() found no adapter")) as EngineStatus;
  return adapter.info ?? { vendor: "", architecture: "" };
}

/**
 * Starts the engine with `modelId` (a manifest id; null is the build's default: its bundled test
 * model, else DEFAULT_MODEL_ID). A model that is not installed yet gives `needs_model`, once the
 * GPU has shown it works.
 */
async function engineStatus(modelId: string | null, hearing: boolean): Promise<EngineStatus> {
  let wasm: Wasm;
  let bundled: string | null;
  try {
    wasm = await loadEngine();
    bundled = (await buildInfo()).bundled_model;
  } catch (error) {
    engine = null;
    return failed("engine_load", "failureEngineLoad", String(error));
  }
  if (deviceLost !== null) return lostStatus();
  const adapter = await adapterOf(wasm);
  if ("state" in adapter) return adapter;
  // While a model loads, its progress (`loading`) goes to the worker; the result is the answer.
  const onStatus = (status: string) => void sendFromEngine({ kind: "engine_status", status: JSON.parse(status) as EngineStatus });
  const start = async (files?: ModelFiles) =>
    JSON.parse(await wasm.startEngine(adapter.vendor, adapter.architecture, files, onStatus)) as EngineStatus;

  let key: string;
  let files: ModelFiles | undefined;
  let assistantOffer: ModelOffer | null = null;
  let projectorOffer: ModelOffer | null = null;
  try {
    if (modelId === null && bundled) {
      key = `bundled:${bundled}${hearing ? "+voice" : ""}`;
      if (loadedModel !== key) files = (await bundledModel(wasm, bundled)).hearing(hearing);
    } else {
      const manifest = await manifestOf(modelId ?? DEFAULT_MODEL_ID);
      const problem = manifestProblem(manifest);
      if (problem) return problem;
      // The pinned revision, or an earlier upload of the same weights that the user brought.
      const installed = await store.installedVariant(manifest);
      // Its assistant, loaded beside it once installed (the settings decide per task whether it drafts).
      const assistant = assistantOf(manifest);
      const withAssistant = assistant !== null && installed !== null && (await store.isInstalled(assistant));
      if (assistant && !withAssistant) assistantOffer = await offerOf(assistant);
      // Its vision tower where it is a file of its own (a GGUF's projector), likewise.
      const projector = projectorOf(manifest);
      const withProjector = projector !== null && installed !== null && (await store.isInstalled(projector));
      if (projector && !withProjector) projectorOffer = await offerOf(projector);
      key = `store:${manifest.id}@${(installed ?? manifest).revision}${withAssistant ? "+assistant" : ""}${withProjector ? "+vision" : ""}${hearing ? "+voice" : ""}`;
      if (loadedModel !== key) {
        if (!installed) {
          // No download before the GPU has shown that it can run the model.
          const status = await start();
          return status.state === "ready" ? { state: "needs_model", model: await offerOf(manifest) } : status;
        }
        files = (await storedModel(wasm, installed)).hearing(hearing);
        if (withAssistant && assistant) files = await withStoredAssistant(files, manifest, assistant);
        if (withProjector && projector) files = await withStoredProjector(files, projector);
      }
    }
  } catch (error) {
    return failureOf(error);
  }
  storeFailure = null;
  const status = await start(files);
  // (Set by the weights' reader during `start`, which TypeScript cannot see.)
  const damaged = storeFailure as store.InstallError | null;
  if (status.state === "failed" && damaged) return { state: "failed", failure: damaged.failure };
  if (status.state === "ready" && files !== undefined) loadedModel = key;
  // The model's assistant, when it has one that is not installed: the overlay offers it.
  if (status.state === "ready" && status.model && assistantOffer) status.model.drafter_offer = assistantOffer;
  // Its projector, when the model does not see without it: the overlay offers it too.
  if (status.state === "ready" && status.model && projectorOffer) status.model.projector_offer = projectorOffer;
  return status;
}

/** The vision tower a manifest names as a file of its own (`vision_files`), as a manifest of its own. */
function projectorOf(m: ModelManifest): ModelManifest | null {
  if (!m.vision_files?.length) return null;
  return { id: `${m.id}--vision`, name: `${m.name}: vision`, repo: m.repo, revision: m.revision, format: "gguf", files: m.vision_files };
}

/** `files` with the stored projector (read by ranges, as the model's weights are). */
async function withStoredProjector(files: ModelFiles, projector: ModelManifest): Promise<ModelFiles> {
  const [only] = projector.files;
  const file = await store.openFile(projector, only.path);
  return files.with_projector(only.path, file.size, weightReader(projector, new Map([[only.path, file]])));
}

/** The assistant a manifest names, as a manifest of its own: its one weights file, stored like a model's. */
function assistantOf(m: ModelManifest): ModelManifest | null {
  const d = m.drafter;
  if (!d) return null;
  return { id: `${m.id}--assistant`, name: `${m.name}: assistant`, repo: d.repo, revision: d.revision, format: "safetensors", files: [d.weights] };
}

/** `files` with the stored assistant of `m` (read by ranges, as the model's weights are). */
async function withStoredAssistant(files: ModelFiles, m: ModelManifest, assistant: ModelManifest): Promise<ModelFiles> {
  const [weights] = assistant.files;
  const file = await store.openFile(assistant, weights.path);
  const read = weightReader(assistant, new Map([["model.safetensors", file]]));
  return files.with_drafter(assistant.repo, JSON.stringify(m.drafter?.config ?? {}), file.size, read);
}

/**
 * Downloads and verifies `modelId` ("" is the build's default), or only its assistant or its vision
 * file, then starts the engine with what is stored (the model again, with them). The model's download
 * streams `installing` statuses; a model must be pinned.
 */
function install(modelId: string, what: "model" | "assistant" | "projector"): Promise<EngineStatus> {
  installing ??= (async () => {
    const id = modelId || DEFAULT_MODEL_ID;
    try {
      const wasm = await loadEngine();
      const manifest = await manifestOf(id);
      let target: ModelManifest | null = manifest;
      let progress: (progress: ModelProgress) => void = () => {};
      if (what === "assistant") {
        target = assistantOf(manifest);
        if (!target) return failed("model_download", "failureDownloadStopped", `${id} has no assistant`);
      } else if (what === "projector") {
        target = projectorOf(manifest);
        if (!target) return failed("model_download", "failureDownloadStopped", `${id} has no vision file`);
      } else {
        const problem = manifestProblem(manifest);
        if (problem) return problem;
        const model = await offerOf(manifest);
        progress = (p) => void sendFromEngine({ kind: "engine_status", status: { state: "installing", model, progress: p } });
      }
      await store.download(target, () => new wasm.Sha256(), progress, downloadOptions());
    } catch (error) {
      return failureOf(error);
    }
    return engineStatus(modelId || null, hearingWanted);
  })().finally(() => (installing = null));
  return installing;
}

/** Asks the service worker to run a tool; resolves to a `ToolReply` as JSON (never rejects). */
async function runTool(request: ToolRequest): Promise<string> {
  let reply: ToolReply;
  try {
    reply = ((await sendFromEngine({ kind: "run_tool", request })) as ToolReply | undefined) ?? {
      status: "failed",
      message: "The extension did not answer the tool call; try again.",
    };
  } catch (error) {
    reply = { status: "failed", message: `The tool call was lost: ${String(error)}` };
  }
  return JSON.stringify(reply);
}

/** Runs a task message; a failure is reported to the tab rather than lost. */
async function taskMessage(msg: Extract<WorkerToEngine, { kind: "start_task" | "task_control" }>): Promise<void> {
  // A crashed engine holds no conversation to forget (the worker keeps its history).
  if (hasCrashed() && msg.kind === "task_control" && msg.action.action === "forget") return;
  try {
    // A lost device computes nothing: say so rather than fail somewhere inside the model.
    if (deviceLost !== null && msg.kind === "start_task") throw new Error(`the GPU device was lost (${deviceLost}); press Retry above the conversation`);
    const wasm = await loadEngine();
    if (msg.kind === "task_control" && msg.action.action === "forget") forgetClips(msg.tab_id);
    // A spoken request's samples go beside the message (a clip this document recorded for the tab).
    const clip = msg.kind === "start_task" && msg.voice !== null && msg.voice !== undefined ? clipOf(msg.tab_id, msg.voice) : null;
    await wasm.taskMessage(JSON.stringify(msg), clip ?? undefined);
  } catch (error) {
    // A task the crash cut short ends here, as do those sent to the crashed engine afterwards.
    const update: TaskUpdate = {
      update: "refused",
      refusal: error instanceof EngineCrashed ? { kind: "engine_crashed", detail: error.reason } : { kind: "engine_failed", detail: String(error) },
    };
    void sendFromEngine({ kind: "task_update", tab_id: msg.tab_id, update });
  }
}

chrome.runtime.onMessage.addListener((message: unknown, sender, sendResponse) => {
  // The options page's and content scripts' messages reach this document too: only the worker's count.
  if (!isMessage(message) || senderRole(sender) !== "worker") {
    dropped("offscreen document", message, sender);
    return false;
  }
  const msg = message as WorkerToEngine;
  switch (msg.kind) {
    case "start_engine":
      // A crashed engine is never started again: the worker's Retry replaces this document.
      if (hasCrashed()) {
        sendResponse(crashedStatus());
        return false;
      }
      // The worker waits for the answer: it always gets one.
      hearingWanted = msg.voice === true;
      void engineStatus(msg.model_id, hearingWanted)
        .catch(unexpected("engine_load", "failureEngineStart"))
        .then((status) => {
          if (__HEARTH_TEST_BUILD__) testHooks().statuses?.push(status);
          sendResponse(status);
        });
      return true;
    case "install_model":
      void install(msg.model_id, "model").catch(unexpected("model_download", "failureDownloadStopped")).then(sendResponse);
      return true;
    case "install_drafter":
      void install(msg.model_id, "assistant").catch(unexpected("model_download", "failureDownloadStopped")).then(sendResponse);
      return true;
    case "install_projector":
      void install(msg.model_id, "projector").catch(unexpected("model_download", "failureDownloadStopped")).then(sendResponse);
      return true;
    case "start_task":
    case "task_control":
      void taskMessage(msg);
      break;
    case "voice":
      void voice(msg.tab_id, msg.voice, (tabId, state) => void sendFromEngine({ kind: "voice", tab_id: tabId, state })).catch((error: unknown) =>
        sendFromEngine({ kind: "voice", tab_id: msg.tab_id, state: { state: "failed", detail: String(error) } }),
      );
      break;
    case "read_article":
      try {
        sendResponse(readArticle(msg.html, msg.url));
      } catch (error) {
        sendResponse({ title: "", passages: [] });
        console.warn("Hearth: a page could not be read", error);
      }
      break;
  }
  return false;
});

/** The status for an error nothing else caught: a crash's, or `key`'s with the error as its detail. */
function unexpected(kind: EngineFailure["kind"], key: FailureKey): (error: unknown) => EngineStatus {
  return (error) => (error instanceof EngineCrashed || isTrap(error, true) ? (noteCrash(error), crashedStatus()) : failed(kind, key, String(error)));
}

// A crash seen anywhere (mid-load, mid-task, in a call nobody awaits) fails the engine at once.
onCrash((status) => void sendFromEngine({ kind: "engine_status", status }));

void sendFromEngine({ kind: "offscreen_ready" });
