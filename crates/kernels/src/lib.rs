//! Hearth's CubeCL kernels, each with its launch on Burn's cubecl backends (wgpu natively, WebGPU
//! in the browser), the same maths as tensor operations for the other backends (the CPU backend;
//! also the tests' oracle), and its tests. The model calls them through the typed functions and
//! types below; which path runs is decided per device ([`has_fused_kernels`]).
//!
//! - [`affine`]: 4- and 8-bit matrices kept packed on the device ([`AffineMatrix`]) and the fused
//!   dequantize-multiply kernel (pre-norm, GELU gate and softcap variants, row gather);
//!   `affine/gemm.rs`: the same product for prompts, as a tiled GEMM.
//! - [`fused`]: element-wise chains as single kernels: RMSNorm, residual add + norm, the attention
//!   softmax, the GELU gate, keys/values/queries normed and rotated into the cache; and
//!   [`fused::reference`], the same maths as tensor operations.
//! - [`attention`]: a decoded token's whole attention, split over the keys (flash-decoding) and
//!   combined: two launches.
//! - [`half_matrix`]: a matrix of f16 or bf16 values kept at that size on the device, widened
//!   to f32 by one dispatch for the product it takes part in (the towers' 16-bit linears).
//! - [`block_table`]: a large lookup table (Gemma 4's per-layer embeddings) kept on the device in
//!   its stored GGUF blocks, rows decoded by a kernel when looked up.
//! - [`chunk_table`]: a chunk's RoPE rotations, start and key slots in one buffer the kernels
//!   read (so a recorded decode step replays at the next position); [`overwrite`]: rewriting a
//!   tensor in its own buffer, a chosen id copied into a recording's id buffer, and ids read back
//!   with the copy submitted at once.
//! - [`mask`]: a token bitset applied to the logits on the device (constrained tool calls).
//! - [`dispatches`]: kernel launches counted by name (for the benchmark); [`probe`]: the
//!   dispatch-cost probe's launch-only kernels and timed chains (`hearth bench --dispatch`).
//! - [`tuning`]: process-wide kernel choices the benchmark sets (prompt kernel, GEMM tile).
//! - `launch`: what the launches share (grid, outputs, block reduction, bounded tanh, packed
//!   codes' chunks); `scales`: how a packed matrix's scales lie in its words, and their readers.

pub mod affine;
pub mod attention;
pub mod block_table;
pub mod chunk_table;
#[cfg(not(target_family = "wasm"))]
pub mod dispatches;
pub mod fused;
pub mod half_matrix;
mod launch;
pub mod mask;
pub mod overwrite;
#[cfg(not(target_family = "wasm"))]
pub mod probe;
mod scales;
pub mod tuning;

pub use affine::AffineMatrix;
pub use attention::{
    DecodeQuery, DecodeSplit, NewKeys, decode_attention, decode_attention_writing, fused_decode_applies,
};
pub use block_table::{BlockTable, gather_by_block};
pub use chunk_table::{ChunkTable, KeySlots};
pub use fused::{
    CacheInput, HeadColumns, Slots, add_rms_norm, attention_softmax, copy_into, gelu_tanh_mul, rms_norm, softcap,
    write_cache, write_keys_values,
};
pub use half_matrix::HalfMatrix;
pub use launch::has_fused_kernels;
pub use mask::mask_logits;
pub use overwrite::{IdsReading, copy_ids_into, overwrite, overwrite_ids, read_ids_now};
pub use tuning::ProductKernel;
