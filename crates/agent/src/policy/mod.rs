//! Safety policy: pure functions deciding whether an action needs the user's confirmation (or
//! cannot run at all), the in-memory grants and the repetition guard of one task.
//!
//! The model is assumed fooled by the page: the policy judges what an action will do (which
//! site it leads to, whether it submits a form and how), from the element the latest snapshot
//! described, never from what the model says about it.
//! - [`site`]: URLs parsed as the browser parses them, sites by the public-suffix list.
//! - [`words`]: committing words on a target ("Place order", "删除").
//! - [`target`]: the target in the user's words, for the confirmation card.
//! - [`grants`]: "Allow for this task", scoped to one tool, reason, site (and script).

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

use crate::arguments::{Key, NavigateArgs, PressKeyArgs, ReadLinkArgs, TabArgs, ToolCall, TypeArgs};
use crate::page::PointTarget;
use crate::page::{ElementInfo, FormInfo, PageInfo};
use crate::tabs::{TabAccess, TaskTabs};
use crate::tools::{RiskLevel, ToolDefinition};

pub mod grants;
pub mod site;
pub mod target;
pub mod words;

pub use grants::{Decision, Grants};
pub use site::{host_for_site, host_of, site_of, site_of_url, web_url};
pub use target::{ActionTarget, AddressWarning, describe_target};
pub use words::danger_word;

/// URL words (whole words of the host or path) of pages where every interaction may spend money
/// or move data.
const SENSITIVE_URL_WORDS: &[&str] = &[
    "checkout", "payment", "payments", "pay", "paypal", "billing", "cart", "basket", "purchase", "transfer", "bank",
    "banking", "wallet", "cashier", "zhifu",
];

/// Why an action needs confirmation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RiskReason {
    /// The target's text or attributes contain a committing word ("Place order", "删除").
    DangerousWord {
        word: String,
    },
    /// A checkout or payment page.
    SensitivePage {
        host: String,
    },
    PasswordField,
    PaymentField,
    RunsJavascript,
    /// The action leads to another site: a navigation, a link, a form's destination.
    OffSite {
        host: String,
    },
    /// A link or form that opens a new tab or window.
    NewWindow,
    /// A link with `download`: it saves `file` from `host` to the user's disk.
    Download {
        file: String,
        host: String,
    },
    /// Submits a form with method POST (it sends data that may commit something), to `host`.
    PostsForm {
        host: String,
    },
    /// The user set this tool to ask before every use (settings): no grant covers it.
    UserAsksEveryTime,
    /// A click at a point of the screenshot where no element is (the page's background).
    NothingAtPoint,
    /// A click at a point over another site's frame, whose content the page cannot see.
    OtherSiteFrame {
        origin: String,
    },
    /// A tool the page offers (WebMCP): it runs the page's own code with the page's powers on
    /// `host` (its site). `read_only`: the page marked it so (its claim), in which case only a
    /// form or the user's "ask" brings a card.
    PageTool {
        host: String,
        tool: String,
        read_only: bool,
    },
    /// Reads another open tab the user did not attach: its page, `title` on `host`, is the
    /// user's data of that site.
    ReadsTab {
        host: String,
        title: String,
    },
    /// Acts in another tab of the task whose page, `title`, is on another site (`host`) than
    /// the page the task is on.
    ActsInTab {
        host: String,
        title: String,
    },
}

/// The risk of one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    pub risk: RiskLevel,
    /// Empty when the action can run without asking.
    pub reasons: Vec<RiskReason>,
    /// Set when the action must not run at all (its target is unknown to the policy); the text
    /// tells the model what to do instead.
    pub refusal: Option<String>,
}

impl Assessment {
    pub fn needs_confirmation(&self) -> bool {
        self.refusal.is_none() && !self.reasons.is_empty()
    }

    fn refused(risk: RiskLevel, why: impl Into<String>) -> Self {
        Self { risk, reasons: Vec::new(), refusal: Some(why.into()) }
    }
}

/// Where submitting a form leads, and how.
struct Submission<'a> {
    form: &'a FormInfo,
    /// The destination: the submitter's `formaction` or the form's action.
    action: &'a str,
    /// `get` or `post` (`formmethod` of the submitter first).
    method: String,
    /// `formtarget` of the submitter, or the form's `target`.
    target: Option<&'a str>,
}

