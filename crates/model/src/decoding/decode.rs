//! What every decode loop shares (plain, constrained and drafting: [`crate::generate`] and
//! [`crate::speculative`]): the options, the result and its error, the constraint a loop holds
//! its tokens to ([`TokenConstraint`]: the engine's tool-call grammar; the model knows no call
//! syntax), choosing a token on the device under it and reading it back; and the plain loop's
//! step, [`Decoder`].
//!
//! Token after token with the readback a step behind. A token's id is read back only for the
//! host's needs (streaming its text, stop ids, the tool-call constraint); the next step does not
//! wait for it: the chosen id stays on the device, the step that appends it is submitted, and
//! only then is the id read. So the GPU has the next step queued when it finishes a token, and
//! the host's work for a token (recording replay, sampling launches, the readback's wait)
//! overlaps the GPU's.
//!
//! ```text
//! sync:   [step t]→read t→[step t+1]→read t+1 …      (the GPU idles while the host works)
//! lagged: read t ⟂ [step t][choose t+1] → read t+1 ⟂ [step t+1][choose t+2] …
//! ```
//!
//! What the lag changes, and how each is put right:
//! - A stop id is known one step late: the step that appended it has run (at the token limit the
//!   caller asks for no step after the last token).
//!   The session's held tokens name it ([`Session::settle`]), so the next prompt reuses it where
//!   it matches and rewinds where it does not; the token is never streamed.
//! - The tool-call constraint decides the next token's mask from this token: the next token is
//!   chosen before this one is read only while no call is open, and chosen again (from the same
//!   logits, the sampler's draw taken back) when this token opens one. Inside a call each
//!   choice waits for the read (the mask is the host's), the steps still do not.
//! - A recording that fails on the device while appending an unread id: the session rebuilds
//!   its cache without it, and the id is read and appended the synchronous way.
//!
//! Greedy tokens, and seeded samples, are the same as with each id read before the next step.

use burn::tensor::{Int, Tensor};
use hearth_kernels::{mask_logits, read_ids_now};

use crate::drafter::DrafterError;
use crate::drafting::{Speculation, SpeculationStats};
use crate::error::ModelError;
use crate::media::PromptMedia;
use crate::sampling::{SampleError, Sampler};
use crate::session::Session;
use crate::tokenizer::TokenizerError;

/// What a decode loop holds its tokens to, token by token: which tokens may come next (a bitset
/// the logits are masked with on the device), followed as tokens are read back, and rewound when
/// drafted tokens are rejected. The engine's tool-call grammar is one; the loops need nothing
/// else of it.
pub trait TokenConstraint {
    /// Starts a generation after `prompt` (read for where it leaves the constraint).
    fn begin(&mut self, prompt: &[u32]);
    /// Whether the next token is constrained (then it is chosen only once this one is read).
    fn constrains_next(&self) -> bool;
    /// The allowed next tokens as a bitset of `vocab.div_ceil(32)` words, or `None` when the next
    /// token is free.
    fn mask(&mut self, vocab: usize) -> Option<&[u32]>;
    /// Follows the generated token `id`.
    fn advance(&mut self, id: u32);
    /// Where the constraint is now, to come back to ([`Self::reset`]).
    fn mark(&self) -> ConstraintMark;
    /// Goes back to a [`Self::mark`] of this constraint.
    fn reset(&mut self, mark: &ConstraintMark);

    /// Whether `id` may come next.
    fn allows(&mut self, vocab: usize, id: u32) -> bool {
        let (word, bit) = (id as usize / 32, id % 32);
        self.mask(vocab).is_none_or(|mask| mask.get(word).is_some_and(|w| w >> bit & 1 == 1))
    }
}

/// A point in a generation a [`TokenConstraint`] can go back to: its own state, opaque to the
/// loops.
pub struct ConstraintMark(Box<dyn std::any::Any + Send>);

impl ConstraintMark {
    pub fn new<T: std::any::Any + Send>(state: T) -> Self {
        ConstraintMark(Box::new(state))
    }

