//! The generation loop shared by the CLI and the browser: prefill, then sample → append → repeat
//! until an end-of-turn token or the token limit, streaming text as it becomes final.

use std::ops::ControlFlow;

use crate::decode::Decoder;
pub use crate::decode::{GenerateError, GenerateOptions, Generation};
use crate::sampling::Sampler;
use crate::session::Session;
use crate::speculative::generate_speculative;
use crate::tokenizer::{StreamDecoder, Tokenizer};

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
    let (logits, stats) = match options.media {
        Some(media) => session.prefill_with(prompt, media)?,
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
