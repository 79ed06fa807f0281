//! Every example runs and verifies itself against MLX (each exits non-zero on a mismatch).

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/examples-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile dir");
    dir.join("examples").join(name)
}

fn run(name: &str) {
    let path = example(name);
    assert!(
        path.exists(),
        "{} was not built (cargo test builds examples)",
        path.display()
    );
    let out = Command::new(&path).output().expect("example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("verified"),
        "{name} did not verify:\n{stdout}"
    );
}

#[test]
fn vector_add() {
    run("vector_add");
}

#[test]
fn fused_softmax() {
    run("fused_softmax");
}

#[test]
fn matmul() {
    run("matmul");
}

#[test]
fn layer_norm() {
    run("layer_norm");
}

#[test]
fn dropout() {
    run("dropout");
}

#[test]
fn row_sum() {
    run("row_sum");
}

#[test]
fn strided() {
    run("strided");
}
