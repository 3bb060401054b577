//! The audio tower against transformers 5.23 on a tiny random Gemma 4 with the real structure
//! (fixtures/gemma4-audio, made by fixtures/gen_audio_parity.py): from the raw clip through the
//! feature extractor, the tower and the embedder, the soft tokens within 1e-3; then a prompt
//! holding them, the text logits after the clip within 1e-3. CPU backend and wgpu, from the three
//! layouts: the model's safetensors, llama.cpp's projector file from its own converter, and MLX's
//! (fixtures/gemma4-audio-mlx, its linears quantized by MLX).

use std::path::{Path, PathBuf};

use burn::tensor::Tensor;
use hearth_model::audio::{AudioConfig, AudioTower, FeatureConfig, FeatureExtractor, prompt};
use hearth_model::model_dir::ModelFiles;
use hearth_model::vision::{self, RgbImage};
use hearth_model::{CacheOptions, Gemma, Input, KvCache, Output, PromptMedia, Session, SoftTokens};
use hearth_weights::Checkpoint;
use serde::Deserialize;

mod common;
use common::{check, check_logits_after, devices, rows};

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

fn samples(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn fixture(dir: &Path) -> Fixture {
    serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap()
}

/// The tower from the model's own safetensors (transformers' names), and from the projector file
/// llama.cpp's converter wrote for the same weights (its names, the softplus it stores, the
/// depthwise kernel flattened, scalars as 1-element tensors, a config rebuilt from its metadata
/// and the tensors' shapes).
#[test]
fn soft_tokens_and_the_logits_after_them_match_transformers() {
    let dir = fixture_dir();
    let fixture = fixture(&dir);
    let config_json = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let config = AudioConfig::from_json(&config_json).unwrap().expect("the fixture has an audio tower");
    assert_eq!(config.tokens.placeholder, fixture.meta.audio);
    for (device_name, device) in devices() {
        let mut checkpoint = Checkpoint::open(&dir).unwrap();
        let tower = AudioTower::load(config.clone(), &mut checkpoint, &device).unwrap();
        let files = ModelFiles::open(&dir).unwrap();
        let from_mmproj = files.load_audio_projector(&dir.join("mmproj.gguf"), &device).unwrap();
        let from_mmproj = from_mmproj.expect("the projector file carries the audio tower");
        assert_eq!(from_mmproj.config(), tower.config(), "the projector's metadata gives the same config");
        let model = files.load(&device).unwrap();
        for (layout, tower) in [("safetensors", &tower), ("mmproj", &from_mmproj)] {
            for (i, case) in fixture.cases.iter().enumerate() {
                let label = format!("{layout} clip {i} ({} samples) on {device_name}", case.samples);
                check_case(&label, &dir, case, tower, &model);
            }
        }
    }
}

/// The tower from an MLX folder laid out as mlx-vlm writes one (`audio_tower.*`, its linears
/// quantized by MLX to 4 bits in groups of 32): transformers' numbers for the values the file
/// describes; on the GPU the 4-bit linears stay packed.
#[test]
fn the_mlx_layout_quantized_by_mlx_matches_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-audio-mlx");
    let fixture = fixture(&dir);
    let mut bytes = Vec::new();
    for (device_name, device) in devices() {
        let mut files = ModelFiles::open(&dir).unwrap();
        let tower = files.load_audio(&device).unwrap().expect("the MLX folder has an audio tower");
        bytes.push(tower.weight_bytes());
        let model = files.load(&device).unwrap();
        for (i, case) in fixture.cases.iter().enumerate() {
            check_case(&format!("mlx clip {i} on {device_name}"), &dir, case, &tower, &model);
        }
    }
    eprintln!("the MLX audio tower's weights on the device (CPU, GPU): {bytes:?}");
    if let [f32_bytes, packed_bytes] = bytes[..] {
        assert!(packed_bytes * 10 < f32_bytes * 6, "packed {packed_bytes} B against f32 {f32_bytes} B");
    }
}

/// From the raw clip to the soft tokens, then the logits of a prompt holding them, in one chunk
/// and in chunks of 7.
fn check_case(label: &str, dir: &Path, case: &Case, tower: &AudioTower, model: &Gemma) {
    let extractor = FeatureExtractor::new(FeatureConfig::default()).unwrap();
    let config = tower.config();
    let clip = samples(&dir.join(&case.input));
    let features = extractor.extract(&clip).unwrap();
    assert_eq!((features.frames, &features.mask), (case.frames, &case.mask), "{label}: frames");
    assert_eq!(AudioConfig::soft_tokens(&features.mask), case.soft_tokens.len(), "{label}: the count");
    let soft = tower.encode(&features).unwrap();
    check(&format!("{label}: soft tokens"), &rows(soft.clone()), &case.soft_tokens);

    // The prompt as the template writes it (one `<|audio|>`), made ready as `hearth generate
    // --audio` makes it: the fixture's tokens, the same soft tokens.
    let t = config.tokens;
    let written: Vec<u32> = case.tokens.iter().copied().filter(|&id| id != t.open && id != t.close).collect();
    let mut written_once = Vec::new();
    for id in written {
        if id != t.placeholder || written_once.last() != Some(&t.placeholder) {
            written_once.push(id);
        }
    }
    let (ids, heard) = prompt::prepare(tower, &written_once, &clip).unwrap();
    assert_eq!(ids, case.tokens, "{label}: the prompt's audio marker expanded");
    assert_eq!(heard.items[0].placeholder, t.placeholder);
    check(&format!("{label}: prepared soft tokens"), &rows(heard.items[0].soft_tokens.clone()), &case.soft_tokens);

    let soft = SoftTokens::new(config.tokens.placeholder, soft);
    check_logits_after(label, "the clip", model, (&case.tokens, &soft), case.logits_from, &case.logits);
}

