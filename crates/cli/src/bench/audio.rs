//! `hearth bench --audio`: what a spoken request costs. Gemma 4's audio tower with E2B/E4B's shape
//! (transformers' `Gemma4AudioConfig` defaults: width 1024, 12 conformer layers) and random bf16
//! weights, built in memory as a safetensors file and loaded through the same loader as a real
//! model; a synthetic clip of each `--audio-seconds` length through the feature extractor (host)
//! and the tower (device), per second of sound.

use std::time::Instant;

use burn::tensor::Device;
use hearth_kernels::has_fused_kernels;
use hearth_model::audio::{AudioConfig, AudioTower, FeatureConfig, FeatureExtractor, MAX_SAMPLES};
use hearth_weights::{Checkpoint, MemorySource};
use serde_json::json;

use super::vision::median;
use super::{BenchOptions, SafetensorsWriter, peak_host_bytes, shape_config, sync};

const RATE: usize = 16_000;

pub(super) fn run(device: &Device, options: &BenchOptions) -> Result<(), String> {
    if let Some(bad) = options.audio_seconds.iter().find(|&&s| s == 0 || s * RATE > MAX_SAMPLES) {
        return Err(format!("--audio-seconds: {bad} s is not a clip Gemma 4 takes (1 to 30 s)"));
    }
    let runs = options.audio_runs.max(1);
    let text_hidden = shape_config(options.shape, 0).1.hidden_size;
    let json = json!({
        "text_config": {"hidden_size": text_hidden},
        "audio_config": {"use_clipped_linears": false}
    });
    let config = AudioConfig::from_json(&json.to_string())
        .map_err(|e| e.to_string())?
        .ok_or("the benchmark's audio config has no tower")?;
    let file = tower_checkpoint(&config);
    let file_bytes = file.len();
    let load = Instant::now();
    let mut checkpoint = Checkpoint::from_sources(vec![Box::new(MemorySource::new("audio.safetensors", file))])
        .map_err(|e| e.to_string())?;
    let tower = AudioTower::load(config.clone(), &mut checkpoint, device).map_err(|e| e.to_string())?;
    drop(checkpoint);
    sync(device);
    let load_s = load.elapsed().as_secs_f64();

    let c = &config;
    println!(
        "## Audio tower, {:?}'s shape (width {}, {} conformer layers, {} heads, subsampling channels {:?}, \
         light convolution of {} taps, output {} → text width {}): random bf16 weights, {}\n",
        options.shape,
        c.hidden_size,
        c.num_layers,
        c.num_heads,
        c.subsampling_channels,
        c.conv_kernel_size,
        c.output_dims,
        c.text_hidden_size,
        match has_fused_kernels(device) {
            true => "the linears bf16 on the device (widened for each product), the rest f32",
            false => "f32 on the device",
        }
    );
    println!("| what | figure |");
    println!("|---|---|");
    println!("| tower + embedder weights on the device | {:.1} MB |", tower.weight_bytes() as f64 / 1e6);
    println!("| checkpoint → device (bf16 read) | {:.2} GB in {load_s:.2} s |", file_bytes as f64 / 1e9);
    println!();
    println!(
        "A synthetic spoken clip (16 kHz), per length: the feature extractor (host: log-mel frames), then the \
         tower's `encode` (device synced before the clock stops); one warm-up, then the median of {runs} \
         run{}. Per second of sound: features and encode together.\n",
        if runs == 1 { "" } else { "s" }
    );
    println!(
        "| clip | frames | soft tokens | features (host) | first encode at this length (warm-up) | encode | \
         per second of sound | device memory reserved | peak host memory (VmHWM) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let extractor = FeatureExtractor::new(FeatureConfig::default()).map_err(|e| e.to_string())?;
    for &seconds in &options.audio_seconds {
        device.memory_cleanup();
        let samples = clip(seconds * RATE);
        let mut features = extractor.extract(&samples).map_err(|e| e.to_string())?;
        let mut feature_times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            features = extractor.extract(&samples).map_err(|e| e.to_string())?;
            feature_times.push(start.elapsed().as_secs_f64());
        }
        let start = Instant::now();
        let mut soft = tower.encode(&features).map_err(|e| e.to_string())?;
        sync(device);
        let first_s = start.elapsed().as_secs_f64();
        let mut encode_times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            soft = tower.encode(&features).map_err(|e| e.to_string())?;
            sync(device);
            encode_times.push(start.elapsed().as_secs_f64());
        }
        let (features_s, encode_s) = (median(&mut feature_times), median(&mut encode_times));
        let reserved =
            device.memory_pool_usage().map_or("—".into(), |u| format!("{:.1} MB", u.bytes_reserved as f64 / 1e6));
        let host = peak_host_bytes().map_or("—".into(), |b| format!("{:.2} GB", b as f64 / 1e9));
        println!(
            "| {seconds} s | {} | {} | {:.1} ms | {first_s:.2} s | {:.2} s | **{:.0} ms** | {reserved} | {host} |",
            features.frames,
            soft.dims()[0],
            features_s * 1e3,
            encode_s,
            (features_s + encode_s) * 1e3 / seconds as f64
        );
        eprintln!("hearth bench: {seconds} s clip: warm-up {first_s:.2} s, timed encodes {encode_times:.2?} s");
    }
    println!();
    Ok(())
}

