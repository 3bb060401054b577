//! The long task's scripted model: its replies (thoughts, tool calls through the shop, a long
//! answer), sized with the real tokenizer.

use std::fmt::Write as _;

use hearth_chat::syntax::THOUGHT_CLOSE;
use hearth_model::tokenizer::Tokenizer;
use serde_json::{Value, json};

use super::shop::{
    LISTING_FIRST_PRODUCT, LISTING_SEARCH, PRODUCT_BACK, PRODUCT_QUANTITY, PRODUCT_SIZE, PageKind, Product, QUERIES,
    Rng, SIZES, base,
};
use super::{LONG_ANSWER_TOKENS, LONG_PREAMBLE_TOKENS, LONG_THOUGHT_TOKENS, Reply, Task, thought_start};

/// Builds the scripted replies, sized with the real tokenizer.
pub(super) struct Script<'a> {
    pub(super) tokenizer: &'a Tokenizer,
    pub(super) thinking: bool,
}

/// A tool call as Gemma writes it (the chat crate's writer: the template's syntax).
fn call(name: &str, arguments: Value) -> String {
    hearth_chat::syntax::call_text(name, arguments.as_object().unwrap_or(&serde_json::Map::new()))
}

impl Script<'_> {
    pub(super) fn new(tokenizer: &Tokenizer, thinking: bool) -> Script<'_> {
        Script { tokenizer, thinking }
    }

    pub(super) fn tokens(&self, text: &str) -> usize {
        self.tokenizer.encode(text).map_or(text.len() / 4, |ids| ids.len())
    }

    /// A thought of at least `min_tokens`, about the shop task.
    pub(super) fn thought(&self, seed: u64, min_tokens: usize) -> String {
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
    pub(super) fn reply(&self, action: impl Into<String>, thought: impl FnOnce() -> String, body: String) -> Reply {
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
    pub(super) fn shop_task(&self, steps: usize) -> Task {
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
    pub(super) fn long_answer(&self, min_tokens: usize) -> String {
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
    pub(super) fn long_answer_tasks(&self) -> Vec<Task> {
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
