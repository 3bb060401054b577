//! What an image and a clip share on their way into a prompt. The chat template writes one
//! placeholder for each; the processor expands it into an opening token, one placeholder per
//! soft token and a closing token ([`MediaMarkers`]); the tower's soft tokens then stand in for
//! the placeholders' embeddings ([`PromptMedium`], [`crate::gemma::SoftTokens`]). Each medium
//! keeps its own tokens and its own errors ([`crate::ModelError::Image`], [`crate::ModelError::Clip`]).

use burn::tensor::Tensor;

use crate::config::token_ids::{TokenIdDisagreement, reconcile};
use crate::gemma::SoftTokens;

/// A medium a prompt can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// An image, through the vision tower.
    Image,
    /// A sound clip, through the audio tower.
    Clip,
}

impl Medium {
    /// Its tokens' pieces in Gemma 4's vocabulary: the placeholder, the opening, the closing.
    pub const fn pieces(self) -> [&'static str; 3] {
        match self {
            Medium::Image => ["<|image|>", "<|image>", "<image|>"],
            Medium::Clip => ["<|audio|>", "<|audio>", "<audio|>"],
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Medium::Image => "images",
            Medium::Clip => "clips",
        }
    }
}

/// A medium's tokens in the prompt: the placeholder each soft token replaces, and the tokens
/// that open and close a run of them (`<|image|>`, `<|image>`, `<image|>`; `<|audio|>`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaMarkers {
    pub medium: Medium,
    pub placeholder: u32,
    pub open: u32,
    pub close: u32,
}

impl MediaMarkers {
    /// The tokens as the model's vocabulary names them (a model without a config.json of its
    /// own: a GGUF file); `None` for a vocabulary without them, which is not a Gemma 4 that sees
    /// (or hears).
    pub fn from_vocabulary(medium: Medium, tokenizer: &crate::tokenizer::Tokenizer) -> Option<Self> {
        match medium.pieces().map(|piece| tokenizer.token_id(piece)) {
            [Some(placeholder), Some(open), Some(close)] => Some(Self { medium, placeholder, open, close }),
            _ => None,
        }
    }

