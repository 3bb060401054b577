//! Speculative decoding on the tiny pair (fixtures/gemma4-text and its drafters in
//! fixtures/gemma4-drafter): greedy, the tokens are those of decoding without a drafter, over many
//! prompts and lengths that cross the sliding window (8) and the cache's chunk size, with the
//! assistant (which a random pair rarely agrees with: rejections) and with a lookup that guesses
//! the plain answer with planted mistakes (acceptances of every length, rewinds); sampling, the
//! first two tokens' distribution is the main model's (a χ² test against the exact distribution).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor};
use hearth_model::drafter::{self, Drafter};
use hearth_model::generate::{GenerateOptions, Generation, generate};
use hearth_model::model_dir::load_model;
use hearth_model::speculative::{DraftSource, Speculation};
use hearth_model::tokenizer::Tokenizer;
use hearth_model::{CacheOptions, Gemma, Input, Output, Sampler, SamplingOptions, Session};

mod common;
use common::devices;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// tiny-chat's tokenizer: it spells every id of the 128-token main model.
fn tokenizer() -> Tokenizer {
    Tokenizer::from_bytes(&std::fs::read(fixtures().join("tiny-chat/tokenizer.json")).unwrap()).unwrap()
}

const STOP: [u32; 1] = [1];

fn run(
    session: &mut Session,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    max_tokens: usize,
    sampling: SamplingOptions,
    speculation: Option<&mut Speculation<'_>>,
) -> Generation {
    let mut sampler = Sampler::new(sampling);
    // A fresh conversation each time: no reuse between the plain and the drafted run.
    session.use_conversation(rand_conversation());
    let options = GenerateOptions { max_tokens, stop_tokens: &STOP, tool_calls: None, media: None, speculation };
    pollster::block_on(generate(
        session,
        &mut sampler,
        tokenizer,
        prompt,
        options,
        || 0.0,
        |_, _| ControlFlow::Continue(()),
    ))
    .unwrap()
}

fn rand_conversation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A pseudo-random prompt of `len` ids in 2..128 (no stop token).
fn prompt(seed: u64, len: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            2 + (x % 126) as u32
        })
        .collect()
}

/// A lookup that guesses `answer` (the plain run's tokens after `prompt_len`), with a wrong guess
/// at every generated position p where p % `every` == 1 (`None`: always right).
fn oracle(answer: Vec<u32>, prompt_len: usize, every: Option<usize>) -> impl FnMut(&[u32], usize) -> Vec<u32> {
    move |so_far: &[u32], k: usize| {
        let done = so_far.len() - prompt_len;
        answer
            .iter()
            .skip(done)
            .take(k)
            .enumerate()
            .map(|(j, &t)| if every.is_some_and(|every| (done + j) % every == 1) { 2 + (t + 1) % 126 } else { t })
            .collect()
    }
}

fn load_pair(device: &Device) -> (Gemma, Drafter) {
    let model = load_model(&fixtures().join("gemma4-text"), device).unwrap();
    let drafter = drafter::load_dir(&fixtures().join("gemma4-drafter/tied"), &model.config, device).unwrap();
    (model, drafter)
}

#[test]
fn greedy_drafting_gives_the_tokens_of_plain_decoding() {
    let tokenizer = tokenizer();
    for (device_name, device) in devices() {
        let (_, drafter) = load_pair(&device);
        // Chunks of 6 through a ring that wraps: verifications cross chunk and window edges.
        for options in
            [CacheOptions { max_context: 96, max_chunk: 6 }, CacheOptions { max_context: 96, max_chunk: 512 }]
        {
            let mut session = Session::with_caches(main_model(&device), options, 1);
            let (mut rounds, mut accepted, mut drafted) = (0, 0, 0);
            for case in 0..12u64 {
                let prompt = prompt(case, 1 + (case as usize * 5) % 19);
                let max_tokens = 6 + (case as usize * 7) % 40;
                let label =
                    format!("{device_name}, {options:?}, case {case} ({} prompt, {max_tokens} max)", prompt.len());
                let plain = run(&mut session, &tokenizer, &prompt, max_tokens, SamplingOptions::greedy(), None);

                let mut assistant = Speculation::new(DraftSource::Assistant(&drafter), 4);
                let drafted_run =
                    run(&mut session, &tokenizer, &prompt, max_tokens, SamplingOptions::greedy(), Some(&mut assistant));
                assert_eq!(drafted_run.token_ids, plain.token_ids, "{label}: assistant");
                assert_eq!(drafted_run.text, plain.text, "{label}: assistant text");

                for every in [3, 7] {
                    let mut guess = oracle(plain.token_ids.clone(), prompt.len(), Some(every));
                    let mut lookup = Speculation::new(DraftSource::Lookup(&mut guess), 5);
                    let looked = run(
                        &mut session,
                        &tokenizer,
                        &prompt,
                        max_tokens,
                        SamplingOptions::greedy(),
                        Some(&mut lookup),
                    );
                    assert_eq!(looked.token_ids, plain.token_ids, "{label}: lookup, a mistake every {every}");
                    let stats = looked.speculation.unwrap();
                    (rounds, accepted, drafted) =
                        (rounds + stats.rounds, accepted + stats.accepted, drafted + stats.drafted);
                }
            }
            // The lookup's guesses were mostly right: many tokens came several to a round.
            assert!(accepted * 2 > drafted, "{device_name}: {accepted} of {drafted} accepted");
            assert!(accepted > rounds, "{device_name}: {accepted} accepted in {rounds} rounds");
            eprintln!("{device_name} {options:?}: lookup accepted {accepted} of {drafted} in {rounds} rounds");
        }
    }
}

