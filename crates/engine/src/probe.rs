//! The tests' probe of constrained tool calls ([`crate::Engine::probe`]; the browser's test
//! builds export it, issue 17). The loaded model
//! is given a prompt rendered by its own chat template (optionally declaring the agent's tools)
//! that ends with `<|tool_call>`; the engine's task path (`hearth_engine::generation::generate_step`, with the call constraint of the
//! agent's tools) decodes the call, and the agent's own parser and validator judge it. The same
//! prompt and seed decoded without the constraint show what the model writes on its own.
//!
//! The end-to-end suite runs it on the tiny random-weight model
//! (extension/tests/e2e/constrained-calls.test.mjs), as crates/cli/tests/integration/constrained_calls.rs
//! does natively.

use std::ops::ControlFlow;

use futures::StreamExt;
use hearth_agent::parser::{ParseEvent, ParserOptions, StreamParser};
use hearth_agent::tools::ArgumentError;
use hearth_agent::{CancelToken, GenerationRequest, ModelChunk, STEP_ENDS_AFTER, builtin_tools, validate_arguments};
use hearth_chat::{Message, RenderRequest};
use hearth_model::SamplingOptions;
use hearth_model::generate;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::decoding::Decoding;
use crate::generation::{call_constraint, generate_step, keep_call_constraint};
use crate::shared::SharedModel;

/// The KV-cache conversation of the probe (the prompt is the same for every run: it is prefilled
/// once and reused).
const PROBE_CONVERSATION: u64 = u64::MAX;

/// The marker the prompt ends with (the model is made to act) and the one that closes a call.
use hearth_chat::syntax::{CALL_CLOSE, CALL_OPEN};

/// What the probe tells the test.
#[derive(Serialize)]
pub struct Probe {
    seed: u32,
    /// The agent's tools, as the grammar and the validator know them (`name`, `parameters`).
    tools: Vec<Value>,
    prompt_tokens: usize,
    constrained: Run,
    /// The same prompt and seed without the constraint (absent when `free_tokens` is 0).
    free: Option<Run>,
}

/// One decoding.
#[derive(Serialize)]
struct Run {
    /// `<|tool_call>` and what the model wrote after it.
    text: String,
    /// Whether it ended with `<tool_call|>` (otherwise a stop token or the limit ended it).
    closed: bool,
    /// Constrained runs: whether the constraint still held a call open at the end (a call the
    /// token limit cut must still be inside the grammar).
    #[serde(skip_serializing_if = "Option::is_none")]
    in_call: Option<bool>,
    tokens: usize,
    /// Prompt tokens computed for this run (the rest came from the conversation's cache).
    prefilled_tokens: usize,
    prefill_ms: f64,
    decode_ms: f64,
    /// The agent's parser and validator on `text`.
    verdict: Verdict,
}