/// Assesses a validated call, read once as its tool's argument type when the model's turn was
/// taken in. `target` is the element an index argument points at, looked up in the latest
/// snapshot (`None` when the index is not in it, or there is no snapshot); `page` is the page the
/// action runs on.
pub fn assess(
    tool: &ToolDefinition,
    call: &ToolCall,
    target: Option<&ElementInfo>,
    page: Option<&PageInfo>,
) -> Assessment {
    let mut reasons = BTreeSet::new();
    let risk = tool.risk;
    let key = match call {
        ToolCall::PressKey(PressKeyArgs { key, .. }) => Some(*key),
        _ => None,
    };
    // Enter and Space activate their target like a click (and Enter submits a field's form).
    let commits_key = matches!(key, Some(Key::Enter | Key::Space));
    let names_element = call.element_index().is_some();
    if names_element && target.is_none() {
        return Assessment::refused(
            risk,
            "That element is not in the latest snapshot (the page may have changed, or no snapshot was taken in this task). Take a new snapshot and use a number from it.",
        );
    }
    if commits_key && target.is_none() {
        // Without an index the key goes to whatever has the focus, which the policy cannot judge.
        return Assessment::refused(
            risk,
            "press_key Enter or Space needs the index of the element it acts on (from the latest snapshot).",
        );
    }
    let page_url = page.map(|p| p.url.as_str());
    let from_site = page_url.and_then(|u| web_url(u, None)).and_then(|u| site_of_url(&u));
    // Leaving the site, by whatever means: judged on the destination URL as the browser reads it.
    let judge_destination = |reasons: &mut BTreeSet<RiskReason>, url: &url::Url| {
        let host = host_for_site(url);
        if from_site.is_none() || from_site != site_of_url(url) {
            reasons.insert(RiskReason::OffSite { host: host.clone() });
        }
        if is_sensitive_url(url.as_str()) {
            reasons.insert(RiskReason::SensitivePage { host: url.host_str().unwrap_or_default().to_owned() });
        }
    };
    if matches!(call, ToolCall::RunJavascript(_)) {
        reasons.insert(RiskReason::RunsJavascript);
    }
    // Reading a page is judged like opening it: another site asks.
    if let ToolCall::Navigate(NavigateArgs { url })
    | ToolCall::OpenTab(NavigateArgs { url })
    | ToolCall::ReadLink(ReadLinkArgs { url }) = call
    {
        match web_url(url, page_url) {
            Some(url) => judge_destination(&mut reasons, &url),
            None => return Assessment::refused(risk, "Only http:// and https:// addresses can be opened."),
        }
    }
    let (clicks, types, selects) = (
        matches!(call, ToolCall::Click(_) | ToolCall::ClickAt(_)),
        matches!(call, ToolCall::Type(_)),
        matches!(call, ToolCall::Select(_)),
    );
    let activates = clicks || commits_key;
    let interacts = clicks || types || selects || commits_key;
    if interacts && let Some(page) = page.filter(|p| is_sensitive_url(&p.url)) {
        reasons.insert(RiskReason::SensitivePage { host: host_of(&page.url).unwrap_or_default() });
    }
    if let Some(el) = target.filter(|_| interacts) {
        if activates && let Some(word) = danger_word(&target_text(el)) {
            reasons.insert(RiskReason::DangerousWord { word });
        }
        if selects && let Some(word) = danger_word(&label_text(el)) {
            reasons.insert(RiskReason::DangerousWord { word });
        }
        // A link leads where its href says (resolved by the page), in this tab or another, and
        // tells the addresses of its `ping` where it was followed from.
        if activates && is_link(el) {
            let pings = el.attr("ping").unwrap_or_default().split_whitespace();
            for url in el.attr("href").into_iter().chain(pings).filter_map(|h| web_url(h, page_url)) {
                judge_destination(&mut reasons, &url);
            }
            if opens_elsewhere(el.attr("target")) {
                reasons.insert(RiskReason::NewWindow);
            }
            // A download is an effect of its own, wherever it comes from (same site included).
            if let Some(name) = el.attr("download") {
                let url = el.attr("href").and_then(|h| web_url(h, page_url));
                reasons.insert(RiskReason::Download {
                    file: download_name(name, url.as_ref()),
                    host: url.as_ref().map(host_for_site).unwrap_or_default(),
                });
            }
        }
        if types {
            if is_password_field(el) {
                reasons.insert(RiskReason::PasswordField);
            }
            if is_payment_field(el) {
                reasons.insert(RiskReason::PaymentField);
            }
        }
        // Submitting a form, by any means: a submit control clicked or activated by key, Enter
        // in one of its fields, `type … submit:true`.
        let submits = (activates && is_submit_control(el))
            || matches!(call, ToolCall::Type(TypeArgs { submit: Some(true), .. }))
            || (key == Some(Key::Enter) && (is_text_field(el) || el.tag == "select"));
        if submits && let Some(submission) = submission_of(el) {
            match web_url(submission.action, page_url) {
                Some(url) => {
                    let host = host_for_site(&url);
                    judge_destination(&mut reasons, &url);
                    if submission.method == "post" {
                        reasons.insert(RiskReason::PostsForm { host });
                    }
                }
                // A form whose action is not a web address (`javascript:`…) cannot be judged.
                None if !submission.action.is_empty() => {
                    reasons.insert(RiskReason::PostsForm { host: submission.action.chars().take(60).collect() });
                }
                None => {}
            }
            if opens_elsewhere(submission.target) {
                reasons.insert(RiskReason::NewWindow);
            }
            if let Some(word) = danger_word(&format!("{} {}", submission.action, submission.form.name)) {
                reasons.insert(RiskReason::DangerousWord { word });
            }
        }
    }
    let risk = if reasons.is_empty() { risk } else { risk.max(RiskLevel::High) };
    Assessment { risk, reasons: reasons.into_iter().collect(), refusal: None }
}

