//! CUDA back-end tests: snapshots of the standalone translation units, the MLX wrapper
//! text, limits, and NVRTC compiles of every kernel the Metal tests print (the emulated and
//! differential tests call [`check_cuda`] on each of their kernels).

use std::sync::OnceLock;

use super::nvrtc::{Nvrtc, NVRTC_DIR_ENV};
use super::tests::{
    build, cumsum_kernel, layer_norm, matmul, softmax, tile_reductions, vector_add,
};
use super::*;
use crate::dtype::DType::{F16, F32};
use crate::ir::Kernel;
use crate::opt::{Chip, HardwareProfile};

/// Environment variable that turns a missing NVRTC into a test failure (CI sets it).
const REQUIRE_ENV: &str = "TRITON_METAL_REQUIRE_NVRTC";

fn sm90(num_warps: u32) -> LaunchOptions {
    LaunchOptions::default()
        .num_warps(num_warps)
        .target(HardwareProfile::of(Chip::Sm90))
}

/// NVRTC from `TRITON_METAL_NVRTC_DIR`, else `target/nvrtc` (where `.ci/run` installs it);
/// `None` (said once) when absent, a panic when `TRITON_METAL_REQUIRE_NVRTC=1`.
pub(super) fn nvrtc() -> Option<&'static Nvrtc> {
    static N: OnceLock<Option<Nvrtc>> = OnceLock::new();
    N.get_or_init(|| {
        let found = match std::env::var_os(NVRTC_DIR_ENV) {
            Some(_) => Nvrtc::from_env(),
            None => Nvrtc::from_dir(
                &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/nvrtc"),
            ),
        };
        match found {
            Ok(n) => Some(n),
            Err(e) => {
                if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
                    panic!("{REQUIRE_ENV}=1 but NVRTC is unavailable: {e}");
                }
                eprintln!("skipping NVRTC compiles: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// Prints `kernel` for CUDA (sm_90, the options' warps and reduction layout) and, when
/// NVRTC is present, compiles the standalone translation unit; panics on any error.
pub(super) fn check_cuda(kernel: &Kernel, opts: &LaunchOptions) -> CudaProgram {
    let o = LaunchOptions {
        target: HardwareProfile::of(Chip::Sm90),
        ..opts.clone()
    };
    let p = match cuda::compile(kernel, &o) {
        Ok(p) => p,
        Err(e) => panic!("CUDA codegen of `{}` failed: {e}", kernel.name),
    };
    if let Some(n) = nvrtc() {
        if let Err(e) = n.compile(
            &format!("{}.cu", p.name),
            &p.standalone(),
            &p.nvrtc_arch("compute_90"),
        ) {
            panic!("{e}\n{}", numbered(&p.standalone()));
        }
    }
    p
}

fn numbered(s: &str) -> String {
    s.lines()
        .enumerate()
        .map(|(i, l)| format!("{:4} {l}\n", i + 1))
        .collect()
}

/// Compares with `src/codegen/snapshots/<name>.cu`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn check_snapshot(name: &str, p: &CudaProgram) {
    let text = p.standalone();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/codegen/snapshots")
        .join(format!("{name}.cu"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() || !path.exists() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert!(
        want == text,
        "CUDA of `{name}` changed (UPDATE_SNAPSHOTS=1 to accept):\n{text}"
    );
}

/// A chunk whose first offset is a proven multiple of the chunk tests only the base
/// pointer's alignment (`tm_vload_at`); one shifted by an element tests each address.
#[test]
fn chunk_alignment_is_tested_on_the_base_when_offsets_are_multiples_of_the_chunk() {
    let shifted = |k: &mut crate::tl::KernelBuilder| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let n = k.scalar(crate::dtype::DType::I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = crate::tl::program_id(0) * block + crate::tl::arange(0, block);
        let mask = offs.lt(n);
        let v = crate::tl::load(x + (offs + 1)).mask(mask);
        crate::tl::store(out + offs, v).mask(mask);
    };
    let p = check_cuda(&build("shifted", &[("BLOCK", 1024)], shifted), &sm90(4));
    assert!(p.source.contains("tm_vload<4>(x_ptr + "), "{}", p.source);
    assert!(p.source.contains("tm_vstore_at(out_ptr, "), "{}", p.source);
    assert!(!p.source.contains("tm_vload_at<4>(x_ptr"), "{}", p.source);
}

#[test]
fn cuda_snapshots() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 1024)], vector_add);
    let p = check_cuda(&k, &sm90(4));
    assert_eq!(p.input_names, ["x_ptr", "y_ptr", "n_elements"]);
    assert_eq!(p.scalar_inputs, [false, false, true]);
    assert_eq!(p.output_names, ["out_ptr"]);
    assert_eq!(p.shared_mem_bytes, 0);
    assert!(p.source.contains("n_elements[0]"), "{}", p.source);
    assert!(p.source.contains("tm_vload_at<4>(x_ptr, "), "{}", p.source);
    check_snapshot("vector_add", &p);

    let k = build("softmax", &[("BLOCK", 1024)], softmax);
    let p = check_cuda(&k, &sm90(4));
    assert!(p.source.contains("__shfl_xor_sync"), "{}", p.source);
    assert!(p.source.contains("__syncthreads();"), "{}", p.source);
    check_snapshot("softmax", &p);

    let k = build("matmul", &[("BM", 32), ("BN", 32), ("BK", 16)], matmul(F16));
    let p = check_cuda(&k, &sm90(4));
    check_snapshot("matmul", &p);

    let k = build("tiles", &[("BM", 16), ("BN", 64)], tile_reductions);
    let p = check_cuda(&k, &sm90(4));
    check_snapshot("tile_reductions", &p);
}

#[test]
fn more_kernels_compile() {
    let k = build("layer_norm", &[("BLOCK", 1024)], layer_norm);
    check_cuda(&k, &sm90(8));
    let k = build("cumsum", &[("BLOCK", 256)], cumsum_kernel);
    check_cuda(&k, &sm90(4));
    let k = build(
        "matmul32",
        &[("BM", 64), ("BN", 64), ("BK", 32)],
        matmul(F32),
    );
    for l in ReductionLayout::ALL {
        check_cuda(&k, &sm90(4).reduction_layout(l));
    }
}

#[test]
fn mlx_wrapper_matches_custom_kernel_cpp() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 1024)], vector_add);
    let p = cuda::compile(&k, &sm90(4)).unwrap();
    let s = p.mlx_source();
    let sig = format!(
        "namespace mlx::core::cu {{\n\nnamespace cg = cooperative_groups;\n\n__global__ void custom_kernel_{}(\n    const float* x_ptr,\n    const float* y_ptr,\n    const int32_t* n_elements,\n    float* out_ptr) {{\n",
        p.name
    );
    assert!(s.contains(&sig), "{s}");
    assert!(s.starts_with("\n#include \"mlx/backend/cuda/device/utils.cuh\""));
    assert!(s.ends_with("\n}\n\n} // namespace mlx::core::cu\n"));
    let st = p.standalone();
    assert!(st.contains(&format!("extern \"C\" __global__ void __launch_bounds__(128) {}(\n    const float* x_ptr,\n    const float* y_ptr,\n    const int* n_elements,\n    float* out_ptr) {{\n", p.name)), "{st}");
}

