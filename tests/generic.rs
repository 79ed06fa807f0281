//! Kernels generic over dtypes, as with `@triton.jit`: a pointer declared without a dtype
//! (`Ptr` in `#[jit]`, `k.ptr_any` in the builder) takes its launch argument's, and the
//! kernel is built once per dtype signature; constexprs of every kind (int, bool, float,
//! string, dtype); grid functions reading constexprs a launch does not give; launches of
//! more than 12 arguments. Every kernel runs on every target here (interpreter, compiled
//! CPU, emulated Metal in both lane orders) and its CUDA compiles with NVRTC; results are
//! compared bit for bit with references computed on the host.

mod support;

use half::{bf16, f16};
use triton_metal::runtime::{cdiv, grid, out, Arg, Target};
use triton_metal::tl::{self, Signature};
use triton_metal::DType::{self, BF16, F16, F32, I32, I64};
use triton_metal::{jit, Array, Error};

/// Values as a dtype holds them: floats rounded to the dtype, integers wrapped to i32.
fn round(d: DType, v: f64) -> f64 {
    match d {
        F16 => f16::from_f64(v).to_f64(),
        BF16 => bf16::from_f64(v).to_f64(),
        F32 => v as f32 as f64,
        I32 => (v as i64 as i32) as f64,
        other => panic!("no test values for {other}"),
    }
}

fn array(d: DType, v: &[f64]) -> Array {
    let n = [v.len()];
    match d {
        F16 => Array::from_slice(&v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>(), &n),
        BF16 => Array::from_slice(
            &v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>(),
            &n,
        ),
        F32 => Array::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), &n),
        I32 => Array::from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>(), &n),
        other => panic!("no test arrays of {other}"),
    }
    .unwrap()
}

/// An array's elements as f64 (exact for every dtype here).
fn read(a: &Array) -> Vec<f64> {
    match a.dtype() {
        F16 => a
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        BF16 => a
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        F32 => a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect(),
        I32 => a
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect(),
        other => panic!("no test reads of {other}"),
    }
}

/// Bit-exact equality (any NaN matches any NaN; +0 and -0 differ).
fn assert_same(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
        assert!(same, "{what}: element {i}: got {g:e}, want {w:e}");
    }
}

/// Random values of `d` with its edge values (NaN, ±inf, ±0, extremes, subnormals,
/// rounding ties) first.
fn values(d: DType, n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let edges: Vec<f64> = match d {
        I32 => vec![
            0.0,
            -1.0,
            1.0,
            i32::MAX as f64,
            i32::MIN as f64,
            1073741824.0,
            -1073741825.0,
        ],
        F16 => vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            65504.0,
            -65504.0,
            2f64.powi(-24),
            -2f64.powi(-24),
            2049.0,
            2051.0,
            1.0 + 2f64.powi(-10),
        ],
        BF16 => vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            3.389e38,
            -3.389e38,
            2f64.powi(-133),
            257.0,
            259.0,
            1.0 + 2f64.powi(-7),
        ],
        _ => vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f32::MAX as f64,
            f32::MIN as f64,
            2f64.powi(-149),
            16777217.0,
            1.0 + 2f64.powi(-23),
        ],
    };
    let mut v = edges;
    while v.len() < n {
        let r = next();
        let x = match d {
            I32 => (r as i32) as f64,
            _ => ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2f64.powi((r % 24) as i32 - 8),
        };
        v.push(round(d, x));
    }
    v.truncate(n);
    v
}

/// `out = x * 2 + y` in the promoted dtype of `x` and `y`, stored as `out`'s dtype: one
/// kernel for every dtype.
#[jit]
fn axpy2(x_ptr: Ptr, y_ptr: Ptr, out_ptr: Ptr, n: i32, BLOCK: Constexpr) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let mask = offs < n;
    let x = tl::load(x_ptr + offs, mask = mask);
    let y = tl::load(y_ptr + offs, mask = mask);
    tl::store(
        out_ptr + offs,
        (x * 2 + y).to(out_ptr.dtype.element_ty),
        mask = mask,
    );
}