#[derive(Deserialize)]
struct Mixed {
    clip: String,
    image: String,
    width: usize,
    height: usize,
    budget: usize,
    tokens: Vec<u32>,
    logits_from: usize,
    logits: Vec<Vec<f32>>,
}

/// A spoken request and a screenshot in one prompt (fixtures/gemma4-audio/mixed.json): the clip's
/// and the image's soft tokens each at their own placeholders, through a session as a task runs
/// it, in one chunk and in chunks of 7; transformers' logits at the text positions after the clip.
#[test]
fn a_prompt_holding_a_clip_and_an_image_matches_transformers() {
    let dir = fixture_dir();
    let mixed: Mixed = serde_json::from_str(&std::fs::read_to_string(dir.join("mixed.json")).unwrap()).unwrap();
    let pixels = std::fs::read(dir.join(&mixed.image)).unwrap();
    let image = RgbImage::new(mixed.width, mixed.height, pixels).unwrap();
    for (device_name, device) in devices() {
        let mut files = ModelFiles::open(&dir).unwrap();
        let eyes = files.load_vision(&device).unwrap().expect("the fixture has a vision tower");
        let ears = files.load_audio(&device).unwrap().expect("the fixture has an audio tower");
        let model = files.load(&device).unwrap();
        let (audio, image_tokens) = (ears.config().tokens, eyes.config().tokens);
        // As the template writes it: one marker each.
        let mut written = Vec::new();
        for &id in &mixed.tokens {
            let marker = id == audio.placeholder || id == image_tokens.placeholder;
            let boundary = [audio.open, audio.close, image_tokens.open, image_tokens.close].contains(&id);
            if !boundary && (!marker || written.last() != Some(&id)) {
                written.push(id);
            }
        }
        let (ids, heard) = prompt::prepare(&ears, &written, &samples(&dir.join(&mixed.clip))).unwrap();
        let (ids, seen) = vision::prompt::prepare(&eyes, &ids, std::slice::from_ref(&image), mixed.budget).unwrap();
        assert_eq!(ids, mixed.tokens, "on {device_name}: both markers expanded");
        // Listed image first: the merge orders them as the prompt does.
        let media = PromptMedia::interleaved(&ids, vec![seen, heard]);
        assert_eq!(
            media.items.iter().map(|m| m.placeholder).collect::<Vec<_>>(),
            [audio.placeholder, image_tokens.placeholder]
        );

        let rows_of = |media: &PromptMedia| {
            let all: Vec<_> = media.items.iter().map(|m| m.soft_tokens.clone()).collect();
            SoftTokens { placeholders: vec![audio.placeholder, image_tokens.placeholder], rows: Tensor::cat(all, 0) }
        };
        // The rows at text positions, as the other cases compare (at a placeholder, a random
        // model's logits magnify the soft tokens' last bits).
        let text_rows = |all: &[Vec<f32>]| -> Vec<Vec<f32>> {
            let tokens = &mixed.tokens[mixed.logits_from..];
            all.iter()
                .zip(tokens)
                .filter(|(_, t)| **t != image_tokens.placeholder)
                .map(|(row, _)| row.clone())
                .collect()
        };
        let small = CacheOptions { max_context: 192, max_chunk: 7 };
        for (options, how) in [(CacheOptions::default(), "in one chunk"), (small, "in chunks of 7")] {
            let label = format!("mixed prompt on {device_name}, {how}");
            let mut cache = KvCache::new(&model.config, options, model.device());
            let soft = rows_of(&media);
            let logits = model.forward(Input::with_images(&ids, Some(&soft)), &mut cache, Output::All).unwrap().logits;
            let got = rows(logits).split_off(mixed.logits_from);
            check(&label, &text_rows(&got), &text_rows(&mixed.logits));
        }
        // Through a session, as an agent's step prefills it: the last position's logits.
        let mut session = Session::new(model, CacheOptions { max_context: 192, max_chunk: 7 });
        let (last, _) = session.prefill_with(&ids, &media).unwrap();
        let expected = mixed.logits.last().expect("the fixture has logits");
        check(&format!("mixed prompt through a session on {device_name}"), &rows(last), std::slice::from_ref(expected));
    }
}
