//! Synthetic Hugging Face checkpoints for `wick convert`: a directory as the Hub has it —
//! config.json, generation_config.json, tokenizer files, chat template, and random weights in
//! safetensors (one file, or shards with model.safetensors.index.json) — per architecture.
//! Weights are seeded (the same spec gives the same bytes); tokenizers are rebuilt from
//! llama.cpp's vocab GGUFs (`hf_tokenizer.rs`).

use serde_json::{json, Value};

use super::hf_tokenizer::{bpe_tokenizer_json, spm_model_proto, spm_tokenizer_json, VocabFile};
use super::hf_weights::{write_json, write_weights};
use std::path::{Path, PathBuf};

use wick_core::error::Result;

use super::gguf_write::io_err;
use super::hf_spec::{HfDtype, HfSpec};
use crate::{FixtureArch, MoeSpec};

/// LFM2's special tokens, added to a borrowed vocabulary for the LFM2 checkpoints.
const LFM2_SPECIAL: [&str; 3] = ["<|startoftext|>", "<|im_start|>", "<|im_end|>"];

/// One checkpoint per architecture: tiny (d=64) models in f16 with rows of 64 (so the
/// K-quants fall back, as llama-quantize does), lfm2moe sharded in three files; then three
/// with rows of 256 for the K-quants (`hf_kquant_specs`).
pub fn hf_specs() -> Vec<HfSpec> {
    let mut v = hf_small_specs();
    v.extend(hf_kquant_specs());
    v
}

/// llama (SentencePiece tokenizer.model, 8 layers so llama-quantize's layer rules vary), lfm2
/// (GPT-2 vocabulary) and lfm2moe with 8 experts (llama-quantize's 8-expert rules), d=256.
pub fn hf_kquant_specs() -> Vec<HfSpec> {
    let spec = |name: &str, arch, n_kv: Vec<usize>, vocab, template, seed, moe| HfSpec {
        dir_name: format!("hf-{name}"),
        arch,
        dtype: HfDtype::Bf16,
        d: 256,
        n_head: 4,
        n_kv,
        ff: 512,
        vocab_file: vocab,
        template,
        seed,
        moe,
        shards: 2,
    };
    let lfm_kv = vec![0, 0, 2, 0, 2, 0, 2, 0];
    let mut llama = spec(
        "llama-k",
        FixtureArch::Llama,
        vec![2; 8],
        "ggml-vocab-llama-spm.gguf",
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        80,
        None,
    );
    llama.dtype = HfDtype::F16;
    vec![
        llama,
        spec(
            "lfm2-k",
            FixtureArch::Lfm2,
            lfm_kv.clone(),
            "ggml-vocab-gpt-2.gguf",
            "LFM2.5-Instruct.jinja",
            81,
            None,
        ),
        spec(
            "lfm2moe-k",
            FixtureArch::Lfm2Moe,
            lfm_kv[..6].to_vec(),
            "ggml-vocab-gpt-2.gguf",
            "LFM2-8B-A1B.jinja",
            82,
            Some(MoeSpec { n_expert: 8, n_used: 2, ff_exp: 256, dense_lead: Some(2) }),
        ),
    ]
}

/// The benchmark checkpoint: LFM2-350M's layout (d=1024, 16 layers, attention at 2,5,8,10,12,14,
/// 16 heads / 8 KV) with a wider FFN (6912) and GPT-2's vocabulary, in bf16: 451M parameters,
/// 0.9 GB of safetensors in 4 shards. Its largest tensor is the 103 MB embedding.
pub fn hf_bench_spec() -> HfSpec {
    let attn = [2, 5, 8, 10, 12, 14];
    HfSpec {
        dir_name: "hf-bench-lfm2".into(),
        arch: FixtureArch::Lfm2,
        dtype: HfDtype::Bf16,
        d: 1024,
        n_head: 16,
        n_kv: (0..16).map(|i| if attn.contains(&i) { 8 } else { 0 }).collect(),
        ff: 6912,
        vocab_file: "ggml-vocab-gpt-2.gguf",
        template: "LFM2.5-Instruct.jinja",
        seed: 90,
        moe: None,
        shards: 4,
    }
}

