// The chat's stylesheet (Hearth's chat page, sidepanel.html: in the side panel and in the
// overlay's frame), scoped by the page's shadow root. The fonts and colours are set on the shadow
// root's top-level elements. Light and dark themes follow prefers-color-scheme; animations only
// run when the user has not asked for reduced motion. (What the content script draws on the page,
// the launcher, the frame and the outlines, has its own: content/ui/host-style.ts.)

export const OVERLAY_CSS = `
:host { all: initial; position: fixed; right: 16px; bottom: 16px; z-index: 2147483647; }
:host > * { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "PingFang SC", "Microsoft YaHei", sans-serif;
  color-scheme: light; --bg: #fffdfa; --fg: #1c1917; --muted: #57534e; --line: rgb(120 113 108 / .32);
  --card: #f5f5f4; --user: #ffedd5; --accent: #c2410c; --accent-hover: #9a3412; --accent-fg: #fff;
  --danger: #b91c1c; --ok: #15803d; --warn: #b45309; --focus: #2563eb; --code: rgb(120 113 108 / .16); }
@media (prefers-color-scheme: dark) {
  :host > * { color-scheme: dark; --bg: #1c1917; --fg: #f5f5f4; --muted: #a8a29e; --line: rgb(168 162 158 / .3);
    --card: #292524; --user: #431407; --accent: #ea580c; --accent-hover: #f97316; --danger: #f87171;
    --ok: #4ade80; --warn: #fbbf24; --focus: #60a5fa; --code: rgb(168 162 158 / .18); }
}
* { box-sizing: border-box; }
[hidden] { display: none !important; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
button { font: inherit; color: inherit; cursor: pointer; }
button:disabled { cursor: default; opacity: .55; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }

.panel { position: absolute; right: 0; bottom: 56px; display: flex; flex-direction: column;
  width: min(420px, calc(100vw - 32px)); height: min(640px, calc(100vh - 96px)); border-radius: 12px;
  background: var(--bg); color: var(--fg); border: 1px solid var(--line); box-shadow: 0 8px 28px rgb(0 0 0 / .28);
  overflow: hidden; }
header { display: flex; align-items: center; justify-content: space-between; padding: 8px 10px 6px 14px;
  border-bottom: 1px solid var(--line); }
h2 { margin: 0; font-size: 16px; }
h3 { margin: 0 0 6px; font-size: 14px; }
.header-buttons { display: flex; gap: 2px; }
.panel.side { position: static; width: 100%; height: 100vh; border: none; border-radius: 0; box-shadow: none; }
.side-notice { margin: 0; padding: 16px 14px; }
.focus-taken { margin: 0; padding: 6px 14px; border-top: 1px solid var(--line); color: var(--warn); font-weight: 600; font-size: 12.5px; }
.settings, .close, .to-side-panel { width: 32px; height: 32px; border: none; border-radius: 6px; background: none; font-size: 18px; }
.settings:hover, .close:hover, .to-side-panel:hover, .settings[aria-expanded="true"] { background: var(--code); }

.engine { padding: 6px 14px; border-bottom: 1px solid var(--line); font-size: 12px; color: var(--muted); }
.engine[data-state="ready"] .status { color: var(--fg); }
.status { margin: 0; }
.engine .loading { width: 100%; height: 6px; margin: 6px 0 2px; accent-color: var(--accent); }
.engine .error { color: var(--danger); margin: 6px 0 2px; overflow-wrap: anywhere; }
.engine .fix { margin: 2px 0 6px; color: var(--fg); }
.engine[data-state="needs_model"] .status, .engine[data-state="installing"] .status, .engine[data-state="loading"] .status { color: var(--fg); font-weight: 600; }
.engine .offer { margin: 6px 0 2px; color: var(--fg); font-size: 13px; }
.engine .download { width: 100%; height: 8px; margin: 6px 0 2px; accent-color: var(--accent); }
.engine .download-amounts, .engine .download-rate, .engine .download-file { margin: 2px 0; }
.engine .download-amounts { color: var(--fg); font-variant-numeric: tabular-nums; }
.download-model { margin: 6px 0 4px; border: 1px solid var(--accent); border-radius: 6px; padding: 5px 12px;
  background: var(--accent); color: var(--accent-fg); font-weight: 600; }
.download-model:hover:not(:disabled) { background: var(--accent-hover); }
.download-model:disabled { opacity: .6; }
.use-own-file { margin: 6px 0 4px 6px; border: 1px solid var(--accent); border-radius: 6px; padding: 5px 12px;
  background: transparent; color: var(--fg); }
.use-own-file:hover { background: var(--code); }
.engine .model-unverified { margin: 4px 0; color: var(--fg); }
.engine-details summary { cursor: pointer; margin-top: 2px; }
dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 10px; margin: 6px 0; }
dt { opacity: .75; }
dd { margin: 0; overflow-wrap: anywhere; }
.values { font: 11px ui-monospace, monospace; background: var(--code); padding: 6px; border-radius: 6px; overflow: auto; }
.caption { margin: 4px 0; }
.self-test.bad, .error { color: var(--danger); }

.chat { display: flex; flex-direction: column; flex: 1; min-height: 0; }
.empty { padding: 16px 14px 0; }
.empty p { margin: 0 0 6px; }
.transcript { flex: 1; overflow-y: auto; padding: 8px 14px; overscroll-behavior: contain; }
.transcript:focus-visible { outline-offset: -3px; }
.meta { margin: 4px 0 0; font-size: 12px; color: var(--muted); }
.msg { margin: 8px 0; overflow-wrap: anywhere; }
.msg.user { display: flex; flex-direction: column; align-items: flex-end; }
.msg.user .bubble { max-width: 88%; padding: 6px 10px; border-radius: 12px 12px 2px 12px; background: var(--user); }
.msg.user.queued .bubble { opacity: .7; }
.msg > :first-child, .bubble > :first-child { margin-top: 0; }
.msg > :last-child, .bubble > :last-child { margin-bottom: 0; }
.msg p { margin: 0 0 .55em; }
.msg h3, .msg h4, .msg h5, .msg h6 { margin: .7em 0 .35em; font-size: 14px; }
.msg ul, .msg ol { margin: 0 0 .55em; padding-left: 1.4em; }
.msg blockquote { margin: 0 0 .55em; padding-left: 8px; border-left: 3px solid var(--line); color: var(--muted); }
.msg code, .card code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, monospace; background: var(--code);
  padding: 1px 4px; border-radius: 4px; }
.msg pre, .card pre { margin: 0 0 .55em; padding: 8px; border-radius: 6px; background: var(--code); overflow: auto;
  max-height: 240px; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre; }
.msg pre code { background: none; padding: 0; }
.card pre { white-space: pre-wrap; overflow-wrap: anywhere; }
.msg a { color: var(--focus); }
.msg hr { border: none; border-top: 1px solid var(--line); }
.result.unsuccessful { border-left: 3px solid var(--warn); padding-left: 8px; }

.thinking { margin: 6px 0; font-size: 12.5px; color: var(--muted); }
.thinking summary { cursor: pointer; }
.thinking-text { white-space: pre-wrap; padding: 4px 0 0 12px; border-left: 2px solid var(--line); max-height: 200px; overflow: auto; }

.card { margin: 8px 0; padding: 8px 10px; border-radius: 8px; background: var(--card); border: 1px solid var(--line); }
.card-head { display: flex; align-items: baseline; justify-content: space-between; gap: 8px; }
.tool-status { font-size: 12px; color: var(--muted); white-space: nowrap; }
.tool.ok .tool-status { color: var(--ok); }
.tool.failed .tool-status { color: var(--danger); }
.tool.running .tool-status::before { content: "◌ "; display: inline-block; }
.tool-args { margin: 4px 0 0; font: 12px ui-monospace, monospace; color: var(--muted); overflow-wrap: anywhere; }
.tool-details summary { cursor: pointer; font-size: 12px; color: var(--muted); margin-top: 4px; }
.label { margin: 6px 0 2px; font-size: 12px; font-weight: 600; }
.error-card { border-color: var(--danger); }
.error-card .error { margin: 0; overflow-wrap: anywhere; }
.notice { margin: 8px 0; font-size: 12px; color: var(--muted); text-align: center; }

.confirm { border: 2px solid var(--warn); }
.confirm.risk-high, .confirm.risk-critical { border-color: var(--danger); }
.confirm:focus-within { box-shadow: 0 0 0 3px rgb(37 99 235 / .25); }
.badge { display: inline-block; margin: 0 0 4px; padding: 0 6px; border-radius: 10px; font-size: 11px; font-weight: 600;
  background: var(--code); }
.badge.risk-medium { color: var(--warn); }
.badge.risk-high, .badge.risk-critical, .badge.bad { color: var(--danger); }
.risk { margin: 0; }
.action { margin: 4px 0; overflow-wrap: anywhere; font-size: 12.5px; }
.reasons { margin: 0 0 6px; padding-left: 1.3em; }
.confirm h3 { overflow-wrap: anywhere; }
.confirm .message { margin: 0 0 6px; }
.target-destination, .target-text { margin: 4px 0; overflow-wrap: anywhere; font-size: 12.5px; }
.target-destination .sign, .target-text .sign { color: var(--muted); }
.target-destination .site { font-weight: 600; }
.target-destination .show-address { font-size: 11.5px; padding: 0 6px; }
.address-warning { margin: 4px 0; font-size: 12.5px; color: var(--danger); overflow-wrap: anywhere; }
.full-address { display: block; margin: 4px 0; font-size: 11.5px; overflow-wrap: anywhere; white-space: pre-wrap; }
.full-address[hidden] { display: none; }
.target-text .typed { font: 12.5px ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap; }
.card pre.code { max-height: 320px; white-space: pre; overflow-wrap: normal; }
.tool-thumbnail { display: block; max-width: 100%; max-height: 160px; margin-top: 6px; border: 1px solid var(--border, #ccc); border-radius: 4px; }
.cite { display: inline-block; min-width: 1.4em; padding: 0 4px; margin: 0 1px; border: 1px solid var(--line); border-radius: 9px;
  background: var(--bg); font-size: 11px; line-height: 16px; vertical-align: baseline; text-align: center; }
button.cite { cursor: pointer; color: var(--accent, inherit); }
.cite.unverified { border-style: dashed; color: var(--muted); text-decoration: line-through dotted; }
.sources { font-size: 12.5px; color: var(--muted); margin: 4px 0; }
.sources ol { margin: 4px 0; padding-left: 2.2em; }
.sources .source-url { margin: 2px 0; overflow-wrap: anywhere; }
.actions, .options { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 6px; }
/* A card taller than the transcript shows from its top (what is asked) with its buttons kept in view. */
/* (bottom −8px: over the transcript's own padding, where the text below would show.) */
.card:not([data-decision]) > .actions { position: sticky; bottom: -8px; padding: 4px 0 12px; background: var(--card); }
.decision, .option, .continue, .retry, .clear, .disable-site, .send, .stop { border: 1px solid var(--line);
  border-radius: 6px; padding: 5px 10px; background: var(--bg); }
.decision:hover:not(:disabled), .option:hover:not(:disabled), .continue:hover, .retry:hover, .clear:hover,
  .disable-site:hover { border-color: var(--accent); }
.decision[aria-pressed="true"], .option[aria-pressed="true"] { border-color: var(--accent); font-weight: 600; opacity: 1; }
.decision.deny { font-weight: 600; }
.danger { color: var(--danger); }

.taskbar { display: flex; align-items: center; justify-content: space-between; gap: 8px; padding: 0 14px; }
.usage { margin: 0; font-size: 11.5px; color: var(--muted); font-variant-numeric: tabular-nums; }
.taskbar:has(.usage:empty):has(.continue[hidden]) { display: none; }
.continue { margin: 4px 0; border-color: var(--accent); }
.composer-row { display: flex; flex-wrap: wrap; gap: 6px; padding: 8px 10px 10px; border-top: 1px solid var(--line); }
.selection { flex-basis: 100%; display: flex; align-items: flex-start; gap: 6px; }
.selection[hidden] { display: none; }
.selection-text { flex: 1; margin: 0; padding-left: 8px; border-left: 3px solid var(--line); color: var(--muted); max-height: 5.2em; overflow: auto; white-space: pre-wrap; }
.msg .selection-text { margin: 0 0 .55em; max-height: none; }
.selection-remove { border: none; background: none; color: var(--muted); cursor: pointer; font-size: 1.1em; line-height: 1; padding: 0 4px; }
.tab-chips, .attached-tabs { flex-basis: 100%; display: flex; flex-wrap: wrap; gap: 4px; margin: 0; }
.tab-chips[hidden], .tab-chooser[hidden] { display: none; }
.msg .attached-tabs { margin: 0 0 .55em; }
.tab-chip { display: inline-flex; align-items: center; gap: 4px; max-width: 100%; padding: 2px 6px; border: 1px solid var(--line);
  border-radius: 12px; font-size: 12px; color: var(--muted); }
.tab-chip-title, .tab-choice-title { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.tab-chip-remove { border: none; background: none; color: var(--muted); cursor: pointer; padding: 0 2px; }
.tab-icon { flex: none; width: 16px; height: 16px; }
.tab-chooser { flex-basis: 100%; border: 1px solid var(--line); border-radius: 8px; padding: 6px 8px; background: var(--card); }
.tab-chooser-title { margin: 0 0 4px; font-weight: 600; font-size: 12px; }
.tab-choices { display: flex; flex-direction: column; gap: 2px; max-height: 12em; overflow: auto; }
.tab-choice { display: grid; grid-template-columns: auto auto 1fr; align-items: center; gap: 6px; padding: 2px 0; cursor: pointer; }
.tab-choice-site { grid-column: 3; font-size: 11.5px; color: var(--muted); }
.tabs-button, .tabs-done { border: 1px solid var(--line); border-radius: 6px; background: transparent; color: inherit; cursor: pointer; padding: 4px 8px; }
.tabs-done { margin-top: 4px; }
.composer { flex: 1; min-height: 40px; max-height: 160px; font: inherit; resize: none; padding: 7px 9px;
  border-radius: 8px; border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
.composer-buttons { display: flex; flex-direction: column; gap: 4px; }
.send { background: var(--accent); border-color: var(--accent); color: var(--accent-fg); font-weight: 600; }
.send:hover { background: var(--accent-hover); }
.stop { color: var(--danger); }
.mic { border: 1px solid var(--line); border-radius: 6px; background: transparent; color: inherit; cursor: pointer; padding: 4px 8px; display: flex; align-items: center; justify-content: center; }
.mic.on { background: var(--danger); border-color: var(--danger); color: #fff; }
.recording { display: flex; align-items: center; gap: 8px; width: 100%; font-size: 12px; }
.recording[hidden] { display: none; }
.rec-dot { width: 8px; height: 8px; border-radius: 50%; background: var(--danger); }
.level { flex: 1; height: 6px; border-radius: 3px; background: var(--line); overflow: hidden; }
.level-bar { display: block; height: 100%; width: 0; background: var(--accent); }
.rec-cancel { border: 0; background: transparent; cursor: pointer; font: inherit; color: inherit; }
.voice-message { display: flex; align-items: center; gap: 6px; margin: 0; }
.voice-play { border: 1px solid var(--line); border-radius: 50%; width: 24px; height: 24px; background: transparent; cursor: pointer; color: inherit; }

.settings-view { flex: 1; overflow-y: auto; padding: 12px 14px; }
.settings-form .field { margin: 0 0 12px; }
.settings-form label { display: block; font-weight: 600; margin-bottom: 3px; }
.settings-form .check { display: grid; grid-template-columns: auto 1fr; gap: 0 8px; align-items: center; }
.settings-form .check label { margin: 0; }
.settings-form .check .help { grid-column: 2; }
.settings-form select, .settings-form input[type="number"] { font: inherit; padding: 4px 6px; border-radius: 6px;
  border: 1px solid var(--line); background: var(--bg); color: var(--fg); min-width: 8em; }
.help { margin: 3px 0 0; font-size: 12px; color: var(--muted); }
.settings-actions { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 8px; }

@media (prefers-reduced-motion: no-preference) {
  .panel:not([hidden]) { animation: hearth-open .16s ease-out; }
  .tool.running .tool-status::before { animation: hearth-spin 1s linear infinite; }
  .decision, .option, .send { transition: background-color .12s, border-color .12s; }
}
@keyframes hearth-open { from { opacity: 0; transform: translateY(8px); } to { opacity: 1; transform: none; } }
@keyframes hearth-spin { to { transform: rotate(360deg); } }
@media (forced-colors: active) { .send { border: 1px solid ButtonText; } }
`;
