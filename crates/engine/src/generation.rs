//! An agent step's tokens as a stream: decoded by the shared model in the conversation's KV
//! cache, ended by the step's stops, and held to the grammar of calls to the agent's tools.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use crate::constrain::{CallConstraint, CallGrammar, ConstrainError, ToolSpec, VocabTrie};
use futures::stream::{self, LocalBoxStream, StreamExt};
use hearth_agent::{GenerationRequest, GenerationStats, ModelChunk, ModelError, builtin_tools};
use hearth_model::SamplingOptions;
use hearth_model::generate;
use hearth_model::tokenizer::Tokenizer;

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
                .with_calls(call_constraint(&model.tokenizer, request.tools.as_deref()))
                .drafting_with(model.drafter.as_deref().filter(|_| drafting), MAX_DRAFT);
            let (sampler, options) =
                decoding.options(request.max_new_tokens, &model.stop_tokens, prepared.images.as_ref());
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
                keep_call_constraint(&model.tokenizer, request.tools.as_deref(), calls);
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
    CALLS.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|cache| !owns(cache, tokenizer)) {
            let vocab = VocabTrie::from_tokenizer(tokenizer).ok().map(Arc::new);
            *cell = Some(CallCache { owner: Rc::downgrade(tokenizer), vocab, tools: None, grammar: None, idle: None });
        }
        let cache = cell.as_mut()?;
        let vocab = cache.vocab.clone()?;
        if cache.grammar.is_none() || cache.tools.as_deref() != tools {
            cache.grammar = call_grammar(tools).ok().map(Arc::new);
            cache.tools = tools.map(<[String]>::to_vec);
            cache.idle = None;
        }
        let grammar = cache.grammar.clone()?;
        Some(cache.idle.take().unwrap_or_else(|| CallConstraint::new(grammar, vocab)))
    })
}

/// Keeps `calls` (and the masks it computed) for the next generation with the same tokenizer
/// and tools.
pub fn keep_call_constraint(tokenizer: &Rc<Tokenizer>, tools: Option<&[String]>, calls: CallConstraint) {
    CALLS.with(|cell| {
        if let Some(cache) =
            cell.borrow_mut().as_mut().filter(|cache| owns(cache, tokenizer) && cache.tools.as_deref() == tools)
        {
            cache.idle = Some(calls);
        }
    });
}

/// The grammar of calls to the built-in tools named in `tools` (all of them for `None`).
fn call_grammar(tools: Option<&[String]>) -> Result<CallGrammar, ConstrainError> {
    let all = builtin_tools();
    let specs: Vec<ToolSpec> = all
        .iter()
        .filter(|t| tools.is_none_or(|names| names.contains(&t.name)))
        .map(|t| ToolSpec { name: &t.name, parameters: Some(&t.parameters) })
        .collect();
    Ok(CallGrammar::new(&specs)?)
}

#[cfg(test)]
mod tests {
    /// The model searches a GGUF vocabulary for the stop markers the chat syntax ends a turn
    /// and a call with: the two crates name the same ones.
    #[test]
    fn the_model_stops_on_the_chat_syntax_markers() {
        assert_eq!(hearth_model::config::GEMMA4_STOP_MARKERS, hearth_chat::syntax::STOP_MARKERS);
    }
}
