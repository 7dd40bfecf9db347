//! Which type each tensor gets. Two stages, as llama.cpp does them:
//!
//! 1. `convert_hf_to_gguf.py` (`ModelBase.prepare_tensors`) writes every tensor as the file
//!    type (F32/F16/BF16), except 1-D tensors, norms, biases and a few small ones that stay F32.
//! 2. For the quantized types, `llama-quantize` (src/llama-quant.cpp,
//!    `llama_tensor_get_type`) picks each quantizable tensor's type from the file type, the
//!    tensor's role, its layer and the model's shape — the `_M` mixes give Q6_K to the output,
//!    to attn_v and ffn_down in some layers, etc. — then falls back to a type whose block
//!    fits the row length.
//!
//! So a quantized output equals `llama-quantize` run on the float file this converter writes
//! for `--outtype auto` (BF16 for bf16 checkpoints, F16 otherwise).

use super::GgmlType;

/// An output file type (`--outtype`), with llama.cpp's `llama_ftype` number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
    Q4KM,
    Q5KM,
    Q6K,
}

impl OutType {
    pub const ALL: [OutType; 8] =
        [Self::F32, Self::F16, Self::Bf16, Self::Q8_0, Self::Q4_0, Self::Q4KM, Self::Q5KM, Self::Q6K];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// The `--outtype` spelling (llama.cpp's, lower case).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4KM => "q4_k_m",
            Self::Q5KM => "q5_k_m",
            Self::Q6K => "q6_k",
        }
    }

    /// `general.file_type` (`llama_ftype`).
    pub fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q8_0 => 7,
            Self::Q4KM => 15,
            Self::Q5KM => 17,
            Self::Q6K => 18,
            Self::Bf16 => 32,
        }
    }

    /// The float type of stage 1, or None for the quantized types.
    pub fn float_type(self) -> Option<GgmlType> {
        match self {
            Self::F32 => Some(GgmlType::F32),
            Self::F16 => Some(GgmlType::F16),
            Self::Bf16 => Some(GgmlType::Bf16),
            _ => None,
        }
    }

    /// `llama_ftype_get_default_type`.
    fn default_type(self) -> GgmlType {
        match self {
            Self::F32 => GgmlType::F32,
            Self::F16 => GgmlType::F16,
            Self::Bf16 => GgmlType::Bf16,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4KM => GgmlType::Q4K,
            Self::Q5KM => GgmlType::Q5K,
            Self::Q6K => GgmlType::Q6K,
        }
    }
}

/// Stage 1: whether the converter keeps this tensor in F32 whatever the file type. `n_dims`
/// is the tensor's rank as written (after squeezes / stacking).
pub fn stays_f32(name: &str, n_dims: usize) -> bool {
    const F32_SUFFIXES: [&str; 4] = [
        ".ffn_gate_inp.weight",
        ".ffn_gate_inp_shexp.weight",
        ".shortconv.conv.weight",
        ".ssm_conv1d.weight",
    ];
    n_dims <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || F32_SUFFIXES.iter().any(|s| name.ends_with(s))
        || name == "position_embd.weight"
        || name == "token_types.weight"
}

/// What llama-quantize needs to know about the model.
#[derive(Clone, Debug)]
pub struct ModelShape {
    pub arch: String,
    pub n_layer: usize,
    /// `{arch}.expert_count`, 0 without experts.
    pub n_expert: usize,
    /// llama with 80 layers and GQA: llama.cpp's `LLM_TYPE_70B`, which gets a bigger attn_v.
    pub is_70b: bool,
}

/// One tensor as stage 2 sees it: its name, ggml shape (ne0 first) and stage-1 type.
pub struct TensorRef<'a> {
    pub name: &'a str,
    pub ne: &'a [usize],
    pub base: GgmlType,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

/// `tensor_get_category`.
fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    let table = [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    table.iter().find(|(pat, _)| name.contains(pat)).map_or(Other, |&(_, c)| c)
}

/// `ggml_n_dims`: the rank without trailing 1s.
fn n_dims(ne: &[usize]) -> usize {
    ne.iter().rposition(|&n| n > 1).map_or(1, |i| i + 1)
}

/// `tensor_allows_quantization` (the entries that can name a tensor of these architectures).
fn allows_quantization(name: &str, ne: &[usize]) -> bool {
    const NEVER: [&str; 8] = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "attn_rel_b.weight",
    ];
    n_dims(ne) >= 2
        && name.ends_with("weight")
        && !NEVER.iter().any(|p| name.contains(p))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// Stage 2 for every tensor of a model, in the order given (llama-quantize walks tensors
