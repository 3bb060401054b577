//! The loaded model as chat replies and agent tasks share it.

use std::rc::Rc;

use futures::lock::Mutex;
use hearth_chat::ChatTemplate;
use hearth_model::audio::AudioTower;
use hearth_model::drafter::Drafter;
use hearth_model::tokenizer::Tokenizer;
use hearth_model::vision::VisionTower;
use hearth_model::{CacheOptions, Gemma, Session};

use crate::images::{EncodedImages, Towers};

use crate::parts::ModelParts;

/// The loaded model: cheap to clone, single-threaded (the browser runs it on one thread).
#[derive(Clone)]
pub struct SharedModel {
    /// Locked for a whole generation: requests from several conversations queue here.
    pub session: Rc<Mutex<Session>>,
    pub tokenizer: Rc<Tokenizer>,
    pub template: Rc<ChatTemplate>,
    pub stop_tokens: Rc<[u32]>,
    /// The BOS token a raw prompt is given.
    pub bos_token_id: u32,
    /// Positions the KV cache holds: the agent's context budget derives from it.
    pub context_tokens: usize,
    /// A monotonic clock in milliseconds, for the generation's timings.
    pub clock_ms: fn() -> f64,
    /// The vision tower, when the model's files carry one: screenshots are offered then.
    pub vision: Option<Rc<VisionTower>>,
    /// The audio tower, when the model's files carry one: spoken requests are taken then.
    pub audio: Option<Rc<AudioTower>>,
    /// Screenshots encoded already (a task's prompts show the same ones step after step).
    pub encoded: Rc<std::cell::RefCell<EncodedImages>>,
    /// The model's assistant, when installed: generations draft with it (speculative decoding).
    pub drafter: Option<Rc<Drafter>>,
}

impl SharedModel {
    /// `model` with its parts, a KV cache of `cache` per conversation and at most `caches` of
    /// them kept at once.
    pub fn new(model: Gemma, parts: ModelParts, cache: CacheOptions, caches: usize, clock_ms: fn() -> f64) -> Self {
        let ModelParts { config, tokenizer, template } = parts;
        SharedModel {
            session: Rc::new(Mutex::new(Session::with_caches(model, cache, caches))),
            tokenizer: Rc::new(tokenizer),
            template: Rc::new(template),
            bos_token_id: config.bos_token_id,
            stop_tokens: config.eos_token_ids.into(),
            context_tokens: cache.max_context,
            clock_ms,
            vision: None,
            audio: None,
            encoded: Rc::default(),
            drafter: None,
        }
    }

    /// The model with its assistant: its generations draft (when their settings let them).
    pub fn with_drafter(mut self, drafter: Option<Drafter>) -> Self {
        self.drafter = drafter.map(Rc::new);
        self
    }

    /// The model with its vision tower: it sees the screenshots its tasks take.
    pub fn with_vision(mut self, tower: Option<VisionTower>) -> Self {
        self.vision = tower.map(Rc::new);
        self
    }

    /// The towers the prompts' images and clips go through.
    pub fn towers(&self) -> Towers<'_> {
        Towers { vision: self.vision.as_deref(), audio: self.audio.as_deref() }
    }

    /// The model with its audio tower: it hears the requests spoken to it.
    pub fn with_audio(mut self, tower: Option<AudioTower>) -> Self {
        self.audio = tower.map(Rc::new);
        self
    }
}

/// Milliseconds since the first call, from the system's monotonic clock (native builds; the
/// browser passes `performance.now`).
#[cfg(not(target_arch = "wasm32"))]
pub fn monotonic_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
}
