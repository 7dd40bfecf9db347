//! GGUF quant block layouts (ggml's `block_q4_0`, `block_q4_K`, …) as named sizes and byte
//! offsets, the few field decoders every kernel shares, ggml's horizontal sums and the float
//! folds its portable and SIMD kernels share.
//! Nothing here depends on another kernel module.

#[cfg(any(test, not(target_arch = "aarch64")))]
use half::f16;

/// Values per block of the 32-value types (`QK4_0`, `QK8_0`, …).
pub const QK: usize = 32;
/// Values per super-block of the K-quants (`QK_K`).
pub const QK_K: usize = 256;

/// `block_q4_0`: f16 d, 16 nibble bytes (low nibbles: values 0..16, high: 16..32).
pub struct Q4_0;
impl Q4_0 {
    pub const BYTES: usize = 18;
    pub const D: usize = 0;
    pub const QS: usize = 2;
}

/// `block_q4_1`: f16 d, f16 m, 16 nibble bytes.
pub struct Q4_1;
impl Q4_1 {
    pub const BYTES: usize = 20;
    pub const D: usize = 0;
    pub const M: usize = 2;
    pub const QS: usize = 4;
}

/// `block_q5_0`: f16 d, u32 qh (bit 4 of each value), 16 nibble bytes.
pub struct Q5_0;
impl Q5_0 {
    pub const BYTES: usize = 22;
    pub const D: usize = 0;
    pub const QH: usize = 2;
    pub const QS: usize = 6;
}

/// `block_q5_1`: f16 d, f16 m, u32 qh, 16 nibble bytes.
pub struct Q5_1;
impl Q5_1 {
    pub const BYTES: usize = 24;
    pub const D: usize = 0;
    pub const M: usize = 2;
    pub const QH: usize = 4;
    pub const QS: usize = 8;
}

/// `block_q8_0`: f16 d, 32 signed bytes.
pub struct Q8_0;
impl Q8_0 {
    pub const BYTES: usize = 34;
    pub const D: usize = 0;
    pub const QS: usize = 2;
}

/// `block_q2_K`: 16 scale/min nibble bytes, 64 bytes of 2-bit planes, f16 d, f16 dmin.
pub struct Q2K;
impl Q2K {
    pub const BYTES: usize = 84;
    pub const SCALES: usize = 0;
    pub const QS: usize = 16;
    pub const D: usize = 80;
    pub const DMIN: usize = 82;
}

/// `block_q3_K`: 32 hmask bytes, 64 bytes of 2-bit planes, 12 packed 6-bit scales, f16 d.
pub struct Q3K;
impl Q3K {
    pub const BYTES: usize = 110;
    pub const HMASK: usize = 0;
    pub const QS: usize = 32;
    pub const SCALES: usize = 96;
    pub const D: usize = 108;
}

/// `block_q4_K`: f16 d, f16 dmin, 12 packed 6-bit scales and mins, 128 nibble bytes.
pub struct Q4K;
impl Q4K {
    pub const BYTES: usize = 144;
    pub const D: usize = 0;
    pub const DMIN: usize = 2;
    pub const SCALES: usize = 4;
    pub const QS: usize = 16;
}

/// `block_q5_K`: Q4_K's fields with 32 qh bytes (bit 4 of each value) before the nibbles.
pub struct Q5K;
impl Q5K {
    pub const BYTES: usize = 176;
    pub const D: usize = 0;
    pub const DMIN: usize = 2;
    pub const SCALES: usize = 4;
    pub const QH: usize = 16;
    pub const QS: usize = 48;
}

/// `block_q6_K`: 128 ql bytes (low nibbles), 64 qh bytes (2 high bits each), 16 i8 scales, f16 d.
pub struct Q6K;
impl Q6K {
    pub const BYTES: usize = 210;
    pub const QL: usize = 0;
    pub const QH: usize = 128;
    pub const SCALES: usize = 192;
    pub const D: usize = 208;
}

