//! `wick show`'s header reading (`gguf::info`) on fixtures written with chosen metadata:
//! parameter counts, the quantization mix, MoE and per-layer keys, and errors on odd metadata.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value as V;
use candle_core::quantized::GgmlDType;
use wick_core::gguf::info::{file_type_name, ggml_type_name, GgufHeaderInfo};
use wick_core::gguf::{GgufFile, MetaValue};
use wick_fixtures::{build_fixture, byte_vocab, write_gguf, FixtureArch, FixtureSpec, MoeSpec};

fn spec(arch: FixtureArch, n_kv: Vec<usize>, moe: Option<MoeSpec>) -> FixtureSpec {
    FixtureSpec {
        file_name: format!("info-{}.gguf", arch.name()),
        arch,
        dtype: GgmlDType::Q8_0,
        d: 64,
        n_head: 4,
        n_kv,
        ff: 128,
        vocab_file: "",
        final_norm: "token_embd_norm.weight",
        seed: 3,
        sigma: 0.5,
        moe,
    }
}

/// A temp file removed when the test ends.
struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

fn tmp(tag: &str) -> Tmp {
    Tmp(std::env::temp_dir().join(format!("wick-info-{}-{tag}.gguf", std::process::id())))
}

/// Writes the fixture, with `edit` applied to its metadata, into a temp file.
fn write(spec: &FixtureSpec, tag: &str, edit: impl FnOnce(&mut Vec<(String, V)>)) -> Tmp {
    let (mut meta, tensors) = build_fixture(spec, &byte_vocab()).unwrap();
    edit(&mut meta);
    let path = tmp(tag);
    let refs: Vec<_> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    write_gguf(&path, &meta, &refs).unwrap();
    path
}

#[test]
fn llama_header_without_file_type() {
    let s = spec(FixtureArch::Llama, vec![2, 2], None);
    let path = write(&s, "llama", |_| {});
    let info = GgufHeaderInfo::from_path(&*path).unwrap();
    let g = GgufFile::open(&*path).unwrap();
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.name.as_deref(), Some("info-llama"));
    assert_eq!(info.parameter_count, g.tensors.iter().map(|t| t.elem_count() as u64).sum::<u64>());
    assert_eq!(info.file_type, None);
    // No general.file_type: the type with most bytes names the file.
    assert_eq!(info.quantization, "Q8_0");
    assert_eq!(info.quant_mix.iter().map(|q| q.dtype).collect::<Vec<_>>(), ["Q8_0", "F32"]);
    assert_eq!(info.quant_mix.iter().map(|q| q.tensors).sum::<usize>(), g.tensors.len());
    assert_eq!(
        info.quant_mix.iter().map(|q| q.bytes).sum::<u64>(),
        g.tensors.iter().map(|t| t.size as u64).sum::<u64>()
    );
    assert_eq!(
        (info.context_length, info.embedding_length, info.block_count),
        (Some(4096), Some(64), Some(2))
    );
    assert_eq!((info.head_count, info.head_count_kv), (Some(4), Some(2)));
    assert_eq!((info.expert_count, info.expert_used_count), (None, None));
    assert_eq!(info.vocab_size, Some(259));
    assert_eq!(info.chat_template, None);
    assert_eq!(info.file_size, std::fs::metadata(&*path).unwrap().len());
    // An untied head: a token reads one row of the embedding, every other weight whole.
    let size = |name: &str| g.tensors.iter().find(|t| t.name == name).map(|t| t.size as u64).unwrap();
    let all = g.tensors.iter().map(|t| t.size as u64).sum::<u64>();
    assert!(size("output.weight") > 0);
    assert_eq!(info.decode_bytes, all - size("token_embd.weight"));
}

