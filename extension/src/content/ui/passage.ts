// A cited passage on the page: the innermost block whose text holds it, scrolled into view and
// outlined from the overlay (the page's DOM is left alone).

/** Blocks a passage of read_page is one of (its text is split at block boundaries). */
const BLOCKS = "p, li, h1, h2, h3, h4, h5, h6, blockquote, pre, td, th, dd, dt, figcaption, caption, summary, label, div, section, article, main";

const norm = (text: string) => text.replace(/\s+/g, " ").trim().toLowerCase();

/** The innermost block of the page whose text contains the passage's start, if any. */
export function findPassage(text: string, root: ParentNode = document): Element | null {
  // A passage cut to the budget ends with a marker; its start identifies it.
  const needle = norm(text.replace(/\n?\[… \d+ more characters left out\]$/, "")).slice(0, 80);
  if (!needle) return null;
  // textContent first (no layout; ancestors come before descendants, so the search narrows to
  // the innermost match); the rendered text where styles put breaks the source lacks.
  return innermost(root, needle, (el) => el.textContent ?? "") ?? innermost(root, needle, (el) => (el as HTMLElement).innerText ?? "");
}

function innermost(root: ParentNode, needle: string, text: (el: Element) => string): Element | null {
  let found: Element | null = null;
  for (const el of root.querySelectorAll(BLOCKS)) {
    if (found && !found.contains(el)) continue;
    if (el.closest("hearth-overlay")) continue;
    if (norm(text(el)).includes(needle)) found = el;
  }
  return found;
}
