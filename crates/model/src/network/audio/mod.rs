//! Gemma 4's audio input: the feature extractor (`features`: 16 kHz samples → log-mel frames, as
//! transformers computes them), the tower's configuration (`config`) and the tower itself
//! (`tower`: frames → soft tokens, which the decoder takes in place of the prompt's audio
//! placeholders, as it takes an image's); `prompt`: a clip encoded and its marker expanded.

pub mod config;
pub mod features;
pub mod prompt;
pub mod tower;

pub use config::AudioConfig;
pub use features::{AudioError, AudioFeatures, FeatureConfig, FeatureExtractor, MAX_SAMPLES, check_clip};
pub use tower::{AudioTower, audio_weight_prefixes, has_audio_weights};
