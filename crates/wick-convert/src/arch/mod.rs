//! The architectures: which Hugging Face class becomes which llama.cpp architecture, and the
//! tensor plan — every GGUF tensor with its shape and where its values come from (one HF
//! tensor, possibly with rows permuted or a constant added; stacked experts; generated
//! values). Names and shapes are checked against config.json before anything is written.

pub(crate) mod names;
pub mod params;

use std::collections::BTreeMap;

use crate::config::HfConfig;
use crate::error::{ConvertError, Result};
use crate::safetensors::Checkpoint;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Lfm2,
    Lfm2Moe,
}

impl Arch {
    /// The llama.cpp architecture of a Hugging Face `architectures[0]` (the converter's
    /// `ModelBase.register` names for these model classes).
    pub fn from_hf(hf: &str) -> Result<Self> {
        Ok(match hf {
            "LlamaForCausalLM" | "LLaMAForCausalLM" | "MistralForCausalLM" | "LlamaModel" => Self::Llama,
            "Qwen2ForCausalLM" | "Qwen2Model" => Self::Qwen2,
            "Qwen3ForCausalLM" | "Qwen3Model" => Self::Qwen3,
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => Self::Gemma3,
            "Lfm2ForCausalLM" | "LFM2ForCausalLM" => Self::Lfm2,
            "Lfm2MoeForCausalLM" => Self::Lfm2Moe,
            other => return Err(ConvertError::UnknownArchitecture(other.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
            Self::Lfm2 => "lfm2",
            Self::Lfm2Moe => "lfm2moe",
        }
    }
}

/// Where a GGUF tensor's values come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// One HF tensor, read in order; `permute_heads` undoes HF's rotary layout (llama's
    /// q/k), `add` is added to every value (Gemma 3's norms store w − 1). Only the first
    /// `ne`-many values are read (Gemma 3's embedding drops rows past the vocabulary).
    Tensor { hf: String, permute_heads: Option<usize>, add: f32 },
    /// HF tensors stacked along a new outer dimension (the experts of one layer).
    Stack(Vec<String>),
    /// Values computed by the converter (llama 3's rope_freqs).
    Values(Vec<f32>),
}

/// One tensor of the output.
#[derive(Clone, Debug)]
pub struct Planned {
    pub name: String,
    /// ggml order (ne0 = row length first).
    pub ne: Vec<usize>,
    /// The rank as the converter writes it (after squeezes), for its F32 rule.
    pub n_dims: usize,
    pub src: Source,
}

impl Planned {
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    /// llama.cpp's loader order: by layer (non-layer tensors first), then by name.
    pub fn sort_key(&self) -> (i64, String) {
        let layer =
            self.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok());
        (layer.unwrap_or(-1), self.name.clone())
    }
}

/// What the shape checks need from config.json.
pub struct Dims {
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub n_layer: usize,
    /// Per layer (0 for LFM2 conv layers).
    pub n_kv: Vec<usize>,
    pub n_vocab: usize,
}

/// Builds the plan for `ck` and checks it: every tensor mapped, the shapes config.json
/// implies, every layer complete.
pub fn plan(
    arch: Arch,
    cfg: &HfConfig,
    ck: &Checkpoint,
    dims: &Dims,
    n_tokens: usize,
) -> Result<Vec<Planned>> {
    let hf_arch = cfg.hf_arch()?.to_string();
    let mut out = vec![];
    // (layer, w) → expert index → HF name.
    let mut experts: BTreeMap<(usize, String), BTreeMap<usize, String>> = BTreeMap::new();
    for (orig, t) in &ck.tensors {
        if names::skipped(orig) {
            continue;
        }
        let name = names::canonical(arch, &hf_arch, orig);
        if arch == Arch::Lfm2Moe {
            if let Some((bid, e, w)) = names::expert_part(&name) {
                experts.entry((bid, w.to_string())).or_default().insert(e, orig.clone());
                continue;
            }
        }
        let Some(gguf) = names::gguf_name(arch, &name) else {
            return Err(ConvertError::tensor(format!(
                "cannot map tensor `{orig}` to a {} tensor",
                arch.name()
            )));
        };
        let mut shape = t.shape.clone();
        if gguf.ends_with("shortconv.conv.weight") && shape.len() == 3 && shape[1] == 1 {
            shape.remove(1); // [d, 1, L] → [d, L], as `squeeze(1)`
        }
        if arch == Arch::Gemma3 && gguf == "token_embd.weight" && shape[0] > n_tokens {
            shape[0] = n_tokens; // rows past the tokenizer's vocabulary are dropped
        }
        let permute_heads = (arch == Arch::Llama)
            .then(|| {
                if name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias") {
                    Some(dims.n_head)
                } else if name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias") {
                    Some(
                        names::split_layer(&name)
                            .map_or(dims.n_head, |(b, _)| dims.n_kv[b.min(dims.n_kv.len() - 1)]),
                    )
                } else {
                    None
                }
            })
            .flatten();
        let add = if arch == Arch::Gemma3 && name.ends_with("norm.weight") { 1.0 } else { 0.0 };
        let n_dims = shape.len();
        out.push(Planned {
            name: gguf,
            ne: shape.iter().rev().copied().collect(),
            n_dims,
            src: Source::Tensor { hf: orig.clone(), permute_heads, add },
        });
    }
    for ((bid, w), parts) in experts {
        out.push(stack_experts(ck, bid, &w, parts)?);
    }
    out.sort_by_key(|p| p.sort_key());
    check(arch, &out, dims)?;
    Ok(out)
}

