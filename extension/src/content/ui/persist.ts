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
/** A save the worker did not take is tried again this much later, this many times in a row. */
const RETRY_DELAY_MS = 500;
const MAX_SAVE_RETRIES = 20;

export class TranscriptStore {
  #open = false;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #latest: Transcript | null = null;
  #broken = false;
  /** Saves failed in a row. */
  #failures = 0;

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
      this.#failures = 0;
    } catch {
      // The extension was reloaded under this page: nothing will answer again. Otherwise the
      // worker was stopping or starting: save again shortly (the latest transcript then), so that
      // one unlucky moment does not leave the stored conversation behind for good.
      if (!chrome.runtime?.id || ++this.#failures > MAX_SAVE_RETRIES) {
        this.#broken = true;
        return;
      }
      if (this.#timer === null) {
        this.#timer = setTimeout(() => {
          this.#timer = null;
          void this.flush();
        }, RETRY_DELAY_MS);
      }
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
