// One DOM node per transcript entry: messages, answers, thinking, tool cards, the confirmation and
// question cards, errors and notices. Model and page text go through the Markdown renderer (DOM
// calls only) or textContent.

import type { AddressWarning, Decision, PauseReason, RiskLevel, RiskReason, TaskError, TaskRefusal } from "../../generated/protocol";
import { button, clip, el, uid } from "../../shared/ui/builders";
import { formatNumber, t } from "../../shared/ui/i18n";
import { renderMarkdown } from "./markdown";
import type { Entry, Notice } from "../transcript";

export interface CardActions {
  decide(entryId: number, decision: Decision): void;
  choose(entryId: number, option: string): void;
  fence(entryId: number, allow: boolean): void;
  /** Whether passage `number` was given to the model in this conversation. */
  hasSource(number: number): boolean;
  /** The address a chip opens in a new tab (another page's passage), or null (this page's: shown here). */
  sourceOpens?(number: number): string | null;
  /** Shows passage `number`: on this page, or its page in a new tab. */
  showSource(number: number): void;
  /** Plays a voice message's clip (in Hearth's offscreen document, not the page). */
  playVoice?(clip: number): void;
}

/** A voice message: its length and a play button. */
function voiceLine(clipNumber: number, seconds: number, actions: CardActions): HTMLElement {
  const length = t("voiceLength", formatNumber(seconds, 1));
  const play = button("voice-play", "▶", t("voicePlay", length), { "data-clip": String(clipNumber) });
  play.addEventListener("click", () => actions.playVoice?.(clipNumber));
  return el("p", { class: "voice-message" }, play, el("span", {}, t("voiceMessage", length)));
}

export function renderEntry(entry: Entry, actions: CardActions): HTMLElement {
  const node = build(entry, actions);
  node.dataset.entry = String(entry.id);
  return node;
}

function build(entry: Entry, actions: CardActions): HTMLElement {
  switch (entry.kind) {
    case "user":
      return el(
        "div",
        { class: entry.queued ? "msg user queued" : "msg user" },
        el("span", { class: "sr-only" }, t("youSaid")),
        el(
          "div",
          { class: "bubble" },
          entry.voice ? voiceLine(entry.voice.clip, entry.voice.seconds, actions) : null,
          entry.selection ? el("blockquote", { class: "selection-text" }, entry.selection) : null,
          entry.tabs?.length
            ? el("p", { class: "attached-tabs", "aria-label": t("tabsAttachedLabel") }, ...entry.tabs.map((tab) => el("span", { class: "tab-chip", title: tab.site }, `${tab.title} — ${tab.site}`)))
            : null,
          entry.text ? renderMarkdown(entry.text) : null,
        ),
        entry.queued ? el("p", { class: "meta" }, t("waitingForEngine")) : null,
      );
    case "answer":
      return el("div", { class: "msg answer" }, withCitations(renderMarkdown(entry.text), actions));
    case "thinking":
      return el(
        "details",
        { class: "thinking" },
        el("summary", {}, t("thinkingLabel")),
        el("div", { class: "thinking-text" }, entry.text),
      );
    case "result":
      return el(
        "div",
        { class: entry.success ? "msg answer result" : "msg answer result unsuccessful" },
        entry.success ? null : el("p", { class: "badge bad" }, t("taskUnsuccessful")),
        entry.unbacked ? el("p", { class: "badge bad unbacked" }, t("answerUnbacked")) : null,
        withCitations(renderMarkdown(entry.text), actions),
      );
    case "sources":
      return el(
        "details",
        { class: "sources" },
        el("summary", {}, t("sourcesRead", entry.title || entry.url, String(entry.passages.length))),
        el("p", { class: "source-url" }, entry.url),
        el("ol", {}, ...entry.passages.map((p) => el("li", { value: String(p.number) }, clip(p.text, 300)))),
      );
    case "tool":
      return toolCard(entry);
    case "confirm":
      return confirmCard(entry, actions);
    case "ask":
      return askCard(entry, actions);
    case "fence":
      return fenceCard(entry, actions);
    case "error":
      return el("div", { class: "card error-card", role: "alert" }, el("p", { class: "error" }, taskErrorText(entry.error)));
    case "local_error":
      return el("div", { class: "card error-card", role: "alert" }, el("p", { class: "error" }, entry.message));
    case "refused":
      return el("div", { class: "card error-card", role: "alert" }, el("p", { class: "error" }, refusalText(entry.refusal)));
    case "notice":
      return el("p", { class: "notice" }, noticeText(entry.notice));
  }
}

