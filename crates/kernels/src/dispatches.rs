//! Counting GPU dispatches: how many kernels a piece of work launches, by kernel name. Decode speed
//! of a small model is bounded by dispatches per token as much as by memory bandwidth, so the
//! benchmark reports this figure.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cubecl::logging::{LaunchObservation, LaunchObserver};

#[derive(Default)]
struct Tally(Mutex<BTreeMap<&'static str, usize>>);

impl LaunchObserver for Tally {
    fn launched(&self, kernel: &'static str) {
        if let Ok(mut counts) = self.0.lock() {
            *counts.entry(kernel).or_default() += 1;
        }
    }
}

/// Runs `work` and returns its result with the kernels it launched on cubecl devices (kernel
/// name → launches). The CPU backend launches none.
pub fn count_dispatches<T>(work: impl FnOnce() -> T) -> (T, BTreeMap<&'static str, usize>) {
    let tally = Arc::new(Tally::default());
    let watching = LaunchObservation::new(tally.clone());
    let result = work();
    drop(watching);
    let counts = tally.0.lock().map(|c| c.clone()).unwrap_or_default();
    (result, counts)
}

/// Per kernel name: the issuing thread's time spent before each of its launches, in order.
pub type LaunchCosts = BTreeMap<&'static str, Vec<u64>>;

struct LaunchClock {
    clock: fn() -> u64,
    /// The clock at the previous launch (or the start), and the costs so far.
    state: Mutex<(u64, LaunchCosts)>,
}

impl LaunchObserver for LaunchClock {
    fn launched(&self, kernel: &'static str) {
        let now = (self.clock)();
        if let Ok(mut state) = self.state.lock() {
            let spent = now.saturating_sub(state.0);
            state.1.entry(kernel).or_default().push(spent);
            state.0 = now;
        }
    }
}

/// Runs `work` and charges each kernel it launches with the time `clock` (the issuing thread's
/// CPU time, in ns) advanced since the launch before it: the Burn operation and the launch that
/// prepared it. Also returns the time after the last launch (to the end of `work`).
pub fn time_dispatches<T>(clock: fn() -> u64, work: impl FnOnce() -> T) -> (T, LaunchCosts, u64) {
    let observer = Arc::new(LaunchClock { clock, state: Mutex::new((clock(), BTreeMap::new())) });
    let watching = LaunchObservation::new(observer.clone());
    let result = work();
    let end = clock();
    drop(watching);
    let (last, costs) = observer.state.lock().map(|s| s.clone()).unwrap_or_default();
    (result, costs, end.saturating_sub(last))
}

thread_local! {
    /// The bytes the next launch on this thread reads, as its launch site declared them.
    static DECLARED_READS: Cell<Option<u64>> = const { Cell::new(None) };
    /// The declaration of the launch this thread last issued, until its measurement arrives
    /// (on the issuing thread, right after the launch).
    static LAUNCH_READS: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Declares the bytes the next kernel this thread launches reads from memory (its weights, the
/// keys and values it visits, its inputs), for [`profile_dispatches`]'s bandwidth figures. Called
/// by Hearth's launch sites right before the launch; Burn's own kernels declare nothing.
pub(crate) fn declare_reads(bytes: u64) {
    DECLARED_READS.with(|declared| declared.set(Some(bytes)));
}

fn take_declared_reads() -> Option<u64> {
    DECLARED_READS.with(Cell::take)
}

/// One launch's GPU time as measured: its length, whether the device timed it (timestamp
/// queries) or the host did around a blocking submit (adapters without timestamps), and the
/// bytes its launch site declared it reads (`None`: a kernel that declares none, Burn's own).
#[derive(Clone, Copy, Debug)]
pub struct KernelTime {
    pub kernel: &'static str,
    pub seconds: f64,
    pub on_device: bool,
    pub bytes_read: Option<u64>,
}

enum Measurement {
    Unread(&'static str, cubecl::logging::ProfileDuration, Option<u64>),
    Read(KernelTime),
}

/// Keeps the launches of one thread (the one that profiles: the observer sees every thread's).
struct Profiler {
    thread: std::thread::ThreadId,
    measurements: Mutex<Vec<Measurement>>,
}

impl Profiler {
    fn mine(&self) -> bool {
        std::thread::current().id() == self.thread
    }

    /// The declaration of this thread's last launch.
    fn launch_reads(&self) -> Option<u64> {
        LAUNCH_READS.with(Cell::take)
    }
}

impl LaunchObserver for Profiler {
    fn launched(&self, _kernel: &'static str) {
        // Every launch moves the declaration along, so none outlives the launch it was made for.
        LAUNCH_READS.with(|reads| reads.set(take_declared_reads()));
    }

    fn timing(&self) -> cubecl::logging::TimingRequest {
        // Unread until the pass is over, so the kernels run back to back as they do untimed.
        cubecl::logging::TimingRequest::Deferred
    }

    fn profiled(&self, kernel: &'static str, profile: cubecl::logging::ProfileDuration) {
        let bytes_read = self.launch_reads();
        if !self.mine() {
            return;
        }
        if let Ok(mut all) = self.measurements.lock() {
            all.push(Measurement::Unread(kernel, profile, bytes_read));
        }
    }

    fn timed(&self, kernel: &'static str, duration: cubecl::logging::Duration, method: cubecl::logging::TimingMethod) {
        let on_device = matches!(method, cubecl::logging::TimingMethod::Device);
        let bytes_read = self.launch_reads();
        if !self.mine() {
            return;
        }
        if let Ok(mut all) = self.measurements.lock() {
            all.push(Measurement::Read(KernelTime { kernel, seconds: duration.as_secs_f64(), on_device, bytes_read }));
        }
    }
}

/// Runs `work` with every kernel it launches on this thread timed on the GPU, then reads the
/// timings (waiting for the device): one [`KernelTime`] per launch, in launch order. Replays of a
/// recorded step launch nothing, so profile a step launched kernel by kernel.
pub fn profile_dispatches<T>(work: impl FnOnce() -> T) -> (T, Vec<KernelTime>) {
    let profiler = Arc::new(Profiler { thread: std::thread::current().id(), measurements: Mutex::default() });
    // A declaration no observer took (launched before this) must not be charged to a launch here.
    take_declared_reads();
    let watching = LaunchObservation::new(profiler.clone());
    let result = work();
    drop(watching);
    let measurements = profiler.measurements.lock().map(|mut all| std::mem::take(&mut *all)).unwrap_or_default();
    let times = measurements
        .into_iter()
        .filter_map(|measurement| match measurement {
            Measurement::Read(time) => Some(time),
            Measurement::Unread(kernel, profile, bytes_read) => {
                let on_device = matches!(profile.timing_method(), cubecl::logging::TimingMethod::Device);
                let ticks = pollster::block_on(profile.resolve())?;
                Some(KernelTime { kernel, seconds: ticks.duration().as_secs_f64(), on_device, bytes_read })
            }
        })
        .collect();
    (result, times)
}
