//! config.json → the architecture's GGUF keys, as each model class's `set_gguf_parameters`
//! writes them (`TextModel.set_gguf_parameters` in conversion/base.py, then the overrides of
//! `LlamaModel`, `Gemma3Model`, `LFM2Model`, `LFM2MoeModel`).

use serde_json::{Map, Value as J};

use super::{Arch, Dims};
use crate::config::HfConfig;
use crate::error::{ConvertError, Result};
use crate::gguf::Value;

/// The hyperparameter keys, the dimensions the plan checks, and llama 3's rope factors.
pub struct Hparams {
    pub kv: Vec<(String, Value)>,
    pub dims: Dims,
    pub n_expert: usize,
    pub rope_freqs: Option<Vec<f32>>,
}

struct Kv {
    arch: &'static str,
    kv: Vec<(String, Value)>,
}

impl Kv {
    /// Sets `{arch}.key`; a second write replaces the value in place, as gguf-py does.
    fn set(&mut self, key: &str, v: Value) {
        let k = format!("{}.{key}", self.arch);
        match self.kv.iter_mut().find(|(name, _)| *name == k) {
            Some(e) => e.1 = v,
            None => self.kv.push((k, v)),
        }
    }
    fn u32(&mut self, key: &str, v: u64) {
        self.set(key, Value::U32(v as u32));
    }
    fn f32(&mut self, key: &str, v: f64) {
        self.set(key, Value::F32(v as f32));
    }
}

/// `TextModel.__init__`'s rope parameters: `rope_parameters` (or `rope_scaling`) with the
/// global and sliding-window thetas mirrored into it.
fn rope_parameters(cfg: &HfConfig) -> Map<String, J> {
    let mut rp = match cfg.raw.get("rope_parameters").or_else(|| cfg.get("rope_parameters")) {
        Some(J::Object(m)) => m.clone(),
        Some(_) => Map::new(),
        None => match cfg.get("rope_scaling") {
            Some(J::Object(m)) => m.clone(),
            _ => Map::new(),
        },
    };
    let theta = cfg.find(&[
        "global_rope_theta",
        "rope_global_theta",
        "rope_theta_global",
        "rope_theta",
        "rotary_emb_base",
    ]);
    let local = cfg.find(&[
        "local_rope_theta",
        "rope_local_theta",
        "rope_theta_local",
        "swa_rope_theta",
        "rope_local_base_freq",
    ]);
    let partial = cfg.find(&["partial_rotary_factor", "rope_pct", "rope_percent"]);
    let orig = cfg.find(&["original_max_position_embeddings"]);
    if !rp.contains_key("full_attention") && !rp.contains_key("sliding_attention") {
        if let Some(l) = local {
            rp.insert("sliding_attention".into(), serde_json::json!({ "rope_theta": l }));
        }
        if let (false, Some(t)) = (rp.contains_key("rope_theta"), theta) {
            rp.insert("rope_theta".into(), t.clone());
        }
        if let (false, Some(t)) =
            (rp.contains_key("rope_type"), rp.get("type").filter(|t| !t.is_null()).cloned())
        {
            rp.insert("rope_type".into(), t);
        }
        if let (false, Some(p)) = (rp.contains_key("partial_rotary_factor"), partial) {
            rp.insert("partial_rotary_factor".into(), p.clone());
        }
        if let (false, Some(o)) = (rp.contains_key("original_max_position_embeddings"), orig) {
            rp.insert("original_max_position_embeddings".into(), o.clone());
        }
    }
    rp
}

/// An integer, or a list of integers (per-layer values), as gguf-py writes either.
fn count(v: &J) -> Option<Value> {
    match v {
        J::Number(n) => n.as_u64().map(|n| Value::U32(n as u32)),
        J::Array(a) => {
            a.iter().map(|x| x.as_i64().map(|n| n as i32)).collect::<Option<Vec<_>>>().map(Value::I32s)
        }
        _ => None,
    }
}

/// The layer types of an LFM2 config: `layer_types`, or the older `full_attn_idxs`.
fn lfm2_attention_layers(cfg: &HfConfig, n_layer: usize, moe: bool) -> Result<Vec<bool>> {
    if let Some(J::Array(types)) = cfg.get("layer_types") {
        return Ok(types
            .iter()
            .map(|t| {
                let t = t.as_str().unwrap_or("");
                if moe {
                    t == "full_attention"
                } else {
                    t != "conv"
                }
            })
            .collect());
    }
    if let Some(J::Array(idx)) = cfg.get("full_attn_idxs") {
        let idx: Vec<u64> = idx.iter().filter_map(|i| i.as_u64()).collect();
        return Ok((0..n_layer).map(|i| idx.contains(&(i as u64))).collect());
    }
    Err(ConvertError::config("an LFM2 config needs `layer_types`"))
}

