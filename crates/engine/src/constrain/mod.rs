//! Constrained tool calls. Once the model opens a call (`<|tool_call>`), each token is sampled
//! only among those that can continue a valid `call:NAME{…}` to one of the offered tools (names,
//! declared arguments, types, enum values), and `<tool_call|>` only once the call is complete.
//! Free text and thinking stay unconstrained.
//!
//! - [`grammar`]: the automaton of one call, compiled from the tools' JSON schemas.
//! - [`vocab`]: the tokenizer's vocabulary as a byte trie, walked with the automaton to find the
//!   allowed tokens (dead branches pruned whole).
//! - the model's decode loops ([`hearth_model::decode`]) take it as their [`TokenConstraint`]
//!   and apply the allowed set, as a bitset, to the logits on the device.
//!
//! [`CallConstraint`] follows the generated tokens and hands out the mask for the next one. Masks
//! are cached by state: inside a string (where most of the vocabulary is allowed and the walk is
//! longest) the state, and so the mask, stays the same from token to token.

pub mod grammar;
pub mod vocab;

use std::collections::HashMap;
use std::sync::Arc;

use hearth_model::decode::{ConstraintMark, TokenConstraint};
use serde_json::Value;

pub use grammar::{CallGrammar, CallState, GrammarError, Symbol, ToolSpec};
pub use vocab::{Markers, TokenText, VocabTrie};

#[derive(Debug, thiserror::Error)]
pub enum ConstrainError {
    #[error("the tokenizer has no `{0}` token: tool calls cannot be constrained")]
    MissingToken(String),
    #[error("reading the vocabulary failed: {0}")]
    Decode(String),
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    #[error("the tool list is not an OpenAI-style function list: {0}")]
    ToolList(String),
}

/// The grammar of calls to the tools of an OpenAI-style function list
/// (`[{"type": "function", "function": {"name", "description", "parameters"}}]`).
pub fn grammar_from_function_list(tools: &Value) -> Result<CallGrammar, ConstrainError> {
    let list = tools.as_array().ok_or_else(|| ConstrainError::ToolList("not a list".into()))?;
    let mut specs = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let function = tool.get("function").unwrap_or(tool);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ConstrainError::ToolList(format!("tool {i} has no name")))?;
        specs.push(ToolSpec { name, parameters: function.get("parameters") });
    }
    Ok(CallGrammar::new(&specs)?)
}

/// Masks kept before the cache is emptied (each is vocab/8 bytes: 32 KB for Gemma).
const MAX_CACHED_MASKS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MaskKey {
    /// Inside a string a token never leaves it, so nothing outside the string matters.
    Str(u8, u16, u8),
    State(CallState),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Free,
    Thought,
    Call(CallState),
}

/// Follows a generation and constrains the calls in it.
pub struct CallConstraint {
    grammar: Arc<CallGrammar>,
    vocab: Arc<VocabTrie>,
    mode: Mode,
    cache: HashMap<MaskKey, Vec<u32>>,
    /// Words of the cached masks.
    words: usize,
}

impl CallConstraint {
    pub fn new(grammar: Arc<CallGrammar>, vocab: Arc<VocabTrie>) -> Self {
        CallConstraint { grammar, vocab, mode: Mode::Free, cache: HashMap::new(), words: 0 }
    }

    /// Starts a generation after `prompt`, which is read for an open thought or call (a prompt may
    /// end with `<|tool_call>` to make the model act).
    pub fn begin(&mut self, prompt: &[u32]) {
        self.mode = Mode::Free;
        for &id in prompt {
            self.advance(id);
        }
    }

    /// The tools calls are held to.
    pub fn tool_names(&self) -> &[String] {
        self.grammar.tool_names()
    }

    /// Whether the next token is constrained.
    pub fn in_call(&self) -> bool {
        matches!(self.mode, Mode::Call(_))
    }

    /// The allowed next tokens as a bitset of `vocab.div_ceil(32)` words, or `None` when the next
    /// token is free.
    pub fn mask(&mut self, vocab: usize) -> Option<&[u32]> {
        let Mode::Call(state) = self.mode else { return None };
        let words = vocab.div_ceil(32);
        if words != self.words || self.cache.len() >= MAX_CACHED_MASKS {
            self.cache.clear();
            self.words = words;
        }
        let key = match state.in_string() {
            Some((need, marker, utf8)) => MaskKey::Str(need, marker, utf8),
            None => MaskKey::State(state),
        };
        let (grammar, trie) = (&self.grammar, &self.vocab);
        let mask = self.cache.entry(key).or_insert_with(|| {
            let mut mask = vec![0u32; words];
            trie.allowed(grammar, &state, &mut mask);
            mask
        });
        // Unreachable with a vocabulary that can spell the tools; sampling garbage would be worse
        // than leaving the token free.
        if mask.iter().all(|&w| w == 0) { None } else { Some(mask.as_slice()) }
    }

