//! The CLI's integration tests, one binary (each test binary links the whole Burn + wgpu stack).

mod agent;
mod cli;
mod constrained_calls;
