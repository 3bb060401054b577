//! An agent step's tokens as a stream: decoded by the shared model in the conversation's KV
//! cache, ended by the step's stops, and held to the grammar of calls to the agent's tools.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use crate::constrain::{CallConstraint, CallGrammar, ConstrainError, GrammarError, ToolSpec, VocabTrie};
use futures::stream::{self, LocalBoxStream, StreamExt};
use hearth_agent::{GenerationRequest, GenerationStats, ModelChunk, ModelError, builtin_tools};
use hearth_model::SamplingOptions;
use hearth_model::generate;
use hearth_model::tokenizer::Tokenizer;
use serde_json::Value;

use crate::decoding::{Decoding, MAX_DRAFT};
use crate::images::prepare_prompt;
use crate::shared::SharedModel;

/// Streams the Burn model's tokens for `request`. The generation runs inside the stream (polled
/// with it), so dropping the stream stops it; stop is checked between tokens.
pub fn generate_step(
    model: SharedModel,
    conversation: u64,
    sampling: SamplingOptions,
    image_budget: usize,
    drafting: bool,
    request: GenerationRequest,
) -> LocalBoxStream<'static, Result<ModelChunk, ModelError>> {
    let (sender, receiver) = futures::channel::mpsc::unbounded();
    let run = async move {
        let mut session = model.session.lock().await;
        session.use_conversation(conversation);
        let result = async {
            let prepared = prepare_prompt(
                &model.tokenizer,
                model.towers(),
                &mut model.encoded.borrow_mut(),
                &request.prompt,
                &request.images,
                &request.clips,
                image_budget,
            )
            .map_err(|e| e.to_string())?;
            let ids = prepared.ids;
            let mut decoding = Decoding::new(sampling)
                .with_calls(call_constraint_with(&model.tokenizer, request.tools.as_deref(), &request.page_tools))
                .drafting_with(model.drafter.as_deref().filter(|_| drafting), MAX_DRAFT);
            let (sampler, options) =
                decoding.options(request.max_new_tokens, &model.stop_tokens, prepared.media.as_ref());
            let mut stop = StopAfter::new(&model.tokenizer, &request.stop_after);
            let on_token = |id, text: &str| {
                if !text.is_empty() {
                    let _ = sender.unbounded_send(Ok(ModelChunk::Text(text.to_owned())));
                }
                // The token that ends the step is kept (the parser needs it), then decoding ends.
                if request.cancel.is_cancelled() || stop.after(id, text) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            let generation =
                generate::generate(&mut session, sampler, &model.tokenizer, &ids, options, model.clock_ms, on_token)
                    .await
                    .map_err(|e| e.to_string());
            if let Some(calls) = decoding.into_calls() {
                keep_call_constraint_with(&model.tokenizer, request.tools.as_deref(), &request.page_tools, calls);
            }
            generation
        }
        .await;
        let last = match result {
            Ok(g) => Ok(ModelChunk::Finished(GenerationStats {
                prompt_tokens: g.prompt_tokens,
                cached_prompt_tokens: g.prompt_tokens.saturating_sub(g.prefilled_tokens),
                completion_tokens: g.token_ids.len(),
                prefill_ms: g.prefill_ms,
                decode_ms: g.decode_ms,
                drafted_tokens: g.speculation.as_ref().map_or(0, |s| s.drafted),
                accepted_tokens: g.speculation.as_ref().map_or(0, |s| s.accepted),
            })),
            Err(message) => Err(ModelError(message)),
        };
        let _ = sender.unbounded_send(last);
    };
    // The driver yields nothing; it ends when the generation does, and so does the channel.
    let driver = stream::once(run).filter_map(|()| async { None });
    stream::select(receiver, driver).boxed_local()
}

/// Where a step ends: after any token that is one of the request's `stop_after` pieces, or, for
/// a piece the tokenizer has no single token for, after the text that completes it.
struct StopAfter {
    ids: Vec<u32>,
    texts: Vec<String>,
    /// The output so far, for the text pieces only.
    seen: String,
}

