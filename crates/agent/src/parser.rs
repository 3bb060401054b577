//! Streaming parser for Gemma 4 output: visible text, `<|channel>thought…<channel|>` reasoning,
//! and `<|tool_call>call:NAME{…}<tool_call|>` calls.
//!
//! Text is released as soon as it cannot be the start of a special token or of a tool call, so
//! the user sees tokens live while a half-written call never reaches the visible answer, and
//! special tokens split across chunks are recognised.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::gemma_value::{CallBody, STR_DELIM, ValueError, parse_call_body, parse_call_prefix};

use hearth_chat::syntax::{
    CALL_CLOSE, CALL_OPEN, EOS, LEGACY_TURN_CLOSE, RESPONSE_OPEN, THOUGHT_CLOSE, THOUGHT_OPEN, TURN_CLOSE, TURN_OPEN,
};

/// A bare `call:NAME{` at the start of a line is read as a call whose `<|tool_call>` is missing.
const BARE_CALL: &str = hearth_chat::syntax::CALL_PREFIX;

/// Tokens after which the model's output is over for this step.
const STOPS: &[(&str, StopToken)] = &[
    (RESPONSE_OPEN, StopToken::ToolResponse),
    (TURN_CLOSE, StopToken::EndOfTurn),
    (EOS, StopToken::Eos),
    (TURN_OPEN, StopToken::NewTurn),
    (LEGACY_TURN_CLOSE, StopToken::EndOfTurn),
];

/// How the model ended its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopToken {
    /// `<|tool_response>`: the model waits for tool results.
    ToolResponse,
    /// `<turn|>`: the model finished its turn.
    EndOfTurn,
    Eos,
    /// `<|turn>`: the model started a new turn on its own (it should have stopped).
    NewTurn,
}

/// Parser settings.
#[derive(Debug, Clone, Copy, Default)]
pub struct ParserOptions {
    /// The prompt already opened the thought channel (Gemma's template ends with
    /// `<|channel>thought\n` after a tool response when thinking is on), so output starts as
    /// reasoning until `<channel|>`.
    pub starts_in_thought: bool,
}

/// A tool call read from the output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: Map<String, Value>,
    /// Slips that were repaired, for logs (empty when well formed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<String>,
}

/// A call that could not be read; fed back to the model so it can correct itself.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedCall {
    /// The text between the call markers, as the model wrote it.
    pub raw: String,
    /// The tool name, when it could be read.
    pub name: Option<String>,
    pub error: ValueError,
}

/// What the parser recognised in a chunk of output.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseEvent {
    /// Visible text.
    Content(String),
    /// A new reasoning block begins.
    ThoughtStart,
    /// Reasoning text.
    Thinking(String),
    Call(ParsedCall),
    Malformed(MalformedCall),
    Stop(StopToken),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Thought,
    Call,
    Stopped,
}

/// Incremental parser: feed chunks with [`push`](Self::push), then call [`finish`](Self::finish).
#[derive(Debug, Clone)]
pub struct StreamParser {
    mode: Mode,
    /// Text received but not yet classified.
    buf: String,
    /// The body of the call being read.
    call: String,
    /// Whether the next content starts a line (where a bare `call:` may begin).
    line_start: bool,
    /// Just after `<|channel>`: the channel name `thought` and its newline are dropped.
    thought_header: bool,
    /// The call being read was written without `<|tool_call>`.
    bare: bool,
}

impl StreamParser {
    pub fn new(options: ParserOptions) -> Self {
        Self {
            mode: if options.starts_in_thought { Mode::Thought } else { Mode::Content },
            buf: String::new(),
            call: String::new(),
            line_start: true,
            thought_header: false,
            bare: false,
        }
    }

    /// Whether a stop token was seen (further output is ignored).
    pub fn stopped(&self) -> bool {
        self.mode == Mode::Stopped
    }

    pub fn push(&mut self, chunk: &str) -> Vec<ParseEvent> {
        if self.mode == Mode::Stopped {
            return Vec::new();
        }
        self.buf.push_str(chunk);
        let mut out = Vec::new();
        self.process(false, &mut out);
        out
    }

