//! An action's target in the user's words, for the confirmation card and the tool cards:
//! "the button “Place order”", where a link or form leads, the text to be typed.

use serde::{Deserialize, Serialize};
use ts_rs::TS;
use url::Url;

use super::{is_password_field, site, site_of_url, submission_of};
use crate::arguments::{NavigateArgs, PointArgs, RunJavascriptArgs, ToolCall, TypeArgs};
use crate::page::{ElementInfo, PageInfo};

/// What an action acts on, as the card shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct ActionTarget {
    /// One phrase: `the button “Place order”`, `the address https://…`, `a script of 3 lines`.
    pub description: String,
    /// The element's role in words (`button`, `link`, `text field`…); empty for non-elements.
    pub role: String,
    /// Its visible label, shortened.
    pub label: String,
    /// The snapshot number of the element (the overlay outlines it on the page).
    pub index: Option<u32>,
    /// The site a navigation, link or form submission leads to, as the one site rule writes it
    /// (`site_of_url`: scheme, registrable domain, and the port where it is
    /// part of the site): `https://example.com`, `http://127.0.0.1:8080`.
    pub destination: Option<String>,
    /// The whole address it leads to, as the browser reads it (the card shows it on request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub address: Option<String>,
    /// Parts of that address that could make a person misread where it leads (the card shows
    /// them as warnings, never as the destination).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(optional, as = "Option<Vec<AddressWarning>>")]
    pub address_warnings: Vec<AddressWarning>,
    /// The text to be typed (masked for password fields).
    pub text: Option<String>,
    /// For `click_at`: the point of the screenshot (0–1000 across, 0–1000 down), which the
    /// overlay marks on the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub point: Option<(u32, u32)>,
}

/// A part of an address that reads as something it is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AddressWarning {
    /// `http://shop.test@evil.test/`: the text before `@` is a user name (and password) sent to
    /// the site, not the site. `text` is the user name as written; a password is never shown.
    UserInfo { text: String },
    /// The host is an international name (Punycode, `xn--…`): its letters may look like another
    /// name's. `unicode` is how the name reads in its own letters.
    InternationalName { unicode: String },
    /// The address was written with a backslash, which the browser reads as a slash
    /// (`https://evil.test\@good.test/` leads to evil.test).
    Backslash,
}

/// Where an address leads, as a card shows it: the site, the whole address, and what in it
/// could mislead. `written` is the address as the page or the model wrote it (for the backslash).
struct Destination {
    site: Option<String>,
    address: String,
    warnings: Vec<AddressWarning>,
}

fn destination_of(url: &Url, written: &str) -> Destination {
    let mut warnings = Vec::new();
    if !url.username().is_empty() || url.password().is_some() {
        let user = percent_encoding::percent_decode_str(url.username()).decode_utf8_lossy().into_owned();
        let text = if url.password().is_some() { format!("{user}:…") } else { user };
        warnings.push(AddressWarning::UserInfo { text });
    }
    if let Some(host) = url.host_str().filter(|h| h.split('.').any(|label| label.starts_with("xn--"))) {
        let (unicode, _) = idna::domain_to_unicode(host);
        warnings.push(AddressWarning::InternationalName { unicode });
    }
    let before_query = written.split(['?', '#']).next().unwrap_or_default();
    if before_query.contains('\\') {
        warnings.push(AddressWarning::Backslash);
    }
    Destination { site: site_of_url(url), address: url.as_str().to_owned(), warnings }
}

impl ActionTarget {
    fn leading_to(mut self, url: Option<(Url, &str)>) -> Self {
        if let Some((url, written)) = url {
            let Destination { site, address, warnings } = destination_of(&url, written);
            self.destination = site;
            self.address = Some(address);
            self.address_warnings = warnings;
        }
        self
    }
}

const LABEL_CHARS: usize = 80;

