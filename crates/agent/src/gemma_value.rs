//! Gemma 4's argument syntax, the body of `call:NAME{…}`: bare keys, `<|"|>`-delimited raw
//! strings (no escapes: quotes and backslashes are literal), numbers, `true`/`false`/`null`,
//! nested objects and arrays.
//!
//! Small models drift from the syntax, so a few slips are repaired when the intent is
//! unambiguous (each repair is recorded): JSON-style `"quoted"` keys and strings, Python's
//! `True`/`False`/`None`, trailing commas, a missing `call:` prefix, missing closing brackets,
//! and an unclosed last string when the model itself closed the call.

use hearth_chat::syntax::{self, FALSE, NULL, TRUE, is_name_char};
use serde_json::{Map, Number, Value};

/// Gemma's string delimiter token.
pub use hearth_chat::syntax::STRING_DELIMITER as STR_DELIM;

/// Nesting deeper than this is refused rather than risking the stack on hostile output.
const MAX_DEPTH: usize = 64;

/// Why a call body could not be read. The message is written for the model (it is fed back as
/// a tool error) and for developers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("the call has no tool name; write call:NAME{{…}}")]
    MissingName,
    #[error("expected `{{` after the tool name `{0}`")]
    ExpectedObject(String),
    #[error("a string value is opened but never closed")]
    UnclosedString,
    #[error("the arguments end before the object is closed")]
    Unclosed,
    #[error("expected an argument name at `{0}`")]
    ExpectedKey(String),
    #[error("expected `:` after the argument name `{0}`")]
    ExpectedColon(String),
    #[error("expected a value at `{0}`")]
    ExpectedValue(String),
    #[error("expected `,` or a closing bracket at `{0}`")]
    ExpectedSeparator(String),
    #[error("unexpected text after the arguments: `{0}`")]
    TrailingText(String),
    #[error("the arguments are nested too deeply")]
    TooDeep,
    #[error("invalid number `{0}`")]
    BadNumber(String),
}

/// A call body read into a name and JSON arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct CallBody {
    pub name: String,
    pub arguments: Map<String, Value>,
    /// Human-readable notes on each slip that was repaired (empty for well-formed calls).
    pub repairs: Vec<String>,
}

/// Reads `call:NAME{…}` (the text between `<|tool_call>` and `<tool_call|>`).
///
/// `closed_by_model` says the model itself ended the call (with `<tool_call|>` or a stop
/// token) rather than the text simply running out; only then are missing closing brackets and
/// an unclosed final string repaired, since a truncated generation could otherwise be executed
/// with half its text.
pub fn parse_call_body(body: &str, closed_by_model: bool) -> Result<CallBody, ValueError> {
    let (mut call, tail) = parse_call_prefix(body, closed_by_model)?;
    // Tolerate stray closing braces the model added after a complete object.
    if !tail.trim().is_empty() {
        if tail.chars().all(|c| c == '}' || c.is_whitespace()) {
            call.repairs.push("dropped extra closing braces".to_owned());
        } else {
            return Err(ValueError::TrailingText(snippet(tail.trim_start())));
        }
    }
    Ok(call)
}

