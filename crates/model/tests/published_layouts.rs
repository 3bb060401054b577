//! Gemma 4 E2B and E4B as published, without their weights: the config values of
//! ../shared/reference/gemma4-published-files.md (the `Published` table below is their one copy
//! here) written as the two layouts Hearth loads, tensor tables only:
//! - GGUF, llama.cpp's names, shapes and `gemma4.*` keys (as benches/gguf_layout.py writes them);
//! - MLX 4-bit, mlx-community's names (`language_model.model.…`, codes + scales + biases), in both
//!   published revisions (k/v kept on KV-shared layers and a bf16 `per_layer_model_projection`;
//!   the July 2026 re-conversion without either).
//!
//! The config each yields and the loader's whole plan (every tensor, its shape, its layer) are
//! checked against the published facts, written out as literals, and against the tables.

use hearth_model::cache::KV_BUDGET_BYTES;
use hearth_model::config::{GEMMA4_STOP_IDS, LayerType, TextConfig};
use hearth_model::gemma::{MAX_TENSOR_BYTES, PlannedTensor};
use hearth_model::{CacheOptions, DeviceMemory, GemmaLoader};
use hearth_weights::{Checkpoint, Quantization, WindowedSource, Windows};
use serde_json::{Value, json};

/// What distinguishes E2B from E4B (gemma4-published-files.md, config.json table).
struct Published {
    hidden: usize,
    layers: usize,
    kv_heads: usize,
    intermediate: usize,
    double_wide: bool,
    /// One full-attention layer after every `period - 1` sliding ones.
    period: usize,
    kv_shared: usize,
}

const E2B: Published = Published {
    hidden: 1536,
    layers: 35,
    kv_heads: 1,
    intermediate: 6144,
    double_wide: true,
    period: 5,
    kv_shared: 20,
};
const E4B: Published = Published {
    hidden: 2560,
    layers: 42,
    kv_heads: 2,
    intermediate: 10240,
    double_wide: false,
    period: 6,
    kv_shared: 18,
};
// Both.
const HEADS: usize = 8;
const SLIDING_DIM: usize = 256;
const FULL_DIM: usize = 512;
const PLE: usize = 256;
const VOCAB: usize = 262_144;
const WINDOW: usize = 512;

impl Published {
    fn sliding(&self, i: usize) -> bool {
        i % self.period != self.period - 1
    }

    fn first_shared(&self) -> usize {
        self.layers - self.kv_shared
    }

    fn head_dim(&self, i: usize) -> usize {
        if self.sliding(i) { SLIDING_DIM } else { FULL_DIM }
    }

    fn mlp(&self, i: usize) -> usize {
        self.intermediate * if self.double_wide && i >= self.first_shared() { 2 } else { 1 }
    }

