//! LFM2-VL: the projector loads, a prompt's image layout is llama.cpp's (token for token),
//! and the embeddings agree with llama.cpp's `mtmd_encode_chunk` on the same pixels.
//! The reference comes from `scripts/mtmd-embd.cpp` (built against the llama-server build,
//! `WICK_MTMD_EMBD` names the binary); without it that comparison is skipped.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use wick_core::gguf::GgufFile;
use wick_core::models::vision::{layout, LayoutPart, Rgb8, VisionModel, VisionOptions};
use wick_core::tokenizer::Tokenizer;

/// The LFM2-VL fixtures, written once per test binary into a temporary directory.
fn fixtures() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = common::llama_src("vision fixtures")?;
        let dir = std::env::temp_dir().join(format!("wick-vision-{}", std::process::id()));
        wick_fixtures::write_vision_fixtures(&dir, &src).expect("write vision fixtures");
        Some(dir)
    })
    .as_deref()
}

/// The test images: a deterministic colour pattern.
pub fn pattern(w: usize, h: usize, seed: usize) -> Rgb8 {
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            data.extend([
                ((x * 7 + y * 3 + seed * 40) % 256) as u8,
                ((x * y / 7 + seed) % 256) as u8,
                (255 + y as i64 - 2 * x as i64).rem_euclid(256) as u8,
            ]);
        }
    }
    Rgb8 { width: w, height: h, data }
}

enum Chunk {
    Text(Vec<u32>),
    Embeds(Vec<f32>),
}

/// llama.cpp's chunks for `<|im_start|>user\n<image>Hi` (see scripts/mtmd-embd.cpp).
fn reference(bin: &str, dir: &Path, proj: &str, img: &Rgb8, max_tokens: Option<usize>) -> Vec<Chunk> {
    let raw = dir.join(format!("img-{}x{}.rgb", img.width, img.height));
    std::fs::write(&raw, &img.data).unwrap();
    let out = dir.join("ref.txt");
    let mut cmd = Command::new(bin);
    cmd.arg(dir.join("tiny-lfm2-vl-q8_0.gguf")).arg(dir.join(proj)).arg(&raw);
    cmd.arg(img.width.to_string()).arg(img.height.to_string()).arg(&out);
    if let Some(n) = max_tokens {
        cmd.arg(n.to_string());
    }
    let st = cmd.output().expect("run the mtmd reference");
    assert!(st.status.success(), "mtmd reference failed: {}", String::from_utf8_lossy(&st.stderr));
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            match f.next() {
                Some("T") => Chunk::Text(f.skip(1).map(|v| v.parse().unwrap()).collect()),
                _ => Chunk::Embeds(f.skip(2).map(|v| v.parse().unwrap()).collect()),
            }
        })
        .collect()
}

#[test]
fn projector_loads_and_rejects_text_models() {
    let Some(dir) = fixtures() else { return };
    let v = VisionModel::load(&dir.join("mmproj-tiny-lfm2-vl-q8_0.gguf"), VisionOptions::default()).unwrap();
    assert_eq!(v.n_embd(), 64);
    let err = VisionModel::load(&dir.join("tiny-lfm2-vl-q8_0.gguf"), VisionOptions::default()).err().unwrap();
    assert!(err.to_string().contains("clip"), "{err}");
}

