//! Gemma 4's vision tower and multimodal embedder: an image's patches → its soft tokens, the rows
//! that replace the image placeholders in the text embeddings. Reference: transformers 5.23,
//! `Gemma4VisionModel` and `Gemma4MultimodalEmbedder` (modeling_gemma4.py).
//!
//! Shapes: N = the image's real patches (padding patches are never computed: the reference masks
//! them out of every attention and every pooled average, so dropping them changes nothing),
//! w = tower width, H = heads, Hkv = key/value heads, d = head size, T = soft tokens (N / k²),
//! h = text width.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use hearth_kernels::fused::rms_norm_unscaled;
use hearth_kernels::{gelu_tanh_mul, rms_norm};
use hearth_weights::Checkpoint;

use super::config::VisionConfig;
use super::image::ImagePatches;
use crate::error::ModelError;
use crate::tower_weights::{Linear, TowerReader, upload_transposed};

struct EncoderLayer {
    input_norm: Tensor<1>,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// RMS-norm weights over the head dimension (the values' norm has none).
    q_norm: Tensor<1>,
    k_norm: Tensor<1>,
    post_attention_norm: Tensor<1>,
    pre_feedforward_norm: Tensor<1>,
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    post_feedforward_norm: Tensor<1>,
}

/// The vision tower with its weights on a device.
pub struct VisionTower {
    config: VisionConfig,
    /// `[3·p², w]`: one patch's pixels (row, column, channel) to its embedding.
    patch_projection: Tensor<2>,
    /// `[2·P, w]`: the x table's P rows, then the y table's.
    position_table: Tensor<2>,
    layers: Vec<EncoderLayer>,
    /// `std_bias`, `std_scale` `[w]` when the config standardizes.
    standardize: Option<(Tensor<1>, Tensor<1>)>,
    /// `[w, h]`: the multimodal embedder's projection (its norm has no weight).
    embedding_projection: Tensor<2>,
    device: Device,
}

/// How a checkpoint names the tower's tensors.
#[derive(Clone, Copy)]
enum Layout {
    /// Transformers' names under a prefix for the tower and one for the embedder: Hugging Face's
    /// `model.vision_tower.`, or MLX's `vision_tower.` (mlx-vlm drops the outer `model.`).
    Named { tower: &'static str, embedder: &'static str },
    /// llama.cpp's projector file (`mmproj`): `v.blk.N.attn_q.weight`, `mm.input_projection.weight`, …
    Mmproj,
}

const NAMED: [Layout; 2] = [
    Layout::Named { tower: "model.vision_tower.", embedder: "model.embed_vision." },
    Layout::Named { tower: "vision_tower.", embedder: "embed_vision." },
];

impl Layout {
    /// The layout `checkpoint` uses, if it holds a tower.
    fn of(checkpoint: &Checkpoint) -> Option<Layout> {
        NAMED.into_iter().chain([Layout::Mmproj]).find(|layout| checkpoint.contains(&layout.name(PATCH_PROJECTION)))
    }

    /// The checkpoint's name for a tower tensor given by its name in transformers' tower
    /// (`encoder.layers.0.self_attn.q_proj.linear.weight`), or in its embedder when it starts
    /// with `embed_vision.`.
    fn name(self, name: &str) -> String {
        match self {
            Layout::Named { tower, embedder } => match name.strip_prefix("embed_vision.") {
                Some(rest) => format!("{embedder}{rest}"),
                None => format!("{tower}{name}"),
            },
            Layout::Mmproj => hearth_weights::gguf_names::vision_tower_gguf_name(name),
        }
    }
}

const PATCH_PROJECTION: &str = "patch_embedder.input_proj.weight";

/// Whether `checkpoint` carries a vision tower in a layout this loader reads.
pub fn has_vision_weights(checkpoint: &Checkpoint) -> bool {
    Layout::of(checkpoint).is_some()
}

/// The name prefixes of the tower's tensors in `checkpoint` (a loader that streams the bytes
/// fetches the ranges under them before [`VisionTower::load`]); empty without a tower.
pub fn vision_weight_prefixes(checkpoint: &Checkpoint) -> Vec<String> {
    match Layout::of(checkpoint) {
        Some(Layout::Named { tower, embedder }) => vec![tower.to_owned(), embedder.to_owned()],
        Some(Layout::Mmproj) => vec!["v.".to_owned(), "mm.".to_owned()],
        None => Vec::new(),
    }
}

