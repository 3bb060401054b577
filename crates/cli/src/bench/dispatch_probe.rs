//! `hearth bench --dispatch`: what one launch costs on this adapter, with nothing else in the
//! way. Chains of launches issued without a wait (one profiling window: the device's timestamps
//! where the adapter has them, else the wall time after one sync) of (a) an empty kernel, (b) a
//! kernel that reads and writes 4 bytes, (c) E2B's smallest and largest decode GEMVs (the packed
//! 4-bit product the model runs, random codes), each chain dependent (every launch reads the last
//! one's output) and independent. Per launch: GPU µs, and the host's CPU µs on the issuing thread
//! (Burn, cubecl's launch) and on cubecl's device runner (wgpu's encoding, submits).

use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::AffineMatrix;
use hearth_kernels::probe::{ChainResult, ChainTiming, Tiny, timed_chain, tiny_chain};

use crate::host_cost::{split, this_thread_id, threads_cpu_ns};

/// The probe's options: launches of each tiny chain and of each GEMV chain.
pub fn run(device: &Device, adapter: &str, launches: usize, gemv_launches: usize) -> Result<(), String> {
    let launches = launches.max(2);
    let gemv_launches = gemv_launches.max(2) & !1;
    println!("## Dispatch cost: chains of launches, no wait between them\n");
    println!(
        "Adapter: {adapter}. cubecl submits every {} launches (Hearth's `TASKS_PER_SUBMIT`: a chain of {launches} \
         is {} submits) in one compute pass per submit, and its runner waits for the previous submit once 512 \
         launches are in flight. Host CPU: per launch, in a chain of {HOST_LAUNCHES} or fewer (within one submit: \
         nothing waits for the GPU), the issuing thread (Burn, cubecl's launch call) and cubecl's device runner \
         (bind group, wgpu encoding, the submit); other threads (the driver; on lavapipe the \"GPU\" itself) left \
         out.\n",
        hearth_model::gpu::TASKS_PER_SUBMIT,
        launches.div_ceil(hearth_model::gpu::TASKS_PER_SUBMIT),
    );
    println!(
        "| chain | launches | each reads the last one's output | GPU µs a launch | GB/s | issuing thread CPU µs | \
         device runner CPU µs | issuing wall µs |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut clock = None;
    for (label, kernel) in [
        ("(a) empty kernel (1 thread, one 4-byte binding never written)", Tiny::Empty),
        ("(b) reads and writes 4 bytes (1 thread)", Tiny::Word),
    ] {
        // Warm-up: the pipeline compiles here, not in the timed chain.
        tiny_chain(device, kernel, true, 4)?;
        for dependent in [true, false] {
            let timing = tiny_chain(device, kernel, dependent, launches)?;
            let host = host_cpu(|| tiny_chain(device, kernel, dependent, HOST_LAUNCHES.min(launches)))?;
            clock.get_or_insert(timing.on_device);
            row(label, dependent, &timing, None, host);
        }
    }
    // E2B's decode GEMVs, in pairs whose outputs feed each other.
    for (label, rows, k) in [
        ("(c) smallest: per-layer input gate [256 × 1536] ↔ per-layer projection [1536 × 256]", 256, 1536),
        ("(c) largest: MLP gate or up [12288 × 1536] ↔ down [1536 × 12288] (KV-shared layers' width)", 12288, 1536),
    ] {
        let first = AffineMatrix::upload(super::random_affine("probe", rows, k), device);
        let second = AffineMatrix::upload(super::random_affine("probe", k, rows), device);
        let bytes = (first.device_bytes() + second.device_bytes()) as f64 / 2.0;
        let x = Tensor::<2>::from_data(TensorData::new(vec![0.01f32; k], [1, k]), device);
        let y = Tensor::<2>::from_data(TensorData::new(vec![0.01f32; rows], [1, rows]), device);
        let _ = second.matmul_transposed(first.matmul_transposed(x.clone()));
        for dependent in [true, false] {
            let chain = |launches: usize| {
                let mut kept = Vec::with_capacity(launches);
                timed_chain(device, launches, || {
                    let mut h = x.clone();
                    for _ in 0..launches / 2 {
                        if dependent {
                            h = second.matmul_transposed(first.matmul_transposed(h));
                        } else {
                            // Every output kept: no launch writes a buffer another one read.
                            kept.push(first.matmul_transposed(x.clone()));
                            kept.push(second.matmul_transposed(y.clone()));
                        }
                    }
                    kept.push(h);
                })
            };
            let timing = chain(gemv_launches)?;
            let host = host_cpu(|| chain(HOST_LAUNCHES.min(gemv_launches)))?;
            row(label, dependent, &timing, Some(bytes), host);
        }
    }
    println!(
        "\nGPU time: {}.\n",
        if clock == Some(true) {
            "the device's timestamp queries, from the chain's first pass to its last"
        } else {
            "no timestamp queries on this adapter: the wall time from the first launch to the end of one sync \
             (host time included)"
        }
    );
    Ok(())
}

/// Launches of the chains the host's cost is measured on (or the chain's own, when shorter):
/// fewer than one submit holds
/// (`TASKS_PER_SUBMIT`), so nothing waits for the GPU while they are issued and encoded (in a
/// long chain on a slow adapter the issuing thread spins while the runner waits).
const HOST_LAUNCHES: usize = 200;

/// `chain`'s result with the host's CPU ns on (the issuing thread, cubecl's runners).
fn host_cpu(chain: impl FnOnce() -> ChainResult) -> Result<(ChainTiming, [u64; 2]), String> {
    let me = this_thread_id();
    let before = threads_cpu_ns();
    let timing = chain()?;
    let after = threads_cpu_ns();
    let [issuing, runners, _] = split(&before, &after, me);
    Ok((timing, [issuing, runners]))
}

/// One row: the GPU's figures from `timing`, the host's from `host` (a chain of
/// [`HOST_LAUNCHES`]).
fn row(label: &str, dependent: bool, timing: &ChainTiming, bytes: Option<f64>, host: (ChainTiming, [u64; 2])) {
    let n = timing.launches.max(1) as f64;
    let gbs = bytes.map_or("—".to_string(), |b| format!("{:.2}", b / (timing.gpu_seconds / n) / 1e9));
    let (host, cpu) = host;
    let h = host.launches.max(1) as f64;
    println!(
        "| {label} | {} | {} | **{:.1}** | {gbs} | {:.1} | {:.1} | {:.1} |",
        timing.launches,
        if dependent { "yes" } else { "no" },
        timing.gpu_us(),
        cpu[0] as f64 / h / 1e3,
        cpu[1] as f64 / h / 1e3,
        host.issue_seconds / h * 1e6,
    );
}
