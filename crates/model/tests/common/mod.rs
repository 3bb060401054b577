//! What the model crate's integration tests share.

use burn::tensor::{Device, Tensor};
use hearth_model::{CacheOptions, Gemma, Input, KvCache, Output, SoftTokens, gpu};

/// How far the parity tests let Hearth's numbers be from transformers' (soft tokens, logits).
#[allow(dead_code)] // not every test compares with transformers
pub const TOLERANCE: f32 = 1e-3;

/// The CPU backend, and the GPU (wgpu: lavapipe in CI) when there is one; `HEARTH_REQUIRE_GPU`
/// makes a missing GPU an error.
pub fn devices() -> Vec<(&'static str, Device)> {
    let mut devices = vec![("cpu", Device::flex())];
    match gpu::init_gpu_blocking() {
        Ok(gpu) => devices.push(("wgpu", gpu.device)),
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => {
            eprintln!("no GPU, testing the CPU backend only: {err}")
        }
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    }
    devices
}

/// A `[rows, width]` tensor's values, row by row.
#[allow(dead_code)] // not every test reads rows
pub fn rows(t: Tensor<2>) -> Vec<Vec<f32>> {
    let [_, width] = t.dims();
    let values: Vec<f32> = pollster::block_on(t.into_data_async()).unwrap().try_into_vec().unwrap();
    values.chunks(width).map(<[f32]>::to_vec).collect()
}

/// Asserts two matrices agree within `tolerance` (largest absolute difference), printing it.
#[allow(dead_code)] // not every test compares rows
pub fn check_rows(label: &str, actual: &[Vec<f32>], expected: &[Vec<f32>], tolerance: f32) {
    assert_eq!(actual.len(), expected.len(), "{label}: row count");
    let diff = actual
        .iter()
        .zip(expected)
        .flat_map(|(a, e)| {
            assert_eq!(a.len(), e.len(), "{label}: row width");
            a.iter().zip(e).map(|(x, y)| (x - y).abs())
        })
        .fold(0.0, f32::max);
    eprintln!("{label}: max |Δ| = {diff:.2e}");
    assert!(diff <= tolerance, "{label}: max |Δ| {diff} > {tolerance}");
}

/// Asserts two matrices agree within [`TOLERANCE`]: the parity tests' comparison.
#[allow(dead_code)] // not every test compares with transformers
pub fn check(label: &str, actual: &[Vec<f32>], expected: &[Vec<f32>]) {
    check_rows(label, actual, expected, TOLERANCE);
}

/// The towers' parity: the logits of `tokens` with `soft` at its placeholders, from position
/// `logits_from` on, against `expected`, computed in one chunk and in chunks of 7 (the soft tokens
/// split across them, through a ring that wraps); `after` names what they follow ("the image").
#[allow(dead_code)] // only the towers' tests hold soft tokens
pub fn check_logits_after(
    label: &str,
    after: &str,
    model: &Gemma,
    (tokens, soft): (&[u32], &SoftTokens),
    logits_from: usize,
    expected: &[Vec<f32>],
) {
    let small = CacheOptions { max_context: 192, max_chunk: 7 };
    for (options, how) in [(CacheOptions::default(), "in one chunk"), (small, "in chunks of 7")] {
        let mut cache = KvCache::new(&model.config, options, model.device());
        let logits = model.forward(Input::with_images(tokens, Some(soft)), &mut cache, Output::All).unwrap().logits;
        check(&format!("{label}: logits after {after}, {how}"), &rows(logits).split_off(logits_from), expected);
    }
}
