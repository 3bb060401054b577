//! `hearth agent --page`: a saved HTML page as the agent's tab. The page is read once with an
//! HTML5 tokenizer into what the agent's tools report (its interactive elements, its text); the
//! tools then act on that model of the page: typing sets a field's value, choosing sets a
//! dropdown's, clicking a checkbox ticks it. Nothing runs (no scripts, no navigation, no
//! network), so the page's state after a task is exactly the agent's actions.
//!
//! A form the page marks as a WebMCP tool (`<form toolname tooldescription>`, the declarative
//! form) is offered to the model as `page.<toolname>`, with the arguments schema a browser derives
//! from its named controls; calling it fills those controls and submits the form (or, without
//! `toolautosubmit`, leaves it for the user to submit), which on a saved page sends nothing. The
//! imperative tools (`registerTool`) need the page's scripts: they are the browser's alone.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use hearth_agent::{
    ElementInfo, FormInfo, PAGE_TOOL_PREFIX, PageInfo, PageToolForm, PageToolInfo, Snapshot, ToolError, ToolExecutor,
    ToolImage, ToolInvocation, ToolOutput,
};
use html5gum::{DefaultEmitter, Token, Tokenizer};
use serde_json::{Map, Value, json};

/// Elements without end tags: they never hold text or other elements.
const VOID: &[&str] =
    &["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"];

/// Whose text is never page text.
const HIDDEN: &[&str] = &["script", "style", "template", "noscript", "head"];

/// Roles that make any element interactive.
const INTERACTIVE_ROLES: &[&str] =
    &["button", "link", "checkbox", "radio", "tab", "menuitem", "option", "switch", "combobox", "textbox"];

/// Attributes the agent's snapshot and policy read (a password's value never among them).
const KEPT_ATTRIBUTES: &[&str] = &[
    "type",
    "name",
    "id",
    "placeholder",
    "autocomplete",
    "aria-label",
    "href",
    "value",
    "checked",
    "selected",
    "form",
    "formaction",
    "target",
];

/// Controls that are never a form tool's arguments: what they hold is not the user's to give (a
/// hidden value, a file), they only submit, or (a password) the tool would fill a secret without
/// the card a password field asks with.
const NOT_ARGUMENTS: &[&str] = &["hidden", "submit", "button", "reset", "image", "file", "password"];

/// A form the page declared as a WebMCP tool.
#[derive(Debug, Clone)]
struct FormTool {
    info: PageToolInfo,
    /// Its controls that take an argument (positions in `elements`), by their `name`.
    fields: Vec<(String, usize)>,
    /// `toolautosubmit`: the browser submits the filled form itself.
    submits: bool,
}

/// An `<option>` of a dropdown.
#[derive(Debug, Clone)]
struct Choice {
    text: String,
    value: String,
}

/// The page as the tools see it.
pub struct SavedPage {
    info: PageInfo,
    elements: Vec<ElementInfo>,
    /// Per element (same order): the options of a `<select>`.
    choices: Vec<Vec<Choice>>,
    text: String,
    /// What the agent did, in order, for the report after the task.
    pub actions: Vec<String>,
    /// The page's picture (`hearth agent --screenshot`), what `screenshot` shows the model.
    picture: Option<ToolImage>,
    /// The forms the page offers as tools (declarative WebMCP).
    tools: Vec<FormTool>,
}

