//! CPU-feature detection for every kernel, done once, and the `WICK_ISA` cap (`scalar`, `avx2`
//! on x86; `scalar`, `neon`, `dotprod` on aarch64: to test and measure the fallbacks). Each kernel family asks for exactly the features its
//! fast path needs (they differ: llama.cpp picks its variants by different features), so the
//! uncapped results stay those of the CPU's best path; the cap turns off everything above it.
//!
//! Shipped builds target baseline x86-64 (they must run on any x86-64); the exact elementwise
//! ops lean on `mul_add` and on auto-vectorisation, which without AVX2/FMA become libm `fmaf`
//! calls and scalar loops (much slower end to end: benches/RESULTS.md, "what the x86-64-v3
//! build flag is worth"). `with_avx2_codegen` compiles its closure a second time with
//! AVX2/FMA/F16C enabled and picks that copy when the CPU has them. Results are identical:
//! `mul_add` is fused either way and no float operation is reordered.

use std::sync::OnceLock;

/// The widest kernels this CPU runs (after the `WICK_ISA` cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// aarch64 Advanced SIMD, which every aarch64 CPU has (Cortex-A53/A72: Raspberry Pi 3/4).
    Neon,
    /// NEON with the int8 dot products `sdot`/`udot` (Armv8.2 optional, Armv8.4 on: Apple M1,
    /// Graviton 2, Ampere Altra, Cortex-A76 / Raspberry Pi 5).
    NeonDotprod,
    /// NEON with dotprod and the int8 matrix multiply `smmla` (Armv8.6: Apple M2, Graviton 3).
    NeonI8mm,
    Avx2,
    Avx512Vnni,
}

impl Isa {
    /// The instruction sets this architecture has kernels for, narrowest first (the tests
    /// run each one up to `detected()`).
    #[cfg(target_arch = "aarch64")]
    pub const ALL: &[Isa] = &[Isa::Scalar, Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm];
    #[cfg(not(target_arch = "aarch64"))]
    pub const ALL: &[Isa] = &[Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni];
}

/// Detected once; `WICK_ISA=scalar|avx2` caps it.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| detected().min(cap()))
}

impl Isa {
    /// The name `WICK_ISA` takes and the load log shows.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "dotprod",
            Isa::NeonI8mm => "i8mm",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }
}

/// The `WICK_ISA` cap (no cap: `Avx512Vnni`, above every level). The two architectures' levels
/// never meet: capping one at a name of the other leaves scalar code on x86 (`neon`) and no
/// cap on aarch64 (`avx2`).
fn cap() -> Isa {
    let named = std::env::var("WICK_ISA").ok();
    [Isa::Scalar, Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm, Isa::Avx2]
        .into_iter()
        .find(|i| named.as_deref() == Some(i.name()))
        .unwrap_or(Isa::Avx512Vnni)
}

/// What the CPU runs, uncapped (tests compare every instruction set up to it).
pub fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        // Every AVX-512 kernel is compiled for all five (an intrinsic whose feature is missing
        // from its function's list is not inlined: a call per use).
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
        {
            return Isa::Avx512Vnni;
        }
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return Isa::Avx2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected;
        match (is_aarch64_feature_detected!("dotprod"), is_aarch64_feature_detected!("i8mm")) {
            (true, true) => Isa::NeonI8mm,
            (true, false) => Isa::NeonDotprod,
            _ => Isa::Neon,
        }
    }
    #[cfg(not(target_arch = "aarch64"))]
    Isa::Scalar
}

/// `test()` once, false when the cap is below `level`.
#[inline]
fn cached(flag: &OnceLock<bool>, level: Isa, test: impl FnOnce() -> bool) -> bool {
    *flag.get_or_init(|| cap() >= level && test())
}

/// AVX2 and FMA: the row dots of `quants` / `k_quants` (ggml's AVX2 `vec_dot`s).
#[inline]
pub fn has_avx2_fma() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    return cached(&OK, Isa::Avx2, || is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"));
    #[cfg(not(target_arch = "x86_64"))]
    cached(&OK, Isa::Avx2, || false)
}

/// AVX2, FMA and F16C: `with_avx2_codegen` and the f16 attention dots.
#[inline]
pub fn has_avx2() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    return cached(&OK, Isa::Avx2, || {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    });
    #[cfg(not(target_arch = "x86_64"))]
    cached(&OK, Isa::Avx2, || false)
}

/// AVX-512 F, BW, DQ and VL, i.e. whether llama.cpp loads an AVX-512 build, which repacks
/// Q2_K weights.
pub fn has_avx512() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    return cached(&OK, Isa::Avx512Vnni, || {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
    });
    #[cfg(not(target_arch = "x86_64"))]
    cached(&OK, Isa::Avx512Vnni, || false)
}

/// AVX-512 F and DQ: ggml's AVX-512 `expf` (`_mm512_scalef_ps`).
pub fn has_avx512_expf() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    return cached(&OK, Isa::Avx512Vnni, || {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512dq")
    });
    #[cfg(not(target_arch = "x86_64"))]
    cached(&OK, Isa::Avx512Vnni, || false)
}

/// AVX512-BF16, i.e. whether llama.cpp's CPU backend loads a build whose BF16 dot products use
/// `vdpbf16ps` (the order the BF16 kernels follow).
pub fn has_avx512bf16() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    return cached(&OK, Isa::Avx512Vnni, || is_x86_feature_detected!("avx512bf16"));
    #[cfg(not(target_arch = "x86_64"))]
    cached(&OK, Isa::Avx512Vnni, || false)
}

/// `f()`, compiled with AVX2/FMA/F16C where the CPU has them (a second copy of `f`'s code
/// with those features enabled, picked at run time). Keep `f`'s hot helpers `#[inline]` so
/// they are compiled into that copy, and write its hot loops as loops: an iterator adapter
/// (`map`, `fold`, …) is a generic function compiled outside that copy, where `f32::mul_add`
/// is a call to the software `fmaf` (the MoE router spent a large share of a prefill so:
/// benches/RESULTS.md, issue #20).
#[inline(always)]
pub fn with_avx2_codegen<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        /// # Safety
        /// The CPU has AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: `has_avx2` detected AVX2, FMA and F16C.
        return unsafe { with_avx2(f) };
    }
    f()
}
