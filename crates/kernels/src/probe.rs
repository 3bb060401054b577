//! The dispatch-cost probe (`hearth bench --dispatch`): what one launch costs on this adapter, on
//! the GPU and on the host, with nothing else in the way. A chain of launches is issued into one
//! profiling window (cubecl's device timestamps where the adapter has them, else the wall time
//! after one sync) and timed as a whole; the per-launch cost is the chain's time over its length.
//!
//! Two kernels that do (almost) nothing, whose cost is the launch's alone:
//! - [`Tiny::Empty`]: one thread, one 4-byte binding it never writes (the guard is never true):
//!   a pipeline, a bind group, a dispatch, and whatever barrier wgpu puts before it.
//! - [`Tiny::Word`]: one thread reads 4 bytes and writes 4 bytes.
//!
//! Each runs as a dependent chain (every launch binds the buffer the last one wrote: read after
//! write) and an independent one (every launch its own output; cubecl pools small buffers into
//! shared pages, so they may still lie in one wgpu buffer: what Hearth's own tensors do too).
//! The GEMV chains go through [`timed_chain`] with the model's own product (the CLI's probe).

use std::time::Instant;

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::client::Client;
use cubecl::prelude::*;

use crate::launch::has_fused_kernels;

/// The probe's two launch-only kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiny {
    /// One thread, one binding never written.
    Empty,
    /// One thread: `out[0] = in[0] + 1`.
    Word,
}

/// A chain's cost.
#[derive(Clone, Copy, Debug)]
pub struct ChainTiming {
    pub launches: usize,
    /// The chain's time on the GPU: from the first launch's pass to the last one's end.
    pub gpu_seconds: f64,
    /// Whether the GPU time is the device's timestamps (else the wall time after one sync).
    pub on_device: bool,
    /// Wall time of the calling thread issuing the launches (Burn and cubecl's launch calls; the
    /// device runner encodes them behind it).
    pub issue_seconds: f64,
    /// What the chain's last launch wrote (the probe's own kernels; read after the window).
    pub last_value: Option<f32>,
}

impl ChainTiming {
    /// GPU µs a launch.
    pub fn gpu_us(&self) -> f64 {
        self.gpu_seconds / self.launches.max(1) as f64 * 1e6
    }
}

#[cube(launch)]
fn probe_empty_kernel(untouched: &mut [f32]) {
    // One thread: never true. The binding stays read-write, as Hearth's outputs are.
    if UNIT_POS_X > 1 {
        untouched[0] = 0.0;
    }
}

#[cube(launch)]
fn probe_word_kernel(input: &[f32], output: &mut [f32]) {
    output[0] = input[0] + 1.0;
}

#[backend_extension(Cube)]
pub trait ProbeOps: Backend {
    /// The compute client of `like`'s device (the probe's profiling windows).
    fn probe_client(like: FloatTensor<Self>) -> Client;
    /// `launches` launches of `kernel` on `like`'s device, dependent or not, in one window.
    fn probe_tiny_chain(like: FloatTensor<Self>, kernel: Tiny, dependent: bool, launches: usize) -> ChainResult;
}

/// A chain's timing or the device's error.
pub type ChainResult = Result<ChainTiming, String>;

fn f32_tensor(like: &CubeTensor, values: &[f32]) -> CubeTensor {
    let handle = like.client.create_from_slice(f32::as_bytes(values));
    CubeTensor::new_contiguous(like.client.clone(), like.device.clone(), [values.len()].into(), handle, DType::F32)
}

fn launch_tiny(client: &Client, kernel: Tiny, input: &CubeTensor, output: &CubeTensor) {
    let (count, dim) = (CubeCount::Static(1, 1, 1), CubeDim::new_1d(1));
    match kernel {
        Tiny::Empty => probe_empty_kernel::launch(client, count, dim, output.clone().into_buffer_arg()),
        Tiny::Word => probe_word_kernel::launch(
            client,
            count,
            dim,
            input.clone().into_buffer_arg(),
            output.clone().into_buffer_arg(),
        ),
    }
}

impl ProbeOps for CubeBackend {
    fn probe_client(like: CubeTensor) -> Client {
        like.client.clone()
    }

