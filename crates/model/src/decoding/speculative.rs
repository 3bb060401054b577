//! Speculative decoding: a cheap source drafts `k` tokens, the main model checks them all in one
//! chunk, the longest accepted prefix is kept and the cache rewound past the rest.
//!
//! One round, with the cache holding positions `0..p` and `next` sampled but not yet run:
//!
//! ```text
//! draft    d1..dk           the assistant from (next, hidden state at p−1), or a lookup
//! verify   [next, d1..dk]   one chunk through the main model: k+1 rows of logits and states
//! accept   n ≤ k            greedy: the drafts the main model would have chosen itself;
//!                           sampling: dᵢ kept with probability min(1, p(dᵢ)/q(dᵢ))
//! correct  next'            row n's choice (greedy), its residual max(0, p − q) after a
//!                           rejection, or a draw from row k after k acceptances
//! rewind   0..p+1+n         the rejected drafts leave the cache ([`Session::truncate`])
//! ```
//!
//! Greedy, the tokens are those decoding without a drafter gives (the verification's logits are
//! the main model's own, from the chunk kernels rather than the one-token step: equal up to
//! float rounding, which can only matter where two logits tie). Sampling follows the standard
//! speculative sampling rule (Leviathan et al. 2023; Chen et al. 2023), under which each token is
//! distributed as the main model's sampler would draw it. A drafted token the open tool call
//! forbids is never proposed (the assistant's logits are masked; a lookup's draft ends there), and
//! every verified row is masked as the plain loop would mask it. Only ids and, when sampling, the
//! k acceptance ratios are read back. While no call is open the assistant's steps chain on the
//! device (each draft's id feeds the next step unread) and the round reads back twice: the k
//! drafts, then the verification; inside a call each draft is read before the next is masked.

use std::ops::ControlFlow;

use burn::tensor::{Int, Tensor, TensorData};
use hearth_kernels::mask_logits;

use crate::decode::{
    ConstraintMark, GenerateError, GenerateOptions, Generation, TokenConstraint, choose, constrain, read,
};
use crate::drafter::DrafterError;
pub use crate::drafting::{DraftLength, DraftSource, Speculation, SpeculationStats};
use crate::media::PromptMedia;
use crate::sampling::{Candidates, SampleError, Sampler};
use crate::session::Session;
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// The generated text so far, and the rules that end it.
struct Output<'t> {
    tokenizer: &'t Tokenizer,
    decoder: StreamDecoder,
    token_ids: Vec<u32>,
    text: String,
    max_tokens: usize,
}

impl Output<'_> {
    /// Appends `id`; false when the generation ends here (the limit, or the caller stopped it).
    fn emit(
        &mut self,
        id: u32,
        on_token: &mut impl FnMut(u32, &str) -> ControlFlow<()>,
    ) -> Result<bool, GenerateError> {
        if self.token_ids.len() >= self.max_tokens {
            return Ok(false);
        }
        self.token_ids.push(id);
        let piece = self.decoder.push(self.tokenizer, id)?;
        self.text.push_str(&piece);
        Ok(on_token(id, &piece).is_continue() && self.token_ids.len() < self.max_tokens)
    }
}

