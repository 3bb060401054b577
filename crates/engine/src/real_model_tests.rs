//! The agent loop driven by the real Burn model (the tiny test model: real tokenizer and chat
//! template, random weights) on the CPU. Whatever the model writes, the loop must stay
//! well-formed. (The browser runs the same code; on SwiftShader a 5,000-token agent prompt takes
//! too long for CI, so the browser suite drives the loop with the scripted model.)

use std::path::Path;

use burn::tensor::Device;
use futures::StreamExt;
use hearth_agent::{
    AgentEvent, ElementInfo, GenerationRequest, ModelChunk, PageInfo, PromptClip, PromptImage, Snapshot, SystemClock,
    ToolError, ToolExecutor, ToolImage, ToolInvocation, ToolOutput,
};
use hearth_model::model_dir::ModelFiles;
use hearth_model::{CacheOptions, SamplingOptions};
use hearth_protocol::{Outcome, TaskSettings};

use crate::generation::generate_step;
use crate::{ModelParts, SharedModel, TaskModel, new_agent, tab_conversation};

/// Every tool answers with the same small page.
struct OnePage;

impl ToolExecutor for OnePage {
    async fn execute(&mut self, _call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        let page = PageInfo { url: "http://127.0.0.1/".into(), title: "Test".into() };
        let go = ElementInfo { index: 1, tag: "button".into(), text: "Go".into(), ..Default::default() };
        Ok(ToolOutput::snapshot(Snapshot { page, elements: vec![go] }))
    }
}

/// The tiny test model on the CPU, as the engine holds it.
fn tiny_model() -> SharedModel {
    tiny_model_on(&Device::flex())
}

fn tiny_model_on(device: &Device) -> SharedModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat");
    let files = ModelFiles::open(&dir).expect("the tiny model's files");
    let parts = ModelParts::read(&files, None).expect("its config, tokenizer and template");
    let model = files.load(device).expect("the tiny model loads");
    SharedModel::new(model, parts, CacheOptions::default(), 1, crate::shared::monotonic_ms)
}

/// One greedy step of `model` on a short request: its text and its figures.
fn greedy_step(model: &SharedModel, conversation: u32, drafting: bool) -> (String, hearth_agent::GenerationStats) {
    let request = GenerationRequest {
        page_tools: Vec::new(),
        prompt: "<bos><|turn>user\nList three colours.<turn|>\n<|turn>model\n".into(),
        max_new_tokens: 40,
        stop_after: Vec::new(),
        cancel: hearth_agent::CancelToken::new(),
        tools: None,
        images: Vec::new(),
        clips: Vec::new(),
    };
    let chunks = pollster::block_on(
        generate_step(model.clone(), tab_conversation(conversation), SamplingOptions::greedy(), 70, drafting, request)
            .collect::<Vec<_>>(),
    );
    let (mut text, mut stats) = (String::new(), None);
    for chunk in chunks {
        match chunk.expect("the step runs") {
            ModelChunk::Text(t) => text.push_str(&t),
            ModelChunk::Finished(s) => stats = Some(s),
        }
    }
    (text, stats.expect("stats at the end"))
}

/// On the GPU (where steps are recorded): an agent step whose step recording fails (made to fail
/// as a device's may) writes what a step whose recording seals writes, and says nothing of it.
#[test]
fn an_agent_step_whose_recording_fails_writes_the_same_text() {
    let device = match hearth_model::gpu::init_gpu_blocking() {
        Ok(gpu) => gpu.device,
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => return eprintln!("no GPU: {err}"),
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    };
    let model = tiny_model_on(&device);
    let (recorded, _) = greedy_step(&model, 1, false);
    let session = model.session.try_lock().expect("no step runs");
    assert!(session.model().records_steps(), "the GPU model records its steps");
    session.model().fail_next_recording();
    drop(session);
    let (after_failure, _) = greedy_step(&model, 2, false);
    assert_eq!(after_failure, recorded);
    let session = model.session.try_lock().expect("no step runs");
    assert_eq!(session.model().recording_status().failures, 1, "the recording failed, and the step went on");
}

