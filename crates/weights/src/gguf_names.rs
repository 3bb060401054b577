//! Hugging Face tensor names for a GGUF file's tensors, so that a model loader written against
//! `config.json` checkpoints (`model.layers.N.self_attn.q_proj.weight`) reads a GGUF unchanged;
//! and the other way for Gemma 4's vision and audio towers, whose loaders ask for transformers'
//! names and find llama.cpp's projector-file (`mmproj`) names through
//! [`vision_tower_gguf_name`] and [`audio_tower_gguf_name`].
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

/// llama.cpp's projector-file (`mmproj`) name for a tensor of Gemma 4's vision tower, given by its
/// name in transformers' tower (`encoder.layers.0.self_attn.q_proj.linear.weight`), or in its
/// embedder when it starts with `embed_vision.` (the converter's `Gemma4VisionAudioModel`
/// mapping). Names it does not map are returned as they are.
pub fn vision_tower_gguf_name(name: &str) -> String {
    const GLOBAL: [(&str, &str); 5] = [
        ("patch_embedder.input_proj.weight", "v.patch_embd.weight"),
        ("patch_embedder.position_embedding_table", "v.position_embd.weight"),
        ("std_bias", "v.std_bias"),
        ("std_scale", "v.std_scale"),
        ("embed_vision.embedding_projection.weight", "mm.input_projection.weight"),
    ];
    const LAYER: [(&str, &str); 13] = [
        ("input_layernorm.weight", "ln1.weight"),
        ("post_attention_layernorm.weight", "attn_post_norm.weight"),
        ("pre_feedforward_layernorm.weight", "ln2.weight"),
        ("post_feedforward_layernorm.weight", "ffn_post_norm.weight"),
        ("self_attn.q_norm.weight", "attn_q_norm.weight"),
        ("self_attn.k_norm.weight", "attn_k_norm.weight"),
        ("self_attn.q_proj.", "attn_q."),
        ("self_attn.k_proj.", "attn_k."),
        ("self_attn.v_proj.", "attn_v."),
        ("self_attn.o_proj.", "attn_out."),
        ("mlp.gate_proj.", "ffn_gate."),
        ("mlp.up_proj.", "ffn_up."),
        ("mlp.down_proj.", "ffn_down."),
    ];
    tower_gguf_name(name, &GLOBAL, "encoder.layers.", &LAYER, "v.blk.")
}

/// The same for Gemma 4's audio tower (transformers' `layers.0.self_attn.q_proj.linear.weight`;
/// `embed_audio.…` for its embedder), through gguf-py's `A_ENC_*` names.
pub fn audio_tower_gguf_name(name: &str) -> String {
    const GLOBAL: [(&str, &str); 8] = [
        ("subsample_conv_projection.layer0.conv.weight", "a.conv1d.0.weight"),
        ("subsample_conv_projection.layer0.norm.weight", "a.conv1d.0.norm.weight"),
        ("subsample_conv_projection.layer1.conv.weight", "a.conv1d.1.weight"),
        ("subsample_conv_projection.layer1.norm.weight", "a.conv1d.1.norm.weight"),
        ("subsample_conv_projection.input_proj_linear.weight", "a.input_projection.weight"),
        ("output_proj.weight", "a.pre_encode.out.weight"),
        ("output_proj.bias", "a.pre_encode.out.bias"),
        ("embed_audio.embedding_projection.weight", "mm.a.input_projection.weight"),
    ];
    const LAYER: [(&str, &str); 22] = [
        ("feed_forward1.pre_layer_norm.", "ffn_norm."),
        ("feed_forward1.post_layer_norm.", "ffn_post_norm."),
        ("feed_forward1.ffw_layer_1.", "ffn_up."),
        ("feed_forward1.ffw_layer_2.", "ffn_down."),
        ("feed_forward2.pre_layer_norm.", "ffn_norm_1."),
        ("feed_forward2.post_layer_norm.", "ffn_post_norm_1."),
        ("feed_forward2.ffw_layer_1.", "ffn_up_1."),
        ("feed_forward2.ffw_layer_2.", "ffn_down_1."),
        ("norm_pre_attn.", "attn_pre_norm."),
        ("norm_post_attn.", "attn_post_norm."),
        ("norm_out.", "ln2."),
        ("self_attn.q_proj.", "attn_q."),
        ("self_attn.k_proj.", "attn_k."),
        ("self_attn.v_proj.", "attn_v."),
        ("self_attn.post.", "attn_out."),
        ("self_attn.relative_k_proj.", "attn_k_rel."),
        ("self_attn.per_dim_scale", "per_dim_scale.weight"),
        // The light convolution's norms swap names in llama.cpp's table.
        ("lconv1d.pre_layer_norm.", "conv_norm."),
        ("lconv1d.conv_norm.", "norm_conv."),
        ("lconv1d.linear_start.", "conv_pw1."),
        ("lconv1d.linear_end.", "conv_pw2."),
        ("lconv1d.depthwise_conv1d.", "conv_dw."),
    ];
    tower_gguf_name(name, &GLOBAL, "layers.", &LAYER, "a.blk.")
}

