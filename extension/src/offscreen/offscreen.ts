// The offscreen document: loads the Rust engine (wasm) and answers the service worker.
// All engine logic and every status shape live in Rust (crates/offscreen); this file only moves messages.

import type { EngineStatus } from "../generated/protocol";
import { isRuntimeMessage, sendToWorker } from "../shared/messages";

/** The exports of crates/offscreen, as wasm-bindgen generates them. */
interface Engine {
  default(): Promise<unknown>;
  startEngine(vendor: string, architecture: string): Promise<string>;
  webgpuUnavailable(detail: string): string;
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
    return module;
  })();
  return engine;
}

async function engineStatus(): Promise<EngineStatus> {
  let wasm: Engine;
  try {
    wasm = await loadEngine();
  } catch (error) {
    engine = null;
    return {
      state: "failed",
      failure: {
        kind: "engine_load",
        message: `The engine's WebAssembly module failed to load: ${String(error)}`,
        fix: "Reload Hearth from chrome://extensions; if it persists, reinstall it.",
      },
    };
  }
  const gpu = (navigator as Navigator & { gpu?: Gpu }).gpu;
  if (!gpu) return JSON.parse(wasm.webgpuUnavailable("navigator.gpu is undefined")) as EngineStatus;
  const adapter = await gpu.requestAdapter();
  if (!adapter) return JSON.parse(wasm.webgpuUnavailable("requestAdapter() found no adapter")) as EngineStatus;
  const info = adapter.info ?? { vendor: "", architecture: "" };
  return JSON.parse(await wasm.startEngine(info.vendor, info.architecture)) as EngineStatus;
}

chrome.runtime.onMessage.addListener((message: unknown) => {
  if (isRuntimeMessage(message) && message.to === "offscreen" && message.msg.kind === "start_engine") {
    void engineStatus().then((status) => sendToWorker({ kind: "engine_status", status }));
  }
  return false;
});

void sendToWorker({ kind: "offscreen_ready" });