/// The tiny test model with its assistant (fixtures/tiny-chat-assistant).
fn tiny_drafting_model() -> SharedModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat-assistant");
    let model = tiny_model();
    let config = model.session.try_lock().expect("unused").model().config.clone();
    let drafter = hearth_model::drafter::load_dir(&dir, &config, &Device::flex()).expect("the assistant loads");
    model.with_drafter(Some(drafter))
}

/// An agent step with the assistant drafting writes what the step without it writes, token for
/// token (greedy), and says what was drafted; with drafting off it drafts nothing.
#[test]
fn a_step_drafted_by_the_assistant_writes_the_same_text() {
    let model = tiny_drafting_model();
    let (plain, plain_stats) = greedy_step(&model, 5, false);
    let (drafted, drafted_stats) = greedy_step(&model, 6, true);
    assert_eq!(drafted, plain);
    assert_eq!(drafted_stats.completion_tokens, plain_stats.completion_tokens);
    assert_eq!(plain_stats.drafted_tokens, 0);
    assert!(drafted_stats.drafted_tokens > 0, "{drafted_stats:?}");
    assert!(drafted_stats.accepted_tokens <= drafted_stats.drafted_tokens);
}

/// The tiny test model with its vision tower.
fn tiny_seeing_model() -> SharedModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat");
    let mut files = ModelFiles::open(&dir).expect("the tiny model's files");
    let tower = files.load_vision(&Device::flex()).expect("its vision weights load");
    assert!(tower.is_some(), "the tiny model carries a vision tower");
    tiny_model().with_vision(tower)
}

/// A `width` × `height` PNG as the browser's captureVisibleTab gives it: a data URL.
fn png_data_url(width: u32, height: u32, seed: u8) -> String {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("a PNG header");
        let pixels: Vec<u8> =
            (0..width * height * 4).map(|i| (i as u8).wrapping_mul(seed).wrapping_add(i as u8 / 7)).collect();
        writer.write_image_data(&pixels).expect("PNG data");
    }
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// One greedy step over `prompt` with `images`: the text and the prompt's token count.
fn step_with_images(model: &SharedModel, prompt: &str, images: Vec<PromptImage>) -> Result<(String, usize), String> {
    step_with_media(model, prompt, images, Vec::new(), false)
}

fn step_with_images_drafting(
    model: &SharedModel,
    prompt: &str,
    images: Vec<PromptImage>,
    drafting: bool,
) -> Result<(String, usize), String> {
    step_with_media(model, prompt, images, Vec::new(), drafting)
}

/// One greedy step over `prompt` with its images and voice clips.
fn step_with_media(
    model: &SharedModel,
    prompt: &str,
    images: Vec<PromptImage>,
    clips: Vec<PromptClip>,
    drafting: bool,
) -> Result<(String, usize), String> {
    let request = GenerationRequest {
        page_tools: Vec::new(),
        prompt: prompt.into(),
        max_new_tokens: 8,
        stop_after: Vec::new(),
        cancel: hearth_agent::CancelToken::new(),
        tools: None,
        images,
        clips,
    };
    let chunks = pollster::block_on(
        generate_step(model.clone(), tab_conversation(2), SamplingOptions::greedy(), 70, drafting, request)
            .collect::<Vec<_>>(),
    );
    let (mut text, mut prompt_tokens) = (String::new(), 0);
    for chunk in chunks {
        match chunk.map_err(|e| e.to_string())? {
            ModelChunk::Text(t) => text.push_str(&t),
            ModelChunk::Finished(stats) => prompt_tokens = stats.prompt_tokens,
        }
    }
    Ok((text, prompt_tokens))
}

