//! The crate's layers, checked: every `crate::<module>` (or `triton_metal::<module>`) path in
//! `src/**/*.rs` must be an edge that [`ALLOWED`] lists. Test code (`tests.rs`,
//! `*_tests.rs`, items under `#[cfg(test)]`) may reach any module, as integration tests do.
//!
//! From the bottom up: leaves (`dtype`, `error`, `settings`, `cache`), the MLX bridge
//! (`ffi`, `array`, `mlx`, `device`), the C++ build shared by the emulator and the compiled
//! CPU executor (`clang`), MLX's `metal_kernel` contract (`mlx_abi`); the kernel IR (`ir`), the analysis and optimizer (`opt`,
//! `passes`), the DSL that builds IR and runs the pass pipeline (`tl`); the printers
//! (`codegen`) and executors (`exec`, `emu`), the compiled CPU executor that joins a
//! printer and an executor (`native`); launching (`runtime`); tools (`graph`, `tune`,
//! `bench`, `fuzz`, `config`, `testing`, the binary in `bin`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Each top-level module and the modules its non-test code may name.
const ALLOWED: &[(&str, &[&str])] = &[
    ("dtype", &[]),
    ("error", &["dtype"]),
    ("settings", &[]),
    ("cache", &["error", "settings"]),
    ("ffi", &["dtype", "error"]),
    ("array", &["dtype", "error", "ffi"]),
    ("mlx", &["array", "dtype", "error", "ffi"]),
    ("device", &["error", "ffi"]),
    ("testing", &["array", "dtype", "error", "mlx"]),
    ("clang", &["cache", "error", "settings"]),
    ("mlx_abi", &[]),
    ("ir", &["dtype", "error"]),
    ("opt", &["device", "dtype", "error", "ir", "settings"]),
    ("passes", &["dtype", "error", "ir", "opt"]),
    ("tl", &["dtype", "error", "ir", "passes", "settings"]),
    (
        "codegen",
        &[
            "cache", "dtype", "error", "ir", "mlx_abi", "opt", "passes", "settings",
        ],
    ),
    ("exec", &["dtype", "error", "ir", "opt"]),
    (
        "emu",
        &[
            "array", "cache", "clang", "dtype", "error", "mlx_abi", "settings",
        ],
    ),
    (
        "native",
        &[
            "cache", "clang", "codegen", "dtype", "error", "exec", "ir", "opt", "settings",
        ],
    ),
    (
        "runtime",
        &[
            "array", "cache", "codegen", "device", "dtype", "emu", "error", "exec", "ffi", "ir",
            "mlx", "native", "opt", "passes", "settings", "tl",
        ],
    ),
    (
        "graph",
        &[
            "array", "dtype", "error", "mlx", "opt", "runtime", "settings", "tl",
        ],
    ),
    (
        "tune",
        &[
            "array", "cache", "device", "dtype", "error", "mlx", "runtime", "settings", "tl",
        ],
    ),
    (
        "bench",
        &[
            "array", "codegen", "device", "dtype", "emu", "error", "mlx", "runtime", "settings",
            "testing", "tl",
        ],
    ),
    (
        "fuzz",
        &[
            "array", "codegen", "dtype", "emu", "error", "runtime", "settings", "tl",
        ],
    ),
    ("config", &["emu", "error", "opt", "runtime", "settings"]),
];

/// Items the crate root re-exports, by the module that defines them.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("Array", "array"),
    ("Backend", "device"),
    ("Config", "config"),
    ("DType", "dtype"),
    ("Device", "device"),
    ("Element", "dtype"),
    ("Error", "error"),
    ("HardwareInfo", "device"),
    ("Result", "error"),
    ("SourceLoc", "error"),
    ("jit", "tl"),
];

/// Directories and files under `src/` that are no module of the library.
const NOT_MODULES: &[&str] = &["bin", "lib.rs", "layering.rs"];

/// One use of another module.
#[derive(Debug)]
struct Edge {
    file: PathBuf,
    line: usize,
    to: String,
}

