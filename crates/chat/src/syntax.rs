//! Gemma 4's text syntax for turns, thinking and tool calls: the one home of its markers. The
//! agent's parser and value codec, the model's call grammar and stop ids, the page fence and the
//! tools import them from here.
//!
//! A call, as the model writes it: `<|tool_call>call:NAME{key:value,…}<tool_call|>`, keys bare,
//! strings between `<|"|>` delimiters (raw: no escapes); the answer goes back as
//! `<|tool_response>response:NAME{…}<tool_response|>`. Thinking is `<|channel>thought\n…<channel|>`.
//!
//! The value syntax is written here ([`write_value`], as Google's template's `format_argument`
//! writes it), read by the agent's value codec and constrained token by token by the model's call
//! grammar; their tests check both against this writer.

use serde_json::{Map, Value};

/// Opens and closes a turn (`<|turn>user\n…<turn|>`).
pub const TURN_OPEN: &str = "<|turn>";
pub const TURN_CLOSE: &str = "<turn|>";
/// Opens and closes the thinking channel.
pub const THOUGHT_OPEN: &str = "<|channel>";
pub const THOUGHT_CLOSE: &str = "<channel|>";
/// Opens and closes a tool call.
pub const CALL_OPEN: &str = "<|tool_call>";
pub const CALL_CLOSE: &str = "<tool_call|>";
/// What a call's body starts with: `call:NAME{…}`.
pub const CALL_PREFIX: &str = "call:";
/// Opens and closes a tool's answer; the model stops on the opening one after a call.
pub const RESPONSE_OPEN: &str = "<|tool_response>";
pub const RESPONSE_CLOSE: &str = "<tool_response|>";
/// Delimits a string value, on both sides.
pub const STRING_DELIMITER: &str = "<|\"|>";
/// The end of the sequence.
pub const EOS: &str = "<eos>";
/// Gemma 3's end of turn, which Gemma 4's tokenizer still holds.
pub const LEGACY_TURN_CLOSE: &str = "<end_of_turn>";

/// Texts that may not appear inside a string value: a reader takes them as the end of the
/// string, of the call or of the turn.
pub const NOT_IN_STRINGS: &[&str] =
    &[STRING_DELIMITER, CALL_CLOSE, CALL_OPEN, RESPONSE_OPEN, TURN_CLOSE, TURN_OPEN, EOS, LEGACY_TURN_CLOSE];

/// A value's literal words.
pub const TRUE: &str = "true";
pub const FALSE: &str = "false";
pub const NULL: &str = "null";

/// A character of a tool name or a bare key: ASCII letters, digits, `_`, `-`, `.`.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A bare key: one or more name characters.
pub fn is_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(is_name_char)
}

/// A tool name: a key that starts with a letter or `_`.
pub fn is_tool_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && is_key(name)
}

/// Writes `value` in Gemma's value syntax: keys bare and sorted, strings raw between
/// [`STRING_DELIMITER`]s, no spaces.
pub fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str(NULL),
        Value::Bool(b) => out.push_str(if *b { TRUE } else { FALSE }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(text) => {
            out.push_str(STRING_DELIMITER);
            out.push_str(text);
            out.push_str(STRING_DELIMITER);
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push(':');
        write_value(value, out);
    }
    out.push('}');
}

/// A call's body as the model writes it: `call:NAME{…}`.
pub fn call_body(name: &str, arguments: &Map<String, Value>) -> String {
    let mut out = format!("{CALL_PREFIX}{name}");
    write_object(arguments, &mut out);
    out
}

/// A whole call, markers included: `<|tool_call>call:NAME{…}<tool_call|>`.
pub fn call_text(name: &str, arguments: &Map<String, Value>) -> String {
    format!("{CALL_OPEN}{}{CALL_CLOSE}", call_body(name, arguments))
}

/// The markers Gemma 4 -it stops on besides `<eos>`: the end of its turn, and the opening of a
/// tool's answer right after a call.
pub const STOP_MARKERS: [&str; 2] = [TURN_CLOSE, RESPONSE_OPEN];

