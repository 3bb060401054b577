//! Every source builds the same model: files on disk (read a window at a time, as the browser
//! reads its store), bytes given whole, and the model crate's own loader as the reference; a
//! sharded folder, a folder's tower and llama.cpp's projector file for it; what a failure means.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor};
use hearth_model::model_dir::ModelFiles;
use hearth_model::vision::{RgbImage, VisionTower};
use hearth_model::{CacheOptions, Gemma, Input, KvCache, Output};

use crate::loading::{LoadFailure, Loaded, ModelPayload, ReadRange, StreamedWeights, load};
use crate::native::{self, LoadError, ModelSource, Vision};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures").join(name)
}

/// The last position's logits for a fixed prompt.
fn logits(model: &Gemma) -> Vec<f32> {
    let ids: Vec<u32> = (0..12).map(|i| 2 + (i * 37) % (model.config.vocab_size as u32 - 2)).collect();
    let mut cache = KvCache::new(&model.config, CacheOptions::default(), model.device());
    let logits = model.forward(Input::ids(&ids), &mut cache, Output::Last).expect("a forward pass").logits;
    logits.into_data().try_to_vec::<f32>().expect("f32 logits")
}

fn loaded(payload: ModelPayload<impl ReadRange>, device: &Device) -> Loaded {
    pollster::block_on(load(payload, device, &|_, _| {})).expect("the fixture loads")
}

/// A folder read from disk without its own tokenizer and template (the parity fixtures carry
/// only weights and config): tiny-chat's stand in.
fn payload_with_tiny_chats_text(
    model: &Path,
    mmproj: Option<PathBuf>,
    vision: Vision,
) -> ModelPayload<native::DiskFiles> {
    let tokenizer = Some(fixture("tiny-chat"));
    let source = ModelSource { model: model.to_path_buf(), tokenizer, mmproj, ..Default::default() };
    let mut payload = native::payload(&source, vision).expect("the fixture's files");
    payload.parts.chat_template = Some(std::fs::read_to_string(fixture("tiny-chat/chat_template.jinja")).unwrap());
    payload
}

#[test]
fn every_source_builds_the_same_model() {
    let device = Device::flex();
    let dir = fixture("tiny-chat");
    let reference = ModelFiles::open(&dir).unwrap().load(&device).unwrap();

    // From disk, as `hearth agent` loads it; the steps reported in order.
    let steps = RefCell::new(Vec::new());
    let source = ModelSource { model: dir.clone(), ..Default::default() };
    let payload = native::payload(&source, Vision::IfPresent).unwrap();
    let from_disk = pollster::block_on(load(payload, &device, &|done, total| steps.borrow_mut().push((done, total))))
        .expect("tiny-chat loads from disk");
    let steps = steps.into_inner();
    assert!(!steps.is_empty() && steps.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 == w[1].1), "{steps:?}");
    let file_size = std::fs::metadata(dir.join("model.safetensors")).unwrap().len();
    assert_eq!(from_disk.file_bytes, file_size);
    assert!(from_disk.peak_read_bytes > 0 && from_disk.peak_read_bytes <= file_size, "{}", from_disk.peak_read_bytes);
    assert!(from_disk.tower.is_some() && from_disk.vision_failure.is_none(), "tiny-chat carries a tower");

    // Whole in memory, as the browser's bundled test model arrives.
    let parts = native::payload(&source, Vision::Off).unwrap().parts;
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let weights = StreamedWeights::in_memory("model.safetensors", bytes);
    let whole = ModelPayload {
        name: "tiny-chat".into(),
        parts,
        weights,
        vision: false,
        audio: false,
        projector: None,
        drafter: None,
    };
    let in_memory = loaded(whole, &device);
    assert!(in_memory.tower.is_none(), "vision off loads no tower");

    let expected = logits(&reference);
    assert_eq!(logits(&from_disk.model), expected, "from disk");
    assert_eq!(logits(&in_memory.model), expected, "in memory");
}

#[test]
fn a_gguf_file_and_a_sharded_folder_load_as_the_model_crate_loads_them() {
    let device = Device::flex();
    let gguf = fixture("gemma4-gguf/model.gguf");
    let reference = ModelFiles::open(&gguf).unwrap().load(&device).unwrap();
    let source = ModelSource { model: gguf, ..Default::default() };
    let from_disk = loaded(native::payload(&source, Vision::IfPresent).unwrap(), &device);
    assert!(from_disk.tower.is_none(), "a GGUF file's tower is a separate projector file");
    assert_eq!(logits(&from_disk.model), logits(&reference), "GGUF");

    let sharded = fixture("gemma4-multimodal");
    let reference = ModelFiles::open(&sharded).unwrap().load(&device).unwrap();
    let payload = payload_with_tiny_chats_text(&sharded, None, Vision::Off);
    assert_eq!(payload.weights.file_bytes(), shard_bytes(&sharded));
    assert_eq!(logits(&loaded(payload, &device).model), logits(&reference), "three shards");
}

fn shard_bytes(dir: &Path) -> u64 {
    (1..=3).map(|i| std::fs::metadata(dir.join(format!("model-0000{i}-of-00003.safetensors"))).unwrap().len()).sum()
}

