//! The 32-element block quantizers, ported line for line from ggml's reference
//! implementations (`quantize_row_*_ref` in ggml/src/ggml-quants.c), which is what
//! `llama-quantize` runs without an importance matrix. Same f32 operations in the same order,
//! so the blocks are byte-identical.

use half::f16;

fn fp16(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

/// Absolute maximum and the value that has it (the first one, as ggml's strict `<`).
fn signed_amax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Q4_0: 18 bytes per 32 values (f16 scale, 16 bytes of nibbles).
pub fn q4_0(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(18)) {
        let max = signed_amax(xb);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y[..2].copy_from_slice(&fp16(d));
        for j in 0..16 {
            let x0 = xb[j] * id;
            let x1 = xb[16 + j] * id;
            // (int8_t)(x + 8.5f): truncation toward zero, then MIN(15, ·) as uint8.
            let xi0 = ((x0 + 8.5) as i8 as u8).min(15);
            let xi1 = ((x1 + 8.5) as i8 as u8).min(15);
            y[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// Q5_0: 22 bytes per 32 values (f16 scale, 4 bytes of high bits, 16 bytes of nibbles).
pub fn q5_0(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(22)) {
        let max = signed_amax(xb);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y[..2].copy_from_slice(&fp16(d));
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = xb[j] * id;
            let x1 = xb[16 + j] * id;
            let xi0 = ((x0 + 16.5) as i8 as u8).min(31);
            let xi1 = ((x1 + 16.5) as i8 as u8).min(31);
            y[6 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
        }
        y[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Q5_1: 24 bytes per 32 values (f16 scale, f16 min, 4 bytes of high bits, 16 of nibbles).
pub fn q5_1(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(24)) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in xb {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y[..2].copy_from_slice(&fp16(d));
        y[2..4].copy_from_slice(&fp16(min));
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = (xb[j] - min) * id;
            let x1 = (xb[16 + j] - min) * id;
            let xi0 = (x0 + 0.5) as u8;
            let xi1 = (x1 + 0.5) as u8;
            y[8 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
        }
        y[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Q8_0: 34 bytes per 32 values (f16 scale, 32 signed bytes).
pub fn q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let mut amax = 0.0f32;
        for &v in xb {
            amax = amax.max(v.abs());
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y[..2].copy_from_slice(&fp16(d));
        for j in 0..32 {
            // roundf: half away from zero, as Rust's `round`.
            y[2 + j] = (xb[j] * id).round() as i8 as u8;
        }
    }
}
