//! f32 ↔ f16 for whole slices: F16C when the CPU has it, the `half` crate otherwise. Both
//! round to nearest even (F16C with `_MM_FROUND_TO_NEAREST_INT`), so the bytes are the same.

use half::f16;

/// `x` as little-endian f16 into `out` (2 bytes per value).
pub fn encode(x: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: F16C and AVX are present (checked just above).
        return unsafe { x86::encode(x, out) };
    }
    for (o, v) in out.chunks_exact_mut(2).zip(x) {
        o.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
    }
}

/// Little-endian f16 `bytes` as f32 into `out`.
pub fn decode(bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: F16C and AVX are present (checked just above).
        return unsafe { x86::decode(bytes, out) };
    }
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

/// Each value rounded to f16 and back.
pub fn round_trip(x: &mut [f32]) {
    let mut buf = [0u8; 512];
    for chunk in x.chunks_mut(256) {
        let b = &mut buf[..chunk.len() * 2];
        encode(chunk, b);
        decode(b, chunk);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    /// # Safety
    /// The CPU must support F16C and AVX.
    #[target_feature(enable = "f16c,avx")]
    pub unsafe fn encode(x: &[f32], out: &mut [u8]) {
        let n = x.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: i + 8 ≤ x.len() and 2·(i + 8) ≤ out.len(); unaligned loads and stores.
            unsafe {
                let v = _mm256_loadu_ps(x.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(out.as_mut_ptr().add(2 * i) as *mut __m128i, h);
            }
        }
        for i in n..x.len() {
            out[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(x[i]).to_le_bytes());
        }
    }

    /// # Safety
    /// The CPU must support F16C and AVX.
    #[target_feature(enable = "f16c,avx")]
    pub unsafe fn decode(bytes: &[u8], out: &mut [f32]) {
        let n = out.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: 2·(i + 8) ≤ bytes.len() and i + 8 ≤ out.len(); unaligned loads and stores.
            unsafe {
                let h = _mm_loadu_si128(bytes.as_ptr().add(2 * i) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        for i in n..out.len() {
            out[i] = f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hardware_and_software_conversions_agree() {
        let mut x: Vec<f32> = (0..4099).map(|i| ((i as f32) * 0.37).sin() * 10f32.powi(i % 9 - 4)).collect();
        x.extend([65504.0, 65520.0, 1e-8, -0.0, 5.96e-8, 2.98e-8]);
        let mut hw = vec![0u8; x.len() * 2];
        super::encode(&x, &mut hw);
        let sw: Vec<u8> = x.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        assert_eq!(hw, sw);
        let mut back = vec![0f32; x.len()];
        super::decode(&hw, &mut back);
        let want: Vec<f32> =
            hw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
        assert_eq!(back, want);
    }
}
