//! `hearth bench`: speed and memory figures for the fused 4-bit path, printed as Markdown rows
//! for benches/RESULTS.md. Models with the real Gemma 4 E2B/E4B shapes are built in memory as MLX
//! 4-bit checkpoints with random codes (speed does not depend on the values), then loaded through
//! the same loader as a real download; `--model` measures a real model file instead (Gemma 3
//! 270M's GGUF, say).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::AffineMatrix;
use hearth_kernels::dispatches::count_dispatches;
use hearth_model::decode::Decoder;
use hearth_model::gemma::{LoadStep, MAX_TENSOR_BYTES};
use hearth_model::{
    CacheOptions, DeviceMemory, Gemma, GemmaLoader, ModelError, Sampler, SamplingOptions, Session, TextConfig,
};
use hearth_weights::{AffineParams, AffineTensor, Checkpoint, FileRange, MemorySource, Quantization};
use serde_json::{Value, json};

mod audio;
mod dispatch_probe;
mod profile;
mod speculative;
mod vision;

/// Which model shape to build.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Shape {
    E2b,
    E4b,
}

/// The kernel of the prompt products (`--prefill-kernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrefillKernel {
    /// The tiled GEMM (the default).
    Tiled,
    /// The 8-token kernel every prompt took before the GEMM (commit aaeed70 and earlier).
    TokenTiles,
}

#[derive(Debug, clap::Args)]
pub struct BenchOptions {
    #[arg(long, value_enum, default_value = "e2b")]
    pub shape: Shape,
    /// Keep only the first N layers (0: all), for slow adapters.
    #[arg(long, default_value_t = 0)]
    pub layers: usize,
    #[arg(long, default_value_t = 64)]
    pub prefill: usize,
    #[arg(long, default_value_t = 16)]
    pub decode: usize,
    /// Agent step: cached prefix, new tokens, decoded tokens (e.g. 3000,1500,40; 0,0,0 skips it).
    #[arg(long, value_delimiter = ',', num_args = 1..=3, default_values_t = [0, 0, 0])]
    pub agent: Vec<usize>,
    /// Only the kernel tables (GEMV bandwidth, prefill product).
    #[arg(long)]
    pub kernels_only: bool,
    /// Only the model's figures (load, prefill, decode, dispatches…): the kernel tables are
    /// skipped (minutes on a CPU adapter).
    #[arg(long, conflicts_with = "kernels_only")]
    pub model_only: bool,
    /// Tokens of the prefill-product comparison (tiled GEMM, 8-token kernel, Burn's f32
    /// matmul on E2B's matrices); 0 skips it.
    #[arg(long, default_value_t = 1500)]
    pub gemm_tokens: usize,
    /// Only these matrices in the prefill-product comparison (q, kv, gate-up, down,
    /// ple-gate; default all).
    #[arg(long, value_delimiter = ',')]
    pub gemm_shapes: Vec<String>,
    /// The kernel of every prompt product (the model's and the agent step's): `tiled` (the
    /// GEMM, today's default) or `token-tiles` (the 8-token kernel prompts took before it).
    #[arg(long, value_enum, default_value = "tiled")]
    pub prefill_kernel: PrefillKernel,
    /// One tile for every tiled GEMM launch, threads×rows×tokens×depth (e.g. 32x8x16x16),
    /// instead of the shape chosen per matrix: to try shapes on a new adapter.
    #[arg(long)]
    pub gemm_tile: Option<hearth_kernels::tuning::GemmTile>,
    /// The fewest keys each split of the decode attention reads (default 16): to try the split
    /// on a new adapter without a rebuild.
    #[arg(long)]
    pub split_keys: Option<u32>,
    /// Rows each block of the decode products' GEMV kernel multiplies (1, 2, 4 or 8; default 1):
    /// to try the layout on a new adapter without a rebuild.
    #[arg(long)]
    pub gemv_rows: Option<u32>,
    /// Measure this model (folder or GGUF file) instead of a synthetic E2B/E4B.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Only the vision section: Gemma 4's vision tower (E2B/E4B's shape, random weights) on a
    /// synthetic 1280×800 screenshot at each `--vision-budgets` budget, then the prefill of its
    /// soft tokens on the `--shape`/`--layers` text model and the whole path to the first token.
    #[arg(long, conflicts_with_all = ["model", "kernels_only"])]
    pub vision: bool,
    /// Soft-token budgets of `--vision` (70, 140, 280, 560, 1120; the last two are slow on
    /// lavapipe).
    #[arg(long, value_delimiter = ',', default_values_t = [70, 140, 280])]
    pub vision_budgets: Vec<usize>,
    /// Timed runs of `--vision` per budget, after one warm-up (the median is printed).
    #[arg(long, default_value_t = 3)]
    pub vision_runs: usize,
    /// `--vision` with the tower's linears as 8-bit codes in groups of 32 (the published E4B
    /// projector is Q8_0), kept packed on the device, in place of bf16 read as f32.
    #[arg(long, requires = "vision")]
    pub vision_packed: bool,
    /// Only the audio section: Gemma 4's audio tower (E2B/E4B's shape, random weights) on a
    /// synthetic spoken clip of each `--audio-seconds` length: features, encode, per second.
    #[arg(long, conflicts_with_all = ["model", "kernels_only", "vision"])]
    pub audio: bool,
    /// Clip lengths of `--audio`, in seconds (1 to 30).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 5])]
    pub audio_seconds: Vec<usize>,
    /// Timed runs of `--audio` per clip, after one warm-up (the median is printed).
    #[arg(long, default_value_t = 3)]
    pub audio_runs: usize,
    /// After the model's figures, speculative decoding with a random drafter of the assistant's
    /// shape, drafting each of these many tokens a round (e.g. 2,4,8): the cost of a
    /// verification against a decoded token, of the draft steps, and tokens per second.
    #[arg(long, value_delimiter = ',')]
    pub speculative: Vec<usize>,
    /// After the decode figures, one decoded token kernel by kernel with each launch timed on
    /// the GPU (per kernel kind: launches, µs, share), and the decode attention's split at 64 and
    /// 4,096 positions. `--prefill` sets the position profiled.
    #[arg(long)]
    pub profile: bool,
    /// Only the dispatch-cost probe: chains of launches of an empty kernel, a 4-byte one and
    /// E2B's smallest and largest decode GEMVs, each dependent and independent, with the GPU's
    /// and the host's µs a launch.
    #[arg(long, conflicts_with_all = ["model", "vision", "audio"])]
    pub dispatch: bool,
    /// Launches in each of `--dispatch`'s empty and 4-byte chains.
    #[arg(long, default_value_t = 1000)]
    pub dispatch_launches: usize,
    /// Launches in each of `--dispatch`'s GEMV chains (a few seconds each on lavapipe per 100).
    #[arg(long, default_value_t = 1000)]
    pub dispatch_gemvs: usize,
    /// Tokens each timed generation of `--speculative` writes.
    #[arg(long, default_value_t = 32)]
    pub speculative_tokens: usize,
}

