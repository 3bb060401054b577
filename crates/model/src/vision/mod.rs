//! Gemma 4's vision input. So far the image processor (`image.rs`): pixels to the patches and
//! positions the vision tower reads.

pub mod image;