/**
 * Citations `[n]` in an answer: a chip for a passage a tool gave the model (its click shows the
 * passage), marked unverified for one no tool returned. Code is left as written.
 */
function withCitations(fragment: DocumentFragment, actions: CardActions): DocumentFragment {
  const walker = document.createTreeWalker(fragment, NodeFilter.SHOW_TEXT);
  const texts: Text[] = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!(node.parentElement?.closest("code, pre") ?? null) && /\[\d{1,4}\]/.test(node.nodeValue ?? "")) texts.push(node as Text);
  }
  for (const text of texts) {
    const parts = (text.nodeValue ?? "").split(/(\[\d{1,4}\])/);
    const nodes = parts.map((part) => {
      const cited = /^\[(\d{1,4})\]$/.exec(part);
      if (!cited) return document.createTextNode(part);
      const number = Number(cited[1]);
      if (!actions.hasSource(number)) {
        return el("span", { class: "cite unverified", title: t("citationUnverified"), "data-cite": String(number) }, part);
      }
      // A chip that opens another page says which, in full.
      const opens = actions.sourceOpens?.(number) ?? null;
      const chip = button("cite", String(number), opens ? t("citationOpens", opens) : t("citationShow", String(number)), {
        "data-cite": String(number),
        ...(opens ? { "data-opens": opens } : {}),
      });
      chip.addEventListener("click", () => actions.showSource(number));
      return chip;
    });
    text.replaceWith(...nodes);
  }
  return fragment;
}

/** `index: 3, text: "hello"` */
export function summarizeArgs(args: Record<string, unknown>): string {
  return clip(
    Object.entries(args)
      .map(([key, value]) => `${key}: ${JSON.stringify(value)}`)
      .join(", "),
    240,
  );
}

function toolCard(entry: Extract<Entry, { kind: "tool" }>): HTMLElement {
  const running = entry.ok === undefined && entry.ms === undefined;
  const state = running ? "running" : entry.ok === undefined ? "interrupted" : entry.ok ? "ok" : "failed";
  const statusText = {
    running: t("toolRunning"),
    interrupted: t("toolInterrupted"),
    ok: t("toolOk"),
    failed: t("toolFailed"),
  }[state];
  const duration = entry.ms !== undefined && entry.ms >= 0 ? t("durationMs", formatNumber(entry.ms)) : null;
  const args = summarizeArgs(entry.args);
  const details = el("details", { class: "tool-details" }, el("summary", {}, t("toolDetails")));
  if (Object.keys(entry.args).length) {
    details.append(el("p", { class: "label" }, t("toolArguments")), el("pre", { class: "args" }, JSON.stringify(entry.args, null, 2)));
  }
  if (entry.output !== undefined) details.append(el("p", { class: "label" }, t("toolResult")), el("pre", { class: "output" }, entry.output));
  return el(
    "article",
    { class: `card tool ${state}`, "data-call-id": entry.callId, "data-tool": entry.name, "aria-label": t("toolCardLabel", entry.name) },
    el(
      "div",
      { class: "card-head" },
      el("code", { class: "tool-name" }, entry.name),
      el("span", { class: "tool-status" }, statusText, duration ? ` · ${duration}` : ""),
    ),
    args ? el("p", { class: "tool-args" }, args) : null,
    // What the model saw (screenshot): a small JPEG made by the worker; the picture itself stays in the engine.
    entry.thumbnail ? el("img", { class: "tool-thumbnail", src: entry.thumbnail, alt: t("screenshotThumbnail") }) : null,
    entry.output !== undefined || Object.keys(entry.args).length ? details : null,
  );
}

