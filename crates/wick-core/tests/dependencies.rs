//! No unused dependencies: every crate of the workspace names, somewhere in its Rust sources,
//! each crate its Cargo.toml lists under `[dependencies]`, `[dev-dependencies]` and
//! `[build-dependencies]`. A dependency counts as used when a source file (comments left out)
//! has its crate name (`-` as `_`) followed by `::` (`use half::f16`, `napi_build::setup()`)
//! or after `extern crate` (`#[macro_use] extern crate napi_derive;`).

use std::path::{Path, PathBuf};

/// The dependency names of one manifest, from the three dependency tables (keys only; a
/// `package = "…"` rename uses the key too, as Rust code does).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = vec![];
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = matches!(line, "[dependencies]" | "[dev-dependencies]" | "[build-dependencies]");
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
        if !key.is_empty() {
            out.push(key.to_string());
        }
    }
    out
}

/// Every `.rs` file under `dir`, `target` directories left out.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Source text without `//` comments (doc comments included: a crate named only in prose is
/// not used).
fn code_only(src: &str) -> String {
    src.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

/// Whether `code` has `name::` with `name` a whole identifier, or `extern crate name`.
fn names(code: &str, name: &str) -> bool {
    let pat = format!("{name}::");
    let extern_crate = format!("extern crate {name}");
    code.lines().any(|l| l.trim_start().trim_start_matches("#[macro_use]").trim().starts_with(&extern_crate))
        || code.match_indices(&pat).any(|(i, _)| {
            i == 0 || !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
        })
}

#[test]
fn every_dependency_is_used() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut unused = vec![];
    let mut checked = 0;
    for e in std::fs::read_dir(crates).unwrap() {
        let dir = e.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let mut files = vec![];
        rust_files(&dir, &mut files);
        let code: Vec<String> =
            files.iter().map(|f| code_only(&std::fs::read_to_string(f).unwrap())).collect();
        for dep in dependencies(&manifest) {
            checked += 1;
            let name = dep.replace('-', "_");
            if !code.iter().any(|c| names(c, &name)) {
                unused.push(format!("{}: {dep}", dir.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(checked > 20, "the scan found too few dependencies ({checked})");
    assert!(unused.is_empty(), "dependencies no source file uses: {unused:?}");
}

#[test]
fn the_manifest_reader_sees_each_table() {
    let m = "[package]\nname = \"x\"\n\n[dependencies]\nhalf.workspace = true\nfancy-regex = \"0.14\"\n\
             # a comment\n\n[dev-dependencies]\ncriterion = { version = \"0.5\" }\n\n[[bench]]\nname = \"e2e\"\n\
             [build-dependencies]\nnapi-build.workspace = true\n";
    assert_eq!(dependencies(m), ["half", "fancy-regex", "criterion", "napi-build"]);
    assert!(names("use half::f16;", "half"));
    assert!(!names("use not_half::f16;", "half"));
    assert!(names("#[macro_use]\nextern crate napi_derive;", "napi_derive"));
    assert!(!names(&code_only("// half::f16\nfn x() {}"), "half"));
}