/// Describes the target of a call (`None` for tools without one: snapshot, done…).
pub fn describe_target(
    call: &ToolCall,
    element: Option<&ElementInfo>,
    page: Option<&PageInfo>,
) -> Option<ActionTarget> {
    let page_url = page.map(|p| p.url.as_str());
    if let ToolCall::Navigate(NavigateArgs { url }) = call {
        let url = url.as_str();
        let parsed = site::web_url(url, page_url);
        let target = ActionTarget {
            description: format!("the address {}", parsed.as_ref().map_or(url, |u| u.as_str())),
            ..Default::default()
        };
        return Some(target.leading_to(parsed.map(|u| (u, url))));
    }
    if let ToolCall::RunJavascript(RunJavascriptArgs { code }) = call {
        let lines = code.lines().count().max(1);
        let on = page.and_then(|p| site::host_of(&p.url)).map(|h| format!(" on {h}")).unwrap_or_default();
        let plural = if lines == 1 { "" } else { "s" };
        return Some(ActionTarget {
            description: format!("a script of {lines} line{plural}{on}"),
            ..Default::default()
        });
    }
    let point = match call {
        ToolCall::ClickAt(PointArgs { x, y }) => Some((*x, *y)),
        _ => None,
    };
    let Some(el) = element else {
        // A point with nothing the page can describe under it.
        return point.map(|point| ActionTarget {
            description: format!("the point ({}, {}) of the screenshot", point.0, point.1),
            point: Some(point),
            ..Default::default()
        });
    };
    let role = role_in_words(el);
    let label = shorten(&visible_label(el));
    let description = if label.is_empty() { format!("the {role}") } else { format!("the {role} “{label}”") };
    let mut target = ActionTarget { description, role, label, index: Some(el.index), point, ..Default::default() };
    let leads_to = match (el.attr("href"), submission_of(el)) {
        (Some(href), _) => Some(href),
        (None, Some(submission)) => Some(submission.action),
        (None, None) => None,
    };
    target = target.leading_to(leads_to.and_then(|written| site::web_url(written, page_url).map(|u| (u, written))));
    if let ToolCall::Type(TypeArgs { text, .. }) = call {
        target.text =
            Some(if is_password_field(el) { "•".repeat(text.chars().count().clamp(1, 12)) } else { text.to_owned() });
    }
    Some(target)
}

fn role_in_words(el: &ElementInfo) -> String {
    if let Some(role) = el.role.as_deref().filter(|r| !r.is_empty()) {
        return match role {
            "textbox" | "searchbox" => "text field".into(),
            "combobox" | "listbox" => "dropdown".into(),
            "menuitem" => "menu item".into(),
            other => other.into(),
        };
    }
    let ty = el.attr("type").unwrap_or_default().to_ascii_lowercase();
    match el.tag.as_str() {
        "a" | "area" => "link".into(),
        "button" => "button".into(),
        "select" => "dropdown".into(),
        "textarea" => "text field".into(),
        "input" => match ty.as_str() {
            "submit" | "button" | "reset" | "image" => "button".into(),
            "checkbox" => "checkbox".into(),
            "radio" => "radio button".into(),
            "password" => "password field".into(),
            "range" => "slider".into(),
            _ => "text field".into(),
        },
        other => other.into(),
    }
}