/// Assesses a call that names another tab (`read_tab`, `switch_tab`) by what the task knows of
/// it: reading a tab the user did not attach asks (it is their data of another site); acting is
/// only ever in a tab of the task (attached by the user, or opened by the task), and asks when that
/// tab is on another site than the current page.
pub fn assess_tab(tool: &ToolDefinition, call: &ToolCall, tabs: &TaskTabs, page: Option<&PageInfo>) -> Assessment {
    let risk = tool.risk;
    let (tab, reads) = match call {
        ToolCall::ReadTab(TabArgs { tab }) => (*tab, true),
        ToolCall::SwitchTab(TabArgs { tab }) => (*tab, false),
        _ => return Assessment { risk, reasons: Vec::new(), refusal: None },
    };
    let about = |page: &PageInfo| {
        let host =
            web_url(&page.url, None).map(|u| host_for_site(&u)).unwrap_or_else(|| page.url.chars().take(60).collect());
        (host, page.title.chars().take(80).collect::<String>())
    };
    let mut reasons = Vec::new();
    match (tabs.access(tab), reads) {
        (TabAccess::Unknown, _) => {
            return Assessment::refused(
                risk,
                format!(
                    "There is no open tab {tab}: use a number from the list of open tabs in the user's message, or one open_tab gave."
                ),
            );
        }
        (TabAccess::Own, true) => {
            return Assessment::refused(risk, format!("Tab {tab} is this task's own tab: use read_page to read it."));
        }
        (TabAccess::Own, false) | (TabAccess::OfTheTask(_), true) => {}
        (TabAccess::Other(other), true) => {
            let (host, title) = about(&other);
            reasons.push(RiskReason::ReadsTab { host, title });
        }
        (TabAccess::OfTheTask(other), false) => {
            let current = page.and_then(|p| web_url(&p.url, None)).and_then(|u| site_of_url(&u));
            let theirs = web_url(&other.url, None).and_then(|u| site_of_url(&u));
            if current.is_none() || current != theirs {
                let (host, title) = about(&other);
                reasons.push(RiskReason::ActsInTab { host, title });
            }
        }
        (TabAccess::Other(_), false) => {
            return Assessment::refused(
                risk,
                format!(
                    "Tab {tab} is not a tab of this task: you may act only in tabs the user attached or that you opened with open_tab. Read it with read_tab, or ask the user to attach it."
                ),
            );
        }
    }
    let risk = if reasons.is_empty() { risk } else { risk.max(RiskLevel::High) };
    Assessment { risk, reasons, refusal: None }
}

/// Assesses a call of a tool the page offers (`page.<name>`, [`crate::page_tools`]): a tool
/// the page did not mark read-only asks (once per task and site with "Allow for this task");
/// a declarative tool is judged as its form's submission (another site, a POST, a new window);
/// the user's "ask" for page tools on this site asks every time. What the page's code does
/// while it runs is the page's own act, held by the fence like the page's.
pub fn assess_page_tool(info: &crate::page_tools::PageToolInfo, page: Option<&PageInfo>) -> Assessment {
    let mut reasons = BTreeSet::new();
    let page_url = page.map(|p| p.url.as_str());
    let page_web = page_url.and_then(|u| web_url(u, None));
    let from_site = page_web.as_ref().and_then(site_of_url);
    let host = page_web.as_ref().map(host_for_site).unwrap_or_default();
    let name: String = info.name.chars().take(128).collect();
    if !info.read_only || info.form.is_some() || info.ask {
        reasons.insert(RiskReason::PageTool { host, tool: name, read_only: info.read_only });
    }
    if let Some(form) = &info.form {
        match web_url(&form.action, page_url) {
            Some(url) => {
                let host = host_for_site(&url);
                if from_site.is_none() || from_site != site_of_url(&url) {
                    reasons.insert(RiskReason::OffSite { host: host.clone() });
                }
                if is_sensitive_url(url.as_str()) {
                    reasons.insert(RiskReason::SensitivePage { host: url.host_str().unwrap_or_default().to_owned() });
                }
                if form.method.eq_ignore_ascii_case("post") {
                    reasons.insert(RiskReason::PostsForm { host });
                }
            }
            None if !form.action.is_empty() => {
                reasons.insert(RiskReason::PostsForm { host: form.action.chars().take(60).collect() });
            }
            None => {}
        }
        if form.new_window {
            reasons.insert(RiskReason::NewWindow);
        }
    }
    if info.ask {
        reasons.insert(RiskReason::UserAsksEveryTime);
    }
    let risk = if reasons.is_empty() { RiskLevel::Low } else { RiskLevel::High };
    Assessment { risk, reasons: reasons.into_iter().collect(), refusal: None }
}

