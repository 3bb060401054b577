// The engine's crashes. A wasm trap — a Rust panic (panics abort in wasm32: `unreachable`), an
// allocation that failed (out of memory aborts the same way, without a panic message), an
// out-of-bounds access — leaves the instance unusable: the future it was polling never completes
// (its promise never settles), and its state (borrowed cells, held locks) stays half-changed. So:
// - every call into the module goes through `guardWasm`: once the instance has trapped, no call
//   reaches it again, and every call still waiting rejects with `EngineCrashed`;
// - a trap is seen wherever it surfaces: thrown by a call, rejected from its promise, reported as
//   an uncaught error by the microtask that polled the future, or announced by the panic hook
//   (`setPanicHandler`, which also gives the reason);
// - the document reports a failed status naming the model and the reason (`crashedStatus`), and
//   the worker's Retry replaces the whole document (a fresh instance), never this one.

import type { EngineStatus } from "../generated/protocol";
import { failure } from "../shared/failures";
import type { Wasm } from "../shared/wasm";

/** A call refused or abandoned because the engine crashed. */
export class EngineCrashed extends Error {
  constructor(readonly reason: string) {
    super(`the engine crashed (${reason})`);
    this.name = "EngineCrashed";
  }
}

/** Why the engine crashed, once it has. */
let reason: string | null = null;
/** The model the crash is reported under. */
let crashModel: string | null = null;
/** The last panic's message (the hook runs just before the trap). */
let panicMessage: string | null = null;
let memory: WebAssembly.Memory | null = null;
const listeners: ((status: EngineStatus) => void)[] = [];
let rejectWaiting: (error: EngineCrashed) => void = () => {};
/** Rejects when the engine crashes: every pending call races it. */
const crashed = new Promise<never>((_, reject) => (rejectWaiting = reject));
crashed.catch(() => {});

/** The model being loaded (its files are being made, or `startEngine` is loading them), and the one loaded. */
let loadingModel: string | null = null;
let loadedModel: string | null = null;

/** The module's `ModelFiles` factories take the model's name first: a load of it begins. */
function noteModelFiles(args: unknown[]): void {
  if (typeof args[0] === "string") loadingModel = args[0];
}

/** Whether the engine has crashed (then nothing may call into it). */
export const hasCrashed = (): boolean => reason !== null;

/** `listener(status)` hears the failed status once, when the engine crashes. */
export function onCrash(listener: (status: EngineStatus) => void): void {
  listeners.push(listener);
}

/**
 * Whether `error` is a trap of the wasm instance. `fromCall`: it came out of a call into the
 * module, where a RangeError about memory or the call stack (a failed allocation of the glue, a
 * stack overflow inside wasm) also leaves the instance in an unknown state.
 */
export function isTrap(error: unknown, fromCall = false): boolean {
  if (error instanceof WebAssembly.RuntimeError) return true;
  return fromCall && error instanceof RangeError && /memory|alloc|call stack/i.test(error.message);
}

/** The failed status of a crashed engine: which model, and why (for the user to report). */
export function crashedStatus(): EngineStatus {
  const why = reason ?? "unknown";
  const f = crashModel
    ? failure("engine_load", "failureEngineCrashed", crashModel, why)
    : failure("engine_load", "failureEngineCrashedNoModel", why);
  return { state: "failed", failure: f };
}

/** Marks the engine crashed (once) because of `error` (a trap, or a panic's message). */
export function noteCrash(error: unknown): EngineCrashed {
  if (reason === null) {
    reason = describe(error);
    crashModel = loadingModel ?? loadedModel;
    console.error(`Hearth: the engine crashed (${reason}); this instance is not used again, Retry starts a fresh one`);
    const status = crashedStatus();
    rejectWaiting(new EngineCrashed(reason));
    for (const listener of listeners) listener(status);
  }
  return new EngineCrashed(reason);
}

