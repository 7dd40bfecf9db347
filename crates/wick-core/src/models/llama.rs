//! Architecture `llama` (Llama 2/3, TinyLlama, SmolLM2): RMSNorm pre-norm blocks, GQA
//! attention with interleaved-pair RoPE (llama.cpp `LLAMA_ROPE_TYPE_NORM`), SwiGLU MLP,
//! output head `output.weight` or, when absent, the token embedding (tied).
//! The same stack serves Qwen 2 (NEOX RoPE, q/k/v biases, which `Linear` picks up) and
//! Qwen 3 (NEOX RoPE, per-head Q/K RMSNorm): see `qwen.rs`.

use super::attention::Attention;
use super::decoder::{Block, Decoder, Operator};
use super::ffn::{Ffn, Gate, Mlp};
use super::layers::{DenseShape, Embedding, Hparams, RmsNorm};
use super::rope::{load_rope, RopeStyle};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::runtime::device::Placement;

pub fn load(g: &GgufFile, dev: &Placement) -> Result<Decoder> {
    load_arch(g, dev, "llama", RopeStyle::Interleaved, false)
}

/// A llama-shaped attention stack for `arch`, with its RoPE style and optional Q/K norms.
pub fn load_arch(
    g: &GgufFile,
    dev: &Placement,
    arch: &'static str,
    style: RopeStyle,
    qk_norm: bool,
) -> Result<Decoder> {
    let hp = Hparams { gguf: g, arch };
    let DenseShape { d, n_layer, n_head, n_kv, ff, eps } = hp.dense_shape()?;
    if n_head == 0 || (!d.is_multiple_of(n_head) && hp.opt_usize("attention.key_length")?.is_none()) {
        return Err(WickError::load(format!("embedding_length {d} is not divisible by head_count {n_head}")));
    }
    let head_dim = hp.opt_usize("attention.key_length")?.unwrap_or(d / n_head);
    let n_rot = hp.opt_usize("rope.dimension_count")?.unwrap_or(head_dim);
    if n_rot != head_dim {
        // llama.cpp asserts the same for this architecture.
        return Err(WickError::load(format!(
            "rope.dimension_count {n_rot} differs from head size {head_dim}"
        )));
    }
    let rope = load_rope(&hp, style, n_rot)?;

    let embed = Embedding::load(g, "token_embd.weight", d, &dev.input())?;
    let blocks = (0..n_layer)
        .map(|il| {
            let p = format!("blk.{il}");
            let dev = &dev.layer(il);
            let qk_eps = qk_norm.then_some(eps);
            Ok(Block::new(
                RmsNorm::load(g, &format!("{p}.attn_norm.weight"), d, eps, dev)?,
                Operator::Attention(Attention::load(g, &p, d, n_head, n_kv[il], head_dim, qk_eps, dev)?),
                RmsNorm::load(g, &format!("{p}.ffn_norm.weight"), d, eps, dev)?,
                Ffn::Dense(Mlp::load(g, &p, d, ff, Gate::Silu, dev)?),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let norm = RmsNorm::load(g, "output_norm.weight", d, eps, &dev.output())?;
    Decoder::assemble(&hp, embed, blocks, norm, rope, (d, n_head, &n_kv), dev)
}