impl BenchOptions {
    /// `--agent` as (cached, new, decoded).
    fn agent_step(&self) -> Result<[usize; 3], String> {
        <[usize; 3]>::try_from(self.agent.as_slice())
            .map_err(|_| format!("--agent takes three numbers (cached, new, decoded), got {:?}", self.agent))
    }
}

const GROUP: usize = 64;

pub fn run(device: &Device, adapter: &str, memory: DeviceMemory, options: &BenchOptions) -> Result<(), String> {
    options.agent_step()?;
    println!("# hearth bench — {}", describe_machine());
    println!("adapter: {adapter}\n");
    if options.prefill_kernel == PrefillKernel::TokenTiles {
        hearth_kernels::tuning::set_prefill_kernel(hearth_kernels::ProductKernel::TokenTiles)
            .map_err(|e| e.to_string())?;
        println!("Prompt products take the 8-token kernel (`--prefill-kernel token-tiles`).\n");
    }
    if let Some(tile) = options.gemm_tile {
        hearth_kernels::tuning::set_gemm_tile(tile).map_err(|e| e.to_string())?;
        println!("Every tiled GEMM launch uses the tile {tile} (threads×rows×tokens×depth, `--gemm-tile`).\n");
    }
    if let Some(keys) = options.split_keys {
        hearth_kernels::tuning::set_decode_split_keys(keys).map_err(|e| e.to_string())?;
        println!("Each decode attention split reads at least {keys} keys (`--split-keys`).\n");
    }
    if let Some(rows) = options.gemv_rows {
        hearth_kernels::tuning::set_gemv_rows(rows).map_err(|e| e.to_string())?;
        println!("Each block of the GEMV kernel multiplies {rows} rows (`--gemv-rows`).\n");
    }
    if options.dispatch {
        return dispatch_probe::run(device, adapter, options.dispatch_launches, options.dispatch_gemvs);
    }
    if options.vision {
        return vision::run(device, memory, options);
    }
    if options.audio {
        return audio::run(device, options);
    }
    if options.model_only {
        return model_figures(device, memory, options);
    }
    if !options.kernels_only || options.gemm_shapes.is_empty() {
        kernel_bandwidth(device);
        dispatch_cost(device);
    }
    if options.gemm_tokens > 0 {
        prefill_kernels(device, options.gemm_tokens, &options.gemm_shapes, options.gemm_tile.is_none())?;
    }
    if options.kernels_only {
        return Ok(());
    }
    model_figures(device, memory, options)
}

pub(crate) fn describe_machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores, {}", std::env::consts::OS)
}

/// Seconds per call of `f`, after two warm-up calls; `f` must end with a read of its result.
fn time(iterations: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_secs_f64() / iterations as f64
}

fn sync(device: &Device) {
    if let Err(err) = device.sync() {
        eprintln!("hearth bench: device sync failed: {err}");
    }
}

