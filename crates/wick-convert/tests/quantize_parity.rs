//! The quantized outputs equal llama.cpp's own: for each synthetic checkpoint, the float file
//! this converter writes (F16 for f16 weights, BF16 for bf16) is quantized by `llama-quantize`
//! (built from llama.cpp's source, scripts/build-llama-server.sh) to Q4_0, Q8_0, Q4_K_M,
//! Q5_K_M and Q6_K, and the direct conversion to the same type must have the same metadata,
//! the same tensors with the same types (the per-tensor mix), and byte-identical data.

use std::path::{Path, PathBuf};
use std::process::Command;

use wick_convert::OutType;
use wick_core::gguf::{GgufFile, MetaValue};

mod common;

fn llama_quantize(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("WICK_LLAMA_QUANTIZE")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo().join(".cache/llama-build/bin/llama-quantize"));
    if p.is_file() {
        return Some(p);
    }
    common::skip(
        test,
        &format!(
            "{} is missing (WICK_LLAMA_ONLY=llama-quantize bash scripts/build-llama-server.sh)",
            p.display()
        ),
    );
    None
}

const TYPES: [(OutType, &str); 5] = [
    (OutType::Q4_0, "Q4_0"),
    (OutType::Q8_0, "Q8_0"),
    (OutType::Q4KM, "Q4_K_M"),
    (OutType::Q5KM, "Q5_K_M"),
    (OutType::Q6K, "Q6_K"),
];

/// Differences between two files: metadata, tensor set, types, bytes.
fn diff(want: &Path, got: &Path) -> Vec<String> {
    let (a, b) = (GgufFile::open(want).expect("open reference"), GgufFile::open(got).expect("open output"));
    let mut out = vec![];
    let meta = |g: &GgufFile| -> Vec<(String, MetaValue)> {
        let mut m = g.metadata.entries.clone();
        m.sort_by(|x, y| x.0.cmp(&y.0));
        m
    };
    let (ma, mb) = (meta(&a), meta(&b));
    for (k, v) in &ma {
        match mb.iter().find(|(kb, _)| kb == k) {
            None => out.push(format!("key {k} missing")),
            Some((_, vb)) if vb != v => out.push(format!("key {k}: {vb:?} != {v:?}")),
            _ => {}
        }
    }
    for (k, _) in &mb {
        if !ma.iter().any(|(ka, _)| ka == k) {
            out.push(format!("extra key {k}"));
        }
    }
    for t in &a.tensors {
        let Some(u) = b.info(&t.name) else {
            out.push(format!("tensor {} missing", t.name));
            continue;
        };
        if u.dtype != t.dtype || u.dims != t.dims {
            out.push(format!(
                "tensor {}: {:?} {:?}, llama-quantize {:?} {:?}",
                t.name, u.dtype, u.dims, t.dtype, t.dims
            ));
        } else if a.bytes(&t.name).expect("bytes") != b.bytes(&t.name).expect("bytes") {
            out.push(format!("tensor {} ({:?}): bytes differ", t.name, t.dtype));
        }
    }
    if b.tensors.len() != a.tensors.len() {
        out.push(format!("{} tensors, llama-quantize {}", b.tensors.len(), a.tensors.len()));
    }
    out
}

#[test]
fn quantized_outputs_equal_llama_quantize_on_the_float_file() {
    let test = "quantized_outputs_equal_llama_quantize_on_the_float_file";
    let Some(quantize) = llama_quantize(test) else { return };
    let Some(cks) = common::checkpoints(test) else { return };
    let out = common::scratch("quant");
    let mut failures = vec![];
    for (spec, dir) in cks {
        let float = if spec.dtype == wick_fixtures::HfDtype::Bf16 { OutType::Bf16 } else { OutType::F16 };
        let base = out.join(format!("{}-{}.gguf", spec.dir_name, float.name()));
        common::convert_to(dir, &base, float).expect("float conversion");
        for (t, name) in TYPES {
            let reference = out.join(format!("{}-{}-llama-quantize.gguf", spec.dir_name, t.name()));
            let status = Command::new(&quantize)
                .args([base.as_os_str(), reference.as_os_str(), name.as_ref(), "2".as_ref()])
                .output()
                .expect("run llama-quantize");
            // Its log's head is the model's metadata; why it failed is at the end.
            let log = String::from_utf8_lossy(&status.stderr);
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(12)..].join("\n");
            assert!(
                status.status.success(),
                "llama-quantize {name} on {}: {}\n…\n{tail}",
                spec.dir_name,
                status.status
            );
            let direct = out.join(format!("{}-{}.gguf", spec.dir_name, t.name()));
            let r = common::convert_to(dir, &direct, t).expect("direct conversion");
            let d = diff(&reference, &direct);
            let mut types: Vec<String> = r.types.iter().map(|(_, ty)| ty.name().to_string()).collect();
            types.sort();
            types.dedup();
            eprintln!(
                "{} {name}: {} tensors ({}), {} differences",
                spec.dir_name,
                r.tensors,
                types.join(" "),
                d.len()
            );
            for line in d.iter().take(8) {
                eprintln!("    {line}");
            }
            if !d.is_empty() {
                failures.push(format!("{} {name}: {}", spec.dir_name, d[0]));
            }
            for f in [&reference, &direct] {
                std::fs::remove_file(f).expect("remove a compared file");
            }
        }
        std::fs::remove_file(&base).expect("remove the float file");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
