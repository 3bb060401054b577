//! `hearth agent`: the extension's agent (the same loop, policy, prompts and engine) on a saved
//! page, from a terminal: the way to try a model on a task without a browser.

use std::cell::RefCell;
use std::io::BufRead;
use std::path::PathBuf;
use std::rc::Rc;

use hearth_agent::scripted::ScriptedModel;
use hearth_agent::tools::{OPEN_TAB, READ_TAB, SWITCH_TAB};
use hearth_agent::{AgentEvent, Decision, SystemClock};
use hearth_engine::native::{self, ModelSource, Vision};
use hearth_engine::{TaskModel, new_agent};
use hearth_model::CacheOptions;
use hearth_protocol::{Outcome, TaskSettings, ToolMode};

use crate::DeviceArgs;
use crate::saved_page::SavedPage;

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The model: a folder or a GGUF file. Its tokenizer and chat template render the prompts;
    /// its weights run the steps unless --script replaces them.
    #[arg(long)]
    model: PathBuf,
    /// A tokenizer.json in place of the model's own.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The towers as llama.cpp's projector file (`mmproj…gguf`), for a GGUF model (a model
    /// folder's own towers are loaded without it). With --screenshot, the agent sees the page.
    #[arg(long)]
    mmproj: Option<PathBuf>,
    /// The model's assistant (a folder): the steps draft with it, as in the browser.
    #[arg(long)]
    drafter: Option<PathBuf>,
    /// The page's picture (a PNG): what the `screenshot` tool shows a model that can see.
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// The request spoken (a WAV file, 16 kHz, at most 30 s): the model hears it through its
    /// audio tower, before the typed task (which may then be empty), as the extension's
    /// microphone gives it.
    #[arg(long)]
    voice: Option<PathBuf>,
    /// The saved page (HTML) the agent works on.
    #[arg(long)]
    page: PathBuf,
    /// The address the agent is told the page has (the policy judges sites by it).
    #[arg(long, default_value = "http://127.0.0.1/")]
    url: String,
    /// Replay these model outputs instead of running the weights: a JSON array of raw outputs
    /// (a test tool; `{{index:TEXT}}` names the element whose snapshot line holds TEXT).
    #[arg(long)]
    script: Option<PathBuf>,
    /// Allow every action the policy asks about (otherwise each is denied, and the agent is told).
    #[arg(long)]
    approve: bool,
    /// Model calls before the task pauses.
    #[arg(long, default_value_t = 10)]
    max_iterations: u32,
    /// Let the model think before it acts.
    #[arg(long)]
    thinking: bool,
    /// Tokens per model call.
    #[arg(long, default_value_t = 512)]
    max_new_tokens: u32,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The task, in the user's words.
    task: String,
    #[command(flatten)]
    device: DeviceArgs,
}

