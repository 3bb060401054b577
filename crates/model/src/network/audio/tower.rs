//! Gemma 4's audio tower and audio embedder: a clip's log-mel frames → its soft tokens, the rows
//! that replace the prompt's audio placeholders. Reference: transformers 5.23, `Gemma4AudioModel`
//! and `Gemma4MultimodalEmbedder` (modeling_gemma4.py).
//!
//! Shapes: F = feature frames (10 ms each), S = frames after the two stride-2 convolutions (40 ms
//! each), H = tower width, n = heads, d = head size, W = frames a query sees (itself and the
//! `context_left - 2` before it), T = soft tokens (the valid ones of S), h = text width.
//!
//! The reference attends over blocks of `chunk_size` queries against a padded window of keys, a
//! relative-position term shifted into place, and a mask that keeps, for each query, itself and
//! the frames just before it. Computed here the direct way: for each distance δ < W, the keys δ
//! frames back (a shifted copy) and the relative term of δ; the same sums, without the blocks.

use burn::tensor::activation::{relu, sigmoid, silu, softmax};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use hearth_kernels::fused::rms_norm_unscaled;
use hearth_kernels::rms_norm;
use hearth_weights::Checkpoint;

use super::config::AudioConfig;
use super::features::AudioFeatures;
use crate::error::ModelError;
use crate::tower_weights::{Linear, TowerReader, upload_transposed};

/// How a checkpoint names the tower's tensors (as the vision tower's loader reads them).
#[derive(Clone, Copy)]
enum Layout {
    /// Transformers' names under a prefix for the tower and one for the embedder: Hugging Face's
    /// `model.audio_tower.`, or MLX's `audio_tower.` (mlx-vlm drops the outer `model.`).
    Named { tower: &'static str, embedder: &'static str },
    /// llama.cpp's projector file (`mmproj`): `a.blk.N.attn_q.weight`, `mm.a.input_projection.weight`, …
    /// Its converter stores `softplus(per_dim_scale)` and the depthwise kernel as `[H, K]`.
    Mmproj,
}

const NAMED: [Layout; 2] = [
    Layout::Named { tower: "model.audio_tower.", embedder: "model.embed_audio." },
    Layout::Named { tower: "audio_tower.", embedder: "embed_audio." },
];

/// The first subsampling convolution: every layout has it.
const FIRST_CONV: &str = "subsample_conv_projection.layer0.conv.weight";

impl Layout {
    /// The layout `checkpoint` uses, if it holds a tower.
    fn of(checkpoint: &Checkpoint) -> Option<Layout> {
        NAMED.into_iter().chain([Layout::Mmproj]).find(|layout| checkpoint.contains(&layout.name(FIRST_CONV)))
    }

    /// The checkpoint's name for a tensor given by its name in transformers' tower
    /// (`layers.0.self_attn.q_proj.linear.weight`), or in its embedder when it starts with
    /// `embed_audio.`.
    fn name(self, name: &str) -> String {
        match self {
            Layout::Named { tower, embedder } => match name.strip_prefix("embed_audio.") {
                Some(rest) => format!("{embedder}{rest}"),
                None => format!("{tower}{name}"),
            },
            Layout::Mmproj => hearth_weights::gguf_names::audio_tower_gguf_name(name),
        }
    }
}

/// A feed-forward block: `x + residual_weight · norm(W₂ · silu(W₁ · norm(x)))`.
struct FeedForward {
    pre_norm: Tensor<1>,
    up: Linear,
    down: Linear,
    post_norm: Tensor<1>,
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    post: Linear,
    /// `[W, n, d]`: the relative-position keys of distances 0‥W (`relative_k_proj` of the
    /// sinusoidal embeddings), computed at load.
    relative_keys: Tensor<3>,
    /// `[d]`: the queries' scale per dimension, `q_scale · softplus(per_dim_scale)`.
    query_scale: Tensor<1>,
}

/// The light convolution block: GLU, a causal depthwise convolution over time, SiLU.
struct LightConv {
    pre_norm: Tensor<1>,
    start: Linear,
    /// `[K, H]`: tap `t` multiplies the frame `K - 1 - t` back.
    kernel: Tensor<2>,
    conv_norm: Tensor<1>,
    end: Linear,
}

struct ConformerLayer {
    feed_forward1: FeedForward,
    norm_pre_attention: Tensor<1>,
    attention: Attention,
    norm_post_attention: Tensor<1>,
    light_conv: LightConv,
    feed_forward2: FeedForward,
    norm_out: Tensor<1>,
}