/// The soft tokens of the fixture's first image.
fn soft_tokens(tower: &VisionTower) -> Vec<f32> {
    let pixels = std::fs::read(fixture("gemma4-vision/case0.rgb")).unwrap();
    let image = RgbImage::new(97, 61, pixels).unwrap();
    let patches = tower.config().processor(70).process(&image).unwrap();
    let soft: Tensor<2> = tower.encode(&patches).unwrap();
    soft.into_data().try_to_vec::<f32>().unwrap()
}

#[test]
fn a_projector_file_gives_the_tower_the_folder_carries() {
    let device = Device::flex();
    let dir = fixture("gemma4-vision");
    let own = loaded(payload_with_tiny_chats_text(&dir, None, Vision::IfPresent), &device);
    let own = own.tower.expect("the folder's weights carry the tower");
    let payload = payload_with_tiny_chats_text(&dir, Some(dir.join("mmproj.gguf")), Vision::IfPresent);
    let projected = loaded(payload, &device);
    assert!(projected.vision_failure.is_none(), "{:?}", projected.vision_failure);
    let projected = projected.tower.expect("the projector's tower");
    assert_eq!(projected.config(), own.config(), "the projector's metadata gives the same config");
    let (a, b) = (soft_tokens(&own), soft_tokens(&projected));
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    assert!(a.len() == b.len() && diff <= 1e-5, "max |Δ| {diff}");
}

/// The audio tower loads only when asked for (voice input on), from the folder's weights or the
/// projector file; the vision tower either way.
#[test]
fn the_audio_tower_loads_only_for_voice_input() {
    let device = Device::flex();
    let dir = fixture("gemma4-audio");
    for mmproj in [None, Some(dir.join("mmproj.gguf"))] {
        for hearing in [false, true] {
            let mut payload = payload_with_tiny_chats_text(&dir, mmproj.clone(), Vision::IfPresent);
            payload.audio = hearing;
            let model = loaded(payload, &device);
            let from = if mmproj.is_some() { "the projector" } else { "the folder" };
            assert!(model.tower.is_some(), "{from}: {:?}", model.vision_failure);
            assert!(model.audio_failure.is_none(), "{from}: {:?}", model.audio_failure);
            assert_eq!(model.audio.is_some(), hearing, "{from}, hearing {hearing}");
        }
    }
}

/// A copy of tiny-chat in a fresh folder, to spoil.
fn tiny_chat_copy(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-loading-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture("tiny-chat")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

#[test]
fn cut_weights_are_damage_and_a_model_hearth_cannot_run_is_not() {
    let device = Device::flex();
    let cut = tiny_chat_copy("cut");
    let weights = cut.join("model.safetensors");
    let size = std::fs::metadata(&weights).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&weights).unwrap().set_len(size * 2 / 3).unwrap();
    let source = ModelSource { model: cut.clone(), ..Default::default() };
    match native::load(
        &source,
        Vision::Off,
        &device,
        hearth_model::DeviceMemory { max_buffer_bytes: u64::MAX, max_binding_bytes: u64::MAX },
    ) {
        Err(LoadError::Load(LoadFailure { damaged: true, message })) => assert!(!message.is_empty()),
        other => panic!("a cut file is damage: {:?}", other.err()),
    }
    std::fs::remove_dir_all(&cut).unwrap();

    let foreign = tiny_chat_copy("foreign");
    let config = std::fs::read_to_string(foreign.join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config["model_type"] = "llama".into();
    if let Some(text) = config.get_mut("text_config") {
        text["model_type"] = "llama".into();
    }
    std::fs::write(foreign.join("config.json"), config.to_string()).unwrap();
    let source = ModelSource { model: foreign.clone(), ..Default::default() };
    match native::load(
        &source,
        Vision::Off,
        &device,
        hearth_model::DeviceMemory { max_buffer_bytes: u64::MAX, max_binding_bytes: u64::MAX },
    ) {
        Err(LoadError::Load(LoadFailure { damaged: false, message })) => {
            assert!(message.contains("llama"), "{message}")
        }
        other => panic!("a model of another architecture is not damage: {:?}", other.err()),
    }
    std::fs::remove_dir_all(&foreign).unwrap();
}

#[test]
fn an_assistant_that_does_not_load_leaves_the_model_working_and_says_why() {
    let device = Device::flex();
    let source = ModelSource {
        model: fixture("tiny-chat"),
        drafter: Some(fixture("tiny-chat-assistant")),
        ..Default::default()
    };
    let with_assistant = loaded(native::payload(&source, Vision::Off).unwrap(), &device);
    assert!(with_assistant.drafter.is_some() && with_assistant.drafter_name.is_some());

    // An assistant whose weights are not a safetensors file.
    let spoiled = std::env::temp_dir().join(format!("hearth-loading-assistant-{}", std::process::id()));
    std::fs::create_dir_all(&spoiled).unwrap();
    std::fs::copy(fixture("tiny-chat-assistant/config.json"), spoiled.join("config.json")).unwrap();
    std::fs::write(spoiled.join("model.safetensors"), b"not weights at all").unwrap();
    let source = ModelSource { drafter: Some(spoiled.clone()), ..source };
    let without = loaded(native::payload(&source, Vision::Off).unwrap(), &device);
    std::fs::remove_dir_all(&spoiled).unwrap();
    assert!(without.drafter.is_none() && without.drafter_name.is_none());
    assert!(without.drafter_failure.is_some());
    assert_eq!(logits(&without.model), logits(&with_assistant.model));
}