impl SavedPage {
    /// Reads `path`; `url` is the address the agent is told the page has.
    pub fn read(path: &Path, url: &str) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(Self::parse(&String::from_utf8_lossy(&bytes), url))
    }

    /// The page with its picture: `png` (a PNG file's bytes) is what `screenshot` shows the model.
    pub fn with_picture(mut self, png: &[u8]) -> Result<Self, String> {
        // The size is the PNG's IHDR: width and height, big-endian, at bytes 16 and 20.
        let size = |at: usize| png.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let (Some(width), Some(height)) = (size(16), size(20)) else {
            return Err("the screenshot is not a PNG file".into());
        };
        if !png.starts_with(b"\x89PNG\r\n\x1a\n") {
            return Err("the screenshot is not a PNG file".into());
        }
        let data_url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
        self.picture = Some(ToolImage { data_url, thumbnail: String::new(), width, height });
        Ok(self)
    }

    pub fn parse(html: &str, url: &str) -> Self {
        let mut reader = Reader::default();
        let mut emitter = DefaultEmitter::default();
        // Script and style bodies are raw text, as a browser reads them.
        emitter.naively_switch_states(true);
        for token in Tokenizer::new_with_emitter(html, emitter).flatten() {
            reader.token(token);
        }
        reader.finish(url)
    }

    pub fn info(&self) -> &PageInfo {
        &self.info
    }

    /// The state a user would see now: every field's value and every box's tick.
    pub fn state(&self) -> Vec<String> {
        self.elements
            .iter()
            .filter(|e| matches!(e.tag.as_str(), "input" | "textarea" | "select"))
            .filter(|e| e.attr("type") != Some("submit") && e.attr("type") != Some("button"))
            .map(|e| {
                let value = match e.attr("type") {
                    Some("checkbox" | "radio") => {
                        if e.attr("checked").is_some() { "checked" } else { "not checked" }.to_owned()
                    }
                    _ => format!("{:?}", e.attr("value").unwrap_or("")),
                };
                format!("[{}] {} {:?}: {value}", e.index, e.tag, e.text)
            })
            .collect()
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot { page: self.info.clone(), elements: self.elements.clone() }
    }

    fn element(&mut self, arguments: &serde_json::Map<String, Value>) -> Result<usize, ToolError> {
        let index =
            arguments.get("index").and_then(Value::as_u64).ok_or_else(|| ToolError("index is missing".into()))?;
        self.elements
            .iter()
            .position(|e| u64::from(e.index) == index)
            .ok_or_else(|| ToolError(format!("There is no element [{index}]; take a new snapshot.")))
    }

    fn set_attribute(&mut self, at: usize, name: &str, value: Option<String>) {
        let attributes = &mut self.elements[at].attributes;
        attributes.retain(|(k, _)| k != name);
        if let Some(value) = value {
            attributes.push((name.to_owned(), value));
        }
    }

    fn act(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        let text_argument = |name: &str| call.arguments.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
        match call.name.as_str() {
            // The page's tools come with its snapshot, as the content script reports them.
            "snapshot" => Ok(ToolOutput {
                page_tools: Some(self.tools.iter().map(|t| t.info.clone()).collect()),
                ..ToolOutput::snapshot(self.snapshot())
            }),
            name if name.starts_with(PAGE_TOOL_PREFIX) => {
                self.run_form_tool(&name[PAGE_TOOL_PREFIX.len()..], &call.arguments)
            }
            "read_page" => Ok(ToolOutput::page_text(
                self.info.clone(),
                format!("Title: {}\nURL: {}\n\n{}", self.info.title, self.info.url, self.text),
            )),
            "click" => {
                let at = self.element(&call.arguments)?;
                let element = &self.elements[at];
                let described = describe(element);
                let toggles = matches!(element.attr("type"), Some("checkbox" | "radio"));
                if toggles {
                    let checked = element.attr("checked").is_none();
                    self.set_attribute(at, "checked", checked.then(String::new));
                }
                self.actions.push(format!("clicked {described}"));
                Ok(ToolOutput::text(format!("Clicked {described}. (A saved page: no script runs and no link opens.)")))
            }
            "type" => {
                let at = self.element(&call.arguments)?;
                let element = &self.elements[at];
                if !matches!(element.tag.as_str(), "input" | "textarea") && element.role.as_deref() != Some("textbox") {
                    return Err(ToolError(format!("{} is not a text field.", describe(element))));
                }
                let described = describe(element);
                let text = text_argument("text");
                self.set_attribute(at, "value", Some(text.clone()));
                let submitted = call.arguments.get("submit").and_then(Value::as_bool).unwrap_or(false);
                self.actions.push(format!(
                    "typed {text:?} into {described}{}",
                    if submitted { " and pressed Enter" } else { "" }
                ));
                Ok(ToolOutput::text(format!("Typed into {described}.")))
            }
            "select" => {
                let at = self.element(&call.arguments)?;
                let wanted = text_argument("option");
                let Some(choice) = self.choices[at].iter().find(|c| c.text == wanted || c.value == wanted).cloned()
                else {
                    let offered: Vec<&str> = self.choices[at].iter().map(|c| c.text.as_str()).collect();
                    return Err(ToolError(format!(
                        "{} has no option {wanted:?}; its options: {}",
                        describe(&self.elements[at]),
                        offered.join(", ")
                    )));
                };
                let described = describe(&self.elements[at]);
                self.set_attribute(at, "value", Some(choice.value));
                self.actions.push(format!("chose {:?} in {described}", choice.text));
                Ok(ToolOutput::text(format!("Chose {:?} in {described}.", choice.text)))
            }
            "screenshot" => {
                let picture = self
                    .picture
                    .clone()
                    .ok_or_else(|| ToolError("A saved page has no pixels: no screenshot was given with it.".into()))?;
                self.actions.push("took a screenshot".into());
                Ok(ToolOutput {
                    image: Some(Box::new(picture)),
                    page: Some(self.info.clone()),
                    ..ToolOutput::text("Screenshot of the visible page.")
                })
            }
            "scroll" | "hover" | "wait_for" | "press_key" => {
                self.actions.push(format!("{} (nothing moves on a saved page)", call.name));
                Ok(ToolOutput::text("Done."))
            }
            name => Err(ToolError(format!(
                "`{name}` is not available on a saved page (no navigation, no scripts); finish with what the page holds."
            ))),
        }
    }
}

