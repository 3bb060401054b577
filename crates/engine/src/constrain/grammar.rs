//! The character-level automaton of one Gemma 4 call, `call:NAME{key:value,…}`, compiled from the
//! offered tools' JSON schemas: only their names, their declared arguments (each at most once,
//! the required ones before the object closes), values of the declared types and enum values.
//!
//! The automaton reads bytes plus two symbols that are single tokens: Gemma's string delimiter
//! `<|"|>` and the call's end `<tool_call|>`. Every state it can reach can still be completed, so a
//! token that keeps it alive never leads the model into a dead end.

use hearth_chat::syntax;
use serde_json::{Map, Value};

/// Frames of nesting a state holds: the call, its object, then values inside values.
pub const MAX_DEPTH: usize = 6;
/// Names in one choice (tools, an object's keys, enum values): a bit each in a `u64`.
const MAX_CHOICES: usize = 64;
/// Digits of an integer: beyond this it no longer fits what the tools read (i64).
const MAX_INTEGER_LEN: u8 = 15;
/// Characters of a number (sign, digits, point, exponent).
const MAX_NUMBER_LEN: u8 = 24;
/// Digits of an exponent (larger ones overflow f64).
const MAX_EXPONENT_LEN: u8 = 2;
/// Items of an array without `maxItems` (bounds the state; calls never need more).
const MAX_ITEMS: u8 = 255;

/// Texts that must not appear inside a string value: the agent's parser would read them as the
/// end of the string, of the call, or of the turn.
const FORBIDDEN_IN_STRINGS: &[&str] = hearth_chat::syntax::NOT_IN_STRINGS;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("no tools to constrain calls to")]
    NoTools,
    #[error("more than {MAX_CHOICES} tools")]
    TooManyTools,
    #[error("tool name `{0}` cannot be written in Gemma's call syntax (letters, digits, `_`, `-`, `.`)")]
    BadName(String),
    #[error("tool `{0}` is declared twice")]
    Duplicate(String),
    #[error("tool `{tool}`: {problem}")]
    Schema { tool: String, problem: String },
}

/// One offered tool: its name and the JSON schema of its arguments (`None`: no arguments).
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec<'a> {
    pub name: &'a str,
    pub parameters: Option<&'a Value>,
}

/// What the automaton reads: a byte of a token's text, or one of the two special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symbol {
    Byte(u8),
    /// `<|"|>`, which opens and closes strings.
    Delim,
    /// `<tool_call|>`, which ends the call.
    End,
}

/// A set of byte strings as a trie; `value` at the node where a string ends.
#[derive(Debug, Clone, Default)]
struct Choice {
    nodes: Vec<ChoiceNode>,
}

#[derive(Debug, Clone, Default)]
struct ChoiceNode {
    children: Vec<(u8, u16)>,
    value: Option<u8>,
    /// Values of the strings through this node.
    reach: u64,
}

impl Choice {
    fn new(items: &[&[u8]]) -> Result<Self, String> {
        if items.len() > MAX_CHOICES {
            return Err(format!("more than {MAX_CHOICES} choices"));
        }
        let mut choice = Choice { nodes: vec![ChoiceNode::default()] };
        for (value, item) in items.iter().enumerate() {
            let mut node = 0usize;
            choice.nodes[0].reach |= 1 << value;
            for &b in *item {
                node = match choice.child(node as u16, b) {
                    Some(next) => next as usize,
                    None => {
                        let next = choice.nodes.len();
                        let id = u16::try_from(next).map_err(|_| "names too long".to_string())?;
                        choice.nodes.push(ChoiceNode::default());
                        choice.nodes[node].children.push((b, id));
                        next
                    }
                };
                choice.nodes[node].reach |= 1 << value;
            }
            if choice.nodes[node].value.is_some() {
                return Err(format!("`{}` is listed twice", String::from_utf8_lossy(item)));
            }
            choice.nodes[node].value = Some(value as u8);
        }
        Ok(choice)
    }

    fn child(&self, node: u16, byte: u8) -> Option<u16> {
        self.nodes[node as usize].children.iter().find(|&&(b, _)| b == byte).map(|&(_, c)| c)
    }
}

