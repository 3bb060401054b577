// Building DOM without HTML: page-, model- and engine-supplied text only ever becomes text nodes.

type Child = Node | string | null | undefined | false;

/** An element with attributes and children; strings become text nodes, never markup. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === undefined) continue;
    node.setAttribute(name, value === true ? "" : value);
  }
  append(node, ...children);
  return node;
}

export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

/** A button with a type, a class and an accessible label (its visible text unless `label`). */
export function button(className: string, text: string, label?: string, attrs: Record<string, string> = {}): HTMLButtonElement {
  return el("button", { type: "button", class: className, "aria-label": label, title: label, ...attrs }, text);
}

/** Cuts `text` to `max` characters with a marker, for huge tool outputs. */
export function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}\n…`;
}

let nextId = 0;
/** A unique id inside the shadow root (for aria-labelledby and friends). */
export function uid(prefix: string): string {
  return `${prefix}-${++nextId}`;
}
