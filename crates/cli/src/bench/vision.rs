//! `hearth bench --vision`: the cost of an image. Gemma 4's vision tower with E2B/E4B's shape
//! (transformers' `Gemma4VisionConfig` defaults) and random weights, built in memory as a
//! safetensors file and loaded through the same loader as a real model; a synthetic screenshot
//! through the image processor and the tower at each soft-token budget; then the prefill of its
//! soft tokens on the synthetic text model and the whole path from the screenshot to the first
//! token.

use std::time::Instant;

use burn::tensor::{Device, Tensor};
use hearth_kernels::has_fused_kernels;
use hearth_model::vision::{RgbImage, SOFT_TOKEN_BUDGETS, VisionConfig, VisionTower};
use hearth_model::{CacheOptions, DeviceMemory, Input, KvCache, Output, Sampler, SamplingOptions, SoftTokens};
use hearth_weights::{Checkpoint, MemorySource, Quantization};
use serde_json::json;

use super::{BenchOptions, SafetensorsWriter, load_synthetic, peak_host_bytes, shape_config, sync};

/// The synthetic screenshot: a typical laptop viewport.
const SCREENSHOT: (usize, usize) = (1280, 800);

/// One budget's figures.
struct Encoded {
    budget: usize,
    soft_tokens: Tensor<2>,
    processor_s: f64,
    encode_s: f64,
}

pub(super) fn run(device: &Device, memory: DeviceMemory, options: &BenchOptions) -> Result<(), String> {
    if let Some(bad) = options.vision_budgets.iter().find(|b| !SOFT_TOKEN_BUDGETS.contains(b)) {
        return Err(format!("--vision-budgets: {bad} is not a Gemma 4 budget (70, 140, 280, 560, 1120)"));
    }
    let runs = options.vision_runs.max(1);
    let text_hidden = shape_config(options.shape, 0).1.hidden_size;
    let json = json!({
        "text_config": {"hidden_size": text_hidden},
        "vision_config": {"standardize": true, "use_clipped_linears": false}
    });
    let config = VisionConfig::from_json(&json.to_string())
        .map_err(|e| e.to_string())?
        .ok_or("the benchmark's vision config has no tower")?;

    let build = Instant::now();
    let packed = options.vision_packed;
    let file = tower_checkpoint(&config, packed);
    let stored = if packed { "the linears as 8-bit codes (group 32)" } else { "bf16" };
    eprintln!(
        "hearth bench: built a {:.2} GB {stored} vision checkpoint in {:.1} s",
        file.len() as f64 / 1e9,
        build.elapsed().as_secs_f64()
    );
    let file_bytes = file.len();
    let load = Instant::now();
    let mut checkpoint = Checkpoint::from_sources(vec![Box::new(MemorySource::new("vision.safetensors", file))])
        .map_err(|e| e.to_string())?;
    if packed {
        let quantization = json!({"quantization": {"group_size": PACKED_GROUP, "bits": 8, "mode": "affine"}});
        checkpoint
            .set_quantization(Quantization::from_config_json(&quantization.to_string()).map_err(|e| e.to_string())?);
    }
    let tower = VisionTower::load(config.clone(), &mut checkpoint, device).map_err(|e| e.to_string())?;
    drop(checkpoint);
    sync(device);
    let load_s = load.elapsed().as_secs_f64();

    let c = &config;
    println!(
        "## Vision tower, {:?}'s shape (width {}, {} layers, {} heads of {}, MLP {}, patch {}, pooling {}; \
         standardized, no clipped linears): random weights, {}; {}\n",
        options.shape,
        c.hidden_size,
        c.num_layers,
        c.num_heads,
        c.head_dim,
        c.intermediate_size,
        c.patch_size,
        c.pooling_kernel_size,
        stored,
        match (has_fused_kernels(device), packed) {
            (true, true) => "the linears packed on the device",
            (true, false) => "the linears bf16 on the device (widened for each product)",
            (false, _) => "f32 on the device",
        },
    );
    println!("| what | figure |");
    println!("|---|---|");
    println!("| tower + embedder weights on the device | {:.1} MB |", tower.weight_bytes() as f64 / 1e6);
    println!("| checkpoint → device ({stored} read) | {:.2} GB in {load_s:.2} s |", file_bytes as f64 / 1e9);
    if let Some(usage) = device.memory_pool_usage() {
        println!("| device memory reserved after loading the tower | {:.1} MB |", usage.bytes_reserved as f64 / 1e6);
    }
    println!();

    let (width, height) = SCREENSHOT;
    let image = screenshot(width, height)?;
    println!(
        "A {width} × {height} synthetic screenshot, per budget: the image processor (host, resize and \
         patches), then the tower's `encode` (device synced before the clock stops); one warm-up, then \
         the median of {runs} run{}. Device memory: what the allocator holds after the encodes (it keeps \
         the pages it grew to, so about the encode's peak; the pool is cleaned before each budget). The warm-up's time is what the first image of a size costs \
         (kernels compiled, matmuls autotuned for its shapes).\n",
        if runs == 1 { "" } else { "s" }
    );
    println!(
        "| budget | resized to | patches | soft tokens | processor (host) | first encode at this size (warm-up) | \
         encode | per soft token | device memory reserved | peak host memory (VmHWM) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut encoded = Vec::new();
    for &budget in &options.vision_budgets {
        device.memory_cleanup();
        let processor = config.processor(budget);
        let mut patches = processor.process(&image).map_err(|e| e.to_string())?;
        let mut processor_times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            patches = processor.process(&image).map_err(|e| e.to_string())?;
            processor_times.push(start.elapsed().as_secs_f64());
        }
        let start = Instant::now();
        let mut soft_tokens = tower.encode(&patches).map_err(|e| e.to_string())?;
        sync(device);
        let first_s = start.elapsed().as_secs_f64();
        let mut encode_times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            soft_tokens = tower.encode(&patches).map_err(|e| e.to_string())?;
            sync(device);
            encode_times.push(start.elapsed().as_secs_f64());
        }
        let (processor_s, encode_s) = (median(&mut processor_times), median(&mut encode_times));
        let reserved =
            device.memory_pool_usage().map_or("—".into(), |u| format!("{:.1} MB", u.bytes_reserved as f64 / 1e6));
        let host = peak_host_bytes().map_or("—".into(), |b| format!("{:.2} GB", b as f64 / 1e9));
        println!(
            "| {budget} | {} × {} | {} | {} | {:.1} ms | {first_s:.2} s | {encode_s:.2} s | {:.1} ms | {reserved} | {host} |",
            patches.width,
            patches.height,
            patches.real_patches,
            patches.soft_tokens,
            processor_s * 1e3,
            encode_s * 1e3 / patches.soft_tokens.max(1) as f64
        );
        eprintln!("hearth bench: budget {budget}: warm-up {first_s:.2} s, timed encodes {encode_times:.2?} s");
        encoded.push(Encoded { budget, soft_tokens, processor_s, encode_s });
    }
    println!();
    drop(tower);

    soft_token_prefill(device, memory, options, &config, &encoded)
}

