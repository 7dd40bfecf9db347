//! LFM2-VL image preprocessing as llama.cpp's mtmd plans it (`mtmd_image_preprocessor_lfm2`
//! and `img_tool::calc_size_preserved_ratio` in `tools/mtmd/mtmd-image.cpp`, bundled
//! llama.cpp v0.5.0), which follows HF's `Lfm2VlImageProcessor` with LFM2.5-VL's constants:
//!
//! - **smart resize** (the single image, or the thumbnail of a tiled one): sides rounded to
//!   multiples of 32 (patch 16 × unshuffle 2), then scaled into [min, max] pixels, which are
//!   64 and 256 image tokens of 32×32 pixels unless `--image-max-tokens` says otherwise;
//! - **tiling** when the 32-rounded area exceeds twice the max pixels: the grid (cols, rows)
//!   with 2..=10 tiles whose aspect is closest to the image's, 512-px tiles cut from the image
//!   letterboxed into (512·cols)×(512·rows), row-major, then the thumbnail.
//!
//! The float rounding (f32 `round`/`floor`/`ceil`, an f64 round-half-even for the tile
//! decision) follows the C++ statement for statement; `scripts/vision-plan-ref.cpp` prints
//! llama.cpp's plan for a table of sizes, which the tests below hold Wick to.

use crate::error::{Result, WickError};
use crate::kernels::cpu::image::{crop, normalize_planar, resize, Rgb8, RgbView};

pub const TILE: usize = 512;
const TOLERANCE: f64 = 2.0;

/// The tile grids llama.cpp tries, in the order its `get_target_ratios` leaves them: every
/// (cols, rows) with 2 ≤ cols·rows ≤ 10, put through libstdc++'s (unstable) `std::sort` by
/// tile count. The order decides ties in `closest_grid`, so it is kept as llama.cpp has it.
const GRIDS: [(usize, usize); 26] = [
    (2, 1),
    (1, 2),
    (1, 3),
    (3, 1),
    (2, 2),
    (4, 1),
    (1, 4),
    (1, 5),
    (5, 1),
    (3, 2),
    (2, 3),
    (1, 6),
    (6, 1),
    (1, 7),
    (7, 1),
    (2, 4),
    (4, 2),
    (1, 8),
    (8, 1),
    (3, 3),
    (1, 9),
    (9, 1),
    (10, 1),
    (1, 10),
    (5, 2),
    (2, 5),
];

/// The projector's preprocessing constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreprocessConfig {
    /// Patch side × unshuffle factor: 32 px per image token side.
    pub align: usize,
    pub patch: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl PreprocessConfig {
    /// llama.cpp's `set_limit_image_tokens(64, 256)` for LFM2, with `--image-min-tokens` /
    /// `--image-max-tokens` overrides.
    pub fn lfm2(patch: usize, merge: usize, min_tokens: Option<usize>, max_tokens: Option<usize>) -> Self {
        let area = patch * patch * merge * merge;
        Self {
            align: patch * merge,
            patch,
            min_pixels: min_tokens.unwrap_or(64) * area,
            max_pixels: max_tokens.unwrap_or(256) * area,
            mean: [0.5; 3],
            std: [0.5; 3],
        }
    }

    /// Tokens of one image encoded at `w`×`h` (sides multiples of `align`).
    pub fn tokens(&self, w: usize, h: usize) -> usize {
        w.div_ceil(self.align) * h.div_ceil(self.align)
    }
}

/// What llama.cpp makes of one image: the smart-resized overview and, when tiled, the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImagePlan {
    pub width: usize,
    pub height: usize,
    /// The smart-resized image: the whole image when not tiled, else the thumbnail.
    pub overview: (usize, usize),
    /// (cols, rows) of 512-px tiles.
    pub grid: Option<(usize, usize)>,
}

impl ImagePlan {
    pub fn new(cfg: &PreprocessConfig, width: usize, height: usize) -> Result<Self> {
        if width == 0 || height == 0 {
            return Err(WickError::InvalidRequest(format!("an image of {width}×{height} pixels is empty")));
        }
        if width > 65536 || height > 65536 {
            return Err(WickError::InvalidRequest(format!(
                "an image of {width}×{height} pixels is too large (65536 pixels per side at most)"
            )));
        }
        let overview = smart_resize(cfg, width, height);
        let grid = should_tile(cfg, width, height).then(|| closest_grid(width, height));
        Ok(Self { width, height, overview, grid })
    }

