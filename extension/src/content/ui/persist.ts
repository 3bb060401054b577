// The transcript of this tab in chrome.storage.session (memory only, cleared when the browser
// quits; survives page reloads, navigations in the tab and service-worker restarts).
//
// A content script cannot learn its tab id, so the key comes from the service worker: it answers
// `watch_engine` with `{kind: "tab_info", tab_id}`. Until then, or when the worker has not opened
// storage.session to content scripts (setAccessLevel TRUSTED_AND_UNTRUSTED_CONTEXTS), the
// transcript lives in memory only.

import { reviveTranscript, type Transcript } from "./transcript";

export const transcriptKey = (tabId: number) => `transcript:${tabId}`;

const SAVE_DELAY_MS = 250;

export class TranscriptStore {
  #key: string | null = null;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #latest: Transcript | null = null;
  #broken = false;

  get ready(): boolean {
    return this.#key !== null && !this.#broken;
  }

  /** Sets the tab and returns what was stored for it (null if nothing, or storage is closed to us). */
  async open(tabId: number): Promise<Transcript | null> {
    this.#key = transcriptKey(tabId);
    const area = this.#area();
    if (!area) return null;
    try {
      const stored = await area.get(this.#key);
      return reviveTranscript(stored[this.#key]);
    } catch {
      // "Access to storage is not allowed from this context": the worker has not opened it.
      this.#broken = true;
      return null;
    }
  }

  /** Saves `transcript` soon (coalescing bursts of tokens). */
  schedule(transcript: Transcript): void {
    this.#latest = transcript;
    if (!this.ready || this.#timer !== null) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, SAVE_DELAY_MS);
  }

  async flush(): Promise<void> {
    const area = this.#area();
    if (!area || !this.#key || !this.#latest || this.#broken) return;
    try {
      await area.set({ [this.#key]: this.#latest });
    } catch {
      this.#broken = true;
    }
  }

  async clear(): Promise<void> {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#latest = null;
    const area = this.#area();
    if (!area || !this.#key || this.#broken) return;
    await area.remove(this.#key).catch(() => {});
  }

  #area(): chrome.storage.StorageArea | null {
    return this.#broken ? null : (chrome.storage?.session ?? null);
  }
}