/// The prefill of each budget's soft tokens (`<bos>`, `<|image>`, T placeholders, `<image|>`) on
/// the synthetic text model, the first token sampled, one decode step; and the whole path.
fn soft_token_prefill(
    device: &Device,
    memory: DeviceMemory,
    options: &BenchOptions,
    vision: &VisionConfig,
    encoded: &[Encoded],
) -> Result<(), String> {
    let loaded = load_synthetic(device, options)?;
    let model = loaded.model;
    let whole = shape_config(options.shape, 0).1;
    let cache_options = CacheOptions::for_device(&whole, memory);
    let all_layers = whole.num_layers;
    let layers = model.config.num_layers;
    let factor = all_layers as f64 / layers as f64;
    let mut sampler = Sampler::new(SamplingOptions::greedy());
    let prompt = |t: usize| {
        let mut tokens = vec![2, vision.tokens.open];
        tokens.extend(std::iter::repeat_n(vision.tokens.placeholder, t));
        tokens.push(vision.tokens.close);
        tokens
    };
    // Prefill, first sample, one decode step: seconds to the first token, and of the step.
    let mut first_token = |rows: &Tensor<2>| -> Result<(f64, f64), String> {
        let t = rows.dims()[0];
        let mut cache = KvCache::new(&model.config, cache_options, model.device());
        let soft = SoftTokens::new(vision.tokens.placeholder, rows.clone());
        let start = Instant::now();
        let logits = model
            .forward(Input::with_images(&prompt(t), Some(&soft)), &mut cache, Output::Last)
            .map_err(|e| e.to_string())?
            .logits;
        let next = pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
        let prefill_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let logits = model.forward(Input::ids(&[next]), &mut cache, Output::Last).map_err(|e| e.to_string())?.logits;
        pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
        Ok((prefill_s, start.elapsed().as_secs_f64()))
    };
    // One warm-up on the smallest image (kernels compiled, autotuned).
    if let Some(smallest) = encoded.iter().min_by_key(|e| e.soft_tokens.dims()[0]) {
        first_token(&smallest.soft_tokens)?;
    }

    // A cut model: the layers' share scaled to all of them, the head and sampling (once per
    // prefill, measured apart on the same shapes) added back once, as the agent step does.
    let head_s = if layers < all_layers {
        let c = &model.config;
        super::head_seconds_per_token(device, c.vocab_size, c.hidden_size, c.final_logit_softcap)?
    } else {
        0.0
    };
    let scale = |s: f64| if s > head_s { (s - head_s) * factor + head_s } else { s };
    let cut = if layers < all_layers {
        format!(
            "; in parentheses, scaled to all {all_layers} layers: the layers' share × {factor:.1}, the head \
             and sampling ({:.0} ms, measured apart) once",
            head_s * 1e3
        )
    } else {
        String::new()
    };
    println!(
        "## Soft tokens → first token ({}{cut})\n\nThe prompt `<bos> <|image> T × <|image|> <image|>`, the \
         placeholders' embeddings replaced by the tower's soft tokens (`Gemma::forward`); greedy sampling, \
         4 bytes read back; a fresh cache per budget, one warm-up first. Whole path: processor + encode + \
         prefill + first sample (the first token of the answer); the first decode step after it apart \
         (on the model as loaded, not scaled; it records the step).\n",
        loaded.label
    );
    println!("| budget | prompt tokens | prefill + first sample | first decode step | whole path to the first token |");
    println!("|---|---|---|---|---|");
    let scaled = |s: f64| if layers < all_layers { format!(" ({:.1} s)", scale(s)) } else { String::new() };
    for e in encoded {
        let t = e.soft_tokens.dims()[0];
        let (prefill_s, step_s) = first_token(&e.soft_tokens)?;
        let host_and_tower = e.processor_s + e.encode_s;
        let whole_path = host_and_tower + prefill_s;
        let whole_scaled =
            if layers < all_layers { format!(" ({:.1} s)", host_and_tower + scale(prefill_s)) } else { String::new() };
        println!(
            "| {} | {} | {prefill_s:.2} s{} | {step_s:.2} s | **{whole_path:.1} s**{whole_scaled} |",
            e.budget,
            t + 3,
            scaled(prefill_s)
        );
    }
    println!();
    Ok(())
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub(super) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if !n.is_multiple_of(2) => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A deterministic page-like screenshot: a light background, dark text-like stripes, coloured
/// blocks (the processor's cost depends only on the size; the tower's not at all on the pixels).
fn screenshot(width: usize, height: usize) -> Result<RgbImage, String> {
    let mut pixels = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            let text_line = (y % 24) < 14 && (x / 7 + y / 24) % 11 != 0 && x % 640 > 40;
            let block = (x / 160 + y / 200) % 5 == 0;
            let rgb = if block {
                [(40 + x % 200) as u8, (90 + y % 150) as u8, 200]
            } else if text_line && (x * 31 + y * 17) % 5 < 2 {
                [30, 30, 40]
            } else {
                [250, 250, 248]
            };
            pixels.extend_from_slice(&rgb);
        }
    }
    RgbImage::new(width, height, pixels).map_err(|e| e.to_string())
}

