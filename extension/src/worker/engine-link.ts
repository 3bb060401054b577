// The worker's link to the engine: the offscreen document that runs it, its status, and the waits
// on it. The engine is started on demand (a view opened, a message sent), started again when the
// settings' model or voice input change, and replaced when it failed in a way it cannot recover
// from inside (a lost GPU device, a trapped wasm instance, a silent document). No wait on it is
// endless: every one ends when the engine has said nothing for a while or its document is gone.
// Chrome may stop this worker at any time: the status is rebuilt by asking the engine again.

import { FRESH_ENGINE_FAILURES, type EngineStatus, type WorkerToEngine } from "../generated/protocol";
import { failure, localizeFailure } from "../shared/failures";
import { sendToEngine } from "../shared/messages";
import { loadSettings, type Settings } from "../shared/settings";

const OFFSCREEN_URL = "offscreen.html";

let status: EngineStatus = { state: "idle" };
/** The model the engine was last started with (settings.model; null: the build's default). */
let engineModel: string | null = null;
/** Whether that start loaded the audio tower (settings.voice). */
let engineVoice = false;
/** A download runs in the offscreen document: its `installing` statuses are current (./installs.ts). */
let installInFlight = false;
/** The offscreen document is starting the engine: its `loading` statuses are current. */
let startInFlight = false;
let offscreenStarting: Promise<void> | null = null;
let onOffscreenReady: (() => void) | null = null;
/** Counts engine starts: the answer of one that a later start replaced is not current. */
let startSeq = 0;

/**
 * The longest the engine may stay silent while the worker waits on it: no answer and no message
 * (each `loading` or `installing` status restarts the clock, so a model of gigabytes may take
 * minutes). Then the wait ends in a failure with Retry, which replaces the document.
 */
const ENGINE_SILENCE_MS = 60_000;
/** The same while a model downloads (a slow server may take a while between two parts). */
export const INSTALL_SILENCE_MS = 120_000;
/** How long a new offscreen document may take to load its script and say it is ready. */
const OFFSCREEN_READY_MS = 30_000;
/**
 * How often a wait checks that the offscreen document is still there (a renderer crash ends it;
 * the call also keeps this worker alive while it waits on a silent engine).
 */
const DOCUMENT_CHECK_MS = 2_000;

/** Test builds only: the e2e suite shortens the silence the worker waits out (`hearthTestHooks`). */
export function silenceMs(normal: number): number {
  return __HEARTH_TEST_BUILD__ ? ((globalThis as { hearthTestHooks?: { engineSilenceMs?: number } }).hearthTestHooks?.engineSilenceMs ?? normal) : normal;
}

/** The engine's status as the views show it. */
export function engineStatus(): EngineStatus {
  return status;
}

/** Who hears every new status (the worker's router: the views, and the messages that waited). */
let statusListener: (status: EngineStatus) => void = () => {};
export function onStatus(listener: (status: EngineStatus) => void): void {
  statusListener = listener;
}

export function setStatus(next: EngineStatus): void {
  // Failures reach tabs in the browser's language (the offscreen document has no chrome.i18n).
  status = next.state === "failed" ? { ...next, failure: localizeFailure(next.failure) } : next;
  statusListener(status);
}

/** Marks a download as running (or over): its progress statuses are current while it runs. */
export function setInstallInFlight(running: boolean): boolean {
  if (running && installInFlight) return false;
  installInFlight = running;
  return true;
}

/** A status the engine sent on its own: progress that arrives after the download or the load ended (messages may cross) is stale. */
export function statusFromEngine(next: EngineStatus): void {
  if (next.state === "installing" ? installInFlight : next.state === "loading" ? startInFlight || installInFlight : true) setStatus(next);
}

/** The offscreen document's script listens (its first message). */
export function offscreenReady(): void {
  onOffscreenReady?.();
}

export function toOffscreen(msg: WorkerToEngine): Promise<unknown> {
  return sendToEngine(msg);
}

/** Starts the engine if nothing runs yet (a failed one is retried: its cause may be gone), or brings back a torn-down one. */
export function wakeEngine(): void {
  if (status.state === "idle" || status.state === "failed") void startEngine();
  // Chrome may have torn the offscreen document down: bring the engine back (the views show it starting).
  else if (status.state === "ready") void restartIfGone();
}

/**
 * The settings changed: another model was chosen, or voice input turned on or off (the audio tower
 * loads only while it is on): the engine starts again with them (a model that is not installed is
 * offered for download). An engine nobody asked for yet, or one busy starting, picks them up itself.
 */
export function settingsChanged(settings: Settings): void {
  const model = settings.model || null;
  const changed = model !== engineModel || settings.voice !== engineVoice;
  if (changed && !["idle", "starting", "installing", "loading"].includes(status.state)) void startEngine();
}

async function restartIfGone(): Promise<void> {
  if (!(await chrome.offscreen.hasDocument())) await startEngine();
}

