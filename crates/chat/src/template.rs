//! The model's chat template, rendered with minijinja the way Hugging Face's
//! `apply_chat_template` renders it with Python's jinja2.

use std::path::{Path, PathBuf};

use minijinja::{AutoEscape, Environment, ErrorKind, Value, context};

use serde_json::json;

use crate::GEMMA4_E2B_TEMPLATE;
use crate::message::{Message, Tool};

/// Names of the templates kept in the environment, as Hugging Face names them in a list-form
/// `chat_template`.
const DEFAULT: &str = "default";
const TOOL_USE: &str = "tool_use";

/// Why a template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the chat template does not parse: {0}")]
    Syntax(String),
    #[error("the chat template failed while rendering this conversation: {0}")]
    Render(String),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no chat template in {0}: expected chat_template.jinja or a \"chat_template\" entry in tokenizer_config.json"
    )]
    MissingTemplate(PathBuf),
    #[error(
        "no BOS token in {0}: expected \"bos_token\" in tokenizer_config.json, or \"bos_token_id\" in config.json naming a token of tokenizer.json"
    )]
    MissingBos(PathBuf),
    #[error("tokenizer_config.json is not valid: {0}")]
    InvalidConfig(String),
}

/// What to render: the same variables `apply_chat_template` passes to the template.
#[derive(Debug, Clone, Copy)]
pub struct RenderRequest<'a> {
    pub messages: &'a [Message],
    /// Tool declarations; an empty slice is passed to the template as `none`, like HF does.
    pub tools: &'a [Tool],
    /// Gemma 4: injects `<|think|>` into the system turn and, after a tool response, opens the
    /// thought channel.
    pub enable_thinking: bool,
    /// Gemma 4: keep the thoughts before earlier tool calls when a new user turn arrives (they are
    /// dropped otherwise), so an agent's history renders as it was generated and the KV cache
    /// holding it stays valid.
    pub preserve_thinking: bool,
    /// End with the opening of the model's turn (or nothing after a tool response, where the
    /// model continues its own turn).
    pub add_generation_prompt: bool,
}

/// A compiled chat template (with its `tool_use` variant, when the model has one) plus the
/// special tokens it reads.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    /// A separate template for conversations with tools.
    has_tool_use: bool,
}

impl ChatTemplate {
    /// Compiles `source` (a Jinja chat template). `bos_token` is the string the template writes
    /// as `{{ bos_token }}`: the model's own (its tokenizer's text for the config's BOS id).
    pub fn from_str(source: &str, bos_token: &str) -> Result<Self, ChatError> {
        Self::compile(source, None, bos_token)
    }

    fn compile(default: &str, tool_use: Option<&str>, bos_token: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        // Hugging Face renders with trim_blocks and lstrip_blocks, no autoescape, and Python
        // string/dict methods available; byte-identical output depends on all three.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(DEFAULT, default.to_owned()).map_err(|e| ChatError::Syntax(describe(&e)))?;
        if let Some(source) = tool_use {
            env.add_template_owned(TOOL_USE, source.to_owned()).map_err(|e| ChatError::Syntax(describe(&e)))?;
        }
        Ok(Self { env, bos_token: bos_token.to_owned(), has_tool_use: tool_use.is_some() })
    }

    /// Loads the template of a model directory: `chat_template.jinja` if present, else the
    /// `chat_template` entry of `tokenizer_config.json` (a string, or a list of named templates).
    /// The BOS token is the model's: `bos_token` of `tokenizer_config.json`, else the token of
    /// tokenizer.json whose id config.json gives as `bos_token_id`.
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self, ChatError> {
        let dir = dir.as_ref();
        let read = |name: &str| -> Result<Option<String>, ChatError> {
            let path = dir.join(name);
            if !path.exists() {
                return Ok(None);
            }
            std::fs::read_to_string(&path).map(Some).map_err(|source| ChatError::Io { path, source })
        };
        let config = read("tokenizer_config.json")?;
        let template = read("chat_template.jinja")?;
        if template.is_none() && config.is_none() {
            return Err(ChatError::MissingTemplate(dir.to_owned()));
        }
        let bos = match config.as_deref().map(config_bos).transpose()?.flatten() {
            Some(bos) => bos,
            None => bos_from_ids(read("config.json")?.as_deref(), read("tokenizer.json")?.as_deref())
                .ok_or_else(|| ChatError::MissingBos(dir.to_owned()))?,
        };
        Self::from_parts(template.as_deref(), config.as_deref(), &bos).map_err(|e| match e {
            ChatError::MissingTemplate(_) => ChatError::MissingTemplate(dir.to_owned()),
            other => other,
        })
    }

