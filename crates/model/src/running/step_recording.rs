//! The one-token step recorded once and replayed for every later token (cubecl's graph capture).
//!
//! A decoded token launches a few hundred kernels. Launched one by one, each costs the host Burn's
//! bookkeeping, cubecl's launch and a new bind group; a recording resolves all of that once, and a
//! replay only re-encodes the prebuilt dispatches (WebGPU has no re-submittable command buffers,
//! so re-encoding remains). A replay runs the recorded kernels on the buffers they were recorded
//! with, so everything that changes per token lives in buffers rewritten before it:
//! - the token id, in a one-id buffer the recorded lookups read (one launch per embedding block
//!   and per-layer-table slice, each writing the rows it holds, so the launches do not depend on
//!   the id). Where a table is on the host (a bf16 checkpoint's; the CPU backend never records)
//!   the rows are looked up outside the recording and copied into its input buffers instead;
//! - the position: each layer type's chunk table (RoPE rotation, cache slot, key count) and the
//!   sliding layers' mask, rewritten in place by [`crate::cache::KvCache::plan`].
//!
//! A recording belongs to one cache (its rings and layers) and is dropped when a buffer it uses
//! may change (a checkpoint shares the rings, a restore swaps them); the next one-token step
//! records again.
//!
//! A recording that fails is nobody's error above this module. Its recorded launches never ran,
//! and cubecl marks every buffer they would have written (the cache's rings among them) as
//! failed; the step then runs its launches once more, one by one, writing the same keys and values
//! at the same slots, which clears the mark. Steps run unrecorded for a while and record again
//! later; after [`MAX_FAILURES`] failures in a row the model stops recording. The first failure is
//! logged (the `log` facade) and [`Recording::status`] tells it.
//!
//! Why recordings failed on busy machines ("no room for 0 bytes … a graph capture is
//! recording"): each layer's cache write swapped its keys and values out with a new empty tensor,
//! a zero-byte allocation inside the capture window. A capture admits only allocations its
//! warm-up left room for, and a zero-byte one was refused whenever the stream's pools had moved
//! between warm-up and capture (reproduced by holding memory of a new size each round:
//! `tests/recording.rs`, 3 failures in 200 recordings before, none after). The cache now swaps
//! with an empty tensor made once ([`crate::cache::KvCache`]'s placeholder): a recorded step
//! allocates nothing that its warm-up did not.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::{DType, Int, Tensor, TensorData};
use hearth_kernels::{copy_ids_into, copy_into, overwrite_ids};

use burn::tensor::Device;

/// Recordings that fail in a row before a model stops recording for good.
pub const MAX_FAILURES: u32 = 4;
/// One-token steps run launch by launch after the first failure before recording again; doubled
/// after each further failure in a row.
const FIRST_PAUSE: u32 = 32;

/// A model's recording state: on until turned off (`Gemma::set_step_recording`, the benchmark's
/// launch-by-launch baseline); paused after a recording fails, off after [`MAX_FAILURES`] in a row.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    off: AtomicBool,
    /// Failures in a row (a recording that seals sets it back to 0).
    failures: AtomicU32,
    /// Recordable steps left to run launch by launch before recording again.
    pause: AtomicU32,
    /// All failures, for [`Self::status`].
    failed_total: AtomicU32,
    /// The latest failure's reason.
    last_reason: Mutex<Option<String>>,
    /// The next recording fails as a device's may (`Gemma::fail_next_recording`).
    fail_next: AtomicBool,
}

/// What became of a model's recordings: for a report, a test or a benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingStatus {
    /// Steps are recorded and replayed now (on, not paused, not given up).
    pub active: bool,
    /// Recordings that failed since the model was loaded (each step still gave its result).
    pub failures: u32,
    /// The latest failure's reason, as the device gave it.
    pub last_failure: Option<String>,
}

