// The exports of crates/offscreen, as wasm-bindgen generates them, and loading the module. Used
// by the offscreen document (the engine) and the options page (`Sha256`, to check a folder or a
// file, and `inspectGguf`, to judge a file the user chose).

export interface Wasm {
  default(): Promise<unknown>;
  startEngine(vendor: string, architecture: string, model?: unknown, onStatus?: (status: string) => void): Promise<string>;
  webgpuUnavailable(detail: string): string;
  generate(request: string, onEvent: (event: string) => void): Promise<void>;
  setTaskHost(onUpdate: (tabId: number, update: string) => void, runTool: (request: string) => Promise<string>): void;
  taskMessage(message: string): Promise<void>;
  /** `handler(message)` hears a panic's message just before the instance traps (./crash.ts). */
  setPanicHandler(handler: (message: string) => void): void;
  ModelFiles: {
    new (
      name: string,
      configJson: string,
      generationConfigJson: string | undefined,
      weights: Uint8Array,
      tokenizerJson: Uint8Array,
      chatTemplate: string | undefined,
      tokenizerConfigJson?: string,
    ): unknown;
    /**
     * Weights read piece by piece: `weightFiles` is JSON `[{path, size}]`. The engine reads the chat
     * template from chat_template.jinja, else from tokenizer_config.json (a string or a list of named
     * templates): pass the files' text as they are.
     */
    streamed(
      name: string,
      configJson: string,
      generationConfigJson: string | undefined,
      weightFiles: string,
      readWeights: (path: string, offset: number, length: number) => Promise<Uint8Array>,
      tokenizerJson: Uint8Array,
      chatTemplate: string | undefined,
      tokenizerConfigJson: string | undefined,
    ): unknown;
    /** One GGUF file of `size` bytes read piece by piece (its metadata holds config, tokenizer, template). */
    streamed_gguf(
      name: string,
      path: string,
      size: number,
      readWeights: (path: string, offset: number, length: number) => Promise<Uint8Array>,
      chatTemplate: string | undefined,
    ): unknown;
  };
  /**
   * What a GGUF file of `size` bytes is (crates/offscreen/src/inspect.rs), from its header only:
   * `read(offset, length)` gives its bytes. A `GgufInspection` as JSON.
   */
  inspectGguf(fileName: string, size: number, read: (offset: number, length: number) => Promise<Uint8Array>): Promise<string>;
  Sha256: new () => { update(bytes: Uint8Array): void; finalize(): string; free(): void };
}

/** Imports and instantiates the module (once per page). */
export async function loadWasm(): Promise<Wasm> {
  const module = (await import(chrome.runtime.getURL("wasm/hearth_offscreen.js"))) as Wasm;
  await module.default();
  return module;
}
