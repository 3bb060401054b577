// A small, safe Markdown renderer for the model's answers. Text is parsed into a tree and built
// with DOM calls: no innerHTML, no HTML passthrough (a `<script>` in an answer is shown as text),
// links only to http(s) and opened with rel=noopener in a new tab.
//
// Supported: paragraphs (single newlines are line breaks), # headings, **bold**, *em* / _em_,
// `code`, ``` fenced code blocks, - / * / + and 1. lists (nested by indentation), > quotes, ---,
// [links](https://…) and bare https:// links. Anything else stays literal text.

export type Inline =
  | { type: "text"; text: string }
  | { type: "code"; text: string }
  | { type: "strong"; children: Inline[] }
  | { type: "em"; children: Inline[] }
  | { type: "link"; href: string; children: Inline[] }
  | { type: "br" };

export type Block =
  | { type: "paragraph"; children: Inline[] }
  | { type: "heading"; level: number; children: Inline[] }
  | { type: "code"; lang: string; text: string }
  | { type: "list"; ordered: boolean; start: number; items: Block[][] }
  | { type: "quote"; children: Block[] }
  | { type: "rule" };

/** The href if it is an absolute http(s) URL, else null (javascript:, data:, relative… are dropped). */
export function safeHref(raw: string): string | null {
  try {
    const url = new URL(raw.trim());
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const BULLET = /^( {0,12})([-*+])\s+(.*)$/;
const ORDERED = /^( {0,12})(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

export function parseMarkdown(text: string, depth = 0): Block[] {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  const blocks: Block[] = [];
  let paragraph: string[] = [];
  const flush = () => {
    if (paragraph.length) blocks.push({ type: "paragraph", children: parseInline(paragraph.join("\n")) });
    paragraph = [];
  };
  // Deeply nested quotes and lists are rendered flat beyond this depth (a page cannot make us recurse forever).
  const nest = depth < 8;
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const marker = fence[1];
      const body: string[] = [];
      i++;
      while (i < lines.length && !lines[i].trimStart().startsWith(marker)) body.push(lines[i++]);
      i++; // the closing fence (or the end of a still-streaming block)
      blocks.push({ type: "code", lang: fence[2], text: body.join("\n") });
      continue;
    }
    if (!line.trim()) {
      flush();
      i++;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flush();
      blocks.push({ type: "heading", level: heading[1].length, children: parseInline(heading[2]) });
      i++;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      blocks.push({ type: "rule" });
      i++;
      continue;
    }
    if (nest && QUOTE.test(line)) {
      flush();
      const body: string[] = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(QUOTE.exec(lines[i++])![1]);
      blocks.push({ type: "quote", children: parseMarkdown(body.join("\n"), depth + 1) });
      continue;
    }
    const item = BULLET.exec(line) ?? ORDERED.exec(line);
    if (nest && item) {
      flush();
      const [list, next] = parseList(lines, i, depth);
      blocks.push(list);
      i = next;
      continue;
    }
    paragraph.push(line.trim());
    i++;
  }
  flush();
  return blocks;
}

/** A list starting at `lines[start]`: items of the same kind at the same indentation. */
function parseList(lines: string[], start: number, depth: number): [Block, number] {
  const first = (BULLET.exec(lines[start]) ?? ORDERED.exec(lines[start]))!;
  const ordered = ORDERED.test(lines[start]) && !BULLET.test(lines[start]);
  const indent = first[1].length;
  const items: Block[][] = [];
  let i = start;
  while (i < lines.length) {
    const match = ordered ? ORDERED.exec(lines[i]) : BULLET.exec(lines[i]);
    if (!match || match[1].length !== indent) break;
    const body = [match[3]];
    i++;
    // The item goes on over lines indented deeper than its marker, and over wrapped lines.
    while (i < lines.length) {
      const line = lines[i];
      if (!line.trim()) {
        const next = lines[i + 1];
        if (next !== undefined && leading(next) > indent && next.trim()) {
          body.push("");
          i++;
          continue;
        }
        break;
      }
      const sibling = BULLET.exec(line) ?? ORDERED.exec(line);
      if (sibling && sibling[1].length <= indent) break;
      if (!sibling && leading(line) <= indent && (FENCE.test(line) || HEADING.test(line) || QUOTE.test(line))) break;
      body.push(line.slice(Math.min(leading(line), indent + 2)));
      i++;
    }
    items.push(parseMarkdown(body.join("\n"), depth + 1));
  }
  return [{ type: "list", ordered, start: ordered ? Number(first[2]) : 1, items }, i];
}

const leading = (line: string) => line.length - line.trimStart().length;

const AUTOLINK = /^https?:\/\/[^\s<>"'`]+/;

/** Inline spans. Unclosed markers (mid-stream) stay literal. */
export function parseInline(text: string, depth = 0): Inline[] {
  const out: Inline[] = [];
  let buffer = "";
  const push = (node: Inline) => {
    if (buffer) out.push({ type: "text", text: buffer });
    buffer = "";
    out.push(node);
  };
  const inner = (s: string) => (depth < 6 ? parseInline(s, depth + 1) : [{ type: "text", text: s } as Inline]);
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const prev = i > 0 ? text[i - 1] : " ";
    if (c === "\\" && i + 1 < text.length && /[\\`*_[\]()#>!~-]/.test(text[i + 1])) {
      buffer += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      push({ type: "br" });
      i++;
      continue;
    }
    if (c === "`") {
      const run = /^`+/.exec(text.slice(i))![0];
      const close = text.indexOf(run, i + run.length);
      if (close > 0) {
        push({ type: "code", text: text.slice(i + run.length, close).replace(/^ (.*) $/, "$1") });
        i = close + run.length;
        continue;
      }
      buffer += run;
      i += run.length;
      continue;
    }
    if ((c === "*" || c === "_") && text[i + 1] === c && text[i + 2] && text[i + 2] !== " ") {
      const marker = c + c;
      const close = text.indexOf(marker, i + 2);
      if (close > i + 2 && text[close - 1] !== " ") {
        push({ type: "strong", children: inner(text.slice(i + 2, close)) });
        i = close + 2;
        continue;
      }
    }
    if ((c === "*" || (c === "_" && !/[\p{L}\p{N}]/u.test(prev))) && text[i + 1] && text[i + 1] !== " " && text[i + 1] !== c) {
      let close = i + 1;
      for (;;) {
        close = text.indexOf(c, close);
        if (close < 0) break;
        // `_` closes only at a word's end (snake_case stays literal), `**` inside *em* is not its end.
        const after = text[close + 1] ?? " ";
        if (text[close - 1] !== " " && text[close + 1] !== c && (c === "*" || !/[\p{L}\p{N}]/u.test(after))) break;
        close += text[close + 1] === c ? 2 : 1;
      }
      if (close > i + 1) {
        push({ type: "em", children: inner(text.slice(i + 1, close)) });
        i = close + 1;
        continue;
      }
    }
    if (c === "[") {
      const link = /^\[([^\]\n]{1,500})\]\(\s*<?((?:[^()\s<>]|\([^()\s<>]*\)){1,2000})>?(?:\s+"[^"]*")?\s*\)/.exec(text.slice(i, i + 2600));
      if (link) {
        const href = safeHref(link[2]);
        const label = inner(link[1]);
        if (href) push({ type: "link", href, children: label });
        else for (const node of label) push(node);
        i += link[0].length;
        continue;
      }
    }
    if (c === "h" && !/[\p{L}\p{N}]/u.test(prev)) {
      const match = AUTOLINK.exec(text.slice(i));
      if (match) {
        // Trailing punctuation ends the sentence, not the URL.
        let url = match[0].replace(/[.,;:!?]+$/, "");
        if (url.endsWith(")") && !url.includes("(")) url = url.slice(0, -1);
        const href = safeHref(url);
        if (href) {
          push({ type: "link", href, children: [{ type: "text", text: url }] });
          i += url.length;
          continue;
        }
      }
    }
    buffer += c;
    i++;
  }
  if (buffer) out.push({ type: "text", text: buffer });
  return out;
}

/** Builds DOM for `markdown`: elements and text nodes only. */
export function renderMarkdown(markdown: string): DocumentFragment {
  const fragment = document.createDocumentFragment();
  for (const block of parseMarkdown(markdown)) fragment.appendChild(renderBlock(block));
  return fragment;
}

function renderBlock(block: Block): Node {
  switch (block.type) {
    case "paragraph":
      return withInlines(document.createElement("p"), block.children);
    case "heading":
      // h2 is the panel's title; answer headings start below it.
      return withInlines(document.createElement(`h${Math.min(6, block.level + 2)}`), block.children);
    case "code": {
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      if (/^[\w+#.-]{1,20}$/.test(block.lang)) code.dataset.lang = block.lang;
      code.textContent = block.text;
      pre.appendChild(code);
      return pre;
    }
    case "list": {
      const list = document.createElement(block.ordered ? "ol" : "ul");
      if (block.ordered && block.start !== 1) list.setAttribute("start", String(block.start));
      for (const item of block.items) {
        const li = document.createElement("li");
        // A one-paragraph item renders without a <p> around it.
        if (item.length === 1 && item[0].type === "paragraph") withInlines(li, item[0].children);
        else for (const child of item) li.appendChild(renderBlock(child));
        list.appendChild(li);
      }
      return list;
    }
    case "quote": {
      const quote = document.createElement("blockquote");
      for (const child of block.children) quote.appendChild(renderBlock(child));
      return quote;
    }
    case "rule":
      return document.createElement("hr");
  }
}

function withInlines<T extends HTMLElement>(parent: T, inlines: Inline[]): T {
  for (const inline of inlines) parent.appendChild(renderInline(inline));
  return parent;
}

function renderInline(inline: Inline): Node {
  switch (inline.type) {
    case "text":
      return document.createTextNode(inline.text);
    case "br":
      return document.createElement("br");
    case "code": {
      const code = document.createElement("code");
      code.textContent = inline.text;
      return code;
    }
    case "strong":
      return withInlines(document.createElement("strong"), inline.children);
    case "em":
      return withInlines(document.createElement("em"), inline.children);
    case "link": {
      const a = document.createElement("a");
      a.href = inline.href;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      // The model chose it: the full address shows before the click (and the text can never hide
      // where it leads). Opened from the page's document, a new tab during a run carries the fence.
      a.title = inline.href;
      return withInlines(a, inline.children);
    }
  }
}
