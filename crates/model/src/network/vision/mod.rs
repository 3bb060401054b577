//! Gemma 4's vision input: the image processor (`image`: pixels → the patches and positions the
//! tower reads), the tower's configuration (`config`) and the tower itself (`tower`: patches →
//! soft tokens, which the decoder takes in place of the prompt's image placeholders,
//! [`crate::gemma::SoftTokens`]); `prompt`: a rendered prompt's images encoded and its image markers
//! expanded for a session.

pub mod config;
pub mod image;
pub mod prompt;
pub mod tower;

pub use config::VisionConfig;
pub use image::{ImagePatches, ImageProcessor, RgbImage, SOFT_TOKEN_BUDGETS};
pub use tower::{VisionTower, has_vision_weights, vision_weight_prefixes};
