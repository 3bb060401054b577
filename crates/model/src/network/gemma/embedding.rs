//! The token tables: the token embedding (split in blocks that each fit a storage binding; the
//! tied output head multiplies by the same blocks) and Gemma 4's per-layer-embedding table (on the
//! host, packed on the device, or in its stored GGUF blocks), and their lookups by id, on the host
//! or from ids already on the device.

use burn::tensor::{Device, Int, Tensor, TensorData};
use hearth_kernels::{AffineMatrix, BlockTable, gather_by_block};
use hearth_weights::{AffineTensor, HostTensor};

/// The token embedding ([vocab, h]) as blocks of rows that each fit a storage binding. Lookups
/// gather from each block and restore the token order; the tied output head multiplies by each
/// block and joins the logits.
pub(super) struct SplitEmbedding {
    /// [rows_per_block, h] each (the last may be shorter).
    pub(super) blocks: Vec<EmbeddingBlock>,
    pub(super) rows_per_block: usize,
}

#[allow(clippy::large_enum_variant)]
pub(super) enum EmbeddingBlock {
    Dense(Tensor<2>),
    Affine(AffineMatrix),
}

impl EmbeddingBlock {
    /// Values per row.
    pub(super) fn width(&self) -> usize {
        match self {
            EmbeddingBlock::Dense(rows) => rows.dims()[1],
            EmbeddingBlock::Affine(rows) => rows.k(),
        }
    }

    pub(super) fn device_bytes(&self) -> usize {
        match self {
            EmbeddingBlock::Dense(rows) => rows.shape().num_elements() * 4,
            EmbeddingBlock::Affine(rows) => rows.device_bytes(),
        }
    }

    /// Rows `ids` of this block: [n] → [n, h]
    pub(super) fn rows(&self, ids: &[u32], device: &Device) -> Tensor<2> {
        match self {
            EmbeddingBlock::Dense(rows) => {
                rows.clone().select(0, int_ids(ids.iter().map(|&i| i as i32).collect(), device))
            }
            EmbeddingBlock::Affine(rows) => rows.select_rows(ids),
        }
    }

    /// `x · blockᵀ`, softcapped when `softcap`: [S, h] → [S, rows]
    pub(super) fn logits(&self, x: Tensor<2>, softcap: Option<f32>) -> Tensor<2> {
        match (self, softcap) {
            (EmbeddingBlock::Dense(rows), None) => x.matmul(rows.clone().transpose()),
            (EmbeddingBlock::Dense(rows), Some(cap)) => {
                hearth_kernels::softcap(x.matmul(rows.clone().transpose()), cap)
            }
            (EmbeddingBlock::Affine(rows), None) => rows.matmul_transposed(x),
            (EmbeddingBlock::Affine(rows), Some(cap)) => rows.softcapped_matmul_transposed(x, cap),
        }
    }
}

impl SplitEmbedding {
    pub(super) fn dense(data: Vec<f32>, vocab: usize, h: usize, max_bytes: usize, device: &Device) -> Self {
        let rows_per_block = (max_bytes / (h * 4).max(1)).clamp(1, vocab.max(1));
        let blocks = data
            .chunks(rows_per_block * h)
            .map(|rows| {
                EmbeddingBlock::Dense(Tensor::from_data(TensorData::new(rows.to_vec(), [rows.len() / h, h]), device))
            })
            .collect();
        SplitEmbedding { blocks, rows_per_block }
    }

    /// Packed codes: the codes are the largest buffer, h·bits/8 bytes a row.
    pub(super) fn affine(table: &AffineTensor, max_bytes: usize, device: &Device) -> Self {
        let vocab = table.rows;
        let rows_per_block = (max_bytes / (table.words_per_row() * 4).max(1)).clamp(1, vocab.max(1));
        let blocks = (0..vocab)
            .step_by(rows_per_block)
            .map(|start| {
                let rows = start..(start + rows_per_block).min(vocab);
                EmbeddingBlock::Affine(AffineMatrix::upload_rows(table, rows, device))
            })
            .collect();
        SplitEmbedding { blocks, rows_per_block }
    }

    /// Rows of `tokens`, in order.  [S, h]
    pub(super) fn lookup(&self, tokens: &[u32], device: &Device) -> Tensor<2> {
        if let [only] = self.blocks.as_slice() {
            return only.rows(tokens, device);
        }
        gather_by_block(tokens, self.rows_per_block, device, |b, local| self.blocks[b].rows(local, device))
    }

    /// Whether [`Self::rows_of`] applies: packed blocks (each writes the rows it holds), or a
    /// single f32 block.
    pub(super) fn looks_up_on_device(&self) -> bool {
        self.blocks.len() == 1 || self.blocks.iter().all(|b| matches!(b, EmbeddingBlock::Affine(_)))
    }

    /// Rows of `ids` `[n]` (u32, on the device: a recorded step's input).  [n, h]
    pub(super) fn rows_of(&self, ids: &Tensor<1, Int>) -> Tensor<2> {
        if let [EmbeddingBlock::Dense(rows)] = self.blocks.as_slice() {
            return rows.clone().select(0, ids.clone());
        }
        let width = self.blocks.first().map_or(0, EmbeddingBlock::width);
        let mut out = Tensor::empty([ids.dims()[0], width], &ids.device());
        for (b, block) in self.blocks.iter().enumerate() {
            if let EmbeddingBlock::Affine(rows) = block {
                rows.rows_into(&mut out, ids, b * self.rows_per_block);
            }
        }
        out
    }