impl Recording {
    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.off.store(!enabled, Ordering::Relaxed);
        if enabled {
            // Asked for again: a fresh start, whatever failed before.
            self.failures.store(0, Ordering::Relaxed);
            self.pause.store(0, Ordering::Relaxed);
        }
    }

    /// On, not paused and not given up.
    pub(crate) fn active(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
            && self.pause.load(Ordering::Relaxed) == 0
            && self.failures.load(Ordering::Relaxed) < MAX_FAILURES
    }

    /// Whether this recordable step goes through the recording; a paused recording counts the
    /// step towards its retry.
    pub(crate) fn take_turn(&self) -> bool {
        if self.off.load(Ordering::Relaxed) || self.failures.load(Ordering::Relaxed) >= MAX_FAILURES {
            return false;
        }
        let paused = self.pause.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1));
        paused.is_err()
    }

    pub(crate) fn fail_next(&self) {
        self.fail_next.store(true, Ordering::Relaxed);
    }

    pub(crate) fn status(&self) -> RecordingStatus {
        RecordingStatus {
            active: self.active(),
            failures: self.failed_total.load(Ordering::Relaxed),
            last_failure: self.last_reason.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    fn sealed(&self) {
        self.failures.store(0, Ordering::Relaxed);
    }

    /// A recording or a replay failed: steps pause recording (longer after each failure in a
    /// row), and the first failure of the model is logged.
    pub(crate) fn failed(&self, what: &str, reason: String) {
        let in_a_row = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.failed_total.fetch_add(1, Ordering::Relaxed) + 1;
        self.pause.store(FIRST_PAUSE << (in_a_row - 1).min(8), Ordering::Relaxed);
        if total == 1 {
            log::warn!(
                "{what} failed on this GPU, and the step ran launch by launch instead (the next {} \
                 steps too; recording stops after {MAX_FAILURES} failures in a row): {reason}",
                FIRST_PAUSE
            );
        }
        *self.last_reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
    }
}

/// What [`record`] made of a run.
pub(crate) enum Recorded<T> {
    /// The device records nothing (or the capture could not start): the run's output, nothing
    /// recorded.
    Not(T),
    /// The first run's output, and the recording with the outputs its replays write.
    Graph { first: T, graph: BackendGraph<Dispatch>, outputs: T },
    /// The capture failed (or a test made it fail): the first run's output. The recorded launches
    /// never ran, and the buffers they write carry the failure until something writes them again.
    Failed { first: T },
}

/// Runs `run` and records it for replays (cubecl's graph capture): a first run gives this call's
/// output; a second, dropped, leaves in the pools every buffer a recorded run takes (a recording
/// may allocate nothing); a third is recorded, not run. A failure is marked on `recording`.
pub(crate) fn record<T>(
    device: &Device,
    recording: &Recording,
    what: &str,
    run: &mut impl FnMut() -> T,
) -> Recorded<T> {
    // A test's failure is a real one: a host write inside the window, which the capture refuses
    // (the write's buffer, made before the window, is this call's own).
    let mut forced = recording
        .fail_next
        .swap(false, Ordering::Relaxed)
        .then(|| Tensor::<1, Int>::from_data(TensorData::new(vec![0u32], [1]), (device, DType::U32)));
    let device = device.as_dispatch();
    if Dispatch::graph_prepare(device).is_err() {
        return Recorded::Not(run());
    }
    let first = run();
    drop(run());
    if let Err(err) = Dispatch::graph_start_capture(device) {
        // Closing the prepared capture returns the stream to normal use.
        let _ = Dispatch::graph_stop_capture(device);
        recording.failed(what, err.to_string());
        return Recorded::Not(first);
    }
    let outputs = run();
    if let Some(scratch) = forced.as_mut() {
        overwrite_ids(scratch, vec![1]);
    }
    match Dispatch::graph_stop_capture(device) {
        Ok(graph) => {
            recording.sealed();
            Recorded::Graph { first, graph, outputs }
        }
        Err(err) => {
            recording.failed(what, err.to_string());
            Recorded::Failed { first }
        }
    }
}

/// What recording a step needs of the model besides the step itself: its device, its recording
/// state and its token lookups.
pub(crate) trait StepModel {
    fn device(&self) -> &Device;
    fn recording(&self) -> &Recording;
    /// Whether the lookups can read the id from a device buffer, and so be recorded.
    fn looks_up_on_device(&self) -> bool;
    /// The token's scaled embedding `[1, h]` and per-layer-table rows, looked up on the host side.
    fn embed(&self, tokens: &[u32]) -> (Tensor<2>, Option<Tensor<2>>);
    /// The same, launched for ids already in a device buffer.
    fn embed_ids(&self, ids: &Tensor<1, Int>) -> (Tensor<2>, Option<Tensor<2>>);
}

/// A recorded one-token step and the buffers it reads and writes besides the model's weights and
/// the cache's.
pub(crate) struct RecordedStep {
    graph: BackendGraph<Dispatch>,
    input: StepInput,
    /// What every replay writes: `[1, vocab]`, returned to the caller as the step's logits. Held
    /// here, so a consumer never writes into it; a step finds it shared while the caller still
    /// holds the last step's logits, and then does not replay.
    logits: Tensor<2>,
}

impl RecordedStep {
    pub(crate) fn reads_the_id(&self) -> bool {
        matches!(self.input, StepInput::Id(_))
    }
}

/// The token a step appends: known to the host, or chosen on the device by the last step and not
/// read back yet (`[1]` ids; the readback lags a step behind, `crate::decode`).
#[derive(Clone, Copy)]
pub(crate) enum StepToken<'a> {
    Host(u32),
    Device(&'a Tensor<1, Int>),
}

/// What a replay reads that the token decides.
#[allow(clippy::large_enum_variant)] // one per cache
enum StepInput {
    /// The token id `[1]` (u32): the lookups are part of the recording.
    Id(Tensor<1, Int>),
    /// The token's scaled embedding `[1, h]` and per-layer-table rows `[1, L·P]` (Gemma 4),
    /// looked up before each replay.
    Rows { x0: Tensor<2>, token_rows: Option<Tensor<2>> },
}

impl StepInput {
    /// This step's input for `token`, in buffers a recording can keep reading.
    fn new(model: &impl StepModel, token: StepToken) -> Self {
        if model.looks_up_on_device() {
            let ids = TensorData::new(vec![0u32], [1]);
            let mut id = Tensor::from_data(ids, (model.device(), DType::U32));
            match token {
                StepToken::Host(token) => overwrite_ids(&mut id, vec![token]),
                StepToken::Device(chosen) => copy_ids_into(&mut id, chosen.clone()),
            }
            return StepInput::Id(id);
        }
        let (x0, token_rows) = embed(model, token);
        let stable = |t: Tensor<2>| {
            let mut input = Tensor::zeros(t.shape(), &t.device());
            copy_into(&mut input, t);
            input
        };
        StepInput::Rows { x0: stable(x0), token_rows: token_rows.map(stable) }
    }

    /// Rewrites the input, in its own buffers, for `token`.
    fn rewrite(&mut self, model: &impl StepModel, token: StepToken) {
        match (self, token) {
            (StepInput::Id(id), StepToken::Host(token)) => overwrite_ids(id, vec![token]),
            (StepInput::Id(id), StepToken::Device(chosen)) => copy_ids_into(id, chosen.clone()),
            (StepInput::Rows { x0, token_rows }, token) => {
                let (new_x0, new_rows) = embed(model, token);
                copy_into(x0, new_x0);
                if let (Some(input), Some(rows)) = (token_rows.as_mut(), new_rows) {
                    copy_into(input, rows);
                }
            }
        }
    }

    /// The embedding and per-layer rows the layers take (launching the lookups, for an id).
    fn embedded(&self, model: &impl StepModel) -> (Tensor<2>, Option<Tensor<2>>) {
        match self {
            StepInput::Id(id) => model.embed_ids(id),
            StepInput::Rows { x0, token_rows } => (x0.clone(), token_rows.clone()),
        }
    }
}

/// The lookups of `token`, launched as they come (an id on the device only where the model looks
/// up on the device: [`StepModel::looks_up_on_device`]).
fn embed(model: &impl StepModel, token: StepToken) -> (Tensor<2>, Option<Tensor<2>>) {
    match token {
        StepToken::Host(token) => model.embed(&[token]),
        StepToken::Device(ids) => model.embed_ids(ids),
    }
}

/// How a run of the step's layers writes the token's keys and values into the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheWrites {
    /// As the layers choose: a decoded token's attention split may write them while it reads
    /// the cache (one launch fewer a layer).
    Any,
    /// Each layer's by a launch that only writes the cache: the run after a failed recording or
    /// replay. The cache's buffers carry the failure until a launch writes them without reading
    /// them (cubecl skips a launch that reads a failed buffer, and the split reads the cache).
    Apart,
}

