//! With the `cuda` feature: Wick's own CUDA kernels (`src/kernels/cuda/*.cu`) to PTX, which the
//! driver JIT-compiles for the GPU at hand (compute_80 and up). nvcc from `$NVCC`, else
//! `$CUDA_HOME/bin/nvcc`, else the PATH (`scripts/cuda-toolkit.sh` sets them).
//!
//! On Linux targets, whatever the features: the kernels' host twins (`qmatvec_twin.c`,
//! `row_ops_twin.c`, `attention_twin.c`: each kernel's own arithmetic compiled for the CPU),
//! which the tests and candle's CPU device run; cfg `wick_qmv_twin` says they were built.

use std::path::PathBuf;
use std::process::Command;

/// The `.cu` files under src/kernels/cuda, by stem, with their own nvcc flags. Each kernel's
/// results must equal its host twin's to the bit (the conv step's, the composed ops'):
/// `--fmad=false` writes their plain products and sums as `mul.rn`/`add.rn`, which ptxas may
/// not contract into fma (their fmaf stay fma).
const KERNELS: &[(&str, &[&str])] = &[
    ("decode_attention", &["--fmad=false"]),
    ("qmatvec", &["--fmad=false"]),
    ("qgemm", &["--fmad=false"]),
    ("conv_step", &["--fmad=false"]),
    ("row_ops", &["--fmad=false"]),
];

fn main() {
    println!("cargo:rerun-if-changed=src/kernels/cuda");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo::rustc-check-cfg=cfg(wick_qmv_twin)");
    host_twin();
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")))
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    for (name, flags) in KERNELS {
        let src = format!("src/kernels/cuda/{name}.cu");
        let ptx = out.join(format!("{name}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-arch=compute_80"])
            .args(*flags)
            .arg("-o")
            .arg(&ptx)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {src}");
    }
}

/// The twin for Linux targets (the Metal check cross-compiles for macOS without a C toolchain
/// for it); a C compiler that fails leaves the cfg off and the tests that need it skip.
fn host_twin() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let built = cc::Build::new()
        .file("src/kernels/cuda/qmatvec_twin.c")
        .file("src/kernels/cuda/row_ops_twin.c")
        .file("src/kernels/cuda/attention_twin.c")
        .opt_level(3)
        // The twin's float steps are the kernel's: no contraction into fma beyond its own.
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-math-errno")
        // Activation quants are read four to a word, as the kernel reads them.
        .flag_if_supported("-fno-strict-aliasing")
        .try_compile("wick_qmv_twin");
    match built {
        Ok(()) => println!("cargo:rustc-cfg=wick_qmv_twin"),
        Err(e) => println!("cargo:warning=qmatvec host twin not built: {e}"),
    }
}