pub fn hparams(arch: Arch, cfg: &HfConfig, file_type: u32) -> Result<Hparams> {
    let mut cfg = cfg.clone();
    let n_layer = cfg.need_usize(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])?;
    let n_embd = cfg.need_usize(&["hidden_size", "n_embd", "dim"])?;
    let n_head = match arch {
        Arch::Gemma3 => cfg.find_u64(&["num_attention_heads"]).unwrap_or(8) as usize,
        _ => cfg.need_usize(&["num_attention_heads", "n_head", "n_heads"])?,
    };
    let n_kv_cfg = match arch {
        Arch::Gemma3 => cfg.find_u64(&["num_key_value_heads"]).unwrap_or(4) as usize,
        _ => cfg.find_u64(&["num_key_value_heads", "n_kv_heads"]).map_or(n_head, |n| n as usize),
    };
    let mut n_kv = vec![n_kv_cfg; n_layer];
    if matches!(arch, Arch::Lfm2 | Arch::Lfm2Moe) {
        let attn = lfm2_attention_layers(&cfg, n_layer, arch == Arch::Lfm2Moe)?;
        if attn.len() != n_layer {
            return Err(ConvertError::config(format!("{} layer types for {n_layer} layers", attn.len())));
        }
        n_kv = attn.iter().map(|&a| if a { n_kv_cfg } else { 0 }).collect();
        cfg.params.insert("num_key_value_heads".into(), J::from(n_kv.clone()));
    }
    let head_dim = match arch {
        Arch::Gemma3 => cfg.find_u64(&["head_dim"]).unwrap_or(256) as usize,
        _ => cfg.find_u64(&["head_dim"]).map_or(n_embd / n_head.max(1), |h| h as usize),
    };
    let n_vocab = cfg.need_usize(&["vocab_size"])?;
    let mut kv = Kv { arch: arch.name(), kv: vec![] };
    generic(&cfg, &mut kv, n_layer)?;
    let rp = rope_parameters(&cfg);
    let mut n_expert =
        cfg.find_u64(&["num_local_experts", "num_experts", "n_routed_experts"]).unwrap_or(0) as usize;
    let mut rope_freqs = None;
    match arch {
        Arch::Llama => {
            kv.u32("vocab_size", n_vocab as u64);
            kv.u32("rope.dimension_count", head_dim as u64);
            rope_freqs = llama3_rope_factors(&rp, &cfg, head_dim);
        }
        Arch::Qwen2 | Arch::Qwen3 => {}
        Arch::Gemma3 => {
            kv.u32("context_length", cfg.find_u64(&["max_position_embeddings"]).unwrap_or(131072));
            kv.u32("attention.head_count", n_head as u64);
            kv.f32("attention.layer_norm_rms_epsilon", cfg.find_f64(&["rms_norm_eps"]).unwrap_or(1e-6));
            kv.u32("attention.key_length", head_dim as u64);
            kv.u32("attention.value_length", head_dim as u64);
            let full = rp.get("full_attention").unwrap_or(&J::Null);
            let theta = full.get("rope_theta").or_else(|| rp.get("rope_theta")).and_then(|t| t.as_f64());
            kv.f32("rope.freq_base", theta.unwrap_or(1_000_000.0));
            if let Some(cap) = cfg.find_f64(&["final_logit_softcapping"]).filter(|c| *c != 0.0) {
                kv.f32("final_logit_softcapping", cap);
            }
            if cfg.find_u64(&["sliding_window_pattern"]) != Some(1) {
                kv.u32("attention.sliding_window", cfg.need_u64(&["sliding_window"])?);
            }
            kv.u32("attention.head_count_kv", n_kv_cfg as u64);
        }
        Arch::Lfm2 => {
            kv.u32("vocab_size", n_vocab as u64);
            kv.u32("shortconv.l_cache", cfg.need_u64(&["conv_L_cache"])?);
            kv.f32(
                "attention.layer_norm_rms_epsilon",
                cfg.find_f64(&["norm_eps"]).ok_or_else(|| ConvertError::config("needs `norm_eps`"))?,
            );
            kv.u32("feed_forward_length", lfm2_ff(&cfg)? as u64);
        }
        Arch::Lfm2Moe => {
            kv.u32("expert_feed_forward_length", cfg.need_u64(&["moe_intermediate_size"])?);
            kv.u32("leading_dense_block_count", cfg.need_u64(&["num_dense_layers"])?);
            kv.u32("expert_gating_func", 2); // SIGMOID
            kv.u32("vocab_size", n_vocab as u64);
            kv.u32("shortconv.l_cache", cfg.need_u64(&["conv_L_cache"])?);
            n_expert = n_expert.max(1);
        }
    }
    kv.kv.push(("general.file_type".into(), Value::U32(file_type)));
    Ok(Hparams {
        kv: kv.kv,
        dims: Dims { n_embd, n_head, head_dim, n_layer, n_kv, n_vocab },
        n_expert,
        rope_freqs,
    })
}

