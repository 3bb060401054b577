//! `cargo xtask build`: the offscreen wasm (Rust → wasm32 → wasm-bindgen), the TypeScript bundles
//! (esbuild, pinned by package-lock.json) and the static files, assembled into dist/extension/.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{process, root, toolchain};

pub struct Options {
    /// Also run `wasm-opt -Oz` (slow: minutes) when binaryen is installed.
    pub release: bool,
}

/// Builds the extension and returns the path of dist/extension.
pub fn build(options: &Options) -> Result<PathBuf, String> {
    let root = root();
    let dist = root.join("dist/extension");
    std::fs::create_dir_all(&dist).map_err(|e| format!("creating {}: {e}", dist.display()))?;
    npm_ci_if_needed(&root)?;
    let wasm = build_wasm(&root)?;
    bindgen(&root, &wasm, &dist.join("wasm"), options.release)?;
    let mut bundle = process::command("node", &["build.mjs"]);
    bundle.arg(&dist).current_dir(root.join("extension"));
    process::run(bundle)?;
    println!("xtask: extension ready in {} (load it unpacked from chrome://extensions)", dist.display());
    Ok(dist)
}

/// `npm ci` when node_modules is missing or older than package-lock.json.
pub fn npm_ci_if_needed(root: &Path) -> Result<(), String> {
    let ext = root.join("extension");
    let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let installed = modified(ext.join("node_modules/.package-lock.json"));
    let locked = modified(ext.join("package-lock.json"));
    if installed.is_some() && installed >= locked {
        return Ok(());
    }
    let mut cmd = process::command("npm", &["ci", "--no-audit", "--no-fund"]);
    // The tests drive Debian's Chromium; never let a package download a browser.
    cmd.current_dir(&ext).env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1");
    process::run(cmd).map_err(|e| format!("{e}\nNode.js 20+ and npm are required (https://nodejs.org)"))
}

pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Compiles crates/offscreen for wasm32 in release mode and returns the .wasm path.
fn build_wasm(root: &Path) -> Result<PathBuf, String> {
    // Its own target dir: a different target and often a different rustc than the native build.
    let target_dir = target_dir(root).join("wasm");
    let toolchain = toolchain::wasm_toolchain()?;
    let mut cmd = match &toolchain {
        toolchain::WasmToolchain::Prebuilt => Command::new("cargo"),
        toolchain::WasmToolchain::BuildStd { cargo, .. } => Command::new(cargo),
    };
    cmd.current_dir(root)
        .args(["build", "--release", "--target", "wasm32-unknown-unknown", "-p", "hearth-offscreen", "--target-dir"])
        .arg(&target_dir);
    if let toolchain::WasmToolchain::BuildStd { rustc, linker, .. } = &toolchain {
        cmd.arg("-Zbuild-std=std,panic_abort").env("RUSTC", rustc).env("RUSTC_BOOTSTRAP", "1");
        if let Some(linker) = linker {
            cmd.env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", linker);
        }
        // rustup's proxies would otherwise pick their own toolchain for nested calls.
        cmd.env_remove("RUSTUP_TOOLCHAIN").env_remove("CARGO");
    }
    process::run(cmd)?;
    Ok(target_dir.join("wasm32-unknown-unknown/release/hearth_offscreen.wasm"))
}

/// wasm-bindgen --target web, then wasm-opt when available.
fn bindgen(root: &Path, wasm: &Path, out_dir: &Path, release: bool) -> Result<(), String> {
    let wasm_bindgen = toolchain::wasm_bindgen(root)?;
    let mut cmd = Command::new(&wasm_bindgen);
    // The name section is half the module and only helps debuggers; panics still carry messages.
    cmd.args(["--target", "web", "--no-typescript", "--remove-name-section", "--remove-producers-section", "--out-dir"])
        .arg(out_dir)
        .arg(wasm);
    process::run(cmd)?;
    let module = out_dir.join("hearth_offscreen_bg.wasm");
    if release {
        match toolchain::wasm_opt(root) {
            Some(wasm_opt) => {
                let mut opt = Command::new(wasm_opt);
                opt.args(["-Oz", "--strip-debug", "--strip-producers", "-o"]).arg(&module).arg(&module);
                process::run(opt)?;
            }
            None => eprintln!("xtask: wasm-opt not found; the module is not size-optimised (npm i -g binaryen)"),
        }
    }
    let size = std::fs::metadata(&module).map(|m| m.len()).unwrap_or(0);
    println!("xtask: {} is {:.1} MB", module.display(), size as f64 / 1e6);
    Ok(())
}
