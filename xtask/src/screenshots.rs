//! `cargo xtask screenshots`: the README's pictures, taken by the end-to-end tests (never by hand).
//! Builds the extension, runs the suites that take them, and copies each into docs/ under the
//! name the README uses.

use std::path::Path;

use crate::{build, process, root};

/// A picture in docs/: the e2e suite that takes it and the name it saves in artifacts/e2e/.
struct Picture {
    suite: &'static str,
    artifact: &'static str,
}

/// Every picture the README and docs/threat-model.md show (docs/<artifact>).
const PICTURES: &[Picture] = &[
    Picture { suite: "tests/e2e/agent.test.mjs", artifact: "agent-confirmation-card.png" },
    Picture { suite: "tests/e2e/agent.test.mjs", artifact: "agent-react-form-done.png" },
    Picture { suite: "tests/e2e/agent.test.mjs", artifact: "agent-sources.png" },
    Picture { suite: "tests/e2e/consent-effects.test.mjs", artifact: "fence-card.png" },
    Picture { suite: "tests/e2e/channels.test.mjs", artifact: "fence-download.png" },
    Picture { suite: "tests/e2e/side-panel.test.mjs", artifact: "side-panel.png" },
    Picture { suite: "tests/e2e/vision.test.mjs", artifact: "agent-vision.png" },
    Picture { suite: "tests/e2e/voice.test.mjs", artifact: "voice-recording.png" },
    Picture { suite: "tests/e2e/page-tools.test.mjs", artifact: "page-tools-card.png" },
    Picture { suite: "tests/e2e/tabs.test.mjs", artifact: "tabs-chooser.png" },
    Picture { suite: "tests/e2e/tabs.test.mjs", artifact: "tabs-answer.png" },
];

pub fn screenshots() -> Result<(), String> {
    let root = root();
    build::build(&build::Options::test())?;
    let mut suites: Vec<&str> = PICTURES.iter().map(|p| p.suite).collect();
    suites.dedup();
    let artifacts = root.join("artifacts/e2e");
    for picture in PICTURES {
        // A picture left from an earlier run must not pass for a new one.
        let _ = std::fs::remove_file(artifacts.join(picture.artifact));
    }
    let mut args = vec!["--test", "--test-concurrency=1"];
    args.extend(&suites);
    let mut e2e = process::command("node", &args);
    e2e.current_dir(root.join("extension"));
    process::run(e2e)?;
    let docs = root.join("docs");
    for picture in PICTURES {
        copy(&artifacts.join(picture.artifact), &docs.join(picture.artifact))?;
        println!("xtask: docs/{} (from {})", picture.artifact, picture.suite);
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("{} was not saved by its test ({e}); see the e2e output above", from.display()))
}
