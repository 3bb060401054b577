//! Safety policy: pure functions deciding whether an action needs the user's confirmation, plus
//! the in-memory grants and the repetition guard of one task.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

use crate::page::{ElementInfo, PageInfo};
use crate::tools::{NAVIGATE, PRESS_KEY, RUN_JAVASCRIPT, RiskLevel, ToolDefinition};

/// Words on a target that mean the action commits something (matched as word prefixes, so
/// "payment" and "deleted" count). Over-asking is the safe failure.
const DANGER_WORDS: &[&str] = &[
    "submit",
    "pay",
    "buy",
    "purchase",
    "checkout",
    "delete",
    "remove",
    "send",
    "publish",
    "order",
    "transfer",
    "donate",
    "subscribe",
    "confirm",
];
/// The same for Chinese, matched as substrings.
const DANGER_WORDS_ZH: &[&str] = &[
    "提交", "支付", "付款", "购买", "买", "删除", "发送", "发布", "下单", "订单", "转账", "结算", "汇款", "捐", "订阅",
    "确认",
];
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
    /// Navigation to another site.
    OffSite {
        host: String,
    },
}

impl RiskReason {
    /// A sentence for the confirmation dialog.
    pub fn describe(&self) -> String {
        match self {
            Self::DangerousWord { word } => format!("the target looks like a “{word}” action"),
            Self::SensitivePage { host } => format!("this is a checkout or payment page on {host}"),
            Self::PasswordField => "it types into a password field".into(),
            Self::PaymentField => "it types into a payment card field".into(),
            Self::RunsJavascript => "it runs JavaScript in the page".into(),
            Self::OffSite { host } => format!("it leaves this site for {host}"),
        }
    }
}

/// The risk of one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    pub risk: RiskLevel,
    /// Empty when the action can run without asking.
    pub reasons: Vec<RiskReason>,
}

impl Assessment {
    pub fn needs_confirmation(&self) -> bool {
        !self.reasons.is_empty()
    }
}

/// Assesses a validated call. `target` is the element an index argument points at (from the
/// latest snapshot); `page` is the page the action runs on.
pub fn assess(
    tool: &ToolDefinition,
    arguments: &Map<String, Value>,
    target: Option<&ElementInfo>,
    page: Option<&PageInfo>,
) -> Assessment {
    let mut reasons = BTreeSet::new();
    let mut risk = tool.risk;
    // Enter and Space act like a click on their target (and Enter submits a field's form).
    let commits_key =
        tool.name == PRESS_KEY && matches!(arguments.get("key").and_then(Value::as_str), Some("Enter" | "Space"));
    let interacts = matches!(tool.name.as_str(), "click" | "type" | "select") || commits_key;
    if tool.name == RUN_JAVASCRIPT {
        reasons.insert(RiskReason::RunsJavascript);
    }
    if tool.name == NAVIGATE
        && let Some(url) = arguments.get("url").and_then(Value::as_str)
    {
        let to = host_of(url);
        if let (Some(to), Some(from)) = (to.as_deref(), page.and_then(|p| host_of(&p.url)))
            && site_of(to) != site_of(&from)
        {
            reasons.insert(RiskReason::OffSite { host: to.to_owned() });
        }
        if let Some(to) = to.filter(|_| is_sensitive_url(url)) {
            reasons.insert(RiskReason::SensitivePage { host: to });
        }
    }
    if interacts {
        if let Some(page) = page.filter(|p| is_sensitive_url(&p.url)) {
            reasons.insert(RiskReason::SensitivePage { host: host_of(&page.url).unwrap_or_default() });
        }
        if let Some(el) = target {
            if let Some(word) = danger_word(&target_text(el, tool.name == "type")) {
                reasons.insert(RiskReason::DangerousWord { word });
            }
            if tool.name == "type" {
                if is_password_field(el) {
                    reasons.insert(RiskReason::PasswordField);
                }
                if is_payment_field(el) {
                    reasons.insert(RiskReason::PaymentField);
                }
            }
            if tool.name == "type" || commits_key {
                // Pressing Enter submits the form: judge the form like a submit button.
                let enter = arguments.get("submit") == Some(&Value::Bool(true))
                    || arguments.get("key").and_then(Value::as_str) == Some("Enter");
                if enter
                    && let Some(word) = el.form.as_ref().and_then(|f| danger_word(&format!("{} {}", f.action, f.name)))
                {
                    reasons.insert(RiskReason::DangerousWord { word });
                }
            }
        }
    }
    if !reasons.is_empty() {
        risk = risk.max(RiskLevel::High);
    }
    Assessment { risk, reasons: reasons.into_iter().collect() }
}

/// The text that says what an element does. For typing, the field's own value is left out (it
/// is what we are about to replace).
fn target_text(el: &ElementInfo, typing: bool) -> String {
    let mut parts = vec![el.text.as_str()];
    for key in ["aria-label", "title", "name", "id", "alt"] {
        parts.extend(el.attr(key));
    }
    if !typing {
        parts.extend(el.attr("value"));
        // A submit button commits its form: the form's action counts.
        let is_submit = el.attr("type").is_some_and(|t| t.eq_ignore_ascii_case("submit"));
        if is_submit && let Some(f) = &el.form {
            parts.push(&f.action);
            parts.push(&f.name);
        }
    }
    parts.join(" ")
}

