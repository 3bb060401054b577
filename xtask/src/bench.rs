//! `cargo xtask bench [-- <hearth bench flags>]`: builds the `hearth` CLI the way the test step
//! does (same features, so Burn is not rebuilt) and runs `hearth bench`, which prints the figures
//! for benches/RESULTS.md. The machine and the GPU adapter are named in its first lines.
//!
//! `cargo xtask bench -- --browser --model <file.gguf> [--tokens N]` instead builds the extension
//! and measures browser decode: Hearth in headless Chromium beside wllama
//! (extension/scripts/bench-browser.mjs).

use crate::{build, process, root};

pub fn bench(flags: &[String]) -> Result<(), String> {
    let root = root();
    let flags: Vec<&str> = flags.iter().map(String::as_str).filter(|f| *f != "--").collect();
    if flags.contains(&"--browser") {
        build::build(&build::Options { release: false, strict: false })?;
        let mut cmd = process::command("node", &["scripts/bench-browser.mjs"]);
        cmd.args(flags.iter().filter(|f| **f != "--browser")).current_dir(root.join("extension"));
        return process::run(cmd);
    }
    let mut build_cmd = process::command("cargo", &["test", "--release", "--workspace", "--no-run"]);
    build_cmd.current_dir(&root);
    process::run(build_cmd)?;
    let hearth = build::target_dir(&root).join("release/hearth");
    let mut args = vec!["bench"];
    args.extend(flags);
    let mut cmd = process::command(&hearth.display().to_string(), &args);
    cmd.current_dir(&root);
    process::run(cmd)
}
