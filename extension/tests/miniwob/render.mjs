// Tool outputs as the model reads them, mirroring crates/agent: `Snapshot::render` and `one_line`
// (src/page.rs), and `Session::format_output` (src/session.rs: the "Page:" header, the fence around
// page content, "Error: " before a failure). Keep in step with those; tests/e2e/miniwob.test.mjs pins the format.

/** Attributes worth showing the model (others only feed the policy). */
export const SHOWN_ATTRIBUTES = ["type", "placeholder", "aria-label", "name", "value", "href", "checked", "selected", "expanded"];

export const FENCE_OPEN = "<<<UNTRUSTED PAGE CONTENT";
export const FENCE_CLOSE = "<<<END UNTRUSTED PAGE CONTENT>>>";

/** Rust's `split_whitespace` splits on Unicode White_Space; JavaScript's `\s` differs (U+FEFF, U+0085). */
const WHITE_SPACE = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/u;

/** Whitespace collapsed, `"` turned into `'`, cut to `max` characters with an ellipsis. */
export function oneLine(s, max) {
  const collapsed = s.split(WHITE_SPACE).filter(Boolean).join(" ").replaceAll('"', "'");
  const chars = Array.from(collapsed);
  return chars.length <= max ? collapsed : `${chars.slice(0, max - 1).join("")}…`;
}

/**
 * `[12] button "Place order" type="submit"` lines, one per element, indented by depth; elements
 * whose index was not in `previous` (a Set of indices) are marked `*[13]`.
 */
export function renderSnapshot(snapshot, previous) {
  let out = "";
  for (const e of snapshot.elements) {
    out += "  ".repeat(Math.min(e.depth ?? 0, 8));
    if (previous && !previous.has(e.index)) out += "*";
    out += `[${e.index}] ${e.role ?? e.tag}`;
    const text = oneLine(e.text ?? "", 80);
    if (text !== "") out += ` "${text}"`;
    for (const [k, v] of e.attributes ?? []) {
      if (SHOWN_ATTRIBUTES.includes(k) && v !== "" && !(k === "type" && v === e.tag)) out += ` ${k}="${oneLine(v, 60)}"`;
    }
    out += "\n";
  }
  return out;
}

export function neutralizeSpecialTokens(text) {
  if (!text.includes("<|") && !text.includes("|>") && !text.includes("<eos>") && !text.includes("<bos>")) return text;
  return text.replaceAll("<|", "<\u200B|").replaceAll("|>", "|\u200B>").replaceAll("<eos>", "<\u200Beos>").replaceAll("<bos>", "<\u200Bbos>");
}

export function fenceUntrusted(source, content) {
  const body = neutralizeSpecialTokens(content).replaceAll("<<<", "<\u200B<<");
  const src = neutralizeSpecialTokens(source).replaceAll(">>>", ">\u200B>>");
  return `${FENCE_OPEN} from ${src}>>>\n${body}\n${FENCE_CLOSE}`;
}

/**
 * What the model sees for one tool call, as `Session::format_output` builds it (without the token
 * budget's truncation, which these small pages never reach). `state.latest` holds the previous
 * snapshot's indices between calls, `state.passage` the last passage's number. `result` is
 * `{ output }` or `{ error }`.
 */
export function formatResult(result, state) {
  if (result.error !== undefined) return `Error: ${neutralizeSpecialTokens(result.error)}`;
  const output = result.output;
  if (output.snapshot) {
    const body = `Page: ${output.snapshot.page.title} — ${output.snapshot.page.url}\n${renderSnapshot(output.snapshot, state.latest)}`;
    state.latest = new Set(output.snapshot.elements.map((e) => e.index));
    return fenceUntrusted(output.snapshot.page.url, body);
  }
  // Passages are numbered on across the episode, as the agent numbers them.
  let text = output.text;
  for (const item of output.passages?.items ?? []) {
    state.passage = (state.passage ?? 0) + 1;
    text += `\n[${state.passage}] ${item}`;
  }
  if (output.from_page) return fenceUntrusted(output.page?.url ?? "the page", text);
  return neutralizeSpecialTokens(text);
}
