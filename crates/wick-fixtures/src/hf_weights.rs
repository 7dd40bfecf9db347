//! The weights of a synthetic checkpoint: which tensors each architecture has (HF names,
//! PyTorch shapes), drawn from one seeded stream while the safetensors files are written.

use serde_json::{json, Value};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use wick_core::error::{Result, WickError};

use super::build::Gaussian;
use super::gguf_write::io_err;
use super::hf_spec::{HfDtype, HfSpec};
use crate::FixtureArch;

/// One tensor of a checkpoint: HF name, shape (PyTorch order) and the N(mean, σ) its values
/// are drawn from (in checkpoint order, from one seeded stream).
#[derive(Clone, Debug)]
pub struct HfTensor {
    pub name: String,
    pub shape: Vec<usize>,
    mean: f32,
    sigma: f32,
}

impl HfTensor {
    /// A tensor whose values are drawn from N(mean, σ) when written.
    pub(super) fn drawn(name: String, shape: Vec<usize>, mean: f32, sigma: f32) -> Self {
        Self { name, shape, mean, sigma }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The checkpoint's tensors, values not yet drawn.
pub fn hf_tensors(spec: &HfSpec, n_vocab: usize) -> Vec<HfTensor> {
    let (d, ff) = (spec.d, spec.ff);
    let hd = d / spec.n_head;
    // Blocks near unit gain, so the f32 forward stays well conditioned for the logit
    // comparison with numpy; embedding N(0, 4/√d) (logits of σ ≈ 4: clear top-1 margins, and
    // small enough next to the blocks' output that tied heads do not just echo the input).
    let g = 2.0 / (d as f32).sqrt();
    let out_sigma = 4.0 / (d as f32).sqrt();
    let gemma = spec.arch == FixtureArch::Gemma3;
    // Gemma 3 stores norm weights as w − 1 and scales embeddings by √d.
    let norm_mean = if gemma { 0.0 } else { 1.0 };
    let mut out = vec![];
    let mut t = |name: String, shape: Vec<usize>, mean: f32, sigma: f32| {
        out.push(HfTensor { name, shape, mean, sigma })
    };
    // Gemma 3 multiplies embeddings by √d (its blocks are post-normed to RMS ≈ 1); its head
    // is untied here, or the scaled embedding would dominate and the model echo its input.
    let embd_sigma = if gemma { 1.0 / (d as f32).sqrt() } else { out_sigma };
    t("model.embed_tokens.weight".into(), vec![n_vocab, d], 0.0, embd_sigma);
    let lfm = matches!(spec.arch, FixtureArch::Lfm2 | FixtureArch::Lfm2Moe);
    for (il, &kv) in spec.n_kv.iter().enumerate() {
        let p = format!("model.layers.{il}");
        if lfm {
            t(format!("{p}.operator_norm.weight"), vec![d], 1.0, 0.1);
            t(format!("{p}.ffn_norm.weight"), vec![d], 1.0, 0.1);
            if kv == 0 {
                t(format!("{p}.conv.conv.weight"), vec![d, 1, 3], 0.0, 0.5);
                t(format!("{p}.conv.in_proj.weight"), vec![3 * d, d], 0.0, g);
                t(format!("{p}.conv.out_proj.weight"), vec![d, d], 0.0, g);
            } else {
                for (w, rows) in [("q_proj", d), ("k_proj", kv * hd), ("v_proj", kv * hd), ("out_proj", d)] {
                    t(format!("{p}.self_attn.{w}.weight"), vec![rows, d], 0.0, g);
                }
                t(format!("{p}.self_attn.q_layernorm.weight"), vec![hd], 1.0, 0.1);
                t(format!("{p}.self_attn.k_layernorm.weight"), vec![hd], 1.0, 0.1);
            }
            match spec.moe {
                Some(m) if il >= m.dense_lead.unwrap_or(0) => {
                    t(format!("{p}.feed_forward.gate.weight"), vec![m.n_expert, d], 0.0, g);
                    t(format!("{p}.feed_forward.expert_bias"), vec![m.n_expert], 0.0, 0.1);
                    for e in 0..m.n_expert {
                        let q = format!("{p}.feed_forward.experts.{e}");
                        t(format!("{q}.w1.weight"), vec![m.ff_exp, d], 0.0, g);
                        t(format!("{q}.w2.weight"), vec![d, m.ff_exp], 0.0, 1.0 / (m.ff_exp as f32).sqrt());
                        t(format!("{q}.w3.weight"), vec![m.ff_exp, d], 0.0, g);
                    }
                }
                _ => {
                    t(format!("{p}.feed_forward.w1.weight"), vec![ff, d], 0.0, g);
                    t(format!("{p}.feed_forward.w2.weight"), vec![d, ff], 0.0, 1.0 / (ff as f32).sqrt());
                    t(format!("{p}.feed_forward.w3.weight"), vec![ff, d], 0.0, g);
                }
            }
            continue;
        }
        t(format!("{p}.input_layernorm.weight"), vec![d], norm_mean, 0.1);
        t(format!("{p}.post_attention_layernorm.weight"), vec![d], norm_mean, 0.1);
        if gemma {
            t(format!("{p}.pre_feedforward_layernorm.weight"), vec![d], norm_mean, 0.1);
            t(format!("{p}.post_feedforward_layernorm.weight"), vec![d], norm_mean, 0.1);
        }
        for (w, rows) in [("q_proj", spec.n_head * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)] {
            t(format!("{p}.self_attn.{w}.weight"), vec![rows, d], 0.0, g);
            if spec.arch == FixtureArch::Qwen2 {
                t(format!("{p}.self_attn.{w}.bias"), vec![rows], 0.0, 0.1);
            }
        }
        t(format!("{p}.self_attn.o_proj.weight"), vec![d, spec.n_head * hd], 0.0, g);
        if matches!(spec.arch, FixtureArch::Qwen3 | FixtureArch::Gemma3) {
            t(format!("{p}.self_attn.q_norm.weight"), vec![hd], norm_mean, 0.1);
            t(format!("{p}.self_attn.k_norm.weight"), vec![hd], norm_mean, 0.1);
        }
        t(format!("{p}.mlp.gate_proj.weight"), vec![ff, d], 0.0, g);
        t(format!("{p}.mlp.up_proj.weight"), vec![ff, d], 0.0, g);
        t(format!("{p}.mlp.down_proj.weight"), vec![d, ff], 0.0, 1.0 / (ff as f32).sqrt());
    }
    if lfm {
        t("model.embedding_norm.weight".into(), vec![d], 1.0, 0.1);
    } else {
        t("model.norm.weight".into(), vec![d], norm_mean, 0.1);
    }
    if matches!(spec.arch, FixtureArch::Llama | FixtureArch::Gemma3) {
        t("lm_head.weight".into(), vec![n_vocab, d], 0.0, out_sigma);
    }
    out
}

/// Writes the weights: one `model.safetensors`, or `spec.shards` files and their index. Values
/// are drawn tensor by tensor while writing, so memory stays at one tensor.
pub(super) fn write_weights(spec: &HfSpec, n_vocab: usize, dir: &Path) -> Result<()> {
    let tensors = hf_tensors(spec, n_vocab);
    let n = spec.shards.max(1);
    let per = tensors.len().div_ceil(n);
    let mut rng = Gaussian::new(spec.seed);
    let mut weight_map = serde_json::Map::new();
    for (i, part) in tensors.chunks(per).enumerate() {
        let file = if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", i + 1)
        };
        write_safetensors(&dir.join(&file), part, spec.dtype, &mut rng)?;
        for t in part {
            weight_map.insert(t.name.clone(), json!(file));
        }
    }
    if n > 1 {
        let total: usize = tensors.iter().map(|t| t.numel() * spec.dtype.size()).sum();
        write_json(
            &dir.join("model.safetensors.index.json"),
            &json!({"metadata": {"total_size": total}, "weight_map": weight_map}),
        )?;
    }
    Ok(())
}

/// A safetensors file: 8-byte header length, JSON header, data (tensors in the order given,
/// values drawn from `rng` as they are written).
pub(super) fn write_safetensors(
    path: &Path,
    tensors: &[HfTensor],
    dtype: HfDtype,
    rng: &mut Gaussian,
) -> Result<()> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0;
    for t in tensors {
        let bytes = t.numel() * dtype.size();
        header.insert(
            t.name.clone(),
            json!({"dtype": dtype.name(), "shape": t.shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).map_err(|e| WickError::Internal(e.to_string()))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut f = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_err)?);
    f.write_all(&(h.len() as u64).to_le_bytes()).map_err(io_err)?;
    f.write_all(&h).map_err(io_err)?;
    let mut buf = vec![];
    for t in tensors {
        let mut left = t.numel();
        while left > 0 {
            let n = left.min(1 << 20);
            let v: Vec<f32> = (0..n).map(|_| t.mean + t.sigma * rng.sample()).collect();
            buf.clear();
            dtype.append(&v, &mut buf);
            f.write_all(&buf).map_err(io_err)?;
            left -= n;
        }
    }
    f.flush().map_err(io_err)
}

/// A JSON file of the checkpoint, pretty-printed.
pub(super) fn write_json(path: &Path, v: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(v).map_err(|e| WickError::Internal(e.to_string()))?)
        .map_err(io_err)
}
