//! The one door into a model, for the browser and the terminal alike: [`Engine::load`] builds it
//! from any source of bytes (the browser's model store, bytes given whole, files on disk through
//! [`crate::native`]); [`Engine::reply`] answers one request (a chat reply, `hearth generate`);
//! [`Engine::task`] is the model behind an agent's steps; [`Engine::probe`] decodes a tool call
//! with and without the call constraint (the tests' probe). A request becomes a generation in one
//! place, [`Engine::plan`]: its prompt's tokens, options, stop ids and constraint, whoever asked.

use std::ops::ControlFlow;
use std::sync::Arc;

use burn::tensor::Device;
use hearth_chat::{ContentPart, Message, MessageContent, RenderRequest, Tool};
use hearth_model::decode::Generation;
use hearth_model::generate;
use hearth_model::vision::RgbImage;
use hearth_model::{DeviceMemory, PromptMedia, SamplingOptions};
use hearth_protocol::{GenerateRequest, ModelInfo, TaskSettings};

use crate::constrain::{CallConstraint, CallGrammar, VocabTrie};
use crate::decoding::{Decoding, MAX_DRAFT};
use crate::loading::{self, LoadContext, LoadFailure, ModelPayload, ReadRange};
use crate::shared::SharedModel;
use crate::task::TaskModel;

/// The KV-cache conversation of chat replies (the browser's `generate`, `hearth generate`); agent
/// tasks use their tab's ([`crate::tab_conversation`]).
pub const CHAT_CONVERSATION: u64 = 0;

/// A loaded model and what its load reported.
#[derive(Clone)]
pub struct Engine {
    model: SharedModel,
    info: ModelInfo,
}

/// What the host gives a load besides the model's bytes.
pub struct Host {
    /// The device's memory, which sizes the KV caches.
    pub memory: DeviceMemory,
    /// A monotonic clock in milliseconds (the load's time, the generations' timings).
    pub clock_ms: fn() -> f64,
    /// The wasm instance's linear memory (0 natively), read after the load.
    pub wasm_memory_bytes: fn() -> u64,
    /// The most conversations whose KV caches are kept at once (fewer when memory holds fewer).
    pub max_conversations: usize,
}

impl Engine {
    /// Builds the model `payload` describes on `device`; `on_progress(done, total)` before each
    /// of the decoder's load steps. A tower or an assistant that fails leaves the model without
    /// it: [`Engine::info`] says why.
    pub async fn load<R: ReadRange>(
        payload: ModelPayload<R>,
        device: &Device,
        host: &Host,
        on_progress: &dyn Fn(usize, usize),
    ) -> Result<Engine, LoadFailure> {
        let start = (host.clock_ms)();
        let name = payload.name.clone();
        let loaded = loading::load(payload, device, on_progress).await?;
        let context = LoadContext {
            name,
            memory: host.memory,
            load_ms: (host.clock_ms)() - start,
            wasm_memory_bytes: (host.wasm_memory_bytes)(),
            clock_ms: host.clock_ms,
        };
        let (model, info) = loaded.share(context, host.max_conversations);
        Ok(Engine { model, info })
    }

    /// The model as chat replies and agent tasks share it.
    pub fn model(&self) -> &SharedModel {
        &self.model
    }

    /// What the load reported (the towers' and the assistant's failures included).
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The model behind an agent's steps in `conversation`, sampling as `settings` say.
    pub fn task(&self, conversation: u64, settings: &TaskSettings, seed: u64) -> TaskModel {
        TaskModel::burn(self.model.clone(), conversation, settings, seed)
    }

