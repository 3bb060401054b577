//! Byte-exact comparison with Python's jinja2 on Google's Gemma 4 template.
//!
//! The expected strings come from `fixtures/gen_fixtures.py`. Regenerate them with
//! `pip install jinja2==3.1.6 && python3 crates/chat/fixtures/gen_fixtures.py` (from the repo root).

use hearth_chat::{ChatTemplate, GEMMA4_E2B_TEMPLATE, Message, RenderRequest, Tool};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    name: String,
    messages: Vec<Message>,
    tools: Vec<Tool>,
    enable_thinking: bool,
    add_generation_prompt: bool,
    expected: String,
}

fn cases() -> Vec<Case> {
    serde_json::from_str(include_str!("../fixtures/conversations.json")).expect("fixture parses")
}

#[test]
fn renders_like_python_jinja2() {
    let template = ChatTemplate::from_str(GEMMA4_E2B_TEMPLATE, "<bos>").expect("template compiles");
    let cases = cases();
    assert!(cases.len() >= 12, "expected a dozen conversations, got {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let got = template
            .render(&RenderRequest {
                messages: &case.messages,
                tools: &case.tools,
                enable_thinking: case.enable_thinking,
                preserve_thinking: false,
                add_generation_prompt: case.add_generation_prompt,
            })
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if got != case.expected {
            let at = got
                .bytes()
                .zip(case.expected.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(case.expected.len()));
            failures.push(format!(
                "{}: differs at byte {at}\n  got:      {:?}\n  expected: {:?}",
                case.name,
                &got[at.saturating_sub(40)..(at + 40).min(got.len())],
                &case.expected[at.saturating_sub(40)..(at + 40).min(case.expected.len())]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn messages_round_trip_through_serde() {
    for case in cases() {
        let json = serde_json::to_value(&case.messages).unwrap();
        let back: Vec<Message> = serde_json::from_value(json).unwrap();
        assert_eq!(back, case.messages, "{}", case.name);
    }
}
