// Voice input, the worker's part: it judges the microphone button (voice input on, a model that
// hears, no task running, the tab in front), asks the offscreen document to record, follows the
// recording in the tab's conversation, and turns a finished clip into the tab's task. While the
// microphone records, the toolbar button of the tab says REC: browser chrome a page cannot hide or
// fake (a page that compromised its renderer could press the button through the bus).
//
// The permission is the extension's, never the page's: the offscreen document records under
// Hearth's own origin, and when Hearth was never allowed the microphone, Hearth's own page
// (microphone.html, in a small window) asks the user; the page's origin is never involved.

import type { EngineStatus, VoiceAction, VoiceState, WorkerToEngine } from "../generated/protocol";
import { localError, setRecording, voiceMessage } from "../chat/transcript";
import { loadSettings } from "../shared/settings";
import { t as t_ } from "../shared/ui/i18n";
import * as conversations from "./conversations";

export interface VoiceHost {
  status(): EngineStatus;
  toOffscreen(msg: WorkerToEngine): Promise<unknown>;
  /** Starts the tab's task with the clip the offscreen document holds. */
  startSpokenTask(tabId: number, clip: number): Promise<void>;
}

/** The tab the microphone records for (one microphone, one recording). */
let recordingTab: number | null = null;

/** The microphone button, or a voice message's play button, in a view of `tabId`'s conversation. */
export async function voiceInput(tabId: number, action: VoiceAction, host: VoiceHost): Promise<void> {
  if (action.action === "play") {
    await host.toOffscreen({ kind: "voice", tab_id: tabId, voice: action }).catch(() => {});
    return;
  }
  if (action.action !== "start") {
    if (recordingTab === tabId) await host.toOffscreen({ kind: "voice", tab_id: tabId, voice: action }).catch(() => stopped(tabId));
    return;
  }
  const refusal = await refuse(tabId, host.status());
  if (refusal) {
    await conversations.change(tabId, (t) => [...setRecording(t, null), ...localError(t, refusal)]);
    return;
  }
  if (recordingTab !== null && recordingTab !== tabId) await stopped(recordingTab);
  recordingTab = tabId;
  await conversations.change(tabId, (t) => setRecording(t, { seconds: 0, level: 0 }));
  await badge(tabId, true);
  await host.toOffscreen({ kind: "voice", tab_id: tabId, voice: action }).catch((error: unknown) => heard(tabId, { state: "failed", detail: String(error) }, host));
}

/** Why the microphone may not record for `tabId` now, in the user's words; null: it may. */
async function refuse(tabId: number, status: EngineStatus): Promise<string | null> {
  if (!(await loadSettings()).voice) return t_("voiceOff");
  if (status.state !== "ready" || status.model === null) return t_("voiceNoModel");
  if (!status.model.hears_audio) return status.model.audio_failure ? t_("voiceTowerFailed", status.model.audio_failure) : t_("voiceCannotHear", status.model.name);
  const busy = await conversations.look(tabId, (t) => t.task === "running" || t.task === "confirm" || t.task === "ask");
  if (busy) return t_("voiceBusy");
  // The tab the user looks at: a tab in the background cannot start the microphone.
  const tab = await chrome.tabs.get(tabId).catch(() => null);
  if (!tab?.active) return t_("voiceNotInFront");
  return null;
}

/** What the offscreen document says of the microphone for `tabId`. */
export async function heard(tabId: number, state: VoiceState, host: VoiceHost): Promise<void> {
  if (state.state === "recording") {
    if (recordingTab === tabId) await conversations.change(tabId, (t) => setRecording(t, { seconds: state.seconds, level: state.level }));
    return;
  }
  // Playback failures concern a clip, not the recording.
  const wasRecording = recordingTab === tabId;
  if (wasRecording) await stopped(tabId);
  switch (state.state) {
    case "recorded": {
      if (!wasRecording) return;
      const clip = { clip: state.clip, seconds: state.seconds };
      await conversations.change(tabId, (t) => [...voiceMessage(t, clip), ...(state.capped ? localError(t, t_("voiceCapped", String(Math.round(state.seconds)))) : [])]);
      return host.startSpokenTask(tabId, state.clip);
    }
    case "cancelled":
      return;
    case "needs_permission":
      // Hearth's own page asks for the microphone (the offscreen document cannot prompt).
      await chrome.windows.create({ url: chrome.runtime.getURL("microphone.html"), type: "popup", width: 460, height: 340 }).catch(() => {});
      await conversations.change(tabId, (t) => localError(t, t_("voiceAllowFirst")));
      return;
    case "denied":
      await conversations.change(tabId, (t) => localError(t, t_("voiceDenied", state.detail)));
      return;
    case "failed":
      await conversations.change(tabId, (t) => localError(t, t_("voiceFailed", state.detail)));
      return;
  }
}

/** The tab closed, or its conversation was cleared: a recording for it stops and is dropped. */
export function dropRecording(tabId: number, host: VoiceHost): void {
  if (recordingTab !== tabId) return;
  recordingTab = null;
  void badge(tabId, false);
  void host.toOffscreen({ kind: "voice", tab_id: tabId, voice: { action: "cancel" } }).catch(() => {});
}

/** The recording of `tabId` is over (whatever became of it). */
async function stopped(tabId: number): Promise<void> {
  if (recordingTab === tabId) recordingTab = null;
  await conversations.change(tabId, (t) => setRecording(t, null));
  await badge(tabId, false);
}

async function badge(tabId: number, recording: boolean): Promise<void> {
  await chrome.action.setBadgeText({ tabId, text: recording ? "REC" : "" }).catch(() => {});
  if (recording) await chrome.action.setBadgeBackgroundColor({ tabId, color: "#c5221f" }).catch(() => {});
}