    /// Like [`from_model_dir`](Self::from_model_dir) for files already in memory (e.g. read in
    /// the browser): an optional `chat_template.jinja` (it wins, as in transformers) and an
    /// optional `tokenizer_config.json`. `bos_token` is the model's (see
    /// [`from_str`](Self::from_str)); the config's `bos_token`, when it names one, is used instead.
    ///
    /// A list-form `chat_template` is chosen from as transformers does: `tool_use` when tools
    /// are given and the list has it, else `default` (else the first entry).
    pub fn from_parts(
        chat_template_jinja: Option<&str>,
        tokenizer_config_json: Option<&str>,
        bos_token: &str,
    ) -> Result<Self, ChatError> {
        let config: Option<serde_json::Value> = tokenizer_config_json
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| ChatError::InvalidConfig(e.to_string()))?;
        let bos = config.as_ref().and_then(|c| c.get("bos_token")).and_then(token_text).unwrap_or(bos_token);
        if let Some(source) = chat_template_jinja {
            return Self::from_str(source, bos);
        }
        let entry = config.as_ref().and_then(|c| c.get("chat_template"));
        let (default, tool_use) = match entry {
            None | Some(serde_json::Value::Null) => return Err(ChatError::MissingTemplate(PathBuf::from("."))),
            Some(serde_json::Value::String(source)) => (source.as_str(), None),
            Some(serde_json::Value::Array(list)) => named_templates(list)?,
            Some(_) => {
                return Err(ChatError::InvalidConfig(
                    "chat_template must be a string or a list of {name, template}".into(),
                ));
            }
        };
        Self::compile(default, tool_use, bos)
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// Whether a conversation with tools renders their declarations: the probe tool's name and
    /// description appear in the prompt. A template that ignores `tools` (or fails on them) gives
    /// the model no way to know its tools.
    pub fn renders_tools(&self) -> bool {
        let probe = Tool::function(
            "hearth_probe_tool",
            "Probe of the chat template",
            json!({"type": "object", "properties": {"probe_argument": {"type": "string", "description": "A probe"}}}),
        );
        let messages = [Message::user("Which tools are there?")];
        let request = RenderRequest {
            messages: &messages,
            tools: std::slice::from_ref(&probe),
            enable_thinking: false,
            preserve_thinking: false,
            add_generation_prompt: true,
        };
        self.render(&request)
            .is_ok_and(|out| out.contains("hearth_probe_tool") && out.contains("Probe of the chat template"))
    }

    /// This template, or, if it cannot render tools, the same with the official Gemma 4 template
    /// (which Hearth ships) rendering every conversation that has tools. Only for Gemma 4 models:
    /// that template writes Gemma 4's own markup.
    pub fn or_gemma4_for_tools(self) -> Result<Self, ChatError> {
        if self.renders_tools() {
            return Ok(self);
        }
        let mut env = self.env;
        env.add_template_owned(TOOL_USE, GEMMA4_E2B_TEMPLATE).map_err(|e| ChatError::Syntax(describe(&e)))?;
        Ok(Self { env, bos_token: self.bos_token, has_tool_use: true })
    }

    /// Renders a conversation to the exact prompt string the model expects.
    pub fn render(&self, request: &RenderRequest<'_>) -> Result<String, ChatError> {
        let name = if self.has_tool_use && !request.tools.is_empty() { TOOL_USE } else { DEFAULT };
        let template = self.env.get_template(name).map_err(|e| ChatError::Syntax(describe(&e)))?;
        let tools = if request.tools.is_empty() { Value::from(()) } else { Value::from_serialize(request.tools) };
        template
            .render(context! {
                messages => Value::from_serialize(request.messages),
                tools => tools,
                bos_token => self.bos_token.as_str(),
                add_generation_prompt => request.add_generation_prompt,
                enable_thinking => request.enable_thinking,
                preserve_thinking => request.preserve_thinking,
            })
            .map_err(|e| ChatError::Render(describe(&e)))
    }
}