/// `TextModel.set_gguf_parameters`.
fn generic(cfg: &HfConfig, kv: &mut Kv, n_layer: usize) -> Result<()> {
    kv.u32("block_count", n_layer as u64);
    let find = |keys: &[&str]| cfg.find(keys).cloned();
    if let Some(n) = cfg.find_u64(&[
        "max_position_embeddings",
        "n_ctx",
        "n_positions",
        "max_length",
        "max_sequence_length",
        "model_max_length",
    ]) {
        kv.u32("context_length", n);
    }
    if let Some(n) = cfg.find_u64(&["hidden_size", "n_embd", "dim"]) {
        kv.u32("embedding_length", n);
    }
    if let Some(v) = find(&[
        "prefix_dense_intermediate_size",
        "dense_intermediate_size",
        "intermediate_size",
        "n_inner",
        "hidden_dim",
    ]) {
        kv.set(
            "feed_forward_length",
            count(&v).ok_or_else(|| ConvertError::config("bad intermediate_size"))?,
        );
    }
    if let Some(v) = find(&["num_attention_heads", "n_head", "n_heads"]) {
        kv.set(
            "attention.head_count",
            count(&v).ok_or_else(|| ConvertError::config("bad num_attention_heads"))?,
        );
    }
    if let Some(v) = find(&["num_key_value_heads", "n_kv_heads"]) {
        kv.set(
            "attention.head_count_kv",
            count(&v).ok_or_else(|| ConvertError::config("bad num_key_value_heads"))?,
        );
    }
    if cfg.bool("is_causal") == Some(false) {
        kv.set("attention.causal", Value::Bool(false));
    }
    rope_keys(cfg, kv)?;
    if let Some(e) = cfg.find_f64(&["rms_norm_eps", "norm_eps"]) {
        kv.f32("attention.layer_norm_rms_epsilon", e);
    }
    if let Some(e) = cfg.find_f64(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
        kv.f32("attention.layer_norm_epsilon", e);
    }
    expert_keys(cfg, kv)?;
    if let Some(h) = cfg.find_u64(&["head_dim"]) {
        kv.u32("attention.key_length", h);
        kv.u32("attention.value_length", h);
    }
    Ok(())
}

/// `TextModel.set_gguf_parameters`'s RoPE keys (the full-attention layers' parameters when
/// `rope_parameters` splits them by layer type).
fn rope_keys(cfg: &HfConfig, kv: &mut Kv) -> Result<()> {
    let rp = rope_parameters(cfg);
    let params = match rp.get("full_attention") {
        Some(J::Object(m)) => m.clone(),
        _ => rp.clone(),
    };
    if let Some(rope_type) = params.get("rope_type").and_then(|t| t.as_str()) {
        let factor = params.get("factor").and_then(|f| f.as_f64());
        match (rope_type, factor) {
            ("linear", Some(f)) => {
                kv.set("rope.scaling.type", Value::Str("linear".into()));
                kv.f32("rope.scaling.factor", f);
            }
            ("yarn", Some(f)) => {
                kv.set("rope.scaling.type", Value::Str("yarn".into()));
                kv.f32("rope.scaling.factor", f);
                let orig = params.get("original_max_position_embeddings").and_then(|o| o.as_u64());
                kv.u32(
                    "rope.scaling.original_context_length",
                    orig.ok_or_else(|| ConvertError::config("yarn needs original_max_position_embeddings"))?,
                );
                for (k, names) in [
                    ("yarn_ext_factor", &["extrapolation_factor"][..]),
                    ("yarn_attn_factor", &["attention_factor", "attn_factor"][..]),
                    ("yarn_beta_fast", &["beta_fast"][..]),
                    ("yarn_beta_slow", &["beta_slow"][..]),
                ] {
                    if let Some(v) = names.iter().find_map(|n| params.get(*n).and_then(|v| v.as_f64())) {
                        kv.f32(&format!("rope.scaling.{k}"), v);
                    }
                }
            }
            ("su" | "longrope", _) => kv.set("rope.scaling.type", Value::Str("longrope".into())),
            _ => {}
        }
    }
    if let Some(t) = params.get("rope_theta").and_then(|t| t.as_f64()) {
        kv.f32("rope.freq_base", t);
    }
    if let Some(t) = rp.get("sliding_attention").and_then(|s| s.get("rope_theta")).and_then(|t| t.as_f64()) {
        kv.f32("rope.freq_base_swa", t);
    }
    Ok(())
}

