//! Rotary position embeddings: the cos and sin tables of a chunk's positions.

use burn::tensor::{Device, Tensor, TensorData};

/// Rotary embedding table for one chunk and one head dimension: one upload per chunk.
pub struct RopeTables {
    /// [S, 2·d]: each position's cos, then its sin (`cos(cat(f, f))`: both halves of the head
    /// use the same frequencies).
    pub cos_sin: Tensor<2>,
}

impl RopeTables {
    pub fn new(inv_freq: &[f32], positions: std::ops::Range<usize>, device: &Device) -> Self {
        let d = inv_freq.len() * 2;
        let s = positions.len();
        let mut cos_sin = Vec::with_capacity(s * 2 * d);
        for p in positions {
            // f64 angles: positions reach 10⁵ and f32 would lose the phase.
            let angles = || (0..2).flat_map(|_| inv_freq.iter().map(|&f| p as f64 * f64::from(f)));
            cos_sin.extend(angles().map(|angle| angle.cos() as f32));
            cos_sin.extend(angles().map(|angle| angle.sin() as f32));
        }
        RopeTables { cos_sin: Tensor::from_data(TensorData::new(cos_sin, [s, 2 * d]), device) }
    }

    /// The head dimension the table rotates.
    pub fn head_dim(&self) -> usize {
        self.cos_sin.dims()[1] / 2
    }
}
