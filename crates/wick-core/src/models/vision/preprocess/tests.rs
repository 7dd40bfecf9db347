//! The plan against llama.cpp's: rows printed by `scripts/vision-plan-ref.cpp` (llama.cpp's
//! own functions, compiled with g++ -O2 -march=native) as
//! (width, height, overview width, overview height, grid cols, grid rows; 0 = not tiled).

use super::*;
use crate::kernels::cpu::image::Rgb8;

/// (width, height, overview width, overview height, grid cols, grid rows).
type Row = (usize, usize, usize, usize, usize, usize);

/// `--image-max-tokens` 256 (llama.cpp's default for LFM2), 64 and 1024.
const TABLES: [(usize, &[Row]); 3] = [
    (
        256,
        &[
            (200, 150, 320, 224, 0, 0),
            (1200, 900, 576, 416, 3, 2),
            (2000, 200, 1600, 160, 0, 0),
            (180, 1700, 160, 1568, 0, 0),
            (1250, 1000, 544, 448, 3, 3),
            (1, 1, 256, 256, 0, 0),
            (10, 10, 256, 256, 0, 0),
            (512, 512, 512, 512, 0, 0),
            (724, 724, 512, 512, 2, 2),
            (1024, 1024, 512, 512, 2, 2),
            (4000, 3000, 576, 416, 3, 2),
            (3000, 4000, 416, 576, 2, 3),
            (100, 2000, 96, 2016, 0, 0),
            (33, 17, 384, 192, 0, 0),
            (7000, 100, 4256, 32, 10, 1),
            (100, 7000, 32, 4256, 1, 10),
            (640, 480, 576, 416, 0, 0),
            (1920, 1080, 672, 384, 4, 2),
            (1080, 1920, 384, 672, 2, 4),
            (800, 600, 576, 416, 0, 0),
            (300, 300, 288, 288, 0, 0),
            (1000, 500, 704, 352, 0, 0),
            (999, 333, 864, 288, 0, 0),
            (5000, 5000, 512, 512, 3, 3),
            (64, 64, 256, 256, 0, 0),
            (1536, 512, 864, 288, 3, 1),
            (2400, 400, 1248, 192, 6, 1),
            (400, 2400, 192, 1248, 1, 6),
            (1023, 767, 576, 416, 3, 2),
            (2047, 1, 2048, 32, 0, 0),
        ],
    ),
    (
        64,
        &[
            (200, 150, 320, 224, 0, 0),
            (1200, 900, 288, 192, 3, 2),
            (2000, 200, 800, 64, 10, 1),
            (180, 1700, 64, 768, 1, 9),
            (1250, 1000, 256, 224, 3, 3),
            (1, 1, 256, 256, 0, 0),
            (10, 10, 256, 256, 0, 0),
            (512, 512, 256, 256, 2, 2),
            (724, 724, 256, 256, 2, 2),
            (1024, 1024, 256, 256, 2, 2),
            (4000, 3000, 288, 192, 3, 2),
            (3000, 4000, 192, 288, 2, 3),
            (100, 2000, 32, 1120, 1, 10),
            (33, 17, 384, 192, 0, 0),
            (7000, 100, 2112, 32, 10, 1),
            (100, 7000, 32, 2112, 1, 10),
            (640, 480, 288, 192, 3, 2),
            (1920, 1080, 320, 192, 4, 2),
            (1080, 1920, 192, 320, 2, 4),
            (800, 600, 288, 192, 3, 2),
            (300, 300, 256, 256, 0, 0),
            (1000, 500, 352, 160, 2, 1),
            (999, 333, 416, 128, 3, 1),
            (5000, 5000, 256, 256, 3, 3),
            (64, 64, 256, 256, 0, 0),
            (1536, 512, 416, 128, 3, 1),
            (2400, 400, 608, 96, 6, 1),
            (400, 2400, 96, 608, 1, 6),
            (1023, 767, 288, 192, 3, 2),
            (2047, 1, 2048, 32, 0, 0),
        ],
    ),
    (
        1024,
        &[
            (200, 150, 320, 224, 0, 0),
            (1200, 900, 1152, 864, 0, 0),
            (2000, 200, 2016, 192, 0, 0),
            (180, 1700, 192, 1696, 0, 0),
            (1250, 1000, 1120, 896, 0, 0),
            (1, 1, 256, 256, 0, 0),
            (10, 10, 256, 256, 0, 0),
            (512, 512, 512, 512, 0, 0),
            (724, 724, 736, 736, 0, 0),
            (1024, 1024, 1024, 1024, 0, 0),
            (4000, 3000, 1152, 864, 3, 2),
            (3000, 4000, 864, 1152, 2, 3),
            (100, 2000, 96, 2016, 0, 0),
            (33, 17, 384, 192, 0, 0),
            (7000, 100, 7008, 96, 0, 0),
            (100, 7000, 96, 7008, 0, 0),
            (640, 480, 640, 480, 0, 0),
            (1920, 1080, 1344, 768, 0, 0),
            (1080, 1920, 768, 1344, 0, 0),
            (800, 600, 800, 608, 0, 0),
            (300, 300, 288, 288, 0, 0),
            (1000, 500, 992, 512, 0, 0),
            (999, 333, 992, 320, 0, 0),
            (5000, 5000, 1024, 1024, 3, 3),
            (64, 64, 256, 256, 0, 0),
            (1536, 512, 1536, 512, 0, 0),
            (2400, 400, 2400, 416, 0, 0),
            (400, 2400, 416, 2400, 0, 0),
            (1023, 767, 1024, 768, 0, 0),
            (2047, 1, 2048, 32, 0, 0),
        ],
    ),
];