#[test]
fn moe_experts_per_layer_kv_heads_and_file_type() {
    let moe = MoeSpec { n_expert: 8, n_used: 2, ff_exp: 64, dense_lead: Some(1) };
    let s = spec(FixtureArch::Lfm2Moe, vec![0, 2, 0], Some(moe));
    let path = write(&s, "lfm2moe", |m| {
        m.push(("general.file_type".into(), V::U32(15)));
        m.push(("tokenizer.chat_template".into(), V::String("{{ messages }}".into())));
    });
    let info = GgufHeaderInfo::from_path(&*path).unwrap();
    assert_eq!(info.architecture, "lfm2moe");
    assert_eq!((info.expert_count, info.expert_used_count), (Some(8), Some(2)));
    assert_eq!(info.head_count_kv, Some(2), "largest of the per-layer array");
    assert_eq!(info.file_type, Some(15));
    assert_eq!(info.quantization, "Q4_K_M", "general.file_type wins over the tensor types");
    assert_eq!(info.chat_template.as_deref(), Some("{{ messages }}"));
    // A tied head (the embedding read whole) and the experts at 2 of 8.
    let g = GgufFile::open(&*path).unwrap();
    assert!(!g.tensors.iter().any(|t| t.name == "output.weight"), "the fixture ties its head");
    let (exps, rest): (Vec<_>, Vec<_>) = g.tensors.iter().partition(|t| t.name.contains("_exps."));
    assert_eq!(exps.len(), 2 * 3, "two expert layers, three weights each");
    let sum = |v: &[&wick_core::gguf::TensorInfo]| v.iter().map(|t| t.size as u64).sum::<u64>();
    assert_eq!(info.decode_bytes, sum(&rest) + sum(&exps) / 4);
}

#[test]
fn truncate_arrays_empties_long_ones_only() {
    let s = spec(FixtureArch::Llama, vec![2, 2], None);
    let path = write(&s, "arrays", |m| m.push(("x.short".into(), V::Array(vec![V::U32(1), V::U32(2)]))));
    let mut info = GgufHeaderInfo::from_path(&*path).unwrap();
    info.truncate_arrays(5);
    let get = |k: &str| info.metadata.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
    assert_eq!(get("tokenizer.ggml.tokens"), MetaValue::Array(vec![]));
    assert_eq!(get("x.short"), MetaValue::Array(vec![MetaValue::U32(1), MetaValue::U32(2)]));
    assert_eq!(info.vocab_size, Some(259), "counted before truncation");
}

/// Replaces (or with `None` removes) one metadata key.
fn set(m: &mut Vec<(String, V)>, key: &str, value: Option<V>) {
    m.retain(|(k, _)| k != key);
    m.extend(value.map(|v| (key.to_string(), v)));
}

#[test]
fn odd_metadata_is_an_error_not_a_panic() {
    let s = spec(FixtureArch::Llama, vec![2, 2], None);
    let cases = [
        ("no-arch", "general.architecture", None),
        ("ctx-string", "llama.context_length", Some(V::String("lots".into()))),
        ("ftype-negative", "general.file_type", Some(V::I32(-3))),
        ("ftype-huge", "general.file_type", Some(V::U64(1 << 40))),
        ("kv-heads-strings", "llama.attention.head_count_kv", Some(V::Array(vec![V::String("2".into())]))),
        ("tokens-not-array", "tokenizer.ggml.tokens", Some(V::U32(3))),
    ];
    for (tag, key, value) in cases {
        let path = write(&s, tag, |m| set(m, key, value));
        let err = GgufHeaderInfo::from_path(&*path).unwrap_err().to_string();
        assert!(err.contains(key), "{tag}: {err}");
    }
}

#[test]
fn not_a_gguf_and_missing_file() {
    let text = tmp("text");
    std::fs::write(&*text, b"hello, this is not a model").unwrap();
    assert!(GgufHeaderInfo::from_path(&*text).unwrap_err().to_string().contains("not a GGUF file"));
    let empty = tmp("empty");
    std::fs::write(&*empty, b"").unwrap();
    assert!(GgufHeaderInfo::from_path(&*empty).is_err());
    assert!(GgufHeaderInfo::from_path(&*tmp("absent")).unwrap_err().to_string().contains("cannot open"));
}

#[test]
fn names() {
    assert_eq!(file_type_name(15), Some("Q4_K_M"));
    assert_eq!(file_type_name(15 | 1024), Some("Q4_K_M"));
    assert_eq!(file_type_name(5), None);
    assert_eq!(file_type_name(9999), None);
    assert_eq!(ggml_type_name(GgmlDType::Q6K), "Q6_K");
}
