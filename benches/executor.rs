//! The CPU executor against MLX CPU built-ins, measured in the same run, plus this
//! machine's copy bandwidth, on the examples' kernels (benches/common).
//!
//! `cargo bench --bench executor`: criterion prints time and throughput per case (GB/s
//! for memory-bound kernels; for matmul, FLOP/s shown as "elem/s"). Memory-bound bytes
//! count each input read once and each output written once.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use triton_metal::runtime::{cdiv, grid, out, out_like, Target};
use triton_metal::{mlx, Array, DType::F32};

mod common;

/// The interpreter and the compiled executor, each measured in every case.
const CPU_TARGETS: [(&str, Target); 2] = [
    ("triton_metal_cpu", Target::Cpu),
    ("triton_metal_cpu_compiled", Target::CpuCompiled),
];

fn copy(c: &mut Criterion) {
    let n = 16 << 20;
    let mut g = c.benchmark_group("copy");
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    g.throughput(Throughput::Bytes((2 * n * 4) as u64));
    // Best case: the destination is already faulted in and stays allocated.
    g.bench_function("memcpy_16M_f32", |b| {
        b.iter(|| dst.copy_from_slice(criterion::black_box(&src)))
    });
    // The same copy split over every core, as the executor splits a kernel's programs:
    // the machine's copy bandwidth that kernels are measured against.
    g.bench_function("memcpy_16M_f32_all_cores", |b| {
        use rayon::prelude::*;
        b.iter(|| {
            dst.par_chunks_mut(1 << 16)
                .zip(criterion::black_box(&src).par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s))
        })
    });
    // What a fresh output faces: MLX allocates every output anew, and glibc serves 64 MB
    // with a fresh `mmap`, so the copy also pays the page faults and the kernel's zeroing.
    g.bench_function("fresh_16M_f32", |b| {
        b.iter(|| criterion::black_box(&src).to_vec())
    });
    // The same with the transparent-huge-page advice the executor gives large outputs
    // (src/exec/memory.rs), before the first write.
    #[cfg(target_os = "linux")]
    g.bench_function("fresh_thp_16M_f32", |b| {
        b.iter(|| {
            let mut v: Vec<f32> = Vec::with_capacity(n);
            let huge = 2usize << 20;
            let start = v.as_mut_ptr() as usize;
            let (lo, hi) = (start.next_multiple_of(huge), (start + n * 4) / huge * huge);
            if hi > lo {
                // SAFETY: `[lo, hi)` lies inside `v`'s allocation; the advice changes only
                // how pages are backed, never their contents.
                unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
            }
            v.extend_from_slice(criterion::black_box(&src));
            v
        })
    });
    g.finish();
}

fn vector_add(c: &mut Criterion) {
    let n = 16 << 20;
    let mut g = c.benchmark_group("vector_add_16M_f32");
    g.sample_size(10);
    let x = mlx::random::uniform(&[n], F32, -1.0, 1.0, 1).unwrap();
    let y = mlx::random::uniform(&[n], F32, -1.0, 1.0, 2).unwrap();
    Array::eval_all(&[&x, &y]).unwrap();
    g.throughput(Throughput::Bytes((3 * n * 4) as u64));
    let k = common::vector_add::add_kernel().unwrap();
    for (name, target) in CPU_TARGETS {
        for block in [1024, 4096] {
            g.bench_function(format!("{name}_block{block}"), |b| {
                b.iter(|| {
                    let o = k
                        .launch()
                        .grid(grid(move |m| [cdiv(n, m["BLOCK_SIZE"])]))
                        .args((&x, &y, out_like(&x), n as i32))
                        .constexpr("BLOCK_SIZE", block)
                        .target(target)
                        .run()
                        .unwrap();
                    o[0].eval().unwrap();
                })
            });
        }
    }
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| mlx::add(&x, &y).unwrap().eval().unwrap())
    });
    g.finish();
}

