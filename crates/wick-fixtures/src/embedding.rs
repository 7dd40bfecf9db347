//! Embedding and rerank fixtures, shaped like the models llama.cpp's converter writes for them
//! (`conversion/lfm2.py` `LFM2ColBertModel`, `conversion/qwen.py` `Qwen3Model`):
//!
//! - `tiny-lfm2-embed-q8_0.gguf`: LFM2.5-Embedding — `tiny-lfm2-q8_0`'s shape with
//!   bidirectional attention (`lfm2.attention.causal = false`) and CLS pooling
//!   (`lfm2.pooling_type = 2`).
//! - `tiny-lfm2-colbert-q8_0.gguf`: LFM2.5-ColBERT — causal, no pooling key (one vector per
//!   token), and the `dense_2.weight` projection (ggml `{64, 32}`: 64 → 32, F16 as the
//!   converter's default `--outtype f16` writes it) with `lfm2.embedding_length_out = 32`.
//! - `tiny-qwen3-rerank-q8_0.gguf`: Qwen3-Reranker — `tiny-qwen3-q8_0`'s shape with RANK
//!   pooling (`qwen3.pooling_type = 4`), `qwen3.classifier.output_labels = ["yes", "no"]`, the
//!   named template `tokenizer.chat_template.rerank` (listed in `tokenizer.chat_templates`) and
//!   `cls.output.weight` (ggml `{64, 2}`): the tied head's rows of the tokens `yes` and `no`,
//!   in that order, as the converter takes them from `lm_head`.
//!
//! `tiny-lfm2-q8_0.gguf` serves as the causal model with mean pooling. Each file has its own
//! seed, so writing these changes no other fixture.

use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use wick_core::error::{Result, WickError};
use wick_core::gguf::GgufFile;

use super::build::{build_fixture, refs, Gaussian};
use super::gguf_write::{io_err, tokenizer_metadata, write_gguf, Meta};
use crate::{extra_arch_specs, standard_specs, FixtureSpec};

pub const EMBED_FILE: &str = "tiny-lfm2-embed-q8_0.gguf";
pub const COLBERT_FILE: &str = "tiny-lfm2-colbert-q8_0.gguf";
pub const RERANK_FILE: &str = "tiny-qwen3-rerank-q8_0.gguf";
/// Width of the ColBERT fixture's per-token vectors (`dense_2` output).
pub const COLBERT_DIM: usize = 32;

/// llama.cpp's `LLAMA_POOLING_TYPE_*` values.
pub const POOLING_CLS: u32 = 2;
pub const POOLING_RANK: u32 = 4;

/// Qwen3-Reranker's template, as `conversion/qwen.py` writes it (`{query}` and `{document}`
/// are replaced by llama-server's `format_prompt_rerank`).
pub const QWEN3_RERANK_TEMPLATE: &str = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The classifier labels of the rerank fixture, also the vocabulary tokens whose head rows
/// form `cls.output.weight` (row 0: `yes`, row 1: `no`).
pub const RERANK_LABELS: [&str; 2] = ["yes", "no"];

/// A standard spec by file name, renamed and reseeded.
fn derived(specs: Vec<FixtureSpec>, from: &str, file_name: &str, seed: u64) -> Result<FixtureSpec> {
    let mut s = specs
        .into_iter()
        .find(|s| s.file_name == from)
        .ok_or_else(|| WickError::Internal(format!("no fixture spec `{from}`")))?;
    s.file_name = file_name.into();
    s.seed = seed;
    Ok(s)
}

/// The embedding fixtures' base specs: (embed, colbert, rerank).
pub fn embedding_specs() -> Result<[FixtureSpec; 3]> {
    Ok([
        derived(standard_specs(), "tiny-lfm2-q8_0.gguf", EMBED_FILE, 100)?,
        derived(standard_specs(), "tiny-lfm2-q8_0.gguf", COLBERT_FILE, 101)?,
        derived(extra_arch_specs(), "tiny-qwen3-q8_0.gguf", RERANK_FILE, 102)?,
    ])
}

/// Puts `keys` after the architecture keys (before the first `tokenizer.*` key).
fn insert_arch_keys(meta: &mut Meta, keys: Meta) {
    let at = meta.iter().position(|(k, _)| k.starts_with("tokenizer.")).unwrap_or(meta.len());
    meta.splice(at..at, keys);
}

