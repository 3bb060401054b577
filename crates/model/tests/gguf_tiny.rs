//! A GGUF file end to end without real weights: fixtures/gemma3-gguf/model.gguf is a tiny random
//! Gemma 3 written like llama.cpp's converter writes one (gen_gguf_tiny.py: llama.cpp's tensor
//! names, norms stored as 1 + w, mixed quantized types, tokenizer and config only in the
//! metadata). The config and tokenizer rebuilt from the metadata, and the logits of the weights
//! read through the GGUF checkpoint, must match transformers.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor};
use hearth_model::config::LayerType;
use hearth_model::model_dir::ModelFiles;
use hearth_model::{CacheOptions, KvCache, Sampler, SamplingOptions, Session, gpu};
use serde::Deserialize;

#[derive(Deserialize)]
struct Expected {
    tokenizer: Vec<TokenizerCase>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

#[derive(Deserialize)]
struct TokenizerCase {
    text: String,
    ids: Vec<u32>,
    decoded: String,
}

fn fixture() -> (PathBuf, Expected) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma3-gguf");
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("fixture present");
    (dir.join("model.gguf"), serde_json::from_str(&text).expect("fixture parses"))
}

#[test]
fn config_comes_from_the_gguf_metadata() {
    let (path, _) = fixture();
    let files = ModelFiles::open(&path).unwrap();
    assert!(files.is_gguf());
    let c = files.config().unwrap();
    assert_eq!((c.hidden_size, c.num_layers, c.num_heads, c.vocab_size), (32, 6, 2, 391));
    assert_eq!((c.layers[0].head_dim, c.layers[0].num_kv_heads, c.layers[0].intermediate_size), (16, 1, 64));
    let kinds: Vec<LayerType> = c.layers.iter().map(|l| l.kind).collect();
    assert_eq!(kinds[..5], [LayerType::Sliding; 5]);
    assert_eq!(kinds[5], LayerType::Full);
    assert_eq!(c.sliding_window, 4);
    assert_eq!(c.norm_weight_offset, 1.0);
    assert_eq!(c.attention_scale, 16f32.powf(-0.5));
    assert_eq!(c.final_logit_softcap, None);
    // Sliding layers use the default local base 1e4, full layers the file's 1e6.
    assert!((c.layers[0].rope.inv_freq[1] - 1e4f32.powf(-2.0 / 16.0)).abs() < 1e-9);
    assert!((c.layers[5].rope.inv_freq[1] - 1e6f32.powf(-2.0 / 16.0)).abs() < 1e-9);
    assert_eq!(c.bos_token_id, 2);
    // <eos>, and <end_of_turn> (id 6 in this vocabulary) as Gemma 3's generation_config.json has it.
    assert_eq!(c.eos_token_ids, vec![1, 6]);
}

#[test]
fn tokenizer_from_metadata_matches_transformers() {
    let (path, expected) = fixture();
    let tokenizer = ModelFiles::open(&path).unwrap().tokenizer().unwrap();
    for case in &expected.tokenizer {
        assert_eq!(tokenizer.encode(&case.text).unwrap(), case.ids, "{:?}", case.text);
        assert_eq!(tokenizer.decode(&case.ids).unwrap(), case.decoded, "{:?}", case.text);
    }
}

fn devices() -> Vec<(&'static str, Device)> {
    let mut devices = vec![("cpu", Device::flex())];
    match gpu::init_gpu_blocking() {
        Ok(gpu) => devices.push(("wgpu", gpu.device)),
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => eprintln!("no GPU, CPU only: {err}"),
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    }
    devices
}

#[test]
fn logits_and_greedy_tokens_match_transformers() {
    let (path, expected) = fixture();
    for (name, device) in devices() {
        let model = ModelFiles::open(&path).unwrap().load(&device).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut cache = KvCache::new(&model.config, CacheOptions::default(), &device);
        let logits: Tensor<2> = model.forward(&expected.tokens, &mut cache, true).unwrap();
        let vocab = logits.dims()[1];
        let values: Vec<f32> = pollster::block_on(logits.into_data_async()).unwrap().try_into_vec().unwrap();
        let diff = values
            .chunks(vocab)
            .zip(&expected.logits)
            .flat_map(|(a, e)| a.iter().zip(e).map(|(x, y)| (x - y).abs()))
            .fold(0.0f32, f32::max);
        eprintln!("{name}: max |Δlogit| = {diff:.2e}");
        assert!(diff <= 1e-3, "{name}: max |Δlogit| {diff}");

        let mut session = Session::new(model, CacheOptions::default());
        let mut sampler = Sampler::new(SamplingOptions::greedy());
        let (mut logits, _) = session.prefill(&expected.tokens).unwrap();
        let mut greedy = Vec::new();
        for _ in 0..expected.greedy.len() {
            let id = pollster::block_on(sampler.sample(logits)).unwrap();
            greedy.push(id);
            logits = session.step(id).unwrap();
        }
        assert_eq!(greedy, expected.greedy, "{name}");
    }
}
