//! How the pool stores keys and values (llama.cpp's `--cache-type-k` / `--cache-type-v`):
//! f16, or quantized rows of 32-value blocks written as llama.cpp's CPU backend writes its
//! quantized cache (`set_rows` through the type's `from_float`), so the blocks a kernel reads
//! are the bytes llama.cpp would hold.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::error::{Result, WickError};

/// Values per quantized block (`QK8_0`, `QK4_0`).
pub const QBLOCK: usize = 32;

/// One side's storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F16,
    /// `block_q8_0`: f16 d, 32 signed bytes.
    Q8_0,
    /// `block_q4_0`: f16 d, 16 bytes of nibbles (low: values 0..16, high: 16..32), q − 8.
    Q4_0,
}

impl KvType {
    /// llama.cpp's name (`f16`, `q8_0`, `q4_0`).
    pub fn parse(name: &str) -> Result<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "f16" => Ok(Self::F16),
            "q8_0" => Ok(Self::Q8_0),
            "q4_0" => Ok(Self::Q4_0),
            other => Err(WickError::InvalidRequest(format!(
                "unsupported KV cache type '{other}' (expected f16, q8_0 or q4_0)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
        }
    }

    pub fn is_quantized(self) -> bool {
        self != Self::F16
    }

    /// Bytes of one block of 32 values.
    fn block_bytes(self) -> usize {
        match self {
            Self::F16 => 2 * QBLOCK,
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
        }
    }

    /// Bytes of a row of `n` values (`n` a multiple of 32 for the quantized types).
    pub fn row_bytes(self, n: usize) -> usize {
        match self {
            Self::F16 => 2 * n,
            _ => n / QBLOCK * self.block_bytes(),
        }
    }

    /// Whether rows of `n` values can be stored (whole blocks).
    pub fn fits(self, n: usize) -> bool {
        !self.is_quantized() || n.is_multiple_of(QBLOCK)
    }

    /// `x` into `out` (`row_bytes(x.len())` bytes) as llama.cpp's CPU `from_float` does: q8_0
    /// as `quantize_row_q8_0` of its x86 build (`d = max|x|/127`, `x·(127/max|x|)` rounded to
    /// nearest even) or of its NEON build (`x·(1/d)`), q4_0 as `quantize_row_q4_0_ref`.
    /// f16 as `f16::from_f32` rounds (F16C, 8 at a time, where `out` is 2-byte aligned, as
    /// the pool's rows are).
    pub fn quantize_row(self, x: &[f32], out: &mut [u8]) {
        match self {
            Self::F16 if out.as_ptr().align_offset(2) == 0 && out.len() >= 2 * x.len() => {
                // SAFETY: 2-byte aligned (checked), 2·len bytes (checked), any bits are an f16.
                let h = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f16, x.len()) };
                h.convert_from_f32_slice(x);
            }
            Self::F16 => {
                for (o, v) in out.chunks_exact_mut(2).zip(x) {
                    o.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
                }
            }
            Self::Q8_0 => {
                for (b, o) in x.chunks_exact(QBLOCK).zip(out.chunks_exact_mut(34)) {
                    q8_0_block(b, o);
                }
            }
            Self::Q4_0 => {
                for (b, o) in x.chunks_exact(QBLOCK).zip(out.chunks_exact_mut(18)) {
                    q4_0_block(b, o);
                }
            }
        }
    }

    /// Row bytes back to values (exact: `d·q` needs at most 19 bits). Inlined, so a kernel's
    /// feature-enabled copy vectorizes it.
    #[inline(always)]
    pub fn dequantize_row(self, row: &[u8], out: &mut [f32]) {
        match self {
            Self::F16 => {
                for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                    *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Self::Q8_0 => {
                for (blk, o) in row.chunks_exact(34).zip(out.chunks_exact_mut(QBLOCK)) {
                    let d = block_scale(blk);
                    for (v, &q) in o.iter_mut().zip(&blk[2..]) {
                        *v = d * q as i8 as f32;
                    }
                }
            }
            Self::Q4_0 => {
                for (blk, o) in row.chunks_exact(18).zip(out.chunks_exact_mut(QBLOCK)) {
                    let d = block_scale(blk);
                    for (j, &q) in blk[2..].iter().enumerate() {
                        o[j] = d * ((q & 0x0F) as i32 - 8) as f32;
                        o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
                    }
                }
            }
        }
    }
}

