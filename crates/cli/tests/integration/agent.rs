//! `hearth agent` on a saved page: the extension's agent loop, policy and prompts, with the
//! scripted model and with the real engine (the tiny model on the CPU). The page's state after
//! the task is what the test reads, as a user would look at the form.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/saved-page").join(name).display().to_string()
}

fn tiny_model() -> String {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat");
    dir.display().to_string()
}

/// Runs `hearth agent` on the order page; returns stdout.
fn agent(extra: &[&str]) -> String {
    let page = fixture("order.html");
    let model = tiny_model();
    let mut args = vec!["agent", "--model", &model, "--page", &page];
    args.extend(extra);
    args.push("Order a large print for Ada Lovelace, gift wrapped.");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth")).args(&args).output().expect("hearth runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn a_scripted_task_fills_the_saved_form_and_the_policy_holds_the_order() {
    let script = fixture("order-script.json");
    let denied = agent(&["--script", &script]);
    for line in [
        r#"[1] input "Full name": "Ada Lovelace""#,
        r#"[2] select "Size": "l""#,
        r#"[3] input "Gift wrap": checked"#,
        "denied (pass --approve to allow)",
        "done: The form is filled in",
    ] {
        assert!(denied.contains(line), "{line:?} missing from:\n{denied}");
    }
    assert!(!denied.contains(r#"clicked [4] button "Place order""#), "{denied}");

    let approved = agent(&["--script", &script, "--approve"]);
    assert!(approved.contains(r#"clicked [4] button "Place order""#), "{approved}");
}

#[test]
fn the_real_engine_runs_the_task_to_a_state_the_user_can_read() {
    // Random weights write anything; the loop must end cleanly and report the page.
    let out = agent(&["--cpu", "--max-iterations", "2", "--max-new-tokens", "16"]);
    assert!(out.contains("model: ") && out.contains("step: "), "{out}");
    assert!(out.contains("page state:") && out.contains(r#"[1] input "Full name": """#), "{out}");
}
