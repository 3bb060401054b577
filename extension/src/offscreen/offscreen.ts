// The offscreen document: loads the Rust engine (wasm), fetches model files, and answers the
// service worker. All engine logic and every status shape live in Rust (crates/offscreen); this
// file only moves bytes and messages.

import type { EngineStatus, GenerateRequest, GenerationEvent, TaskUpdate, ToOffscreen, ToolReply, ToolRequest } from "../generated/protocol";
import { isRuntimeMessage, sendToWorker } from "../shared/messages";

/** The exports of crates/offscreen, as wasm-bindgen generates them. */
interface Engine {
  default(): Promise<unknown>;
  startEngine(vendor: string, architecture: string, model?: unknown): Promise<string>;
  webgpuUnavailable(detail: string): string;
  generate(request: string, onEvent: (event: string) => void): Promise<void>;
  setTaskHost(onUpdate: (tabId: number, update: string) => void, runTool: (request: string) => Promise<string>): void;
  taskMessage(message: string): Promise<void>;
  ModelFiles: new (
    name: string,
    configJson: string,
    generationConfigJson: string | undefined,
    weights: Uint8Array,
    tokenizerJson: Uint8Array,
    chatTemplate: string,
  ) => unknown;
}

/** What `cargo xtask build` wrote about this build (build-info.json). */
interface BuildInfo {
  /** Folder of a small model bundled for tests, or null in release builds. */
  bundled_model: string | null;
}

/** The slice of the WebGPU API used here (the DOM typings do not include WebGPU yet). */
interface Gpu {
  requestAdapter(): Promise<{ info?: { vendor: string; architecture: string } } | null>;
}

let engine: Promise<Engine> | null = null;

function loadEngine(): Promise<Engine> {
  engine ??= (async () => {
    const module = (await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"))) as Engine;
    await module.default();
    module.setTaskHost(
      (tabId, update) => void sendToWorker({ kind: "task_update", tab_id: tabId, update: JSON.parse(update) as TaskUpdate }),
      (request) => runTool(JSON.parse(request) as ToolRequest),
    );
    return module;
  })();
  return engine;
}

async function fetchBytes(url: string): Promise<Uint8Array> {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

/** The model bundled with a test build, if any. */
async function bundledModel(wasm: Engine): Promise<unknown> {
  const info = (await (await fetch(chrome.runtime.getURL("build-info.json"))).json()) as BuildInfo;
  if (!info.bundled_model) return undefined;
  const base = chrome.runtime.getURL(`${info.bundled_model}/`);
  const text = async (file: string) => new TextDecoder().decode(await fetchBytes(base + file));
  const name = info.bundled_model.split("/").pop() ?? "model";
  return new wasm.ModelFiles(
    `${name} (test model, random weights)`,
    await text("config.json"),
    await text("generation_config.json"),
    await fetchBytes(`${base}model.safetensors`),
    await fetchBytes(`${base}tokenizer.json`),
    await text("chat_template.jinja"),
  );
}

async function engineStatus(): Promise<EngineStatus> {
  let wasm: Engine;
  let model: unknown;
  try {
    wasm = await loadEngine();
    model = await bundledModel(wasm);
  } catch (error) {
    engine = null;
    return {
      state: "failed",
      failure: {
        kind: "engine_load",
        message: `The engine failed to load: ${String(error)}`,
        fix: "Reload Hearth from chrome://extensions; if it persists, reinstall it.",
      },
    };
  }
  const gpu = (navigator as Navigator & { gpu?: Gpu }).gpu;
  if (!gpu) return JSON.parse(wasm.webgpuUnavailable("navigator.gpu is undefined")) as EngineStatus;
  const adapter = await gpu.requestAdapter();
  if (!adapter) return JSON.parse(wasm.webgpuUnavailable("requestAdapter() found no adapter")) as EngineStatus;
  const info = adapter.info ?? { vendor: "", architecture: "" };
  return JSON.parse(await wasm.startEngine(info.vendor, info.architecture, model)) as EngineStatus;
}

async function generate(request: GenerateRequest): Promise<void> {
  const wasm = await loadEngine();
  await wasm.generate(JSON.stringify(request), (json) => {
    void sendToWorker({ kind: "generation", event: JSON.parse(json) as GenerationEvent });
  });
}

/** Asks the service worker to run a tool; resolves to a `ToolReply` as JSON (never rejects). */
async function runTool(request: ToolRequest): Promise<string> {
  let reply: ToolReply;
  try {
    reply = ((await sendToWorker({ kind: "run_tool", request })) as ToolReply | undefined) ?? {
      status: "failed",
      message: "The extension did not answer the tool call; try again.",
    };
  } catch (error) {
    reply = { status: "failed", message: `The tool call was lost: ${String(error)}` };
  }
  return JSON.stringify(reply);
}

/** Runs a task message; a failure is reported to the tab rather than lost. */
async function taskMessage(msg: Extract<ToOffscreen, { kind: "start_task" | "task_control" }>): Promise<void> {
  try {
    const wasm = await loadEngine();
    await wasm.taskMessage(JSON.stringify(msg));
  } catch (error) {
    const update: TaskUpdate = { update: "ended", outcome: { kind: "failed", message: `The engine failed: ${String(error)}` } };
    void sendToWorker({ kind: "task_update", tab_id: msg.tab_id, update });
  }
}

chrome.runtime.onMessage.addListener((message: unknown, _sender, sendResponse) => {
  if (!isRuntimeMessage(message) || message.to !== "offscreen") return false;
  const msg = message.msg;
  switch (msg.kind) {
    case "start_engine":
      // The worker waits for the answer.
      void engineStatus().then(sendResponse);
      return true;
    case "generate":
      void generate(msg.request);
      break;
    case "start_task":
    case "task_control":
      void taskMessage(msg);
      break;
  }
  return false;
});

void sendToWorker({ kind: "offscreen_ready" });
