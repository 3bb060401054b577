// read_link's reader view: the main text of a page the worker fetched, parsed here because the
// offscreen document has a DOM and the worker has none. Mozilla's Readability (Firefox's reader
// view) finds the article; its blocks become the passages. A parsed document is inert: no script
// of it runs and nothing it links to loads.

import { Readability } from "@mozilla/readability";
import type { Article } from "../generated/protocol";

/** Blocks that make a passage each (the innermost, when they nest). */
const BLOCKS = "h1, h2, h3, h4, h5, h6, p, li, blockquote, pre, figcaption, dt, dd, td, th";

export function readArticle(html: string, url: string): Article {
  const doc = new DOMParser().parseFromString(html, "text/html");
  // Relative addresses resolve against the page's own.
  const base = doc.createElement("base");
  base.href = url;
  doc.head.prepend(base);
  const title = clean(doc.title);
  const parsed = new Readability(doc).parse();
  const body = parsed?.content ? new DOMParser().parseFromString(parsed.content, "text/html").body : doc.body;
  const blocks = [...body.querySelectorAll(BLOCKS)].filter((el) => !el.querySelector(BLOCKS));
  const passages = (blocks.length ? blocks.map((el) => clean(el.textContent ?? "")) : (body.textContent ?? "").split(/\n\s*\n/).map(clean)).filter(Boolean);
  return { title: clean(parsed?.title ?? "") || title, passages };
}

const clean = (text: string) => text.replace(/\s+/g, " ").trim();
