//! The vocabulary as a prefix trie of the bytes each token writes, built once per tokenizer, and
//! the search that turns an automaton state into the set of tokens that keep a call valid.
//!
//! The trie is stored in pre-order: a node's first child is the next node and `end` is where its
//! subtree ends, so a rejected byte skips the whole subtree in one jump and the search needs no
//! pointers.

use hearth_chat::syntax;

use hearth_model::tokenizer::Tokenizer;

use super::ConstrainError;
use super::grammar::{CallGrammar, CallState, Symbol};

/// What a token writes, as the automaton reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenText {
    /// Ordinary text, as the decoder writes it (a byte-fallback token is its one byte).
    Bytes(Vec<u8>),
    /// `<|"|>`.
    Delim,
    /// `<tool_call|>`.
    End,
    /// Any other special token, or one that writes nothing: never part of a call.
    Other,
}

/// The special tokens the constraint watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Markers {
    /// `<|tool_call>`: the constraint starts after it.
    pub call_open: u32,
    /// `<tool_call|>`.
    pub call_close: u32,
    /// `<|"|>`.
    pub delim: u32,
    /// `<|channel>` and `<channel|>`: a call written while thinking is only text.
    pub thought: Option<(u32, u32)>,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    byte: u8,
    /// One past the last node of this subtree.
    end: u32,
    /// The tokens that end here: `sorted[first..first + count]`.
    first: u32,
    count: u32,
}

pub struct VocabTrie {
    nodes: Vec<Node>,
    /// Token ids in the byte order of their texts.
    sorted: Vec<u32>,
    /// What each id writes (its bytes live in `bytes`): (start, len), or a special kind.
    texts: Vec<Span>,
    bytes: Vec<u8>,
    markers: Markers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    Bytes(u32, u32),
    Delim,
    End,
    Other,
}

impl VocabTrie {
    /// The trie of a Gemma tokenizer: special tokens are atoms, every other token the bytes it
    /// decodes to on its own (Gemma's decoder writes each token independently of its neighbours).
    pub fn from_tokenizer(tokenizer: &Tokenizer) -> Result<Self, ConstrainError> {
        let id = |text: &str| tokenizer.token_id(text).ok_or(ConstrainError::MissingToken(text.to_owned()));
        let markers = Markers {
            call_open: id(syntax::CALL_OPEN)?,
            call_close: id(syntax::CALL_CLOSE)?,
            delim: id(syntax::STRING_DELIMITER)?,
            thought: tokenizer.token_id(syntax::THOUGHT_OPEN).zip(tokenizer.token_id(syntax::THOUGHT_CLOSE)),
        };
        Self::with_markers(tokenizer, markers)
    }

    /// Like [`Self::from_tokenizer`], with the marker tokens given (a Gemma 3 vocabulary, which
    /// has Gemma 4's pieces under other special names, can stand in for it in a benchmark).
    pub fn with_markers(tokenizer: &Tokenizer, markers: Markers) -> Result<Self, ConstrainError> {
        let size = tokenizer.vocab_size();
        let mut texts = vec![TokenText::Other; size];
        let special: std::collections::HashSet<u32> = tokenizer.added_token_ids().into_iter().collect();
        for (id, text) in texts.iter_mut().enumerate() {
            let id = id as u32;
            *text = if id == markers.delim {
                TokenText::Delim
            } else if id == markers.call_close {
                TokenText::End
            } else if special.contains(&id) {
                TokenText::Other
            } else if let Some(byte) = tokenizer.piece(id).as_deref().and_then(byte_piece) {
                TokenText::Bytes(vec![byte])
            } else {
                let text = tokenizer.decode(&[id]).map_err(|e| ConstrainError::Decode(e.to_string()))?;
                if text.is_empty() { TokenText::Other } else { TokenText::Bytes(text.into_bytes()) }
            };
        }
        Ok(Self::new(texts, markers))
    }