    /// How `request` is decoded: the one translation of a request into a generation, for every
    /// caller.
    pub fn plan(&self, request: &Reply) -> Result<Plan, String> {
        let model = &self.model;
        let prompt = match &request.prompt {
            ReplyPrompt::Raw(text) => text.clone(),
            ReplyPrompt::Chat(chat) => {
                // The images (or the clip) first, then the question, as Gemma 4's documentation
                // shows them.
                let mut parts: Vec<ContentPart> =
                    chat.images.iter().map(|_| ContentPart::Image { extra: serde_json::Map::new() }).collect();
                if chat.clip.is_some() {
                    parts.push(ContentPart::Audio { extra: serde_json::Map::new() });
                }
                let message = if parts.is_empty() {
                    Message::user(chat.text.clone())
                } else {
                    parts.push(ContentPart::Text { text: chat.text.clone(), extra: serde_json::Map::new() });
                    Message { content: Some(MessageContent::Parts(parts)), ..Message::user("") }
                };
                let messages = [message];
                let render = RenderRequest {
                    messages: &messages,
                    tools: &chat.tools,
                    enable_thinking: false,
                    preserve_thinking: false,
                    add_generation_prompt: true,
                };
                let mut text = model.template.render(&render).map_err(|e| e.to_string())?;
                if chat.force_call {
                    text.push_str(hearth_chat::syntax::CALL_OPEN);
                }
                text
            }
        };
        let mut prompt_ids = model.tokenizer.encode(&prompt).map_err(|e| e.to_string())?;
        // Raw text gets the BOS token the chat template would have written.
        if matches!(request.prompt, ReplyPrompt::Raw(_)) && prompt_ids.first() != Some(&model.bos_token_id) {
            prompt_ids.insert(0, model.bos_token_id);
        }
        let sampling = request.sampling;
        // Greedy is greedy whatever the other options say.
        let sampling =
            if sampling.temperature <= 0.0 || sampling.top_k == 1 { SamplingOptions::greedy() } else { sampling };
        let calls = match &request.prompt {
            ReplyPrompt::Chat(ChatPrompt { calls: Some(grammar), .. }) => {
                Some(grammar.tool_names().iter().map(|name| name.to_string()).collect())
            }
            _ => None,
        };
        Ok(Plan {
            prompt,
            prompt_ids,
            max_tokens: request.max_tokens,
            stop_tokens: model.stop_tokens.to_vec(),
            sampling,
            calls,
            max_draft: request.max_draft.filter(|_| model.drafter.is_some()),
            conversation: request.conversation,
        })
    }

    /// `request` planned ([`Engine::plan`]) and made ready to decode: its images and clip encoded
    /// by the towers and put at their placeholders, its call constraint built.
    pub fn prepare(&self, request: &Reply) -> Result<Prepared, String> {
        let plan = self.plan(request)?;
        let model = &self.model;
        let mut ids = plan.prompt_ids.clone();
        let mut prompt_media = None;
        let mut media = None;
        if let ReplyPrompt::Chat(chat) = &request.prompt {
            if !chat.images.is_empty() {
                let tower = model.vision.as_deref().ok_or(crate::images::ImagesError::NoVision.to_string())?;
                let start = (model.clock_ms)();
                let (expanded, encoded) =
                    hearth_model::vision::prompt::prepare(tower, &ids, &chat.images, chat.image_budget)
                        .map_err(|e| e.to_string())?;
                let soft_tokens = encoded.items.iter().map(|i| i.soft_tokens.dims()[0]).sum();
                media = Some(Media::Images { count: chat.images.len(), soft_tokens, ms: (model.clock_ms)() - start });
                (ids, prompt_media) = (expanded, Some(encoded));
            }
            if let Some(samples) = &chat.clip {
                let tower = model.audio.as_deref().ok_or(crate::images::ImagesError::NoHearing.to_string())?;
                let start = (model.clock_ms)();
                let (expanded, heard) =
                    hearth_model::audio::prompt::prepare(tower, &ids, samples).map_err(|e| e.to_string())?;
                let soft_tokens = heard.items[0].soft_tokens.dims()[0];
                let seconds = samples.len() as f64 / 16_000.0;
                media = Some(Media::Clip { seconds, soft_tokens, ms: (model.clock_ms)() - start });
                (ids, prompt_media) = (expanded, Some(heard));
            }
        }
        let calls = match &request.prompt {
            ReplyPrompt::Chat(ChatPrompt { calls: Some(grammar), .. }) => {
                let start = (model.clock_ms)();
                let vocab = VocabTrie::from_tokenizer(&model.tokenizer).map_err(|e| e.to_string())?;
                let built = CallsBuilt { vocab_tokens: vocab.len(), ms: (model.clock_ms)() - start };
                Some((CallConstraint::new(grammar.clone(), Arc::new(vocab)), built))
            }
            _ => None,
        };
        Ok(Prepared { plan, ids, prompt_media, media, calls })
    }

    /// Answers `request`: planned, prepared and decoded in its conversation's KV cache;
    /// `on_token` hears each token (and may end the generation).
    pub async fn reply(
        &self,
        request: &Reply,
        on_token: impl FnMut(u32, &str) -> ControlFlow<()>,
    ) -> Result<Generation, String> {
        let prepared = self.prepare(request)?;
        self.run(prepared, on_token).await
    }