/// `text` with comments removed and string and character literals emptied; newlines are
/// kept, so byte offsets map to the same lines.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            i = end;
        } else if let Some(body) = rest.strip_prefix("/*") {
            let end = body.find("*/").map_or(b.len(), |n| i + 2 + n + 2);
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            i = end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let open = 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = rest[open..]
                .find(&close)
                .map_or(b.len(), |n| i + open + n + close.len());
            out.push_str("\"\"");
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            out.extend(text[i..j.min(b.len())].chars().filter(|&c| c == '\n'));
            i = (j + 1).min(b.len());
        } else if let Some(len) = char_literal(rest) {
            out.push_str("' '");
            i += len;
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"` ...: the number of `#`s of a raw string starting here.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// The length of a character literal starting here (`'a'`, `'\n'`, `'\''`); `None` for a
/// lifetime.
fn char_literal(s: &str) -> Option<usize> {
    let body = s.strip_prefix('\'')?;
    if let Some(esc) = body.strip_prefix('\\') {
        let close = esc.find('\'')?;
        return Some(2 + close + 1);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..]
        .starts_with('\'')
        .then(|| 1 + c.len_utf8() + 1)
}

/// `code` with every item under `#[cfg(test)]` blanked (newlines kept), and the names of
/// the modules declared there as files (`#[cfg(test)] mod name;`).
fn without_test_items(code: &str) -> (String, Vec<String>) {
    let mut out = code.to_string();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|n| from + n) {
        let end = item_end(code, at + "#[cfg(test)]".len());
        let item = &code[at..end];
        if let Some(name) = declared_module(item) {
            test_mods.push(name);
        }
        let blank: String = item
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blank);
        from = end;
    }
    (out, test_mods)
}

/// Where the item starting at `start` ends: after its `;` when it has no body, else after
/// the `}` that closes its first `{`.
fn item_end(code: &str, start: usize) -> usize {
    let mut depth = 0usize;
    let mut in_attr = 0usize;
    for (i, c) in code[start..].char_indices() {
        match c {
            '[' => in_attr += 1,
            ']' => in_attr = in_attr.saturating_sub(1),
            '{' if in_attr == 0 => depth += 1,
            '}' if in_attr == 0 => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return start + i + 1;
                }
            }
            ';' if depth == 0 && in_attr == 0 => return start + i + 1,
            _ => {}
        }
    }
    code.len()
}

/// `name` for an item `mod name;` (after attributes and visibility).
fn declared_module(item: &str) -> Option<String> {
    let words: Vec<&str> = item
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty())
        .collect();
    let m = words.iter().position(|w| *w == "mod")?;
    item.trim_end()
        .ends_with(';')
        .then(|| words.get(m + 1).map(|w| w.to_string()))?
}

/// The top-level modules that each `crate::` / `triton_metal::` path in `code` names.
fn uses(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for prefix in ["crate::", "triton_metal::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(prefix).map(|n| from + n) {
            from = at + prefix.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            let rest = &code[from..];
            if let Some(group) = rest.strip_prefix('{') {
                for name in group_heads(group) {
                    found.push((line, name));
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push((line, name));
                }
            }
        }
    }
    found
}

/// The first path segment of each entry of a `{a::b, c, d::{e, f}}` group (text after the
/// opening brace).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut at_entry = true;
    let mut word = String::new();
    for c in group.chars() {
        if at_entry && (c.is_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        if at_entry && !word.is_empty() {
            heads.push(std::mem::take(&mut word));
            at_entry = false;
        }
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_entry = true,
            _ => {}
        }
    }
    heads
}

/// The module a path's first segment after `crate::` stands for, if it is one.
fn module_of(head: &str, modules: &BTreeSet<String>) -> Option<String> {
    if head == "self" {
        return None;
    }
    if modules.contains(head) {
        return Some(head.to_string());
    }
    ROOT_ITEMS
        .iter()
        .find(|(item, _)| *item == head)
        .map(|(_, m)| m.to_string())
        .or_else(|| {
            Some(format!(
                "{head} (an unknown crate-root item: add it to ROOT_ITEMS)"
            ))
        })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.map(|e| e.path()).unwrap_or_default())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Whether `file` is test code by name.
fn is_test_file(file: &Path) -> bool {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// The files a `#[cfg(test)] mod name;` in `file` declares.
fn module_files(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs") => file.parent().map(Path::to_path_buf),
        _ => file
            .parent()
            .map(|p| p.join(file.file_stem().unwrap_or_default())),
    }
    .unwrap_or_default();
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
}