/// The first committing word in `text`, if any.
pub fn danger_word(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    for word in lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        if let Some(d) = DANGER_WORDS.iter().find(|d| word.starts_with(*d)) {
            return Some((*d).to_owned());
        }
    }
    DANGER_WORDS_ZH.iter().find(|d| lower.contains(*d)).map(|d| (*d).to_owned())
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
    let lower = url.to_lowercase();
    let rest = lower.split_once("://").map_or(lower.as_str(), |(_, r)| r);
    let without_query = rest.split(['?', '#']).next().unwrap_or(rest);
    without_query.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| SENSITIVE_URL_WORDS.contains(&w))
}

/// The host of an http(s) URL, lower case, without port or credentials.
pub fn host_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?.split(':').next()?.to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

/// Approximate registrable domain: the last two labels (three for `co.uk`-style suffixes).
/// Without the public-suffix list this errs towards calling more navigations off-site.
fn site_of(host: &str) -> String {
    let labels: Vec<&str> = host.trim_end_matches('.').split('.').collect();
    if labels.len() <= 2 || host.parse::<std::net::IpAddr>().is_ok() {
        return host.to_owned();
    }
    let second = labels[labels.len() - 2];
    let keep = if second.len() <= 3 && labels[labels.len() - 1].len() == 2 { 3 } else { 2 };
    labels[labels.len().saturating_sub(keep)..].join(".")
}

/// The user's answer to a confirmation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Deny,
    AllowOnce,
    /// Allow this kind of action (same tool, same reasons) until the task ends. Kept in memory
    /// only, never persisted.
    AllowForTask,
}

/// Grants given with [`Decision::AllowForTask`] during one task.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    granted: BTreeSet<(String, RiskReason)>,
}

impl Grants {
    pub fn grant(&mut self, tool: &str, assessment: &Assessment) {
        for r in &assessment.reasons {
            self.granted.insert((tool.to_owned(), r.clone()));
        }
    }

    /// Whether every reason of `assessment` was already allowed for this tool.
    pub fn covers(&self, tool: &str, assessment: &Assessment) -> bool {
        assessment.reasons.iter().all(|r| self.granted.contains(&(tool.to_owned(), r.clone())))
    }

    pub fn clear(&mut self) {
        self.granted.clear();
    }
}

