//! A generation session: the model plus a KV cache that lives across calls. When a new prompt
//! extends what the cache holds, only the new suffix is computed; when it diverges, the cache is
//! rewound where that is exact and recomputed otherwise.

use burn::tensor::Tensor;

use crate::cache::{CacheOptions, KvCache};
use crate::gemma::{Gemma, ModelError};

pub struct Session {
    model: Gemma,
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order.
    tokens: Vec<u32>,
}

/// What a prefill cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillStats {
    /// Prompt tokens whose cached state was reused.
    pub reused: usize,
    /// Prompt tokens run through the model.
    pub computed: usize,
}

impl Session {
    pub fn new(model: Gemma, options: CacheOptions) -> Self {
        let cache = KvCache::new(&model.config, options, model.device());
        Session { model, cache, tokens: Vec::new() }
    }

    /// The model back, its cache dropped.
    pub fn into_model(self) -> Gemma {
        self.model
    }

    pub fn model(&self) -> &Gemma {
        &self.model
    }

    /// The tokens the cache holds.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Makes the cache hold `prompt` and returns the logits for the token after it: [1, vocab].
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<(Tensor<2>, PrefillStats), ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let common = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        // The last prompt token is always recomputed: its logits are the answer.
        let mut keep = common.min(prompt.len() - 1);
        if !self.cache.truncate(keep) {
            self.cache.clear();
            keep = 0;
        }
        self.tokens.truncate(keep);
        let logits = self.run(&prompt[keep..])?;
        Ok((logits, PrefillStats { reused: keep, computed: prompt.len() - keep }))
    }

    /// Appends one token and returns the logits for the next: [1, vocab].
    pub fn step(&mut self, token: u32) -> Result<Tensor<2>, ModelError> {
        self.run(&[token])
    }

    fn run(&mut self, tokens: &[u32]) -> Result<Tensor<2>, ModelError> {
        match self.model.forward(tokens, &mut self.cache, false) {
            Ok(logits) => {
                self.tokens.extend_from_slice(tokens);
                Ok(logits)
            }
            Err(err) => {
                // A failed step leaves the cache in an unknown state: start over next time.
                self.cache.clear();
                self.tokens.clear();
                Err(err)
            }
        }
    }
}