    /// The text part of config.json.
    fn text_config(&self) -> Value {
        let types: Vec<&str> =
            (0..self.layers).map(|i| if self.sliding(i) { "sliding_attention" } else { "full_attention" }).collect();
        json!({
            "model_type": "gemma4_text", "hidden_size": self.hidden, "num_hidden_layers": self.layers,
            "num_attention_heads": HEADS, "num_key_value_heads": self.kv_heads,
            "head_dim": SLIDING_DIM, "global_head_dim": FULL_DIM,
            "intermediate_size": self.intermediate, "use_double_wide_mlp": self.double_wide,
            "hidden_size_per_layer_input": PLE, "vocab_size": VOCAB, "vocab_size_per_layer_input": VOCAB,
            "num_kv_shared_layers": self.kv_shared, "layer_types": types, "sliding_window": WINDOW,
            "rope_parameters": {
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
            "final_logit_softcapping": 30.0, "max_position_embeddings": 131_072, "tie_word_embeddings": true,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "attention_bias": false,
            "attention_k_eq_v": false, "enable_moe_block": false,
        })
    }

    /// mlx-community's config.json: the multimodal wrapper, 4-bit groups of 64.
    fn mlx_config(&self) -> String {
        json!({
            "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": self.text_config(), "vision_config": {}, "audio_config": {},
            "eos_token_id": [1, 106],
            "quantization": {"group_size": 64, "bits": 4, "mode": "affine"},
        })
        .to_string()
    }
}

// --- MLX: a safetensors header --------------------------------------------------------------

/// Which mlx-community conversion (gemma4-published-files.md).
#[derive(Clone, Copy, Debug)]
enum MlxRevision {
    /// `2c3e5074…` / `cc3b666c…`: bf16 `per_layer_model_projection`, k/v kept on shared layers.
    First,
    /// The July 2026 re-conversions: the projection quantized, the shared layers' k/v dropped.
    July,
}

fn mlx_tensors(p: &Published, revision: MlxRevision) -> Vec<(String, &'static str, Vec<usize>)> {
    let mut tensors = Vec::new();
    let mut bf16 = |name: String, shape: Vec<usize>| tensors.push((name, "BF16", shape));
    let mut quantized = Vec::new();
    let mut matrix = |name: String, rows: usize, cols: usize| quantized.push((name, rows, cols));
    let text = "language_model.model.";
    let h = p.hidden;
    matrix(format!("{text}embed_tokens"), VOCAB, h);
    matrix(format!("{text}embed_tokens_per_layer"), VOCAB, p.layers * PLE);
    match revision {
        MlxRevision::First => bf16(format!("{text}per_layer_model_projection.weight"), vec![p.layers * PLE, h]),
        MlxRevision::July => matrix(format!("{text}per_layer_model_projection"), p.layers * PLE, h),
    }
    bf16(format!("{text}per_layer_projection_norm.weight"), vec![PLE]);
    bf16(format!("{text}norm.weight"), vec![h]);
    for i in 0..p.layers {
        let l = format!("{text}layers.{i}.");
        let (d, kv) = (p.head_dim(i), p.kv_heads * p.head_dim(i));
        matrix(format!("{l}self_attn.q_proj"), HEADS * d, h);
        if i < p.first_shared() || matches!(revision, MlxRevision::First) {
            matrix(format!("{l}self_attn.k_proj"), kv, h);
            matrix(format!("{l}self_attn.v_proj"), kv, h);
            bf16(format!("{l}self_attn.k_norm.weight"), vec![d]);
        }
        matrix(format!("{l}self_attn.o_proj"), h, HEADS * d);
        bf16(format!("{l}self_attn.q_norm.weight"), vec![d]);
        matrix(format!("{l}mlp.gate_proj"), p.mlp(i), h);
        matrix(format!("{l}mlp.up_proj"), p.mlp(i), h);
        matrix(format!("{l}mlp.down_proj"), h, p.mlp(i));
        matrix(format!("{l}per_layer_input_gate"), PLE, h);
        matrix(format!("{l}per_layer_projection"), h, PLE);
        for norm in [
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
            "post_per_layer_input_norm",
        ] {
            bf16(format!("{l}{norm}.weight"), vec![h]);
        }
        bf16(format!("{l}layer_scalar"), vec![1]);
    }
    // The towers the text decoder never reads.
    bf16("vision_tower.encoder.layers.0.self_attn.q_proj.weight".into(), vec![768, 768]);
    bf16("audio_tower.layers.0.feed_forward.weight".into(), vec![1536, 1536]);
    bf16("embed_vision.embedding_projection.weight".into(), vec![h, 768]);
    for (module, rows, cols) in quantized {
        tensors.push((format!("{module}.weight"), "U32", vec![rows, cols / 8]));
        tensors.push((format!("{module}.scales"), "BF16", vec![rows, cols / 64]));
        tensors.push((format!("{module}.biases"), "BF16", vec![rows, cols / 64]));
    }
    tensors
}

/// A checkpoint over a safetensors file of which only the header has been fetched.
fn mlx_checkpoint(p: &Published, revision: MlxRevision) -> Checkpoint {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, dtype, shape) in mlx_tensors(p, revision) {
        let bytes = shape.iter().product::<usize>() * if dtype == "U32" { 4 } else { 2 };
        header.insert(name, json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}));
        offset += bytes;
    }
    let header = Value::Object(header).to_string().into_bytes();
    let bytes = [&(header.len() as u64).to_le_bytes()[..], &header].concat();
    let windows = Windows::default();
    let len = (bytes.len() + offset) as u64;
    windows.insert(0, bytes);
    let source = WindowedSource::new("model.safetensors", len, windows);
    let mut checkpoint = Checkpoint::from_sources(vec![Box::new(source)]).expect("the header parses");
    checkpoint.set_quantization(Quantization::from_config_json(&p.mlx_config()).unwrap());
    checkpoint
}

