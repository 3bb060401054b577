//! Constrained tool calls with a real tokenizer and chat template: the tiny random-weight model
//! (crates/model/fixtures/tiny-chat), made to act by a prompt that ends with `<|tool_call>`,
//! writes calls that the agent's own parser reads and its validator accepts, on the CPU and on
//! the GPU. Without the constraint the same model writes garbage.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::Device;
use hearth_agent::parser::{ParseEvent, ParserOptions, StreamParser};
use hearth_agent::tools::ArgumentError;
use hearth_agent::{ToolDefinition, builtin_tools, validate_arguments};
use hearth_chat::{ChatTemplate, Message, RenderRequest};
use hearth_engine::constrain::{CallConstraint, CallGrammar, CallState, Symbol, ToolSpec, VocabTrie};
use hearth_engine::native::load_decoder as load_model;
use hearth_model::decode::TokenConstraint;
use hearth_model::generate::{self, GenerateOptions};
use hearth_model::tokenizer::Tokenizer;
use hearth_model::{CacheOptions, Sampler, SamplingOptions, Session};

const CALL_CLOSE: u32 = 49;

fn tiny_chat() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat")
}

fn grammar(tools: &[ToolDefinition]) -> CallGrammar {
    let specs: Vec<ToolSpec> =
        tools.iter().map(|t| ToolSpec { name: &t.name, parameters: Some(&t.parameters) }).collect();
    CallGrammar::new(&specs).expect("the agent's tools compile")
}

/// The rendered prompt, forced into a call, as ids.
fn prompt(tokenizer: &Tokenizer, tools: &[ToolDefinition]) -> Vec<u32> {
    let template = ChatTemplate::from_model_dir(tiny_chat()).expect("template");
    let chat_tools: Vec<_> = tools.iter().map(ToolDefinition::to_chat_tool).collect();
    let messages = [Message::user("Type Ada into the name field, then submit.")];
    let request = RenderRequest {
        messages: &messages,
        tools: &chat_tools,
        enable_thinking: false,
        preserve_thinking: false,
        add_generation_prompt: true,
    };
    let text = template.render(&request).expect("renders") + "<|tool_call>";
    tokenizer.encode(&text).expect("encodes")
}

/// What one generation wrote: the reply (with the forced `<|tool_call>`), and whether it ended
/// with `<tool_call|>` (otherwise the token limit cut it).
fn reply(
    session: &mut Session,
    tokenizer: &Tokenizer,
    ids: &[u32],
    seed: u64,
    calls: Option<&mut CallConstraint>,
    max_tokens: usize,
) -> (String, bool) {
    // Hot enough that the random model picks different tools and arguments from seed to seed.
    let mut sampler = Sampler::new(SamplingOptions { temperature: 4.0, top_k: 0, top_p: 1.0, seed });
    let stop_tokens = [1, 50, 106];
    let options = GenerateOptions {
        max_tokens,
        stop_tokens: &stop_tokens,
        tool_calls: calls.map(|c| c as &mut dyn TokenConstraint),
        media: None,
        speculation: None,
    };
    let mut closed = false;
    let generation = pollster::block_on(generate::generate(
        session,
        &mut sampler,
        tokenizer,
        ids,
        options,
        || 0.0,
        |id, _| {
            closed = id == CALL_CLOSE;
            if closed { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        },
    ))
    .expect("generates");
    (format!("<|tool_call>{}", generation.text), closed)
}

/// Problems only the tools' own cross-argument rules find (the grammar holds each argument to
/// its schema, not one argument to another).
fn only_tool_rules(err: &ArgumentError) -> bool {
    let rules = ["give exactly one of", "must start with http", "ends with a colon"];
    matches!(err, ArgumentError::Invalid { problems, .. } if problems.iter().all(|p| rules.iter().any(|r| p.contains(r))))
}

/// Whether `text` holds exactly one call, read without repairs, to a real tool with valid arguments.
fn valid_call(text: &str, tools: &[ToolDefinition]) -> Result<String, String> {
    let mut parser = StreamParser::new(ParserOptions::default());
    let mut events = parser.push(text);
    events.extend(parser.finish());
    let calls: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ParseEvent::Call(c) => Some(Ok(c)),
            ParseEvent::Malformed(m) => Some(Err(format!("malformed: {:?}", m.error))),
            _ => None,
        })
        .collect();
    let [call] = calls.as_slice() else { return Err(format!("{} calls", calls.len())) };
    let call = call.clone()?;
    if !call.repairs.is_empty() {
        return Err(format!("repaired: {:?}", call.repairs));
    }
    let mut arguments = call.arguments.clone();
    match validate_arguments(tools, &call.name, &mut arguments) {
        Ok(()) => Ok(call.name.clone()),
        Err(err) if only_tool_rules(&err) => Ok(call.name.clone()),
        Err(err) => Err(err.to_string()),
    }
}