/// Where the chat template puts an image part: one image's placeholder, which the engine expands
/// to the image's soft tokens.
pub const IMAGE: &str = "<|image|>";

/// The placeholder the template writes for an audio part (the processor expands it).
pub const AUDIO: &str = "<|audio|>";

/// The media markers of Gemma 4's vocabulary. Text that holds one would be read as a placeholder
/// with no picture behind it: text written into a prompt (the user's, the model's own) has them
/// defused first ([`defuse_media_markers`]).
pub const MEDIA_MARKERS: [&str; 7] = [IMAGE, "<|image>", "<image|>", AUDIO, "<|audio>", "<audio|>", "<|video|>"];

/// `text` with every media marker broken by a zero-width space after its first character, so the
/// tokenizer reads ordinary characters; text without one is returned as it is.
pub fn defuse_media_markers(text: &str) -> std::borrow::Cow<'_, str> {
    if !MEDIA_MARKERS.iter().any(|m| text.contains(m)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for marker in MEDIA_MARKERS {
        out = out.replace(marker, &format!("<\u{200B}{}", &marker[1..]));
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_markers_are_defused_and_other_text_is_kept() {
        assert_eq!(defuse_media_markers("see <|image|> and <image|>"), "see <\u{200B}|image|> and <\u{200B}image|>");
        assert!(matches!(defuse_media_markers("plain <|turn> text"), std::borrow::Cow::Borrowed(_)));
        let template = crate::GEMMA4_E2B_TEMPLATE;
        assert!(template.contains(&format!("'{IMAGE}'")), "the template writes images as {IMAGE}");
    }

    #[test]
    fn the_template_writes_calls_with_these_markers() {
        let template = crate::GEMMA4_E2B_TEMPLATE;
        for marker in [
            TURN_OPEN,
            TURN_CLOSE,
            THOUGHT_OPEN,
            THOUGHT_CLOSE,
            CALL_OPEN,
            CALL_CLOSE,
            RESPONSE_OPEN,
            RESPONSE_CLOSE,
            STRING_DELIMITER,
        ] {
            assert!(template.contains(marker), "Google's template has no {marker}");
        }
        assert!(template.contains(&format!("{CALL_OPEN}{CALL_PREFIX}")), "a call starts with {CALL_OPEN}{CALL_PREFIX}");
    }

    /// The writer and Google's template write a model turn's call the same way.
    #[test]
    fn calls_are_written_as_the_template_writes_them() {
        let arguments = serde_json::json!({"text": "say \"hi\" {x}", "index": 3, "submit": true, "tags": ["a", 2.5, null], "at": {"y": 1, "x": 0}});
        let arguments = arguments.as_object().cloned().unwrap_or_default();
        let written = call_text("type", &arguments);
        assert_eq!(
            written,
            "<|tool_call>call:type{at:{x:0,y:1},index:3,submit:true,tags:[<|\"|>a<|\"|>,2.5,null],text:<|\"|>say \"hi\" {x}<|\"|>}<tool_call|>"
        );
        let template =
            crate::ChatTemplate::from_str(crate::GEMMA4_E2B_TEMPLATE, "<bos>").expect("the template compiles");
        let messages: Vec<crate::Message> = serde_json::from_value(serde_json::json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "type", "arguments": arguments}}]}
        ]))
        .expect("messages");
        let request = crate::RenderRequest {
            messages: &messages,
            tools: &[],
            enable_thinking: false,
            preserve_thinking: false,
            add_generation_prompt: true,
        };
        let rendered = template.render(&request).expect("renders");
        assert!(rendered.contains(&written), "{rendered}");
    }

    #[test]
    fn names_and_keys() {
        assert!(is_tool_name("click") && is_tool_name("_x.y-2") && !is_tool_name("2x") && !is_tool_name("a b"));
        assert!(is_key("2x") && !is_key("") && !is_key("a:b"));
    }
}
