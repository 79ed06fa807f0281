//! DSL-to-verified-IR build time for the example kernels (target: well under 200 µs each).
//!
//! `cargo bench --bench dsl_build`. Each iteration runs the kernel closure for one constexpr
//! set, records the ops, removes dead constants, renumbers and verifies (no cache).

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, Criterion};
use triton_metal::tl::JitKernel;

mod common;

fn kernels() -> Vec<(JitKernel, Vec<(&'static str, i64)>)> {
    let block = || vec![("BLOCK_SIZE", 1024)];
    vec![
        (common::vector_add::add_kernel().expect("builds"), block()),
        (
            common::fused_softmax::softmax_kernel().expect("builds"),
            block(),
        ),
        (
            common::layer_norm::layer_norm_kernel().expect("builds"),
            block(),
        ),
        (common::row_sum::row_sum_kernel().expect("builds"), block()),
        (common::strided::strided_kernel().expect("builds"), block()),
        (
            common::matmul::matmul_kernel().expect("builds"),
            vec![
                ("BLOCK_SIZE_M", 64),
                ("BLOCK_SIZE_N", 64),
                ("BLOCK_SIZE_K", 32),
                ("GROUP_SIZE_M", 8),
            ],
        ),
        (common::dropout::dropout_kernel().expect("builds"), block()),
    ]
}

fn build_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("dsl_build");
    for (k, cx) in kernels() {
        let map: BTreeMap<String, i64> = cx.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        g.bench_function(k.name().to_string(), |b| {
            b.iter(|| k.build_uncached(&map).expect("builds"))
        });
    }
    g.finish();
}

criterion_group!(benches, build_time);
criterion_main!(benches);
