//! A generation session: the model plus a KV cache that lives across calls. When a new prompt
//! extends what the cache holds, only the new suffix is computed; when it diverges, the cache is
//! rewound where that is exact and recomputed otherwise.
//!
//! Several conversations (one per tab) each keep their own cache, as many as the memory budget
//! allows; beyond that the one unused longest gives its cache up.

use burn::tensor::Tensor;

use crate::cache::{CacheOptions, KvCache};
use crate::error::ModelError;
use crate::gemma::Gemma;

pub struct Session {
    model: Gemma,
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order.
    tokens: Vec<u32>,
    options: CacheOptions,
    /// The conversation `cache` belongs to.
    conversation: u64,
    /// Other conversations' caches, the least recently used first.
    parked: Vec<(u64, KvCache, Vec<u32>)>,
    max_caches: usize,
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
    /// A session with one cache (conversations take turns with it).
    pub fn new(model: Gemma, options: CacheOptions) -> Self {
        Self::with_caches(model, options, 1)
    }

    /// A session that keeps up to `max_caches` conversations' caches (allocated as they come).
    pub fn with_caches(model: Gemma, options: CacheOptions, max_caches: usize) -> Self {
        let cache = KvCache::new(&model.config, options, model.device());
        Session {
            model,
            cache,
            tokens: Vec::new(),
            options,
            conversation: 0,
            parked: Vec::new(),
            max_caches: max_caches.max(1),
        }
    }

    /// Positions each conversation's cache holds.
    pub fn context_tokens(&self) -> usize {
        self.cache.capacity()
    }

    /// Makes `conversation`'s cache the one the next calls use: its own when it still has one;
    /// else a new one while the budget allows; else the one unused longest, emptied.
    pub fn use_conversation(&mut self, conversation: u64) {
        if conversation == self.conversation {
            return;
        }
        let (cache, tokens) = if let Some(i) = self.parked.iter().position(|(id, ..)| *id == conversation) {
            let (_, cache, tokens) = self.parked.remove(i);
            (cache, tokens)
        } else if self.parked.len() + 1 < self.max_caches {
            (KvCache::new(&self.model.config, self.options, self.model.device()), Vec::new())
        } else if !self.parked.is_empty() {
            let (_, mut cache, _) = self.parked.remove(0);
            cache.clear();
            (cache, Vec::new())
        } else {
            // One cache: the new conversation takes it over.
            self.cache.clear();
            self.tokens.clear();
            self.conversation = conversation;
            return;
        };
        let previous = std::mem::replace(&mut self.cache, cache);
        let previous_tokens = std::mem::replace(&mut self.tokens, tokens);
        self.parked.push((self.conversation, previous, previous_tokens));
        self.conversation = conversation;
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
        let keep = self.cache.rewind(common.min(prompt.len() - 1));
        self.tokens.truncate(keep);
        let logits = self.run(&prompt[keep..])?;
        // The answer decoded next may be longer than the rings can rewind; the next prompt will
        // diverge from it (re-rendered, or without its thoughts), so keep a way back to here.
        self.cache.checkpoint();
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
            Err(ModelError::Recording(_)) => {
                // The failed recording took the cache's buffers with it, and the model no longer
                // records: recompute the conversation so far in a new cache, then this step. The
                // checkpoints are taken again where they were, so a later prompt still rewinds to
                // them instead of starting over.
                let marks = self.cache.checkpoint_lens();
                self.cache = KvCache::new(&self.model.config, self.options, self.model.device());
                let mut all = std::mem::take(&mut self.tokens);
                all.extend_from_slice(tokens);
                let mut done = 0;
                for mark in marks.into_iter().filter(|&m| m < all.len()) {
                    if mark > done {
                        drop(self.model.forward(&all[done..mark], &mut self.cache, false)?);
                        done = mark;
                    }
                    self.cache.checkpoint();
                }
                let logits = self.model.forward(&all[done..], &mut self.cache, false)?;
                self.tokens = all;
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
