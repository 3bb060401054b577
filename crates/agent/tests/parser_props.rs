//! Property tests for the Gemma 4 output parser.

use hearth_agent::parser::{ParseEvent, ParsedOutput, ParserOptions, StreamParser, parse_output};
use hearth_chat::{ChatTemplate, GEMMA4_E2B_TEMPLATE, Message, RenderRequest, ToolCall};
use proptest::prelude::*;
use serde_json::{Map, Value};

const MARKERS: &[&str] = &[
    "<|channel>",
    "<channel|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|tool_response>",
    "<turn|>",
    "<eos>",
    "<|turn>",
    "<|\"|>",
    "call:",
    "thought\n",
];

/// Text built from special-token pieces, syntax characters and arbitrary strings, so the
/// parser sees plenty of near-miss markers.
fn gemma_soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(MARKERS).prop_map(str::to_owned),
        prop::sample::select(vec![
            "{", "}", "[", "]", ",", ":", "\n", " ", "<", "|", "\"", "\\", "-", "1", "true", "x_1"
        ])
        .prop_map(str::to_owned),
        ".{0,6}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

fn chunked(raw: &str, cuts: &[usize], options: ParserOptions) -> ParsedOutput {
    let mut bounds: Vec<usize> =
        cuts.iter().map(|c| c % (raw.len() + 1)).filter(|&c| raw.is_char_boundary(c)).collect();
    bounds.push(0);
    bounds.push(raw.len());
    bounds.sort_unstable();
    bounds.dedup();
    let mut p = StreamParser::new(options);
    let mut events: Vec<ParseEvent> = Vec::new();
    for w in bounds.windows(2) {
        events.extend(p.push(&raw[w[0]..w[1]]));
    }
    events.extend(p.finish());
    ParsedOutput::collect(&events)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_arbitrary_text(raw in any::<String>(), thinking in any::<bool>()) {
        let _ = parse_output(&raw, ParserOptions { starts_in_thought: thinking });
        let _ = hearth_agent::parse_to_json(&raw, thinking);
    }

    #[test]
    fn chunking_never_changes_the_result(raw in gemma_soup(), cuts in prop::collection::vec(any::<usize>(), 0..8), thinking in any::<bool>()) {
        let options = ParserOptions { starts_in_thought: thinking };
        prop_assert_eq!(chunked(&raw, &cuts, options), parse_output(&raw, options));
    }

    #[test]
    fn visible_content_never_holds_call_markup(raw in gemma_soup()) {
        let out = parse_output(&raw, ParserOptions::default());
        prop_assert!(!out.content.contains("<|tool_call>"));
        prop_assert!(!out.content.contains("<tool_call|>"));
        prop_assert!(!out.content.contains("<|channel>"));
    }
}

/// Argument values the template can render and the model could write.
fn arg_value() -> impl Strategy<Value = Value> {
    let text = "[^<]{0,12}|[a-z <>\"\\\\{}\\[\\],:|]{0,12}"
        .prop_filter("no special tokens", |s: &String| !MARKERS.iter().any(|m| m.starts_with('<') && s.contains(m)));
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1.0e12f64..1.0e12).prop_map(Value::from),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn template_rendered_calls_parse_back(
        name in "[a-z_][a-z0-9_]{0,12}",
        args in prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,8}", arg_value(), 0..5),
    ) {
        let template = ChatTemplate::from_str(GEMMA4_E2B_TEMPLATE, "<bos>").unwrap();
        let arguments: Map<String, Value> = args.into_iter().collect();
        let messages = [
            Message::user("go"),
            Message::assistant_calls(None, vec![ToolCall::new("c1", name.clone(), arguments.clone())]),
        ];
        let prompt = template
            .render(&RenderRequest { messages: &messages, tools: &[], enable_thinking: false, preserve_thinking: false, add_generation_prompt: false })
            .unwrap();
        let model_part = &prompt[prompt.find("<|tool_call>").unwrap()..];
        let out = parse_output(model_part, ParserOptions::default());
        prop_assert!(out.malformed.is_empty(), "{:?} from {}", out.malformed, model_part);
        prop_assert_eq!(out.calls.len(), 1);
        prop_assert_eq!(&out.calls[0].name, &name);
        prop_assert_eq!(&out.calls[0].arguments, &arguments, "from {}", model_part);
        prop_assert!(out.calls[0].repairs.is_empty(), "{:?}", out.calls[0].repairs);
    }
}