/// Every use of another top-level module from non-test code under `src`, with the
/// module that uses it.
fn edges(src: &Path) -> BTreeMap<String, Vec<Edge>> {
    let modules = top_modules(src);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut test_files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut cleaned = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        let (code, test_mods) = without_test_items(&code_only(&text));
        for m in test_mods {
            test_files.extend(module_files(f, &m));
        }
        cleaned.push((f.clone(), code));
    }
    let mut out: BTreeMap<String, Vec<Edge>> = BTreeMap::new();
    for (f, code) in cleaned {
        if is_test_file(&f) || test_files.contains(&f) {
            continue;
        }
        let Some(from) = owner(src, &f) else { continue };
        for (line, head) in uses(&code) {
            let Some(to) = module_of(&head, &modules) else {
                continue;
            };
            if to != from {
                out.entry(from.clone()).or_default().push(Edge {
                    file: f.clone(),
                    line,
                    to,
                });
            }
        }
    }
    out
}

/// The top-level module `file` belongs to (`None` for files that are no module's).
fn owner(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    if NOT_MODULES.contains(&first) {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// The names of the top-level modules under `src`.
fn top_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", src.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            let name = p.file_name()?.to_str()?.to_string();
            if NOT_MODULES.contains(&name.as_str()) {
                return None;
            }
            if p.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .collect()
}

/// The forbidden edges, one line each.
fn violations(src: &Path) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut bad = Vec::new();
    for (from, list) in edges(src) {
        for e in list {
            let ok = allowed
                .get(from.as_str())
                .is_some_and(|deps| deps.contains(&e.to.as_str()));
            if !ok {
                let file = e
                    .file
                    .strip_prefix(src.parent().unwrap_or(src))
                    .unwrap_or(&e.file);
                bad.push(format!(
                    "{}:{}: `{from}` -> `{}` is not an allowed dependency of `{from}`",
                    file.display(),
                    e.line,
                    e.to
                ));
            }
        }
    }
    bad
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn imports_follow_the_layers() {
    let bad = violations(&src_dir());
    let mut msg = String::new();
    for b in &bad {
        let _ = writeln!(msg, "{b}");
    }
    assert!(
        bad.is_empty(),
        "imports against the layers (move the shared piece down, or pass it as data; the \
         table is `ALLOWED` in src/layering.rs):\n{msg}"
    );
}

#[test]
fn every_module_has_a_row_and_the_table_has_no_cycle() {
    let modules = top_modules(&src_dir());
    let rows: BTreeSet<String> = ALLOWED.iter().map(|(m, _)| m.to_string()).collect();
    assert_eq!(
        modules, rows,
        "each top-level module under src/ needs one row in ALLOWED (src/layering.rs)"
    );
    // Each row may only name rows above it: the table's order is a topological order.
    for (i, (m, deps)) in ALLOWED.iter().enumerate() {
        for d in *deps {
            let at = ALLOWED.iter().position(|(n, _)| n == d);
            assert!(
                at.is_some_and(|at| at < i),
                "`{m}` may depend on `{d}`, which is not listed before it: the layers would \
                 have a cycle"
            );
        }
    }
}

#[test]
fn the_scanner_finds_uses_and_skips_tests_comments_and_strings() {
    let code = code_only(
        "use crate::ir::Kernel; // crate::runtime\n\
         use crate::{dtype::DType, error::{Error, Result}, Array};\n\
         let s = \"crate::codegen\"; let c = '\"'; let r = r#\"crate::emu\"#;\n\
         fn f() -> crate::opt::X { triton_metal::tl::arange(0, 1) }\n\
         #[cfg(test)]\nmod tests { use crate::exec::execute; }\n\
         #[cfg(test)]\nmod more_tests;\n\
         /* crate::graph */ use crate::passes;\n",
    );
    let (code, test_mods) = without_test_items(&code);
    let found: Vec<(usize, String)> = uses(&code);
    let names: Vec<(usize, &str)> = found.iter().map(|(l, n)| (*l, n.as_str())).collect();
    assert_eq!(
        names,
        [
            (1, "ir"),
            (2, "dtype"),
            (2, "error"),
            (2, "Array"),
            (4, "opt"),
            (9, "passes"),
            (4, "tl"),
        ]
    );
    assert_eq!(test_mods, ["more_tests"]);
}