    /// Each id replaced by the tokenizer's for the same piece where they differ (the tokenizer
    /// wins: [`crate::config::token_ids`]), config.json naming them `fields` (the placeholder's,
    /// the opening's, the closing's); the differences.
    pub fn reconcile(
        &mut self,
        fields: [&'static str; 3],
        tokenizer: &crate::tokenizer::Tokenizer,
    ) -> Vec<TokenIdDisagreement> {
        let [placeholder, open, close] = self.medium.pieces();
        [
            reconcile(fields[0], placeholder, &mut self.placeholder, tokenizer),
            reconcile(fields[1], open, &mut self.open, tokenizer),
            reconcile(fields[2], close, &mut self.close, tokenizer),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// A rendered prompt's ids with each medium the chat template wrote (one placeholder)
    /// expanded as Gemma 4's processor expands it: the opening token, one placeholder per soft
    /// token, the closing token. `soft_tokens[i]` is the i-th one's count; the template must have
    /// written as many.
    pub fn expand(&self, ids: &[u32], soft_tokens: &[usize]) -> Result<Vec<u32>, MediaCountError> {
        let written = ids.iter().filter(|&&t| t == self.placeholder).count();
        if written != soft_tokens.len() {
            return Err(MediaCountError { medium: self.medium, written, given: soft_tokens.len() });
        }
        let mut out = Vec::with_capacity(ids.len() + soft_tokens.iter().map(|n| n + 1).sum::<usize>());
        let mut counts = soft_tokens.iter();
        for &id in ids {
            match (id == self.placeholder).then(|| counts.next()).flatten() {
                Some(&n) => {
                    out.push(self.open);
                    out.extend(std::iter::repeat_n(self.placeholder, n));
                    out.push(self.close);
                }
                None => out.push(id),
            }
        }
        Ok(out)
    }
}

/// A prompt whose images (or clips) do not match those given for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the prompt shows {written} {} but {given} were given", .medium.plural())]
pub struct MediaCountError {
    pub medium: Medium,
    pub written: usize,
    pub given: usize,
}

/// An image or a clip in a prompt: its soft tokens `[n, h]`, one per placeholder of its run, the
/// placeholder (`<|image|>`, `<|audio|>`), and a key that tells it from others of its kind
/// (their placeholders are all the same token).
#[derive(Clone)]
pub struct PromptMedium {
    pub key: u64,
    pub placeholder: u32,
    pub soft_tokens: Tensor<2>,
}

/// A prompt's images and clips, in the order of their runs of placeholders.
#[derive(Clone, Default)]
pub struct PromptMedia {
    pub items: Vec<PromptMedium>,
}

impl PromptMedia {
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Several kinds in one prompt (a spoken request and the screenshots after it): each list in
    /// its own order, merged in the order `ids` shows their runs.
    pub fn interleaved(ids: &[u32], lists: Vec<PromptMedia>) -> PromptMedia {
        let mut queues: Vec<std::collections::VecDeque<PromptMedium>> =
            lists.into_iter().map(|list| list.items.into()).collect();
        let mut items = Vec::new();
        for (i, &t) in ids.iter().enumerate() {
            if i > 0 && ids[i - 1] == t {
                continue;
            }
            if let Some(queue) = queues.iter_mut().find(|q| q.front().is_some_and(|m| m.placeholder == t)) {
                items.extend(queue.pop_front());
            }
        }
        // Any left over: a count that does not match is the model's to report.
        items.extend(queues.into_iter().flatten());
        PromptMedia { items }
    }

    pub(crate) fn placeholders(&self) -> Vec<u32> {
        let mut placeholders: Vec<u32> = self.items.iter().map(|i| i.placeholder).collect();
        placeholders.sort_unstable();
        placeholders.dedup();
        placeholders
    }

    /// The soft tokens of the placeholders in `tokens[range]` (`None` when there are none).
    pub(crate) fn soft_tokens(&self, tokens: &[u32], range: std::ops::Range<usize>) -> Option<SoftTokens> {
        if self.is_empty() {
            return None;
        }
        let placeholders = self.placeholders();
        let before = tokens[..range.start].iter().filter(|t| placeholders.contains(t)).count();
        let count = tokens[range].iter().filter(|t| placeholders.contains(t)).count();
        if count == 0 {
            return None;
        }
        let rows = Tensor::cat(self.items.iter().map(|i| i.soft_tokens.clone()).collect(), 0);
        let h = rows.dims()[1];
        // A count that does not match is the model's to report (`Gemma::forward`).
        let end = (before + count).min(rows.dims()[0]);
        Some(SoftTokens { placeholders, rows: rows.slice([before.min(end)..end, 0..h]) })
    }

    /// Where the run of placeholders of medium `index` starts in `tokens`.
    pub(crate) fn run_start(&self, tokens: &[u32], index: usize) -> Option<usize> {
        let placeholders = self.placeholders();
        let mut runs = 0;
        for (i, &t) in tokens.iter().enumerate() {
            if placeholders.contains(&t) && (i == 0 || tokens[i - 1] != t) {
                if runs == index {
                    return Some(i);
                }
                runs += 1;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_medium_is_expanded_between_its_own_markers() {
        let image = MediaMarkers { medium: Medium::Image, placeholder: 9, open: 7, close: 8 };
        assert_eq!(image.expand(&[1, 9, 2, 9], &[2, 1]).unwrap(), [1, 7, 9, 9, 8, 2, 7, 9, 8]);
        assert_eq!(image.expand(&[1, 2], &[]).unwrap(), [1, 2]);
        let missing = image.expand(&[1, 9], &[]).unwrap_err();
        assert_eq!(missing, MediaCountError { medium: Medium::Image, written: 1, given: 0 });
        assert_eq!(missing.to_string(), "the prompt shows 1 images but 0 were given");
        let clip = MediaMarkers { medium: Medium::Clip, placeholder: 4, open: 3, close: 5 };
        assert_eq!(clip.expand(&[4, 9], &[2]).unwrap(), [3, 4, 4, 5, 9]);
        assert_eq!(clip.expand(&[1], &[3]).unwrap_err().to_string(), "the prompt shows 0 clips but 1 were given");
    }
}
