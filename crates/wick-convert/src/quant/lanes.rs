//! ggml's per-group scale searches (`make_qkx2_quants` for Q4_K/Q5_K, `make_qx_quants` for
//! Q6_K) run for all groups of a super-block at once, one group per lane. Each lane does
//! exactly the scalar sequence of f32 operations (no reassociation, no fused multiply-add), so
//! the results are bit-identical to the reference; the lanes only let the compiler use vector
//! registers (AVX2 when the CPU has it, see `kquants.rs`).

/// ggml's `nearest_int`: round half to even through the 1.5·2^23 trick.
#[inline(always)]
pub(super) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Groups of 32 values (Q4_K/Q5_K) per super-block: 8.
pub const QKX_LANES: usize = 8;
/// Groups of 16 values (Q6_K) per super-block: 16.
pub const QX_LANES: usize = 16;

/// `make_qkx2_quants(32, nmax, x, w, L, &min, Laux, rmin, rdelta, nstep, false)` for 8 groups:
/// `x[i][j]` and `w[i][j]` are value i of group j. Returns per group (scale, -min) and
/// fills `l[i][j]`.
#[inline(always)]
pub fn make_qkx2_quants(
    nmax: i32,
    x: &[[f32; QKX_LANES]; 32],
    w: &[[f32; QKX_LANES]; 32],
    l: &mut [[u8; QKX_LANES]; 32],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> ([f32; QKX_LANES], [f32; QKX_LANES]) {
    let nmaxf = nmax as f32;
    let stats = group_stats(x, w);
    let mut min = stats.min;
    let (mut scale, mut best_error) = first_levels(nmax, x, w, &stats, l);
    let mut laux = [[0u8; QKX_LANES]; 32];
    for is in 0..=nstep {
        let step = rmin + rdelta * is as f32 + nmaxf;
        let fit = fit_step(nmax, step, x, w, &stats, &min, &mut laux);
        let mut better = [false; QKX_LANES];
        for j in 0..QKX_LANES {
            better[j] = fit.ok[j] && fit.error[j] < best_error[j];
            if better[j] {
                best_error[j] = fit.error[j];
                scale[j] = fit.scale[j];
                min[j] = fit.min[j];
            }
        }
        for i in 0..32 {
            for j in 0..QKX_LANES {
                if better[j] {
                    l[i][j] = laux[i][j];
                }
            }
        }
    }
    flat_groups_to_zero(&stats, l, &mut scale, &mut min);
    let mut neg_min = [0f32; QKX_LANES];
    for j in 0..QKX_LANES {
        neg_min[j] = -min[j];
    }
    (scale, neg_min)
}

/// Per group of `make_qkx2_quants`: the min (clamped to ≤ 0), the max, Σw and Σw·x.
struct GroupStats {
    min: [f32; QKX_LANES],
    max: [f32; QKX_LANES],
    sum_w: [f32; QKX_LANES],
    sum_x: [f32; QKX_LANES],
}

#[inline(always)]
fn group_stats(x: &[[f32; QKX_LANES]; 32], w: &[[f32; QKX_LANES]; 32]) -> GroupStats {
    const N: usize = QKX_LANES;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = [0f32; N];
    for j in 0..N {
        sum_x[j] = sum_w[j] * x[0][j];
    }
    for i in 1..32 {
        for j in 0..N {
            let v = x[i][j];
            if v < min[j] {
                min[j] = v;
            }
            if v > max[j] {
                max[j] = v;
            }
            sum_w[j] += w[i][j];
            sum_x[j] += w[i][j] * v;
        }
    }
    for m in min.iter_mut() {
        if *m > 0.0 {
            *m = 0.0;
        }
    }
    GroupStats { min, max, sum_w, sum_x }
}

/// The starting point of the search: levels over the whole [min, max] range in `l`; returns
/// per group (scale, weighted squared error).
#[inline(always)]
fn first_levels(
    nmax: i32,
    x: &[[f32; QKX_LANES]; 32],
    w: &[[f32; QKX_LANES]; 32],
    stats: &GroupStats,
    l: &mut [[u8; QKX_LANES]; 32],
) -> ([f32; QKX_LANES], [f32; QKX_LANES]) {
    const N: usize = QKX_LANES;
    let nmaxf = nmax as f32;
    let (min, max) = (&stats.min, &stats.max);
    let mut iscale = [0f32; N];
    let mut scale = [0f32; N];
    let mut best_error = [0f32; N];
    for j in 0..N {
        iscale[j] = nmaxf / (max[j] - min[j]);
        scale[j] = 1.0 / iscale[j];
    }
    for i in 0..32 {
        for j in 0..N {
            let li = nearest_int(iscale[j] * (x[i][j] - min[j])).clamp(0, nmax);
            l[i][j] = li as u8;
            let diff = scale[j] * li as f32 + min[j] - x[i][j];
            let diff = diff * diff;
            best_error[j] += w[i][j] * diff;
        }
    }
    (scale, best_error)
}

/// One step's candidate per group: the least-squares scale and min for its levels, their
/// weighted squared error, and whether the fit was solvable.
struct StepFit {
    scale: [f32; QKX_LANES],
    min: [f32; QKX_LANES],
    ok: [bool; QKX_LANES],
    error: [f32; QKX_LANES],
}

/// Levels for the range divided into `step` parts (into `laux`), and the fit they give.
#[inline(always)]
fn fit_step(
    nmax: i32,
    step: f32,
    x: &[[f32; QKX_LANES]; 32],
    w: &[[f32; QKX_LANES]; 32],
    stats: &GroupStats,
    min: &[f32; QKX_LANES],
    laux: &mut [[u8; QKX_LANES]; 32],
) -> StepFit {
    const N: usize = QKX_LANES;
    let (max, sum_w, sum_x) = (&stats.max, &stats.sum_w, &stats.sum_x);
    let mut iscale = [0f32; N];
    let (mut sum_l, mut sum_l2, mut sum_xl) = ([0f32; N], [0f32; N], [0f32; N]);
    // `min` moves when a step wins: the reference divides by the current range.
    for j in 0..N {
        iscale[j] = step / (max[j] - min[j]);
    }
    for i in 0..32 {
        for j in 0..N {
            let li = nearest_int(iscale[j] * (x[i][j] - min[j])).clamp(0, nmax);
            laux[i][j] = li as u8;
            let (wi, lf) = (w[i][j], li as f32);
            sum_l[j] += wi * lf;
            sum_l2[j] += wi * lf * lf;
            sum_xl[j] += wi * lf * x[i][j];
        }
    }
    let mut this_scale = [0f32; N];
    let mut this_min = [0f32; N];
    let mut ok = [false; N];
    for j in 0..N {
        let d = sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j];
        ok[j] = d > 0.0;
        this_scale[j] = (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / d;
        this_min[j] = (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / d;
        if this_min[j] > 0.0 {
            this_min[j] = 0.0;
            this_scale[j] = sum_xl[j] / sum_l2[j];
        }
    }
    let mut cur_error = [0f32; N];
    for i in 0..32 {
        for j in 0..N {
            let diff = this_scale[j] * laux[i][j] as f32 + this_min[j] - x[i][j];
            let diff = diff * diff;
            cur_error[j] += w[i][j] * diff;
        }
    }
    StepFit { scale: this_scale, min: this_min, ok, error: cur_error }
}

/// Groups whose max equals the clamped min (all equal, or all ≤ 0 … = 0): levels 0, scale 0.
#[inline(always)]
fn flat_groups_to_zero(
    stats: &GroupStats,
    l: &mut [[u8; QKX_LANES]; 32],
    scale: &mut [f32; QKX_LANES],
    min: &mut [f32; QKX_LANES],
) {
    for j in 0..QKX_LANES {
        if stats.max[j] == stats.min[j] {
            for row in l.iter_mut() {
                row[j] = 0;
            }
            scale[j] = 0.0;
            min[j] = stats.min[j];
        }
    }
}

/// `make_qx_quants(16, 32, x, L, rmse_type = 1, NULL)` for 16 groups: `x[i][j]` is value i of
/// group j. Returns each group's scale and fills `l[i][j]` (levels 0..63).
#[inline(always)]
pub fn make_qx_quants(x: &[[f32; QX_LANES]; 16], l: &mut [[i8; QX_LANES]; 16]) -> [f32; QX_LANES] {
    const N: usize = QX_LANES;
    const NMAX: i32 = 32;
    let nmaxf = NMAX as f32;
    let (mut max, mut amax) = ([0f32; N], [0f32; N]);
    for row in x.iter() {
        for j in 0..N {
            let ax = row[j].abs();
            if ax > amax[j] {
                amax[j] = ax;
                max[j] = row[j];
            }
        }
    }
    let mut iscale = [0f32; N];
    let (mut sumlx, mut suml2) = ([0f32; N], [0f32; N]);
    for j in 0..N {
        iscale[j] = -nmaxf / max[j];
    }
    for i in 0..16 {
        for j in 0..N {
            let li = nearest_int(iscale[j] * x[i][j]).clamp(-NMAX, NMAX - 1);
            l[i][j] = (li + NMAX) as i8;
            let (xi, lf) = (x[i][j], li as f32);
            let w = xi * xi;
            sumlx[j] += w * xi * lf;
            suml2[j] += w * lf * lf;
        }
    }
    let mut scale = [0f32; N];
    let mut best = [0f32; N];
    for j in 0..N {
        scale[j] = if suml2[j] != 0.0 { sumlx[j] / suml2[j] } else { 0.0 };
        best[j] = scale[j] * sumlx[j];
    }
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        let (mut sx, mut s2) = ([0f32; N], [0f32; N]);
        let step = nmaxf + 0.1 * is as f32;
        for j in 0..N {
            iscale[j] = -step / max[j];
        }
        for row in x.iter() {
            for j in 0..N {
                let xi = row[j];
                let lf = nearest_int(iscale[j] * xi).clamp(-NMAX, NMAX - 1) as f32;
                let w = xi * xi;
                sx[j] += w * xi * lf;
                s2[j] += w * lf * lf;
            }
        }
        let mut better = [false; N];
        for j in 0..N {
            better[j] = s2[j] > 0.0 && sx[j] * sx[j] > best[j] * s2[j];
            if better[j] {
                scale[j] = sx[j] / s2[j];
                best[j] = scale[j] * sx[j];
            }
        }
        for i in 0..16 {
            for j in 0..N {
                if better[j] {
                    let li = nearest_int(iscale[j] * x[i][j]).clamp(-NMAX, NMAX - 1);
                    l[i][j] = (NMAX + li) as i8;
                }
            }
        }
    }
    // All-zero groups: levels 0, scale 0.
    for j in 0..N {
        if amax[j] < 1e-15 {
            for row in l.iter_mut() {
                row[j] = 0;
            }
            scale[j] = 0.0;
        }
    }
    scale
}
