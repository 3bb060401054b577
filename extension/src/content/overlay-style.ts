// The overlay's stylesheet, scoped by the shadow root. `:host { all: initial }` keeps page CSS out.

export const OVERLAY_CSS = `
:host { all: initial; position: fixed; right: 16px; bottom: 16px; z-index: 2147483647;
  font: 14px/1.4 system-ui, sans-serif; color-scheme: light dark; }
* { box-sizing: border-box; }
.launcher { width: 44px; height: 44px; border-radius: 50%; border: none; cursor: pointer;
  background: #c2410c; color: #fff; font: 600 18px system-ui, sans-serif; box-shadow: 0 2px 8px rgb(0 0 0 / .3); }
.launcher:focus-visible, button:focus-visible { outline: 3px solid #2563eb; outline-offset: 2px; }
.panel { position: absolute; right: 0; bottom: 56px; width: min(380px, calc(100vw - 32px));
  max-height: min(560px, calc(100vh - 96px)); overflow: auto; padding: 12px 14px; border-radius: 12px;
  background: Canvas; color: CanvasText; border: 1px solid rgb(128 128 128 / .35); box-shadow: 0 8px 28px rgb(0 0 0 / .25); }
.panel[hidden] { display: none; }
header { display: flex; align-items: center; justify-content: space-between; }
h2 { margin: 0; font-size: 16px; }
.close { border: none; background: none; color: inherit; font-size: 20px; cursor: pointer; }
.status { margin: 8px 0; }
dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 10px; margin: 8px 0; font-size: 12px; }
dt { opacity: .7; }
dd { margin: 0; }
.values { font: 12px ui-monospace, monospace; background: rgb(128 128 128 / .12); padding: 8px; border-radius: 6px; }
.caption { font-size: 12px; opacity: .7; margin: 4px 0; }
.self-test.bad, .error { color: #dc2626; }
.output { border-top: 1px solid rgb(128 128 128 / .3); margin-top: 8px; padding-top: 8px; }
.output[hidden], .ask[hidden] { display: none; }
.reply { white-space: pre-wrap; margin: 0 0 4px; }
.stats { font-size: 12px; opacity: .7; margin: 0; }
.ask { display: flex; gap: 6px; margin-top: 8px; }
.ask textarea { flex: 1; font: inherit; resize: vertical; padding: 6px; border-radius: 6px;
  border: 1px solid rgb(128 128 128 / .5); background: Field; color: FieldText; }
.ask button { border: none; border-radius: 6px; padding: 0 12px; background: #c2410c; color: #fff; cursor: pointer; }
.ask button:disabled { opacity: .5; cursor: default; }
@media (prefers-reduced-motion: no-preference) { .panel { transition: opacity .15s; } }
`;
