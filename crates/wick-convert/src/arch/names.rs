//! Hugging Face tensor names → llama.cpp's, per architecture: the entries of gguf-py's
//! `TensorNameMap` (gguf-py/gguf/tensor_mapping.py) that these architectures' checkpoints use,
//! and the renames and skips of the converter's `filter_tensors`.

use super::Arch;

/// Names the text model never converts (`TextModel.filter_tensors`, plus the buffers
/// `prepare_tensors` drops): vision/audio towers, projectors, rotary caches.
pub fn skipped(name: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ];
    const PARTS: [&str; 20] = [
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
        ".attention.masked_bias",
        ".attention.bias",
        ".rotary_emb.inv_freq",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || PARTS.iter().any(|p| name.contains(p))
}

/// The converter's renames before mapping: `language_model.` dropped, LFM2-MoE's expert bias
/// given a `.bias` suffix, bare `LlamaModel`/`Qwen2Model` names given their `model.` prefix.
pub fn canonical(arch: Arch, hf_arch: &str, name: &str) -> String {
    let mut n = name.replace("language_model.", "");
    if arch == Arch::Lfm2Moe && n.ends_with(".expert_bias") {
        n = n.replace(".expert_bias", ".expert_bias.bias");
    }
    if matches!(arch, Arch::Lfm2 | Arch::Lfm2Moe) {
        n = n.replacen("lfm.", "model.", 1);
    }
    if (hf_arch == "LlamaModel" || hf_arch == "Qwen2Model" || hf_arch == "Qwen3Model")
        && !n.starts_with("model.")
    {
        n = format!("model.{n}");
    }
    n
}

/// Whole-model tensors: HF name → GGUF name.
fn globals(arch: Arch) -> &'static [(&'static str, &'static str)] {
    match arch {
        Arch::Lfm2 => &[
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("model.embedding_norm.weight", "token_embd_norm.weight"),
            ("lm_head.weight", "output.weight"),
        ],
        Arch::Lfm2Moe => &[
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("model.embedding_norm.weight", "token_embd_norm.weight"),
        ],
        _ => &[
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("model.norm.weight", "output_norm.weight"),
            ("lm_head.weight", "output.weight"),
        ],
    }
}

/// Per-layer tensors: the name after `model.layers.N.` → the name after `blk.N.`.
fn layer_table(arch: Arch) -> Vec<(&'static str, &'static str)> {
    let attn = [
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.v_proj.weight", "attn_v.weight"),
    ];
    let mlp = [
        ("mlp.gate_proj.weight", "ffn_gate.weight"),
        ("mlp.up_proj.weight", "ffn_up.weight"),
        ("mlp.down_proj.weight", "ffn_down.weight"),
    ];
    let bias = [
        ("self_attn.q_proj.bias", "attn_q.bias"),
        ("self_attn.k_proj.bias", "attn_k.bias"),
        ("self_attn.v_proj.bias", "attn_v.bias"),
    ];
    let qk_norm = [
        ("self_attn.q_norm.weight", "attn_q_norm.weight"),
        ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ];
    let mut t: Vec<(&str, &str)> = vec![];
    match arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            t.extend(attn);
            t.extend(mlp);
            t.extend(bias);
            t.push(("self_attn.o_proj.weight", "attn_output.weight"));
            t.push(("input_layernorm.weight", "attn_norm.weight"));
            t.push(("post_attention_layernorm.weight", "ffn_norm.weight"));
            if arch == Arch::Qwen3 {
                t.extend(qk_norm);
            }
        }
        Arch::Gemma3 => {
            t.extend(attn);
            t.extend(mlp);
            t.extend(bias);
            t.extend(qk_norm);
            t.push(("self_attn.o_proj.weight", "attn_output.weight"));
            t.push(("input_layernorm.weight", "attn_norm.weight"));
            t.push(("post_attention_layernorm.weight", "post_attention_norm.weight"));
            t.push(("pre_feedforward_layernorm.weight", "ffn_norm.weight"));
            t.push(("post_feedforward_layernorm.weight", "post_ffw_norm.weight"));
        }
        Arch::Lfm2 | Arch::Lfm2Moe => {
            t.extend(attn);
            t.extend([
                ("self_attn.out_proj.weight", "attn_output.weight"),
                ("self_attn.q_layernorm.weight", "attn_q_norm.weight"),
                ("self_attn.k_layernorm.weight", "attn_k_norm.weight"),
                ("operator_norm.weight", "attn_norm.weight"),
                ("ffn_norm.weight", "ffn_norm.weight"),
                ("conv.conv.weight", "shortconv.conv.weight"),
                ("conv.in_proj.weight", "shortconv.in_proj.weight"),
                ("conv.out_proj.weight", "shortconv.out_proj.weight"),
                ("feed_forward.w1.weight", "ffn_gate.weight"),
                ("feed_forward.w2.weight", "ffn_down.weight"),
                ("feed_forward.w3.weight", "ffn_up.weight"),
            ]);
            if arch == Arch::Lfm2Moe {
                t.push(("feed_forward.gate.weight", "ffn_gate_inp.weight"));
                t.push(("feed_forward.expert_bias.bias", "exp_probs_b.bias"));
            }
        }
    }
    t
}

/// `model.layers.N.rest` → (N, rest).
pub fn split_layer(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("model.layers.")?;
    let (n, rest) = rest.split_once('.')?;
    Some((n.parse().ok()?, rest))
}

/// The GGUF name of a (canonical) HF tensor name, or None if this architecture has none.
pub fn gguf_name(arch: Arch, name: &str) -> Option<String> {
    if let Some((_, g)) = globals(arch).iter().find(|(h, _)| *h == name) {
        return Some(g.to_string());
    }
    let (bid, rest) = split_layer(name)?;
    layer_table(arch).iter().find(|(h, _)| *h == rest).map(|(_, g)| format!("blk.{bid}.{g}"))
}

/// LFM2-MoE's per-expert weights: `model.layers.N.feed_forward.experts.E.wK.weight` →
/// (N, E, K), stacked into one tensor per layer and K.
pub fn expert_part(name: &str) -> Option<(usize, usize, &str)> {
    let (bid, rest) = split_layer(name)?;
    let rest = rest.strip_prefix("feed_forward.experts.")?;
    let (e, w) = rest.split_once('.')?;
    let w = w.strip_suffix(".weight")?;
    matches!(w, "w1" | "w2" | "w3").then_some(())?;
    Some((bid, e.parse().ok()?, w))
}

/// The stacked tensor's GGUF name for expert weight `w` (w1 gate, w2 down, w3 up).
pub fn experts_name(bid: usize, w: &str) -> String {
    let kind = match w {
        "w1" => "gate",
        "w2" => "down",
        _ => "up",
    };
    format!("blk.{bid}.ffn_{kind}_exps.weight")
}
