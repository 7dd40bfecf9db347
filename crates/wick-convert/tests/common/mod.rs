//! Shared by the converter's integration tests: the synthetic checkpoints (written once per
//! test binary), converting them, and skipping when an asset is missing (a failure under
//! CI=true, as in wick-core's tests).

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use wick_convert::{convert, ConvertOptions, OutType, Report};
use wick_fixtures::HfSpec;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Reports `test` as skipped for `reason` (see crates/wick-core/tests/common/mod.rs).
pub fn skip(test: &str, reason: &str) {
    if in_ci() {
        panic!("{test}: {reason} (CI=true: a missing test asset is a failure)");
    }
    let line = format!("SKIPPED: {test}: {reason}");
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("WICK_SKIP_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = appended {
            panic!("{test}: cannot record the skip in {}: {e}", PathBuf::from(log).display());
        }
    }
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The llama.cpp source (vocab GGUFs, chat templates), or None after reporting the skip.
pub fn llama_src(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("WICK_LLAMA_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(wick_fixtures::default_llama_src);
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    skip(test, &format!("no llama.cpp vocab files in {}/models (run ./scripts/llama-src.sh)", dir.display()));
    None
}

/// A scratch directory of this test binary.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wick-convert").join(name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Every synthetic checkpoint, written once per test binary: (spec, directory).
pub fn checkpoints(test: &str) -> Option<&'static [(HfSpec, PathBuf)]> {
    static DIRS: OnceLock<Vec<(HfSpec, PathBuf)>> = OnceLock::new();
    let src = llama_src(test)?;
    Some(DIRS.get_or_init(|| {
        let out = scratch(&format!("hf-{}", std::process::id()));
        wick_fixtures::hf_specs()
            .into_iter()
            .map(|s| {
                let dir = wick_fixtures::write_hf_checkpoint(&s, &out, &src).expect("write checkpoint");
                (s, dir)
            })
            .collect()
    }))
}

pub fn convert_to(dir: &Path, out: &Path, outtype: OutType) -> wick_convert::Result<Report> {
    let opts = ConvertOptions {
        input: dir.to_path_buf(),
        outfile: out.to_path_buf(),
        outtype,
        threads: None,
        cancel: None,
    };
    convert(&opts, |_| {})
}
