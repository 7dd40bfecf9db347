//! Architecture `gemma3` (llama.cpp `src/models/gemma3.cpp`): token embeddings scaled by
//! √d, RMSNorm before and after both the attention and the FFN ("sandwich" norms), per-head
//! Q/K RMSNorm, NEOX RoPE with one base for global layers (`rope.freq_base`) and another for
//! the sliding-window layers (`rope.freq_base_swa`, default 10000), a GeGLU (tanh) FFN and a
//! tied head. Every `sliding_window_pattern`-th layer (default 6) is global.
//!
//! Gemma 3 scales Q by `1/sqrt(head_dim)` after RoPE and attends with scale 1; the shared
//! attention applies the same factor to the scores instead, which rounds identically when
//! head_dim is a power of 4 (64, 256: a power-of-two factor), as in all released sizes but
//! 27B. Local layers attend to the last `sliding_window` positions (llama.cpp's standard SWA
//! mask). llama.cpp keeps those layers' KV in a ring of cells, so past the window its sums run
//! in another order: outputs there agree to rounding, not bit for bit.

use super::attention::Attention;
use super::decoder::{Block, Decoder, Operator};
use super::ffn::{Ffn, Gate, Mlp};
use super::layers::{DenseShape, Embedding, Hparams, RmsNorm};
use super::rope::{load_rope, Rope, RopeStyle};
use crate::error::{Result, WickError};
use crate::gguf::{GgufFile, MetaValue};
use crate::runtime::device::Placement;

/// Which layers are sliding-window ones, as llama.cpp's `set_swa_pattern` (dense last).
fn swa_layers(g: &GgufFile, hp: &Hparams, n_layer: usize) -> Result<Vec<bool>> {
    if hp.opt_usize("attention.sliding_window")?.unwrap_or(0) == 0 {
        return Ok(vec![false; n_layer]);
    }
    let key = hp.key("attention.sliding_window_pattern");
    if let Some(MetaValue::Array(a)) = g.metadata.get(&key) {
        if a.len() < n_layer {
            return Err(WickError::load(format!("`{key}` has {} entries for {n_layer} layers", a.len())));
        }
        return Ok(a.iter().take(n_layer).map(|v| v.as_bool().unwrap_or(false)).collect());
    }
    let n = hp.opt_usize("attention.sliding_window_pattern")?.unwrap_or(6);
    Ok((0..n_layer).map(|il| n == 0 || il % n < n - 1).collect())
}

pub fn load(g: &GgufFile, dev: &Placement) -> Result<Decoder> {
    let hp = Hparams { gguf: g, arch: "gemma3" };
    let DenseShape { d, n_layer, n_head, n_kv, ff, eps } = hp.dense_shape()?;
    if n_head == 0 {
        return Err(WickError::load("gemma3: head_count is 0"));
    }
    let head_dim = match hp.opt_usize("attention.key_length")? {
        Some(k) => k,
        None if d.is_multiple_of(n_head) => d / n_head,
        None => {
            return Err(WickError::load(format!(
                "embedding_length {d} is not divisible by head_count {n_head}"
            )))
        }
    };
    // 27B scales Q by 1/sqrt(d / n_head), which the shared attention does not do.
    if n_layer == 62 && d / n_head != head_dim {
        return Err(WickError::load("gemma3 27B (query scale 1/sqrt(d/n_head)) is not supported"));
    }
    if hp.opt_f32("final_logit_softcapping")?.is_some_and(|c| c != 0.0) {
        return Err(WickError::load("gemma3: final logit soft-capping is not supported"));
    }
    let rope = load_rope(&hp, RopeStyle::Neox, head_dim)?;
    let swa = swa_layers(g, &hp, n_layer)?;
    let n_swa = hp.opt_usize("attention.sliding_window")?.filter(|&w| w > 0);
    let rope_local = swa.iter().any(|&s| s).then(|| -> Result<Rope> {
        let base = hp.opt_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
        Ok(Rope { style: RopeStyle::Neox, n_rot: head_dim, base, freq_scale: 1.0, freq_factors: None })
    });
    let rope_local = rope_local.transpose()?;

    let embed = Embedding::load(g, "token_embd.weight", d, &dev.input())?;
    let blocks = (0..n_layer)
        .map(|il| {
            let p = format!("blk.{il}");
            let dev = &dev.layer(il);
            let norm = |n: &str| RmsNorm::load(g, &format!("{p}.{n}.weight"), d, eps, dev);
            let attn = Attention::load(g, &p, d, n_head, n_kv[il], head_dim, Some(eps), dev)?;
            let mut b = Block::new(
                norm("attn_norm")?,
                Operator::Attention(attn),
                norm("ffn_norm")?,
                Ffn::Dense(Mlp::load(g, &p, d, ff, Gate::GeluTanh, dev)?),
            );
            b.post_op_norm = Some(norm("post_attention_norm")?);
            b.post_ffn_norm = Some(norm("post_ffw_norm")?);
            b.local_rope = swa[il];
            b.window = if swa[il] { n_swa } else { None };
            Ok(b)
        })
        .collect::<Result<Vec<_>>>()?;
    let norm = RmsNorm::load(g, "output_norm.weight", d, eps, &dev.output())?;
    // ggml_scale by sqrtf(n_embd).
    let embed_scale = Some((d as f32).sqrt());
    let mut model = Decoder::assemble(&hp, embed, blocks, norm, rope, (d, n_head, &n_kv), dev)?;
    model.rope_local = rope_local;
    model.embed_scale = embed_scale;
    Ok(model)
}
