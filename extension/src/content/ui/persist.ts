// The transcript of this tab, kept by the service worker in chrome.storage.session (memory only,
// cleared when the browser quits; survives page reloads, navigations in the tab and
// service-worker restarts; removed when the tab closes).
//
// storage.session is closed to content scripts (it holds every tab's conversation): the overlay
// asks the worker with `load_transcript`, `save_transcript` and `clear_transcript`, and the worker
// files them under the sender's own tab (`sender.tab.id`). The store opens once the worker has
// answered `watch_engine` (the overlay is connected); until then, or when the worker cannot be
// reached, the transcript lives in memory only.

import { sendFromTab } from "../../shared/messages";
import { reviveTranscript, type Transcript } from "./transcript";

const SAVE_DELAY_MS = 250;

export class TranscriptStore {
  #open = false;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #latest: Transcript | null = null;
  #broken = false;

  get ready(): boolean {
    return this.#open && !this.#broken;
  }

  /**
   * Opens the store (the worker answered `watch_engine` with this tab's id; it files the
   * transcript under the sender's tab itself) and returns what was stored for the tab, or null.
   */
  async open(_tabId: number): Promise<Transcript | null> {
    this.#open = true;
    try {
      return reviveTranscript(await sendFromTab({ kind: "load_transcript" }));
    } catch {
      // The extension was reloaded under this page: its worker is gone for this content script.
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
    if (!this.ready || !this.#latest) return;
    try {
      await sendFromTab({ kind: "save_transcript", transcript: this.#latest });
    } catch {
      this.#broken = true;
    }
  }

  async clear(): Promise<void> {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#latest = null;
    if (!this.ready) return;
    await sendFromTab({ kind: "clear_transcript" }).catch(() => {});
  }
}
