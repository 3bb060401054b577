//! Conversation types, in the JSON shape Hugging Face chat templates consume
//! (OpenAI-style messages: `role`, `content`, `tool_calls`, `tool_call_id`).
//!
//! The typed fields are the ones Hearth itself reads or writes; every other field of a message,
//! call, tool or declaration is kept in `extra` and reaches the template as given (Gemma 4's
//! reads `reasoning`, `tool_responses`, a declaration's `response`…).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message. `assistant` is rendered as `model` by Gemma's template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    /// Treated like `system` by Gemma's template (OpenAI's newer name).
    Developer,
    User,
    Assistant,
    /// A tool's result; folded by the template into the preceding assistant turn.
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// The model's reasoning for this turn; the template re-emits it only for assistant
    /// messages after the last user message (i.e. during a tool-calling loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On `tool` messages: the `id` of the call this answers. The template resolves the tool
    /// name through it, so ids must be unique within an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On `tool` messages: the tool's name (fallback when `tool_call_id` matches nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Every other field, passed to the template unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A message body: plain text or multimodal parts.
///
/// Tool results are text too: with Python's jinja2 a mapping passes the template's `is sequence`
/// test and breaks its content-parts branch, so structured results must be serialized first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of a multimodal message. Media parts render as the model's placeholder tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// Media parts keep their other fields (`url`, `image`…) for templates that read them.
    Image {
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    Audio {
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    Video {
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
}

/// A call the assistant made: `{"type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The name and arguments of a call. Arguments are a JSON object (the template refuses strings);
/// an OpenAI-style JSON-encoded string is accepted on input and decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default, deserialize_with = "object_or_json_string")]
    pub arguments: Map<String, Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool offered to the model: `{"type": "function", "function": {name, description, parameters}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionDeclaration,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A function declaration; `parameters` is a JSON schema (`type: object`, `properties`, `required`),
/// kept whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDeclaration {
    pub name: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Every other field (`response`, …), passed to the template unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn function_kind() -> String {
    "function".to_owned()
}

fn object_or_json_string<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(D::Error::custom("tool call arguments must be a JSON object")),
        },
        _ => Err(D::Error::custom("tool call arguments must be a JSON object")),
    }
}

impl Message {
    fn new(role: Role, content: Option<MessageContent>) -> Self {
        Self {
            role,
            content,
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            extra: Map::new(),
        }
    }

    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, Some(MessageContent::Text(text.into())))
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, Some(MessageContent::Text(text.into())))
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, Some(MessageContent::Text(text.into())))
    }

    /// An assistant message that calls tools (with optional visible text).
    pub fn assistant_calls(text: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        let mut m = Self::new(Role::Assistant, text.map(MessageContent::Text));
        m.tool_calls = tool_calls;
        m
    }

    /// A tool result answering the call with `call_id`.
    pub fn tool(call_id: impl Into<String>, name: impl Into<String>, content: MessageContent) -> Self {
        let mut m = Self::new(Role::Tool, Some(content));
        m.tool_call_id = Some(call_id.into());
        m.name = Some(name.into());
        m
    }

    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning_content = Some(reasoning.into());
        self
    }

    /// The text of the message (text parts joined), if any.
    pub fn text(&self) -> Option<String> {
        match self.content.as_ref()? {
            MessageContent::Text(t) => Some(t.clone()),
            MessageContent::Parts(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::Text { text, .. } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect(),
            ),
        }
    }
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Map<String, Value>) -> Self {
        Self {
            id: Some(id.into()),
            kind: function_kind(),
            function: FunctionCall { name: name.into(), arguments, extra: Map::new() },
            extra: Map::new(),
        }
    }
}

impl Tool {
    pub fn function(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            kind: function_kind(),
            function: FunctionDeclaration {
                name: name.into(),
                description: description.into(),
                parameters: Some(parameters),
                extra: Map::new(),
            },
            extra: Map::new(),
        }
    }
}