/// A GEMV's cost alone and in a chain: E2B's gate/up and down GEMVs alternating, each reading the
/// last one's output, one sync at the end, against each followed by a sync. What a decoded token
/// pays per kernel on this adapter, with and without the host waiting.
fn dispatch_cost(device: &Device) {
    let (k, rows) = (1536, 6144);
    let up = AffineMatrix::upload(random_affine("bench", rows, k), device);
    let down = AffineMatrix::upload(random_affine("bench", k, rows), device);
    let x = Tensor::<2>::from_data(TensorData::new(vec![0.01f32; k], [1, k]), device);
    let synced = time(20, || {
        let _ = up.matmul_transposed(x.clone());
        sync(device);
    });
    let pairs = 100;
    let chained = time(3, || {
        let mut h = x.clone();
        for _ in 0..pairs {
            h = down.matmul_transposed(up.matmul_transposed(h));
        }
        sync(device);
    });
    println!(
        "GEMV chain (E2B gate/up [6144 × 1536] then down [1536 × 6144], {} in a row, each reading the last one's \
         output, one sync): **{:.1} µs a GEMV**; one GEMV followed by a sync: {:.1} µs.\n",
        2 * pairs,
        chained / (2 * pairs) as f64 * 1e6,
        synced * 1e6
    );
}

/// (a) the fused 4-bit GEMV against a plain copy of the same bytes on the same adapter.
fn kernel_bandwidth(device: &Device) {
    println!("## Fused 4-bit dequantize-GEMV vs copy (one token, f32 accumulation)\n");
    println!("| matrix [rows × k] | bytes read | GEMV | GEMV GB/s | copy GB/s | GEMV / copy |");
    println!("|---|---|---|---|---|---|");
    for (label, rows, k) in [
        ("E2B q_proj", 2048, 1536),
        ("E2B gate/up", 6144, 1536),
        ("E2B down", 1536, 6144),
        ("E4B gate/up", 10240, 2560),
        ("E2B head block", 65536, 1536),
    ] {
        let matrix = AffineMatrix::upload(random_affine("bench", rows, k), device);
        let x = Tensor::<2>::from_data(TensorData::new(vec![0.01f32; k], [1, k]), device);
        let iterations = 20;
        let gemv = time(iterations, || {
            let _ = matrix.matmul_transposed(x.clone());
            sync(device);
        });
        let bytes = matrix.device_bytes() + k * 4 + rows * 4;
        // The copy reads and writes the same number of bytes as the GEMV reads.
        let floats = bytes / 8;
        let source = Tensor::<1>::from_data(TensorData::new(vec![1.0f32; floats], [floats]), device);
        let copy = time(iterations, || {
            let _ = source.clone().add_scalar(0.0);
            sync(device);
        });
        let gemv_gbs = bytes as f64 / gemv / 1e9;
        let copy_gbs = (floats * 8) as f64 / copy / 1e9;
        println!(
            "| {label} [{rows} × {k}] | {:.1} MB | {:.2} ms | {gemv_gbs:.2} | {copy_gbs:.2} | {:.0} % |",
            bytes as f64 / 1e6,
            gemv * 1e3,
            100.0 * gemv_gbs / copy_gbs
        );
    }
    println!();
}

/// The prefill product on E2B's shapes: the tiled dequantize-GEMM against the 8-token kernel
/// it replaces and against Burn's own f32 matmul of the dequantized weights (which reads 7× the
/// bytes), on the same adapter.
/// With a tile chosen on the command line (a sweep of tiles) the 8-token kernel, which no tile
/// changes, is left out.
fn prefill_kernels(device: &Device, tokens: usize, only: &[String], with_token_tiles: bool) -> Result<(), String> {
    use hearth_kernels::ProductKernel;
    const MATRICES: [(&str, &str, usize, usize); 5] = [
        ("q", "E2B q_proj", 2048, 1536),
        ("kv", "E2B k/v_proj", 256, 1536),
        ("gate-up", "E2B gate/up", 6144, 1536),
        ("down", "E2B down", 1536, 6144),
        ("ple-gate", "E2B per-layer input gate", 256, 1536),
    ];
    if let Some(unknown) = only.iter().find(|name| !MATRICES.iter().any(|m| m.0 == name.as_str())) {
        return Err(format!("--gemm-shapes: no matrix {unknown:?} (q, kv, gate-up, down, ple-gate)"));
    }
    println!("## Prefill product, {tokens} tokens: tiled 4-bit GEMM vs the 8-token kernel vs Burn's f32 matmul\n");
    println!(
        "| matrix [rows × k] | weights read, 4-bit / f32 | tiled GEMM | 8-token kernel | Burn f32 matmul | tiled ÷ f32 | tiled ÷ 8-token |"
    );
    println!("|---|---|---|---|---|---|---|");
    let seconds = |f: &mut dyn FnMut() -> Tensor<2>| {
        time(2, || {
            let _ = f();
            sync(device);
        })
    };
    for (_, label, rows, k) in MATRICES.into_iter().filter(|m| only.is_empty() || only.iter().any(|name| name == m.0)) {
        let matrix = AffineMatrix::upload(random_affine("bench", rows, k), device);
        let dense_t = matrix.dequantize().transpose();
        let x: Vec<f32> = (0..tokens * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 500.0).collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [tokens, k]), device);
        let tiled = seconds(&mut || matrix.matmul_transposed_by(x.clone(), ProductKernel::Tiled));
        let token_tiles = with_token_tiles
            .then(|| seconds(&mut || matrix.matmul_transposed_by(x.clone(), ProductKernel::TokenTiles)));
        let f32_matmul = seconds(&mut || x.clone().matmul(dense_t.clone()));
        let gflops = |t: f64| 2.0 * (tokens * rows * k) as f64 / t / 1e9;
        let (token_tiles, ratio) = match token_tiles {
            Some(t) => (format!("{:.0} ms ({:.1})", t * 1e3, gflops(t)), format!("{:.2}", t / tiled)),
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {label} [{rows} × {k}] | {:.1} / {:.1} MB | {:.0} ms ({:.1} GFLOP/s) | {token_tiles} | {:.0} ms ({:.1}) | {:.2} | {ratio} |",
            matrix.device_bytes() as f64 / 1e6,
            (rows * k * 4) as f64 / 1e6,
            tiled * 1e3,
            gflops(tiled),
            f32_matmul * 1e3,
            gflops(f32_matmul),
            f32_matmul / tiled,
        );
    }
    println!();
    Ok(())
}