/// [`crate::generate::generate`] with drafting (`speculation`, taken out of the options).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn generate_speculative(
    session: &mut Session,
    sampler: &mut Sampler,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: GenerateOptions<'_, '_>,
    speculation: &mut Speculation<'_>,
    now_ms: impl Fn() -> f64,
    mut on_token: impl FnMut(u32, &str) -> ControlFlow<()>,
) -> Result<Generation, GenerateError> {
    let start = now_ms();
    let stop_tokens = options.stop_tokens;
    let mut out = Output {
        tokenizer,
        decoder: StreamDecoder::default(),
        token_ids: Vec::new(),
        text: String::new(),
        max_tokens: options.max_tokens,
    };
    let mut calls = options.tool_calls;
    if let Some(calls) = calls.as_deref_mut() {
        calls.begin(prompt);
    }
    let no_images = PromptMedia::default();
    let (logits, mut hidden, prefill) = session.prefill_hidden(prompt, options.media.unwrap_or(&no_images))?;
    let mut next = read(choose(sampler, logits, calls.as_deref_mut()), calls.as_deref_mut()).await?;
    let first_token_at = now_ms();
    let vocab = session.model().config.vocab_size;
    let width = session.model().config.hidden_size;
    let is_stop = |id: u32| stop_tokens.contains(&id);

    while !is_stop(next) && out.emit(next, &mut on_token)? {
        let p = session.cache().len();
        let room = options.max_tokens - out.token_ids.len();
        let fits = session.context_tokens().saturating_sub(p + 1);
        let k = speculation.length.current.min(session.max_verify() - 1).min(room).min(fits);

        // Draft. `marks[i]`: the call constraint before row i's token is chosen.
        let mut marks: Vec<ConstraintMark> = calls.as_deref().map(|c| c.mark()).into_iter().collect();
        let mut drafts: Vec<u32> = Vec::with_capacity(k);
        let mut draft_candidates: Vec<Candidates> = Vec::new();
        match &mut speculation.source {
            DraftSource::Assistant(drafter) if k > 0 => match drafter.context(session.cache()) {
                Ok(context) if session.steps_on_device() && calls.as_deref().is_none_or(|c| !c.constrains_next()) => {
                    // The chain on the device: each draft's id feeds the next step without a
                    // readback, and the k ids come back in one.
                    let mut state = hidden.clone();
                    let mut choices: Vec<Tensor<2, Int>> = Vec::with_capacity(k);
                    for _ in 0..k {
                        let draft = match choices.last() {
                            None => drafter.step(session.model(), &context, next, state)?,
                            Some(last) => drafter.step_chosen(session.model(), &context, last, state)?,
                        };
                        choices.push(if sampler.is_greedy() {
                            draft.logits.argmax(1)
                        } else {
                            let candidates = sampler.candidates(draft.logits);
                            let choice = sampler.draw(&candidates);
                            draft_candidates.push(candidates);
                            choice
                        });
                        state = draft.state;
                    }
                    for id in Sampler::read_all(Tensor::cat(choices, 0)).await? {
                        // Held to the constraint as the plain loop would hold it: after a draft
                        // that opens a call, the first draft the call forbids ends the drafts
                        // (drawn unmasked, the kept ones are still verified against the masked
                        // rows with the distribution they were drawn from).
                        if let Some(calls) = calls.as_deref_mut() {
                            if !calls.allows(vocab, id) {
                                break;
                            }
                            calls.advance(id);
                            marks.push(calls.mark());
                        }
                        drafts.push(id);
                        if is_stop(id) {
                            break;
                        }
                    }
                    draft_candidates.truncate(drafts.len());
                }
                Ok(context) => {
                    let (mut token, mut state) = (next, hidden.clone());
                    for _ in 0..k {
                        let draft = drafter.step(session.model(), &context, token, state)?;
                        let logits = constrain(draft.logits, calls.as_deref_mut());
                        let choice = if sampler.is_greedy() {
                            logits.argmax(1)
                        } else {
                            let candidates = sampler.candidates(logits);
                            let choice = sampler.draw(&candidates);
                            draft_candidates.push(candidates);
                            choice
                        };
                        let id = read(choice, calls.as_deref_mut()).await?;
                        drafts.push(id);
                        marks.extend(calls.as_deref().map(|c| c.mark()));
                        (token, state) = (id, draft.state);
                        if is_stop(id) {
                            break;
                        }
                    }
                }
                // Rare (a verification split by the context's end): this round runs one token.
                Err(DrafterError::WindowNotHeld { .. }) => {}
                Err(err) => return Err(err.into()),
            },
            DraftSource::Lookup(guess) if k > 0 => {
                let mut so_far = session.tokens().to_vec();
                so_far.push(next);
                for id in guess(&so_far, k).into_iter().take(k) {
                    let allowed = calls.as_deref_mut().is_none_or(|c| c.allows(vocab, id));
                    if id as usize >= vocab || !allowed {
                        break;
                    }
                    if let Some(calls) = calls.as_deref_mut() {
                        calls.advance(id);
                        marks.push(calls.mark());
                    }
                    drafts.push(id);
                    if is_stop(id) {
                        break;
                    }
                }
            }
            _ => {}
        }

        // Verify: row i chooses the token after [next, d1..di].
        let m = drafts.len();
        let mut verified = Vec::with_capacity(m + 1);
        verified.push(next);
        verified.extend_from_slice(&drafts);
        let (logits, states) = session.verify(&verified)?;
        let rows = constrain_rows(logits, calls.as_deref_mut(), &marks, vocab);
        let (accepted, correction) = if sampler.is_greedy() {
            let chosen = Sampler::read_all(rows.argmax(1)).await?;
            let accepted = drafts.iter().zip(&chosen).take_while(|(d, c)| d == c).count();
            (accepted, chosen[accepted])
        } else {
            let q = match &speculation.source {
                DraftSource::Assistant(_) => DraftDistribution::Sampled(draft_candidates),
                DraftSource::Lookup(_) => DraftDistribution::Certain,
            };
            accept_sampled(sampler, rows, &drafts, q).await?
        };

        session.truncate(p + 1 + accepted)?;
        hidden = states.slice([accepted..accepted + 1, 0..width]);
        if let Some(calls) = calls.as_deref_mut() {
            calls.reset(&marks[accepted]);
            calls.advance(correction);
        }
        let stats = &mut speculation.stats;
        stats.rounds += 1;
        stats.drafted += m;
        stats.accepted += accepted;
        speculation.length.update(m, accepted);

        let mut ended = false;
        for &id in &drafts[..accepted] {
            if is_stop(id) || !out.emit(id, &mut on_token)? {
                ended = true;
                break;
            }
        }
        if ended {
            break;
        }
        next = correction;
    }
    Ok(Generation {
        token_ids: out.token_ids,
        text: out.text,
        prompt_tokens: prompt.len(),
        prefilled_tokens: prefill.computed,
        prefill_ms: first_token_at - start,
        decode_ms: now_ms() - first_token_at,
        decode_host_ms: Vec::new(),
        speculation: Some(speculation.stats.clone()),
    })
}