#[test]
fn embeddings_and_layout_match_llama_cpp() {
    let Some(dir) = fixtures() else { return };
    let Some(bin) = std::env::var("WICK_MTMD_EMBD").ok().filter(|b| Path::new(b).exists()) else {
        common::skip(
            "embeddings_and_layout_match_llama_cpp",
            "WICK_MTMD_EMBD (scripts/mtmd-embd.cpp) is not built",
        );
        return;
    };
    let text = GgufFile::open(dir.join("tiny-lfm2-vl-q8_0.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&text.metadata).unwrap();
    let cases = [
        ("mmproj-tiny-lfm2-vl-q8_0.gguf", pattern(200, 150, 1), None),
        ("mmproj-tiny-lfm2-vl-f16.gguf", pattern(333, 97, 5), None),
        ("mmproj-tiny-lfm2-vl-nonorm-q8_0.gguf", pattern(1200, 900, 2), None),
        ("mmproj-tiny-lfm2-vl-q8_0.gguf", pattern(2400, 400, 3), Some(64)),
        ("mmproj-tiny-lfm2-vl-f32.gguf", pattern(200, 150, 1), None),
    ];
    for (proj, img, max_tokens) in cases {
        let opts = VisionOptions { image_max_tokens: max_tokens, ..Default::default() };
        let v = VisionModel::load(&dir.join(proj), opts).unwrap();
        let plan = v.plan(img.width, img.height).unwrap();
        let embeds = v.encode_image(&plan, &img).unwrap();
        let want = reference(&bin, dir, proj, &img, max_tokens);
        let mut got = vec![Chunk::Text(tok.encode("<|im_start|>user\n", true, true).unwrap())];
        for part in layout(&plan, &v.cfg, &tok).unwrap() {
            match part {
                LayoutPart::Tokens(t) => got.push(Chunk::Text(t)),
                LayoutPart::Embeds { input, n } => {
                    assert_eq!(embeds[input].len(), n * v.n_embd());
                    got.push(Chunk::Embeds(embeds[input].clone()));
                }
            }
        }
        got.push(Chunk::Text(tok.encode("Hi", false, true).unwrap()));
        // llama.cpp merges adjacent text chunks; so do we, to compare.
        let merge = |v: Vec<Chunk>| {
            let mut out: Vec<Chunk> = vec![];
            for c in v {
                match (out.last_mut(), c) {
                    (Some(Chunk::Text(a)), Chunk::Text(b)) => a.extend(b),
                    (_, c) => out.push(c),
                }
            }
            out
        };
        let (got, want) = (merge(got), merge(want));
        assert_eq!(got.len(), want.len(), "{proj} {}×{}: chunk count", img.width, img.height);
        let mut worst = 0f32;
        for (g, w) in got.iter().zip(&want) {
            match (g, w) {
                (Chunk::Text(a), Chunk::Text(b)) => assert_eq!(a, b, "{proj}: text chunk"),
                (Chunk::Embeds(a), Chunk::Embeds(b)) => {
                    assert_eq!(a.len(), b.len(), "{proj}: embedding count");
                    for (x, y) in a.iter().zip(b) {
                        worst = worst.max((x - y).abs() / (1.0 + y.abs()));
                    }
                }
                _ => panic!("{proj}: chunk kinds differ"),
            }
        }
        eprintln!("{proj} {}×{}: largest relative difference {worst:e}", img.width, img.height);
        assert!(worst < 1e-6, "{proj} {}×{}: embeddings differ by {worst:e}", img.width, img.height);
    }
}

#[test]
fn scratch_variants() {
    use candle_core::quantized::{GgmlDType, QTensor};
    let Some(dir) = fixtures() else { return };
    let Ok(bin) = std::env::var("WICK_MTMD_EMBD") else { return };
    let spec = wick_fixtures::vision_specs().into_iter().find(|s| s.file_name.contains("-f32")).unwrap();
    let (meta, tensors) = wick_fixtures::build_vision(&spec).unwrap();
    for keep in
        ["attn_|ffn_", "attn_|mm.", "ffn_|mm.", "attn_q|attn_k", "attn_v|attn_out", "blk.0.attn_out|blk.1"]
    {
        let t: Vec<(String, QTensor)> = tensors
            .iter()
            .map(|(n, t)| {
                let deq = t.dequantize(&candle_core::Device::Cpu).unwrap();
                let hit = keep.split('|').any(|k| n.contains(k));
                let q = if hit || t.shape().dims().len() != 2 || n.contains("norm") || n.contains("position")
                {
                    QTensor::quantize(&deq, t.dtype()).unwrap()
                } else {
                    QTensor::quantize(&deq, GgmlDType::Q8_0).unwrap()
                };
                (n.clone(), q)
            })
            .collect();
        let name = "mmproj-scratch.gguf".to_string();
        let refs: Vec<(&str, &QTensor)> = t.iter().map(|(n, t)| (n.as_str(), t)).collect();
        wick_fixtures::write_gguf(&dir.join(&name), &meta, &refs).unwrap();
        let img = pattern(200, 150, 1);
        let v = VisionModel::load(&dir.join(&name), VisionOptions::default()).unwrap();
        let plan = v.plan(img.width, img.height).unwrap();
        let e = v.encode_image(&plan, &img).unwrap();
        let want = reference(&bin, dir, &name, &img, None);
        let w =
            want.iter().find_map(|c| if let Chunk::Embeds(e) = c { Some(e.clone()) } else { None }).unwrap();
        let worst = e[0].iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!("F32 {keep}: {worst:e}");
    }
}