/// Assesses `click_at` on what lies under its point: the element there is judged as `click`
/// judges it; no element, or another site's frame, asks.
pub fn assess_point(
    tool: &ToolDefinition,
    call: &ToolCall,
    located: &PointTarget,
    page: Option<&PageInfo>,
) -> Assessment {
    let mut assessment = assess(tool, call, located.element.as_ref(), page);
    if assessment.refusal.is_some() {
        return assessment;
    }
    let reason = match (&located.frame_origin, &located.element) {
        (Some(origin), _) => Some(RiskReason::OtherSiteFrame { origin: origin.chars().take(100).collect() }),
        (None, None) => Some(RiskReason::NothingAtPoint),
        (None, Some(_)) => None,
    };
    if let Some(reason) = reason {
        assessment.reasons.push(reason);
        assessment.risk = assessment.risk.max(RiskLevel::High);
    }
    assessment
}

/// The text that says what an activated element does (its label, value and identifiers).
fn target_text(el: &ElementInfo) -> String {
    let mut parts = vec![label_text(el)];
    parts.extend(el.attr("value").map(str::to_owned));
    parts.join(" ")
}

/// An element's label and identifiers (for typing, the field's own value is left out: it is
/// what is about to be replaced): the accessible name, the visible text when it differs from it
/// (`text`: an aria-label "Save draft" on a button that reads "Send money"), and identifiers.
fn label_text(el: &ElementInfo) -> String {
    let mut parts = vec![el.text.as_str()];
    for key in ["text", "aria-label", "title", "name", "id", "alt"] {
        parts.extend(el.attr(key));
    }
    parts.join(" ")
}

/// Whether activating the element follows a link: the snapshot gives `href` to links and to
/// whatever a click on it activates a link (a span inside one).
fn is_link(el: &ElementInfo) -> bool {
    el.attr("href").is_some()
}

/// The file a `download` link saves, as a card names it: the attribute's name, else the last
/// segment of the address.
fn download_name(attribute: &str, url: Option<&url::Url>) -> String {
    let from_url = || url.and_then(|u| u.path_segments()?.next_back().filter(|s| !s.is_empty()).map(str::to_owned));
    let name = Some(attribute.trim())
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .or_else(from_url)
        .unwrap_or_else(|| "a file".to_owned());
    name.chars().take(100).collect()
}

/// Whether a browsing-context name opens another tab or window (`_blank`, or a named one).
fn opens_elsewhere(target: Option<&str>) -> bool {
    target
        .map(str::trim)
        .is_some_and(|t| !t.is_empty() && !["_self", "_top", "_parent"].contains(&t.to_ascii_lowercase().as_str()))
}

/// Whether activating the element submits its form: a submit control (the browser's parsed
/// type), or what the snapshot marks `submits` (a label whose control is one).
fn is_submit_control(el: &ElementInfo) -> bool {
    if el.attr("submits") == Some("true") {
        return el.form.is_some();
    }
    let ty = el.attr("type").map(str::to_ascii_lowercase);
    match el.tag.as_str() {
        "button" => ty.as_deref().is_none_or(|t| t == "submit") && el.form.is_some(),
        "input" => matches!(ty.as_deref(), Some("submit" | "image")),
        _ => false,
    }
}

/// Fields where Enter submits the form (implicit submission).
fn is_text_field(el: &ElementInfo) -> bool {
    el.tag == "input"
        && !matches!(
            el.attr("type").map(str::to_ascii_lowercase).as_deref(),
            Some("checkbox" | "radio" | "button" | "reset" | "file" | "range" | "color")
        )
}

fn submission_of(el: &ElementInfo) -> Option<Submission<'_>> {
    let form = el.form.as_ref()?;
    let action = el.attr("formaction").filter(|a| !a.is_empty()).unwrap_or(&form.action);
    let method = el.attr("formmethod").filter(|m| !m.is_empty()).unwrap_or(&form.method).to_ascii_lowercase();
    let target = el.attr("formtarget").or(form.target.as_deref());
    Some(Submission { form, action, method, target })
}

pub fn is_password_field(el: &ElementInfo) -> bool {
    el.attr("type").is_some_and(|t| t.eq_ignore_ascii_case("password"))
        || el.attr("autocomplete").is_some_and(|a| a.to_ascii_lowercase().contains("password"))
}

