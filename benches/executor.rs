//! CPU executor against MLX CPU built-ins, in the same run, plus this machine's copy
//! bandwidth and the DSL-to-verified-IR build time of each example kernel.
//!
//! `cargo bench --bench executor`; criterion prints time and throughput per case
//! (GB/s for memory-bound kernels, FLOP/s as "elem/s" for matmul).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use triton_metal::runtime::{cdiv, grid, out, out_like, Target};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{
    mlx, Array,
    DType::{F32, I32},
};

fn vector_add() -> JitKernel {
    tl::jit("add_kernel", |k| {
        let (x_ptr, y_ptr, out_ptr) = (
            k.ptr(F32, "x_ptr"),
            k.ptr(F32, "y_ptr"),
            k.ptr(F32, "output_ptr"),
        );
        let n = k.scalar(I32, "n_elements");
        let block = k.constexpr("BLOCK_SIZE");
        let offsets = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offsets.lt(n);
        let x = tl::load(x_ptr + offsets).mask(mask);
        let y = tl::load(y_ptr + offsets).mask(mask);
        tl::store(out_ptr + offsets, x + y).mask(mask);
    })
    .expect("vector add builds")
}

fn row_sum() -> JitKernel {
    tl::jit("row_sum", |k| {
        let x_ptr = k.ptr(F32, "x_ptr");
        let out_ptr = k.ptr(F32, "out_ptr");
        let n_cols = k.scalar(I32, "n_cols");
        let block = k.constexpr("BLOCK_SIZE");
        let row = tl::program_id(0);
        let cols = tl::arange(0, block);
        let acc = tl::range(0, n_cols, block).fold(tl::zeros([block], F32), |start, acc| {
            let c = start + cols;
            acc + tl::load(x_ptr + row * n_cols + c)
                .mask(c.lt(n_cols))
                .other(0.0)
        });
        tl::store(out_ptr + row, acc.sum(0));
    })
    .expect("row sum builds")
}

fn softmax() -> JitKernel {
    tl::jit("softmax_kernel", |k| {
        let output_ptr = k.ptr(F32, "output_ptr");
        let input_ptr = k.ptr(F32, "input_ptr");
        let n_cols = k.scalar(I32, "n_cols");
        let block = k.constexpr("BLOCK_SIZE");
        let row = tl::program_id(0);
        let cols = tl::arange(0, block);
        let mask = cols.lt(n_cols);
        let x = tl::load(input_ptr + row * n_cols + cols)
            .mask(mask)
            .other(f32::NEG_INFINITY);
        let num = (x - x.max(0)).exp();
        tl::store(output_ptr + row * n_cols + cols, num / num.sum(0)).mask(mask);
    })
    .expect("softmax builds")
}

fn layer_norm() -> JitKernel {
    tl::jit("layer_norm_fwd", |k| {
        let (x_ptr, y_ptr, w_ptr, b_ptr) = (
            k.ptr(F32, "X"),
            k.ptr(F32, "Y"),
            k.ptr(F32, "W"),
            k.ptr(F32, "B"),
        );
        let n = k.scalar(I32, "N");
        let eps = k.scalar(F32, "eps");
        let block = k.constexpr("BLOCK_SIZE");
        let row = tl::program_id(0);
        let cols = tl::arange(0, block);
        let mask = cols.lt(n);
        let x = tl::load(x_ptr + row * n + cols).mask(mask).other(0.0);
        let mean = x.sum(0) / n;
        let d = tl::where_(mask, x - mean, 0.0);
        let rstd = tl::rsqrt((d * d).sum(0) / n + eps);
        let w = tl::load(w_ptr + cols).mask(mask);
        let b = tl::load(b_ptr + cols).mask(mask);
        tl::store(y_ptr + row * n + cols, d * rstd * w + b).mask(mask);
    })
    .expect("layer norm builds")
}

fn matmul() -> JitKernel {
    tl::jit("matmul_kernel", |k| {
        let (a_ptr, b_ptr, c_ptr) = (
            k.ptr(F32, "a_ptr"),
            k.ptr(F32, "b_ptr"),
            k.ptr(F32, "c_ptr"),
        );
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let bm = k.constexpr("BLOCK_SIZE_M");
        let bn = k.constexpr("BLOCK_SIZE_N");
        let bk = k.constexpr("BLOCK_SIZE_K");
        let pid = tl::program_id(0);
        let num_pid_n = tl::cdiv(n, bn);
        let pid_m = tl::floordiv(pid, num_pid_n);
        let pid_n = pid % num_pid_n;
        let offs_m = pid_m * bm + tl::arange(0, bm);
        let offs_n = pid_n * bn + tl::arange(0, bn);
        let offs_k = tl::arange(0, bk);
        let a_ptrs = a_ptr + offs_m.col() * kk + offs_k.row();
        let b_ptrs = b_ptr + offs_k.col() * n + offs_n.row();
        let (acc, _, _) = tl::range(0, kk, bk).fold(
            (tl::zeros([bm, bn], F32), a_ptrs, b_ptrs),
            |_, (acc, a_ptrs, b_ptrs)| {
                let acc = tl::dot(tl::load(a_ptrs), tl::load(b_ptrs), acc);
                (acc, a_ptrs + bk, b_ptrs + bk * n)
            },
        );
        tl::store(c_ptr + offs_m.col() * n + offs_n.row(), acc)
            .mask(offs_m.col().lt(m) & offs_n.row().lt(n));
    })
    .expect("matmul builds")
}

