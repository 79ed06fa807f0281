//! Reference figures measured in the same run as the kernel benches: this machine's memory
//! copy bandwidth and MLX CPU built-ins on the benchmark shapes.
//!
//! `cargo bench --bench reference` prints throughput (GB/s or GFLOP/s) per case.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use triton_metal::{mlx, Array, DType};

fn copy_bandwidth(c: &mut Criterion) {
    let n = 16 << 20;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let mut g = c.benchmark_group("memory");
    // Read + write, as the memory-bound kernels count it.
    g.throughput(Throughput::Bytes((2 * n * 4) as u64));
    g.bench_function("copy_16M_f32", |b| {
        b.iter(|| {
            dst.copy_from_slice(&src);
            criterion::black_box(&mut dst);
        })
    });
    g.finish();
}

fn mlx_builtins(c: &mut Criterion) {
    let mut g = c.benchmark_group("mlx_cpu");
    g.sample_size(10);
    let n = 16 << 20;
    let x = mlx::random::uniform(&[n], DType::F32, -1.0, 1.0, 1).unwrap();
    let y = mlx::random::uniform(&[n], DType::F32, -1.0, 1.0, 2).unwrap();
    Array::eval_all(&[&x, &y]).unwrap();
    g.throughput(Throughput::Bytes((3 * n * 4) as u64));
    g.bench_function(BenchmarkId::new("add", "16M_f32"), |b| {
        b.iter(|| mlx::add(&x, &y).unwrap().eval().unwrap())
    });

    let m = mlx::random::uniform(&[4096, 4096], DType::F32, -1.0, 1.0, 3).unwrap();
    m.eval().unwrap();
    g.throughput(Throughput::Bytes((4096 * 4096 * 4) as u64));
    g.bench_function(BenchmarkId::new("row_sum", "4096x4096_f32"), |b| {
        b.iter(|| mlx::sum(&m, Some(&[1]), false).unwrap().eval().unwrap())
    });

    let s = mlx::random::uniform(&[4096, 1024], DType::F32, -1.0, 1.0, 4).unwrap();
    s.eval().unwrap();
    g.throughput(Throughput::Bytes((2 * 4096 * 1024 * 4) as u64));
    g.bench_function(BenchmarkId::new("softmax", "4096x1024_f32"), |b| {
        b.iter(|| mlx::softmax(&s, &[1], true).unwrap().eval().unwrap())
    });
    let w = mlx::full(&[1024], 1.0, DType::F32).unwrap();
    let bias = mlx::zeros(&[1024], DType::F32).unwrap();
    g.bench_function(BenchmarkId::new("layer_norm", "4096x1024_f32"), |b| {
        b.iter(|| {
            mlx::layer_norm(&s, Some(&w), Some(&bias), 1e-5)
                .unwrap()
                .eval()
                .unwrap()
        })
    });

    let a = mlx::random::uniform(&[1024, 1024], DType::F32, -1.0, 1.0, 5).unwrap();
    a.eval().unwrap();
    g.throughput(Throughput::Elements(2 * 1024 * 1024 * 1024));
    g.bench_function(BenchmarkId::new("matmul", "1024_f32"), |b| {
        b.iter(|| mlx::matmul(&a, &a).unwrap().eval().unwrap())
    });
    g.finish();
}

criterion_group!(benches, copy_bandwidth, mlx_builtins);
criterion_main!(benches);