/// Like [`parse_call_body`], but stops after the arguments object and returns the text that
/// follows it (for a call written without its markers, followed by prose).
pub fn parse_call_prefix(body: &str, closed_by_model: bool) -> Result<(CallBody, &str), ValueError> {
    let mut repairs = Vec::new();
    let trimmed = body.trim_start();
    if trimmed.starts_with('{') {
        return json_style_call(trimmed).map(|c| (c, "")).ok_or(ValueError::MissingName);
    }
    let rest = match trimmed.strip_prefix(syntax::CALL_PREFIX) {
        Some(r) => r,
        None => {
            repairs.push("added the missing `call:` prefix".to_owned());
            trimmed
        }
    };
    let name_len = rest.char_indices().find(|&(_, c)| !is_name_char(c)).map_or(rest.len(), |(i, _)| i);
    let name = &rest[..name_len];
    if !syntax::is_tool_name(name) {
        return Err(ValueError::MissingName);
    }
    let after = rest[name_len..].trim_start();
    if after.trim_end().is_empty() {
        repairs.push("added the missing `{}` after the tool name".to_owned());
        return Ok((CallBody { name: name.to_owned(), arguments: Map::new(), repairs }, ""));
    }
    if !after.starts_with('{') {
        return Err(ValueError::ExpectedObject(name.to_owned()));
    }
    let mut p = Parser { s: after, pos: 0, repairs, lenient_eof: closed_by_model, depth: 0 };
    let value = p.value()?;
    let tail = &after[p.pos..];
    match value {
        Value::Object(arguments) => Ok((CallBody { name: name.to_owned(), arguments, repairs: p.repairs }, tail)),
        _ => Err(ValueError::ExpectedObject(name.to_owned())),
    }
}

/// `{"name": "click", "arguments": {…}}`, the JSON convention of other model families.
fn json_style_call(text: &str) -> Option<CallBody> {
    let v: Value = serde_json::from_str(text.trim_end()).ok()?;
    let name = v.get("name")?.as_str()?.to_owned();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        None => Map::new(),
        Some(_) => return None,
    };
    let repairs = vec!["read a JSON-style {\"name\", \"arguments\"} call".to_owned()];
    Some(CallBody { name, arguments, repairs })
}

/// Reads a single value in Gemma syntax (e.g. `{a:<|"|>x<|"|>,b:[1,2]}`), strictly: no repair
/// of unclosed brackets or strings.
pub fn parse_value(text: &str) -> Result<Value, ValueError> {
    let mut p = Parser { s: text, pos: 0, repairs: Vec::new(), lenient_eof: false, depth: 0 };
    let v = p.value()?;
    p.skip_ws();
    if p.pos < p.s.len() {
        return Err(ValueError::TrailingText(snippet(&p.s[p.pos..])));
    }
    Ok(v)
}

fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(24).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
    repairs: Vec<String>,
    /// Repair what is missing at the end of the text (see `parse_call_body`).
    lenient_eof: bool,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn at_eof(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn value(&mut self) -> Result<Value, ValueError> {
        self.skip_ws();
        let rest = self.rest();
        if rest.starts_with(STR_DELIM) {
            return self.raw_string().map(Value::String);
        }
        match rest.chars().next() {
            None => Err(ValueError::Unclosed),
            Some('{') => self.nested(|p| p.object()),
            Some('[') => self.nested(|p| p.array()),
            Some('"') => {
                self.repairs.push("read a JSON-style \"quoted\" string".to_owned());
                self.json_string().map(Value::String)
            }
            Some(c) if c == '-' || c == '+' || c == '.' || c.is_ascii_digit() => self.number(),
            Some(_) => self.word(),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Value, ValueError>) -> Result<Value, ValueError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ValueError::TooDeep);
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    /// `<|"|>…<|"|>`: everything up to the next delimiter, verbatim.
    fn raw_string(&mut self) -> Result<String, ValueError> {
        self.pos += STR_DELIM.len();
        let rest = self.rest();
        if let Some(end) = rest.find(STR_DELIM) {
            let s = rest[..end].to_owned();
            self.pos += end + STR_DELIM.len();
            return Ok(s);
        }
        if !self.lenient_eof {
            return Err(ValueError::UnclosedString);
        }
        // The model closed the call inside a string: the string runs to the end, minus the
        // closing brackets of the containers still open (`{text:<|"|>hi}` → "hi").
        let mut text = rest.trim_end();
        let mut closers = self.depth;
        while closers > 0 && (text.ends_with('}') || text.ends_with(']')) {
            text = text[..text.len() - 1].trim_end();
            closers -= 1;
        }
        let s = text.to_owned();
        self.pos = self.s.len();
        self.repairs.push("closed an unclosed <|\"|> string at the end of the call".to_owned());
        Ok(s)
    }

    /// A JSON string with escapes, accepted as a repair.
    fn json_string(&mut self) -> Result<String, ValueError> {
        let bytes = self.s.as_bytes();
        let mut i = self.pos + 1;
        let mut escaped = false;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if !escaped => escaped = true,
                b'"' if !escaped => {
                    let lit = &self.s[self.pos..=i];
                    self.pos = i + 1;
                    return match serde_json::from_str::<String>(lit) {
                        Ok(s) => Ok(s),
                        // Invalid escapes: keep the text between the quotes as written.
                        Err(_) => Ok(lit[1..lit.len() - 1].to_owned()),
                    };
                }
                _ => escaped = false,
            }
            i += 1;
        }
        Err(ValueError::UnclosedString)
    }

    fn number(&mut self) -> Result<Value, ValueError> {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
            .map_or(rest.len(), |(i, _)| i);
        let lit = &rest[..len];
        self.pos += len;
        let mut text = lit.strip_prefix('+').unwrap_or(lit).to_owned();
        if text.starts_with('.') {
            text.insert(0, '0');
        } else if text.starts_with("-.") {
            text.insert(1, '0');
        }
        if text.ends_with('.') {
            text.push('0');
        }
        if text != lit {
            self.repairs.push(format!("read the number `{lit}` as `{text}`"));
        }
        let bad = || ValueError::BadNumber(lit.to_owned());
        // Validate with JSON's grammar, but read floats with the standard library, which rounds
        // exactly (serde_json's fast path can be off by one ulp).
        let n = serde_json::from_str::<Number>(&text).map_err(|_| bad())?;
        if n.is_f64() {
            let f: f64 = text.parse().map_err(|_| bad())?;
            return Number::from_f64(f).map(Value::Number).ok_or_else(bad);
        }
        Ok(Value::Number(n))
    }

    /// Keywords, or (repair) an unquoted string running to the next separator.
    fn word(&mut self) -> Result<Value, ValueError> {
        let rest = self.rest();
        let len = rest.find([',', '}', ']']).unwrap_or(rest.len());
        let word = rest[..len].trim_end();
        let value = match word {
            TRUE => Value::Bool(true),
            FALSE => Value::Bool(false),
            NULL => Value::Null,
            "True" | "False" | "None" => {
                self.repairs.push(format!("read Python's `{word}`"));
                match word {
                    "True" => Value::Bool(true),
                    "False" => Value::Bool(false),
                    _ => Value::Null,
                }
            }
            "" => return Err(ValueError::ExpectedValue(snippet(rest))),
            _ => {
                if word.contains(STR_DELIM) || word.contains(':') && word.contains('{') {
                    return Err(ValueError::ExpectedValue(snippet(rest)));
                }
                self.repairs.push(format!("read the unquoted text `{}` as a string", snippet(word)));
                Value::String(word.to_owned())
            }
        };
        self.pos += word.len();
        Ok(value)
    }

    fn key(&mut self) -> Result<String, ValueError> {
        self.skip_ws();
        let rest = self.rest();
        if rest.starts_with(STR_DELIM) {
            let save = self.lenient_eof;
            self.lenient_eof = false; // a key is never the last thing of a call
            let k = self.raw_string();
            self.lenient_eof = save;
            return k;
        }
        if rest.starts_with('"') {
            self.repairs.push("read a JSON-style \"quoted\" key".to_owned());
            return self.json_string();
        }
        let len = rest.char_indices().find(|&(_, c)| !is_name_char(c)).map_or(rest.len(), |(i, _)| i);
        if len == 0 {
            return Err(ValueError::ExpectedKey(snippet(rest)));
        }
        self.pos += len;
        Ok(rest[..len].to_owned())
    }

    /// Called at the end of the text inside an open container.
    fn close_at_eof(&mut self, what: &str) -> Result<(), ValueError> {
        if self.lenient_eof {
            self.repairs.push(format!("added a missing `{what}`"));
            Ok(())
        } else {
            Err(ValueError::Unclosed)
        }
    }

    fn object(&mut self) -> Result<Value, ValueError> {
        self.pos += 1; // '{'
        let mut map = Map::new();
        loop {
            self.skip_ws();
            if self.at_eof() {
                self.close_at_eof("}")?;
                return Ok(Value::Object(map));
            }
            if self.rest().starts_with('}') {
                self.pos += 1;
                return Ok(Value::Object(map));
            }
            let key = self.key()?;
            self.skip_ws();
            if !self.rest().starts_with(':') {
                return Err(if self.at_eof() { ValueError::Unclosed } else { ValueError::ExpectedColon(key) });
            }
            self.pos += 1;
            self.skip_ws();
            if self.at_eof() {
                return Err(ValueError::Unclosed);
            }
            let value = self.value()?;
            map.insert(key, value);
            self.skip_ws();
            match self.rest().chars().next() {
                Some(',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.rest().starts_with('}') {
                        self.repairs.push("dropped a trailing comma".to_owned());
                    }
                }
                Some('}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                None => {
                    self.close_at_eof("}")?;
                    return Ok(Value::Object(map));
                }
                Some(_) => return Err(ValueError::ExpectedSeparator(snippet(self.rest()))),
            }
        }
    }

    fn array(&mut self) -> Result<Value, ValueError> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.at_eof() {
                self.close_at_eof("]")?;
                return Ok(Value::Array(items));
            }
            if self.rest().starts_with(']') {
                self.pos += 1;
                return Ok(Value::Array(items));
            }
            items.push(self.value()?);
            self.skip_ws();
            match self.rest().chars().next() {
                Some(',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.rest().starts_with(']') {
                        self.repairs.push("dropped a trailing comma".to_owned());
                    }
                }
                Some(']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                None => {
                    self.close_at_eof("]")?;
                    return Ok(Value::Array(items));
                }
                Some(_) => return Err(ValueError::ExpectedSeparator(snippet(self.rest()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(body: &str) -> CallBody {
        parse_call_body(body, true).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    /// What the chat crate's writer writes (the template's syntax) reads back unchanged, with
    /// nothing repaired.
    #[test]
    fn reads_back_what_the_syntax_writes() {
        let values = [
            json!({}),
            json!({"index": 7}),
            json!({"text": "say \"hi\" \\ C:\\x {a:[b]}, c", "submit": false, "clear": true}),
            json!({"n": -12, "f": 0.25, "e": 1.5e300, "z": null}),
            json!({"rows": [[1, 2], [], ["x", {"deep": [true, null]}]], "o": {"b": "", "a": "中文 ✓"}}),
            json!({"keys": ["Control", "Shift", "ArrowUp"], "_odd-key.x": "v"}),
        ];
        for value in values {
            let arguments = value.as_object().cloned().unwrap_or_default();
            let body = syntax::call_body("some_tool", &arguments);
            let read = parse_call_body(&body, false).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!((read.name.as_str(), &read.arguments), ("some_tool", &arguments), "{body}");
            assert!(read.repairs.is_empty(), "{body}: {:?}", read.repairs);
        }
    }

    #[test]
    fn well_formed_values() {
        let c = ok(r#"call:f{n:3,o:{a:[1,<|"|>x<|"|>]},ok:true,no:false,z:null,f:-2.5e3}"#);
        assert_eq!(c.name, "f");
        assert_eq!(
            Value::Object(c.arguments),
            json!({"n": 3, "o": {"a": [1, "x"]}, "ok": true, "no": false, "z": null, "f": -2500.0})
        );
        assert!(c.repairs.is_empty(), "{:?}", c.repairs);
    }

    #[test]
    fn raw_strings_keep_quotes_backslashes_and_brackets() {
        let c = ok(r#"call:type{text:<|"|>say "hi" \n C:\path {x}: [y], z<|"|>}"#);
        assert_eq!(c.arguments["text"], json!(r#"say "hi" \n C:\path {x}: [y], z"#));
        assert!(c.repairs.is_empty());
    }

    #[test]
    fn empty_and_missing_arguments() {
        assert!(ok("call:go_back{}").arguments.is_empty());
        let c = ok("call:go_back");
        assert!(c.arguments.is_empty());
        assert_eq!(c.repairs.len(), 1);
    }

    #[test]
    fn repairs_are_recorded() {
        let c = ok(r#"click{"index": 3,}"#);
        assert_eq!(c.arguments["index"], json!(3));
        assert_eq!(c.repairs.len(), 3, "{:?}", c.repairs); // prefix, quoted key, trailing comma
        let c = ok(r#"call:f{a:True,b:None,c:"x\"y"}"#);
        assert_eq!(Value::Object(c.arguments), json!({"a": true, "b": null, "c": "x\"y"}));
        let c = ok("call:f{n:.5,m:3.}");
        assert_eq!(Value::Object(c.arguments), json!({"n": 0.5, "m": 3.0}));
        let c = ok("call:navigate{url:https://example.com/a}");
        assert_eq!(c.arguments["url"], json!("https://example.com/a"));
    }

    #[test]
    fn missing_closers_only_when_the_model_closed_the_call() {
        let c = ok("call:f{a:{b:[1,2");
        assert_eq!(Value::Object(c.arguments), json!({"a": {"b": [1, 2]}}));
        assert_eq!(parse_call_body("call:f{a:{b:[1,2", false), Err(ValueError::Unclosed));
        let c = ok(r#"call:type{index:1,text:<|"|>hello}"#);
        assert_eq!(c.arguments["text"], json!("hello"));
        assert_eq!(parse_call_body(r#"call:type{text:<|"|>hel"#, false), Err(ValueError::UnclosedString));
    }

    #[test]
    fn errors() {
        assert_eq!(parse_call_body("call:{a:1}", true), Err(ValueError::MissingName));
        assert!(matches!(parse_call_body("call:f(a=1)", true), Err(ValueError::ExpectedObject(_))));
        assert!(matches!(parse_call_body("call:f{a 1}", true), Err(ValueError::ExpectedColon(_))));
        assert!(matches!(parse_call_body("call:f{a:1} and more", true), Err(ValueError::TrailingText(_))));
        assert!(matches!(parse_call_body("call:f{a:1 b:2}", true), Err(ValueError::ExpectedSeparator(_))));
        let deep = format!("call:f{{a:{}}}", "[".repeat(200));
        assert_eq!(parse_call_body(&deep, true), Err(ValueError::TooDeep));
        assert!(matches!(parse_call_body("call:f{a:1-2-3}", true), Err(ValueError::BadNumber(_))));
    }

    #[test]
    fn json_style_calls_and_prefixes() {
        let c = ok(r#"{"name": "click", "arguments": {"index": 2}}"#);
        assert_eq!((c.name.as_str(), c.arguments["index"].clone()), ("click", json!(2)));
        let (c, rest) = parse_call_prefix("call:click{index:4}\nDone.", false).unwrap();
        assert_eq!((c.name.as_str(), rest), ("click", "\nDone."));
    }

    #[test]
    fn extra_closing_brace_is_tolerated() {
        let c = ok("call:f{a:1}}");
        assert_eq!(c.arguments["a"], json!(1));
        assert_eq!(c.repairs.len(), 1);
    }

    #[test]
    fn strict_value_parser() {
        assert_eq!(parse_value(r#"[1,<|"|>a<|"|>,{k:null}]"#).unwrap(), json!([1, "a", {"k": null}]));
        assert!(parse_value("[1,2").is_err());
    }
}