#[derive(Debug, Clone)]
enum Schema {
    /// At least `min` characters that are not ASCII whitespace (so the trimmed text is long enough).
    Str {
        min: u8,
    },
    /// One of the strings of a choice.
    Enum {
        choice: u16,
    },
    Number {
        integer: bool,
        nonnegative: bool,
    },
    Bool,
    Array {
        items: u16,
        min: u8,
        max: u8,
    },
    Object(u16),
}

#[derive(Debug, Clone)]
struct ObjectSchema {
    keys: u16,
    /// The schema of each key's value, by key index.
    values: Vec<u16>,
    required: u64,
    all: u64,
}

/// The compiled grammar of a call to one of a set of tools.
#[derive(Debug, Clone)]
pub struct CallGrammar {
    choices: Vec<Choice>,
    schemas: Vec<Schema>,
    objects: Vec<ObjectSchema>,
    /// `call:` + each tool's name (choice 0); the object schema of each tool's arguments.
    tools: Vec<u16>,
    names: Vec<String>,
}

const HEAD: u16 = 0;
/// The object of a tool whose arguments are not constrained.
const FREE: u16 = u16::MAX;
const BOOLEANS: u16 = 1;
const MARKERS: u16 = 2;

impl CallGrammar {
    pub fn new(tools: &[ToolSpec]) -> Result<Self, GrammarError> {
        Self::with_free(tools, &[])
    }

    /// The grammar of calls to `tools`, and to the tools named in `free`, whose name is held to
    /// the list but whose arguments are not constrained (a page's tool whose schema this grammar
    /// cannot compile: the agent validates its arguments instead). After a free tool's `{` the
    /// call leaves the grammar ([`CallState::free`]).
    pub fn with_free(tools: &[ToolSpec], free: &[&str]) -> Result<Self, GrammarError> {
        if tools.is_empty() && free.is_empty() {
            return Err(GrammarError::NoTools);
        }
        if tools.len() + free.len() > MAX_CHOICES {
            return Err(GrammarError::TooManyTools);
        }
        let names: Vec<&str> = tools.iter().map(|t| t.name).chain(free.iter().copied()).collect();
        let mut heads = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if !syntax::is_tool_name(name) {
                return Err(GrammarError::BadName((*name).to_owned()));
            }
            if names[..i].contains(name) {
                return Err(GrammarError::Duplicate((*name).to_owned()));
            }
            heads.push(format!("{}{}", syntax::CALL_PREFIX, name).into_bytes());
        }
        let fixed = |items: &[&[u8]]| {
            Choice::new(items).map_err(|problem| GrammarError::Schema { tool: String::new(), problem })
        };
        let head_refs: Vec<&[u8]> = heads.iter().map(Vec::as_slice).collect();
        let markers: Vec<&[u8]> = FORBIDDEN_IN_STRINGS.iter().map(|s| s.as_bytes()).collect();
        let mut grammar = CallGrammar {
            choices: vec![
                fixed(&head_refs)?,
                fixed(&[syntax::TRUE.as_bytes(), syntax::FALSE.as_bytes()])?,
                fixed(&markers)?,
            ],
            schemas: Vec::new(),
            objects: Vec::new(),
            tools: Vec::new(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        };
        let empty = Value::Object(Map::new());
        for tool in tools {
            let parameters = tool.parameters.unwrap_or(&empty);
            let fail = |problem: String| GrammarError::Schema { tool: tool.name.to_owned(), problem };
            let object = grammar.object(parameters, 2).map_err(fail)?;
            grammar.tools.push(object);
        }
        grammar.tools.extend(free.iter().map(|_| FREE));
        Ok(grammar)
    }

    /// The tools' names, in the order given.
    pub fn tool_names(&self) -> &[String] {
        &self.names
    }

    fn push_choice(&mut self, items: &[&[u8]]) -> Result<u16, String> {
        let choice = Choice::new(items)?;
        self.choices.push(choice);
        u16::try_from(self.choices.len() - 1).map_err(|_| "schema too large".to_string())
    }

    fn push_schema(&mut self, schema: Schema) -> Result<u16, String> {
        self.schemas.push(schema);
        u16::try_from(self.schemas.len() - 1).map_err(|_| "schema too large".to_string())
    }

