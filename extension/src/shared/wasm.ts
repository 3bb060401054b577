// Loading crates/offscreen's wasm module, used by the offscreen document (the engine) and the
// options page (`Sha256`, to check a folder or a file, and `inspectGguf`, to judge a file the user
// chose). Its exports' types are wasm-bindgen's own declarations of a test build (the `scripted`
// feature adds test-only exports), copied into generated/ by `cargo xtask build`, which fails when
// the copy is stale.

import type * as Exports from "../generated/hearth_offscreen";

export type Wasm = typeof Exports;
export type { ModelFiles } from "../generated/hearth_offscreen";

/** Imports and instantiates the module (once per page). */
export async function loadWasm(): Promise<Wasm> {
  const module = (await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"))) as Wasm;
  await module.default();
  return module;
}
