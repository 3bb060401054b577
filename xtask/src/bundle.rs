//! `cargo xtask bench --bundle <dir>`: a self-contained folder that runs the kernel and model
//! benches on another Linux machine's adapter with no cargo and no network: the `hearth` binary
//! (stripped), the Vulkan loader in lib/ (wgpu dlopens libvulkan.so.1, so `ldd` does not list
//! it, and a bare GPU box may lack it), any other shared library the binary links that a bare
//! Debian/Ubuntu system may lack (never glibc), run.sh and README.txt. run.sh writes one Markdown
//! file; `run.sh --quick` checks the bundle on a slow adapter (lavapipe).

use std::path::{Path, PathBuf};

use crate::process;

/// The script the bundle runs; `@REVISION@` names the commit it was built from.
const RUN_SCRIPT: &str = include_str!("bundle-run.sh");

/// Loaded by wgpu at run time, not linked: bundled whether `ldd` shows it or not.
const VULKAN_LOADER: &str = "libvulkan.so.1";

/// GL vendor-neutral dispatch (glvnd): NVIDIA's Vulkan driver lives in `libGLX_nvidia.so.0`, which
/// gives the loader no `vkCreateInstance` without them. A bare CUDA container (an H200 lent here,
/// 2026-12-04) has the driver but not these: no adapter, until they were put beside the loader.
/// Bundled when this machine has them; unused where the system has its own.
const GLVND_LIBRARIES: &[&str] =
    &["libGLdispatch.so.0", "libGLX.so.0", "libEGL.so.1", "libGL.so.1", "libOpenGL.so.0", "libGLESv2.so.2"];

/// Libraries every Debian/Ubuntu system has (glibc, the kernel's vDSO, the compiler runtime):
/// never bundled; a copy of glibc would not match the machine's dynamic loader.
const SYSTEM_LIBRARIES: &[&str] = &[
    "linux-vdso.so",
    "ld-linux",
    "libc.so",
    "libm.so",
    "libmvec.so",
    "libdl.so",
    "libpthread.so",
    "librt.so",
    "libresolv.so",
    "libutil.so",
    "libanl.so",
    "libnsl.so",
    "libcrypt.so",
    "libgcc_s.so",
    "libstdc++.so",
];

/// Writes the bundle for the `hearth` binary at `hearth` into `dir`.
pub fn write(dir: &Path, hearth: &Path, root: &Path) -> Result<(), String> {
    let lib = dir.join("lib");
    if lib.exists() {
        std::fs::remove_dir_all(&lib).map_err(|e| format!("clearing {}: {e}", lib.display()))?;
    }
    std::fs::create_dir_all(&lib).map_err(|e| format!("creating {}: {e}", lib.display()))?;

    let binary = dir.join("hearth");
    copy(hearth, &binary)?;
    // Symbols are most of the binary (67 → 50 MB); the device tool carries at most 64 MiB.
    let mut strip = process::command("strip", &[&binary.display().to_string()]);
    strip.stdout(std::process::Stdio::null());
    if let Err(e) = process::run(strip) {
        eprintln!("xtask: warning: {e}; the bundle keeps the unstripped binary");
    }
    set_executable(&binary)?;

    let ldd = process::output("ldd", &[&hearth.display().to_string()])
        .ok_or_else(|| format!("`ldd {}` failed", hearth.display()))?;
    let mut libraries = libraries_to_bundle(&ldd)?;
    if !libraries.iter().any(|(name, _)| name == VULKAN_LOADER) {
        let ldconfig = process::output("ldconfig", &["-p"])
            .or_else(|| process::output("/sbin/ldconfig", &["-p"]))
            .unwrap_or_default();
        let loader = vulkan_loader(&ldconfig).ok_or_else(|| {
            format!("{VULKAN_LOADER} not found on this machine (Debian/Ubuntu: apt-get install libvulkan1)")
        })?;
        libraries.push((VULKAN_LOADER.to_string(), loader));
    }
    for name in GLVND_LIBRARIES {
        match system_library(name) {
            Some(path) if !libraries.iter().any(|(n, _)| n == name) => libraries.push((name.to_string(), path)),
            Some(_) => {}
            None => eprintln!(
                "xtask: warning: {name} not found (Debian: apt-get install libglvnd0 libgl1 libegl1 libgles2 \
                 libopengl0); NVIDIA's Vulkan driver may find no device without it"
            ),
        }
    }
    for (name, path) in &libraries {
        copy(path, &lib.join(name))?;
    }

    let peer = add_peer(dir, &lib, root, &mut libraries);

    let mut glibc = glibc_needed(&read(&binary)?);
    for (name, _) in &libraries {
        glibc = glibc.max(glibc_needed(&read(&lib.join(name))?));
    }
    let glibc = glibc.map(|(major, minor)| format!("{major}.{minor}"));

    // 64 MB stripped today: compressed (about a fifth), so that the bundle stays within the
    // 64 MiB the device tool carries; run.sh unpacks it.
    let compressed = dir.join("hearth.xz");
    let _ = std::fs::remove_file(&compressed);
    process::run(process::command("xz", &["-9", "-T0", &binary.display().to_string()]))?;
    let binary = compressed;

    let revision = revision(root);
    let script = dir.join("run.sh");
    std::fs::write(&script, run_script(&revision)).map_err(|e| format!("writing {}: {e}", script.display()))?;
    set_executable(&script)?;
    let readme = dir.join("README.txt");
    let names: Vec<&str> = libraries.iter().map(|(name, _)| name.as_str()).collect();
    std::fs::write(&readme, readme_text(&revision, &names, glibc.as_deref()))
        .map_err(|e| format!("writing {}: {e}", readme.display()))?;

    let mut total = 0;
    let mut files = vec![binary, script, readme];
    files.extend(peer);
    for file in files.into_iter().chain(names.iter().map(|name| lib.join(name))) {
        let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        total += bytes;
        eprintln!("xtask: bundle {:>6.1} MB  {}", bytes as f64 / 1e6, file.display());
    }
    eprintln!(
        "xtask: bundle {:.1} MB in {} (needs glibc ≥ {}); run it with `{}/run.sh [results.md]`",
        total as f64 / 1e6,
        dir.display(),
        glibc.as_deref().unwrap_or("?"),
        dir.display()
    );
    Ok(())
}

