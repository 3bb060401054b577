//! Hugging Face tensor names for a GGUF file's tensors, so that a model loader written against
//! `config.json` checkpoints (`model.layers.N.self_attn.q_proj.weight`) reads a GGUF unchanged.
//!
//! The names are those of llama.cpp's converter (`convert_hf_to_gguf.py` with gguf-py's
//! `tensor_mapping.py`), which transformers' GGUF loader also reverses. Shapes need no change: a
//! GGUF's row-major shape (its `ne` reversed) is already Hugging Face's `[out, in]`.
//!
//! Gemma 1–3 RMSNorms scale by `1 + w`; llama.cpp's converter stores `1 + w` (every tensor whose
//! name ends in `norm.weight`) so that its runtime can multiply by the stored value. We subtract
//! the 1 again, as transformers does, so the loaded values are the checkpoint's own `w`. Gemma 4
//! scales by `w` and its converter stores `w` unchanged.

/// Where one GGUF tensor goes.
#[derive(Debug, Clone, PartialEq)]
pub struct HfTensor {
    pub name: String,
    /// Subtracted from every value after dequantizing (1 for Gemma 1–3 norms, else 0).
    pub subtract: f32,
}

/// Top-level tensors: (GGUF name, Hugging Face name).
const GLOBAL: &[(&str, &str)] = &[
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
    // Gemma 4 per-layer embeddings.
    ("per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight"),
    ("per_layer_model_proj.weight", "model.per_layer_model_projection.weight"),
    ("per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight"),
];

/// Per-layer tensors `blk.N.<gguf>` → `model.layers.N.<hf>`.
const LAYER: &[(&str, &str)] = &[
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("attn_norm.weight", "input_layernorm.weight"),
    ("post_attention_norm.weight", "post_attention_layernorm.weight"),
    // llama.cpp calls Gemma's pre-feedforward norm `ffn_norm` (FFN_PRE_NORM).
    ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
    ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
    // Gemma 4.
    ("inp_gate.weight", "per_layer_input_gate.weight"),
    ("proj.weight", "per_layer_projection.weight"),
    ("post_norm.weight", "post_per_layer_input_norm.weight"),
    // HF's `layer_scalar` has no `.weight`; accept the name with and without one.
    ("layer_output_scale.weight", "layer_scalar"),
    ("layer_output_scale", "layer_scalar"),
];

/// Architectures whose GGUF norms hold `1 + w`.
const OFFSET_NORM_ARCHS: &[&str] = &["gemma", "gemma2", "gemma3"];
/// Architectures this mapping is written for.
const GEMMA_ARCHS: &[&str] = &["gemma", "gemma2", "gemma3", "gemma4"];

/// The Hugging Face name of GGUF tensor `name` in a file of architecture `arch`, or `None` when
/// it has none (a tensor only llama.cpp uses, like Gemma 4's `rope_freqs`, or another
/// architecture: its tensors keep their GGUF names).
pub fn hf_tensor(arch: &str, name: &str) -> Option<HfTensor> {
    if !GEMMA_ARCHS.contains(&arch) {
        return None;
    }
    let hf = if let Some(&(_, hf)) = GLOBAL.iter().find(|(g, _)| *g == name) {
        hf.to_string()
    } else {
        let rest = name.strip_prefix("blk.")?;
        let (index, part) = rest.split_once('.')?;
        let index: usize = index.parse().ok()?;
        let &(_, hf) = LAYER.iter().find(|(g, _)| *g == part)?;
        format!("model.layers.{index}.{hf}")
    };
    let subtract = if OFFSET_NORM_ARCHS.contains(&arch) && name.ends_with("norm.weight") { 1.0 } else { 0.0 };
    Some(HfTensor { name: hf, subtract })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma3_names_and_norm_offsets() {
        let hf = |n: &str| hf_tensor("gemma3", n).unwrap();
        assert_eq!(hf("token_embd.weight"), HfTensor { name: "model.embed_tokens.weight".into(), subtract: 0.0 });
        assert_eq!(hf("blk.17.attn_q.weight").name, "model.layers.17.self_attn.q_proj.weight");
        assert_eq!(hf("blk.0.attn_output.weight").name, "model.layers.0.self_attn.o_proj.weight");
        assert_eq!(hf("blk.3.ffn_norm.weight").name, "model.layers.3.pre_feedforward_layernorm.weight");
        for norm in ["output_norm.weight", "blk.2.attn_k_norm.weight", "blk.2.post_ffw_norm.weight"] {
            assert_eq!(hf(norm).subtract, 1.0, "{norm}");
        }
        assert_eq!(hf("blk.2.ffn_down.weight").subtract, 0.0);
        assert_eq!(hf_tensor("gemma3", "blk.x.attn_q.weight"), None);
        assert_eq!(hf_tensor("gemma3", "blk.1.unknown.weight"), None);
        assert_eq!(hf_tensor("llama", "token_embd.weight"), None);
    }

    #[test]
    fn gemma4_norms_are_stored_plain() {
        let t = hf_tensor("gemma4", "blk.4.post_norm.weight").unwrap();
        assert_eq!(t, HfTensor { name: "model.layers.4.post_per_layer_input_norm.weight".into(), subtract: 0.0 });
        assert_eq!(hf_tensor("gemma4", "blk.4.layer_output_scale.weight").unwrap().name, "model.layers.4.layer_scalar");
        assert_eq!(hf_tensor("gemma4", "rope_freqs.weight"), None);
    }
}
