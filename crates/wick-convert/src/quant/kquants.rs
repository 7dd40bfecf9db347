//! The K-quant super-block quantizers (256 values per block), ported line for line from
//! ggml's reference implementations (`quantize_row_q{4,5,6}_K_ref`, `make_qkx2_quants`,
//! `make_qx_quants` in ggml/src/ggml-quants.c). llama-quantize runs these when no importance
//! matrix is given; the same f32 operations in the same order give byte-identical blocks.
//! (candle's K-quantizers use the older `make_qkx1_quants`, so they differ.)
//!
//! The per-group searches run a super-block's groups side by side (`lanes.rs`); the scalar
//! ports below stay as the reference they are checked against (tests at the end).

use half::f16;

use super::lanes::{self, nearest_int, QKX_LANES, QX_LANES};

const QK_K: usize = 256;
const GROUP_MAX_EPS: f32 = 1e-15;

fn fp16(x: f32) -> f16 {
    f16::from_f32(x)
}

fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// The shared first half of Q4_K and Q5_K: per 32-value group a scale and a min by
/// `make_qkx2_quants`, packed as 6-bit values against the block's f16 `d` and `dmin`; then
/// the levels recomputed against the packed scales. Writes d, dmin and the 12 scale bytes
/// into `head` (16 bytes) and returns the 256 levels.
#[inline(always)]
fn scale_min_block(x: &[f32], nmax: i32, rmin: f32, nstep: i32, head: &mut [u8]) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    // Group j's value i at [i][j].
    let mut xt = [[0f32; QKX_LANES]; 32];
    for (j, g) in x.chunks_exact(32).enumerate() {
        for (i, &v) in g.iter().enumerate() {
            xt[i][j] = v;
        }
    }
    let mut sum_x2 = [0f32; QKX_LANES];
    for row in &xt {
        for j in 0..QKX_LANES {
            sum_x2[j] += row[j] * row[j];
        }
    }
    let mut av_x = [0f32; QKX_LANES];
    for j in 0..QKX_LANES {
        av_x[j] = (sum_x2[j] / 32.0).sqrt();
    }
    let mut wt = [[0f32; QKX_LANES]; 32];
    for (wr, xr) in wt.iter_mut().zip(&xt) {
        for j in 0..QKX_LANES {
            wr[j] = av_x[j] + xr[j].abs();
        }
    }
    let mut lt = [[0u8; QKX_LANES]; 32];
    let (scales, mins) = lanes::make_qkx2_quants(nmax, &xt, &wt, &mut lt, rmin, 0.1, nstep);
    for (i, row) in lt.iter().enumerate() {
        for j in 0..QKX_LANES {
            l[32 * j + i] = row[j];
        }
    }
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..QKX_LANES {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut head[4..16];
    sc.fill(0);
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = fp16(max_scale / 63.0);
    let dmin = fp16(max_min / 63.0);
    head[..2].copy_from_slice(&d.to_le_bytes());
    head[2..4].copy_from_slice(&dmin.to_le_bytes());
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, &head[4..16]);
        let dd = d.to_f32() * s as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dd).clamp(0, nmax) as u8;
        }
    }
    l
}

/// Runs `$impl` compiled for AVX2 when the CPU has it (wider lanes; the same operations).
macro_rules! dispatch {
    ($name:ident, $avx2:ident, $impl:ident, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(x: &[f32], out: &mut [u8]) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 is present (checked just above).
                return unsafe { $avx2(x, out) };
            }
            $impl(x, out)
        }

        /// # Safety
        /// The CPU must support AVX2.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2(x: &[f32], out: &mut [u8]) {
            $impl(x, out)
        }
    };
}

dispatch!(q4_k, q4_k_avx2, q4_k_impl, "Q4_K: 144 bytes per 256 values.");
dispatch!(q5_k, q5_k_avx2, q5_k_impl, "Q5_K: 176 bytes per 256 values.");
dispatch!(
    q6_k,
    q6_k_avx2,
    q6_k_impl,
    "Q6_K: 210 bytes per 256 values (128 ql, 64 qh, 16 int8 scales, f16 d)."
);

#[inline(always)]
fn q4_k_impl(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(144)) {
        let l = scale_min_block(xb, 15, -1.0, 20, &mut y[..16]);
        let q = &mut y[16..];
        for (n, j) in (0..QK_K).step_by(64).enumerate() {
            for i in 0..32 {
                q[32 * n + i] = l[j + i] | (l[j + i + 32] << 4);
            }
        }
    }
}

#[inline(always)]
fn q5_k_impl(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(176)) {
        let l = scale_min_block(xb, 31, -0.5, 15, &mut y[..16]);
        let (qh, ql) = y[16..].split_at_mut(32);
        qh.fill(0);
        let (mut m1, mut m2) = (1u8, 2u8);
        for (b, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[32 * b + j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

#[inline(always)]
fn q6_k_impl(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(210)) {
        let mut l = [0i8; QK_K];
        let mut xt = [[0f32; QX_LANES]; 16];
        for (j, g) in xb.chunks_exact(16).enumerate() {
            for (i, &v) in g.iter().enumerate() {
                xt[i][j] = v;
            }
        }
        let mut lt = [[0i8; QX_LANES]; 16];
        let scales = lanes::make_qx_quants(&xt, &mut lt);
        for (i, row) in lt.iter().enumerate() {
            for j in 0..QX_LANES {
                l[16 * j + i] = row[j];
            }
        }
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for &s in &scales {
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            y.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d = fp16(1.0 / iscale);
        let mut sc = [0i8; 16];
        for ib in 0..16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        for j in 0..16 {
            let dd = d.to_f32() * sc[j] as f32;
            if dd == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let li = nearest_int(xb[16 * j + ii] / dd).clamp(-32, 31);
                l[16 * j + ii] = (li + 32) as i8;
            }
        }
        let (ql, rest) = y.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        let (scb, db) = rest.split_at_mut(16);
        for (h, j) in (0..QK_K).step_by(128).enumerate() {
            for i in 0..32 {
                let q = |k: usize| l[j + i + k] as u8;
                ql[64 * h + i] = (q(0) & 0xF) | ((q(64) & 0xF) << 4);
                ql[64 * h + i + 32] = (q(32) & 0xF) | ((q(96) & 0xF) << 4);
                qh[32 * h + i] =
                    (q(0) >> 4) | ((q(32) >> 4) << 2) | ((q(64) >> 4) << 4) | ((q(96) >> 4) << 6);
            }
        }
        for (b, s) in scb.iter_mut().zip(sc) {
            *b = s as u8;
        }
        db.copy_from_slice(&d.to_le_bytes());
    }
}

#[cfg(test)]
#[path = "kquants_tests.rs"]
mod tests;
