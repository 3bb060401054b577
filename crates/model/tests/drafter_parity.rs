//! Gemma 4's assistant (drafter) against transformers 5.23 on tiny random models
//! (fixtures/gemma4-drafter, made by fixtures/gen_drafter_parity.py, beside fixtures/gemma4-text):
//! the main model's next token and last hidden state, then 4 draft steps' logits within 1e-3 and
//! their greedy ids, for the tied head and the centroid-masked head, after a prompt and after a
//! verification that kept some tokens and rewound the rest. CPU backend and wgpu.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Int, Tensor};
use hearth_model::drafter::{self, Drafter, DrafterError};
use hearth_model::model_dir::{load_config, load_model};
use hearth_model::{CacheOptions, Gemma, Input, KvCache, Output, Sampler};
use serde::Deserialize;

mod common;
use common::{devices, rows};

const TOLERANCE: f32 = 1e-3;

#[derive(Deserialize)]
struct Fixture {
    main: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    drafter: String,
    prompt: Vec<u32>,
    accepted: Vec<u32>,
    rejected: Vec<u32>,
    next_token: u32,
    hidden: Vec<f32>,
    drafted: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-drafter")
}

fn fixture() -> Fixture {
    let text = std::fs::read_to_string(fixture_dir().join("expected.json")).expect("fixture present");
    serde_json::from_str(&text).expect("fixture parses")
}

fn argmax(row: &[f32]) -> u32 {
    let best = row.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
    best.0 as u32
}

fn max_diff(actual: &[f32], expected: &[f32]) -> f32 {
    assert_eq!(actual.len(), expected.len(), "width");
    actual.iter().zip(expected).map(|(a, e)| (a - e).abs()).fold(0.0, f32::max)
}

/// The main model's round, as the engine runs it: the prompt, then (when the case has them) the
/// accepted tokens and the rejected drafts in one verification, the rejected ones rewound. Returns
/// the next token (greedy, from the last kept position) and the hidden state there `[1, H]`.
fn main_round(model: &Gemma, cache: &mut KvCache, case: &Case) -> (u32, Tensor<2>) {
    let (mut logits, mut hidden) =
        model.forward(Input::ids(&case.prompt), cache, Output::AllWithHidden).unwrap().into_parts();
    let mut last = case.prompt.len() - 1;
    if !case.accepted.is_empty() {
        let verified: Vec<u32> = case.accepted.iter().chain(&case.rejected).copied().collect();
        (logits, hidden) = model.forward(Input::ids(&verified), cache, Output::AllWithHidden).unwrap().into_parts();
        assert!(cache.truncate(cache.len() - case.rejected.len()), "the rejected drafts rewind exactly");
        last = case.accepted.len() - 1;
    }
    let h = model.config.hidden_size;
    let logits = rows(logits.slice([last..last + 1, 0..model.config.vocab_size]));
    (argmax(&logits[0]), hidden.slice([last..last + 1, 0..h]))
}

/// Drafts `case.drafted.len()` greedy steps and checks each step's logits and id.
fn check_case(label: &str, model: &Gemma, drafter: &Drafter, options: CacheOptions, case: &Case) -> f32 {
    let mut cache = KvCache::new(&model.config, options, model.device());
    let (next, state) = main_round(model, &mut cache, case);
    assert_eq!(next, case.next_token, "{label}: the main model's next token");
    let hidden_diff = max_diff(&rows(state.clone())[0], &case.hidden);
    assert!(hidden_diff <= TOLERANCE, "{label}: main hidden state |Δ| {hidden_diff}");
    assert_eq!(cache.len(), case.prompt.len() + case.accepted.len());

    let context = drafter.context(&cache).unwrap();
    assert_eq!(context.position(), cache.len());
    let state_at_start = state.clone();
    let (mut token, mut state) = (next, state);
    let mut drafted = Vec::new();
    let mut worst = 0.0f32;
    for (step, expected) in case.logits.iter().enumerate() {
        let draft = drafter.step(model, &context, token, state).unwrap();
        let logits = rows(draft.logits).remove(0);
        let diff = max_diff(&logits, expected);
        assert!(diff <= TOLERANCE, "{label}: step {step} max |Δlogit| {diff} > {TOLERANCE}");
        worst = worst.max(diff);
        token = argmax(&logits);
        drafted.push(token);
        state = draft.state;
    }
    assert_eq!(drafted, case.drafted, "{label}: drafted ids");
    if model.steps_on_device() {
        // The same chain with each draft's id left on the device (as a round drafts while no
        // call is open): the ids, read back once at the end, are transformers'.
        let (mut state, mut choices) = (state_at_start, Vec::<Tensor<2, Int>>::new());
        for _ in &case.logits {
            let draft = match choices.last() {
                None => drafter.step(model, &context, next, state).unwrap(),
                Some(last) => drafter.step_chosen(model, &context, last, state).unwrap(),
            };
            choices.push(draft.logits.argmax(1));
            state = draft.state;
        }
        let ids = pollster::block_on(Sampler::read_all(Tensor::cat(choices, 0))).unwrap();
        assert_eq!(ids, case.drafted, "{label}: drafted ids, chained on the device");
    }
    eprintln!("{label}: max |Δlogit| = {worst:.2e} (hidden {hidden_diff:.1e}), drafted {drafted:?}");
    worst
}

