// Waiting on the page without fixed sleeps: a MutationObserver over the document, its open shadow
// roots and same-origin frames (an observer on the document sees neither).

import { ToolFailure } from "./errors";
import { allRoots } from "./flat-tree";

const OBSERVED: MutationObserverInit = { subtree: true, childList: true, attributes: true, characterData: true };

/** Changes to our own overlay's host (its data-* mirror) are not the page moving. */
const pageChanged = (records: MutationRecord[]) => records.some((r) => r.target.nodeName !== "HEARTH-OVERLAY");

/** What an action on `el` may change besides the DOM: where the page is, and the element's own
 * state (properties, which the DOM observer does not see); with `scroll`, the scroll of the page
 * and of the element (left out for a click, which scrolls the element into view itself). */
function stateOf(el: Element, scroll: boolean): string {
  const field = el as Partial<HTMLInputElement & HTMLSelectElement>;
  const scrolled = scroll ? [window.scrollX, window.scrollY, el.scrollTop, el.scrollLeft] : [];
  return JSON.stringify([location.href, field.checked, field.value, field.selectedIndex, ...scrolled]);
}

/**
 * Starts watching what an action on `el` changes; the returned function stops and tells whether
 * anything did (the DOM of the page, its open shadow roots and same-origin frames, the URL, the
 * element's value or checked state). Call it after the page settled.
 */
export function watchChanges(el: Element, { scroll = false } = {}): () => boolean {
  let mutated = false;
  // An attribute set to the value it had is no change.
  const changes = (records: MutationRecord[]) =>
    pageChanged(records.filter((r) => r.type !== "attributes" || (r.target as Element).getAttribute(r.attributeName ?? "") !== r.oldValue));
  const observer = new MutationObserver((records) => {
    if (changes(records)) mutated = true;
  });
  for (const root of allRoots()) observer.observe(root, { ...OBSERVED, attributeOldValue: true });
  const before = stateOf(el, scroll);
  return () => {
    if (changes(observer.takeRecords())) mutated = true;
    observer.disconnect();
    return mutated || stateOf(el, scroll) !== before;
  };
}

/**
 * Resolves once the page has gone `quietMs` without DOM changes, after `maxMs` at most, or when
 * `signal` aborts (the action already happened; only the wait is cut short).
 */
export function settle(signal: AbortSignal, quietMs = 250, maxMs = 3000): Promise<void> {
  return new Promise((resolve) => {
    let quiet = setTimeout(() => finish(), quietMs);
    const cap = setTimeout(() => finish(), maxMs);
    const observer = new MutationObserver((records) => {
      if (!pageChanged(records)) return;
      clearTimeout(quiet);
      quiet = setTimeout(() => finish(), quietMs);
    });
    const finish = () => {
      clearTimeout(quiet);
      clearTimeout(cap);
      observer.disconnect();
      signal.removeEventListener("abort", finish);
      resolve();
    };
    for (const root of allRoots()) observer.observe(root, OBSERVED);
    signal.addEventListener("abort", finish, { once: true });
    if (signal.aborted) finish();
  });
}

/**
 * Calls `check` after DOM changes (at most every 100 ms, and every 500 ms regardless, which also
 * covers roots that appear later) until it returns a value. Resolves to undefined after
 * `timeoutMs`; rejects with a ToolFailure when `signal` aborts.
 */
export function waitUntil<T>(check: () => T | undefined, timeoutMs: number, signal: AbortSignal): Promise<T | undefined> {
  const first = check();
  if (first !== undefined) return Promise.resolve(first);
  return new Promise((resolve, reject) => {
    let pending: ReturnType<typeof setTimeout> | undefined;
    const observer = new MutationObserver((records) => {
      if (pageChanged(records)) pending ??= setTimeout(run, 100);
    });
    const poll = setInterval(() => run(), 500);
    const deadline = setTimeout(() => finish(undefined), timeoutMs);
    const onAbort = () => {
      stop();
      reject(new ToolFailure("Stopped waiting: the task was cancelled."));
    };
    function run() {
      pending = undefined;
      const found = check();
      if (found !== undefined) finish(found);
    }
    function finish(value: T | undefined) {
      stop();
      resolve(value);
    }
    function stop() {
      clearTimeout(pending);
      clearInterval(poll);
      clearTimeout(deadline);
      observer.disconnect();
      signal.removeEventListener("abort", onAbort);
    }
    for (const root of allRoots()) observer.observe(root, OBSERVED);
    signal.addEventListener("abort", onAbort, { once: true });
    if (signal.aborted) onAbort();
  });
}
