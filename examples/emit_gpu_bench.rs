//! Writes the CUDA kernels of `benches/gpu/bench.py`'s cases: for each case a standalone
//! `<case>.cu` (exactly the kernel MLX's `cuda_kernel` would compile, as an `extern "C"`
//! entry) and one `manifest.json` with entry names, launch shapes and parameters.
//!
//! `cargo run --release --example emit_gpu_bench -- [dir] [--no-int-spec]` (default
//! `benches/gpu/generated`; `--no-int-spec` leaves out the integer-argument
//! specialisation, which a CUDA launch applies by default).
//! The kernels are the examples' own, with constexprs and warps chosen for an sm_90 GPU.

#[allow(dead_code)]
#[path = "fused_attention.rs"]
pub mod fused_attention;
#[allow(dead_code)]
#[path = "fused_softmax.rs"]
pub mod fused_softmax;
#[allow(dead_code)]
#[path = "layer_norm.rs"]
pub mod layer_norm;
#[allow(dead_code)]
#[path = "matmul.rs"]
pub mod matmul;
#[allow(dead_code)]
#[path = "row_sum.rs"]
pub mod row_sum;
#[allow(dead_code)]
#[path = "vector_add.rs"]
pub mod vector_add;

/// The tutorial matmul with its K tiles addressed from the loop's induction variable
/// (`a_ptr + offs_am[:, None] * stride_am + (k * BLOCK_SIZE_K + offs_k)[None, :] *
/// stride_ak`) instead of pointers the loop advances: the other way users write it.
#[triton_metal::jit(name = "matmul_iv_kernel")]
#[rustfmt::skip]
pub fn matmul_iv_kernel(
    a_ptr: Ptr, b_ptr: Ptr, c_ptr: Ptr,
    M: i32, N: i32, K: i32,
    stride_am: i32, stride_ak: i32,
    stride_bk: i32, stride_bn: i32,
    stride_cm: i32, stride_cn: i32,
    BLOCK_SIZE_M: Constexpr, BLOCK_SIZE_N: Constexpr, BLOCK_SIZE_K: Constexpr,
    GROUP_SIZE_M: Constexpr,
) {
    let pid = tl::program_id(axis = 0);
    let num_pid_m = tl::cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = tl::cdiv(N, BLOCK_SIZE_N);
    let num_pid_in_group = num_pid_n * GROUP_SIZE_M;
    let group_id = tl::floordiv(pid, num_pid_in_group);
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = tl::minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m;
    let pid_n = tl::floordiv(pid % num_pid_in_group, group_size_m);
    let offs_am = pid_m * BLOCK_SIZE_M + tl::arange(0, BLOCK_SIZE_M);
    let offs_bn = pid_n * BLOCK_SIZE_N + tl::arange(0, BLOCK_SIZE_N);
    let mut accumulator = tl::zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype = F32);
    for k in tl::range(0, tl::cdiv(K, BLOCK_SIZE_K)) {
        let ks = k * BLOCK_SIZE_K + tl::arange(0, BLOCK_SIZE_K);
        let a = tl::load(a_ptr + offs_am.col() * stride_am + ks.row() * stride_ak, mask = (offs_am.col() < M) & (ks.row() < K), other = 0.0);
        let b = tl::load(b_ptr + ks.col() * stride_bk + offs_bn.row() * stride_bn, mask = (ks.col() < K) & (offs_bn.row() < N), other = 0.0);
        accumulator = tl::dot(a, b, accumulator);
    }
    let c_ptrs = c_ptr + stride_cm * offs_am.col() + stride_cn * offs_bn.row();
    let c_mask = (offs_am.col() < M) & (offs_bn.row() < N);
    tl::store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask = c_mask);
}

use serde_json::{json, Value};
use triton_metal::codegen::{self, CudaProgram, LaunchOptions};
use triton_metal::ir::ParamKind;
use triton_metal::opt::{Chip, HardwareProfile};
use triton_metal::passes::{specializable, IntFact, IntSpec};
use triton_metal::tl::{JitKernel, Signature};
use triton_metal::{tl, DType, DType::F32, Error, Result};