/// A block's f16 scale.
#[inline(always)]
fn block_scale(blk: &[u8]) -> f32 {
    f16::from_le_bytes([blk[0], blk[1]]).to_f32()
}

/// Keys' and values' storage types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvTypes {
    pub k: KvType,
    pub v: KvType,
}

impl KvTypes {
    pub const F16: Self = Self { k: KvType::F16, v: KvType::F16 };

    /// The Walsh–Hadamard runs llama.cpp rotates around a quantized cache of heads of
    /// `head_dim` (`kernels::rotate_runs`), as (queries and keys, values and the output):
    /// keys of a quantized type by the largest power of two from 64 dividing the head,
    /// values of one by 64; none where the head is not a multiple of 64.
    pub fn rotation(self, head_dim: usize) -> (Option<usize>, Option<usize>) {
        let fits = head_dim > 0 && head_dim.is_multiple_of(64);
        let k = (self.k.is_quantized() && fits).then(|| 1 << head_dim.trailing_zeros());
        let v = (self.v.is_quantized() && fits).then_some(64);
        (k, v)
    }

    /// Bytes one token takes in an attention layer of `n_kv_head` heads of `head_dim`.
    pub fn token_bytes(self, n_kv_head: usize, head_dim: usize) -> usize {
        n_kv_head * (self.k.row_bytes(head_dim) + self.v.row_bytes(head_dim))
    }
}

/// The multiplier a q8_0 / q8_1 block's values are rounded from (`max`: the largest |x|,
/// `d = max / 127`): ggml's x86 quantizers take `127 / max`, its NEON ones `1 / d`, which
/// rounds differently and so moves some quants by one. The cache's keys and values and the
/// kernels' activation rows (`kernels::cpu::q8`) are quantized by this one rule.
#[inline(always)]
pub fn q8_0_inverse_scale(max: f32, d: f32) -> f32 {
    if cfg!(target_arch = "aarch64") {
        if d != 0.0 {
            1.0 / d
        } else {
            0.0
        }
    } else if max != 0.0 {
        127.0 / max
    } else {
        0.0
    }
}

fn q8_0_block(x: &[f32], out: &mut [u8]) {
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = max / 127.0;
    let id = q8_0_inverse_scale(max, d);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (o, v) in out[2..].iter_mut().zip(x) {
        *o = (v * id).round_ties_even() as i32 as i8 as u8;
    }
}