    /// Decodes a request [`Engine::prepare`] made ready.
    pub async fn run(
        &self,
        prepared: Prepared,
        on_token: impl FnMut(u32, &str) -> ControlFlow<()>,
    ) -> Result<Generation, String> {
        let model = &self.model;
        let Prepared { plan, ids, prompt_media, calls, .. } = prepared;
        let mut session = model.session.lock().await;
        session.use_conversation(plan.conversation);
        let mut decoding = Decoding::new(plan.sampling).with_calls(calls.map(|(calls, _)| calls)).drafting_with(
            model.drafter.as_deref().filter(|_| plan.max_draft.is_some()),
            plan.max_draft.unwrap_or(MAX_DRAFT),
        );
        let (sampler, options) = decoding.options(plan.max_tokens, &plan.stop_tokens, prompt_media.as_ref());
        generate::generate(&mut session, sampler, &model.tokenizer, &ids, options, model.clock_ms, on_token)
            .await
            .map_err(|e| e.to_string())
    }

    /// Test builds' probe of the call constraint: see [`crate::probe`].
    pub async fn probe(
        &self,
        seed: u32,
        max_tokens: u32,
        free_tokens: u32,
        render_tools: bool,
    ) -> Result<crate::probe::Probe, String> {
        crate::probe::run(&self.model, seed, max_tokens, free_tokens, render_tools).await
    }
}

/// One request for a reply, whoever asks.
pub struct Reply {
    pub prompt: ReplyPrompt,
    /// At most this many new tokens.
    pub max_tokens: usize,
    pub sampling: SamplingOptions,
    /// Draft with the model's assistant (when it has one), at most this many tokens a round.
    pub max_draft: Option<usize>,
    /// Whose KV cache to use.
    pub conversation: u64,
}

/// What the reply answers.
pub enum ReplyPrompt {
    /// Text as it is (the BOS token put in front when it is not there).
    Raw(String),
    /// A user turn, rendered by the model's chat template.
    Chat(ChatPrompt),
}

/// A user turn and what comes with it.
#[derive(Default)]
pub struct ChatPrompt {
    pub text: String,
    /// Tools the template declares.
    pub tools: Vec<Tool>,
    /// The calls the reply writes are held to this grammar.
    pub calls: Option<Arc<CallGrammar>>,
    /// The reply starts inside a call (`<|tool_call>` ends the prompt).
    pub force_call: bool,
    /// Images the model sees before the text, at `image_budget` soft tokens each.
    pub images: Vec<RgbImage>,
    pub image_budget: usize,
    /// A clip (16 kHz mono) the model hears before the text.
    pub clip: Option<Vec<f32>>,
}

impl From<&GenerateRequest> for Reply {
    /// The browser's chat reply: a user turn, greedy, drafted when the request asks.
    fn from(request: &GenerateRequest) -> Self {
        Reply {
            prompt: ReplyPrompt::Chat(ChatPrompt { text: request.prompt.clone(), ..ChatPrompt::default() }),
            max_tokens: request.max_tokens as usize,
            sampling: SamplingOptions::greedy(),
            max_draft: request.drafting.then_some(MAX_DRAFT),
            conversation: CHAT_CONVERSATION,
        }
    }
}

/// A request as the model decodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The prompt's text (rendered, for a chat).
    pub prompt: String,
    /// Its tokens, before images and clips are expanded.
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    /// The model's stop ids.
    pub stop_tokens: Vec<u32>,
    pub sampling: SamplingOptions,
    /// The tools the calls are held to (`None`: unconstrained).
    pub calls: Option<Vec<String>>,
    /// Drafted by the assistant, at most this many tokens a round (`None`: not drafted).
    pub max_draft: Option<usize>,
    pub conversation: u64,
}

/// A request ready to decode.
pub struct Prepared {
    pub plan: Plan,
    /// The prompt's tokens, its placeholders expanded.
    pub ids: Vec<u32>,
    prompt_media: Option<PromptMedia>,
    /// What the towers made of the request's media.
    pub media: Option<Media>,
    calls: Option<(CallConstraint, CallsBuilt)>,
}

impl Prepared {
    /// How the call constraint was built, when there is one.
    pub fn calls_built(&self) -> Option<CallsBuilt> {
        self.calls.as_ref().map(|(_, built)| *built)
    }
}

/// The call constraint's vocabulary trie.
#[derive(Debug, Clone, Copy)]
pub struct CallsBuilt {
    pub vocab_tokens: usize,
    pub ms: f64,
}

/// A request's media, encoded.
#[derive(Debug, Clone, Copy)]
pub enum Media {
    Images { count: usize, soft_tokens: usize, ms: f64 },
    Clip { seconds: f64, soft_tokens: usize, ms: f64 },
}
