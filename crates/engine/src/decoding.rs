//! How one generation decodes, set up in one place for every caller (an agent step, a chat reply,
//! the call probe, `hearth generate`): the sampler, the constraint its tokens are held to (the
//! offered tools' call syntax), and the assistant's drafts (speculative decoding), from which the
//! model crate's [`GenerateOptions`] are made.

use hearth_model::decode::{GenerateOptions, TokenConstraint};
use hearth_model::drafter::Drafter;
use hearth_model::speculative::{DraftSource, Speculation};
use hearth_model::{PromptMedia, Sampler, SamplingOptions};

use crate::constrain::CallConstraint;

/// The most tokens the assistant drafts a round (the length adapts below it): past 8, a round's
/// draft steps cost more than the verification saves (benches/RESULTS.md).
pub const MAX_DRAFT: usize = 8;

/// A generation's decoding: built with [`Decoding::new`], then [`Decoding::with_calls`] and
/// [`Decoding::drafting_with`] as the caller wants; [`Decoding::options`] lends it to one run.
pub struct Decoding<'d> {
    sampler: Sampler,
    calls: Option<CallConstraint>,
    speculation: Option<Speculation<'d>>,
}

impl<'d> Decoding<'d> {
    /// Sampled with `sampling`, unconstrained, one token a step.
    pub fn new(sampling: SamplingOptions) -> Self {
        Decoding { sampler: Sampler::new(sampling), calls: None, speculation: None }
    }

    /// Tool calls held to `calls` (`None`: unconstrained).
    pub fn with_calls(mut self, calls: Option<CallConstraint>) -> Self {
        self.calls = calls;
        self
    }

    /// Drafted by `drafter` (when there is one), at most `max_draft` tokens a round.
    pub fn drafting_with(mut self, drafter: Option<&'d Drafter>, max_draft: usize) -> Self {
        self.speculation = drafter.map(|drafter| Speculation::new(DraftSource::Assistant(drafter), max_draft));
        self
    }

    /// The sampler and the options of one run: at most `max_tokens` tokens, ended by any of
    /// `stop_tokens`, `media` (images and clips) at the prompt's placeholders.
    pub fn options<'a>(
        &'a mut self,
        max_tokens: usize,
        stop_tokens: &'a [u32],
        media: Option<&'a PromptMedia>,
    ) -> (&'a mut Sampler, GenerateOptions<'a, 'd>) {
        let options = GenerateOptions {
            max_tokens,
            stop_tokens,
            tool_calls: self.calls.as_mut().map(|c| c as &mut dyn TokenConstraint),
            media,
            speculation: self.speculation.as_mut(),
        };
        (&mut self.sampler, options)
    }

    /// The call constraint, for the next generation to take up again (its tables are costly).
    pub fn into_calls(self) -> Option<CallConstraint> {
        self.calls
    }
}
