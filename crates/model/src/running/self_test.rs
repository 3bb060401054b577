//! A known-answer computation: `softmax(A · B, rows)` on fixed data, checked against a plain-Rust
//! reference in f64. It exercises upload, a matmul, a reduction and the asynchronous read-back,
//! which is everything the model needs from the device. Where the fused kernels run (wgpu, WebGPU)
//! it also multiplies by small packed 4- and 8-bit matrices through them: the kernels the model's
//! weights go through are checked on this very adapter before any model loads.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::{AffineMatrix, has_fused_kernels};
use hearth_weights::{AffineParams, AffineTensor};

const M: usize = 4;
const K: usize = 8;
const N: usize = 6;
/// f32 on any conforming GPU stays far inside this; a broken driver or shader lands far outside.
pub const TOLERANCE: f32 = 1e-5;
/// The packed products are sums of 64 terms of magnitude up to ~40: f32 rounding stays near 1e-5.
const FUSED_TOLERANCE: f32 = 1e-3;

/// What the self-test computed and how close it came (the engine reports it to the extension as
/// the protocol's `SelfTestReport`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SelfTestResult {
    /// What was computed, in words.
    pub computation: String,
    /// Whether every value is within `tolerance` of the reference.
    pub passed: bool,
    /// The values read back from the GPU, row-major.
    pub values: Vec<f32>,
    /// Largest |GPU − reference| over all values.
    pub max_abs_error: f32,
    pub tolerance: f32,
    /// Wall time of the computation including the read-back, in milliseconds.
    pub elapsed_ms: f64,
    /// Largest |GPU − reference| of the fused 4- and 8-bit dequantize-matmul kernels on a small
    /// known matrix (`None` where the backend runs no fused kernels: the CPU). Part of `passed`.
    pub fused_kernels_max_abs_error: Option<f32>,
}

#[derive(Debug, thiserror::Error)]
#[error("reading the self-test result back from the GPU failed: {0}")]
pub struct ReadBackError(String);

fn lhs() -> Vec<f32> {
    (0..M * K).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect()
}

fn rhs() -> Vec<f32> {
    (0..K * N).map(|i| (i % 5) as f32 * 0.3 - 0.6).collect()
}

/// The answer, computed without Burn, in f64.
pub fn reference() -> Vec<f32> {
    let (a, b) = (lhs(), rhs());
    let mut out = Vec::with_capacity(M * N);
    for i in 0..M {
        let row: Vec<f64> =
            (0..N).map(|j| (0..K).map(|k| f64::from(a[i * K + k]) * f64::from(b[k * N + j])).sum()).collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = row.iter().map(|x| (x - max).exp()).collect();
        let total: f64 = exps.iter().sum();
        out.extend(exps.iter().map(|e| (e / total) as f32));
    }
    out
}

/// Runs the computation on `device` and compares it with [`reference`].
///
/// `now_ms` is the caller's clock (wasm has no `std::time::Instant`).
pub async fn run(device: &Device, now_ms: impl Fn() -> f64) -> Result<SelfTestResult, ReadBackError> {
    let start = now_ms();
    let a = Tensor::<2>::from_data(TensorData::new(lhs(), [M, K]), device);
    let b = Tensor::<2>::from_data(TensorData::new(rhs(), [K, N]), device);
    let probabilities = softmax(a.matmul(b), 1);
    let values = read(probabilities).await?;
    let fused_error = if has_fused_kernels(device) {
        let mut worst = 0.0f32;
        for bits in [4, 8] {
            let (matrix, x, expected) = affine_case(bits);
            let x = Tensor::<2>::from_data(TensorData::new(x, [AFFINE_TOKENS, AFFINE_K]), device);
            let got = read(AffineMatrix::upload(matrix, device).matmul_transposed(x)).await?;
            worst = max_error(worst, &got, &expected);
        }
        Some(worst)
    } else {
        None
    };
    let elapsed_ms = now_ms() - start;
    Ok(report(values, fused_error, elapsed_ms))
}

async fn read(t: Tensor<2>) -> Result<Vec<f32>, ReadBackError> {
    // Asynchronous read-back: the browser cannot wait synchronously on the GPU.
    let data = t.into_data_async().await.map_err(|e| ReadBackError(e.to_string()))?;
    data.try_into_vec().map_err(|e| ReadBackError(format!("{e:?}")))
}

/// The largest of `worst` and every |value − expected|; NaN, or a length mismatch, is infinite.
fn max_error(worst: f32, values: &[f32], expected: &[f32]) -> f32 {
    if values.len() != expected.len() {
        return f32::INFINITY;
    }
    values
        .iter()
        .zip(expected)
        .map(|(v, e)| (v - e).abs())
        .fold(worst, |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) })
}

const AFFINE_ROWS: usize = 3;
const AFFINE_K: usize = 64;
const AFFINE_TOKENS: usize = 2;