/// How the agent reads a run's text.
#[derive(Serialize)]
struct Verdict {
    /// Exactly one call, read without repairs, to one of the tools, with arguments that pass
    /// `validate_arguments` (or fail only the tools' own cross-argument rules, which no grammar
    /// of single arguments can hold: "give exactly one of ...").
    valid: bool,
    /// The call as the parser read it, if it read one.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Map<String, Value>>,
    /// Why it is not valid, or the cross-argument rule it breaks.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

/// Renders a user message (with the agent's tools declared when `render_tools`) with the model's
/// template, opens a call, and decodes it with seed `seed`: at most `max_tokens` tokens
/// constrained, then `free_tokens` unconstrained (none when 0). Sampling is hot (temperature 4,
/// no top-k or top-p) so that the random model picks different tools and arguments from seed to
/// seed. The constraint holds calls to all of the agent's tools either way (the grammar is the
/// agent's, not the prompt's); declaring them makes the tiny model's prompt 3,462 tokens instead
/// of 36, which SwiftShader prefills in about 100 s (once: later runs reuse the cache).
pub(crate) async fn run(
    model: &SharedModel,
    seed: u32,
    max_tokens: u32,
    free_tokens: u32,
    render_tools: bool,
) -> Result<Probe, String> {
    let tools = builtin_tools();
    let chat_tools: Vec<_> = tools.iter().map(|t| t.to_chat_tool()).collect();
    let messages = [Message::user("Type Ada into the name field, then submit.")];
    let request = RenderRequest {
        messages: &messages,
        tools: if render_tools { &chat_tools } else { &[] },
        enable_thinking: false,
        preserve_thinking: false,
        add_generation_prompt: true,
    };
    let prompt = model.template.render(&request).map_err(|e| e.to_string())? + CALL_OPEN;
    let prompt_tokens = model.tokenizer.encode(&prompt).map_err(|e| e.to_string())?.len();
    let sampling = SamplingOptions { temperature: 4.0, top_k: 0, top_p: 1.0, seed: u64::from(seed) };

    let constrained = constrained(model, &prompt, sampling, max_tokens as usize).await?;
    let free = if free_tokens == 0 { None } else { Some(free(model, &prompt, sampling, free_tokens as usize).await?) };
    let tools = tools.iter().map(|t| serde_json::json!({"name": t.name, "parameters": t.parameters})).collect();
    Ok(Probe { seed, tools, prompt_tokens, constrained, free })
}

/// Decodes as an agent step does: `hearth_engine::generation::generate_step`, which holds calls to the agent's tools
/// and stops right after `<tool_call|>`.
async fn constrained(
    model: &SharedModel,
    prompt: &str,
    sampling: SamplingOptions,
    max_tokens: usize,
) -> Result<Run, String> {
    let request = GenerationRequest {
        page_tools: Vec::new(),
        prompt: prompt.to_owned(),
        max_new_tokens: max_tokens,
        stop_after: STEP_ENDS_AFTER.iter().map(|p| (*p).to_owned()).collect(),
        cancel: CancelToken::new(),
        tools: None,
        images: Vec::new(),
        clips: Vec::new(),
    };
    // No images in a probe: the budget is not read.
    let mut chunks = generate_step(model.clone(), PROBE_CONVERSATION, sampling, 280, false, request);
    let mut text = CALL_OPEN.to_owned();
    let mut stats = None;
    while let Some(chunk) = chunks.next().await {
        match chunk.map_err(|e| e.0)? {
            ModelChunk::Text(piece) => text.push_str(&piece),
            ModelChunk::Finished(s) => stats = Some(s),
        }
    }
    let stats = stats.ok_or("the generation ended without its numbers")?;
    // The constraint burn_generate used, kept for the next generation: where it ended.
    let in_call = call_constraint(&model.tokenizer, None).map(|calls| {
        let open = calls.in_call();
        keep_call_constraint(&model.tokenizer, None, calls);
        open
    });
    if in_call.is_none() {
        return Err("the model's tokenizer has no Gemma 4 call tokens: nothing was constrained".into());
    }
    Ok(Run {
        closed: text.ends_with(CALL_CLOSE),
        verdict: verdict(&text),
        text,
        in_call,
        tokens: stats.completion_tokens,
        prefilled_tokens: stats.prompt_tokens - stats.cached_prompt_tokens,
        prefill_ms: stats.prefill_ms,
        decode_ms: stats.decode_ms,
    })
}

/// Decodes the same prompt with nothing constraining it, stopping after `<tool_call|>` too.
async fn free(model: &SharedModel, prompt: &str, sampling: SamplingOptions, max_tokens: usize) -> Result<Run, String> {
    let close = model.tokenizer.token_id(CALL_CLOSE);
    let ids = model.tokenizer.encode(prompt).map_err(|e| e.to_string())?;
    let mut session = model.session.lock().await;
    session.use_conversation(PROBE_CONVERSATION);
    let mut decoding = Decoding::new(sampling);
    let (sampler, options) = decoding.options(max_tokens, &model.stop_tokens, None);
    let on_token = |id, _: &str| if Some(id) == close { ControlFlow::Break(()) } else { ControlFlow::Continue(()) };
    let generation =
        generate::generate(&mut session, sampler, &model.tokenizer, &ids, options, model.clock_ms, on_token)
            .await
            .map_err(|e| e.to_string())?;
    let text = format!("{CALL_OPEN}{}", generation.text);
    Ok(Run {
        closed: text.ends_with(CALL_CLOSE),
        verdict: verdict(&text),
        text,
        in_call: None,
        tokens: generation.token_ids.len(),
        prefilled_tokens: generation.prefilled_tokens,
        prefill_ms: generation.prefill_ms,
        decode_ms: generation.decode_ms,
    })
}

/// The agent's reading of `text` (as crates/cli/tests/integration/constrained_calls.rs judges it natively).
fn verdict(text: &str) -> Verdict {
    let invalid = |name: Option<String>, arguments, problem: String| Verdict {
        valid: false,
        name,
        arguments,
        problem: Some(problem),
    };
    let mut parser = StreamParser::new(ParserOptions::default());
    let mut events = parser.push(text);
    events.extend(parser.finish());
    let calls: Vec<_> = events
        .into_iter()
        .filter_map(|e| match e {
            ParseEvent::Call(c) => Some(Ok(c)),
            ParseEvent::Malformed(m) => Some(Err((m.name, format!("malformed: {}", m.error)))),
            _ => None,
        })
        .collect();
    let call = match <[_; 1]>::try_from(calls) {
        Ok([Ok(call)]) => call,
        Ok([Err((name, problem))]) => return invalid(name, None, problem),
        Err(calls) => return invalid(None, None, format!("{} calls", calls.len())),
    };
    if !call.repairs.is_empty() {
        return invalid(Some(call.name), Some(call.arguments), format!("repaired: {:?}", call.repairs));
    }
    let mut checked = call.arguments.clone();
    let problem = match validate_arguments(&builtin_tools(), &call.name, &mut checked) {
        Ok(()) => None,
        Err(err) if only_tool_rules(&err) => Some(err.to_string()),
        Err(err) => return invalid(Some(call.name), Some(call.arguments), err.to_string()),
    };
    Verdict { valid: true, name: Some(call.name), arguments: Some(call.arguments), problem }
}

/// Problems only the tools' own cross-argument rules find (the grammar holds each argument to
/// its schema, not one argument to another); the same list as the native test's.
fn only_tool_rules(err: &ArgumentError) -> bool {
    let rules = ["give exactly one of", "must start with http", "ends with a colon"];
    matches!(err, ArgumentError::Invalid { problems, .. } if problems.iter().all(|p| rules.iter().any(|r| p.contains(r))))
}
