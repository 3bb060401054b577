//! The context window, counted in tokens: budgets, cutting long tool results, and compacting
//! history.
//!
//! Two forces are balanced here. The prompt must stay linear in the number of steps (old page
//! snapshots are replaced by a placeholder), yet it should change append-only from one step to
//! the next so the model's KV cache is reused and each step prefills only its new tokens. So
//! compaction is rare and done in one go: only when the prompt nears the budget, or when more
//! than `keep_full_snapshots + snapshot_slack` full page results have piled up.

use serde::{Deserialize, Serialize};

use hearth_chat::{ContentPart, Message, MessageContent};

/// Counts tokens as the model's tokenizer would. The real tokenizer plugs in here.
pub trait TokenCounter {
    fn count(&self, text: &str) -> usize;

    /// The tokens this tokenizer matches whole in plain text (special and added tokens: `<eos>`,
    /// `<|turn>`…), which page text must never produce. Empty: Gemma's known markup is used.
    fn special_tokens(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A deterministic stand-in for a tokenizer: about four ASCII characters per token, one token
/// per other character (CJK text is close to that in Gemma's vocabulary).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproxTokenCounter;

impl TokenCounter for ApproxTokenCounter {
    fn count(&self, text: &str) -> usize {
        let units: usize = text.chars().map(|c| if c.is_ascii() { 1 } else { 4 }).sum();
        units.div_ceil(4)
    }
}

/// Token limits of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextBudget {
    /// The model's context window.
    pub window_tokens: usize,
    /// The user's cap on prompt + output (memory and speed), at most the window.
    pub budget_tokens: usize,
    /// Kept free for the model's answer.
    pub reserve_output_tokens: usize,
    /// Compact when the prompt exceeds this fraction of the usable budget…
    pub compact_at: f32,
    /// …down to at most this fraction, so the next compaction is many steps away.
    pub compact_to: f32,
    /// Longer tool results are cut (head and tail kept) when they enter the history.
    pub max_tool_result_tokens: usize,
    /// Full page results (snapshots, page text) kept after a compaction.
    pub keep_full_snapshots: usize,
    /// Extra full page results allowed to accumulate between compactions.
    pub snapshot_slack: usize,
    /// Results of the most recent steps that compaction never shortens.
    pub keep_recent_results: usize,
    /// Screenshots the model still sees after a compaction (older ones leave a note), and how
    /// many may pile up before one.
    pub keep_screenshots: usize,
    pub screenshot_slack: usize,
    /// Tokens one image costs in the prompt beyond its placeholder: its soft tokens (the
    /// settings' image budget, an upper bound) and the two that open and close them.
    pub image_tokens: usize,
}

impl Default for ContextBudget {
    /// The budget of the engine's smallest context (8,192 tokens) and the default answer length.
    fn default() -> Self {
        Self::for_context(8_192, 1_024)
    }
}

impl ContextBudget {
    /// The budget for a model whose KV cache holds `context_tokens` positions (the engine's
    /// choice: one source of truth), with room for an answer of `max_new_tokens`: a prompt that
    /// fits this budget plus its answer always fits the cache.
    pub fn for_context(context_tokens: usize, max_new_tokens: usize) -> Self {
        Self {
            window_tokens: context_tokens,
            budget_tokens: context_tokens,
            reserve_output_tokens: max_new_tokens,
            compact_at: 0.85,
            compact_to: 0.6,
            max_tool_result_tokens: 3_000,
            keep_full_snapshots: 2,
            snapshot_slack: 4,
            keep_recent_results: 4,
            keep_screenshots: 1,
            screenshot_slack: 2,
            image_tokens: 280 + 1,
        }
    }

    /// The most prompt tokens allowed.
    pub fn max_prompt_tokens(&self) -> usize {
        self.budget_tokens.min(self.window_tokens).saturating_sub(self.reserve_output_tokens)
    }

    pub fn compact_threshold(&self) -> usize {
        (self.max_prompt_tokens() as f64 * f64::from(self.compact_at)) as usize
    }

