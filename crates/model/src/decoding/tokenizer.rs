//! The model's own `tokenizer.json` (or the tokenizer a GGUF file describes in its metadata),
//! through the `tokenizers` crate, and streaming detokenisation.

use std::collections::HashMap;

use hearth_weights::{GgufFile, MetadataValue};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer.json could not be loaded: {0}")]
    Load(String),
    #[error("the GGUF file's tokenizer cannot be built: {0}. Pass a tokenizer.json with --tokenizer")]
    Gguf(String),
    #[error("tokenizing failed: {0}")]
    Encode(String),
    #[error("detokenizing failed: {0}")]
    Decode(String),
}

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TokenizerError> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizerError::Load(e.to_string()))?;
        Ok(Tokenizer { inner })
    }

    /// The tokenizer a GGUF file's metadata describes (`tokenizer.ggml.*`), built the way
    /// transformers builds it for `from_pretrained(…, gguf_file=…)`, so both give the same ids.
    ///
    /// Gemma's SentencePiece model is a BPE with byte fallback, but a GGUF stores only its pieces,
    /// scores and piece types, not the merges. The merges are rebuilt from the vocabulary: every
    /// split of a piece into two pieces is a merge, ranked by the piece's position in the vocabulary
    /// (Gemma 1–3; Gemma's scores do not follow its merge order, its piece order does) or by score
    /// (other files), longer left parts first. Runs of spaces, which the file spells as spaces, are
    /// respelled with `▁` as in `tokenizer.json`. Control pieces (`<bos>`, `<start_of_turn>`…)
    /// become special tokens and user-defined ones plain added tokens, both matched whole; with a
    /// file's own merges (Gemma 4), so do the pieces no merge builds. The normalizer,
    /// pre-tokenizer and decoder are `GemmaTokenizer`'s.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        let fail = |message: String| TokenizerError::Gguf(message);
        let model = file.get("tokenizer.ggml.model").and_then(MetadataValue::as_str).unwrap_or("none");
        let arch = file.architecture().unwrap_or("none");
        let gemma_sentencepiece = model == "llama" && matches!(arch, "gemma" | "gemma2" | "gemma3");
        if !gemma_sentencepiece && model != "gemma4" {
            return Err(fail(format!("tokenizer model `{model}` of architecture `{arch}` is not supported")));
        }
        let strings = |key: &str| -> Result<Option<Vec<String>>, TokenizerError> {
            let Some(value) = file.get(key) else { return Ok(None) };
            let items = value.as_array().ok_or_else(|| fail(format!("{key} is not an array")))?;
            let strings = items.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<Vec<_>>>();
            strings.map(Some).ok_or_else(|| fail(format!("{key} is not an array of strings")))
        };
        let numbers = |key: &str, len: usize| -> Result<Option<Vec<f64>>, TokenizerError> {
            let Some(value) = file.get(key) else { return Ok(None) };
            let items = value.as_array().ok_or_else(|| fail(format!("{key} is not an array")))?;
            let numbers = items.iter().map(MetadataValue::as_f64).collect::<Option<Vec<_>>>();
            match numbers {
                Some(n) if n.len() == len => Ok(Some(n)),
                _ => Err(fail(format!("{key} is not {len} numbers"))),
            }
        };
        let mut tokens = strings("tokenizer.ggml.tokens")?.ok_or_else(|| fail("no tokenizer.ggml.tokens".into()))?;
        let types = numbers("tokenizer.ggml.token_type", tokens.len())?.unwrap_or_default();
        let raw_tokens = tokens.clone();
        if gemma_sentencepiece {
            for token in &mut tokens {
                if token.contains(' ') && token.chars().all(python_space) {
                    *token = "\u{2581}".repeat(token.chars().count());
                }
            }
        }
        // A later duplicate wins, as in a Python dict.
        let vocab: HashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let file_merges = strings("tokenizer.ggml.merges")?
            .map(|merges| {
                merges
                    .iter()
                    .map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| fail("a merge is not two pieces".into()))
            })
            .transpose()?;
        // Pieces no merge builds: BPE never emits them from text, so the tokenizer the file was
        // converted from had them as added tokens (llama.cpp's converter types only the named
        // special tokens as control, leaving Gemma 4's `<|turn>`, `<turn|>`… normal).
        let unreachable: Vec<String> = match &file_merges {
            Some(merges) => {
                let built: std::collections::HashSet<String> = merges.iter().map(|(a, b)| format!("{a}{b}")).collect();
                raw_tokens
                    .iter()
                    .zip(types.iter().chain(std::iter::repeat(&1.0)))
                    .filter(|(t, kind)| **kind == 1.0 && t.chars().nth(1).is_some() && !built.contains(*t))
                    .map(|(t, _)| t.clone())
                    .collect()
            }
            None => Vec::new(),
        };
        let merges = match file_merges {
            Some(merges) => merges,
            None if gemma_sentencepiece => merges_in_piece_order(&tokens, &vocab),
            None => {
                let scores = numbers("tokenizer.ggml.scores", tokens.len())?
                    .ok_or_else(|| fail("neither merges nor scores".into()))?;
                derive_merges(&tokens, &vocab, |i| scores[i])
            }
        };
        let id = |key: &str| file.get(key).and_then(MetadataValue::as_usize).and_then(|i| raw_tokens.get(i));
        let unk = id("tokenizer.ggml.unknown_token_id").cloned().unwrap_or_else(|| "<unk>".to_string());
        let bpe = BPE::builder()
            .vocab_and_merges(vocab.iter().map(|(t, &i)| (t.clone(), i)).collect::<Vocab>(), merges)
            .unk_token(unk)
            .fuse_unk(true)
            .byte_fallback(true)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let space = Replace::new(" ", "\u{2581}").map_err(|e| fail(e.to_string()))?;
        inner.with_normalizer(Some(space)).map_err(|e| fail(e.to_string()))?;
        let split = Split::new(SplitPattern::String(" ".into()), SplitDelimiterBehavior::MergedWithPrevious, false)
            .map_err(|e| fail(e.to_string()))?;
        inner.with_pre_tokenizer(Some(split));
        let unspace = Replace::new("\u{2581}", " ").map_err(|e| fail(e.to_string()))?;
        let decoders: Vec<DecoderWrapper> = vec![unspace.into(), ByteFallback::new().into(), Fuse::new().into()];
        inner.with_decoder(Some(Sequence::new(decoders)));
        // Piece types: 3 control, 4 user-defined (SentencePiece's numbering, as llama.cpp writes it).
        let of_type = |kind: f64| raw_tokens.iter().zip(&types).filter(move |(_, t)| **t == kind).map(|(s, _)| s);
        let control: Vec<AddedToken> = of_type(3.0).map(|s| AddedToken::from(s.clone(), true)).collect();
        inner.add_special_tokens(control).map_err(|e| fail(e.to_string()))?;
        // Only those the vocabulary spells the same (not the respelled runs of spaces).
        let user: Vec<AddedToken> = of_type(4.0)
            .filter(|s| vocab.contains_key(*s))
            .chain(unreachable.iter())
            .map(|s| AddedToken::from(s.clone(), false).normalized(false))
            .collect();
        inner.add_tokens(user).map_err(|e| fail(e.to_string()))?;
        Ok(Tokenizer { inner })
    }

    /// Token ids of `text`, special-token markup (`<bos>`, `<|turn>`…) included, without adding any.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self.inner.encode(text, false).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens written out (the agent parses them).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, false).map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Every token matched whole in plain text (special and added tokens: `<eos>`, `<|turn>`,
    /// `<unused7>`…): the list page text is neutralized by, so that it can never produce one.
    pub fn added_tokens(&self) -> Vec<String> {
        let mut tokens: Vec<String> =
            self.inner.get_added_tokens_decoder().into_iter().map(|(_, t)| t.content).collect();
        tokens.sort();
        tokens
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// One past the largest token id (added tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab(true).into_values().max().map_or(0, |id| id as usize + 1)
    }

    /// The vocabulary's piece for `id` as stored (`▁the`, `<0x0A>`, `<eos>`).
    pub fn piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Ids of the tokens matched whole in text (see [`Self::added_tokens`]).
    pub fn added_token_ids(&self) -> Vec<u32> {
        self.inner.get_added_tokens_decoder().into_keys().collect()
    }
}

