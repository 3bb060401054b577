//! A known-answer computation: `softmax(A · B, rows)` on fixed data, checked against a plain-Rust
//! reference in f64. It exercises upload, a matmul, a reduction and the asynchronous read-back,
//! which is everything the model needs from the device.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor, TensorData};
use hearth_protocol::SelfTestReport;

const M: usize = 4;
const K: usize = 8;
const N: usize = 6;
/// f32 on any conforming GPU stays far inside this; a broken driver or shader lands far outside.
pub const TOLERANCE: f32 = 1e-5;

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
pub async fn run(device: &Device, now_ms: impl Fn() -> f64) -> Result<SelfTestReport, ReadBackError> {
    let start = now_ms();
    let a = Tensor::<2>::from_data(TensorData::new(lhs(), [M, K]), device);
    let b = Tensor::<2>::from_data(TensorData::new(rhs(), [K, N]), device);
    let probabilities = softmax(a.matmul(b), 1);
    // Asynchronous read-back: the browser cannot wait synchronously on the GPU.
    let data = probabilities.into_data_async().await.map_err(|e| ReadBackError(e.to_string()))?;
    let values: Vec<f32> = data.try_into_vec().map_err(|e| ReadBackError(format!("{e:?}")))?;
    let elapsed_ms = now_ms() - start;
    Ok(report(values, elapsed_ms))
}

fn report(values: Vec<f32>, elapsed_ms: f64) -> SelfTestReport {
    let expected = reference();
    let max_abs_error = if values.len() == expected.len() {
        // Unlike f32::max, this keeps a NaN: a NaN anywhere must fail the test.
        values
            .iter()
            .zip(&expected)
            .map(|(v, e)| (v - e).abs())
            .fold(0.0, |m, d| if d > m || d.is_nan() { d } else { m })
    } else {
        f32::INFINITY
    };
    SelfTestReport {
        computation: format!("softmax(A·B) over rows, A {M}×{K}, B {K}×{N}, f32"),
        passed: max_abs_error <= TOLERANCE,
        values,
        max_abs_error,
        tolerance: TOLERANCE,
        elapsed_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn run_blocking(device: &Device) -> SelfTestReport {
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
        assert!(!report(values, 0.0).passed);
        assert!(!report(vec![f32::NAN; M * N], 0.0).passed);
        assert!(!report(vec![], 0.0).passed);
    }

    #[test]
    fn passes_on_the_cpu_backend() {
        let result = run_blocking(&Device::flex());
        assert!(result.passed, "{result:?}");
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
    }
}