/// The `default` and `tool_use` sources of a list-form `chat_template` (`[{name, template}]`).
fn named_templates(list: &[serde_json::Value]) -> Result<(&str, Option<&str>), ChatError> {
    let mut named = Vec::with_capacity(list.len());
    for entry in list {
        let name = entry.get("name").and_then(|n| n.as_str());
        let source = entry.get("template").and_then(|t| t.as_str());
        match (name, source) {
            (Some(name), Some(source)) => named.push((name, source)),
            _ => return Err(ChatError::InvalidConfig("a chat_template entry lacks its name or template".into())),
        }
    }
    let find = |wanted: &str| named.iter().find(|(name, _)| *name == wanted).map(|(_, source)| *source);
    let default = find(DEFAULT)
        .or_else(|| named.first().map(|(_, source)| *source))
        .ok_or_else(|| ChatError::InvalidConfig("chat_template is an empty list".into()))?;
    Ok((default, find(TOOL_USE)))
}

/// `bos_token` of tokenizer_config.json, if it names one.
fn config_bos(config_json: &str) -> Result<Option<String>, ChatError> {
    let config: serde_json::Value =
        serde_json::from_str(config_json).map_err(|e| ChatError::InvalidConfig(e.to_string()))?;
    Ok(config.get("bos_token").and_then(token_text).map(str::to_owned))
}

/// The text of the token config.json names as `bos_token_id`, looked up in tokenizer.json.
fn bos_from_ids(config_json: Option<&str>, tokenizer_json: Option<&str>) -> Option<String> {
    let config: serde_json::Value = serde_json::from_str(config_json?).ok()?;
    let id = config.get("bos_token_id").or_else(|| config.get("text_config")?.get("bos_token_id"))?.as_u64()?;
    let tokenizer: serde_json::Value = serde_json::from_str(tokenizer_json?).ok()?;
    let added = tokenizer.get("added_tokens")?.as_array()?;
    added
        .iter()
        .find(|t| t.get("id").and_then(|i| i.as_u64()) == Some(id))
        .and_then(|t| t.get("content")?.as_str())
        .map(str::to_owned)
}

/// `raise_exception(msg)`, which HF exposes to templates for input validation.
fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// A special token in tokenizer_config.json is either a string or `{"content": "…"}`.
fn token_text(v: &serde_json::Value) -> Option<&str> {
    v.as_str().or_else(|| v.get("content").and_then(|c| c.as_str()))
}

