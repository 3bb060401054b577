//! `cargo xtask bench [-- <hearth bench flags>]`: builds the `hearth` CLI with the test step's
//! features but every crate optimised (the release profile: what users run) and runs `hearth bench`, which prints the figures
//! for benches/RESULTS.md. The machine and the GPU adapter are named in its first lines.
//!
//! `cargo xtask bench -- --browser --model <file.gguf> [--tokens N]` instead builds the extension
//! and measures browser decode: Hearth in headless Chromium beside wllama
//! (extension/scripts/bench-browser.mjs).
//!
//! `cargo xtask bench --bundle <dir>` builds the CLI the same way and writes a folder that runs
//! the benches on another machine with no cargo (bundle.rs): a lent GPU's minutes go to
//! measuring, not building.

use std::path::PathBuf;

use crate::{build, bundle, process, root};

pub fn bench(flags: &[String]) -> Result<(), String> {
    let root = root();
    let flags: Vec<&str> = flags.iter().map(String::as_str).filter(|f| *f != "--").collect();
    if flags.contains(&"--browser") {
        build::build(&build::Options { optimized: true, ..build::Options::test() })?;
        let mut cmd = process::command("node", &["scripts/bench-browser.mjs"]);
        cmd.args(flags.iter().filter(|f| **f != "--browser")).current_dir(root.join("extension"));
        return process::run(cmd);
    }
    if let Some(at) = flags.iter().position(|f| *f == "--bundle") {
        let dir = match flags.get(at + 1) {
            Some(dir) if !dir.starts_with('-') && flags.len() == 2 => PathBuf::from(dir),
            _ => return Err("usage: cargo xtask bench --bundle <dir> (no other flags)".into()),
        };
        let hearth = build_cli(&root)?;
        return bundle::write(&dir, &hearth, &root);
    }
    let hearth = build_cli(&root)?;
    let mut args = vec!["bench"];
    args.extend(flags);
    let mut cmd = process::command(&hearth.display().to_string(), &args);
    cmd.current_dir(&root);
    process::run(cmd)
}

/// Builds `hearth` with the test step's features (one feature resolution for both) and the
/// release profile; its path.
fn build_cli(root: &std::path::Path) -> Result<PathBuf, String> {
    let mut build_cmd = process::command("cargo", &["test", "--release", "--workspace", "--no-run"]);
    build_cmd.current_dir(root);
    process::run(build_cmd)?;
    Ok(build::target_dir(root).join("release/hearth"))
}