/// Samples calls from the tiny model on `device`, constrained and not, and checks them.
fn calls_parse_on(device: &Device, seeds: u64) {
    let dir = tiny_chat();
    let tokenizer =
        Tokenizer::from_bytes(&std::fs::read(dir.join("tokenizer.json")).expect("tokenizer.json")).expect("tokenizer");
    let tools = builtin_tools();
    let ids = prompt(&tokenizer, &tools);
    let grammar = Arc::new(grammar(&tools));
    let vocab = Arc::new(VocabTrie::from_tokenizer(&tokenizer).expect("the fixture has Gemma 4's markers"));
    let mut session = Session::new(load_model(&dir, device).expect("model"), CacheOptions::default());
    let (mut complete, mut names, mut free_valid) = (0, Vec::new(), 0);
    for seed in 0..seeds {
        let mut calls = CallConstraint::new(grammar.clone(), vocab.clone());
        let (text, closed) = reply(&mut session, &tokenizer, &ids, seed, Some(&mut calls), 160);
        if closed {
            complete += 1;
            let name = valid_call(&text, &tools).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
            names.push(name);
        } else {
            // Cut by the token limit: still a prefix of a valid call, never anything else.
            assert!(calls.in_call(), "seed {seed}: the call left the grammar\n{text}");
        }
        let (free, _) = reply(&mut session, &tokenizer, &ids, seed, None, 48);
        free_valid += usize::from(valid_call(&free, &tools).is_ok());
    }
    eprintln!("{complete} of {seeds} constrained calls complete, tools {names:?}; {free_valid} valid without");
    assert!(complete * 2 >= seeds, "most constrained calls finish within the limit: {complete}");
    assert_eq!(free_valid, 0, "the random model writes no valid call on its own");
}

#[test]
fn constrained_calls_from_the_tiny_model_parse_on_the_cpu() {
    calls_parse_on(&Device::flex(), 16);
}

/// The GPU (required when `HEARTH_REQUIRE_GPU` is set; else `None` where there is none).
fn test_gpu() -> Option<Device> {
    match hearth_model::gpu::init_gpu_blocking() {
        Ok(gpu) => Some(gpu.device),
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => {
            eprintln!("no GPU: {err}");
            None
        }
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    }
}

#[test]
fn constrained_calls_from_the_tiny_model_parse_on_the_gpu() {
    let Some(gpu) = test_gpu() else { return };
    calls_parse_on(&gpu, 6);
}

