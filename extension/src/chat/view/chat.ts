// The chat, one component mounted in two places: the overlay's closed shadow root on the page
// (content/overlay.ts) and the side panel (sidepanel/sidepanel.ts), both through live-chat.ts, a
// view of the conversation the service worker owns. It lays the panel out (panel.ts), draws the
// transcript (transcript-view.ts), the state around it (task-state.ts) and the engine
// (engine-view.ts), and opens the settings. What its controls do is given (`handlers`,
// `actions`); where the conversation comes from too (`transcript`, `status`).

import type { EngineStatus } from "../../generated/protocol";
import { loadSettings } from "../../shared/settings";
import type { CardActions } from "./cards";
import type { Listen } from "./composer";
import { buildPanel, type Panel, type PanelHandlers } from "./panel";
import { showTaskState } from "./task-state";
import { TranscriptView } from "./transcript-view";
import type { Touched, Transcript } from "../transcript";

/** Where the chat is mounted. */
export type Surface = "overlay" | "panel";

export interface ChatOptions {
  surface: Surface;
  handlers: PanelHandlers;
  actions: CardActions;
  /** Registers a handler for keyboard, input and focus events inside the chat. */
  listen: Listen;
  /** Where the focused element is read (the shadow root the chat is in). */
  root: DocumentOrShadowRoot;
  /** The state mirror of test builds (an object nobody sees in release builds). */
  data: DOMStringMap;
  /** The site "Turn off on this site" names. */
  site: string;
  isOpen(): boolean;
  transcript(): Transcript;
  status(): EngineStatus;
}

export interface Chat extends Panel {
  view: TranscriptView;
  /** Records what changed in the transcript; the DOM follows shortly. */
  commit(touched: Touched): void;
  /** Draws the marked entries now. */
  flush(): void;
  /** Draws every entry anew (another transcript took the place of the one shown). */
  redrawAll(): void;
  /** The state around the transcript: composer mode, Stop/Continue, usage. */
  updateChrome(): void;
  /** The engine's state, as `status()` says. */
  renderEngine(): void;
  showSettings(show: boolean): void;
  /** Moves focus to the card `entryId` waits on (its Deny or first option), else the composer. */
  focusCard(entryId: number | undefined): void;
}

export function createChat(options: ChatOptions): Chat {
  const { data, root } = options;
  const parts = buildPanel(options.handlers, options.listen, options.site, options.surface);
  const { panel, settingsView, chat, settingsToggle, composer, saved, form, engine } = parts;
  if (options.surface === "panel") {
    // The side panel is the chat itself: always open, closed by the browser.
    parts.close.hidden = true;
    panel.hidden = false;
    panel.classList.add("side");
  }
  const engineReady = () => {
    const status = options.status();
    return status.state === "ready" && status.model !== null;
  };
  const view = new TranscriptView({
    log: parts.log,
    empty: parts.empty,
    root,
    focusComposer: () => composer.focus(),
    isOpen: options.isOpen,
    transcript: options.transcript,
    actions: options.actions,
  });

  function updateChrome(): void {
    const { continueButton, log, empty, usage } = parts;
    showTaskState({ data, composer, continueButton, log, empty, usage }, options.transcript(), engineReady(), options.status());
  }

  function showSettings(show: boolean): void {
    settingsView.hidden = !show;
    chat.hidden = show;
    data.view = show ? "settings" : "chat";
    settingsToggle.setAttribute("aria-expanded", String(show));
    saved.textContent = "";
    if (show) {
      if (form) void loadSettings().then((s) => form.show(s));
      settingsView.querySelector<HTMLElement>("select, input, button")?.focus();
    } else {
      composer.focus();
    }
  }
  settingsToggle.addEventListener("click", () => showSettings(settingsView.hidden));

  return {
    ...parts,
    view,
    commit(touched) {
      view.mark(touched);
      updateChrome();
      view.schedule();
    },
    flush: () => view.flush(),
    redrawAll() {
      view.redraw();
      updateChrome();
      view.scrollToEnd();
    },
    updateChrome,
    renderEngine: () => engine.render(options.status(), data),
    showSettings,
    focusCard(entryId) {
      if (!settingsView.hidden) showSettings(false);
      view.flush();
      const node = entryId === undefined ? undefined : view.node(entryId);
      const target = node?.querySelector<HTMLElement>('button[data-decision="deny"], button.option') ?? composer.textarea;
      // The card from its top (its buttons are sticky), not scrolled down to the focused button.
      if (node) view.reveal(node);
      target.focus({ preventScroll: node !== undefined });
    },
  };
}
