//! The vision tower against transformers 5.23 on a tiny random Gemma 4 with the real structure
//! (fixtures/gemma4-vision, made by fixtures/gen_vision_parity.py): from the raw image through
//! the image processor, the tower and the embedder, the soft tokens within 1e-3; then a prompt
//! holding them, the text logits after the image within 1e-3. CPU backend and wgpu; the
//! safetensors folder, llama.cpp's projector file and an MLX 4-bit folder.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor};
use hearth_model::model_dir::ModelFiles;
use hearth_model::vision::{RgbImage, VisionTower};
use hearth_model::{CacheOptions, Gemma, Input, KvCache, Output, PromptMedia, PromptMedium, Session, SoftTokens};
use serde::Deserialize;

mod common;
use common::{check, check_logits_after, check_rows, devices, rows};

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    input: String,
    height: usize,
    width: usize,
    max_soft_tokens: usize,
    tokens: Vec<u32>,
    logits_from: usize,
    soft_tokens: Vec<Vec<f32>>,
    logits: Vec<Vec<f32>>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-vision")
}

/// The tower from the model's own safetensors (transformers' names), and from the projector file
/// llama.cpp's converter wrote for the same weights (its names, its convolution-shaped patch
/// kernel, scalars as 1-element tensors, a config rebuilt from its metadata).
#[test]
fn soft_tokens_and_the_logits_after_them_match_transformers() {
    let dir = fixture_dir();
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    for (device_name, device) in devices() {
        let mut files = ModelFiles::open(&dir).unwrap();
        let from_safetensors = files.load_vision(&device).unwrap().expect("the fixture has a vision tower");
        let from_mmproj = files.load_projector(&dir.join("mmproj.gguf"), &device).unwrap();
        assert_eq!(from_mmproj.config(), from_safetensors.config(), "the projector's metadata gives the same config");
        let model = files.load(&device).unwrap();
        for (layout, tower) in [("safetensors", &from_safetensors), ("mmproj", &from_mmproj)] {
            for (i, case) in fixture.cases.iter().enumerate() {
                let label = format!(
                    "{layout} case {i} ({}×{}, budget {}) on {device_name}",
                    case.width, case.height, case.max_soft_tokens
                );
                check_case(&label, &dir, case, tower, &model);
            }
        }
    }
}

/// The tower from an MLX folder laid out as mlx-vlm writes one (`vision_tower.*`, its linears
/// quantized by MLX to 4 bits in groups of 32; fixtures/gemma4-vision-mlx): transformers' numbers
/// for the values the file describes.
#[test]
fn the_mlx_layout_quantized_by_mlx_matches_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-vision-mlx");
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    for (device_name, device) in devices() {
        let mut files = ModelFiles::open(&dir).unwrap();
        let tower = files.load_vision(&device).unwrap().expect("the MLX folder has a vision tower");
        let model = files.load(&device).unwrap();
        for (i, case) in fixture.cases.iter().enumerate() {
            let label = format!("mlx case {i} on {device_name}");
            check_case(&label, &dir, case, &tower, &model);
        }
    }
}

/// Where the fused kernels run, the MLX tower's 4-bit linears stay packed on the device (the
/// CPU backend holds them as f32): the same tower in less memory, with the numbers above.
#[test]
fn a_quantized_tower_stays_packed_on_the_gpu() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-vision-mlx");
    let bytes: Vec<(&str, u64)> = devices()
        .into_iter()
        .map(|(name, device)| {
            let mut files = ModelFiles::open(&dir).unwrap();
            (name, files.load_vision(&device).unwrap().expect("a tower").weight_bytes())
        })
        .collect();
    eprintln!("the MLX tower's weights on the device: {bytes:?}");
    if let [(_, f32_bytes), (_, packed_bytes)] = bytes[..] {
        // (The tiny tower's position table and patch projection, f32 on both, are half of it.)
        assert!(packed_bytes * 10 < f32_bytes * 6, "packed {packed_bytes} B against f32 {f32_bytes} B");
    }
}