/// The d=64 checkpoints, one per architecture.
pub fn hf_small_specs() -> Vec<HfSpec> {
    let base = |name: &str, arch, n_kv: Vec<usize>, vocab, template, seed| HfSpec {
        dir_name: format!("hf-{name}"),
        arch,
        dtype: HfDtype::F16,
        d: 64,
        n_head: 4,
        n_kv,
        ff: 128,
        vocab_file: vocab,
        template,
        seed,
        moe: None,
        shards: 1,
    };
    let lfm2_kv = vec![0, 0, 2, 0, 2, 0];
    let mut moe = base(
        "lfm2moe",
        FixtureArch::Lfm2Moe,
        lfm2_kv.clone(),
        "ggml-vocab-llama-bpe.gguf",
        "LFM2-8B-A1B.jinja",
        75,
    );
    moe.moe = Some(MoeSpec { n_expert: 4, n_used: 2, ff_exp: 64, dense_lead: Some(2) });
    moe.shards = 3;
    vec![
        base(
            "llama",
            FixtureArch::Llama,
            vec![2, 2],
            "ggml-vocab-llama-bpe.gguf",
            "meta-llama-Llama-3.2-3B-Instruct.jinja",
            70,
        ),
        base(
            "qwen2",
            FixtureArch::Qwen2,
            vec![2, 2],
            "ggml-vocab-qwen2.gguf",
            "Qwen-Qwen2.5-7B-Instruct.jinja",
            71,
        ),
        base("qwen3", FixtureArch::Qwen3, vec![2, 2], "ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja", 72),
        base(
            "gemma3",
            FixtureArch::Gemma3,
            vec![2; 6],
            "ggml-vocab-llama-spm.gguf",
            "google-gemma-2-2b-it.jinja",
            73,
        ),
        base("lfm2", FixtureArch::Lfm2, lfm2_kv, "ggml-vocab-llama-bpe.gguf", "LFM2.5-Instruct.jinja", 74),
        moe,
    ]
}

/// `out_dir/name` written by `write` into a temporary directory beside it and renamed into
/// place (replacing it), so a half-written directory is never seen; returns the directory.
pub(crate) fn write_dir(
    out_dir: &Path,
    name: &str,
    write: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let dir = out_dir.join(name);
    let tmp = out_dir.join(format!(".{name}.tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io_err)?;
    if let Err(e) = write(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).map_err(io_err)?;
    Ok(dir)
}

/// Writes the checkpoint of `spec` into `out_dir/spec.dir_name` (replacing it); returns the
/// directory.
pub fn write_hf_checkpoint(spec: &HfSpec, out_dir: &Path, llama_src: &Path) -> Result<PathBuf> {
    write_dir(out_dir, &spec.dir_name, |tmp| {
        let mut vocab = VocabFile::read(llama_src, spec.vocab_file)?;
        if matches!(spec.arch, FixtureArch::Lfm2 | FixtureArch::Lfm2Moe) {
            vocab = vocab.with_control_tokens(&LFM2_SPECIAL);
        }
        let template = std::fs::read_to_string(llama_src.join("models/templates").join(spec.template))
            .map_err(io_err)?;
        write_tokenizer(spec, &vocab, &template, tmp)?;
        let n_vocab = vocab.tokens.len();
        write_json(&tmp.join("config.json"), &config(spec, &vocab, n_vocab))?;
        write_json(
            &tmp.join("generation_config.json"),
            &json!({"do_sample": true, "temperature": 0.3, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.05}),
        )?;
        write_weights(spec, n_vocab, tmp)
    })
}

fn write_tokenizer(spec: &HfSpec, v: &VocabFile, template: &str, dir: &Path) -> Result<()> {
    let tok = |id: Option<u32>| id.and_then(|i| v.tokens.get(i as usize)).cloned();
    let mut cfg = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": false,
    });
    if v.model == "llama" {
        write_json(&dir.join("tokenizer.json"), &spm_tokenizer_json(v))?;
        std::fs::write(dir.join("tokenizer.model"), spm_model_proto(v)).map_err(io_err)?;
        cfg["add_bos_token"] = json!(true);
        cfg["add_eos_token"] = json!(false);
        cfg["unk_token"] = json!(tok(Some(0)));
    } else {
        write_json(&dir.join("tokenizer.json"), &bpe_tokenizer_json(v)?)?;
    }
    let (bos, eos) = ids(spec, v);
    cfg["bos_token"] = json!(tok(bos));
    cfg["eos_token"] = json!(tok(eos));
    if spec.arch == FixtureArch::Gemma3 {
        // Newer Hub repos keep the template in its own file.
        std::fs::write(dir.join("chat_template.jinja"), template).map_err(io_err)?;
    } else {
        cfg["chat_template"] = json!(template);
    }
    write_json(&dir.join("tokenizer_config.json"), &cfg)
}

