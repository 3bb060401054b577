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
fn a_form_the_page_declares_as_a_tool_is_called_by_name_and_asks_first() {
    let run = |extra: &[&str]| {
        let (page, script, model) = (fixture("shop.html"), fixture("shop-script.json"), tiny_model());
        let mut args =
            vec!["agent", "--model", &model, "--page", &page, "--url", "http://127.0.0.1/shop/", "--script", &script];
        args.extend(extra);
        args.push("Find me a desk lamp.");
        let out = Command::new(env!("CARGO_BIN_EXE_hearth")).args(&args).output().expect("hearth runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    // Not marked read-only: the policy asks, and a denial leaves the form as it was.
    let denied = run(&[]);
    assert!(denied.contains("denied (pass --approve to allow)"), "{denied}");
    assert!(denied.contains(r#"[1] input "Query": """#) && denied.contains("actions: none"), "{denied}");
    let approved = run(&["--approve"]);
    assert!(approved.contains(r#"[1] input "Query": "desk lamp""#), "{approved}");
    assert!(
        approved.contains(
            r#"submitted the form `search_products` (GET http://127.0.0.1/shop/search.html) with q="desk lamp""#
        ),
        "{approved}"
    );
}

#[test]
fn the_real_engine_runs_the_task_to_a_state_the_user_can_read() {
    // Random weights write anything; the loop must end cleanly and report the page.
    let out = agent(&["--cpu", "--max-iterations", "2", "--max-new-tokens", "16"]);
    assert!(out.contains("model: ") && out.contains("step: "), "{out}");
    assert!(out.contains("page state:") && out.contains(r#"[1] input "Full name": """#), "{out}");
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures")
}

/// A 4×3 PNG, written to the test's own temporary folder.
fn picture(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("hearth-agent-{}-{name}.png", std::process::id()));
    let file = std::fs::File::create(&path).expect("a temporary file");
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), 4, 3);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().expect("a PNG header");
    writer.write_image_data(&[200; 4 * 3 * 3]).expect("the pixels");
    path
}

#[test]
fn the_assistant_drafts_the_steps_and_changes_nothing_they_do() {
    // Greedy steps: with the model's assistant drafting them, the task is the same task.
    let assistant = fixtures().join("tiny-chat-assistant");
    let run = |extra: &[&str]| {
        let mut args = vec!["--cpu", "--max-iterations", "2", "--max-new-tokens", "16"];
        args.extend(extra);
        agent(&args)
    };
    let plain = run(&[]);
    let drafted = run(&["--drafter", assistant.to_str().expect("utf-8")]);
    assert!(drafted.contains(&format!("drafter: {}", assistant.display())), "{drafted}");
    let steps = |out: &str| {
        out.lines().filter(|l| !l.starts_with("model:") && !l.starts_with("drafter:")).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(steps(&drafted), steps(&plain));

    // An assistant made for another model is refused by name, before any step.
    let other = fixtures().join("gemma4-drafter/tied");
    let page = fixture("order.html");
    let model = tiny_model();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "agent",
            "--cpu",
            "--model",
            &model,
            "--page",
            &page,
            "--drafter",
            other.to_str().expect("utf-8"),
            "Order.",
        ])
        .output()
        .expect("hearth runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("the drafter in"), "{stderr}");
}

#[test]
fn with_a_screenshot_the_agent_sees_the_page_and_without_one_it_cannot() {
    let shot = picture("page");
    let script = std::env::temp_dir().join(format!("hearth-agent-{}-look.json", std::process::id()));
    let calls = [
        "<|tool_call>call:screenshot{}<tool_call|>",
        "<|tool_call>call:done{result:<|\"|>Looked.<|\"|>,success:true}<tool_call|>",
    ];
    std::fs::write(&script, serde_json::to_string(&calls).expect("json")).expect("the script");
    let script = script.to_str().expect("utf-8");
    let seen = agent(&["--script", script, "--screenshot", shot.to_str().expect("utf-8")]);
    assert!(seen.contains("call: screenshot") && seen.contains("Screenshot of the visible page."), "{seen}");
    assert!(seen.contains("actions: took a screenshot"), "{seen}");
    // No picture: the tool is not offered, and the call fails.
    let blind = agent(&["--script", script]);
    assert!(!blind.contains("Screenshot of the visible page."), "{blind}");
    assert!(blind.contains("failed:"), "{blind}");

    // The real engine: the model's own vision tower is loaded for the picture, and the steps run.
    let real = agent(&[
        "--cpu",
        "--max-iterations",
        "1",
        "--max-new-tokens",
        "8",
        "--screenshot",
        shot.to_str().expect("utf-8"),
    ]);
    assert!(real.contains("vision: the model sees the page's screenshot"), "{real}");
    assert!(real.contains("step: "), "{real}");
}

/// `--voice`: the request spoken; the real engine's tiny model hears it through its audio tower
/// and runs the step; a model that cannot hear is refused before any step.
#[test]
fn a_spoken_request_reaches_the_model_that_hears() {
    let clip = crate::cli::write_wav("agent-voice", 16_000, 0.5);
    let clip = clip.to_str().expect("utf-8");
    let heard = agent(&["--cpu", "--max-iterations", "1", "--max-new-tokens", "8", "--voice", clip]);
    assert!(heard.contains("voice: 0.50 s of sound, heard by the model's audio tower"), "{heard}");
    assert!(heard.contains("step: "), "{heard}");

    let deaf = fixtures().join("gemma4-gguf/model.gguf");
    let page = fixture("order.html");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["agent", "--cpu", "--model", deaf.to_str().expect("utf-8"), "--page", &page, "--voice", clip, ""])
        .output()
        .expect("hearth runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("has no audio tower"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_file(clip);
}