    /// The trie of a vocabulary given as what each id writes.
    pub fn new(texts: Vec<TokenText>, markers: Markers) -> Self {
        let mut bytes = Vec::new();
        let spans: Vec<Span> = texts
            .iter()
            .map(|t| match t {
                TokenText::Bytes(b) if !b.is_empty() => {
                    let start = bytes.len() as u32;
                    bytes.extend_from_slice(b);
                    Span::Bytes(start, b.len() as u32)
                }
                TokenText::Delim => Span::Delim,
                TokenText::End => Span::End,
                _ => Span::Other,
            })
            .collect();
        let text_of = |id: u32| match spans[id as usize] {
            Span::Bytes(start, len) => &bytes[start as usize..(start + len) as usize],
            _ => &[][..],
        };
        let mut sorted: Vec<u32> =
            (0..spans.len() as u32).filter(|&id| matches!(spans[id as usize], Span::Bytes(..))).collect();
        sorted.sort_by(|&a, &b| text_of(a).cmp(text_of(b)));
        // Pre-order construction from the sorted texts: `path[d]` is the node of the current
        // text's first d + 1 bytes.
        let mut nodes: Vec<Node> = Vec::new();
        let mut path: Vec<u32> = Vec::new();
        let mut previous: &[u8] = &[];
        for (position, &id) in sorted.iter().enumerate() {
            let text = text_of(id);
            let common = text.iter().zip(previous).take_while(|(a, b)| a == b).count();
            while path.len() > common {
                let node = path.pop().unwrap_or_default();
                nodes[node as usize].end = nodes.len() as u32;
            }
            for &byte in &text[common..] {
                path.push(nodes.len() as u32);
                nodes.push(Node { byte, end: 0, first: position as u32, count: 0 });
            }
            // Equal texts are adjacent in the sorted order, so a node's tokens are contiguous.
            let last = &mut nodes[*path.last().unwrap_or(&0) as usize];
            if last.count == 0 {
                last.first = position as u32;
            }
            last.count += 1;
            previous = text;
        }
        while let Some(node) = path.pop() {
            nodes[node as usize].end = nodes.len() as u32;
        }
        VocabTrie { nodes, sorted, texts: spans, bytes, markers }
    }

    pub fn markers(&self) -> Markers {
        self.markers
    }

    /// Ids below this have a known text.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Trie nodes (for the benchmark's report).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The state after token `id`, or `None` if it cannot continue the call.
    pub fn advance(&self, grammar: &CallGrammar, state: &CallState, id: u32) -> Option<CallState> {
        match self.texts.get(id as usize)? {
            Span::Bytes(start, len) => state.after_bytes(grammar, &self.bytes[*start as usize..(start + len) as usize]),
            Span::Delim => state.next(grammar, Symbol::Delim),
            Span::End => state.next(grammar, Symbol::End),
            Span::Other => None,
        }
    }

    /// Sets the bit of every token that keeps `state` alive in `words` (bit `id % 32` of word
    /// `id / 32`; `words` starts cleared and may be shorter than the vocabulary).
    pub fn allowed(&self, grammar: &CallGrammar, state: &CallState, words: &mut [u32]) {
        let mut set = |id: u32| {
            if let Some(word) = words.get_mut(id as usize / 32) {
                *word |= 1 << (id % 32);
            }
        };
        if state.next(grammar, Symbol::Delim).is_some() {
            set(self.markers.delim);
        }
        if state.next(grammar, Symbol::End).is_some() {
            set(self.markers.call_close);
        }
        // (end of the subtree, state after the path to it); the bottom entry is the root.
        let mut stack: Vec<(u32, CallState)> = vec![(self.nodes.len() as u32, *state)];
        let mut i = 0u32;
        while (i as usize) < self.nodes.len() {
            while stack.len() > 1 && stack.last().is_some_and(|&(end, _)| end <= i) {
                stack.pop();
            }
            let node = self.nodes[i as usize];
            let Some(&(_, parent)) = stack.last() else { break };
            match parent.next(grammar, Symbol::Byte(node.byte)) {
                None => i = node.end,
                Some(next) => {
                    for &id in &self.sorted[node.first as usize..(node.first + node.count) as usize] {
                        set(id);
                    }
                    stack.push((node.end, next));
                    i += 1;
                }
            }
        }
    }
}