#[test]
fn plans_equal_llama_cpps() {
    for (max_tokens, rows) in TABLES {
        let cfg = PreprocessConfig::lfm2(16, 2, None, Some(max_tokens));
        for &(w, h, ow, oh, gc, gr) in rows {
            let plan = ImagePlan::new(&cfg, w, h).unwrap();
            let grid = (gc > 0).then_some((gc, gr));
            assert_eq!((plan.overview, plan.grid), ((ow, oh), grid), "{w}×{h} at {max_tokens} tokens");
        }
    }
}

#[test]
fn inputs_and_token_counts() {
    let cfg = PreprocessConfig::lfm2(16, 2, None, None);
    let one = ImagePlan::new(&cfg, 200, 150).unwrap();
    assert_eq!(one.inputs(), vec![(320, 224)]);
    assert_eq!(one.n_tokens(&cfg), 10 * 7);
    let tiled = ImagePlan::new(&cfg, 1200, 900).unwrap();
    assert_eq!(tiled.inputs().len(), 7);
    assert_eq!(tiled.n_tokens(&cfg), 6 * 256 + 18 * 13);
    assert!(ImagePlan::new(&cfg, 0, 10).is_err());
    assert!(ImagePlan::new(&cfg, 70000, 10).is_err());
}

#[test]
fn pixels_come_out_normalised_in_prompt_order() {
    let cfg = PreprocessConfig::lfm2(16, 2, None, None);
    let img = Rgb8 { width: 1200, height: 900, data: vec![255; 1200 * 900 * 3] };
    let plan = ImagePlan::new(&cfg, 1200, 900).unwrap();
    let px = plan.pixels(&cfg, img.view());
    assert_eq!(px.len(), 7);
    assert_eq!(px[0].len(), 3 * TILE * TILE);
    // 1200×900 letterboxed into 1536×1024 (scale 1.1378 → 1366×1024): the first tile's left
    // columns are black padding (−1), the thumbnail is all white (1).
    assert_eq!(px[0][0], -1.0);
    assert!(px[6].iter().all(|&v| v == 1.0));
}

#[test]
fn grids_are_every_2_to_10_tile_grid_by_count() {
    let mut want: Vec<(usize, usize)> = (1..=10)
        .flat_map(|c| (1..=10).map(move |r| (c, r)))
        .filter(|&(c, r)| (2..=10).contains(&(c * r)))
        .collect();
    let mut got = GRIDS.to_vec();
    assert!(got.windows(2).all(|w| w[0].0 * w[0].1 <= w[1].0 * w[1].1));
    want.sort();
    got.sort();
    assert_eq!(got, want);
}