/// Python's `str.isspace` for one character (Rust's `is_whitespace` plus the separators
/// U+001C–U+001F).
fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// [`derive_merges`] when the score is the piece's position (higher for earlier pieces), without
/// the sort: candidates then come piece by piece in vocabulary order, and within a piece longest
/// left part first, which is exactly the order the sort would give.
fn merges_in_piece_order(tokens: &[String], vocab: &HashMap<String, u32>) -> Vec<(String, String)> {
    let mut merges = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        if vocab.get(token) != Some(&(index as u32)) {
            continue; // an earlier duplicate: the dict kept the later one
        }
        for (split, _) in token.char_indices().skip(1).collect::<Vec<_>>().into_iter().rev() {
            let (left, right) = token.split_at(split);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                merges.push((left.to_string(), right.to_string()));
            }
        }
    }
    merges
}

/// BPE merges implied by a vocabulary, as transformers' `generate_merges`: every split of a piece
/// into two pieces of the vocabulary, ordered by the piece's score (highest first), then by the
/// left part's length and the right part's length (longest first); ties keep vocabulary order.
fn derive_merges(
    tokens: &[String],
    vocab: &HashMap<String, u32>,
    score: impl Fn(usize) -> f64,
) -> Vec<(String, String)> {
    struct Candidate<'a> {
        score: f64,
        left_chars: usize,
        right_chars: usize,
        index: usize,
        ids: (u32, u32),
        left: &'a str,
        right: &'a str,
    }
    let mut candidates = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        if vocab.get(token) != Some(&(index as u32)) {
            continue; // an earlier duplicate: the dict kept the later one
        }
        let chars = token.chars().count();
        for (left_chars, (split, _)) in token.char_indices().enumerate().skip(1) {
            let (left, right) = token.split_at(split);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                let right_chars = chars - left_chars;
                candidates.push(Candidate {
                    score: score(index),
                    left_chars,
                    right_chars,
                    index,
                    ids: (l, r),
                    left,
                    right,
                });
            }
        }
    }
    candidates.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
            .then(a.index.cmp(&b.index))
            .then(a.ids.cmp(&b.ids))
    });
    candidates.into_iter().map(|c| (c.left.to_string(), c.right.to_string())).collect()
}

