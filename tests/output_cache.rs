//! CPU-executor outputs are recycled: a freed large output's buffer serves the next output
//! of the same size (its own process, since the cache is process-wide).

use triton_metal::runtime::{
    cdiv, cpu_output_cache_bytes, grid, out_like, set_cpu_output_cache_limit, Target,
};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{mlx, DType::F32, DType::I32};

/// Writes `x * s` to the first `m` elements of `y` only.
fn scale_prefix() -> JitKernel {
    tl::jit("scale_prefix", |k| {
        let x = k.ptr(F32, "x_ptr");
        let y = k.ptr(F32, "y_ptr");
        let m = k.scalar(I32, "m");
        let s = k.scalar(F32, "s");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(m);
        tl::store(y + offs, tl::load(x + offs).mask(mask) * s).mask(mask);
    })
    .unwrap()
}

#[test]
fn freed_outputs_are_reused_and_fill_values_still_apply() {
    let k = scale_prefix();
    let n = (1 << 20) + 3; // 4 MiB + 12 bytes: above the cache's 1 MiB floor
    let bytes = n * 4;
    let x = mlx::random::uniform(&[n], F32, -1.0, 1.0, 7).unwrap();
    x.eval().unwrap();
    let host: Vec<f32> = x.to_vec().unwrap();
    let run = |m: usize, s: f32, fill: Option<f64>| {
        let o = match fill {
            Some(f) => out_like(&x).fill(f),
            None => out_like(&x),
        };
        let y = k
            .launch()
            .grid(grid(move |meta| [cdiv(n, meta["BLOCK"])]))
            .args((&x, o, m as i32, s))
            .constexpr("BLOCK", 1024)
            .target(Target::Cpu)
            .run()
            .unwrap();
        y[0].to_vec::<f32>().unwrap()
    };
    assert_eq!(cpu_output_cache_bytes(), 0);
    let first = run(n, 2.0, None);
    assert!(first.iter().zip(&host).all(|(y, x)| *y == 2.0 * x));
    // The output array is gone: its buffer waits in the cache.
    assert_eq!(cpu_output_cache_bytes(), bytes);
    // Reused by the next output of that size; a fill value still covers what the kernel
    // leaves unwritten (the old contents 2x never show through).
    let half = n / 2;
    let second = run(half, 3.0, Some(-1.0));
    for (i, (y, x)) in second.iter().zip(&host).enumerate() {
        let want = if i < half { 3.0 * x } else { -1.0 };
        assert_eq!(*y, want, "element {i}");
    }
    assert_eq!(cpu_output_cache_bytes(), bytes);
    // A cap of 0 frees everything and stops caching.
    assert_eq!(set_cpu_output_cache_limit(0), 1 << 30);
    assert_eq!(cpu_output_cache_bytes(), 0);
    let third = run(n, 1.0, None);
    assert!(third.iter().zip(&host).all(|(y, x)| y == x));
    assert_eq!(cpu_output_cache_bytes(), 0);

    // Over the cap, the longest-unused buffers are released first.
    let mib = 1usize << 20;
    set_cpu_output_cache_limit(10 * mib);
    let output_of = |bytes: usize| {
        let m = bytes / 4;
        let x = mlx::zeros(&[m], F32).unwrap();
        let y = k
            .launch()
            .grid(grid(move |meta| [cdiv(m, meta["BLOCK"])]))
            .args((&x, out_like(&x), m as i32, 1.0f32))
            .constexpr("BLOCK", 1024)
            .target(Target::Cpu)
            .run()
            .unwrap();
        y[0].eval().unwrap();
        y
    };
    output_of(4 * mib);
    assert_eq!(cpu_output_cache_bytes(), 4 * mib);
    output_of(5 * mib);
    assert_eq!(cpu_output_cache_bytes(), 9 * mib);
    // 15 MiB would be held: the 4 MiB and then the 5 MiB buffer go.
    output_of(6 * mib);
    assert_eq!(cpu_output_cache_bytes(), 6 * mib);
    // A buffer larger than the cap is never kept.
    output_of(11 * mib);
    assert_eq!(cpu_output_cache_bytes(), 6 * mib);
    // The 6 MiB buffer serves the next 6 MiB output: out of the cache while in use.
    let held = output_of(6 * mib);
    assert_eq!(cpu_output_cache_bytes(), 0);
    drop(held);
    assert_eq!(cpu_output_cache_bytes(), 6 * mib);
}
