//! GGML tensor types the converter writes, their block sizes, and turning f32 rows into
//! each type's bytes. The per-tensor choice of type (llama-quantize's mixes) is in `mix.rs`.

pub mod f16c;
mod kquants;
mod lanes;
mod legacy;
pub mod mix;

use half::bf16;

/// A GGML tensor type (the numbering of ggml.h's `ggml_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Bf16,
    Q4_0,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl GgmlType {
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Bf16 => 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
        }
    }

    /// Values per block.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::Bf16 => 1,
            Self::Q4_0 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q4K | Self::Q5K | Self::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
            Self::Q4_0 => 18,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of one row of `n` values (`ggml_row_size`); `n` must be a multiple of the block.
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }

    /// Encodes `x` (whole rows, a multiple of the block size) into `out`
    /// (`row_bytes(x.len())` bytes), as ggml's `ggml_quantize_chunk` does without an
    /// importance matrix, and as gguf-py writes F16 / BF16 / F32.
    pub fn encode(self, x: &[f32], out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.row_bytes(x.len()));
        match self {
            Self::F32 => {
                for (o, v) in out.chunks_exact_mut(4).zip(x) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Self::F16 => f16c::encode(x, out),
            Self::Bf16 => {
                for (o, v) in out.chunks_exact_mut(2).zip(x) {
                    o.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
                }
            }
            Self::Q4_0 => legacy::q4_0(x, out),
            Self::Q5_0 => legacy::q5_0(x, out),
            Self::Q5_1 => legacy::q5_1(x, out),
            Self::Q8_0 => legacy::q8_0(x, out),
            Self::Q4K => kquants::q4_k(x, out),
            Self::Q5K => kquants::q5_k(x, out),
            Self::Q6K => kquants::q6_k(x, out),
        }
    }

    /// What a value reads back as after a round trip through this (float) type: the values
    /// llama-quantize sees when it reads an F16 or BF16 file.
    pub fn round_trip(self, x: &mut [f32]) {
        match self {
            Self::F16 => f16c::round_trip(x),
            Self::Bf16 => x.iter_mut().for_each(|v| *v = bf16::from_bits(f32_to_bf16(*v)).to_f32()),
            _ => {}
        }
    }
}

/// gguf-py's `__compute_fp32_to_bf16`: NaNs made quiet, then round to nearest even.
pub fn f32_to_bf16(v: f32) -> u16 {
    let mut n = v.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        n = (n & 0xffff_0000) | (64 << 16);
    }
    ((n as u64 + (0x7fff + ((n >> 16) & 1)) as u64) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_like_gguf_py() {
        for v in [1.0f32, -2.5, 1.0 + 1.0 / 256.0, 3.0e38, 1e-40, 0.1] {
            assert_eq!(f32_to_bf16(v), bf16::from_f32(v).to_bits(), "{v}");
        }
        assert_eq!(f32_to_bf16(f32::NAN) & 0x7f80, 0x7f80);
    }

    #[test]
    fn q8_0_rounds_half_away_from_zero() {
        // Through the Q8_0 path: 0.5 and 1.5 of a scale.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = 1.5;
        let mut out = [0u8; 34];
        GgmlType::Q8_0.encode(&x, &mut out);
        // roundf rounds half away from zero (Q8_0 uses roundf, not nearest_int).
        assert_eq!((out[3] as i8, out[4] as i8), (1, 2));
    }
}
