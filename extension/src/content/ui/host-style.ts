// The stylesheet of what the content script draws on the page, inside the host's closed shadow
// root: the launcher, the frame that holds Hearth's chat page, and the outlines. Page CSS cannot
// reach inside; the host's own box is set inline with !important (overlay-host.ts). Colours are
// set on the shadow root's top-level elements rather than on :host, where a page's
// `hearth-overlay { … }` rule would win over them.

export const HOST_CSS = `
:host { all: initial; position: fixed; right: 16px; bottom: 16px; z-index: 2147483647; }
:host > * { color-scheme: light; --accent: #c2410c; --accent-hover: #9a3412; --accent-fg: #fff; --danger: #b91c1c;
  --focus: #2563eb; --line: rgb(120 113 108 / .32); }
@media (prefers-color-scheme: dark) {
  :host > * { color-scheme: dark; --accent: #ea580c; --accent-hover: #f97316; --danger: #f87171; --focus: #60a5fa;
    --line: rgb(168 162 158 / .3); }
}
[hidden] { display: none !important; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }

.launcher { position: relative; width: 44px; height: 44px; border-radius: 50%; border: none; cursor: pointer;
  background: var(--accent); color: var(--accent-fg); font: 600 18px system-ui, sans-serif;
  box-shadow: 0 2px 8px rgb(0 0 0 / .3); }
.launcher:hover { background: var(--accent-hover); }
.launcher[data-attention="needs-you"]::after { content: "!"; position: absolute; top: -4px; right: -4px;
  width: 18px; height: 18px; border-radius: 50%; background: var(--danger); color: #fff;
  font: 700 12px/18px system-ui, sans-serif; }

.chat-frame { position: absolute; right: 0; bottom: 56px; display: block; margin: 0; padding: 0;
  width: min(420px, calc(100vw - 32px)); height: min(640px, calc(100vh - 96px)); border: 1px solid var(--line);
  border-radius: 12px; box-shadow: 0 8px 28px rgb(0 0 0 / .28); background: transparent; color-scheme: normal; }

.target-outline, .passage-outline { position: fixed; left: 0; top: 0; width: 0; height: 0; pointer-events: none; box-sizing: border-box;
  border: 3px solid var(--focus); border-radius: 4px; box-shadow: 0 0 0 2px rgb(255 255 255 / .8); }
.passage-outline { border-color: #d4a20b; background: rgb(255 229 138 / .25); }
.point-marker { position: fixed; width: 18px; height: 18px; margin: -9px 0 0 -9px; border-radius: 50%; pointer-events: none;
  border: 3px solid #d93025; box-shadow: 0 0 0 2px #fff; background: rgb(217 48 37 / .25); }

@media (prefers-reduced-motion: no-preference) {
  .launcher[data-attention="running"] { animation: hearth-pulse 1.6s ease-in-out infinite; }
  .launcher { transition: background-color .12s; }
}
@keyframes hearth-pulse { 0%, 100% { box-shadow: 0 2px 8px rgb(0 0 0 / .3), 0 0 0 0 rgb(234 88 12 / .5); }
  50% { box-shadow: 0 2px 8px rgb(0 0 0 / .3), 0 0 0 8px rgb(234 88 12 / 0); } }
@media (forced-colors: active) { .launcher { border: 1px solid ButtonText; } }
`;