impl SavedPage {
    /// A declarative tool's call: its form's controls filled by name, then the form submitted
    /// (nothing is sent from a saved page) or, without `toolautosubmit`, left for the user.
    fn run_form_tool(&mut self, name: &str, arguments: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let tool = self
            .tools
            .iter()
            .find(|t| t.info.name == name)
            .cloned()
            .ok_or_else(|| ToolError(format!("The page offers no tool `{name}`.")))?;
        let mut filled = Vec::new();
        for (key, value) in arguments {
            let controls: Vec<usize> = tool.fields.iter().filter(|(n, _)| n == key).map(|&(_, at)| at).collect();
            let Some(&first) = controls.first() else {
                return Err(ToolError(format!("The form `{name}` has no field `{key}`.")));
            };
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match self.elements[first].attr("type") {
                Some("checkbox") => {
                    let ticked = value.as_bool().unwrap_or(!text.is_empty() && text != "false");
                    self.set_attribute(first, "checked", ticked.then(String::new));
                }
                // One of a radio group: the one whose value it is.
                Some("radio") => {
                    for &at in &controls {
                        let chosen = self.elements[at].attr("value") == Some(text.as_str());
                        self.set_attribute(at, "checked", chosen.then(String::new));
                    }
                }
                _ if self.elements[first].tag == "select" => {
                    let Some(choice) = self.choices[first].iter().find(|c| c.value == text || c.text == text).cloned()
                    else {
                        return Err(ToolError(format!("`{key}` has no option {text:?}.")));
                    };
                    self.set_attribute(first, "value", Some(choice.value));
                }
                _ => self.set_attribute(first, "value", Some(text.clone())),
            }
            filled.push(format!("{key}={text:?}"));
        }
        let form = tool.info.form.as_ref();
        let (method, action) = form.map_or(("get", ""), |f| (f.method.as_str(), f.action.as_str()));
        let what = if tool.submits {
            format!("submitted the form `{name}` ({} {action}) with {}", method.to_uppercase(), filled.join(", "))
        } else {
            format!("filled the form `{name}` with {} (the page leaves submitting it to the user)", filled.join(", "))
        };
        self.actions.push(what.clone());
        Ok(ToolOutput::text(format!("The page {what}. (A saved page: nothing was sent and no page opened.)")))
    }
}

impl ToolExecutor for SavedPage {
    async fn execute(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        self.act(call)
    }
}

/// `[3] button "Send"`, as the snapshot and the cards name elements.
fn describe(element: &ElementInfo) -> String {
    format!("[{}] {} {:?}", element.index, element.tag, element.text)
}

/// An element whose text is still being read.
struct Open {
    tag: String,
    /// The element collecting this one's text (its index in `elements`), if any.
    collects: Option<usize>,
    hidden: bool,
}

