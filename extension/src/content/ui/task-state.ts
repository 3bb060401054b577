// The state around the transcript, shown: the composer's mode, Stop and Continue, the usage line,
// the launcher's attention mark, the outline of the element a confirmation is about, and the test
// builds' state mirror.

import type { EngineStatus } from "../../generated/protocol";
import { elementByIndex } from "../page-tools/elements";
import { formatNumber, t } from "../../shared/ui/i18n";
import type { Composer } from "./composer";
import type { TargetOutline } from "./outline";
import { pendingAsk, toolCardCount, type Entry, type Transcript } from "./transcript";

export interface TaskStateParts {
  data: DOMStringMap;
  /** The page's outline (the overlay's); the side panel has none: the tab's overlay draws it. */
  outline: TargetOutline | null;
  composer: Composer;
  continueButton: HTMLButtonElement;
  log: HTMLElement;
  empty: HTMLElement;
  usage: HTMLElement;
  launcher: HTMLButtonElement;
}

export function showTaskState(parts: TaskStateParts, transcript: Transcript, engineReady: boolean, status: EngineStatus): void {
  const { data, outline, composer, continueButton, log, empty, usage, launcher } = parts;
  const task = transcript.task;
  data.task = task;
  data.cards = String(toolCardCount(transcript));
  if (transcript.answer !== null) data.answer = transcript.answer;
  else delete data.answer;
  // The call a confirmation card or a question waits on (tests wait for it to change).
  const waiting = [...transcript.entries].reverse().find((e) => (e.kind === "confirm" && e.decision === undefined) || (e.kind === "ask" && e.answer === undefined));
  if ((task === "confirm" || task === "ask") && waiting && "callId" in waiting) data.pendingCall = waiting.callId;
  else delete data.pendingCall;
  // The page element the waiting confirmation is about, outlined until it is decided.
  const confirming = task === "confirm" && waiting?.kind === "confirm" ? waiting : null;
  outline?.show(confirming ? targetElement(confirming) : null, confirming?.target?.point ?? null);
  const running = task === "running";
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
  const attention = task === "confirm" || task === "ask" ? "needs-you" : running ? "running" : "";
  if (attention) launcher.dataset.attention = attention;
  else delete launcher.dataset.attention;
  launcher.setAttribute("aria-label", attention === "needs-you" ? t("launcherLabelNeedsYou") : t("launcherLabel"));
  if (!engineReady && status.state === "ready") composer.textarea.placeholder = t("noModelYet");
}

/** The page element a confirmation is about: its target's number, or the call's `index`. */
function targetElement(entry: Extract<Entry, { kind: "confirm" }>): Element | null {
  const index = entry.target?.index ?? entry.args.index;
  return typeof index === "number" && Number.isInteger(index) && index > 0 ? elementByIndex(index) : null;
}
