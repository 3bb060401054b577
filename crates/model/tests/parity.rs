//! Parity with transformers 5.23 on tiny random models that keep the real structure (fixtures made
//! by crates/model/fixtures/gen_parity.py): logits within 1e-3 in f32, for a full prefill, one token
//! at a time, in chunks that wrap the sliding-window ring, after prefix reuse, and greedy tokens —
//! on the CPU backend and on wgpu (a real GPU, or lavapipe in CI).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use burn::tensor::{Device, Tensor};
use hearth_model::decode::Decoder;
use hearth_model::model_dir::load_model;
use hearth_model::{CacheOptions, Gemma, GemmaLoader, Input, KvCache, Output, Sampler, SamplingOptions, Session, gpu};
use serde::Deserialize;

const TOLERANCE: f32 = 1e-3;
const CASES: [&str; 4] = ["gemma4-text", "gemma4-multimodal", "gemma3-text", "gemma4-mlx-4bit"];

#[derive(Deserialize)]
struct Expected {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn fixture(case: &str) -> (PathBuf, Expected) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(case);
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("fixture present");
    (dir, serde_json::from_str(&text).expect("fixture parses"))
}

/// The CPU backend, and the GPU when there is one (required when HEARTH_REQUIRE_GPU is set).
fn devices() -> Vec<(&'static str, Device)> {
    static GPU: OnceLock<Option<Device>> = OnceLock::new();
    let gpu = GPU.get_or_init(|| match gpu::init_gpu_blocking() {
        Ok(gpu) => Some(gpu.device),
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => {
            eprintln!("no GPU, testing the CPU backend only: {err}");
            None
        }
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    });
    let mut devices = vec![("cpu", Device::flex())];
    if let Some(gpu) = gpu {
        devices.push(("wgpu", gpu.clone()));
    }
    devices
}

fn read(t: Tensor<2>) -> Vec<Vec<f32>> {
    let [_, vocab] = t.dims();
    let values: Vec<f32> = pollster::block_on(t.into_data_async()).unwrap().try_into_vec().unwrap();
    values.chunks(vocab).map(<[f32]>::to_vec).collect()
}

fn max_diff(actual: &[Vec<f32>], expected: &[Vec<f32>]) -> f32 {
    assert_eq!(actual.len(), expected.len(), "row count");
    actual.iter().zip(expected).flat_map(|(a, e)| a.iter().zip(e).map(|(x, y)| (x - y).abs())).fold(0.0, f32::max)
}

fn check(label: &str, actual: &[Vec<f32>], expected: &[Vec<f32>]) {
    let diff = max_diff(actual, expected);
    eprintln!("{label}: max |Δlogit| = {diff:.2e}");
    assert!(diff <= TOLERANCE, "{label}: max |Δlogit| {diff} > {TOLERANCE}");
}

/// Runs `f` with every fixture model on every device.
fn for_each_model(mut f: impl FnMut(&str, Gemma, &Expected)) {
    for case in CASES {
        let (dir, expected) = fixture(case);
        for (device_name, device) in devices() {
            let model = load_model(&dir, &device).unwrap_or_else(|e| panic!("{case}: {e}"));
            f(&format!("{case}/{device_name}"), model, &expected);
        }
    }
}

#[test]
fn prefill_logits_match_transformers() {
    for_each_model(|label, model, expected| {
        let mut cache = KvCache::new(&model.config, CacheOptions::default(), model.device());
        let logits = model.forward(Input::ids(&expected.tokens), &mut cache, Output::All).unwrap().logits;
        check(&format!("{label} prefill"), &read(logits), &expected.logits);
    });
}

