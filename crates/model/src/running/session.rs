//! A generation session: the model plus a KV cache that lives across calls. When a new prompt
//! extends what the cache holds, only the new suffix is computed; when it diverges, the cache is
//! rewound where that is exact and recomputed otherwise.
//!
//! Several conversations (one per tab) each keep their own cache, as many as the memory budget
//! allows; beyond that the one unused longest gives its cache up.

use burn::tensor::{Int, Tensor};

use crate::cache::{CacheOptions, KvCache};
use crate::error::ModelError;
use crate::gemma::{Forwarded, Gemma, Input, Output, SoftTokens};
use crate::media::PromptMedia;

/// A held token appended on the device whose id is not read back yet (no vocabulary has it).
const UNREAD: u32 = u32::MAX;

pub struct Session {
    model: Gemma,
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order, and the images among them.
    held: Held,
    options: CacheOptions,
    /// The conversation `cache` belongs to.
    conversation: u64,
    /// Other conversations' caches, the least recently used first.
    parked: Vec<(u64, KvCache, Held)>,
    max_caches: usize,
}

/// A cache's tokens and the images and clips among them.
#[derive(Clone, Default)]
struct Held {
    tokens: Vec<u32>,
    images: PromptMedia,
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
            held: Held::default(),
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
        let (cache, held) = if let Some(i) = self.parked.iter().position(|(id, ..)| *id == conversation) {
            let (_, cache, held) = self.parked.remove(i);
            (cache, held)
        } else if self.parked.len() + 1 < self.max_caches {
            (KvCache::new(&self.model.config, self.options, self.model.device()), Held::default())
        } else if !self.parked.is_empty() {
            let (_, mut cache, _) = self.parked.remove(0);
            cache.clear();
            (cache, Held::default())
        } else {
            // One cache: the new conversation takes it over.
            self.cache.clear();
            self.held = Held::default();
            self.conversation = conversation;
            return;
        };
        let previous = std::mem::replace(&mut self.cache, cache);
        let previous_held = std::mem::replace(&mut self.held, held);
        self.parked.push((self.conversation, previous, previous_held));
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
        &self.held.tokens
    }

    /// Makes the cache hold `prompt` and returns the logits for the token after it: [1, vocab].
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<(Tensor<2>, PrefillStats), ModelError> {
        self.prefill_with(prompt, &PromptMedia::default())
    }

    /// [`Self::prefill`] for a prompt holding images: each run of placeholders takes its image's
    /// soft tokens. A cached prefix is reused only as far as its images are the same (by key).
    pub fn prefill_with(
        &mut self,
        prompt: &[u32],
        images: &PromptMedia,
    ) -> Result<(Tensor<2>, PrefillStats), ModelError> {
        let (logits, _, stats) = self.prefill_inner(prompt, images, false)?;
        Ok((logits, stats))
    }

    /// [`Self::prefill_with`] for a generation that drafts: also the hidden state of the prompt's
    /// last position `[1, h]`, which the drafter's first step reads.
    pub fn prefill_hidden(
        &mut self,
        prompt: &[u32],
        images: &PromptMedia,
    ) -> Result<(Tensor<2>, Tensor<2>, PrefillStats), ModelError> {
        let (logits, hidden, stats) = self.prefill_inner(prompt, images, true)?;
        let hidden = hidden.ok_or(ModelError::EmptyPrompt)?;
        Ok((logits, hidden, stats))
    }

    fn prefill_inner(
        &mut self,
        prompt: &[u32],
        images: &PromptMedia,
        with_hidden: bool,
    ) -> Result<(Tensor<2>, Option<Tensor<2>>, PrefillStats), ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let held = &self.held;
        let mut common = held.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        // The same tokens hold different pictures when an image differs: the prefix ends at the
        // first image run that is not the same image in both.
        let (before, now) = (&held.images, images);
        for index in 0..before.items.len().max(now.items.len()) {
            let key = |list: &PromptMedia| list.items.get(index).map(|i| (i.placeholder, i.key));
            if key(before) != key(now) {
                let start = [before.run_start(&held.tokens, index), now.run_start(prompt, index)];
                common = start.into_iter().flatten().fold(common, usize::min);
                break;
            }
        }
        // The last prompt token is always recomputed: its logits are the answer.
        let keep = self.cache.rewind(common.min(prompt.len() - 1));
        self.held.tokens.truncate(keep);
        self.held.images = images.clone();
        let soft = images.soft_tokens(prompt, keep..prompt.len());
        let (logits, hidden) = if with_hidden {
            let tokens = &prompt[keep..];
            match self.model.forward(Input::with_images(tokens, soft.as_ref()), &mut self.cache, Output::LastWithHidden)
            {
                Ok(Forwarded { logits, hidden }) => {
                    self.held.tokens.extend_from_slice(tokens);
                    (logits, hidden)
                }
                Err(err) => return Err(self.forget(err)),
            }
        } else {
            (self.run(&prompt[keep..], soft)?, None)
        };
        // The answer decoded next may be longer than the rings can rewind; the next prompt will
        // diverge from it (re-rendered, or without its thoughts), so keep a way back to here.
        self.cache.checkpoint();
        Ok((logits, hidden, PrefillStats { reused: keep, computed: prompt.len() - keep }))
    }

    /// Runs `tokens` (a decoded token and the drafts after it) after those the cache holds:
    /// logits and hidden states at every position, `([S, vocab], [S, h])`.
    pub fn verify(&mut self, tokens: &[u32]) -> Result<(Tensor<2>, Tensor<2>), ModelError> {
        match self.model.forward(Input::ids(tokens), &mut self.cache, Output::AllWithHidden) {
            Ok(forwarded) => {
                self.held.tokens.extend_from_slice(tokens);
                Ok(forwarded.into_parts())
            }
            Err(err) => Err(self.forget(err)),
        }
    }

    /// Keeps the first `n` positions: after a verification, the accepted ones. Exact only while
    /// the rings still hold the window before `n` (a verification shorter than
    /// [`Self::max_verify`] leaves it there); otherwise the cache is cleared and an error returned.
    pub fn truncate(&mut self, n: usize) -> Result<(), ModelError> {
        if self.cache.truncate(n) {
            self.held.tokens.truncate(n);
            return Ok(());
        }
        let held = self.cache.len();
        Err(self.forget(ModelError::Rewind { held, wanted: n }))
    }

    /// The most tokens one verification may run and still be rewound to any of its positions,
    /// with the window a drafter reads (one position more than the model's) still held.
    pub fn max_verify(&self) -> usize {
        self.cache.max_chunk().saturating_sub(1).max(1)
    }

    /// The cache, for a drafter to read.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// After a failed step the cache is in an unknown state: start over next time.
    fn forget(&mut self, err: ModelError) -> ModelError {
        self.cache.clear();
        self.held = Held::default();
        err
    }

    /// Appends one token and returns the logits for the next: [1, vocab]. A decoded token is
    /// never an image's: a placeholder the model writes is embedded as the token it is.
    pub fn step(&mut self, token: u32) -> Result<Tensor<2>, ModelError> {
        self.run(&[token], None)
    }

    /// Runs `tokens` after those the cache holds, `soft` in place of their placeholders.
    fn run(&mut self, tokens: &[u32], soft: Option<SoftTokens>) -> Result<Tensor<2>, ModelError> {
        match self.model.forward(Input::with_images(tokens, soft.as_ref()), &mut self.cache, Output::Last) {
            Ok(Forwarded { logits, .. }) => {
                self.held.tokens.extend_from_slice(tokens);
                Ok(logits)
            }
            Err(err) => Err(self.forget(err)),
        }
    }

    /// Whether [`Self::step_chosen`] can append the next token without its id read back: the
    /// model looks tokens up on the device, and the context has room for one more.
    pub fn steps_on_device(&self) -> bool {
        self.model.steps_on_device() && self.cache.len() < self.cache.capacity()
    }

    /// Appends the token `chosen` (`[1, 1]`, chosen on the device from the last logits and not
    /// read back yet) and returns the logits after it `[1, vocab]`; [`Self::settle`] names the
    /// token once it is read.
    pub fn step_chosen(&mut self, chosen: &Tensor<2, Int>) -> Result<Tensor<2>, ModelError> {
        match self.model.forward(Input::Chosen(chosen), &mut self.cache, Output::Last) {
            Ok(Forwarded { logits, .. }) => {
                self.held.tokens.push(UNREAD);
                Ok(logits)
            }
            Err(err) => Err(self.forget(err)),
        }
    }

    /// Names the token the last [`Self::step_chosen`] appended, now read back. (Until then the
    /// held tokens end in one no prompt matches: a prompt that comes first recomputes it.)
    pub fn settle(&mut self, id: u32) {
        if let Some(last) = self.held.tokens.last_mut().filter(|t| **t == UNREAD) {
            *last = id;
        }
    }
}
