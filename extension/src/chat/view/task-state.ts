// The state around the transcript, shown: the composer's mode, Stop and Continue, the usage line
// and the test builds' state mirror. (The launcher's attention mark and the outline of the page
// element a confirmation is about are the page's side: content/overlay.ts.)

import { VOICE_MAX_SECONDS, type EngineStatus } from "../../generated/protocol";
import { formatNumber, t } from "../../shared/ui/i18n";
import type { Composer } from "./composer";
import { pendingAsk, toolCardCount, type Transcript } from "../transcript";

export interface TaskStateParts {
  data: DOMStringMap;
  composer: Composer;
  continueButton: HTMLButtonElement;
  log: HTMLElement;
  empty: HTMLElement;
  usage: HTMLElement;
}

export function showTaskState(parts: TaskStateParts, transcript: Transcript, engineReady: boolean, status: EngineStatus): void {
  const { data, composer, continueButton, log, empty, usage } = parts;
  const task = transcript.task;
  mirrorTask(data, transcript);
  const running = task === "running";
  composer.setRecording(transcript.recording, VOICE_MAX_SECONDS);
  data.recording = transcript.recording ? String(transcript.recording.seconds) : "";
  composer.setMode(pendingAsk(transcript) ? "answer" : running ? "steer" : "task");
  if (running !== composer.running) composer.setRunning(running);
  continueButton.hidden = !(transcript.canContinue && (task === "paused" || task === "stopped" || task === "failed"));
  log.setAttribute("aria-busy", String(running));
  empty.hidden = transcript.entries.length > 0;
  const u = transcript.usage;
  usage.textContent = !u
    ? ""
    : u.tokensPerSecond !== null
      ? t("usageLine", formatNumber(u.promptTokens), formatNumber(u.prefillTokens), formatNumber(u.completionTokens), formatNumber(u.tokensPerSecond, 1))
      : t("usageLineNoRate", formatNumber(u.promptTokens), formatNumber(u.prefillTokens), formatNumber(u.completionTokens));
  if (!engineReady && status.state === "ready") composer.textarea.placeholder = t("noModelYet");
}

/** The task's state in a test build's mirror: the task, its tool cards, the answer, the call a card waits on. */
export function mirrorTask(data: DOMStringMap, transcript: Transcript): void {
  const task = transcript.task;
  data.task = task;
  data.cards = String(toolCardCount(transcript));
  if (transcript.answer !== null) data.answer = transcript.answer;
  else delete data.answer;
  // The call a confirmation card or a question waits on (tests wait for it to change).
  const waiting = [...transcript.entries].reverse().find((e) => (e.kind === "confirm" && e.decision === undefined) || (e.kind === "ask" && e.answer === undefined));
  if ((task === "confirm" || task === "ask") && waiting && "callId" in waiting) data.pendingCall = waiting.callId;
  else delete data.pendingCall;
}
