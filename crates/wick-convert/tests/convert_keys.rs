//! The architecture keys, as llama.cpp's converter writes them for these checkpoints: the
//! expected tables follow `TextModel.set_gguf_parameters` and each model class's override
//! (conversion/llama.py, qwen.py, gemma.py, lfm2.py) applied to the fixtures' config.json —
//! every `{arch}.*` key present with its value and GGUF type, none extra — and the vocabulary's
//! model and pre-tokenizer (llama.cpp's chkhsh table recognizing the rebuilt tokenizers).

use wick_convert::OutType;
use wick_core::gguf::{GgufFile, MetaValue};

mod common;

#[derive(Debug)]
enum Want {
    U32(u64),
    F32(f64),
    I32s(Vec<i64>),
}

fn table(arch: &str) -> (Vec<(&'static str, Want)>, &'static str, &'static str) {
    use Want::*;
    let base = |ff: bool| {
        let mut v = vec![
            ("block_count", U32(2)),
            ("context_length", U32(4096)),
            ("embedding_length", U32(64)),
            ("attention.head_count", U32(4)),
            ("attention.head_count_kv", U32(2)),
        ];
        if ff {
            v.push(("feed_forward_length", U32(128)));
        }
        v
    };
    match arch {
        "llama" => {
            let mut v = base(true);
            v.extend([
                ("rope.freq_base", F32(10000.0)),
                ("attention.layer_norm_rms_epsilon", F32(1e-5)),
                ("attention.key_length", U32(16)),
                ("attention.value_length", U32(16)),
                ("vocab_size", U32(128256)),
                ("rope.dimension_count", U32(16)),
            ]);
            (v, "gpt2", "llama-bpe")
        }
        "qwen2" => {
            let mut v = base(true);
            v.extend([("rope.freq_base", F32(1e6)), ("attention.layer_norm_rms_epsilon", F32(1e-6))]);
            (v, "gpt2", "qwen2")
        }
        "qwen3" => {
            let mut v = base(true);
            v.extend([
                ("rope.freq_base", F32(1e6)),
                ("attention.layer_norm_rms_epsilon", F32(1e-6)),
                ("attention.key_length", U32(16)),
                ("attention.value_length", U32(16)),
            ]);
            (v, "gpt2", "qwen2")
        }
        "gemma3" => {
            let mut v = base(true);
            v[0] = ("block_count", U32(6));
            v.extend([
                ("rope.freq_base", F32(1e6)),
                ("rope.freq_base_swa", F32(10000.0)),
                ("attention.layer_norm_rms_epsilon", F32(1e-6)),
                ("attention.key_length", U32(16)),
                ("attention.value_length", U32(16)),
                ("attention.sliding_window", U32(4096)),
            ]);
            (v, "llama", "default")
        }
        "lfm2" | "lfm2moe" => {
            let mut v = base(true);
            v[0] = ("block_count", U32(6));
            v[4] = ("attention.head_count_kv", I32s(vec![0, 0, 2, 0, 2, 0]));
            v.extend([
                ("rope.freq_base", F32(1e6)),
                ("attention.layer_norm_rms_epsilon", F32(1e-5)),
                ("vocab_size", U32(128259)),
                ("shortconv.l_cache", U32(3)),
            ]);
            if arch == "lfm2moe" {
                v.extend([
                    ("expert_count", U32(4)),
                    ("expert_used_count", U32(2)),
                    ("expert_feed_forward_length", U32(64)),
                    ("leading_dense_block_count", U32(2)),
                    ("expert_gating_func", U32(2)),
                ]);
            }
            (v, "gpt2", "llama-bpe")
        }
        other => panic!("no table for {other}"),
    }
}

#[test]
fn architecture_keys_and_vocabulary_are_the_converters() {
    let Some(cks) = common::checkpoints("architecture_keys_and_vocabulary_are_the_converters") else {
        return;
    };
    let out = common::scratch("keys");
    for (spec, dir) in cks.iter().filter(|(s, _)| s.d == 64) {
        let arch = spec.dir_name.trim_start_matches("hf-");
        let file = out.join(format!("{arch}.gguf"));
        common::convert_to(dir, &file, OutType::F16).expect("convert");
        let g = GgufFile::open(&file).expect("open");
        let (want, model, pre) = table(arch);
        let mine: Vec<&(String, MetaValue)> =
            g.metadata.entries.iter().filter(|(k, _)| k.starts_with(&format!("{arch}."))).collect();
        for (key, w) in &want {
            let k = format!("{arch}.{key}");
            let got = g.metadata.get(&k).unwrap_or_else(|| panic!("{k} missing"));
            let ok = match (w, got) {
                (Want::U32(n), MetaValue::U32(g)) => *n == *g as u64,
                (Want::F32(x), MetaValue::F32(g)) => *g == *x as f32,
                (Want::I32s(a), MetaValue::Array(g)) => {
                    g.iter()
                        .map(|v| match v {
                            MetaValue::I32(x) => Some(*x as i64),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()
                        .as_ref()
                        == Some(a)
                }
                _ => false,
            };
            assert!(ok, "{k}: {got:?}, llama.cpp's converter writes {w:?}");
        }
        let extra: Vec<&String> = mine
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !want.iter().any(|(w, _)| **k == format!("{arch}.{w}")))
            .collect();
        assert!(extra.is_empty(), "{arch}: keys the converter does not write: {extra:?}");
        assert_eq!(g.metadata.get("tokenizer.ggml.model").and_then(|v| v.as_str()), Some(model), "{arch}");
        assert_eq!(g.metadata.get("tokenizer.ggml.pre").and_then(|v| v.as_str()), Some(pre), "{arch}");
        assert_eq!(g.metadata.get("general.file_type").and_then(|v| v.as_u64()), Some(1), "{arch}");
        assert!(
            g.metadata.get("tokenizer.chat_template").and_then(|v| v.as_str()).is_some_and(|t| t.len() > 100),
            "{arch}: chat template"
        );
        eprintln!(
            "{arch}: {} architecture keys as the converter writes them; vocab {model}/{pre}",
            want.len()
        );
    }
}
