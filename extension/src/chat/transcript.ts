// A tab's conversation, as data: the entries and the task's state, and how each update changes them.
// Pure (no DOM, no chrome.*): the service worker keeps one per tab (worker/conversations.ts), its
// views (the overlay, the side panel) hold copies that its patches keep in step (./patch.ts).

import type { AddressWarning, AgentEvent, Decision, Outcome, PauseReason, RiskLevel, RiskReason, Source, TaskError, TaskRefusal, TaskUpdate } from "../generated/protocol";

export type TaskState = "idle" | "running" | "confirm" | "ask" | "done" | "failed" | "stopped" | "paused";

export type Entry = { id: number } & (
  /** `voice`: a spoken request, the clip the offscreen document holds in memory (played back there). */
  | { kind: "user"; text: string; queued?: boolean; selection?: string; voice?: VoiceClip; tabs?: AttachedTabShown[] }
  /** Answer text streamed by the model (may precede tool calls). */
  | { kind: "answer"; text: string }
  | { kind: "thinking"; text: string }
  | {
      kind: "tool";
      callId: string;
      name: string;
      args: Record<string, unknown>;
      /** Date.now() at tool_start (absent when the result came without a start: denied, invalid). */
      started?: number;
      ms?: number;
      ok?: boolean;
      output?: string;
      /** A small picture of what the tool showed the model (a JPEG data URL: screenshot). */
      thumbnail?: string;
    }
  | {
      kind: "confirm";
      callId: string;
      name: string;
      args: Record<string, unknown>;
      risk: RiskLevel;
      reasons: RiskReason[];
      /** What the call acts on (absent in entries stored before the engine sent it). */
      target?: ConfirmTarget;
      decision?: Decision;
    }
  | { kind: "ask"; callId: string; question: string; options: string[]; answer?: string }
  /** The browser's fence blocked a request of the page during the run (worker/fence.ts). */
  | { kind: "fence"; url: string; host: string; method: string; file?: string; allowed?: boolean }
  /** The task's deliverable (`done`); `unbacked`: it claims to have read or searched, but no
   * page text was read for it. */
  | { kind: "result"; text: string; success: boolean; unbacked?: boolean }
  /** Page text the model was given (read_page, read_link): numbered passages it may cite. */
  | { kind: "sources"; url: string; title: string; passages: Source[] }
  /** The task's error (worded from the locales when shown). */
  | { kind: "error"; error: TaskError; recoverable: boolean }
  /** An error of the overlay itself, already in the browser's language. */
  | { kind: "local_error"; message: string }
  /** The engine's side refused a message (shown in the browser's language). */
  | { kind: "refused"; refusal: TaskRefusal }
  | { kind: "notice"; notice: Notice }
);

/**
 * The element, destination and text a confirmation is about: the engine's `ActionTarget`
 * (`confirm_request.target`), read defensively since older engines and stored entries lack it.
 */
export interface ConfirmTarget {
  /** "the button “Place order”". */
  description: string;
  /** The element's number in the page's snapshot, when the call acts on one. */
  index: number | null;
  /** The site a navigation, form or link leads to (the agent's one site rule). */
  destination: string | null;
  /** The whole address it leads to (the card shows it on request). */
  address?: string;
  /** What in that address could mislead (user-info, an international name, a backslash). */
  address_warnings?: AddressWarning[];
  /** The text to be typed (masked for password fields by the engine). */
  text: string | null;
  /** For click_at: the point of the screenshot (0–1000 across and down), marked on the page. */
  point?: [number, number];
}

/** A recorded clip: its number in the offscreen document, and its length. */
export interface VoiceClip {
  clip: number;
  seconds: number;
}

/** The microphone while it records for this tab: the seconds so far and the loudness now (0 to 1). */
export interface Recording {
  seconds: number;
  level: number;
}

export type Notice =
  | { kind: "paused"; reason: PauseReason }
  | { kind: "stopped" }
  | { kind: "compacted"; before: number; after: number }
  | { kind: "continued" };

export interface Usage {
  promptTokens: number;
  prefillTokens: number;
  completionTokens: number;
  tokensPerSecond: number | null;
}