    /// Ends the output: releases held-back text and reads an unterminated call.
    pub fn finish(&mut self) -> Vec<ParseEvent> {
        let mut out = Vec::new();
        self.process(true, &mut out);
        out
    }

    fn process(&mut self, eof: bool, out: &mut Vec<ParseEvent>) {
        loop {
            match self.mode {
                Mode::Stopped => {
                    self.buf.clear();
                    return;
                }
                Mode::Content => {
                    let marker = find_first(&self.buf, &content_markers());
                    let scan_end = marker.map_or(self.buf.len(), |(i, _, _)| i);
                    if let Some(at) = find_bare_call(&self.buf[..scan_end], self.line_start) {
                        self.emit_content(at, out);
                        self.mode = Mode::Call;
                        self.bare = true;
                        continue;
                    }
                    if let Some((i, len, m)) = marker {
                        self.emit_content(i, out);
                        self.buf.drain(..len);
                        self.line_start = true;
                        match m {
                            Marker::ThoughtOpen => {
                                self.mode = Mode::Thought;
                                self.thought_header = true;
                                out.push(ParseEvent::ThoughtStart);
                            }
                            Marker::CallOpen => {
                                self.mode = Mode::Call;
                                self.bare = false;
                            }
                            Marker::Stop(s) => self.stop(s, out),
                            // Stray closers outside their block carry nothing: drop them.
                            Marker::ThoughtClose | Marker::CallClose => {}
                        }
                        continue;
                    }
                    let keep = if eof { self.buf.len() } else { self.content_holdback() };
                    self.emit_content(keep, out);
                    return;
                }
                Mode::Thought => {
                    if self.thought_header {
                        const HEADER: &str = "thought";
                        if !eof && self.buf.len() <= HEADER.len() && HEADER.starts_with(self.buf.as_str()) {
                            return; // wait for more
                        }
                        if let Some(rest) = self.buf.strip_prefix(HEADER) {
                            if rest.is_empty() && !eof {
                                return; // the newline may follow
                            }
                            let skip = HEADER.len() + usize::from(rest.starts_with('\n'));
                            self.buf.drain(..skip);
                        }
                        self.thought_header = false;
                    }
                    let markers = thought_markers();
                    if let Some((i, len, m)) = find_first(&self.buf, &markers) {
                        self.emit_thinking(i, out);
                        self.buf.drain(..len);
                        match m {
                            Marker::Stop(s) => self.stop(s, out),
                            _ => self.mode = Mode::Content,
                        }
                        continue;
                    }
                    let keep = if eof { self.buf.len() } else { holdback(&self.buf, &markers) };
                    self.emit_thinking(keep, out);
                    return;
                }
                Mode::Call => {
                    let markers = call_markers();
                    if let Some((i, len, m)) = find_first(&self.buf, &markers) {
                        self.call.push_str(&self.buf[..i]);
                        if m == Marker::CallClose && self.call.matches(STR_DELIM).count() % 2 == 1 {
                            // `<tool_call|>` inside an open string is text (end_call cuts at the
                            // last one if the string never closes).
                            self.call.push_str(&self.buf[i..i + len]);
                            self.buf.drain(..i + len);
                            continue;
                        }
                        self.buf.drain(..i + len);
                        // The model ended the call itself (close, stop, or a new call).
                        self.end_call(true, out);
                        match m {
                            Marker::Stop(s) => self.stop(s, out),
                            Marker::CallOpen => {
                                self.mode = Mode::Call;
                                self.bare = false;
                            }
                            _ => self.mode = Mode::Content,
                        }
                        continue;
                    }
                    if eof {
                        let rest = std::mem::take(&mut self.buf);
                        self.call.push_str(&rest);
                        self.end_call(false, out);
                        self.mode = Mode::Content;
                        return;
                    }
                    let keep = holdback(&self.buf, &markers);
                    self.call.push_str(&self.buf[..keep]);
                    self.buf.drain(..keep);
                    return;
                }
            }
        }
    }

    fn stop(&mut self, token: StopToken, out: &mut Vec<ParseEvent>) {
        self.mode = Mode::Stopped;
        self.buf.clear();
        out.push(ParseEvent::Stop(token));
    }

