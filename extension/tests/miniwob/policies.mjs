// Scripted policies, one per MiniWoB task: what a model would do, given only the text of tool
// results. A policy reads the instruction from read_page's text, the elements from the rendered
// snapshot (`[12] button "OK"` lines), and calls tools by name with JSON arguments. It never sees
// the DOM, the harness's reward, or anything else a model would not.
//
// `env.tool(name, args)` resolves to the result text; `act` below does the same but gives up when
// the tool reports an error, so a tool-layer failure becomes the episode's failure reason.

/** The policy gave up; the message is the episode's failure reason. */
export class GiveUp extends Error {}

// ---- Reading tool output as text ---------------------------------------------------------------

const LINE = /^( *)(\*?)\[(\d+)\] (\S+)(?: "([^"]*)")?(.*)$/;
const ATTR = / ([a-z-]+)="([^"]*)"/g;

/** The elements of a rendered snapshot: { index, role, name, attrs, depth, fresh }. */
export function parseSnapshot(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const m = LINE.exec(line);
    if (!m) continue;
    const attrs = Object.fromEntries(Array.from(m[6].matchAll(ATTR), (a) => [a[1], a[2]]));
    out.push({ index: Number(m[3]), role: m[4], name: m[5] ?? "", attrs, depth: m[1].length / 2, fresh: m[2] === "*", line: line.trim() });
  }
  return out;
}

/** read_page's page text, without the title, URL and fence lines and the passages' numbers. */
export function pageText(text) {
  const m = /\n(?:Page text|Main content(?: \(article\))?)(?: \([^)\n]*\))?:\n([\s\S]*?)\n<<<END UNTRUSTED PAGE CONTENT>>>/.exec(text);
  if (!m) throw new GiveUp(`read_page returned no page text:\n${text}`);
  return m[1].replace(/^\[\d+\] /gm, "");
}

/** The task's instruction: the first line of the page's text (MiniWoB puts it on top). */
export const instructionOf = (text) => pageText(text).split("\n")[0].trim();

/** Every "quoted" string in `s`. */
export const quoted = (s) => Array.from(s.matchAll(/"([^"]*)"/g), (m) => m[1]);

function match(instruction, re) {
  const m = re.exec(instruction);
  if (!m) throw new GiveUp(`instruction not understood: ${instruction}`);
  return m;
}

const norm = (s) => s.replace(/\s+/g, " ").trim().toLowerCase();

/** The first element that matches, or give up naming what was missing. */
function one(elements, predicate, what) {
  const found = elements.filter(predicate);
  if (found.length === 0) throw new GiveUp(`no ${what} in the snapshot`);
  return found[0];
}

const ORDINALS = { "1st": 1, "2nd": 2, "3rd": 3, first: 1, second: 2, third: 3 };
const ordinal = (s) => ORDINALS[s.toLowerCase()] ?? Number.parseInt(s, 10);

// ---- Acting -------------------------------------------------------------------------------------

/** Runs a tool and gives up on an error, with the tool's own message as the reason. */
async function act(env, name, args = {}) {
  const text = await env.tool(name, args);
  if (text.startsWith("Error: ")) throw new GiveUp(`${name} ${JSON.stringify(args)}: ${text.slice(7)}`);
  return text;
}

async function look(env) {
  return parseSnapshot(await act(env, "snapshot"));
}

async function instruction(env) {
  return instructionOf(await act(env, "read_page"));
}

const click = (env, el) => act(env, "click", { index: el.index });
const type = (env, el, text) => act(env, "type", { index: el.index, text });

const isTextField = (e) => e.role === "textbox" || e.role === "searchbox" || (e.role === "input" && e.attrs.type === "password");
const isButton = (e) => e.role === "button";
/** A slider: its role, or jQuery UI's handle, listed by its class as "(icon: slider handle)". */
const isSliderHandle = (e) => e.role === "slider" || /slider/i.test(e.name);
const named = (name) => (e) => norm(e.name) === norm(name);