/// A tower tensor's GGUF name: a global one from `global`, or layer `N`'s (`{layers}N.{part}`)
/// as `{blocks}N.{gguf part}`.
fn tower_gguf_name(name: &str, global: &[(&str, &str)], layers: &str, layer: &[(&str, &str)], blocks: &str) -> String {
    if let Some(&(_, gguf)) = global.iter().find(|(hf, _)| *hf == name) {
        return gguf.to_string();
    }
    let Some((index, rest)) = name.strip_prefix(layers).and_then(|r| r.split_once('.')) else {
        return name.to_string();
    };
    for (hf, gguf) in layer {
        if let Some(tail) = rest.strip_prefix(hf) {
            // `linear.weight` → `weight`; the clip bounds keep their names.
            let tail = tail.strip_prefix("linear.").unwrap_or(tail);
            return format!("{blocks}{index}.{gguf}{tail}");
        }
    }
    name.to_string()
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
    fn tower_names_follow_llama_cpps_converter() {
        let vision = vision_tower_gguf_name;
        assert_eq!(vision("encoder.layers.3.self_attn.q_proj.linear.weight"), "v.blk.3.attn_q.weight");
        assert_eq!(vision("encoder.layers.3.mlp.down_proj.input_min"), "v.blk.3.ffn_down.input_min");
        assert_eq!(vision("encoder.layers.0.pre_feedforward_layernorm.weight"), "v.blk.0.ln2.weight");
        assert_eq!(vision("embed_vision.embedding_projection.weight"), "mm.input_projection.weight");
        let audio = audio_tower_gguf_name;
        assert_eq!(audio("subsample_conv_projection.layer0.conv.weight"), "a.conv1d.0.weight");
        assert_eq!(audio("layers.2.lconv1d.conv_norm.weight"), "a.blk.2.norm_conv.weight");
        assert_eq!(audio("layers.0.self_attn.q_proj.linear.weight"), "a.blk.0.attn_q.weight");
        assert_eq!(audio("embed_audio.embedding_projection.weight"), "mm.a.input_projection.weight");
        assert_eq!(audio("layers.x"), "layers.x");
    }

    #[test]
    fn gemma4_norms_are_stored_plain() {
        let t = hf_tensor("gemma4", "blk.4.post_norm.weight").unwrap();
        assert_eq!(t, HfTensor { name: "model.layers.4.post_per_layer_input_norm.weight".into(), subtract: 0.0 });
        assert_eq!(hf_tensor("gemma4", "blk.4.layer_output_scale.weight").unwrap().name, "model.layers.4.layer_scalar");
        assert_eq!(hf_tensor("gemma4", "rope_freqs.weight"), None);
    }
}