/// One subsampling step: a 3 × 3 convolution of stride 2 over (time, frequency), a layer norm
/// over its channels (no bias), ReLU.
struct Subsample {
    /// `[out, in, 3, 3]`
    conv: Tensor<4>,
    norm: Tensor<1>,
}

pub struct AudioTower {
    config: AudioConfig,
    subsample: [Subsample; 2],
    /// `[C₁·F/4, H]`, transposed.
    input_projection: Tensor<2>,
    layers: Vec<ConformerLayer>,
    /// `[H, out]` and `[out]`.
    output_projection: (Tensor<2>, Tensor<1>),
    /// `[out, h]`: the embedder's projection to the text width.
    embedding_projection: Tensor<2>,
    device: Device,
}

fn feed_forward(r: &mut TowerReader, module: &str, c: &AudioConfig) -> Result<FeedForward, ModelError> {
    let h = c.hidden_size;
    Ok(FeedForward {
        pre_norm: r.tensor(&format!("{module}.pre_layer_norm.weight"), [h])?,
        up: r.clippable(&format!("{module}.ffw_layer_1"), 4 * h, h, c.clipped_linears)?,
        down: r.clippable(&format!("{module}.ffw_layer_2"), h, 4 * h, c.clipped_linears)?,
        post_norm: r.tensor(&format!("{module}.post_layer_norm.weight"), [h])?,
    })
}

fn attention(r: &mut TowerReader, layout: Layout, module: &str, c: &AudioConfig) -> Result<Attention, ModelError> {
    let (h, n, d) = (c.hidden_size, c.num_heads, c.head_dim());
    let w = c.context_left - 1;
    let mut linear = |part: &str| r.clippable(&format!("{module}.{part}"), h, h, c.clipped_linears);
    let (q, k, v, post) = (linear("q_proj")?, linear("k_proj")?, linear("v_proj")?, linear("post")?);
    // The sinusoidal embeddings of distances 0‥W ([sin…, cos…] over H/2 timescales), projected.
    let half = h / 2;
    let increment = (10_000f64).ln() / (half.max(2) - 1) as f64;
    let mut embeddings = Vec::with_capacity(w * h);
    for distance in 0..w {
        let angle = |i: usize| distance as f64 * (-(i as f64) * increment).exp();
        embeddings.extend((0..half).map(|i| angle(i).sin() as f32));
        embeddings.extend((0..half).map(|i| angle(i).cos() as f32));
    }
    let embeddings = Tensor::<2>::from_data(TensorData::new(embeddings, [w, h]), r.device);
    let relative = r.matrix(&format!("{module}.relative_k_proj.weight"), n * d, h)?;
    let relative_keys = embeddings.matmul(relative).reshape([w, n, d]);
    // q · d^-½ / ln 2 · softplus(per_dim_scale) (llama.cpp's file stores the softplus).
    let per_dim = r.host(&format!("{module}.per_dim_scale"), &[d])?;
    let scale = (d as f64).powf(-0.5) / std::f64::consts::LN_2;
    let softplus = |p: f32| match layout {
        Layout::Mmproj => f64::from(p),
        Layout::Named { .. } => (1.0 + f64::from(p).exp()).ln(),
    };
    let query_scale: Vec<f32> = per_dim.data.iter().map(|&p| (scale * softplus(p)) as f32).collect();
    let query_scale = Tensor::from_data(TensorData::new(query_scale, [d]), r.device);
    Ok(Attention { q, k, v, post, relative_keys, query_scale })
}

fn light_conv(r: &mut TowerReader, layout: Layout, module: &str, c: &AudioConfig) -> Result<LightConv, ModelError> {
    let (h, k) = (c.hidden_size, c.conv_kernel_size);
    // `[H, 1, K]` (llama.cpp's file: `[H, K]`, the same values).
    let shape: &[usize] = match layout {
        Layout::Mmproj => &[h, k],
        Layout::Named { .. } => &[h, 1, k],
    };
    let taps = r.host(&format!("{module}.depthwise_conv1d.weight"), shape)?;
    let kernel = upload_transposed(taps.data, h, k, r.device);
    Ok(LightConv {
        pre_norm: r.tensor(&format!("{module}.pre_layer_norm.weight"), [h])?,
        start: r.clippable(&format!("{module}.linear_start"), 2 * h, h, c.clipped_linears)?,
        kernel,
        conv_norm: r.tensor(&format!("{module}.conv_norm.weight"), [h])?,
        end: r.clippable(&format!("{module}.linear_end"), h, h, c.clipped_linears)?,
    })
}