fn memory_bound(c: &mut Criterion) {
    let n = 16 << 20;
    let mut g = c.benchmark_group("copy");
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    g.throughput(Throughput::Bytes((2 * n * 4) as u64));
    g.bench_function("memcpy_16M_f32", |b| {
        b.iter(|| dst.copy_from_slice(criterion::black_box(&src)))
    });
    g.finish();

    let mut g = c.benchmark_group("vector_add_16M_f32");
    g.sample_size(10);
    let x = mlx::random::uniform(&[n], F32, -1.0, 1.0, 1).unwrap();
    let y = mlx::random::uniform(&[n], F32, -1.0, 1.0, 2).unwrap();
    Array::eval_all(&[&x, &y]).unwrap();
    g.throughput(Throughput::Bytes((3 * n * 4) as u64));
    let k = vector_add();
    g.bench_function("triton_metal_cpu", |b| {
        b.iter(|| {
            let o = k
                .launch()
                .grid(grid(move |m| [cdiv(n, m["BLOCK_SIZE"])]))
                .args((&x, &y, out_like(&x), n as i32))
                .constexpr("BLOCK_SIZE", 4096)
                .target(Target::Cpu)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| mlx::add(&x, &y).unwrap().eval().unwrap())
    });
    g.finish();

    let (r, cols) = (4096usize, 4096usize);
    let mut g = c.benchmark_group("row_sum_4096x4096_f32");
    g.sample_size(10);
    let m = mlx::random::uniform(&[r, cols], F32, -1.0, 1.0, 3).unwrap();
    m.eval().unwrap();
    g.throughput(Throughput::Bytes((r * cols * 4) as u64));
    let k = row_sum();
    g.bench_function("triton_metal_cpu", |b| {
        b.iter(|| {
            let o = k
                .launch()
                .grid([r])
                .args((&m, out(&[r], F32), cols as i32))
                .constexpr("BLOCK_SIZE", 1024)
                .target(Target::Cpu)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| mlx::sum(&m, Some(&[1]), false).unwrap().eval().unwrap())
    });
    g.finish();

    let (r, cols) = (4096usize, 1024usize);
    let s = mlx::random::uniform(&[r, cols], F32, -1.0, 1.0, 4).unwrap();
    let w = mlx::full(&[cols], 1.0, F32).unwrap();
    let bias = mlx::zeros(&[cols], F32).unwrap();
    Array::eval_all(&[&s, &w, &bias]).unwrap();
    let mut g = c.benchmark_group("softmax_4096x1024_f32");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * r * cols * 4) as u64));
    let k = softmax();
    g.bench_function("triton_metal_cpu", |b| {
        b.iter(|| {
            let o = k
                .launch()
                .grid([r])
                .args((out(&[r, cols], F32), &s, cols as i32))
                .constexpr("BLOCK_SIZE", cols as i64)
                .target(Target::Cpu)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
    g.bench_function("mlx_cpu", |b| {
        b.iter(|| mlx::softmax(&s, &[1], true).unwrap().eval().unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("layer_norm_4096x1024_f32");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * r * cols * 4) as u64));
    let k = layer_norm();
    g.bench_function("triton_metal_cpu", |b| {
        b.iter(|| {
            let o = k
                .launch()
                .grid([r])
                .args((&s, out(&[r, cols], F32), &w, &bias, cols as i32, 1e-5f32))
                .constexpr("BLOCK_SIZE", cols as i64)
                .target(Target::Cpu)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
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

fn matmul_bench(c: &mut Criterion) {
    let n = 1024usize;
    let mut g = c.benchmark_group("matmul_1024_f32");
    g.sample_size(10);
    let a = mlx::random::uniform(&[n, n], F32, -1.0, 1.0, 5).unwrap();
    let b = mlx::random::uniform(&[n, n], F32, -1.0, 1.0, 6).unwrap();
    Array::eval_all(&[&a, &b]).unwrap();
    g.throughput(Throughput::Elements((2 * n * n * n) as u64));
    let k = matmul();
    g.bench_function("triton_metal_cpu", |bch| {
        bch.iter(|| {
            let o = k
                .launch()
                .grid([(n / 64) * (n / 64)])
                .args((&a, &b, out(&[n, n], F32), n as i32, n as i32, n as i32))
                .constexpr("BLOCK_SIZE_M", 64)
                .constexpr("BLOCK_SIZE_N", 64)
                .constexpr("BLOCK_SIZE_K", 64)
                .target(Target::Cpu)
                .run()
                .unwrap();
            o[0].eval().unwrap();
        })
    });
    g.bench_function("mlx_cpu", |bch| {
        bch.iter(|| mlx::matmul(&a, &b).unwrap().eval().unwrap())
    });
    g.finish();
}

type BuildCase = (
    &'static str,
    fn() -> JitKernel,
    &'static [(&'static str, i64)],
);

fn build_time(c: &mut Criterion) {
    // DSL -> verified IR for one constexpr set, bypassing the specialisation cache.
    let mut g = c.benchmark_group("build_ir");
    let cases: [BuildCase; 5] = [
        ("vector_add", vector_add, &[("BLOCK_SIZE", 1024)]),
        ("row_sum", row_sum, &[("BLOCK_SIZE", 1024)]),
        ("softmax", softmax, &[("BLOCK_SIZE", 1024)]),
        ("layer_norm", layer_norm, &[("BLOCK_SIZE", 1024)]),
        (
            "matmul",
            matmul,
            &[
                ("BLOCK_SIZE_M", 64),
                ("BLOCK_SIZE_N", 64),
                ("BLOCK_SIZE_K", 32),
            ],
        ),
    ];
    for (name, make, cx) in cases {
        g.bench_function(BenchmarkId::new("specialize", name), |b| {
            b.iter(|| {
                let k = make();
                k.specialize_with(cx).unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, build_time, memory_bound, matmul_bench);
criterion_main!(benches);
