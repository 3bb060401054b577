//! Counting GPU dispatches: how many kernels a piece of work launches, by kernel name. Decode speed
//! of a small model is bounded by dispatches per token as much as by memory bandwidth, so the
//! benchmark reports this figure.

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
