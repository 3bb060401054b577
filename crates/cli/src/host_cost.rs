//! The host's cost of a decoded token: CPU time, not wall time, so the GPU's work and the waits
//! for it are left out. Natively the work is split over two threads: the one that runs the model
//! (Burn's operations, cubecl's launches, sampling) and cubecl's device runner (`DS…`), which
//! records and submits wgpu's commands. Everything else in the process (on lavapipe, the "GPU"
//! itself) is shown apart. The issuing thread's share is broken down by kernel: the time since the
//! launch before each one.

use std::collections::BTreeMap;

use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::dispatches::{LaunchCosts, time_dispatches};
use hearth_model::{Sampler, Session};

/// The calling thread's CPU time in ns (0 where the platform does not say).
pub fn thread_cpu_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec into the valid pointer it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } == 0 {
            return now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
        }
    }
    0
}

/// CPU ns of every thread of the process by name, from Linux's /proc (`schedstat`'s first field).
pub(crate) fn threads_cpu_ns() -> BTreeMap<u64, (String, u64)> {
    let mut threads = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return threads };
    for task in tasks.flatten() {
        let Ok(tid) = task.file_name().to_string_lossy().parse::<u64>() else { continue };
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default().trim().to_string();
        let ns = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()));
        if let Some(ns) = ns {
            threads.insert(tid, (name, ns));
        }
    }
    threads
}

pub(crate) fn this_thread_id() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_string_lossy().parse().ok()
}

/// CPU ns spent between two snapshots: (this thread, cubecl's runners, the others).
pub(crate) fn split(
    before: &BTreeMap<u64, (String, u64)>,
    after: &BTreeMap<u64, (String, u64)>,
    me: Option<u64>,
) -> [u64; 3] {
    let mut spent = [0; 3];
    for (tid, (name, ns)) in after {
        let delta = ns.saturating_sub(before.get(tid).map_or(0, |b| b.1));
        let class = if Some(*tid) == me {
            0
        } else if name.starts_with("DS") {
            1
        } else {
            2
        };
        spent[class] += delta;
    }
    spent
}