/// One token at a time, recorded and replayed on the GPU (and launched one by one, for the same
/// logits): with the default cache, and with a ring of window + 3 slots that the steps wrap.
#[test]
fn step_by_step_logits_match_transformers() {
    for_each_model(|label, model, expected| {
        let small = CacheOptions { max_context: 64, max_chunk: 3 };
        let on_gpu = label.ends_with("wgpu");
        for (options, recorded) in [(CacheOptions::default(), true), (small, true), (small, false)] {
            model.set_step_recording(recorded);
            let mut cache = KvCache::new(&model.config, options, model.device());
            let rows: Vec<Vec<f32>> = expected
                .tokens
                .iter()
                .flat_map(|&t| read(model.forward(Input::ids(&[t]), &mut cache, Output::All).unwrap().logits))
                .collect();
            let label = format!("{label} step-by-step (context {}, recorded {recorded})", options.max_context);
            check(&label, &rows, &expected.logits);
            assert_eq!(cache.holds_recorded_step(), on_gpu && recorded, "{label}: a recording on the GPU only");
            // The lookups are recorded too: the tables are on the device (the small f32 per-layer
            // tables of the Gemma 4 fixtures as one block).
            let lookups_recorded = on_gpu && recorded;
            assert_eq!(cache.recorded_step_reads_the_id(), lookups_recorded, "{label}: lookups in the recording");
            // Every step's logits held until the end: a later step (a replay writes into the
            // buffer it returned last) leaves what the caller keeps alone. (One cache and its
            // recording at a time: a recording may allocate nothing.)
            drop(cache);
            let mut held_cache = KvCache::new(&model.config, options, model.device());
            let held: Vec<_> = expected
                .tokens
                .iter()
                .map(|&t| model.forward(Input::ids(&[t]), &mut held_cache, Output::All).unwrap().logits)
                .collect();
            let rows: Vec<Vec<f32>> = held.into_iter().flat_map(read).collect();
            check(&format!("{label}, each step's logits held to the end"), &rows, &expected.logits);
        }
    });
}

/// A recording that fails on the device (made to fail here: a host write inside the capture
/// window) is recovered from: `hearth logits --step-by-step` gives transformers' logits, and the
/// model runs launch by launch for a while.
#[test]
fn a_failed_recording_falls_back_and_finishes() {
    for_each_model(|label, model, expected| {
        if !label.ends_with("wgpu") {
            return; // Only a GPU records.
        }
        model.set_step_recording(true);
        assert!(model.records_steps());
        model.fail_next_recording();
        let rows = model.step_by_step_logits(&expected.tokens, CacheOptions::default()).unwrap();
        assert!(!model.records_steps(), "{label}: the recording failed, and the model stopped recording");
        let rows: Vec<Vec<f32>> = rows.into_iter().flat_map(read).collect();
        check(&format!("{label} step-by-step after a failed recording"), &rows, &expected.logits);
    });
}

/// Chunks of 3 with a ring of window + 3 slots: the sliding cache wraps many times.
#[test]
fn chunked_prefill_through_a_wrapping_ring_matches() {
    for_each_model(|label, model, expected| {
        let options = CacheOptions { max_context: 64, max_chunk: 3 };
        let mut cache = KvCache::new(&model.config, options, model.device());
        assert!(model.config.window() < expected.tokens.len(), "the fixture must be longer than the window");
        let logits = model.forward(Input::ids(&expected.tokens), &mut cache, Output::All).unwrap().logits;
        check(&format!("{label} chunked"), &read(logits), &expected.logits);
    });
}

#[test]
fn greedy_generation_matches_transformers() {
    for_each_model(|label, model, expected| {
        let mut session = Session::new(model, CacheOptions::default());
        let mut sampler = Sampler::new(SamplingOptions::greedy());
        let (mut logits, _) = session.prefill(&expected.tokens).unwrap();
        let mut generated = Vec::new();
        for _ in 0..expected.greedy.len() {
            let next = pollster::block_on(sampler.sample(logits)).unwrap();
            generated.push(next);
            logits = session.step(next).unwrap();
        }
        assert_eq!(generated, expected.greedy, "{label}");
    });
}

