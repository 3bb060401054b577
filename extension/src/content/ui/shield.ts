// Keeps what people type in the overlay away from the page. Events from inside the closed shadow
// root reach the page's listeners retargeted to the host element, capture phase included: the
// content script runs at document_start, so the shield's capture listeners on `window` are the
// first any page can have, and they stop every such event there (stopImmediatePropagation: no page
// listener on window or document, capture or bubble, sees it). That also keeps it from the
// overlay's own listeners, so the overlay registers its handlers for these types here instead.
// Nothing is prevented: typing still types. Cheap on every page: one identity check per event.

/** The events that carry keystrokes, text, clipboard contents or focus. */
export const SHIELDED_EVENTS = [
  "keydown",
  "keyup",
  "keypress",
  "beforeinput",
  "input",
  "textInput",
  "paste",
  "copy",
  "cut",
  "compositionstart",
  "compositionupdate",
  "compositionend",
  "focusin",
  "focusout",
  "focus",
  "blur",
  "select",
  "selectstart",
  "selectionchange",
] as const;

export type ShieldedEvent = (typeof SHIELDED_EVENTS)[number];

/** `target`: the element inside the shadow root the event is for (the focused one), if any. */
export type ShieldHandler = (event: Event, target: Element | null) => void;

export interface Shield {
  /** The host element and shadow root whose events are shielded (one per page). */
  guard(host: Element, shadow: ShadowRoot): void;
  /** Runs `handler` for trusted `type` events from inside the shadow root; returns its removal. */
  on(type: ShieldedEvent, handler: ShieldHandler): () => void;
}

export function installShield(target: Window = window): Shield {
  let host: Element | null = null;
  let shadow: ShadowRoot | null = null;
  const handlers = new Map<string, Set<ShieldHandler>>();

  const listener = (event: Event) => {
    if (host === null || event.target !== host) return;
    event.stopImmediatePropagation();
    // Only what the person did: a page can dispatch events at the host, never inside it.
    if (!event.isTrusted) return;
    const list = handlers.get(event.type);
    if (!list?.size) return;
    const inner = shadow?.activeElement ?? null;
    for (const handler of [...list]) {
      try {
        handler(event, inner);
      } catch (error) {
        console.error(error);
      }
    }
  };
  for (const type of SHIELDED_EVENTS) target.addEventListener(type, listener, { capture: true });

  return {
    guard(h, s) {
      host = h;
      shadow = s;
    },
    on(type, handler) {
      let list = handlers.get(type);
      if (!list) handlers.set(type, (list = new Set()));
      list.add(handler);
      return () => list.delete(handler);
    },
  };
}