/// Decodes `tokens` tokens after `next` and prints the host's CPU time per token by thread, then
/// one step's launches by kernel with the issuing thread's time before each.
pub fn report(
    device: &Device,
    session: &mut Session,
    sampler: &mut Sampler,
    mut next: u32,
    tokens: usize,
    dispatches_per_token: usize,
) -> Result<u32, String> {
    let tokens = tokens.max(1);
    let me = this_thread_id();
    // [launched one by one, recorded and replayed]: the model thread's step, its sampling, the
    // device runner, other threads.
    let mut columns = [[0u64; 5]; 2];
    for (column, recorded) in columns.iter_mut().zip([false, true]) {
        session.model().set_step_recording(recorded);
        // The first recorded step records (and runs the step twice before): not measured.
        let logits = session.step(next).map_err(|e| e.to_string())?;
        next = pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
        let before = threads_cpu_ns();
        let wall = std::time::Instant::now();
        let (mut step_ns, mut sample_ns) = (0u64, 0u64);
        for _ in 0..tokens {
            let start = thread_cpu_ns();
            let logits = session.step(next).map_err(|e| e.to_string())?;
            let stepped = thread_cpu_ns();
            next = pollster::block_on(sampler.sample(logits)).map_err(|e| e.to_string())?;
            step_ns += stepped - start;
            sample_ns += thread_cpu_ns() - stepped;
        }
        let after = threads_cpu_ns();
        let [_, runners, others] = split(&before, &after, me);
        *column = [step_ns, sample_ns, runners, others, wall.elapsed().as_nanos() as u64];
    }
    let per_token = |ns: u64| ns as f64 / tokens as f64 / 1e6;
    let per_dispatch = |ns: u64| ns as f64 / tokens as f64 / dispatches_per_token.max(1) as f64 / 1e3;
    println!("## Host cost per decoded token (CPU time; GPU work and waits excluded), {tokens} tokens\n");
    println!(
        "Launched one by one (as before recording), and recorded once then replayed (the default). \
         µs per dispatch: over the {dispatches_per_token} kernels of a token.\n"
    );
    println!("| thread | one by one: ms per token | µs per dispatch | recorded: ms per token | µs per dispatch |");
    println!("|---|---|---|---|---|");
    let row = |label: &str, pick: &dyn Fn(&[u64; 5]) -> u64, dispatch: bool| {
        let cell = |c: &[u64; 5]| {
            let ns = pick(c);
            let each = if dispatch { format!("{:.1}", per_dispatch(ns)) } else { String::new() };
            format!("{:.3} | {each}", per_token(ns))
        };
        println!("| {label} | {} | {} |", cell(&columns[0]), cell(&columns[1]));
    };
    row(
        "the model's thread: the step (Burn ops, cubecl launches or the replay; spins while the device's queue is full)",
        &|c| c[0],
        true,
    );
    row("the model's thread: sampling and the 4-byte readback", &|c| c[1], false);
    row("cubecl's device runner (wgpu recording, submits)", &|c| c[2], true);
    row("**host total** (model thread + runner)", &|c| c[0] + c[1] + c[2], true);
    row("other threads of the process (the driver; on lavapipe also the GPU's own work)", &|c| c[3], false);
    row("wall time per token (GPU work included)", &|c| c[4], false);
    println!();

    // One step launched one by one, each launch timed on the model's thread.
    session.model().set_step_recording(false);
    let (logits, costs, tail) = time_dispatches(thread_cpu_ns, || session.step(next));
    next = pollster::block_on(sampler.sample(logits.map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    print_breakdown(&costs, tail);
    session.model().set_step_recording(true);
    upload_cost(device);
    Ok(next)
}

/// The host's CPU time for one small upload, the kind each decoded token makes for what changes
/// (its ids, a RoPE table, a mask): 200 small launches each after an upload, less the same
/// launches alone. An upload makes cubecl submit what it has recorded first.
fn upload_cost(device: &Device) {
    const ROUNDS: usize = 200;
    let me = this_thread_id();
    let sync = || {
        if let Err(err) = device.sync() {
            eprintln!("hearth bench: device sync failed: {err}");
        }
    };
    let existing = Tensor::<2>::from_data(TensorData::new(vec![1.0f32; 512], [1, 512]), device);
    let measure = |upload: bool| {
        sync();
        let before = threads_cpu_ns();
        let kept: Vec<Tensor<2>> = (0..ROUNDS)
            .map(|i| {
                let input = if upload {
                    Tensor::from_data(TensorData::new(vec![i as f32; 512], [1, 512]), device)
                } else {
                    existing.clone()
                };
                input.add_scalar(1.0)
            })
            .collect();
        sync();
        let after = threads_cpu_ns();
        drop(kept);
        split(&before, &after, me)
    };
    let alone = measure(false);
    let with_uploads = measure(true);
    let each = |class: usize| with_uploads[class].saturating_sub(alone[class]) as f64 / ROUNDS as f64 / 1e3;
    println!(
        "One small upload (512 f32, as a RoPE table row) between launches: {:.1} µs on the model's thread + {:.1} µs on the device runner ({ROUNDS} rounds, less the launches alone).\n",
        each(0),
        each(1)
    );
}

/// The step's launches grouped by kernel (outer type name), the costliest first. The median
/// launch is shown beside the mean: where the device is slower than the host (lavapipe), the
/// issuing thread spins while cubecl's queue is full, and those waits land on a few launches.
fn print_breakdown(costs: &LaunchCosts, tail: u64) {
    let mut families: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (name, times) in costs {
        let family = short(name);
        let family = family.split('<').next().unwrap_or(&family).to_string();
        families.entry(family).or_default().extend(times);
    }
    let median = |times: &mut Vec<u64>| {
        times.sort_unstable();
        times.get(times.len() / 2).copied().unwrap_or(0)
    };
    let mut rows: Vec<(String, usize, u64, u64)> = families
        .into_iter()
        .map(|(family, mut times)| {
            let total = times.iter().sum();
            (family, times.len(), total, median(&mut times))
        })
        .collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.1 as u64 * row.3));
    let total: u64 = rows.iter().map(|r| r.2).sum::<u64>() + tail;
    let typical: u64 = rows.iter().map(|r| r.1 as u64 * r.3).sum();
    println!("The model's thread in one decode step, by kernel (CPU time since the launch before each):\n");
    println!("| kernel | launches | median µs | mean µs | launches × median, ms |");
    println!("|---|---|---|---|---|");
    for (family, count, sum, median) in &rows {
        println!(
            "| `{family}` | {count} | {:.1} | {:.1} | {:.3} |",
            *median as f64 / 1e3,
            *sum as f64 / *count as f64 / 1e3,
            (*count as u64 * median) as f64 / 1e6
        );
    }
    println!(
        "| **step** | {} | | | **{:.3}** (measured {:.3}, with waits) |\n",
        rows.iter().map(|r| r.1).sum::<usize>(),
        typical as f64 / 1e6,
        total as f64 / 1e6
    );
}

/// `a::b::Kernel<c::d::MulOp>` → `Kernel<MulOp>`; deeply generic names keep their outer type.
pub(crate) fn short(name: &str) -> String {
    let short = name.split('<').map(|part| part.rsplit("::").next().unwrap_or(part)).collect::<Vec<_>>().join("<");
    match short.split_once('<') {
        Some((outer, _)) if short.len() > 40 => format!("{outer}<…>"),
        _ => short,
    }
}