/// BOS and EOS ids: the vocab's, LFM2's own (<|startoftext|>, <|im_end|>) for LFM2.
fn ids(spec: &HfSpec, v: &VocabFile) -> (Option<u32>, Option<u32>) {
    match spec.arch {
        FixtureArch::Lfm2 | FixtureArch::Lfm2Moe => (v.id("<|startoftext|>"), v.id("<|im_end|>")),
        FixtureArch::Qwen2 | FixtureArch::Qwen3 => (None, v.eos),
        _ => (v.bos, v.eos),
    }
}

fn config(spec: &HfSpec, v: &VocabFile, n_vocab: usize) -> Value {
    let hd = spec.d / spec.n_head;
    let n_layer = spec.n_kv.len();
    let kv = spec.n_kv.iter().copied().find(|&k| k > 0).unwrap_or(spec.n_head);
    let (bos, eos) = ids(spec, v);
    let mut c = json!({
        "hidden_size": spec.d,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": kv,
        "num_hidden_layers": n_layer,
        "vocab_size": n_vocab,
        "max_position_embeddings": 4096,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": spec.dtype.torch(),
        "_name_or_path": format!("wick-tests/{}", spec.dir_name),
    });
    let extra = match spec.arch {
        FixtureArch::Llama => json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "intermediate_size": spec.ff, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
            "hidden_act": "silu", "head_dim": hd}),
        FixtureArch::Qwen2 => json!({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "intermediate_size": spec.ff, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
            "hidden_act": "silu", "use_sliding_window": false, "sliding_window": 4096}),
        FixtureArch::Qwen3 => json!({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "intermediate_size": spec.ff, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
            "hidden_act": "silu", "head_dim": hd}),
        FixtureArch::Gemma3 => json!({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "intermediate_size": spec.ff, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "head_dim": hd, "query_pre_attn_scalar": hd, "sliding_window": 4096, "sliding_window_pattern": 6,
            "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": null, "attn_logit_softcapping": null,
            "tie_word_embeddings": false}),
        FixtureArch::Lfm2 | FixtureArch::Lfm2Moe => {
            let types: Vec<&str> =
                spec.n_kv.iter().map(|&k| if k == 0 { "conv" } else { "full_attention" }).collect();
            let mut l = json!({"layer_types": types, "conv_L_cache": 3, "conv_bias": false, "norm_eps": 1e-5,
                "rope_theta": 1000000.0, "tie_embedding": true});
            if let Some(m) = spec.moe {
                l["architectures"] = json!(["Lfm2MoeForCausalLM"]);
                l["model_type"] = json!("lfm2_moe");
                l["intermediate_size"] = json!(spec.ff);
                l["moe_intermediate_size"] = json!(m.ff_exp);
                l["num_experts"] = json!(m.n_expert);
                l["num_experts_per_tok"] = json!(m.n_used);
                l["num_dense_layers"] = json!(m.dense_lead.unwrap_or(0));
                l["use_expert_bias"] = json!(true);
                l["norm_topk_prob"] = json!(true);
                l["routed_scaling_factor"] = json!(1.0);
            } else {
                // The 2/3 rule of LFM2's MLP: block_ff_dim 3/2·ff adjusts back to ff.
                l["architectures"] = json!(["Lfm2ForCausalLM"]);
                l["model_type"] = json!("lfm2");
                l["block_ff_dim"] = json!(spec.ff * 3 / 2);
                l["block_auto_adjust_ff_dim"] = json!(true);
                l["block_ffn_dim_multiplier"] = json!(1.0);
                l["block_multiple_of"] = json!(64);
            }
            l
        }
    };
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}
