//! What the model crate's integration tests share.

use burn::tensor::{Device, Tensor};
use hearth_model::gpu;

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