impl StopAfter {
    fn new(tokenizer: &Tokenizer, pieces: &[String]) -> Self {
        let (mut ids, mut texts) = (Vec::new(), Vec::new());
        for piece in pieces {
            match tokenizer.token_id(piece) {
                Some(id) => ids.push(id),
                None => texts.push(piece.clone()),
            }
        }
        StopAfter { ids, texts, seen: String::new() }
    }

    /// Whether decoding ends after token `id`, whose final text is `text`.
    fn after(&mut self, id: u32, text: &str) -> bool {
        if self.ids.contains(&id) {
            return true;
        }
        if self.texts.is_empty() {
            return false;
        }
        let from = self.seen.len();
        self.seen.push_str(text);
        hearth_agent::backend::stop_end(&self.texts, &self.seen, from).is_some()
    }
}

/// The call constraint of the loaded tokenizer and the offered tools, kept between generations
/// so that its masks (cached by grammar state: a string's first walk covers the whole
/// vocabulary) are computed once per conversation, not once per agent step. The vocabulary trie
/// outlives a change of the tools (the user switched one off).
struct CallCache {
    /// The Weak keeps the old tokenizer's allocation, so a new one never shares its address.
    owner: Weak<Tokenizer>,
    /// `None`: a tokenizer without Gemma 4's call tokens.
    vocab: Option<Arc<VocabTrie>>,
    /// The tools the grammar was built for (`None`: every built-in tool), and the grammar.
    tools: Option<Vec<String>>,
    /// The page's tools with their schemas, the grammar was built for.
    page_tools: Vec<(String, Value)>,
    grammar: Option<Arc<CallGrammar>>,
    /// The constraint between generations (taken while one runs).
    idle: Option<CallConstraint>,
}

thread_local! {
    static CALLS: RefCell<Option<CallCache>> = const { RefCell::new(None) };
}

fn owns(cache: &CallCache, tokenizer: &Rc<Tokenizer>) -> bool {
    std::ptr::eq(cache.owner.as_ptr(), Rc::as_ptr(tokenizer))
}

/// What holds the calls of one generation to `tools` (the names the prompt offers; `None`: every
/// built-in tool), if the model can write Gemma 4 calls. Built on the first generation with a
/// tokenizer (the grammar and the vocabulary trie), then reused with its masks while the tools
/// stay the same; give it back with [`keep_call_constraint`].
pub fn call_constraint(tokenizer: &Rc<Tokenizer>, tools: Option<&[String]>) -> Option<CallConstraint> {
    call_constraint_with(tokenizer, tools, &[])
}

/// [`call_constraint`] with the page's tools offered beside Hearth's (`page.<name>` and the
/// schema of its arguments).
pub fn call_constraint_with(
    tokenizer: &Rc<Tokenizer>,
    tools: Option<&[String]>,
    page_tools: &[(String, Value)],
) -> Option<CallConstraint> {
    CALLS.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|cache| !owns(cache, tokenizer)) {
            let vocab = VocabTrie::from_tokenizer(tokenizer).ok().map(Arc::new);
            *cell = Some(CallCache {
                owner: Rc::downgrade(tokenizer),
                vocab,
                tools: None,
                page_tools: Vec::new(),
                grammar: None,
                idle: None,
            });
        }
        let cache = cell.as_mut()?;
        let vocab = cache.vocab.clone()?;
        if cache.grammar.is_none() || cache.tools.as_deref() != tools || cache.page_tools != page_tools {
            cache.grammar = call_grammar(tools, page_tools).ok().map(Arc::new);
            cache.tools = tools.map(<[String]>::to_vec);
            cache.page_tools = page_tools.to_vec();
            cache.idle = None;
        }
        let grammar = cache.grammar.clone()?;
        Some(cache.idle.take().unwrap_or_else(|| CallConstraint::new(grammar, vocab)))
    })
}

/// Keeps `calls` (and the masks it computed) for the next generation with the same tokenizer
/// and tools.
pub fn keep_call_constraint(tokenizer: &Rc<Tokenizer>, tools: Option<&[String]>, calls: CallConstraint) {
    keep_call_constraint_with(tokenizer, tools, &[], calls);
}