/** Clicks the button named `name` (Submit, Login, Search…). */
async function press(env, name) {
  const els = await look(env);
  return click(env, one(els, (e) => isButton(e) && named(name)(e), `button "${name}"`));
}

/** Presses the key `name` on an element (press_key focuses it first). */
const key = (env, el, name) => act(env, "press_key", { index: el.index, key: name });

/** The numbers on lines of their own in a page text below the instruction (a slider's value). */
const numbersIn = (text) =>
  text.split("\n").slice(1).map((l) => l.trim()).filter((l) => /^-?\d+$/.test(l)).map(Number);

const readNumbers = async (env) => numbersIn(pageText(await act(env, "read_page")));

/**
 * The keys that move a value by `diff`: whole pages (PageUp/PageDown, `page` each) then arrows, in
 * the fewest presses, going past the value and back only when that saves a press (past the end of
 * the range, the widget stops at the end).
 */
function movesFor(diff, page) {
  let pages = 0;
  if (page > 1) {
    const under = Math.trunc(diff / page);
    const over = under + Math.sign(diff);
    const cost = (n) => Math.abs(n) + Math.abs(diff - n * page);
    pages = cost(over) < cost(under) ? over : under;
  }
  const rest = diff - pages * page;
  return [
    ...Array(Math.abs(pages)).fill(pages > 0 ? "PageUp" : "PageDown"),
    ...Array(Math.abs(rest)).fill(rest > 0 ? "ArrowUp" : "ArrowDown"),
  ];
}

/**
 * Sets keyboard-driven number widgets (slider handles, a spinner) to `targets` as a person does
 * with the keys: PageUp/PageDown for big moves, once one press has shown how far a page goes
 * (unless `page` is given), then the arrows; then reads the values back (`read`, one per widget,
 * starting from `values`) and corrects what is off with the arrows alone.
 */
async function setWithKeys(env, widgets, targets, { values, read, page }) {
  for (let round = 0; round < 3; round++) {
    if (values.length !== widgets.length) throw new GiveUp(`read ${values.length} values (${values.join(", ")}) for ${widgets.length} widgets`);
    if (values.every((v, i) => v === targets[i])) return;
    for (const [i, widget] of widgets.entries()) {
      let diff = targets[i] - values[i];
      if (page === undefined && Math.abs(diff) >= 3) {
        await key(env, widget, diff > 0 ? "PageUp" : "PageDown");
        const now = await read();
        page = Math.abs(now[i] - values[i]);
        env.note(`a page is ${page}`);
        [values, diff] = [now, targets[i] - now[i]];
      }
      for (const k of movesFor(diff, round === 0 ? (page ?? 1) : 1)) await key(env, widget, k);
    }
    values = await read();
  }
  throw new GiveUp(`the keys left ${values.join(", ")} instead of ${targets.join(", ")}`);
}

// ---- Policies -----------------------------------------------------------------------------------

