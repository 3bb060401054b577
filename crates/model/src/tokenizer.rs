//! The model's own `tokenizer.json`, through the `tokenizers` crate, and streaming detokenisation.

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer.json could not be loaded: {0}")]
    Load(String),
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

    /// Token ids of `text`, special-token markup (`<bos>`, `<|turn>`…) included, without adding any.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self.inner.encode(text, false).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens written out (the agent parses them).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, false).map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
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
