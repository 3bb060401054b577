//! SHA-256 that can be fed piece by piece, for JavaScript: WebCrypto's `digest` only takes a whole
//! buffer, and a model file (gigabytes) is checked as its parts arrive.

use sha2::Digest;
use wasm_bindgen::prelude::*;

/// An incremental SHA-256: `update` with each piece in order, then `finalize` for the hex digest.
#[wasm_bindgen]
#[derive(Default)]
pub struct Sha256(sha2::Sha256);

#[wasm_bindgen]
impl Sha256 {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Sha256 {
        Sha256::default()
    }

    /// Adds the next bytes (JavaScript passes a Uint8Array; it is copied into wasm memory).
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest as lowercase hex; the object is consumed (freed) by this call.
    pub fn finalize(self) -> String {
        self.0.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        let empty = Sha256::new().finalize();
        assert_eq!(empty, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let mut abc = Sha256::new();
        abc.update(b"abc");
        assert_eq!(abc.finalize(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn pieces_hash_like_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut whole = Sha256::new();
        whole.update(&data);
        let mut pieces = Sha256::new();
        for chunk in data.chunks(997) {
            pieces.update(chunk);
        }
        assert_eq!(pieces.finalize(), whole.finalize());
    }

    /// The test model's manifest pins the fixture's real bytes (models/pin.mjs wrote it).
    #[test]
    fn tiny_chat_manifest_matches_the_fixture() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let text = std::fs::read_to_string(root.join("models/test/tiny-chat.json")).unwrap();
        let manifest: hearth_protocol::ModelManifest = serde_json::from_str(&text).unwrap();
        for file in &manifest.files {
            let bytes = std::fs::read(root.join("crates/model/fixtures/tiny-chat").join(&file.path)).unwrap();
            let mut hash = Sha256::new();
            hash.update(&bytes);
            assert_eq!(file.size, Some(bytes.len() as u64), "{}", file.path);
            assert_eq!(file.sha256.as_deref(), Some(hash.finalize().as_str()), "{}: run models/pin.mjs", file.path);
        }
    }
}