// --- GGUF: a header with metadata and the tensor table --------------------------------------

/// A ggml type: (id, values per block, bytes per block).
type Ggml = (u32, u64, u64);
const F32: Ggml = (0, 1, 4);
const Q4_0: Ggml = (2, 32, 18);
const Q4_K: Ggml = (12, 256, 144);
const Q6_K: Ggml = (14, 256, 210);
const BF16: Ggml = (30, 1, 2);

/// llama.cpp's tensors, `ne` innermost first (benches/gguf_layout.py): E2B Q4_0 (the QAT file),
/// E4B Q4_K; both embedding tables Q6_K; KV-shared layers carry no keys or values.
fn gguf_tensors(p: &Published) -> Vec<(String, Vec<u64>, Ggml)> {
    let matrix = if p.double_wide { Q4_0 } else { Q4_K };
    let (h, layers) = (p.hidden as u64, p.layers as u64);
    let ple = PLE as u64;
    let mut out = vec![
        ("token_embd.weight".to_string(), vec![h, VOCAB as u64], Q6_K),
        ("per_layer_token_embd.weight".into(), vec![layers * ple, VOCAB as u64], Q6_K),
        ("per_layer_model_proj.weight".into(), vec![h, layers * ple], BF16),
        ("per_layer_proj_norm.weight".into(), vec![ple], F32),
        ("output_norm.weight".into(), vec![h], F32),
        ("rope_freqs.weight".into(), vec![FULL_DIM as u64 / 2], F32),
    ];
    for i in 0..p.layers {
        let b = |name: &str| format!("blk.{i}.{name}");
        let (d, inter) = (p.head_dim(i) as u64, p.mlp(i) as u64);
        let q = HEADS as u64 * d;
        out.extend([
            (b("attn_norm.weight"), vec![h], F32),
            (b("attn_q.weight"), vec![h, q], matrix),
            (b("attn_q_norm.weight"), vec![d], F32),
            (b("attn_output.weight"), vec![q, h], matrix),
            (b("post_attention_norm.weight"), vec![h], F32),
            (b("ffn_norm.weight"), vec![h], F32),
            (b("ffn_gate.weight"), vec![h, inter], matrix),
            (b("ffn_up.weight"), vec![h, inter], matrix),
            (b("ffn_down.weight"), vec![inter, h], matrix),
            (b("post_ffw_norm.weight"), vec![h], F32),
            (b("inp_gate.weight"), vec![h, ple], matrix),
            (b("proj.weight"), vec![ple, h], matrix),
            (b("post_norm.weight"), vec![h], F32),
            (b("layer_output_scale.weight"), vec![1], F32),
        ]);
        if i < p.first_shared() {
            let kv = p.kv_heads as u64 * d;
            out.extend([
                (b("attn_k.weight"), vec![h, kv], matrix),
                (b("attn_v.weight"), vec![h, kv], matrix),
                (b("attn_k_norm.weight"), vec![d], F32),
            ]);
        }
    }
    out
}

