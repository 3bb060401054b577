//! Running the networks on a device: the GPU brought up and checked ([`gpu`], [`self_test`]), a
//! model and its cache across calls ([`session`]), the one-token step recorded and replayed
//! ([`step_recording`]), and where warnings go ([`warnings`]).

pub mod gpu;
pub mod self_test;
pub mod session;
pub mod step_recording;
pub mod warnings;
