//! An action's target in the user's words, for the confirmation card and the tool cards:
//! "the button “Place order”", where a link or form leads, the text to be typed.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{is_password_field, site, submission_of};
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
    /// The host a navigation, link or form submission leads to.
    pub destination: Option<String>,
    /// The text to be typed (masked for password fields).
    pub text: Option<String>,
    /// For `click_at`: the point of the screenshot (0–1000 across, 0–1000 down), which the
    /// overlay marks on the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub point: Option<(u32, u32)>,
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
        return Some(ActionTarget {
            description: format!("the address {}", parsed.as_ref().map_or(url, |u| u.as_str())),
            destination: parsed.and_then(|u| u.host_str().map(str::to_owned)),
            ..Default::default()
        });
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
    if el.attr("href").is_some() {
        target.destination =
            el.attr("href").and_then(|h| site::web_url(h, page_url)).and_then(|u| u.host_str().map(str::to_owned));
    } else if let Some(submission) = submission_of(el) {
        target.destination = site::web_url(submission.action, page_url).and_then(|u| u.host_str().map(str::to_owned));
    }
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
        assert_eq!(t.destination.as_deref(), Some("pay.example"));
        let mut link = ElementInfo { index: 2, tag: "a".into(), text: "Help".into(), ..Default::default() };
        link.attributes.push(("href".into(), "/help".into()));
        let t = describe_target(&call("click", json!({"index": 2})), Some(&link), Some(&page)).unwrap();
        assert_eq!((t.description.as_str(), t.destination.as_deref()), ("the link “Help”", Some("shop.test")));
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
        assert_eq!(t.destination.as_deref(), Some("evil.test"));
        assert!(t.description.contains("https://evil.test/?q=secret"));
        let t = describe_target(&call("run_javascript", json!({"code": "a;\nb"})), None, Some(&page)).unwrap();
        assert_eq!(t.description, "a script of 2 lines on shop.test");
    }
}
