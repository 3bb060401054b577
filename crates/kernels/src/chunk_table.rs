//! A chunk's positions as the kernels read them, in one small buffer per layer type: the RoPE
//! rotation of every new token, then where the chunk starts and how many keys its attention sees.
//! The kernels read the position from the buffer rather than from a launch argument, so a decode
//! step recorded once replays at the next position after a rewrite of these few values.

use burn::tensor::{Device, Tensor, TensorData};

use crate::overwrite::overwrite;

/// The cache slots a chunk's attention reads: `count` of them from slot `first`, wrapping at the
/// cache's capacity (a sliding layer's window in its ring). A bare count starts at slot 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySlots {
    pub first: usize,
    pub count: usize,
}

impl From<usize> for KeySlots {
    fn from(count: usize) -> Self {
        KeySlots { first: 0, count }
    }
}

/// `[S + 1, 2d]` f32: row `t` is the cos, then the sin, of position `start + t` (`d` each, both
/// halves of the head at the same frequencies); the last row is `start`, the key count, the first
/// key's slot, then zeros. Positions and counts stay below 2²⁴, where f32 holds every integer.
#[derive(Clone)]
pub struct ChunkTable {
    pub table: Tensor<2>,
    /// The chunk's first position as the table holds it (the CPU path reads it here).
    start: usize,
    /// The key count as the table holds it (the profile's bytes read).
    keys: usize,
}

impl ChunkTable {
    /// The table of positions `start..start + tokens` whose attention sees `keys` keys, for
    /// RoPE frequencies `inv_freq` (`d / 2` of them).
    pub fn new(inv_freq: &[f32], start: usize, tokens: usize, keys: impl Into<KeySlots>, device: &Device) -> Self {
        let d = inv_freq.len() * 2;
        let keys = keys.into();
        let data = Self::values(inv_freq, start, tokens, keys);
        let table = Tensor::from_data(TensorData::new(data, [tokens + 1, 2 * d]), device);
        ChunkTable { table, start, keys: keys.count }
    }

    /// Rewrites the table in place for a chunk of as many tokens (its buffer stays the one a
    /// recorded step reads).
    pub fn rewrite(&mut self, inv_freq: &[f32], start: usize, keys: impl Into<KeySlots>) {
        let (tokens, keys) = (self.tokens(), keys.into());
        overwrite(&mut self.table, Self::values(inv_freq, start, tokens, keys));
        self.start = start;
        self.keys = keys.count;
    }

    fn values(inv_freq: &[f32], start: usize, tokens: usize, keys: KeySlots) -> Vec<f32> {
        let d = inv_freq.len() * 2;
        let mut values = Vec::with_capacity((tokens + 1) * 2 * d);
        for p in start..start + tokens {
            // f64 angles: positions reach 10⁵ and f32 would lose the phase.
            let angles = || (0..2).flat_map(|_| inv_freq.iter().map(|&f| p as f64 * f64::from(f)));
            values.extend(angles().map(|angle| angle.cos() as f32));
            values.extend(angles().map(|angle| angle.sin() as f32));
        }
        values.extend([start as f32, keys.count as f32, keys.first as f32]);
        values.resize((tokens + 1) * 2 * d, 0.0);
        values
    }

    /// New tokens in the chunk.
    pub fn tokens(&self) -> usize {
        self.table.dims()[0] - 1
    }

    /// The head dimension the table rotates.
    pub fn head_dim(&self) -> usize {
        self.table.dims()[1] / 2
    }

    pub fn start(&self) -> usize {
        self.start
    }

    /// The keys the chunk's attention sees.
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// The rotations alone, `[S, 2d]` (the tensor-operation path).
    pub fn rotations(&self) -> Tensor<2> {
        let [rows, width] = self.table.dims();
        self.table.clone().slice([0..rows - 1, 0..width])
    }
}
