//! The module graph of each workspace crate, read from its sources: no import circles (a module
//! never uses one that uses it, directly or through others) in wick-core, wick-convert,
//! wick-fixtures and wick-node, and wick-core's layer rules of docs/architecture.md (the
//! scheduler never depends on the engine, kernels never on models, the cache never on kernels).
//! Test modules (`#[cfg(test)] mod …`) are left out: tests may reach anywhere. Glob imports
//! (`use super::*`) name no module, so the crates import by name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`kernels::cpu::attention::dots::avx`) → the modules its code names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Source text with comments, string and char literals blanked (their braces and paths must
/// not count).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\''
                if b.get(i + 2) == Some(&b'\'')
                    || (b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'')) =>
            {
                i += if b[i + 1] == b'\\' { 4 } else { 3 };
                out.push_str("' '");
            }
            // Identifiers and paths are ASCII; other bytes (in code, only inside literals
            // this scan does not parse) become spaces so byte offsets stay char boundaries.
            c => {
                out.push(if c.is_ascii() { c as char } else { ' ' });
                i += 1;
            }
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// Walks one file: tracks inline `mod name { … }` blocks by brace depth (skipping
/// `#[cfg(test)]` ones) and records every `crate::`, `super::` and `self::` path per module.
fn scan(module: &[String], src: &str, mods: &mut BTreeSet<String>, uses: &mut Vec<(String, Vec<String>)>) {
    let code = code_only(src);
    let mut stack: Vec<(Vec<String>, usize, bool)> = vec![(module.to_vec(), 0, false)];
    let mut depth = 0usize;
    let mut pending: Option<(String, bool)> = None;
    let mut test_attr = false;
    let mut i = 0;
    let bytes = code.as_bytes();
    while i < bytes.len() {
        let rest = &code[i..];
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if rest.starts_with("#[cfg(test)]") {
            test_attr = true;
            i += "#[cfg(test)]".len();
            continue;
        }
        if boundary && rest.starts_with("mod ") {
            let name = ident_at(rest[4..].trim_start()).to_string();
            pending = Some((name, test_attr));
            test_attr = false;
            i += 4;
            continue;
        }
        match bytes[i] {
            b'{' => {
                depth += 1;
                if let Some((name, test)) = pending.take() {
                    let (parent, _, parent_test) = stack.last().unwrap().clone();
                    let mut path = parent;
                    path.push(name);
                    stack.push((path, depth, parent_test || test));
                }
            }
            b'}' => {
                if stack.len() > 1 && stack.last().unwrap().1 == depth {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            b';' => {
                pending = None; // `mod name;`: a file of its own
                test_attr = false;
            }
            _ => {}
        }
        let (cur, _, in_test) = stack.last().unwrap();
        if boundary && !*in_test {
            for head in ["crate::", "super::", "self::"] {
                if rest.starts_with(head) {
                    let path: String =
                        rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
                    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                    let mut full: Vec<String> = match segs[0] {
                        "crate" => vec![],
                        _ => cur.clone(),
                    };
                    let mut k = 0;
                    while k < segs.len() && (segs[k] == "super" || segs[k] == "self" || segs[k] == "crate") {
                        if segs[k] == "super" {
                            full.pop();
                        }
                        k += 1;
                    }
                    full.extend(segs[k..].iter().map(|s| s.to_string()));
                    uses.push((cur.join("::"), full));
                }
            }
        }
        if let Some((cur, _, false)) = stack.last() {
            mods.insert(cur.join("::"));
        }
        i += 1;
    }
}

/// wick-core's module graph.
fn module_graph() -> Graph {
    crate_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The module graph of the crate whose sources are under `src` (its binaries left out).
fn crate_graph(src: &Path) -> Graph {
    let src = src.to_path_buf();
    let (mut mods, mut uses) = (BTreeSet::new(), Vec::new());
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.starts_with(src.join("bin")) {
                let rel = p.strip_prefix(&src).unwrap().with_extension("");
                let mut module: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                    module.pop();
                }
                scan(&module, &std::fs::read_to_string(&p).unwrap(), &mut mods, &mut uses);
            }
        }
    }
    let mut graph = Graph::new();
    for (from, path) in uses {
        // The longest prefix of the path that is a module: `crate::kernels::cpu::blocks::f16_at`
        // names `kernels::cpu::blocks`.
        let to = (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| mods.contains(m));
        if let Some(to) = to.filter(|t| !t.is_empty() && *t != from) {
            graph.entry(from).or_default().insert(to);
        }
    }
    graph
}

fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        u: &str,
        g: &Graph,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(u.to_string(), 1);
        stack.push(u.to_string());
        for v in g.get(u).into_iter().flatten() {
            match state.get(v) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == v).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(v.clone());
                    return Some(cycle);
                }
                None => {
                    if let Some(c) = visit(v, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(u.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for u in graph.keys() {
        if !state.contains_key(u) {
            if let Some(c) = visit(u, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it() {
    let graph = module_graph();
    assert!(graph.len() > 20, "the scan found too few modules: {:?}", graph.keys());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle: {}", cycle.join(" -> "));
    }
}

/// The workspace's crates (`crates/*` with a `src`), by directory name.
fn workspace_crates() -> Vec<(String, std::path::PathBuf)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut out: Vec<_> = std::fs::read_dir(crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p.join("src")))
        .collect();
    out.sort();
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let crates = workspace_crates();
    let names: Vec<&str> = crates.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["wick-core", "wick-convert", "wick-fixtures", "wick-node"] {
        assert!(names.contains(&want), "{want} was not scanned: {names:?}");
    }
    let mut circles = vec![];
    for (name, src) in &crates {
        let graph = crate_graph(src);
        // Every crate here has modules that import each other: an empty graph is a broken scan.
        assert!(!graph.is_empty(), "the scan of {name} found no imports");
        if let Some(cycle) = find_cycle(&graph) {
            circles.push(format!("{name}: {}", cycle.join(" -> ")));
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn layers_depend_downward_only() {
    let graph = module_graph();
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    // (from, to): a module under `from` never names one under `to`.
    let forbidden = [
        ("scheduler", "engine"),
        ("models", "engine"),
        ("models", "scheduler"),
        ("kernels", "models"),
        ("kernels", "engine"),
        ("kernels", "scheduler"),
        ("cache", "kernels"),
        ("cache", "models"),
        ("runtime", "kernels"),
        ("runtime", "cache"),
    ];
    let mut broken = vec![];
    for (from, tos) in &graph {
        for to in tos {
            if forbidden.contains(&(top(from).as_str(), top(to).as_str())) {
                broken.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(broken.is_empty(), "layer rules broken: {broken:?}");
    // The scan must see real edges, or the rules above would pass vacuously.
    assert!(graph.get("scheduler").is_some_and(|t| t.contains("request")), "{:?}", graph.get("scheduler"));
    assert!(graph.values().flatten().any(|t| t.starts_with("kernels::cpu::blocks")));
}
