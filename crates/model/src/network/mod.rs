//! The networks as the spec reads them: configuration → layers → forward, with shapes in the
//! comments. [`config`] → [`gemma`] (the decoder) → [`cache`] (its KV cache); the towers that turn
//! an image ([`vision`]) or a sound ([`audio`]) into soft tokens, sharing [`tower_weights`], and
//! what both media share in a prompt ([`media`]); and [`drafter`], Gemma 4's assistant.

pub mod audio;
pub mod cache;
pub mod config;
pub mod drafter;
pub mod gemma;
pub mod media;
pub(crate) mod tower_weights;
pub mod vision;
