//! Panics and traps. In wasm32 a panic aborts: the instance traps (`RuntimeError: unreachable`),
//! the future it was polling never completes, and its state (borrowed cells, locks) stays as it
//! was. Such an instance must never be called again: the offscreen document reports the crash and
//! the worker's Retry creates a fresh document. So that the report can say why, the panic's
//! message goes to JavaScript (`setPanicHandler`) before the trap.
//!
//! Test builds (the `scripted` feature) can make the engine trap on purpose, for the e2e suite:
//! `setTestTrap(point, how)`. Release builds have neither the export nor the checks
//! ([`maybe_trap`] is empty there).

use std::cell::RefCell;

use wasm_bindgen::prelude::*;

thread_local! {
    static PANIC_HANDLER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

/// Logs a panic to the console (as `console_error_panic_hook` does), then tells the handler
/// JavaScript set: `handler(message)`.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        let message = info.to_string();
        let _ = PANIC_HANDLER.try_with(|handler| {
            if let Some(handler) = handler.try_borrow().ok().as_deref().and_then(Option::as_ref) {
                let _ = handler.call1(&JsValue::NULL, &JsValue::from_str(&message));
            }
        });
    }));
}

/// `handler(message)` hears every panic's message, just before the instance traps.
#[wasm_bindgen(js_name = setPanicHandler)]
pub fn set_panic_handler(handler: js_sys::Function) {
    PANIC_HANDLER.with(|h| *h.borrow_mut() = Some(handler));
}

/// Where a test trap fires (test builds only).
#[cfg_attr(not(any(test, feature = "scripted")), allow(dead_code))]
#[derive(Debug, Clone, PartialEq)]
struct TestTrap {
    /// `start` (before the GPU and the self-test), `self_test` (after it passed), `load_step`
    /// (as load step `step` begins), `generate` (at a task's first piece of model output).
    point: String,
    step: Option<usize>,
    /// The allocator's failure (what running out of wasm memory does) rather than a panic.
    out_of_memory: bool,
}

#[cfg_attr(not(any(test, feature = "scripted")), allow(dead_code))]
const POINTS: [&str; 4] = ["start", "self_test", "load_step", "generate"];

/// `point` is `start`, `self_test`, `load_step:<k>` or `generate`; `how` is `panic` (the
/// default) or `oom`.
#[cfg_attr(not(any(test, feature = "scripted")), allow(dead_code))]
fn parse_trap(point: &str, how: Option<&str>) -> Result<TestTrap, String> {
    let (name, step) = match point.split_once(':') {
        Some((name, step)) => {
            let step = step.parse().map_err(|_| format!("the trap's step must be a number: {point:?}"))?;
            (name, Some(step))
        }
        None => (point, None),
    };
    if !POINTS.contains(&name) {
        return Err(format!("unknown trap point {name:?}: one of {}", POINTS.join(", ")));
    }
    if (name == "load_step") != step.is_some() {
        return Err(format!("only load_step takes a step (load_step:<k>): {point:?}"));
    }
    let out_of_memory = match how.unwrap_or("panic") {
        "panic" => false,
        "oom" => true,
        other => return Err(format!("a trap is a `panic` or an `oom`, not {other:?}")),
    };
    Ok(TestTrap { point: name.to_string(), step, out_of_memory })
}

#[cfg(feature = "scripted")]
thread_local! {
    static ARMED: RefCell<Option<TestTrap>> = const { RefCell::new(None) };
}

/// Test builds only: the engine traps the next time it reaches `point` (see [`parse_trap`]);
/// `null` disarms it.
#[cfg(feature = "scripted")]
#[wasm_bindgen(js_name = setTestTrap)]
pub fn set_test_trap(point: Option<String>, how: Option<String>) -> Result<(), JsError> {
    let trap = point.map(|p| parse_trap(&p, how.as_deref())).transpose().map_err(|e| JsError::new(&e))?;
    ARMED.with(|armed| *armed.borrow_mut() = trap);
    Ok(())
}

/// Traps here if a test armed `point` (test builds only; nothing in release builds).
#[inline]
pub fn maybe_trap(point: &str) {
    maybe_trap_step(point, None);
}

/// Traps here if a test armed `point` at `step` (test builds only; nothing in release builds).
#[inline]
#[cfg_attr(not(feature = "scripted"), allow(unused_variables))]
pub fn maybe_trap_step(point: &str, step: Option<usize>) {
    #[cfg(feature = "scripted")]
    {
        let hit = ARMED.with(|armed| {
            let mut armed = armed.borrow_mut();
            let hit = armed.as_ref().is_some_and(|t| t.point == point && (t.step.is_none() || t.step == step));
            if hit { armed.take() } else { None }
        });
        let Some(trap) = hit else { return };
        if trap.out_of_memory {
            // What a failed `memory.grow` leads to: no panic message, an abort.
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<[u8; 1 << 30]>());
        }
        match step {
            Some(step) => panic!("Hearth test trap at {point} {step}"),
            None => panic!("Hearth test trap at {point}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trap_points_parse_and_wrong_ones_are_refused() {
        let trap = |point: &str, step, out_of_memory| TestTrap { point: point.into(), step, out_of_memory };
        assert_eq!(parse_trap("start", None), Ok(trap("start", None, false)));
        assert_eq!(parse_trap("self_test", Some("panic")), Ok(trap("self_test", None, false)));
        assert_eq!(parse_trap("load_step:2", Some("oom")), Ok(trap("load_step", Some(2), true)));
        assert_eq!(parse_trap("generate", None), Ok(trap("generate", None, false)));
        for (point, how) in [("load", None), ("load_step", None), ("start:1", None), ("load_step:x", None)] {
            assert!(parse_trap(point, how).is_err(), "{point}");
        }
        assert!(parse_trap("start", Some("segfault")).is_err());
    }
}