/// Turns a stream of token ids into a stream of text, holding back bytes that do not yet form a
/// whole character (byte-fallback tokens split UTF-8 sequences).
#[derive(Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the ids still being decoded (earlier ones are final).
    prefix: usize,
    /// Bytes of `decode(ids[prefix..])` already emitted.
    emitted: usize,
}

impl StreamDecoder {
    /// Adds `id` and returns the text that became final, if any.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        let text = tokenizer.decode(&self.ids[self.prefix..])?;
        if text.ends_with('\u{FFFD}') || text.len() < self.emitted {
            return Ok(String::new());
        }
        let new = text[self.emitted..].to_string();
        // Keep a few tokens of context (decoders may merge spaces across tokens), drop the rest.
        if self.ids.len() - self.prefix > 8 {
            self.prefix = self.ids.len() - 4;
            self.emitted = tokenizer.decode(&self.ids[self.prefix..])?.len();
        } else {
            self.emitted = text.len();
        }
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_order_merges_equal_the_sorted_derivation() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc", "▁", "▁a", "▁ab", "b", "ca", "abca", "é", "éa"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let vocab: HashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let sorted = derive_merges(&tokens, &vocab, |i| -(i as f64));
        assert!(sorted.len() > 8, "{sorted:?}");
        assert_eq!(merges_in_piece_order(&tokens, &vocab), sorted);
    }
}