/// A screenshot in an agent step reaches the model as its soft tokens: the prompt grows by them,
/// the same screenshot is encoded once for the steps that show it again, and a model without a
/// vision tower says it cannot see rather than failing later.
#[test]
fn a_screenshot_becomes_soft_tokens_at_its_placeholder() {
    let model = tiny_seeing_model();
    let prompt = "<bos><|turn>user\nWhat is this?<|image|><turn|>\n<|turn>model\n";
    let text_tokens = model.tokenizer.encode(prompt).expect("tokens").len();
    let shot = |seed| PromptImage {
        key: format!("call_{seed}"),
        image: std::sync::Arc::new(ToolImage {
            data_url: png_data_url(64, 40, seed),
            thumbnail: String::new(),
            width: 64,
            height: 40,
        }),
    };
    let (_, tokens) = step_with_images(&model, prompt, vec![shot(3)]).expect("the step runs");
    let soft = tokens - text_tokens - 1; // the placeholder became <|image>, n soft tokens, <image|>
    assert!(soft > 0 && soft <= 70, "{soft} soft tokens at budget 70");
    assert_eq!(model.encoded.borrow().len(), 1);
    step_with_images(&model, prompt, vec![shot(3)]).expect("the same screenshot again");
    assert_eq!(model.encoded.borrow().len(), 1, "encoded once");
    step_with_images(&model, prompt, vec![shot(9)]).expect("another screenshot");
    assert_eq!(model.encoded.borrow().len(), 2);
    // The template's placeholders and the images must agree.
    let e = step_with_images(&model, prompt, Vec::new()).map(|_| ()).unwrap_err();
    assert!(e.contains("image"), "{e}");
    let blind = tiny_model();
    let e = step_with_images(&blind, prompt, vec![shot(3)]).unwrap_err();
    assert!(e.contains("cannot see images"), "{e}");
}

/// The tiny test model with its vision and audio towers.
fn tiny_hearing_model() -> SharedModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat");
    let mut files = ModelFiles::open(&dir).expect("the tiny model's files");
    let audio = files.load_audio(&Device::flex()).expect("its audio weights load");
    assert!(audio.is_some(), "the tiny model carries an audio tower");
    tiny_seeing_model().with_audio(audio)
}

/// A spoken request reaches the model as its clip's soft tokens (one per 40 ms), beside a
/// screenshot in the same prompt; a model without an audio tower says it cannot hear.
#[test]
fn a_spoken_request_becomes_soft_tokens_at_its_placeholder() {
    let model = tiny_hearing_model();
    let prompt = "<bos><|turn>user\n<|audio|>Do this.<turn|>\n<|turn>model\n";
    let text_tokens = model.tokenizer.encode(prompt).expect("tokens").len();
    let wave: Vec<f32> = (0..8000).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
    let clip = PromptClip { key: "voice_1".into(), samples: wave.into() };
    let (_, tokens) = step_with_media(&model, prompt, Vec::new(), vec![clip.clone()], false).expect("the step runs");
    // 0.5 s: 13 soft tokens (transformers' count, fixtures/gemma4-audio), and <|audio>, <audio|>.
    assert_eq!(tokens, text_tokens - 1 + 13 + 2);
    step_with_media(&model, prompt, Vec::new(), vec![clip.clone()], false).expect("the same clip again");
    assert_eq!(model.encoded.borrow().len(), 1, "encoded once");

    // With a screenshot after it: both kinds of soft tokens in one prompt.
    let both = "<bos><|turn>user\n<|audio|>Do this.<turn|>\n<|turn>model\nLook.<|image|><turn|>\n<|turn>model\n";
    let shot = PromptImage {
        key: "call_1".into(),
        image: std::sync::Arc::new(ToolImage {
            data_url: png_data_url(64, 40, 3),
            thumbnail: String::new(),
            width: 64,
            height: 40,
        }),
    };
    let text_tokens = model.tokenizer.encode(both).expect("tokens").len();
    let (_, tokens) =
        step_with_media(&model, both, vec![shot], vec![clip.clone()], false).expect("the step with both runs");
    assert!(tokens > text_tokens + 13, "{tokens} tokens from {text_tokens}");

    // The template's placeholders and the clips must agree; a model that cannot hear says so.
    let e = step_with_media(&model, prompt, Vec::new(), Vec::new(), false).unwrap_err();
    assert!(e.contains("clip"), "{e}");
    let deaf = tiny_seeing_model();
    let e = step_with_media(&deaf, prompt, Vec::new(), vec![clip], false).unwrap_err();
    assert!(e.contains("cannot hear"), "{e}");
}

