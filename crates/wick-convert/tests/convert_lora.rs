//! PEFT LoRA adapters (written by the fixture writer's HF side) → GGUF adapters: keys, dims
//! and values against the safetensors (llama's q rows permuted in B), against a GGUF base
//! and an HF-directory base; the errors; and llama-server loading the result beside the
//! converted base (skipped without the binary).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use candle_core::Device;
use wick_convert::{convert_lora, GgmlType, LoraOptions, OutType};
use wick_core::gguf::GgufFile;

mod common;

struct Fx {
    /// (adapter dir, base HF dir, converted base GGUF)
    llama: (PathBuf, PathBuf, PathBuf),
    lfm2: (PathBuf, PathBuf, PathBuf),
}

/// The adapters and bases, written once per test binary.
fn fixtures(test: &str) -> Option<&'static Fx> {
    static FX: std::sync::OnceLock<Fx> = std::sync::OnceLock::new();
    let cks = common::checkpoints(test)?;
    Some(FX.get_or_init(|| write_fixtures(cks)))
}

fn write_fixtures(cks: &[(wick_fixtures::HfSpec, PathBuf)]) -> Fx {
    let out = common::scratch("lora");
    let get = |dir_name: &str| {
        let (spec, dir) = cks.iter().find(|(s, _)| s.dir_name == dir_name).expect("checkpoint");
        let lora =
            wick_fixtures::hf_lora_specs().into_iter().find(|l| l.base.dir_name == spec.dir_name).unwrap();
        // Beside its base, as base_model_name_or_path (`../hf-<arch>`) expects.
        let adapter = wick_fixtures::write_hf_lora(&lora, dir.parent().unwrap()).expect("write adapter");
        let gguf = out.join(format!("{dir_name}-f16.gguf"));
        common::convert_to(dir, &gguf, OutType::F16).expect("convert base");
        (adapter, dir.clone(), gguf)
    };
    Fx { llama: get("hf-llama"), lfm2: get("hf-lfm2") }
}

fn lora(
    input: &Path,
    base: Option<&Path>,
    out: &Path,
    outtype: OutType,
) -> wick_convert::Result<wick_convert::Report> {
    let opts = LoraOptions {
        input: input.to_path_buf(),
        outfile: out.to_path_buf(),
        base: base.map(Path::to_path_buf),
        outtype,
        cancel: None,
    };
    convert_lora(&opts, |_| {})
}