/// A second copy of the main model (a session owns its model).
fn main_model(device: &Device) -> Gemma {
    load_model(&fixtures().join("gemma4-text"), device).unwrap()
}

/// The main model's sampling distribution of the next token after `tokens`, as (id, p) over the
/// candidates, computed exactly from its logits.
fn next_distribution(model: &Gemma, tokens: &[u32], options: SamplingOptions) -> Vec<(u32, f64)> {
    let mut cache = hearth_model::KvCache::new(&model.config, CacheOptions::default(), model.device());
    let logits: Tensor<2> = model.forward(Input::ids(tokens), &mut cache, Output::Last).unwrap().logits;
    let values: Vec<f32> = pollster::block_on(logits.into_data_async()).unwrap().try_into_vec().unwrap();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(options.top_k);
    let scores: Vec<f64> = order.iter().map(|&i| f64::from(values[i]) / f64::from(options.temperature)).collect();
    let top = scores[0];
    let sum: f64 = scores.iter().map(|s| (s - top).exp()).sum();
    order.iter().zip(&scores).map(|(&i, s)| (i as u32, (s - top).exp() / sum)).collect()
}

/// χ² of `counts` against `expected` probabilities, cells under 5 expected merged; with the
/// degrees of freedom.
fn chi_squared(
    counts: &std::collections::HashMap<(u32, u32), usize>,
    expected: &[((u32, u32), f64)],
    n: usize,
) -> (f64, usize) {
    let (mut stat, mut cells) = (0.0, 0);
    let (mut small_seen, mut small_expected) = (0.0, 0.0);
    let mut seen_total = 0;
    for &(cell, p) in expected {
        let seen = counts.get(&cell).copied().unwrap_or(0);
        seen_total += seen;
        let e = p * n as f64;
        if e < 5.0 {
            small_seen += seen as f64;
            small_expected += e;
        } else {
            stat += (seen as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    assert_eq!(seen_total, n, "every draw is one of the candidates the main model's sampler allows");
    if small_expected > 0.0 {
        stat += (small_seen - small_expected).powi(2) / small_expected.max(1.0);
        cells += 1;
    }
    (stat, cells - 1)
}

/// χ² critical value at α = 0.001 (Wilson–Hilferty).
fn critical(df: usize) -> f64 {
    let df = df as f64;
    let z = 3.09;
    df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3)
}

#[test]
fn sampled_drafting_keeps_the_main_models_distribution() {
    let tokenizer = tokenizer();
    let device = Device::flex();
    let (model, drafter) = load_pair(&device);
    let prompt = prompt(99, 5);
    let options = |seed| SamplingOptions { temperature: 1.0, top_k: 4, top_p: 1.0, seed };
    // The exact joint distribution of the first two tokens.
    let mut expected = Vec::new();
    for (first, p1) in next_distribution(&model, &prompt, options(0)) {
        let mut after = prompt.clone();
        after.push(first);
        for (second, p2) in next_distribution(&model, &after, options(0)) {
            expected.push(((first, second), p1 * p2));
        }
    }
    let greedy_answer = run(
        &mut Session::new(main_model(&device), CacheOptions::default()),
        &tokenizer,
        &prompt,
        4,
        SamplingOptions::greedy(),
        None,
    )
    .token_ids;
    let mut session = Session::new(model, CacheOptions::default());
    let n = 600;
    for source in ["assistant", "lookup"] {
        let mut counts = std::collections::HashMap::new();
        let (mut drafted, mut accepted) = (0, 0);
        for seed in 0..n as u64 {
            let mut guess = oracle(greedy_answer.clone(), prompt.len(), None);
            let mut speculation = match source {
                "assistant" => Speculation::new(DraftSource::Assistant(&drafter), 3),
                _ => Speculation::new(DraftSource::Lookup(&mut guess), 3),
            };
            // Three tokens: the second and third are drafted (the first comes from the prompt).
            let out = run(&mut session, &tokenizer, &prompt, 3, options(seed + 1), Some(&mut speculation));
            let stats = out.speculation.unwrap();
            (drafted, accepted) = (drafted + stats.drafted, accepted + stats.accepted);
            assert_eq!(out.token_ids.len(), 3, "{source}: {:?}", out.token_ids);
            *counts.entry((out.token_ids[0], out.token_ids[1])).or_insert(0) += 1;
        }
        let (stat, df) = chi_squared(&counts, &expected, n);
        eprintln!("{source}: χ² {stat:.1} on {df} df (critical {:.1}); accepted {accepted} of {drafted}", critical(df));
        assert!(stat < critical(df), "{source}: χ² {stat:.1} ≥ {:.1} on {df} df", critical(df));
        assert!(drafted > 0, "{source}: drafted nothing");
    }
}
