//! `cargo xtask build`: the offscreen wasm (Rust → wasm32 → wasm-bindgen), the TypeScript bundles
//! (esbuild, pinned by package-lock.json) and the static files, assembled into dist/extension/.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{process, root, toolchain};

pub struct Options {
    /// A release build: `wasm-opt -Oz` when binaryen is installed (slow: minutes), and no bundled
    /// test model. Other builds carry crates/model/fixtures/tiny-chat for the end-to-end tests.
    pub release: bool,
    /// Every crate at opt-level 3 (Cargo's release profile), as release builds are. Otherwise the
    /// crates that only define kernels are compiled unoptimised ([`FAST_BUILD_PROFILE`]): test builds.
    pub optimized: bool,
    /// `cargo xtask test` (CI): a stale generated declaration of the wasm exports fails the build
    /// (it is updated all the same); other builds update it and say so.
    pub strict: bool,
}

/// Cargo.toml's profile for test builds: the release profile with the crates that only define
/// kernels for cubecl's JIT at opt-level 0 (a quarter of their compile time; their code runs once a
/// kernel, not per token). Native tests, the test wasm and `cargo xtask run` use it.
pub const FAST_BUILD_PROFILE: &str = "fast-build";

impl Options {
    /// A build with the test features (scripted model, test exports, bundled test model), compiled
    /// fast: what `cargo xtask test`, `build` and `run` make.
    pub fn test() -> Self {
        Options { release: false, optimized: false, strict: false }
    }

    /// The Cargo profile this build compiles with.
    pub fn cargo_profile(&self) -> &'static str {
        if self.release || self.optimized { "release" } else { FAST_BUILD_PROFILE }
    }
}

/// The tiny model (random weights, real formats) that test builds bundle.
pub const TEST_MODEL: &str = "crates/model/fixtures/tiny-chat";

/// Its assistant (random weights), bundled beside it: test builds draft with it.
pub const TEST_ASSISTANT: &str = "crates/model/fixtures/tiny-chat-assistant";

/// Builds the extension and returns the path of dist/extension.
pub fn build(options: &Options) -> Result<PathBuf, String> {
    let root = root();
    npm_ci_if_needed(&root)?;
    let wasm = WasmBuild::start(&root, None, options)?.wait()?;
    assemble(&root, &wasm, options)
}

/// wasm-bindgen, the TypeScript bundles and the static files around an already compiled module.
pub fn assemble(root: &Path, wasm: &Path, options: &Options) -> Result<PathBuf, String> {
    let wasm_bindgen = toolchain::WasmBindgen::find_or_install(root, None)?.wait()?;
    assemble_with(root, wasm, &wasm_bindgen, options)
}

/// [`assemble`] with a wasm-bindgen CLI already found.
pub fn assemble_with(root: &Path, wasm: &Path, wasm_bindgen: &Path, options: &Options) -> Result<PathBuf, String> {
    let dist = root.join("dist/extension");
    std::fs::create_dir_all(&dist).map_err(|e| format!("creating {}: {e}", dist.display()))?;
    bindgen(root, wasm, wasm_bindgen, &dist.join("wasm"), options)?;
    let mut bundle = process::command("node", &["build.mjs"]);
    bundle.arg(&dist).current_dir(root.join("extension"));
    if !options.release {
        bundle.arg("--bundle-model").arg(root.join(TEST_MODEL));
    }
    process::run(bundle)?;
    if options.release {
        check_release_bundle(&dist)?;
    } else {
        copy_test_model(root, &dist)?;
    }
    println!("xtask: extension ready in {} (load it unpacked from chrome://extensions)", dist.display());
    Ok(dist)
}