pub fn is_payment_field(el: &ElementInfo) -> bool {
    if el.attr("autocomplete").is_some_and(|a| a.trim().to_ascii_lowercase().starts_with("cc-")) {
        return true;
    }
    let ids =
        format!("{} {} {}", el.attr("name").unwrap_or(""), el.attr("id").unwrap_or(""), el.text).to_ascii_lowercase();
    ["card", "cvv", "cvc", "ccnum", "cc-num", "security code", "iban", "卡号"].iter().any(|w| ids.contains(w))
}

/// Whether a URL's host or path names a checkout/payment step.
pub fn is_sensitive_url(url: &str) -> bool {
    let Some(url) = web_url(url, None) else { return false };
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let path = url.path().to_ascii_lowercase();
    [host, path]
        .iter()
        .any(|part| part.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| SENSITIVE_URL_WORDS.contains(&w)))
}

/// Pauses a task that repeats the same action: the `max_repeats`-th identical call within
/// `window_ms` of the others (a model stuck in a loop, paying again and again). Only actions that
/// ran and changed something count: failing ones are the breaker's (`crate::breaker`).
#[derive(Debug, Clone)]
pub struct RepetitionGuard {
    pub max_repeats: usize,
    pub window_ms: u64,
    recent: VecDeque<(String, u64)>,
}

impl RepetitionGuard {
    pub fn new(max_repeats: usize, window_ms: u64) -> Self {
        Self { max_repeats, window_ms, recent: VecDeque::new() }
    }

    /// True when running this action at `now_ms` would be the `max_repeats`-th identical one in
    /// the window (the task should pause before running it).
    pub fn would_repeat(&mut self, tool: &str, arguments: &Map<String, Value>, now_ms: u64) -> bool {
        let key = Self::key(tool, arguments);
        self.forget_before(now_ms);
        self.recent.iter().filter(|(k, _)| *k == key).count() + 1 >= self.max_repeats.max(1)
    }

    /// Records an action that ran and changed something, at `now_ms`.
    pub fn record(&mut self, tool: &str, arguments: &Map<String, Value>, now_ms: u64) {
        self.forget_before(now_ms);
        self.recent.push_back((Self::key(tool, arguments), now_ms));
    }

    fn key(tool: &str, arguments: &Map<String, Value>) -> String {
        format!("{tool}{}", Value::Object(arguments.clone()))
    }

    fn forget_before(&mut self, now_ms: u64) {
        while self.recent.front().is_some_and(|(_, t)| now_ms.saturating_sub(*t) > self.window_ms) {
            self.recent.pop_front();
        }
    }

