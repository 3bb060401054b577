//! Gemma 4's text syntax for turns, thinking and tool calls: the one home of its markers. The
//! agent's parser and value codec, the model's call grammar and stop ids, the page fence and the
//! tools import them from here.
//!
//! A call, as the model writes it: `<|tool_call>call:NAME{key:value,…}<tool_call|>`, keys bare,
//! strings between `<|"|>` delimiters (raw: no escapes); the answer goes back as
//! `<|tool_response>response:NAME{…}<tool_response|>`. Thinking is `<|channel>thought\n…<channel|>`.

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

/// The markers Gemma 4 -it stops on besides `<eos>`: the end of its turn, and the opening of a
/// tool's answer right after a call.
pub const STOP_MARKERS: [&str; 2] = [TURN_CLOSE, RESPONSE_OPEN];

#[cfg(test)]
mod tests {
    use super::*;

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
}
