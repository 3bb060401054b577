//! Rotary position embeddings: the cos and sin tables of a chunk's positions.

use burn::tensor::{Device, Tensor, TensorData};

/// Rotary embedding tables for one chunk and one head dimension.
pub struct RopeTables {
    /// [S, 1, d]
    pub cos: Tensor<3>,
    pub sin: Tensor<3>,
    /// [S, 2·d]: each row's cos then sin, for kernels that take both in one binding.
    pub cos_sin: Tensor<2>,
}

impl RopeTables {
    pub fn new(inv_freq: &[f32], positions: std::ops::Range<usize>, device: &Device) -> Self {
        let d = inv_freq.len() * 2;
        let s = positions.len();
        let (mut cos, mut sin) = (Vec::with_capacity(s * d), Vec::with_capacity(s * d));
        for p in positions {
            // cos(cat(f, f)): both halves of the head use the same frequencies.
            for _ in 0..2 {
                for &f in inv_freq {
                    // f64 angles: positions reach 10⁵ and f32 would lose the phase.
                    let angle = p as f64 * f64::from(f);
                    cos.push(angle.cos() as f32);
                    sin.push(angle.sin() as f32);
                }
            }
        }
        let cos_sin: Vec<f32> =
            cos.chunks(d.max(1)).zip(sin.chunks(d.max(1))).flat_map(|(c, s)| [c, s].concat()).collect();
        RopeTables {
            cos: Tensor::from_data(TensorData::new(cos, [s, 1, d]), device),
            sin: Tensor::from_data(TensorData::new(sin, [s, 1, d]), device),
            cos_sin: Tensor::from_data(TensorData::new(cos_sin, [s, 2 * d]), device),
        }
    }
}
