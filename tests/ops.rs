//! Every DSL op, written once and run on each target: the CPU executor (interpreted and
//! compiled to native code), the generated
//! Metal code on the emulator in forward and reverse lane order (STYLE rule 15), and the
//! generated CUDA through MLX when the machine has an NVIDIA GPU.
//!
//! Inputs are random with ragged sizes (masks matter); outputs are longer than the masked
//! range and poisoned, so an element written by mistake, or left unwritten, is caught.
//! References are computed independently in Rust (f64) from the inputs as stored.

use triton_metal::emu::{Emulator, LaneOrder};
use triton_metal::runtime::{out, Target};
use triton_metal::tl::{self, Tensor};
use triton_metal::{
    Array,
    DType::{self, *},
};

const N: usize = 300; // valid elements
const BLOCK: usize = 128;
const PROGRAMS: usize = N.div_ceil(BLOCK);
const LEN: usize = PROGRAMS * BLOCK; // output length: the tail must stay poisoned

/// Deterministic pseudo-random values in [lo, hi).
fn rnd(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// An MLX array of `dtype` holding `v`, converted here as C converts (float to int
/// truncates toward zero): f64 arrays cannot exist on a GPU default device (MLX's CUDA back
/// end has no float64), so MLX cannot do the conversion there.
fn arr(v: &[f64], dtype: DType) -> Array {
    fn of<T: triton_metal::Element>(v: &[f64], f: impl Fn(f64) -> T) -> Array {
        let t: Vec<T> = v.iter().map(|&x| f(x)).collect();
        Array::from_slice(&t, &[t.len()]).unwrap()
    }
    match dtype {
        Bool => of(v, |x| x != 0.0),
        I8 => of(v, |x| x as i8),
        I16 => of(v, |x| x as i16),
        I32 => of(v, |x| x as i32),
        I64 => of(v, |x| x as i64),
        U8 => of(v, |x| x as u8),
        U16 => of(v, |x| x as u16),
        U32 => of(v, |x| x as u32),
        U64 => of(v, |x| x as u64),
        F16 => of(v, half::f16::from_f64),
        BF16 => of(v, half::bf16::from_f64),
        F32 => of(v, |x| x as f32),
        F64 => of(v, |x| x),
    }
}

/// The values of any array as f64 (read in its own dtype, converted here).
fn vals(a: &Array) -> Vec<f64> {
    fn of<T: triton_metal::Element>(a: &Array, f: impl Fn(T) -> f64) -> Vec<f64> {
        a.to_vec::<T>().unwrap().into_iter().map(f).collect()
    }
    match a.dtype() {
        Bool => of(a, |x: bool| x as u8 as f64),
        I8 => of(a, |x: i8| x as f64),
        I16 => of(a, |x: i16| x as f64),
        I32 => of(a, |x: i32| x as f64),
        I64 => of(a, |x: i64| x as f64),
        U8 => of(a, |x: u8| x as f64),
        U16 => of(a, |x: u16| x as f64),
        U32 => of(a, |x: u32| x as f64),
        U64 => of(a, |x: u64| x as f64),
        F16 => of(a, |x: half::f16| x.to_f64()),
        BF16 => of(a, |x: half::bf16| x.to_f64()),
        F32 => of(a, |x: f32| x as f64),
        F64 => of(a, |x: f64| x),
    }
}

fn poison(dtype: DType) -> f64 {
    if dtype.is_float() {
        f64::NAN
    } else if dtype == Bool {
        1.0
    } else {
        77.0
    }
}

fn check(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Checks the masked range against `want` and the tail against the poison.
fn check_masked(what: &str, out: &Array, dtype: DType, want: &[f64], tol: f64) {
    let got = vals(out);
    check(what, &got[..want.len()], want, tol);
    let p = poison(dtype);
    for (i, g) in got[want.len()..].iter().enumerate() {
        assert!(
            (g.is_nan() && p.is_nan()) || *g == p,
            "{what}: masked-off element {} was written: {g}",
            want.len() + i
        );
    }
}

type Bin = fn(Tensor, Tensor) -> Tensor;
type Un = fn(Tensor) -> Tensor;
type FloatCase = (&'static str, Bin, fn(f64, f64) -> f64);
type MathCase<'a> = (&'static str, &'a Vec<f64>, Un, fn(f64) -> f64);
type IntCase = (&'static str, Bin, fn(i32, i32) -> f64);
type CmpCase = (&'static str, Bin, fn(f64, f64) -> bool);

/// `out[i] = f(x[i], y[i])` over N ragged elements.
fn binary<F>(t: Target, name: &str, din: DType, dout: DType, x: &[f64], y: &[f64], f: F) -> Vec<f64>
where
    F: Fn(Tensor, Tensor) -> Tensor + Copy + Send + Sync + 'static,
{
    let k = tl::jit(name, move |k| {
        let (xp, yp, op) = (
            k.ptr(din, "x_ptr"),
            k.ptr(din, "y_ptr"),
            k.ptr(dout, "out_ptr"),
        );
        let n = k.scalar(I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        let r = f(
            tl::load(xp + offs).mask(mask),
            tl::load(yp + offs).mask(mask),
        );
        tl::store(op + offs, r).mask(mask);
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let (xa, ya) = (arr(x, din), arr(y, din));
    let o = k
        .launch()
        .grid([PROGRAMS])
        .args((&xa, &ya, out(&[LEN], dout).fill(poison(dout)), N as i32))
        .constexpr("BLOCK", BLOCK as i64)
        .target(t)
        .run()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = vals(&o[0]);
    check_masked(name, &o[0], dout, &got[..N], 0.0);
    got[..N].to_vec()
}

fn unary(t: Target, name: &str, din: DType, dout: DType, x: &[f64], f: Un) -> Vec<f64> {
    binary(t, name, din, dout, x, x, move |a, _| f(a))
}

/// The inputs as stored in `dtype` (rounded), as f64.
fn stored(v: &[f64], dtype: DType) -> Vec<f64> {
    vals(&arr(v, dtype))
}

// ---- elementwise ------------------------------------------------------------------------

fn float_arith(t: Target) {
    for d in [F32, F16, BF16] {
        let x = stored(&rnd(N, 1, -4.0, 4.0), d);
        let y = stored(&rnd(N, 2, 0.5, 3.0), d);
        // Results are rounded to d: compare with a tolerance of d's precision.
        let tol = match d {
            F32 => 1e-6,
            F16 => 1e-3,
            _ => 8e-3,
        };
        let cases: [FloatCase; 7] = [
            ("add", |a, b| a + b, |a, b| a + b),
            ("sub", |a, b| a - b, |a, b| a - b),
            ("mul", |a, b| a * b, |a, b| a * b),
            ("div", |a, b| a / b, |a, b| a / b),
            ("rem", |a, b| a % b, |a, b| a % b),
            ("maximum", tl::maximum, f64::max),
            ("fma", |a, b| tl::fma(a, b, a), |a, b| a * b + a),
        ];
        for (name, f, r) in cases {
            let got = binary(t, &format!("{name}_{d}"), d, d, &x, &y, f);
            let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| r(*a, *b)).collect();
            check(&format!("{name} {d}"), &got, &want, tol);
        }
    }
}

fn float_math(t: Target) {
    let x = stored(&rnd(N, 3, -3.0, 3.0), F32);
    let p = stored(&rnd(N, 4, 0.01, 9.0), F32);
    let cases: [MathCase; 14] = [
        ("exp", &x, tl::exp, f64::exp),
        ("exp2", &x, tl::exp2, f64::exp2),
        ("log", &p, tl::log, f64::ln),
        ("log2", &p, tl::log2, f64::log2),
        ("sqrt", &p, tl::sqrt, f64::sqrt),
        ("rsqrt", &p, tl::rsqrt, |v| 1.0 / v.sqrt()),
        ("sin", &x, tl::sin, f64::sin),
        ("cos", &x, tl::cos, f64::cos),
        ("erf", &x, tl::erf, erf),
        ("floor", &x, tl::floor, f64::floor),
        ("ceil", &x, tl::ceil, f64::ceil),
        ("abs", &x, tl::abs, f64::abs),
        ("sigmoid", &x, tl::sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
        ("neg", &x, |a| -a, |v| -v),
    ];
    for (name, input, f, r) in cases {
        let got = unary(t, name, F32, F32, input, f);
        let want: Vec<f64> = input.iter().map(|v| r(*v)).collect();
        check(name, &got, &want, 2e-6);
    }
}

/// erf by its series/continued fraction is overkill: Abramowitz-Stegun 7.1.26 is 1.5e-7.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    y.copysign(x)
}

fn int_arith(t: Target) {
    let x: Vec<f64> = rnd(N, 5, -1000.0, 1000.0)
        .iter()
        .map(|v| v.trunc())
        .collect();
    let y: Vec<f64> = rnd(N, 6, -50.0, 50.0)
        .iter()
        .map(|v| if v.trunc() == 0.0 { 7.0 } else { v.trunc() })
        .collect();
    let i = |v: f64| v as i32;
    let cases: [IntCase; 10] = [
        ("iadd", |a, b| a + b, |a, b| a.wrapping_add(b) as f64),
        (
            "imul",
            |a, b| a * b * b * b,
            |a, b| a.wrapping_mul(b).wrapping_mul(b).wrapping_mul(b) as f64,
        ),
        ("floordiv", tl::floordiv, |a, b| (a / b) as f64),
        ("irem", |a, b| a % b, |a, b| (a % b) as f64),
        ("and", |a, b| a & b, |a, b| (a & b) as f64),
        ("or", |a, b| a | b, |a, b| (a | b) as f64),
        ("xor", |a, b| a ^ b, |a, b| (a ^ b) as f64),
        (
            "shl",
            |a, b| a << (b & 7),
            |a, b| a.wrapping_shl((b & 7) as u32) as f64,
        ),
        ("shr", |a, b| a >> (b & 7), |a, b| (a >> (b & 7)) as f64),
        (
            "cdiv",
            |a, b| tl::cdiv(tl::abs(a), tl::abs(b)),
            |a, b| ((a.abs() + b.abs() - 1) / b.abs()) as f64,
        ),
    ];
    for (name, f, r) in cases {
        let got = binary(t, name, I32, I32, &x, &y, f);
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| r(i(*a), i(*b))).collect();
        check(name, &got, &want, 0.0);
    }
    // int / int is true division in fp32.
    let got = binary(t, "truediv", I32, F32, &x, &y, |a, b| a / b);
    let want: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| ((*a as f32) / (*b as f32)) as f64)
        .collect();
    check("truediv", &got, &want, 1e-7);
    // Comparisons give int1.
    let cmps: [CmpCase; 6] = [
        ("lt", |a, b| a.lt(b), |a, b| a < b),
        ("le", |a, b| a.le(b), |a, b| a <= b),
        ("gt", |a, b| a.gt(b), |a, b| a > b),
        ("ge", |a, b| a.ge(b), |a, b| a >= b),
        (
            "eq",
            |a, b| a.eq(b % 3),
            |a, b| a == ((b as i32) % 3) as f64,
        ),
        ("ne", |a, b| a.ne(b), |a, b| a != b),
    ];
    for (name, f, r) in cmps {
        let got = binary(t, name, I32, Bool, &x, &y, f);
        let want: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| r(*a, *b) as u8 as f64)
            .collect();
        check(name, &got, &want, 0.0);
    }
    // umulhi on uint32.
    let ux: Vec<f64> = rnd(N, 7, 0.0, 4.0e9).iter().map(|v| v.trunc()).collect();
    let uy: Vec<f64> = rnd(N, 8, 0.0, 4.0e9).iter().map(|v| v.trunc()).collect();
    let got = binary(t, "umulhi", U32, U32, &ux, &uy, tl::umulhi);
    let want: Vec<f64> = ux
        .iter()
        .zip(&uy)
        .map(|(a, b)| ((*a as u64 * *b as u64) >> 32) as f64)
        .collect();
    check("umulhi", &got, &want, 0.0);
}

fn casts_and_select(t: Target) {
    let x = stored(&rnd(N, 9, -300.0, 300.0), F32);
    let y = stored(&rnd(N, 10, -1.0, 1.0), F32);
    let got = unary(t, "f32_to_i32", F32, I32, &x, |a| a.to(I32));
    check(
        "f32->i32 truncates",
        &got,
        &x.iter().map(|v| v.trunc()).collect::<Vec<_>>(),
        0.0,
    );
    let got = unary(t, "f32_to_f16", F32, F16, &x, |a| a.to(F16));
    let want: Vec<f64> = x.iter().map(|v| half::f16::from_f64(*v).to_f64()).collect();
    check("f32->f16 rounds to nearest even", &got, &want, 0.0);
    let got = unary(t, "f32_to_bf16", F32, BF16, &x, |a| a.to(BF16));
    let want: Vec<f64> = x
        .iter()
        .map(|v| half::bf16::from_f64(*v).to_f64())
        .collect();
    check("f32->bf16", &got, &want, 0.0);
    let got = unary(t, "i32_to_i8", F32, I8, &x, |a| a.to(I32).to(I8));
    let want: Vec<f64> = x.iter().map(|v| (v.trunc() as i32 as i8) as f64).collect();
    check("i32->i8 keeps the low bits", &got, &want, 0.0);
    let got = binary(t, "where", F32, F32, &x, &y, |a, b| {
        tl::where_(b.gt(0.0), a, b * 10.0)
    });
    let want: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| {
            if *b > 0.0 {
                *a
            } else {
                (b * 10.0) as f32 as f64
            }
        })
        .collect();
    check("where", &got, &want, 1e-7);
    let got = binary(t, "clamp", F32, F32, &x, &y, |a, _| {
        tl::clamp(a, -100.0, 50.0)
    });
    let want: Vec<f64> = x.iter().map(|a| a.clamp(-100.0, 50.0)).collect();
    check("clamp", &got, &want, 0.0);
    // Promotion: f16 op f32 -> f32; i32 op f16 -> f16.
    let got = binary(t, "promote", F32, F32, &x, &y, |a, b| a.to(F16) + b);
    let want: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| (half::f16::from_f64(*a).to_f32() + *b as f32) as f64)
        .collect();
    check("f16 + f32 -> f32", &got, &want, 1e-7);
}

// ---- reductions and scans ---------------------------------------------------------------

const R: usize = 6; // rows (of a 8-row block)
const C: usize = 50; // cols (of a 64-col block)

/// Loads an R x C matrix into an 8 x 64 block (masked; `other` fills the rest), applies
/// `f`, and stores the result (a block of the given shape) densely.
#[allow(clippy::too_many_arguments)]
fn matrix_op(
    t: Target,
    name: &str,
    din: DType,
    dout: DType,
    x: &[f64],
    other: f64,
    out_shape: &[usize],
    f: Un,
) -> Vec<f64> {
    let os = out_shape.to_vec();
    let k = tl::jit(name, move |k| {
        let (xp, op) = (k.ptr(din, "x_ptr"), k.ptr(dout, "out_ptr"));
        let rows = tl::arange(0, 8);
        let cols = tl::arange(0, 64);
        let mask = rows.col().lt(R as i32) & cols.row().lt(C as i32);
        let v = tl::load(xp + rows.col() * C as i32 + cols.row())
            .mask(mask)
            .other(other);
        let r = f(v);
        match os.len() {
            0 => tl::store(op, r),
            1 => tl::store(op + tl::arange(0, os[0] as i64), r),
            _ => tl::store(
                op + tl::arange(0, os[0] as i64).col() * os[1] as i32
                    + tl::arange(0, os[1] as i64).row(),
                r,
            ),
        };
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let xa = arr(x, din);
    let n: usize = out_shape.iter().product::<usize>().max(1);
    let o = k
        .launch()
        .grid([1])
        .args((&xa, out(&[n], dout).fill(poison(dout))))
        .target(t)
        .run()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    vals(&o[0])
}

fn reductions(t: Target) {
    let x = stored(&rnd(R * C, 11, -5.0, 5.0), F32);
    let at = |r: usize, c: usize| x[r * C + c];
    let row_sum: Vec<f64> = (0..8)
        .map(|r| {
            if r < R {
                (0..C).map(|c| at(r, c)).sum()
            } else {
                0.0
            }
        })
        .collect();
    check(
        "sum axis 1",
        &matrix_op(t, "sum1", F32, F32, &x, 0.0, &[8], |v| v.sum(1)),
        &row_sum,
        1e-5,
    );
    let col_max: Vec<f64> = (0..64)
        .map(|c| {
            if c < C {
                (0..R).map(|r| at(r, c)).fold(f64::MIN, f64::max)
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    check(
        "max axis 0",
        &matrix_op(t, "max0", F32, F32, &x, f64::NEG_INFINITY, &[64], |v| {
            v.max(0)
        }),
        &col_max,
        0.0,
    );
    let all_min = x.iter().cloned().fold(f64::MAX, f64::min);
    check(
        "min all",
        &matrix_op(t, "minall", F32, F32, &x, f64::INFINITY, &[], |v| {
            v.min(None::<i64>)
        }),
        &[all_min],
        0.0,
    );
    let kd = matrix_op(t, "sumkeep", F32, F32, &x, 0.0, &[8, 1], |v| {
        tl::sum(v, tl::keep_dims(1))
    });
    check("sum keep_dims", &kd, &row_sum, 1e-5);
    // argmax/argmin: int32, left-most on ties (rounding to integers makes ties common).
    let xi: Vec<f64> = x.iter().map(|v| v.round()).collect();
    let ati = |r: usize, c: usize| xi[r * C + c];
    let am: Vec<f64> = (0..R)
        .map(|r| (0..C).fold(0, |b, c| if ati(r, c) > ati(r, b) { c } else { b }) as f64)
        .collect();
    let got = matrix_op(t, "argmax1", F32, I32, &xi, f64::NEG_INFINITY, &[8], |v| {
        v.argmax(1)
    });
    check("argmax axis 1", &got[..R], &am, 0.0);
    let an: Vec<f64> = (0..C)
        .map(|c| (0..R).fold(0, |b, r| if ati(r, c) < ati(b, c) { r } else { b }) as f64)
        .collect();
    let got = matrix_op(t, "argmin0", F32, I32, &xi, f64::INFINITY, &[64], |v| {
        v.argmin(0)
    });
    check("argmin axis 0", &got[..C], &an, 0.0);
    // Integer sums of int8 go to int32.
    let small: Vec<f64> = xi.iter().map(|v| v * 20.0).collect();
    let want: Vec<f64> = (0..8)
        .map(|r| {
            if r < R {
                (0..C).map(|c| small[r * C + c]).sum()
            } else {
                0.0
            }
        })
        .collect();
    let got = matrix_op(t, "sum_i8", I8, I32, &small, 0.0, &[8], |v| v.sum(1));
    check("int8 sum -> int32", &got, &want, 0.0);
    // A custom combine: product of (1 + x/100) per row.
    let got = matrix_op(t, "reduce_custom", F32, F32, &x, 0.0, &[8], |v| {
        tl::reduce(v / 100.0 + 1.0, 1, |a, b| a * b)
    });
    let want: Vec<f64> = (0..8)
        .map(|r| {
            if r < R {
                (0..C).map(|c| 1.0 + at(r, c) / 100.0).product::<f64>()
                    * 1.0f64.powi((64 - C) as i32)
            } else {
                1.0
            }
        })
        .collect();
    check("reduce(custom product)", &got, &want, 1e-5);
}

fn scans(t: Target) {
    let x = stored(&rnd(R * C, 12, -2.0, 2.0), F32);
    let at = |r: usize, c: usize| if r < R && c < C { x[r * C + c] } else { 0.0 };
    let cs: Vec<f64> = (0..8 * 64)
        .map(|i| (0..=i % 64).map(|c| at(i / 64, c)).sum())
        .collect();
    check(
        "cumsum axis 1",
        &matrix_op(t, "cumsum", F32, F32, &x, 0.0, &[8, 64], |v| v.cumsum(1)),
        &cs,
        1e-5,
    );
    let cp: Vec<f64> = (0..8 * 64)
        .map(|i| {
            (0..=i / 64)
                .map(|r| {
                    if r < R && i % 64 < C {
                        1.0 + at(r, i % 64) / 10.0
                    } else {
                        1.0
                    }
                })
                .product()
        })
        .collect();
    let got = matrix_op(t, "cumprod", F32, F32, &x, 0.0, &[8, 64], |v| {
        tl::cumprod(v / 10.0 + 1.0, 0)
    });
    check("cumprod axis 0", &got, &cp, 1e-5);
    let mx: Vec<f64> = (0..8 * 64)
        .map(|i| (0..=i % 64).map(|c| at(i / 64, c)).fold(f64::MIN, f64::max))
        .collect();
    let got = matrix_op(t, "scan_max", F32, F32, &x, 0.0, &[8, 64], |v| {
        tl::associative_scan(v, 1, false, tl::maximum)
    });
    check("associative_scan(max)", &got, &mx, 0.0);
}

// ---- dot --------------------------------------------------------------------------------

fn dot_case(t: Target, name: &str, din: DType, dout: DType, m: usize, n: usize, kk: usize) {
    let k = tl::jit(name, move |k| {
        let (ap, bp, cp) = (
            k.ptr(din, "a_ptr"),
            k.ptr(din, "b_ptr"),
            k.ptr(dout, "c_ptr"),
        );
        let (om, on, ok) = (tl::arange(0, 32), tl::arange(0, 32), tl::arange(0, 32));
        let a = tl::load(ap + om.col() * kk as i32 + ok.row())
            .mask(om.col().lt(m as i32) & ok.row().lt(kk as i32))
            .other(0);
        let b = tl::load(bp + ok.col() * n as i32 + on.row())
            .mask(ok.col().lt(kk as i32) & on.row().lt(n as i32))
            .other(0);
        let c = if dout == I32 {
            tl::dot_out(a, b, None, I32)
        } else {
            tl::dot(a, b, None)
        };
        tl::store(cp + om.col() * n as i32 + on.row(), c)
            .mask(om.col().lt(m as i32) & on.row().lt(n as i32));
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let scale = if din == I8 { 10.0 } else { 1.0 };
    let av: Vec<f64> = stored(
        &rnd(m * kk, 13, -scale, scale)
            .iter()
            .map(|v| v.round())
            .collect::<Vec<_>>(),
        din,
    );
    let bv: Vec<f64> = stored(
        &rnd(kk * n, 14, -scale, scale)
            .iter()
            .map(|v| if din == I8 { v.round() } else { v / 3.0 })
            .collect::<Vec<_>>(),
        din,
    );
    let (a, b) = (arr(&av, din), arr(&bv, din));
    let o = k
        .launch()
        .grid([1])
        .args((&a, &b, out(&[m * n], dout).fill(poison(dout))))
        .target(t)
        .run()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let want: Vec<f64> = (0..m * n)
        .map(|i| {
            (0..kk)
                .map(|p| av[i / n * kk + p] * bv[p * n + i % n])
                .sum()
        })
        .collect();
    check(
        name,
        &vals(&o[0]),
        &want,
        if din == F32 { 1e-5 } else { 2e-3 },
    );
}

fn dots(t: Target) {
    dot_case(t, "dot_f32", F32, F32, 29, 31, 27);
    dot_case(t, "dot_f16", F16, F32, 32, 32, 32);
    dot_case(t, "dot_i8", I8, I32, 30, 17, 25);
}

// ---- shapes -----------------------------------------------------------------------------

fn shapes(t: Target) {
    let x = stored(&rnd(R * C, 15, -1.0, 1.0), F32);
    let at = |r: usize, c: usize| if r < R && c < C { x[r * C + c] } else { 0.0 };
    let tr: Vec<f64> = (0..64 * 8).map(|i| at(i % 8, i / 8)).collect();
    check(
        "trans",
        &matrix_op(t, "trans", F32, F32, &x, 0.0, &[64, 8], tl::trans),
        &tr,
        0.0,
    );
    let rs: Vec<f64> = (0..512).map(|i| at(i / 64, i % 64)).collect();
    check(
        "reshape",
        &matrix_op(t, "reshape", F32, F32, &x, 0.0, &[16, 32], |v| {
            v.reshape([16, 32])
        }),
        &rs,
        0.0,
    );
    let bc: Vec<f64> = (0..8 * 64)
        .map(|i| (0..64).map(|c| at(i / 64, c)).sum())
        .collect();
    let got = matrix_op(t, "broadcast", F32, F32, &x, 0.0, &[8, 64], |v| {
        v.sum(1).col().broadcast_to([8, 64])
    });
    check("sum(1)[:, None] broadcast", &got, &bc, 1e-5);
    let pm: Vec<f64> = (0..64 * 8).map(|i| at(i % 8, i / 8) * 2.0).collect();
    let got = matrix_op(t, "permute", F32, F32, &x, 0.0, &[64, 8], |v| {
        (v * 2.0).permute([1, 0])
    });
    check("permute", &got, &pm, 0.0);
    let js: Vec<f64> = (0..8 * 64)
        .map(|i| at(i / 64, i % 64) * 3.0 - 1.0)
        .collect();
    let got = matrix_op(t, "join_split", F32, F32, &x, 0.0, &[8, 64], |v| {
        let (a, b) = tl::split(tl::join(v * 3.0, v - 1.0));
        a + b - v
    });
    check("join/split", &got, &js, 1e-6);
}

// ---- random, atomics, control flow --------------------------------------------------------

fn philox(seed: u64, offset: u32) -> [u32; 4] {
    let (mut c0, mut c1, mut c2, mut c3) = (offset, 0u32, 0u32, 0u32);
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    for _ in 0..10 {
        let (a, b) = (0xD251_1F53u32, 0xCD9E_8D57u32);
        let (p0, p2) = (c0, c2);
        c0 = ((b as u64 * p2 as u64) >> 32) as u32 ^ c1 ^ k0;
        c2 = ((a as u64 * p0 as u64) >> 32) as u32 ^ c3 ^ k1;
        c1 = b.wrapping_mul(p2);
        c3 = a.wrapping_mul(p0);
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    [c0, c1, c2, c3]
}

fn random(t: Target) {
    let offs: Vec<f64> = (0..N).map(|i| (i * 7) as f64).collect();
    let got = unary(t, "randint", I32, U32, &offs, |o| tl::randint(42, o));
    let want: Vec<f64> = (0..N)
        .map(|i| philox(42, (i * 7) as u32)[0] as f64)
        .collect();
    check("randint (Philox 4x32-10)", &got, &want, 0.0);
    let got = unary(t, "rand", I32, F32, &offs, |o| tl::rand(42, o));
    let u = |x: u32| {
        let x = x as i32;
        let x = if x < 0 {
            x.wrapping_neg().wrapping_sub(1)
        } else {
            x
        };
        (x as f32 * 4.656_612_734_2e-10_f64 as f32) as f64
    };
    let want: Vec<f64> = (0..N).map(|i| u(philox(42, (i * 7) as u32)[0])).collect();
    check("rand", &got, &want, 0.0);
    let got = unary(t, "randn", I32, F32, &offs, |o| tl::randn(42, o));
    let want: Vec<f64> = (0..N)
        .map(|i| {
            let r = philox(42, (i * 7) as u32);
            let u1 = u(r[0]).max(1.0e-7);
            let u2 = u(r[1]);
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        })
        .collect();
    check("randn (Box-Muller)", &got, &want, 1e-4);
}

fn atomics(t: Target) {
    // Histogram of N values into 16 bins, from all programs at once.
    let bins = 16usize;
    let k = tl::jit("histogram", move |k| {
        let (xp, hp) = (k.ptr(I32, "x_ptr"), k.ptr(I32, "hist_ptr"));
        let mp = k.ptr(I32, "max_or_xor_ptr");
        let n = k.scalar(I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        let x = tl::load(xp + offs).mask(mask);
        let zero = tl::zeros_like(offs);
        tl::atomic_add(hp + x % bins as i32, 1).mask(mask);
        tl::atomic_max(mp + zero, x).mask(mask);
        tl::atomic_or(mp + 1 + zero, x).mask(mask);
        tl::atomic_xor(mp + 2 + zero, x).mask(mask);
    })
    .unwrap();
    // Its own launch: MLX's GPU kernels take one fill value for all outputs.
    let kmin = tl::jit("atomic_min", move |k| {
        let (xp, np) = (k.ptr(I32, "x_ptr"), k.ptr(I32, "min_ptr"));
        let n = k.scalar(I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        let x = tl::load(xp + offs).mask(mask);
        tl::atomic_min(np + tl::zeros_like(offs), x).mask(mask);
    })
    .unwrap();
    let xs: Vec<f64> = rnd(N, 16, 0.0, 1000.0).iter().map(|v| v.trunc()).collect();
    let xa = arr(&xs, I32);
    let o = k
        .launch()
        .grid([PROGRAMS])
        .args((
            &xa,
            out(&[bins], I32).fill(0.0),
            out(&[3], I32).fill(0.0),
            N as i32,
        ))
        .constexpr("BLOCK", BLOCK as i64)
        .target(t)
        .run()
        .unwrap();
    let omin = kmin
        .launch()
        .grid([PROGRAMS])
        .args((&xa, out(&[1], I32).fill(1.0e6), N as i32))
        .constexpr("BLOCK", BLOCK as i64)
        .target(t)
        .run()
        .unwrap();
    let mut hist = vec![0.0; bins];
    for x in &xs {
        hist[*x as usize % bins] += 1.0;
    }
    check("atomic_add histogram", &vals(&o[0]), &hist, 0.0);
    let xi: Vec<i32> = xs.iter().map(|v| *v as i32).collect();
    let want = [
        *xi.iter().max().unwrap() as f64,
        xi.iter().fold(0, |a, b| a | b) as f64,
        xi.iter().fold(0, |a, b| a ^ b) as f64,
    ];
    check("atomic max/or/xor", &vals(&o[1]), &want, 0.0);
    check(
        "atomic min",
        &vals(&omin[0]),
        &[*xi.iter().min().unwrap() as f64],
        0.0,
    );

    // xchg and cas: every program swaps its id in; exactly one program wins the cas.
    let k = tl::jit("xchg_cas", |k| {
        let (sp, wp) = (k.ptr(I32, "slot_ptr"), k.ptr(I32, "winner_ptr"));
        let pid = tl::program_id(0);
        let old = tl::atomic_cas(wp, -1, pid);
        tl::atomic_xchg(sp + pid, old + 1000);
    })
    .unwrap();
    let o = k
        .launch()
        .grid([8])
        // One fill for both outputs (MLX's GPU kernels take one); xchg overwrites every slot.
        .args((out(&[8], I32).fill(-1.0), out(&[1], I32).fill(-1.0)))
        .target(t)
        .run()
        .unwrap();
    let winner = vals(&o[1])[0];
    assert!((0.0..8.0).contains(&winner), "cas winner {winner}");
    let slots = vals(&o[0]);
    assert_eq!(
        slots.iter().filter(|v| **v == 999.0).count(),
        1,
        "{slots:?}"
    );
    assert_eq!(slots[winner as usize], 999.0, "{slots:?}");
    assert!(
        slots.iter().all(|v| *v == 999.0 || *v == 1000.0 + winner),
        "{slots:?}"
    );
}

fn control_flow(t: Target) {
    // while: Collatz steps; for with runtime bounds and step; if on a scalar; static_range.
    let k = tl::jit("control", |k| {
        let (xp, op) = (k.ptr(I32, "x_ptr"), k.ptr(I32, "out_ptr"));
        let lo = k.scalar(I32, "lo");
        let pid = tl::program_id(0);
        let x = tl::load(xp + pid);
        let (_, steps) = tl::while_loop(
            (x, tl::zeros_like(x)),
            |(v, _)| v.gt(1),
            |(v, s)| {
                (
                    tl::where_((v % 2).eq(0), tl::floordiv(v, 2), v * 3 + 1),
                    s + 1,
                )
            },
        );
        let sum = tl::range(lo, x, 3).fold(tl::zeros_like(x), |i, acc| acc + i);
        let parity = tl::if_((pid % 2).eq(0), || sum * 2, || sum * 3);
        let mut unrolled = tl::zeros_like(x);
        for j in tl::static_range(0, 4, 1) {
            unrolled += x * j as i32;
        }
        tl::debug_barrier();
        tl::store(op + pid * 3, steps);
        tl::store(op + pid * 3 + 1, parity);
        tl::store(op + pid * 3 + 2, unrolled);
    })
    .unwrap();
    let xs: Vec<f64> = vec![27.0, 1.0, 6.0, 97.0, 2.0, 12.0];
    let lo = -5i32;
    let o = k
        .launch()
        .grid([xs.len()])
        .args((&arr(&xs, I32), out(&[xs.len() * 3], I32).fill(-7.0), lo))
        .target(t)
        .run()
        .unwrap();
    let mut want = Vec::new();
    for (p, x) in xs.iter().enumerate() {
        let x = *x as i64;
        let (mut v, mut s) = (x, 0);
        while v > 1 {
            v = if v % 2 == 0 { v / 2 } else { 3 * v + 1 };
            s += 1;
        }
        let sum: i64 = (lo as i64..x).step_by(3).sum();
        want.extend([
            s as f64,
            (sum * if p % 2 == 0 { 2 } else { 3 }) as f64,
            (x * 6) as f64,
        ]);
    }
    check("while/for/if/static_range", &vals(&o[0]), &want, 0.0);
}

// ---- instantiation per target -------------------------------------------------------------

macro_rules! on_targets {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $(#[test] fn $name() { super::$name(super::Target::Cpu) })*
        }
        /// The compiled CPU executor (needs the emulator's clang).
        mod cpu_compiled {
            $(#[test] fn $name() {
                if super::Emulator::should_run(stringify!($name)).unwrap() {
                    super::$name(super::Target::CpuCompiled)
                }
            })*
        }
        mod emulated {
            $(#[test] fn $name() {
                if super::Emulator::should_run(stringify!($name)).unwrap() {
                    super::$name(super::Target::Emulated(super::LaneOrder::Forward))
                }
            })*
        }
        mod emulated_reverse {
            $(#[test] fn $name() {
                if super::Emulator::should_run(stringify!($name)).unwrap() {
                    super::$name(super::Target::Emulated(super::LaneOrder::Reverse))
                }
            })*
        }
        /// On an NVIDIA GPU (a `--features cuda` build with MLX's CUDA back end); elsewhere
        /// these print that they skipped (tests/cuda.rs checks the error path).
        mod cuda {
            $(#[test] fn $name() {
                if super::on_cuda() {
                    super::$name(super::Target::Cuda)
                } else {
                    println!("{}: no CUDA device, skipped", stringify!($name));
                }
            })*
        }
    };
}

fn on_cuda() -> bool {
    triton_metal::HardwareInfo::detect().is_ok_and(|h| h.backend == triton_metal::Backend::Cuda)
}

on_targets!(
    float_arith,
    float_math,
    int_arith,
    casts_and_select,
    reductions,
    scans,
    dots,
    shapes,
    random,
    atomics,
    control_flow,
);