/// A step with a screenshot drafts too: the prompt's last position comes from the image-bearing
/// prefill, and the text is the one without drafting.
#[test]
fn a_step_with_a_screenshot_drafts_the_same_text() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat-assistant");
    let model = tiny_seeing_model();
    let config = model.session.try_lock().expect("unused").model().config.clone();
    let drafter = hearth_model::drafter::load_dir(&dir, &config, &Device::flex()).expect("the assistant loads");
    let model = model.with_drafter(Some(drafter));
    let prompt = "<bos><|turn>user\nWhat is this?<|image|><turn|>\n<|turn>model\n";
    let shot = PromptImage {
        key: "call_5".into(),
        image: std::sync::Arc::new(ToolImage {
            data_url: png_data_url(64, 40, 5),
            thumbnail: String::new(),
            width: 64,
            height: 40,
        }),
    };
    let plain = step_with_images_drafting(&model, prompt, vec![shot.clone()], false).expect("the plain step");
    let drafted = step_with_images_drafting(&model, prompt, vec![shot], true).expect("the drafted step");
    assert_eq!(drafted, plain);
}

/// The text `burn_generate` streams and the number of tokens it decoded.
fn decode(model: &SharedModel, seed: u64, stop_after: &[&str]) -> (String, usize) {
    let sampling = SamplingOptions { temperature: 50.0, top_k: 0, top_p: 1.0, seed };
    let request = GenerationRequest {
        page_tools: Vec::new(),
        prompt: "<bos><|turn>user\nHi<turn|>\n<|turn>model\n".into(),
        max_new_tokens: 64,
        stop_after: stop_after.iter().map(|p| (*p).to_owned()).collect(),
        cancel: hearth_agent::CancelToken::new(),
        tools: None,
        images: Vec::new(),
        clips: Vec::new(),
    };
    let chunks = pollster::block_on(
        generate_step(model.clone(), tab_conversation(1), sampling, 280, false, request).collect::<Vec<_>>(),
    );
    let mut text = String::new();
    let mut tokens = None;
    for chunk in chunks {
        match chunk.expect("the tiny model generates") {
            ModelChunk::Text(t) => text.push_str(&t),
            ModelChunk::Finished(stats) => tokens = Some(stats.completion_tokens),
        }
    }
    (text, tokens.expect("the stream ends with its numbers"))
}

/// The engine's decoding ends right after `<tool_call|>` (id 49) when the agent asks: the
/// same seed that writes on past it without the request stops there with it.
#[test]
fn decoding_ends_after_the_token_that_closes_a_call() {
    let model = tiny_model();
    assert_eq!(model.tokenizer.token_id("<tool_call|>"), Some(49));
    // Near-uniform sampling over the tiny vocabulary: find a run that writes token 49 and
    // then goes on.
    let (seed, free, free_tokens, close_end) = (0..300)
        .find_map(|seed| {
            let (text, tokens) = decode(&model, seed, &[]);
            let end = text.find("<tool_call|>")? + "<tool_call|>".len();
            (end < text.len()).then_some((seed, text, tokens, end))
        })
        .expect("some seed writes <tool_call|> before the end");
    let (stopped, tokens) = decode(&model, seed, hearth_agent::STEP_ENDS_AFTER);
    assert_eq!(stopped, free[..close_end], "cut right after the close, nothing decoded after it");
    assert!(tokens < free_tokens, "{tokens} tokens decoded, {free_tokens} without the stop");
}