function confirmCard(entry: Extract<Entry, { kind: "confirm" }>, actions: CardActions): HTMLElement {
  const titleId = uid("confirm-title");
  const reasonsId = uid("confirm-reasons");
  const decisions: [Decision, string][] = [
    ["deny", t("decisionDeny")],
    ["allow_once", t("decisionAllowOnce")],
    ["allow_for_task", t("decisionAllowForTask")],
  ];
  const buttons = decisions.map(([decision, label]) => {
    const b = button(`decision ${decision}`, label, undefined, { "data-decision": decision });
    b.disabled = entry.decision !== undefined;
    if (entry.decision === decision) b.setAttribute("aria-pressed", "true");
    b.addEventListener("click", () => actions.decide(entry.id, decision));
    return b;
  });
  const chosen = decisions.find(([d]) => d === entry.decision);
  // Entries stored before the engine described its targets have none.
  const target = entry.target;
  const description = typeof target?.description === "string" && target.description ? target.description : null;
  const destination = typeof target?.destination === "string" && target.destination ? target.destination : null;
  const typed = typeof target?.text === "string" ? target.text : null;
  // The code a person allows is shown whole (scrollable), not summarized.
  const code = entry.name === "run_javascript" && typeof entry.args.code === "string" ? entry.args.code : null;
  // Shown on lines of their own (the typed text as the engine gives it: masked for passwords); an
  // element's index says nothing to a person once the description names the element.
  const shown = new Set([...(code === null ? [] : ["code"]), ...(typed === null ? [] : ["text"]), ...(description ? ["index"] : [])]);
  const rest = Object.fromEntries(Object.entries(entry.args).filter(([key]) => !shown.has(key)));
  const summary = summarizeArgs(rest);
  return el(
    "section",
    {
      class: `card confirm risk-${entry.risk}`,
      role: "group",
      "aria-labelledby": titleId,
      "aria-describedby": reasonsId,
      "data-call-id": entry.callId,
      "data-decision": entry.decision,
    },
    description
      ? el("h3", { id: titleId, class: "target-description" }, el("code", { class: "tool-name" }, entry.name), " ", description)
      : el("h3", { id: titleId }, t("confirmTitle", entry.name)),
    el("p", { class: "risk" }, el("span", { class: `badge risk-${entry.risk}` }, riskLabel(entry.risk))),
    destination ? destinationLines(entry.callId, destination, target?.address ?? null, target?.address_warnings ?? []) : null,
    typed !== null
      ? el("p", { class: "target-text" }, el("span", { class: "sign", "aria-hidden": "true" }, "⌨ "), el("span", { class: "typed" }, `“${typed}”`))
      : null,
    description && !summary && code === null ? null : el("div", { class: "action" }, el("code", { class: "tool-name" }, entry.name), summary ? " " : "", summary),
    code !== null ? el("pre", { class: "code", tabindex: "0", "aria-label": t("toolArguments") }, code) : null,
    el(
      "div",
      { id: reasonsId },
      entry.reasons.length ? el("p", { class: "label" }, t("confirmBecause")) : null,
      entry.reasons.length ? el("ul", { class: "reasons" }, ...entry.reasons.map((r) => el("li", {}, reasonText(r)))) : null,
    ),
    el("div", { class: "actions" }, ...buttons),
    chosen ? el("p", { class: "meta", role: "status" }, t("youChose", chosen[1])) : null,
  );
}

/** The confirmation cards (by call id) whose whole address the person chose to see. */
const addressShown = new Set<string>();