/// A packed `[3, 64]` matrix of `bits`-bit codes (groups of 32), two input rows, and `x · Wᵀ`
/// computed on the host in f64.
fn affine_case(bits: u32) -> (AffineTensor, Vec<f32>, Vec<f32>) {
    let words = AFFINE_K * bits as usize / 32;
    let codes: Vec<u32> = (0..AFFINE_ROWS * words).map(|i| (i as u32).wrapping_mul(2_654_435_761)).collect();
    let groups = AFFINE_ROWS * AFFINE_K / 32;
    let scales: Vec<f32> = (0..groups).map(|g| 0.01 + g as f32 * 0.002).collect();
    let biases: Vec<f32> = (0..groups).map(|g| -0.05 * g as f32).collect();
    let shape = |n| vec![AFFINE_ROWS, n];
    let matrix = AffineTensor::new(
        "self-test",
        AffineParams { group_size: 32, bits },
        (shape(words), codes),
        (shape(AFFINE_K / 32), scales),
        (shape(AFFINE_K / 32), biases),
    )
    .expect("a consistent packed matrix");
    let w = matrix.dequantize().data;
    let x: Vec<f32> = (0..AFFINE_TOKENS * AFFINE_K).map(|i| (i % 9) as f32 * 0.125 - 0.5).collect();
    let mut expected = Vec::with_capacity(AFFINE_TOKENS * AFFINE_ROWS);
    for s in 0..AFFINE_TOKENS {
        for r in 0..AFFINE_ROWS {
            let dot: f64 = (0..AFFINE_K).map(|k| f64::from(x[s * AFFINE_K + k]) * f64::from(w[r * AFFINE_K + k])).sum();
            expected.push(dot as f32);
        }
    }
    (matrix, x, expected)
}

fn report(values: Vec<f32>, fused_error: Option<f32>, elapsed_ms: f64) -> SelfTestResult {
    let expected = reference();
    // A NaN anywhere counts as an infinite error: it must fail the test.
    let max_abs_error = max_error(0.0, &values, &expected);
    let fused_passed = fused_error.is_none_or(|e| e <= FUSED_TOLERANCE);
    let fused = if fused_error.is_some() { "; fused 4- and 8-bit dequantize-matmul, 2×64 · (3×64)ᵀ" } else { "" };
    SelfTestResult {
        computation: format!("softmax(A·B) over rows, A {M}×{K}, B {K}×{N}, f32{fused}"),
        passed: max_abs_error <= TOLERANCE && fused_passed,
        values,
        max_abs_error,
        tolerance: TOLERANCE,
        elapsed_ms,
        fused_kernels_max_abs_error: fused_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn run_blocking(device: &Device) -> SelfTestResult {
        let clock = Instant::now();
        pollster::block_on(run(device, || clock.elapsed().as_secs_f64() * 1e3)).expect("read-back")
    }

    #[test]
    fn reference_rows_are_probability_distributions() {
        for row in reference().chunks(N) {
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-6, "row sums to {sum}");
            assert!(row.iter().all(|p| *p > 0.0 && *p < 1.0));
        }
    }

    #[test]
    fn a_wrong_answer_fails() {
        let mut values = reference();
        values[3] += 1e-3;
        assert!(!report(values, None, 0.0).passed);
        assert!(!report(vec![f32::NAN; M * N], None, 0.0).passed);
        assert!(!report(vec![], None, 0.0).passed);
        assert!(!report(reference(), Some(0.1), 0.0).passed, "a wrong fused product fails");
        assert!(report(reference(), Some(1e-6), 0.0).passed);
        assert_eq!(max_error(0.0, &[1.0, f32::NAN], &[1.0, 2.0]), f32::INFINITY);
    }

    #[test]
    fn passes_on_the_cpu_backend() {
        let result = run_blocking(&Device::flex());
        assert!(result.passed, "{result:?}");
        assert_eq!(result.fused_kernels_max_abs_error, None, "the CPU backend has no fused kernels");
    }

    /// Native wgpu: a real GPU, or lavapipe (Mesa's Vulkan on the CPU) in CI.
    #[test]
    fn passes_on_wgpu() {
        let gpu = match crate::gpu::init_gpu_blocking() {
            Ok(gpu) => gpu,
            Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => {
                eprintln!("skipping: {err} (set HEARTH_REQUIRE_GPU=1 to make this a failure)");
                return;
            }
            Err(err) => panic!("{err}"),
        };
        eprintln!("adapter: {:?}", gpu.adapter);
        let result = run_blocking(&gpu.device);
        assert!(result.passed, "{result:?}");
        let fused = result.fused_kernels_max_abs_error.expect("wgpu runs the fused kernels");
        assert!(fused < 1e-4, "{result:?}");
    }
}
