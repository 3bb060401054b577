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
  let found: Element | null = null;
  for (const el of root.querySelectorAll(BLOCKS)) {
    if (el.closest("hearth-overlay")) continue;
    if (found && !found.contains(el)) continue;
    if (norm((el as HTMLElement).innerText ?? el.textContent ?? "").includes(needle)) found = el;
  }
  return found;
}