#[derive(Default)]
struct Reader {
    elements: Vec<ElementInfo>,
    choices: Vec<Vec<Choice>>,
    /// Text per element while it is open.
    texts: Vec<String>,
    open: Vec<Open>,
    /// The form elements are in, by its place in `forms`.
    forms: Vec<(Option<String>, FormInfo)>,
    current_form: Option<usize>,
    /// Per form (same order): its WebMCP tool declaration (`toolname`, `tooldescription`,
    /// `toolautosubmit`), if it has one.
    form_tools: Vec<Option<(String, String, bool)>>,
    /// Per element (same order): its form's place in `forms`, and what a form tool's argument
    /// needs of it (`required`, `toolparamdescription`).
    element_forms: Vec<(Option<usize>, bool, Option<String>)>,
    /// `<label for=id>` texts, to name the fields they label.
    labels: BTreeMap<String, String>,
    label: Option<(String, String)>,
    /// The `<option>` being read: its select's position and the option's value.
    option: Option<(usize, Option<String>, String)>,
    title: Option<String>,
    in_title: bool,
    text: String,
}

impl Reader {
    fn hidden(&self) -> bool {
        self.open.iter().any(|o| o.hidden)
    }

    fn token(&mut self, token: Token) {
        match token {
            Token::StartTag(tag) => {
                let name = String::from_utf8_lossy(&tag.name).to_ascii_lowercase();
                let attributes: Vec<(String, String)> = tag
                    .attributes
                    .iter()
                    .map(|(k, v)| {
                        (String::from_utf8_lossy(k).to_ascii_lowercase(), String::from_utf8_lossy(v).into_owned())
                    })
                    .collect();
                self.start(name, attributes, tag.self_closing);
            }
            Token::EndTag(tag) => self.end(&String::from_utf8_lossy(&tag.name).to_ascii_lowercase()),
            Token::String(text) => self.string(&String::from_utf8_lossy(&text)),
            _ => {}
        }
    }

    fn start(&mut self, name: String, attributes: Vec<(String, String)>, self_closing: bool) {
        let attr = |key: &str| attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        match name.as_str() {
            "form" => {
                let form = FormInfo {
                    action: attr("action").unwrap_or_default(),
                    method: attr("method").unwrap_or_else(|| "get".into()).to_ascii_lowercase(),
                    name: attr("id").or_else(|| attr("name")).or_else(|| attr("aria-label")).unwrap_or_default(),
                    target: attr("target"),
                };
                self.forms.push((attr("id"), form));
                self.form_tools.push(
                    attr("toolname")
                        .filter(|n| is_tool_name(n))
                        .map(|n| (n, attr("tooldescription").unwrap_or_default(), attr("toolautosubmit").is_some())),
                );
                self.current_form = Some(self.forms.len() - 1);
            }
            "title" => self.in_title = true,
            "label" => self.label = attr("for").map(|id| (id, String::new())),
            "option" => {
                if let Some(select) = self.open.iter().rev().find(|o| o.tag == "select").and_then(|o| o.collects) {
                    self.option = Some((select, attr("value"), String::new()));
                }
            }
            "br" | "p" | "div" | "li" | "tr" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => self.text.push('\n'),
            _ => {}
        }
        let hidden = HIDDEN.contains(&name.as_str())
            || attr("hidden").is_some()
            || attr("aria-hidden").as_deref() == Some("true");
        let role = attr("role");
        let interactive = match name.as_str() {
            "a" => attr("href").is_some(),
            "input" => attr("type").as_deref() != Some("hidden"),
            "button" | "select" | "textarea" | "summary" => true,
            _ => role.as_deref().is_some_and(|r| INTERACTIVE_ROLES.contains(&r)) || attr("contenteditable").is_some(),
        } && !self.hidden()
            && !hidden;
        let collects = if interactive {
            let mut kept: Vec<(String, String)> = attributes
                .iter()
                .filter(|(k, _)| KEPT_ATTRIBUTES.contains(&k.as_str()))
                .filter(|(k, _)| !(k == "value" && attr("type").as_deref() == Some("password")))
                .cloned()
                .collect();
            if name == "select" {
                kept.retain(|(k, _)| k != "value");
            }
            let form_at = match attr("form") {
                Some(id) => self.forms.iter().position(|(f, _)| f.as_deref() == Some(id.as_str())),
                None => self.current_form,
            };
            let form = form_at.map(|i| self.forms[i].1.clone());
            self.element_forms.push((form_at, attr("required").is_some(), attr("toolparamdescription")));
            let text = attr("aria-label").unwrap_or_default();
            self.elements.push(ElementInfo {
                index: self.elements.len() as u32 + 1,
                tag: name.clone(),
                role,
                text,
                attributes: kept,
                form,
                depth: self.open.len().min(usize::from(u8::MAX)) as u8,
            });
            self.choices.push(Vec::new());
            self.texts.push(String::new());
            Some(self.elements.len() - 1)
        } else {
            None
        };
        if !VOID.contains(&name.as_str()) && !self_closing {
            let collects = collects.or_else(|| self.open.last().and_then(|o| o.collects));
            self.open.push(Open { tag: name, collects, hidden });
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "form" => self.current_form = None,
            "title" => self.in_title = false,
            "label" => {
                if let Some((id, text)) = self.label.take() {
                    self.labels.insert(id, squeeze(&text));
                }
            }
            "option" => {
                if let Some((select, value, text)) = self.option.take() {
                    let text = squeeze(&text);
                    let value = value.unwrap_or_else(|| text.clone());
                    self.choices[select].push(Choice { text, value });
                }
            }
            _ => {}
        }
        // Close up to the matching element (a tokenizer does not mend mis-nested tags).
        if let Some(at) = self.open.iter().rposition(|o| o.tag == name) {
            self.open.truncate(at);
        }
    }

