// Shared by the attack pages on Hearth's own UI: what the page's listeners observe. Every key,
// text, clipboard and selection event the page sees on window and document (capture phase,
// registered before anything else of the page's) goes into window.__seen, as "type:detail".
window.__seen = [];
const TYPES = ["keydown", "keypress", "keyup", "beforeinput", "input", "textInput", "paste", "copy", "cut", "compositionend", "selectionchange", "selectstart"];
function record(target) {
  for (const type of TYPES) {
    target.addEventListener(type, (e) => {
      const detail = e.key ?? e.data ?? (type === "selectionchange" ? String(getSelection()) : "");
      __seen.push(`${type}:${detail}`);
    }, true);
  }
}
record(window);
record(document);
/** The keys the page saw, joined: what a keylogger would have. */
window.__typed = () => __seen.filter((s) => s.startsWith("keydown:")).map((s) => s.slice(8)).filter((k) => k.length === 1).join("");