    /// Follows the generated token `id`.
    pub fn advance(&mut self, id: u32) {
        let markers = self.vocab.markers();
        self.mode = match self.mode {
            Mode::Free if id == markers.call_open => Mode::Call(CallState::start()),
            Mode::Free if markers.thought.is_some_and(|(open, _)| open == id) => Mode::Thought,
            Mode::Thought if markers.thought.is_some_and(|(_, close)| close == id) => Mode::Free,
            Mode::Call(state) => match self.vocab.advance(&self.grammar, &state, id) {
                // Closed, or a tool whose arguments are free (validated by the agent).
                Some(next) if next.finished() || next.free() => Mode::Free,
                Some(next) => Mode::Call(next),
                // Off the grammar (a prompt's call to another tool): free until the next call.
                None => Mode::Free,
            },
            mode => mode,
        };
    }
}

/// The decode loops hold their tokens to it.
impl TokenConstraint for CallConstraint {
    fn begin(&mut self, prompt: &[u32]) {
        CallConstraint::begin(self, prompt);
    }

    fn constrains_next(&self) -> bool {
        self.in_call()
    }

    fn mask(&mut self, vocab: usize) -> Option<&[u32]> {
        CallConstraint::mask(self, vocab)
    }

    fn advance(&mut self, id: u32) {
        CallConstraint::advance(self, id);
    }

    fn mark(&self) -> ConstraintMark {
        ConstraintMark::new(self.mode)
    }

    fn reset(&mut self, mark: &ConstraintMark) {
        let mode = mark.get::<Mode>().copied();
        debug_assert!(mode.is_some(), "a mark of another constraint");
        if let Some(mode) = mode {
            self.mode = mode;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn function_lists_name_their_tools() {
        let tools = json!([
            {"type": "function", "function": {"name": "click", "description": "", "parameters": {"type": "object", "properties": {"index": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "go_back", "description": ""}},
        ]);
        let grammar = grammar_from_function_list(&tools).unwrap();
        assert_eq!(grammar.tool_names(), ["click", "go_back"]);
        assert!(matches!(grammar_from_function_list(&json!({})), Err(ConstrainError::ToolList(_))));
        assert!(matches!(grammar_from_function_list(&json!([{"function": {}}])), Err(ConstrainError::ToolList(_))));
    }

    /// Ids: 0 `<|tool_call>`, 1 `<tool_call|>`, 2 `<|"|>`, 3 `<|channel>`, 4 `<channel|>`, then text.
    fn constraint() -> (CallConstraint, Vec<&'static str>) {
        let pieces = vec!["", "", "", "", "", "call:", "click", "{", "}", "index:", "7", "hi", "snapshot", "a"];
        let mut texts: Vec<TokenText> = pieces.iter().map(|p| TokenText::Bytes(p.as_bytes().to_vec())).collect();
        texts[..5].clone_from_slice(&[
            TokenText::Other,
            TokenText::End,
            TokenText::Delim,
            TokenText::Other,
            TokenText::Other,
        ]);
        let markers = Markers { call_open: 0, call_close: 1, delim: 2, thought: Some((3, 4)) };
        let grammar = Arc::new(grammar::tests::grammar());
        (CallConstraint::new(grammar, Arc::new(VocabTrie::new(texts, markers))), pieces)
    }

    fn allowed(c: &mut CallConstraint) -> Option<Vec<u32>> {
        let mask = c.mask(14)?;
        Some((0..14).filter(|&id| mask[id as usize / 32] & (1 << (id % 32)) != 0).collect())
    }

    #[test]
    fn only_calls_are_constrained_and_only_outside_thoughts() {
        let (mut c, _) = constraint();
        c.begin(&[11, 13]);
        assert_eq!(allowed(&mut c), None, "free text");
        c.begin(&[3, 11, 0, 11]);
        assert_eq!(allowed(&mut c), None, "a call written while thinking is text");
        c.begin(&[3, 11, 4, 0]);
        assert_eq!(allowed(&mut c), Some(vec![5]), "a prompt that opens the call");
        for id in [5, 6, 7, 9, 10, 8] {
            assert!(allowed(&mut c).unwrap().contains(&id), "{id}");
            c.advance(id);
        }
        assert_eq!(allowed(&mut c), Some(vec![1]));
        c.advance(1);
        assert_eq!(allowed(&mut c), None, "free again after <tool_call|>");
    }

    #[test]
    fn a_call_off_the_grammar_in_the_prompt_leaves_generation_free() {
        let (mut c, _) = constraint();
        // `call:hi…` names no tool.
        c.begin(&[0, 5, 11]);
        assert!(!c.in_call());
        assert_eq!(allowed(&mut c), None);
    }
}
