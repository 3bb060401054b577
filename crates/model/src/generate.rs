//! The generation loop shared by the CLI and the browser: prefill, then sample → append → repeat
//! until an end-of-turn token or the token limit, streaming text as it becomes final.

use std::ops::ControlFlow;

use burn::tensor::{Int, Tensor};
use hearth_kernels::mask_logits;

use crate::constrain::CallConstraint;
use crate::decode::Decoder;
use crate::drafter::DrafterError;
use crate::error::ModelError;
use crate::sampling::{SampleError, Sampler};
use crate::session::{PromptImages, Session};
use crate::speculative::{Speculation, SpeculationStats, generate_speculative};
use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

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
pub(crate) fn choose(sampler: &mut Sampler, logits: Tensor<2>, calls: Option<&mut CallConstraint>) -> Tensor<2, Int> {
    sampler.choose(constrain(logits, calls))
}

/// `logits` ([1, vocab]) without the tokens an open tool call forbids.
pub(crate) fn constrain(logits: Tensor<2>, calls: Option<&mut CallConstraint>) -> Tensor<2> {
    let Some(calls) = calls else { return logits };
    let vocab = logits.dims()[1];
    match calls.mask(vocab) {
        Some(words) => mask_logits(logits, words),
        None => logits,
    }
}

/// The chosen token, read back; an open tool call advances by it.
pub(crate) async fn read(choice: Tensor<2, Int>, calls: Option<&mut CallConstraint>) -> Result<u32, SampleError> {
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
    /// Holds the tool calls the model opens to the offered tools' syntax (`None`: unconstrained).
    pub tool_calls: Option<&'a mut CallConstraint>,
    /// The prompt's images, whose soft tokens take its placeholders (`None`: no images).
    pub images: Option<&'a PromptImages>,
    /// Drafting (speculative decoding; `None`: one token per step).
    pub speculation: Option<&'a mut Speculation<'s>>,
}

/// Generates a continuation of `prompt`. `on_token(id, text)` is called for every token with the
/// text that became final and may return `ControlFlow::Break` to stop early (the user pressed
/// stop); `now_ms` is the caller's clock (wasm has no `Instant`).
pub async fn generate(
    session: &mut Session,
    sampler: &mut Sampler,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: GenerateOptions<'_, '_>,
    now_ms: impl Fn() -> f64,
    mut on_token: impl FnMut(u32, &str) -> ControlFlow<()>,
) -> Result<Generation, GenerateError> {
    let mut options = options;
    if let Some(speculation) = options.speculation.take() {
        return generate_speculative(session, sampler, tokenizer, prompt, options, speculation, now_ms, on_token).await;
    }
    let start = now_ms();
    let mut decoder_text = StreamDecoder::default();
    let mut token_ids = Vec::new();
    let mut text = String::new();

    let mut calls = options.tool_calls;
    if let Some(calls) = calls.as_deref_mut() {
        calls.begin(prompt);
    }
    let (logits, stats) = match options.images {
        Some(images) => session.prefill_with(prompt, images)?,
        None => session.prefill(prompt)?,
    };
    let mut decoder = Decoder::new(sampler, logits, calls.as_deref_mut());
    let mut first_token_at = None;
    let mut decode_host_ms = Vec::new();
    loop {
        // The step after a token is submitted before the token is read back (`crate::decode`),
        // except after the prompt's: the recording that the first step makes would hold up the
        // first token's text.
        let more = first_token_at.is_some() && token_ids.len() + 1 < options.max_tokens;
        let next = decoder.next(session, sampler, calls.as_deref_mut(), more, &now_ms).await?;
        if first_token_at.is_none() {
            first_token_at = Some(now_ms());
        } else {
            decode_host_ms.push(next.host_ms);
        }
        if token_ids.len() >= options.max_tokens || options.stop_tokens.contains(&next.id) {
            break;
        }
        token_ids.push(next.id);
        let piece = decoder_text.push(tokenizer, next.id)?;
        text.push_str(&piece);
        if on_token(next.id, &piece).is_break() || token_ids.len() == options.max_tokens {
            break;
        }
    }
    let first_token_at = first_token_at.unwrap_or(start);
    Ok(Generation {
        token_ids,
        text,
        prompt_tokens: prompt.len(),
        prefilled_tokens: stats.computed,
        prefill_ms: first_token_at - start,
        decode_ms: now_ms() - first_token_at,
        decode_host_ms,
        speculation: None,
    })
}