#[test]
fn cuda_limits_are_errors() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 1024)], vector_add);
    let e = cuda::compile(&k, &sm90(64)).unwrap_err().to_string();
    assert!(e.contains("2048 threads per block"), "{e}");
    let e = cuda::compile(&k, &LaunchOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a CUDA device"), "{e}");
    // The FMA dot stages A and B: 2 x 128 x 64 floats = 64 KB, over the 48 KB static limit.
    let k = build("mm", &[("BM", 128), ("BN", 128), ("BK", 64)], matmul(F32));
    let e = cuda::compile(&k, &sm90(4)).unwrap_err().to_string();
    assert!(e.contains("static shared memory"), "{e}");
    let k = build("add_kernel", &[("BLOCK_SIZE", 1024)], vector_add);
    let p = cuda::compile(&k, &sm90(4)).unwrap();
    assert_eq!(
        p.launch_dims([3, 2, 1]).unwrap(),
        ([384, 2, 1], [128, 1, 1])
    );
    assert!(p.launch_dims([1 << 30, 1, 1]).is_err());
    assert!(p.grid_blocks([1, 70000, 1]).is_err());
    let bad = tl::jit("k", |k| {
        let (x, o) = (k.ptr(F32, "threadIdx"), k.ptr(F32, "o"));
        tl::store(o + tl::arange(0, 32), tl::load(x + tl::arange(0, 32)));
    })
    .unwrap()
    .specialize_with(&[])
    .unwrap();
    // A parameter named like a CUDA built-in is renamed in the generated code.
    let p = cuda::compile(&bad, &sm90(1)).unwrap();
    assert_eq!(p.input_names, ["tm_pthreadIdx"]);
}

#[test]
fn cuda_cache_returns_the_same_program() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 512)], vector_add);
    let a = cuda(&k, &sm90(4)).unwrap();
    let b = cuda(&k, &sm90(4)).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    let c = cuda(&k, &sm90(2)).unwrap();
    assert_ne!(a.name, c.name);
}

use crate::tl;
