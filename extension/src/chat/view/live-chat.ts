// A view of one tab's conversation, as the overlay and the side panel both are: it draws the copy
// the conversation's owner (the service worker) keeps in step with patches (`chat` messages) and
// the engine's state (`engine_status`), and sends everything the user does as `ChatInput`, which
// the worker does the same from either view. Where the view is mounted and how its messages travel
// (a tab's runtime messages, a panel's port) are its mounter's.

import type { ChatInput, EngineStatus } from "../../generated/protocol";
import { applyPatch } from "../patch";
import { answer, decide, decideFence, emptyTranscript, localError, pendingAsk, sourceOf, userMessage, waitingEntry, type Transcript } from "../transcript";
import type { CardActions } from "./cards";
import { createChat, type Chat, type ChatOptions } from "./chat";
import type { PanelHandlers } from "./panel";
import { t } from "../../shared/ui/i18n";

export interface LiveChatOptions extends Omit<ChatOptions, "handlers" | "actions" | "transcript" | "status"> {
  /** Sends the user's input to the conversation's owner. */
  send(input: ChatInput): void;
  /** Asks the owner for the other open tabs (the composer's chooser); they come to `ui.composer.showTabChoices`. */
  listTabs(): void;
  /** What only this view does (the overlay's "All settings…" and "Open in side panel", the panel's settings). */
  handlers: Pick<PanelHandlers, "ownModel" | "saveSettings" | "openOptions" | "openSidePanel">;
  /** The address a chip opens in a new tab (another page's passage), or null: this view's page. */
  sourceOpens?(transcript: Transcript, number: number): string | null;
  /** Shows passage `number` itself (on this view's page); false: the owner shows it. */
  showSourceHere?(transcript: Transcript, number: number): boolean;
  /** A card now waits on the user (a confirmation, a question, a fence card); `full`: it was waiting when the view started watching. */
  onWaiting?(entryId: number, full: boolean): void;
  /** After each patch was applied (`full`: the whole conversation came). */
  onPatch?(transcript: Transcript, full: boolean): void;
  /**
   * Where an approval (Allow on any card, starting the microphone) must be seen to count: `allowed`
   * says whether one may be taken now; when not, nothing is sent and `refused` runs. Deny always counts.
   */
  approval?: { allowed(): boolean; refused(): void };
}

export interface LiveChat {
  ui: Chat;
  transcript(): Transcript;
  status(): EngineStatus;
  /** A `chat` message's patch; false when it does not have a patch's shape. */
  applyChat(patch: unknown): boolean;
  /** The engine's state changed. */
  setStatus(status: EngineStatus): void;
  /** Drops the copy (the view now shows another tab). */
  reset(): void;
  /** An error of this view itself (its owner cannot be reached), shown in its copy only. */
  showLocalError(message: string): void;
}

export function createLiveChat(options: LiveChatOptions): LiveChat {
  let transcript: Transcript = emptyTranscript();
  let status: EngineStatus = { state: "idle" };
  const { send } = options;
  /** False (and nothing approved) when this view may not take an approval now. */
  const mayApprove = () => {
    if (!options.approval || options.approval.allowed()) return true;
    options.approval.refused();
    return false;
  };

  // Decisions show at once in this copy (the owner's patch confirms them a moment later); the
  // owner applies each only to the card it was shown on, still waiting on the same call.
  const actions: CardActions = {
    decide(entryId, decision) {
      const entry = transcript.entries.find((e) => e.id === entryId);
      if (entry?.kind !== "confirm" || entry.decision !== undefined) return;
      if (decision !== "deny" && !mayApprove()) return;
      ui.commit(decide(transcript, entryId, decision));
      send({ input: "decide", entry_id: entryId, call_id: entry.callId, decision });
      ui.composer.focus();
    },
    choose(entryId, option) {
      const entry = transcript.entries.find((e) => e.id === entryId);
      if (entry?.kind !== "ask" || entry.answer !== undefined) return;
      ui.commit(answer(transcript, entryId, option));
      send({ input: "choose", entry_id: entryId, call_id: entry.callId, option });
      ui.composer.focus();
    },
    fence(entryId, allow) {
      const entry = transcript.entries.find((e) => e.id === entryId);
      if (entry?.kind !== "fence" || entry.allowed !== undefined) return;
      if (allow && !mayApprove()) return;
      if (!decideFence(transcript, entryId, allow)) return;
      ui.commit([entryId]);
      send({ input: "fence", entry_id: entryId, allow });
      ui.composer.focus();
    },
    hasSource: (number) => sourceOf(transcript, number) !== undefined,
    sourceOpens: (number) => options.sourceOpens?.(transcript, number) ?? null,
    showSource(number) {
      if (!options.showSourceHere?.(transcript, number)) send({ input: "show_source", number });
    },
    playVoice: (clip) => send({ input: "voice", voice: { action: "play", clip } }),
  };

  const ui = createChat({
    ...options,
    handlers: {
      ...options.handlers,
      retry: () => send({ input: "retry" }),
      install: (modelId) => send({ input: "install", model_id: modelId }),
      openModelOptions: () => send({ input: "open_model_options" }),
      submit(text, selection, tabs) {
        // A running task is steered with the text alone: the selection and the tabs wait for the next task.
        const ask = pendingAsk(transcript);
        const newTask = transcript.task !== "running" && !ask;
        const quoted = transcript.task === "running" ? null : selection;
        const attached = newTask ? tabs : [];
        if (quoted) ui.composer.clearSelection();
        if (attached.length > 0) ui.composer.clearTabs();
        // Shown at once in this copy, as the owner will record it (its patch takes this one's place).
        const shown = attached.map((tab) => ({ title: tab.title, site: tab.site }));
        ui.commit(ask ? answer(transcript, ask.id, text) : userMessage(transcript, text, false, quoted, shown));
        send({ input: "submit", text, selection: quoted, tabs: attached.map((tab) => tab.tab_id) });
        return true;
      },
      listTabs: () => options.listTabs(),
      stop() {
        send({ input: "stop" });
        ui.composer.setRunning(true, true);
      },
      voice(action) {
        // Starting the microphone is an approval too: the page must not be able to trick it.
        if (action === "start" && !mayApprove()) return;
        send({ input: "voice", voice: { action } });
      },
    },
    actions,
    transcript: () => transcript,
    status: () => status,
  });

  ui.continueButton.addEventListener("click", () => {
    send({ input: "continue" });
    ui.composer.focus();
  });
  ui.clear.addEventListener("click", () => {
    send({ input: "clear" });
    ui.saved.textContent = t("conversationCleared");
  });

  return {
    ui,
    transcript: () => transcript,
    status: () => status,
    applyChat(patch) {
      const applied = applyPatch(transcript, patch);
      if (!applied) return false;
      const waitingBefore = waitingEntry(transcript)?.id;
      transcript = applied.transcript;
      if (applied.removed) ui.redrawAll();
      else ui.commit(applied.touched);
      options.onPatch?.(transcript, (patch as { full: boolean }).full);
      const waiting = waitingEntry(transcript)?.id;
      if (waiting !== undefined && waiting !== waitingBefore) options.onWaiting?.(waiting, (patch as { full: boolean }).full);
      return true;
    },
    setStatus(next) {
      if (JSON.stringify(next) === JSON.stringify(status)) return;
      status = next;
      ui.renderEngine();
      ui.updateChrome();
    },
    reset() {
      transcript = emptyTranscript();
      status = { state: "idle" };
      ui.redrawAll();
      ui.renderEngine();
    },
    showLocalError(message) {
      ui.commit(localError(transcript, message));
    },
  };
}
