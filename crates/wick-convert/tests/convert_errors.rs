//! Bad input gives a clear error and leaves nothing behind: a missing config.json, an
//! architecture the converter does not write, a tensor whose shape disagrees with the config,
//! a dtype it cannot read, a truncated safetensors file, a failed write (the disk full
//! case, simulated with a file-size limit), a cancel. After each, the output directory is
//! empty: no output file, no temporary file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use wick_convert::{convert, ConvertError, ConvertOptions, OutType};

mod common;

/// A copy of the small llama checkpoint to break.
fn copy_of(test: &str, name: &str) -> Option<PathBuf> {
    let cks = common::checkpoints(test)?;
    let (_, src) = cks.iter().find(|(s, _)| s.dir_name == "hf-llama")?;
    let dir = common::scratch("errors").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    for e in std::fs::read_dir(src).expect("read") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, dir.join(p.file_name().expect("name"))).expect("copy");
    }
    Some(dir)
}

/// Converts `dir` into an empty directory of its own; returns the error and checks that the
/// directory stayed empty.
fn fails(dir: &Path, cancel: bool) -> ConvertError {
    let out = dir.with_extension("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let opts = ConvertOptions {
        input: dir.to_path_buf(),
        outfile: out.join("model.gguf"),
        outtype: OutType::Q8_0,
        threads: None,
        cancel: Some(Arc::new(AtomicBool::new(cancel))),
    };
    let err = convert(&opts, |_| {}).expect_err("conversion should fail");
    let left: Vec<_> =
        std::fs::read_dir(&out).expect("read").map(|e| e.expect("entry").file_name()).collect();
    assert!(left.is_empty(), "{err}: left {left:?} behind");
    eprintln!("{}: {err}", dir.file_name().unwrap_or_default().to_string_lossy());
    err
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json");
    f(&mut v);
    std::fs::write(path, serde_json::to_vec(&v).expect("json")).expect("write");
}

#[test]
fn a_missing_config_is_named() {
    let Some(dir) = copy_of("a_missing_config_is_named", "no-config") else { return };
    std::fs::remove_file(dir.join("config.json")).expect("rm");
    let e = fails(&dir, false);
    assert!(matches!(e, ConvertError::Missing { .. }) && e.to_string().contains("config.json"), "{e}");
}

#[test]
fn an_unknown_architecture_is_named() {
    let Some(dir) = copy_of("an_unknown_architecture_is_named", "gpt2") else { return };
    edit_json(&dir.join("config.json"), |v| v["architectures"] = serde_json::json!(["GPT2LMHeadModel"]));
    let e = fails(&dir, false);
    assert!(matches!(e, ConvertError::UnknownArchitecture(ref a) if a == "GPT2LMHeadModel"), "{e}");
    assert_eq!(e.code(), "UNSUPPORTED_ARCHITECTURE");
}

#[test]
fn a_shape_that_disagrees_with_the_config_is_named() {
    let Some(dir) = copy_of("a_shape_that_disagrees_with_the_config_is_named", "bad-shape") else { return };
    // 8 heads of 16: attn_q should have 128 rows, the weights have 64.
    edit_json(&dir.join("config.json"), |v| v["num_attention_heads"] = serde_json::json!(8));
    let e = fails(&dir, false);
    match &e {
        ConvertError::ShapeMismatch { name, got, want } => {
            assert_eq!(name, "blk.0.attn_q.weight");
            assert_eq!((got.clone(), want.clone()), (vec![64, 64], vec![128, 64]));
        }
        other => panic!("expected a shape mismatch, got {other}"),
    }
}

/// Rewrites the dtype of `tensor` in a safetensors header (same length, so offsets hold).
fn set_dtype(file: &Path, tensor: &str, from: &str, to: &str) {
    let mut bytes = std::fs::read(file).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8")) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).expect("utf8");
    let at = header.find(&format!("\"{tensor}\"")).expect("tensor in header");
    let rel = header[at..].find(&format!("\"dtype\":\"{from}\"")).expect("dtype") + at;
    let fixed = format!("{}\"dtype\":\"{to}\"{}", &header[..rel], &header[rel + 10 + from.len()..]);
    assert_eq!(fixed.len(), header.len());
    bytes[8..8 + n].copy_from_slice(fixed.as_bytes());
    std::fs::write(file, bytes).expect("write");
}

#[test]
fn an_unreadable_dtype_is_named() {
    let Some(dir) = copy_of("an_unreadable_dtype_is_named", "int-weights") else { return };
    set_dtype(&dir.join("model.safetensors"), "model.layers.1.mlp.up_proj.weight", "F16", "I16");
    let e = fails(&dir, false);
    assert!(
        matches!(e, ConvertError::Dtype { ref name, ref dtype } if name == "model.layers.1.mlp.up_proj.weight" && dtype == "I16"),
        "{e}"
    );
}

#[test]
fn a_truncated_safetensors_file_is_named() {
    let Some(dir) = copy_of("a_truncated_safetensors_file_is_named", "truncated") else { return };
    let f = dir.join("model.safetensors");
    let len = std::fs::metadata(&f).expect("meta").len();
    std::fs::OpenOptions::new().write(true).open(&f).expect("open").set_len(len - 1000).expect("truncate");
    let e = fails(&dir, false);
    assert!(matches!(e, ConvertError::Safetensors { .. }) && e.to_string().contains("truncated"), "{e}");
}

#[test]
fn a_cancel_leaves_no_file() {
    let Some(dir) = copy_of("a_cancel_leaves_no_file", "cancelled") else { return };
    assert!(matches!(fails(&dir, true), ConvertError::Cancelled));
}

/// The disk-full path: every write error goes the same way (ENOSPC as EFBIG here). The binary
/// runs under a 256 KiB file-size limit with SIGXFSZ ignored, so writes fail with an error.
#[test]
fn a_failed_write_is_reported_and_leaves_no_file() {
    let Some(dir) = copy_of("a_failed_write_is_reported_and_leaves_no_file", "disk-full") else { return };
    let out = dir.with_extension("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let bin = env!("CARGO_BIN_EXE_wick-convert");
    let script = format!("trap '' XFSZ; ulimit -f 256; exec \"{bin}\" \"$1\" --outfile \"$2\" --outtype f16");
    let o = Command::new("sh")
        .args(["-c", &script, "sh"])
        .arg(&dir)
        .arg(out.join("model.gguf"))
        .output()
        .expect("run wick-convert");
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("{}", stderr.lines().last().unwrap_or(""));
    assert!(!o.status.success(), "the conversion should fail");
    assert!(stderr.contains("File too large") || stderr.contains("No space left"), "{stderr}");
    let left: Vec<_> =
        std::fs::read_dir(&out).expect("read").map(|e| e.expect("entry").file_name()).collect();
    assert!(left.is_empty(), "left {left:?} behind");
}
