//! The model's chat template, rendered with minijinja the way Hugging Face's
//! `apply_chat_template` renders it with Python's jinja2.

use std::path::{Path, PathBuf};

use minijinja::{AutoEscape, Environment, ErrorKind, Value, context};

use crate::message::{Message, Tool};

const TEMPLATE_NAME: &str = "chat_template";

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
    /// End with the opening of the model's turn (or nothing after a tool response, where the
    /// model continues its own turn).
    pub add_generation_prompt: bool,
}

/// A compiled chat template plus the special tokens it reads.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
}

impl ChatTemplate {
    /// Compiles `source` (a Jinja chat template). `bos_token` is the string the template writes
    /// as `{{ bos_token }}` (Gemma: `<bos>`).
    pub fn from_str(source: &str, bos_token: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        // Hugging Face renders with trim_blocks and lstrip_blocks, no autoescape, and Python
        // string/dict methods available; byte-identical output depends on all three.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned()).map_err(|e| ChatError::Syntax(describe(&e)))?;
        Ok(Self { env, bos_token: bos_token.to_owned() })
    }

    /// Loads the template of a model directory: `chat_template.jinja` if present, else the
    /// `chat_template` entry of `tokenizer_config.json`. The BOS token comes from
    /// `tokenizer_config.json` when it names one, else `<bos>`.
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self, ChatError> {
        let dir = dir.as_ref();
        let read = |path: PathBuf| std::fs::read_to_string(&path).map_err(|source| ChatError::Io { path, source });
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.exists() { Some(read(config_path)?) } else { None };
        let jinja_path = dir.join("chat_template.jinja");
        let template = if jinja_path.exists() { Some(read(jinja_path)?) } else { None };
        Self::from_parts(template.as_deref(), config.as_deref()).map_err(|e| match e {
            ChatError::MissingTemplate(_) => ChatError::MissingTemplate(dir.to_owned()),
            other => other,
        })
    }

    /// Like [`from_model_dir`](Self::from_model_dir) for files already in memory (e.g. fetched
    /// in the browser): an optional `chat_template.jinja` and an optional `tokenizer_config.json`.
    pub fn from_parts(
        chat_template_jinja: Option<&str>,
        tokenizer_config_json: Option<&str>,
    ) -> Result<Self, ChatError> {
        let config: Option<serde_json::Value> = tokenizer_config_json
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| ChatError::InvalidConfig(e.to_string()))?;
        let bos = config.as_ref().and_then(|c| c.get("bos_token")).and_then(token_text).unwrap_or("<bos>").to_owned();
        let source = match chat_template_jinja {
            Some(t) => t.to_owned(),
            None => config
                .as_ref()
                .and_then(|c| c.get("chat_template"))
                .and_then(default_template)
                .ok_or_else(|| ChatError::MissingTemplate(PathBuf::from(".")))?,
        };
        Self::from_str(&source, &bos)
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// Renders a conversation to the exact prompt string the model expects.
    pub fn render(&self, request: &RenderRequest<'_>) -> Result<String, ChatError> {
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| ChatError::Syntax(describe(&e)))?;
        let tools = if request.tools.is_empty() { Value::from(()) } else { Value::from_serialize(request.tools) };
        template
            .render(context! {
                messages => Value::from_serialize(request.messages),
                tools => tools,
                bos_token => self.bos_token.as_str(),
                add_generation_prompt => request.add_generation_prompt,
                enable_thinking => request.enable_thinking,
            })
            .map_err(|e| ChatError::Render(describe(&e)))
    }
}

/// `raise_exception(msg)`, which HF exposes to templates for input validation.
fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// A special token in tokenizer_config.json is either a string or `{"content": "…"}`.
fn token_text(v: &serde_json::Value) -> Option<&str> {
    v.as_str().or_else(|| v.get("content").and_then(|c| c.as_str()))
}

/// `chat_template` is a string or a list of `{name, template}`; pick "default" (else the first).
fn default_template(v: &serde_json::Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_owned());
    }
    let list = v.as_array()?;
    let pick =
        list.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default")).or_else(|| list.first())?;
    pick.get("template").and_then(|t| t.as_str()).map(str::to_owned)
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
    use crate::GEMMA4_E2B_TEMPLATE;

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
            .render(&RenderRequest { messages: &msgs, tools: &[], enable_thinking: false, add_generation_prompt: true })
            .unwrap();
        assert!(out.contains("<|tool_call>call:f{a:1}<tool_call|>"), "{out}");
    }

    #[test]
    fn raise_exception_surfaces_as_render_error() {
        let t = ChatTemplate::from_str("{{ raise_exception('bad input') }}", "<bos>").unwrap();
        let err = t
            .render(&RenderRequest { messages: &[], tools: &[], enable_thinking: false, add_generation_prompt: false })
            .unwrap_err();
        assert!(matches!(err, ChatError::Render(ref m) if m.contains("bad input")), "{err}");
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(ChatTemplate::from_str("{% if %}", "<bos>"), Err(ChatError::Syntax(_))));
    }

    #[test]
    fn loads_from_tokenizer_config() {
        let config = serde_json::json!({
            "bos_token": {"content": "<s>"},
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}]
        })
        .to_string();
        let t = ChatTemplate::from_parts(None, Some(&config)).unwrap();
        assert_eq!(t.bos_token(), "<s>");
        let out = t
            .render(&RenderRequest { messages: &[], tools: &[], enable_thinking: false, add_generation_prompt: false })
            .unwrap();
        assert_eq!(out, "<s>D");
        // A chat_template.jinja file wins over the config entry; bos defaults to <bos>.
        let t = ChatTemplate::from_parts(Some("{{ bos_token }}J"), None).unwrap();
        assert_eq!(
            t.render(&RenderRequest {
                messages: &[],
                tools: &[],
                enable_thinking: false,
                add_generation_prompt: false
            })
            .unwrap(),
            "<bos>J"
        );
        assert!(matches!(ChatTemplate::from_parts(None, Some("{}")), Err(ChatError::MissingTemplate(_))));
        assert!(matches!(ChatTemplate::from_parts(None, Some("{")), Err(ChatError::InvalidConfig(_))));
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
                add_generation_prompt: true,
            })
            .unwrap();
        assert_eq!(out, "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
        std::fs::remove_dir_all(&dir).ok();
        assert!(matches!(ChatTemplate::from_model_dir(&dir), Err(ChatError::MissingTemplate(_))));
    }
}
