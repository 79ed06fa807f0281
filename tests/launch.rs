//! Launching kernels on MLX arrays: outputs, scalars, constexpr caching, and every way a
//! launch can be wrong giving a clear `Err` (never a panic).

use triton_metal::runtime::{cdiv, grid, out, out_like, Target};
use triton_metal::testing::max_abs_diff;
use triton_metal::tl::{self, JitKernel};
use triton_metal::{
    mlx, Array,
    DType::{F16, F32, I32, I64},
    Error,
};

fn scale() -> JitKernel {
    tl::jit("scale", |k| {
        let x = k.ptr(F32, "x_ptr");
        let y = k.ptr(F32, "y_ptr");
        let n = k.scalar(I32, "n");
        let s = k.scalar(F32, "s");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        tl::store(y + offs, tl::load(x + offs).mask(mask) * s).mask(mask);
    })
    .unwrap()
}

fn launch_err(r: triton_metal::Result<Vec<Array>>) -> String {
    let e = r.expect_err("launch must fail");
    assert!(
        matches!(e, Error::Launch { .. } | Error::Build { .. }),
        "{e:?}"
    );
    e.to_string()
}

#[test]
fn outputs_are_lazy_and_compose_with_mlx() {
    let k = scale();
    let n = 1000;
    let x = mlx::random::normal(&[n], F32, 3).unwrap();
    let y = k
        .launch()
        .grid(grid(move |m| [cdiv(n, m["BLOCK"])]))
        .args((&x, out_like(&x).fill(f64::NAN), n as i32, 2.5f32))
        .constexpr("BLOCK", 128)
        .target(Target::Cpu)
        .run()
        .unwrap();
    let z = mlx::add(&y[0], &x).unwrap();
    let want = mlx::multiply(&x, &mlx::full(&[1], 3.5, F32).unwrap()).unwrap();
    assert!(max_abs_diff(&z, &want).unwrap() < 1e-5);
}

#[test]
fn specialisations_are_cached_per_constexpr_set() {
    let k = scale();
    let a = k.specialize_with(&[("BLOCK", 64)]).unwrap();
    let b = k.specialize_with(&[("BLOCK", 64)]).unwrap();
    let c = k.specialize_with(&[("BLOCK", 128)]).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    assert!(!std::sync::Arc::ptr_eq(&a, &c));
}

#[test]
fn unwritten_elements_keep_the_fill() {
    let k = scale();
    let x = Array::from_slice(&[1.0f32; 10], &[10]).unwrap();
    // n = 6: the last four outputs are masked off and keep the poison.
    let y = k
        .launch()
        .grid([1])
        .args((&x, out(&[10], F32).fill(-1.0), 6, 2.0f32))
        .constexpr("BLOCK", 16)
        .run()
        .unwrap();
    assert_eq!(
        y[0].to_vec::<f32>().unwrap(),
        vec![2.0, 2.0, 2.0, 2.0, 2.0, 2.0, -1.0, -1.0, -1.0, -1.0]
    );
}

#[test]
fn bad_launches_are_clear_errors() {
    let k = scale();
    let x = Array::from_slice(&[1.0f32; 8], &[8]).unwrap();
    let xi = Array::from_slice(&[1i32; 8], &[8]).unwrap();
    let base = || k.launch().grid([1]).constexpr("BLOCK", 8);

    let e = launch_err(base().args((&x, out_like(&x), 8)).run());
    assert!(
        e.contains("expected 4 arguments") && e.contains("s: f32"),
        "{e}"
    );
    let e = launch_err(base().args((&xi, out_like(&x), 8, 1.0f32)).run());
    assert!(
        e.contains("`x_ptr`") && e.contains("f32") && e.contains("i32"),
        "{e}"
    );
    let e = launch_err(base().args((&x, &x, 8, 1.0f32)).run());
    assert!(e.contains("`y_ptr`") && e.contains("output"), "{e}");
    let e = launch_err(base().args((&x, out(&[8], F16), 8, 1.0f32)).run());
    assert!(e.contains("`y_ptr`") && e.contains("f16"), "{e}");
    let e = launch_err(base().args((&x, out_like(&x), 1i64 << 40, 1.0f32)).run());
    assert!(e.contains("`n`") && e.contains("does not fit"), "{e}");
    let e = launch_err(base().args((&x, out_like(&x), 8, &x)).run());
    assert!(e.contains("`s`") && e.contains("scalar"), "{e}");
    let e = launch_err(base().args((8, out_like(&x), 8, 1.0f32)).run());
    assert!(
        e.contains("`x_ptr`") && e.contains("array") && e.contains("got the integer 8"),
        "{e}"
    );
    let e = launch_err(base().args((&x, out_like(&x), 8.5f32, 1.0f32)).run());
    assert!(
        e.contains("`n`") && e.contains("scalar of i32, got the float 8.5"),
        "{e}"
    );
    let e = launch_err(
        k.launch()
            .grid([1])
            .args((&x, out_like(&x), 8, 1.0f32))
            .run(),
    );
    assert!(e.contains("BLOCK"), "{e}");
    let e = launch_err(
        k.launch()
            .constexpr("BLOCK", 8)
            .args((&x, out_like(&x), 8, 1.0f32))
            .run(),
    );
    assert!(e.contains("no grid"), "{e}");
    let e = launch_err(
        base()
            .num_warps(3)
            .args((&x, out_like(&x), 8, 1.0f32))
            .run(),
    );
    assert!(e.contains("num_warps"), "{e}");
    let e = launch_err(
        base()
            .constexpr("BLOCK", 6)
            .args((&x, out_like(&x), 8, 1.0f32))
            .run(),
    );
    assert!(
        e.contains("power of two") || e.contains("power of 2"),
        "{e}"
    );
    // A constexpr the kernel does not declare: the error is at the line that gave it.
    let l = base().args((&x, out_like(&x), 8, 1.0f32));
    let (l, line) = (l.constexpr("NOPE", 1), line!());
    let e = launch_err(l.run());
    let at = format!("{}:{line}:", file!());
    assert!(e.contains("NOPE") && e.contains(&at), "{e}");
    let (r, line) = (k.specialize_with(&[("BLOCK", 8), ("NOPE", 1)]), line!());
    let e = r.expect_err("NOPE is not declared").to_string();
    let at = format!("{}:{line}:", file!());
    assert!(e.contains("NOPE") && e.contains(&at), "{e}");
}

