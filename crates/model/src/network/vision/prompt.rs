//! A prompt's images made ready for the decoder: each processed at the chosen budget and encoded
//! by the tower, the prompt's image markers expanded to their runs of placeholders, and the soft
//! tokens keyed by the image, so that a session reuses a cached image only while it is the same.

use super::image::RgbImage;
use super::tower::VisionTower;
use crate::error::ModelError;
use crate::media::{PromptMedia, PromptMedium};

/// `images` (in the order the rendered prompt shows them) encoded at `budget` soft tokens each,
/// and `ids` (the rendered prompt, one `<|image|>` per image) with each image expanded to its run.
pub fn prepare(
    tower: &VisionTower,
    ids: &[u32],
    images: &[RgbImage],
    budget: usize,
) -> Result<(Vec<u32>, PromptMedia), ModelError> {
    let encoded = images.iter().map(|image| encode(tower, image, budget)).collect::<Result<Vec<_>, _>>()?;
    expand(tower, ids, encoded)
}

/// One image processed at `budget` and encoded: its soft tokens `[n, h]`, keyed.
pub fn encode(tower: &VisionTower, image: &RgbImage, budget: usize) -> Result<PromptMedium, ModelError> {
    let patches = tower.config().processor(budget).process(image).map_err(|e| ModelError::Image(e.to_string()))?;
    let placeholder = tower.config().tokens.placeholder;
    Ok(PromptMedium { key: image_key(image, budget), placeholder, soft_tokens: tower.encode(&patches)? })
}

/// `ids` (one `<|image|>` per image) with each of `images` (encoded, in prompt order) expanded to
/// its run, and the images as the decoder takes them.
pub fn expand(
    tower: &VisionTower,
    ids: &[u32],
    images: Vec<PromptMedium>,
) -> Result<(Vec<u32>, PromptMedia), ModelError> {
    let counts: Vec<usize> = images.iter().map(|i| i.soft_tokens.dims()[0]).collect();
    let ids = tower.config().tokens.expand(ids, &counts).map_err(|e| ModelError::Image(e.to_string()))?;
    Ok((ids, PromptMedia { items: images }))
}

/// Tells images apart (FNV-1a over the size, the budget and the pixels).
pub fn image_key(image: &RgbImage, budget: usize) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let header = [image.width as u64, image.height as u64, budget as u64];
    for byte in header.iter().flat_map(|v| v.to_le_bytes()).chain(image.pixels.iter().copied()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