pub fn run(args: AgentArgs) -> Result<(), String> {
    let mut page = SavedPage::read(&args.page, &args.url)?;
    let voice = args.voice.as_deref().map(crate::read_wav).transpose()?;
    if let Some(samples) = &voice {
        hearth_model::audio::check_clip(samples, 16_000).map_err(|e| format!("the voice clip: {e}"))?;
    }
    if let Some(path) = &args.screenshot {
        let png = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        page = page.with_picture(&png)?;
    }
    let source = ModelSource {
        model: args.model.clone(),
        tokenizer: args.tokenizer.clone(),
        mmproj: args.mmproj.clone(),
        drafter: args.drafter.clone(),
        hearing: voice.is_some(),
        template_optional: false,
    };
    let settings = TaskSettings {
        max_iterations: args.max_iterations,
        enable_thinking: args.thinking,
        temperature: args.temperature,
        max_new_tokens: args.max_new_tokens,
        // A saved page has no other tabs: the tab tools are not offered.
        tool_modes: TaskSettings::default()
            .tool_modes
            .into_iter()
            .chain([READ_TAB, OPEN_TAB, SWITCH_TAB].map(|tool| (tool.to_owned(), ToolMode::Off)))
            .collect(),
        ..TaskSettings::default()
    };
    let (mut backend, template, tokenizer, context_tokens, sees) = match &args.script {
        Some(path) => {
            let parts = native::read_parts(&source).map_err(|e| e.to_string())?;
            let json = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let script = ScriptedModel::from_json(&json)
                .map_err(|e| format!("{} is not a script (a JSON array of outputs): {e}", path.display()))?;
            println!("model: scripted by {} (the weights are not loaded)", path.display());
            let backend = TaskModel::Scripted(Rc::new(RefCell::new(script)));
            let sees = args.screenshot.is_some();
            (backend, Rc::new(parts.template), Rc::new(parts.tokenizer), CacheOptions::default().max_context, sees)
        }
        None => {
            let (device, adapter, memory) = crate::device_with_name(&args.device)?;
            println!("model: {} on {adapter}", args.model.display());
            // The towers only when there is a picture to see (a saved page has no pixels of its
            // own) or a request to hear.
            let vision = match (&args.screenshot, &voice) {
                (Some(_), _) => Vision::Required,
                (None, Some(_)) => Vision::IfPresent,
                (None, None) => Vision::Off,
            };
            let engine = native::load(&source, vision, &device, memory).map_err(|e| e.to_string())?;
            if let Some(dir) = &args.drafter {
                println!("drafter: {}", dir.display());
            }
            let shared = engine.model();
            let sees = shared.vision.is_some();
            if sees {
                println!("vision: the model sees the page's screenshot");
            }
            let (template, tokenizer) = (shared.template.clone(), shared.tokenizer.clone());
            (engine.task(1, &settings, args.seed), template, tokenizer, shared.context_tokens, sees)
        }
    };
    // The vision tools (screenshot, click_at) only for a model that sees, on a page with a picture.
    let mut agent = new_agent(&template, tokenizer, context_tokens, &settings, sees, Box::new(SystemClock));
    println!("page: {} ({})", page.info().title, page.info().url);
    println!("task: {}", args.task);
    if let Some(samples) = &voice {
        println!("voice: {:.2} s of sound, heard by the model's audio tower", samples.len() as f64 / 16_000.0);
    }
    agent.start_task_with_voice(voice.map(Into::into), &args.task, None, Some(page.info().clone()));
    let mut printer = Printer::default();
    let mut answers = std::io::stdin().lock().lines();
    loop {
        let outcome = pollster::block_on(agent.run(&mut backend, &mut page, &mut |event| printer.event(event)));
        match outcome {
            Outcome::NeedsConfirmation { call_id } => {
                let decision = if args.approve { Decision::AllowOnce } else { Decision::Deny };
                println!("  {}", if args.approve { "allowed (--approve)" } else { "denied (pass --approve to allow)" });
                agent.confirm(&call_id, decision).map_err(|e| e.to_string())?;
            }
            Outcome::NeedsAnswer { .. } => match answers.next() {
                Some(Ok(answer)) => {
                    println!("  answered: {answer}");
                    agent.answer(&answer).map_err(|e| e.to_string())?;
                }
                _ => {
                    println!("stopped: the agent asked a question and stdin gave no answer");
                    break;
                }
            },
            Outcome::Done { .. } | Outcome::Idle => break,
            Outcome::Paused { reason } => {
                println!("paused: {reason:?}");
                break;
            }
            Outcome::Stopped => break,
            Outcome::Failed { error } => {
                println!("failed: {}", hearth_protocol::english::task_error(&error));
                break;
            }
        }
    }
    println!("page state:");
    for line in page.state() {
        println!("  {line}");
    }
    println!("actions: {}", if page.actions.is_empty() { "none".to_owned() } else { page.actions.join("; ") });
    Ok(())
}

/// Prints the agent's events as lines, the model's text gathered until its step ends.
#[derive(Default)]
struct Printer {
    text: String,
    thinking: String,
}

impl Printer {
    fn event(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::Token { text } => self.text.push_str(&text),
            AgentEvent::Thinking { text } => self.thinking.push_str(&text),
            AgentEvent::Usage { prompt_tokens, prefill_tokens, completion_tokens, .. } => {
                if !self.thinking.trim().is_empty() {
                    println!("  thought: {}", one_line(&self.thinking));
                }
                if !self.text.trim().is_empty() {
                    println!("  said: {}", one_line(&self.text));
                }
                self.text.clear();
                self.thinking.clear();
                println!(
                    "step: {prompt_tokens} prompt tokens ({prefill_tokens} computed), {completion_tokens} written"
                );
            }
            AgentEvent::ToolStart { name, arguments, target, .. } => {
                let target = target.map(|t| format!(" on {}", t.description)).unwrap_or_default();
                println!("  call: {name} {}{target}", serde_json::Value::Object(arguments));
            }
            AgentEvent::ToolResult { ok, output, .. } => {
                println!("  {}: {}", if ok { "result" } else { "failed" }, one_line(&output));
            }
            AgentEvent::ConfirmRequest { name, risk, reasons, target, .. } => {
                // The reasons as data (the extension's locales word them for people).
                let reasons: Vec<String> =
                    reasons.iter().map(|r| serde_json::to_string(r).unwrap_or_default()).collect();
                let target = target.map(|t| format!(" on {}", t.description)).unwrap_or_default();
                println!("  asks the user to allow {name}{target} ({risk:?} risk): {}", reasons.join(", "));
            }
            AgentEvent::AskUser { question, options, .. } => {
                println!("  asks the user: {question} ({})", options.join(" / "));
            }
            AgentEvent::Done { result, success } => {
                println!("{}: {result}", if success { "done" } else { "done, without success" });
            }
            AgentEvent::Error { error, .. } => println!("  error: {}", hearth_protocol::english::task_error(&error)),
            AgentEvent::Paused { .. } | AgentEvent::Stopped => {}
            AgentEvent::Sources { url, passages, .. } => {
                println!("  read {} passages of {url}", passages.len());
            }
            AgentEvent::Compacted { before_tokens, after_tokens } => {
                println!("  history shortened: {before_tokens} → {after_tokens} tokens");
            }
        }
    }
}

/// The first 240 characters of `text`, on one line.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(240) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}
