//! IR file tests: every `tests/filetests/*.ir` file is parsed, verified, printed, and the
//! printed text is matched against the file's `// check:` lines (`triton_metal::ir::filecheck`).
//! Passes will add a `// pass: NAME` directive selecting what runs between parse and print.

use triton_metal::ir::{filecheck, Kernel};

#[test]
fn filetests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/filetests exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ir"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable");
        let result = Kernel::parse_ir(&text)
            .map_err(|e| e.to_string())
            .and_then(|k| {
                let out = k.ir();
                // The printed form re-parses to the same text.
                let again = Kernel::parse_ir(&out).map_err(|e| e.to_string())?.ir();
                if again != out {
                    return Err(format!("not a fixed point:\n{out}\n---\n{again}"));
                }
                filecheck(&out, &text)
            });
        if let Err(e) = result {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