/// `TextModel.set_gguf_parameters`'s mixture-of-experts keys.
fn expert_keys(cfg: &HfConfig, kv: &mut Kv) -> Result<()> {
    if let Some(n) = cfg.find_u64(&["num_local_experts", "num_experts", "n_routed_experts"]) {
        kv.u32("expert_count", n);
    }
    if let Some(n) = cfg.find_u64(&["num_experts_per_tok", "num_experts_per_token", "top_k_experts"]) {
        kv.u32("expert_used_count", n);
    }
    if let Some(n) = cfg.find_u64(&["n_group"]) {
        kv.u32("expert_group_count", n);
    }
    if let Some(n) = cfg.find_u64(&["topk_group"]) {
        kv.u32("expert_group_used_count", n);
    }
    let score = cfg.find(&[
        "score_function",
        "scoring_func",
        "score_func",
        "moe_router_activation",
        "moe_router_activation_func",
        "expert_selection_fn",
    ]);
    if let Some(s) = score.and_then(|s| s.as_str()) {
        let v = match s {
            "sigmoid" => 2,
            "softmax" => 1,
            "sqrtsoftplus" => 4,
            other => {
                return Err(ConvertError::config(format!("unsupported expert score function `{other}`")))
            }
        };
        kv.u32("expert_gating_func", v);
    }
    Ok(())
}

/// `LFM2Model._add_feed_forward_length`: the FFN width after the 2/3 rule.
fn lfm2_ff(cfg: &HfConfig) -> Result<usize> {
    let mut ff = cfg.need_u64(&["block_ff_dim", "intermediate_size"])? as f64;
    if cfg
        .bool("block_auto_adjust_ff_dim")
        .ok_or_else(|| ConvertError::config("needs `block_auto_adjust_ff_dim`"))?
    {
        ff = (2.0 * ff / 3.0).trunc();
        if let Some(m) = cfg.find_f64(&["block_ffn_dim_multiplier"]) {
            ff = (m * ff).trunc();
        }
        let mult = cfg.need_u64(&["block_multiple_of"])? as f64;
        ff = mult * ((ff + mult - 1.0) / mult).floor();
    }
    Ok(ff as usize)
}

/// `LlamaModel.generate_extra_tensors`: llama 3's per-frequency rope scaling factors.
fn llama3_rope_factors(rp: &Map<String, J>, cfg: &HfConfig, head_dim: usize) -> Option<Vec<f32>> {
    let params = match rp.get("full_attention") {
        Some(J::Object(m)) => m,
        _ => rp,
    };
    if !params.get("rope_type").and_then(|t| t.as_str()).is_some_and(|t| t.eq_ignore_ascii_case("llama3")) {
        return None;
    }
    let get = |k: &str, d: f64| params.get(k).and_then(|v| v.as_f64()).unwrap_or(d) as f32;
    let base = get("rope_theta", 10000.0);
    let dim = cfg.find_u64(&["head_dim"]).map_or(head_dim, |h| h as usize) as f32;
    let factor = get("factor", 8.0);
    let low = get("low_freq_factor", 1.0);
    let high = get("high_freq_factor", 4.0);
    let old = get("original_max_position_embeddings", 8192.0);
    let (low_wavelen, high_wavelen) = (old / low, old / high);
    Some(
        (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / base.powf((2 * i) as f32 / dim);
                let wavelen = 2.0 * std::f32::consts::PI / freq;
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    factor
                } else {
                    let smooth = (old / wavelen - low) / (high - low);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                }
            })
            .collect(),
    )
}