/// sorted by layer, then name: its counters depend on that order, so pass them sorted).
pub fn quantized_types(out: OutType, model: &ModelShape, tensors: &[TensorRef<'_>]) -> Vec<GgmlType> {
    let default = out.default_type();
    let has_tied_embeddings = !tensors.iter().any(|t| category(t.name) == Category::Output);
    let n_attention_wv = tensors
        .iter()
        .filter(|t| matches!(category(t.name), Category::AttnV | Category::AttnQkv | Category::AttnKvB))
        .count();
    let mut state = Counters { n_attention_wv, n_ffn_down: model.n_layer, ..Default::default() };
    tensors
        .iter()
        .map(|t| {
            if !allows_quantization(t.name, t.ne) {
                return t.base;
            }
            let picked = pick(out, default, model, has_tied_embeddings, &mut state, t);
            fallback(picked, t.ne[0])
        })
        .collect()
}

#[derive(Default)]
struct Counters {
    n_attention_wv: usize,
    i_attention_wv: usize,
    n_ffn_down: usize,
    i_ffn_down: usize,
}

fn use_more_bits(i_layer: usize, n_layers: usize) -> bool {
    let (i, n) = (i_layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The layer of `blk.N.…`, as `sscanf(name, "blk.%d.")`.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// `llama_tensor_get_type_impl` for the file types of `OutType`.
fn pick(
    out: OutType,
    mut new: GgmlType,
    model: &ModelShape,
    tied: bool,
    st: &mut Counters,
    t: &TensorRef<'_>,
) -> GgmlType {
    use Category::*;
    let cat = category(t.name);
    let n_expert = model.n_expert.max(1);
    let km = matches!(out, OutType::Q4KM | OutType::Q5KM);
    if cat == Output || (tied && cat == TokenEmbd) {
        if !t.ne[0].is_multiple_of(new.block_size()) {
            new = GgmlType::Q8_0;
        } else if new != GgmlType::Q8_0 {
            new = GgmlType::Q6K;
        }
    } else if cat == TokenEmbd {
        // Only the IQ*/TQ* file types change an untied token embedding.
    } else if matches!(cat, AttnV | AttnQkv | AttnKvB) {
        if km && use_more_bits(st.i_attention_wv, st.n_attention_wv) {
            new = GgmlType::Q6K;
        }
        if model.is_70b && new == GgmlType::Q4K {
            new = GgmlType::Q5K;
        }
        if model.n_expert == 8 {
            new = GgmlType::Q8_0;
        }
        st.i_attention_wv += 1;
    } else if cat == AttnK {
        if model.n_expert == 8 {
            new = GgmlType::Q8_0;
        }
    } else if cat == FfnDown {
        let (i_layer, n_layer) = if n_expert > 1 {
            (layer_of(t.name).unwrap_or(st.i_ffn_down), st.n_ffn_down)
        } else {
            (st.i_ffn_down, st.n_ffn_down)
        };
        if km && use_more_bits(i_layer, n_layer) {
            new = GgmlType::Q6K;
        }
        st.i_ffn_down += 1;
    } else if cat == AttnOutput && model.n_expert == 8 && out == OutType::Q4KM {
        new = GgmlType::Q5K;
    }
    new
}

/// `tensor_type_fallback`: a type whose block does not divide the row length falls back.
fn fallback(t: GgmlType, ncols: usize) -> GgmlType {
    if ncols.is_multiple_of(t.block_size()) {
        return t;
    }
    let alt = match t {
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        other => other,
    };
    if !ncols.is_multiple_of(alt.block_size()) {
        GgmlType::F16
    } else {
        alt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(n_layer: usize, n_expert: usize) -> ModelShape {
        ModelShape { arch: "llama".into(), n_layer, n_expert, is_70b: false }
    }

    #[test]
    fn use_more_bits_matches_llama_cpp_for_16_layers() {
        // i < 2, i >= 14, (i - 2) % 3 == 2 → 0,1,4,7,10,13,14,15
        let got: Vec<usize> = (0..16).filter(|&i| use_more_bits(i, 16)).collect();
        assert_eq!(got, [0, 1, 4, 7, 10, 13, 14, 15]);
    }

    #[test]
    fn q4_k_m_gives_the_tied_embedding_q6_k_and_falls_back_on_short_rows() {
        let ne = [256usize, 1000];
        let t = [
            TensorRef { name: "token_embd.weight", ne: &ne, base: GgmlType::F16 },
            TensorRef { name: "blk.0.attn_q.weight", ne: &[64, 64], base: GgmlType::F16 },
            TensorRef { name: "blk.0.attn_norm.weight", ne: &[256], base: GgmlType::F32 },
        ];
        let got = quantized_types(OutType::Q4KM, &shape(1, 0), &t);
        assert_eq!(got, [GgmlType::Q6K, GgmlType::Q5_0, GgmlType::F32]);
    }

    #[test]
    fn eight_experts_bump_attention_to_q8_0() {
        let t = [
            TensorRef { name: "blk.0.attn_k.weight", ne: &[256, 256], base: GgmlType::F16 },
            TensorRef { name: "blk.0.attn_output.weight", ne: &[256, 256], base: GgmlType::F16 },
            TensorRef { name: "blk.0.attn_v.weight", ne: &[256, 256], base: GgmlType::F16 },
        ];
        let got = quantized_types(OutType::Q4KM, &shape(1, 8), &t);
        assert_eq!(got, [GgmlType::Q8_0, GgmlType::Q5K, GgmlType::Q8_0]);
    }
}