export interface Transcript {
  version: 1;
  entries: Entry[];
  task: TaskState;
  /** Whether Continue applies (paused, stopped, or failed with a recoverable error). */
  canContinue: boolean;
  /** The last `done` result of the current task. */
  answer: string | null;
  usage: Usage | null;
  /** Whether the panel was open (restored after a navigation in the same tab). */
  open: boolean;
  /** The microphone records a request for this tab (null: it does not). */
  recording: Recording | null;
  nextId: number;
}

/** Entries kept (older ones are dropped) and the longest text kept per field. */
export const MAX_ENTRIES = 300;
export const MAX_TEXT = 20_000;
const MAX_TOOL_OUTPUT = 4_000;

export function emptyTranscript(): Transcript {
  return { version: 1, entries: [], task: "idle", canContinue: false, answer: null, usage: null, open: false, recording: null, nextId: 1 };
}

/** A stored transcript if it has the right shape (storage outlives code versions). */
export function reviveTranscript(value: unknown): Transcript | null {
  if (typeof value !== "object" || value === null) return null;
  const t = value as Partial<Transcript>;
  if (t.version !== 1 || !Array.isArray(t.entries) || typeof t.task !== "string" || typeof t.nextId !== "number") return null;
  // A message that waited for the engine was never sent: it is gone with the page that held it.
  const entries = t.entries.filter((e) => typeof e === "object" && e !== null && !(e.kind === "user" && e.queued));
  // A recording does not outlive the worker that started it.
  return { ...emptyTranscript(), ...t, entries, recording: null } as Transcript;
}

/** Entries changed or added by one step, for the view to redraw. */
export type Touched = number[];

function add(t: Transcript, entry: DistributiveOmit<Entry, "id">): Entry {
  const full = { ...entry, id: t.nextId++ } as Entry;
  t.entries.push(full);
  if (t.entries.length > MAX_ENTRIES) t.entries.splice(0, t.entries.length - MAX_ENTRIES);
  return full;
}

type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;

const last = (t: Transcript): Entry | undefined => t.entries[t.entries.length - 1];

function findTool(t: Transcript, callId: string): Extract<Entry, { kind: "tool" }> | undefined {
  for (let i = t.entries.length - 1; i >= 0; i--) {
    const e = t.entries[i];
    if (e.kind === "tool" && e.callId === callId) return e;
  }
  return undefined;
}

/** Tools whose calls are shown otherwise (the answer, the question card), not as tool cards. */
export const HIDDEN_TOOLS = new Set(["done", "ask_user"]);

export function toolCardCount(t: Transcript): number {
  return t.entries.filter((e) => e.kind === "tool").length;
}

/** The passage numbered `number` that a tool gave the model in this conversation, and its page. */
export function sourceOf(t: Transcript, number: number): { url: string; title: string; text: string } | undefined {
  for (let i = t.entries.length - 1; i >= 0; i--) {
    const e = t.entries[i]!;
    if (e.kind !== "sources") continue;
    const passage = e.passages.find((p) => p.number === number);
    if (passage) return { url: e.url, title: e.title, text: passage.text };
  }
  return undefined;
}

