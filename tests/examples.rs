//! Every example runs and verifies itself against MLX (each exits non-zero on a mismatch):
//! on the CPU executor (interpreted and compiled), and on emulated Metal (the generated MSL, compiled with clang
//! against the Metal shim) in forward and reverse lane order.

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
    run_on(name, "cpu");
    if triton_metal::emu::Emulator::should_run(name).expect("emulator check") {
        run_on(name, "cpu-compiled");
        run_on(name, "emulated");
        run_on(name, "emulated-reverse");
    }
}

fn run_on(name: &str, target: &str) {
    let path = example(name);
    assert!(
        path.exists(),
        "{} was not built (cargo test builds examples)",
        path.display()
    );
    let out = Command::new(&path)
        .env("TRITON_METAL_TARGET", target)
        .output()
        .expect("example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} on {target} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("verified"),
        "{name} on {target} did not verify:\n{stdout}"
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

#[test]
fn fused_attention() {
    run("fused_attention");
}

#[test]
fn persistent_matmul() {
    run("persistent_matmul");
}

#[test]
fn grouped_gemm() {
    run("grouped_gemm");
}

#[test]
fn adam() {
    run("adam");
}

#[test]
fn compiled_cpu_without_clang_is_a_clear_error() {
    let out = Command::new(example("vector_add"))
        .env("TRITON_METAL_TARGET", "cpu-compiled")
        .env("TRITON_METAL_EMU_CXX", "/nonexistent/clang++")
        .output()
        .expect("example runs");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "ran without a compiler:\n{all}");
    assert!(
        all.contains("add_kernel") && all.contains("needs clang"),
        "unclear error:\n{all}"
    );
}

#[test]
fn compiled_cpu_sources_can_be_inspected() {
    let dir = std::env::temp_dir().join(format!("tm-cpu-src-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if !triton_metal::emu::Emulator::should_run("compiled_cpu_sources_can_be_inspected")
        .expect("clang check")
    {
        return;
    }
    let out = Command::new(example("vector_add"))
        .env("TRITON_METAL_TARGET", "cpu-compiled")
        .env("TRITON_METAL_CACHE_DIR", &dir)
        .env("TRITON_METAL_DEBUG", "1")
        .output()
        .expect("example runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let src = std::fs::read_to_string(dir.join("add_kernel.cpp")).expect("source written");
    assert!(
        src.contains("void tm_run(") && src.contains("x_ptr"),
        "{src}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("compiled CPU program of `add_kernel`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