/// A tower stored in 16 bits (f16 or bf16, as transformers saves one and as llama.cpp's projector
/// holds E2B's) stays 16-bit on the device where the kernels run, widened for each product: the
/// same soft tokens as the CPU backend, which widens the same values to f32 once, in about half
/// the memory of its linears.
#[test]
fn a_16_bit_tower_stays_16_bit_on_the_gpu() {
    let source = fixture_dir();
    let fixture: Fixture =
        serde_json::from_str(&std::fs::read_to_string(source.join("expected.json")).unwrap()).unwrap();
    let case = &fixture.cases[0];
    let pixels = std::fs::read(source.join(&case.input)).unwrap();
    let image = RgbImage::new(case.width, case.height, pixels).unwrap();
    for dtype in ["F16", "BF16"] {
        let dir = std::env::temp_dir().join(format!("hearth-vision-{dtype}-{}", std::process::id()));
        write_with_16_bit_linears(&source, &dir, dtype);
        let mut encoded = Vec::new();
        for (device_name, device) in devices() {
            let mut files = ModelFiles::open(&dir).unwrap();
            let tower = files.load_vision(&device).unwrap().expect("a tower");
            let patches = tower.config().processor(case.max_soft_tokens).process(&image).unwrap();
            encoded.push((device_name, rows(tower.encode(&patches).unwrap()), tower.weight_bytes()));
        }
        eprintln!(
            "the {dtype} tower's weights on the device: {:?}",
            encoded.iter().map(|e| (e.0, e.2)).collect::<Vec<_>>()
        );
        if let [(_, cpu, f32_bytes), (gpu_name, gpu, half_bytes)] = &encoded[..] {
            check_rows(&format!("{dtype} soft tokens on {gpu_name} against the CPU"), gpu, cpu, 1e-4);
            // (The tiny tower's position table and patch projection, f32 on both, are a third of it.)
            assert!(half_bytes * 10 < f32_bytes * 8, "{dtype}: {half_bytes} B against f32 {f32_bytes} B");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `source`'s files in `dir`, the vision tower's linear layers (`….linear.weight`) stored as
/// `dtype` ("F16" or "BF16") and every other tensor as f32.
fn write_with_16_bit_linears(source: &Path, dir: &Path, dtype: &str) {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(source).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().unwrap() != "model.safetensors" {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let mut checkpoint = hearth_weights::Checkpoint::open(&source.join("model.safetensors")).unwrap();
    let names: Vec<String> = checkpoint.names().map(str::to_string).collect();
    let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
    for name in names {
        let tensor = checkpoint.read_f32(&name).unwrap();
        let linear = name.starts_with("model.vision_tower.") && name.ends_with(".linear.weight");
        let start = data.len();
        let stored = match linear {
            true if dtype == "F16" => tensor.data.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
            true => tensor.data.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
            false => tensor.data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        };
        data.extend(stored);
        let entry = serde_json::json!({
            "dtype": if linear { dtype } else { "F32" },
            "shape": tensor.shape,
            "data_offsets": [start, data.len()],
        });
        header.insert(name, entry);
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header);
    file.extend(data);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
}

/// From the raw image to the soft tokens, then the logits of a prompt holding them: in one
/// chunk, and in chunks smaller than the image (the soft tokens split across them) through a
/// ring that wraps.
fn check_case(label: &str, dir: &Path, case: &Case, tower: &VisionTower, model: &Gemma) {
    let pixels = std::fs::read(dir.join(&case.input)).unwrap();
    let image = RgbImage::new(case.width, case.height, pixels).unwrap();
    let patches = tower.config().processor(case.max_soft_tokens).process(&image).unwrap();
    let soft = tower.encode(&patches).unwrap();
    check(&format!("{label}: soft tokens"), &rows(soft.clone()), &case.soft_tokens);

    let soft = SoftTokens::new(tower.config().tokens.placeholder, soft);
    check_logits_after(label, "the image", model, (&case.tokens, &soft), case.logits_from, &case.logits);
}

#[test]
fn a_prompt_whose_placeholders_do_not_match_the_soft_tokens_is_refused() {
    let dir = fixture_dir();
    let device = Device::flex();
    let mut files = ModelFiles::open(&dir).unwrap();
    let tower = files.load_vision(&device).unwrap().unwrap();
    let placeholder = tower.config().tokens.placeholder;
    let model = files.load(&device).unwrap();
    let soft = SoftTokens::new(placeholder, Tensor::zeros([3, model.config.hidden_size], &device));
    let mut cache = KvCache::new(&model.config, CacheOptions::default(), model.device());
    let ids = [2, placeholder, placeholder, 5];
    let input = Input::with_images(&ids, Some(&soft));
    let Err(err) = model.forward(input, &mut cache, Output::Last) else {
        panic!("two placeholders took three soft tokens")
    };
    assert_eq!(err.to_string(), "the prompt has 2 image or audio placeholders but 3 soft tokens were given");
}

#[test]
fn a_text_only_model_has_no_tower() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-text");
    let mut files = ModelFiles::open(&dir).unwrap();
    assert!(files.load_vision(&Device::flex()).unwrap().is_none());
}

/// A session reuses a cached prefix holding an image only while the image is the same: the same
/// placeholder tokens with another picture are computed again, and give that picture's logits.
#[test]
fn a_session_reuses_an_image_only_while_it_is_the_same() {
    let dir = fixture_dir();
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let case = &fixture.cases[0];
    let device = Device::flex();
    let mut files = ModelFiles::open(&dir).unwrap();
    let tower = files.load_vision(&device).unwrap().unwrap();
    let placeholder = tower.config().tokens.placeholder;
    let model = files.load(&device).unwrap();
    let encode = |pixels: Vec<u8>| {
        let image = RgbImage::new(case.width, case.height, pixels).unwrap();
        tower.encode(&tower.config().processor(case.max_soft_tokens).process(&image).unwrap()).unwrap()
    };
    let pixels = std::fs::read(dir.join(&case.input)).unwrap();
    let negative: Vec<u8> = pixels.iter().map(|v| 255 - v).collect();
    let (picture, other) = (encode(pixels), encode(negative));
    let images = |key, soft: &Tensor<2>| PromptMedia {
        items: vec![PromptMedium { key, placeholder, soft_tokens: soft.clone() }],
    };
    let fresh = |soft: &Tensor<2>| {
        let mut cache = KvCache::new(&model.config, CacheOptions::default(), model.device());
        let s = SoftTokens::new(placeholder, soft.clone());
        rows(model.forward(Input::with_images(&case.tokens, Some(&s)), &mut cache, Output::Last).unwrap().logits)
    };
    let expected_other = fresh(&other);

    let mut session = Session::new(model, CacheOptions::default());
    let (logits, _) = session.prefill_with(&case.tokens, &images(1, &picture)).unwrap();
    check("first prefill", &rows(logits), &case.logits[case.logits.len() - 1..]);
    let (logits, stats) = session.prefill_with(&case.tokens, &images(1, &picture)).unwrap();
    check("the same image again", &rows(logits), &case.logits[case.logits.len() - 1..]);
    assert_eq!(stats.computed, 1, "the same image: everything but the last token reused");
    let (logits, stats) = session.prefill_with(&case.tokens, &images(2, &other)).unwrap();
    check("another image in the same tokens", &rows(logits), &expected_other);
    let first_placeholder = case.tokens.iter().position(|&t| t == placeholder).unwrap();
    assert!(stats.reused <= first_placeholder, "reused {} tokens, past the image at {first_placeholder}", stats.reused);
}
