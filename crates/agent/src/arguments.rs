//! Each tool's arguments as a Rust type, and [`ToolCall`], the one table of tools and their
//! argument types. The JSON schema the model is shown is derived from these types (schemars; the
//! doc comments of the fields are the descriptions, word for word), the TypeScript executors
//! receive them (ts-rs: `ToolArguments[name]`), and the policy and the loop read them typed.
//! Adding an argument is one edit here.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;

/// Tools without arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

/// Tools that act on one element (`click`, `hover`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct ElementArgs {
    /// The element's number from the latest snapshot, e.g. 12 for [12].
    pub index: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct TypeArgs {
    /// The element's number from the latest snapshot, e.g. 12 for [12].
    pub index: u32,
    /// The exact text to enter.
    pub text: String,
    /// Press Enter after typing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub submit: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct SelectArgs {
    /// The element's number from the latest snapshot, e.g. 12 for [12].
    pub index: u32,
    /// The visible text of the option to choose.
    pub option: String,
}

// Which way `scroll` goes (no doc comment: the field's is the description).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "lowercase")]
pub enum ScrollDirection {
    Up,
    Down,
    Top,
    Bottom,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct ScrollArgs {
    /// Which way to scroll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub direction: Option<ScrollDirection>,
    /// Scroll until this element from the latest snapshot is visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub to_index: Option<u32>,
}

// The keys `press_key` offers (KeyboardEvent names; "Space" for the space bar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
pub enum Key {
    Enter,
    Escape,
    Tab,
    Space,
    Backspace,
    Delete,
    ArrowUp,
    ArrowDown,
    ArrowLeft,
    ArrowRight,
    Home,
    End,
    PageUp,
    PageDown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct PressKeyArgs {
    /// The key to press.
    pub key: Key,
    /// The element's number from the latest snapshot, e.g. 12 for [12].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub index: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct NavigateArgs {
    /// The address to open.
    #[schemars(length(min = 1))]
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct ReadLinkArgs {
    /// The address of the page to read (a link's href; relative to the current page is fine).
    #[schemars(length(min = 1))]
    pub url: String,
}

/// Another open tab, by the number the task's list of tabs gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct TabArgs {
    /// The tab's number, e.g. 812 for "tab 812".
    pub tab: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct WaitForArgs {
    /// Text to wait for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub text: Option<String>,
    /// CSS selector to wait for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub selector: Option<String>,
    /// How long to wait at most (default 10, at most 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 60))]
    #[ts(optional)]
    pub timeout_seconds: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct RunJavascriptArgs {
    /// An expression or statements; the value of the last expression is returned.
    #[schemars(length(min = 1))]
    pub code: String,
}

/// A point of the latest screenshot (`click_at`), as Gemma's own answers about images give
/// positions: 0 to 1000 across its width and down its height, whatever its pixel size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct PointArgs {
    /// From the left edge of the screenshot (0) to its right edge (1000).
    #[schemars(range(min = 0, max = 1000))]
    pub x: u32,
    /// From the top edge of the screenshot (0) to its bottom edge (1000).
    #[schemars(range(min = 0, max = 1000))]
    pub y: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct AskUserArgs {
    /// The question.
    #[schemars(length(min = 1))]
    pub question: String,
    /// 2 to 6 short answers to choose from.
    #[schemars(length(min = 2, max = 6))]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(deny_unknown_fields)]
pub struct DoneArgs {
    /// The complete final answer for the user.
    #[schemars(length(min = 1))]
    pub result: String,
    /// false if the task could not be completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub success: Option<bool>,
}

/// A call of one of the agent's tools with its typed arguments: the table of tool names
/// (snake_case of the variant) and their argument types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(tag = "name", content = "arguments", rename_all = "snake_case")]
pub enum ToolCall {
    ReadPage(NoArguments),
    Snapshot(NoArguments),
    Screenshot(NoArguments),
    Click(ElementArgs),
    ClickAt(PointArgs),
    Type(TypeArgs),
    Select(SelectArgs),
    Scroll(ScrollArgs),
    Hover(ElementArgs),
    PressKey(PressKeyArgs),
    Navigate(NavigateArgs),
    GoBack(NoArguments),
    ReadLink(ReadLinkArgs),
    ReadTab(TabArgs),
    OpenTab(NavigateArgs),
    SwitchTab(TabArgs),
    WaitFor(WaitForArgs),
    RunJavascript(RunJavascriptArgs),
    AskUser(AskUserArgs),
    Done(DoneArgs),
}

impl ToolCall {
    /// Reads a call whose arguments the schema accepted (`validate_arguments`).
    pub fn parse(name: &str, arguments: &Map<String, Value>) -> Result<Self, serde_json::Error> {
        let mut call = Map::new();
        call.insert("name".into(), Value::String(name.to_owned()));
        call.insert("arguments".into(), Value::Object(arguments.clone()));
        serde_json::from_value(Value::Object(call))
    }

    /// The element the call acts on, if any (`to_index` for scroll).
    pub fn element_index(&self) -> Option<u32> {
        match self {
            ToolCall::Click(a) | ToolCall::Hover(a) => Some(a.index),
            ToolCall::Type(a) => Some(a.index),
            ToolCall::Select(a) => Some(a.index),
            ToolCall::Scroll(a) => a.to_index,
            ToolCall::PressKey(a) => a.index,
            _ => None,
        }
    }
}

/// Each tool's name and the JSON schema of its arguments, in [`ToolCall`]'s order, in the
/// subset of JSON schema the call grammar and the validator read (no `$ref`, no `format`, no
/// titles; an optional argument is its type, not "or null").
pub fn argument_schemas() -> Vec<(String, Value)> {
    let root = raw_schema_of::<ToolCall>();
    let variants = root.get("oneOf").and_then(Value::as_array).cloned().unwrap_or_default();
    variants
        .into_iter()
        .filter_map(|variant| {
            let properties = variant.get("properties")?;
            let name = properties.get("name")?.get("const")?.as_str()?.to_owned();
            let mut arguments = properties.get("arguments")?.clone();
            compact(&mut arguments);
            // The type's own doc comment is for Rust readers; the tool's description is the model's.
            arguments.as_object_mut()?.remove("description");
            Some((name, arguments))
        })
        .collect()
}

/// Keeps only the keywords the grammar and the validator read, at every level of a schema; an
/// optional argument (`Option<T>`, which schemars writes as "T or null") is T: the model leaves
/// it out rather than writing null.
fn compact(schema: &mut Value) {
    let Value::Object(node) = schema else { return };
    node.retain(|key, _| !matches!(key.as_str(), "title" | "format" | "$schema"));
    if let Some(Value::Array(types)) = node.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        let single = if kept.len() == 1 { kept[0].clone() } else { Value::Array(kept) };
        node.insert("type".into(), single);
    }
    if let Some(Value::Array(values)) = node.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(options)) = node.get("anyOf") {
        let not_null: Vec<&Value> = options.iter().filter(|o| o.get("type") != Some(&Value::from("null"))).collect();
        if let [only] = not_null[..]
            && let Some(inner) = only.as_object().cloned()
        {
            node.remove("anyOf");
            for (key, value) in inner {
                node.entry(key).or_insert(value);
            }
            return compact(schema);
        }
    }
    if node.get("type").and_then(Value::as_str) == Some("object") && !node.contains_key("properties") {
        node.insert("properties".into(), Value::Object(Map::new()));
    }
    if let Some(Value::Object(properties)) = node.get_mut("properties") {
        properties.values_mut().for_each(compact);
    }
    if let Some(items) = node.get_mut("items") {
        compact(items);
    }
}

/// `T`'s schema with every subschema inlined, optional fields as their own type, no meta-schema.
fn raw_schema_of<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    settings.into_generator().into_root_schema_for::<T>().into()
}

/// The keys `press_key` offers, from [`Key`]'s schema.
pub fn press_keys() -> Vec<String> {
    let schema = raw_schema_of::<Key>();
    let keys = schema.get("enum").and_then(Value::as_array).cloned().unwrap_or_default();
    keys.into_iter().filter_map(|k| k.as_str().map(str::to_owned)).collect()
}

/// The schema of one type, compacted as [`argument_schemas`] does (for tests of a single type).
#[cfg(test)]
fn schema_of<T: JsonSchema>() -> Value {
    let mut value = raw_schema_of::<T>();
    compact(&mut value);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_parse_into_their_types_and_wrong_arguments_do_not() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        let call = ToolCall::parse("type", &args(serde_json::json!({"index": 3, "text": "hi"}))).unwrap();
        assert_eq!(call, ToolCall::Type(TypeArgs { index: 3, text: "hi".into(), submit: None }));
        assert_eq!(call.element_index(), Some(3));
        let key = ToolCall::parse("press_key", &args(serde_json::json!({"key": "ArrowUp"}))).unwrap();
        assert_eq!(key, ToolCall::PressKey(PressKeyArgs { key: Key::ArrowUp, index: None }));
        assert!(ToolCall::parse("click", &args(serde_json::json!({"idx": 3}))).is_err());
        assert!(ToolCall::parse("press_key", &args(serde_json::json!({"key": "F13"}))).is_err());
        assert!(ToolCall::parse("fly", &Map::new()).is_err());
    }

    #[test]
    fn an_enum_argument_lists_its_values() {
        let schema = schema_of::<PressKeyArgs>();
        let keys = &schema["properties"]["key"];
        assert_eq!(keys["type"], "string");
        assert_eq!(keys["enum"].as_array().map(Vec::len), Some(14));
        assert_eq!(keys["description"], "The key to press.");
    }
}