    fn probe_tiny_chain(like: CubeTensor, kernel: Tiny, dependent: bool, launches: usize) -> ChainResult {
        let client = like.client.clone();
        let start = f32_tensor(&like, &[0.0]);
        // Dependent: two buffers, each launch reading the one the last wrote. Independent: each
        // launch reads `start` and writes its own buffer (allocated before the window).
        let buffers: Vec<CubeTensor> = if dependent {
            vec![start.clone(), f32_tensor(&like, &[0.0])]
        } else {
            (0..launches).map(|_| f32_tensor(&like, &[0.0])).collect()
        };
        let last = if dependent { buffers[launches % 2].clone() } else { buffers[launches.max(1) - 1].clone() };
        let mut timing = window(&client, launches, || {
            for i in 0..launches {
                let (input, output) =
                    if dependent { (&buffers[i % 2], &buffers[(i + 1) % 2]) } else { (&start, &buffers[i]) };
                launch_tiny(&client, kernel, input, output);
            }
        })?;
        timing.last_value = read_value(&last);
        Ok(timing)
    }
}

/// Runs `issue` (which must launch `launches` kernels on `client`'s stream from this thread)
/// inside one profiling window, after the device is idle.
fn window(client: &Client, launches: usize, issue: impl FnOnce()) -> ChainResult {
    pollster::block_on(client.sync()).map_err(|err| err.to_string())?;
    let window = client.profile_start().map_err(|err| format!("{err:?}"))?;
    let started = Instant::now();
    issue();
    let issue_seconds = started.elapsed().as_secs_f64();
    let duration = client.profile_end(window).map_err(|err| format!("{err:?}"))?;
    let on_device = matches!(duration.timing_method(), cubecl::logging::TimingMethod::Device);
    let ticks = pollster::block_on(duration.resolve()).ok_or("the profile's timestamps were lost")?;
    Ok(ChainTiming {
        launches,
        gpu_seconds: ticks.duration().as_secs_f64(),
        on_device,
        issue_seconds,
        last_value: None,
    })
}

/// The first value of `t` (f32), read back.
fn read_value(t: &CubeTensor) -> Option<f32> {
    let descriptor = cubecl::server::CopyDescriptor::new(
        t.handle.clone().binding(),
        t.meta.shape().clone(),
        t.meta.strides().clone(),
        t.elem_size(),
    );
    let bytes = pollster::block_on(t.client.read_one_tensor_async(descriptor)).ok()?;
    TensorData::from_bytes(bytes, t.meta.shape().clone(), DType::F32).iter::<f32>().next()
}

fn scratch(device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(vec![0.0f32], [1]), device)
}

/// `launches` launches of `kernel` in a chain, timed as one; `Err` on a device without the fused
/// kernels (the CPU backend) or a device error.
pub fn tiny_chain(device: &Device, kernel: Tiny, dependent: bool, launches: usize) -> ChainResult {
    if !has_fused_kernels(device) {
        return Err("the dispatch probe needs a cubecl device".into());
    }
    <Dispatch as ProbeOps>::probe_tiny_chain(scratch(device).into_dispatch(), kernel, dependent, launches)
}

/// Times `issue`, which launches `launches` kernels on `device` from this thread (through Burn:
/// the model's own products), as one chain.
pub fn timed_chain(device: &Device, launches: usize, issue: impl FnOnce()) -> ChainResult {
    if !has_fused_kernels(device) {
        return Err("the dispatch probe needs a cubecl device".into());
    }
    let client = <Dispatch as ProbeOps>::probe_client(scratch(device).into_dispatch());
    window(&client, launches, issue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatches::count_dispatches;

    /// Each chain launches what it says (counted by name: the observer also sees other tests'
    /// launches) and is timed; the dependent word chain adds one a launch, each launch reading the
    /// last one's output, and the independent one writes 1 everywhere. One test, so that no other
    /// test launches the probe's kernels meanwhile.
    #[test]
    fn the_probe_chains_launch_what_they_say() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        for (kernel, name) in [(Tiny::Empty, "ProbeEmptyKernel"), (Tiny::Word, "ProbeWordKernel")] {
            for dependent in [true, false] {
                let (timing, counts) = count_dispatches(|| tiny_chain(&gpu, kernel, dependent, 10).unwrap());
                let launched: usize = counts.iter().filter(|(k, _)| k.contains(name)).map(|(_, n)| n).sum();
                assert_eq!(launched, 10, "{kernel:?}, dependent {dependent}: {counts:?}");
                assert_eq!(timing.launches, 10);
                assert!(timing.gpu_seconds > 0.0 && timing.gpu_seconds.is_finite(), "{timing:?}");
            }
        }
        assert_eq!(tiny_chain(&gpu, Tiny::Word, true, 7).unwrap().last_value, Some(7.0));
        assert_eq!(tiny_chain(&gpu, Tiny::Word, false, 7).unwrap().last_value, Some(1.0));
    }
}