/// The test model's files into test-models/<name>/, where build-info.json (build.mjs) says it is
/// and the offscreen document reads them.
fn copy_test_model(root: &Path, dist: &Path) -> Result<(), String> {
    let source = root.join(TEST_MODEL);
    let name = source.file_name().ok_or("TEST_MODEL has no folder name")?;
    let target = dist.join("test-models").join(name);
    std::fs::create_dir_all(&target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    for file in hearth_protocol::BUNDLED_MODEL_FILES {
        std::fs::copy(source.join(file), target.join(file))
            .map_err(|e| format!("copying {} of the test model: {e}", source.join(file).display()))?;
    }
    let (source, target) = (root.join(TEST_ASSISTANT), target.join("assistant"));
    std::fs::create_dir_all(&target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    for file in hearth_protocol::BUNDLED_ASSISTANT_FILES {
        std::fs::copy(source.join(file), target.join(file))
            .map_err(|e| format!("copying {} of the test model's assistant: {e}", source.join(file).display()))?;
    }
    Ok(())
}

/// Belt and braces for build.mjs's `__HEARTH_TEST_BUILD__`: the test hooks of the model store
/// (download from another server, a fake quota, losing the GPU device) and the test model's
/// manifest must not ship.
fn check_release_bundle(dist: &Path) -> Result<(), String> {
    let offscreen = std::fs::read_to_string(dist.join("offscreen.js")).map_err(|e| e.to_string())?;
    if offscreen.contains("hearthTestHooks") || offscreen.contains("hearthLoseGpuDevice") {
        return Err("the release offscreen.js contains the test hooks; check build.mjs's define".into());
    }
    // The worker's (a shorter wait on a silent engine) too.
    let worker = std::fs::read_to_string(dist.join("service-worker.js")).map_err(|e| e.to_string())?;
    if worker.contains("hearthTestHooks") {
        return Err("the release service-worker.js contains the test hooks; check build.mjs's define".into());
    }
    if dist.join("models/tiny-chat.json").exists() {
        return Err("the release build carries the test model's manifest".into());
    }
    // The overlay's state mirror (a hidden element inside its shadow root) is for tests only: a
    // release overlay writes its state (the answer, the pending call…) nowhere a page can read.
    let content = std::fs::read_to_string(dist.join("content.js")).map_err(|e| e.to_string())?;
    let mirror = ["test-state", "dataset.task", "dataset.answer", "dataset.pendingCall"];
    if let Some(hook) = mirror.iter().find(|h| content.contains(*h)) {
        return Err(format!("the release content.js carries the test state mirror ({hook}); check build.mjs"));
    }
    // The side panel mounts the same chat with the same mirror.
    let panel = std::fs::read_to_string(dist.join("sidepanel.js")).map_err(|e| e.to_string())?;
    if let Some(hook) = mirror.iter().find(|h| panel.contains(*h)) {
        return Err(format!("the release sidepanel.js carries the test state mirror ({hook}); check build.mjs"));
    }
    Ok(())
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

/// A running compilation of crates/offscreen for wasm32. `cargo xtask test` starts
/// it first so that it shares the two cores with the native build instead of following it.
pub struct WasmBuild {
    job: process::Background,
    wasm: PathBuf,
}

impl WasmBuild {
    /// Starts the build; its output goes to `log` when given, else to the terminal.
    pub fn start(root: &Path, log: Option<&Path>, options: &Options) -> Result<Self, String> {
        let (cmd, wasm) = wasm_command(root, options)?;
        eprintln!("xtask: compiling the offscreen engine for wasm32");
        Ok(WasmBuild { job: process::Background::start(cmd, log)?, wasm })
    }

    /// Waits for the build and returns the .wasm path.
    pub fn wait(self) -> Result<PathBuf, String> {
        self.job.wait().map_err(|e| format!("the wasm build failed: {e}"))?;
        Ok(self.wasm)
    }
}

/// A short name for the checkout at `root` (a hash of its canonical path). Cargo decides that a
/// path package is fresh by comparing its files' times with the last build's, not by where they
/// are: in a target directory two checkouts share (`CARGO_TARGET_DIR`, as `.ci/run` sets it), an
/// older checkout building after a newer one would be told its module is fresh and be handed the
/// other's. Keyed by checkout, each keeps its own.
pub fn checkout_key(root: &Path) -> String {
    let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    // FNV-1a: stable across Rust releases (std's hasher is not promised to be).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical.to_string_lossy().bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let name: String = canonical
        .file_name()
        .map(|n| n.to_string_lossy().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')).collect())
        .unwrap_or_default();
    format!("{name}-{:012x}", hash & 0xffff_ffff_ffff)
}

/// Cargo features of the offscreen module: test builds (the end-to-end suite's and the browser
/// benches') add the scripted model that the agent suite drives and the exports only tests and
/// benches call (`generate`, `measureVerification`); release builds have none.
pub fn wasm_features(release: bool) -> &'static [&'static str] {
    if release { &[] } else { &["scripted", "test-exports"] }
}

fn wasm_command(root: &Path, options: &Options) -> Result<(Command, PathBuf), String> {
    // Its own target dir: a different target and often a different rustc than the native build;
    // and one per checkout (`checkout_key`).
    let target_dir = target_dir(root).join("wasm").join(checkout_key(root));
    let toolchain = toolchain::wasm_toolchain()?;
    let mut cmd = match &toolchain {
        toolchain::WasmToolchain::Prebuilt => Command::new("cargo"),
        toolchain::WasmToolchain::BuildStd { cargo, .. } => Command::new(cargo),
    };
    cmd.current_dir(root)
        .args(["build", "--profile", options.cargo_profile(), "--target", "wasm32-unknown-unknown"])
        .args(["-p", "hearth-offscreen", "--target-dir"])
        .arg(&target_dir);
    // Panics abort in the browser (a smaller module, and build-std's panic_abort runtime); native
    // builds keep Cargo's default so that tests and binaries share one dependency graph.
    let profile_env = options.cargo_profile().to_uppercase().replace('-', "_");
    cmd.env(format!("CARGO_PROFILE_{profile_env}_PANIC"), "abort");
    let features = wasm_features(options.release);
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    if let toolchain::WasmToolchain::BuildStd { rustc, linker, .. } = &toolchain {
        cmd.arg("-Zbuild-std=std,panic_abort").env("RUSTC", rustc).env("RUSTC_BOOTSTRAP", "1");
        if let Some(linker) = linker {
            cmd.env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", linker);
        }
        // rustup's proxies would otherwise pick their own toolchain for nested calls.
        cmd.env_remove("RUSTUP_TOOLCHAIN").env_remove("CARGO");
    }
    let wasm = target_dir.join("wasm32-unknown-unknown").join(options.cargo_profile()).join("hearth_offscreen.wasm");
    Ok((cmd, wasm))
}

/// Exports of the offscreen module that only test builds (the `scripted` and `test-exports`
/// features) may have: the scripted model, the traps the e2e suite makes the engine crash with, the
/// constrained-call probe, and the browser bench's verification timing. (`generate`, a test
/// export too, is a word the glue holds anyway.)
const TEST_EXPORTS: [&str; 5] =
    ["useScriptedModel", "scriptedPrompts", "setTestTrap", "constrainedCallProbe", "measureVerification"];

/// Where the TypeScript finds the module's exports' types: wasm-bindgen's declarations of a test
/// build (the `scripted` feature's exports included), relative to the repository root.
pub const EXPORTS_DECLARATION: &str = "extension/src/generated/hearth_offscreen.d.ts";

/// Takes wasm-bindgen's TypeScript declarations out of the build (the extension ships none) and,
/// in a test build, updates extension/src/generated's copy when it differs from them: an error
/// in a strict build (CI), else a notice.
fn exports_declaration(root: &Path, out_dir: &Path, options: &Options) -> Result<(), String> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let dts = read(&out_dir.join("hearth_offscreen.d.ts"))?;
    for generated in ["hearth_offscreen.d.ts", "hearth_offscreen_bg.wasm.d.ts"] {
        let _ = std::fs::remove_file(out_dir.join(generated));
    }
    // The glue names its declarations, which the extension does not carry.
    let glue_path = out_dir.join("hearth_offscreen.js");
    let glue = read(&glue_path)?;
    if let Some(rest) = glue.strip_prefix(SELF_TYPES) {
        std::fs::write(&glue_path, rest.trim_start_matches('\n')).map_err(|e| e.to_string())?;
    }
    if options.release {
        return Ok(());
    }
    let fresh = normalize_declaration(&dts);
    let path = root.join(EXPORTS_DECLARATION);
    if std::fs::read_to_string(&path).ok().as_deref() == Some(fresh.as_str()) {
        return Ok(());
    }
    std::fs::write(&path, &fresh).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let stale = format!(
        "{EXPORTS_DECLARATION} was stale (the wasm module's exports changed) and is now updated: \
         check the TypeScript against it (cd extension && npx tsc --noEmit) and commit it"
    );
    if options.strict {
        return Err(stale);
    }
    eprintln!("xtask: {stale}");
    Ok(())
}

const SELF_TYPES: &str = "/* @ts-self-types=\"./hearth_offscreen.d.ts\" */\n";

/// wasm-bindgen's declarations with a header, and without the raw exports of `InitOutput` (their
/// names carry crate hashes that change with any dependency; only `memory` is for JavaScript).
fn normalize_declaration(dts: &str) -> String {
    let mut out = String::from(
        "// GENERATED by `cargo xtask build` from wasm-bindgen's declarations of crates/offscreen (a test\n\
         // build: the `scripted` feature's exports included). Do not edit by hand.\n",
    );
    let mut in_init_output = false;
    for line in dts.lines() {
        if line.starts_with("export interface InitOutput") {
            in_init_output = true;
        } else if in_init_output && line.starts_with('}') {
            in_init_output = false;
        } else if in_init_output && line.starts_with("    readonly ") && !line.starts_with("    readonly memory:") {
            continue;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// wasm-bindgen --target web, then wasm-opt when available.
fn bindgen(root: &Path, wasm: &Path, wasm_bindgen: &Path, out_dir: &Path, options: &Options) -> Result<(), String> {
    let release = options.release;
    let compiled = std::fs::read(wasm).map_err(|e| format!("reading {}: {e}", wasm.display()))?;
    if command_style_linkage(&compiled) {
        return Err(format!(
            "{} is linked command-style: every export reruns the static constructors (a second a \
             token in the browser). crates/offscreen's start function must call __wasm_call_ctors",
            wasm.display()
        ));
    }
    let mut cmd = Command::new(wasm_bindgen);
    cmd.args(["--target", "web", "--remove-producers-section"]);
    // The name section is half the module and only helps debuggers and profiles (panics still carry
    // messages): HEARTH_WASM_NAMES=1 keeps it, for `bench-browser.mjs --profile`.
    if std::env::var_os("HEARTH_WASM_NAMES").is_none() {
        cmd.arg("--remove-name-section");
    }
    cmd.arg("--out-dir").arg(out_dir).arg(wasm);
    process::run(cmd)?;
    exports_declaration(root, out_dir, options)?;
    if release {
        // Belt and braces for wasm_features: the test model's and the test traps' exports must not ship.
        let glue = std::fs::read_to_string(out_dir.join("hearth_offscreen.js")).map_err(|e| e.to_string())?;
        if let Some(export) = TEST_EXPORTS.iter().find(|e| glue.contains(*e)) {
            return Err(format!("the release module exports {export} (test builds only); check wasm_features"));
        }
    }
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

/// Whether wasm-ld wrapped the exports in constructor calls (it names the wrappers
/// `<export>.command_export` in the name section rustc keeps until wasm-bindgen).
fn command_style_linkage(module: &[u8]) -> bool {
    const WRAPPER: &[u8] = b".command_export";
    module.iter().enumerate().any(|(at, &byte)| byte == b'.' && module[at..].starts_with(WRAPPER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_checkout_has_its_own_wasm_build() {
        let dir = std::env::temp_dir().join(format!("hearth-checkouts-{}", std::process::id()));
        let (a, b) = (dir.join("hearth"), dir.join("copy/hearth"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let key = checkout_key(&a);
        assert_eq!(key, checkout_key(&a.join("../hearth")), "one checkout, one key");
        assert_ne!(key, checkout_key(&b), "another checkout of the same name");
        assert!(key.starts_with("hearth-") && key.len() == "hearth-".len() + 12, "{key}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn command_style_wrappers_are_found_in_the_name_section() {
        let names = b"\0asm\x01\0\0\0\x00name\x05start__wbindgen_malloc.command_export\x07";
        assert!(command_style_linkage(names));
        assert!(!command_style_linkage(b"\0asm\x01\0\0\0\x00name__wbindgen_malloc.command\x07"));
    }

    #[test]
    fn the_declaration_keeps_the_exports_and_drops_the_raw_ones() {
        let dts = "/* tslint:disable */\nexport function generate(request: string): Promise<void>;\n\
                   export interface InitOutput {\n    readonly memory: WebAssembly.Memory;\n    \
                   readonly generate: (a: number) => any;\n    readonly wasm_bindgen_0123__closure: () => void;\n}\n";
        let out = normalize_declaration(dts);
        assert!(out.starts_with("// GENERATED by `cargo xtask build`"));
        assert!(out.contains("export function generate(request: string): Promise<void>;\n"));
        assert!(out.contains("export interface InitOutput {\n    readonly memory: WebAssembly.Memory;\n}\n"));
        assert!(!out.contains("wasm_bindgen_0123"));
    }

    #[test]
    fn the_test_model_has_every_bundled_file() {
        for file in hearth_protocol::BUNDLED_MODEL_FILES {
            assert!(root().join(TEST_MODEL).join(file).is_file(), "{TEST_MODEL} has no {file}");
        }
        for file in hearth_protocol::BUNDLED_ASSISTANT_FILES {
            assert!(root().join(TEST_ASSISTANT).join(file).is_file(), "{TEST_ASSISTANT} has no {file}");
        }
    }

    /// The scripted model is a test tool: it must never reach a release build.
    #[test]
    fn release_builds_have_no_test_features() {
        assert!(wasm_features(true).is_empty());
        assert_eq!(wasm_features(false), ["scripted", "test-exports"]);
    }
}