/// The f16 at byte `i` of a block, as f32.
#[inline(always)]
pub fn f16_at(b: &[u8], i: usize) -> f32 {
    let bits = u16::from_le_bytes([b[i], b[i + 1]]);
    // `half` converts in software on aarch64 unless the CPU has FP16 arithmetic, and calls
    // out per value to ask; the conversion instruction itself is in every aarch64 CPU.
    #[cfg(target_arch = "aarch64")]
    {
        let out: f32;
        // SAFETY: `fcvt` (half to single, exact) is baseline floating point on aarch64.
        unsafe {
            std::arch::asm!(
                "fcvt {o:s}, {h:h}",
                o = lateout(vreg) out,
                h = in(vreg) bits as i16,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        out
    }
    #[cfg(not(target_arch = "aarch64"))]
    f16::from_bits(bits).to_f32()
}

/// The little-endian u32 at byte `i` of a block (Q5_0/Q5_1's `qh`).
#[inline(always)]
pub fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The 6-bit scale and min of sub-block j from a Q4_K/Q5_K block's 12 packed bytes
/// (`get_scale_min_k4`).
#[inline(always)]
pub fn scale_min(sc: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (sc[j] & 63, sc[j + 4] & 63)
    } else {
        ((sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4))
    }
}

/// The 16 signed 6-bit scales (-32..32) of a Q3_K block: low nibbles from bytes 0..8, two
/// high bits each from bytes 8..12.
pub fn q3k_scales(blk: &[u8]) -> [i32; 16] {
    let sc = &blk[Q3K::SCALES..Q3K::D];
    std::array::from_fn(|g| {
        let (i, quarter) = (g % 4, g / 4);
        let lo = match quarter {
            0 => sc[i] & 0x0F,
            1 => sc[4 + i] & 0x0F,
            2 => sc[i] >> 4,
            _ => sc[4 + i] >> 4,
        };
        (lo | ((sc[8 + i] >> (2 * quarter)) & 3) << 4) as i32 - 32
    })
}

/// ggml's `hsum_float_8` on an 8-lane accumulator: high half + low half, then pairs.
#[inline(always)]
pub fn hsum8(acc: [f32; 8]) -> f32 {
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// NEON's `vaddvq_f32` (`faddp` twice): adjacent pairs, then the two pair sums.
#[inline(always)]
pub fn hsum4(a: [f32; 4]) -> f32 {
    (a[0] + a[1]) + (a[2] + a[3])
}

/// `_mm512_reduce_add_ps`: halves, then quarters, then pairs.
#[inline(always)]
pub fn reduce16(a: &[f32; 16]) -> f32 {
    let mut t = [0f32; 8];
    for i in 0..8 {
        t[i] = a[i + 8] + a[i];
    }
    hsum8(t)
}

/// Q2_K's float steps on a block's integer sums per half (`isum`, `imin`): both halves
/// folded apart (GEMM rows) or together (GEMV), with `d·dy` and `dmin·dy`.
#[inline(always)]
pub fn fold_q2k(
    per_half: bool,
    isum: [i32; 2],
    imin: [i32; 2],
    (d, dmin, dy): (f32, f32, f32),
    (acc, acc_min): (&mut f32, &mut f32),
) {
    if per_half {
        for h in 0..2 {
            *acc = (isum[h] as f32).mul_add(d * dy, *acc);
            *acc_min = (imin[h] as f32).mul_add(dmin * dy, *acc_min);
        }
    } else {
        *acc = ((isum[0] + isum[1]) as f32).mul_add(d * dy, *acc);
        *acc_min = ((imin[0] + imin[1]) as f32).mul_add(dmin * dy, *acc_min);
    }
}

/// How llama.cpp's NEON row dots of the 32-value types add the weights' mins (`m·s`).
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mins {
    /// Q8_0, Q5_0, Q4_0: none.
    None,
    /// Q4_1: one sum, `summs + fma(m0, s0, m1·s1)` per pair of blocks.
    Paired,
    /// Q5_1: one sum per block of the pair, `fma(m, s, summs_i)`.
    Split,
}

/// The float steps of llama.cpp's NEON `ggml_vec_dot_{q8_0,q4_0,q5_0}_q8_0` and
/// `ggml_vec_dot_{q4_1,q5_1}_q8_1` (arch/arm/quants.c, as GCC compiles them for the
/// armv8.2-a+dotprod build), one output at a time: blocks in pairs, the even block's 4 lanes
/// into one float accumulator and the odd one's into another, `acc + float(lane)·d` (the
/// product rounded, then added: `vmlaq_n_f32` is not fused), lane h of a block being the exact
/// `Σ_{t<4} x[4h+t]·y[4h+t] + x[16+4h+t]·y[16+4h+t]`; then `vaddvq_f32` of each, added, plus the
/// mins (`Mins`); a last odd block in scalar code, `fma(float(Σ), d, sum)` without mins,
/// `sum + fma(d, float(Σ), m·s)` with them.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy, Debug)]
pub struct PairOrder {
    mins: Mins,
    nb: usize,
    b: usize,
    acc: [[f32; 4]; 2],
    summs: [f32; 2],
    /// The even block's `(m, s)` until its pair's odd block comes.
    even_ms: (f32, f32),
    /// A last odd block: `(Σ, d, m, s)`.
    tail: Option<(i32, f32, f32, f32)>,
}

#[cfg(target_arch = "aarch64")]
impl PairOrder {
    pub fn new(mins: Mins, nb: usize) -> Self {
        Self { mins, nb, b: 0, acc: [[0.0; 4]; 2], summs: [0.0; 2], even_ms: (0.0, 0.0), tail: None }
    }

    /// The next block: its four lane sums, `d = dw·dy` and the min term's `(m, s)`.
    #[inline(always)]
    pub fn block(&mut self, lanes: [i32; 4], d: f32, (m, s): (f32, f32)) {
        let b = self.b;
        self.b += 1;
        if b + 1 == self.nb && self.nb % 2 == 1 {
            self.tail = Some((lanes.iter().sum(), d, m, s));
            return;
        }
        for (a, &l) in self.acc[b % 2].iter_mut().zip(&lanes) {
            *a += l as f32 * d;
        }
        match (self.mins, b % 2) {
            (Mins::None, _) => {}
            (Mins::Paired, 0) => self.even_ms = (m, s),
            (Mins::Paired, _) => self.summs[0] += self.even_ms.0.mul_add(self.even_ms.1, m * s),
            (Mins::Split, p) => self.summs[p] = m.mul_add(s, self.summs[p]),
        }
    }

    pub fn finish(self) -> f32 {
        let mut sum = hsum4(self.acc[0]) + hsum4(self.acc[1]);
        match self.mins {
            Mins::None => {}
            Mins::Paired => sum += self.summs[0],
            Mins::Split => sum = (sum + self.summs[0]) + self.summs[1],
        }
        match (self.tail, self.mins) {
            (None, _) => sum,
            (Some((i, d, _, _)), Mins::None) => (i as f32).mul_add(d, sum),
            (Some((i, d, m, s)), _) => sum + d.mul_add(i as f32, m * s),
        }
    }
}

/// A block's four NEON lane sums from its eight 4-value lane sums (`l[h]`: elements 4h..4h+4):
/// lane h = `l[h] + l[4 + h]`.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub fn neon_lanes(l: [i32; 8]) -> [i32; 4] {
    [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 widens as `half` widens it (NaNs stay NaN).
    #[test]
    fn f16_at_is_the_exact_widening() {
        for bits in 0..=u16::MAX {
            let (got, want) = (f16_at(&bits.to_le_bytes(), 0), f16::from_bits(bits).to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#06x}: {got} vs {want}"
            );
        }
    }
}