/// A scalar argument's value.
#[derive(Clone, Copy, Debug)]
enum Val {
    I(i64),
    F(f64),
}

/// One benchmark case: a kernel, the dtypes of its leading array arguments (which its
/// generic pointers take), its constexprs and warps, its scalars, its grid.
struct Case {
    case: &'static str,
    kernel: JitKernel,
    arrays: Vec<DType>,
    constexprs: Vec<(&'static str, i64)>,
    num_warps: u32,
    scalars: Vec<(&'static str, Val)>,
    programs: [usize; 3],
}

fn cases() -> Result<Vec<Case>> {
    let mut v = vec![
        Case {
            case: "vector_add",
            kernel: vector_add::add_kernel()?,
            arrays: Vec::new(),
            constexprs: vec![("BLOCK_SIZE", 1024)],
            num_warps: 4,
            scalars: vec![("n_elements", Val::I(1 << 28))],
            programs: [(1 << 28) / 1024, 1, 1],
        },
        Case {
            case: "row_sum",
            kernel: row_sum::row_sum_kernel()?,
            arrays: Vec::new(),
            constexprs: vec![("BLOCK_SIZE", 2048)],
            num_warps: 8,
            scalars: vec![("n_cols", Val::I(16384))],
            programs: [16384, 1, 1],
        },
        Case {
            case: "softmax",
            kernel: fused_softmax::softmax_kernel()?,
            arrays: Vec::new(),
            constexprs: vec![("BLOCK_SIZE", 4096)],
            num_warps: 16,
            scalars: vec![
                ("input_row_stride", Val::I(4096)),
                ("output_row_stride", Val::I(4096)),
                ("n_cols", Val::I(4096)),
            ],
            programs: [32768, 1, 1],
        },
        Case {
            case: "layer_norm",
            kernel: layer_norm::layer_norm_kernel()?,
            arrays: vec![DType::F16; 4],
            constexprs: vec![("BLOCK_SIZE", 2048)],
            num_warps: 8,
            scalars: vec![
                ("stride", Val::I(8192)),
                ("N", Val::I(8192)),
                ("eps", Val::F(1e-5)),
            ],
            programs: [4096, 1, 1],
        },
    ];
    for size in [1024i64, 4096] {
        // Measured on an H100 (benches/README.md): at 4096^3 Triton's own config,
        // 128x128x64 on 8 warps, beats 64x128x32 on 4 (121 vs 114 TFLOP/s) and 64x64, 128x64,
        // 128x256; at 1024^3 64x64 and 64x128 on 4 warps are within run-to-run noise
        // (47-51 TFLOP/s), 128x128 is slower (37).
        let (bm, bn, bk, warps) = if size == 1024 {
            (64i64, 64i64, 32i64, 4u32)
        } else {
            (128, 128, 64, 8)
        };
        // The tutorial's kernel, and the same product with K tiles from the loop counter.
        let kernels = [
            (["matmul_1024", "matmul_4096"], matmul::matmul_kernel()?),
            (["matmul_iv_1024", "matmul_iv_4096"], matmul_iv_kernel()?),
        ];
        for (names, kernel) in kernels {
            v.push(Case {
                case: names[usize::from(size != 1024)],
                kernel,
                arrays: vec![DType::F16; 3],
                constexprs: vec![
                    ("BLOCK_SIZE_M", bm),
                    ("BLOCK_SIZE_N", bn),
                    ("BLOCK_SIZE_K", bk),
                    ("GROUP_SIZE_M", 8),
                ],
                num_warps: warps,
                scalars: vec![
                    ("M", Val::I(size)),
                    ("N", Val::I(size)),
                    ("K", Val::I(size)),
                    ("stride_am", Val::I(size)),
                    ("stride_ak", Val::I(1)),
                    ("stride_bk", Val::I(size)),
                    ("stride_bn", Val::I(1)),
                    ("stride_cm", Val::I(size)),
                    ("stride_cn", Val::I(1)),
                ],
                programs: [((size / bm) * (size / bn)) as usize, 1, 1],
            });
        }
    }
    // The tutorial's kernel on f32 operands and output: `tl.dot`'s default input precision
    // ("ieee") takes plain f32 FMAs on CUDA. 128x128x32 tiles on 8 warps (64 C elements per
    // thread, 32 KB of staged operands), as bench.py runs Triton's kernel.
    let size = 4096i64;
    let (bm, bn, bk, warps) = (128i64, 128i64, 32i64, 8u32);
    v.push(Case {
        case: "matmul_f32_4096",
        kernel: matmul::matmul_kernel()?,
        arrays: vec![DType::F32; 3],
        constexprs: vec![
            ("BLOCK_SIZE_M", bm),
            ("BLOCK_SIZE_N", bn),
            ("BLOCK_SIZE_K", bk),
            ("GROUP_SIZE_M", 8),
        ],
        num_warps: warps,
        scalars: vec![
            ("M", Val::I(size)),
            ("N", Val::I(size)),
            ("K", Val::I(size)),
            ("stride_am", Val::I(size)),
            ("stride_ak", Val::I(1)),
            ("stride_bk", Val::I(size)),
            ("stride_bn", Val::I(1)),
            ("stride_cm", Val::I(size)),
            ("stride_cn", Val::I(1)),
        ],
        programs: [((size / bm) * (size / bn)) as usize, 1, 1],
    });
    // Attention forward (tutorial 06's benchmark shape: batch 4, 32 heads, head dim 64, and
    // head dim 128 at 4096),
    // with the tile and warps of `triton_ref.attention`.
    let (z, h) = (4i64, 32i64);
    let (bm, bn, warps) = (128i64, 64i64, 4u32);
    for (n_ctx, d) in [(1024i64, 64i64), (4096, 64), (16384, 64), (4096, 128)] {
        for causal in [false, true] {
            let stride = |dim: i64| Val::I(dim);
            v.push(Case {
                case: match (n_ctx, d, causal) {
                    (1024, _, false) => "attention_1024",
                    (1024, _, true) => "attention_1024_causal",
                    (4096, 128, false) => "attention_4096_d128",
                    (4096, 128, true) => "attention_4096_d128_causal",
                    (4096, _, false) => "attention_4096",
                    (4096, _, true) => "attention_4096_causal",
                    (_, _, false) => "attention_16384",
                    (_, _, true) => "attention_16384_causal",
                },
                kernel: fused_attention::attn_fwd_kernel()?,
                arrays: Vec::new(),
                constexprs: vec![
                    ("HEAD_DIM", d),
                    ("BLOCK_M", bm),
                    ("BLOCK_N", bn),
                    ("CAUSAL", causal as i64),
                ],
                num_warps: warps,
                scalars: ["q", "k", "v", "o"]
                    .iter()
                    .flat_map(|t| {
                        let names: [&'static str; 4] = match *t {
                            "q" => ["stride_qz", "stride_qh", "stride_qm", "stride_qk"],
                            "k" => ["stride_kz", "stride_kh", "stride_kn", "stride_kk"],
                            "v" => ["stride_vz", "stride_vh", "stride_vn", "stride_vk"],
                            _ => ["stride_oz", "stride_oh", "stride_om", "stride_ok"],
                        };
                        names.into_iter().zip([
                            stride(h * n_ctx * d),
                            stride(n_ctx * d),
                            stride(d),
                            stride(1),
                        ])
                    })
                    .chain([
                        ("sm_scale", Val::F(0.5)),
                        ("H", Val::I(h)),
                        ("N_CTX", Val::I(n_ctx)),
                    ])
                    .collect(),
                programs: [(n_ctx / bm) as usize, (z * h) as usize, 1],
            });
        }
    }
    Ok(v)
}

/// bench.py's dtype names.
fn dtype_name(d: DType) -> Result<&'static str> {
    Ok(match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U32 => "uint32",
        DType::Bool => "bool",
        other => {
            return Err(Error::Unsupported(format!(
                "emit_gpu_bench: bench.py has no tensor dtype for {other}"
            )))
        }
    })
}

