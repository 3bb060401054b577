//! A prompt's clip made ready for the decoder: its features extracted and encoded by the tower,
//! the prompt's audio marker expanded to its run of placeholders.

use super::features::{FeatureConfig, FeatureExtractor};
use super::tower::AudioTower;
use crate::error::ModelError;
use crate::session::{PromptImage, PromptImages};

/// `samples` (16 kHz mono) encoded, and `ids` (the rendered prompt, one `<|audio|>`) with the
/// clip expanded to `<|audio>`, one `<|audio|>` per soft token, `<audio|>`. The decoder takes the
/// soft tokens as it takes an image's, at their placeholders.
pub fn prepare(tower: &AudioTower, ids: &[u32], samples: &[f32]) -> Result<(Vec<u32>, PromptImages), ModelError> {
    let extractor = FeatureExtractor::new(FeatureConfig::default()).map_err(|e| ModelError::Image(e.to_string()))?;
    let features = extractor.extract(samples).map_err(|e| ModelError::Image(e.to_string()))?;
    let soft_tokens = tower.encode(&features)?;
    let tokens = tower.config().tokens;
    let ids = tokens.expand(ids, &[soft_tokens.dims()[0]]).map_err(|e| ModelError::Image(e.to_string()))?;
    let key = samples.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, s| {
        s.to_le_bytes().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    });
    Ok((ids, PromptImages { placeholder: tokens.audio, images: vec![PromptImage { key, soft_tokens }] }))
}
