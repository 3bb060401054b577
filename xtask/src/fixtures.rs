//! `cargo xtask fixtures [NAME…]`: regenerates the test fixtures from the scripts kept beside them,
//! in a Python environment Hearth makes itself (`$HEARTH_CACHE/pyenv`) with the pinned versions
//! each script needs. Every script is seeded, so a run on a clean checkout leaves `git status`
//! clean: the command ends by listing what changed.

use std::path::Path;

use crate::{process, root, toolchain};

/// One generator: its name on the command line, its script, and the packages it needs.
struct Generator {
    name: &'static str,
    script: &'static str,
    packages: &'static [&'static str],
    /// What it writes, for the report.
    writes: &'static str,
}

const TORCH: &[&str] =
    &["transformers==5.23.0", "torch==2.15.0", "safetensors==0.8.0", "numpy==2.4.6", "tokenizers==0.23.3"];

/// The towers' generators: torch, the image processor's Pillow, MLX for the MLX layout (and
/// llama.cpp's converter, which they fetch themselves).
const TOWERS: &[&str] = &[
    "transformers==5.23.0",
    "torch==2.15.0",
    "safetensors==0.8.0",
    "pillow==13.0.0",
    "numpy==2.4.6",
    "mlx[cpu]==0.32.4",
];

/// In the order they must run: the model fixtures read gen_parity.py's helpers, the tiny chat
/// model reads the chat crate's copy of Google's template.
const GENERATORS: &[Generator] = &[
    Generator {
        name: "chat",
        script: "crates/chat/fixtures/gen_fixtures.py",
        packages: &["jinja2==3.1.6"],
        writes: "crates/chat/fixtures",
    },
    Generator {
        name: "weights-gguf",
        script: "crates/weights/fixtures/gen_gguf.py",
        packages: &["gguf==0.19.0", "numpy==2.4.6"],
        writes: "crates/weights/fixtures",
    },
    Generator {
        name: "weights-mlx",
        script: "crates/weights/fixtures/gen_mlx.py",
        packages: &["mlx[cpu]==0.32.4", "numpy==2.4.6"],
        writes: "crates/weights/fixtures",
    },
    Generator {
        name: "parity",
        script: "crates/model/fixtures/gen_parity.py",
        packages: TORCH,
        writes: "crates/model/fixtures",
    },
    Generator {
        name: "tiny-chat",
        script: "crates/model/fixtures/gen_tiny_chat.py",
        packages: TORCH,
        writes: "crates/model/fixtures/tiny-chat",
    },
    Generator {
        name: "gguf-tiny",
        script: "crates/model/fixtures/gen_gguf_tiny.py",
        packages: &["transformers==5.23.0", "torch==2.15.0", "gguf==0.19.0", "numpy==2.4.6"],
        writes: "crates/model/fixtures/gemma3-gguf",
    },
    Generator {
        name: "gguf-gemma4",
        script: "crates/model/fixtures/gen_gguf_gemma4.py",
        packages: &["transformers==5.23.0", "torch==2.15.0", "gguf==0.19.0", "numpy==2.4.6"],
        writes: "crates/model/fixtures/gemma4-gguf",
    },
    Generator {
        name: "mlx-4bit",
        script: "crates/model/fixtures/gen_mlx_4bit.py",
        packages: &["transformers==5.23.0", "torch==2.15.0", "mlx[cpu]==0.32.4", "numpy==2.4.6"],
        writes: "crates/model/fixtures/gemma4-mlx-4bit",
    },
    Generator {
        name: "vision-preprocess",
        script: "crates/model/fixtures/gen_vision_preprocess.py",
        // The image processor's Pillow backend: no torch needed.
        packages: &["transformers==5.23.0", "pillow==13.0.0", "numpy==2.4.6"],
        writes: "crates/model/fixtures/vision-preprocess",
    },
    Generator {
        name: "gemma4-vision",
        script: "crates/model/fixtures/gen_vision_parity.py",
        packages: TOWERS,
        // Also gemma4-vision-mlx, beside it.
        writes: "crates/model/fixtures/gemma4-vision",
    },
    Generator {
        name: "gemma4-drafter",
        // Drafts for parity's gemma4-text, read from its files.
        script: "crates/model/fixtures/gen_drafter_parity.py",
        packages: TORCH,
        writes: "crates/model/fixtures/gemma4-drafter",
    },
    Generator {
        name: "gemma4-audio",
        // The text decoder is gen_parity.py's gemma4-text (imported from it).
        script: "crates/model/fixtures/gen_audio_parity.py",
        // With gen_vision_parity.py's tower and converter (both towers in one projector file),
        // and gemma4-audio-mlx beside it.
        packages: TOWERS,
        writes: "crates/model/fixtures/gemma4-audio",
    },
    Generator {
        name: "audio-features",
        script: "crates/model/fixtures/gen_audio_features.py",
        packages: &["transformers==5.23.0", "numpy==2.4.6"],
        writes: "crates/model/fixtures/audio-features",
    },
    Generator {
        name: "tiny-chat-assistant",
        // An assistant for tiny-chat, read from its config (test builds carry it).
        script: "crates/model/fixtures/gen_tiny_chat_assistant.py",
        packages: TORCH,
        writes: "crates/model/fixtures/tiny-chat-assistant",
    },
];

pub fn fixtures(names: &[String]) -> Result<(), String> {
    let unknown: Vec<&String> = names.iter().filter(|n| !GENERATORS.iter().any(|g| g.name == n.as_str())).collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = GENERATORS.iter().map(|g| g.name).collect();
        return Err(format!("no fixture generator {unknown:?}; there are: {}", known.join(", ")));
    }
    let chosen: Vec<&Generator> =
        GENERATORS.iter().filter(|g| names.is_empty() || names.iter().any(|n| n == g.name)).collect();
    let env = toolchain::cache_dir().join("pyenv");
    let python = env.join("bin/python");
    if !python.is_file() {
        process::run(process::command("python3", &["-m", "venv", &env.display().to_string()]))?;
    }
    let mut packages: Vec<&str> = chosen.iter().flat_map(|g| g.packages.iter().copied()).collect();
    packages.sort_unstable();
    packages.dedup();
    let mut install = process::command(&python.display().to_string(), &["-m", "pip", "install", "--quiet"]);
    install.args(&packages);
    process::run(install)?;
    let root = root();
    for generator in &chosen {
        let mut run = process::command(&python.display().to_string(), &[generator.script]);
        // Nothing is downloaded: the tiny models are built from seeded random weights.
        run.current_dir(&root).env("HF_HUB_OFFLINE", "1");
        process::run(run)?;
        eprintln!("xtask: fixtures {} → {}", generator.name, generator.writes);
    }
    report_changes(&root, &chosen)
}

/// What the run changed, as git sees it: nothing, on a clean checkout.
fn report_changes(root: &Path, chosen: &[&Generator]) -> Result<(), String> {
    let mut args = vec!["status", "--short", "--"];
    args.extend(chosen.iter().map(|g| g.writes));
    let mut status = process::command("git", &args);
    status.current_dir(root);
    let out = status.output().map_err(|e| format!("could not run git status: {e}"))?;
    let changed = String::from_utf8_lossy(&out.stdout);
    if changed.trim().is_empty() {
        eprintln!("xtask: fixtures unchanged (the scripts are seeded: same files as committed)");
    } else {
        eprintln!("xtask: fixtures changed:\n{changed}");
    }
    Ok(())
}