/// The byte of a byte-fallback piece (`<0x0A>`).
fn byte_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constrain::grammar::tests::grammar;

    /// A toy vocabulary: ids 0–4 special, then pieces that make up calls in several ways.
    fn vocab() -> (VocabTrie, Vec<&'static str>) {
        let pieces = vec![
            "",
            "",
            "",
            "",
            "", // 0 <|tool_call>, 1 <tool_call|>, 2 <|"|>, 3 <|channel>, 4 <channel|>
            "call",
            ":",
            "click",
            "call:click{",
            "{",
            "}",
            "index",
            "index:",
            "1",
            "12",
            "0",
            "-",
            "x",
            "type",
            "text",
            ":<",
            "<turn|",
            ">",
            "hello",
            " ",
            "\u{e9}",
            "cl",
            "ick",
        ];
        let mut texts: Vec<TokenText> = pieces.iter().map(|p| TokenText::Bytes(p.as_bytes().to_vec())).collect();
        texts[0] = TokenText::Other;
        texts[1] = TokenText::End;
        texts[2] = TokenText::Delim;
        texts[3] = TokenText::Other;
        texts[4] = TokenText::Other;
        let markers = Markers { call_open: 0, call_close: 1, delim: 2, thought: Some((3, 4)) };
        (VocabTrie::new(texts, markers), pieces)
    }

    fn allowed(trie: &VocabTrie, state: &CallState) -> Vec<u32> {
        let g = grammar();
        let mut words = vec![0u32; trie.len().div_ceil(32)];
        trie.allowed(&g, state, &mut words);
        (0..trie.len() as u32).filter(|&id| words[id as usize / 32] & (1 << (id % 32)) != 0).collect()
    }

    /// The mask equals a token-by-token check of every id (the trie's pruning loses nothing).
    #[test]
    fn the_trie_search_equals_checking_every_token() {
        let g = grammar();
        let (trie, _) = vocab();
        let states = [
            b"".as_slice(),
            b"cal",
            b"call:",
            b"call:click{",
            b"call:click{index:",
            b"call:click{index:1",
            b"call:type{",
            b"call:type{index:0,text:",
        ];
        for prefix in states {
            let state = CallState::start().after_bytes(&g, prefix).unwrap();
            let brute: Vec<u32> = (0..trie.len() as u32).filter(|&id| trie.advance(&g, &state, id).is_some()).collect();
            assert_eq!(allowed(&trie, &state), brute, "after {}", String::from_utf8_lossy(prefix));
        }
    }

    #[test]
    fn masks_follow_the_call() {
        let g = grammar();
        let (trie, pieces) = vocab();
        let names = |ids: Vec<u32>| ids.into_iter().map(|id| pieces[id as usize]).collect::<Vec<_>>();
        assert_eq!(names(allowed(&trie, &CallState::start())), ["call", "call:click{"]);
        let state = CallState::start().after_bytes(&g, b"call:click{index:").unwrap();
        assert_eq!(names(allowed(&trie, &state)), ["1", "12", "0"]);
        let state = state.after_bytes(&g, b"12").unwrap();
        assert_eq!(names(allowed(&trie, &state)), ["}", "1", "12", "0"]);
        let closed = state.after_bytes(&g, b"}").unwrap();
        assert_eq!(allowed(&trie, &closed), [1], "only <tool_call|> after the object");
        // Inside a string: text, but not a piece that completes a turn marker.
        let text = CallState::start().after_bytes(&g, b"call:type{index:0,text:").unwrap();
        let text = text.next(&g, Symbol::Delim).unwrap().after_bytes(&g, b"<turn|").unwrap();
        assert!(!names(allowed(&trie, &text)).contains(&">"));
        assert!(names(allowed(&trie, &text)).contains(&"x"));
    }

    #[test]
    fn byte_pieces_are_read() {
        assert_eq!(byte_piece("<0x0A>"), Some(10));
        assert_eq!(byte_piece("<0xe9>"), Some(0xE9));
        assert_eq!(byte_piece("<eos>"), None);
        assert_eq!(byte_piece("<0x1>"), None);
    }
}
