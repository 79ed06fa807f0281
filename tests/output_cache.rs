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
}