    /// The state, when it is a `T` (a constraint reads back its own marks).
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Sample(#[from] SampleError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the drafter failed: {0}")]
    Drafter(#[from] DrafterError),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Generated ids, without the end-of-turn token.
    pub token_ids: Vec<u32>,
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens actually computed (the rest came from the session's cache).
    pub prefilled_tokens: usize,
    /// Milliseconds from the start to the first sampled token.
    pub prefill_ms: f64,
    /// Milliseconds for the remaining tokens.
    pub decode_ms: f64,
    /// Of `decode_ms`, the host's, per decoded token: building the token's step and its sampling
    /// on the device (Burn's operations, the kernels' launches), without the waits for the GPU.
    /// Empty when drafting (a round's host time covers several tokens).
    pub decode_host_ms: Vec<f64>,
    /// What drafting did, when the generation drafted.
    pub speculation: Option<SpeculationStats>,
}

impl Generation {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        per_second(self.prefilled_tokens, self.prefill_ms)
    }

    /// Tokens after the first (which the prefill produced) per second of decoding.
    pub fn decode_tokens_per_s(&self) -> f64 {
        per_second(self.token_ids.len().saturating_sub(1), self.decode_ms)
    }

    /// The host's milliseconds per decoded token: the median of the tokens after the first, whose
    /// step also creates the one-token kernels' pipelines and buffers (that one alone when it is
    /// the only one; 0 when none was decoded).
    pub fn decode_host_ms_per_token(&self) -> f64 {
        let mut later = match self.decode_host_ms.as_slice() {
            [] => return 0.0,
            [only] => return *only,
            [_, later @ ..] => later.to_vec(),
        };
        later.sort_by(f64::total_cmp);
        let middle = later.len() / 2;
        if later.len() % 2 == 1 { later[middle] } else { (later[middle - 1] + later[middle]) / 2.0 }
    }

    /// The host's milliseconds for the first decoded token (0 when none was decoded).
    pub fn first_decode_host_ms(&self) -> f64 {
        self.decode_host_ms.first().copied().unwrap_or(0.0)
    }
}

/// Chooses the next token on the device, among those that keep a tool call valid while one is
/// open; [`read`] reads it back.
pub(crate) fn choose(
    sampler: &mut Sampler,
    logits: Tensor<2>,
    calls: Option<&mut (dyn TokenConstraint + '_)>,
) -> Tensor<2, Int> {
    sampler.choose(constrain(logits, calls))
}

/// `logits` ([1, vocab]) without the tokens an open tool call forbids.
pub(crate) fn constrain(logits: Tensor<2>, calls: Option<&mut (dyn TokenConstraint + '_)>) -> Tensor<2> {
    let Some(calls) = calls else { return logits };
    let vocab = logits.dims()[1];
    match calls.mask(vocab) {
        Some(words) => mask_logits(logits, words),
        None => logits,
    }
}

/// The chosen token, read back; an open tool call advances by it.
pub(crate) async fn read(
    choice: Tensor<2, Int>,
    calls: Option<&mut (dyn TokenConstraint + '_)>,
) -> Result<u32, SampleError> {
    let id = Sampler::read(choice).await?;
    if let Some(calls) = calls {
        calls.advance(id);
    }
    Ok(id)
}

fn per_second(count: usize, ms: f64) -> f64 {
    if ms > 0.0 { count as f64 * 1e3 / ms } else { 0.0 }
}

pub struct GenerateOptions<'a, 's> {
    pub max_tokens: usize,
    /// Any of these ends the reply (Gemma 4 -it: `<eos>`, `<turn|>`, `<|tool_response>`).
    pub stop_tokens: &'a [u32],
    /// Holds the tokens to a constraint, such as the offered tools' call syntax (`None`:
    /// unconstrained).
    pub tool_calls: Option<&'a mut dyn TokenConstraint>,
    /// The prompt's images and clips, whose soft tokens take its placeholders (`None`: none).
    pub media: Option<&'a PromptMedia>,
    /// Drafting (speculative decoding; `None`: one token per step).
    pub speculation: Option<&'a mut Speculation<'s>>,
}

/// A decode loop's state between tokens.
pub struct Decoder {
    next: Next,
    lagged: bool,
}

#[allow(clippy::large_enum_variant)] // one per decode loop
enum Next {
    /// The next token, chosen on the device: neither read back nor appended.
    Chosen(Tensor<2, Int>),
    /// The last token, read back and not appended.
    Read(u32),
}

/// A token the decoder read back, and the host's milliseconds for it: everything but the wait for
/// the readback (the step's replay or launches, the sampling launches).
#[derive(Debug, Clone, Copy)]
pub struct Decoded {
    pub id: u32,
    pub host_ms: f64,
}

impl Decoder {
    /// Starts after `logits` (a prefill's or a step's `[1, vocab]`, which the session's cache
    /// ends with): the first token is chosen on the device. `calls` is where the constraint is
    /// after the prompt.
    pub fn new(sampler: &mut Sampler, logits: Tensor<2>, calls: Option<&mut (dyn TokenConstraint + '_)>) -> Self {
        Decoder { next: Next::Chosen(choose(sampler, logits, calls)), lagged: true }
    }

    /// Whether each step is submitted before its token is read back (on unless turned off; the
    /// benchmark's baseline reads every id first).
    pub fn set_lagged(&mut self, lagged: bool) {
        self.lagged = lagged;
    }

    /// The next token, read back; the constraint advanced by it. `more`: whether a token after it
    /// may be wanted (not at the caller's token limit): then the step appending it is submitted
    /// before it is read, where the session can (its model looks ids up on the device, the
    /// context has room). Else it is appended by the next call, if any.
    pub async fn next(
        &mut self,
        session: &mut Session,
        sampler: &mut Sampler,
        mut calls: Option<&mut (dyn TokenConstraint + '_)>,
        more: bool,
        now_ms: impl Fn() -> f64,
    ) -> Result<Decoded, GenerateError> {
        let started = now_ms();
        let choice = match &self.next {
            Next::Chosen(choice) => choice.clone(),
            &Next::Read(id) => {
                let logits = session.step(id)?;
                choose(sampler, logits, calls.as_deref_mut())
            }
        };
        // The copy back is submitted now, ahead of the step below.
        let reading = read_ids_now(choice.clone());
        let ahead =
            if more && self.lagged && session.steps_on_device() { Some(session.step_chosen(&choice)?) } else { None };
        let Some(logits) = ahead else {
            let host_ms = now_ms() - started;
            let id = read_id(reading.await)?;
            if let Some(calls) = calls {
                calls.advance(id);
            }
            self.next = Next::Read(id);
            return Ok(Decoded { id, host_ms });
        };
        // The token after this one, chosen before this one is read, where no open call masks it.
        let before = sampler.clone();
        let guess = calls.as_deref().is_none_or(|c| !c.constrains_next()).then(|| sampler.choose(logits.clone()));
        let host_ms = now_ms() - started;
        let id = read_id(reading.await)?;
        session.settle(id);
        if let Some(calls) = calls.as_deref_mut() {
            calls.advance(id);
        }
        let next = match guess {
            Some(guess) if calls.as_deref().is_none_or(|c| !c.constrains_next()) => guess,
            guessed => {
                // A call is open after this token: the next one is chosen under its mask (again,
                // when this token opened it: with the guess's draw given back).
                if guessed.is_some() {
                    *sampler = before;
                }
                choose(sampler, logits, calls)
            }
        };
        self.next = Next::Chosen(next);
        Ok(Decoded { id, host_ms })
    }
}

fn read_id(read: Result<Vec<i64>, String>) -> Result<u32, SampleError> {
    let ids = read.map_err(SampleError::new)?;
    let id = ids.first().copied().ok_or_else(|| SampleError::new("empty result".into()))?;
    u32::try_from(id).map_err(|_| SampleError::new(format!("invalid token id {id}")))
}