/// (b)–(d2): load, prefill, decode, dispatches, agent step.
/// A model loaded for measuring, and how long loading took.
struct Loaded {
    model: Gemma,
    label: String,
    file_bytes: u64,
    load_s: f64,
    /// The most bytes one load step reads: what the browser holds at once while streaming.
    largest_step_bytes: Option<u64>,
}

/// The real model at `path`: file → device, timed from opening the file.
fn load_real(device: &Device, path: &std::path::Path) -> Result<Loaded, String> {
    let file_bytes = if path.is_file() {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    } else {
        std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    };
    let load = Instant::now();
    let files = hearth_model::model_dir::ModelFiles::open(path).map_err(|e| e.to_string())?;
    let mut model = files.load(device).map_err(|e| e.to_string())?;
    sync(device);
    let load_s = load.elapsed().as_secs_f64();
    model.config.eos_token_ids = vec![];
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Loaded { model, label: format!("{name} (real weights)"), file_bytes, load_s, largest_step_bytes: None })
}

fn model_figures(device: &Device, memory: DeviceMemory, options: &BenchOptions) -> Result<(), String> {
    let loaded = match &options.model {
        Some(path) => load_real(device, path)?,
        None => load_synthetic(device, options)?,
    };
    // The context the whole model gets (a synthetic model may keep only a few layers).
    let whole = match &options.model {
        Some(_) => loaded.model.config.clone(),
        None => shape_config(options.shape, 0).1,
    };
    let cache = CacheOptions::for_device(&whole, memory);
    let on_minimum = CacheOptions::for_device(&whole, DeviceMemory::MINIMUM);
    measure(device, loaded, (cache, cache.bytes(&whole), on_minimum.max_context), options)
}

/// A model with the real E2B/E4B shapes and random 4-bit codes, built in memory.
fn load_synthetic(device: &Device, options: &BenchOptions) -> Result<Loaded, String> {
    let (config_json, mut config) = shape_config(options.shape, options.layers);
    let label = format!(
        "{:?}{}",
        options.shape,
        if options.layers > 0 { format!(" (first {} layers only)", options.layers) } else { String::new() }
    );
    let build = Instant::now();
    let file = synthetic_checkpoint(&config)?;
    let file_bytes = file.len();
    eprintln!(
        "hearth bench: built a {:.2} GB 4-bit checkpoint in {:.1} s",
        file_bytes as f64 / 1e9,
        build.elapsed().as_secs_f64()
    );

    let load = Instant::now();
    let mut checkpoint = Checkpoint::from_sources(vec![Box::new(MemorySource::new("synthetic.safetensors", file))])
        .map_err(|e| e.to_string())?;
    checkpoint.set_quantization(Quantization::from_config_json(&config_json).map_err(|e| e.to_string())?);
    config.eos_token_ids = vec![];
    // Step by step, as the browser streams an installed model, noting each step's reads.
    let loader = GemmaLoader::new(config, &checkpoint, MAX_TENSOR_BYTES);
    let mut largest_step = 0;
    let note_reads = |step: LoadStep<'_>| {
        let bytes: u64 = step.reads()?.iter().map(FileRange::len).sum();
        largest_step = largest_step.max(bytes);
        Ok::<(), ModelError>(())
    };
    let model = loader.load_with(&mut checkpoint, device, note_reads).map_err(|e| e.to_string())?;
    sync(device);
    let load_s = load.elapsed().as_secs_f64();
    let label = format!("{label}: random 4-bit weights (MLX layout, group {GROUP})");
    Ok(Loaded { model, label, file_bytes: file_bytes as u64, load_s, largest_step_bytes: Some(largest_step) })
}