    /// `x · Eᵀ`, softcapped when `softcap` (in the packed kernel itself).  [rows, vocab]
    pub(super) fn logits(&self, x: Tensor<2>, softcap: Option<f32>) -> Tensor<2> {
        let parts: Vec<Tensor<2>> = self.blocks.iter().map(|b| b.logits(x.clone(), softcap)).collect();
        if parts.len() == 1 { parts.into_iter().next().unwrap_or(x) } else { Tensor::cat(parts, 1) }
    }
}

/// Token ids as a device tensor for `select`.
pub(super) fn int_ids(ids: Vec<i32>, device: &Device) -> Tensor<1, Int> {
    let n = ids.len();
    Tensor::from_data(TensorData::new(ids, [n]), device)
}

/// Gemma 4's per-layer-embedding table, [vocab, L·P]: where it lives depends on how it is stored.
pub(super) enum TokenTable {
    /// On the host (an f32 table too large for one device buffer: a bf16 checkpoint's; packed
    /// codes on the CPU backend).
    Host(HostTable),
    /// Packed affine codes on the device, in row blocks (MLX checkpoints).
    Device(SplitEmbedding),
    /// GGUF blocks on the device exactly as stored ([`BlockTable`]).
    Blocks(BlockTable),
}

impl TokenTable {
    pub(super) fn width(&self) -> usize {
        match self {
            TokenTable::Host(table) => table.width(),
            TokenTable::Device(table) => table.blocks.first().map_or(0, EmbeddingBlock::width),
            TokenTable::Blocks(table) => table.cols(),
        }
    }

    /// Rows `tokens` times `scale`.  [S, width]
    pub(super) fn lookup(&self, tokens: &[u32], scale: f32, device: &Device) -> Tensor<2> {
        match self {
            TokenTable::Host(table) => {
                let width = table.width();
                let mut rows = Vec::with_capacity(tokens.len() * width);
                for &t in tokens {
                    table.push_row(t as usize, scale, &mut rows);
                }
                Tensor::from_data(TensorData::new(rows, [tokens.len(), width]), device)
            }
            TokenTable::Device(table) => table.lookup(tokens, device).mul_scalar(scale),
            TokenTable::Blocks(table) => table.lookup(tokens, scale, device),
        }
    }

    /// Rows of `ids` `[n]` (u32, on the device) times `scale`, where the table is on the device
    /// and [`SplitEmbedding::looks_up_on_device`] holds; `None` otherwise.  [n, width]
    pub(super) fn rows_of(&self, ids: &Tensor<1, Int>, scale: f32) -> Option<Tensor<2>> {
        match self {
            TokenTable::Host(_) => None,
            TokenTable::Device(table) => table.looks_up_on_device().then(|| table.rows_of(ids).mul_scalar(scale)),
            TokenTable::Blocks(table) => table.on_device().then(|| {
                let mut out = Tensor::empty([ids.dims()[0], table.cols()], &ids.device());
                table.rows_into(&mut out, ids, scale);
                out
            }),
        }
    }

    pub(super) fn looks_up_on_device(&self) -> bool {
        match self {
            TokenTable::Host(_) => false,
            TokenTable::Device(table) => table.looks_up_on_device(),
            TokenTable::Blocks(table) => table.on_device(),
        }
    }

    /// Bytes on the device and on the host.
    pub(super) fn bytes(&self) -> (u64, u64) {
        match self {
            TokenTable::Host(HostTable::Dense(t)) => (0, t.data.len() as u64 * 4),
            TokenTable::Host(HostTable::Affine { slices, .. }) => {
                (0, slices.iter().map(|s| (s.codes.len() + s.scales.len() + s.biases.len()) as u64 * 4).sum())
            }
            TokenTable::Device(table) => (table.blocks.iter().map(|b| b.device_bytes() as u64).sum(), 0),
            TokenTable::Blocks(table) => table.bytes(),
        }
    }
}

/// Gemma 4's per-layer-embedding table on the host: f32 for a dense checkpoint's table too large
/// for one device buffer (and every dense one on the CPU backend), packed 4-bit codes in row slices (never one buffer of a gigabyte or more) for quantized ones.
pub(super) enum HostTable {
    Dense(HostTensor),
    Affine { slices: Vec<AffineTensor>, rows_per_slice: usize },
}

impl HostTable {
    pub(super) fn width(&self) -> usize {
        match self {
            HostTable::Dense(t) => t.shape[1],
            HostTable::Affine { slices, .. } => slices.first().map_or(0, |s| s.cols),
        }
    }

    /// Appends row `t`, times `scale`, to `out`.
    pub(super) fn push_row(&self, t: usize, scale: f32, out: &mut Vec<f32>) {
        let width = self.width();
        let start = out.len();
        match self {
            HostTable::Dense(table) => out.extend_from_slice(&table.data[t * width..(t + 1) * width]),
            HostTable::Affine { slices, rows_per_slice } => {
                out.resize(start + width, 0.0);
                slices[t / rows_per_slice].dequantize_row(t % rows_per_slice, &mut out[start..]);
            }
        }
        out[start..].iter_mut().for_each(|v| *v *= scale);
    }
}