export const POLICIES = {
  async "click-button"(env) {
    const [label] = quoted(await instruction(env));
    await click(env, one(await look(env), (e) => isButton(e) && e.name === label, `button "${label}"`));
  },

  async "click-button-sequence"(env) {
    match(await instruction(env), /Click button ONE, then click button TWO/);
    const els = await look(env);
    await click(env, one(els, named("ONE"), "ONE"));
    await click(env, one(els, named("TWO"), "TWO"));
  },

  async "click-test-2"(env) {
    const [, label] = match(await instruction(env), /Click button (\w+)\./);
    await click(env, one(await look(env), (e) => isButton(e) && e.name === label, `button ${label}`));
  },

  async "click-link"(env) {
    const [label] = quoted(await instruction(env));
    // The "links" are underlined spans with a pointer cursor: listed by their text.
    await click(env, one(await look(env), (e) => e.name === label, `link "${label}"`));
  },

  async "click-checkboxes"(env) {
    const [, list] = match(await instruction(env), /^Select (.*) and click Submit\.$/);
    const wanted = list === "nothing" ? [] : list.split(", ");
    for (const box of (await look(env)).filter((e) => e.role === "checkbox")) {
      if (wanted.includes(box.name) !== (box.attrs.checked === "true")) await click(env, box);
    }
    await press(env, "Submit");
  },

  async "click-option"(env) {
    const [, label] = match(await instruction(env), /^Select (.*) and click Submit\.$/);
    await click(env, one(await look(env), (e) => e.role === "radio" && e.name === label, `radio "${label}"`));
    await press(env, "Submit");
  },

  async "click-tab"(env) {
    const [, n] = match(await instruction(env), /Click on Tab #(\d)/);
    // jQuery UI lists each tab as role=tab with the link inside; the page listens on the link.
    await click(env, one(await look(env), (e) => e.role === "link" && e.name === `Tab #${n}`, `link "Tab #${n}"`));
  },

  /** The same task, clicking the `role=tab` item as a model reading roles would. */
  async "click-tab:tab-role"(env) {
    const [, n] = match(await instruction(env), /Click on Tab #(\d)/);
    await click(env, one(await look(env), (e) => e.role === "tab" && e.name === `Tab #${n}`, `tab "Tab #${n}"`));
    env.note("clicked the role=tab item, which holds the link");
  },

  async "click-tab-2"(env) {
    const [label] = quoted(await instruction(env));
    // Try each tab until the link shows up; links are underlined spans, listed by their text.
    const tabs = (await look(env)).filter((e) => e.role === "link" && /^Tab #\d$/.test(e.name));
    for (const tab of tabs) {
      await click(env, tab);
      const link = (await look(env)).find((e) => e.role === "span" && e.name === label);
      if (link) return void (await click(env, link));
    }
    throw new GiveUp(`no link "${label}" under any tab`);
  },

  async "click-collapsible"(env) {
    match(await instruction(env), /Expand the section below and click submit/);
    const els = await look(env);
    await click(env, one(els, (e) => /^Section #\d+$/.test(e.name), "section header"));
    await press(env, "Submit");
  },

  async "click-dialog"(env) {
    match(await instruction(env), /Close the dialog box by clicking the "x"/);
    await click(env, one(await look(env), (e) => isButton(e) && e.name === "Close", `button "Close" (the x)`));
  },

  async "click-dialog-2"(env) {
    const [label] = quoted(await instruction(env));
    const name = label === "x" ? "Close" : label;
    await click(env, one(await look(env), (e) => isButton(e) && e.name === name, `button "${name}"`));
  },

  async "click-widget"(env) {
    const [kind] = quoted(await instruction(env));
    // A textarea renders as a textbox without a type; an <input> always shows its type.
    const is = {
      button: (e) => isButton(e), checkbox: (e) => e.role === "checkbox", radio: (e) => e.role === "radio",
      text: (e) => e.role === "textbox" && e.attrs.type === "text", textarea: (e) => e.role === "textbox" && e.attrs.type === undefined,
    }[kind];
    if (!is) throw new GiveUp(`unknown widget kind "${kind}"`);
    await click(env, one(await look(env), is, `${kind} widget`));
  },

  async "click-menu"(env) {
    const [, path] = match(await instruction(env), /^Select (.+)$/);
    // jQuery UI menus open a submenu when the pointer rests on its item (clicking a parent item
    // selects it, which ends the episode): hover each parent, then click the leaf.
    const items = path.split(">");
    for (const [i, item] of items.entries()) {
      const el = one(await look(env), (e) => e.role === "menuitem" && e.name === item, `menu item "${item}"`);
      if (i < items.length - 1) await act(env, "hover", { index: el.index });
      else await click(env, el);
    }
  },

  async "click-menu-2"(env) {
    const ins = await instruction(env);
    // Half the instructions name the item by an icon: an empty span whose class draws it, which
    // neither read_page nor the snapshot shows.
    const label = /click on the item labeled "(.+)"\.$/.exec(ins)?.[1];
    if (!label) throw new GiveUp(`the item is named only by an icon, which the page text does not show: ${ins}`);
    await click(env, one(await look(env), (e) => isButton(e) && e.name === "Menu", `button "Menu"`));
    // Not listed: it is in a submenu, which opens when the pointer rests on its parent; try the
    // items in turn (a disabled one refuses the pointer).
    const tried = new Set();
    let parent = null;
    for (let retries = 2; ; ) {
      const els = await look(env);
      const item = els.find((e) => e.role === "menuitem" && e.name === label);
      if (item) {
        const text = await env.tool("click", { index: item.index });
        // The submenu may close between the snapshot and the click (jQuery UI closes it after a
        // delay when the pointer leaves): rest on its parent again and look once more.
        if (text.startsWith("Error: ") && /not visible/.test(text) && parent && retries-- > 0) {
          const again = (await look(env)).find((e) => e.role === "menuitem" && e.name === parent.name);
          if (again) await env.tool("hover", { index: again.index });
          continue;
        }
        if (text.startsWith("Error: ")) throw new GiveUp(`click {"index":${item.index}}: ${text.slice(7)}`);
        return;
      }
      const next = els.find((e) => e.role === "menuitem" && !tried.has(e.index));
      if (!next) throw new GiveUp(`no menu item "${label}", and no submenu shows it`);
      tried.add(next.index);
      parent = next;
      await env.tool("hover", { index: next.index });
    }
  },

  async "enter-text"(env) {
    const [text] = quoted(await instruction(env));
    await type(env, one(await look(env), isTextField, "text field"), text);
    await press(env, "Submit");
  },

  async "enter-text-2"(env) {
    const ins = await instruction(env);
    const [text] = quoted(ins);
    const upper = match(ins, /in all (upper|lower) case letters/)[1] === "upper";
    await type(env, one(await look(env), isTextField, "text field"), upper ? text.toUpperCase() : text.toLowerCase());
    await press(env, "Submit");
  },

  async "enter-password"(env) {
    const [password] = quoted(await instruction(env));
    const fields = (await look(env)).filter((e) => e.attrs.type === "password");
    if (fields.length !== 2) throw new GiveUp(`expected two password fields, saw ${fields.length}`);
    for (const field of fields) await type(env, field, password);
    await press(env, "Submit");
  },

  async "login-user"(env) {
    const [user, password] = quoted(await instruction(env));
    const els = await look(env);
    // The labels are not tied to the fields (`<label>Username</label><input>`), but name them.
    await type(env, one(els, named("Username"), "field named Username"), user);
    await type(env, one(els, named("Password"), "field named Password"), password);
    await press(env, "Login");
  },

  async "login-user-popup"(env) {
    const [user, password] = quoted(await instruction(env));
    // A popup may cover the form after a field gets focus; dismiss it with Cancel and go on.
    const dismiss = async () => {
      const els = await look(env);
      const cancel = els.find((e) => isButton(e) && e.name === "Cancel");
      if (cancel) await click(env, cancel);
      return cancel ? look(env) : els;
    };
    let els = await look(env);
    await type(env, one(els, named("Username"), "field named Username"), user);
    els = await dismiss();
    await type(env, one(els, named("Password"), "field named Password"), password);
    els = await dismiss();
    // A popup during typing may have eaten the value: type again when a field is empty.
    const username = one(els, named("Username"), "field named Username");
    if (username.attrs.value !== user) await type(env, username, user);
    await press(env, "OK");
  },

  async "focus-text"(env) {
    match(await instruction(env), /Focus into the textbox/);
    await click(env, one(await look(env), isTextField, "text field"));
  },

  async "focus-text-2"(env) {
    const [, nth] = match(await instruction(env), /Focus into the (\w+) input textbox/);
    const fields = (await look(env)).filter(isTextField);
    const field = fields[ordinal(nth) - 1];
    if (!field) throw new GiveUp(`no text field number ${nth}`);
    await click(env, field);
  },

  async "choose-list"(env) {
    const [, item] = match(await instruction(env), /^Select (.+) from the list and click Submit\.$/);
    await act(env, "select", { index: one(await look(env), (e) => e.role === "combobox", "dropdown").index, option: item });
    await press(env, "Submit");
  },

  async "click-scroll-list"(env) {
    const [, list] = match(await instruction(env), /^Select (.+) from the scroll list and click Submit\.$/);
    const listbox = one(await look(env), (e) => e.role === "listbox", "list box");
    for (const item of list.split(", ")) await act(env, "select", { index: listbox.index, option: item });
    await press(env, "Submit");
  },

  async "enter-date"(env) {
    const [, mm, dd, yyyy] = match(await instruction(env), /Enter (\d\d)\/(\d\d)\/(\d{4}) as the date/);
    // A date input takes the ISO form (the tool says so when given another).
    await type(env, one(await look(env), (e) => e.attrs.type === "date", "date field"), `${yyyy}-${mm}-${dd}`);
    await press(env, "Submit");
  },

  async "enter-time"(env) {
    const [, h, m, ampm] = match(await instruction(env), /Enter (\d{1,2}):(\d\d) (AM|PM) as the time/);
    const hours = (Number(h) % 12) + (ampm === "PM" ? 12 : 0);
    await type(env, one(await look(env), (e) => e.attrs.type === "time", "time field"), `${String(hours).padStart(2, "0")}:${m}`);
    await press(env, "Submit");
  },

  async "read-table"(env) {
    const text = pageText(await act(env, "read_page"));
    const [, key] = match(text.split("\n")[0], /Enter the value of (.+) into the text field/);
    // Table rows read as "Key Value" lines.
    const row = text.split("\n").find((l) => l.startsWith(`${key} `));
    if (!row) throw new GiveUp(`no row "${key}" in the page text`);
    await type(env, one(await look(env), isTextField, "text field"), row.slice(key.length + 1).trim());
    await press(env, "Submit");
  },

  async "multi-layouts"(env) {
    const [, genre, director, year] = match(await instruction(env), /Search for (\w+) movies directed by (.+) from year (\d+)\./);
    // The labels are not tied to the fields (a text before or after each, a header cell…), but
    // name them: "Director:", "Released Date", "Genre".
    const value = { genre: genre[0].toUpperCase() + genre.slice(1), director, year, date: year };
    const els = await look(env);
    for (const field of els.filter(isTextField)) {
      const kind = /genre|director|year|date/i.exec(field.name)?.[0].toLowerCase();
      if (!kind) throw new GiveUp(`a field without a telling name: ${field.line}`);
      await type(env, field, value[kind]);
    }
    await click(env, one(els, (e) => /^(Submit|Search|Go!)$/.test(e.name), "submit button"));
  },

  async "use-autocomplete"(env) {
    const [start, end = ""] = quoted(await instruction(env));
    const fits = (s) => s.startsWith(start) && s.endsWith(end);
    let field = one(await look(env), isTextField, "text field");
    // The suggestions open 300 ms after typing stops; type waits for that.
    await type(env, field, start);
    const option = (await look(env)).find((e) => !isTextField(e) && fits(e.name));
    if (option) {
      await click(env, option);
      field = one(await look(env), isTextField, "text field");
    }
    if (!fits(field.attrs.value ?? "")) {
      // Clicking did not fill the field (or no suggestion is listed on its own): read the
      // suggestions from the page's text and type the one that fits.
      const suggestion = pageText(await act(env, "read_page")).split("\n").slice(1).map((l) => l.trim()).find(fits);
      if (!suggestion) throw new GiveUp(`no suggestion starting with "${start}" and ending with "${end}"`);
      env.note(option ? `clicking ${option.line} left the field at "${field.attrs.value}"` : "no suggestion listed on its own");
      await type(env, field, suggestion);
    }
    await press(env, "Submit");
  },

  /** The same task, choosing the suggestion by clicking it, as a person would. */
  async "use-autocomplete:click-suggestion"(env) {
    const [start, end = ""] = quoted(await instruction(env));
    await type(env, one(await look(env), isTextField, "text field"), start);
    const els = await look(env);
    const fits = (s) => s.startsWith(start) && s.endsWith(end);
    const others = els.filter((e) => !isTextField(e) && !isButton(e)).map((e) => e.line).join("; ") || "nothing";
    const option = els.find((e) => !isTextField(e) && fits(e.name));
    if (!option) throw new GiveUp(`no suggestion of its own in the snapshot (besides the field and buttons: ${others})`);
    await click(env, option);
    const value = one(await look(env), isTextField, "text field").attrs.value ?? "";
    if (value !== option.name) throw new GiveUp(`clicking ${option.line} left the field at "${value}"`);
    await press(env, "Submit");
  },

  async "search-engine"(env) {
    const ins = await instruction(env);
    const [term] = quoted(ins);
    const [, nth] = match(ins, /click the (\d+)(?:st|nd|rd|th) search result/);
    const els = await look(env);
    await type(env, one(els, isTextField, "search field"), term);
    await press(env, "Search");
    // Three results a page; the pager's links are numbered.
    const n = Number(nth);
    const pageNo = Math.ceil(n / 3);
    if (pageNo > 1) {
      await click(env, one(await look(env), (e) => e.role === "link" && e.name === String(pageNo), `page ${pageNo} link`));
    }
    // The result titles are links; the pager's links are page numbers and arrows.
    const results = (await look(env)).filter((e) => e.role === "link" && !/^(\d+|<|>|«|»)$/.test(e.name));
    const result = results[(n - 1) % 3];
    if (!result) throw new GiveUp(`no result ${n} on page ${pageNo}`);
    await click(env, result);
  },

  async "navigate-tree"(env) {
    const [name] = quoted(await instruction(env));
    // Click the item when it is listed; otherwise open the folder whose text mentions it. A closed
    // folder shows only its own name, and nothing tells a folder from a file (clicking a file that
    // is not the one ends the episode), so a name inside a closed folder cannot be reached.
    const opened = new Set();
    for (;;) {
      const els = await look(env);
      // An open folder's name runs on into its entries' ("Truman Marcella Leonie"): take the prefix.
      const hit = els.find((e) => e.name === name) ?? els.find((e) => !opened.has(e.index) && e.name.startsWith(`${name} `));
      if (hit) return void (await click(env, hit));
      const folder = els.find((e) => !opened.has(e.index) && e.name.includes(name));
      if (!folder) throw new GiveUp(`"${name}" is not listed, and no folder's text mentions it (closed folders show only their names)`);
      opened.add(folder.index);
      await click(env, folder);
    }
  },

  async "email-inbox"(env) {
    const ins = await instruction(env);
    const [, sender] = match(ins, /Find the email by (.+?) and /);
    await click(env, one(await look(env), (e) => e.name.startsWith(`${sender} `), `email from ${sender}`));
    let m;
    if ((m = /forward that email to (.+)\.$/.exec(ins))) {
      await click(env, one(await look(env), (e) => e.name === "Forward", "Forward control of its own"));
      const els = await look(env);
      await type(env, one(els, (e) => e.role === "textbox" && e.attrs.type === "text", "forward address field"), m[1]);
      const send = els.find((e) => /send/i.test(e.name));
      if (!send) throw new GiveUp(`no send control in the snapshot: ${els.map((e) => e.line).join("; ")}`);
      await click(env, send);
    } else if ((m = /reply to them with the text "(.*)"\.$/.exec(ins))) {
      await click(env, one(await look(env), (e) => e.name === "Reply", "Reply control of its own"));
      const els = await look(env);
      await type(env, one(els, (e) => e.role === "textbox" && !e.attrs.type, "reply text"), m[1]);
      const send = els.find((e) => /send/i.test(e.name));
      if (!send) throw new GiveUp(`no send control in the snapshot: ${els.map((e) => e.line).join("; ")}`);
      await click(env, send);
    } else if ((m = /click the (trash|star) icon/.exec(ins))) {
      // The open email shows the same icons as its row in the inbox.
      const els = await look(env);
      const icon = els.find((e) => new RegExp(m[1], "i").test(e.name));
      if (!icon) throw new GiveUp(`no ${m[1]} icon in the snapshot of the open email: ${els.map((e) => e.line).join("; ")}`);
      await click(env, icon);
    } else {
      throw new GiveUp(`instruction not understood: ${ins}`);
    }
  },

  async "form-sequence"(env) {
    const text = pageText(await act(env, "read_page"));
    const [, value, nth] = match(text.split("\n")[0], /Select (-?\d+) with the slider, click the (\w+) checkbox, then hit Submit\./);
    const els = await look(env);
    // jQuery UI's handle has no role or value; it is listed by its class, and its value is the
    // number shown beside it.
    const handle = one(els, isSliderHandle, "slider");
    await setWithKeys(env, [handle], [Number(value)], { values: numbersIn(text), read: () => readNumbers(env) });
    const box = els.filter((e) => e.role === "checkbox")[ordinal(nth) - 1];
    if (!box) throw new GiveUp(`no checkbox number ${nth}`);
    await click(env, box);
    await click(env, one(els, (e) => isButton(e) && e.name === "Submit", `button "Submit"`));
  },

  async "use-slider"(env) {
    const text = pageText(await act(env, "read_page"));
    const [, value] = match(text.split("\n")[0], /^Select (-?\d+) with the slider and hit Submit\.$/);
    const els = await look(env);
    await setWithKeys(env, [one(els, isSliderHandle, "slider")], [Number(value)], { values: numbersIn(text), read: () => readNumbers(env) });
    await click(env, one(els, (e) => isButton(e) && e.name === "Submit", `button "Submit"`));
  },

  async "use-slider-2"(env) {
    const text = pageText(await act(env, "read_page"));
    const [, combo] = match(text.split("\n")[0], /^Set the sliders to the combination \[([-\d,]+)\] and submit\.$/);
    const targets = combo.split(",").map(Number);
    const els = await look(env);
    // Each handle's value is the number below it, in the same order.
    const handles = els.filter(isSliderHandle);
    if (handles.length !== targets.length) throw new GiveUp(`${handles.length} slider handles for ${targets.length} values`);
    await setWithKeys(env, handles, targets, { values: numbersIn(text), read: () => readNumbers(env) });
    await click(env, one(els, (e) => isButton(e) && e.name === "Submit", `button "Submit"`));
  },

  async "use-spinner"(env) {
    const [, value] = match(await instruction(env), /^Select (-?\d+) with the spinner and hit Submit\.$/);
    // The page refuses typed text and its arrow buttons are two unnamed icons; the arrow keys step
    // it, one at a time (the values asked for are within ten of the start, so no paging).
    const els = await look(env);
    const spinner = one(els, (e) => e.role === "spinbutton", "spinner");
    const read = async () => [Number(one(await look(env), (e) => e.index === spinner.index, "spinner").attrs.value)];
    await setWithKeys(env, [spinner], [Number(value)], { values: [Number(spinner.attrs.value)], read, page: 1 });
    await click(env, one(els, (e) => isButton(e) && e.name === "Submit", `button "Submit"`));
  },

  async "social-media"(env) {
    const ins = await instruction(env);
    const [, user] = match(ins, /For the user (@\w+), click on the "([^"]+)" button/);
    const els = await look(env);
    if (els.length === 0) throw new GiveUp(`the snapshot lists no elements at all (the post of ${user} shows icons only)`);
    throw new GiveUp(`no control for ${user}'s post in the snapshot: ${els.map((e) => e.line).join("; ")}`);
  },
};