/// The patch projection `[w, 3·p²]`, inputs in the processor's order (row, column, channel);
/// llama.cpp stores it as a convolution kernel `[w, 3, p, p]`.
fn patch_projection(r: &mut TowerReader, layout: Layout, w: usize, p: usize) -> Result<Tensor<2>, ModelError> {
    let Layout::Mmproj = layout else { return r.matrix(PATCH_PROJECTION, w, 3 * p * p) };
    let kernel = r.host(PATCH_PROJECTION, &[w, 3, p, p])?;
    let mut data = vec![0.0; kernel.data.len()];
    for o in 0..w {
        for c in 0..3 {
            for y in 0..p {
                for x in 0..p {
                    data[o * 3 * p * p + (y * p + x) * 3 + c] = kernel.data[((o * 3 + c) * p + y) * p + x];
                }
            }
        }
    }
    Ok(upload_transposed(data, w, 3 * p * p, r.device))
}

impl VisionTower {
    /// Loads the tower and the embedder from `checkpoint` (a model's weights, or a llama.cpp
    /// projector file). Where the kernels run its linears stay as stored (packed codes, 16-bit
    /// values); everything else is f32 on the device.
    pub fn load(config: VisionConfig, checkpoint: &mut Checkpoint, device: &Device) -> Result<Self, ModelError> {
        let layout = Layout::of(checkpoint).ok_or_else(|| hearth_weights::WeightsError::Missing {
            name: format!("vision_tower.{PATCH_PROJECTION}"),
        })?;
        let c = &config;
        let (w, p) = (c.hidden_size, c.patch_size);
        let (q_rows, kv_rows) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let mut r = TowerReader::new(checkpoint, device, move |name| layout.name(name));

        let patch_projection = patch_projection(&mut r, layout, w, p)?;
        let table = r.host("patch_embedder.position_embedding_table", &[2, c.position_embedding_size, w])?;
        let position_table = Tensor::from_data(TensorData::new(table.data, [2 * c.position_embedding_size, w]), device);

        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let l = format!("encoder.layers.{i}.");
            let clipped = c.clipped_linears;
            layers.push(EncoderLayer {
                input_norm: r.tensor(&format!("{l}input_layernorm.weight"), [w])?,
                q_proj: r.clippable(&format!("{l}self_attn.q_proj"), q_rows, w, clipped)?,
                k_proj: r.clippable(&format!("{l}self_attn.k_proj"), kv_rows, w, clipped)?,
                v_proj: r.clippable(&format!("{l}self_attn.v_proj"), kv_rows, w, clipped)?,
                o_proj: r.clippable(&format!("{l}self_attn.o_proj"), w, q_rows, clipped)?,
                q_norm: r.tensor(&format!("{l}self_attn.q_norm.weight"), [c.head_dim])?,
                k_norm: r.tensor(&format!("{l}self_attn.k_norm.weight"), [c.head_dim])?,
                post_attention_norm: r.tensor(&format!("{l}post_attention_layernorm.weight"), [w])?,
                pre_feedforward_norm: r.tensor(&format!("{l}pre_feedforward_layernorm.weight"), [w])?,
                gate_proj: r.clippable(&format!("{l}mlp.gate_proj"), c.intermediate_size, w, clipped)?,
                up_proj: r.clippable(&format!("{l}mlp.up_proj"), c.intermediate_size, w, clipped)?,
                down_proj: r.clippable(&format!("{l}mlp.down_proj"), w, c.intermediate_size, clipped)?,
                post_feedforward_norm: r.tensor(&format!("{l}post_feedforward_layernorm.weight"), [w])?,
            });
        }
        let standardize =
            if c.standardize { Some((r.tensor("std_bias", [w])?, r.tensor("std_scale", [w])?)) } else { None };
        let embedding_projection = r.matrix("embed_vision.embedding_projection.weight", c.text_hidden_size, w)?;
        Ok(VisionTower {
            config,
            patch_projection,
            position_table,
            layers,
            standardize,
            embedding_projection,
            device: device.clone(),
        })
    }

    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// Bytes of the weights on the device (packed matrices at their stored size, the rest f32).
    pub fn weight_bytes(&self) -> u64 {
        fn n<const D: usize>(t: &Tensor<D>) -> u64 {
            t.shape().num_elements() as u64 * 4
        }
        let mut bytes = n(&self.patch_projection) + n(&self.position_table) + n(&self.embedding_projection);
        for l in &self.layers {
            for m in [&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj] {
                bytes += m.device_bytes();
            }
            for v in [
                &l.input_norm,
                &l.q_norm,
                &l.k_norm,
                &l.post_attention_norm,
                &l.pre_feedforward_norm,
                &l.post_feedforward_norm,
            ] {
                bytes += n(v);
            }
        }
        bytes + self.standardize.as_ref().map_or(0, |(b, s)| n(b) + n(s))
    }

    /// An image's soft tokens `[T, h]`, in the order the placeholders take them.
    pub fn encode(&self, image: &ImagePatches) -> Result<Tensor<2>, ModelError> {
        let c = &self.config;
        let (w, p, k) = (c.hidden_size, c.patch_size, c.pooling_kernel_size);
        let n = image.real_patches;
        let positions = &image.positions[..n];
        let too_far = positions.iter().flatten().find(|&&v| v < 0 || v as usize >= c.position_embedding_size);
        if let Some(&v) = too_far {
            return Err(ModelError::Image(format!(
                "patch position {v} is outside the tower's {} positions",
                c.position_embedding_size
            )));
        }
        let groups = pooling_order(positions, k)
            .ok_or_else(|| ModelError::Image(format!("the image's patches do not tile into {k} × {k} squares")))?;

        // Patch embedder: pixels in [0, 1] scaled to [-1, 1], projected; plus the x and y tables.
        let pixels = Tensor::<2>::from_data(
            TensorData::new(image.pixel_values[..n * 3 * p * p].to_vec(), [n, 3 * p * p]),
            &self.device,
        );
        let x_ids: Vec<i32> = positions.iter().map(|pos| pos[0]).collect();
        let y_ids: Vec<i32> = positions.iter().map(|pos| pos[1] + c.position_embedding_size as i32).collect();
        let lookup = |ids: Vec<i32>| {
            let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [n]), &self.device);
            self.position_table.clone().select(0, ids)
        };
        let mut x = pixels.mul_scalar(2.0).sub_scalar(1.0).matmul(self.patch_projection.clone())
            + lookup(x_ids)
            + lookup(y_ids);

        let rope = AxialRope::new(positions, c.head_dim, c.rope_theta, &self.device);
        for layer in &self.layers {
            x = self.layer(layer, x, &rope);
        }

        // Pooler: the k² patches of each square averaged (grouped by the positions), × √w.
        let order = Tensor::<1, Int>::from_data(TensorData::new(groups, [n]), &self.device);
        let t = n / (k * k);
        let pooled =
            x.select(0, order).reshape([t, k * k, w]).mean_dim(1).reshape([t, w]).mul_scalar((w as f32).sqrt());
        let pooled = match &self.standardize {
            Some((bias, scale)) => (pooled - bias.clone().unsqueeze_dim(0)) * scale.clone().unsqueeze_dim(0),
            None => pooled,
        };
        // Multimodal embedder: RMS-norm without a scale, projection to the text width.  [T, h]
        Ok(rms_norm_unscaled(pooled, c.rms_norm_eps).matmul(self.embedding_projection.clone()))
    }

    /// One encoder layer: [N, w] → [N, w].
    fn layer(&self, l: &EncoderLayer, x: Tensor<2>, rope: &AxialRope) -> Tensor<2> {
        let c = &self.config;
        let eps = c.rms_norm_eps;
        let h = rms_norm(x.clone(), &l.input_norm, eps);
        let attended = self.attention(l, h, rope);
        let x = x + rms_norm(l.o_proj.forward(attended), &l.post_attention_norm, eps);
        let h = rms_norm(x.clone(), &l.pre_feedforward_norm, eps);
        let m = l.down_proj.forward(gelu_tanh_mul(l.gate_proj.forward(h.clone()), l.up_proj.forward(h)));
        x + rms_norm(m, &l.post_feedforward_norm, eps)
    }

    /// Bidirectional self-attention over the image's patches (scale 1, as the text model):
    /// [N, w] (normed) → [N, H·d].
    fn attention(&self, l: &EncoderLayer, h: Tensor<2>, rope: &AxialRope) -> Tensor<2> {
        let c = &self.config;
        let (n, d, heads, kv_heads) = (h.dims()[0], c.head_dim, c.num_heads, c.num_kv_heads);
        let eps = c.rms_norm_eps;
        let per_head = |t: Tensor<2>, count: usize| t.reshape([n, count, d]);
        let q = rope.apply(rms_norm(per_head(l.q_proj.forward(h.clone()), heads), &l.q_norm, eps));
        let k = rope.apply(rms_norm(per_head(l.k_proj.forward(h.clone()), kv_heads), &l.k_norm, eps));
        let v = rms_norm_unscaled(per_head(l.v_proj.forward(h), kv_heads), eps);

        // [Hkv, group, N, d] queries against [Hkv, 1, N, d] keys and values.
        let group = heads / kv_heads;
        let q = q.swap_dims(0, 1).reshape([kv_heads, group, n, d]);
        let k = k.swap_dims(0, 1).reshape([kv_heads, 1, n, d]);
        let v = v.swap_dims(0, 1).reshape([kv_heads, 1, n, d]);
        // Scores in row blocks, so that no buffer exceeds what a browser lets one binding hold.
        let rows = (SCORE_BYTES / (heads * n * 4)).clamp(1, n);
        let mut out = Vec::with_capacity(n.div_ceil(rows));
        for start in (0..n).step_by(rows) {
            let end = (start + rows).min(n);
            let q_rows = q.clone().slice([0..kv_heads, 0..group, start..end, 0..d]);
            let scores = q_rows.matmul(k.clone().swap_dims(2, 3));
            out.push(softmax(scores, 3).matmul(v.clone()));
        }
        let o = if out.len() == 1 { out.remove(0) } else { Tensor::cat(out, 2) };
        // [Hkv, group, N, d] → [N, H·d]
        o.reshape([heads, n, d]).swap_dims(0, 1).reshape([n, heads * d])
    }
}

