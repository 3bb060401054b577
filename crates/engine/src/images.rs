//! A step's screenshots and spoken request made ready for the model: each screenshot decoded from
//! the PNG data URL the browser gave, processed at the settings' budget and encoded by the vision
//! tower, once (a task's later prompts show the same screenshots again); the request's clip
//! encoded by the audio tower; then the prompt's placeholders expanded to their soft tokens.

use base64::Engine as _;
use hearth_agent::{PromptClip, PromptImage};
use hearth_model::audio::{self, AudioTower};
use hearth_model::tokenizer::Tokenizer;
use hearth_model::vision::{RgbImage, VisionTower, prompt};
use hearth_model::{ModelError, PromptMedia};

// The clip the extension records (at most `PromptClip::MAX_SECONDS`) is one the tower takes.
const _: () = assert!(audio::MAX_SAMPLES == PromptClip::RATE * PromptClip::MAX_SECONDS);

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
    #[error(
        "this model cannot hear (it has no audio tower): type the request, or choose a model that hears (Gemma 4 E2B or E4B with its projector installed)"
    )]
    NoHearing,
    #[error("a screenshot is not a PNG data URL")]
    NotADataUrl,
    #[error("a screenshot could not be read: {0}")]
    Decode(String),
    #[error("the prompt could not be tokenized: {0}")]
    Tokenize(String),
    #[error("the vision tower failed: {0}")]
    Model(#[from] ModelError),
    #[error("the audio tower failed: {0}")]
    Audio(ModelError),
}

/// Screenshots encoded by the tower, the most recently used last.
#[derive(Default)]
pub struct EncodedImages {
    entries: Vec<(u64, hearth_model::PromptMedium)>,
}

impl EncodedImages {
    fn get_or_encode(
        &mut self,
        tower: &VisionTower,
        image: &PromptImage,
        budget: usize,
    ) -> Result<hearth_model::PromptMedium, ImagesError> {
        let key = fnv(image.image.data_url.as_bytes()) ^ budget as u64;
        self.cached(key, || {
            let rgb = decode_data_url(&image.image.data_url)?;
            Ok(prompt::encode(tower, &rgb, budget)?)
        })
    }

    /// A spoken request's clip encoded by the audio tower, once (every step of its task shows it).
    fn get_or_encode_clip(
        &mut self,
        tower: &AudioTower,
        clip: &PromptClip,
    ) -> Result<hearth_model::PromptMedium, ImagesError> {
        // Keyed apart from the screenshots' (whose keys mix in the budget).
        let key = audio::prompt::clip_key(&clip.samples).rotate_left(1) ^ 0xa0d1;
        self.cached(key, || audio::prompt::encode(tower, &clip.samples).map_err(ImagesError::Audio))
    }

    /// The entry under `key`, else `encode`'s, kept (the least recently used goes beyond `KEPT`).
    fn cached(
        &mut self,
        key: u64,
        encode: impl FnOnce() -> Result<hearth_model::PromptMedium, ImagesError>,
    ) -> Result<hearth_model::PromptMedium, ImagesError> {
        if let Some(at) = self.entries.iter().position(|(k, _)| *k == key) {
            let entry = self.entries.remove(at);
            let encoded = entry.1.clone();
            self.entries.push(entry);
            return Ok(encoded);
        }
        let encoded = encode()?;
        if self.entries.len() >= KEPT {
            self.entries.remove(0);
        }
        self.entries.push((key, encoded.clone()));
        Ok(encoded)
    }

    /// How many screenshots and clips are held encoded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A prompt as the model takes it: its tokens, each placeholder expanded to its image's or clip's
/// soft tokens, and the images and clips (`None` without any).
pub struct PreparedPrompt {
    pub ids: Vec<u32>,
    pub media: Option<PromptMedia>,
    /// Each image's soft tokens, in prompt order.
    pub soft_tokens: Vec<usize>,
    /// Each clip's soft tokens, in prompt order.
    pub clip_tokens: Vec<usize>,
}

/// The towers a prompt's media go through.
#[derive(Clone, Copy, Default)]
pub struct Towers<'a> {
    pub vision: Option<&'a VisionTower>,
    pub audio: Option<&'a AudioTower>,
}

/// Tokenizes `text` and makes its `images` (in placeholder order) ready with the vision tower at
/// `budget`, and its `clips` with the audio tower.
pub fn prepare_prompt(
    tokenizer: &Tokenizer,
    towers: Towers,
    cache: &mut EncodedImages,
    text: &str,
    images: &[PromptImage],
    clips: &[PromptClip],
    budget: usize,
) -> Result<PreparedPrompt, ImagesError> {
    let mut ids = tokenizer.encode(text).map_err(|e| ImagesError::Tokenize(e.to_string()))?;
    // A placeholder with nothing behind it would be read as an empty image or clip.
    for (piece, given, kind) in
        [(hearth_chat::syntax::IMAGE, images.len(), "image"), (hearth_chat::syntax::AUDIO, clips.len(), "clip")]
    {
        let placeholder = tokenizer.token_id(piece);
        let written = placeholder.map_or(0, |p| ids.iter().filter(|&&id| id == p).count());
        if given == 0 && written > 0 {
            let why = format!("the prompt holds {written} {kind} placeholders but no {kind}");
            let error = if kind == "clip" { ModelError::Clip(why) } else { ModelError::Image(why) };
            return Err(ImagesError::Model(error));
        }
    }
    let mut lists = Vec::new();
    let mut clip_tokens = Vec::new();
    if !clips.is_empty() {
        let tower = towers.audio.ok_or(ImagesError::NoHearing)?;
        let encoded = clips.iter().map(|c| cache.get_or_encode_clip(tower, c)).collect::<Result<Vec<_>, _>>()?;
        clip_tokens = encoded.iter().map(|e| e.soft_tokens.dims()[0]).collect();
        let (expanded, heard) = audio::prompt::expand(tower, &ids, encoded).map_err(ImagesError::Audio)?;
        ids = expanded;
        lists.push(heard);
    }
    let mut soft_tokens = Vec::new();
    if !images.is_empty() {
        let tower = towers.vision.ok_or(ImagesError::NoVision)?;
        let encoded = images.iter().map(|i| cache.get_or_encode(tower, i, budget)).collect::<Result<Vec<_>, _>>()?;
        soft_tokens = encoded.iter().map(|e| e.soft_tokens.dims()[0]).collect();
        let (expanded, seen) = prompt::expand(tower, &ids, encoded)?;
        ids = expanded;
        lists.push(seen);
    }
    let images = match lists.len() {
        0 => None,
        1 => lists.pop(),
        _ => Some(PromptMedia::interleaved(&ids, lists)),
    };
    Ok(PreparedPrompt { ids, media: images, soft_tokens, clip_tokens })
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
