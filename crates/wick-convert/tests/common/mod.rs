//! Shared by the converter's integration tests: the synthetic checkpoints (written once per
//! test binary), converting them, and skipping when an asset is missing (a failure under
//! CI=true, as in wick-core's tests).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use wick_convert::{convert, ConvertOptions, OutType, Report};
use wick_fixtures::HfSpec;

#[allow(unused_imports)] // each test file uses some
pub use wick_fixtures::assets::{in_ci, llama_src, skip};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch directory of this test binary.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wick-convert").join(name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Every synthetic checkpoint, written once per test binary: (spec, directory). The folder is
/// named by the test binary and cleared first, so runs do not pile up copies (~270 MB each) on a
/// disk other machines share.
pub fn checkpoints(test: &str) -> Option<&'static [(HfSpec, PathBuf)]> {
    static DIRS: OnceLock<Vec<(HfSpec, PathBuf)>> = OnceLock::new();
    let src = llama_src(test)?;
    Some(DIRS.get_or_init(|| {
        let out = scratch(&format!("hf-{}", env!("CARGO_CRATE_NAME")));
        std::fs::remove_dir_all(&out).expect("clear the checkpoints' scratch dir");
        std::fs::create_dir_all(&out).expect("scratch dir");
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