fn measure(
    device: &Device,
    loaded: Loaded,
    (cache, cache_bytes, context_on_minimum): (CacheOptions, u64, usize),
    options: &BenchOptions,
) -> Result<(), String> {
    let Loaded { model, label, file_bytes, load_s, largest_step_bytes } = loaded;
    let weights = model.weight_bytes();
    println!("## {label}\n");
    println!("| what | figure |");
    println!("|---|---|");
    println!(
        "| checkpoint → device (read, pack, upload) | {:.2} GB in {load_s:.2} s = {:.2} GB/s |",
        file_bytes as f64 / 1e9,
        file_bytes as f64 / load_s / 1e9
    );
    println!(
        "| weights on the device / on the host (PLE table) | {:.2} GB / {:.2} GB |",
        weights.device as f64 / 1e9,
        weights.host as f64 / 1e9
    );
    if let Some(usage) = device.memory_pool_usage() {
        println!("| device memory reserved after load | {:.2} GB |", usage.bytes_reserved as f64 / 1e9);
    }
    if let Some(step) = largest_step_bytes {
        println!(
            "| largest load step (bytes the browser holds at once while streaming the file) | {:.0} MB of {:.2} GB |",
            step as f64 / 1e6,
            file_bytes as f64 / 1e9
        );
    }
    if let Some(peak) = peak_host_bytes() {
        let note = if options.model.is_none() { "; includes the checkpoint, built in memory" } else { "" };
        println!("| peak host memory so far (VmHWM{note}) | {:.2} GB |", peak as f64 / 1e9);
    }

    println!(
        "| context the whole model gets on this adapter (KV cache) | {} tokens ({:.0} MiB); {} on WebGPU's minimum limits |",
        cache.max_context,
        cache_bytes as f64 / 1048576.0,
        context_on_minimum
    );

    let mut session = Session::new(model, cache);
    let mut sampler = Sampler::new(SamplingOptions::greedy());
    let prompt: Vec<u32> = (0..options.prefill).map(|i| 1000 + (i as u32 * 7919) % 200_000).collect();
    let start = Instant::now();
    let (logits, _) = session.prefill(&prompt).map_err(|e| e.to_string())?;
    let mut next = pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
    let first_token = start.elapsed().as_secs_f64();
    println!(
        "| prefill {} tokens + first sample (time to first token) | {first_token:.2} s = {:.1} tokens/s |",
        prompt.len(),
        prompt.len() as f64 / first_token
    );

    // Decode steps launched one by one with the launch observer on: dispatches per token (a
    // replay launches nothing through cubecl's launch, so the observer sees only the lookups).
    // The first token after a prefill also copies the sliding layers' rings once (the cache's
    // checkpoint holds them).
    session.model().set_step_recording(false);
    let (step, first_counts) = count_dispatches(|| session.step(next));
    next = pollster::block_on(sampler.sample(step.map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    let (step, counts) = count_dispatches(|| session.step(next));
    next = pollster::block_on(sampler.sample(step.map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    session.model().set_step_recording(true);
    let dispatches: usize = counts.values().sum();
    let first_dispatches: usize = first_counts.values().sum();
    let layers = session.model().config.num_layers;
    // Each id read back before the next step is submitted: the host's work in series with the GPU's.
    let start = Instant::now();
    for _ in 0..options.decode {
        let logits = session.step(next).map_err(|e| e.to_string())?;
        next = pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
    }
    let decode_s = start.elapsed().as_secs_f64();
    println!(
        "| decode {} tokens, each id read before the next step (greedy; 4 bytes read back a token) | {:.3} s/token = {:.2} tokens/s |",
        options.decode,
        decode_s / options.decode.max(1) as f64,
        options.decode as f64 / decode_s
    );
    // As `generate` decodes: each step submitted before its token is read back.
    let logits = session.step(next).map_err(|e| e.to_string())?;
    let mut decoder = Decoder::new(&mut sampler, logits, None);
    let clock = Instant::now();
    let now_ms = || clock.elapsed().as_secs_f64() * 1e3;
    let (lagged, lagged_counts) =
        count_dispatches(|| pollster::block_on(decoder.next(&mut session, &mut sampler, None, true, now_ms)));
    lagged.map_err(|e| e.to_string())?;
    let start = Instant::now();
    for _ in 0..options.decode {
        pollster::block_on(decoder.next(&mut session, &mut sampler, None, true, now_ms)).map_err(|e| e.to_string())?;
    }
    let lagged_s = start.elapsed().as_secs_f64();
    next = pollster::block_on(decoder.next(&mut session, &mut sampler, None, false, now_ms))
        .map_err(|e| e.to_string())?
        .id;
    println!(
        "| decode {} tokens, each step submitted before its token is read back (as `generate` decodes) | {:.3} s/token = {:.2} tokens/s ({:.2}× the above); {} launches a token besides the replay |",
        options.decode,
        lagged_s / options.decode.max(1) as f64,
        options.decode as f64 / lagged_s,
        decode_s / lagged_s.max(1e-9),
        lagged_counts.values().sum::<usize>()
    );
    println!(
        "| GPU dispatches per decoded token | {dispatches} ({:.1} per layer); the first after a prefill {first_dispatches} |",
        dispatches as f64 / layers as f64
    );
    println!(
        "| weight bytes read a decoded token (every matrix and the tied head once; the {:.2} GB per-layer table on the \
         device is looked up by row) | {:.2} GB, from a file of {:.2} GB |",
        weights.looked_up as f64 / 1e9,
        (weights.device - weights.looked_up) as f64 / 1e9,
        file_bytes as f64 / 1e9
    );
    println!();
    print_top_kernels(&counts);
    let next = crate::host_cost::report(device, &mut session, &mut sampler, next, options.decode, dispatches)?;
    if options.profile {
        profile::run(&mut session, &mut sampler, next, cache)?;
    }

    if !options.speculative.is_empty() {
        let model =
            speculative::run(device, session.into_model(), cache, &options.speculative, options.speculative_tokens)?;
        session = Session::new(model, cache);
    }

    let [prefix, new, decode] = options.agent_step()?;
    if prefix + new > 0 {
        let mut session = Session::new(session.into_model(), cache);
        let context: Vec<u32> = (0..prefix + new).map(|i| 1000 + (i as u32 * 104_729) % 200_000).collect();
        let (logits, _) = session.prefill(&context[..prefix]).map_err(|e| e.to_string())?;
        let _ = pollster::block_on(sampler.sample(logits));
        let start = Instant::now();
        let (logits, stats) = session.prefill(&context).map_err(|e| e.to_string())?;
        // As `generate` decodes: the first token read, then each step submitted before its
        // token is read back.
        let mut decoder = Decoder::new(&mut sampler, logits, None);
        let clock = Instant::now();
        let now_ms = || clock.elapsed().as_secs_f64() * 1e3;
        let mut decode_next = |session: &mut Session, sampler: &mut Sampler, more: bool| {
            pollster::block_on(decoder.next(session, sampler, None, more, now_ms)).map_err(|e| e.to_string())
        };
        decode_next(&mut session, &mut sampler, false)?;
        let prefill_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for i in 0..decode {
            decode_next(&mut session, &mut sampler, i + 1 < decode)?;
        }
        let decode_s = start.elapsed().as_secs_f64();
        println!("## Agent step ({label}): {prefix} cached + {} new tokens, then {decode} decoded\n", stats.computed);
        println!("| prefill of the new tokens | decode | step total |");
        println!("|---|---|---|");
        println!(
            "| {prefill_s:.2} s ({:.1} tokens/s) | {decode_s:.2} s ({:.2} tokens/s) | {:.2} s |\n",
            stats.computed as f64 / prefill_s,
            decode as f64 / decode_s.max(1e-9),
            prefill_s + decode_s
        );
        // A cut model: the layers' time scaled to all of them. The tied head and the sampling run
        // once per decoded token whatever the layer count: their time, measured apart on the
        // same shapes, is taken out before scaling and added back once.
        if options.layers > 0 && options.model.is_none() {
            let config = &session.model().config;
            let all = shape_config(options.shape, 0).1.num_layers;
            let factor = all as f64 / config.num_layers as f64;
            let head_s =
                head_seconds_per_token(device, config.vocab_size, config.hidden_size, config.final_logit_softcap)?;
            let head_total = head_s * decode as f64;
            let layers_s = decode_s - head_total;
            // On a slow adapter the head is most of a decoded token, and the layers' share can be
            // smaller than the two measurements' noise: then decode stays as measured.
            let decode_scaled = if layers_s > 0.0 { layers_s * factor + head_total } else { decode_s };
            let noise = if layers_s > 0.0 {
                ""
            } else {
                " (the head alone measured longer than a whole decoded token: the layers' share is within \
                 the noise here, so decode is not scaled and is a lower bound)"
            };
            println!(
                "Scaled to all {all} layers (× {factor:.1}; the head and sampling, {:.1} ms a token measured apart, \
                 not scaled{noise}): prefill {:.1} s, decode {decode_scaled:.1} s ({:.2} tokens/s), step {:.1} s.\n",
                head_s * 1e3,
                prefill_s * factor,
                decode as f64 / decode_scaled.max(1e-9),
                prefill_s * factor + decode_scaled
            );
        }
    }
    Ok(())
}

/// Seconds per decoded token of the tied head alone (random 4-bit rows in the model's row blocks,
/// softcapped as the model's) plus greedy sampling and its 4-byte readback.
fn head_seconds_per_token(device: &Device, vocab: usize, hidden: usize, softcap: Option<f32>) -> Result<f64, String> {
    let row_bytes = hidden / 2;
    let rows_per_block = (MAX_TENSOR_BYTES / row_bytes.max(1)).clamp(1, vocab.max(1));
    let block = AffineMatrix::upload(random_affine("head", rows_per_block, hidden), device);
    let blocks = vocab.div_ceil(rows_per_block);
    let x = Tensor::<2>::from_data(TensorData::new(vec![0.01f32; hidden], [1, hidden]), device);
    let mut sampler = Sampler::new(SamplingOptions::greedy());
    let mut failed = None;
    let seconds = time(8, || {
        let parts: Vec<Tensor<2>> = (0..blocks)
            .map(|_| match softcap {
                Some(cap) => block.softcapped_matmul_transposed(x.clone(), cap),
                None => block.matmul_transposed(x.clone()),
            })
            .collect();
        let logits = if parts.len() == 1 {
            parts.into_iter().next().unwrap_or_else(|| x.clone())
        } else {
            Tensor::cat(parts, 1)
        };
        if let Err(e) = pollster::block_on(sampler.sample(logits)) {
            failed = Some(e.to_string());
        }
    });
    match failed {
        Some(e) => Err(format!("sampling the head's logits: {e}")),
        None => Ok(seconds),
    }
}

/// The process's peak resident memory (Linux's VmHWM), when the system says.
fn peak_host_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn print_top_kernels(counts: &BTreeMap<&'static str, usize>) {
    let mut sorted: Vec<(&&str, &usize)> = counts.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1));
    let list: Vec<String> =
        sorted.iter().take(8).map(|(name, n)| format!("{n} × `{}`", crate::host_cost::short(name))).collect();
    println!("Most launched kernels in one decode step: {}.\n", list.join(", "));
}

/// The text config of Gemma 4 E2B or E4B (../shared/reference/gemma4-architecture.md), as JSON
/// with MLX's quantization section, and parsed.
fn shape_config(shape: Shape, layers: usize) -> (String, TextConfig) {
    let (hidden, all_layers, inter, kv_heads, shared, period, double_wide) = match shape {
        Shape::E2b => (1536, 35, 6144, 1, 20, 5, true),
        Shape::E4b => (2560, 42, 10240, 2, 18, 6, false),
    };
    let n = if layers == 0 { all_layers } else { layers.min(all_layers) };
    let types: Vec<&str> = (0..all_layers)
        .map(|i| if i % period == period - 1 { "full_attention" } else { "sliding_attention" })
        .collect();
    // A cut model keeps the first layers and no KV sharing (the producers would be cut away).
    let (types, shared) = if n < all_layers { (types[..n].to_vec(), 0) } else { (types, shared) };
    let config: Value = json!({
        "model_type": "gemma4_text",
        "hidden_size": hidden, "num_hidden_layers": n, "intermediate_size": inter,
        "num_attention_heads": 8, "num_key_value_heads": kv_heads, "head_dim": 256, "global_head_dim": 512,
        "layer_types": types, "sliding_window": 512, "num_kv_shared_layers": shared,
        "use_double_wide_mlp": double_wide, "hidden_size_per_layer_input": 256,
        "vocab_size": 262_144, "vocab_size_per_layer_input": 262_144, "max_position_embeddings": 131_072,
        "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": true, "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}
        },
        "quantization": {"group_size": GROUP, "bits": 4, "mode": "affine"}
    });
    let text = config.to_string();
    let parsed = TextConfig::from_json(&text).expect("the benchmark's config is valid");
    (text, parsed)
}

/// A quantized matrix with random codes.
fn random_affine(name: &str, rows: usize, cols: usize) -> AffineTensor {
    let codes = XorShift::default().codes(rows * cols / 8);
    let groups = rows * cols / GROUP;
    let params = AffineParams { group_size: GROUP, bits: 4 };
    AffineTensor::new(
        name,
        params,
        (vec![rows, cols / 8], codes),
        (vec![rows, cols / GROUP], vec![SCALE; groups]),
        (vec![rows, cols / GROUP], vec![BIAS; groups]),
    )
    .expect("consistent shapes")
}

/// Every benchmark weight has one scale and bias: values ≈ ±0.02 (speed does not depend on them).
const SCALE: f32 = 0.003;
const BIAS: f32 = -0.0225;

struct XorShift(u64);

impl Default for XorShift {
    fn default() -> Self {
        XorShift(0x2545_F491_4F6C_DD1D)
    }
}

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `words` random u32 words of 4-bit codes.
    fn codes(&mut self, words: usize) -> Vec<u32> {
        (0..words).map(|_| self.next() as u32).collect()
    }
}

