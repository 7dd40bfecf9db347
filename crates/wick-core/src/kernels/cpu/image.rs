//! Image resampling and normalisation as llama.cpp's mtmd does them (`img_tool` in
//! `tools/mtmd/mtmd-image.cpp`): Pillow's separable bilinear filter in 22-bit fixed point
//! (horizontal pass, then vertical), the optional letterbox (`PAD_CEIL`: keep the aspect,
//! centre on black) and `clip_image_f32::from_u8` + `normalize`. Integer arithmetic end to
//! end, so the bytes equal llama.cpp's; the filter weights are computed in f64 as there.
//!
//! And two ops of the vision tower's graph: `resize_antialias` (`ggml_interpolate(BILINEAR |
//! ANTIALIAS)`, the position embedding; its `val += pixel * weight` is an FMA, as GCC
//! contracts it in llama.cpp's build) and `patch_embed` (`ggml_conv_2d` as an F16 im2col and a
//! tinyBLAS f16 matmul: an F32 kernel is converted to f16, ggml's dot type for the F16 im2col).

use half::f16;

use super::float_dots::dot_single;
use super::float_matmul::tiled_matmul;

/// An interleaved RGB8 image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

/// A borrowed interleaved RGB8 image (`data.len() == width·height·3`).
#[derive(Clone, Copy, Debug)]
pub struct RgbView<'a> {
    pub width: usize,
    pub height: usize,
    pub data: &'a [u8],
}

impl Rgb8 {
    pub fn view(&self) -> RgbView<'_> {
        RgbView { width: self.width, height: self.height, data: &self.data }
    }
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Per output pixel: first input index, input count, and `ksize` fixed-point weights.
fn precompute_weights(in_size: usize, out_size: usize) -> (usize, Vec<(usize, usize)>, Vec<i32>) {
    let support_radius = 1.0f64; // bilinear
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = support_radius * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut pre = vec![0f64; out_size * ksize];
    let mut bounds = Vec::with_capacity(out_size);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0f64;
        for x in 0..xmax {
            let d = ((x + xmin) as f64 - center + 0.5) * ss;
            let d = d.abs();
            let w = if d < 1.0 { 1.0 - d } else { 0.0 };
            pre[xx * ksize + x] = w;
            ww += w;
        }
        if ww != 0.0 {
            for w in &mut pre[xx * ksize..xx * ksize + xmax] {
                *w /= ww;
            }
        }
        bounds.push((xmin, xmax));
    }
    let fxp = (1u64 << PRECISION_BITS) as f64;
    // Pillow adds ±0.5 and truncates toward zero.
    let weights = pre.iter().map(|&w| (w * fxp + if w < 0.0 { -0.5 } else { 0.5 }) as i32).collect();
    (ksize, bounds, weights)
}

fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

fn resample_horizontal(src: &[u8], in_w: usize, in_h: usize, out_w: usize) -> Vec<u8> {
    let (ksize, bounds, k) = precompute_weights(in_w, out_w);
    let mut out = vec![0u8; out_w * in_h * 3];
    for y in 0..in_h {
        let row = &src[y * in_w * 3..(y + 1) * in_w * 3];
        let dst = &mut out[y * out_w * 3..(y + 1) * out_w * 3];
        for (xx, &(xmin, xcnt)) in bounds.iter().enumerate() {
            let kk = &k[xx * ksize..xx * ksize + xcnt];
            let mut ss = [1i32 << (PRECISION_BITS - 1); 3];
            for (x, &w) in kk.iter().enumerate() {
                let p = &row[(xmin + x) * 3..(xmin + x) * 3 + 3];
                for c in 0..3 {
                    ss[c] = ss[c].wrapping_add(p[c] as i32 * w);
                }
            }
            for c in 0..3 {
                dst[xx * 3 + c] = clip8(ss[c]);
            }
        }
    }
    out
}