/// The reference of [`axpy2`]: `x * 2` in `x`'s dtype (exact unless it overflows), the sum
/// rounded once to the promoted dtype (f64 holds it exactly enough: twice the precision
/// plus two bits), then to `out`'s dtype.
fn axpy2_ref(dx: DType, dy: DType, dout: DType, x: &[f64], y: &[f64]) -> Vec<f64> {
    let promoted = match (dx, dy) {
        (a, b) if a == b => a,
        (F32, _) | (_, F32) => F32,
        _ => panic!("no reference for {dx} + {dy}"),
    };
    x.iter()
        .zip(y)
        .map(|(&a, &b)| {
            let sum = if promoted == I32 {
                (a as i32).wrapping_mul(2).wrapping_add(b as i32) as f64
            } else {
                round(promoted, round(dx, a * 2.0) + b)
            };
            round(dout, sum)
        })
        .collect()
}

#[test]
fn one_kernel_for_every_dtype_on_every_target() {
    let kernel = axpy2().unwrap();
    let n = 1000;
    // (x, y, out): one dtype each, and mixed (f16 + f32 promotes to f32, stored as bf16).
    let sigs = [
        (F32, F32, F32),
        (F16, F16, F16),
        (BF16, BF16, BF16),
        (I32, I32, I32),
        (F16, F32, BF16),
    ];
    for &(dx, dy, dout) in &sigs {
        let (x, y) = (values(dx, n, 1), values(dy, n, 2));
        let want = axpy2_ref(dx, dy, dout, &x, &y);
        let (xa, ya) = (array(dx, &x), array(dy, &y));
        let poison = if dout == I32 { -123456789.0 } else { f64::NAN };
        for target in support::targets("generic") {
            let launch = kernel
                .launch()
                .grid(grid(move |meta| [cdiv(n, meta["BLOCK"])]))
                .args((&xa, &ya, out(&[n], dout).fill(poison), n as i32))
                .constexpr("BLOCK", 128)
                .target(target);
            if target == Target::Cpu {
                support::nvrtc_compiles(&launch);
                let k = launch.specialize().unwrap();
                let ir = k.ir();
                assert!(ir.contains(&format!("ptr<{dx}>")), "{ir}");
                assert!(ir.contains(&format!("ptr<{dout}>")), "{ir}");
            }
            let got = read(&launch.run().unwrap()[0]);
            assert_same(&format!("{dx}, {dy} -> {dout} on {target:?}"), &got, &want);
        }
    }
    // One build per dtype signature, whatever the targets.
    assert_eq!(kernel.cached(), sigs.len());
}

#[test]
fn dtype_variables_tie_pointers_together() {
    /// `T` is `x`'s element dtype; `y` must be an array of it.
    #[jit]
    fn twice<T>(x: Ptr<T>, y: Ptr<T>, BLOCK: Constexpr) {
        let offs = tl::arange(0, BLOCK);
        let v = tl::load(x + offs);
        tl::store(y + offs, (v + v).to(T));
    }
    let k = twice().unwrap();
    for d in [F16, BF16, I32] {
        let x = array(d, &[1.0, 2.0, 3.0, 4.0]);
        let y = k
            .launch()
            .grid([1])
            .args((&x, out(&[4], d)))
            .constexpr("BLOCK", 4)
            .target(Target::Cpu)
            .run()
            .unwrap();
        assert_same(&format!("{d}"), &read(&y[0]), &[2.0, 4.0, 6.0, 8.0]);
    }
    let x = array(F32, &[1.0; 4]);
    let e = k
        .launch()
        .grid([1])
        .args((&x, out(&[4], F16)))
        .constexpr("BLOCK", 4)
        .target(Target::Cpu)
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("twice") && e.contains("`y`") && e.contains("f32"),
        "{e}"
    );
}

