//! Finding the tools the build needs, with a message that says how to install each one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process;

/// How the wasm32 target can be built on this machine.
pub enum WasmToolchain {
    /// `rustup target add wasm32-unknown-unknown` was done: plain cargo.
    Prebuilt,
    /// No prebuilt std, but std sources: build it with `-Zbuild-std` (Debian's rustc-web, or rust-src).
    BuildStd { cargo: PathBuf, rustc: PathBuf, linker: Option<PathBuf> },
}

pub fn wasm_toolchain() -> Result<WasmToolchain, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = process::output(&rustc, &["--print", "sysroot"]).map(PathBuf::from);
    if let Some(sysroot) = &sysroot {
        if sysroot.join("lib/rustlib/wasm32-unknown-unknown/lib").is_dir() {
            return Ok(WasmToolchain::Prebuilt);
        }
        // rustup's rust-src component: the default toolchain can build std itself (it links with rust-lld).
        if has_std_sources(sysroot) {
            return Ok(WasmToolchain::BuildStd { cargo: "cargo".into(), rustc: rustc.into(), linker: None });
        }
    }
    // Debian's rustc-web + rust-web-src (+ lld for wasm-ld).
    let debian = Path::new("/usr");
    if debian.join("bin/rustc").is_file() && debian.join("bin/cargo").is_file() && has_std_sources(debian) {
        let linker = find_wasm_ld()
            .ok_or("Debian's rustc-web is installed but no wasm-ld was found: `sudo apt-get install lld-19`")?;
        return Ok(WasmToolchain::BuildStd {
            cargo: debian.join("bin/cargo"),
            rustc: debian.join("bin/rustc"),
            linker: Some(linker),
        });
    }
    Err("cannot build for wasm32-unknown-unknown: no prebuilt standard library and no std sources.\n\
         Install either one:\n\
         - with rustup: `rustup target add wasm32-unknown-unknown`\n\
         - on Debian 12 without rustup downloads: `sudo apt-get install rustc-web cargo-web rust-web-src lld-19`"
        .into())
}

fn has_std_sources(sysroot: &Path) -> bool {
    sysroot.join("lib/rustlib/src/rust/library/std/Cargo.toml").is_file()
}

fn find_wasm_ld() -> Option<PathBuf> {
    if process::output("wasm-ld", &["--version"]).is_some() {
        return Some("wasm-ld".into());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
        .map(|e| e.path().join("bin/wasm-ld"))
        .filter(|p| p.is_file())
        .collect();
    found.sort_by_key(|p| llvm_major(p));
    found.pop()
}

fn llvm_major(path: &Path) -> u32 {
    path.components().find_map(|c| c.as_os_str().to_str()?.strip_prefix("llvm-")?.parse().ok()).unwrap_or(0)
}

/// Where Hearth keeps tools it installs itself (wasm-bindgen-cli): `$HEARTH_CACHE` or ~/.cache/hearth.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_CACHE") {
        return dir.into();
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".cache/hearth")
}

/// The version of a crate pinned in Cargo.lock.
pub fn locked_version(root: &Path, krate: &str) -> Result<String, String> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).map_err(|e| format!("reading Cargo.lock: {e}"))?;
    let needle = format!("name = \"{krate}\"\nversion = \"");
    let start = lock.find(&needle).ok_or(format!("{krate} is not in Cargo.lock"))? + needle.len();
    let end = lock[start..].find('"').ok_or("malformed Cargo.lock")? + start;
    Ok(lock[start..end].to_string())
}

/// A wasm-bindgen CLI of exactly the crate's version: found, or being installed into the cache.
pub enum WasmBindgen {
    Found(PathBuf),
    Installing { job: process::Background, wanted: String, path: PathBuf },
}

impl WasmBindgen {
    /// Finds the CLI, or starts `cargo install` (about 3 minutes) with its output in `log` when given.
    pub fn find_or_install(root: &Path, log: Option<&Path>) -> Result<Self, String> {
        let wanted = locked_version(root, "wasm-bindgen")?;
        let cached = cache_dir().join(format!("wasm-bindgen-{wanted}/bin/wasm-bindgen"));
        let mut seen = Vec::new();
        for candidate in [
            std::env::var_os("HEARTH_WASM_BINDGEN").map(PathBuf::from),
            Some(cached.clone()),
            Some("wasm-bindgen".into()),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(version) = process::output(&candidate.to_string_lossy(), &["--version"]) {
                if version.split_whitespace().nth(1) == Some(wanted.as_str()) {
                    return Ok(WasmBindgen::Found(candidate));
                }
                seen.push(format!("{} is {version}", candidate.display()));
            }
        }
        if !seen.is_empty() {
            eprintln!(
                "xtask: wasm-bindgen-cli must equal the wasm-bindgen crate ({wanted}); ignoring {}",
                seen.join(", ")
            );
        }
        eprintln!("xtask: installing wasm-bindgen-cli {wanted} into {} (once, about 3 minutes)", cache_dir().display());
        let root_dir = cache_dir().join(format!("wasm-bindgen-{wanted}"));
        // No --locked: 0.2.130's lock file pins a yanked crate.
        let mut cmd = Command::new("cargo");
        cmd.args(["install", "wasm-bindgen-cli", "--version", &wanted, "--root"]).arg(&root_dir);
        // Builds with the host toolchain into its own target dir, not the project's.
        cmd.env_remove("CARGO_TARGET_DIR");
        Ok(WasmBindgen::Installing { job: process::Background::start(cmd, log)?, wanted, path: cached })
    }

    pub fn wait(self) -> Result<PathBuf, String> {
        match self {
            WasmBindgen::Found(path) => Ok(path),
            WasmBindgen::Installing { job, wanted, path } => {
                job.wait().map_err(|e| {
                    format!(
                        "{e}\ninstall it yourself with `cargo install wasm-bindgen-cli --version {wanted}` and put it on PATH"
                    )
                })?;
                Ok(path)
            }
        }
    }
}

/// wasm-opt (binaryen) if it is installed; optional.
pub fn wasm_opt(root: &Path) -> Option<PathBuf> {
    let local = root.join("extension/node_modules/.bin/wasm-opt");
    [local, "wasm-opt".into()].into_iter().find(|p| process::output(&p.to_string_lossy(), &["--version"]).is_some())
}