/// The tower and the multimodal embedder as a Hugging Face safetensors file holds them
/// (`model.vision_tower.…`, `model.embed_vision.…`): bf16, random linears and tables (±0.02),
/// norms of ones.
fn tower_checkpoint(c: &VisionConfig, packed: bool) -> Vec<u8> {
    const SPREAD: f32 = 0.02;
    let mut file = SafetensorsWriter::default();
    let (w, p, d) = (c.hidden_size, c.patch_size, c.head_dim);
    let (q, kv, mlp) = (c.num_heads * d, c.num_kv_heads * d, c.intermediate_size);
    let tower = |name: &str| format!("model.vision_tower.{name}");
    file.random_bf16(&tower("patch_embedder.input_proj.weight"), &[w, 3 * p * p], SPREAD);
    file.random_bf16(&tower("patch_embedder.position_embedding_table"), &[2, c.position_embedding_size, w], SPREAD);
    for i in 0..c.num_layers {
        let layer = |part: &str| tower(&format!("encoder.layers.{i}.{part}"));
        for (module, rows, cols) in [
            ("self_attn.q_proj", q, w),
            ("self_attn.k_proj", kv, w),
            ("self_attn.v_proj", kv, w),
            ("self_attn.o_proj", w, q),
            ("mlp.gate_proj", mlp, w),
            ("mlp.up_proj", mlp, w),
            ("mlp.down_proj", w, mlp),
        ] {
            match packed {
                true => file.random_8bit(&layer(&format!("{module}.linear")), rows, cols, SPREAD),
                false => file.random_bf16(&layer(&format!("{module}.linear.weight")), &[rows, cols], SPREAD),
            }
        }
        file.ones(&layer("self_attn.q_norm.weight"), d);
        file.ones(&layer("self_attn.k_norm.weight"), d);
        for norm in
            ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        {
            file.ones(&layer(&format!("{norm}.weight")), w);
        }
    }
    if c.standardize {
        file.random_bf16(&tower("std_bias"), &[w], SPREAD);
        file.ones(&tower("std_scale"), w);
    }
    file.random_bf16("model.embed_vision.embedding_projection.weight", &[c.text_hidden_size, w], SPREAD);
    file.finish()
}

