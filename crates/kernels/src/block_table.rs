//! A large lookup table kept in its stored ggml blocks, rows decoded only when looked up: Gemma 4's
//! per-layer-embedding table (E2B: 262,144 rows of 8,960 values, 1.9 GB in Q6_K). Repacked into
//! affine groups it would take 12 bits a value instead of 6.56, and on the host it would not fit
//! the browser's wasm memory; here it sits on the device as stored, in slices of at most one
//! storage binding, and a token's row costs one dispatch per slice it falls in.
//!
//! The kernel reads bytes out of u32 words (rows start at any even byte: a Q6_K row of 8,960
//! values is 7,350 bytes) and decodes exactly as ggml's reference does (`d·sc` formed in f32,
//! then times the code), so a looked-up row equals [`hearth_weights::quant::dequantize`] bit for
//! bit; [`reference`] is that host decoding, the CPU backend's path and the tests' oracle.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use hearth_weights::{BlockRows, GgmlType};

use crate::launch::{bytes_of, grid, has_fused_kernels};

const THREADS: u32 = 64;

/// The block formats the kernel decodes, by the comptime code it is compiled with.
fn kind_of(ty: GgmlType) -> Option<u32> {
    match ty {
        GgmlType::Q4_0 => Some(0),
        GgmlType::Q8_0 => Some(1),
        GgmlType::Q4K => Some(2),
        GgmlType::Q6K => Some(3),
        _ => None,
    }
}

/// Byte `addr` of a byte string stored in little-endian u32 words.
#[cube]
fn byte_at(words: &[u32], addr: u32) -> u32 {
    (words[(addr / 4) as usize] >> ((addr % 4) * 8)) & 0xFF
}

/// The f16 at byte `addr`, as f32 (normal, subnormal, infinite and NaN values alike).
#[cube]
fn half_at(words: &[u32], addr: u32) -> f32 {
    let h = byte_at(words, addr) | (byte_at(words, addr + 1) << 8);
    let sign = (h >> 15) << 31;
    let exponent = (h >> 10) & 0x1F;
    let mantissa = h & 0x3FF;
    let mut bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    if exponent == 31 {
        bits = sign | 0x7F80_0000 | (mantissa << 13);
    }
    let mut value = f32::reinterpret(bits);
    if exponent == 0 {
        // 2^-24 · mantissa, exact in f32.
        value = f32::cast_from(mantissa) * 5.960_464_5e-8;
        if sign != 0 {
            value = -value;
        }
    }
    value
}

/// The signed byte at `addr`.
#[cube]
fn signed_byte_at(words: &[u32], addr: u32) -> f32 {
    let b = byte_at(words, addr);
    let mut v = f32::cast_from(b);
    if b >= 128 {
        v = f32::cast_from(b) - 256.0;
    }
    v
}

/// Value `i` of the ggml block at byte `block` (`kind` as in [`kind_of`]).
#[cube]
#[allow(unused_assignments)]
fn block_value(words: &[u32], block: u32, i: u32, #[comptime] kind: u32) -> f32 {
    let mut value = 0.0f32;
    if comptime!(kind == 0) {
        // Q4_0: d f16, qs[16]; low nibbles are values 0..16, high nibbles 16..32; d·(q − 8).
        let d = half_at(words, block);
        let q = byte_at(words, block + 2 + (i % 16)) >> ((i / 16) * 4);
        value = d * (f32::cast_from(q & 0xF) - 8.0);
    } else if comptime!(kind == 1) {
        // Q8_0: d f16, qs[32] i8; d·q.
        value = half_at(words, block) * signed_byte_at(words, block + 2 + i);
    } else if comptime!(kind == 2) {
        // Q4_K: d, dmin f16, scales[12] (6-bit scale and min per 32 values), qs[128].
        let chunk = i / 64;
        let sub = (i % 64) / 32;
        let l = i % 32;
        let j = chunk * 2 + sub;
        let scales = block + 4;
        let mut sc = 0u32;
        let mut m = 0u32;
        if j < 4 {
            sc = byte_at(words, scales + j) & 63;
            m = byte_at(words, scales + j + 4) & 63;
        } else {
            sc = (byte_at(words, scales + j + 4) & 0xF) | ((byte_at(words, scales + j - 4) >> 6) << 4);
            m = (byte_at(words, scales + j + 4) >> 4) | ((byte_at(words, scales + j) >> 6) << 4);
        }
        let d = half_at(words, block) * f32::cast_from(sc);
        let min = half_at(words, block + 2) * f32::cast_from(m);
        let q = (byte_at(words, block + 16 + chunk * 32 + l) >> (sub * 4)) & 0xF;
        value = d * f32::cast_from(q) - min;
    } else {
        // Q6_K: ql[128] low 4 bits, qh[64] high 2 bits, scales[16] i8, d f16; (d·sc)·(q − 32).
        let half = i / 128;
        let quarter = (i % 128) / 32;
        let l = i % 32;
        let low = (byte_at(words, block + half * 64 + l + (quarter % 2) * 32) >> ((quarter / 2) * 4)) & 0xF;
        let high = (byte_at(words, block + 128 + half * 32 + l) >> (quarter * 2)) & 3;
        let sc = signed_byte_at(words, block + 192 + half * 8 + l / 16 + quarter * 2);
        let d = half_at(words, block + 208);
        value = (d * sc) * (f32::cast_from(low | (high << 4)) - 32.0);
    }
    value
}

