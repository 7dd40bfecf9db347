//! Wick's own CUDA kernels (`src/kernels/cuda/*.cu`) run here without a GPU: the host C++
//! compiler builds them from their source against `tests/emulated_gpu/emu.hpp`, a CUDA device
//! emulated on the CPU (threads as fibers, warp shuffles and block barriers between them,
//! guard pages around every buffer, buffers poisoned with NaN bytes, undefined-behaviour
//! sanitizer on for misaligned loads), and `driver.cpp` runs each kernel with its launcher's
//! geometry against the host references: the quantized products and their activation
//! quantizers bit for bit against the host twin, the row ops (RMSNorm, SwiGLU) bit for bit
//! against theirs, the fused decode attention bit for bit against its twin and within rounding
//! of an f64 reference. A GPU run still decides what a GPU does (`tests/device_kernels.rs`,
//! `tests/device_attention.rs`); this catches the kernels' indexing, collectives and memory
//! bugs first, on every CI run.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// The compiler flags of both halves: the twin's (build.rs) and the sanitizer.
const FLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-ffp-contract=off",
    "-fno-strict-aliasing",
    "-fno-math-errno",
    "-fsanitize=undefined",
    "-fno-sanitize-recover=all",
];

fn compile(tool: &str, args: &[&str], sources: &[&Path], out: &Path) -> Result<(), String> {
    let status = Command::new(tool)
        .args(FLAGS)
        .args(args)
        .args(sources)
        .arg("-o")
        .arg(out)
        .status()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{tool} failed ({status}) on {sources:?}"))
    }
}

#[test]
fn wicks_cuda_kernels_agree_with_their_references_on_an_emulated_gpu() {
    const TEST: &str = "wicks_cuda_kernels_agree_with_their_references_on_an_emulated_gpu";
    if !cfg!(target_os = "linux") {
        return common::skip(TEST, "the emulated GPU is built for Linux hosts");
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (cc, cxx) =
        (std::env::var("CC").unwrap_or("cc".into()), std::env::var("CXX").unwrap_or("c++".into()));
    let driver = tmp.join("emulated-gpu");
    let emu = root.join("tests/emulated_gpu");
    let include = format!("-I{}", emu.display()); // its cuda_fp16.h
                                                  // The host twins, each to its object, then the driver with them.
    let twins: Vec<PathBuf> = ["qmatvec_twin", "row_ops_twin", "attention_twin"]
        .iter()
        .map(|t| tmp.join(format!("emulated-gpu-{t}.o")))
        .collect();
    let built = ["qmatvec_twin", "row_ops_twin", "attention_twin"]
        .iter()
        .zip(&twins)
        .try_for_each(|(t, o)| compile(&cc, &["-c"], &[&root.join(format!("src/kernels/cuda/{t}.c"))], o))
        .and_then(|()| {
            let mut sources = vec![emu.join("driver.cpp")];
            sources.extend(twins.iter().cloned());
            compile(
                &cxx,
                &[
                    "-std=c++17",
                    "-Wall",
                    "-Wextra",
                    "-Wno-unknown-pragmas",
                    "-Wno-sign-compare",
                    "-pthread",
                    &include,
                ],
                &sources.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                &driver,
            )
        });
    if let Err(e) = built {
        // A compiler present that fails on the sources is a failure; none at all, a skip.
        if e.starts_with("cannot run") {
            return common::skip(TEST, &e);
        }
        panic!("{e}");
    }
    let run = Command::new(&driver).output().expect("run the emulated GPU");
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    print!("{stdout}");
    eprint!("{stderr}");
    // A guard page hit is a signal: name it, since the driver cannot.
    assert!(
        run.status.success(),
        "the emulated GPU failed ({}): {}",
        run.status,
        stderr.lines().last().unwrap_or("killed by a signal: a read or write outside a buffer (guard page)")
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with("kernel checks passed on the emulated GPU"), "no summary: {last}");
}