/** An answer that says it read, searched or looked something up. */
const CLAIM = /\b(I (have |'ve )?(read|searched|looked (at|up|through)|checked|browsed|visited)|according to (the|this|that) (page|article|site|source|website))\b/i;
const claimsReading = (text: string) => CLAIM.test(text);

/** Whether any page text was read since the user's last message. */
function readSinceLastMessage(t: Transcript): boolean {
  for (let i = t.entries.length - 1; i >= 0; i--) {
    const e = t.entries[i]!;
    if (e.kind === "user") return false;
    if (e.kind === "sources" || (e.kind === "tool" && (e.name === "read_page" || e.name === "snapshot" || e.name === "read_link" || e.name === "read_tab"))) return true;
  }
  return false;
}

/** The user sent a message: a new task, or steering of the running one. */
/** A tab the user attached to a message, as the message shows it. */
export interface AttachedTabShown {
  title: string;
  site: string;
}

export function userMessage(t: Transcript, text: string, queued = false, selection: string | null = null, tabs: AttachedTabShown[] = []): Touched {
  const steering = t.task === "running";
  if (!steering) {
    t.answer = null;
    t.canContinue = false;
  }
  t.task = "running";
  const quoted = selection ? { selection: selection.slice(0, MAX_TEXT) } : {};
  const attached = tabs.length > 0 ? { tabs: tabs.slice(0, 8).map((tab) => ({ title: tab.title.slice(0, 200), site: tab.site.slice(0, 200) })) } : {};
  return [add(t, { kind: "user", text: text.slice(0, MAX_TEXT), ...(queued ? { queued } : {}), ...quoted, ...attached }).id];
}

/** The user spoke a request: a voice message, the new task. */
export function voiceMessage(t: Transcript, voice: VoiceClip): Touched {
  const touched = userMessage(t, "");
  const entry = t.entries.find((e) => e.id === touched[0]);
  if (entry?.kind === "user") entry.voice = { clip: voice.clip, seconds: voice.seconds };
  return touched;
}

/** The microphone started, went on, or stopped recording for this tab. */
export function setRecording(t: Transcript, recording: Recording | null): Touched {
  t.recording = recording;
  return [];
}

/** Messages that waited for the engine have been sent. */
export function markSent(t: Transcript): Touched {
  const touched: Touched = [];
  for (const e of t.entries) {
    if (e.kind === "user" && e.queued) {
      delete e.queued;
      touched.push(e.id);
    }
  }
  return touched;
}

export function decide(t: Transcript, id: number, decision: Decision): Touched {
  const e = t.entries.find((x) => x.id === id);
  if (e?.kind !== "confirm" || e.decision) return [];
  e.decision = decision;
  t.task = "running";
  return [id];
}

/** The fence blocked `url`: a card asks whether its site may join the task's set. */
export function fenceBlocked(t: Transcript, url: string, host: string, method: string, file: string | null = null): Touched {
  const open = t.entries.find((e) => e.kind === "fence" && e.url === url && e.allowed === undefined);
  if (open) return [];
  return [add(t, { kind: "fence", url: url.slice(0, MAX_TEXT), host: host.slice(0, 200), method, ...(file ? { file: file.slice(0, 200) } : {}) }).id];
}

/** The user's answer to a fence card; the entry, when it changed. */
export function decideFence(t: Transcript, id: number, allowed: boolean): Extract<Entry, { kind: "fence" }> | undefined {
  const e = t.entries.find((x) => x.id === id);
  if (e?.kind !== "fence" || e.allowed !== undefined) return undefined;
  e.allowed = allowed;
  return e;
}

export function answer(t: Transcript, id: number | null, text: string): Touched {
  const e = id === null ? [...t.entries].reverse().find((x) => x.kind === "ask" && !x.answer) : t.entries.find((x) => x.id === id);
  if (e?.kind !== "ask" || e.answer !== undefined) return [];
  e.answer = text.slice(0, MAX_TEXT);
  t.task = "running";
  return [e.id];
}

/** The open question, if the task waits for an answer. */
export function pendingAsk(t: Transcript): Extract<Entry, { kind: "ask" }> | undefined {
  if (t.task !== "ask") return undefined;
  const e = [...t.entries].reverse().find((x) => x.kind === "ask");
  return e?.kind === "ask" && e.answer === undefined ? e : undefined;
}

/** An error of the overlay itself (the extension was reloaded under the page…). */
export function localError(t: Transcript, message: string): Touched {
  return [add(t, { kind: "local_error", message }).id];
}

export function continued(t: Transcript): Touched {
  t.task = "running";
  t.canContinue = false;
  return [add(t, { kind: "notice", notice: { kind: "continued" } }).id];
}

/** One update from the worker. */
export function applyUpdate(t: Transcript, update: TaskUpdate, now = Date.now()): Touched {
  switch (update.update) {
    case "event":
      return applyEvent(t, update.event, now);
    case "ended":
      return applyOutcome(t, update.outcome);
    case "refused": {
      // A stale decision leaves the task as it is (it may wait at another card).
      if (update.refusal.kind !== "not_waiting") {
        t.canContinue = false;
        t.task = "failed";
      }
      const previous = last(t);
      // One card for the same refusal repeated (a second click on a card that no longer waits).
      if (previous?.kind === "refused" && JSON.stringify(previous.refusal) === JSON.stringify(update.refusal)) return [];
      return [add(t, { kind: "refused", refusal: update.refusal }).id];
    }
    case "history":
      // The worker keeps it; tabs are never sent one.
      return [];
  }
}

function applyEvent(t: Transcript, event: AgentEvent, now: number): Touched {
  switch (event.type) {
    case "token":
    case "thinking": {
      t.task = "running";
      const kind = event.type === "token" ? "answer" : "thinking";
      const previous = last(t);
      if (previous?.kind === kind) {
        if (previous.text.length < MAX_TEXT) previous.text += event.text;
        return [previous.id];
      }
      if (kind === "answer" && !event.text.trim()) return []; // whitespace between a tool call and the next turn
      return [add(t, { kind, text: event.text }).id];
    }
    case "tool_start": {
      t.task = "running";
      if (HIDDEN_TOOLS.has(event.name)) return [];
      return [add(t, { kind: "tool", callId: event.call_id, name: event.name, args: clipArgs(event.arguments), started: now }).id];
    }
    case "tool_result": {
      if (HIDDEN_TOOLS.has(event.name)) return [];
      const output = event.output.length > MAX_TOOL_OUTPUT ? `${event.output.slice(0, MAX_TOOL_OUTPUT)}\n…` : event.output;
      const card = findTool(t, event.call_id);
      const thumbnail = typeof event.thumbnail === "string" && /^data:image\/jpeg;base64,[A-Za-z0-9+/=]+$/.test(event.thumbnail) && event.thumbnail.length <= MAX_THUMBNAIL ? event.thumbnail : undefined;
      if (card && card.ok === undefined) {
        card.ok = event.ok;
        card.output = output;
        if (thumbnail) card.thumbnail = thumbnail;
        if (card.started !== undefined) card.ms = Math.max(0, now - card.started);
        return [card.id];
      }
      return [add(t, { kind: "tool", callId: event.call_id, name: event.name, args: {}, ok: event.ok, output }).id];
    }
    case "confirm_request":
      t.task = "confirm";
      return [
        add(t, {
          kind: "confirm",
          callId: event.call_id,
          name: event.name,
          // The code a person allows is shown whole.
          args: clipArgs(event.arguments, event.name === "run_javascript" ? "code" : undefined),
          risk: event.risk,
          reasons: event.reasons,
          ...confirmTarget((event as { target?: unknown }).target),
        }).id,
      ];
    case "ask_user":
      t.task = "ask";
      return [add(t, { kind: "ask", callId: event.call_id, question: event.question, options: event.options.slice(0, 12) }).id];
    case "done": {
      t.task = "done";
      t.canContinue = false;
      t.answer = event.result;
      const previous = last(t);
      const unbacked = claimsReading(event.result) && !readSinceLastMessage(t);
      // A direct answer was streamed already: that entry becomes the result.
      if (previous?.kind === "answer" && previous.text.trim() === event.result.trim()) {
        const index = t.entries.length - 1;
        t.entries[index] = { id: previous.id, kind: "result", text: event.result, success: event.success, unbacked };
        return [previous.id];
      }
      return [add(t, { kind: "result", text: event.result.slice(0, MAX_TEXT), success: event.success, unbacked }).id];
    }
    case "sources":
      return [add(t, { kind: "sources", url: event.url, title: event.title, passages: event.passages.map((p) => ({ number: p.number, text: p.text.slice(0, MAX_TEXT) })) }).id];
    case "error":
      t.canContinue = event.recoverable;
      return [add(t, { kind: "error", error: event.error, recoverable: event.recoverable }).id];
    case "usage":
      t.usage = {
        promptTokens: event.prompt_tokens,
        prefillTokens: event.prefill_tokens,
        completionTokens: event.completion_tokens,
        tokensPerSecond: event.tokens_per_second,
      };
      return [];
    case "paused":
      t.task = "paused";
      t.canContinue = true;
      return [add(t, { kind: "notice", notice: { kind: "paused", reason: event.reason } }).id];
    case "compacted":
      return [add(t, { kind: "notice", notice: { kind: "compacted", before: event.before_tokens, after: event.after_tokens } }).id];
    case "stopped":
      t.task = "stopped";
      t.canContinue = true;
      return [add(t, { kind: "notice", notice: { kind: "stopped" } }).id];
  }
}

function applyOutcome(t: Transcript, outcome: Outcome): Touched {
  // A tool that never reported back (stopped, failed) is no longer running.
  const touched: Touched = [];
  if (outcome.kind !== "needs_confirmation" && outcome.kind !== "needs_answer") {
    for (const e of t.entries) {
      if (e.kind === "tool" && e.ok === undefined && e.started !== undefined && e.ms === undefined) {
        e.ms = -1;
        touched.push(e.id);
      }
    }
  }
  switch (outcome.kind) {
    case "done":
      if (t.task !== "done") touched.push(...applyEvent(t, { type: "done", result: outcome.result, success: outcome.success }, 0));
      break;
    case "needs_confirmation":
      t.task = "confirm";
      break;
    case "needs_answer":
      t.task = "ask";
      break;
    case "paused":
      if (t.task !== "paused") touched.push(...applyEvent(t, { type: "paused", reason: outcome.reason }, 0));
      break;
    case "stopped":
      if (t.task !== "stopped") touched.push(...applyEvent(t, { type: "stopped" }, 0));
      break;
    case "failed": {
      const previous = last(t);
      // The loop reported its error as an event already.
      if (previous?.kind !== "error" || JSON.stringify(previous.error) !== JSON.stringify(outcome.error)) {
        t.canContinue = false;
        touched.push(add(t, { kind: "error", error: outcome.error, recoverable: false }).id);
      }
      t.task = "failed";
      break;
    }
    case "idle":
      t.task = "idle";
      t.canContinue = false;
      break;
  }
  return touched;
}

/** Arguments as shown and stored: long strings cut (except `whole`). */
function clipArgs(args: Record<string, unknown>, whole?: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(args ?? {})) {
    out[key] = key !== whole && typeof value === "string" && value.length > 2000 ? `${value.slice(0, 2000)}…` : value;
  }
  return out;
}

const MAX_TARGET_TEXT = 2000;
/** A tool card's thumbnail at most (a 320-pixel JPEG is about 20 KB). */
const MAX_THUMBNAIL = 200_000;
const optionalText = (value: unknown, max = MAX_TARGET_TEXT): string | null =>
  typeof value === "string" && value.length > 0 ? value.slice(0, max) : null;

/** One of a target's address warnings when it has a known shape (none otherwise). */
function addressWarning(value: unknown): AddressWarning[] {
  if (typeof value !== "object" || value === null) return [];
  const v = value as Record<string, unknown>;
  if (v.kind === "backslash") return [{ kind: "backslash" }];
  if (v.kind === "user_info" && typeof v.text === "string") return [{ kind: "user_info", text: v.text.slice(0, 200) }];
  if (v.kind === "international_name" && typeof v.unicode === "string") return [{ kind: "international_name", unicode: v.unicode.slice(0, 300) }];
  return [];
}

/** `{ target }` from a confirm_request's `target` when it has the right shape, else nothing. */
export function confirmTarget(value: unknown): { target?: ConfirmTarget } {
  if (typeof value !== "object" || value === null) return {};
  const v = value as Record<string, unknown>;
  const index = typeof v.index === "number" && Number.isInteger(v.index) && v.index > 0 ? v.index : null;
  const target: ConfirmTarget = {
    description: optionalText(v.description, 500) ?? "",
    index,
    destination: optionalText(v.destination, 500),
    text: optionalText(v.text, MAX_TEXT),
  };
  const p = v.point;
  const coordinate = (n: unknown) => typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= 1000;
  if (Array.isArray(p) && p.length === 2 && coordinate(p[0]) && coordinate(p[1])) target.point = [p[0] as number, p[1] as number];
  const address = optionalText(v.address);
  if (address !== null) target.address = address;
  const warnings = Array.isArray(v.address_warnings) ? v.address_warnings.flatMap(addressWarning).slice(0, 4) : [];
  if (warnings.length > 0) target.address_warnings = warnings;
  return target.description || index !== null || target.destination || target.text ? { target } : {};
}

/** The entry a confirmation card, a question or a fence card waits on (the user's turn), if any. */
export function waitingEntry(t: Transcript): Entry | undefined {
  return t.entries.find((e) => (e.kind === "confirm" && e.decision === undefined) || (e.kind === "ask" && e.answer === undefined) || (e.kind === "fence" && e.allowed === undefined));
}

/** The confirmation the task waits on, if any (its target is outlined on the page). */
export function waitingConfirmation(t: Transcript): Extract<Entry, { kind: "confirm" }> | undefined {
  if (t.task !== "confirm") return undefined;
  const e = [...t.entries].reverse().find((x) => (x.kind === "confirm" && x.decision === undefined) || (x.kind === "ask" && x.answer === undefined));
  return e?.kind === "confirm" ? e : undefined;
}