/// `out[t, j] = scale · row(ids[t] − first_row)[j]` for the ids this slice holds (rows
/// `first_row..first_row + rows` of the table), one thread per value; the other rows of `out` are
/// left as they are.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn block_rows_kernel(
    words: &[u32],
    ids: &[u32],
    out: &mut [f32],
    cols: u32,
    row_bytes: u32,
    first_row: u32,
    rows: u32,
    scale: f32,
    #[comptime] kind: u32,
    #[comptime] block_values: u32,
    #[comptime] block_bytes: u32,
    #[comptime] threads: u32,
) {
    let position = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * threads + UNIT_POS_X;
    let token = position / cols;
    let mut id = first_row + rows;
    if position < ids.len() as u32 * cols {
        id = ids[token as usize];
    }
    if id >= first_row && id < first_row + rows {
        let j = position % cols;
        let row = id - first_row;
        let block = row * row_bytes + (j / block_values) * block_bytes;
        out[position as usize] = block_value(words, block, j % block_values, kind) * scale;
    }
}

/// The kernel as a Burn backend operation (cubecl backends only).
#[backend_extension(Cube)]
pub trait BlockKernels: Backend {
    /// Rows `ids` of a slice of `kind` blocks (`words`: its bytes as u32; rows `first_row..` of
    /// the table), times `scale`, written into `out` `[n, cols]` in its own buffer (contiguous);
    /// rows of ids outside the slice are left as they are. Returns `out`.
    #[allow(clippy::too_many_arguments)]
    fn block_rows(
        words: IntTensor<Self>,
        ids: IntTensor<Self>,
        out: FloatTensor<Self>,
        first_row: usize,
        cols: usize,
        row_bytes: usize,
        scale: f32,
        kind: u32,
        block_values: u32,
        block_bytes: u32,
    ) -> FloatTensor<Self>;
}

impl BlockKernels for CubeBackend {
    fn block_rows(
        words: CubeTensor,
        ids: CubeTensor,
        out: CubeTensor,
        first_row: usize,
        cols: usize,
        row_bytes: usize,
        scale: f32,
        kind: u32,
        block_values: u32,
        block_bytes: u32,
    ) -> CubeTensor {
        let n = ids.meta.shape()[0];
        let rows = words.meta.shape()[0] * 4 / row_bytes;
        let client = ids.client.clone();
        debug_assert!(out.is_contiguous() && out.meta.shape().num_elements() == n * cols);
        let (grid_x, grid_y) = grid(((n * cols) as u32).div_ceil(THREADS));
        // At most the ids' rows (a block of a larger table reads only those it holds).
        crate::launch::declare_reads(bytes_of(&ids) + (n.min(rows) * row_bytes) as u64);
        block_rows_kernel::launch(
            &client,
            CubeCount::Static(grid_x, grid_y, 1),
            CubeDim::new_1d(THREADS),
            into_contiguous(words).into_buffer_arg(),
            into_contiguous(ids).into_buffer_arg(),
            out.clone().into_buffer_arg(),
            cols as u32,
            row_bytes as u32,
            first_row as u32,
            rows as u32,
            scale,
            kind,
            block_values,
            block_bytes,
            THREADS,
        );
        out
    }
}