/// A safetensors tensor's f32 values (the fixture writes F32).
fn safetensor(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let t = &h[name];
    assert_eq!(t["dtype"], "F32", "{name}");
    let shape: Vec<usize> =
        t["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    let [a, b] = [0, 1].map(|i| t["data_offsets"][i].as_u64().unwrap() as usize + 8 + n);
    (shape, bytes[a..b].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}

fn values(g: &GgufFile, name: &str) -> Vec<f32> {
    g.f32_tensor(name, &Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// llama's rotary permutation of rows (`LlamaModel.permute`): output row r is input row p(r).
fn permuted(r: usize, rows: usize, n_head: usize) -> usize {
    let per = rows / n_head;
    let (h, rem) = (r / per, r % per);
    h * per + (rem % 2) * (per / 2) + rem / 2
}

#[test]
fn peft_adapters_convert_to_gguf_adapters() {
    let Some(fx) = fixtures("peft_adapters_convert_to_gguf_adapters") else { return };
    let out = common::scratch("lora-out");
    for (arch, (adapter, hf_base, gguf_base)) in [("llama", &fx.llama), ("lfm2", &fx.lfm2)] {
        let st = adapter.join("adapter_model.safetensors");
        let spec = wick_fixtures::hf_lora_specs()
            .into_iter()
            .find(|l| l.base.dir_name == format!("hf-{arch}"))
            .unwrap();
        let modules = wick_fixtures::hf_lora_modules(&spec);
        // GGUF base, HF base, and the base named by adapter_config.json: the same bytes.
        let f_gguf = out.join(format!("{arch}-lora-f32.gguf"));
        let r = lora(adapter, Some(gguf_base), &f_gguf, OutType::F32).expect("convert against the GGUF base");
        assert_eq!((r.architecture.as_str(), r.tensors), (arch, 2 * modules.len()));
        let f_hf = out.join(format!("{arch}-lora-f32-hf.gguf"));
        lora(adapter, Some(hf_base), &f_hf, OutType::F32).expect("convert against the HF base");
        let f_named = out.join(format!("{arch}-lora-f32-named.gguf"));
        lora(adapter, None, &f_named, OutType::F32).expect("convert against base_model_name_or_path");
        let bytes = std::fs::read(&f_gguf).unwrap();
        assert_eq!(bytes, std::fs::read(&f_hf).unwrap());
        assert_eq!(bytes, std::fs::read(&f_named).unwrap());
        // The model converter's entry point routes an adapter directory here too.
        let f_routed = out.join(format!("{arch}-lora-routed.gguf"));
        common::convert_to(adapter, &f_routed, OutType::F32).expect("convert() of an adapter directory");
        assert_eq!(bytes, std::fs::read(&f_routed).unwrap());

        let g = GgufFile::open(&f_gguf).unwrap();
        assert_eq!(g.metadata.str("general.architecture").unwrap(), arch);
        assert_eq!(g.metadata.str("general.type").unwrap(), "adapter");
        assert_eq!(g.metadata.str("adapter.type").unwrap(), "lora");
        assert_eq!(g.metadata.get("adapter.lora.alpha").and_then(|v| v.as_f64()), Some(8.0));
        let base = GgufFile::open(gguf_base).unwrap();
        for m in &modules {
            let peft = format!("base_model.model.{}", m.path);
            let (sa, a) = safetensor(&st, &format!("{peft}.lora_A.weight"));
            let (sb, b) = safetensor(&st, &format!("{peft}.lora_B.weight"));
            // The GGUF name: the base weight with the same shape.
            let il: usize = m.path.split('.').nth(2).unwrap().parse().unwrap();
            let leaf = match m.path.rsplit('.').next().unwrap() {
                "q_proj" => "attn_q",
                "v_proj" => "attn_v",
                "in_proj" => "shortconv.in_proj",
                "out_proj" if m.path.contains(".conv.") => "shortconv.out_proj",
                _ => "attn_output",
            };
            let w = format!("blk.{il}.{leaf}.weight");
            let wi = base.info(&w).unwrap_or_else(|| panic!("base has {w}"));
            let (ia, ib) = (g.info(&format!("{w}.lora_a")).unwrap(), g.info(&format!("{w}.lora_b")).unwrap());
            assert_eq!(
                (ia.dims.clone(), ia.dtype),
                (vec![sa[1], sa[0]], candle_core::quantized::GgmlDType::F32)
            );
            assert_eq!(ib.dims, vec![sb[1], sb[0]]);
            assert_eq!((ia.dims[0], ib.dims[1]), (wi.dims[0], wi.dims[1]), "{w}: fits the base");
            assert_eq!(values(&g, &format!("{w}.lora_a")), a, "{w}.lora_a = A");
            let got_b = values(&g, &format!("{w}.lora_b"));
            let r = sb[1];
            let want_b: Vec<f32> = if arch == "llama" && leaf == "attn_q" {
                (0..sb[0]).flat_map(|row| b[permuted(row, sb[0], 4) * r..][..r].to_vec()).collect()
            } else {
                b.clone()
            };
            assert_eq!(got_b, want_b, "{w}.lora_b = B (rows permuted for llama's q)");
        }

        // F16 holds the same values rounded; Q8_0 quantizes lora_a (rows of n_in) and writes
        // lora_b (rows of r = 4) in F16, as llama.cpp's script falls back.
        let f16 = out.join(format!("{arch}-lora-f16.gguf"));
        let r16 = lora(adapter, Some(gguf_base), &f16, OutType::F16).unwrap();
        assert!(r16.types.iter().all(|(_, t)| *t == GgmlType::F16));
        let q8 = out.join(format!("{arch}-lora-q8_0.gguf"));
        let rq = lora(adapter, Some(gguf_base), &q8, OutType::Q8_0).unwrap();
        for (name, t) in &rq.types {
            let want = if name.ends_with(".lora_a") { GgmlType::Q8_0 } else { GgmlType::F16 };
            assert_eq!(*t, want, "{name}");
        }
        let g16 = GgufFile::open(&f16).unwrap();
        let (_, a) = safetensor(&st, &format!("base_model.model.{}.lora_A.weight", modules[0].path));
        let name = &r16.types[0].0;
        let rounded: Vec<f32> = a.iter().map(|v| half::f16::from_f32(*v).to_f32()).collect();
        assert_eq!(values(&g16, name), rounded);

        llama_server_loads(arch, gguf_base, &f_gguf);
        llama_server_loads(arch, gguf_base, &q8);
    }
}

/// llama-server loads the converted base with the adapter (its log counts the adapter's
/// tensors), and greedy output with it differs from scale 0 (= the base).
fn llama_server_loads(arch: &str, base: &Path, adapter: &Path) {
    let server = common::repo().join(".cache/llama-build/bin/llama-server");
    if !server.is_file() {
        common::skip(
            "llama_server_loads",
            "no .cache/llama-build/bin/llama-server (scripts/build-llama-server.sh)",
        );
        return;
    }
    let port = 18190 + (std::process::id() % 500) as u16;
    let log = adapter.with_extension("server.log");
    let mut child = Command::new(&server)
        .args(["-m", base.to_str().unwrap(), "--lora", adapter.to_str().unwrap(), "-fa", "off", "-t", "2"])
        .args(["-c", "256", "-lv", "4", "--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn llama-server");
    let url = format!("http://127.0.0.1:{port}");
    let curl = |path: &str, body: Option<&str>| -> Option<String> {
        let mut c = Command::new("curl");
        c.args(["-sf", "--max-time", "30", &format!("{url}{path}")]);
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/json", "-d", b]);
        }
        let o = c.output().ok()?;
        o.status.success().then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let mut up = false;
    for _ in 0..120 {
        if curl("/health", None).is_some() {
            up = true;
            break;
        }
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if !up {
        let _ = child.kill();
        panic!("{arch}: llama-server did not load {} with {}:\n{text}", base.display(), adapter.display());
    }
    let req = |scale: f32| {
        let b = format!(
            r#"{{"prompt":"hello","n_predict":8,"temperature":0,"return_tokens":true,"lora":[{{"id":0,"scale":{scale}}}]}}"#
        );
        let r: serde_json::Value =
            serde_json::from_str(&curl("/completion", Some(&b)).expect("completion")).unwrap();
        r["tokens"].clone()
    };
    let (with, without) = (req(1.0), req(0.0));
    let _ = child.kill();
    let _ = child.wait();
    let n = GgufFile::open(adapter).unwrap().tensor_count();
    assert!(text.contains(&format!("loaded {n} tensors from lora file")), "{arch}: log:\n{text}");
    assert_ne!(with, without, "{arch}: the adapter changes greedy output");
    eprintln!("{arch}: llama-server loaded {} ({n} tensors): {with} vs base {without}", adapter.display());
}

#[test]
fn peft_conversion_errors_are_clear() {
    let Some(fx) = fixtures("peft_conversion_errors_are_clear") else { return };
    let (adapter, _, gguf_base) = &fx.llama;
    let out = common::scratch("lora-err");
    let dst = out.join("x.gguf");
    let copy = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| -> PathBuf {
        let d = out.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(adapter.join("adapter_model.safetensors"), d.join("adapter_model.safetensors"))
            .unwrap();
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(adapter.join("adapter_config.json")).unwrap()).unwrap();
        edit(&mut cfg);
        std::fs::write(d.join("adapter_config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
        d
    };
    let err = |d: &Path, base: Option<&Path>, t: OutType| lora(d, base, &dst, t).unwrap_err().to_string();

    // The llama adapter against the lfm2 base: lfm2 has attention only at layers 2 and 4.
    let e = err(adapter, Some(&fx.lfm2.2), OutType::F32);
    assert!(e.contains("the base model has no `blk.0.attn_q.weight`"), "{e}");
    let e = err(&copy("rank", &|c| c["r"] = 8.into()), Some(gguf_base), OutType::F32);
    assert!(e.contains("rank mismatch") && e.contains("r is 8"), "{e}");
    let e = err(
        &copy("nobase", &|c| c["base_model_name_or_path"] = "org/missing-model".into()),
        None,
        OutType::F32,
    );
    assert!(e.contains("org/missing-model") && e.contains("--base"), "{e}");
    let e = err(&copy("dora", &|c| c["use_dora"] = true.into()), Some(gguf_base), OutType::F32);
    assert!(e.contains("use_dora"), "{e}");
    let e = err(adapter, Some(gguf_base), OutType::Q4KM);
    assert!(e.contains("f32, f16, bf16 or q8_0"), "{e}");
    let e = err(adapter, Some(&out.join("nope.gguf")), OutType::F32);
    assert!(e.contains("missing") && e.contains("base model"), "{e}");
    let e = err(adapter, Some(adapter), OutType::F32);
    assert!(e.contains("config.json"), "{e}");
    let d = copy("noweights", &|_| {});
    std::fs::remove_file(d.join("adapter_model.safetensors")).unwrap();
    let e = err(&d, Some(gguf_base), OutType::F32);
    assert!(e.contains("adapter_model.safetensors") && e.contains("missing"), "{e}");
    // A module the mapping does not know, and an architecture the converter does not write.
    let d = copy("unknown", &|_| {});
    let mut st = std::fs::read(d.join("adapter_model.safetensors")).unwrap();
    let n = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(st[8..8 + n].to_vec()).unwrap().replace("v_proj", "x_proj");
    st[8..8 + n].copy_from_slice(header.as_bytes());
    std::fs::write(d.join("adapter_model.safetensors"), &st).unwrap();
    let e = err(&d, Some(gguf_base), OutType::F32);
    assert!(e.contains("x_proj") && e.contains("no llama tensor"), "{e}");
    let e = err(adapter, Some(&fx.lfm2.2), OutType::F32);
    assert!(e.contains("lfm2") || e.contains("blk.0"), "{e}");
    assert!(!dst.exists(), "no output after an error");
}