/// A safetensors file in memory, laid out as mlx-vlm writes Gemma 4 (`weight` codes + bf16
/// `scales` and `biases` for every linear and both embeddings; bf16 norms and layer scalars).
fn synthetic_checkpoint(c: &TextConfig) -> Result<Vec<u8>, String> {
    let mut file = SafetensorsWriter::default();
    let h = c.hidden_size;
    let p = c.per_layer_input_size.unwrap_or(0);
    let prefix = "model.";
    file.quantized(&format!("{prefix}embed_tokens"), c.vocab_size, h);
    if p > 0 {
        file.quantized(&format!("{prefix}embed_tokens_per_layer"), c.vocab_size, c.num_layers * p);
        file.quantized(&format!("{prefix}per_layer_model_projection"), c.num_layers * p, h);
        file.ones(&format!("{prefix}per_layer_projection_norm.weight"), p);
    }
    file.ones(&format!("{prefix}norm.weight"), h);
    for (i, layer) in c.layers.iter().enumerate() {
        let name = |part: &str| format!("{prefix}layers.{i}.{part}");
        let (d, kv) = (layer.head_dim, layer.num_kv_heads);
        file.quantized(&name("self_attn.q_proj"), c.num_heads * d, h);
        file.quantized(&name("self_attn.o_proj"), h, c.num_heads * d);
        file.ones(&name("self_attn.q_norm.weight"), d);
        if layer.kv_producer.is_none() {
            file.quantized(&name("self_attn.k_proj"), kv * d, h);
            file.quantized(&name("self_attn.v_proj"), kv * d, h);
            file.ones(&name("self_attn.k_norm.weight"), d);
        }
        file.quantized(&name("mlp.gate_proj"), layer.intermediate_size, h);
        file.quantized(&name("mlp.up_proj"), layer.intermediate_size, h);
        file.quantized(&name("mlp.down_proj"), h, layer.intermediate_size);
        if p > 0 {
            file.quantized(&name("per_layer_input_gate"), p, h);
            file.quantized(&name("per_layer_projection"), h, p);
            file.ones(&name("post_per_layer_input_norm.weight"), h);
        }
        for norm in
            ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        {
            file.ones(&name(&format!("{norm}.weight")), h);
        }
        file.ones(&name("layer_scalar"), 1);
    }
    Ok(file.finish())
}