    /// An object schema, whose frame sits at `depth` (the call is frame 0, its object frame 1).
    fn object(&mut self, schema: &Value, depth: usize) -> Result<u16, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} levels deep"));
        }
        let empty = Map::new();
        let properties = match schema.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err("`properties` is not an object".into()),
        };
        let names: Vec<&String> = properties.keys().collect();
        for name in &names {
            if !syntax::is_key(name) {
                return Err(format!("argument name `{name}` cannot be written as a bare key"));
            }
        }
        let key_bytes: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        let keys = self.push_choice(&key_bytes)?;
        let mut values = Vec::new();
        for name in &names {
            let value = self.value(&properties[name.as_str()], depth + 1).map_err(|e| format!("`{name}`: {e}"))?;
            values.push(value);
        }
        let mut required = 0u64;
        if let Some(list) = schema.get("required") {
            let list = list.as_array().ok_or("`required` is not a list")?;
            for r in list {
                let r = r.as_str().ok_or("`required` holds a non-string")?;
                let i = names.iter().position(|n| *n == r).ok_or_else(|| format!("required `{r}` is not declared"))?;
                required |= 1 << i;
            }
        }
        let all = if names.len() == 64 { u64::MAX } else { (1u64 << names.len()) - 1 };
        self.objects.push(ObjectSchema { keys, values, required, all });
        u16::try_from(self.objects.len() - 1).map_err(|_| "schema too large".to_string())
    }

    /// A value whose frame sits at `depth`.
    fn value(&mut self, schema: &Value, depth: usize) -> Result<u16, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} levels deep"));
        }
        let count = |key: &str| schema.get(key).and_then(Value::as_u64);
        let nonnegative = schema.get("minimum").and_then(Value::as_f64).is_some_and(|m| m >= 0.0);
        let enumerated = schema.get("enum").and_then(Value::as_array);
        let ty = match schema.get("type") {
            Some(Value::String(t)) => t.as_str(),
            // Untyped: an enum of strings still says what to write.
            None if enumerated.is_some() => "string",
            Some(other) => return Err(format!("type {other} is not supported")),
            None => return Err("no type".into()),
        };
        let schema = match ty {
            "string" => match enumerated {
                Some(values) => {
                    let strings: Option<Vec<&str>> = values.iter().map(Value::as_str).collect();
                    let strings = strings.ok_or("an enum holds a non-string")?;
                    if strings.is_empty() {
                        return Err("an empty enum".into());
                    }
                    let bytes: Vec<&[u8]> = strings.iter().map(|s| s.as_bytes()).collect();
                    Schema::Enum { choice: self.push_choice(&bytes)? }
                }
                None => Schema::Str { min: count("minLength").unwrap_or(0).min(255) as u8 },
            },
            // Enums of numbers are left to the tool's validation: the type still holds.
            "integer" => Schema::Number { integer: true, nonnegative },
            "number" => Schema::Number { integer: false, nonnegative },
            "boolean" => Schema::Bool,
            "array" => {
                let items = schema.get("items").ok_or("an array without `items`")?;
                let items = self.value(items, depth + 1)?;
                let min = count("minItems").unwrap_or(0);
                let max = count("maxItems").unwrap_or(u64::from(MAX_ITEMS)).min(u64::from(MAX_ITEMS));
                if min > max {
                    return Err(format!("minItems {min} is above maxItems {max}"));
                }
                Schema::Array { items, min: min as u8, max: max as u8 }
            }
            "object" => Schema::Object(self.object(schema, depth)?),
            other => return Err(format!("type `{other}` is not supported")),
        };
        self.push_schema(schema)
    }

    fn choice(&self, choice: u16) -> &Choice {
        &self.choices[choice as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NumberPhase {
    Start,
    Minus,
    Zero,
    Digits,
    Point,
    Fraction,
    Exponent,
    ExponentSign,
    ExponentDigits,
}

impl NumberPhase {
    /// A number may end here.
    fn complete(self) -> bool {
        matches!(self, Self::Zero | Self::Digits | Self::Fraction | Self::ExponentDigits)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ObjectPhase {
    /// After `{`: a key or `}`.
    Open,
    /// Inside a key, at a node of the object's key choice.
    Key(u16),
    /// After `key:`: the value of key `.0`.
    Value(u8),
    /// After a value: `,` or `}`.
    AfterValue,
    /// After `,`: a key.
    AfterComma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ArrayPhase {
    Open,
    AfterValue,
    AfterComma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Frame {
    Unused,
    /// `call:NAME`, at a node of the head choice; `{` after a whole name.
    Head(u16),
    /// The call's object is closed: only `<tool_call|>`.
    Done,
    /// The arguments of a tool whose schema is not constrained: anything.
    Free,
    Object {
        object: u16,
        used: u64,
        phase: ObjectPhase,
    },
    /// Inside a string: characters still needed, the node of a forbidden text being matched,
    /// continuation bytes owed by a UTF-8 sequence.
    Str {
        need: u8,
        marker: u16,
        utf8: u8,
    },
    Enum {
        choice: u16,
        node: u16,
    },
    Number {
        phase: NumberPhase,
        len: u8,
        exponent: u8,
        integer: bool,
        nonnegative: bool,
    },
    Bool(u16),
    Array {
        items: u16,
        count: u8,
        max: u8,
        min: u8,
        phase: ArrayPhase,
    },
}

enum Step {
    Consumed,
    Rejected,
    /// The value ended before this symbol (numbers, booleans): its parent reads it.
    EndedBefore,
}

/// Where the automaton is inside one call. Small and `Copy`: the mask search copies it per trie
/// edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallState {
    frames: [Frame; MAX_DEPTH],
    depth: u8,
}

impl CallState {
    /// Right after `<|tool_call>`.
    pub fn start() -> Self {
        let mut frames = [Frame::Unused; MAX_DEPTH];
        frames[0] = Frame::Head(0);
        CallState { frames, depth: 1 }
    }

    /// The call was closed with `<tool_call|>`.
    pub fn finished(&self) -> bool {
        self.depth == 0
    }

    /// The call is to a tool whose arguments are not constrained, and they have begun.
    pub fn free(&self) -> bool {
        matches!(self.top(), Some(Frame::Free))
    }

    /// The state inside a string (whose masks depend on nothing else), if that is where it is.
    pub(crate) fn in_string(&self) -> Option<(u8, u16, u8)> {
        match self.top() {
            Some(Frame::Str { need, marker, utf8 }) => Some((need, marker, utf8)),
            _ => None,
        }
    }

    fn top(&self) -> Option<Frame> {
        self.depth.checked_sub(1).map(|i| self.frames[i as usize])
    }

    fn set_top(&mut self, frame: Frame) {
        self.frames[self.depth as usize - 1] = frame;
    }

    fn push(&mut self, frame: Frame) -> bool {
        if self.depth as usize == MAX_DEPTH {
            return false;
        }
        self.frames[self.depth as usize] = frame;
        self.depth += 1;
        true
    }

    fn pop(&mut self) {
        self.depth -= 1;
        self.frames[self.depth as usize] = Frame::Unused;
    }

    /// The state after `symbol`, or `None` if no valid call continues that way.
    pub fn next(&self, grammar: &CallGrammar, symbol: Symbol) -> Option<CallState> {
        let mut state = *self;
        state.feed(grammar, symbol).then_some(state)
    }

    /// The state after `bytes`, or `None`.
    pub fn after_bytes(&self, grammar: &CallGrammar, bytes: &[u8]) -> Option<CallState> {
        let mut state = *self;
        bytes.iter().all(|&b| state.feed(grammar, Symbol::Byte(b))).then_some(state)
    }

    pub(crate) fn feed(&mut self, grammar: &CallGrammar, symbol: Symbol) -> bool {
        loop {
            match self.step_top(grammar, symbol) {
                Step::Consumed => return true,
                Step::Rejected => return false,
                Step::EndedBefore => self.pop(),
            }
        }
    }

    fn step_top(&mut self, g: &CallGrammar, symbol: Symbol) -> Step {
        let Some(frame) = self.top() else { return Step::Rejected };
        let byte = match symbol {
            Symbol::Byte(b) => Some(b),
            _ => None,
        };
        match frame {
            Frame::Unused => Step::Rejected,
            Frame::Head(node) => {
                let Some(b) = byte else { return Step::Rejected };
                if let Some(next) = g.choice(HEAD).child(node, b) {
                    self.set_top(Frame::Head(next));
                    return Step::Consumed;
                }
                match g.choice(HEAD).nodes[node as usize].value {
                    Some(tool) if b == b'{' && g.tools[tool as usize] == FREE => {
                        self.set_top(Frame::Free);
                        Step::Consumed
                    }
                    Some(tool) if b == b'{' => {
                        self.set_top(Frame::Done);
                        let object = g.tools[tool as usize];
                        consumed(self.push(Frame::Object { object, used: 0, phase: ObjectPhase::Open }))
                    }
                    _ => Step::Rejected,
                }
            }
            Frame::Free => Step::Consumed,
            Frame::Done => {
                if symbol == Symbol::End {
                    self.pop();
                    Step::Consumed
                } else {
                    Step::Rejected
                }
            }
            Frame::Object { object, used, phase } => self.step_object(g, object, used, phase, symbol),
            Frame::Str { need, marker, utf8 } => {
                let Some(b) = byte else {
                    if symbol == Symbol::Delim && need == 0 && utf8 == 0 {
                        self.pop();
                        return Step::Consumed;
                    }
                    return Step::Rejected;
                };
                let (need, utf8) = if utf8 > 0 {
                    if b & 0xC0 != 0x80 {
                        return Step::Rejected;
                    }
                    (need, utf8 - 1)
                } else {
                    let owed = match b {
                        0x00..=0x7F => 0,
                        0xC2..=0xDF => 1,
                        0xE0..=0xEF => 2,
                        0xF0..=0xF4 => 3,
                        _ => return Step::Rejected,
                    };
                    let counts = !b.is_ascii_whitespace();
                    (if counts { need.saturating_sub(1) } else { need }, owed)
                };
                let markers = g.choice(MARKERS);
                let marker = match markers.child(marker, b).or_else(|| markers.child(0, b)) {
                    Some(next) if markers.nodes[next as usize].value.is_some() => return Step::Rejected,
                    Some(next) => next,
                    None => 0,
                };
                self.set_top(Frame::Str { need, marker, utf8 });
                Step::Consumed
            }
            Frame::Enum { choice, node } => match symbol {
                Symbol::Byte(b) => match g.choice(choice).child(node, b) {
                    Some(next) => {
                        self.set_top(Frame::Enum { choice, node: next });
                        Step::Consumed
                    }
                    None => Step::Rejected,
                },
                Symbol::Delim if g.choice(choice).nodes[node as usize].value.is_some() => {
                    self.pop();
                    Step::Consumed
                }
                _ => Step::Rejected,
            },
            Frame::Number { phase, len, exponent, integer, nonnegative } => {
                let full = len >= if integer { MAX_INTEGER_LEN } else { MAX_NUMBER_LEN };
                let next = match (phase, byte) {
                    _ if full && phase.complete() => None,
                    (NumberPhase::Start, Some(b'-')) if !nonnegative => Some(NumberPhase::Minus),
                    (NumberPhase::Start | NumberPhase::Minus, Some(b'0')) => Some(NumberPhase::Zero),
                    (NumberPhase::Start | NumberPhase::Minus | NumberPhase::Digits, Some(b'0'..=b'9')) => {
                        Some(NumberPhase::Digits)
                    }
                    (NumberPhase::Zero | NumberPhase::Digits, Some(b'.')) if !integer => Some(NumberPhase::Point),
                    (NumberPhase::Point | NumberPhase::Fraction, Some(b'0'..=b'9')) => Some(NumberPhase::Fraction),
                    (NumberPhase::Zero | NumberPhase::Digits | NumberPhase::Fraction, Some(b'e' | b'E'))
                        if !integer =>
                    {
                        Some(NumberPhase::Exponent)
                    }
                    (NumberPhase::Exponent, Some(b'+' | b'-')) => Some(NumberPhase::ExponentSign),
                    (NumberPhase::Exponent | NumberPhase::ExponentSign, Some(b'0'..=b'9')) => {
                        Some(NumberPhase::ExponentDigits)
                    }
                    (NumberPhase::ExponentDigits, Some(b'0'..=b'9')) if exponent < MAX_EXPONENT_LEN => {
                        Some(NumberPhase::ExponentDigits)
                    }
                    _ => None,
                };
                match next {
                    Some(next) => {
                        let exponent = exponent + u8::from(next == NumberPhase::ExponentDigits);
                        self.set_top(Frame::Number { phase: next, len: len + 1, exponent, integer, nonnegative });
                        Step::Consumed
                    }
                    None if phase.complete() => Step::EndedBefore,
                    None => Step::Rejected,
                }
            }
            Frame::Bool(node) => match byte.and_then(|b| g.choice(BOOLEANS).child(node, b)) {
                Some(next) => {
                    self.set_top(Frame::Bool(next));
                    Step::Consumed
                }
                None if g.choice(BOOLEANS).nodes[node as usize].value.is_some() => Step::EndedBefore,
                None => Step::Rejected,
            },
            Frame::Array { items, count, max, min, phase } => {
                let array = |count, phase| Frame::Array { items, count, max, min, phase };
                match (phase, byte) {
                    (ArrayPhase::Open, Some(b']')) if min == 0 => {
                        self.pop();
                        Step::Consumed
                    }
                    (ArrayPhase::AfterValue, Some(b']')) if count >= min => {
                        self.pop();
                        Step::Consumed
                    }
                    (ArrayPhase::AfterValue, Some(b',')) if count < max => {
                        self.set_top(array(count, ArrayPhase::AfterComma));
                        Step::Consumed
                    }
                    (ArrayPhase::Open | ArrayPhase::AfterComma, _) if count < max => {
                        self.set_top(array(count + 1, ArrayPhase::AfterValue));
                        self.start_value(g, items, symbol)
                    }
                    _ => Step::Rejected,
                }
            }
        }
    }

    fn step_object(&mut self, g: &CallGrammar, object: u16, used: u64, phase: ObjectPhase, symbol: Symbol) -> Step {
        let schema = &g.objects[object as usize];
        let keys = g.choice(schema.keys);
        let set = |state: &mut Self, used, phase| state.set_top(Frame::Object { object, used, phase });
        // A key's first byte: only toward keys not yet given.
        let key_start = |state: &mut Self, b: u8| match keys.child(0, b) {
            Some(node) if keys.nodes[node as usize].reach & !used != 0 => {
                set(state, used, ObjectPhase::Key(node));
                Step::Consumed
            }
            _ => Step::Rejected,
        };
        match (phase, symbol) {
            (ObjectPhase::Value(key), _) => {
                let used = used | (1 << key);
                set(self, used, ObjectPhase::AfterValue);
                self.start_value(g, schema.values[key as usize], symbol)
            }
            (ObjectPhase::Open | ObjectPhase::AfterValue, Symbol::Byte(b'}')) if schema.required & !used == 0 => {
                self.pop();
                Step::Consumed
            }
            (ObjectPhase::Open | ObjectPhase::AfterComma, Symbol::Byte(b)) => key_start(self, b),
            (ObjectPhase::AfterValue, Symbol::Byte(b',')) if schema.all & !used != 0 => {
                set(self, used, ObjectPhase::AfterComma);
                Step::Consumed
            }
            (ObjectPhase::Key(node), Symbol::Byte(b':')) => match keys.nodes[node as usize].value {
                Some(key) if used & (1 << key) == 0 => {
                    set(self, used, ObjectPhase::Value(key));
                    Step::Consumed
                }
                _ => Step::Rejected,
            },
            (ObjectPhase::Key(node), Symbol::Byte(b)) => match keys.child(node, b) {
                Some(next) if keys.nodes[next as usize].reach & !used != 0 => {
                    set(self, used, ObjectPhase::Key(next));
                    Step::Consumed
                }
                _ => Step::Rejected,
            },
            _ => Step::Rejected,
        }
    }

    /// Pushes the frame of a value of `schema` and reads its first symbol.
    fn start_value(&mut self, g: &CallGrammar, schema: u16, symbol: Symbol) -> Step {
        let frame = match (&g.schemas[schema as usize], symbol) {
            (&Schema::Str { min }, Symbol::Delim) => Frame::Str { need: min, marker: 0, utf8: 0 },
            (&Schema::Enum { choice }, Symbol::Delim) => Frame::Enum { choice, node: 0 },
            (&Schema::Array { items, min, max }, Symbol::Byte(b'[')) => {
                Frame::Array { items, count: 0, max, min, phase: ArrayPhase::Open }
            }
            (&Schema::Object(object), Symbol::Byte(b'{')) => {
                Frame::Object { object, used: 0, phase: ObjectPhase::Open }
            }
            (&Schema::Number { integer, nonnegative }, Symbol::Byte(_)) => {
                let frame = Frame::Number { phase: NumberPhase::Start, len: 0, exponent: 0, integer, nonnegative };
                if !self.push(frame) {
                    return Step::Rejected;
                }
                // A number's first byte is never its end: EndedBefore cannot come back here.
                return match self.step_top(g, symbol) {
                    Step::Consumed => Step::Consumed,
                    _ => Step::Rejected,
                };
            }
            (Schema::Bool, Symbol::Byte(_)) => {
                if !self.push(Frame::Bool(0)) {
                    return Step::Rejected;
                }
                return match self.step_top(g, symbol) {
                    Step::Consumed => Step::Consumed,
                    _ => Step::Rejected,
                };
            }
            _ => return Step::Rejected,
        };
        consumed(self.push(frame))
    }
}

fn consumed(pushed: bool) -> Step {
    if pushed { Step::Consumed } else { Step::Rejected }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Tools shaped like the agent's: integers with a minimum, strings with minLength, enums,
    /// booleans, numbers, an array of strings, optional and required arguments.
    pub(crate) fn browser_tools() -> Vec<(String, Value)> {
        let index = json!({"type": "integer", "minimum": 0});
        vec![
            ("snapshot".into(), json!({"type": "object", "properties": {}})),
            ("click".into(), json!({"type": "object", "properties": {"index": index}, "required": ["index"]})),
            (
                "type".into(),
                json!({"type": "object", "properties": {"index": index, "text": {"type": "string"}, "submit": {"type": "boolean"}}, "required": ["index", "text"]}),
            ),
            (
                "press_key".into(),
                json!({"type": "object", "properties": {"key": {"type": "string", "enum": ["Enter", "End", "Escape"]}, "index": index}, "required": ["key"]}),
            ),
            (
                "wait_for".into(),
                json!({"type": "object", "properties": {"text": {"type": "string"}, "timeout_seconds": {"type": "number", "minimum": 0}}}),
            ),
            (
                "ask_user".into(),
                json!({"type": "object", "properties": {"question": {"type": "string", "minLength": 1}, "options": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3}}, "required": ["question", "options"]}),
            ),
            (
                "nested".into(),
                json!({"type": "object", "properties": {"o": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "number"}}}, "required": ["a"]}}}),
            ),
        ]
    }

    pub(crate) fn grammar() -> CallGrammar {
        let tools = browser_tools();
        let specs: Vec<ToolSpec> = tools.iter().map(|(n, p)| ToolSpec { name: n, parameters: Some(p) }).collect();
        CallGrammar::new(&specs).unwrap()
    }

    /// Reads a call written with `"` for `<|"|>`; true when it ends complete with `<tool_call|>`.
    fn accepts(g: &CallGrammar, text: &str) -> bool {
        let mut state = CallState::start();
        for b in text.bytes() {
            let symbol = if b == b'"' { Symbol::Delim } else { Symbol::Byte(b) };
            if !state.feed(g, symbol) {
                return false;
            }
        }
        state.feed(g, Symbol::End) && state.finished()
    }

    #[test]
    fn well_formed_calls_are_accepted() {
        let g = grammar();
        for call in [
            "call:snapshot{}",
            "call:click{index:12}",
            "call:click{index:0}",
            r#"call:type{index:3,text:"hello, world {x:1}"}"#,
            r#"call:type{text:"",submit:false,index:1}"#,
            r#"call:press_key{key:"End"}"#,
            r#"call:press_key{index:4,key:"Enter"}"#,
            r#"call:wait_for{timeout_seconds:2.5e1}"#,
            r#"call:wait_for{timeout_seconds:0.25,text:"Done"}"#,
            r#"call:ask_user{question:"Which?",options:["a","b","c"]}"#,
            "call:nested{o:{a:-3,b:[1.5,2]}}",
            "call:nested{}",
        ] {
            assert!(accepts(&g, call), "{call}");
        }
    }

    /// The calls the chat crate's writer writes (the template's syntax, which the agent's codec
    /// reads back) are the calls the grammar lets the model write.
    #[test]
    fn accepts_what_the_syntax_writes() {
        let g = grammar();
        let calls = [
            ("snapshot", json!({})),
            ("click", json!({"index": 12})),
            ("type", json!({"index": 3, "text": "say \"hi\" {x:1}, [y] \\ 中文", "submit": true})),
            ("type", json!({"index": 0, "text": ""})),
            ("press_key", json!({"key": "Escape", "index": 4})),
            ("wait_for", json!({"timeout_seconds": 2.5, "text": "Done"})),
            ("wait_for", json!({"timeout_seconds": 30.0})),
            ("ask_user", json!({"question": "Which?", "options": ["a", "b"]})),
            ("nested", json!({"o": {"a": -3, "b": [1.5, 2, -0.125]}})),
        ];
        for (name, arguments) in calls {
            let body = syntax::call_body(name, arguments.as_object().expect("an object"));
            let mut state = CallState::start();
            for (i, piece) in body.split(syntax::STRING_DELIMITER).enumerate() {
                if i > 0 {
                    assert!(state.feed(&g, Symbol::Delim), "{body}: the delimiter before piece {i}");
                }
                for b in piece.bytes() {
                    assert!(state.feed(&g, Symbol::Byte(b)), "{body}: refused at {piece:?}");
                }
            }
            assert!(state.feed(&g, Symbol::End) && state.finished(), "{body}: not complete");
        }
    }

    #[test]
    fn malformed_calls_are_refused() {
        let g = grammar();
        for call in [
            "call:fly{}",                                               // unknown tool
            "call:clic{index:1}",                                       // a prefix of a name
            "call:click{}",                                             // missing required argument
            "call:click{index:-1}",                                     // below the minimum
            "call:click{index:01}",                                     // leading zero
            "call:click{index:1.5}",                                    // not an integer
            "call:click{index:1,index:2}",                              // a key twice
            "call:click{idx:1}",                                        // unknown argument
            r#"call:click{index:"1"}"#,                                 // wrong type
            r#"call:press_key{key:"Home"}"#,                            // not in the enum
            r#"call:press_key{key:"En"}"#,                              // a prefix of an enum value
            r#"call:type{index:1,text:"a<turn|>b"}"#,                   // a turn marker inside a string
            r#"call:ask_user{question:" ",options:["a","b"]}"#,         // blank where minLength is 1
            r#"call:ask_user{question:"Q",options:["a"]}"#,             // too few items
            r#"call:ask_user{question:"Q",options:["a","b","c","d"]}"#, // too many
            "call:type{index:1,submit:tru}",                            // not a boolean
            "call:nested{o:{b:[]}}",                                    // nested required missing
            "call:snapshot{},",                                         // text after the object
            "call:snapshot",                                            // no object
        ] {
            assert!(!accepts(&g, call), "{call}");
        }
    }

    #[test]
    fn the_end_is_allowed_only_when_the_call_is_complete() {
        let g = grammar();
        let mut state = CallState::start();
        for b in b"call:click{index:7" {
            assert!(state.next(&g, Symbol::End).is_none());
            assert!(state.feed(&g, Symbol::Byte(*b)));
        }
        assert!(state.next(&g, Symbol::End).is_none(), "the object is still open");
        assert!(state.feed(&g, Symbol::Byte(b'}')));
        assert!(state.feed(&g, Symbol::End));
        assert!(state.finished());
    }

    #[test]
    fn a_string_waits_for_whole_utf8_characters_before_closing() {
        let g = grammar();
        let state = CallState::start().after_bytes(&g, b"call:type{index:1,text:").unwrap();
        let state = state.next(&g, Symbol::Delim).unwrap();
        let half = state.after_bytes(&g, &"é".as_bytes()[..1]).unwrap();
        assert!(half.next(&g, Symbol::Delim).is_none());
        assert!(half.after_bytes(&g, &"é".as_bytes()[1..]).unwrap().next(&g, Symbol::Delim).is_some());
        assert!(state.after_bytes(&g, &[0xFF]).is_none());
    }

    #[test]
    fn schemas_the_grammar_cannot_honour_are_refused_with_the_tool_named() {
        let bad = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}});
        let err = CallGrammar::new(&[ToolSpec { name: "t", parameters: Some(&bad) }]).unwrap_err();
        assert!(matches!(&err, GrammarError::Schema { tool, .. } if tool == "t"), "{err}");
        let missing = json!({"type": "object", "properties": {}, "required": ["x"]});
        assert!(CallGrammar::new(&[ToolSpec { name: "t", parameters: Some(&missing) }]).is_err());
        assert_eq!(CallGrammar::new(&[]).unwrap_err(), GrammarError::NoTools);
        assert!(matches!(
            CallGrammar::new(&[ToolSpec { name: "a b", parameters: None }]),
            Err(GrammarError::BadName(_))
        ));
    }
}
