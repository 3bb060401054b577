//! `cargo xtask llama-bench`: llama.cpp's `llama-bench` with its Vulkan backend, built from the
//! llama.cpp that the pinned llama-cpp-python sdist vendors, into the cache (never committed,
//! never part of `cargo xtask test`). The bench bundle carries it, so a lent GPU runs Hearth and
//! llama.cpp on the same file and driver (benches/RESULTS.md, ../shared/reference/decode-speed.md
//! section 7).
//!
//! Needs Debian's `cmake glslc libvulkan-dev spirv-headers` and PyPI (for the sdist, once). About
//! 6 minutes on 2 cores. Debian 12's Vulkan headers (1.3.239) lack `VK_EXT_layer_settings`, which
//! llama.cpp's instance set-up names unconditionally: the build guards that block (see
//! [`guard_layer_settings`]) in the extracted copy, never in the project's sources.

use std::path::{Path, PathBuf};

use crate::{process, toolchain};

/// The sdist: llama-cpp-python 0.3.36 vendors a llama.cpp with Gemma 4.
const SDIST_VERSION: &str = "0.3.36";
const SDIST_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";

/// Debian packages the build needs, each with a file that shows it is there.
const PACKAGES: [(&str, &str); 4] = [
    ("cmake", "/usr/bin/cmake"),
    ("glslc", "/usr/bin/glslc"),
    ("libvulkan-dev", "/usr/include/vulkan/vulkan.hpp"),
    ("spirv-headers", "/usr/include/spirv/unified1/spirv.hpp"),
];

/// Where the build keeps its files: the sdist, its extracted source and the cmake build.
pub fn dir() -> PathBuf {
    toolchain::cache_dir().join("llama-cpp")
}

/// The built binary, where [`build`] puts it.
pub fn binary() -> PathBuf {
    dir().join("build-vulkan/bin/llama-bench")
}

/// Builds (or finds up to date) `llama-bench` and returns its path.
pub fn build() -> Result<PathBuf, String> {
    let missing: Vec<&str> =
        PACKAGES.iter().filter(|(_, file)| !Path::new(file).exists()).map(|(package, _)| *package).collect();
    if !missing.is_empty() {
        return Err(format!(
            "llama-bench needs {}: apt-get install cmake glslc libvulkan-dev spirv-headers",
            missing.join(", ")
        ));
    }
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let sdist = dir.join(format!("llama_cpp_python-{SDIST_VERSION}.tar.gz"));
    if !sdist.exists() {
        let mut pip = process::command("python3", &["-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]);
        pip.arg(format!("llama-cpp-python=={SDIST_VERSION}")).arg("-d").arg(&dir);
        process::run(pip)?;
    }
    let sum = process::output("sha256sum", &[&sdist.display().to_string()]).unwrap_or_default();
    if !sum.starts_with(SDIST_SHA256) {
        return Err(format!(
            "{} does not have the pinned SHA-256 {SDIST_SHA256} (got `{sum}`): delete it and run again",
            sdist.display()
        ));
    }
    let extracted = dir.join(format!("llama_cpp_python-{SDIST_VERSION}"));
    let source = extracted.join("vendor/llama.cpp");
    if !source.join("CMakeLists.txt").exists() {
        let mut tar = process::command("tar", &["xzf"]);
        tar.arg(&sdist).arg("-C").arg(&dir);
        process::run(tar)?;
    }
    guard_layer_settings(&source.join("ggml/src/ggml-vulkan/ggml-vulkan.cpp"))?;

    let build = dir.join("build-vulkan");
    let mut configure = process::command("cmake", &["-S"]);
    configure.arg(&source).arg("-B").arg(&build).args([
        "-DGGML_VULKAN=ON",
        "-DLLAMA_CURL=OFF",
        "-DGGML_NATIVE=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DCMAKE_BUILD_TYPE=Release",
    ]);
    process::run(configure)?;
    let jobs = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string();
    let mut make = process::command("cmake", &["--build"]);
    make.arg(&build).args(["--target", "llama-bench", "-j", &jobs]);
    process::run(make)?;
    let binary = binary();
    if !binary.exists() {
        return Err(format!("the build finished without {}", binary.display()));
    }
    eprintln!("xtask: llama-bench (Vulkan) at {}", binary.display());
    Ok(binary)
}

/// Where llama.cpp sets up its Vulkan instance with validation-layer settings, guards that with
/// `#ifdef VK_EXT_layer_settings` and creates the instance without them otherwise. Found by two
/// anchor lines; done once (a guarded file is left as it is); an unknown source is refused.
fn guard_layer_settings(file: &Path) -> Result<(), String> {
    const GUARD: &str = "#ifdef VK_EXT_layer_settings";
    const FIRST: &str = "VkBool32 enable_best_practice = layer_settings;";
    const LAST: &str = "&layer_setting_info);";
    const WITHOUT: &str =
        "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);";
    let text = std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let Some(first) = lines.iter().position(|l| l.trim() == FIRST) else {
        return Err(format!("{}: no `{FIRST}` line (another llama.cpp version?)", file.display()));
    };
    if first > 0 && lines[first - 1].trim() == GUARD {
        return Ok(());
    }
    let Some(last) = lines[first..].iter().position(|l| l.trim_end().ends_with(LAST)).map(|i| first + i) else {
        return Err(format!("{}: no instance creation after `{FIRST}`", file.display()));
    };
    let mut out: Vec<&str> = Vec::with_capacity(lines.len() + 4);
    out.extend(&lines[..first]);
    out.push(GUARD);
    out.extend(&lines[first..=last]);
    out.extend(["#else", WITHOUT, "#endif"]);
    out.extend(&lines[last + 1..]);
    let mut patched = out.join("\n");
    patched.push('\n');
    std::fs::write(file, patched).map_err(|e| format!("writing {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_settings_block_is_guarded_once() {
        let dir = std::env::temp_dir().join(format!("hearth-llama-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ggml-vulkan.cpp");
        let original = "a();\n    VkBool32 enable_best_practice = layer_settings;\n    settings();\n    \
                        vk::InstanceCreateInfo info(flags, &app_info, layers, extensions, &layer_setting_info);\nb();\n";
        std::fs::write(&file, original).unwrap();
        guard_layer_settings(&file).unwrap();
        let once = std::fs::read_to_string(&file).unwrap();
        assert!(once.starts_with("a();\n#ifdef VK_EXT_layer_settings\n    VkBool32"), "{once}");
        assert!(once.contains("&layer_setting_info);\n#else\n    vk::InstanceCreateInfo"), "{once}");
        assert!(once.ends_with("extensions);\n#endif\nb();\n"), "{once}");
        guard_layer_settings(&file).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), once, "a second run changes nothing");
        std::fs::write(&file, "nothing here\n").unwrap();
        assert!(guard_layer_settings(&file).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
