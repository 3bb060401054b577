//! Token ids that both config.json and the tokenizer give: the image and audio markers
//! (`image_token_id` `<|image|>`, `boi_token_id` `<|image>`, `eoi_token_id` `<image|>`,
//! `audio_token_id` `<|audio|>`, `boa_token_id` `<|audio>`, `eoa_token_index` `<audio|>`), `<bos>`
//! and Gemma's stop tokens.
//!
//! The rule: **the tokenizer's id wins.** The tokenizer is what turns the chat template's markers
//! into the ids that Hearth then looks for (transformers' processor likewise writes the markers as
//! the tokenizer's text), so an id config.json gives, or the published model's default where it
//! gives none, is replaced by the tokenizer's id for the same piece when the two differ, and the
//! difference is returned as a [`TokenIdDisagreement`]. A piece the tokenizer lacks leaves
//! config.json's id.

use crate::tokenizer::Tokenizer;

/// config.json's `field` (or the published model's default for it) is `config`, but the
/// tokenizer has `piece` at `tokenizer`; the tokenizer's id is used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config.json's `{field}` is {config} but the tokenizer's `{piece}` is {tokenizer}: the tokenizer's id is used")]
pub struct TokenIdDisagreement {
    pub field: &'static str,
    pub piece: &'static str,
    pub config: u32,
    pub tokenizer: u32,
}

/// `id` (config.json's `field`) replaced by the tokenizer's id for `piece` where they differ.
pub(crate) fn reconcile(
    field: &'static str,
    piece: &'static str,
    id: &mut u32,
    tokenizer: &Tokenizer,
) -> Option<TokenIdDisagreement> {
    let theirs = tokenizer.token_id(piece)?;
    if theirs == *id {
        return None;
    }
    let disagreement = TokenIdDisagreement { field, piece, config: *id, tokenizer: theirs };
    log::warn!("config.json's {field} is {id}, but the tokenizer has {piece} at {theirs}: the tokenizer's id is used");
    *id = theirs;
    Some(disagreement)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;

    /// tiny-chat's tokenizer: `<bos>` 2, `<eos>` 1, `<|tool_response>` 50, `<|image|>` 60,
    /// `<|image>` 61, `<image|>` 62, `<|audio|>` 63, `<|audio>` 64, `<audio|>` 65, `<turn|>` 106.
    pub(crate) fn tiny_chat_tokenizer() -> Tokenizer {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-chat/tokenizer.json");
        Tokenizer::from_bytes(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A word-level tokenizer holding just `pieces` (each a special token at its id).
    pub(crate) fn tokenizer_of(pieces: &[(&str, u32)]) -> Tokenizer {
        let vocab: serde_json::Map<String, serde_json::Value> =
            pieces.iter().map(|&(piece, id)| (piece.to_string(), id.into())).collect();
        let added: Vec<serde_json::Value> = pieces
            .iter()
            .map(|&(piece, id)| {
                serde_json::json!({"id": id, "content": piece, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
            "pre_tokenizer": null, "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": pieces[0].0}
        });
        Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_tokenizers_id_wins_and_the_difference_is_reported() {
        let tokenizer = tiny_chat_tokenizer();
        let mut id = 125;
        let found = reconcile("eoa_token_index", "<audio|>", &mut id, &tokenizer).unwrap();
        assert_eq!(id, 65);
        assert_eq!(
            found,
            TokenIdDisagreement { field: "eoa_token_index", piece: "<audio|>", config: 125, tokenizer: 65 }
        );
        assert_eq!(
            found.to_string(),
            "config.json's `eoa_token_index` is 125 but the tokenizer's `<audio|>` is 65: the tokenizer's id is used"
        );
        // Agreement, and a piece the tokenizer lacks: config.json's id stays.
        assert_eq!(reconcile("eoa_token_index", "<audio|>", &mut id, &tokenizer), None);
        let mut video = 258_884;
        assert_eq!(reconcile("video_token_id", "<|video|>", &mut video, &tokenizer), None);
        assert_eq!(video, 258_884);
    }
}