    fn emit_content(&mut self, upto: usize, out: &mut Vec<ParseEvent>) {
        if upto == 0 {
            return;
        }
        let text: String = self.buf.drain(..upto).collect();
        self.line_start = text.ends_with('\n');
        match out.last_mut() {
            Some(ParseEvent::Content(prev)) => prev.push_str(&text),
            _ => out.push(ParseEvent::Content(text)),
        }
    }

    fn emit_thinking(&mut self, upto: usize, out: &mut Vec<ParseEvent>) {
        if upto == 0 {
            return;
        }
        let text: String = self.buf.drain(..upto).collect();
        match out.last_mut() {
            Some(ParseEvent::Thinking(prev)) => prev.push_str(&text),
            _ => out.push(ParseEvent::Thinking(text)),
        }
    }

    fn end_call(&mut self, closed_by_model: bool, out: &mut Vec<ParseEvent>) {
        let mut raw = std::mem::take(&mut self.call);
        let bare = std::mem::replace(&mut self.bare, false);
        self.line_start = true;
        if raw.trim().is_empty() && !closed_by_model {
            return;
        }
        let mut closed = closed_by_model;
        if raw.matches(STR_DELIM).count() % 2 == 1
            && let Some(i) = raw.rfind(CALL_CLOSE)
        {
            // A string never closed after all: the last `<tool_call|>` ended the call.
            raw.truncate(i);
            closed = true;
        }
        let call =
            |b: CallBody| ParseEvent::Call(ParsedCall { name: b.name, arguments: b.arguments, repairs: b.repairs });
        if bare {
            // Without markers, prose may follow the call on the next lines.
            if let Ok((body, tail)) = parse_call_prefix(&raw, closed) {
                let tail = tail.trim_start_matches([' ', '}']);
                if tail.is_empty() || tail.starts_with('\n') {
                    out.push(call(body));
                    if !tail.is_empty() {
                        out.push(ParseEvent::Content(tail.to_owned()));
                    }
                    return;
                }
            }
        }
        out.push(match parse_call_body(&raw, closed) {
            Ok(body) => call(body),
            Err(error) => ParseEvent::Malformed(MalformedCall { name: call_name(&raw), raw, error }),
        });
    }

    /// Where to stop releasing content: before a possible special-token prefix or a line that
    /// may still become a bare `call:NAME{`.
    fn content_holdback(&self) -> usize {
        let special = holdback(&self.buf, &content_markers());
        let line = match self.buf.rfind('\n') {
            Some(i) => i + 1,
            None if self.line_start => 0,
            None => return special,
        };
        let tail = &self.buf[line..];
        let maybe_call = if tail.len() <= BARE_CALL.len() {
            !tail.is_empty() && BARE_CALL.starts_with(tail)
        } else {
            tail.strip_prefix(BARE_CALL).is_some_and(|r| r.chars().all(|c| is_name_char(c) || c == ' '))
        };
        if maybe_call { special.min(line) } else { special }
    }
}

/// The output of one generation, read whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedOutput {
    /// Visible text, trimmed.
    pub content: String,
    /// Reasoning blocks joined by blank lines, trimmed; `None` when the model did not reason.
    pub thinking: Option<String>,
    pub calls: Vec<ParsedCall>,
    pub malformed: Vec<MalformedCall>,
    pub stop: Option<StopToken>,
}

impl ParsedOutput {
    /// Folds events, in order, into the output.
    pub fn collect<'a>(events: impl IntoIterator<Item = &'a ParseEvent>) -> Self {
        let mut out = Self::default();
        let mut blocks: Vec<String> = Vec::new();
        for e in events {
            match e {
                ParseEvent::Content(t) => out.content.push_str(t),
                ParseEvent::ThoughtStart => blocks.push(String::new()),
                ParseEvent::Thinking(t) => match blocks.last_mut() {
                    Some(b) => b.push_str(t),
                    None => blocks.push(t.clone()),
                },
                ParseEvent::Call(c) => out.calls.push(c.clone()),
                ParseEvent::Malformed(m) => out.malformed.push(m.clone()),
                ParseEvent::Stop(s) => out.stop = Some(*s),
            }
        }
        out.content = out.content.trim().to_owned();
        let thinking: Vec<&str> = blocks.iter().map(|b| b.trim()).filter(|b| !b.is_empty()).collect();
        out.thinking = (!thinking.is_empty()).then(|| thinking.join("\n\n"));
        out
    }
}