/// What the drafts were drawn from, row by row.
enum DraftDistribution {
    /// The assistant's sampling distribution at each draft, `[1, k']` each.
    Sampled(Vec<Candidates>),
    /// A lookup's guesses: probability 1.
    Certain,
}

/// Speculative sampling over a verification's rows `[m+1, vocab]` (already masked): how many of
/// the `m` drafts are kept, and the token after them. One readback: the m acceptance ratios, the m
/// residual draws and the draw from the last row, computed together.
async fn accept_sampled(
    sampler: &mut Sampler,
    rows: Tensor<2>,
    drafts: &[u32],
    q: DraftDistribution,
) -> Result<(usize, u32), GenerateError> {
    let m = drafts.len();
    let target = sampler.candidates(rows); // [m+1, K]
    let [_, k] = target.ids.dims();
    let device = target.scores.device();
    if m == 0 {
        let id = Sampler::read_all(sampler.draw(&target)).await?[0];
        return Ok((0, id));
    }
    let head = |c: &Candidates, rows: std::ops::Range<usize>| Candidates {
        ids: c.ids.clone().slice([rows.clone(), 0..k]),
        scores: c.scores.clone().slice([rows, 0..k]),
    };
    let checked = head(&target, 0..m);
    let last = head(&target, m..m + 1);
    let draft_ids = Tensor::<2, Int>::from_data(
        TensorData::new(drafts.iter().map(|&d| d as i64).collect::<Vec<_>>(), [m, 1]),
        &device,
    );
    let p_draft = checked.prob_of(draft_ids.clone()); // [m, 1]
    let (q_draft, q_at_candidates) = match q {
        DraftDistribution::Sampled(list) => {
            let q = Candidates {
                ids: Tensor::cat(list.iter().map(|c| c.ids.clone()).collect(), 0),
                scores: Tensor::cat(list.iter().map(|c| c.scores.clone()).collect(), 0),
            };
            (q.prob_of(draft_ids), q.prob_at(&checked.ids))
        }
        DraftDistribution::Certain => {
            let at = checked.ids.clone().equal(draft_ids.expand([m, k])).float();
            (Tensor::ones([m, 1], &device), at)
        }
    };
    let ratios = p_draft / q_draft.clamp_min(1e-30);
    // After a rejection at row i the token comes from max(0, p − q), renormalised (a Gumbel draw
    // over its logarithm; emptied candidates −1e30).
    let residual = (checked.probs() - q_at_candidates).clamp_min(0.0);
    let residual_scores = residual.clone().clamp_min(1e-30).log().mask_fill(residual.lower_equal_elem(0.0), -1e30);
    let residual = Candidates { ids: checked.ids, scores: residual_scores };
    let draws = Tensor::cat(vec![sampler.draw(&residual), sampler.draw(&last)], 0); // [m+1, 1]
    let packed = Tensor::cat(vec![ratios, draws.float()], 0).reshape([2 * m + 1]);
    let values: Vec<f32> =
        packed.into_data_async().await.map_err(|e| SampleError::new(e.to_string()))?.iter::<f32>().collect();
    let accepted = (0..m).find(|&i| sampler.uniform() >= f64::from(values[i])).unwrap_or(m);
    let id = values[m + accepted];
    Ok((accepted, id as u32))
}

/// Each row of a verification masked as the plain loop would have masked it: row i by the
/// constraint at `marks[i]`.
fn constrain_rows(
    logits: Tensor<2>,
    calls: Option<&mut (dyn TokenConstraint + '_)>,
    marks: &[ConstraintMark],
    vocab: usize,
) -> Tensor<2> {
    let Some(calls) = calls else { return logits };
    let now = calls.mark();
    let mut rows = Vec::with_capacity(marks.len());
    let mut any = false;
    for (i, mark) in marks.iter().enumerate() {
        calls.reset(mark);
        let row = logits.clone().slice([i..i + 1, 0..vocab]);
        rows.push(match calls.mask(vocab) {
            Some(words) => {
                any = true;
                mask_logits(row, words)
            }
            None => row,
        });
    }
    calls.reset(&now);
    if any { Tensor::cat(rows, 0) } else { logits }
}