/// Decoding with the readback a step behind (`Decoder`): greedy, the tokens are transformers';
/// seeded, the samples are those of reading each id before the next step. On the GPU each token
/// is appended before it is read back: the session holds the last one too (read since). A
/// recording that fails while appending an unread token is recovered from with the same tokens.
#[test]
fn lagged_decoding_matches_transformers() {
    let decode = |session: &mut Session, sampling: SamplingOptions, prompt: &[u32], n: usize, lagged: bool| {
        let mut sampler = Sampler::new(sampling);
        session.use_conversation(session_conversation());
        let (logits, _) = session.prefill(prompt).unwrap();
        let mut decoder = Decoder::new(&mut sampler, logits, None);
        decoder.set_lagged(lagged);
        (0..n)
            .map(|_| pollster::block_on(decoder.next(session, &mut sampler, None, true, || 0.0)).unwrap().id)
            .collect::<Vec<u32>>()
    };
    for_each_model(|label, model, expected| {
        let on_gpu = label.ends_with("wgpu");
        let prompt = &expected.tokens;
        let n = expected.greedy.len();
        model.set_step_recording(true);
        let mut session = Session::with_caches(model, CacheOptions::default(), 1);
        let generated = decode(&mut session, SamplingOptions::greedy(), prompt, n, true);
        assert_eq!(generated, expected.greedy, "{label}");
        let held = if on_gpu { n } else { n - 1 };
        assert_eq!(session.tokens(), [prompt.as_slice(), &generated[..held]].concat(), "{label}: tokens held");

        let sampling = SamplingOptions { temperature: 1.5, top_k: 0, top_p: 0.95, seed: 11 };
        let sampled = decode(&mut session, sampling, prompt, n, true);
        assert_eq!(sampled, decode(&mut session, sampling, prompt, n, false), "{label}: seeded samples");

        if on_gpu {
            // A fresh session records again; its first recording, made while appending an
            // unread token, fails.
            let model = session.into_model();
            model.set_step_recording(true);
            let mut session = Session::new(model, CacheOptions::default());
            session.model().fail_next_recording();
            let generated = decode(&mut session, SamplingOptions::greedy(), prompt, n, true);
            assert!(!session.model().records_steps(), "{label}: the recording failed");
            assert_eq!(generated, expected.greedy, "{label} after a failed recording");
        }
    });
}

fn session_conversation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A session reuses what its cache holds: extending a prompt computes only the new tokens, a
/// diverging prompt rewinds, and either way the logits equal a fresh prefill's.
#[test]
fn reused_cache_gives_the_same_logits_as_a_fresh_prefill() {
    for_each_model(|label, model, expected| {
        let tokens = &expected.tokens;
        let last_row = |rows: &[Vec<f32>]| rows.last().unwrap().clone();
        let mut session = Session::new(model, CacheOptions { max_context: 64, max_chunk: 4 });

        let (_, first) = session.prefill(&tokens[..12]).unwrap();
        assert_eq!((first.reused, first.computed), (0, 12));
        let (logits, extended) = session.prefill(tokens).unwrap();
        assert_eq!((extended.reused, extended.computed), (12, tokens.len() - 12));
        check(&format!("{label} extended"), &[last_row(&read(logits))], &[expected.logits.last().unwrap().clone()]);

        // Diverge two tokens before the end: the ring still holds the window, so this rewinds.
        let mut diverged = tokens[..tokens.len() - 2].to_vec();
        diverged.push(tokens[1]);
        let (logits, rewound) = session.prefill(&diverged).unwrap();
        assert_eq!(rewound.reused, tokens.len() - 2, "{label}: rewound instead of recomputing");
        let mut fresh = KvCache::new(&session.model().config, CacheOptions::default(), session.model().device());
        let reference = session.model().forward(Input::ids(&diverged), &mut fresh, Output::Last).unwrap().logits;
        check(&format!("{label} rewound"), &read(logits), &read(reference));
    });
}

