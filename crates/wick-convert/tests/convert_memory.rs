//! Memory stays near one tensor: converting a 0.3 GB checkpoint (LFM2 layout at d=1024 with
//! GPT-2's 50k vocabulary, bf16, 4 shards) with the wick-convert binary, its peak resident set
//! (VmHWM, which counts the mapped checkpoint pages it touched) stays under twice the largest
//! tensor plus 200 MiB. The numbers go to the test log.

use std::process::Command;

mod common;

#[test]
fn peak_rss_stays_under_twice_the_largest_tensor_plus_200_mib() {
    let test = "peak_rss_stays_under_twice_the_largest_tensor_plus_200_mib";
    let Some(src) = common::llama_src(test) else { return };
    let mut spec = wick_fixtures::hf_bench_spec();
    spec.dir_name = "hf-memory".into();
    spec.n_kv.truncate(4);
    let out = common::scratch("memory");
    let dir = wick_fixtures::write_hf_checkpoint(&spec, &out, &src).expect("write checkpoint");
    for outtype in ["f16", "q8_0"] {
        let file = out.join(format!("memory-{outtype}.gguf"));
        let o = Command::new(env!("CARGO_BIN_EXE_wick-convert"))
            .arg(&dir)
            .args([
                "--outfile".as_ref(),
                file.as_os_str(),
                "--outtype".as_ref(),
                outtype.as_ref(),
                "--json".as_ref(),
            ])
            .output()
            .expect("run wick-convert");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r: serde_json::Value = serde_json::from_slice(o.stdout.trim_ascii()).expect("summary JSON");
        let (rss, largest) =
            (r["peak_rss"].as_u64().expect("peak_rss"), r["largest_tensor_bytes"].as_u64().expect("largest"));
        let bound = 2 * largest + (200 << 20);
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        eprintln!(
            "{outtype}: read {:.0} MiB, peak RSS {:.1} MiB, largest tensor {:.1} MiB, bound {:.1} MiB, {:.0} MB/s",
            mib(r["bytes_read"].as_u64().unwrap_or(0)),
            mib(rss),
            mib(largest),
            mib(bound),
            r["mb_per_s"].as_f64().unwrap_or(0.0)
        );
        assert!(rss < bound, "{outtype}: peak RSS {rss} ≥ 2 × {largest} + 200 MiB");
        let _ = std::fs::remove_file(&file);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
