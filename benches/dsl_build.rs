//! DSL-to-verified-IR build time for the example kernels (target: well under 200 µs each).
//!
//! `cargo bench --bench dsl_build`. Each iteration runs the kernel closure for one constexpr
//! set, records the ops, removes dead constants, renumbers and verifies (no cache).

use criterion::{criterion_group, criterion_main, Criterion};
use triton_metal::tl::{JitKernel, Signature};
use triton_metal::DType::F32;

mod common;

/// Each kernel with its constexprs and the dtypes of its arguments (f32 arrays).
fn kernels() -> Vec<(JitKernel, Signature)> {
    let block = || Signature::new().constexpr("BLOCK_SIZE", 1024);
    vec![
        (common::vector_add::add_kernel().expect("builds"), block()),
        (
            common::fused_softmax::softmax_kernel().expect("builds"),
            block(),
        ),
        (
            common::layer_norm::layer_norm_kernel().expect("builds"),
            (0..4).fold(block(), |s, _| s.array(F32)),
        ),
        (common::row_sum::row_sum_kernel().expect("builds"), block()),
        (common::strided::strided_kernel().expect("builds"), block()),
        (
            common::matmul::matmul_kernel().expect("builds"),
            Signature::new()
                .constexpr("BLOCK_SIZE_M", 64)
                .constexpr("BLOCK_SIZE_N", 64)
                .constexpr("BLOCK_SIZE_K", 32)
                .constexpr("GROUP_SIZE_M", 8)
                .array(F32)
                .array(F32)
                .array(F32),
        ),
        (common::dropout::dropout_kernel().expect("builds"), block()),
    ]
}

fn build_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("dsl_build");
    for (k, sig) in kernels() {
        g.bench_function(k.name().to_string(), |b| {
            b.iter(|| k.build_uncached(&sig).expect("builds"))
        });
    }
    g.finish();
}

criterion_group!(benches, build_time);
criterion_main!(benches);