/// After decoding further than the rings can rewind, a prompt that leaves the decoded tokens
/// (an answer rendered again, thoughts dropped) still reuses everything up to the previous
/// prompt's end, or a little before it, through the cache's checkpoint; logits as a fresh
/// prefill's.
#[test]
fn a_prompt_that_drops_a_long_answer_rewinds_to_the_checkpoint() {
    for_each_model(|label, model, expected| {
        let tokens = &expected.tokens;
        let window = model.config.window();
        let mut session = Session::new(model, CacheOptions { max_context: 64, max_chunk: 4 });
        let prompt_len = 8;
        session.prefill(&tokens[..prompt_len]).unwrap();
        // The "answer": more tokens than a ring of window + 4 slots can take back.
        let answer = window + 6;
        for i in 0..answer {
            session.step(tokens[(prompt_len + i) % tokens.len()]).unwrap();
        }
        let fresh_logits = |session: &Session, prompt: &[u32]| {
            let mut fresh = KvCache::new(&session.model().config, CacheOptions::default(), session.model().device());
            read(session.model().forward(Input::ids(prompt), &mut fresh, Output::Last).unwrap().logits)
        };
        // Diverges right after the previous prompt: everything before it is kept.
        let mut next = tokens[..prompt_len].to_vec();
        next.extend([tokens[3], tokens[1], tokens[4]]);
        let (logits, stats) = session.prefill(&next).unwrap();
        assert_eq!((stats.reused, stats.computed), (prompt_len, 3), "{label}: rewound to the checkpoint");
        check(&format!("{label} after the checkpoint"), &read(logits), &fresh_logits(&session, &next));

        // Decode past the rings again, then diverge two tokens before that prompt's end.
        for i in 0..answer {
            session.step(tokens[i % tokens.len()]).unwrap();
        }
        let mut earlier = next[..next.len() - 2].to_vec();
        earlier.push(tokens[2]);
        let (logits, stats) = session.prefill(&earlier).unwrap();
        assert_eq!(stats.reused, next.len() - 2, "{label}: rewound within the checkpoint's rings");
        check(&format!("{label} before the checkpoint"), &read(logits), &fresh_logits(&session, &earlier));

        // A longer prompt, decoded past, then one that rewrites what follows the first prompt (as
        // a compaction does): back to the first prompt's end, not to nothing.
        let longer: Vec<u32> = earlier.iter().copied().chain((0..20).map(|i| tokens[i % tokens.len()])).collect();
        session.prefill(&longer).unwrap();
        for i in 0..answer {
            session.step(tokens[(i + 5) % tokens.len()]).unwrap();
        }
        let mut compacted = earlier[..prompt_len + 1].to_vec();
        compacted.push(tokens[5]);
        let (logits, stats) = session.prefill(&compacted).unwrap();
        assert_eq!(stats.reused, prompt_len, "{label}: rewound to the first prompt's end");
        check(&format!("{label} after a compaction"), &read(logits), &fresh_logits(&session, &compacted));
    });
}

/// Two conversations taking turns each keep their cache when the budget allows two, and each
/// turn computes only its new tokens; with one cache they evict each other.
#[test]
fn conversations_keep_their_own_caches_within_the_budget() {
    for_each_model(|label, model, expected| {
        let tokens = &expected.tokens;
        let (a, b): (Vec<u32>, Vec<u32>) = (tokens.to_vec(), tokens.iter().rev().copied().collect());
        let options = CacheOptions { max_context: 64, max_chunk: 4 };
        let mut session = Session::with_caches(model, options, 2);
        let turn = |session: &mut Session, conversation: u64, prompt: &[u32]| {
            session.use_conversation(conversation);
            session.prefill(prompt).unwrap().1
        };
        turn(&mut session, 1, &a[..10]);
        turn(&mut session, 2, &b[..10]);
        assert_eq!(turn(&mut session, 1, &a).reused, 10, "{label}: conversation 1 kept its cache");
        let (logits, stats) = {
            session.use_conversation(2);
            session.prefill(&b).unwrap()
        };
        assert_eq!(stats.reused, 10, "{label}: conversation 2 kept its cache");
        let mut fresh = KvCache::new(&session.model().config, CacheOptions::default(), session.model().device());
        let reference = session.model().forward(Input::ids(&b), &mut fresh, Output::Last).unwrap().logits;
        check(&format!("{label} second conversation"), &read(logits), &read(reference));
        // A third conversation takes the cache unused longest (conversation 1's).
        turn(&mut session, 3, &a[..5]);
        assert_eq!(turn(&mut session, 2, &b).reused, b.len() - 1, "{label}: the most recent stays");
        assert_eq!(turn(&mut session, 1, &a).reused, 0, "{label}: the oldest was given up");

        let mut single = Session::new(session.into_model(), options);
        turn(&mut single, 1, &a[..10]);
        turn(&mut single, 2, &b[..10]);
        assert_eq!(turn(&mut single, 1, &a).reused, 0, "{label}: one cache is shared");
    });
}