fn row_sum(c: &mut Criterion) {
    let (r, cols) = (4096usize, 4096usize);
    let mut g = c.benchmark_group("row_sum_4096x4096_f32");
    g.sample_size(10);
    let m = mlx::random::uniform(&[r, cols], F32, -1.0, 1.0, 3).unwrap();
    m.eval().unwrap();
    g.throughput(Throughput::Bytes((r * cols * 4 + r * 4) as u64));
    let k = common::row_sum::row_sum_kernel().unwrap();
    // The GPU-sized block (four loop iterations per row) and a whole row per iteration.
    for (name, target) in CPU_TARGETS {
        for block in [1024, 4096] {
            g.bench_function(format!("{name}_block{block}"), |b| {
                b.iter(|| {
                    let o = k
                        .launch()
                        .grid([r])
                        .args((&m, out(&[r], F32), cols as i32))
                        .constexpr("BLOCK_SIZE", block)
                        .target(target)
                        .run()
                        .unwrap();
                    o[0].eval().unwrap();
                })
            });
        }
    }
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| mlx::sum(&m, Some(&[1]), false).unwrap().eval().unwrap())
    });
    g.finish();
}

fn softmax_and_layer_norm(c: &mut Criterion) {
    let (r, cols) = (4096usize, 1024usize);
    let s = mlx::random::uniform(&[r, cols], F32, -1.0, 1.0, 4).unwrap();
    let w = mlx::full(&[cols], 1.0, F32).unwrap();
    let bias = mlx::zeros(&[cols], F32).unwrap();
    Array::eval_all(&[&s, &w, &bias]).unwrap();

    let mut g = c.benchmark_group("softmax_4096x1024_f32");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * r * cols * 4) as u64));
    let k = common::fused_softmax::softmax_kernel().unwrap();
    let c32 = cols as i32;
    for (name, target) in CPU_TARGETS {
        g.bench_function(name, |b| {
            b.iter(|| {
                let o = k
                    .launch()
                    .grid([r])
                    .args((out(&[r, cols], F32), &s, c32, c32, c32))
                    .constexpr("BLOCK_SIZE", cols as i64)
                    .target(target)
                    .run()
                    .unwrap();
                o[0].eval().unwrap();
            })
        });
    }
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| mlx::softmax(&s, &[1], true).unwrap().eval().unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("layer_norm_4096x1024_f32");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * r * cols * 4) as u64));
    let k = common::layer_norm::layer_norm_kernel().unwrap();
    for (name, target) in CPU_TARGETS {
        g.bench_function(name, |b| {
            b.iter(|| {
                let o = k
                    .launch()
                    .grid([r])
                    .args((&s, out(&[r, cols], F32), &w, &bias, c32, c32, 1e-5f32))
                    .constexpr("BLOCK_SIZE", cols as i64)
                    .target(target)
                    .run()
                    .unwrap();
                o[0].eval().unwrap();
            })
        });
    }
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| {
            mlx::layer_norm(&s, Some(&w), Some(&bias), 1e-5)
                .unwrap()
                .eval()
                .unwrap()
        })
    });
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let n = 1024usize;
    let mut g = c.benchmark_group("matmul_1024_f32");
    g.sample_size(10);
    let a = mlx::random::uniform(&[n, n], F32, -1.0, 1.0, 5).unwrap();
    let b = mlx::random::uniform(&[n, n], F32, -1.0, 1.0, 6).unwrap();
    Array::eval_all(&[&a, &b]).unwrap();
    g.throughput(Throughput::Elements((2 * n * n * n) as u64));
    let k = common::matmul::matmul_kernel().unwrap();
    let d = n as i32;
    for (name, target) in CPU_TARGETS {
        g.bench_function(name, |bch| {
            bch.iter(|| {
                let o = k
                    .launch()
                    .grid([(n / 64) * (n / 64)])
                    .args((&a, &b, out(&[n, n], F32), d, d, d, d, 1, d, 1, d, 1))
                    .constexpr("BLOCK_SIZE_M", 64)
                    .constexpr("BLOCK_SIZE_N", 64)
                    .constexpr("BLOCK_SIZE_K", 64)
                    .constexpr("GROUP_SIZE_M", 8)
                    .target(target)
                    .run()
                    .unwrap();
                o[0].eval().unwrap();
            })
        });
    }
    g.bench_function("mlx_cpu", |bch| {
        bch.iter(|| mlx::matmul(&a, &b).unwrap().eval().unwrap())
    });
    g.finish();
}

