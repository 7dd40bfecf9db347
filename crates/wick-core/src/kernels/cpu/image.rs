//! Image resampling and normalisation as llama.cpp's mtmd does them (`img_tool` in
//! `tools/mtmd/mtmd-image.cpp`): Pillow's separable bilinear filter in 22-bit fixed point
//! (horizontal pass, then vertical), the optional letterbox (`PAD_CEIL`: keep the aspect,
//! centre on black) and `clip_image_f32::from_u8` + `normalize`. Integer arithmetic end to
//! end, so the bytes equal llama.cpp's; the filter weights are computed in f64 as there.

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

#[cfg(test)]
mod tests {
    use super::*;

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
