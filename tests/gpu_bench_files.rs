//! The committed `benches/gpu/generated/` files are what `emit_gpu_bench` prints today, and
//! every example kernel's CUDA compiles with NVRTC (when NVRTC is installed; required when
//! `TRITON_METAL_REQUIRE_NVRTC=1`, as in CI).

mod support;

#[allow(dead_code)]
#[path = "../examples/emit_gpu_bench.rs"]
mod emit;

#[allow(dead_code)]
#[path = "../examples/dropout.rs"]
mod dropout;
#[allow(dead_code)]
#[path = "../examples/strided.rs"]
mod strided;

use triton_metal::codegen::{self, LaunchOptions};
use triton_metal::opt::{Chip, HardwareProfile};
use triton_metal::tl::Signature;
use triton_metal::DType::{BF16, F32};

#[test]
fn committed_gpu_bench_files_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gpu/generated");
    let files = emit::generate().unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    want.sort();
    assert_eq!(names, want, "stale files in {}", dir.display());
    for (name, text) in &files {
        let committed = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            &committed == text,
            "{name} is stale: run `cargo run --release --example emit_gpu_bench`"
        );
    }
    if let Some(n) = support::nvrtc() {
        let manifest: serde_json::Value = files
            .iter()
            .find(|(n, _)| n == "manifest.json")
            .and_then(|(_, t)| serde_json::from_str(t).ok())
            .unwrap();
        for (name, text) in files.iter().filter(|(n, _)| n.ends_with(".cu")) {
            let entry = manifest["kernels"]
                .as_array()
                .unwrap()
                .iter()
                .find(|k| k["file"] == name.as_str())
                .unwrap();
            // The virtual architecture of the manifest's `sm_90` or `sm_90a`.
            let arch = entry["arch"].as_str().unwrap().replace("sm_", "compute_");
            if let Err(e) = n.compile(name, text, &arch) {
                panic!("{e}");
            }
        }
    }
}

#[test]
fn every_example_kernel_prints_cuda_that_compiles() {
    let sm80 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm80));
    let kernels = [
        (
            emit::vector_add::add_kernel().unwrap(),
            vec![("BLOCK_SIZE", 1024)],
            Vec::new(),
        ),
        (
            emit::row_sum::row_sum_kernel().unwrap(),
            vec![("BLOCK_SIZE", 512)],
            Vec::new(),
        ),
        (
            emit::fused_softmax::softmax_kernel().unwrap(),
            vec![("BLOCK_SIZE", 1024)],
            Vec::new(),
        ),
        (
            emit::layer_norm::layer_norm_kernel().unwrap(),
            vec![("BLOCK_SIZE", 256)],
            vec![F32; 4],
        ),
        (
            emit::layer_norm::layer_norm_kernel().unwrap(),
            vec![("BLOCK_SIZE", 256)],
            vec![BF16; 4],
        ),
        (
            emit::matmul::matmul_kernel().unwrap(),
            vec![
                ("BLOCK_SIZE_M", 64),
                ("BLOCK_SIZE_N", 64),
                ("BLOCK_SIZE_K", 32),
                ("GROUP_SIZE_M", 8),
            ],
            vec![F32; 3],
        ),
        (
            emit::fused_attention::attn_fwd_kernel().unwrap(),
            vec![
                ("HEAD_DIM", 128),
                ("BLOCK_M", 16),
                ("BLOCK_N", 32),
                ("CAUSAL", 1),
            ],
            Vec::new(),
        ),
        (
            dropout::dropout_kernel().unwrap(),
            vec![("BLOCK_SIZE", 1024)],
            Vec::new(),
        ),
        (
            strided::strided_kernel().unwrap(),
            vec![("BLOCK_SIZE", 256)],
            Vec::new(),
        ),
    ];
    let n = support::nvrtc();
    for (k, cx, arrays) in kernels {
        let sig = cx
            .iter()
            .fold(Signature::new(), |s, (n, v)| s.constexpr(n, *v));
        let spec = k
            .specialize(&arrays.iter().fold(sig, |s, d| s.array(*d)))
            .unwrap();
        let prog = match codegen::cuda(&spec, &sm80) {
            Ok(p) => p,
            Err(e) => panic!("{}: {e}", k.name()),
        };
        if let Some(n) = &n {
            if let Err(e) = n.compile(&prog.name, &prog.standalone(), "compute_80") {
                panic!("{e}");
            }
        }
    }
}
