//! Run-time instruction-set dispatch for plain Rust code. Shipped builds target baseline
//! x86-64 (they must run on any x86-64); the exact elementwise ops lean on `mul_add` and on
//! auto-vectorisation, which without AVX2/FMA become libm `fmaf` calls and scalar loops
//! (measured 2× slower end to end). `fast` compiles its closure a second time with
//! AVX2/FMA/F16C enabled and picks that copy when the CPU has them. Results are identical:
//! `mul_add` is fused either way and no float operation is reordered.

/// Whether the CPU has AVX2, FMA and F16C.
#[inline]
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `f()`, compiled with AVX2/FMA/F16C where the CPU has them. Keep `f`'s hot helpers
/// `#[inline]` so they are compiled into that copy.
#[inline(always)]
pub fn fast<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // Safety: the features were detected above.
        return unsafe { with_avx2(f) };
    }
    f()
}