/// The group of `--vision-packed`'s 8-bit codes: Q8_0's block.
const PACKED_GROUP: usize = 32;

impl SafetensorsWriter {
    /// A linear module as MLX stores an 8-bit one: random codes (four to a u32), bf16 scales and
    /// biases per group of [`PACKED_GROUP`] mapping them onto ±`spread`.
    fn random_8bit(&mut self, module: &str, rows: usize, cols: usize, spread: f32) {
        let words: Vec<u32> = (0..rows * cols / 4).map(|_| self.rng.next() as u32).collect();
        self.tensor(
            &format!("{module}.weight"),
            "U32",
            &[rows, cols / 4],
            words.into_iter().flat_map(u32::to_le_bytes),
        );
        let groups = rows * cols / PACKED_GROUP;
        let shape = [rows, cols / PACKED_GROUP];
        self.tensor(&format!("{module}.scales"), "BF16", &shape, Self::bf16(2.0 * spread / 255.0, groups));
        self.tensor(&format!("{module}.biases"), "BF16", &shape, Self::bf16(-spread, groups));
    }

    /// A bf16 tensor of values uniform in ±`spread`.
    pub(super) fn random_bf16(&mut self, name: &str, shape: &[usize], spread: f32) {
        let n: usize = shape.iter().product();
        let mut bytes = Vec::with_capacity(n * 2);
        for _ in 0..n {
            let unit = (self.rng.next() >> 40) as f32 / (1u64 << 24) as f32;
            let bits = (((2.0 * unit - 1.0) * spread).to_bits() >> 16) as u16;
            bytes.extend_from_slice(&bits.to_le_bytes());
        }
        self.tensor(name, "BF16", shape, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_takes_the_middle_or_the_middle_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn the_synthetic_tower_loads_with_the_published_shapes() {
        let json = r#"{"text_config": {"hidden_size": 64}, "vision_config": {"hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 2, "head_dim": 16, "position_embedding_size": 64, "standardize": true}}"#;
        let config = VisionConfig::from_json(json).unwrap().unwrap();
        // bf16, and the linears as 8-bit codes (`--vision-packed`).
        for packed in [false, true] {
            let file = tower_checkpoint(&config, packed);
            let mut checkpoint =
                Checkpoint::from_sources(vec![Box::new(MemorySource::new("vision.safetensors", file))]).unwrap();
            if packed {
                let quantization = r#"{"quantization": {"group_size": 32, "bits": 8, "mode": "affine"}}"#;
                checkpoint.set_quantization(Quantization::from_config_json(quantization).unwrap());
            }
            let device = Device::flex();
            let tower = VisionTower::load(config.clone(), &mut checkpoint, &device).unwrap();
            let image = screenshot(200, 120).unwrap();
            let patches = config.processor(70).process(&image).unwrap();
            let soft = tower.encode(&patches).unwrap();
            assert_eq!(soft.dims(), [patches.soft_tokens, 64]);
        }
    }
}