fn resample_vertical(src: &[u8], w: usize, in_h: usize, out_h: usize) -> Vec<u8> {
    let (ksize, bounds, k) = precompute_weights(in_h, out_h);
    let row = w * 3;
    let mut out = vec![0u8; row * out_h];
    let mut acc = vec![0i32; row];
    for (yy, &(ymin, ycnt)) in bounds.iter().enumerate() {
        acc.fill(1 << (PRECISION_BITS - 1));
        for y in 0..ycnt {
            let wgt = k[yy * ksize + y];
            let s = &src[(ymin + y) * row..(ymin + y + 1) * row];
            for (a, &p) in acc.iter_mut().zip(s) {
                *a = a.wrapping_add(p as i32 * wgt);
            }
        }
        for (o, &a) in out[yy * row..(yy + 1) * row].iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    out
}

/// Pillow-compatible bilinear resize (`img_tool::resize_pillow`).
pub fn resize_bilinear(img: RgbView<'_>, width: usize, height: usize) -> Rgb8 {
    let (w0, h0) = (img.width, img.height);
    let data = match (width != w0, height != h0) {
        (true, true) => {
            let t = resample_horizontal(img.data, w0, h0, width);
            resample_vertical(&t, width, h0, height)
        }
        (true, false) => resample_horizontal(img.data, w0, h0, width),
        (false, true) => resample_vertical(img.data, w0, h0, height),
        (false, false) => img.data.to_vec(),
    };
    Rgb8 { width, height, data }
}

/// `img_tool::resize` with `PAD_NONE` (`pad = false`) or `PAD_CEIL` (`pad = true`: scale by
/// the smaller ratio, round the scaled sides up, centre on black).
pub fn resize(img: RgbView<'_>, width: usize, height: usize, pad: bool) -> Rgb8 {
    if (img.width, img.height) == (width, height) {
        return Rgb8 { width, height, data: img.data.to_vec() };
    }
    if !pad {
        return resize_bilinear(img, width, height);
    }
    let sw = width as f32 / img.width as f32;
    let sh = height as f32 / img.height as f32;
    let s = sw.min(sh);
    let nw = ((img.width as f32 * s).ceil() as usize).min(width);
    let nh = ((img.height as f32 * s).ceil() as usize).min(height);
    let inner = resize_bilinear(img, nw, nh);
    let mut out = Rgb8 { width, height, data: vec![0; width * height * 3] };
    let (ox, oy) = ((width - nw) / 2, (height - nh) / 2);
    for y in 0..nh {
        let src = &inner.data[y * nw * 3..(y + 1) * nw * 3];
        let at = ((y + oy) * width + ox) * 3;
        out.data[at..at + nw * 3].copy_from_slice(src);
    }
    out
}

/// The `w`×`h` rectangle at (`x`, `y`).
pub fn crop(img: RgbView<'_>, x: usize, y: usize, w: usize, h: usize) -> Rgb8 {
    let mut data = Vec::with_capacity(w * h * 3);
    for r in y..y + h {
        let at = (r * img.width + x) * 3;
        data.extend_from_slice(&img.data[at..at + w * 3]);
    }
    Rgb8 { width: w, height: h, data }
}

/// Planar (C, H, W) f32 pixels `(v/255 − mean)/std`, as `clip_image_f32::from_u8` and
/// `normalize` compute them and the encoder's input tensor lays them out.
pub fn normalize_planar(img: RgbView<'_>, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
    let n = img.width * img.height;
    let mut out = vec![0f32; 3 * n];
    for (i, px) in img.data.chunks_exact(3).enumerate() {
        for c in 0..3 {
            out[c * n + i] = (px[c] as f32 / 255.0 - mean[c]) / std[c];
        }
    }
    out
}

/// `ggml_interpolate(BILINEAR | ANTIALIAS)` of a `side`×`side` grid of `d`-wide rows (row
/// y·side + x) to `width`×`height` rows (row y·width + x).
pub fn resize_antialias(src: &[f32], side: usize, d: usize, width: usize, height: usize) -> Vec<f32> {
    let sf0 = width as f32 / side as f32;
    let sf1 = height as f32 / side as f32;
    let tri = |x: f32| (1.0 - x.abs()).max(0.0);
    let support0 = 1.0f32.max(1.0 / sf0);
    let support1 = 1.0f32.max(1.0 / sf1);
    let (inv0, inv1) = (1.0 / support0, 1.0 / support1);
    let mut out = vec![0f32; width * height * d];
    for i1 in 0..height {
        let y = (i1 as f32 + 0.5) / sf1;
        let y_min = ((y - support1 + 0.5) as i64).max(0) as usize;
        let y_max = ((y + support1 + 0.5) as i64).min(side as i64) as usize;
        for i0 in 0..width {
            let x = (i0 as f32 + 0.5) / sf0;
            let x_min = ((x - support0 + 0.5) as i64).max(0) as usize;
            let x_max = ((x + support0 + 0.5) as i64).min(side as i64) as usize;
            let row = &mut out[(i1 * width + i0) * d..(i1 * width + i0 + 1) * d];
            for (c, o) in row.iter_mut().enumerate() {
                let (mut val, mut total) = (0f32, 0f32);
                for sy in y_min..y_max {
                    let wy = tri((sy as f32 - y + 0.5) * inv1);
                    for sx in x_min..x_max {
                        let wx = tri((sx as f32 - x + 0.5) * inv0);
                        let wgt = wx * wy;
                        if wgt <= 0.0 {
                            continue;
                        }
                        val = src[(sy * side + sx) * d + c].mul_add(wgt, val);
                        total += wgt;
                    }
                }
                *o = if total > 0.0 { val / total } else { val };
            }
        }
    }
    out
}

/// `ggml_conv_2d(kernel, image, stride = p)`: `pixels` planar `[3, h, w]`, `kernel` rows of
/// `3·p·p` (channel, row, column) per output channel. Both sides are rounded to f16 (the
/// im2col is always F16, and f16 is its dot type). Returns `[(h/p)·(w/p), out]` in
/// row-major patch order.
pub fn patch_embed(pixels: &[f32], w: usize, h: usize, p: usize, kernel: &[f32]) -> Vec<f32> {
    let r16 = |v: f32| f16::from_f32(v).to_f32();
    let kernel: Vec<f32> = kernel.iter().map(|&v| r16(v)).collect();
    let (nx, ny) = (w / p, h / p);
    let kk = 3 * p * p;
    let n_out = kernel.len() / kk;
    let mut cols = vec![0f32; nx * ny * kk];
    for py in 0..ny {
        for px in 0..nx {
            let dst = &mut cols[(py * nx + px) * kk..(py * nx + px + 1) * kk];
            for c in 0..3 {
                for ky in 0..p {
                    for kx in 0..p {
                        let v = pixels[c * w * h + (py * p + ky) * w + px * p + kx];
                        dst[(c * p + ky) * p + kx] = r16(v);
                    }
                }
            }
        }
    }
    // mul_mat(im2col, kernel): tinyBLAS over the kk-long rows (3·p·p, 768 for p = 16).
    let n = nx * ny;
    if kk.is_multiple_of(16) && n_out >= 2 {
        return tiled_matmul(&cols, n, n_out, kk, &|j0, j1| {
            std::borrow::Cow::Borrowed(&kernel[j0 * kk..j1 * kk])
        });
    }
    let mut y = vec![0f32; n * n_out];
    for r in 0..n {
        for j in 0..n_out {
            // `ggml_vec_dot_f16`: the im2col is F16.
            y[r * n_out + j] = dot_single(kk, |i| cols[r * kk + i], |i| kernel[j * kk + i]);
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_resize() {
        let src: Vec<f32> = (0..16 * 16 * 3).map(|i| i as f32).collect();
        assert_eq!(resize_antialias(&src, 16, 3, 16, 16), src);
    }

    fn ramp(w: usize, h: usize) -> Rgb8 {
        let data = (0..w * h * 3).map(|i| ((i * 37) % 251) as u8).collect();
        Rgb8 { width: w, height: h, data }
    }

    #[test]
    fn same_size_is_a_copy_and_weights_sum_to_one() {
        let img = ramp(7, 5);
        assert_eq!(resize(img.view(), 7, 5, true), img);
        for (i, o) in [(10, 3), (3, 10), (512, 77), (77, 512)] {
            let (k, bounds, w) = precompute_weights(i, o);
            for (xx, &(_, n)) in bounds.iter().enumerate() {
                let s: i64 = w[xx * k..xx * k + n].iter().map(|&v| v as i64).sum();
                assert!((s - (1 << PRECISION_BITS)).abs() <= n as i64, "{i}->{o}: {s}");
            }
        }
    }

    #[test]
    fn constant_images_stay_constant_and_pad_is_black() {
        let img = Rgb8 { width: 9, height: 4, data: vec![200; 9 * 4 * 3] };
        let r = resize(img.view(), 20, 20, true);
        // Scaled by 20/9 to 20×9 (ceil of 8.9), centred: rows 5..14 are the image.
        assert_eq!(r.data[0], 0);
        assert_eq!(r.data[(10 * 20 + 3) * 3], 200);
        assert!(resize(img.view(), 4, 11, false).data.iter().all(|&v| v == 200));
    }
}