/// Every generated file, `(name, contents)`, manifest last; as a CUDA launch prints them,
/// with the integer-argument specialisation (`Launch::specialize_integers`).
pub fn generate() -> Result<Vec<(String, String)>> {
    generate_with(true)
}

/// [`generate`], with or without the integer-argument specialisation (for A/B runs).
pub fn generate_with(int_spec: bool) -> Result<Vec<(String, String)>> {
    let target = HardwareProfile::of(Chip::Sm90);
    let mut files = Vec::new();
    let mut entries = Vec::new();
    for c in cases()? {
        let sig = c
            .constexprs
            .iter()
            .fold(Signature::new(), |s, (n, v)| s.constexpr(n, *v));
        let sig = c.arrays.iter().fold(sig, |s, d| s.array(*d));
        let general = c.kernel.specialize(&sig)?;
        let ints: IntSpec = general
            .params
            .iter()
            .enumerate()
            .filter(|(_, p)| int_spec && specializable(p.kind))
            .filter_map(
                |(i, p)| match c.scalars.iter().find(|(n, _)| *n == p.name) {
                    Some((_, Val::I(v))) => IntFact::of(*v).map(|f| (i, f)),
                    _ => None,
                },
            )
            .collect();
        let kernel = c.kernel.specialize_for_ints(&sig, None, &ints)?;
        let opts = LaunchOptions::default()
            .num_warps(c.num_warps)
            .target(target.clone());
        let prog: std::sync::Arc<CudaProgram> = codegen::cuda(&kernel, &opts)?;
        if let Some(rw) = kernel.params.iter().find(|p| p.stored && p.loaded) {
            return Err(Error::Unsupported(format!(
                "emit_gpu_bench: case {}: output `{}` is also read; bench.py passes outputs \
                 uninitialised",
                c.case, rw.name
            )));
        }
        let mut params = Vec::new();
        for (&i, dt) in prog.inputs.iter().zip(&prog.input_dtypes) {
            let p = &kernel.params[i];
            let dtype = dtype_name(*dt)?;
            match p.kind {
                ParamKind::Scalar(_) => {
                    let v = c
                        .scalars
                        .iter()
                        .find(|(n, _)| *n == p.name)
                        .map(|(_, v)| *v)
                        .ok_or_else(|| {
                            Error::InvalidArgument(format!(
                                "emit_gpu_bench: case {}: no value for scalar `{}`",
                                c.case, p.name
                            ))
                        })?;
                    let value: Value = match v {
                        Val::I(i) => json!(i),
                        Val::F(f) => json!(f),
                    };
                    params.push(
                        json!({"name": p.name, "role": "scalar", "dtype": dtype, "value": value}),
                    );
                }
                ParamKind::Ptr(_) => {
                    params.push(json!({"name": p.name, "role": "input", "dtype": dtype}))
                }
            }
        }
        for (n, dt) in prog.output_names.iter().zip(&prog.output_dtypes) {
            params.push(json!({"name": n, "role": "output", "dtype": dtype_name(*dt)?}));
        }
        let grid = prog.grid_blocks(c.programs)?;
        let file = format!("{}.cu", c.case);
        entries.push(json!({
            "case": c.case,
            "file": file,
            "entry": prog.name,
            "grid": grid,
            "block": [prog.threads_per_block, 1, 1],
            "shared_mem": prog.dynamic_shared_mem_bytes,
            "static_shared_mem": prog.shared_mem_bytes,
            "constexprs": c.constexprs.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
            "num_warps": c.num_warps,
            "arch": prog.nvrtc_arch("sm_90"),
            "params": params,
        }));
        files.push((file, prog.standalone()));
    }
    let manifest = serde_json::to_string_pretty(&json!({
        "generator": "cargo run --release --example emit_gpu_bench",
        "target": "sm_90",
        "kernels": entries,
    }))
    .map_err(|e| Error::InvalidArgument(format!("manifest: {e}")))?;
    files.push(("manifest.json".into(), manifest + "\n"));
    Ok(files)
}

fn main() -> Result<()> {
    // `--no-int-spec` prints the kernels without the integer-argument specialisation.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let int_spec = !args.iter().any(|a| a == "--no-int-spec");
    let dir = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gpu/generated")
        });
    std::fs::create_dir_all(&dir)?;
    for (name, text) in generate_with(int_spec)? {
        std::fs::write(dir.join(&name), text)?;
        println!("wrote {}", dir.join(&name).display());
    }
    Ok(())
}
