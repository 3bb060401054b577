//! Downloadable models: the manifest schema of `models/*.json` (documented in models/README.md)
//! and what the UI is told while a model is offered and installed.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// The files of the model a test build bundles (crates/model/fixtures/tiny-chat): `cargo xtask
/// build` copies them into the extension's `test-models/<name>/`, and the offscreen document reads
/// them from there.
pub const BUNDLED_MODEL_FILES: [&str; 5] =
    ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"];

/// The files of the test model's assistant (crates/model/fixtures/tiny-chat-assistant), which a
/// test build carries in `test-models/<name>/assistant/`: test builds draft with it.
pub const BUNDLED_ASSISTANT_FILES: [&str; 2] = ["config.json", "model.safetensors"];

/// One model that can be downloaded and checked: where it comes from and what its files must be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct ModelManifest {
    /// Stable id, also the manifest's file name: `gemma-4-e2b-it-4bit`.
    pub id: String,
    /// A name for people: "Gemma 4 E2B (4-bit)".
    pub name: String,
    /// The Hugging Face repository, `owner/name`.
    pub repo: String,
    /// The pinned commit of `repo` (files are fetched at this revision, never at `main`); `None`
    /// until someone pins the manifest with models/pin.mjs.
    pub revision: Option<String>,
    pub format: ModelFormat,
    pub files: Vec<ManifestFile>,
    /// Earlier uploads of the same weights (a GGUF file re-uploaded with a corrected vocabulary,
    /// say) that Hearth also accepts when a user brings the file: the same model, no download.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(optional, as = "Option<Vec<KnownUpload>>")]
    pub known_uploads: Vec<KnownUpload>,
    /// The model's vision tower where it is a file of its own (llama.cpp's projector, `mmproj`,
    /// which also holds the audio tower), at the same revision: an optional download, which a
    /// text-only install goes without (folder formats carry the tower in their weights).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(optional, as = "Option<Vec<ManifestFile>>")]
    pub vision_files: Vec<ManifestFile>,
    /// Gemma 4's assistant for this model (speculative decoding: faster replies, the same greedy
    /// answer), an optional download from its own repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub drafter: Option<DrafterManifest>,
}

/// The assistant (drafter) published beside a Gemma 4 model, pinned like the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct DrafterManifest {
    /// The Hugging Face repository, `owner/name` (`google/gemma-4-E2B-it-assistant`).
    pub repo: String,
    /// The pinned commit.
    pub revision: String,
    /// `model.safetensors` (bf16), pinned by size and SHA-256.
    pub weights: ManifestFile,
    /// The assistant's `config.json` as published, written out here (its values were seen whole,
    /// its bytes' size not); every weight's shape is checked against it when it loads.
    #[ts(type = "Record<string, unknown>")]
    pub config: serde_json::Value,
}

/// A file once published as this model's weights, recognised by its size and SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct KnownUpload {
    /// The commit of the manifest's repository that held it.
    pub revision: String,
    /// The file's path at that commit.
    pub path: String,
    #[ts(type = "number")]
    pub size: u64,
    pub sha256: String,
    /// Where people have it, in words ("Ollama's gemma4:e2b blob").
    pub note: String,
}

/// How the weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
pub enum ModelFormat {
    /// A Hugging Face folder with f32/f16/bf16 safetensors.
    #[serde(rename = "safetensors")]
    Safetensors,
    /// MLX's affine quantization (codes, scales and biases per group; `quantization` in
    /// config.json) in safetensors: the 4- and 8-bit modules stay packed on the GPU.
    #[serde(rename = "mlx-4bit")]
    Mlx4Bit,
    /// One GGUF file (llama.cpp's format): weights in ggml blocks, and in its metadata the
    /// config, the tokenizer and the chat template.
    #[serde(rename = "gguf")]
    Gguf,
}

/// One file of a model; `size` and `sha256` are `None` until the manifest is pinned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// Path inside the repository, with `/`.
    pub path: String,
    #[ts(type = "number | null")]
    pub size: Option<u64>,
    /// Lowercase hex SHA-256 of the whole file.
    pub sha256: Option<String>,
}

/// A model the user can install, as the overlay shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ModelOffer {
    /// The manifest id.
    pub id: String,
    pub name: String,
    /// Everything to download, in bytes.
    #[ts(type = "number")]
    pub total_bytes: u64,
    /// Bytes already stored from an interrupted download (they are not downloaded again).
    #[ts(type = "number")]
    pub stored_bytes: u64,
}