/**
 * Where a card's action leads: the site as the one site rule writes it (never the user-info or
 * another part of the address that could pass for a site), a warning for each misleading part of
 * the address, and the whole address one click away.
 */
function destinationLines(callId: string, site: string, address: string | null, warnings: readonly AddressWarning[]): HTMLElement {
  // Whether the whole address is shown outlives the card's redraws.
  const shown = addressShown.has(callId);
  const full = address === null ? null : el("code", { class: "full-address", hidden: !shown }, clip(address, 2000));
  const toggle = full === null ? null : button("show-address", t("addressShow"), undefined, { "aria-expanded": String(shown) });
  toggle?.addEventListener("click", () => {
    const show = full!.hidden;
    if (show) addressShown.add(callId);
    else addressShown.delete(callId);
    full!.hidden = !show;
    toggle.setAttribute("aria-expanded", String(show));
  });
  return el(
    "div",
    { class: "destination" },
    el("p", { class: "target-destination" }, el("span", { class: "sign", "aria-hidden": "true" }, "→ "), el("span", { class: "site" }, site), toggle ? " " : null, toggle),
    ...warnings.map((warning) => el("p", { class: "address-warning", role: "note", "data-warning": warning.kind }, el("span", { class: "sign", "aria-hidden": "true" }, "⚠ "), addressWarningText(warning, site))),
    full,
  );
}

function addressWarningText(warning: AddressWarning, site: string): string {
  switch (warning.kind) {
    case "user_info":
      return t("addressWarningUserInfo", warning.text, site);
    case "international_name":
      return t("addressWarningInternationalName", warning.unicode);
    case "backslash":
      return t("addressWarningBackslash", site);
  }
}

/** A request the browser's fence stopped (the page tried to open a site or send a form), or a download it holds. */
function fenceCard(entry: Extract<Entry, { kind: "fence" }>, actions: CardActions): HTMLElement {
  const titleId = uid("fence-title");
  const download = entry.method === "DOWNLOAD";
  const choices: [boolean, string][] = [
    [false, t(download ? "downloadDelete" : "decisionDeny")],
    [true, t(download ? "downloadKeep" : "fenceAllow")],
  ];
  const buttons = choices.map(([allow, label]) => {
    const b = button(`decision ${allow ? "allow" : "deny"}`, label, undefined, { "data-fence": allow ? "allow" : "deny" });
    b.disabled = entry.allowed !== undefined;
    if (entry.allowed === allow) b.setAttribute("aria-pressed", "true");
    b.addEventListener("click", () => actions.fence(entry.id, allow));
    return b;
  });
  const chosen = entry.allowed === undefined ? null : choices.find(([allow]) => allow === entry.allowed);
  return el(
    "section",
    { class: "card confirm fence risk-high", role: "group", "aria-labelledby": titleId, "data-fence-url": entry.url },
    el("h3", { id: titleId }, entry.method === "DOWNLOAD" ? t("downloadCard", entry.file ?? "", entry.host) : t(entry.method === "POST" ? "fenceBlockedPost" : "fenceBlockedOpen", entry.host)),
    el("p", { class: "target-destination" }, el("span", { class: "sign", "aria-hidden": "true" }, "→ "), clip(entry.url, 200)),
    el("p", { class: "message" }, t(download ? "downloadExplained" : "fenceExplained")),
    el("div", { class: "actions" }, ...buttons),
    chosen ? el("p", { class: "meta", role: "status" }, t("youChose", chosen[1])) : null,
  );
}