    /// The encoder inputs in prompt order: each tile row-major, then the thumbnail (or the one
    /// image), as (width, height).
    pub fn inputs(&self) -> Vec<(usize, usize)> {
        let tiles = self.grid.map_or(0, |(c, r)| c * r);
        let mut v = vec![(TILE, TILE); tiles];
        v.push(self.overview);
        v
    }

    /// Image tokens (embedding positions) in all.
    pub fn n_tokens(&self, cfg: &PreprocessConfig) -> usize {
        self.inputs().iter().map(|&(w, h)| cfg.tokens(w, h)).sum()
    }

    /// The normalised planar pixels of every input of `inputs()`, from the RGB8 image.
    pub fn pixels(&self, cfg: &PreprocessConfig, img: RgbView<'_>) -> Vec<Vec<f32>> {
        let mut refined = None;
        (0..self.inputs().len()).map(|i| self.input_pixels(cfg, img, i, &mut refined)).collect()
    }

    /// The normalised planar pixels of input `i` of `inputs()`. Tiles are cut from the image
    /// letterboxed to the grid's size, which is made once and kept in `refined`.
    pub fn input_pixels(
        &self,
        cfg: &PreprocessConfig,
        img: RgbView<'_>,
        i: usize,
        refined: &mut Option<Rgb8>,
    ) -> Vec<f32> {
        match self.grid {
            Some((cols, rows)) if i < cols * rows => {
                let full = refined.get_or_insert_with(|| resize(img, TILE * cols, TILE * rows, true));
                let tile = crop(full.view(), (i % cols) * TILE, (i / cols) * TILE, TILE, TILE);
                normalize_planar(tile.view(), cfg.mean, cfg.std)
            }
            _ => {
                let (w, h) = self.overview;
                normalize_planar(resize(img, w, h, false).view(), cfg.mean, cfg.std)
            }
        }
    }
}

/// `img_tool::calc_size_preserved_ratio` with LFM2's alignment and pixel bounds.
fn smart_resize(cfg: &PreprocessConfig, width: usize, height: usize) -> (usize, usize) {
    let a = cfg.align as i64;
    let f = a as f32;
    let round = |x: f32| (x / f).round() as i64 * a;
    let ceil = |x: f32| (x / f).ceil() as i64 * a;
    let floor = |x: f32| (x / f).floor() as i64 * a;
    let (wf, hf) = (width as f32, height as f32);
    let mut w_bar = a.max(round(wf));
    let mut h_bar = a.max(round(hf));
    let (min_px, max_px) = (cfg.min_pixels as i64, cfg.max_pixels as i64);
    if max_px > 0 && h_bar * w_bar > max_px {
        let beta = (hf * wf / max_px as f32).sqrt();
        h_bar = a.max(floor(hf / beta));
        w_bar = a.max(floor(wf / beta));
    } else if min_px > 0 && h_bar * w_bar < min_px {
        let beta = (min_px as f32 / (hf * wf)).sqrt();
        h_bar = ceil(hf * beta);
        w_bar = ceil(wf * beta);
    }
    (w_bar as usize, h_bar as usize)
}

/// `mtmd_image_preprocessor_lfm2::should_tile`.
fn should_tile(cfg: &PreprocessConfig, width: usize, height: usize) -> bool {
    let a = cfg.align as f64;
    let round = |x: usize| ((x as f32 as f64) / a).round_ties_even() as i64 * cfg.align as i64;
    let p = cfg.patch as i64;
    let h_bar = p.max(round(height)) as f64;
    let w_bar = p.max(round(width)) as f64;
    h_bar * w_bar > cfg.max_pixels as f64 * TOLERANCE
}

/// `find_closest_aspect_ratio` over `GRIDS`, ties going to the later grid when the image is
/// larger than half of that grid's area.
fn closest_grid(width: usize, height: usize) -> (usize, usize) {
    let aspect = width as f32 / height as f32;
    let area = (width * height) as i32 as f32;
    let mut best_diff = f32::MAX;
    let mut best = (1, 1);
    for &(c, r) in &GRIDS {
        let diff = (aspect - c as f32 / r as f32).abs();
        if diff < best_diff {
            best_diff = diff;
            best = (c, r);
        } else if diff == best_diff && area > 0.5 * (TILE * TILE * c * r) as f32 {
            best = (c, r);
        }
    }
    best
}

#[cfg(test)]
mod tests;