#[test]
fn dtype_errors_name_kernel_argument_and_line() {
    // A fixed pointer keeps its dtype: another array is an error.
    #[jit]
    fn fixed(x: Ptr<F32>, y: Ptr, BLOCK: Constexpr) {
        let offs = tl::arange(0, BLOCK);
        tl::store(y + offs, tl::load(x + offs));
    }
    let x16 = array(F16, &[1.0; 4]);
    let e = fixed()
        .unwrap()
        .launch()
        .grid([1])
        .args((&x16, out(&[4], F32)))
        .constexpr("BLOCK", 4)
        .target(Target::Cpu)
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fixed") && e.contains("`x`") && e.contains("expected an array of f32"),
        "{e}"
    );

    // A dtype the body cannot take is the body's build error: kernel, op, line.
    #[jit]
    fn bits(x: Ptr, y: Ptr, BLOCK: Constexpr) {
        let offs = tl::arange(0, BLOCK);
        let v = tl::load(x + offs);
        tl::store(y + offs, v & v);
    }
    let line = line!() - 2;
    let k = bits().unwrap();
    let run = |d: DType| {
        k.launch()
            .grid([1])
            .args((&array(d, &[1.0; 4]), out(&[4], d)))
            .constexpr("BLOCK", 4)
            .target(Target::Cpu)
            .run()
    };
    assert_same("i32 &", &read(&run(I32).unwrap()[0]), &[1.0; 4]);
    match run(F32) {
        Err(Error::Build { kernel, loc, .. }) => {
            assert_eq!((kernel.as_str(), loc.line), ("bits", line));
        }
        other => panic!("expected a build error, got {other:?}"),
    }

    // Building without the arguments' dtypes, or a scalar for a generic pointer.
    let e = k.specialize_with(&[("BLOCK", 4)]).unwrap_err().to_string();
    assert!(e.contains("generic") && e.contains("`x`"), "{e}");
    let e = k
        .launch()
        .grid([1])
        .args((1.0f32, out(&[4], F32)))
        .constexpr("BLOCK", 4)
        .target(Target::Cpu)
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bits") && e.contains("scalar") && e.contains("`x`"),
        "{e}"
    );
    // The builder spelling: `ptr_any` and `dtype_of`.
    let b = tl::jit("builder_generic", |k| {
        let (x, y) = (k.ptr_any("x"), k.ptr_any("y"));
        let offs = tl::arange(0, 8);
        tl::store(
            y + offs,
            (tl::load(x + offs).to(F32) * 0.5).to(k.dtype_of("y")),
        );
    })
    .unwrap();
    let k = b
        .specialize(&Signature::new().array(BF16).array(F16))
        .unwrap();
    assert!(
        k.ir().contains("ptr<bf16>") && k.ir().contains("ptr<f16>"),
        "{}",
        k.ir()
    );
}

/// An activation chosen by a string constexpr, a scale folded in from a float one, a flag,
/// and the dtype the result passes through.
#[jit]
fn activation(
    x_ptr: Ptr,
    y_ptr: Ptr,
    n: i32,
    BLOCK: Constexpr,
    ACTIVATION: Constexpr<"none">,
    SCALE: Constexpr<f64>,
    NEGATE: Constexpr<bool>,
    VIA: Constexpr<DType, F32>,
) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let mask = offs < n;
    let mut v = tl::load(x_ptr + offs, mask = mask).to(F32);
    if ACTIVATION == "leaky_relu" {
        v = tl::where_(v >= 0.0, v, v * 0.01);
    } else if ACTIVATION == "relu" {
        v = tl::maximum(v, 0.0);
    } else {
        tl::static_assert(
            ACTIVATION == "none",
            "ACTIVATION is none, relu or leaky_relu",
        );
    }
    v = v * SCALE;
    if NEGATE {
        v = -v;
    }
    tl::store(
        y_ptr + offs,
        v.to(VIA).to(y_ptr.dtype.element_ty),
        mask = mask,
    );
}