function describe(error: unknown): string {
  const memoryNote = memory ? `; wasm memory ${formatBytes(memory.buffer.byteLength)}` : "";
  if (panicMessage) return `${panicMessage.replace(/\s+/g, " ").trim()}${memoryNote}`;
  if (typeof error === "string") return error;
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  // A panic always reaches the hook first: an abort without one is most often a failed allocation.
  const hint = error instanceof WebAssembly.RuntimeError && /unreachable/.test(text) ? ", without a panic: most likely out of memory" : "";
  return `${text}${hint}${memoryNote}`;
}

function formatBytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`;
}

/** An error out of a call into the module, as the caller should see it. */
function fromCall(error: unknown): unknown {
  if (error instanceof EngineCrashed) return error;
  return isTrap(error, true) ? noteCrash(error) : error;
}

/** Runs one call into the module: refused once crashed; a promise it returns is abandoned on a crash. */
function call<T>(run: () => T): T {
  if (reason !== null) throw new EngineCrashed(reason);
  let result: T;
  try {
    result = run();
  } catch (error) {
    throw fromCall(error);
  }
  if (result instanceof Promise) {
    return Promise.race([result, crashed]).catch((error: unknown) => {
      throw fromCall(error);
    }) as T;
  }
  return result;
}

/**
 * `fn` (a function or a class of the module) with every call and construction guarded; `before`
 * sees the arguments first, `after` may replace the result.
 */
function guardFunction<F extends object>(fn: F, before?: (args: unknown[]) => void, after?: (args: unknown[], result: unknown) => unknown): F {
  return new Proxy(fn, {
    apply: (target, self, args: unknown[]) => {
      before?.(args);
      const result = call(() => Reflect.apply(target as (...a: unknown[]) => unknown, self, args));
      return after ? after(args, result) : result;
    },
    // Instances are the module's own (they go back into it as they are); constructions are guarded.
    construct: (target, args: unknown[]) => {
      noteModelFiles(args);
      return call(() => Reflect.construct(target as new (...a: unknown[]) => object, args));
    },
    get: (target, key, receiver) => {
      const value: unknown = Reflect.get(target, key, receiver);
      // Static factories (`ModelFiles.streamed(name, …)`): guarded too, bound to the class.
      const own = Object.prototype.hasOwnProperty.call(target, key);
      if (own && typeof value === "function" && typeof key === "string" && /^[a-z]/.test(key)) {
        return guardFunction(value.bind(target) as object, noteModelFiles);
      }
      return value;
    },
  });
}

/**
 * The module with every export guarded, its panics reported here. Call once, after `loadWasm`.
 * (Tests that import the module themselves call it unguarded; their traps are still seen.)
 */
export async function guardWasm(module: Wasm): Promise<Wasm> {
  const exports = (await module.default()) as { memory?: WebAssembly.Memory } | undefined;
  memory = exports?.memory instanceof WebAssembly.Memory ? exports.memory : null;
  module.setPanicHandler((message: string) => {
    panicMessage = message;
    noteCrash(message);
  });
  const guarded: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(module)) {
    if (typeof value !== "function" || key === "default") guarded[key] = value;
    else if (key === "startEngine") guarded[key] = guardFunction(value, startsLoad, trackModel);
    else guarded[key] = guardFunction(value);
  }
  return guarded as unknown as Wasm;
}

/** Which model `startEngine(vendor, architecture, files?, onStatus?)` loads: without files, none (the loaded one stays). */
function startsLoad(args: unknown[]): void {
  if (args[2] === undefined || args[2] === null) loadingModel = null;
}

/** The model the engine holds once `startEngine` answers. */
function trackModel(_args: unknown[], result: unknown): unknown {
  return (result as Promise<string>).then((json) => {
    const status = JSON.parse(json) as EngineStatus;
    if (status.state === "ready") loadedModel = status.model?.name ?? null;
    loadingModel = null;
    return json;
  });
}

// Traps that no call saw: the microtask polling a future threw (an uncaught error), or a promise
// callback of the glue did (an unhandled rejection). Handled here, so not reported again.
addEventListener("error", (event) => {
  if (!isTrap(event.error)) return;
  noteCrash(event.error);
  event.preventDefault();
});
addEventListener("unhandledrejection", (event) => {
  if (!isTrap(event.reason)) return;
  noteCrash(event.reason);
  event.preventDefault();
});