/// An embedding split into many small blocks (as the real 262k-row one is, to fit storage
/// bindings) gives the same logits: lookups keep the token order, the tied head joins the blocks.
#[test]
fn a_split_embedding_matches_transformers() {
    for case in CASES {
        let (dir, expected) = fixture(case);
        for (device_name, device) in devices() {
            let config = hearth_model::model_dir::load_config(&dir).unwrap();
            // 1 KiB blocks: a few rows each, so the fixture's tokens spread over many blocks.
            let rows = 1024 / (config.hidden_size * 4);
            assert!(rows * 4 < config.vocab_size, "{case}: the split must make several blocks");
            // (Packed 4-bit rows are 8× smaller: still several blocks, and several host slices of
            // the per-layer-embedding table.)
            let mut checkpoint = hearth_weights::Checkpoint::open(&dir).unwrap();
            let model = Gemma::load_with_tensor_limit(config, &mut checkpoint, &device, 1024).unwrap();
            let mut cache = KvCache::new(&model.config, CacheOptions::default(), model.device());
            let logits = model.forward(Input::ids(&expected.tokens), &mut cache, Output::All).unwrap().logits;
            check(&format!("{case}/{device_name} split embedding"), &read(logits), &expected.logits);
        }
    }
}

/// Loads `dir` as the browser engine does from Cache Storage: windowed sources that hold only
/// what was fetched, headers fetched as the parser asks, then each load step's named bytes,
/// dropped before the next step. Returns the model and the most bytes held at once.
fn load_from_windows(dir: &Path, device: &Device, max_tensor_bytes: usize) -> (Gemma, usize) {
    use hearth_model::gemma::{FetchedFile, LoadStep, open_headers};
    use hearth_weights::{Quantization, Windows};
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "gguf"))
        .collect();
    paths.sort();
    let bytes: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let files: Vec<FetchedFile> = (paths.iter().zip(&bytes))
        .map(|(p, b)| FetchedFile { name: p.display().to_string(), size: b.len() as u64, windows: Windows::default() })
        .collect();
    let fetch = |file: usize, start: u64, end: u64| {
        files[file].windows.insert(start, bytes[file][start as usize..end as usize].to_vec())
    };
    let release = || files.iter().for_each(|f| f.windows.clear());
    let held = || files.iter().map(|f| f.windows.held_bytes() as usize).sum::<usize>();

    let fetch_header = |file, start, end| {
        fetch(file, start, end);
        std::future::ready(Ok::<(), std::convert::Infallible>(()))
    };
    let mut checkpoint = pollster::block_on(open_headers(&files, None, fetch_header)).unwrap_or_else(|e| panic!("{e}"));
    let config = match checkpoint.gguf() {
        Some(file) => hearth_model::TextConfig::from_gguf(file).unwrap(),
        None => {
            let config_json = std::fs::read_to_string(dir.join("config.json")).unwrap();
            checkpoint.set_quantization(Quantization::from_config_json(&config_json).unwrap());
            hearth_model::model_dir::load_config(dir).unwrap()
        }
    };
    release();
    let early = GemmaLoader::new(config.clone(), &checkpoint, max_tensor_bytes).finish(device);
    assert!(
        matches!(early, Err(hearth_model::ModelError::LoadIncomplete { done: 0, .. })),
        "a model is never half loaded"
    );
    let loader = GemmaLoader::new(config, &checkpoint, max_tensor_bytes);
    let mut peak = 0;
    let fetch_step = |step: LoadStep<'_>| {
        release();
        for range in step.reads()? {
            fetch(range.file, range.start, range.end);
        }
        peak = peak.max(held());
        Ok::<(), hearth_model::ModelError>(())
    };
    let model = loader.load_with(&mut checkpoint, device, fetch_step);
    (model.unwrap_or_else(|e| panic!("{}: {e}", dir.display())), peak)
}