#[test]
fn constexprs_of_every_kind() {
    let kernel = activation().unwrap();
    let n = 300;
    let x = values(F32, n, 3);
    let xa = array(F32, &x);
    let cases: [(&str, f64, bool, DType); 4] = [
        ("leaky_relu", 0.5, false, F32),
        ("relu", 3.0, true, F16),
        ("none", 1.0, false, BF16),
        ("none", 0.25, true, F32),
    ];
    for (act, scale, negate, via) in cases {
        let want: Vec<f64> = x
            .iter()
            .map(|&v| {
                let v = v as f32;
                let v = match act {
                    // Triton's `v >= 0` is false for NaN: NaN * 0.01 stays NaN.
                    "leaky_relu" => {
                        if v >= 0.0 {
                            v
                        } else {
                            v * 0.01
                        }
                    }
                    // maximum ignores NaN (Triton's default propagate_nan=NONE).
                    "relu" => {
                        if v.is_nan() {
                            0.0
                        } else {
                            v.max(0.0)
                        }
                    }
                    _ => v,
                };
                // The scale is a weakly typed float: an f32 product.
                let v = v * scale as f32;
                // Triton's `-v` is `0 - v`: -(+0) is +0.
                let v = if negate { 0.0 - v } else { v };
                round(via, v as f64) as f32 as f64
            })
            .collect();
        for target in support::targets("generic") {
            let mut launch = kernel
                .launch()
                .grid([cdiv(n, 128)])
                .args((&xa, out(&[n], F32).fill(f64::NAN), n as i32))
                .constexpr("BLOCK", 128)
                .constexpr("SCALE", scale)
                .constexpr("NEGATE", negate)
                .constexpr("VIA", via)
                .target(target);
            // ACTIVATION = "none" is the default.
            if act != "none" {
                launch = launch.constexpr("ACTIVATION", act);
            }
            if target == Target::Cpu {
                support::nvrtc_compiles(&launch);
            }
            let got = read(&launch.run().unwrap()[0]);
            let what = format!("{act} {scale} {negate} {via} on {target:?}");
            assert_same(&what, &got, &want);
        }
    }
    assert_eq!(kernel.cached(), cases.len());

    let run = |act: &str| {
        kernel
            .launch()
            .grid([1])
            .args((&xa, out(&[n], F32), n as i32))
            .constexpr("BLOCK", 128)
            .constexpr("ACTIVATION", act)
            .constexpr("SCALE", 1)
            .constexpr("NEGATE", false)
            .target(Target::Cpu)
            .run()
    };
    let e = run("gelu").unwrap_err().to_string();
    assert!(
        e.contains("activation") && e.contains("ACTIVATION is none, relu or leaky_relu"),
        "{e}"
    );
    // The wrong kind for a constexpr names it, its value and the kind the kernel reads.
    let e = kernel
        .launch()
        .grid([1])
        .args((&xa, out(&[n], F32), n as i32))
        .constexpr("BLOCK", 128)
        .constexpr("SCALE", 1.0)
        .constexpr("NEGATE", "yes")
        .target(Target::Cpu)
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`NEGATE` is \"yes\" (a str)") && e.contains("as a bool"),
        "{e}"
    );
}

