//! An agent for a conversation, and the model behind its steps.

use futures::Stream;
use futures::stream::LocalBoxStream;
use hearth_agent::{
    Agent, AgentConfig, ApproxTokenCounter, Clock, ContextBudget, GenerationRequest, ModelBackend, ModelChunk,
    ModelError, TokenCounter, tools_for,
};
use hearth_chat::ChatTemplate;
use hearth_model::SamplingOptions;
use hearth_model::tokenizer::Tokenizer;
use hearth_protocol::TaskSettings;
use std::rc::Rc;

use crate::generation::generate_step;
use crate::shared::SharedModel;

/// A new agent that renders prompts with `template`, counts with `tokenizer` and fits its
/// prompts in `context_tokens` (the model's KV cache), configured by `settings`; `sees_images`:
/// the model has a vision tower and the tools can take screenshots (the vision tools are
/// offered).
pub fn new_agent(
    template: &ChatTemplate,
    tokenizer: Rc<Tokenizer>,
    context_tokens: usize,
    settings: &TaskSettings,
    sees_images: bool,
    clock: Box<dyn Clock>,
) -> Agent {
    let mut config = AgentConfig::default();
    config.budget = ContextBudget::for_context(context_tokens, config.max_new_tokens);
    apply_settings(&mut config, settings);
    Agent::new(template.clone(), tools_for(sees_images), config, Box::new(TokenizerCounter(tokenizer)), clock)
}

/// The user's settings, applied to an agent before each task.
pub fn apply_settings(config: &mut AgentConfig, settings: &TaskSettings) {
    config.max_iterations = settings.max_iterations.max(1) as usize;
    config.enable_thinking = settings.enable_thinking;
    // The answer's room comes out of the context (never more than half of it).
    config.max_new_tokens = (settings.max_new_tokens.max(1) as usize).min(config.budget.window_tokens / 2);
    config.budget.reserve_output_tokens = config.max_new_tokens;
    config.tool_modes = settings.tool_modes.clone();
    // An image costs its soft tokens beyond its placeholder, and its two boundary tokens.
    config.budget.image_tokens = image_budget(settings) + 1;
}

/// The settings' soft tokens per image, one of Gemma 4's budgets (the default when it is not one).
pub fn image_budget(settings: &TaskSettings) -> usize {
    let budget = settings.image_budget as usize;
    if hearth_model::vision::SOFT_TOKEN_BUDGETS.contains(&budget) {
        budget
    } else {
        hearth_protocol::default_image_budget() as usize
    }
}

/// The KV-cache conversation of a tab's tasks (chat replies have conversation 0).
pub fn tab_conversation(tab_id: u32) -> u64 {
    u64::from(tab_id) + 1
}

/// Exact token counts from the model's own tokenizer (the budget is in model tokens).
struct TokenizerCounter(Rc<Tokenizer>);

impl TokenCounter for TokenizerCounter {
    fn count(&self, text: &str) -> usize {
        self.0.encode(text).map_or_else(|_| ApproxTokenCounter.count(text), |ids| ids.len())
    }

    fn special_tokens(&self) -> Vec<String> {
        self.0.added_tokens()
    }
}

/// The model behind a task's steps: the shared Burn model, or in test builds and `hearth agent`
/// the scripted one.
pub enum TaskModel {
    Burn {
        model: SharedModel,
        /// Whose KV cache to use (one per conversation while memory allows).
        conversation: u64,
        sampling: SamplingOptions,
        /// Soft tokens per screenshot.
        image_budget: usize,
        /// Whether to draft with the model's assistant (when it has one).
        drafting: bool,
    },
    #[cfg(feature = "scripted")]
    Scripted(Rc<std::cell::RefCell<hearth_agent::scripted::ScriptedModel>>),
}

impl TaskModel {
    /// The Burn model, sampling as `settings` say (`seed` for a temperature above 0).
    pub fn burn(model: SharedModel, conversation: u64, settings: &TaskSettings, seed: u64) -> Self {
        let sampling = if settings.temperature > 0.0 {
            SamplingOptions { temperature: settings.temperature, top_k: 64, top_p: 0.95, seed }
        } else {
            SamplingOptions::greedy()
        };
        TaskModel::Burn {
            model,
            conversation,
            sampling,
            image_budget: image_budget(settings),
            drafting: settings.drafting,
        }
    }

    /// A step's chunks, owning what they need.
    pub fn step(&mut self, request: GenerationRequest) -> LocalBoxStream<'static, Result<ModelChunk, ModelError>> {
        match self {
            TaskModel::Burn { model, conversation, sampling, image_budget, drafting } => {
                generate_step(model.clone(), *conversation, *sampling, *image_budget, *drafting, request)
            }
            #[cfg(feature = "scripted")]
            TaskModel::Scripted(scripted) => Box::pin(scripted.borrow_mut().reply(request)),
        }
    }
}

impl ModelBackend for TaskModel {
    fn generate(&mut self, request: GenerationRequest) -> impl Stream<Item = Result<ModelChunk, ModelError>> {
        self.step(request)
    }
}

#[cfg(test)]
mod tests {
    /// The settings offer exactly the budgets the image processor takes.
    #[test]
    fn the_settings_budgets_are_the_processors() {
        let offered = hearth_protocol::IMAGE_BUDGETS.map(|b| b as usize);
        assert_eq!(offered, hearth_model::vision::SOFT_TOKEN_BUDGETS);
    }
}