fn q4_0_block(x: &[f32], out: &mut [u8]) {
    // The value of largest magnitude, the first of equals (`amax < |v|`), sign kept.
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    // `MIN(15, (int8_t)(x·id + 8.5f))`: truncation toward zero, as C's conversion.
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..QBLOCK / 2 {
        out[2 + j] = q(x[j]) | (q(x[j + QBLOCK / 2]) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_ones_are_refused() {
        for t in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            assert_eq!(KvType::parse(t.name()).unwrap(), t);
        }
        assert_eq!(KvType::parse(" Q8_0 ").unwrap(), KvType::Q8_0);
        let e = KvType::parse("q5_1").unwrap_err().to_string();
        assert!(e.contains("q5_1") && e.contains("q4_0"), "{e}");
    }

    #[test]
    fn sizes_are_llama_cpp_blocks() {
        assert_eq!(KvType::F16.row_bytes(64), 128);
        assert_eq!(KvType::Q8_0.row_bytes(64), 68);
        assert_eq!(KvType::Q4_0.row_bytes(64), 36);
        assert!(!KvType::Q8_0.fits(80) && KvType::F16.fits(80));
        let t = KvTypes { k: KvType::Q8_0, v: KvType::Q4_0 };
        assert_eq!(t.token_bytes(8, 64), 8 * (68 + 36));
        // llama.cpp's rotation sizes: keys by the largest power of two dividing the head.
        assert_eq!(t.rotation(64), (Some(64), Some(64)));
        assert_eq!(t.rotation(256), (Some(256), Some(64)));
        assert_eq!(t.rotation(192), (Some(64), Some(64)));
        assert_eq!(t.rotation(96), (None, None));
        assert_eq!(KvTypes { k: KvType::F16, v: KvType::Q8_0 }.rotation(128), (None, Some(64)));
    }

    #[test]
    fn f16_rows_round_alike_aligned_or_not() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 - 18.3) * 0.731e-3 + 1.0 / (i as f32 + 0.5)).collect();
        let mut bytes = [0u8; 80];
        // An even address (the F16C path), then the odd one after it (the per-value path).
        let even = bytes.as_ptr().align_offset(2);
        KvType::F16.quantize_row(&x, &mut bytes[even..even + 74]);
        let aligned = bytes[even..even + 74].to_vec();
        KvType::F16.quantize_row(&x, &mut bytes[even + 1..even + 75]);
        assert_eq!(&bytes[even + 1..even + 75], &aligned[..], "odd and even addresses round alike");
        let want: Vec<u8> = x.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect();
        assert_eq!(aligned, want);
    }

    #[test]
    fn q8_0_rounds_half_to_even_and_keeps_the_scale_in_f16() {
        // max 127 → d = 1, id = 1: 2.5 → 2, 3.5 → 4, -0.5 → -0.
        let mut x = [0f32; 32];
        x[..4].copy_from_slice(&[127.0, 2.5, 3.5, -0.5]);
        let mut out = [0u8; 34];
        KvType::Q8_0.quantize_row(&x, &mut out);
        assert_eq!(block_scale(&out), 1.0);
        assert_eq!(&out[2..6], &[127u8, 2, 4, 0]);
        let mut back = [0f32; 32];
        KvType::Q8_0.dequantize_row(&out, &mut back);
        assert_eq!(&back[..4], &[127.0, 2.0, 4.0, 0.0]);
        // All zeros: d = 0, every q 0.
        KvType::Q8_0.quantize_row(&[0.0; 32], &mut out);
        assert!(out.iter().all(|&b| b == 0));
    }

    #[test]
    fn q4_0_takes_the_signed_extreme_and_truncates() {
        // The extreme is -8 → d = 1; v + 8.5 truncated: -8 → 0, 7 → 15, 7.4 → 15, 0.4 → 8, -0.6 → 7.
        let mut x = [0f32; 32];
        x[..5].copy_from_slice(&[-8.0, 7.0, 7.4, 0.4, -0.6]);
        x[16] = 3.0;
        let mut out = [0u8; 18];
        KvType::Q4_0.quantize_row(&x, &mut out);
        assert_eq!(block_scale(&out), 1.0);
        assert_eq!(out[2] & 0x0F, 0);
        assert_eq!(out[2] >> 4, 11, "value 16 in the high nibble of byte 0");
        assert_eq!([out[3] & 15, out[4] & 15, out[5] & 15, out[6] & 15], [15, 15, 8, 7]);
        let mut back = [0f32; 32];
        KvType::Q4_0.dequantize_row(&out, &mut back);
        assert_eq!(&back[..5], &[-8.0, 7.0, 7.0, 0.0, -1.0]);
        assert_eq!(back[16], 3.0);
        // A positive extreme: d = -max/8 (negative), so q = 0 is the extreme again.
        let mut y = [0f32; 32];
        y[0] = 16.0;
        KvType::Q4_0.quantize_row(&y, &mut out);
        assert_eq!(block_scale(&out), -2.0);
        KvType::Q4_0.dequantize_row(&out, &mut back);
        assert_eq!(back[0], 16.0);
    }
}