/// Both heads, after a prompt and after a verification with a rewind: in one chunk, and in chunks
/// of 4 through a sliding ring of 12 that wraps (the drafter reads the ring's slots); with the
/// drafter's embedding whole and in blocks of 10 rows (as a real one is split to fit bindings).
#[test]
fn drafted_logits_match_transformers() {
    let fixture = fixture();
    let main_dir = fixture_dir().join(&fixture.main);
    let main_config = load_config(&main_dir).unwrap();
    let chunked = CacheOptions { max_context: 64, max_chunk: 4 };
    for (device_name, device) in devices() {
        let model = load_model(&main_dir, &device).unwrap();
        for name in ["tied", "centroids"] {
            let dir = fixture_dir().join(name);
            let whole = drafter::load_dir(&dir, &main_config, &device).unwrap();
            let config =
                drafter::DrafterConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
            let mut checkpoint = hearth_weights::Checkpoint::open(&dir).unwrap();
            let split =
                Drafter::load_with_tensor_limit(config, &main_config, &mut checkpoint, &device, 10 * 24 * 4).unwrap();
            let cases: Vec<&Case> = fixture.cases.iter().filter(|c| c.drafter == name).collect();
            assert_eq!(cases.len(), 2, "{name}: a prompt case and a verification case");
            let mut worst = 0.0f32;
            for (i, case) in cases.into_iter().enumerate() {
                for (layout, drafter) in [("whole", &whole), ("split", &split)] {
                    for (chunking, options) in [("one chunk", CacheOptions::default()), ("chunks of 4", chunked)] {
                        let label = format!("{name} case {i} on {device_name} ({layout}, {chunking})");
                        worst = worst.max(check_case(&label, &model, drafter, options, case));
                    }
                }
            }
            eprintln!("{name} on {device_name}: max |Δlogit| over every step = {worst:.2e}");
        }
    }
}

/// What the drafter cannot draft from is refused, typed: an empty cache (no keys to read yet), a
/// state of the wrong width, a token outside the vocabulary.
#[test]
fn the_drafter_refuses_what_it_cannot_draft_from() {
    let fixture = fixture();
    let main_dir = fixture_dir().join(&fixture.main);
    let device = Device::flex();
    let model = load_model(&main_dir, &device).unwrap();
    let drafter = drafter::load_dir(&fixture_dir().join("tied"), &model.config, &device).unwrap();
    let mut cache = KvCache::new(&model.config, CacheOptions::default(), &device);
    assert!(matches!(drafter.context(&cache), Err(DrafterError::EmptyContext)));

    let (_, hidden) =
        model.forward(Input::ids(&fixture.cases[0].prompt), &mut cache, Output::AllWithHidden).unwrap().into_parts();
    let context = drafter.context(&cache).unwrap();
    let narrow = hidden.clone().slice([0..1, 0..16]);
    let err = drafter.step(&model, &context, 5, narrow).err();
    assert!(matches!(err, Some(DrafterError::StateShape { width: 32, .. })), "{err:?}");
    let state = hidden.slice([0..1, 0..32]);
    let err = drafter.step(&model, &context, 128, state).err();
    assert!(matches!(err, Some(DrafterError::Model(_))), "{err:?}");
}

/// The drafts of one round: `steps` greedy steps from `next` and `state`, each step's logits.
fn draft_round(
    model: &Gemma,
    drafter: &Drafter,
    cache: &KvCache,
    next: u32,
    state: Tensor<2>,
    steps: usize,
) -> Vec<Vec<f32>> {
    let context = drafter.context(cache).unwrap();
    let (mut token, mut state) = (next, state);
    let mut all = Vec::new();
    for _ in 0..steps {
        let draft = drafter.step(model, &context, token, state).unwrap();
        let logits = rows(draft.logits).remove(0);
        token = argmax(&logits);
        state = draft.state;
        all.push(logits);
    }
    all
}