#[derive(Default)]
struct SafetensorsWriter {
    header: serde_json::Map<String, Value>,
    data: Vec<u8>,
    rng: XorShift,
}

impl SafetensorsWriter {
    fn tensor(&mut self, name: &str, dtype: &str, shape: &[usize], bytes: impl IntoIterator<Item = u8>) {
        let start = self.data.len();
        self.data.extend(bytes);
        self.header.insert(
            name.to_string(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [start, self.data.len()]}),
        );
    }

    fn bf16(value: f32, n: usize) -> impl Iterator<Item = u8> {
        let bits = (value.to_bits() >> 16) as u16;
        std::iter::repeat_n(bits.to_le_bytes(), n).flatten()
    }

    fn ones(&mut self, name: &str, n: usize) {
        self.tensor(name, "BF16", &[n], Self::bf16(1.0, n));
    }

    fn quantized(&mut self, module: &str, rows: usize, cols: usize) {
        let codes = self.rng.codes(rows * cols / 8);
        self.tensor(
            &format!("{module}.weight"),
            "U32",
            &[rows, cols / 8],
            codes.into_iter().flat_map(u32::to_le_bytes),
        );
        let groups = rows * cols / GROUP;
        self.tensor(&format!("{module}.scales"), "BF16", &[rows, cols / GROUP], Self::bf16(SCALE, groups));
        self.tensor(&format!("{module}.biases"), "BF16", &[rows, cols / GROUP], Self::bf16(BIAS, groups));
    }

    fn finish(self) -> Vec<u8> {
        let mut header = Value::Object(self.header).to_string().into_bytes();
        while !header.len().is_multiple_of(8) {
            header.push(b' ');
        }
        let mut file = Vec::with_capacity(8 + header.len() + self.data.len());
        file.extend_from_slice(&(header.len() as u64).to_le_bytes());
        file.extend_from_slice(&header);
        file.extend_from_slice(&self.data);
        file
    }
}