    fn string(&mut self, text: &str) {
        if self.in_title {
            self.title.get_or_insert_with(String::new).push_str(text);
            return;
        }
        if self.hidden() {
            return;
        }
        self.text.push_str(text);
        if let Some((_, text_so_far)) = self.label.as_mut() {
            text_so_far.push_str(text);
        }
        if let Some((_, _, option)) = self.option.as_mut() {
            option.push_str(text);
            return;
        }
        if let Some(at) = self.open.last().and_then(|o| o.collects) {
            self.texts[at].push_str(text);
        }
    }

    fn finish(mut self, url: &str) -> SavedPage {
        for (element, text) in self.elements.iter_mut().zip(&self.texts) {
            if element.text.is_empty() {
                element.text = squeeze(text);
            }
            if element.text.is_empty() {
                let labelled = element.attr("id").and_then(|id| self.labels.get(id)).cloned();
                let named = element.attr("placeholder").or_else(|| element.attr("name")).map(str::to_owned);
                element.text = labelled.or(named).unwrap_or_default();
            }
        }
        let text: Vec<String> = self.text.lines().map(squeeze).filter(|l| !l.is_empty()).collect();
        let tools = self.form_tools(url);
        SavedPage {
            info: PageInfo { url: url.to_owned(), title: squeeze(self.title.as_deref().unwrap_or("")) },
            elements: self.elements,
            choices: self.choices,
            text: text.join("\n"),
            actions: Vec::new(),
            picture: None,
            tools,
        }
    }

    /// The forms declared as tools, each with the schema of its named controls: a string, a
    /// number (`number`, `range`), a boolean (a checkbox), or one of the values of a dropdown or
    /// a radio group; `required` controls are required; the description is the control's
    /// `toolparamdescription`, else its label.
    fn form_tools(&self, url: &str) -> Vec<FormTool> {
        let mut tools = Vec::new();
        for (at, declared) in self.form_tools.iter().enumerate() {
            let Some((name, description, submits)) = declared else { continue };
            let form = &self.forms[at].1;
            let mut properties = Map::new();
            let mut required = Vec::new();
            let mut fields = Vec::new();
            for (i, element) in self.elements.iter().enumerate() {
                let (form_at, is_required, param_description) = &self.element_forms[i];
                let kind = element.attr("type").unwrap_or("text");
                let Some(field) = element.attr("name").filter(|_| *form_at == Some(at)) else { continue };
                if !matches!(element.tag.as_str(), "input" | "select" | "textarea") || NOT_ARGUMENTS.contains(&kind) {
                    continue;
                }
                fields.push((field.to_owned(), i));
                if *is_required && !required.contains(&field.to_owned()) {
                    required.push(field.to_owned());
                }
                let mut schema = match (element.tag.as_str(), kind) {
                    ("select", _) => {
                        json!({"type": "string", "enum": self.choices[i].iter().map(|c| c.value.clone()).collect::<Vec<_>>()})
                    }
                    (_, "number" | "range") => json!({"type": "number"}),
                    (_, "checkbox") => json!({"type": "boolean"}),
                    (_, "radio") => {
                        let mut values: Vec<Value> = properties
                            .get(field)
                            .and_then(|p| p.get("enum"))
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        values.push(Value::from(element.attr("value").unwrap_or("on")));
                        json!({"type": "string", "enum": values})
                    }
                    _ => json!({"type": "string"}),
                };
                let said = param_description.clone().unwrap_or_else(|| element.text.clone());
                if !said.is_empty() {
                    schema["description"] = Value::from(said);
                }
                properties.insert(field.to_owned(), schema);
            }
            let action = hearth_agent::policy::site::web_url(&form.action, Some(url))
                .map_or_else(|| form.action.clone(), |u| u.to_string());
            let info = PageToolInfo {
                name: name.clone(),
                description: description.clone(),
                input_schema: Some(json!({"type": "object", "properties": properties, "required": required})),
                read_only: false,
                form: Some(PageToolForm {
                    method: form.method.clone(),
                    action,
                    new_window: form.target.as_deref().is_some_and(|t| !matches!(t, "" | "_self" | "_parent" | "_top")),
                }),
                ask: false,
            };
            tools.push(FormTool { info, fields, submits: *submits });
        }
        tools
    }
}