function askCard(entry: Extract<Entry, { kind: "ask" }>, actions: CardActions): HTMLElement {
  const titleId = uid("ask-title");
  const options = entry.options.map((option) => {
    const b = button("option", option, undefined, { "data-option": option });
    b.disabled = entry.answer !== undefined;
    if (entry.answer === option) b.setAttribute("aria-pressed", "true");
    b.addEventListener("click", () => actions.choose(entry.id, option));
    return b;
  });
  return el(
    "section",
    { class: "card ask", role: "group", "aria-labelledby": titleId, "data-call-id": entry.callId },
    el("h3", { id: titleId }, entry.question),
    options.length ? el("div", { class: "options" }, ...options) : null,
    entry.answer === undefined
      ? el("p", { class: "meta" }, options.length ? t("askHintOptions") : t("askHint"))
      : el("p", { class: "meta" }, t("youAnswered", entry.answer)),
  );
}

export function riskLabel(risk: RiskLevel): string {
  switch (risk) {
    case "low":
      return t("riskLow");
    case "medium":
      return t("riskMedium");
    case "high":
      return t("riskHigh");
    case "critical":
      return t("riskCritical");
  }
}

/** A task's error, from the same keys as the command line's English (`hearth_protocol::english`). */
function taskErrorText(error: TaskError): string {
  switch (error.kind) {
    case "context_full":
      return t("taskErrorContextFull", String(error.tokens), String(error.max), String(error.window));
    case "prompt":
      return t("taskErrorPrompt", error.detail);
    case "model":
      return t("taskErrorModel", error.detail);
    case "empty_answer":
      return t("taskErrorEmptyAnswer");
    case "invalid_call_twice":
      return t("taskErrorInvalidCallTwice", error.problem);
  }
}

function refusalText(refusal: TaskRefusal): string {
  switch (refusal.kind) {
    case "no_model":
      return t("refusedNoModel");
    case "model_gone":
      return t("refusedModelGone");
    case "no_task":
      return t("refusedNoTask");
    case "not_waiting":
      return t("refusedNotWaiting");
    case "engine_not_running":
      return t("refusedEngineNotRunning", refusal.detail);
    case "engine_crashed":
      return t("refusedEngineCrashed", refusal.detail);
    case "engine_failed":
      return t("refusedEngineFailed", refusal.detail);
  }
}

export function reasonText(reason: RiskReason): string {
  switch (reason.kind) {
    case "dangerous_word":
      return t("reasonDangerousWord", reason.word);
    case "sensitive_page":
      return t("reasonSensitivePage", reason.host);
    case "password_field":
      return t("reasonPasswordField");
    case "payment_field":
      return t("reasonPaymentField");
    case "runs_javascript":
      return t("reasonRunsJavascript");
    case "off_site":
      return t("reasonOffSite", reason.host);
    case "new_window":
      return t("reasonNewWindow");
    case "posts_form":
      return t("reasonPostsForm", reason.host);
    case "download":
      return t("reasonDownload", reason.file, reason.host);
    case "user_asks_every_time":
      return t("reasonUserAsksEveryTime");
    case "nothing_at_point":
      return t("reasonNothingAtPoint");
    case "other_site_frame":
      return t("reasonOtherSiteFrame", reason.origin);
    case "page_tool":
      return t(reason.read_only ? "reasonPageToolReadOnly" : "reasonPageTool", reason.tool, reason.host);
    case "reads_tab":
      return t("reasonReadsTab", reason.title, reason.host);
    case "acts_in_tab":
      return t("reasonActsInTab", reason.title, reason.host);
  }
}

function pauseText(reason: PauseReason): string {
  switch (reason.kind) {
    case "max_iterations":
      return t("pausedMaxIterations", String(reason.limit));
    case "repetition":
      return t("pausedRepetition", reason.name, String(reason.times));
    case "same_failure":
      return t("pausedSameFailure", reason.name, reason.target, String(reason.times));
    case "failures":
      return t("pausedFailures", String(reason.times));
  }
}

function noticeText(notice: Notice): string {
  switch (notice.kind) {
    case "paused":
      return pauseText(notice.reason);
    case "stopped":
      return t("stoppedNotice");
    case "compacted":
      return t("compactedNotice", formatNumber(notice.before), formatNumber(notice.after));
    case "continued":
      return t("continuedNotice");
  }
}