fn stack_experts(ck: &Checkpoint, bid: usize, w: &str, parts: BTreeMap<usize, String>) -> Result<Planned> {
    let n = parts.len();
    if parts.keys().copied().ne(0..n) {
        return Err(ConvertError::tensor(format!("layer {bid}: experts of {w} are not numbered 0..{n}")));
    }
    let names: Vec<String> = parts.into_values().collect();
    let shape = ck.tensors[&names[0]].shape.clone();
    for name in &names {
        let got = &ck.tensors[name].shape;
        if *got != shape {
            return Err(ConvertError::ShapeMismatch {
                name: name.clone(),
                got: got.clone(),
                want: shape.clone(),
            });
        }
    }
    let mut ne: Vec<usize> = shape.iter().rev().copied().collect();
    ne.push(n);
    Ok(Planned { name: names::experts_name(bid, w), ne, n_dims: 3, src: Source::Stack(names) })
}

/// The shapes config.json implies, and each layer's required tensors.
fn check(arch: Arch, plan: &[Planned], d: &Dims) -> Result<()> {
    let by_name: BTreeMap<&str, &Planned> = plan.iter().map(|p| (p.name.as_str(), p)).collect();
    let mismatch = |p: &Planned, want: Vec<usize>| ConvertError::ShapeMismatch {
        name: p.name.clone(),
        got: p.ne.iter().rev().copied().collect(),
        want: want.into_iter().rev().collect(),
    };
    let expect = |name: &str, ne: &[Option<usize>]| -> Result<()> {
        let Some(p) = by_name.get(name) else {
            return Err(ConvertError::tensor(format!(
                "missing tensor `{name}` (a {} model needs it)",
                arch.name()
            )));
        };
        let ok = p.ne.len() == ne.len() && p.ne.iter().zip(ne).all(|(g, w)| w.is_none_or(|w| w == *g));
        if !ok {
            let want = ne.iter().zip(&p.ne).map(|(w, g)| w.unwrap_or(*g)).collect();
            return Err(mismatch(p, want));
        }
        Ok(())
    };
    let e = Some(d.n_embd);
    let n_vocab = if arch == Arch::Gemma3 { None } else { Some(d.n_vocab) };
    expect("token_embd.weight", &[e, n_vocab])?;
    for il in 0..d.n_layer {
        let b = |s: &str| format!("blk.{il}.{s}");
        expect(&b("attn_norm.weight"), &[e])?;
        let kv = d.n_kv[il];
        if kv == 0 {
            expect(&b("shortconv.conv.weight"), &[None, e])?;
            expect(&b("shortconv.in_proj.weight"), &[e, Some(3 * d.n_embd)])?;
            expect(&b("shortconv.out_proj.weight"), &[e, e])?;
        } else {
            let q = Some(d.n_head * d.head_dim);
            expect(&b("attn_q.weight"), &[e, q])?;
            expect(&b("attn_k.weight"), &[e, Some(kv * d.head_dim)])?;
            expect(&b("attn_v.weight"), &[e, Some(kv * d.head_dim)])?;
            expect(&b("attn_output.weight"), &[q, e])?;
        }
        let moe = by_name.contains_key(b("ffn_gate_exps.weight").as_str());
        if moe {
            expect(&b("ffn_gate_inp.weight"), &[e, None])?;
            expect(&b("ffn_gate_exps.weight"), &[e, None, None])?;
            let ne = &by_name[b("ffn_gate_exps.weight").as_str()].ne;
            expect(&b("ffn_up_exps.weight"), &[e, Some(ne[1]), Some(ne[2])])?;
            expect(&b("ffn_down_exps.weight"), &[Some(ne[1]), e, Some(ne[2])])?;
        } else {
            expect(&b("ffn_gate.weight"), &[e, None])?;
            let ff = by_name[b("ffn_gate.weight").as_str()].ne[1];
            expect(&b("ffn_up.weight"), &[e, Some(ff)])?;
            expect(&b("ffn_down.weight"), &[Some(ff), e])?;
        }
    }
    match arch {
        Arch::Lfm2 | Arch::Lfm2Moe => expect("token_embd_norm.weight", &[e]),
        _ => expect("output_norm.weight", &[e]),
    }
}
