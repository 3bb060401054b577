//! What every kernel's launch shares: the grid within WebGPU's limits, whether a device runs the
//! kernels at all, uninitialised outputs, and the `#[cube]` helpers several kernels call (a block
//! reduction, a NaN-free tanh).

use burn::backend::DispatchDevice;
use burn::tensor::{DType, Device};
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// The most thread blocks along one grid axis (WebGPU's limit).
const MAX_GRID: u32 = 65_535;

/// A grid of `blocks` thread blocks within WebGPU's 65,535 per axis.
pub(crate) fn grid(blocks: u32) -> (u32, u32) {
    if blocks <= MAX_GRID { (blocks.max(1), 1) } else { (MAX_GRID, blocks.div_ceil(MAX_GRID)) }
}

/// Whether `device` runs the fused kernels (the cubecl backends: wgpu natively, WebGPU in the
/// browser). Elsewhere (the CPU backend) `AffineMatrix` falls back to tensor operations, which
/// dequantize the whole matrix per product: loaders keep f32 weights there instead.
pub fn has_fused_kernels(device: &Device) -> bool {
    matches!(device.as_dispatch(), DispatchDevice::Cube(_))
}

/// An uninitialised f32 output of `shape` on `like`'s device (every fused kernel writes all of it).
pub(crate) fn empty_output(like: &CubeTensor, shape: burn::tensor::Shape) -> CubeTensor {
    let handle = like.client.empty(shape.num_elements() * size_of::<f32>());
    CubeTensor::new_contiguous(like.client.clone(), like.device.clone(), shape, handle, DType::F32)
}

/// The bytes of `t`'s elements (what a kernel reading all of it reads).
pub(crate) fn bytes_of(t: &CubeTensor) -> u64 {
    (t.meta.shape().num_elements() * t.dtype.size()) as u64
}

/// Declares, for the native profile ([`crate::dispatches`]), the bytes the next launch on this
/// thread reads; nothing in the browser, which has no profile.
pub(crate) fn declare_reads(bytes: u64) {
    #[cfg(not(target_family = "wasm"))]
    crate::dispatches::declare_reads(bytes);
    #[cfg(target_family = "wasm")]
    let _ = bytes;
}

/// Declares, for the profile, that the next launch reads all of each of `inputs`.
pub(crate) fn declare_reads_of(inputs: &[&CubeTensor]) {
    declare_reads(inputs.iter().map(|t| bytes_of(t)).sum());
}

/// The sum (or the maximum, when `max`) of one value per thread of the block, in every thread.
/// Every thread of the block must call it.
#[cube]
pub(crate) fn block_reduce(
    value: f32,
    #[comptime] max: bool,
    #[comptime] threads: u32,
    #[comptime] levels: u32,
) -> f32 {
    let thread = UNIT_POS_X;
    let mut partial = Shared::<[f32]>::new_slice(threads as usize);
    partial[thread as usize] = value;
    sync_cube();
    #[unroll]
    for level in 0..levels {
        let stride = threads >> (level + 1);
        if thread < stride {
            let (a, b) = (partial[thread as usize], partial[(thread + stride) as usize]);
            partial[thread as usize] = if max { f32::max(a, b) } else { a + b };
        }
        sync_cube();
    }
    partial[0]
}

/// tanh from exp on an input clamped to ±15 (where tanh is ±1 in f32): never NaN.
#[cube]
pub(crate) fn bounded_tanh(x: f32) -> f32 {
    let e = f32::exp(2.0 * f32::clamp(x, -15.0, 15.0));
    (e - 1.0) / (e + 1.0)
}

/// The GPU the tests run on, once per test process (Burn's wgpu runtime registers once): `None`
/// when there is none and `HEARTH_REQUIRE_GPU` is unset.
#[cfg(test)]
pub(crate) fn test_gpu() -> Option<Device> {
    static GPU: std::sync::Mutex<Option<Device>> = std::sync::Mutex::new(None);
    let mut cached = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(device) = cached.as_ref() {
        return Some(device.clone());
    }
    match Device::wgpu_options().init_with_setup() {
        Ok((device, _)) => {
            *cached = Some(device.clone());
            Some(device)
        }
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => {
            eprintln!("no GPU: {err}");
            None
        }
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    }
}

/// Words in a chunk of `bits`-bit codes: the fewest whole words holding whole codes (1 for 2-, 4-
/// and 8-bit codes; `bits` for odd widths; 3 for 6-bit). Codes lie in each row's little-endian bit
/// stream (MLX's layout), so a code may straddle two words of a chunk, never two chunks.
pub(crate) const fn chunk_words_of(bits: u32) -> u32 {
    let mut g = 32;
    let mut b = bits;
    // gcd(bits, 32)
    while b != 0 {
        let t = g % b;
        g = b;
        b = t;
    }
    bits / g
}

/// A chunk's words, from word `at` of `codes`.
#[cube]
pub(crate) fn load_chunk(codes: &[u32], at: u32, #[comptime] chunk_words: u32) -> Array<u32> {
    let mut chunk = Array::<u32>::new(chunk_words as usize);
    #[unroll]
    for i in 0..chunk_words {
        chunk[i as usize] = codes[(at + i) as usize];
    }
    chunk
}

/// Code `j` of the chunk at word `first` of `chunks`: bits `bits·j…` of its bit stream.
#[cube]
pub(crate) fn code_of(chunks: &Array<u32>, #[comptime] first: u32, #[comptime] j: u32, #[comptime] bits: u32) -> u32 {
    let bit = comptime!(j * bits);
    let word = comptime!(first + bit / 32);
    let shift = comptime!(bit % 32);
    let mask = comptime!((1u32 << bits) - 1);
    let mut code = chunks[word as usize] >> shift;
    if comptime!(shift + bits > 32) {
        code |= chunks[(word + 1) as usize] << comptime!(32 - shift);
    }
    code & mask
}
