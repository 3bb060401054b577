//! `hearth bench --profile`: where a decoded token's GPU time goes, per kernel kind (launches a
//! token, GPU µs from timestamp queries where the adapter has them, share, bytes read and the
//! bandwidth they achieve), and what can be checked without a GPU: dispatches a token, weight
//! bytes read a token against the file's size, and how each decode attention launch is split at
//! a short and a long context.

use std::collections::BTreeMap;

use hearth_kernels::DecodeSplit;
use hearth_kernels::dispatches::{KernelTime, profile_dispatches};
use hearth_model::config::LayerType;
use hearth_model::{CacheOptions, Sampler, Session};

/// Context lengths at which the attention split is shown.
const SPLIT_DEPTHS: [usize; 2] = [64, 4096];

/// One decode step launched kernel by kernel with each launch timed on the GPU, at the session's
/// position; then the split of the decode attention launches.
pub fn run(session: &mut Session, sampler: &mut Sampler, next: u32, cache: CacheOptions) -> Result<(), String> {
    session.model().set_step_recording(false);
    // One untimed step first: the kernels compiled, the rings copied after the prefill.
    let logits = session.step(next).map_err(|e| e.to_string())?;
    let next = pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
    let position = session.cache().len();
    let (step, times) = profile_dispatches(|| session.step(next));
    pollster::block_on(sampler.sample(step.map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    session.model().set_step_recording(true);
    print_kernel_times(&times, position);
    print_attention_splits(session, cache);
    Ok(())
}

fn print_kernel_times(times: &[KernelTime], position: usize) {
    /// Per kernel kind: launches, GPU seconds, bytes read (declared by the launch sites), and
    /// launches that declared none.
    #[derive(Default)]
    struct Kind {
        launches: usize,
        seconds: f64,
        bytes: u64,
        undeclared: usize,
    }
    let mut by_kind: BTreeMap<String, Kind> = BTreeMap::new();
    for time in times {
        let kind = by_kind.entry(crate::host_cost::short(time.kernel)).or_default();
        kind.launches += 1;
        kind.seconds += time.seconds;
        match time.bytes_read {
            Some(bytes) => kind.bytes += bytes,
            None => kind.undeclared += 1,
        }
    }
    let total: f64 = times.iter().map(|t| t.seconds).sum();
    let total_bytes: u64 = times.iter().filter_map(|t| t.bytes_read).sum();
    let on_device = times.iter().filter(|t| t.on_device).count();
    let clock = if on_device == times.len() {
        "the device's timestamp queries".to_string()
    } else {
        format!(
            "{} of {} launches timed on the host around a blocking submit (no timestamp queries on this adapter): \
             those include the submit and are not the kernel's own time",
            times.len() - on_device,
            times.len()
        )
    };
    println!("## Profile: one decoded token at position {position}, kernel by kernel\n");
    println!(
        "Timed with {clock}; kernels run back to back as in an unrecorded step. Sum {:.3} ms, {:.1} MB read \
         ({:.1} GB/s over the sum). Bytes read are what each launch site declares its kernel reads (weights, the \
         keys and values it visits, its inputs); `—`: a kernel that declares none (Burn's own).\n",
        total * 1e3,
        total_bytes as f64 / 1e6,
        total_bytes as f64 / total.max(1e-12) / 1e9
    );
    println!("| kernel | launches a token | GPU µs a token | µs a launch | share | MB read a token | GB/s |");
    println!("|---|---|---|---|---|---|---|");
    let mut rows: Vec<(String, Kind)> = by_kind.into_iter().collect();
    rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
    for (name, kind) in rows {
        let (read, rate) = if kind.undeclared == kind.launches {
            ("—".to_string(), "—".to_string())
        } else {
            let partial =
                if kind.undeclared > 0 { format!(" ({} launches undeclared)", kind.undeclared) } else { String::new() };
            (
                format!("{:.2}{partial}", kind.bytes as f64 / 1e6),
                format!("{:.1}", kind.bytes as f64 / kind.seconds.max(1e-12) / 1e9),
            )
        };
        println!(
            "| `{name}` | {} | {:.1} | {:.1} | {:.1} % | {read} | {rate} |",
            kind.launches,
            kind.seconds * 1e6,
            kind.seconds * 1e6 / kind.launches as f64,
            100.0 * kind.seconds / total.max(1e-12)
        );
    }
    println!();
}

/// The decode attention launches of one token (layers with their own keys and values and the
/// KV-shared ones alike) at each of [`SPLIT_DEPTHS`]: workgroups of the split and combine passes,
/// keys a split reads, and the bytes of keys, values and partial results.
fn print_attention_splits(session: &Session, cache: CacheOptions) {
    let config = &session.model().config;
    println!("## Decode attention launches (split pass + combine pass per layer)\n");
    println!(
        "Workgroups to fill a GPU: about twice its compute units (an H200 has 132; WebGPU does not say how many an \
         adapter has).\n"
    );
    println!(
        "| layers | heads / KV heads × d | cache slots | position | keys read | splits × passes × KV heads = workgroups \
         | splits reading keys | keys a split | K+V MB read | partials MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut kinds: BTreeMap<(LayerType, usize, usize), usize> = BTreeMap::new();
    for layer in &config.layers {
        *kinds.entry((layer.kind, layer.head_dim, layer.num_kv_heads)).or_default() += 1;
    }
    for ((kind, d, kv_heads), count) in kinds {
        let slots = cache.slots(config, kind);
        let split = DecodeSplit::new(config.num_heads, kv_heads, d, slots);
        for depth in SPLIT_DEPTHS {
            // A sliding layer reads only the slots that hold its window.
            let reach = match kind {
                LayerType::Full => slots,
                LayerType::Sliding => config.window(),
            };
            let keys = (depth + 1).min(reach);
            let kv_mb = (2 * kv_heads * keys * d * 4) as f64 / 1e6 * split.passes as f64;
            let active = split.active_splits(keys);
            // Written by the split pass and read by the combine: an accumulator per active split,
            // a maximum and a sum per split.
            let partial_mb = (config.num_heads * (active * d + split.splits as usize * 2) * 4) as f64 / 1e6;
            println!(
                "| {count} {} | {} / {kv_heads} × {d} | {slots} | {depth} | {keys} | {} × {} × {} = {} | {} | {} | \
                 {kv_mb:.2} | {partial_mb:.2} |",
                kind.name(),
                config.num_heads,
                split.splits,
                split.passes,
                split.kv_heads,
                split.split_workgroups(),
                active * (split.passes * split.kv_heads) as usize,
                split.keys_per_split(keys),
            );
        }
    }
    println!();
}