fn vocab_meta(llama_src: &Path, file: &str) -> Result<Meta> {
    Ok(tokenizer_metadata(&GgufFile::open(llama_src.join("models").join(file))?))
}

fn token_id(meta: &Meta, token: &str) -> Result<usize> {
    use gguf_file::Value as V;
    let tokens = meta.iter().find_map(|(k, v)| match v {
        V::Array(a) if k == "tokenizer.ggml.tokens" => Some(a),
        _ => None,
    });
    tokens
        .and_then(|a| a.iter().position(|t| matches!(t, V::String(s) if s == token)))
        .ok_or_else(|| WickError::Internal(format!("vocab has no token `{token}`")))
}

/// The metadata and tensors of the three fixtures, in `embedding_specs()` order.
#[allow(clippy::type_complexity)]
pub fn build_embedding_fixtures(llama_src: &Path) -> Result<Vec<(String, Meta, Vec<(String, QTensor)>)>> {
    use gguf_file::Value as V;
    let [embed, colbert, rerank] = embedding_specs()?;
    let mut out = vec![];

    let lfm2_vocab = vocab_meta(llama_src, embed.vocab_file)?;
    let (mut meta, tensors) = build_fixture(&embed, &lfm2_vocab)?;
    insert_arch_keys(
        &mut meta,
        vec![
            ("lfm2.attention.causal".into(), V::Bool(false)),
            ("lfm2.pooling_type".into(), V::U32(POOLING_CLS)),
        ],
    );
    out.push((embed.file_name.clone(), meta, tensors));

    let (mut meta, mut tensors) = build_fixture(&colbert, &lfm2_vocab)?;
    insert_arch_keys(&mut meta, vec![("lfm2.embedding_length_out".into(), V::U32(COLBERT_DIM as u32))]);
    // A separate stream, so the model's own weights are those of its seed alone.
    let dense = Gaussian::new(colbert.seed ^ 0xD5).tensor(
        &[COLBERT_DIM, colbert.d],
        0.0,
        1.0 / (colbert.d as f32).sqrt(),
    )?;
    tensors.push(("dense_2.weight".into(), QTensor::quantize(&dense, GgmlDType::F16)?));
    out.push((colbert.file_name.clone(), meta, tensors));

    let qwen_vocab = vocab_meta(llama_src, rerank.vocab_file)?;
    let (mut meta, mut tensors) = build_fixture(&rerank, &qwen_vocab)?;
    insert_arch_keys(
        &mut meta,
        vec![
            ("qwen3.pooling_type".into(), V::U32(POOLING_RANK)),
            (
                "qwen3.classifier.output_labels".into(),
                V::Array(RERANK_LABELS.iter().map(|l| V::String(l.to_string())).collect()),
            ),
        ],
    );
    meta.push(("tokenizer.chat_template.rerank".into(), V::String(QWEN3_RERANK_TEMPLATE.into())));
    meta.push(("tokenizer.chat_templates".into(), V::Array(vec![V::String("rerank".into())])));
    // The head is tied: its rows are the token embedding's. Q8_0 → f32 → Q8_0 is exact
    // (same block maxima, so the same scales), so the classifier rows equal the head rows.
    let ids = RERANK_LABELS
        .iter()
        .map(|t| token_id(&qwen_vocab, t).map(|i| i as u32))
        .collect::<Result<Vec<_>>>()?;
    let embd = tensors
        .iter()
        .find(|(k, _)| k == "token_embd.weight")
        .ok_or_else(|| WickError::Internal("rerank fixture has no token_embd.weight".into()))?
        .1
        .dequantize(&Device::Cpu)?;
    let rows = embd.index_select(&Tensor::new(ids.as_slice(), &Device::Cpu)?, 0)?;
    tensors.push(("cls.output.weight".into(), QTensor::quantize(&rows, rerank.dtype)?));
    out.push((rerank.file_name.clone(), meta, tensors));
    Ok(out)
}

/// Writes the embedding and rerank fixtures into `out_dir` with vocabularies from
/// `llama_src`; returns the paths written.
pub fn write_embedding_fixtures(out_dir: &Path, llama_src: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let mut written = vec![];
    for (name, meta, tensors) in build_embedding_fixtures(llama_src)? {
        let path = out_dir.join(name);
        write_gguf(&path, &meta, &refs(&tensors))?;
        written.push(path);
    }
    Ok(written)
}

