// Downloads the offscreen document runs for the user: a model the engine asked for (`needs_model`),
// or the loaded model's assistant (drafter) or vision file (projector). One at a time; its outcome
// becomes the engine's status, and a document that went away or went silent meanwhile is replaced
// by Retry, as after a failed start.

import type { EngineStatus, WorkerToEngine } from "../generated/protocol";
import { failure } from "../shared/failures";
import { loadSettings } from "../shared/settings";
import { EngineGone, EngineSilent, INSTALL_SILENCE_MS, engineFailure, engineStatus, ensureOffscreenDocument, fromTheEngine, setInstallInFlight, setStatus, silenceMs, startEngine, toOffscreen } from "./engine-link";

/**
 * What an install downloads in the offscreen document: a model, which streams `installing`
 * statuses and then loads; or the loaded model's assistant or vision file, after which the
 * document loads the model again with it (`loading` statuses meanwhile; a failed download leaves the model as it was).
 */
type Install = { kind: "model"; modelId: string } | { kind: "drafter" } | { kind: "projector" };

/** The user pressed Install on `modelId`: the loaded model's assistant or vision file when that is what is offered, else the model a `needs_model` status offers. */
export function installOffered(modelId: string): void {
  const status = engineStatus();
  if (status.state === "ready" && status.model?.drafter_offer?.id === modelId) void install({ kind: "drafter" });
  else if (status.state === "ready" && status.model?.projector_offer?.id === modelId) void install({ kind: "projector" });
  else if (status.state === "needs_model" && status.model.id === modelId) void install({ kind: "model", modelId });
}

/** A model was installed from a folder in the options page: an engine waiting for a model can load it now. */
export function modelInstalled(): void {
  const status = engineStatus();
  if (status.state === "needs_model" || status.state === "failed") void startEngine();
}

/** Runs one install at a time; its outcome becomes the status (Retry when the document was lost). */
async function install(what: Install): Promise<void> {
  if (!setInstallInFlight(true)) return;
  const status = engineStatus();
  const offered = what.kind === "model" && status.state === "needs_model" ? status.model : null;
  if (offered && what.kind === "model") {
    const progress = { model_id: what.modelId, file: "", bytes: offered.stored_bytes, total: offered.total_bytes, bytes_per_s: 0, eta_s: null };
    setStatus({ state: "installing", model: offered, progress });
  }
  let next: EngineStatus | undefined;
  try {
    await ensureOffscreenDocument();
    // A drafter or a projector belongs to the settings' model ("" is the build's default), which offered it.
    const message: WorkerToEngine =
      what.kind === "model"
        ? { kind: "install_model", model_id: what.modelId }
        : { kind: what.kind === "drafter" ? "install_drafter" : "install_projector", model_id: (await loadSettings()).model };
    const answer = toOffscreen(message) as Promise<EngineStatus | undefined>;
    next = await fromTheEngine(answer, silenceMs(INSTALL_SILENCE_MS));
  } catch (error) {
    // A document that went away or went silent is replaced by Retry, as after a failed start.
    const lost = error instanceof EngineSilent || error instanceof EngineGone;
    next = lost ? engineFailure(error) : { state: "failed", failure: failure("model_download", "failureDownloadStopped", String(error)) };
  } finally {
    setInstallInFlight(false);
  }
  if (next) setStatus(next);
}
