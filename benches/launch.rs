//! Host time of one launch through MLX's custom kernels, nothing evaluated: the examples'
//! kernels (vector add, fused softmax, layer_norm, the tutorial matmul in f16, fused
//! attention) launched with `Target::Metal` (`fast::metal_kernel`) and `Target::Cuda`
//! (`fast::cuda_kernel`) on tiny arrays, as a user launches them (`launch()...run()`), and
//! the parts of a launch that find its program (`Launch::specialize`, `Launch::msl`,
//! `Launch::cuda`).
//!
//! On Linux MLX is a CPU build: a Metal launch makes MLX's `metal_kernel` function and MLX
//! refuses the call ("No Metal back-end") before it builds its kernel source; a CUDA launch
//! stops where MLX refuses to make the `cuda_kernel` function ("No CUDA back-end"). Each
//! timed launch checks that it got that far (or returned arrays, on a machine with the GPU).
//!
//! `cargo bench --bench launch`; `cargo bench --bench launch -- attention` for one kernel.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use triton_metal::runtime::{cdiv, grid, out, out_like, Launch, Target};
use triton_metal::tl::JitKernel;
use triton_metal::{mlx, Array, DType::F16, DType::F32, Error};

mod common;
use common::{fused_softmax, layer_norm, matmul, vector_add};

#[path = "../examples/fused_attention.rs"]
#[allow(dead_code)]
mod fused_attention;

/// A kernel and a function configuring one launch of it (without a target).
struct Case {
    name: &'static str,
    kernel: JitKernel,
    launch: Box<dyn for<'k> Fn(&'k JitKernel) -> Launch<'k>>,
}

fn cases() -> triton_metal::Result<Vec<Case>> {
    let x = mlx::random::uniform(&[16], F32, -1.0, 1.0, 1)?;
    let y = mlx::random::uniform(&[16], F32, -1.0, 1.0, 2)?;
    let rows = mlx::random::normal(&[2, 64], F32, 3)?;
    let rows16 = mlx::astype(&rows, F16)?;
    let w = mlx::random::uniform(&[64], F16, 0.5, 1.5, 5)?;
    let b = mlx::random::uniform(&[64], F16, -0.5, 0.5, 6)?;
    let a = mlx::astype(&mlx::random::normal(&[16, 16], F32, 7)?, F16)?;
    let bm = mlx::astype(&mlx::random::normal(&[16, 16], F32, 8)?, F16)?;
    let qkv: Vec<Array> = (0..3)
        .map(|i| mlx::astype(&mlx::random::normal(&[1, 2, 16, 64], F32, 9 + i)?, F16))
        .collect::<triton_metal::Result<_>>()?;
    let arrays: Vec<&Array> = [&x, &y, &rows, &rows16, &w, &b, &a, &bm]
        .into_iter()
        .chain(&qkv)
        .collect();
    Array::eval_all(&arrays)?;
    Ok(vec![
        Case {
            name: "vector_add",
            kernel: vector_add::add_kernel()?,
            launch: Box::new(move |k| {
                k.launch()
                    .grid(grid(|meta| [cdiv(16, meta["BLOCK_SIZE"])]))
                    .args((&x, &y, out_like(&x), 16))
                    .constexpr("BLOCK_SIZE", 1024)
            }),
        },
        Case {
            name: "softmax",
            kernel: fused_softmax::softmax_kernel()?,
            launch: Box::new(move |k| {
                k.launch()
                    .grid([2])
                    .args((out(&[2, 64], F32), &rows, 64, 64, 64))
                    .constexpr("BLOCK_SIZE", 64)
            }),
        },
        Case {
            name: "layer_norm",
            kernel: layer_norm::layer_norm_kernel()?,
            launch: Box::new(move |k| {
                k.launch()
                    .grid([2])
                    .args((&rows16, out(&[2, 64], F16), &w, &b, 64, 64, 1e-5f32))
                    .constexpr("BLOCK_SIZE", 64)
                    .num_warps(1)
            }),
        },
        Case {
            name: "matmul_f16",
            kernel: matmul::matmul_kernel()?,
            launch: Box::new(move |k| {
                k.launch()
                    .grid(grid(|meta| {
                        [cdiv(16, meta["BLOCK_SIZE_M"]) * cdiv(16, meta["BLOCK_SIZE_N"])]
                    }))
                    .args((
                        &a,
                        &bm,
                        out(&[16, 16], F16),
                        16,
                        16,
                        16,
                        16,
                        1,
                        16,
                        1,
                        16,
                        1,
                    ))
                    .constexpr("BLOCK_SIZE_M", 128)
                    .constexpr("BLOCK_SIZE_N", 128)
                    .constexpr("BLOCK_SIZE_K", 64)
                    .constexpr("GROUP_SIZE_M", 8)
                    .num_warps(8)
            }),
        },
        Case {
            name: "attention",
            kernel: fused_attention::attn_fwd_kernel()?,
            launch: Box::new(move |k| {
                let (sz, sh, sm) = (2 * 16 * 64, 16 * 64, 64);
                k.launch()
                    .grid(grid(|meta| [cdiv(16, meta["BLOCK_M"]), 2]))
                    .args((
                        &qkv[0],
                        &qkv[1],
                        &qkv[2],
                        out(&[1, 2, 16, 64], F16),
                        0.125f32,
                        sz,
                        sh,
                        sm,
                        1,
                        sz,
                        sh,
                        sm,
                        1,
                        sz,
                        sh,
                        sm,
                        1,
                        sz,
                        sh,
                        sm,
                        1,
                        2,
                        16,
                    ))
                    .constexpr("HEAD_DIM", 64)
                    .constexpr("BLOCK_M", 128)
                    .constexpr("BLOCK_N", 64)
                    .constexpr("CAUSAL", 0)
                    .num_warps(4)
            }),
        },
    ])
}

/// Runs one launch; without the GPU, MLX's refusal (which `refusal` names) is as far as a
/// launch gets, and anything else is a failure of the bench.
fn run_once(launch: Launch<'_>, refusal: &str) {
    match launch.run() {
        Ok(outs) => drop(outs),
        Err(Error::Mlx(m)) if m.contains(refusal) => {}
        Err(e) => panic!("launch failed before reaching MLX: {e}"),
    }
}

fn bench(c: &mut Criterion) {
    let cases = cases().unwrap_or_else(|e| panic!("{e}"));
    for case in &cases {
        let mut g = c.benchmark_group(case.name);
        g.warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let make = || (case.launch)(&case.kernel);
        g.bench_function("run_metal", |b| {
            b.iter(|| run_once(make().target(Target::Metal), "No Metal back-end"))
        });
        g.bench_function("run_cuda", |b| {
            b.iter(|| run_once(make().target(Target::Cuda), "No CUDA back-end"))
        });
        g.bench_function("specialize", |b| {
            b.iter(|| make().specialize().unwrap_or_else(|e| panic!("{e}")))
        });
        g.bench_function("msl", |b| {
            b.iter(|| make().msl().unwrap_or_else(|e| panic!("{e}")))
        });
        g.bench_function("cuda", |b| {
            b.iter(|| make().cuda().unwrap_or_else(|e| panic!("{e}")))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