/// minijinja's Display omits the cause chain; include it so errors say where they happened.
fn describe(e: &minijinja::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_string_arguments_are_decoded() {
        // The template raises for non-mapping arguments; OpenAI-style JSON strings are decoded
        // on input so such histories still render.
        let t = ChatTemplate::from_str(GEMMA4_E2B_TEMPLATE, "<bos>").unwrap();
        let msgs: Vec<Message> = serde_json::from_value(serde_json::json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}
        ]))
        .unwrap();
        let out = t
            .render(&RenderRequest {
                messages: &msgs,
                tools: &[],
                enable_thinking: false,
                preserve_thinking: false,
                add_generation_prompt: true,
            })
            .unwrap();
        assert!(out.contains("<|tool_call>call:f{a:1}<tool_call|>"), "{out}");
    }

    #[test]
    fn raise_exception_surfaces_as_render_error() {
        let t = ChatTemplate::from_str("{{ raise_exception('bad input') }}", "<bos>").unwrap();
        let err = t
            .render(&RenderRequest {
                messages: &[],
                tools: &[],
                enable_thinking: false,
                preserve_thinking: false,
                add_generation_prompt: false,
            })
            .unwrap_err();
        assert!(matches!(err, ChatError::Render(ref m) if m.contains("bad input")), "{err}");
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(ChatTemplate::from_str("{% if %}", "<bos>"), Err(ChatError::Syntax(_))));
    }

    fn request<'a>(messages: &'a [Message], tools: &'a [Tool]) -> RenderRequest<'a> {
        RenderRequest {
            messages,
            tools,
            enable_thinking: false,
            preserve_thinking: false,
            add_generation_prompt: false,
        }
    }

    fn probe_tool() -> Tool {
        Tool::function("look", "Look around", json!({"type": "object", "properties": {}}))
    }

    #[test]
    fn loads_from_tokenizer_config() {
        let config = serde_json::json!({
            "bos_token": {"content": "<s>"},
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}]
        })
        .to_string();
        let t = ChatTemplate::from_parts(None, Some(&config), "<bos>").unwrap();
        assert_eq!(t.bos_token(), "<s>", "the config's bos_token wins");
        assert_eq!(t.render(&request(&[], &[])).unwrap(), "<s>D");
        // A chat_template.jinja file wins over the config entry; bos is the model's.
        let t = ChatTemplate::from_parts(Some("{{ bos_token }}J"), None, "<start>").unwrap();
        assert_eq!(t.render(&request(&[], &[])).unwrap(), "<start>J");
        assert!(matches!(ChatTemplate::from_parts(None, Some("{}"), "<bos>"), Err(ChatError::MissingTemplate(_))));
        assert!(matches!(ChatTemplate::from_parts(None, Some("{"), "<bos>"), Err(ChatError::InvalidConfig(_))));
        let not_a_template = r#"{"chat_template": 3}"#;
        assert!(matches!(
            ChatTemplate::from_parts(None, Some(not_a_template), "<bos>"),
            Err(ChatError::InvalidConfig(_))
        ));
        let nameless = r#"{"chat_template": [{"template": "x"}]}"#;
        assert!(matches!(ChatTemplate::from_parts(None, Some(nameless), "<bos>"), Err(ChatError::InvalidConfig(_))));
    }

    /// A list-form `chat_template` is rendered in Rust, never stringified: `tool_use` for a
    /// conversation with tools, `default` otherwise (as transformers chooses).
    #[test]
    fn list_form_templates_choose_tool_use_when_tools_are_given() {
        let config = serde_json::json!({
            "chat_template": [
                {"name": "default", "template": "D:{{ messages[0]['content'] }}"},
                {"name": "tool_use", "template": "T:{{ tools[0]['function']['name'] }}:{{ messages[0]['content'] }}"},
            ]
        })
        .to_string();
        let t = ChatTemplate::from_parts(None, Some(&config), "<bos>").unwrap();
        let messages = [Message::user("hi")];
        assert_eq!(t.render(&request(&messages, &[])).unwrap(), "D:hi");
        assert_eq!(t.render(&request(&messages, &[probe_tool()])).unwrap(), "T:look:hi");
        // Without a tool_use entry the default renders tools too; without a default, the first.
        let config = r#"{"chat_template": [{"name": "other", "template": "O{{ tools | length }}"}]}"#;
        let t = ChatTemplate::from_parts(None, Some(config), "<bos>").unwrap();
        assert_eq!(t.render(&request(&messages, &[probe_tool()])).unwrap(), "O1");
    }

    /// Fields Hearth has no type for reach the template as given: a declaration's `response`, a
    /// schema keyword, a message's own keys, a media part's source.
    #[test]
    fn every_field_reaches_the_template() {
        let tools: Vec<Tool> = serde_json::from_value(json!([{
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "nullable": true, "x-unit": "km"}}},
                "response": {"type": "object", "description": "Degrees"}
            },
            "strict": true
        }]))
        .unwrap();
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "content": [{"type": "image", "url": "a.png"}, {"type": "text", "text": "hi", "lang": "en"}], "sent": "today"},
            {"role": "assistant", "reasoning": "thought", "tool_calls": [{"type": "function", "id": "c1", "function": {"name": "weather", "arguments": {"city": "Oslo"}, "index": 0}, "extra_key": 1}]}
        ]))
        .unwrap();
        let source = "{{ tools[0].strict }}|{{ tools[0].function.response.description }}|\
{{ tools[0].function.parameters.properties.city['x-unit'] }}|{{ messages[0].sent }}|{{ messages[0].content[0].url }}|\
{{ messages[0].content[1].lang }}|{{ messages[1].reasoning }}|{{ messages[1].tool_calls[0].extra_key }}|\
{{ messages[1].tool_calls[0].function.index }}";
        let t = ChatTemplate::from_str(source, "<bos>").unwrap();
        assert_eq!(t.render(&request(&messages, &tools)).unwrap(), "True|Degrees|km|today|a.png|en|thought|1|0");
        // And Gemma 4's own template writes the declaration's response.
        let gemma = ChatTemplate::from_str(GEMMA4_E2B_TEMPLATE, "<bos>").unwrap();
        let out = gemma.render(&request(&messages[..1], &tools)).unwrap();
        assert!(out.contains(",response:{description:<|\"|>Degrees<|\"|>,type:<|\"|>OBJECT<|\"|>}"), "{out}");
    }

    /// A template that ignores tools is replaced, for conversations with tools, by the Gemma 4
    /// template Hearth ships; one that renders them is kept.
    #[test]
    fn a_template_that_cannot_render_tools_falls_back_to_gemma4_for_them() {
        let gemma = ChatTemplate::from_str(GEMMA4_E2B_TEMPLATE, "<bos>").unwrap();
        assert!(gemma.renders_tools());
        let own = "{{ bos_token }}{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}";
        let t = ChatTemplate::from_str(own, "<bos>").unwrap();
        assert!(!t.renders_tools());
        let t = t.or_gemma4_for_tools().unwrap();
        assert!(t.renders_tools());
        let messages = [Message::user("hi")];
        assert_eq!(
            t.render(&request(&messages, &[])).unwrap(),
            "<bos><|turn>user\nhi<turn|>\n",
            "its own without tools"
        );
        let with_tools = t.render(&request(&messages, &[probe_tool()])).unwrap();
        assert_eq!(with_tools, gemma.render(&request(&messages, &[probe_tool()])).unwrap());
        assert!(with_tools.contains("<|tool>declaration:look{"), "{with_tools}");
        // A template that fails on tools cannot render them either.
        let failing = ChatTemplate::from_str("{% if tools %}{{ raise_exception('no tools') }}{% endif %}x", "<bos>");
        assert!(!failing.unwrap().renders_tools());
        // A template that renders tools is kept as it is.
        let kept = ChatTemplate::from_str(
            "{% for t in tools %}{{ t.function.name }}: {{ t.function.description }}{% endfor %}",
            "<bos>",
        )
        .unwrap()
        .or_gemma4_for_tools()
        .unwrap();
        let own = kept.render(&request(&messages, &[probe_tool()])).unwrap();
        assert!(own.contains("Look around") && !own.contains("<|tool>"), "{own}");
    }

    #[test]
    fn loads_from_model_dir() {
        let dir = std::env::temp_dir().join(format!("hearth-chat-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("chat_template.jinja"), GEMMA4_E2B_TEMPLATE).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), r#"{"bos_token": "<bos>"}"#).unwrap();
        let t = ChatTemplate::from_model_dir(&dir).unwrap();
        let out = t
            .render(&RenderRequest {
                messages: &[Message::user("Hi")],
                tools: &[],
                enable_thinking: false,
                preserve_thinking: false,
                add_generation_prompt: true,
            })
            .unwrap();
        assert_eq!(out, "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
        // Without a bos_token in tokenizer_config.json: the token config.json names by id.
        std::fs::write(dir.join("tokenizer_config.json"), "{}").unwrap();
        assert!(matches!(ChatTemplate::from_model_dir(&dir), Err(ChatError::MissingBos(_))));
        std::fs::write(dir.join("config.json"), r#"{"text_config": {"bos_token_id": 7}}"#).unwrap();
        std::fs::write(
            dir.join("tokenizer.json"),
            r#"{"added_tokens": [{"id": 2, "content": "<bos>"}, {"id": 7, "content": "<start>"}]}"#,
        )
        .unwrap();
        assert_eq!(ChatTemplate::from_model_dir(&dir).unwrap().bos_token(), "<start>");
        std::fs::remove_dir_all(&dir).ok();
        assert!(matches!(ChatTemplate::from_model_dir(&dir), Err(ChatError::MissingTemplate(_))));
    }
}