/// The browser loads installed models step by step from fetched pieces (its wasm memory could not
/// hold a real model's file beside the model): each step names every byte it reads, and the
/// result equals transformers, while no step holds more than a quarter of the files.
#[test]
fn a_model_loaded_from_fetched_pieces_matches_transformers() {
    // With a Gemma 4 GGUF (gguf_tiny.rs): its `rope_freqs` tensor must be among the named reads.
    for case in CASES.into_iter().chain(["gemma4-gguf"]) {
        let (dir, expected) = fixture(case);
        let total: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "gguf"))
            .map(|p| p.metadata().unwrap().len())
            .sum();
        for (device_name, device) in devices() {
            // Small tensor limits: the embedding in many blocks, the per-layer table in many slices.
            let (model, peak) = load_from_windows(&dir, &device, 1024);
            eprintln!("{case}/{device_name}: at most {peak} of {total} bytes held at once");
            assert!((peak as u64) * 4 < total, "{case}: a step held {peak} of {total} bytes");
            let mut cache = KvCache::new(&model.config, CacheOptions::default(), model.device());
            let logits = model.forward(Input::ids(&expected.tokens), &mut cache, Output::All).unwrap().logits;
            check(&format!("{case}/{device_name} fetched pieces"), &read(logits), &expected.logits);
        }
    }
}

/// A 4-bit MLX checkpoint stays packed where the fused kernel runs: its device weights are a
/// fraction of the f32 model's, the per-layer-embedding table among them (packed on the device,
/// nothing on the host). The CPU backend, which has no fused kernel, keeps f32 weights and the
/// table packed on the host.
#[test]
fn mlx_4bit_weights_stay_packed() {
    let (dir, _) = fixture("gemma4-mlx-4bit");
    // The same weights as f32 (read_f32 dequantizes).
    let mut checkpoint = hearth_weights::Checkpoint::open(&dir).unwrap();
    let names: Vec<String> =
        checkpoint.names().filter(|n| !n.ends_with(".scales") && !n.ends_with(".biases")).map(str::to_string).collect();
    let f32_bytes: u64 = names.iter().map(|n| checkpoint.read_f32(n).unwrap().data.len() as u64 * 4).sum();
    for (device_name, device) in devices() {
        let loaded = load_model(&dir, &device).unwrap().weight_bytes();
        eprintln!("{device_name}: {loaded:?}, as f32 {f32_bytes} bytes");
        if hearth_kernels::has_fused_kernels(&device) {
            assert_eq!(loaded.host, 0, "{device_name}: the PLE table is on the device: {loaded:?}");
            assert!(
                (loaded.device + loaded.host) * 3 < f32_bytes,
                "{device_name}: {loaded:?} vs {f32_bytes} f32 bytes"
            );
        } else {
            assert!(
                loaded.host > 0 && loaded.host * 5 < 128 * 192 * 4,
                "the PLE table is packed on the host: {loaded:?}"
            );
            // Everything but the host table (and the scalars) as f32.
            assert!(loaded.device * 10 >= f32_bytes * 8, "{device_name}: f32 weights expected: {loaded:?}");
        }
    }
}
