//! What a synthetic Hugging Face checkpoint is made of (`hf.rs` writes it, `hf_weights.rs`
//! its weights).

use crate::{FixtureArch, MoeSpec};

/// One synthetic checkpoint.
#[derive(Clone, Debug)]
pub struct HfSpec {
    pub dir_name: String,
    pub arch: FixtureArch,
    pub dtype: HfDtype,
    pub d: usize,
    pub n_head: usize,
    /// Per layer; 0 marks an LFM2 short-conv layer.
    pub n_kv: Vec<usize>,
    pub ff: usize,
    /// llama.cpp vocab GGUF the tokenizer is rebuilt from.
    pub vocab_file: &'static str,
    /// llama.cpp chat template (models/templates/) carried in tokenizer_config.json.
    pub template: &'static str,
    pub seed: u64,
    pub moe: Option<MoeSpec>,
    /// Safetensors files; more than one writes model.safetensors.index.json.
    pub shards: usize,
}

/// The element type weights are stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HfDtype {
    F32,
    F16,
    Bf16,
}

impl HfDtype {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
        }
    }
    pub(super) fn torch(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::Bf16 => "bfloat16",
        }
    }
    pub(super) fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }
    pub(super) fn append(self, v: &[f32], out: &mut Vec<u8>) {
        match self {
            Self::F32 => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Self::F16 => v.iter().for_each(|x| out.extend_from_slice(&half::f16::from_f32(*x).to_le_bytes())),
            Self::Bf16 => {
                v.iter().for_each(|x| out.extend_from_slice(&half::bf16::from_f32(*x).to_le_bytes()))
            }
        }
    }
}