#[test]
fn the_real_model_drives_the_loop_and_it_stays_well_formed() {
    let handles = tiny_model();
    let settings = TaskSettings {
        max_iterations: 3,
        enable_thinking: false,
        temperature: 0.0,
        max_new_tokens: 24,
        ..TaskSettings::default()
    };
    let (template, tokenizer) = (&handles.template, handles.tokenizer.clone());
    let mut agent = new_agent(template, tokenizer, handles.context_tokens, &settings, false, Box::new(SystemClock));
    agent.start_task("Click the Go button.", Some(PageInfo { url: "http://127.0.0.1/".into(), title: "Test".into() }));
    let mut backend = TaskModel::burn(handles.clone(), tab_conversation(1), &settings, 0);
    let mut events = Vec::new();
    let outcome = pollster::block_on(agent.run(&mut backend, &mut OnePage, &mut |e| events.push(e)));

    // One usage report per model call, each within the token limit, prompts counted by the
    // model's own tokenizer.
    let usages: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Usage { prompt_tokens, completion_tokens, .. } => Some((*prompt_tokens, *completion_tokens)),
            _ => None,
        })
        .collect();
    assert!(!usages.is_empty() && usages.len() <= 3, "{events:?}");
    let prompt = agent.last_prompt().expect("a prompt was rendered");
    assert!(prompt.starts_with("<bos>"), "rendered with the model's own template");
    for (prompt_tokens, completion_tokens) in &usages {
        assert!(*prompt_tokens > 1000, "the system prompt and tools are in the prompt");
        assert!(*completion_tokens <= 24);
    }
    // Every tool that started has its result, in order.
    let call_ids = |starts: bool| -> Vec<&String> {
        events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolStart { call_id, .. } if starts => Some(call_id),
                AgentEvent::ToolResult { call_id, .. } if !starts => Some(call_id),
                _ => None,
            })
            .collect()
    };
    assert_eq!(call_ids(true), call_ids(false));
    // Random weights write anything; the run ends in a state the overlay can show.
    match &outcome {
        Outcome::Done { result, .. } => assert!(!result.is_empty()),
        Outcome::Failed { .. } => {}
        Outcome::Paused { .. } | Outcome::NeedsConfirmation { .. } | Outcome::NeedsAnswer { .. } => {}
        other => panic!("unexpected outcome {other:?}"),
    }
    println!("outcome: {outcome:?}; model calls: {}; usage: {usages:?}", usages.len());
}

/// The call grammar follows the tools a request offers: built for them, kept while they stay the
/// same, rebuilt when the user switches one off (the vocabulary's trie is kept).
#[test]
fn the_call_constraint_follows_the_offered_tools() {
    use crate::generation::{call_constraint, keep_call_constraint};
    let model = tiny_model();
    let all: Vec<String> = hearth_agent::builtin_tools().into_iter().map(|t| t.name).collect();
    let calls = call_constraint(&model.tokenizer, None).expect("the tiny model has Gemma 4's markers");
    assert_eq!(calls.tool_names(), all.as_slice());
    keep_call_constraint(&model.tokenizer, None, calls);
    let without_scripts: Vec<String> = all.iter().filter(|n| *n != "run_javascript").cloned().collect();
    let calls = call_constraint(&model.tokenizer, Some(&without_scripts)).expect("a constraint");
    assert_eq!(calls.tool_names(), without_scripts.as_slice(), "rebuilt without the switched-off tool");
    // Kept for the same tools, not handed to a request that offers others.
    keep_call_constraint(&model.tokenizer, Some(&without_scripts), calls);
    let again = call_constraint(&model.tokenizer, None).expect("a constraint");
    assert_eq!(again.tool_names(), all.as_slice());
}
