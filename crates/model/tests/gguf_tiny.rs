//! GGUF files end to end without real weights, each a tiny random model written like llama.cpp's
//! converter writes one (llama.cpp's tensor names and metadata keys, mixed quantized types,
//! tokenizer and config only in the metadata):
//! - fixtures/gemma3-gguf (gen_gguf_tiny.py): Gemma 3, norms stored as 1 + w, a SentencePiece
//!   vocabulary without merges;
//! - fixtures/gemma4-gguf (gen_gguf_gemma4.py): Gemma 4 in E2B's layout (per-layer embeddings, KV
//!   sharing, double-wide MLPs, proportional RoPE through the `rope_freqs` tensor), a BPE
//!   vocabulary with merges.
//!
//! The config and tokenizer rebuilt from the metadata, and the logits of the weights read through
//! the GGUF checkpoint, must match transformers (and the `tokenizers` library).

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor};
use hearth_model::config::LayerType;
use hearth_model::model_dir::ModelFiles;
use hearth_model::{CacheOptions, Input, KvCache, Output, Sampler, SamplingOptions, Session, gpu};
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

const CASES: [&str; 2] = ["gemma3-gguf", "gemma4-gguf"];

fn fixture(case: &str) -> (PathBuf, Expected) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(case);
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("fixture present");
    (dir.join("model.gguf"), serde_json::from_str(&text).expect("fixture parses"))
}

#[test]
fn gemma3_config_comes_from_the_gguf_metadata() {
    let (path, _) = fixture("gemma3-gguf");
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
fn gemma4_config_comes_from_the_gguf_metadata() {
    let (path, _) = fixture("gemma4-gguf");
    let c = ModelFiles::open(&path).unwrap().config().unwrap();
    assert_eq!((c.hidden_size, c.num_layers, c.num_heads, c.vocab_size), (32, 6, 2, 384));
    assert_eq!((c.norm_weight_offset, c.attention_scale, c.final_logit_softcap), (0.0, 1.0, Some(30.0)));
    assert_eq!((c.per_layer_input_size, c.sliding_window), (Some(16), 8));
    let shape = |i: usize| {
        let l = &c.layers[i];
        (l.kind, l.head_dim, l.num_kv_heads, l.intermediate_size, l.kv_producer)
    };
    assert_eq!(shape(0), (LayerType::Sliding, 16, 1, 32, None));
    assert_eq!(shape(2), (LayerType::Full, 32, 1, 32, None));
    // Layers 4 and 5 reuse the K/V of the last earlier layer of their type; their MLPs are doubled.
    assert_eq!(shape(4), (LayerType::Sliding, 16, 1, 64, Some(3)));
    assert_eq!(shape(5), (LayerType::Full, 32, 1, 64, Some(2)));
    // <eos>, <turn|> and <|tool_response>, as Gemma 4's generation_config.json stops.
    assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (2, vec![1, 106, 50]));
}

#[test]
fn tokenizer_from_metadata_matches_the_reference() {
    for case_name in CASES {
        let (path, expected) = fixture(case_name);
        let tokenizer = ModelFiles::open(&path).unwrap().tokenizer().unwrap();
        for case in &expected.tokenizer {
            assert_eq!(tokenizer.encode(&case.text).unwrap(), case.ids, "{case_name}: {:?}", case.text);
            assert_eq!(tokenizer.decode(&case.ids).unwrap(), case.decoded, "{case_name}: {:?}", case.text);
        }
        // The tokens the agent neutralizes in page text are exactly those matched whole.
        let added = tokenizer.added_tokens();
        assert!(added.iter().any(|t| t == "<eos>"), "{case_name}: {added:?}");
        for token in added.iter().filter(|t| !t.trim().is_empty()) {
            assert_eq!(tokenizer.encode(token).unwrap().len(), 1, "{case_name}: {token:?} is one token");
        }
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
    for case in CASES {
        logits_and_greedy_tokens_match(case);
    }
}

fn logits_and_greedy_tokens_match(case: &str) {
    let (path, expected) = fixture(case);
    for (device_name, device) in devices() {
        let name = format!("{case} on {device_name}");
        let model = ModelFiles::open(&path).unwrap().load(&device).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut cache = KvCache::new(&model.config, CacheOptions::default(), &device);
        let logits: Tensor<2> = model.forward(Input::ids(&expected.tokens), &mut cache, Output::All).unwrap().logits;
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
