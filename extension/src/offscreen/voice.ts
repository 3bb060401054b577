// The microphone, in the offscreen document: it records a tab's spoken request under the
// extension's own origin (a content script's getUserMedia would ask as the page, and leave the page
// the permission), resamples it to the 16 kHz mono the audio tower hears, and keeps the clips in
// memory only (gone with this document), for the task and for playback. This document cannot show
// the browser's permission prompt: until Hearth is allowed the microphone, it answers
// `needs_permission` and the worker opens Hearth's own page that asks (microphone.html).

import { VOICE_MAX_SECONDS, VOICE_SAMPLE_RATE, type VoiceAction, type VoiceState } from "../generated/protocol";

/** How often the level and the length are reported while recording. */
const REPORT_MS = 100;
/** The clips kept (each at most 30 s: 1.9 MB); older ones go first. */
const MAX_CLIPS = 16;
/** Samples a chunk of the recorder (about 85 ms at 48 kHz). */
const CHUNK = 4096;

interface Recorder {
  tabId: number;
  stream: MediaStream;
  context: AudioContext;
  node: ScriptProcessorNode;
  chunks: Float32Array[];
  samples: number;
  level: number;
  timer: ReturnType<typeof setInterval>;
}

const clips = new Map<number, { tabId: number; samples: Float32Array<ArrayBuffer> }>();
let nextClip = 1;
let recorder: Recorder | null = null;
/** Playing back: one clip at a time. */
let player: AudioContext | null = null;

/** The longest clip: the model's; test builds let the e2e suite shorten it (`hearthTestHooks.voiceMaxSeconds`). */
function maxSeconds(): number {
  if (!__HEARTH_TEST_BUILD__) return VOICE_MAX_SECONDS;
  const hooks = (globalThis as { hearthTestHooks?: { voiceMaxSeconds?: number } }).hearthTestHooks;
  return Math.min(hooks?.voiceMaxSeconds ?? VOICE_MAX_SECONDS, VOICE_MAX_SECONDS);
}

/** Does `action` for the tab; every state it reaches goes to `report`. */
export async function voice(tabId: number, action: VoiceAction, report: (tabId: number, state: VoiceState) => void): Promise<void> {
  switch (action.action) {
    case "start":
      return start(tabId, report);
    case "stop":
      if (recorder?.tabId === tabId) await finish(recorder, false, report);
      return;
    case "cancel":
      if (recorder?.tabId === tabId) await finish(recorder, true, report);
      return;
    case "play":
      return play(tabId, action.clip, report);
  }
}

/** The samples of `clip` if it was recorded for `tabId` and is still kept. */
export function clipOf(tabId: number, clip: number): Float32Array<ArrayBuffer> | null {
  const kept = clips.get(clip);
  return kept && kept.tabId === tabId ? kept.samples : null;
}

/** The tab's conversation was cleared: its clips go. */
export function forgetClips(tabId: number): void {
  for (const [clip, kept] of clips) if (kept.tabId === tabId) clips.delete(clip);
}

