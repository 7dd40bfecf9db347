//! The scalar ports of ggml's scale searches (the reference the lane versions are checked
//! against) and the checks themselves.

use super::*;

/// `make_qkx2_quants(32, nmax, x, weights, L, &min, Laux, rmin, rdelta, nstep, false)`:
/// returns (scale, -min) and fills `l`. (The scalar reference of `lanes::make_qkx2_quants`.)
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let mut laux = [0u8; 32];
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let li = nearest_int(iscale * (x[i] - min));
        l[i] = li.clamp(0, nmax) as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        let diff = diff * diff;
        best_error += weights[i] * diff;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = li as u8;
            let w = weights[i];
            let lf = li as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                let diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `make_qx_quants(16, 32, x, L, rmse_type = 1, NULL)` as Q6_K calls it. (The scalar
/// reference of `lanes::make_qx_quants`.)
fn make_qx_quants_q6(x: &[f32], l: &mut [i8]) -> f32 {
    const NMAX: i32 = 32;
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let mut iscale = -(NMAX as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let li = nearest_int(iscale * x[i]).clamp(-NMAX, NMAX - 1);
        l[i] = (li + NMAX) as i8;
        let w = x[i] * x[i];
        let lf = li as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(NMAX as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &xi in x {
            let lf = nearest_int(iscale * xi).clamp(-NMAX, NMAX - 1) as f32;
            let w = xi * xi;
            sumlx += w * xi * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let li = nearest_int(iscale * x[i]);
                l[i] = (NMAX + li.clamp(-NMAX, NMAX - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Seeded values with the awkward cases: zero groups, constant groups, all-negative and
/// all-positive groups, tiny and huge magnitudes.
fn samples(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    };
    let mut v: Vec<f32> = (0..n).map(|_| next()).collect();
    for (b, block) in v.chunks_mut(256).enumerate() {
        match b % 6 {
            1 => block[..32].fill(0.0),
            2 => block[32..64].fill(0.25),
            3 => block.iter_mut().for_each(|x| *x = -x.abs() * 1e-3),
            4 => block.iter_mut().for_each(|x| *x = x.abs() * 1e4),
            5 => block[..16].fill(0.0),
            _ => {}
        }
    }
    v
}

/// The scalar searches, for the reference blocks.
fn scalar_scales(x: &[f32], nmax: i32, rmin: f32, nstep: i32) -> Vec<(f32, f32, Vec<u8>)> {
    x.chunks_exact(32)
        .map(|xs| {
            let mut sum_x2 = 0.0f32;
            for &v in xs {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / 32.0).sqrt();
            let w: Vec<f32> = xs.iter().map(|v| av_x + v.abs()).collect();
            let mut l = vec![0u8; 32];
            let (s, m) = make_qkx2_quants(nmax, xs, &w, &mut l, rmin, 0.1, nstep);
            (s, m, l)
        })
        .collect()
}

#[test]
fn lane_searches_equal_the_scalar_reference_bit_for_bit() {
    let x = samples(7, 256 * 36);
    for (nmax, rmin, nstep) in [(15, -1.0, 20), (31, -0.5, 15)] {
        for block in x.chunks_exact(256) {
            let want = scalar_scales(block, nmax, rmin, nstep);
            let mut xt = [[0f32; QKX_LANES]; 32];
            let mut wt = [[0f32; QKX_LANES]; 32];
            for (j, (g, (_, _, _))) in block.chunks_exact(32).zip(&want).enumerate() {
                let mut sum_x2 = 0.0f32;
                for &v in g {
                    sum_x2 += v * v;
                }
                let av_x = (sum_x2 / 32.0).sqrt();
                for (i, &v) in g.iter().enumerate() {
                    xt[i][j] = v;
                    wt[i][j] = av_x + v.abs();
                }
            }
            let mut lt = [[0u8; QKX_LANES]; 32];
            let (s, m) = lanes::make_qkx2_quants(nmax, &xt, &wt, &mut lt, rmin, 0.1, nstep);
            for (j, (ws, wm, wl)) in want.iter().enumerate() {
                assert_eq!((s[j].to_bits(), m[j].to_bits()), (ws.to_bits(), wm.to_bits()), "group {j}");
                let got: Vec<u8> = lt.iter().map(|r| r[j]).collect();
                assert_eq!(&got, wl, "group {j}");
            }
        }
    }
    for block in x.chunks_exact(256) {
        let mut xt = [[0f32; QX_LANES]; 16];
        for (j, g) in block.chunks_exact(16).enumerate() {
            for (i, &v) in g.iter().enumerate() {
                xt[i][j] = v;
            }
        }
        let mut lt = [[0i8; QX_LANES]; 16];
        let s = lanes::make_qx_quants(&xt, &mut lt);
        for (j, g) in block.chunks_exact(16).enumerate() {
            let mut l = [0i8; 16];
            let want = make_qx_quants_q6(g, &mut l);
            assert_eq!(s[j].to_bits(), want.to_bits(), "group {j}");
            let got: Vec<i8> = lt.iter().map(|r| r[j]).collect();
            assert_eq!(got, l, "group {j}");
        }
    }
}

#[test]
fn avx2_and_portable_blocks_are_identical() {
    let x = samples(11, 256 * 24);
    for (f, g, bytes) in [
        (q4_k as fn(&[f32], &mut [u8]), q4_k_impl as fn(&[f32], &mut [u8]), 144),
        (q5_k, q5_k_impl, 176),
        (q6_k, q6_k_impl, 210),
    ] {
        let (mut a, mut b) = (vec![0u8; 24 * bytes], vec![0u8; 24 * bytes]);
        f(&x, &mut a);
        g(&x, &mut b);
        assert_eq!(a, b);
    }
}