/// A speech-like clip: a voiced tone whose pitch and loudness move, with a little noise (the
/// extractor's and the tower's cost depend only on the length).
fn clip(samples: usize) -> Vec<f32> {
    let mut noise: u32 = 0x9e37_79b9;
    (0..samples)
        .map(|i| {
            let t = i as f32 / RATE as f32;
            noise ^= noise << 13;
            noise ^= noise >> 17;
            noise ^= noise << 5;
            let pitch = 140.0 + 40.0 * (std::f32::consts::TAU * 0.7 * t).sin();
            let loudness = 0.5 + 0.5 * (std::f32::consts::TAU * 4.0 * t).sin().abs();
            let voiced = (std::f32::consts::TAU * pitch * t).sin() * 0.3 * loudness;
            voiced + (noise as f32 / u32::MAX as f32 - 0.5) * 0.02
        })
        .collect()
}

/// The tower and its embedder as a Hugging Face safetensors file holds them
/// (`model.audio_tower.…`, `model.embed_audio.…`): bf16, random linears (±0.02), norms of ones.
fn tower_checkpoint(c: &AudioConfig) -> Vec<u8> {
    const SPREAD: f32 = 0.02;
    let mut file = SafetensorsWriter::default();
    let (h, d, k) = (c.hidden_size, c.head_dim(), c.conv_kernel_size);
    let [c0, c1] = c.subsampling_channels;
    let tower = |name: &str| format!("model.audio_tower.{name}");
    let subsample = |name: &str| tower(&format!("subsample_conv_projection.{name}"));
    file.random_bf16(&subsample("layer0.conv.weight"), &[c0, 1, 3, 3], SPREAD);
    file.ones(&subsample("layer0.norm.weight"), c0);
    file.random_bf16(&subsample("layer1.conv.weight"), &[c1, c0, 3, 3], SPREAD);
    file.ones(&subsample("layer1.norm.weight"), c1);
    file.random_bf16(&subsample("input_proj_linear.weight"), &[h, c.feature_size.div_ceil(4) * c1], SPREAD);
    for i in 0..c.num_layers {
        let layer = |part: &str| tower(&format!("layers.{i}.{part}"));
        for block in ["feed_forward1", "feed_forward2"] {
            file.ones(&layer(&format!("{block}.pre_layer_norm.weight")), h);
            file.random_bf16(&layer(&format!("{block}.ffw_layer_1.linear.weight")), &[4 * h, h], SPREAD);
            file.random_bf16(&layer(&format!("{block}.ffw_layer_2.linear.weight")), &[h, 4 * h], SPREAD);
            file.ones(&layer(&format!("{block}.post_layer_norm.weight")), h);
        }
        for norm in ["norm_pre_attn", "norm_post_attn", "norm_out"] {
            file.ones(&layer(&format!("{norm}.weight")), h);
        }
        for module in ["q_proj", "k_proj", "v_proj", "post"] {
            file.random_bf16(&layer(&format!("self_attn.{module}.linear.weight")), &[h, h], SPREAD);
        }
        file.random_bf16(&layer("self_attn.relative_k_proj.weight"), &[h, h], SPREAD);
        file.random_bf16(&layer("self_attn.per_dim_scale"), &[d], SPREAD);
        file.ones(&layer("lconv1d.pre_layer_norm.weight"), h);
        file.random_bf16(&layer("lconv1d.linear_start.linear.weight"), &[2 * h, h], SPREAD);
        file.random_bf16(&layer("lconv1d.depthwise_conv1d.weight"), &[h, 1, k], SPREAD);
        file.ones(&layer("lconv1d.conv_norm.weight"), h);
        file.random_bf16(&layer("lconv1d.linear_end.linear.weight"), &[h, h], SPREAD);
    }
    file.random_bf16(&tower("output_proj.weight"), &[c.output_dims, h], SPREAD);
    file.random_bf16(&tower("output_proj.bias"), &[c.output_dims], SPREAD);
    file.random_bf16("model.embed_audio.embedding_projection.weight", &[c.text_hidden_size, c.output_dims], SPREAD);
    file.finish()
}