/** Makes sure the engine runs (a restarted worker or a torn-down offscreen document start it again). */
export async function ensureEngine(): Promise<void> {
  if (!(status.state === "ready" && (await chrome.offscreen.hasDocument()))) await startEngine();
  // A model that is not installed is not replaced by whichever one the engine still holds.
  const now = status as EngineStatus;
  if (now.state === "needs_model" || now.state === "installing") throw new Error(`${now.model.name} is not installed yet: open Hearth and download it`);
}

export async function startEngine(): Promise<void> {
  // A lost GPU device cannot be replaced inside the engine, nor a crashed (trapped) wasm instance
  // be used again, nor a stuck document be trusted: a fresh offscreen document starts from scratch.
  const recreate = status.state === "failed" && FRESH_ENGINE_FAILURES.includes(status.failure.kind);
  const seq = ++startSeq;
  const current = () => seq === startSeq;
  setStatus({ state: "starting" });
  startInFlight = true;
  let next: EngineStatus;
  try {
    if (recreate && (await chrome.offscreen.hasDocument())) await chrome.offscreen.closeDocument();
    await ensureOffscreenDocument();
    const settings = await loadSettings();
    engineModel = settings.model || null;
    engineVoice = settings.voice;
    // The offscreen document answers once the engine is ready (or failed), or with the model to
    // install; it sends `loading` statuses meanwhile.
    const answer = toOffscreen({ kind: "start_engine", model_id: engineModel, voice: engineVoice }) as Promise<EngineStatus | undefined>;
    next = (await fromTheEngine(answer, silenceMs(ENGINE_SILENCE_MS))) ?? engineFailure(new Error("the engine gave no answer"));
  } catch (error) {
    next = engineFailure(error);
  }
  // A later start (a Retry meanwhile) owns the status now.
  if (!current()) return;
  startInFlight = false;
  setStatus(next);
}

/** The engine did not answer the worker: it went silent, its document went away, or it was never created. */
export class EngineSilent extends Error {
  constructor(readonly ms: number) {
    super(`the engine said nothing for ${Math.round(ms / 1000)} s`);
  }
}
export class EngineGone extends Error {}

/** The failure for an error of `startEngine`'s (all of them offer Retry, which replaces the document). */
export function engineFailure(error: unknown): EngineStatus {
  if (error instanceof EngineSilent) return { state: "failed", failure: failure("engine_load", "failureEngineSilent", Math.round(error.ms / 1000)) };
  // The message channel closed before the answer, or no document answered at all.
  const gone = error instanceof EngineGone || /message (port|channel) closed|Receiving end does not exist/i.test(String(error));
  if (gone) return { state: "failed", failure: failure("engine_load", "failureEngineGone", errorText(error)) };
  return { state: "failed", failure: failure("engine_load", "failureEngineStart", errorText(error)) };
}

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Called on every message of the engine's, for the waits below. */
const engineHeard = new Set<() => void>();

/** The engine sent a message: the waits on it start counting its silence again. */
export function heardFromEngine(): void {
  for (const heard of engineHeard) heard();
}

/**
 * `answer`, from the offscreen document, or a rejection: `EngineSilent` once the engine has sent
 * nothing for `silence` ms (every message it sends restarts the clock), `EngineGone` once the
 * document is gone (closed, or its renderer crashed). Never waits forever.
 */
export function fromTheEngine<T>(answer: Promise<T>, silence: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let heard = Date.now();
    const onHeard = () => (heard = Date.now());
    engineHeard.add(onHeard);
    const check = setInterval(() => {
      if (Date.now() - heard > silence) return settle(() => reject(new EngineSilent(silence)));
      void chrome.offscreen.hasDocument().then((present) => present || settle(() => reject(new EngineGone("the offscreen document is gone"))));
    }, Math.min(DOCUMENT_CHECK_MS, silence / 2));
    const settle = (then: () => void) => {
      clearInterval(check);
      engineHeard.delete(onHeard);
      then();
    };
    answer.then(
      (value) => settle(() => resolve(value)),
      (error: unknown) => settle(() => reject(error)),
    );
  });
}

/** Creates the offscreen document once and waits (a bounded time) until its script listens. */
export async function ensureOffscreenDocument(): Promise<void> {
  if (offscreenStarting) return offscreenStarting;
  offscreenStarting = (async () => {
    if (await chrome.offscreen.hasDocument()) return;
    const ready = new Promise<void>((resolve) => (onOffscreenReady = resolve));
    await chrome.offscreen.createDocument({
      url: OFFSCREEN_URL,
      reasons: [chrome.offscreen.Reason.WORKERS, chrome.offscreen.Reason.USER_MEDIA],
      justification: "Runs Hearth's language model on the GPU with WebGPU, and records a spoken request when the user presses Hearth's microphone button.",
    });
    await fromTheEngine(ready, silenceMs(OFFSCREEN_READY_MS));
  })();
  try {
    await offscreenStarting;
  } finally {
    offscreenStarting = null;
  }
}
