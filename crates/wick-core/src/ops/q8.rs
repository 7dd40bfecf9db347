//! Activation rows quantized the way ggml's x86 backend does before its integer dot products:
//! q8_0 / q8_1 (blocks of 32) and q8_K (blocks of 256). Every quantized-weight kernel reads
//! these, so a row is quantized once per matmul whatever the weight layout.

use half::f16;

use super::pool::{self, SyncPtr};

/// One q8_0 / q8_1 activation block: the f16 scale (as f32), the q8_1 sum term, the quants
/// and their integer sum.
pub struct Act32 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
    pub qsum: i32,
}

/// One q8_K activation block (f32 scale) with the integer sum of each 32-value sub-block
/// and ggml's `bsums` (each 16-value group, as i16 for the AVX2 `madd`s).
pub struct Act256 {
    pub d: f32,
    pub qs: [i8; 256],
    pub sums: [i32; 8],
    pub bsums: [i16; 16],
}

/// q8_0 / q8_1 over blocks of 32, as ggml's AVX2 `quantize_row_q8_0` / `_q8_1`.
pub fn quantize_q8(x: &[f32]) -> Vec<Act32> {
    x.chunks_exact(32)
        .map(|b| {
            let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = max / 127.0;
            let id = if max != 0.0 { 127.0 / max } else { 0.0 };
            let mut qs = [0i8; 32];
            let mut sum = 0i32;
            for (q, &v) in qs.iter_mut().zip(b) {
                *q = (v * id).round_ties_even() as i8;
                sum += *q as i32;
            }
            Act32 { d: f16::from_f32(d).to_f32(), s: f16::from_f32(d * sum as f32).to_f32(), qs, qsum: sum }
        })
        .collect()
}

/// q8_K over blocks of 256, as `quantize_row_q8_K_ref` (scale from the signed extreme).
pub fn quantize_q8k(x: &[f32]) -> Vec<Act256> {
    x.chunks_exact(256)
        .map(|b| {
            let (mut amax, mut max) = (0f32, 0f32);
            for &v in b {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let mut qs = [0i8; 256];
            if amax == 0.0 {
                return Act256 { d: 0.0, qs, sums: [0; 8], bsums: [0; 16] };
            }
            let iscale = -127.0 / max;
            for (q, &v) in qs.iter_mut().zip(b) {
                *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
            }
            let mut sums = [0i32; 8];
            for (j, s) in sums.iter_mut().enumerate() {
                *s = qs[j * 32..j * 32 + 32].iter().map(|&q| q as i32).sum();
            }
            // |Σ| ≤ 16·127 fits i16.
            let bsums = std::array::from_fn(|g| qs[g * 16..g * 16 + 16].iter().map(|&q| q as i16).sum());
            Act256 { d: 1.0 / iscale, qs, sums, bsums }
        })
        .collect()
}

/// Quantizes every row of `xs` (`k` values each) with `q`, rows spread over the pool.
pub fn quantize_rows<A: Send>(xs: &[f32], k: usize, q: fn(&[f32]) -> Vec<A>) -> Vec<Vec<A>> {
    let m = xs.len() / k;
    let mut out: Vec<Option<Vec<A>>> = (0..m).map(|_| None).collect();
    let op = SyncPtr(out.as_mut_ptr());
    let per = m.div_ceil(pool::global().threads() * 4).max(1);
    pool::run(m.div_ceil(per), &|t| {
        for r in t * per..((t + 1) * per).min(m) {
            // Safety: each row index is written by exactly one task.
            unsafe { *op.get().add(r) = Some(q(&xs[r * k..(r + 1) * k])) };
        }
    });
    out.into_iter().map(|v| v.expect("quantized row")).collect()
}