    /// Forgets history (after the user resumes a paused task).
    pub fn reset(&mut self) {
        self.recent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::FormInfo;
    use crate::tools::builtin_tools;
    use serde_json::json;

    fn tool(name: &str) -> ToolDefinition {
        builtin_tools().into_iter().find(|t| t.name == name).unwrap()
    }

    fn button(text: &str) -> ElementInfo {
        ElementInfo { index: 1, tag: "button".into(), text: text.into(), ..Default::default() }
    }

    fn with(mut el: ElementInfo, attrs: &[(&str, &str)]) -> ElementInfo {
        el.attributes.extend(attrs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        el
    }

    fn link(href: &str) -> ElementInfo {
        with(
            ElementInfo { index: 1, tag: "a".into(), text: "Read more".into(), ..Default::default() },
            &[("href", href)],
        )
    }

    fn in_form(mut el: ElementInfo, action: &str, method: &str) -> ElementInfo {
        el.form = Some(FormInfo { action: action.into(), method: method.into(), ..Default::default() });
        el
    }

    fn field() -> ElementInfo {
        ElementInfo { index: 1, tag: "input".into(), text: "Search".into(), ..Default::default() }
    }

    fn page(url: &str) -> PageInfo {
        PageInfo { url: url.into(), title: String::new() }
    }

    fn typed(name: &str, args: Value) -> ToolCall {
        ToolCall::parse(name, args.as_object().unwrap()).expect("arguments of the tool")
    }

    fn run(name: &str, args: Value, el: Option<&ElementInfo>, url: &str) -> Assessment {
        assess(&tool(name), &typed(name, args), el, Some(&page(url)))
    }

    fn click(el: &ElementInfo, url: &str) -> Assessment {
        run("click", json!({"index": 1}), Some(el), url)
    }

    #[test]
    fn enter_and_space_commit_like_a_click_other_keys_do_not() {
        let press = |key: &str, el: &ElementInfo| {
            run("press_key", json!({"key": key, "index": 1}), Some(el), "https://shop.test/")
        };
        assert!(press("Enter", &button("Place order")).needs_confirmation());
        assert!(press("Space", &button("Delete")).needs_confirmation());
        assert!(!press("ArrowDown", &button("Place order")).needs_confirmation());
        // Enter in a field submits its form: the form's action counts.
        let field =
            in_form(ElementInfo { index: 1, tag: "input".into(), ..Default::default() }, "/checkout/pay", "get");
        assert!(press("Enter", &field).needs_confirmation());
        assert!(!press("Escape", &field).needs_confirmation());
    }

    /// The snapshot describes an element by what acting on it does (effects.ts): the policy
    /// judges that, not the element's own attributes.
    #[test]
    fn the_effect_described_by_the_snapshot_is_judged() {
        let page = "https://shop.test/account";
        // A label styled "Save draft" whose control is a submit button posting elsewhere.
        let label = in_form(
            with(
                ElementInfo { index: 1, tag: "label".into(), text: "Save draft".into(), ..Default::default() },
                &[("submits", "true")],
            ),
            "https://collector.test/take",
            "post",
        );
        let a = click(&label, page);
        assert!(a.reasons.contains(&RiskReason::PostsForm { host: "collector.test".into() }), "{a:?}");
        assert!(a.reasons.contains(&RiskReason::OffSite { host: "collector.test".into() }));
        // A span inside an off-site link carries the link's href.
        let span = with(
            ElementInfo { index: 1, tag: "span".into(), text: "Details".into(), ..Default::default() },
            &[("href", "https://collector.test/x")],
        );
        assert!(click(&span, page).reasons.contains(&RiskReason::OffSite { host: "collector.test".into() }));
        // A same-site link whose ping tells another site.
        let pinged = with(link("/help"), &[("ping", "https://shop.test/log https://collector.test/ping")]);
        assert_eq!(click(&pinged, page).reasons, vec![RiskReason::OffSite { host: "collector.test".into() }]);
        // The visible text counts beside the accessible name.
        let disguised = with(button("Save draft"), &[("text", "Send money")]);
        assert!(matches!(click(&disguised, page).reasons.as_slice(), [RiskReason::DangerousWord { .. }]));
        // Enter on a select submits its form, as the executor does.
        let select = in_form(ElementInfo { index: 1, tag: "select".into(), ..Default::default() }, "/save", "post");
        let a = run("press_key", json!({"key": "Enter", "index": 1}), Some(&select), page);
        assert!(a.reasons.contains(&RiskReason::PostsForm { host: "shop.test".into() }), "{a:?}");
    }

    #[test]
    fn a_download_link_asks_even_on_the_same_site() {
        let here = "https://shop.test/orders";
        let a = with(link("/invoices/42.pdf"), &[("download", "")]);
        assert_eq!(
            click(&a, here).reasons,
            vec![RiskReason::Download { file: "42.pdf".into(), host: "shop.test".into() }]
        );
        let a = with(link("/invoices/42.pdf"), &[("download", "statement.csv")]);
        assert_eq!(
            click(&a, here).reasons,
            vec![RiskReason::Download { file: "statement.csv".into(), host: "shop.test".into() }]
        );
        assert!(click(&link("/invoices/42.pdf"), here).reasons.is_empty(), "a plain same-site link needs no card");
    }

    #[test]
    fn local_servers_on_other_ports_are_other_sites() {
        let here = "http://127.0.0.1:8080/page";
        assert!(
            click(&link("http://127.0.0.1:9000/x"), here)
                .reasons
                .contains(&RiskReason::OffSite { host: "127.0.0.1:9000".into() })
        );
        assert!(click(&link("http://127.0.0.1:8080/x"), here).reasons.is_empty());
        let local = "http://localhost:8080/";
        assert!(!click(&link("http://localhost:9000/"), local).reasons.is_empty());
    }

    #[test]
    fn enter_or_space_without_an_index_is_refused() {
        for key in ["Enter", "Space"] {
            let a = run("press_key", json!({"key": key}), None, "https://shop.test/");
            assert!(a.refusal.is_some() && !a.needs_confirmation(), "{key}");
        }
        let a = run("press_key", json!({"key": "ArrowDown"}), None, "https://shop.test/");
        assert!(a.refusal.is_none() && !a.needs_confirmation());
    }

    #[test]
    fn an_index_missing_from_the_snapshot_is_refused() {
        for (name, args) in [
            ("click", json!({"index": 9})),
            ("type", json!({"index": 9, "text": "x"})),
            ("hover", json!({"index": 9})),
            ("scroll", json!({"to_index": 9})),
            ("press_key", json!({"key": "ArrowDown", "index": 9})),
        ] {
            let a = run(name, args, None, "https://shop.test/");
            assert!(a.refusal.as_deref().is_some_and(|r| r.contains("snapshot")), "{name}");
        }
        assert!(run("scroll", json!({"direction": "down"}), None, "https://shop.test/").refusal.is_none());
    }

    #[test]
    fn harmless_click_is_allowed() {
        let a = click(&button("Next page"), "https://shop.test/list");
        assert!(!a.needs_confirmation());
        assert_eq!(a.risk, RiskLevel::Medium);
        assert!(!click(&button("Order history"), "https://shop.test/").needs_confirmation());
        assert!(!click(&link("https://shop.test/orders"), "https://www.shop.test/").needs_confirmation());
    }

    #[test]
    fn committing_words_in_english_and_chinese() {
        for (text, word) in [
            ("Place order", "place order"),
            ("Pay now", "pay"),
            ("Delete account", "delete"),
            ("Post", "post"),
            ("Reply", "reply"),
            ("立即购买", "购买"),
        ] {
            let a = click(&button(text), "https://shop.test/");
            assert_eq!(a.reasons, vec![RiskReason::DangerousWord { word: word.into() }], "{text}");
            assert_eq!(a.risk, RiskLevel::High);
        }
        // Attributes count too: an icon button labelled only by aria-label.
        let icon = with(button(""), &[("aria-label", "Delete item")]);
        assert!(click(&icon, "https://a.test/").needs_confirmation());
    }

    #[test]
    fn submit_button_inherits_its_form() {
        let b = in_form(with(button("Continue"), &[("type", "submit")]), "https://money.test/api/transfer", "get");
        assert_eq!(
            click(&b, "https://money.test/").reasons,
            vec![
                RiskReason::DangerousWord { word: "transfer".into() },
                RiskReason::SensitivePage { host: "money.test".into() }
            ]
        );
    }

    #[test]
    fn links_and_forms_that_leave_the_site_ask() {
        let from = "https://www.example.com/";
        assert_eq!(
            click(&link("https://evil.test/collect?d=secret"), from).reasons,
            vec![RiskReason::OffSite { host: "evil.test".into() }]
        );
        // Parsed as the browser does: the backslash ends the host.
        assert!(click(&link("https://evil.test\\@www.example.com/"), from).needs_confirmation());
        // A same-site link that opens a new tab asks too.
        let blank = with(link("https://www.example.com/help"), &[("target", "_blank")]);
        assert_eq!(click(&blank, from).reasons, vec![RiskReason::NewWindow]);
        // A GET form to another site, by a button, Enter in a field, or type … submit:true.
        let off = "https://evil.test/log";
        let submit = in_form(button("Search"), off, "get");
        assert!(click(&submit, from).reasons.contains(&RiskReason::OffSite { host: "evil.test".into() }));
        let f = in_form(field(), off, "get");
        assert!(run("press_key", json!({"key": "Enter", "index": 1}), Some(&f), from).needs_confirmation());
        assert!(run("type", json!({"index": 1, "text": "x", "submit": true}), Some(&f), from).needs_confirmation());
        assert!(!run("type", json!({"index": 1, "text": "x"}), Some(&f), from).needs_confirmation());
        // A submitter's formaction overrides the form's action.
        let sneaky = with(in_form(button("Search"), "/search", "get"), &[("formaction", "https://evil.test/x")]);
        assert!(click(&sneaky, from).needs_confirmation());
        // A search form on the same site is fine, even when submitted.
        let search = in_form(field(), "/search", "get");
        assert!(
            !run("type", json!({"index": 1, "text": "shoes", "submit": true}), Some(&search), from)
                .needs_confirmation()
        );
    }

    #[test]
    fn post_forms_ask_by_any_means() {
        let from = "https://forum.test/thread/1";
        let reasons = |a: Assessment| a.reasons;
        let b = in_form(button("Go"), "/thread/1/new", "post");
        assert_eq!(reasons(click(&b, from)), vec![RiskReason::PostsForm { host: "forum.test".into() }]);
        let f = in_form(field(), "/thread/1/new", "post");
        assert!(run("press_key", json!({"key": "Enter", "index": 1}), Some(&f), from).needs_confirmation());
        assert!(run("press_key", json!({"key": "Space", "index": 1}), Some(&b), from).needs_confirmation());
        assert!(run("type", json!({"index": 1, "text": "hi", "submit": true}), Some(&f), from).needs_confirmation());
        // formmethod on the submitter turns a GET form into a POST.
        let b = with(in_form(button("Go"), "/q", "get"), &[("formmethod", "POST")]);
        assert!(click(&b, from).needs_confirmation());
    }

    #[test]
    fn checkout_pages_need_confirmation_for_any_interaction() {
        let a = click(&button("Next"), "https://shop.test/checkout/step2");
        assert_eq!(a.reasons, vec![RiskReason::SensitivePage { host: "shop.test".into() }]);
        assert!(click(&button("Next"), "https://pay.example.com/").needs_confirmation());
        assert!(!click(&button("Next"), "https://shop.test/display?q=payment").needs_confirmation());
    }

    #[test]
    fn password_and_card_fields() {
        let args = json!({"index": 1, "text": "x"});
        let pw = with(ElementInfo { index: 1, tag: "input".into(), ..Default::default() }, &[("type", "password")]);
        assert_eq!(
            run("type", args.clone(), Some(&pw), "https://a.test/login").reasons,
            vec![RiskReason::PasswordField]
        );
        let cc =
            with(ElementInfo { index: 1, tag: "input".into(), ..Default::default() }, &[("autocomplete", "cc-number")]);
        assert_eq!(run("type", args, Some(&cc), "https://a.test/").reasons, vec![RiskReason::PaymentField]);
    }

    #[test]
    fn javascript_always_asks() {
        let a = assess(&tool("run_javascript"), &typed("run_javascript", json!({"code": "1"})), None, None);
        assert_eq!(a.reasons, vec![RiskReason::RunsJavascript]);
        assert_eq!(a.risk, RiskLevel::Critical);
    }

    #[test]
    fn navigation_off_site_asks_on_site_does_not() {
        let go = |url: &str, from: &str| run("navigate", json!({"url": url}), None, from);
        assert!(!go("https://docs.example.com/a", "https://www.example.com/").needs_confirmation());
        assert!(!go("https://www.bbc.co.uk/news", "https://bbc.co.uk/").needs_confirmation());
        assert_eq!(
            go("https://evil.test/x", "https://www.example.com/").reasons,
            vec![RiskReason::OffSite { host: "evil.test".into() }]
        );
        assert!(go("https://example.com/checkout", "https://example.com/").needs_confirmation());
        // Crafted URLs the old hand parser read as on-site.
        assert!(go("https://evil.test\\@www.example.com/", "https://www.example.com/").needs_confirmation());
        assert!(go("//evil.test/?q=1", "https://www.example.com/").needs_confirmation());
        assert!(go("https://mallory.github.io/", "https://alice.github.io/").needs_confirmation());
        assert!(go("javascript:alert(1)", "https://www.example.com/").refusal.is_some());
        // Without a known page every navigation asks.
        assert!(
            assess(&tool("navigate"), &typed("navigate", json!({"url": "https://a.test/"})), None, None)
                .needs_confirmation()
        );
    }

    #[test]
    fn reading_a_page_is_judged_like_opening_it() {
        let read = |url: &str| run("read_link", json!({"url": url}), None, "https://www.example.com/news/");
        assert!(!read("story.html").needs_confirmation(), "relative, same site");
        assert!(!read("https://blog.example.com/a").needs_confirmation());
        assert_eq!(read("https://evil.test/x").reasons, vec![RiskReason::OffSite { host: "evil.test".into() }]);
        assert!(read("//evil.test/").needs_confirmation());
        assert!(read("file:///etc/passwd").refusal.is_some());
        assert!(read("javascript:alert(1)").refusal.is_some());
    }

    #[test]
    fn grants_cover_one_tool_reason_site_and_script() {
        let mut g = Grants::default();
        let here = grants::GrantScope { site: "a.test".into(), script: None };
        let there = grants::GrantScope { site: "b.test".into(), script: None };
        let del = click(&button("Delete"), "https://a.test/");
        let send = click(&button("Send"), "https://a.test/");
        assert!(!g.covers("click", &del, &here));
        g.grant("click", &del, &here);
        assert!(g.covers("click", &del, &here));
        assert!(!g.covers("click", &del, &there));
        assert!(!g.covers("click", &send, &here));
        assert!(!g.covers("type", &del, &here));
        // A script grant covers exactly that script.
        let js = assess(&tool("run_javascript"), &typed("run_javascript", json!({"code": "1"})), None, None);
        let one = grants::GrantScope { site: "a.test".into(), script: Some("document.title".into()) };
        let other = grants::GrantScope { site: "a.test".into(), script: Some("fetch('//evil.test')".into()) };
        g.grant("run_javascript", &js, &one);
        assert!(g.covers("run_javascript", &js, &one));
        assert!(!g.covers("run_javascript", &js, &other));
        g.clear();
        assert!(!g.covers("click", &del, &here));
    }

    #[test]
    fn repetition_pauses_within_the_window_only() {
        let mut r = RepetitionGuard::new(3, 10_000);
        let a = json!({"index": 1});
        let a = a.as_object().unwrap();
        for now in [0, 1_000] {
            assert!(!r.would_repeat("click", a, now));
            r.record("click", a, now);
        }
        assert!(r.would_repeat("click", a, 2_000), "the third within the window");
        assert!(!r.would_repeat("click", a, 10_500), "the first has left the window");
        let mut r = RepetitionGuard::new(3, 10_000);
        for now in [0, 20_000, 40_000] {
            assert!(!r.would_repeat("click", a, now));
            r.record("click", a, now);
        }
        // Different arguments are different actions.
        let b = json!({"index": 2});
        assert!(!r.would_repeat("click", b.as_object().unwrap(), 40_001));
    }
}
