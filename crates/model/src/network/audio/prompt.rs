//! A prompt's clips made ready for the decoder: each clip's features extracted and encoded by the
//! tower, the prompt's audio markers expanded to their runs of placeholders, the soft tokens keyed
//! by the clip (as a prompt's images are).

use super::features::{FeatureConfig, FeatureExtractor};
use super::tower::AudioTower;
use crate::error::ModelError;
use crate::media::{PromptMedia, PromptMedium};

/// `samples` (16 kHz mono) encoded, and `ids` (the rendered prompt, one `<|audio|>`) with the
/// clip expanded to `<|audio>`, one `<|audio|>` per soft token, `<audio|>`. The decoder takes the
/// soft tokens as it takes an image's, at their placeholders.
pub fn prepare(tower: &AudioTower, ids: &[u32], samples: &[f32]) -> Result<(Vec<u32>, PromptMedia), ModelError> {
    expand(tower, ids, vec![encode(tower, samples)?])
}

/// One clip (16 kHz mono) encoded: its soft tokens `[n, h]`, keyed.
pub fn encode(tower: &AudioTower, samples: &[f32]) -> Result<PromptMedium, ModelError> {
    let extractor = FeatureExtractor::new(FeatureConfig::default()).map_err(|e| ModelError::Clip(e.to_string()))?;
    let features = extractor.extract(samples).map_err(|e| ModelError::Clip(e.to_string()))?;
    let soft_tokens = tower.encode(&features)?;
    Ok(PromptMedium { key: clip_key(samples), placeholder: tower.config().tokens.placeholder, soft_tokens })
}

/// `ids` (one `<|audio|>` per clip) with each of `clips` (encoded, in prompt order) expanded to
/// its run, and the clips as the decoder takes them.
pub fn expand(
    tower: &AudioTower,
    ids: &[u32],
    clips: Vec<PromptMedium>,
) -> Result<(Vec<u32>, PromptMedia), ModelError> {
    let counts: Vec<usize> = clips.iter().map(|c| c.soft_tokens.dims()[0]).collect();
    let ids = tower.config().tokens.expand(ids, &counts).map_err(|e| ModelError::Clip(e.to_string()))?;
    Ok((ids, PromptMedia { items: clips }))
}

/// Tells clips apart (FNV-1a over the samples' bytes).
pub fn clip_key(samples: &[f32]) -> u64 {
    samples.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, s| {
        s.to_le_bytes().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    })
}
