//! CPU kernels (x86: AVX-512 VNNI, AVX2; aarch64: NEON with or without the dot-product
//! instructions; or portable code; picked at run time by `feats`).

#[cfg(target_arch = "aarch64")]
pub(crate) mod arm;
pub mod attention;
pub(crate) mod blocks;
pub(crate) mod elementwise;
pub mod expf;
pub(crate) mod f16_matmul;
pub mod feats;
pub(crate) mod float_dots;
pub mod float_matmul;
pub mod hadamard;
pub mod host_f16;
pub mod image;
pub(crate) mod k_quants;
pub mod matmul;
pub(crate) mod q8;
pub(crate) mod quants;
pub mod repack;
pub(crate) mod split;
pub mod vit;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(test)]
pub(crate) mod dot_checks;
