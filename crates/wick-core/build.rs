//! With the `cuda` feature: Wick's own CUDA kernels (`src/kernels/cuda/*.cu`) to PTX, which the
//! driver JIT-compiles for the GPU at hand (compute_80 and up). nvcc from `$NVCC`, else
//! `$CUDA_HOME/bin/nvcc`, else the PATH (`scripts/cuda-toolkit.sh` sets them).

use std::path::PathBuf;
use std::process::Command;

/// The `.cu` files under src/kernels/cuda, by stem.
const KERNELS: &[&str] = &["decode_attention"];

fn main() {
    println!("cargo:rerun-if-changed=src/kernels/cuda");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")))
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    for name in KERNELS {
        let src = format!("src/kernels/cuda/{name}.cu");
        let ptx = out.join(format!("{name}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-arch=compute_80", "-o"])
            .arg(&ptx)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {src}");
    }
}
