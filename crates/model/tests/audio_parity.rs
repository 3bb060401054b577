//! The audio tower against transformers 5.23 on a tiny random Gemma 4 with the real structure
//! (fixtures/gemma4-audio, made by fixtures/gen_audio_parity.py): from the raw clip through the
//! feature extractor, the tower and the embedder, the soft tokens within 1e-3; then a prompt
//! holding them, the text logits after the clip within 1e-3. CPU backend and wgpu.

use std::path::{Path, PathBuf};

use hearth_model::audio::{AudioConfig, AudioTower, FeatureConfig, FeatureExtractor, prompt};
use hearth_model::model_dir::ModelFiles;
use hearth_model::{CacheOptions, Input, KvCache, Output, SoftTokens};
use hearth_weights::Checkpoint;
use serde::Deserialize;

mod common;
use common::{devices, rows};

const TOLERANCE: f32 = 1e-3;

#[derive(Deserialize)]
struct Fixture {
    meta: Meta,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Meta {
    audio: u32,
}

#[derive(Deserialize)]
struct Case {
    input: String,
    samples: usize,
    frames: usize,
    mask: Vec<bool>,
    tokens: Vec<u32>,
    logits_from: usize,
    soft_tokens: Vec<Vec<f32>>,
    logits: Vec<Vec<f32>>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-audio")
}

fn check(label: &str, actual: &[Vec<f32>], expected: &[Vec<f32>]) {
    assert_eq!(actual.len(), expected.len(), "{label}: row count");
    let diff = actual
        .iter()
        .zip(expected)
        .flat_map(|(a, e)| {
            assert_eq!(a.len(), e.len(), "{label}: row width");
            a.iter().zip(e).map(|(x, y)| (x - y).abs())
        })
        .fold(0.0, f32::max);
    eprintln!("{label}: max |Δ| = {diff:.2e}");
    assert!(diff <= TOLERANCE, "{label}: max |Δ| {diff} > {TOLERANCE}");
}

fn samples(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn soft_tokens_and_the_logits_after_them_match_transformers() {
    let dir = fixture_dir();
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let config_json = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let config = AudioConfig::from_json(&config_json).unwrap().expect("the fixture has an audio tower");
    assert_eq!(config.tokens.audio, fixture.meta.audio);
    let extractor = FeatureExtractor::new(FeatureConfig::default()).unwrap();
    for (device_name, device) in devices() {
        let mut checkpoint = Checkpoint::open(&dir).unwrap();
        let tower = AudioTower::load(config.clone(), &mut checkpoint, &device).unwrap();
        let model = ModelFiles::open(&dir).unwrap().load(&device).unwrap();
        for (i, case) in fixture.cases.iter().enumerate() {
            let label = format!("clip {i} ({} samples) on {device_name}", case.samples);
            let clip = samples(&dir.join(&case.input));
            let features = extractor.extract(&clip).unwrap();
            assert_eq!((features.frames, &features.mask), (case.frames, &case.mask), "{label}: frames");
            assert_eq!(AudioConfig::soft_tokens(&features.mask), case.soft_tokens.len(), "{label}: the count");
            let soft = tower.encode(&features).unwrap();
            check(&format!("{label}: soft tokens"), &rows(soft.clone()), &case.soft_tokens);

            // The prompt as the template writes it (one `<|audio|>`), made ready as `hearth
            // generate --audio` makes it: the fixture's tokens, the same soft tokens.
            let t = config.tokens;
            let written: Vec<u32> = case.tokens.iter().copied().filter(|&id| id != t.boa && id != t.eoa).collect();
            let mut written_once = Vec::new();
            for id in written {
                if id != t.audio || written_once.last() != Some(&t.audio) {
                    written_once.push(id);
                }
            }
            let (ids, heard) = prompt::prepare(&tower, &written_once, &clip).unwrap();
            assert_eq!(ids, case.tokens, "{label}: the prompt's audio marker expanded");
            assert_eq!(heard.placeholder, t.audio);
            check(
                &format!("{label}: prepared soft tokens"),
                &rows(heard.images[0].soft_tokens.clone()),
                &case.soft_tokens,
            );

            let soft = SoftTokens { placeholder: config.tokens.audio, rows: soft };
            let small = CacheOptions { max_context: 192, max_chunk: 7 };
            for (options, how) in [(CacheOptions::default(), "in one chunk"), (small, "in chunks of 7")] {
                let mut cache = KvCache::new(&model.config, options, model.device());
                let logits = model
                    .forward(Input::with_images(&case.tokens, Some(&soft)), &mut cache, Output::All)
                    .unwrap()
                    .logits;
                check(
                    &format!("{label}: logits after the clip, {how}"),
                    &rows(logits).split_off(case.logits_from),
                    &case.logits,
                );
            }
        }
    }
}