/// With the readback a step behind (`Decoder`, which `generate` uses), the next token is chosen
/// before this one is read; when this one opens a call, the next is chosen again under the call's
/// mask. Sampled on the GPU (where steps take ids on the device), the tokens are those of reading
/// every id before the next step. For calls to open often, the constraint here takes the token
/// the random model writes most for its opener.
#[test]
fn the_lagged_readback_samples_what_synchronous_decoding_does() {
    use hearth_model::decode::Decoder;
    let Some(gpu) = test_gpu() else { return };
    let dir = tiny_chat();
    let tokenizer =
        Tokenizer::from_bytes(&std::fs::read(dir.join("tokenizer.json")).expect("tokenizer.json")).expect("tokenizer");
    let tools = builtin_tools();
    let forced = prompt(&tokenizer, &tools);
    // The prompt without the forced `<|tool_call>`: calls open where the model writes an opener.
    let ids = &forced[..forced.len() - 1];
    let grammar = Arc::new(grammar(&tools));
    let mut session = Session::new(load_model(&dir, &gpu).expect("model"), CacheOptions::default());
    assert!(session.steps_on_device(), "the tiny model's lookups take ids on the GPU");
    let mut write = |vocab: Option<&Arc<VocabTrie>>, seed: u64, lagged: bool| {
        let mut calls = vocab.map(|v| CallConstraint::new(grammar.clone(), v.clone()));
        if let Some(calls) = calls.as_mut() {
            calls.begin(ids);
        }
        let mut sampler = Sampler::new(SamplingOptions { temperature: 4.0, top_k: 0, top_p: 1.0, seed });
        let (logits, _) = session.prefill(ids).expect("prefills");
        let mut decoder = Decoder::new(&mut sampler, logits, calls.as_mut().map(|c| c as &mut dyn TokenConstraint));
        decoder.set_lagged(lagged);
        (0..60)
            .map(|_| {
                let next = decoder.next(
                    &mut session,
                    &mut sampler,
                    calls.as_mut().map(|c| c as &mut dyn TokenConstraint),
                    true,
                    || 0.0,
                );
                pollster::block_on(next).expect("decodes").id
            })
            .collect::<Vec<u32>>()
    };
    let free = write(None, 0, true);
    let opener = *free.iter().max_by_key(|&&t| free.iter().filter(|&&u| u == t).count()).expect("tokens");
    let real = VocabTrie::from_tokenizer(&tokenizer).expect("the fixture has Gemma 4's markers").markers();
    let markers = hearth_engine::constrain::Markers { call_open: opener, ..real };
    let vocab = Arc::new(VocabTrie::with_markers(&tokenizer, markers).expect("vocabulary"));
    let mut opened = 0;
    for seed in 0..3 {
        let lagged = write(Some(&vocab), seed, true);
        assert_eq!(lagged, write(Some(&vocab), seed, false), "seed {seed}");
        opened += lagged.iter().filter(|&&t| t == opener).count();
    }
    assert!(opened > 0, "no reply opened a call: the mask's second choice went untested");
}