    pub fn compact_target(&self) -> usize {
        (self.max_prompt_tokens() as f64 * f64::from(self.compact_to)) as usize
    }
}

/// Cuts `text` to at most `max_tokens`, keeping the head (two thirds) and the tail (one third)
/// around a marker that says how much was left out.
pub fn truncate_head_tail(text: &str, max_tokens: usize, counter: &dyn TokenCounter) -> String {
    let total = counter.count(text);
    if total <= max_tokens {
        return text.to_owned();
    }
    let marker = |omitted: usize| format!("\n[… {omitted} tokens omitted …]\n");
    let room = max_tokens.saturating_sub(counter.count(&marker(total)));
    let head_budget = room * 2 / 3;
    let tail_budget = room - head_budget;
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    // Longest head within budget (binary search over char boundaries).
    let (mut lo, mut hi) = (0, bounds.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if counter.count(&text[..bounds[mid]]) <= head_budget { lo = mid } else { hi = mid - 1 }
    }
    let head_end = bounds[lo];
    // Longest tail within budget that does not overlap the head.
    let (mut lo, mut hi) = (lo, bounds.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if counter.count(&text[bounds[mid]..]) <= tail_budget { hi = mid } else { lo = mid + 1 }
    }
    let tail_start = bounds[lo];
    let omitted = total.saturating_sub(counter.count(&text[..head_end]) + counter.count(&text[tail_start..]));
    format!("{}{}{}", &text[..head_end], marker(omitted), &text[tail_start..])
}

/// Tokens a step must prefill: those after the longest common prefix with the previous
/// prompt (what a KV cache keyed on the previous prompt cannot reuse).
pub fn prefill_tokens(previous: Option<&str>, next: &str, counter: &dyn TokenCounter) -> usize {
    let Some(prev) = previous else { return counter.count(next) };
    let common = prev
        .char_indices()
        .zip(next.chars())
        .find(|((_, a), b)| a != b)
        .map_or(prev.len().min(next.len()), |((i, _), _)| i);
    counter.count(next).saturating_sub(counter.count(&next[..common]))
}

/// What a history entry is, for compaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    /// The user's task or a later message (incl. steering): never dropped or shortened.
    User,
    /// A model turn (text and/or tool calls).
    Model,
    /// A tool result; `page` marks snapshots and page text, of which only the latest are kept.
    ToolResult { tool: String, page: bool, compacted: bool },
}

/// A message plus what compaction needs to know about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub message: Message,
    pub kind: EntryKind,
}

pub const SNAPSHOT_PLACEHOLDER: &str =
    "[Older page content removed to save space. Take a new snapshot or read the page again if you need it.]";
pub const RESULT_PLACEHOLDER: &str = "[Result removed to save space.]";
pub const SCREENSHOT_PLACEHOLDER: &str =
    "[Screenshot removed to save space. Take a new screenshot if you need to see the page.]";