/// Pauses a task that repeats the same action: `max_repeats` identical calls within
/// `window_ms` (a model stuck in a loop).
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

    /// Records an action at `now_ms`; true when it is the `max_repeats`-th identical one in the
    /// window (the task should pause before running it).
    pub fn record(&mut self, tool: &str, arguments: &Map<String, Value>, now_ms: u64) -> bool {
        let key = format!("{tool}{}", Value::Object(arguments.clone()));
        while self.recent.front().is_some_and(|(_, t)| now_ms.saturating_sub(*t) > self.window_ms) {
            self.recent.pop_front();
        }
        self.recent.push_back((key.clone(), now_ms));
        let count = self.recent.iter().filter(|(k, _)| *k == key).count();
        count >= self.max_repeats.max(1)
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

    fn page(url: &str) -> PageInfo {
        PageInfo { url: url.into(), title: String::new() }
    }

    fn click(el: &ElementInfo, url: &str) -> Assessment {
        assess(&tool("click"), json!({"index": 1}).as_object().unwrap(), Some(el), Some(&page(url)))
    }

    #[test]
    fn enter_and_space_commit_like_a_click_other_keys_do_not() {
        let press = |key: &str, el: &ElementInfo| {
            assess(
                &tool("press_key"),
                json!({"key": key, "index": 1}).as_object().unwrap(),
                Some(el),
                Some(&page("https://shop.test/")),
            )
        };
        assert!(press("Enter", &button("Place order")).needs_confirmation());
        assert!(press("Space", &button("Delete")).needs_confirmation());
        assert!(!press("ArrowDown", &button("Place order")).needs_confirmation());
        // Enter in a field submits its form: the form's action counts.
        let field = ElementInfo {
            index: 1,
            tag: "input".into(),
            form: Some(FormInfo { action: "/checkout/pay".into(), ..Default::default() }),
            ..Default::default()
        };
        assert!(press("Enter", &field).needs_confirmation());
        assert!(!press("Escape", &field).needs_confirmation());
    }

    #[test]
    fn harmless_click_is_allowed() {
        let a = click(&button("Next page"), "https://shop.test/list");
        assert!(!a.needs_confirmation());
        assert_eq!(a.risk, RiskLevel::Medium);
    }

    #[test]
    fn committing_words_in_english_and_chinese() {
        for (text, word) in [
            ("Place order", "order"),
            ("Pay now", "pay"),
            ("Buy it", "buy"),
            ("Delete account", "delete"),
            ("Send message", "send"),
            ("Publish", "publish"),
            ("Transfer funds", "transfer"),
            ("Submit", "submit"),
            ("立即购买", "购买"),
            ("删除", "删除"),
            ("提交订单", "提交"),
            ("转账", "转账"),
        ] {
            let a = click(&button(text), "https://shop.test/");
            assert_eq!(a.reasons, vec![RiskReason::DangerousWord { word: word.into() }], "{text}");
            assert_eq!(a.risk, RiskLevel::High);
        }
        // Attributes count too: an icon button labelled only by aria-label.
        let mut icon = button("");
        icon.attributes.push(("aria-label".into(), "Delete item".into()));
        assert!(click(&icon, "https://a.test/").needs_confirmation());
    }

    #[test]
    fn submit_button_inherits_its_form() {
        let mut b = button("Continue");
        b.attributes.push(("type".into(), "submit".into()));
        b.form = Some(FormInfo { action: "/api/transfer".into(), method: "post".into(), name: String::new() });
        assert_eq!(
            click(&b, "https://money.test/").reasons,
            vec![RiskReason::DangerousWord { word: "transfer".into() }]
        );
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
        let t = tool("type");
        let args = json!({"index": 1, "text": "x"});
        let mut pw = ElementInfo { index: 1, tag: "input".into(), ..Default::default() };
        pw.attributes.push(("type".into(), "password".into()));
        let a = assess(&t, args.as_object().unwrap(), Some(&pw), Some(&page("https://a.test/login")));
        assert_eq!(a.reasons, vec![RiskReason::PasswordField]);
        let mut cc = ElementInfo { index: 1, tag: "input".into(), ..Default::default() };
        cc.attributes.push(("autocomplete".into(), "cc-number".into()));
        let a = assess(&t, args.as_object().unwrap(), Some(&cc), Some(&page("https://a.test/")));
        assert_eq!(a.reasons, vec![RiskReason::PaymentField]);
        // A search box is fine, even when submitted.
        let search = ElementInfo { index: 1, tag: "input".into(), text: "Search".into(), ..Default::default() };
        let submit = json!({"index": 1, "text": "shoes", "submit": true});
        assert!(
            !assess(&t, submit.as_object().unwrap(), Some(&search), Some(&page("https://a.test/")))
                .needs_confirmation()
        );
    }

    #[test]
    fn javascript_always_asks() {
        let a = assess(&tool("run_javascript"), json!({"code": "1"}).as_object().unwrap(), None, None);
        assert_eq!(a.reasons, vec![RiskReason::RunsJavascript]);
        assert_eq!(a.risk, RiskLevel::Critical);
    }

    #[test]
    fn navigation_off_site_asks_on_site_does_not() {
        let t = tool("navigate");
        let go = |url: &str, from: &str| assess(&t, json!({"url": url}).as_object().unwrap(), None, Some(&page(from)));
        assert!(!go("https://docs.example.com/a", "https://www.example.com/").needs_confirmation());
        assert!(!go("https://www.bbc.co.uk/news", "https://bbc.co.uk/").needs_confirmation());
        assert_eq!(
            go("https://evil.test/x", "https://www.example.com/").reasons,
            vec![RiskReason::OffSite { host: "evil.test".into() }]
        );
        assert!(go("https://example.com/checkout", "https://example.com/").needs_confirmation());
    }

    #[test]
    fn grants_cover_only_what_was_allowed() {
        let mut g = Grants::default();
        let del = click(&button("Delete"), "https://a.test/");
        let send = click(&button("Send"), "https://a.test/");
        assert!(!g.covers("click", &del));
        g.grant("click", &del);
        assert!(g.covers("click", &del));
        assert!(!g.covers("click", &send));
        assert!(!g.covers("type", &del));
        g.clear();
        assert!(!g.covers("click", &del));
    }

    #[test]
    fn repetition_pauses_within_the_window_only() {
        let mut r = RepetitionGuard::new(3, 10_000);
        let a = json!({"index": 1});
        let a = a.as_object().unwrap();
        assert!(!r.record("click", a, 0));
        assert!(!r.record("click", a, 1_000));
        assert!(r.record("click", a, 2_000));
        let mut r = RepetitionGuard::new(3, 10_000);
        assert!(!r.record("click", a, 0));
        assert!(!r.record("click", a, 20_000));
        assert!(!r.record("click", a, 40_000));
        // Different arguments are different actions.
        let b = json!({"index": 2});
        assert!(!r.record("click", b.as_object().unwrap(), 40_001));
    }

    #[test]
    fn hosts() {
        assert_eq!(host_of("https://user:pw@Shop.Test:8080/a?b").as_deref(), Some("shop.test"));
        assert_eq!(host_of("javascript:alert(1)"), None);
        assert_eq!(site_of("a.b.example.com"), "example.com");
        assert_eq!(site_of("www.bbc.co.uk"), "bbc.co.uk");
    }
}