/// [`keep_call_constraint`] for a constraint of [`call_constraint_with`].
pub fn keep_call_constraint_with(
    tokenizer: &Rc<Tokenizer>,
    tools: Option<&[String]>,
    page_tools: &[(String, Value)],
    calls: CallConstraint,
) {
    CALLS.with(|cell| {
        if let Some(cache) = cell
            .borrow_mut()
            .as_mut()
            .filter(|cache| owns(cache, tokenizer) && cache.tools.as_deref() == tools && cache.page_tools == page_tools)
        {
            cache.idle = Some(calls);
        }
    });
}

/// The grammar of calls to the built-in tools named in `tools` (all of them for `None`) and to
/// the page's tools: each page tool whose schema compiles is held to it, the others only to
/// their name (their arguments are free, and validated by the agent).
pub fn call_grammar(tools: Option<&[String]>, page_tools: &[(String, Value)]) -> Result<CallGrammar, ConstrainError> {
    let all = builtin_tools();
    let mut specs: Vec<ToolSpec> = all
        .iter()
        .filter(|t| tools.is_none_or(|names| names.contains(&t.name)))
        .map(|t| ToolSpec { name: &t.name, parameters: Some(&t.parameters) })
        .collect();
    let mut free = Vec::new();
    for (name, schema) in page_tools {
        let spec = ToolSpec { name, parameters: Some(schema) };
        match CallGrammar::new(&[spec]) {
            Ok(_) => specs.push(spec),
            Err(GrammarError::Schema { .. }) => free.push(name.as_str()),
            // A name the call syntax cannot write is not offered at all.
            Err(_) => {}
        }
    }
    Ok(CallGrammar::with_free(&specs, &free)?)
}

#[cfg(test)]
mod tests {
    use super::call_grammar;
    use crate::constrain::{CallState, Symbol};
    use hearth_agent::page::Neutralizer;
    use hearth_agent::page_tools::{PageToolInfo, page_tool_definition};
    use serde_json::json;

    fn page_tool(name: &str, schema: serde_json::Value) -> (String, serde_json::Value) {
        let info = PageToolInfo {
            name: name.into(),
            description: "A page's tool.".into(),
            input_schema: Some(schema),
            read_only: false,
            form: None,
            ask: false,
        };
        let def = page_tool_definition(&info, "https://shop.test/", &Neutralizer::default());
        (def.name, def.parameters)
    }

    /// A page tool's arguments are held to its schema as Hearth's own are: a wrong-typed value
    /// cannot be written; a schema the grammar cannot compile leaves the tool's name held to the
    /// list and its arguments free (the agent validates them).
    #[test]
    fn page_tools_are_constrained_by_their_schema_or_left_free() {
        let cart = page_tool(
            "add_to_cart",
            json!({"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}, "required": ["sku", "qty"]}),
        );
        let odd = page_tool("when", json!({"type": "object", "properties": {"at": {"oneOf": [{"type": "string"}]}}}));
        let g = call_grammar(Some(&["snapshot".to_owned(), cart.0.clone(), odd.0.clone()]), &[cart, odd]).unwrap();
        assert_eq!(g.tool_names(), ["snapshot", "page.add_to_cart", "page.when"]);
        let at_qty = CallState::start().after_bytes(&g, b"call:page.add_to_cart{qty:").expect("qty is declared");
        assert!(at_qty.next(&g, Symbol::Delim).is_none(), "a string where an integer goes cannot be written");
        assert!(at_qty.after_bytes(&g, b"-").is_none(), "nor a negative one (minimum 1)");
        let two = at_qty.after_bytes(&g, b"2").expect("an integer");
        assert!(two.after_bytes(&g, b"}").is_none(), "sku is required");
        assert!(CallState::start().after_bytes(&g, b"call:page.add_to_cart{colour:").is_none(), "undeclared");
        assert!(CallState::start().after_bytes(&g, b"call:page.other{").is_none(), "an unoffered name");
        let free = CallState::start().after_bytes(&g, b"call:page.when{").unwrap();
        assert!(free.free(), "an uncompilable schema leaves the arguments free");
    }
    /// The model searches a GGUF vocabulary for the stop markers the chat syntax ends a turn
    /// and a call with: the two crates name the same ones.
    #[test]
    fn the_model_stops_on_the_chat_syntax_markers() {
        assert_eq!(hearth_model::config::GEMMA4_STOP_MARKERS, hearth_chat::syntax::STOP_MARKERS);
    }
}