/// Parses a complete output.
pub fn parse_output(raw: &str, options: ParserOptions) -> ParsedOutput {
    let mut p = StreamParser::new(options);
    let mut events = p.push(raw);
    events.extend(p.finish());
    ParsedOutput::collect(&events)
}

/// `hearth parse`: `{"content": …, "thinking": …, "tool_calls": [{"name": …, "arguments": {…}}]}`.
///
/// `thinking` means the prompt had thinking on and may have opened the thought channel itself:
/// text before a `<channel|>` with no opener is reasoning. Thought blocks the model opens are
/// always reported as thinking, never as content. Malformed calls are left out.
pub fn parse_to_json(raw: &str, thinking: bool) -> Value {
    let starts_in_thought = thinking && {
        // Only when a closer comes before any opener; otherwise the output starts as content.
        let close = raw.find(THOUGHT_CLOSE);
        let open = raw.find(THOUGHT_OPEN);
        matches!((close, open), (Some(c), None) if c > 0) || matches!((close, open), (Some(c), Some(o)) if c < o)
    };
    let out = parse_output(raw, ParserOptions { starts_in_thought });
    serde_json::json!({
        "content": out.content,
        "thinking": out.thinking,
        "tool_calls": out.calls.iter().map(|c| serde_json::json!({
            "name": c.name,
            "arguments": c.arguments,
        })).collect::<Vec<_>>(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Marker {
    ThoughtOpen,
    ThoughtClose,
    CallOpen,
    CallClose,
    Stop(StopToken),
}

fn content_markers() -> Vec<(&'static str, Marker)> {
    let mut v = vec![
        (THOUGHT_OPEN, Marker::ThoughtOpen),
        (THOUGHT_CLOSE, Marker::ThoughtClose),
        (CALL_OPEN, Marker::CallOpen),
        (CALL_CLOSE, Marker::CallClose),
    ];
    v.extend(STOPS.iter().map(|&(s, t)| (s, Marker::Stop(t))));
    v
}

fn thought_markers() -> Vec<(&'static str, Marker)> {
    let mut v = vec![(THOUGHT_CLOSE, Marker::ThoughtClose)];
    v.extend(STOPS.iter().map(|&(s, t)| (s, Marker::Stop(t))));
    v
}

fn call_markers() -> Vec<(&'static str, Marker)> {
    let mut v = vec![(CALL_CLOSE, Marker::CallClose), (CALL_OPEN, Marker::CallOpen)];
    v.extend(STOPS.iter().map(|&(s, t)| (s, Marker::Stop(t))));
    v
}

/// The earliest marker in `s`: (index, length, marker).
fn find_first(s: &str, markers: &[(&'static str, Marker)]) -> Option<(usize, usize, Marker)> {
    markers.iter().filter_map(|&(text, m)| s.find(text).map(|i| (i, text.len(), m))).min_by_key(|&(i, _, _)| i)
}

/// Index from which `s` may be the beginning of a marker (all markers start with `<`).
fn holdback(s: &str, markers: &[(&'static str, Marker)]) -> usize {
    let longest = markers.iter().map(|(t, _)| t.len()).max().unwrap_or(0);
    let from = s.len().saturating_sub(longest - 1);
    for (i, b) in s.bytes().enumerate().skip(from) {
        if b == b'<' && markers.iter().any(|(t, _)| t.len() > s.len() - i && t.starts_with(&s[i..])) {
            return i;
        }
    }
    s.len()
}

/// A line starting with `call:NAME{` (the model forgot `<|tool_call>`): its index.
fn find_bare_call(s: &str, line_start: bool) -> Option<usize> {
    let starts = (line_start.then_some(0)).into_iter().chain(s.match_indices('\n').map(|(i, _)| i + 1));
    for at in starts {
        if let Some(rest) = s[at..].strip_prefix(BARE_CALL) {
            let name_len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
            if name_len > 0 && rest[name_len..].trim_start_matches(' ').starts_with('{') {
                return Some(at);
            }
        }
    }
    None
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'
}

fn call_name(raw: &str) -> Option<String> {
    let rest = raw.trim_start();
    let rest = rest.strip_prefix(BARE_CALL).unwrap_or(rest);
    let len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
    (len > 0).then(|| rest[..len].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(raw: &str) -> ParsedOutput {
        parse_output(raw, ParserOptions::default())
    }

    /// Feeds `raw` in every two-way split and in single characters; all must agree with the
    /// whole-string parse.
    fn assert_chunking_invariant(raw: &str, options: ParserOptions) {
        let whole = parse_output(raw, options);
        let cuts: Vec<usize> = (0..=raw.len()).filter(|&i| raw.is_char_boundary(i)).collect();
        for &cut in &cuts {
            let mut p = StreamParser::new(options);
            let mut ev = p.push(&raw[..cut]);
            ev.extend(p.push(&raw[cut..]));
            ev.extend(p.finish());
            assert_eq!(ParsedOutput::collect(&ev), whole, "split at {cut} of {raw:?}");
        }
        let mut p = StreamParser::new(options);
        let mut ev = Vec::new();
        for c in raw.chars() {
            ev.extend(p.push(&c.to_string()));
        }
        ev.extend(p.finish());
        assert_eq!(ParsedOutput::collect(&ev), whole, "char by char: {raw:?}");
    }

    #[test]
    fn plain_text() {
        let o = parse("Hello there.<turn|>");
        assert_eq!(o.content, "Hello there.");
        assert_eq!(o.stop, Some(StopToken::EndOfTurn));
        assert!(o.calls.is_empty() && o.thinking.is_none());
    }

    #[test]
    fn thinking_then_answer() {
        let raw = "<|channel>thought\nThe user wants X.\n<channel|>Here is X.<turn|>";
        let o = parse(raw);
        assert_eq!(o.thinking.as_deref(), Some("The user wants X."));
        assert_eq!(o.content, "Here is X.");
        assert_chunking_invariant(raw, ParserOptions::default());
    }

    #[test]
    fn primed_thought_channel() {
        let raw = "I should click.<channel|><|tool_call>call:click{index:3}<tool_call|><|tool_response>";
        let o = parse_output(raw, ParserOptions { starts_in_thought: true });
        assert_eq!(o.thinking.as_deref(), Some("I should click."));
        assert_eq!(o.calls[0].name, "click");
        assert_eq!(o.content, "");
        assert_chunking_invariant(raw, ParserOptions { starts_in_thought: true });
    }

    #[test]
    fn text_before_call_streams_and_call_parses() {
        let raw = "Let me search.\n<|tool_call>call:type{index:3,submit:true,text:<|\"|>rust <lang>\\\"<|\"|>}<tool_call|><|tool_response>";
        let o = parse(raw);
        assert_eq!(o.content, "Let me search.");
        assert_eq!(o.calls.len(), 1);
        assert_eq!(
            Value::Object(o.calls[0].arguments.clone()),
            json!({"index": 3, "submit": true, "text": "rust <lang>\\\""})
        );
        assert_eq!(o.stop, Some(StopToken::ToolResponse));
        assert_chunking_invariant(raw, ParserOptions::default());
    }

    #[test]
    fn partial_call_never_reaches_content() {
        let mut p = StreamParser::new(ParserOptions::default());
        let mut visible = String::new();
        for chunk in ["Sure", ". <|tool", "_call>call:cli", "ck{index:", "1}<tool_", "call|>"] {
            for e in p.push(chunk) {
                if let ParseEvent::Content(t) = e {
                    visible.push_str(&t);
                }
            }
            assert!(!visible.contains('<') && !visible.contains("call"), "{visible:?}");
        }
        assert_eq!(visible, "Sure. ");
    }

    #[test]
    fn several_calls() {
        let raw = "<|tool_call>call:click{index:1}<tool_call|><|tool_call>call:scroll{direction:<|\"|>down<|\"|>}<tool_call|>";
        let o = parse(raw);
        assert_eq!(o.calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["click", "scroll"]);
        assert_chunking_invariant(raw, ParserOptions::default());
    }

    #[test]
    fn unclosed_call_at_eof() {
        // Complete object, missing closer: accepted.
        let o = parse("<|tool_call>call:click{index:1}");
        assert_eq!(o.calls.len(), 1);
        // Truncated object: not guessed.
        let o = parse("<|tool_call>call:type{index:1,text:<|\"|>hel");
        assert!(o.calls.is_empty());
        assert_eq!(o.malformed.len(), 1);
        assert_eq!(o.malformed[0].name.as_deref(), Some("type"));
        assert_eq!(o.content, "");
    }

    #[test]
    fn repaired_when_the_model_closed_the_call() {
        let o = parse("<|tool_call>call:click{index:1<tool_call|>");
        assert_eq!(o.calls[0].arguments["index"], json!(1));
        assert!(!o.calls[0].repairs.is_empty());
        // A new call opened before the previous one closed.
        let o = parse("<|tool_call>call:a{x:1}<|tool_call>call:b{}<tool_call|>");
        assert_eq!(o.calls.len(), 2);
    }

    #[test]
    fn bare_call_without_opener() {
        let raw = "OK.\ncall:click{index:4}<tool_call|>";
        let o = parse(raw);
        assert_eq!(o.content, "OK.");
        assert_eq!(o.calls[0].name, "click");
        assert_chunking_invariant(raw, ParserOptions::default());
        // Prose mentioning call: is left alone.
        assert_eq!(parse("Please call: 555 1234").content, "Please call: 555 1234");
        assert_eq!(parse("call:me maybe").content, "call:me maybe");
    }

    #[test]
    fn call_close_inside_a_string_is_text() {
        let raw = "<|tool_call>call:type{index:1,text:<|\"|>a <tool_call|> b<|\"|>}<tool_call|>";
        let o = parse(raw);
        assert_eq!(o.calls[0].arguments["text"], json!("a <tool_call|> b"));
        assert_eq!(o.content, "");
        assert_chunking_invariant(raw, ParserOptions::default());
        // Never closed: the last closer ends the call.
        let o = parse("<|tool_call>call:type{index:1,text:<|\"|>hi}<tool_call|><|tool_response>");
        assert_eq!(o.calls[0].arguments["text"], json!("hi"));
    }

    #[test]
    fn bare_call_followed_by_prose() {
        let raw = "OK.\ncall:click{index:4}\nDone.";
        let o = parse(raw);
        assert_eq!(o.calls[0].name, "click");
        assert_eq!(o.content, "OK.\n\nDone.");
        assert_chunking_invariant(raw, ParserOptions::default());
    }

    #[test]
    fn output_after_stop_is_ignored() {
        let o =
            parse("<|tool_call>call:a{}<tool_call|><|tool_response>response:a{value:1}<tool_response|>hallucinated");
        assert_eq!(o.content, "");
        assert_eq!(o.calls.len(), 1);
    }

    #[test]
    fn stray_markers_are_dropped_and_lone_angles_kept() {
        assert_eq!(parse("a < b <tool_call|> c<channel|>").content, "a < b  c");
        assert_eq!(parse("x <").content, "x <");
    }

    #[test]
    fn parse_to_json_shape() {
        let v = parse_to_json(
            "<|channel>thought\nhmm<channel|>Hi<|tool_call>call:done{result:<|\"|>ok<|\"|>}<tool_call|>",
            false,
        );
        assert_eq!(
            v,
            json!({"content": "Hi", "thinking": "hmm", "tool_calls": [{"name": "done", "arguments": {"result": "ok"}}]})
        );
        let v = parse_to_json("plan<channel|>answer", true);
        assert_eq!(v, json!({"content": "answer", "thinking": "plan", "tool_calls": []}));
        let v = parse_to_json("plan<channel|>answer", false);
        assert_eq!(v["thinking"], Value::Null);
    }
}