/// Whether a step that can be recorded (`recordable`: a one-token step reading its position
/// from the cache's decode inputs) is recorded or replayed.
pub(crate) fn applies(model: &impl StepModel, recordable: bool) -> bool {
    recordable && model.recording().take_turn()
}

/// The logits `[1, vocab]` of a one-token step: the recording in `slot` (the cache's) replayed on
/// this token, or the step recorded now (and run) into `slot` when it is empty. `layers` runs
/// everything after the lookups on the cache (`Gemma::layers_and_head`).
pub(crate) fn step(
    model: &impl StepModel,
    token: StepToken,
    slot: &mut Option<RecordedStep>,
    mut layers: impl FnMut(Tensor<2>, Option<Tensor<2>>, CacheWrites) -> Tensor<2>,
) -> Tensor<2> {
    let device = model.device().as_dispatch();
    if let Some(recorded) = slot.as_mut() {
        // A replay writes its logits into the buffer the last step returned: if the caller still
        // holds those, this step runs launch by launch into buffers of its own, so that what a
        // caller keeps stays true (the normal decode loop has let go of them by now; the
        // recording serves again once the caller does).
        if !recorded.logits.can_mut() {
            let (x0, token_rows) = embed(model, token);
            return layers(x0, token_rows, CacheWrites::Any);
        }
        recorded.input.rewrite(model, token);
        // Safety: every buffer the recording touched is alive and unchanged: the weights (the
        // model outlives its caches' steps), the cache's layers (a change of buffer drops the
        // recording), the geometry's inputs (the cache's own), and the input and logits held in
        // `recorded`. Everything runs on this one device stream, in order.
        let replayed = unsafe { Dispatch::graph_replay(device, &recorded.graph) };
        match replayed {
            Ok(()) => return recorded.logits.clone(),
            Err(err) => {
                // What the replay writes carries the failure: the step's launches write it again
                // (the same keys and values at the same slots), and the recording goes.
                model.recording().failed("replaying the decode step", err.to_string());
                *slot = None;
                let (x0, token_rows) = embed(model, token);
                return layers(x0, token_rows, CacheWrites::Apart);
            }
        }
    }

    let input = StepInput::new(model, token);
    let mut run = |writes| {
        let (x0, token_rows) = input.embedded(model);
        layers(x0, token_rows, writes)
    };
    // This token's logits come from the first run; every run writes the same keys and values at
    // the same slots (the first also copies rings a checkpoint shares into buffers of the cache's
    // own); the recorded one runs first at the next token's replay.
    match record(model.device(), model.recording(), "recording the decode step", &mut || run(CacheWrites::Any)) {
        Recorded::Not(logits) => logits,
        Recorded::Graph { first, graph, outputs } => {
            *slot = Some(RecordedStep { graph, input, logits: outputs });
            first
        }
        // The buffers the recorded launches write (the cache's rings among them) carry the
        // failure: the launches run once more, one by one, and write them again (the keys and
        // values by launches that do not read them first).
        Recorded::Failed { first } => {
            drop(run(CacheWrites::Apart));
            first
        }
    }
}