/// The host cost of constraining a tool call: the token mask for every token of a typical call
/// to the agent's tools, computed afresh (the trie walk) and as generation gets it (cached by
/// state), with the vocabulary of `tokenizer`.
pub fn call_mask(tokenizer: &std::path::Path) -> Result<(), String> {
    use hearth_engine::constrain::{CallConstraint, CallGrammar, CallState, Markers, ToolSpec, VocabTrie};
    use std::sync::Arc;

    println!("# hearth bench --call-mask — {}", describe_machine());
    let tokenizer = hearth_model::model_dir::load_tokenizer(tokenizer).map_err(|e| e.to_string())?;
    let tools = hearth_agent::builtin_tools();
    let specs: Vec<ToolSpec> =
        tools.iter().map(|t| ToolSpec { name: &t.name, parameters: Some(&t.parameters) }).collect();
    let grammar = CallGrammar::new(&specs).map_err(|e| e.to_string())?;
    let markers = Markers { call_open: 48, call_close: 49, delim: 52, thought: Some((100, 101)) };
    let clock = Instant::now();
    let vocab = VocabTrie::with_markers(&tokenizer, markers).map_err(|e| e.to_string())?;
    let build_ms = clock.elapsed().as_secs_f64() * 1e3;
    println!(
        "vocabulary: {} tokens, trie of {} nodes built in {build_ms:.0} ms; {} tools\n",
        vocab.len(),
        vocab.node_count(),
        tools.len()
    );
    // `<|"|>` splits the call into text pieces, each tokenized as the model would write it.
    let call = "call:type{index:12,text:\u{1}Ada Lovelace, 10 Downing St. — «bonjour»\u{1},submit:true}";
    let mut ids = Vec::new();
    for (i, piece) in call.split('\u{1}').enumerate() {
        if i > 0 {
            ids.push(markers.delim);
        }
        ids.extend(tokenizer.encode(piece).map_err(|e| e.to_string())?);
    }
    ids.push(markers.call_close);
    let grammar = Arc::new(grammar);
    let vocab = Arc::new(vocab);
    let words = vocab.len().div_ceil(32);
    let mut constraint = CallConstraint::new(grammar.clone(), vocab.clone());
    constraint.begin(&[markers.call_open]);
    let mut state = CallState::start();
    let (mut fresh, mut cached) = (Vec::new(), Vec::new());
    for &id in &ids {
        let clock = Instant::now();
        let mut mask = vec![0u32; words];
        vocab.allowed(&grammar, &state, &mut mask);
        fresh.push(clock.elapsed().as_secs_f64() * 1e3);
        if mask[id as usize / 32] & (1 << (id % 32)) == 0 {
            return Err(format!("token {id} of the call is masked: the grammar or the vocabulary is wrong"));
        }
        let clock = Instant::now();
        let allowed = constraint.mask(vocab.len()).is_some();
        cached.push(clock.elapsed().as_secs_f64() * 1e3);
        if !allowed {
            return Err("the constraint let a token of the call go free".into());
        }
        constraint.advance(id);
        state = vocab.advance(&grammar, &state, id).ok_or("the call does not parse")?;
    }
    let summary = |ms: &[f64]| {
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        let max = ms.iter().copied().fold(0.0, f64::max);
        format!("{mean:.2} ms mean, {max:.2} ms max")
    };
    println!("| mask per call token ({} tokens) | host time |", ids.len());
    println!("|---|---|");
    println!("| trie walk every token | {} |", summary(&fresh));
    println!("| as generation runs (cached by state) | {} |", summary(&cached));
    Ok(())
}