/// Triton's block-pointer matmul (`make_block_ptr` + `advance` in the K loop,
/// boundary-checked loads), the same tiling as `matmul`'s pointer kernel.
#[triton_metal::jit]
#[rustfmt::skip]
fn block_ptr_matmul_kernel(
    a_ptr: Ptr<F32>, b_ptr: Ptr<F32>, c_ptr: Ptr<F32>,
    M: i32, N: i32, K: i32,
    stride_am: i32, stride_ak: i32, stride_bk: i32, stride_bn: i32, stride_cm: i32, stride_cn: i32,
    BLOCK_M: Constexpr, BLOCK_N: Constexpr, BLOCK_K: Constexpr,
) {
    let pid_m = tl::program_id(axis = 0);
    let pid_n = tl::program_id(axis = 1);
    let mut a_blk = tl::make_block_ptr(base = a_ptr, shape = (M, K), strides = (stride_am, stride_ak),
        offsets = (pid_m * BLOCK_M, 0), block_shape = (BLOCK_M, BLOCK_K), order = (1, 0));
    let mut b_blk = tl::make_block_ptr(base = b_ptr, shape = (K, N), strides = (stride_bk, stride_bn),
        offsets = (0, pid_n * BLOCK_N), block_shape = (BLOCK_K, BLOCK_N), order = (1, 0));
    let mut acc = tl::zeros((BLOCK_M, BLOCK_N), dtype = F32);
    for _k in tl::range(0, K, BLOCK_K) {
        let a = tl::load(a_blk, boundary_check = (0, 1), padding_option = "zero");
        let b = tl::load(b_blk, boundary_check = (0, 1), padding_option = "zero");
        acc = tl::dot(a, b, acc = acc);
        a_blk = tl::advance(a_blk, (0, BLOCK_K));
        b_blk = tl::advance(b_blk, (BLOCK_K, 0));
    }
    let c_blk = tl::make_block_ptr(base = c_ptr, shape = (M, N), strides = (stride_cm, stride_cn),
        offsets = (pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape = (BLOCK_M, BLOCK_N), order = (1, 0));
    tl::store(c_blk, acc, boundary_check = (0, 1));
}

/// A 512³ matmul through block pointers against the pointer kernel, compiled.
fn block_ptr_matmul(c: &mut Criterion) {
    let n = 512usize;
    let mut g = c.benchmark_group("matmul_512_f32_compiled");
    g.sample_size(20);
    let a = mlx::random::uniform(&[n, n], F32, -1.0, 1.0, 5).unwrap();
    let b = mlx::random::uniform(&[n, n], F32, -1.0, 1.0, 6).unwrap();
    Array::eval_all(&[&a, &b]).unwrap();
    g.throughput(Throughput::Elements((2 * n * n * n) as u64));
    let d = n as i32;
    let blk = block_ptr_matmul_kernel().unwrap();
    g.bench_function("block_ptr", |bch| {
        bch.iter(|| {
            let o = blk
                .launch()
                .grid([n / 64, n / 64])
                .args((&a, &b, out(&[n, n], F32), d, d, d, d, 1, d, 1, d, 1))
                .constexpr("BLOCK_M", 64)
                .constexpr("BLOCK_N", 64)
                .constexpr("BLOCK_K", 64)
                .target(Target::CpuCompiled)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
    let ptr = common::matmul::matmul_kernel().unwrap();
    g.bench_function("pointer", |bch| {
        bch.iter(|| {
            let o = ptr
                .launch()
                .grid([(n / 64) * (n / 64)])
                .args((&a, &b, out(&[n, n], F32), d, d, d, d, 1, d, 1, d, 1))
                .constexpr("BLOCK_SIZE_M", 64)
                .constexpr("BLOCK_SIZE_N", 64)
                .constexpr("BLOCK_SIZE_K", 64)
                .constexpr("GROUP_SIZE_M", 8)
                .target(Target::CpuCompiled)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    copy,
    vector_add,
    row_sum,
    softmax_and_layer_norm,
    matmul,
    block_ptr_matmul
);
criterion_main!(benches);
