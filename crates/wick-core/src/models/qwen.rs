//! Architectures `qwen2` and `qwen3`: the llama stack with NEOX RoPE. Qwen 2 adds biases to
//! the Q/K/V projections (loaded by `Linear` when `attn_{q,k,v}.bias` exist); Qwen 3 drops
//! them and RMS-normalises each Q and K head before RoPE (llama.cpp `qwen2.cpp`, `qwen3.cpp`).

use super::decoder::Decoder;
use super::llama::load_arch;
use super::rope::RopeStyle;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::runtime::device::Placement;

pub fn load_qwen2(g: &GgufFile, dev: &Placement) -> Result<Decoder> {
    load_arch(g, dev, "qwen2", RopeStyle::Neox, false)
}

pub fn load_qwen3(g: &GgufFile, dev: &Placement) -> Result<Decoder> {
    load_arch(g, dev, "qwen3", RopeStyle::Neox, true)
}
