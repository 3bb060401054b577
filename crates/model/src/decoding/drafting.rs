//! What a generation drafts with (the source, how many tokens a round) and what drafting did: the
//! options and the record of speculative decoding, apart from its loop ([`crate::speculative`]),
//! so that the decode loops' shared module ([`crate::decode`]) can name them without depending on
//! the loop.

use crate::drafter::Drafter;

/// Where drafts come from.
pub enum DraftSource<'a> {
    /// Gemma 4's assistant model, reading the main model's cache.
    Assistant(&'a Drafter),
    /// A function of the tokens so far and the most it may propose: its guesses (prompt lookup;
    /// a test's scripted drafts). Treated as certain (q = 1 for the guessed token).
    Lookup(&'a mut dyn FnMut(&[u32], usize) -> Vec<u32>),
}

/// A generation's drafting: the source, how many tokens to draft, and what happened.
pub struct Speculation<'a> {
    pub source: DraftSource<'a>,
    pub length: DraftLength,
    pub stats: SpeculationStats,
}

impl<'a> Speculation<'a> {
    /// Drafting from `source`, at most `max_draft` tokens a round.
    pub fn new(source: DraftSource<'a>, max_draft: usize) -> Self {
        Speculation { source, length: DraftLength::new(max_draft), stats: SpeculationStats::default() }
    }
}

/// How many tokens a round drafts: two more after a round whose drafts were all accepted, one
/// fewer after one with a rejection (transformers' "heuristic" schedule), between 1 and `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftLength {
    pub current: usize,
    pub max: usize,
}

impl DraftLength {
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        DraftLength { current: max.min(4), max }
    }

    /// A fixed length (benchmarks).
    pub fn fixed(k: usize) -> Self {
        DraftLength { current: k.max(1), max: k.max(1) }
    }

    pub(crate) fn update(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 || self.current == self.max && accepted == drafted {
            return;
        }
        self.current = if accepted == drafted { self.current + 2 } else { self.current - 1 }.clamp(1, self.max);
    }
}

/// What drafting did in one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpeculationStats {
    /// Verifications run.
    pub rounds: usize,
    /// Drafted tokens verified.
    pub drafted: usize,
    /// Of those, accepted.
    pub accepted: usize,
}

impl SpeculationStats {
    /// The share of drafted tokens accepted (0 when none was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 { 0.0 } else { self.accepted as f64 / self.drafted as f64 }
    }

    /// Drafted tokens per round.
    pub fn mean_draft(&self) -> f64 {
        if self.rounds == 0 { 0.0 } else { self.drafted as f64 / self.rounds as f64 }
    }

    /// Tokens each verification produced (accepted drafts + the correction).
    pub fn tokens_per_round(&self) -> f64 {
        if self.rounds == 0 { 0.0 } else { (self.accepted + self.rounds) as f64 / self.rounds as f64 }
    }
}
