//! The Walsh–Hadamard rotation llama.cpp applies around a quantized KV cache (its
//! `attn_rot_k` / `attn_rot_v`): queries and keys rotated before keys are stored, values
//! rotated before they are stored and the attention output rotated back (the orthonormal
//! matrix is its own inverse). Rotating spreads a head's outlier channels over the block, so
//! 32-value blocks quantize with far less loss. Computed as ggml's CPU `fwht` op computes
//! it: each run of `n` values scaled by `1/sqrt(n)`, then the butterflies `u + v`, `u − v`
//! at spans 1, 2, 4 … — every step one rounding, so any vector width gives the same bits.

/// Rotates every run of `n` values of `x` in place (`n` a power of two dividing `x.len()`).
pub fn rotate_runs(x: &mut [f32], n: usize) {
    debug_assert!(n.is_power_of_two() && x.len().is_multiple_of(n));
    let scale = 1.0 / (n as f32).sqrt();
    for run in x.chunks_exact_mut(n) {
        for v in run.iter_mut() {
            *v *= scale;
        }
        let mut span = 1;
        while span < n {
            for pair in run.chunks_exact_mut(2 * span) {
                let (lo, hi) = pair.split_at_mut(span);
                for (u, v) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (a, b) = (*u, *v);
                    *u = a + b;
                    *v = a - b;
                }
            }
            span *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_is_orthonormal_and_its_own_inverse() {
        let n = 64;
        let mut s = 1u32;
        let x: Vec<f32> = (0..2 * n)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect();
        let mut y = x.clone();
        rotate_runs(&mut y, n);
        // The matrix's rows: H[i][j] = (−1)^popcount(i & j) / sqrt(n).
        for (r, run) in y.chunks(n).enumerate() {
            for (i, &yi) in run.iter().enumerate() {
                let want: f64 = (0..n)
                    .map(|j| {
                        let sign = if (i & j).count_ones() % 2 == 0 { 1.0 } else { -1.0 };
                        sign * x[r * n + j] as f64 / (n as f64).sqrt()
                    })
                    .sum();
                assert!((yi as f64 - want).abs() < 1e-6, "{i}: {yi} vs {want}");
            }
        }
        let norm = |v: &[f32]| v.iter().map(|&a| a as f64 * a as f64).sum::<f64>();
        assert!((norm(&y) - norm(&x)).abs() < 1e-5);
        rotate_runs(&mut y, n);
        assert!(y.iter().zip(&x).all(|(a, b)| (a - b).abs() < 1e-6), "H·H = I");
    }
}