/// `hearth generate --chat --tools … --force-call` prints a call that parses.
#[test]
fn the_cli_constrains_calls_to_a_tools_file() {
    let tools = builtin_tools();
    let list: Vec<_> = tools.iter().map(ToolDefinition::to_chat_tool).collect();
    let file = std::env::temp_dir().join(format!("hearth-tools-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_string(&list).expect("serializes")).expect("writes");
    let dir = tiny_chat();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["generate", "--model", dir.to_str().expect("utf-8"), "--chat", "--tools"])
        .arg(&file)
        .args(["--force-call", "--temperature", "1", "--top-k", "0", "--top-p", "1", "--seed", "5"])
        .args(["--max-tokens", "400", "--cpu", "Click the first link."])
        .output()
        .expect("hearth runs");
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("calls constrained to read_page, snapshot, screenshot, click"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The reply may go on after the call (until a stop token): the first call is what counts. A
    // random model may still be inside a long string when the limit cuts it: then what it wrote is
    // a prefix the grammar accepts.
    match stdout.find("<tool_call|>").map(|i| i + "<tool_call|>".len()) {
        Some(end) => {
            let _name = valid_call(&stdout[..end], &tools).unwrap_or_else(|e| panic!("{e}\n{stdout}"));
        }
        None => assert!(grammar_accepts_prefix(&grammar(&tools), &stdout), "not a call's prefix: {stdout}"),
    }
}

/// Whether `text` (from `<|tool_call>` on) is the start of a call the grammar accepts.
fn grammar_accepts_prefix(grammar: &CallGrammar, text: &str) -> bool {
    let Some(body) = text.split_once("<|tool_call>").map(|(_, b)| b) else { return false };
    let mut state = CallState::start();
    for (i, piece) in body.split("<|\"|>").enumerate() {
        if i > 0 {
            let Some(next) = state.next(grammar, Symbol::Delim) else { return false };
            state = next;
        }
        for b in piece.bytes() {
            let Some(next) = state.next(grammar, Symbol::Byte(b)) else { return false };
            state = next;
        }
    }
    true
}

/// Drafting under the constraint (speculative decoding): a lookup guesses the plain answer with
/// `<bos>` (which no call allows) planted every fourth position. Greedy, the drafted reply is the
/// plain one token for token (the forbidden guesses end their drafts); sampled, every call still
/// parses.
#[test]
fn drafted_calls_are_the_calls_of_plain_decoding() {
    use hearth_model::speculative::{DraftSource, Speculation};
    const BOS: u32 = 2;
    let dir = tiny_chat();
    let tokenizer =
        Tokenizer::from_bytes(&std::fs::read(dir.join("tokenizer.json")).expect("tokenizer.json")).expect("tokenizer");
    let tools = builtin_tools();
    let ids = prompt(&tokenizer, &tools);
    let grammar = Arc::new(grammar(&tools));
    let vocab = Arc::new(VocabTrie::from_tokenizer(&tokenizer).expect("the fixture has Gemma 4's markers"));
    let mut session = Session::new(load_model(&dir, &Device::flex()).expect("model"), CacheOptions::default());
    let stop_tokens = [1, 50, 106];
    let mut write = |sampling: SamplingOptions, speculation: Option<&mut Speculation<'_>>| {
        let mut calls = CallConstraint::new(grammar.clone(), vocab.clone());
        let mut sampler = Sampler::new(sampling);
        let options = GenerateOptions {
            max_tokens: 120,
            stop_tokens: &stop_tokens,
            tool_calls: Some(&mut calls),
            media: None,
            speculation,
        };
        let out = pollster::block_on(generate::generate(
            &mut session,
            &mut sampler,
            &tokenizer,
            &ids,
            options,
            || 0.0,
            |id, _| if id == CALL_CLOSE { ControlFlow::Break(()) } else { ControlFlow::Continue(()) },
        ))
        .expect("generates");
        (out, calls.in_call())
    };
    let (plain, _) = write(SamplingOptions::greedy(), None);
    let answer = plain.token_ids.clone();
    let prompt_len = ids.len();
    let guess_with_bos = move |so_far: &[u32], k: usize| -> Vec<u32> {
        let done = so_far.len() - prompt_len;
        answer.iter().skip(done).take(k).enumerate().map(|(j, &t)| if (done + j) % 4 == 1 { BOS } else { t }).collect()
    };
    let mut guess = guess_with_bos.clone();
    let mut speculation = Speculation::new(DraftSource::Lookup(&mut guess), 6);
    let (drafted, _) = write(SamplingOptions::greedy(), Some(&mut speculation));
    assert_eq!(drafted.token_ids, plain.token_ids, "{}\nvs\n{}", drafted.text, plain.text);
    let stats = drafted.speculation.expect("drafted");
    assert!(stats.accepted > 0 && stats.rounds < plain.token_ids.len(), "{stats:?}");
    for seed in 0..6 {
        let mut guess = guess_with_bos.clone();
        let mut speculation = Speculation::new(DraftSource::Lookup(&mut guess), 6);
        let sampling = SamplingOptions { temperature: 4.0, top_k: 0, top_p: 1.0, seed };
        let (out, in_call) = write(sampling, Some(&mut speculation));
        let text = format!("<|tool_call>{}", out.text);
        if out.token_ids.last() == Some(&CALL_CLOSE) {
            valid_call(&text, &tools).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        } else {
            assert!(in_call, "seed {seed}: the call left the grammar\n{text}");
        }
    }
}
