//! Architecture `lfm2` (dense LFM2 / LFM2.5): blocks are gated short convs where
//! `head_count_kv[l] == 0` and GQA attention (per-head Q/K RMSNorm, NEOX RoPE) elsewhere.
//! The final norm is `token_embd_norm.weight` in llama.cpp-converted files and
//! `output_norm.weight` in some ollama-converted ones; both are accepted. Tied head.
//! Architecture `lfm2moe` (LFM2-MoE) is the same stack whose FFNs, from layer
//! `leading_dense_block_count` on, are sigmoid-routed experts (`moe.rs`).

use super::attention::Attention;
use super::decoder::{Block, Decoder, Operator};
use super::ffn::{Ffn, Gate, Mlp};
use super::layers::{Embedding, Hparams, RmsNorm};
use super::moe::Moe;
use super::rope::{load_rope, RopeStyle};
use super::shortconv::ShortConv;
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::runtime::device::Placement;

pub fn load(g: &GgufFile, dev: &Placement) -> Result<Decoder> {
    load_arch(g, dev, "lfm2")
}

pub fn load_moe(g: &GgufFile, dev: &Placement) -> Result<Decoder> {
    load_arch(g, dev, "lfm2moe")
}

fn load_arch(g: &GgufFile, dev: &Placement, arch: &'static str) -> Result<Decoder> {
    let hp = Hparams { gguf: g, arch };
    let d = hp.usize("embedding_length")?;
    let n_layer = hp.layers()?;
    let n_head = hp.usize("attention.head_count")?;
    let n_kv = g.metadata.per_layer_usize(&hp.key("attention.head_count_kv"), n_layer)?;
    let eps = g.metadata.f32(&hp.key("attention.layer_norm_rms_epsilon"))?;
    let l_cache = hp.usize("shortconv.l_cache")?;
    if n_head == 0 || !d.is_multiple_of(n_head) {
        return Err(WickError::load(format!("embedding_length {d} is not divisible by head_count {n_head}")));
    }
    // No key_length / rope.dimension_count in LFM2 files: the head is d / n_head, fully rotated.
    let head_dim = d / n_head;
    let rope = load_rope(&hp, RopeStyle::Neox, head_dim)?;
    // Dense lfm2: every layer dense. lfm2moe: the first `leading_dense_block_count` (0 when
    // absent, as in llama.cpp).
    let (n_dense, n_expert, n_used) = if arch == "lfm2moe" {
        let gating = hp.opt_usize("expert_gating_func")?.unwrap_or(2);
        if gating != 2 {
            return Err(WickError::load(format!(
                "lfm2moe: expert_gating_func {gating} (only sigmoid, 2, is supported)"
            )));
        }
        (
            hp.opt_usize("leading_dense_block_count")?.unwrap_or(0),
            hp.usize("expert_count")?,
            hp.usize("expert_used_count")?,
        )
    } else {
        (n_layer, 0, 0)
    };

    let embed = Embedding::load(g, "token_embd.weight", d, &dev.input())?;
    let blocks = (0..n_layer)
        .map(|il| {
            let p = format!("blk.{il}");
            let dev = &dev.layer(il);
            let op = if n_kv[il] == 0 {
                Operator::Conv(ShortConv::load(g, &p, d, l_cache, dev)?)
            } else {
                Operator::Attention(Attention::load(g, &p, d, n_head, n_kv[il], head_dim, Some(eps), dev)?)
            };
            let ffn = if il < n_dense {
                // The FFN width is read from the tensor: some converters wrote an unadjusted
                // feed_forward_length.
                let gate = format!("{p}.ffn_gate.weight");
                let ff = g
                    .info(&gate)
                    .and_then(|t| t.dims.get(1).copied())
                    .ok_or_else(|| WickError::load(format!("missing tensor `{gate}`")))?;
                Ffn::Dense(Mlp::load(g, &p, d, ff, Gate::Silu, dev)?)
            } else {
                Ffn::Moe(Moe::load(g, &p, d, n_expert, n_used, dev)?)
            };
            Ok(Block::new(
                RmsNorm::load(g, &format!("{p}.attn_norm.weight"), d, eps, dev)?,
                op,
                RmsNorm::load(g, &format!("{p}.ffn_norm.weight"), d, eps, dev)?,
                ffn,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let norm_name =
        ["token_embd_norm.weight", "output_norm.weight"].into_iter().find(|n| g.has(n)).ok_or_else(|| {
            WickError::load(
                "missing tensor `token_embd_norm.weight` (the final norm; `output_norm.weight` is also accepted)",
            )
        })?;
    let norm = RmsNorm::load(g, norm_name, d, eps, &dev.output())?;
    Decoder::assemble(&hp, embed, blocks, norm, rope, (d, n_head, &n_kv), dev)
}