#[test]
fn grid_functions_reading_missing_constexprs_fail_the_launch() {
    let kernel = activation().unwrap();
    let x = array(F32, &[1.0; 8]);
    let launch = |g: triton_metal::runtime::Grid| {
        kernel
            .launch()
            .grid(g)
            .args((&x, out(&[8], F32), 8))
            .constexpr("BLOCK", 8)
            .constexpr("ACTIVATION", "relu")
            .constexpr("SCALE", 1.0)
            .constexpr("NEGATE", false)
            .target(Target::Cpu)
            .run()
    };
    let e = launch(grid(|meta| [cdiv(8, meta["BLOCK_SIZE"])]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kernel `activation`")
            && e.contains("meta[\"BLOCK_SIZE\"]")
            && e.contains("does not give"),
        "{e}"
    );
    // A string constexpr is no integer: `meta.value` reads it.
    let e = launch(grid(|meta| [meta["ACTIVATION"] as usize]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kernel `activation`")
            && e.contains("meta[\"ACTIVATION\"]")
            && e.contains("meta.value(\"ACTIVATION\")"),
        "{e}"
    );
}

#[test]
fn grid_functions_read_constexprs_of_every_kind() {
    let kernel = activation().unwrap();
    let x = array(F32, &[-1.0; 256]);
    let y = kernel
        .launch()
        .grid(grid(|meta| {
            // Half the programs for "relu": the rest of `y` keeps its fill.
            let programs = cdiv(256, meta["BLOCK"]);
            match meta.value("ACTIVATION").map(|v| v.to_string()).as_deref() {
                Some("\"relu\"") => [programs / 2],
                _ => [programs],
            }
        }))
        .args((&x, out(&[256], F32).fill(7.0), 256))
        .constexpr("BLOCK", 128)
        .constexpr("ACTIVATION", "relu")
        .constexpr("SCALE", 1.0)
        .constexpr("NEGATE", false)
        .target(Target::Cpu)
        .run()
        .unwrap();
    let want: Vec<f64> = (0..256).map(|i| if i < 128 { 0.0 } else { 7.0 }).collect();
    assert_same("grid of 1 program", &read(&y[0]), &want);
}

/// 16 runtime arguments: 14 inputs, the output, the length.
#[jit]
#[rustfmt::skip]
fn sum14(
    a0: Ptr, a1: Ptr, a2: Ptr, a3: Ptr, a4: Ptr, a5: Ptr, a6: Ptr,
    a7: Ptr, a8: Ptr, a9: Ptr, a10: Ptr, a11: Ptr, a12: Ptr, a13: Ptr,
    out_ptr: Ptr, n: i32, BLOCK: Constexpr,
) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let m = offs < n;
    let mut s = tl::load(a0 + offs, mask = m);
    for p in [a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13] {
        s = s + tl::load(p + offs, mask = m);
    }
    tl::store(out_ptr + offs, s, mask = m);
}

#[test]
fn more_than_twelve_arguments() {
    let n = 100;
    let inputs: Vec<Vec<f64>> = (0..14).map(|i| values(F32, n, 10 + i)).collect();
    let arrays: Vec<Array> = inputs.iter().map(|v| array(F32, v)).collect();
    let want: Vec<f64> = (0..n)
        .map(|j| {
            let mut s = inputs[0][j] as f32;
            for v in &inputs[1..] {
                s += v[j] as f32;
            }
            s as f64
        })
        .collect();
    let kernel = sum14().unwrap();
    let a = &arrays;
    let o = || out(&[n], F32).fill(f64::NAN);
    for target in support::targets("generic") {
        let base = || {
            kernel
                .launch()
                .grid([cdiv(n, 64)])
                .constexpr("BLOCK", 64)
                .target(target)
        };
        // A tuple of 16 arguments.
        let tuple = base().args((
            &a[0],
            &a[1],
            &a[2],
            &a[3],
            &a[4],
            &a[5],
            &a[6],
            &a[7],
            &a[8],
            &a[9],
            &a[10],
            &a[11],
            &a[12],
            &a[13],
            o(),
            n as i32,
        ));
        // One argument at a time.
        let chained = a
            .iter()
            .fold(base(), |l, x| l.arg(x))
            .arg(o())
            .arg(n as i32);
        // A vector.
        let mut v: Vec<Arg> = a.iter().map(Arg::from).collect();
        v.extend([o(), Arg::from(n as i32)]);
        let vec = base().args(v);
        for (how, launch) in [("tuple", tuple), ("arg", chained), ("Vec", vec)] {
            if target == Target::Cpu && how == "tuple" {
                support::nvrtc_compiles(&launch);
            }
            let got = read(&launch.run().unwrap()[0]);
            assert_same(&format!("{how} on {target:?}"), &got, &want);
        }
    }
}

#[test]
fn dtype_and_integer_specialisations_combine() {
    let kernel = axpy2().unwrap();
    for d in [F16, I32] {
        let mut built = Vec::new();
        // 1024 is a multiple of 16 (a fact of Triton's integer specialisation), 1000 not.
        for n in [1000usize, 1024] {
            let (x, y) = (values(d, n, 5), values(d, n, 6));
            let want = axpy2_ref(d, d, d, &x, &y);
            let (xa, ya) = (array(d, &x), array(d, &y));
            for target in [Target::Cpu, Target::CpuCompiled] {
                let launch = kernel
                    .launch()
                    .grid([cdiv(n, 128)])
                    .args((&xa, &ya, out(&[n], d), n as i32))
                    .constexpr("BLOCK", 128)
                    .target(target);
                if target == Target::Cpu {
                    built.push(launch.specialize().unwrap());
                }
                let got = read(&launch.run().unwrap()[0]);
                assert_same(&format!("{d} n={n} on {target:?}"), &got, &want);
            }
        }
        assert!(
            !std::sync::Arc::ptr_eq(&built[0], &built[1]),
            "{d}: one kernel for both n"
        );
    }
    // One build per dtype signature; the integer facts specialise those builds.
    assert_eq!(kernel.cached(), 2);
}

#[test]
fn an_atomic_the_target_lacks_for_a_dtype_is_unsupported() {
    #[jit]
    fn add_into(x_ptr: Ptr, acc_ptr: Ptr, BLOCK: Constexpr) {
        let offs = tl::arange(0, BLOCK);
        tl::atomic_add(acc_ptr + offs % 2, tl::load(x_ptr + offs));
    }
    let kernel = add_into().unwrap();
    let x = Array::from_slice(&[1i64, 2, 3, 4], &[4]).unwrap();
    let launch = |target: Target| {
        kernel
            .launch()
            .grid([1])
            .args((&x, out(&[2], I64).fill(0)))
            .constexpr("BLOCK", 4)
            .target(target)
            .run()
    };
    for target in support::targets("generic") {
        match (target, launch(target)) {
            (Target::Emulated(_), Err(e)) => {
                let e = e.to_string();
                assert!(
                    e.contains("add_into") && e.contains("atomic_add") && e.contains("i64"),
                    "{e}"
                );
            }
            (Target::Emulated(_), Ok(_)) => panic!("i64 atomics on emulated Metal"),
            (t, r) => {
                let got = r.unwrap()[0].to_vec::<i64>().unwrap();
                assert_eq!(got, [4, 6], "{t:?}");
            }
        }
    }
}

#[test]
fn generic_scalars_take_triton_s_dtypes() {
    /// `s` is typed as Triton types a number: `i32` when it fits, else `i64`; `f32`.
    #[jit]
    fn scale(x_ptr: Ptr, out_ptr: Ptr, s: Scalar, n: i32, BLOCK: Constexpr) {
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let x = tl::load(x_ptr + offs, mask = offs < n);
        tl::store(
            out_ptr + offs,
            (x * s).to(out_ptr.dtype.element_ty),
            mask = offs < n,
        );
    }
    let kernel = scale().unwrap();
    let n = 200;
    let xi = values(I32, n, 7);
    let xf = values(F32, n, 8);
    // (x, s, out, the scalar's dtype, the reference).
    let big = 3i64 << 33;
    let cases: Vec<(DType, Arg, DType, &str, Vec<f64>)> = vec![
        (
            I32,
            Arg::from(3),
            I32,
            "i32 s",
            xi.iter()
                .map(|&v| (v as i32).wrapping_mul(3) as f64)
                .collect(),
        ),
        (
            I32,
            Arg::from(big),
            I64,
            "i64 s",
            // The products' bits, compared as integers below.
            xi.iter()
                .map(|&v| f64::from_bits((v as i64).wrapping_mul(big) as u64))
                .collect(),
        ),
        (
            F32,
            Arg::from(2.5f64),
            F32,
            "f32 s",
            xf.iter().map(|&v| (v as f32 * 2.5) as f64).collect(),
        ),
    ];
    for (dx, s, dout, ty, want) in cases {
        let x = array(dx, if dx == I32 { &xi } else { &xf });
        for target in support::targets("generic") {
            let launch = kernel
                .launch()
                .grid([cdiv(n, 64)])
                .args((&x, out(&[n], dout), s.clone(), n as i32))
                .constexpr("BLOCK", 64)
                .target(target);
            if target == Target::Cpu {
                let ir = launch.specialize().unwrap().ir();
                assert!(ir.contains(ty), "{ty}: {ir}");
                support::nvrtc_compiles(&launch);
            }
            let got = launch.run().unwrap();
            let got: Vec<f64> = if dout == I64 {
                got[0]
                    .to_vec::<i64>()
                    .unwrap()
                    .iter()
                    .map(|&v| f64::from_bits(v as u64))
                    .collect()
            } else {
                read(&got[0])
            };
            assert_same(&format!("{ty} on {target:?}"), &got, &want);
        }
    }
    assert_eq!(kernel.cached(), 3);
}