/// Largest attention-score block computed at once (bytes).
const SCORE_BYTES: usize = 64 << 20;

/// Gemma 4's axial 2-D rotary embedding: the first half of each head rotated by the patch's x
/// position, the second half by its y, each half as a standard rotate-half RoPE over d/4
/// frequencies `θ^(-4i/d)`.
struct AxialRope {
    /// `[N, 1, d/4]` for x, then for y.
    cos: [Tensor<3>; 2],
    sin: [Tensor<3>; 2],
    head_dim: usize,
}

impl AxialRope {
    fn new(positions: &[[i32; 2]], head_dim: usize, theta: f32, device: &Device) -> Self {
        let n = positions.len();
        let quarter = head_dim / 4;
        let half = head_dim / 2;
        // As transformers computes them: f32 inverse frequencies, f32 angles.
        let inv_freq: Vec<f32> = (0..quarter).map(|i| 1.0 / theta.powf((2 * i) as f32 / half as f32)).collect();
        let table = |axis: usize, f: fn(f32) -> f32| {
            let values: Vec<f32> =
                positions.iter().flat_map(|pos| inv_freq.iter().map(move |&inv| f(pos[axis] as f32 * inv))).collect();
            Tensor::<3>::from_data(TensorData::new(values, [n, 1, quarter]), device)
        };
        AxialRope {
            cos: [table(0, f32::cos), table(1, f32::cos)],
            sin: [table(0, f32::sin), table(1, f32::sin)],
            head_dim,
        }
    }