async function start(tabId: number, report: (tabId: number, state: VoiceState) => void): Promise<void> {
  // One microphone: a recording for another tab is dropped.
  if (recorder) await finish(recorder, true, report);
  const permission = await navigator.permissions.query({ name: "microphone" as PermissionName }).catch(() => null);
  if (permission?.state === "prompt") return report(tabId, { state: "needs_permission" });
  if (permission?.state === "denied") return report(tabId, { state: "denied", detail: "the microphone is blocked for Hearth" });
  let stream: MediaStream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
  } catch (error) {
    const name = error instanceof DOMException ? error.name : "";
    const detail = error instanceof Error ? error.message : String(error);
    if (name === "NotAllowedError" || name === "SecurityError") return report(tabId, permission?.state === "granted" ? { state: "denied", detail } : { state: "needs_permission" });
    return report(tabId, { state: "failed", detail: name === "NotFoundError" ? "no microphone was found" : detail });
  }
  const context = new AudioContext();
  await context.resume().catch(() => {});
  const source = context.createMediaStreamSource(stream);
  // A ScriptProcessor, not a worklet: no module to load, and the chunks come to this thread anyway.
  const node = context.createScriptProcessor(CHUNK, 1, 1);
  const rec: Recorder = { tabId, stream, context, node, chunks: [], samples: 0, level: 0, timer: 0 as unknown as ReturnType<typeof setInterval> };
  const limit = maxSeconds() * context.sampleRate;
  node.onaudioprocess = (event) => {
    if (recorder !== rec) return;
    const input = event.inputBuffer.getChannelData(0);
    const take = Math.min(input.length, limit - rec.samples);
    if (take > 0) {
      rec.chunks.push(input.slice(0, take));
      rec.samples += take;
      let sum = 0;
      for (let i = 0; i < take; i++) sum += input[i]! * input[i]!;
      // Speech is quiet next to full scale: the meter reads the RMS four times up.
      rec.level = Math.min(1, Math.sqrt(sum / take) * 4);
    }
    // The longest clip the model hears: it stops itself and goes to the model.
    if (rec.samples >= limit) void finish(rec, false, report, true);
  };
  source.connect(node);
  node.connect(context.destination);
  rec.timer = setInterval(() => {
    if (recorder === rec) report(tabId, { state: "recording", seconds: rec.samples / context.sampleRate, level: rec.level });
  }, REPORT_MS);
  recorder = rec;
  report(tabId, { state: "recording", seconds: 0, level: 0 });
}

/** Stops `rec`: dropped (`cancel`), or kept as a clip at 16 kHz and reported. */
async function finish(rec: Recorder, cancel: boolean, report: (tabId: number, state: VoiceState) => void, capped = false): Promise<void> {
  if (recorder !== rec) return;
  recorder = null;
  clearInterval(rec.timer);
  rec.node.onaudioprocess = null;
  rec.node.disconnect();
  for (const track of rec.stream.getTracks()) track.stop();
  const rate = rec.context.sampleRate;
  await rec.context.close().catch(() => {});
  if (cancel) return report(rec.tabId, { state: "cancelled" });
  if (rec.samples === 0) return report(rec.tabId, { state: "failed", detail: "the microphone gave no sound" });
  let samples: Float32Array<ArrayBuffer>;
  try {
    samples = await resample(rec.chunks, rec.samples, rate);
  } catch (error) {
    return report(rec.tabId, { state: "failed", detail: `the recording could not be converted: ${String(error)}` });
  }
  const clip = nextClip++;
  clips.set(clip, { tabId: rec.tabId, samples });
  for (const old of clips.keys()) if (clips.size > MAX_CLIPS) clips.delete(old);
  report(rec.tabId, { state: "recorded", clip, seconds: samples.length / VOICE_SAMPLE_RATE, capped });
}

/** The chunks as one clip at VOICE_SAMPLE_RATE (the browser's own resampler), at most VOICE_MAX_SECONDS. */
async function resample(chunks: Float32Array[], length: number, rate: number): Promise<Float32Array<ArrayBuffer>> {
  const out = Math.min(Math.max(1, Math.round((length * VOICE_SAMPLE_RATE) / rate)), maxSeconds() * VOICE_SAMPLE_RATE);
  const offline = new OfflineAudioContext(1, out, VOICE_SAMPLE_RATE);
  const buffer = offline.createBuffer(1, length, rate);
  const channel = buffer.getChannelData(0);
  let at = 0;
  for (const chunk of chunks) {
    channel.set(chunk, at);
    at += chunk.length;
  }
  const source = offline.createBufferSource();
  source.buffer = buffer;
  source.connect(offline.destination);
  source.start();
  const rendered = await offline.startRendering();
  return rendered.getChannelData(0).slice(0, out);
}

async function play(tabId: number, clip: number, report: (tabId: number, state: VoiceState) => void): Promise<void> {
  const samples = clipOf(tabId, clip);
  if (!samples) return report(tabId, { state: "failed", detail: "that recording is no longer kept (recordings live only until the conversation is cleared or the engine restarts)" });
  await player?.close().catch(() => {});
  const context = new AudioContext({ sampleRate: VOICE_SAMPLE_RATE });
  player = context;
  const buffer = context.createBuffer(1, samples.length, VOICE_SAMPLE_RATE);
  buffer.copyToChannel(samples, 0);
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  source.onended = () => {
    if (player === context) player = null;
    void context.close().catch(() => {});
  };
  source.start();
}
