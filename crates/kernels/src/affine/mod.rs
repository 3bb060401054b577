//! Affine-quantized matrices (4- or 8-bit codes) kept packed on the device, and the fused kernel
//! that multiplies by them without ever writing the dequantized weights: each thread block reads a
//! row's codes once, dequantizes them in registers (`scale·q + bias` per group) and accumulates in
//! f32.
//!
//! Layout (MLX's, also GGUF's blocks after [`hearth_weights::gguf_affine`] repacks them): codes
//! `[rows, k·bits/32]` u32 with element j of a word in bits `bits·j…`; scales and biases in one
//! buffer of u32 words ([`ScaleLayout`]; one binding: a kernel must stay within WebGPU's 8 storage
//! buffers per shader stage, one of which cubecl keeps): f32 (scale, bias) pairs, or, for a
//! symmetric format whose scales are halves (GGUF's Q4_0 and Q8_0), two f16 scales a word and
//! the bias `−offset · scale` computed, so Q4_0 stays 4.5 bits a weight on the device (not 6).
//!
//! On the cubecl backends (wgpu natively, WebGPU in the browser) the product is one dispatch. On
//! the CPU backend (Flex, used by tests and machines without a GPU) the same maths runs as tensor
//! operations, so both paths are checked against each other and against a host dequantization.
//!
//! The room: `kernels.rs` (the GEMV-style kernels), `gemm.rs` (the prompt's tiled GEMM),
//! `launch.rs` (both as Burn backend operations), `matrix.rs` ([`AffineMatrix`], what the model
//! holds), `tests.rs` (against a host dequantization, on the CPU and on wgpu).

mod gemm;
mod kernels;
mod launch;
mod matrix;
#[cfg(test)]
mod tests;

pub use crate::scales::ScaleLayout;
pub use launch::AffineKernels;
pub use matrix::AffineMatrix;