/// A WebMCP tool name a page may declare: `[A-Za-z0-9_.-]{1,128}`.
fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Whitespace runs as one space, trimmed.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<!doctype html><html><head><title>Order  form</title><style>p{}</style>
        <script>if (a < b) document.write("<button>fake</button>")</script></head>
        <body><h1>Checkout</h1><p>Fill in the form.</p>
        <form id="f" action="/pay" method="POST">
          <label for="name">Full name</label><input id="name" name="name">
          <input type="password" name="pw" value="secret">
          <select name="size"><option value="s">Small</option><option>Large</option></select>
          <input type="checkbox" id="gift"><label for="gift">Gift wrap</label>
          <button type="submit">Place <b>order</b></button>
        </form>
        <input type="hidden" name="csrf" value="x">
        <a href="https://example.com/help">Help</a><div hidden><button>Secret</button></div>
        </body></html>"#;

    #[test]
    fn the_snapshot_holds_the_interactive_elements_with_their_names_and_forms() {
        let page = SavedPage::parse(PAGE, "http://127.0.0.1/order");
        let lines: Vec<String> = page.elements.iter().map(describe).collect();
        assert_eq!(
            lines,
            [
                r#"[1] input "Full name""#,
                r#"[2] input "pw""#,
                r#"[3] select "size""#,
                r#"[4] input "Gift wrap""#,
                r#"[5] button "Place order""#,
                r#"[6] a "Help""#,
            ]
        );
        assert_eq!(page.info.title, "Order form");
        let form = page.elements[4].form.as_ref().expect("the button is in the form");
        assert_eq!((form.action.as_str(), form.method.as_str()), ("/pay", "post"));
        assert_eq!(page.elements[1].attr("value"), None, "a password's value is never shown");
        assert!(page.elements[5].form.is_none());
        assert!(page.text.contains("Fill in the form."), "{}", page.text);
        assert!(!page.text.contains("fake") && !page.text.contains("Secret"), "{}", page.text);
    }

    #[test]
    fn the_tools_change_the_page_state_a_user_would_see() {
        let mut page = SavedPage::parse(PAGE, "http://127.0.0.1/order");
        let call = |name: &str, arguments: Value| ToolInvocation {
            call_id: "c".into(),
            name: name.into(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
            judged_url: None,
            approved: Vec::new(),
            in_tab: None,
            cancel: hearth_agent::CancelToken::new(),
        };
        page.act(&call("type", serde_json::json!({"index": 1, "text": "Ada"}))).unwrap();
        page.act(&call("select", serde_json::json!({"index": 3, "option": "Large"}))).unwrap();
        page.act(&call("click", serde_json::json!({"index": 4}))).unwrap();
        assert!(page.act(&call("select", serde_json::json!({"index": 3, "option": "Huge"}))).is_err());
        assert!(page.act(&call("type", serde_json::json!({"index": 6, "text": "x"}))).is_err());
        assert!(page.act(&call("click", serde_json::json!({"index": 60}))).is_err());
        assert!(page.act(&call("navigate", serde_json::json!({"url": "https://example.com"}))).is_err());
        assert_eq!(
            page.state(),
            [
                r#"[1] input "Full name": "Ada""#,
                r#"[2] input "pw": """#,
                r#"[3] select "size": "Large""#,
                r#"[4] input "Gift wrap": checked"#
            ]
        );
    }

    const SHOP: &str = r#"<!doctype html><html><head><title>Shop</title></head><body>
        <form toolname="search_products" tooldescription="Search the shop's products." toolautosubmit action="search.html" method="get">
          <label for="q">Query</label><input id="q" name="q" required toolparamdescription="What to look for">
          <select name="sort"><option value="price">Cheapest first</option><option value="new">Newest first</option></select>
          <input type="checkbox" name="in_stock" aria-label="In stock only">
          <input type="radio" name="size" value="s"><input type="radio" name="size" value="l">
          <input type="number" name="max_price">
          <input type="hidden" name="csrf" value="x"><input type="password" name="pw">
          <button>Search</button>
        </form>
        <form toolname="subscribe" action="https://news.example/join" method="post" target="_blank"><input name="email"></form>
        <form toolname="bad name!" action="/x"><input name="a"></form>
        <form action="/plain"><input name="b"></form>
        </body></html>"#;

    fn call(name: &str, arguments: Value) -> ToolInvocation {
        ToolInvocation {
            call_id: "c".into(),
            name: name.into(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
            judged_url: None,
            approved: Vec::new(),
            in_tab: None,
            cancel: hearth_agent::CancelToken::new(),
        }
    }

    #[test]
    fn a_form_declared_as_a_tool_is_offered_with_the_schema_of_its_named_controls() {
        let mut page = SavedPage::parse(SHOP, "http://127.0.0.1/shop/");
        let tools =
            page.act(&call("snapshot", json!({}))).unwrap().page_tools.expect("the snapshot carries the page's tools");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["search_products", "subscribe"], "an invalid name and a plain form are no tools");
        let search = &tools[0];
        assert_eq!(search.description, "Search the shop's products.");
        assert!(!search.read_only);
        let form = search.form.as_ref().expect("a declarative tool has its form");
        assert_eq!(
            (form.method.as_str(), form.action.as_str(), form.new_window),
            ("get", "http://127.0.0.1/shop/search.html", false)
        );
        assert_eq!(
            search.input_schema.as_ref().unwrap(),
            &json!({
                "type": "object",
                "properties": {
                    "q": {"type": "string", "description": "What to look for"},
                    "sort": {"type": "string", "enum": ["price", "new"], "description": "sort"},
                    "in_stock": {"type": "boolean", "description": "In stock only"},
                    "size": {"type": "string", "enum": ["s", "l"], "description": "size"},
                    "max_price": {"type": "number", "description": "max_price"},
                },
                "required": ["q"],
            })
        );
        assert!(tools[1].form.as_ref().unwrap().new_window, "target=_blank opens elsewhere");
    }

    #[test]
    fn calling_a_form_tool_fills_its_controls_and_submits_nothing_from_a_saved_page() {
        let mut page = SavedPage::parse(SHOP, "http://127.0.0.1/shop/");
        let out = page
            .act(&call(
                "page.search_products",
                json!({"q": "lamp", "sort": "new", "in_stock": true, "size": "l", "max_price": 30}),
            ))
            .unwrap();
        assert!(
            out.text.contains("submitted the form `search_products` (GET http://127.0.0.1/shop/search.html)"),
            "{}",
            out.text
        );
        let state = page.state();
        for line in [
            r#"input "Query": "lamp""#,
            r#"select "sort": "new""#,
            r#"input "In stock only": checked"#,
            r#"input "max_price": "30""#,
        ] {
            assert!(state.iter().any(|l| l.ends_with(line)), "{line:?} missing from {state:?}");
        }
        let radios: Vec<&String> = state.iter().filter(|l| l.contains(r#""size""#)).collect();
        assert!(radios[0].ends_with("not checked") && radios[1].ends_with(": checked"), "{radios:?}");
        assert!(
            page.act(&call("page.search_products", json!({"csrf": "y"}))).is_err(),
            "a hidden control is no argument"
        );
        assert!(page.act(&call("page.search_products", json!({"sort": "oldest"}))).is_err());
        assert!(page.act(&call("page.checkout", json!({}))).is_err());
        let filled = page.act(&call("page.subscribe", json!({"email": "ada@example.com"}))).unwrap();
        assert!(filled.text.contains("leaves submitting it to the user"), "{}", filled.text);
    }
}
