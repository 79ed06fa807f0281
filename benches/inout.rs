//! What updating arrays in place (`inout`) costs on the CPU targets against the same kernel
//! writing fresh outputs (`out`), measured in the same run: a memory-bound scale of 16M f32
//! and the `adam` example's fused optimizer step on 4M parameters.
//!
//! `cargo bench --bench inout`: criterion prints time and throughput per case. Bytes count
//! what the `out` kernel moves (each input read once, each output written once); the
//! `inout` launch also copies each updated array into its output before the programs run.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use triton_metal::runtime::{cdiv, grid, inout, out_like, Target};
use triton_metal::{jit, mlx, tl, Array, DType::F32};

#[path = "../examples/adam.rs"]
#[allow(dead_code)]
mod adam;

const CPU_TARGETS: [(&str, Target); 2] =
    [("cpu", Target::Cpu), ("cpu_compiled", Target::CpuCompiled)];

/// `x * s`, written through the same pointer (`inout`) or a second one (`out`).
#[jit]
fn scale_in_place(x_ptr: Ptr<F32>, s: f32, n: i32, BLOCK: Constexpr) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let x = tl::load(x_ptr + offs, mask = offs < n);
    tl::store(x_ptr + offs, x * s, mask = offs < n);
}

#[jit]
fn scale_to(x_ptr: Ptr<F32>, y_ptr: Ptr<F32>, s: f32, n: i32, BLOCK: Constexpr) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let x = tl::load(x_ptr + offs, mask = offs < n);
    tl::store(y_ptr + offs, x * s, mask = offs < n);
}

/// The `adam` example's step (`DECOUPLED = 1`: AdamW) reading and writing separate arrays.
#[jit]
fn adamw_step_to(
    param_ptr: Ptr<F32>,
    grad_ptr: Ptr<F32>,
    m_ptr: Ptr<F32>,
    v_ptr: Ptr<F32>,
    param_out: Ptr<F32>,
    m_out: Ptr<F32>,
    v_out: Ptr<F32>,
    n: i32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias1: f32,
    bias2: f32,
    BLOCK: Constexpr,
) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let mask = offs < n;
    let p = tl::load(param_ptr + offs, mask = mask);
    let g = tl::load(grad_ptr + offs, mask = mask);
    let m = tl::load(m_ptr + offs, mask = mask);
    let v = tl::load(v_ptr + offs, mask = mask);
    let p = p * (1.0 - lr * weight_decay);
    let m = beta1 * m + (1.0 - beta1) * g;
    let v = beta2 * v + (1.0 - beta2) * g * g;
    let p = p - lr * (m / bias1) / (tl::sqrt(v / bias2) + eps);
    tl::store(param_out + offs, p, mask = mask);
    tl::store(m_out + offs, m, mask = mask);
    tl::store(v_out + offs, v, mask = mask);
}

fn scale(c: &mut Criterion) {
    let n = 16 << 20;
    let mut g = c.benchmark_group("scale_16M_f32");
    g.sample_size(10);
    let x = mlx::random::uniform(&[n], F32, -1.0, 1.0, 1).unwrap();
    x.eval().unwrap();
    g.throughput(Throughput::Bytes((2 * n * 4) as u64));
    let (kin, kout) = (scale_in_place().unwrap(), scale_to().unwrap());
    for (name, target) in CPU_TARGETS {
        g.bench_function(format!("{name}_out"), |b| {
            b.iter(|| {
                let o = kout
                    .launch()
                    .grid(grid(move |m| [cdiv(n, m["BLOCK"])]))
                    .args((&x, out_like(&x), 2.0f32, n as i32))
                    .constexpr("BLOCK", 4096)
                    .target(target)
                    .run()
                    .unwrap();
                o[0].eval().unwrap();
            })
        });
        g.bench_function(format!("{name}_inout"), |b| {
            b.iter(|| {
                let o = kin
                    .launch()
                    .grid(grid(move |m| [cdiv(n, m["BLOCK"])]))
                    .args((inout(&x), 2.0f32, n as i32))
                    .constexpr("BLOCK", 4096)
                    .target(target)
                    .run()
                    .unwrap();
                o[0].eval().unwrap();
            })
        });
    }
    g.finish();
}

fn adamw(c: &mut Criterion) {
    let n = 4 << 20;
    let mut g = c.benchmark_group("adamw_4M_f32");
    g.sample_size(10);
    let p = mlx::random::normal(&[n], F32, 1).unwrap();
    let grad = mlx::random::normal(&[n], F32, 2).unwrap();
    let m = mlx::random::normal(&[n], F32, 3).unwrap();
    let v = mlx::random::uniform(&[n], F32, 1.0e-4, 1.0e-2, 4).unwrap();
    Array::eval_all(&[&p, &grad, &m, &v]).unwrap();
    // 4 arrays read, 3 written.
    g.throughput(Throughput::Bytes((7 * n * 4) as u64));
    let (kin, kout) = (adam::adam_step().unwrap(), adamw_step_to().unwrap());
    let hyper = (
        1.0e-3f32, 0.9f32, 0.999f32, 1.0e-8f32, 0.1f32, 0.1f32, 0.001f32,
    );
    for (name, target) in CPU_TARGETS {
        g.bench_function(format!("{name}_out"), |b| {
            b.iter(|| {
                let (lr, b1, b2, eps, wd, c1, c2) = hyper;
                let o = kout
                    .launch()
                    .grid(grid(move |m| [cdiv(n, m["BLOCK"])]))
                    .args((
                        &p,
                        &grad,
                        &m,
                        &v,
                        out_like(&p),
                        out_like(&m),
                        out_like(&v),
                        n as i32,
                        lr,
                        b1,
                        b2,
                        eps,
                        wd,
                        c1,
                        c2,
                    ))
                    .constexpr("BLOCK", 1024)
                    .target(target)
                    .run()
                    .unwrap();
                Array::eval_all(&o.iter().collect::<Vec<_>>()).unwrap();
            })
        });
        g.bench_function(format!("{name}_inout"), |b| {
            b.iter(|| {
                let (lr, b1, b2, eps, wd, c1, c2) = hyper;
                let o = kin
                    .launch()
                    .grid(grid(move |m| [cdiv(n, m["BLOCK"])]))
                    .args((
                        inout(&p),
                        &grad,
                        inout(&m),
                        inout(&v),
                        n as i32,
                        lr,
                        b1,
                        b2,
                        eps,
                        wd,
                        c1,
                        c2,
                    ))
                    .constexpr("BLOCK", 1024)
                    .constexpr("DECOUPLED", 1)
                    .target(target)
                    .run()
                    .unwrap();
                Array::eval_all(&o.iter().collect::<Vec<_>>()).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, scale, adamw);
criterion_main!(benches);
