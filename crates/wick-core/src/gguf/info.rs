//! What `wick show` and `/api/show` report about a GGUF file, read from its header alone:
//! the tensor directory gives the parameter count and the quantization mix, the metadata the
//! rest. Works for any architecture the reader can parse, loadable by Wick or not.

use std::path::Path;

use candle_core::quantized::GgmlDType;

use super::{GgufFile, MetaValue, Metadata};
use crate::error::{Result, WickError};

/// Tensors of one ggml type and the bytes they take in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantShare {
    /// ggml's name for the type: "Q4_K", "F32", ...
    pub dtype: &'static str,
    pub tensors: usize,
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub struct GgufHeaderInfo {
    pub architecture: String,
    /// `general.name`.
    pub name: Option<String>,
    pub gguf_version: u32,
    pub file_size: u64,
    /// Sum of all tensor element counts.
    pub parameter_count: u64,
    /// `general.file_type`, llama.cpp's LLAMA_FTYPE number.
    pub file_type: Option<u32>,
    /// "Q4_K_M" when `general.file_type` names it, else the ggml type holding most bytes.
    pub quantization: String,
    /// Per ggml type, most bytes first.
    pub quant_mix: Vec<QuantShare>,
    /// Weight bytes one decoded token streams from memory: the bandwidth floor's numerator.
    pub decode_bytes: u64,
    pub context_length: Option<u64>,
    pub embedding_length: Option<u64>,
    pub block_count: Option<u64>,
    /// Largest per-layer value when the file stores one per layer (LFM2's KV heads).
    pub head_count: Option<u64>,
    pub head_count_kv: Option<u64>,
    pub expert_count: Option<u64>,
    pub expert_used_count: Option<u64>,
    /// Entries of `tokenizer.ggml.tokens`, else `{arch}.vocab_size`.
    pub vocab_size: Option<u64>,
    pub chat_template: Option<String>,
    /// Every metadata key in file order (Ollama's `model_info` is built from these).
    pub metadata: Vec<(String, MetaValue)>,
}

impl GgufHeaderInfo {
    /// Opens `path` and reads its header; the weights are mapped, never read.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_gguf(&GgufFile::open(path)?)
    }

    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let meta = &g.metadata;
        let architecture = g.architecture()?.to_string();
        let key = |k: &str| format!("{architecture}.{k}");
        let file_type = meta
            .opt_u64("general.file_type")?
            .map(|v| {
                u32::try_from(v)
                    .map_err(|_| WickError::load(format!("general.file_type {v} is out of range")))
            })
            .transpose()?;
        let quant_mix = quant_mix(g);
        let quantization = file_type
            .and_then(file_type_name)
            .map(str::to_string)
            .or_else(|| quant_mix.first().map(|q| q.dtype.to_string()))
            .unwrap_or_else(|| "unknown".into());
        let expert_count = meta.opt_u64(&key("expert_count"))?;
        let expert_used_count = meta.opt_u64(&key("expert_used_count"))?;
        let vocab_size = match meta.opt_array("tokenizer.ggml.tokens")? {
            Some(tokens) => Some(tokens.len() as u64),
            None => meta.opt_u64(&key("vocab_size"))?,
        };
        Ok(Self {
            name: meta.opt_str("general.name")?.map(str::to_string),
            gguf_version: g.version,
            file_size: g.file_size() as u64,
            parameter_count: g.param_count(),
            file_type,
            quantization,
            quant_mix,
            decode_bytes: decode_bytes(g, expert_count.zip(expert_used_count)),
            context_length: meta.opt_u64(&key("context_length"))?,
            embedding_length: meta.opt_u64(&key("embedding_length"))?,
            block_count: meta.opt_u64(&key("block_count"))?,
            head_count: max_per_layer(meta, &key("attention.head_count"))?,
            head_count_kv: max_per_layer(meta, &key("attention.head_count_kv"))?,
            expert_count,
            expert_used_count,
            vocab_size,
            chat_template: meta.opt_str("tokenizer.chat_template")?.map(str::to_string),
            metadata: meta.entries.clone(),
            architecture,
        })
    }

    /// Empties metadata arrays longer than `max_len`, as Ollama's non-verbose `model_info`
    /// does with the tokenizer's vocabulary, scores and merges.
    pub fn truncate_arrays(&mut self, max_len: usize) {
        for (_, v) in &mut self.metadata {
            if matches!(v, MetaValue::Array(a) if a.len() > max_len) {
                *v = MetaValue::Array(vec![]);
            }
        }
    }
}

/// A scalar, or the largest entry of a per-layer array.
fn max_per_layer(meta: &Metadata, key: &str) -> Result<Option<u64>> {
    match meta.get(key) {
        None => Ok(None),
        Some(MetaValue::Array(a)) => a
            .iter()
            .map(MetaValue::as_u64)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.into_iter().max())
            .ok_or_else(|| WickError::load(format!("metadata key `{key}` has non-integer entries"))),
        Some(_) => meta.opt_u64(key),
    }
}

fn quant_mix(g: &GgufFile) -> Vec<QuantShare> {
    let mut mix: Vec<QuantShare> = vec![];
    for t in &g.tensors {
        let name = ggml_type_name(t.dtype);
        match mix.iter_mut().find(|q| q.dtype == name) {
            Some(q) => {
                q.tensors += 1;
                q.bytes += t.size as u64;
            }
            None => mix.push(QuantShare { dtype: name, tensors: 1, bytes: t.size as u64 }),
        }
    }
    // Most bytes first; ties in name order, so the result does not depend on tensor order.
    mix.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.dtype.cmp(b.dtype)));
    mix
}

/// Every tensor but a token embedding with an output head of its own (a lookup reads one row of
/// it; a tied one is the head, read whole), and a mixture's experts (`*_exps`) at the share a
/// token routes to, `used / count`: the mean over tokens when the router spreads them evenly.
fn decode_bytes(g: &GgufFile, experts: Option<(u64, u64)>) -> u64 {
    let untied = g.tensors.iter().any(|t| t.name == "output.weight");
    let bytes = g.tensors.iter().filter(|t| !(untied && t.name == "token_embd.weight")).map(|t| {
        match (experts, t.name.contains("_exps.")) {
            (Some((count, used)), true) if count > 0 => t.size as u64 * used.min(count) / count,
            _ => t.size as u64,
        }
    });
    bytes.sum()
}

/// ggml's spelling of a tensor type (candle's Debug names drop the underscore of K-quants).
pub fn ggml_type_name(t: GgmlDType) -> &'static str {
    match t {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

/// llama.cpp's `llama_ftype` numbers (llama.h) by the names llama.cpp and Ollama print.
/// 5 and 6 (Q4_2, Q4_3) and 33–35 (Q4_0_4_4, …) were removed upstream and have no name here.
pub fn file_type_name(ftype: u32) -> Option<&'static str> {
    // llama.cpp ORs LLAMA_FTYPE_GUESSED into a type it inferred; the name is the same.
    Some(match ftype & !1024 {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        4 => "Q4_1_F16",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}
