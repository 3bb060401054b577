//! The model crate's integration tests, one binary: each test file used to link (and monomorphize)
//! the whole Burn + wgpu stack again, which cost minutes of a cold build.

mod gguf_tiny;
mod parity;
mod published_layouts;
mod real_weights;