/// The embedding benchmark's model: LFM2-350M's bench shape (`bench_specs`, Q8_0) made an
/// LFM2.5-Embedding (bidirectional, CLS pooling), written into `out_dir` by `--bench`.
pub fn write_bench_embedding(out_dir: &Path, llama_src: &Path) -> Result<PathBuf> {
    use gguf_file::Value as V;
    let mut spec = crate::bench_specs()
        .into_iter()
        .find(|s| s.file_name == "bench-lfm2-350m-q8_0.gguf")
        .ok_or_else(|| WickError::Internal("no bench-lfm2-350m-q8_0 spec".into()))?;
    spec.file_name = "bench-lfm2-embed-350m-q8_0.gguf".into();
    let (mut meta, tensors) = build_fixture(&spec, &vocab_meta(llama_src, spec.vocab_file)?)?;
    insert_arch_keys(
        &mut meta,
        vec![
            ("lfm2.attention.causal".into(), V::Bool(false)),
            ("lfm2.pooling_type".into(), V::U32(POOLING_CLS)),
        ],
    );
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let path = out_dir.join(&spec.file_name);
    write_gguf(&path, &meta, &refs(&tensors))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::default_llama_src;

    #[test]
    fn embedding_fixtures_carry_their_keys() -> Result<()> {
        let src = default_llama_src();
        if !src.join("models/ggml-vocab-qwen2.gguf").is_file() {
            eprintln!("skipped: no llama.cpp source at {}", src.display());
            return Ok(());
        }
        let dir = std::env::temp_dir().join(format!("wick-embed-fixtures-{}", std::process::id()));
        let paths = write_embedding_fixtures(&dir, &src)?;
        let open = |name: &str| GgufFile::open(dir.join(name));

        let g = open(EMBED_FILE)?;
        assert_eq!(g.metadata.opt_bool("lfm2.attention.causal")?, Some(false));
        assert_eq!(g.metadata.opt_u64("lfm2.pooling_type")?, Some(POOLING_CLS as u64));
        assert!(g.info("dense_2.weight").is_none());

        let g = open(COLBERT_FILE)?;
        assert!(g.metadata.get("lfm2.attention.causal").is_none());
        assert!(g.metadata.get("lfm2.pooling_type").is_none());
        assert_eq!(g.metadata.opt_u64("lfm2.embedding_length_out")?, Some(COLBERT_DIM as u64));
        let dense = g.info("dense_2.weight").expect("dense_2.weight");
        assert_eq!((dense.dims.clone(), dense.dtype), (vec![64, COLBERT_DIM], GgmlDType::F16));

        let g = open(RERANK_FILE)?;
        assert_eq!(g.metadata.str("general.architecture")?, "qwen3");
        assert_eq!(g.metadata.opt_u64("qwen3.pooling_type")?, Some(POOLING_RANK as u64));
        assert_eq!(g.metadata.str_array("qwen3.classifier.output_labels")?, Some(RERANK_LABELS.to_vec()));
        let template = g.metadata.str("tokenizer.chat_template.rerank")?;
        assert!(template.contains("{query}") && template.contains("{document}"));
        let cls = g.info("cls.output.weight").expect("cls.output.weight");
        assert_eq!(cls.dims, vec![64, 2]);

        // The classifier rows are the tied head's rows of `yes` and `no`.
        let built = build_embedding_fixtures(&src)?;
        let tensors = &built[2].2;
        let get = |n: &str| tensors.iter().find(|(k, _)| k == n).unwrap().1.dequantize(&Device::Cpu);
        let (embd, cls) = (get("token_embd.weight")?, get("cls.output.weight")?);
        let vocab = vocab_meta(&src, "ggml-vocab-qwen2.gguf")?;
        for (row, label) in RERANK_LABELS.iter().enumerate() {
            let want: Vec<f32> = embd.get(token_id(&vocab, label)?)?.to_vec1()?;
            assert_eq!(cls.get(row)?.to_vec1::<f32>()?, want, "row {row} ({label})");
        }

        for p in paths {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    }
}
