// The transcript on screen: one node per entry, redrawn when the entry changes. Changes are
// marked as they come and drawn shortly after (tokens arrive faster than frames), only while the
// panel is open.

import { renderEntry, type CardActions } from "./cards";
import type { Touched, Transcript } from "../transcript";

export interface TranscriptViewParts {
  log: HTMLElement;
  empty: HTMLElement;
  /** Where the focused element is read (the chat's shadow root). */
  root: DocumentOrShadowRoot;
  /** Where focus goes when a focused node is replaced. */
  focusComposer(): void;
  isOpen(): boolean;
  transcript(): Transcript;
  actions: CardActions;
}

export class TranscriptView {
  private readonly nodes = new Map<number, HTMLElement>();
  private readonly dirty = new Set<number>();
  private flushTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly parts: TranscriptViewParts) {}

  /** Entries to draw again. */
  mark(touched: Touched): void {
    for (const id of touched) this.dirty.add(id);
  }

  /** Draws the marked entries soon, if the panel is open. */
  schedule(): void {
    if (this.flushTimer === null && this.parts.isOpen()) this.flushTimer = setTimeout(() => this.flush(), 16);
  }

  /** Draws the marked entries now. */
  flush(): void {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (!this.dirty.size) return;
    const { log, empty, root } = this.parts;
    const transcript = this.parts.transcript();
    const stuck = log.scrollTop + log.clientHeight >= log.scrollHeight - 48;
    const firstId = transcript.entries[0]?.id ?? Infinity;
    for (const [id, node] of this.nodes) {
      if (id < firstId) {
        node.remove();
        this.nodes.delete(id);
      }
    }
    for (const entry of transcript.entries) {
      if (!this.dirty.has(entry.id)) continue;
      const fresh = renderEntry(entry, this.parts.actions);
      const old = this.nodes.get(entry.id);
      if (old) {
        keepDisclosures(old, fresh);
        const focused = old.contains(root.activeElement) ? (root.activeElement as HTMLElement) : null;
        old.replaceWith(fresh);
        // A card drawn again keeps the focus on the same button (a decision's, an option's).
        if (focused) {
          const same = counterpart(focused, fresh);
          if (same) same.focus();
          else this.parts.focusComposer();
        }
      } else {
        log.append(fresh);
      }
      this.nodes.set(entry.id, fresh);
    }
    this.dirty.clear();
    empty.hidden = transcript.entries.length > 0;
    if (stuck) this.scrollToEnd();
  }

  /** Every entry drawn anew (another transcript took this one's place). */
  redraw(): void {
    for (const node of this.nodes.values()) node.remove();
    this.nodes.clear();
    for (const entry of this.parts.transcript().entries) this.dirty.add(entry.id);
    this.flush();
  }

  node(entryId: number): HTMLElement | undefined {
    return this.nodes.get(entryId);
  }

  /** Scrolls to the newest entry; a card waiting for the person shows from its top (what is being approved comes first). */
  scrollToEnd(): void {
    const log = this.parts.log;
    log.scrollTop = log.scrollHeight;
    const waiting = [...log.querySelectorAll<HTMLElement>(".card .actions button:not(:disabled)")].pop()?.closest<HTMLElement>(".card");
    if (waiting) this.reveal(waiting);
  }

  /** Scrolls the transcript until `node` is in view: from its top when it is taller than the view (its buttons stay in view, sticky). */
  reveal(node: HTMLElement): void {
    const log = this.parts.log;
    const top = node.getBoundingClientRect().top - log.getBoundingClientRect().top - log.clientTop + log.scrollTop;
    const bottom = top + node.offsetHeight;
    if (top < log.scrollTop || node.offsetHeight > log.clientHeight) log.scrollTop = top;
    else if (bottom > log.scrollTop + log.clientHeight) log.scrollTop = bottom - log.clientHeight;
  }
}

/** A redrawn card keeps the open/closed state of its disclosures. */
function keepDisclosures(old: HTMLElement, fresh: HTMLElement): void {
  const before = [...old.querySelectorAll("details")].map((d) => d.open);
  if (old instanceof HTMLDetailsElement) before.unshift(old.open);
  const after = [...fresh.querySelectorAll("details")];
  if (fresh instanceof HTMLDetailsElement) after.unshift(fresh);
  after.forEach((d, i) => (d.open = before[i] ?? d.open));
}

/** The element of `fresh` that plays `focused`'s part in the node it replaces (same button), if enabled. */
function counterpart(focused: HTMLElement, fresh: HTMLElement): HTMLElement | null {
  for (const key of ["data-decision", "data-fence", "data-option", "data-cite"]) {
    const value = focused.getAttribute(key);
    if (value === null) continue;
    const match = [...fresh.querySelectorAll<HTMLElement>(`[${key}]`)].find((e) => e.getAttribute(key) === value);
    return match && !(match as HTMLButtonElement).disabled ? match : null;
  }
  return null;
}