#[test]
fn out_of_bounds_is_reported_at_eval() {
    let k = scale();
    let x = Array::from_slice(&[1.0f32; 8], &[8]).unwrap();
    // n = 100 lies about the buffers: program 0 reads past x's 8 elements.
    let y = k
        .launch()
        .grid([1])
        .args((&x, out_like(&x), 100, 1.0f32))
        .constexpr("BLOCK", 16)
        // The CPU executor checks every access; GPU targets do not.
        .target(Target::Cpu)
        .run()
        .unwrap();
    let e = y[0].eval().unwrap_err().to_string();
    assert!(
        e.contains("scale") && e.contains("out of bounds") && e.contains("program"),
        "{e}"
    );
    // The error also reaches arrays computed from the output.
    let z = mlx::exp(&y[0]).unwrap();
    assert!(z.to_vec::<f32>().is_err());
}

#[test]
fn int64_scalars_and_pointers() {
    let k = tl::jit("iota64", |k| {
        let o = k.ptr(I64, "out");
        let base = k.scalar(I64, "base");
        let offs = tl::arange(0, 8);
        tl::store(o + offs, offs.to(I64) + base);
    })
    .unwrap();
    let y = k
        .launch()
        .grid([1])
        .args((out(&[8], I64), 1i64 << 40))
        .run()
        .unwrap();
    let want: Vec<i64> = (0..8).map(|i| i + (1i64 << 40)).collect();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), want);
}

#[test]
fn optimised_launches_match() {
    use triton_metal::passes::PassOptions;
    let k = scale();
    let x = mlx::random::normal(&[300], F32, 9).unwrap();
    let run = |opt: Option<PassOptions>| {
        let mut l = k
            .launch()
            .grid([3])
            .args((&x, out_like(&x).fill(f64::NAN), 300, 1.5f32))
            .constexpr("BLOCK", 128);
        if let Some(o) = opt {
            l = l.optimize(o);
        }
        l.run().unwrap().remove(0)
    };
    let plain = run(None);
    let exact = run(Some(PassOptions { exact: true }));
    assert_eq!(max_abs_diff(&plain, &exact).unwrap(), 0.0);
}

#[test]
fn optimising_a_launch_twice_runs_the_passes_once() {
    use std::sync::Arc;
    use triton_metal::passes::PassOptions;
    let k = scale();
    let launch = |block: i64, opts: PassOptions| {
        k.launch()
            .constexpr("BLOCK", block)
            .optimize(opts)
            .specialize()
            .unwrap()
    };
    let exact = PassOptions { exact: true };
    let first = launch(128, exact);
    assert!(Arc::ptr_eq(&first, &launch(128, exact)));
    assert_eq!(k.cached_optimized(), 1);
    // Other options or constexprs are other entries; the unoptimised kernel is its own.
    assert!(!Arc::ptr_eq(&first, &launch(128, PassOptions::default())));
    assert!(!Arc::ptr_eq(&first, &launch(64, exact)));
    assert_eq!(k.cached_optimized(), 3);
    let plain = k.launch().constexpr("BLOCK", 128).specialize().unwrap();
    assert!(!Arc::ptr_eq(&first, &plain));
    assert!(Arc::ptr_eq(
        &plain,
        &k.specialize_with(&[("BLOCK", 128)]).unwrap()
    ));
    // The cached kernel is the one that runs.
    let x = mlx::random::normal(&[300], F32, 3).unwrap();
    let y = k
        .launch()
        .grid([3])
        .args((&x, out_like(&x).fill(f64::NAN), 300, 2.0f32))
        .constexpr("BLOCK", 128)
        .optimize(exact)
        .run()
        .unwrap();
    let want = mlx::multiply(&x, &mlx::full(&[], 2.0, F32).unwrap()).unwrap();
    assert_eq!(max_abs_diff(&y[0], &want).unwrap(), 0.0);
    assert_eq!(k.cached_optimized(), 3);
}

#[test]
fn a_grid_reading_an_unknown_constexpr_is_an_error() {
    let k = scale();
    let x = Array::from_slice(&[1.0f32; 8], &[8]).unwrap();
    let e = launch_err(
        k.launch()
            .grid(grid(|m| [cdiv(8, m["BLOCK_SIZE"])]))
            .constexpr("BLOCK", 8)
            .args((&x, out_like(&x), 8, 1.0f32))
            .target(Target::Cpu)
            .run(),
    );
    assert!(
        e.contains("meta[\"BLOCK_SIZE\"]") && e.contains("BLOCK"),
        "{e}"
    );
}