/// One slice of rows, on the device (as u32 words) or, on the CPU backend, on the host.
#[allow(clippy::large_enum_variant)] // a few dozen slices: boxing buys nothing
enum Slice {
    Device(Tensor<1, Int>),
    Host(Vec<u8>),
}

/// A `[rows, cols]` table in stored ggml blocks, in slices of `rows_per_slice` rows.
pub struct BlockTable {
    ggml_type: GgmlType,
    cols: usize,
    row_bytes: usize,
    rows_per_slice: usize,
    slices: Vec<Slice>,
}

impl BlockTable {
    /// Whether rows of `ty` can be looked up from stored blocks on `device` (on the CPU backend
    /// any type the host decodes can).
    pub fn holds(ty: GgmlType, device: &Device) -> bool {
        if has_fused_kernels(device) { kind_of(ty).is_some() } else { ty.can_dequantize() }
    }

    pub fn new(ggml_type: GgmlType, cols: usize, row_bytes: usize, rows_per_slice: usize) -> Self {
        BlockTable { ggml_type, cols, row_bytes, rows_per_slice: rows_per_slice.max(1), slices: Vec::new() }
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Adds the next slice (every slice but the last holds `rows_per_slice` rows).
    pub fn push_slice(&mut self, rows: BlockRows, device: &Device) {
        debug_assert_eq!((rows.ggml_type, rows.cols, rows.row_bytes), (self.ggml_type, self.cols, self.row_bytes));
        let slice = if has_fused_kernels(device) {
            // The bytes become the upload as they are (little-endian u32 words): no copy of a
            // 128 MB slice in wasm memory.
            let mut bytes = rows.bytes;
            bytes.resize(bytes.len().next_multiple_of(4), 0);
            let n = bytes.len() / 4;
            Slice::Device(Tensor::from_data(TensorData::from_bytes_vec(bytes, [n], DType::U32), (device, DType::U32)))
        } else {
            Slice::Host(rows.bytes)
        };
        self.slices.push(slice);
    }

    /// Bytes on the device and on the host.
    pub fn bytes(&self) -> (u64, u64) {
        self.slices.iter().fold((0, 0), |(device, host), slice| match slice {
            Slice::Device(words) => (device + words.dims()[0] as u64 * 4, host),
            Slice::Host(bytes) => (device, host + bytes.len() as u64),
        })
    }

    /// Rows `tokens`, in order, times `scale`: `[S]` → `[S, cols]`.
    pub fn lookup(&self, tokens: &[u32], scale: f32, device: &Device) -> Tensor<2> {
        gather_by_block(tokens, self.rows_per_slice, device, |b, local| self.slice_rows(b, local, scale, device))
    }

    /// Whether every slice is on the device (then [`Self::rows_into`] applies).
    pub fn on_device(&self) -> bool {
        self.slices.iter().all(|slice| matches!(slice, Slice::Device(_)))
    }

    /// Rows `ids` (u32 on the device, `[n]`) times `scale`, written into `out` `[n, cols]` in its
    /// own buffer: one launch per slice, each writing the rows it holds. The ids never reach the
    /// host, so the launches can be recorded and replayed on new ids. Every slice on the device
    /// ([`Self::on_device`]).
    pub fn rows_into(&self, out: &mut Tensor<2>, ids: &Tensor<1, Int>, scale: f32) {
        assert!(self.on_device(), "rows_into needs the slices on the device");
        assert_eq!(out.dims(), [ids.dims()[0], self.cols], "rows_into: output shape");
        for (b, slice) in self.slices.iter().enumerate() {
            if let Slice::Device(words) = slice {
                *out = self.launch_rows(words, ids.clone(), out.clone(), b * self.rows_per_slice, scale);
            }
        }
    }

    /// The kernel on one device slice (rows `first_row..` of the table).
    fn launch_rows(
        &self,
        words: &Tensor<1, Int>,
        ids: Tensor<1, Int>,
        out: Tensor<2>,
        first_row: usize,
        scale: f32,
    ) -> Tensor<2> {
        let (block_values, block_bytes) = self.ggml_type.block_layout();
        Tensor::from_dispatch(<Dispatch as BlockKernels>::block_rows(
            words.clone().into_dispatch(),
            ids.into_dispatch(),
            out.into_dispatch(),
            first_row,
            self.cols,
            self.row_bytes,
            scale,
            kind_of(self.ggml_type).unwrap_or(0),
            block_values as u32,
            block_bytes as u32,
        ))
    }

    /// Rows `local` of slice `b`.
    fn slice_rows(&self, b: usize, local: &[u32], scale: f32, device: &Device) -> Tensor<2> {
        let n = local.len();
        match &self.slices[b] {
            Slice::Device(words) => {
                let ids = Tensor::<1, Int>::from_data(TensorData::new(local.to_vec(), [n]), (device, DType::U32));
                self.launch_rows(words, ids, Tensor::empty([n, self.cols], device), 0, scale)
            }
            Slice::Host(bytes) => {
                let mut out = Vec::with_capacity(n * self.cols);
                for &row in local {
                    let start = row as usize * self.row_bytes;
                    reference::push_row(self.ggml_type, &bytes[start..start + self.row_bytes], scale, &mut out);
                }
                Tensor::from_data(TensorData::new(out, [n, self.cols]), device)
            }
        }
    }
}

/// Rows of `tokens` from a table split into blocks of `rows_per_block` rows: `rows(b, local)`
/// gives rows `local` of block `b`; they are gathered block by block, then put back in token
/// order.  [S, width]
pub fn gather_by_block(
    tokens: &[u32],
    rows_per_block: usize,
    device: &Device,
    rows: impl Fn(usize, &[u32]) -> Tensor<2>,
) -> Tensor<2> {
    let mut parts = Vec::new();
    let mut order = vec![0i32; tokens.len()];
    let mut gathered: i32 = 0;
    let mut blocks: Vec<usize> = tokens.iter().map(|&t| t as usize / rows_per_block).collect();
    blocks.sort_unstable();
    blocks.dedup();
    for b in blocks {
        let start = b * rows_per_block;
        let here: Vec<usize> = (0..tokens.len()).filter(|&i| (tokens[i] as usize) / rows_per_block == b).collect();
        for &i in &here {
            order[i] = gathered;
            gathered += 1;
        }
        let local: Vec<u32> = here.iter().map(|&i| tokens[i] - start as u32).collect();
        parts.push(rows(b, &local));
    }
    let gathered = if parts.len() == 1 { parts.remove(0) } else { Tensor::cat(parts, 0) };
    // Tokens from one block (every decoded token) are already in order.
    if order.iter().enumerate().all(|(i, &o)| o as usize == i) {
        return gathered;
    }
    let n = order.len();
    gathered.select(0, Tensor::<1, Int>::from_data(TensorData::new(order, [n]), device))
}

/// The host decoding: ggml's reference dequantization, then the scale.
pub mod reference {
    use super::*;

