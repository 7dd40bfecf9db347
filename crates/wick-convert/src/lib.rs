//! `wick convert`: a Hugging Face model directory (config.json, safetensors shards,
//! tokenizer files) becomes a GGUF that llama.cpp and Wick load. Metadata keys and tensor
//! names are those llama.cpp's `convert_hf_to_gguf.py` writes; quantized types follow
//! `llama-quantize`'s per-tensor mixes, with blocks byte-identical to its reference
//! quantizers. Weights stream tensor by tensor from the mmapped shards, so memory stays near
//! one tensor; the output appears (by rename) only once complete.
//!
//! Layout: `config` (config.json), `safetensors` (the shards), `arch` (names, shapes,
//! hyperparameter keys), `vocab` (tokenizer keys), `meta` (general.* keys), `quant` (types
//! and quantizers), `gguf` (the writer), `rows` (a tensor's values), `write` (the pipeline),
//! `lora` (PEFT LoRA adapters → GGUF adapters; `convert` routes a directory with
//! `adapter_config.json` there).

pub mod arch;
pub mod config;
pub mod error;
pub mod gguf;
pub mod lora;
pub mod meta;
mod output;
pub mod quant;
mod rows;
pub mod safetensors;
pub mod vocab;
mod write;

pub use error::{ConvertError, Result};
pub use lora::{convert_lora, is_peft_dir, LoraOptions};
pub use output::{Progress, Report};
pub use quant::mix::OutType;
pub use quant::GgmlType;
pub use write::{convert, inspect, ConvertOptions};