fn visible_label(el: &ElementInfo) -> String {
    let text = el.text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !text.is_empty() {
        return text;
    }
    ["aria-label", "placeholder", "value", "title", "name", "alt"]
        .iter()
        .find_map(|k| el.attr(k).filter(|v| !v.trim().is_empty()).map(str::to_owned))
        .unwrap_or_default()
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(LABEL_CHARS - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::FormInfo;
    use serde_json::json;

    fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall::parse(name, arguments.as_object().expect("an object")).expect("arguments of the tool")
    }

    #[test]
    fn cards_name_the_element_by_role_and_label() {
        let page = PageInfo { url: "https://shop.test/cart".into(), title: String::new() };
        let mut button =
            ElementInfo { index: 7, tag: "button".into(), text: "Place  order".into(), ..Default::default() };
        button.form =
            Some(FormInfo { action: "https://pay.example/charge".into(), method: "post".into(), ..Default::default() });
        let t = describe_target(&call("click", json!({"index": 7})), Some(&button), Some(&page)).unwrap();
        assert_eq!(t.description, "the button “Place order”");
        assert_eq!(t.index, Some(7));
        assert_eq!(t.destination.as_deref(), Some("https://pay.example"));
        assert_eq!(t.address.as_deref(), Some("https://pay.example/charge"));
        let mut link = ElementInfo { index: 2, tag: "a".into(), text: "Help".into(), ..Default::default() };
        link.attributes.push(("href".into(), "/help".into()));
        let t = describe_target(&call("click", json!({"index": 2})), Some(&link), Some(&page)).unwrap();
        assert_eq!((t.description.as_str(), t.destination.as_deref()), ("the link “Help”", Some("https://shop.test")));
    }

    #[test]
    fn typed_text_is_shown_and_masked_for_passwords() {
        let mut pw = ElementInfo { index: 3, tag: "input".into(), ..Default::default() };
        pw.attributes.push(("type".into(), "password".into()));
        pw.attributes.push(("name".into(), "pass".into()));
        let t = describe_target(&call("type", json!({"index": 3, "text": "hunter2"})), Some(&pw), None).unwrap();
        assert_eq!(t.text.as_deref(), Some("•••••••"));
        assert_eq!(t.description, "the password field “pass”");
        let field = ElementInfo { index: 4, tag: "input".into(), text: "Email".into(), ..Default::default() };
        let t = describe_target(&call("type", json!({"index": 4, "text": "a@b.c"})), Some(&field), None).unwrap();
        assert_eq!(t.text.as_deref(), Some("a@b.c"));
    }

    #[test]
    fn navigations_and_scripts() {
        let page = PageInfo { url: "https://shop.test/".into(), title: String::new() };
        let t = describe_target(&call("navigate", json!({"url": "https://evil.test/?q=secret"})), None, Some(&page))
            .unwrap();
        assert_eq!(t.destination.as_deref(), Some("https://evil.test"));
        assert!(t.description.contains("https://evil.test/?q=secret"));
        assert!(t.address_warnings.is_empty());
        let t = describe_target(&call("run_javascript", json!({"code": "a;\nb"})), None, Some(&page)).unwrap();
        assert_eq!(t.description, "a script of 2 lines on shop.test");
    }

    /// Where a navigation to `url` from a page on shop.test leads, as its card shows it.
    fn navigation_card(url: &str) -> ActionTarget {
        let page = PageInfo { url: "http://shop.test/".into(), title: String::new() };
        describe_target(&call("navigate", json!({ "url": url })), None, Some(&page)).expect("a target")
    }

    #[test]
    fn the_destination_is_the_site_with_its_port_where_the_port_is_part_of_it() {
        // A local server: the port tells two sites apart, so the card names it.
        let t = navigation_card("http://127.0.0.1:8080/admin");
        assert_eq!(t.destination.as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(navigation_card("http://localhost:9000/").destination.as_deref(), Some("http://localhost:9000"));
        assert_eq!(navigation_card("http://127.0.0.1/").destination.as_deref(), Some("http://127.0.0.1:80"));
        // IPv6 keeps its brackets.
        assert_eq!(navigation_card("http://[::1]:5000/x").destination.as_deref(), Some("http://[::1]:5000"));
        // A named site is its scheme and registrable domain: another port of it is the same site.
        let t = navigation_card("https://pay.shop.example.co.uk:8443/charge");
        assert_eq!(t.destination.as_deref(), Some("https://example.co.uk"));
        assert_eq!(t.address.as_deref(), Some("https://pay.shop.example.co.uk:8443/charge"));
        // A relative address is the page's own site.
        assert_eq!(navigation_card("/cart").destination.as_deref(), Some("http://shop.test"));
        assert!(navigation_card("https://10.0.0.7:9000/").address_warnings.is_empty());
    }

    #[test]
    fn user_info_is_a_warning_never_the_destination() {
        let t = navigation_card("http://shop.test@evil.example/login");
        assert_eq!(t.destination.as_deref(), Some("http://evil.example"));
        assert_eq!(t.address_warnings, vec![AddressWarning::UserInfo { text: "shop.test".into() }]);
        assert_eq!(t.address.as_deref(), Some("http://shop.test@evil.example/login"));
        // A password is never shown; the user name is shown decoded, as it reads.
        let t = navigation_card("http://shop.test%2Fcart:hunter2@127.0.0.1:8081/");
        assert_eq!(t.destination.as_deref(), Some("http://127.0.0.1:8081"));
        assert_eq!(t.address_warnings, vec![AddressWarning::UserInfo { text: "shop.test/cart:…".into() }]);
        let t = navigation_card("http://:secret@evil.example/");
        assert_eq!(t.address_warnings, vec![AddressWarning::UserInfo { text: ":…".into() }]);
        // The same for a link.
        let page = PageInfo { url: "https://shop.test/".into(), title: String::new() };
        let mut link = ElementInfo { index: 5, tag: "a".into(), text: "Your orders".into(), ..Default::default() };
        link.attributes.push(("href".into(), "https://shop.test:x@evil.example:8443/orders".into()));
        let t = describe_target(&call("click", json!({"index": 5})), Some(&link), Some(&page)).unwrap();
        assert_eq!(t.destination.as_deref(), Some("https://evil.example"));
        assert_eq!(t.address_warnings, vec![AddressWarning::UserInfo { text: "shop.test:…".into() }]);
    }

    #[test]
    fn a_backslash_is_read_as_a_slash_and_warned_about() {
        let t = navigation_card("https://evil.example\\@shop.test/");
        assert_eq!(t.destination.as_deref(), Some("https://evil.example"));
        assert_eq!(t.address_warnings, vec![AddressWarning::Backslash]);
        // Backslashes in the query are only text.
        assert!(navigation_card("https://shop.test/?q=a\\b").address_warnings.is_empty());
    }

    #[test]
    fn international_names_are_shown_in_punycode_with_a_warning() {
        // A Cyrillic “а” in “аpple.com”: the browser writes it xn--pple-43d.com.
        let t = navigation_card("https://аpple.com/");
        assert_eq!(t.destination.as_deref(), Some("https://xn--pple-43d.com"));
        assert_eq!(t.address_warnings, vec![AddressWarning::InternationalName { unicode: "аpple.com".into() }]);
        let t = navigation_card("https://www.xn--80ak6aa92e.com/");
        assert_eq!(t.destination.as_deref(), Some("https://xn--80ak6aa92e.com"));
        assert_eq!(
            t.address_warnings,
            vec![AddressWarning::InternationalName { unicode: "www.\u{430}\u{440}\u{440}\u{4cf}\u{435}.com".into() }]
        );
        // Both at once, in the order the address reads.
        let t = navigation_card("https://shop.test@xn--pple-43d.com/");
        assert_eq!(t.address_warnings.len(), 2);
        assert!(matches!(t.address_warnings[0], AddressWarning::UserInfo { .. }));
    }

    #[test]
    fn a_target_with_warnings_serializes_them_and_one_without_stays_as_before() {
        let t = navigation_card("http://shop.test@evil.example/");
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["address_warnings"], json!([{ "kind": "user_info", "text": "shop.test" }]));
        let plain = serde_json::to_value(ActionTarget::default()).unwrap();
        assert!(plain.get("address_warnings").is_none() && plain.get("address").is_none());
        let back: ActionTarget = serde_json::from_value(v).unwrap();
        assert_eq!(back, t);
    }
}