    /// Appends one stored row, decoded and times `scale`, to `out`.
    pub fn push_row(ty: GgmlType, row: &[u8], scale: f32, out: &mut Vec<f32>) {
        let start = out.len();
        if !hearth_weights::quant::dequantize(ty, row, out) {
            // `BlockTable::holds` admits only types the host decodes.
            out.resize(start + row.len(), f32::NAN);
        }
        out[start..].iter_mut().for_each(|v| *v *= scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random blocks of `ty` whose scales are real f16 values (a subnormal and a negative one
    /// among them), `rows` rows of `cols` values.
    fn random_rows(ty: GgmlType, rows: usize, cols: usize, seed: u32) -> BlockRows {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let (values, size) = ty.block_layout();
        let blocks = rows * cols / values;
        let mut bytes: Vec<u8> = (0..blocks * size).map(|_| next() as u8).collect();
        // f16 bits: 0.0499, −0.00189, 0.5, a subnormal (2.98e-6), 0.0699.
        let scales: [u16; 5] = [0x2A66, 0x97BE, 0x3800, 0x0032, 0x2C7B];
        for (b, block) in bytes.chunks_exact_mut(size).enumerate() {
            let d = scales[b % scales.len()].to_le_bytes();
            let m = (scales[(b + 2) % scales.len()] & 0x7FFF).to_le_bytes();
            match ty {
                GgmlType::Q4_0 | GgmlType::Q8_0 => block[0..2].copy_from_slice(&d),
                GgmlType::Q4K => {
                    block[0..2].copy_from_slice(&d);
                    block[2..4].copy_from_slice(&m);
                }
                GgmlType::Q6K => block[208..210].copy_from_slice(&d),
                _ => unreachable!("a type this test makes"),
            }
        }
        BlockRows { ggml_type: ty, rows, cols, row_bytes: cols / values * size, bytes }
    }

    fn devices() -> Vec<(&'static str, Device)> {
        let mut devices = vec![("cpu", Device::flex())];
        if let Some(gpu) = crate::launch::test_gpu() {
            devices.push(("wgpu", gpu));
        }
        devices
    }

    /// Rows looked up from stored blocks equal ggml's reference decoding exactly, across slices,
    /// out of order and repeated, for every type the kernel decodes; Q6_K rows of an odd number
    /// of blocks start at unaligned bytes, as E2B's (35 blocks, 7,350 bytes) do.
    #[test]
    fn looked_up_rows_equal_the_reference_decoding() {
        let cases = [(GgmlType::Q6K, 7 * 256), (GgmlType::Q4K, 3 * 256), (GgmlType::Q4_0, 96), (GgmlType::Q8_0, 160)];
        for (name, device) in devices() {
            for (ty, cols) in cases {
                let (rows, per_slice) = (11, 4);
                let all = random_rows(ty, rows, cols, cols as u32);
                let mut table = BlockTable::new(ty, cols, all.row_bytes, per_slice);
                for start in (0..rows).step_by(per_slice) {
                    let end = (start + per_slice).min(rows);
                    let bytes = all.bytes[start * all.row_bytes..end * all.row_bytes].to_vec();
                    table.push_slice(BlockRows { rows: end - start, bytes, ..all.clone() }, &device);
                }
                let tokens = [9u32, 0, 5, 5, 10, 3];
                let got = table.lookup(&tokens, 1.5, &device);
                let got: Vec<f32> =
                    pollster::block_on(got.into_data_async()).expect("readback").try_to_vec().expect("f32");
                let mut want = Vec::new();
                for &t in &tokens {
                    let start = t as usize * all.row_bytes;
                    reference::push_row(ty, &all.bytes[start..start + all.row_bytes], 1.5, &mut want);
                }
                assert_eq!(got.len(), want.len());
                // Q4_K's `d·q − m` may become one fused multiply-add on a GPU: one rounding fewer.
                let slack = if ty == GgmlType::Q4K { 4.0 * f32::EPSILON } else { 0.0 };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let close = (g - w).abs() <= slack * w.abs().max(1.0);
                    assert!(
                        g.to_bits() == w.to_bits() || (*g == 0.0 && *w == 0.0) || close,
                        "{name} {ty}: value {i}: {g} ≠ {w}"
                    );
                }
                if table.on_device() {
                    // The ids on the device, every slice writing the rows it holds (a recorded step).
                    let ids = Tensor::<1, Int>::from_data(
                        TensorData::new(tokens.to_vec(), [tokens.len()]),
                        (&device, DType::U32),
                    );
                    let mut out = Tensor::zeros([tokens.len(), cols], &device);
                    table.rows_into(&mut out, &ids, 1.5);
                    let again: Vec<f32> =
                        pollster::block_on(out.into_data_async()).expect("readback").try_to_vec().expect("f32");
                    assert_eq!(again, got, "{name} {ty}: rows_into");
                }
                let stored = if name == "cpu" { table.bytes().1 } else { table.bytes().0 };
                assert!(stored <= (all.bytes.len() + 4 * table.slices.len()) as u64, "{name} {ty}: kept as stored");
            }
        }
    }
}