fn string(s: &str) -> Vec<u8> {
    [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat()
}

/// GGUF metadata values: (type id, bytes).
fn uint(v: usize) -> (u32, Vec<u8>) {
    (4, (v as u32).to_le_bytes().to_vec())
}

fn float(v: f32) -> (u32, Vec<u8>) {
    (6, v.to_le_bytes().to_vec())
}

fn array(item_type: u32, items: Vec<Vec<u8>>) -> (u32, Vec<u8>) {
    let head = [&item_type.to_le_bytes()[..], &(items.len() as u64).to_le_bytes()].concat();
    (9, [head, items.concat()].concat())
}

/// The `gemma4.*` keys llama.cpp's converter writes, and a vocabulary with Gemma 4's specials.
fn gguf_metadata(p: &Published) -> Vec<(String, (u32, Vec<u8>))> {
    let arch = |key: &str, value: (u32, Vec<u8>)| (format!("gemma4.{key}"), value);
    let mut tokens: Vec<String> = (0..VOCAB).map(|i| format!("t{i}")).collect();
    for (id, token) in [(0, "<pad>"), (1, "<eos>"), (2, "<bos>"), (50, "<|tool_response>"), (106, "<turn|>")] {
        tokens[id] = token.to_string();
    }
    let feed_forward = (0..p.layers).map(|i| (p.mlp(i) as u32).to_le_bytes().to_vec()).collect();
    let pattern = (0..p.layers).map(|i| vec![u8::from(p.sliding(i))]).collect();
    vec![
        ("general.architecture".into(), (8, string("gemma4"))),
        arch("context_length", uint(131_072)),
        arch("embedding_length", uint(p.hidden)),
        arch("block_count", uint(p.layers)),
        arch("feed_forward_length", array(4, feed_forward)),
        arch("attention.head_count", uint(HEADS)),
        arch("attention.head_count_kv", uint(p.kv_heads)),
        arch("attention.layer_norm_rms_epsilon", float(1e-6)),
        arch("rope.freq_base", float(1e6)),
        arch("rope.freq_base_swa", float(1e4)),
        arch("final_logit_softcapping", float(30.0)),
        arch("attention.sliding_window", uint(WINDOW)),
        arch("attention.shared_kv_layers", uint(p.kv_shared)),
        arch("embedding_length_per_layer_input", uint(PLE)),
        arch("attention.sliding_window_pattern", array(7, pattern)),
        arch("attention.key_length", uint(FULL_DIM)),
        arch("attention.value_length", uint(FULL_DIM)),
        arch("attention.key_length_swa", uint(SLIDING_DIM)),
        arch("attention.value_length_swa", uint(SLIDING_DIM)),
        arch("rope.dimension_count", uint(FULL_DIM)),
        arch("rope.dimension_count_swa", uint(SLIDING_DIM)),
        ("tokenizer.ggml.model".into(), (8, string("gemma4"))),
        ("tokenizer.ggml.tokens".into(), array(8, tokens.iter().map(|t| string(t)).collect())),
        ("tokenizer.ggml.bos_token_id".into(), uint(2)),
        ("tokenizer.ggml.eos_token_id".into(), uint(1)),
    ]
}

/// A checkpoint over a GGUF file of which only the header has been fetched.
fn gguf_checkpoint(p: &Published) -> Checkpoint {
    const ALIGN: u64 = 32;
    let tensors = gguf_tensors(p);
    let metadata = gguf_metadata(p);
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, (ty, value)) in &metadata {
        out.extend(string(key));
        out.extend(ty.to_le_bytes());
        out.extend(value);
    }
    let mut offset = 0u64;
    for (name, ne, (ty, values, bytes)) in &tensors {
        out.extend(string(name));
        out.extend((ne.len() as u32).to_le_bytes());
        ne.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        assert_eq!(ne[0] % values, 0, "{name}: whole blocks");
        offset = (offset + ne.iter().product::<u64>() / values * bytes).next_multiple_of(ALIGN);
    }
    out.resize((out.len() as u64).next_multiple_of(ALIGN) as usize, 0);
    let len = out.len() as u64 + offset;
    let windows = Windows::default();
    windows.insert(0, out);
    let source = WindowedSource::new("model.gguf", len, windows);
    Checkpoint::from_gguf(Box::new(source)).expect("the header parses")
}

// --- the checks -----------------------------------------------------------------------------