/// Draft steps recorded once and replayed (the default where the kernels run) draft what steps
/// launched one by one draft: over rounds at new positions of one cache (the masks and tables
/// rewritten in place, through a sliding ring that wraps), after a checkpoint (whose ring the
/// next write copies into a new buffer: the steps record again), for two caches drafting in turns
/// (each keeps its recording), and when a recording fails (the
/// step's own result stands; later steps launch one by one).
#[test]
fn recorded_draft_steps_draft_what_launched_ones_do() {
    let fixture = fixture();
    let main_dir = fixture_dir().join(&fixture.main);
    let Some((_, device)) = devices().into_iter().find(|(name, _)| *name != "cpu") else { return };
    let model = load_model(&main_dir, &device).unwrap();
    let options = CacheOptions { max_context: 64, max_chunk: 4 };
    for name in ["tied", "centroids"] {
        let dir = fixture_dir().join(name);
        let recorded = drafter::load_dir(&dir, &model.config, &device).unwrap();
        let launched = drafter::load_dir(&dir, &model.config, &device).unwrap();
        launched.set_step_recording(false);
        let mut cache = KvCache::new(&model.config, options, model.device());
        let (mut logits, mut hidden) = model
            .forward(Input::ids(&fixture.cases[0].prompt), &mut cache, Output::AllWithHidden)
            .unwrap()
            .into_parts();
        for round in 0..4 {
            if round == 1 {
                // The ring is shared with the checkpoint now: this round records on it, and the
                // main model's next write moves the ring to a new buffer.
                cache.checkpoint();
            }
            let last = logits.dims()[0] - 1;
            let next = argmax(&rows(logits.slice([last..last + 1, 0..model.config.vocab_size]))[0]);
            let state = hidden.slice([last..last + 1, 0..model.config.hidden_size]);
            let want = draft_round(&model, &launched, &cache, next, state.clone(), 3);
            let got = draft_round(&model, &recorded, &cache, next, state, 3);
            assert!(recorded.holds_recorded_step(&cache), "{name}, round {round}: the steps were recorded");
            for (step, (got, want)) in got.iter().zip(&want).enumerate() {
                let diff = max_diff(got, want);
                assert!(diff <= 1e-5, "{name}, round {round}, step {step}: recorded vs launched |Δlogit| {diff}");
            }
            // The main model takes the token and two of the drafts (a verification's chunk).
            let verified = [next, argmax(&got[0]), argmax(&got[1])];
            (logits, hidden) =
                model.forward(Input::ids(&verified), &mut cache, Output::AllWithHidden).unwrap().into_parts();
        }

        // A second cache drafting in turns with the first (two tabs): each keeps its recording.
        let mut other = KvCache::new(&model.config, options, model.device());
        let (other_logits, other_hidden) = model
            .forward(Input::ids(&fixture.cases[1].prompt), &mut other, Output::AllWithHidden)
            .unwrap()
            .into_parts();
        for (turn, (on, logits, hidden)) in
            [(&other, &other_logits, &other_hidden), (&cache, &logits, &hidden), (&other, &other_logits, &other_hidden)]
                .into_iter()
                .enumerate()
        {
            let last = logits.dims()[0] - 1;
            let next = argmax(&rows(logits.clone().slice([last..last + 1, 0..model.config.vocab_size]))[0]);
            let state = hidden.clone().slice([last..last + 1, 0..model.config.hidden_size]);
            let want = draft_round(&model, &launched, on, next, state.clone(), 3);
            let got = draft_round(&model, &recorded, on, next, state, 3);
            for (step, (got, want)) in got.iter().zip(&want).enumerate() {
                let diff = max_diff(got, want);
                assert!(diff <= 1e-5, "{name}, two caches, turn {turn}, step {step}: |Δlogit| {diff}");
            }
        }
        assert!(recorded.holds_recorded_step(&cache) && recorded.holds_recorded_step(&other), "{name}: one each");

        // A recording that fails: the step that recorded keeps its result, the next ones launch.
        let failing = drafter::load_dir(&dir, &model.config, &device).unwrap();
        failing.fail_next_recording();
        let last = logits.dims()[0] - 1;
        let next = argmax(&rows(logits.slice([last..last + 1, 0..model.config.vocab_size]))[0]);
        let state = hidden.slice([last..last + 1, 0..model.config.hidden_size]);
        let want = draft_round(&model, &launched, &cache, next, state.clone(), 3);
        let got = draft_round(&model, &failing, &cache, next, state, 3);
        assert!(
            !failing.records_steps() && !failing.holds_recorded_step(&cache),
            "{name}: the failed recording is off"
        );
        for (step, (got, want)) in got.iter().zip(&want).enumerate() {
            let diff = max_diff(got, want);
            assert!(diff <= 1e-5, "{name}, failed recording, step {step}: |Δlogit| {diff}");
        }
    }
}
