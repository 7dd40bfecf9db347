//! Test assets that may be missing, shared by the workspace's integration tests (wick-core's,
//! wick-convert's): skipping is explicit and counted, and a failure under `CI=true`.

use std::io::Write;
use std::path::PathBuf;

/// Whether this run is CI's (`CI=true`), where a missing test asset is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Reports that `test` cannot run for `reason` (a missing asset). libtest has no run-time
/// skip, so the caller returns right after this and libtest counts a pass: with `CI=true`
/// this panics instead; otherwise it prints `SKIPPED: <test>: <reason>` and appends that
/// line to the file named by `WICK_SKIP_LOG`, which scripts/test.sh counts as skipped and
/// takes off the passed count.
pub fn skip(test: &str, reason: &str) {
    if in_ci() {
        panic!("{test}: {reason} (CI=true: a missing test asset is a failure)");
    }
    let line = format!("SKIPPED: {test}: {reason}");
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("WICK_SKIP_LOG") {
        // One write per line, in append mode: test threads and test binaries share the file.
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

/// The llama.cpp source tree (`WICK_LLAMA_SRC`, default `<repo>/.cache/llama.cpp`, unpacked by
/// scripts/llama-src.sh) whose `models/` holds the vocab-only GGUFs and tokenizer corpora;
/// `None` after reporting `test` as skipped when it is not there.
pub fn llama_src(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("WICK_LLAMA_SRC").map(PathBuf::from).unwrap_or_else(crate::default_llama_src);
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    skip(test, &format!("no llama.cpp vocab files in {}/models (run ./scripts/llama-src.sh)", dir.display()));
    None
}