/// The published facts, as literals (gemma4-published-files.md, gemma4-architecture.md).
struct Expected {
    full_layers: &'static [usize],
    first_shared: usize,
    /// The last non-shared sliding and full layers, whose K/V the shared layers reuse.
    producers: (usize, usize),
    /// MLP width before and from the first shared layer.
    mlp: (usize, usize),
    /// `per_layer_model_projection`: [layers · 256, hidden].
    projection: [usize; 2],
}

const E2B_EXPECTED: Expected = Expected {
    full_layers: &[4, 9, 14, 19, 24, 29, 34],
    first_shared: 15,
    producers: (13, 14),
    mlp: (6144, 12288),
    projection: [8960, 1536],
};
const E4B_EXPECTED: Expected = Expected {
    full_layers: &[5, 11, 17, 23, 29, 35, 41],
    first_shared: 24,
    producers: (22, 23),
    mlp: (10240, 10240),
    projection: [10752, 2560],
};

fn check_config(what: &str, c: &TextConfig, e: &Expected) {
    let full: Vec<usize> = (0..c.num_layers).filter(|&i| c.layers[i].kind == LayerType::Full).collect();
    assert_eq!(full, e.full_layers, "{what}: full-attention layers");
    assert_eq!((c.vocab_size, c.num_heads, c.sliding_window), (262_144, 8, 512), "{what}");
    assert_eq!((c.final_logit_softcap, c.rms_norm_eps, c.per_layer_input_size), (Some(30.0), 1e-6, Some(256)));
    assert_eq!((c.norm_weight_offset, c.attention_scale, c.v_norm), (0.0, 1.0, true), "{what}");
    assert_eq!(c.eos_token_ids, GEMMA4_STOP_IDS, "{what}: <eos>, <turn|>, <|tool_response>");
    for (i, layer) in c.layers.iter().enumerate() {
        let at = format!("{what}: layer {i}");
        let (sliding_producer, full_producer) = e.producers;
        let producer = match layer.kind {
            LayerType::Sliding => sliding_producer,
            LayerType::Full => full_producer,
        };
        assert_eq!(layer.kv_producer, (i >= e.first_shared).then_some(producer), "{at}");
        assert_eq!(layer.intermediate_size, if i < e.first_shared { e.mlp.0 } else { e.mlp.1 }, "{at}");
        let rope = &layer.rope.inv_freq;
        match layer.kind {
            // θ 1e4 over all 256 dims.
            LayerType::Sliding => {
                assert_eq!((layer.head_dim, rope.len()), (256, 128), "{at}");
                assert!((rope[1] - 1e4f32.powf(-2.0 / 256.0)).abs() < 1e-6, "{at}");
            }
            // θ 1e6 over 512 dims: proportional (the first quarter rotates) from config.json, or
            // every pair until rope_freqs is applied (GGUF).
            LayerType::Full => {
                assert_eq!((layer.head_dim, rope.len()), (512, 256), "{at}");
                assert!((rope[1] - 1e6f32.powf(-2.0 / 512.0)).abs() < 1e-6, "{at}");
                assert!(rope[..64].iter().all(|&f| f > 0.0), "{at}");
            }
        }
    }
}