/// The keys of the images an entry shows the model (its image parts' `image` field).
pub fn image_keys(entry: &Entry) -> Vec<String> {
    match &entry.message.content {
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Image { extra } => extra.get("image").and_then(|k| k.as_str()).map(str::to_owned),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The keys of the voice clips an entry holds (its audio parts' `audio` field).
pub fn clip_keys(entry: &Entry) -> Vec<String> {
    match &entry.message.content {
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Audio { extra } => extra.get("audio").and_then(|k| k.as_str()).map(str::to_owned),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// What stands where a voice clip was that is not kept (a restored conversation).
pub const VOICE_PLACEHOLDER: &str = "[The user spoke this request; the recording was not kept.]";

/// The entry's voice clips replaced by a note: its text parts stay.
pub fn remove_clips(entry: &mut Entry) {
    let Some(MessageContent::Parts(parts)) = &entry.message.content else { return };
    let mut text = String::from(VOICE_PLACEHOLDER);
    for part in parts {
        if let ContentPart::Text { text: t, .. } = part {
            text.push('\n');
            text.push_str(t);
        }
    }
    entry.message.content = Some(MessageContent::Text(text));
}

/// The entry's images replaced by a note: its text parts stay.
pub fn remove_images(entry: &mut Entry) {
    let Some(MessageContent::Parts(parts)) = &entry.message.content else { return };
    let mut text: String = parts
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    text.push('\n');
    text.push_str(SCREENSHOT_PLACEHOLDER);
    entry.message.content = Some(MessageContent::Text(text));
}

/// Every image but the latest `keep` becomes a note. Returns how many were removed.
pub fn prune_screenshots(entries: &mut [Entry], keep: usize) -> usize {
    let with_images: Vec<usize> =
        entries.iter().enumerate().filter(|(_, e)| !image_keys(e).is_empty()).map(|(i, _)| i).collect();
    let drop = with_images.len().saturating_sub(keep);
    for &i in &with_images[..drop] {
        remove_images(&mut entries[i]);
    }
    drop
}

/// Number of page results still in full.
pub fn full_page_results(entries: &[Entry]) -> usize {
    entries.iter().filter(|e| matches!(e.kind, EntryKind::ToolResult { page: true, compacted: false, .. })).count()
}

fn replace_content(entry: &mut Entry, text: &str) {
    entry.message.content = Some(MessageContent::Text(text.to_owned()));
    if let EntryKind::ToolResult { compacted, .. } = &mut entry.kind {
        *compacted = true;
    }
}

/// Level 1: every page result except the latest `keep` becomes a placeholder. Returns how
/// many were replaced.
pub fn prune_page_results(entries: &mut [Entry], keep: usize) -> usize {
    let full: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, EntryKind::ToolResult { page: true, compacted: false, .. }))
        .map(|(i, _)| i)
        .collect();
    let drop = full.len().saturating_sub(keep);
    for &i in &full[..drop] {
        replace_content(&mut entries[i], SNAPSHOT_PLACEHOLDER);
    }
    drop
}

/// Level 2: every tool result except the latest `keep_recent` becomes a placeholder.
pub fn prune_old_results(entries: &mut [Entry], keep_recent: usize) -> usize {
    let results: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, EntryKind::ToolResult { compacted: false, .. }))
        .map(|(i, _)| i)
        .collect();
    let drop = results.len().saturating_sub(keep_recent);
    for &i in &results[..drop] {
        replace_content(&mut entries[i], RESULT_PLACEHOLDER);
    }
    drop
}

/// Level 3: removes the oldest model step (a model turn and its tool results), never a user
/// message and never the last step. Returns false when nothing is left to remove.
pub fn drop_oldest_step(entries: &mut Vec<Entry>) -> bool {
    let Some(start) = entries.iter().position(|e| e.kind == EntryKind::Model) else { return false };
    let end = entries[start + 1..]
        .iter()
        .position(|e| !matches!(e.kind, EntryKind::ToolResult { .. }))
        .map_or(entries.len(), |p| start + 1 + p);
    if end >= entries.len() {
        return false; // keep the latest step: the model needs to see where it is
    }
    entries.drain(start..end);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approx_counter_is_deterministic() {
        let c = ApproxTokenCounter;
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("abcd"), 1);
        assert_eq!(c.count("abcde"), 2);
        assert_eq!(c.count("数据"), 2);
    }

    #[test]
    fn truncation_at_the_edges_of_the_budget() {
        let c = ApproxTokenCounter;
        let text: String = (0..400).map(|i| format!("w{i:03} ")).collect(); // 2000 chars = 500 tokens
        assert_eq!(c.count(&text), 500);
        assert_eq!(truncate_head_tail(&text, 500, &c), text, "exactly at the budget: unchanged");
        let cut = truncate_head_tail(&text, 499, &c);
        assert!(c.count(&cut) <= 499, "{}", c.count(&cut));
        assert!(cut.starts_with("w000 ") && cut.ends_with("w399 "));
        assert!(cut.contains("tokens omitted"));
        let small = truncate_head_tail(&text, 100, &c);
        assert!(c.count(&small) <= 100 && c.count(&small) >= 90, "{}", c.count(&small));
        let tiny = truncate_head_tail(&text, 5, &c);
        assert!(tiny.contains("omitted"));
        // Multi-byte text is cut on character boundaries.
        let zh = "数据".repeat(300);
        let cut = truncate_head_tail(&zh, 50, &c);
        assert!(c.count(&cut) <= 50);
    }

    #[test]
    fn budget_arithmetic() {
        let b = ContextBudget {
            window_tokens: 8192,
            budget_tokens: 100_000,
            reserve_output_tokens: 192,
            ..Default::default()
        };
        assert_eq!(b.max_prompt_tokens(), 8000);
        assert_eq!(b.compact_threshold(), 6800);
        assert_eq!(b.compact_target(), 4800);
    }

    #[test]
    fn prefill_counts_only_the_new_suffix() {
        let c = ApproxTokenCounter;
        assert_eq!(prefill_tokens(None, "abcdefgh", &c), 2);
        assert_eq!(prefill_tokens(Some("abcdefgh"), "abcdefghijkl", &c), 1);
        assert_eq!(prefill_tokens(Some("abcdefgh"), "abcdXXXXijkl", &c), 2);
        assert_eq!(prefill_tokens(Some("abcd"), "abcd", &c), 0);
    }

    fn result(tool: &str, page: bool, text: &str) -> Entry {
        Entry {
            message: Message::tool("id", tool, MessageContent::Text(text.into())),
            kind: EntryKind::ToolResult { tool: tool.into(), page, compacted: false },
        }
    }

    fn model() -> Entry {
        Entry { message: Message::assistant(""), kind: EntryKind::Model }
    }

    fn user(t: &str) -> Entry {
        Entry { message: Message::user(t), kind: EntryKind::User }
    }

    #[test]
    fn compaction_levels_keep_user_messages() {
        let mut e = vec![
            user("task: only vegetarian"),
            model(),
            result("snapshot", true, "S1"),
            model(),
            result("click", false, "ok"),
            model(),
            result("snapshot", true, "S2"),
            user("steer: cheaper"),
            model(),
            result("snapshot", true, "S3"),
        ];
        assert_eq!(full_page_results(&e), 3);
        assert_eq!(prune_page_results(&mut e, 2), 1);
        assert_eq!(e[2].message.text().as_deref(), Some(SNAPSHOT_PLACEHOLDER));
        assert_eq!(full_page_results(&e), 2);
        assert_eq!(prune_page_results(&mut e, 2), 0, "idempotent");
        assert_eq!(prune_old_results(&mut e, 1), 2);
        assert_eq!(e[9].message.text().as_deref(), Some("S3"));
        while drop_oldest_step(&mut e) {}
        let users: Vec<_> = e.iter().filter(|x| x.kind == EntryKind::User).map(|x| x.message.text().unwrap()).collect();
        assert_eq!(users, ["task: only vegetarian", "steer: cheaper"]);
        assert_eq!(e.last().unwrap().message.text().as_deref(), Some("S3"), "latest step kept");
    }
}
