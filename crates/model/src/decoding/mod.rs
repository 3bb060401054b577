//! Tokens out: the [`tokenizer`], the next token chosen on the device ([`sampling`]), the decode
//! loops ([`decode`], [`generate`], [`speculative`]) and what a generation drafts with
//! ([`drafting`]).

pub mod decode;
pub mod drafting;
pub mod generate;
pub mod sampling;
pub mod speculative;
pub mod tokenizer;
