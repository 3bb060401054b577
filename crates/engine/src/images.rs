//! A step's screenshots made ready for the model: each decoded from the PNG data URL the browser
//! gave, processed at the settings' budget and encoded by the vision tower, once (a task's later
//! prompts show the same screenshots again), then the prompt's image placeholders expanded to
//! their soft tokens.

use base64::Engine as _;
use hearth_agent::PromptImage;
use hearth_model::tokenizer::Tokenizer;
use hearth_model::vision::{RgbImage, VisionTower, prompt};
use hearth_model::{ModelError, PromptImages};

/// The largest screenshot decoded (an 8K screen at device scale 1; larger ones are refused).
const MAX_PIXELS: u64 = 7680 * 4320;

/// Encoded screenshots kept: about a task's worth (the agent keeps at most a few in its prompt).
const KEPT: usize = 8;

/// Why a step's images could not be made ready; the text goes to the agent as the model's
/// failure, so it says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ImagesError {
    #[error(
        "this model file cannot see images (it has no vision tower): choose a model with one, or install its vision weights"
    )]
    NoVision,
    #[error("a screenshot is not a PNG data URL")]
    NotADataUrl,
    #[error("a screenshot could not be read: {0}")]
    Decode(String),
    #[error("the prompt could not be tokenized: {0}")]
    Tokenize(String),
    #[error("the vision tower failed: {0}")]
    Model(#[from] ModelError),
}

/// Screenshots encoded by the tower, the most recently used last.
#[derive(Default)]
pub struct EncodedImages {
    entries: Vec<(u64, hearth_model::PromptImage)>,
}

impl EncodedImages {
    fn get_or_encode(
        &mut self,
        tower: &VisionTower,
        image: &PromptImage,
        budget: usize,
    ) -> Result<hearth_model::PromptImage, ImagesError> {
        let key = fnv(image.image.data_url.as_bytes()) ^ budget as u64;
        if let Some(at) = self.entries.iter().position(|(k, _)| *k == key) {
            let entry = self.entries.remove(at);
            let encoded = entry.1.clone();
            self.entries.push(entry);
            return Ok(encoded);
        }
        let rgb = decode_data_url(&image.image.data_url)?;
        let encoded = prompt::encode(tower, &rgb, budget)?;
        if self.entries.len() >= KEPT {
            self.entries.remove(0);
        }
        self.entries.push((key, encoded.clone()));
        Ok(encoded)
    }

    /// How many screenshots are held encoded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A prompt as the model takes it: its tokens, each image placeholder expanded to its image's
/// soft tokens, and the images (`None` without any).
pub struct PreparedPrompt {
    pub ids: Vec<u32>,
    pub images: Option<PromptImages>,
    /// Each image's soft tokens, in prompt order.
    pub soft_tokens: Vec<usize>,
}

/// Tokenizes `text` and makes its `images` (in placeholder order) ready with `tower` at `budget`.
pub fn prepare_prompt(
    tokenizer: &Tokenizer,
    tower: Option<&VisionTower>,
    cache: &mut EncodedImages,
    text: &str,
    images: &[PromptImage],
    budget: usize,
) -> Result<PreparedPrompt, ImagesError> {
    let ids = tokenizer.encode(text).map_err(|e| ImagesError::Tokenize(e.to_string()))?;
    if images.is_empty() {
        // A placeholder with no picture behind it would be read as an empty image.
        let placeholder = tokenizer.token_id(hearth_chat::syntax::IMAGE);
        let written = placeholder.map_or(0, |p| ids.iter().filter(|&&id| id == p).count());
        if written > 0 {
            return Err(ImagesError::Model(ModelError::Image(format!(
                "the prompt holds {written} image placeholders but no image"
            ))));
        }
        return Ok(PreparedPrompt { ids, images: None, soft_tokens: Vec::new() });
    }
    let tower = tower.ok_or(ImagesError::NoVision)?;
    let encoded = images.iter().map(|i| cache.get_or_encode(tower, i, budget)).collect::<Result<Vec<_>, _>>()?;
    let soft_tokens = encoded.iter().map(|e| e.soft_tokens.dims()[0]).collect();
    let (ids, images) = prompt::expand(tower, &ids, encoded)?;
    Ok(PreparedPrompt { ids, images: Some(images), soft_tokens })
}

/// A `data:image/png;base64,…` URL's picture.
fn decode_data_url(url: &str) -> Result<RgbImage, ImagesError> {
    let payload = url.strip_prefix("data:image/png;base64,").ok_or(ImagesError::NotADataUrl)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .map_err(|e| ImagesError::Decode(e.to_string()))?;
    RgbImage::from_png(&bytes, MAX_PIXELS).map_err(|e| ImagesError::Decode(e.to_string()))
}

/// FNV-1a: tells screenshots apart without keeping their bytes twice.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_url_that_is_not_png_is_refused_with_a_reason() {
        assert!(matches!(decode_data_url("data:image/jpeg;base64,AAAA"), Err(ImagesError::NotADataUrl)));
        assert!(matches!(decode_data_url("data:image/png;base64,!!!"), Err(ImagesError::Decode(_))));
        let not_png = base64::engine::general_purpose::STANDARD.encode(b"GIF89a....");
        let e = decode_data_url(&format!("data:image/png;base64,{not_png}")).unwrap_err();
        assert!(e.to_string().contains("not a PNG"), "{e}");
    }
}