/// How far an installation is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ModelProgress {
    pub model_id: String,
    /// The file being downloaded or checked.
    pub file: String,
    /// Bytes stored so far, over all files (including those kept from an earlier attempt).
    #[ts(type = "number")]
    pub bytes: u64,
    #[ts(type = "number")]
    pub total: u64,
    /// Recent download speed.
    pub bytes_per_s: f64,
    /// Seconds left at that speed; `None` until there is a speed to go by.
    pub eta_s: Option<f64>,
}

/// What the engine found in a GGUF file the user chose ("Use a model file you already have";
/// crates/offscreen `inspectGguf`, from the file's header only): a model it can run, or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum GgufInspection {
    /// A Gemma 3 or Gemma 4 the engine's loader accepts: config, tokenizer, chat template, every
    /// tensor type and the tensors each layer needs are there.
    Loadable { model: GgufSummary },
    /// The file does not start with the GGUF magic (a picture, a text file, a safetensors file).
    NotGguf,
    /// A GGUF of another architecture (`general.architecture`: `llama`, `qwen2`, …; `(none)`).
    UnsupportedArchitecture { architecture: String },
    /// A Gemma GGUF the engine cannot run: a damaged or truncated header, inconsistent metadata,
    /// a tensor type it cannot read, a missing tensor (in English, from the parsers).
    Invalid { reason: String },
}

/// A loadable GGUF file, as the options page describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct GgufSummary {
    /// `general.architecture`: `gemma3` or `gemma4`.
    pub architecture: String,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    pub layers: u32,
    pub hidden_size: u32,
    pub vocab_size: u32,
    /// `<arch>.context_length`, when the file has one.
    pub context_length: Option<u32>,
    /// The ggml type holding most of the weights' bytes (`Q4_0`, `Q4_K`, `F16`, …).
    pub quantization: String,
    /// Weights in all (elements of every tensor).
    #[ts(type = "number")]
    pub parameters: u64,
    /// The chat template the engine uses when the file has none (Gemma 3's standard turns);
    /// `None` when the file's own `tokenizer.chat_template` is used.
    pub chat_template: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn manifests() -> Vec<(PathBuf, ModelManifest)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let mut found = vec![];
        for dir in [root.clone(), root.join("test")] {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "json") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let manifest = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("{} does not follow the schema: {e}", path.display()));
                    found.push((path, manifest));
                }
            }
        }
        found
    }

    /// Every manifest follows the schema of models/README.md.
    #[test]
    fn manifests_follow_the_schema() {
        let all = manifests();
        assert!(all.len() >= 3, "models/ should hold the Gemma manifests and models/test the test model");
        for (path, m) in &all {
            let where_ = path.display();
            assert_eq!(path.file_stem().unwrap().to_str(), Some(m.id.as_str()), "{where_}: id ≠ file name");
            assert!(m.repo.split('/').count() == 2, "{where_}: repo must be owner/name");
            if let Some(revision) = &m.revision {
                assert!(is_hex(revision, 40), "{where_}: revision must be a 40-hex commit");
            }
            assert!(!m.files.is_empty(), "{where_}: no files");
            if let Some(drafter) = &m.drafter {
                assert!(drafter.repo.split('/').count() == 2, "{where_}: the drafter's repo must be owner/name");
                assert!(is_hex(&drafter.revision, 40), "{where_}: the drafter's revision must be a 40-hex commit");
                let w = &drafter.weights;
                assert!(w.size.is_some() && w.sha256.is_some(), "{where_}: the drafter's weights are pinned");
                assert_eq!(drafter.config["model_type"], "gemma4_assistant", "{where_}: the drafter's config");
            }
            for f in m.files.iter().chain(&m.vision_files).chain(m.drafter.as_ref().map(|d| &d.weights)) {
                assert!(
                    !f.path.is_empty() && !f.path.starts_with('/') && !f.path.split('/').any(|p| p == ".." || p == "."),
                    "{where_}: bad path {}",
                    f.path
                );
                if let Some(sha) = &f.sha256 {
                    assert!(is_hex(sha, 64), "{where_}: {} sha256 must be 64 lowercase hex", f.path);
                }
            }
        }
        let tiny = all.iter().find(|(_, m)| m.id == "tiny-chat").expect("models/test/tiny-chat.json");
        let pinned = tiny.1.revision.is_some() && tiny.1.files.iter().all(|f| f.size.is_some() && f.sha256.is_some());
        assert!(pinned, "the test model's manifest is pinned");
        assert_eq!(tiny.1.format, ModelFormat::Safetensors);
    }

    fn is_hex(s: &str, len: usize) -> bool {
        s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}