/// Whether `checkpoint` carries an audio tower in a layout this loader reads.
pub fn has_audio_weights(checkpoint: &Checkpoint) -> bool {
    Layout::of(checkpoint).is_some()
}

/// The name prefixes of the tower's tensors in `checkpoint` (a loader that streams the bytes
/// fetches the ranges under them before [`AudioTower::load`]); empty without a tower.
pub fn audio_weight_prefixes(checkpoint: &Checkpoint) -> Vec<String> {
    match Layout::of(checkpoint) {
        Some(Layout::Named { tower, embedder }) => vec![tower.to_owned(), embedder.to_owned()],
        Some(Layout::Mmproj) => vec!["a.".to_owned(), "mm.a.".to_owned()],
        None => Vec::new(),
    }
}

impl AudioTower {
    /// Loads the tower and its embedder from `checkpoint` (a model's weights, or a llama.cpp
    /// projector file): linears in the file's packing where the kernels multiply by it, the
    /// rest f32.
    pub fn load(config: AudioConfig, checkpoint: &mut Checkpoint, device: &Device) -> Result<Self, ModelError> {
        let layout = Layout::of(checkpoint)
            .ok_or_else(|| hearth_weights::WeightsError::Missing { name: format!("audio_tower.{FIRST_CONV}") })?;
        let c = &config;
        if c.context_right != 0 {
            let why = format!("attention_context_right {} (only 0, Gemma 4's, is supported)", c.context_right);
            return Err(crate::config::ConfigError::Invalid(format!("audio_config: {why}")).into());
        }
        let mut r = TowerReader::new(checkpoint, device, move |name| layout.name(name));
        let [c0, c1] = c.subsampling_channels;
        let subsample = [
            Subsample {
                conv: r.tensor("subsample_conv_projection.layer0.conv.weight", [c0, 1, 3, 3])?,
                norm: r.tensor("subsample_conv_projection.layer0.norm.weight", [c0])?,
            },
            Subsample {
                conv: r.tensor("subsample_conv_projection.layer1.conv.weight", [c1, c0, 3, 3])?,
                norm: r.tensor("subsample_conv_projection.layer1.norm.weight", [c1])?,
            },
        ];
        let projected_in = c.feature_size.div_ceil(4) * c1;
        let input_projection =
            r.matrix("subsample_conv_projection.input_proj_linear.weight", c.hidden_size, projected_in)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let l = |part: &str| format!("layers.{i}.{part}");
            let h = c.hidden_size;
            layers.push(ConformerLayer {
                feed_forward1: feed_forward(&mut r, &l("feed_forward1"), c)?,
                norm_pre_attention: r.tensor(&l("norm_pre_attn.weight"), [h])?,
                attention: attention(&mut r, layout, &l("self_attn"), c)?,
                norm_post_attention: r.tensor(&l("norm_post_attn.weight"), [h])?,
                light_conv: light_conv(&mut r, layout, &l("lconv1d"), c)?,
                feed_forward2: feed_forward(&mut r, &l("feed_forward2"), c)?,
                norm_out: r.tensor(&l("norm_out.weight"), [h])?,
            });
        }
        let output_projection = (
            r.matrix("output_proj.weight", c.output_dims, c.hidden_size)?,
            r.tensor("output_proj.bias", [c.output_dims])?,
        );
        let embedding_projection =
            r.matrix("embed_audio.embedding_projection.weight", c.text_hidden_size, c.output_dims)?;
        Ok(AudioTower {
            config,
            subsample,
            input_projection,
            layers,
            output_projection,
            embedding_projection,
            device: device.clone(),
        })
    }

    pub fn config(&self) -> &AudioConfig {
        &self.config
    }

    /// Bytes of the weights on the device.
    pub fn weight_bytes(&self) -> u64 {
        fn n<const D: usize>(t: &Tensor<D>) -> u64 {
            t.shape().num_elements() as u64 * 4
        }
        let mut bytes = self.subsample.iter().map(|s| n(&s.conv) + n(&s.norm)).sum::<u64>()
            + n(&self.input_projection)
            + n(&self.output_projection.0)
            + n(&self.output_projection.1)
            + n(&self.embedding_projection);
        for l in &self.layers {
            for f in [&l.feed_forward1, &l.feed_forward2] {
                bytes += n(&f.pre_norm) + n(&f.post_norm) + f.up.device_bytes() + f.down.device_bytes();
            }
            let a = &l.attention;
            bytes += [&a.q, &a.k, &a.v, &a.post].iter().map(|m| m.device_bytes()).sum::<u64>();
            bytes += n(&a.relative_keys) + n(&a.query_scale);
            let v = &l.light_conv;
            bytes += n(&v.pre_norm) + n(&v.kernel) + n(&v.conv_norm) + v.start.device_bytes() + v.end.device_bytes();
            bytes += n(&l.norm_pre_attention) + n(&l.norm_post_attention) + n(&l.norm_out);
        }
        bytes
    }

    /// A clip's soft tokens `[T, h]`, one per 40 ms of sound (the frames that end in the padding
    /// are dropped, as the processor counts them).
    pub fn encode(&self, features: &AudioFeatures) -> Result<Tensor<2>, ModelError> {
        let c = &self.config;
        let (frames, bins) = (features.frames, features.bins);
        if bins != c.feature_size {
            return Err(ModelError::Clip(format!("audio features of {bins} bins, the tower takes {}", c.feature_size)));
        }
        let mut mask = features.mask.clone();
        if frames == 0 || !mask.iter().any(|&m| m) {
            return Ok(Tensor::zeros([0, c.text_hidden_size], &self.device));
        }
        // [1, 1, F, bins]: time and frequency as an image of one channel.
        let mut x = Tensor::<2>::from_data(TensorData::new(features.values.clone(), [frames, bins]), &self.device)
            .reshape([1, 1, frames, bins]);
        for step in &self.subsample {
            let time = x.dims()[2];
            let keep: Vec<f32> = mask.iter().map(|&m| if m { 1.0 } else { 0.0 }).collect();
            let keep = Tensor::<1>::from_data(TensorData::new(keep, [time]), &self.device).reshape([1, 1, time, 1]);
            x = conv2d(x * keep, step.conv.clone(), None, ConvOptions::new([2, 2], [1, 1], [1, 1], 1));
            x = relu(layer_norm_channels(x, &step.norm, c.rms_norm_eps));
            mask = mask.iter().step_by(2).copied().collect();
        }
        // [1, C₁, S, F/4] → [S, F/4 · C₁] (frequency-major, channels inner), projected.  [S, H]
        let [_, channels, s, f] = x.dims();
        let x = x.permute([0, 2, 3, 1]).reshape([s, f * channels]);
        let mut x = x.matmul(self.input_projection.clone());

        let keys = KeyMask::new(&mask, c.context_left - 1, &self.device);
        for layer in &self.layers {
            x = self.layer(layer, x, &keys);
        }
        let (w, b) = &self.output_projection;
        let x = x.matmul(w.clone()) + b.clone().unsqueeze_dim(0);
        // The embedder: RMS-norm without a scale, projection to the text width.  [S, h]
        let embedded = rms_norm_unscaled(x, c.rms_norm_eps).matmul(self.embedding_projection.clone());
        let valid: Vec<i32> = (0..s as i32).filter(|&i| mask[i as usize]).collect();
        let count = valid.len();
        let valid = Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(valid, [count]), &self.device);
        Ok(embedded.select(0, valid))
    }

    /// One conformer layer: [S, H] → [S, H].
    fn layer(&self, l: &ConformerLayer, x: Tensor<2>, keys: &KeyMask) -> Tensor<2> {
        let c = &self.config;
        let (eps, clip) = (c.rms_norm_eps, c.gradient_clipping);
        let x = self.feed_forward(&l.feed_forward1, x);
        let attended =
            self.attention(&l.attention, rms_norm(x.clone().clamp(-clip, clip), &l.norm_pre_attention, eps), keys);
        let x = x + rms_norm(attended.clamp(-clip, clip), &l.norm_post_attention, eps);
        let x = self.light_conv(&l.light_conv, x);
        let x = self.feed_forward(&l.feed_forward2, x);
        rms_norm(x.clamp(-clip, clip), &l.norm_out, eps)
    }

    fn feed_forward(&self, f: &FeedForward, x: Tensor<2>) -> Tensor<2> {
        let c = &self.config;
        let (eps, clip) = (c.rms_norm_eps, c.gradient_clipping);
        let h = rms_norm(x.clone().clamp(-clip, clip), &f.pre_norm, eps);
        let h = f.down.forward(silu(f.up.forward(h))).clamp(-clip, clip);
        x + rms_norm(h, &f.post_norm, eps).mul_scalar(c.residual_weight)
    }

    /// Each frame attends to itself and the W - 1 frames before it that hold sound, with a
    /// relative-position term and a soft cap on the logits.  [S, H] (normed) → [S, H]
    fn attention(&self, a: &Attention, x: Tensor<2>, keys: &KeyMask) -> Tensor<2> {
        let c = &self.config;
        let (s, n, d, w) = (x.dims()[0], c.num_heads, c.head_dim(), c.context_left - 1);
        let q = a.q.forward(x.clone()).reshape([s, n, d]) * a.query_scale.clone().reshape([1, 1, d]);
        // The keys' scale, ln(1 + e) / ln 2 (not the relative keys').
        let key_scale = ((1.0 + std::f64::consts::E).ln() / std::f64::consts::LN_2) as f32;
        let k = a.k.forward(x.clone()).reshape([s, n, d]).mul_scalar(key_scale);
        let v = a.v.forward(x).reshape([s, n, d]);
        // [S, W, n, d]: row i, slot δ holds frame i - δ (zeros before the clip).
        let back = |t: Tensor<3>| Tensor::stack::<4>((0..w).map(|delta| shift_back(t.clone(), delta)).collect(), 1);
        let (k_band, v_band) = (back(k), back(v));
        let scores = ((k_band + a.relative_keys.clone().unsqueeze_dim(0)) * q.unsqueeze_dim(1)).sum_dim(3);
        let capped = scores.div_scalar(c.logit_cap).tanh().mul_scalar(c.logit_cap); // [S, W, n, 1]
        let masked = capped.mask_fill(keys.invalid.clone().expand([s, w, n, 1]), c.invalid_logit);
        let weights = softmax(masked, 1);
        let out = (weights * v_band).sum_dim(1).reshape([s, n * d]);
        a.post.forward(out)
    }

    fn light_conv(&self, l: &LightConv, x: Tensor<2>) -> Tensor<2> {
        let c = &self.config;
        let (eps, clip, h, k) = (c.rms_norm_eps, c.gradient_clipping, c.hidden_size, c.conv_kernel_size);
        let s = x.dims()[0];
        let started = l.start.forward(rms_norm(x.clone(), &l.pre_norm, eps));
        let gated = started.clone().slice([0..s, 0..h]) * sigmoid(started.slice([0..s, h..2 * h]));
        // Causal depthwise convolution: tap t reads the frame K - 1 - t back.
        let gated = gated.unsqueeze_dim::<3>(1);
        let mut conv = Tensor::<2>::zeros([s, h], &self.device);
        for t in 0..k {
            let tap = l.kernel.clone().slice([t..t + 1, 0..h]);
            conv = conv + shift_back(gated.clone(), k - 1 - t).reshape([s, h]) * tap;
        }
        let conv = rms_norm(conv.clamp(-clip, clip), &l.conv_norm, eps);
        x + l.end.forward(silu(conv))
    }
}

