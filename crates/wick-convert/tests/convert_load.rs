//! Every synthetic checkpoint converts to every output type, and Wick loads and runs each
//! file (greedy parity with llama.cpp on the same files is test/convert.test.ts).

use candle_core::Device;
use wick_convert::{GgmlType, OutType};
use wick_core::cache::KvPool;
use wick_core::gguf::GgufFile;
use wick_core::models::{self, StepSeq};

mod common;

fn logits(path: &std::path::Path, tokens: &[u32]) -> Vec<f32> {
    let g = GgufFile::open(path).expect("open");
    let model = models::load(&g, &Device::Cpu).expect("load");
    let mut kv = KvPool::with_capacity(&model.cache_layout(), 1 << 12, &Device::Cpu).expect("kv");
    let mut cache = kv.new_seq();
    let t = model.forward(&mut [StepSeq::tokens(tokens, &mut cache)], &mut kv).expect("forward");
    t.get(0).and_then(|r| r.to_vec1::<f32>()).expect("logits")
}

#[test]
fn every_checkpoint_converts_to_every_type_and_wick_runs_it() {
    let Some(cks) = common::checkpoints("every_checkpoint_converts_to_every_type_and_wick_runs_it") else {
        return;
    };
    let out = common::scratch("load");
    for (spec, dir) in cks.iter().filter(|(s, _)| s.d == 64) {
        for t in OutType::ALL {
            let file = out.join(format!("{}-{}.gguf", spec.dir_name, t.name()));
            let r = common::convert_to(dir, &file, t)
                .unwrap_or_else(|e| panic!("{} {}: {e}", spec.dir_name, t.name()));
            let mut mix: Vec<(GgmlType, usize)> = vec![];
            for (_, ty) in &r.types {
                match mix.iter_mut().find(|(t, _)| t == ty) {
                    Some(e) => e.1 += 1,
                    None => mix.push((*ty, 1)),
                }
            }
            eprintln!("{} {}: {} tensors {:?}", spec.dir_name, t.name(), r.tensors, mix);
            let l = logits(&file, &[1, 2, 3, 4]);
            assert!(l.iter().all(|x| x.is_finite()), "{} {}: non-finite logits", spec.dir_name, t.name());
            std::fs::remove_file(&file).expect("remove the checked file");
        }
    }
}
