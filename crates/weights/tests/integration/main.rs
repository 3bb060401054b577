//! The weights crate's integration tests, one binary.

mod gguf_fixture;
mod mlx_fixture;