fn check_plan(what: &str, checkpoint: &Checkpoint, plan: &[PlannedTensor], prefix: &str, c: &TextConfig, e: &Expected) {
    let h = c.hidden_size;
    for t in plan {
        assert!(t.name.starts_with(prefix) || t.name == "rope_freqs.weight", "{what}: {}", t.name);
        assert_eq!(checkpoint.shape(&t.name).as_ref(), Some(&t.shape), "{what}: {} in the file", t.name);
    }
    let find = |name: &str| plan.iter().find(|t| t.name == format!("{prefix}{name}")).map(|t| t.shape.clone());
    assert_eq!(find("embed_tokens.weight"), Some(vec![262_144, h]), "{what}");
    assert_eq!(find("embed_tokens_per_layer.weight"), Some(vec![262_144, e.projection[0]]), "{what}");
    assert_eq!(find("per_layer_model_projection.weight"), Some(e.projection.to_vec()), "{what}");
    assert_eq!(find("per_layer_projection_norm.weight"), Some(vec![256]), "{what}");
    for i in 0..c.num_layers {
        let at = format!("{what}: layer {i}");
        let full = e.full_layers.contains(&i);
        let d = if full { 512 } else { 256 };
        let layer = |part: &str| find(&format!("layers.{i}.{part}"));
        assert_eq!(layer("self_attn.q_proj.weight"), Some(vec![8 * d, h]), "{at}");
        assert_eq!(layer("self_attn.o_proj.weight"), Some(vec![h, 8 * d]), "{at}");
        assert_eq!(layer("self_attn.q_norm.weight"), Some(vec![d]), "{at}");
        let kv = (i < e.first_shared).then_some(vec![c.layers[i].num_kv_heads * d, h]);
        assert_eq!(layer("self_attn.k_proj.weight"), kv, "{at}: only non-shared layers read keys");
        assert_eq!(layer("self_attn.v_proj.weight"), kv, "{at}");
        let inter = if i < e.first_shared { e.mlp.0 } else { e.mlp.1 };
        assert_eq!(layer("mlp.gate_proj.weight"), Some(vec![inter, h]), "{at}");
        assert_eq!(layer("mlp.down_proj.weight"), Some(vec![h, inter]), "{at}");
        assert_eq!(layer("per_layer_input_gate.weight"), Some(vec![256, h]), "{at}");
        assert_eq!(layer("per_layer_projection.weight"), Some(vec![h, 256]), "{at}");
        assert_eq!(layer("layer_scalar"), Some(vec![1]), "{at}");
        let count = plan.iter().filter(|t| t.layer == Some(i)).count();
        assert_eq!(count, if i < e.first_shared { 17 } else { 14 }, "{at}: tensors read");
    }
    assert_eq!(find("norm.weight"), Some(vec![h]), "{what}");
}

#[test]
fn gguf_layouts_of_e2b_and_e4b_load_as_published() {
    for (what, p, e) in [("E2B GGUF", &E2B, &E2B_EXPECTED), ("E4B GGUF", &E4B, &E4B_EXPECTED)] {
        let checkpoint = gguf_checkpoint(p);
        let config = TextConfig::from_gguf(checkpoint.gguf().unwrap()).unwrap();
        check_config(what, &config, e);
        let loader = GemmaLoader::new(config.clone(), &checkpoint, MAX_TENSOR_BYTES);
        let plan = loader.plan();
        check_plan(what, &checkpoint, &plan, "model.", &config, e);
        // Proportional RoPE reaches the full layers through rope_freqs: one factor per pair.
        let rope_freqs = plan.iter().find(|t| t.name == "rope_freqs.weight").map(|t| t.shape.clone());
        assert_eq!(rope_freqs, Some(vec![256]), "{what}");
        // A slice of the per-layer table fits one storage binding in either form it may take on
        // the device: its stored Q6_K blocks (6.56 bits a value) or repacked 6-bit codes.
        let table = "model.embed_tokens_per_layer";
        let rows = loader.table_rows_per_slice();
        let stored = checkpoint.stored_blocks(table).map(|(_, row_bytes)| row_bytes).unwrap();
        let packed = checkpoint.packed_row_bytes(table).unwrap();
        assert!(rows * stored.max(packed) <= MAX_TENSOR_BYTES, "{what}: {rows} rows of {stored} / {packed} bytes");
        assert!((rows + 1) * stored.max(packed) > MAX_TENSOR_BYTES, "{what}: slices as large as a binding allows");
        assert!(loader.next_reads(&checkpoint).is_some_and(|r| r.is_ok_and(|r| !r.is_empty())), "{what}");
    }
}

