//! The host twin of the row ops through its C entry points (`cuda/row_ops_twin.c`): sizes are
//! checked here, where the C trusts them.

#[cfg(wick_qmv_twin)]
extern "C" {
    fn wick_rms_norm_twin(
        x: *const f32,
        add: *const f32,
        w: *const f32,
        sum_out: *mut f32,
        y: *mut f32,
        rows: usize,
        n: i32,
        eps: f32,
    );
    fn wick_norm_rope_twin(
        x: *const f32,
        w: *const f32,
        cos: *const f32,
        sin: *const f32,
        y: *mut f32,
        rows: usize,
        heads: i32,
        hd: i32,
        eps: f32,
        interleaved: i32,
    );
    fn wick_geglu_twin(
        g: *const f32,
        u: *const f32,
        table: *const u16,
        y: *mut f32,
        rows: usize,
        n: i32,
        gs: usize,
        us: usize,
    );
    fn wick_swiglu_twin(g: *const f32, u: *const f32, y: *mut f32, rows: usize, n: i32, gs: usize, us: usize);
}

/// Rows of `w.len()`: `y = norm(x (+ add))·w`, the sum into `sum` when there is an add.
pub fn rms_norm(
    x: &[f32],
    add: Option<&[f32]>,
    w: &[f32],
    sum: Option<&mut [f32]>,
    y: &mut [f32],
    eps: f32,
) -> Result<(), String> {
    let n = w.len();
    let sizes_ok = n > 0
        && x.len().is_multiple_of(n)
        && y.len() == x.len()
        && add.is_some() == sum.is_some()
        && add.is_none_or(|a| a.len() == x.len())
        && sum.as_ref().is_none_or(|s| s.len() == x.len())
        && i32::try_from(n).is_ok();
    if !sizes_ok {
        return Err(format!("rms_norm: {} values in rows of {n}", x.len()));
    }
    #[cfg(wick_qmv_twin)]
    {
        let null = std::ptr::null::<f32>();
        let (add, sum) = (add.map_or(null, |a| a.as_ptr()), sum.map_or(null as *mut f32, |s| s.as_mut_ptr()));
        let rows = x.len() / n;
        // SAFETY: x, y (and add, sum when given) hold `rows` rows of n; w holds n.
        unsafe { wick_rms_norm_twin(x.as_ptr(), add, w.as_ptr(), sum, y.as_mut_ptr(), rows, n as i32, eps) };
        Ok(())
    }
    #[cfg(not(wick_qmv_twin))]
    {
        let _ = (sum, eps);
        Err("this build has no row-op host twin (Linux builds only)".into())
    }
}

/// RoPE tables and the heads' shape for `norm_rope`.
pub struct Rope<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    pub heads: usize,
    pub hd: usize,
    pub interleaved: bool,
}

/// Rows of `r.hd` (`r.heads` a token): each row's norm by `(w, ε)` when given, then RoPE.
pub fn norm_rope(x: &[f32], norm: Option<(&[f32], f32)>, r: &Rope<'_>, y: &mut [f32]) -> Result<(), String> {
    let (hd, heads) = (r.hd, r.heads);
    let rows = x.len() / hd.max(1);
    let tokens = rows / heads.max(1);
    let sizes_ok = hd > 0
        && hd.is_multiple_of(2)
        && heads > 0
        && x.len() == tokens * heads * hd
        && y.len() == x.len()
        && r.cos.len() == tokens * hd / 2
        && r.sin.len() == r.cos.len()
        && norm.is_none_or(|(w, _)| w.len() == hd)
        && i32::try_from(x.len()).is_ok();
    if !sizes_ok {
        return Err(format!("norm_rope: {} values in rows of {hd}, {heads} heads a token", x.len()));
    }
    #[cfg(wick_qmv_twin)]
    {
        let (w, eps) = norm.map_or((std::ptr::null(), 0.0), |(w, e)| (w.as_ptr(), e));
        // SAFETY: x and y hold `rows` rows of hd, cos and sin hd/2 values per token
        // (rows / heads tokens), w hd values when given (checked above).
        unsafe {
            wick_norm_rope_twin(
                x.as_ptr(),
                w,
                r.cos.as_ptr(),
                r.sin.as_ptr(),
                y.as_mut_ptr(),
                rows,
                heads as i32,
                hd as i32,
                eps,
                r.interleaved as i32,
            )
        };
        Ok(())
    }
    #[cfg(not(wick_qmv_twin))]
    {
        let _ = norm;
        Err("this build has no row-op host twin (Linux builds only)".into())
    }
}

/// `m` rows of `n`: `y = gelu(g)·u` by `table` (65536 f16 values), rows as `swiglu`'s.
#[allow(clippy::too_many_arguments)]
pub fn geglu(
    g: &[f32],
    gs: usize,
    u: &[f32],
    us: usize,
    table: &[half::f16],
    y: &mut [f32],
    m: usize,
    n: usize,
) -> Result<(), String> {
    if table.len() != 1 << 16 {
        return Err(format!("geglu: a table of {} values", table.len()));
    }
    glu_sizes(g, gs, u, us, y, m, n)?;
    #[cfg(wick_qmv_twin)]
    {
        // SAFETY: g and u hold m rows of n, gs and us apart, y holds m·n (`glu_sizes`);
        // the table every f16 bit pattern's value (f16 is a u16 in memory).
        unsafe {
            wick_geglu_twin(
                g.as_ptr(),
                u.as_ptr(),
                table.as_ptr().cast(),
                y.as_mut_ptr(),
                m,
                n as i32,
                gs,
                us,
            )
        };
        Ok(())
    }
    #[cfg(not(wick_qmv_twin))]
    Err("this build has no row-op host twin (Linux builds only)".into())
}

/// Whether `m` rows of `n`, `gs` and `us` apart, lie in `g` and `u`, and `y` holds them.
fn glu_sizes(
    g: &[f32],
    gs: usize,
    u: &[f32],
    us: usize,
    y: &[f32],
    m: usize,
    n: usize,
) -> Result<(), String> {
    let spans = |len: usize, stride: usize| m == 0 || (m - 1) * stride + n <= len;
    if y.len() != m * n || !spans(g.len(), gs) || !spans(u.len(), us) || i32::try_from(n).is_err() {
        return Err(format!("glu: {m} rows of {n} from {} and {} values", g.len(), u.len()));
    }
    Ok(())
}

/// `m` rows of `n`: `y = silu(g)·u`, the operands' rows `gs` and `us` apart.
pub fn swiglu(
    g: &[f32],
    gs: usize,
    u: &[f32],
    us: usize,
    y: &mut [f32],
    m: usize,
    n: usize,
) -> Result<(), String> {
    glu_sizes(g, gs, u, us, y, m, n)?;
    #[cfg(wick_qmv_twin)]
    {
        // SAFETY: g and u hold m rows of n, gs and us apart, y holds m·n (`glu_sizes`).
        unsafe { wick_swiglu_twin(g.as_ptr(), u.as_ptr(), y.as_mut_ptr(), m, n as i32, gs, us) };
        Ok(())
    }
    #[cfg(not(wick_qmv_twin))]
    Err("this build has no row-op host twin (Linux builds only)".into())
}
