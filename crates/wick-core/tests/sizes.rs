//! Short functions and files, checked: outside tests, no function of any workspace crate's
//! `src/` is over 120 lines and no file is over 600 (a file's trailing `#[cfg(test)] mod …`
//! does not count). A longer one is a plan plus named steps, or ops in the files of their op.

use std::path::{Path, PathBuf};

const MAX_FN_LINES: usize = 120;
const MAX_FILE_LINES: usize = 600;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// One line with comments, string and char literals blanked, so their braces do not count.
/// (Block comments and raw strings spanning lines are rare in this code; `in_str` carries an
/// ordinary string across lines.)
fn code_of(line: &str, in_str: &mut bool) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if *in_str {
            match b[i] {
                b'\\' => i += 2,
                b'"' => {
                    *in_str = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => break,
            b'"' => {
                *in_str = true;
                i += 1;
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') => i += 4,
            c => {
                out.push(if c.is_ascii() { c as char } else { ' ' });
                i += 1;
            }
        }
    }
    out
}

/// Lines before the file's test module (`#[cfg(test)]` then `mod …`), or all of them.
fn non_test_lines(src: &str) -> Vec<&str> {
    let lines: Vec<&str> = src.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|l| {
                    let l = l.trim_start();
                    l.starts_with("mod ") || l.starts_with("pub mod ") || l.starts_with("pub(crate) mod ")
                })
                && !lines[i].starts_with(' ')
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// Whether `code` starts a function item (`fn name`, after visibility and qualifiers).
fn starts_fn(code: &str) -> bool {
    let mut words = code.split_whitespace();
    for w in words.by_ref() {
        match w {
            "pub" | "const" | "unsafe" | "async" | "extern" | "\"C\"" | "default" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => return true,
            _ => return false,
        }
    }
    false
}

/// (first line, length) of every function body in `lines`.
fn functions(lines: &[&str]) -> Vec<(usize, usize)> {
    let mut in_str = false;
    let code: Vec<String> = lines.iter().map(|l| code_of(l, &mut in_str)).collect();
    let mut out = vec![];
    for start in 0..code.len() {
        if !starts_fn(&code[start]) {
            continue;
        }
        let (mut depth, mut opened) = (0i64, false);
        for (i, line) in code.iter().enumerate().skip(start) {
            for c in line.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
                out.push((start + 1, i - start + 1));
                break;
            }
        }
    }
    out
}

#[test]
fn no_long_functions_or_files_outside_tests() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = vec![];
    for e in std::fs::read_dir(crates).unwrap() {
        let src = e.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "only {} source files found under {}", files.len(), crates.display());
    let mut long = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines = non_test_lines(&text);
        let name = f.strip_prefix(crates).unwrap().display().to_string();
        if lines.len() > MAX_FILE_LINES {
            long.push(format!("{name}: {} lines (at most {MAX_FILE_LINES})", lines.len()));
        }
        for (at, n) in functions(&lines) {
            if n > MAX_FN_LINES {
                long.push(format!("{name}:{at}: a function of {n} lines (at most {MAX_FN_LINES})"));
            }
        }
    }
    assert!(long.is_empty(), "split these into named steps:\n{}", long.join("\n"));
}

#[test]
fn the_scan_finds_a_long_function_and_ignores_braces_in_strings() {
    let body = "    let x = \"{ not a brace\";\n".repeat(130);
    let src = format!("pub(crate) fn long() {{\n{body}}}\nfn short() -> u8 {{ 1 }}\nfn decl();\n");
    let lines: Vec<&str> = src.lines().collect();
    assert_eq!(functions(&lines), vec![(1, 132), (133, 1), (134, 1)]);
    let with_tests = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
    assert_eq!(non_test_lines(with_tests), vec!["fn a() {}"]);
}