#[test]
fn mlx_layouts_of_e2b_and_e4b_load_as_published() {
    for revision in [MlxRevision::First, MlxRevision::July] {
        for (name, p, e) in [("E2B", &E2B, &E2B_EXPECTED), ("E4B", &E4B, &E4B_EXPECTED)] {
            let what = format!("{name} MLX {revision:?}");
            let checkpoint = mlx_checkpoint(p, revision);
            let config = TextConfig::from_json(&p.mlx_config()).unwrap();
            check_config(&what, &config, e);
            // config.json spells proportional RoPE itself: the first quarter of pairs rotates.
            for layer in config.layers.iter().filter(|l| l.kind == LayerType::Full) {
                assert!(layer.rope.inv_freq[64..].iter().all(|&f| f == 0.0), "{what}");
            }
            let loader = GemmaLoader::new(config.clone(), &checkpoint, MAX_TENSOR_BYTES);
            let plan = loader.plan();
            check_plan(&what, &checkpoint, &plan, "language_model.model.", &config, e);
            assert!(plan.iter().all(|t| t.name != "rope_freqs.weight"), "{what}");
            // The per-layer table is read in slices of at most one storage binding.
            let (_, steps) = loader.progress();
            assert!(steps > 2 + config.num_layers + 1, "{what}: {steps} steps");
        }
    }
}

#[test]
fn gemma4_configs_missing_a_field_are_refused_by_name() {
    let mut config: Value = serde_json::from_str(&E2B.mlx_config()).unwrap();
    config["text_config"].as_object_mut().unwrap().remove("num_kv_shared_layers");
    // Without it E2B would compute its own K/V on layers 15–34 from weights the model never used.
    let err = TextConfig::from_json(&config.to_string()).unwrap_err().to_string();
    assert_eq!(err, "config.json lacks `text_config.num_kv_shared_layers`, which Gemma 4 needs");
}

/// The context each published model gets: E2B's three full-attention caches fit 32K within the
/// KV budget, E4B's four (two KV heads each) 16K; on an adapter with WebGPU's minimum limits
/// they get less, never under 8K.
#[test]
fn the_engine_chooses_each_models_context_from_the_adapter() {
    let desktop = DeviceMemory { max_buffer_bytes: 4 << 30, max_binding_bytes: 2 << 30 };
    for (name, p, on_desktop, on_minimum) in [("E2B", &E2B, 32_768, 16_384), ("E4B", &E4B, 16_384, 8_192)] {
        let config = TextConfig::from_json(&p.mlx_config()).unwrap();
        let cache = CacheOptions::for_device(&config, desktop);
        assert_eq!(cache.max_context, on_desktop, "{name}");
        assert!(cache.bytes(&config) <= KV_BUDGET_BYTES, "{name}: {} bytes", cache.bytes(&config));
        assert_eq!(CacheOptions::for_device(&config, DeviceMemory::MINIMUM).max_context, on_minimum, "{name}");
    }
}

/// The assistants pinned in models/*.json (`drafter`) fit the model of their manifest: their
/// config parses, and their width, vocabulary and key/value shapes are the published model's.
#[test]
fn the_pinned_assistants_fit_their_models() {
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
    for (manifest, published) in [
        ("gemma-4-e2b-it", &E2B),
        ("gemma-4-e2b-it-mlx-4bit", &E2B),
        ("gemma-4-e4b-it", &E4B),
        ("gemma-4-e4b-it-mlx-4bit", &E4B),
    ] {
        let text = std::fs::read_to_string(models.join(format!("{manifest}.json"))).unwrap();
        let manifest_json: Value = serde_json::from_str(&text).unwrap();
        let config = manifest_json["drafter"]["config"].to_string();
        let drafter = hearth_model::drafter::DrafterConfig::from_json(&config)
            .unwrap_or_else(|e| panic!("{manifest}: the assistant's config: {e}"));
        let main = TextConfig::from_json(&published.text_config().to_string()).unwrap();
        let layers = drafter.main_kv_layers(&main).unwrap_or_else(|e| panic!("{manifest}: {e}"));
        assert!(layers.iter().all(Option::is_some), "{manifest}: reads a sliding and a full layer");
        assert_eq!(drafter.text.layers.len(), 4, "{manifest}");
    }
}