    /// [N, heads, d] → [N, heads, d]
    fn apply(&self, x: Tensor<3>) -> Tensor<3> {
        let [n, heads, d] = x.dims();
        debug_assert_eq!(d, self.head_dim);
        let quarter = d / 4;
        let mut parts = Vec::with_capacity(4);
        for axis in 0..2 {
            let base = axis * 2 * quarter;
            let a = x.clone().slice([0..n, 0..heads, base..base + quarter]);
            let b = x.clone().slice([0..n, 0..heads, base + quarter..base + 2 * quarter]);
            let (cos, sin) = (&self.cos[axis], &self.sin[axis]);
            parts.push(a.clone() * cos.clone() - b.clone() * sin.clone());
            parts.push(b * cos.clone() + a * sin.clone());
        }
        Tensor::cat(parts, 2)
    }
}

/// The patches in pooling order: each k × k square's patches together, squares in row-major
/// order (as transformers numbers them: `x/k + (columns/k) · (y/k)`). `None` when the patches do
/// not fill whole squares.
fn pooling_order(positions: &[[i32; 2]], k: usize) -> Option<Vec<i32>> {
    let columns = positions.iter().map(|p| p[0] as usize + 1).max()?;
    if !columns.is_multiple_of(k) || !positions.len().is_multiple_of(k * k) {
        return None;
    }
    let squares = positions.len() / (k * k);
    let mut members: Vec<Vec<i32>> = vec![Vec::with_capacity(k * k); squares];
    for (index, p) in positions.iter().enumerate() {
        let square = p[0] as usize / k + (columns / k) * (p[1] as usize / k);
        members.get_mut(square)?.push(index as i32);
    }
    if members.iter().any(|m| m.len() != k * k) {
        return None;
    }
    Some(members.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_are_grouped_by_square_in_row_major_order() {
        // A 4 × 2 grid of patches (x 0..4, y 0..2) in raster order, k = 2: squares (0,0) and (2,0).
        let positions: Vec<[i32; 2]> = (0..2).flat_map(|y| (0..4).map(move |x| [x, y])).collect();
        assert_eq!(pooling_order(&positions, 2), Some(vec![0, 1, 4, 5, 2, 3, 6, 7]));
    }

    #[test]
    fn patches_that_do_not_tile_are_refused() {
        let positions: Vec<[i32; 2]> = (0..3).map(|x| [x, 0]).collect();
        assert_eq!(pooling_order(&positions, 2), None);
    }
}