/// The peer for the side-by-side, when it builds here: llama.cpp's `llama-bench` (Vulkan,
/// [`crate::llama_bench`]) compressed with xz, the libraries it links that a bare system may lack
/// (into lib/), and what writes the E2B layout GGUF on the device (benches/gguf_layout.py and the
/// tiny GGUF whose metadata it copies). Without it the bundle still runs Hearth's steps and says
/// the side-by-side was skipped. Returns the files added.
fn add_peer(dir: &Path, lib: &Path, root: &Path, libraries: &mut Vec<(String, PathBuf)>) -> Vec<PathBuf> {
    let built = match crate::llama_bench::build() {
        Ok(binary) => binary,
        Err(e) => {
            eprintln!("xtask: warning: no llama-bench in the bundle ({e}); its side-by-side step will say so");
            return Vec::new();
        }
    };
    let mut added = Vec::new();
    let peer = dir.join("llama-bench");
    let compressed = dir.join("llama-bench.xz");
    let _ = std::fs::remove_file(&compressed);
    let result = (|| -> Result<(), String> {
        copy(&built, &peer)?;
        process::run(process::command("strip", &[&peer.display().to_string()]))?;
        let ldd = process::output("ldd", &[&built.display().to_string()])
            .ok_or_else(|| format!("`ldd {}` failed", built.display()))?;
        for (name, path) in libraries_to_bundle(&ldd)? {
            if !libraries.iter().any(|(n, _)| *n == name) {
                copy(&path, &lib.join(&name))?;
                libraries.push((name, path));
            }
        }
        // 38 MB stripped, about 6 MB compressed: the device tool carries at most 64 MiB.
        process::run(process::command("xz", &["-9e", "-T0", &peer.display().to_string()]))?;
        for (from, to) in [
            ("benches/gguf_layout.py", "gguf_layout.py"),
            ("crates/model/fixtures/gemma4-gguf/model.gguf", "gemma4-fixture.gguf"),
        ] {
            copy(&root.join(from), &dir.join(to))?;
            added.push(dir.join(to));
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&peer);
    match result {
        Ok(()) => {
            added.push(compressed);
            added
        }
        Err(e) => {
            eprintln!("xtask: warning: no llama-bench in the bundle ({e})");
            Vec::new()
        }
    }
}

/// run.sh, naming the commit the binary was built from.
pub fn run_script(revision: &str) -> String {
    RUN_SCRIPT.replace("@REVISION@", revision)
}

fn readme_text(revision: &str, libraries: &[&str], glibc: Option<&str>) -> String {
    let glibc = glibc.map(|v| format!(" and glibc {v} or newer")).unwrap_or_default();
    format!(
        "Hearth bench bundle, from {revision} (made by `cargo xtask bench --bundle <dir>`).

Run, on any Linux x86-64 machine with a Vulkan driver{glibc} (no cargo, no network):

    ./run.sh [results.md]

It prints the machine, runs `hearth self-test`, the dispatch-cost probe (`hearth bench --dispatch`:
chains of 1,000 launches of an empty kernel, a 4-byte one and E2B's smallest and largest decode
GEMVs, GPU and host µs a launch), the kernel tables (`hearth bench --kernels-only`:
the decode GEMV against a copy, the 1500-token prefill product against Burn's f32 matmul),
the Gemma 4 E2B and E4B model benches (random 4-bit weights, prefill 64, decode 16) and an E2B
agent step (3000 cached + 1500 new tokens, 40 decoded), then speculative decoding on E2B and E4B
(a random assistant of the published shape: a verification's cost against a decoded token, the
draft steps', tokens/s), the vision tower per image (E2B's 16-bit tower, E4B's packed 8-bit one;
budgets 70, 280 and 1120) and the audio tower per second of sound (clips of 1, 5 and 30 s), each
under its own time limit, and writes
them all to one Markdown file: results.md, or results-<host>-<UTC time>.md here, within 450 s in
all (`HEARTH_BUNDLE_SECONDS`: each step's limit is cut to what is left, the last steps skipped
when none is), so a lent GPU's 15 minutes run it twice. It exits 0 when the probe or the kernel
step finished. `./run.sh --quick` (2 layers, a few tokens, a tiny agent step) checks
the bundle on a slow adapter; `./run.sh --help` lists the settings.

With llama-bench.xz present (llama.cpp's Vulkan llama-bench, `cargo xtask llama-bench`), it
writes, after the probe, a GGUF laid out like the published E2B file (gguf_layout.py, python3, 3.3 GB in a
temporary folder) and runs Hearth and llama-bench on it at depth 64 and 4,096, with Hearth's
per-kernel profile beside llama.cpp's per-operation timings, and prints Hearth ÷ llama.cpp.

Files: hearth.xz (the CLI, stripped and compressed; run.sh unpacks it), run.sh, lib/ ({}: put on LD_LIBRARY_PATH by run.sh; the GL
dispatch libraries let NVIDIA's Vulkan driver start in a container that lacks them);
llama-bench.xz, gguf_layout.py and gemma4-fixture.gguf when the peer was built.
",
        libraries.join(", ")
    )
}

/// The libraries an `ldd` listing resolves that are not part of a bare Debian/Ubuntu system.
/// A library `ldd` cannot find is an error: the binary would not start here either.
pub fn libraries_to_bundle(ldd: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let mut chosen = Vec::new();
    for line in ldd.lines() {
        let Some((name, rest)) = line.trim().split_once(" => ") else {
            continue; // the vDSO and the dynamic loader: no "=>"
        };
        let name = name.trim();
        if SYSTEM_LIBRARIES.iter().any(|system| name.starts_with(system)) {
            continue;
        }
        let path = rest.split(" (").next().unwrap_or("").trim();
        if path.is_empty() || path == "not found" {
            return Err(format!("the hearth binary links {name}, which ldd cannot find"));
        }
        chosen.push((name.to_string(), PathBuf::from(path)));
    }
    Ok(chosen)
}

/// The x86-64 libvulkan.so.1 in an `ldconfig -p` listing, else the first that exists in the
/// usual folders.
pub fn vulkan_loader(ldconfig: &str) -> Option<PathBuf> {
    let listed = ldconfig.lines().find_map(|line| {
        let (name, path) = line.trim().split_once(" => ")?;
        (name.starts_with(&format!("{VULKAN_LOADER} ")) && name.contains("x86-64")).then(|| PathBuf::from(path.trim()))
    });
    listed.or_else(|| {
        ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"]
            .iter()
            .map(|dir| Path::new(dir).join(VULKAN_LOADER))
            .find(|path| path.exists())
    })
}

/// A library of this machine's, by file name, in the usual x86-64 folders.
fn system_library(name: &str) -> Option<PathBuf> {
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.exists())
}

/// The newest `GLIBC_x.y` symbol version an ELF file names: the oldest glibc it runs on.
pub fn glibc_needed(elf: &[u8]) -> Option<(u32, u32)> {
    let tag = b"GLIBC_";
    let mut newest = None;
    for start in elf.windows(tag.len()).enumerate().filter(|(_, w)| *w == tag).map(|(i, _)| i + tag.len()) {
        let digits: String = elf[start..]
            .iter()
            .take(12)
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .map(|&b| b as char)
            .collect();
        let mut parts = digits.split('.').map(|p| p.parse::<u32>().ok());
        if let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) {
            newest = newest.max(Some((major, minor)));
        }
    }
    newest
}

/// `git <short commit>`, with a note when the working tree has uncommitted changes.
fn revision(root: &Path) -> String {
    let dir = root.display().to_string();
    let Some(commit) = process::output("git", &["-C", &dir, "rev-parse", "--short=12", "HEAD"]) else {
        return "an unknown commit".into();
    };
    // Only what the binary is built from: crates/ and the workspace's manifest and lock file.
    let paths = ["--", "crates", "Cargo.toml", "Cargo.lock"];
    let mut status = vec!["-C", &dir, "status", "--porcelain", "--untracked-files=no"];
    status.extend(paths);
    let dirty = process::output("git", &status).is_some_and(|s| !s.is_empty());
    format!("commit {commit}{}", if dirty { " with uncommitted changes to crates/" } else { "" })
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    // fs::copy follows symlinks: libvulkan.so.1 → libvulkan.so.1.3.x arrives as a file.
    std::fs::copy(from, to).map(drop).map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn set_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("making {} executable: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LDD: &str = "\tlinux-vdso.so.1 (0x00007ffd1a5f2000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f1c2a0c5000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f1c27020000)
\tlibvulkan.so.1 => /usr/lib/x86_64-linux-gnu/libvulkan.so.1 (0x00007f1c26f00000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1c26e3e000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f1c2a0f9000)
";

    #[test]
    fn only_libraries_a_bare_system_may_lack_are_bundled() {
        let chosen = libraries_to_bundle(LDD).unwrap();
        assert_eq!(
            chosen,
            vec![("libvulkan.so.1".to_string(), PathBuf::from("/usr/lib/x86_64-linux-gnu/libvulkan.so.1"))]
        );
        // hearth as built today: glibc and libgcc_s only (Vulkan is dlopened).
        let glibc_only: String = LDD.lines().filter(|l| !l.contains("vulkan")).map(|l| format!("{l}\n")).collect();
        assert_eq!(libraries_to_bundle(&glibc_only).unwrap(), vec![]);
    }

    #[test]
    fn a_library_ldd_cannot_find_is_an_error() {
        let listing = format!("{LDD}\tlibfoo.so.2 => not found\n");
        assert!(libraries_to_bundle(&listing).unwrap_err().contains("libfoo.so.2"));
    }

    #[test]
    fn the_x86_64_vulkan_loader_is_picked_from_ldconfig() {
        let ldconfig = "1234 libs found in cache `/etc/ld.so.cache'
\tlibvulkan_lvp.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libvulkan_lvp.so
\tlibvulkan.so.1 (libc6) => /usr/lib/i386-linux-gnu/libvulkan.so.1
\tlibvulkan.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libvulkan.so.1
";
        assert_eq!(vulkan_loader(ldconfig), Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libvulkan.so.1")));
    }

    #[test]
    fn the_newest_glibc_version_named_is_found() {
        let elf = b"\0GLIBC_2.2.5\0GLIBC_2.35\0GLIBC_PRIVATE\0GLIBC_2.34\0GLIBC_2.";
        assert_eq!(glibc_needed(elf), Some((2, 35)));
        assert_eq!(glibc_needed(b"no versions here"), None);
    }

    #[test]
    fn the_script_runs_every_step_under_its_own_time_limit() {
        let script = run_script("commit 0123456789ab");
        assert!(script.starts_with("#!/usr/bin/env bash\n"));
        assert!(script.contains("set -euo pipefail"));
        assert!(script.contains("commit 0123456789ab") && !script.contains("@REVISION@"));
        // clap takes `--agent` as three separate values and refuses them comma-separated.
        assert!(!script.contains("--agent 3000,"));
        for step in [
            "step \"Self-test\" text 60 self-test",
            "step \"Kernels\" md 90 bench --kernels-only \"${kernel_flags[@]}\"",
            "step \"E2B model\" md 120 bench --shape e2b \"${model_flags[@]}\"",
            "step \"E4B model\" md 150 bench --shape e4b \"${model_flags[@]}\"",
            "step \"E2B agent step\" md 120 bench --shape e2b \"${model_flags[@]}\" \"${agent_flags[@]}\"",
            "step \"GEMM tile $tile\" md 60 bench --kernels-only \"${kernel_flags[@]}\" --gemm-shapes q,kv,gate-up,down --gemm-tile \"$tile\"",
            "agent_flags=(--agent 3000 1500 40)",
            "model_flags=(--prefill 64 --decode 16 --gemm-tokens 0)",
            "model_flags=(--layers 2 --prefill 4 --decode 2 --gemm-tokens 0)",
            "kernel_flags=(--gemm-tokens 1500)",
            "kernel_flags=(--gemm-tokens 64)",
            "agent_flags=(--agent 16 8 2)",
            "--speculative 2,4,8",
            "step \"E2B vision tower\" md 240 bench --shape e2b \"${vision_flags[@]}\"",
            "step \"E4B vision tower, packed\" md 240 bench --shape e4b \"${vision_flags[@]}\" --vision-packed",
            "vision_flags=(--vision --vision-budgets 70,280,1120 --vision-runs 3)",
            "step \"E2B audio tower\" md 180 bench --shape e2b \"${audio_flags[@]}\"",
            "audio_flags=(--audio --audio-seconds 1,5,30 --audio-runs 3)",
            "timeout --kill-after=10 \"$limit\" \"$program\"",
            "program=\"$hearth\"",
            // The dispatch probe, then the side-by-side, right after the self-test: a lent GPU's
            // first minutes go to them.
            "step \"Self-test\" text 60 self-test\n# What one launch costs (issue 58): before anything else that launches.\nstep \"Dispatch probe\" md 60 bench \"${dispatch_flags[@]}\"\nside_by_side\n",
            "dispatch_flags=(--dispatch)",
            "dispatch_flags=(--dispatch --dispatch-launches 200 --dispatch-gemvs 10)",
            // The whole run within a lent GPU's half: steps cut to what is left, then skipped.
            "budget=\"${HEARTH_BUNDLE_SECONDS:-450}\"",
            "if [ \"$left\" -lt \"$limit\" ]; then limit=\"$left\"; fi",
            "program=\"$peer\" step \"llama.cpp\" text 300 -m \"$layout\" -ngl 99 -fa 1",
            "GGML_VK_PERF_LOGGER=1 program=\"$peer\" step",
            "--profile",
            "export LD_LIBRARY_PATH=\"$here/lib",
            "nvidia-smi -L",
        ] {
            assert!(script.contains(step), "run.sh lacks {step}");
        }
        // Only the kernel step and the probe keep their tables, and the exit status depends on them.
        assert!(script.contains(
            "if [ \"$kernels_ok\" = 1 ] && grep -q -e '^| E2B q_proj' -e '^| (a) empty kernel' \"$out\"; then"
        ));
    }

    #[test]
    fn the_script_is_valid_bash() {
        let path = std::env::temp_dir().join(format!("hearth-bundle-run-{}.sh", std::process::id()));
        std::fs::write(&path, run_script("commit test")).unwrap();
        let status = std::process::Command::new("bash").arg("-n").arg(&path).status();
        let _ = std::fs::remove_file(&path);
        match status {
            Ok(status) => assert!(status.success(), "bash -n rejects run.sh"),
            Err(e) => eprintln!("bash not found ({e}); syntax not checked"),
        }
    }

    #[test]
    fn the_readme_gives_the_command() {
        let text = readme_text("commit abc", &["libvulkan.so.1"], Some("2.35"));
        assert!(text.contains("./run.sh [results.md]"));
        assert!(text.contains("glibc 2.35 or newer"));
        assert!(text.contains("lib/ (libvulkan.so.1"));
    }
}