/// `[S, a, b]` moved `delta` rows later: row i holds row i - delta, zeros before.
fn shift_back(t: Tensor<3>, delta: usize) -> Tensor<3> {
    let [s, a, b] = t.dims();
    if delta == 0 {
        return t;
    }
    if delta >= s {
        return Tensor::zeros([s, a, b], &t.device());
    }
    let zeros = Tensor::zeros([delta, a, b], &t.device());
    Tensor::cat(vec![zeros, t.slice([0..s - delta, 0..a, 0..b])], 0)
}

/// `[1, C, S, F]`: each position's C channels normalised (mean and variance), scaled, no bias.
fn layer_norm_channels(x: Tensor<4>, weight: &Tensor<1>, eps: f32) -> Tensor<4> {
    let channels = weight.dims()[0];
    let mean = x.clone().mean_dim(1);
    let centred = x - mean;
    let variance = centred.clone().square().mean_dim(1);
    centred / variance.add_scalar(eps).sqrt() * weight.clone().reshape([1, channels, 1, 1])
}

/// Which (query, distance) pairs see no frame: before the clip, or a frame in the padding.
struct KeyMask {
    /// `[S, W, 1, 1]`: true where the key is not to be seen.
    invalid: Tensor<4, Bool>,
}

impl KeyMask {
    fn new(valid: &[bool], window: usize, device: &Device) -> Self {
        let s = valid.len();
        let invalid: Vec<bool> =
            (0..s).flat_map(|i| (0..window).map(move |delta| delta > i || !valid[i - delta])).collect();
        KeyMask { invalid: Tensor::from_data(TensorData::new(invalid, [s, window, 1, 1]), device) }
    }
}
