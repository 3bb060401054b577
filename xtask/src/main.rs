//! `cargo xtask`: Hearth's build, run and test driver.
//!
//! - `build [--release]`  the extension into dist/extension (wasm + TypeScript + static files)
//! - `run [--headless] [--no-build]`  build, then open Chromium with the extension on a demo page
//!   (`HEARTH_CHROME` names the browser; branded Google Chrome 137+ cannot load it and is refused)
//! - `test [--full]`  everything CI checks: formatting, lints, native tests, wasm build, e2e in
//!   Chromium; `--full` also runs the real-weights test (needs the Gemma 3 270M GGUF installed) and
//!   records llama.cpp's continuation beside it (`HEARTH_PYTHON` with llama-cpp-python)
//! - `bench [-- flags]`  speed and memory figures (`hearth bench`: fused 4-bit GEMV vs copy, models
//!   with the real Gemma 4 E2B/E4B shapes), for benches/RESULTS.md; `-- --browser --model <gguf>`:
//!   browser decode, Hearth beside wllama; `--bundle <dir>`: a folder (hearth, the Vulkan loader,
//!   run.sh, and llama.cpp's llama-bench when it builds) that runs those benches on another
//!   machine's adapter without cargo, Hearth beside llama.cpp on the same file
//! - `llama-bench`  build llama.cpp's llama-bench (Vulkan) from the pinned llama-cpp-python sdist
//!   into the cache (not part of `test`; the bundle carries it)
//! - `screenshots`  the README's pictures, taken by the e2e tests, into docs/
//! - `gen-types`  regenerate the TypeScript protocol from the Rust types (`build` refreshes the
//!   wasm exports' declaration, extension/src/generated/hearth_offscreen.d.ts)
//! - `fixtures [NAME…]`  regenerate the test fixtures from their seeded scripts, in a pinned Python
//!   environment of its own; a clean checkout stays clean

#[cfg(test)]
mod architecture;
mod bench;
mod build;
mod bundle;
mod chrome;
mod fixtures;
mod llama_bench;
mod process;
mod screenshots;
mod test;
mod toolchain;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, flags) = match args.split_first() {
        Some((command, flags)) => (command.as_str(), flags),
        None => ("help", &[][..]),
    };
    let has = |flag: &str| flags.iter().any(|f| f == flag);
    let result = match command {
        "build" => build::build(&build::Options { release: has("--release"), ..build::Options::test() }).map(|_| ()),
        "run" | "demo" => run(has("--headless"), has("--no-build"), has("--release")),
        "test" => test::test(has("--full")),
        "bench" => bench::bench(flags),
        "screenshots" => screenshots::screenshots(),
        "gen-types" => gen_types(),
        "fixtures" => fixtures::fixtures(flags),
        "llama-bench" => llama_bench::build().map(drop),
        "help" | "--help" | "-h" => {
            println!("{}", HELP);
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: error: {message}");
            ExitCode::FAILURE
        }
    }
}

const HELP: &str = "usage: cargo xtask <command>
  build [--release]                 build the extension into dist/extension
  run [--headless] [--no-build]     build, then launch Chromium with the extension on a demo page
                                    (HEARTH_CHROME=<program> picks the browser)
  test [--full]                     formatting, lints, native tests, wasm build, e2e tests in Chromium;
                                    --full adds the real-weights check (Gemma 3 270M GGUF vs transformers)
                                    and llama.cpp's second opinion (HEARTH_PYTHON: a python with
                                    llama-cpp-python)
  bench [-- <hearth bench flags>]   speed and memory figures (see `hearth bench --help`);
                                    -- --browser --model <file.gguf>: browser decode vs wllama
  bench --bundle <dir>              build hearth into <dir> with the Vulkan loader and run.sh, which
                                    runs the kernel and E2B/E4B benches anywhere into one Markdown file,
                                    and Hearth beside llama.cpp's llama-bench on the same GGUF
  llama-bench                       build llama.cpp's llama-bench (Vulkan) from the pinned
                                    llama-cpp-python sdist into $HEARTH_CACHE/llama-cpp (apt-get
                                    install cmake glslc libvulkan-dev spirv-headers; ~6 min)
  screenshots                       the README's pictures, taken by the e2e tests, into docs/
  gen-types                         regenerate extension/src/generated/protocol.ts
  fixtures [NAME…]                  regenerate the test fixtures from their seeded scripts (all, or
                                    chat, weights-gguf, weights-mlx, parity, tiny-chat, gguf-tiny,
                                    gguf-gemma4, mlx-4bit) in $HEARTH_CACHE/pyenv; lists what changed";

/// The repository root (the parent of xtask/). `cargo run` sets CARGO_MANIFEST_DIR at run time;
/// prefer it to the compile-time value, which names whichever checkout built a shared target dir.
pub fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    PathBuf::from(manifest_dir).parent().map(PathBuf::from).unwrap_or_default()
}

fn run(headless: bool, no_build: bool, release: bool) -> Result<(), String> {
    // Before the build: a browser that cannot load the extension is said at once.
    let browser = chrome::find()?;
    chrome::check(&browser)?;
    let version = browser
        .version
        .as_ref()
        .map(|v| format!(" ({}{})", v.product, v.major.map(|m| format!(" {m}")).unwrap_or_default()));
    eprintln!("xtask: browser {}{}", browser.path.display(), version.unwrap_or_default());
    if !no_build {
        build::build(&build::Options { release, ..build::Options::test() })?;
    }
    let mut cmd = process::command("node", &["scripts/run-demo.mjs"]);
    // tests/lib/browser.mjs launches the browser `CHROMIUM` names.
    cmd.current_dir(root().join("extension")).env("CHROMIUM", &browser.path);
    if headless {
        cmd.arg("--headless");
    }
    process::run(cmd)
}

fn gen_types() -> Result<(), String> {
    let path = root().join(hearth_protocol::typescript::GENERATED_PATH);
    std::fs::write(&path, hearth_protocol::typescript::typescript_module())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
