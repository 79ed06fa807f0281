//! `tl::libdevice`'s math functions on every target against an f64 reference, on random
//! inputs over many magnitudes plus the edge values (NaN, ±inf, ±0, subnormals, the ends
//! of each domain), with ragged sizes and poisoned outputs.
//!
//! Each target's error is measured in units in the last place of the f32 result. The
//! interpreter computes in f64 and rounds once (within 1 ulp). The compiled CPU executor
//! and the emulated Metal (the host's libm standing in for `metal::precise`, and the
//! helpers `codegen::math` prints) are held to [`TOLERANCE`]. The CUDA text is compiled
//! by NVRTC here; it calls CUDA's math library (CUDA's documented bounds: 1 to 4 ulp).

mod support;

use triton_metal::runtime::{out, Launch, Target};
use triton_metal::tl::{self, libdevice, JitKernel, Tensor};
use triton_metal::{Array, DType::*};

const BLOCK: usize = 256;
/// Elements per function: the last program is partial and the tail of each output range
/// stays poisoned.
const N: usize = 1000;
const LEN: usize = 1024;
const POISON: f32 = -12345.5;

/// Max error in f32 ulp on the compiled CPU executor and emulated Metal, per function:
/// the worst measured on these inputs (glibc 2.36's vectorised libm, which the executor's
/// loops call wherever their stores are plain and so vectorise: `tan` 2.26 and `log1p`
/// 3.19 ulp; the helpers of `codegen::math`), rounded up to a half.
const TOLERANCE: &[(&str, f64)] = &[
    ("tan", 2.5),
    ("asin", 1.0),
    ("acos", 1.0),
    ("atan", 1.0),
    ("sinh", 1.5),
    ("cosh", 1.0),
    ("asinh", 1.5),
    ("acosh", 1.5),
    ("atanh", 1.5),
    ("log1p", 3.5),
    ("expm1", 2.0),
    ("log10", 1.5),
    ("exp10", 1.0),
    ("cbrt", 1.0),
    ("erfinv", 3.0),
    ("pow", 1.0),
    ("atan2", 1.5),
    ("hypot", 2.0),
];

fn tolerance(name: &str, t: Target) -> f64 {
    if t == Target::Cpu {
        return 1.0;
    }
    TOLERANCE.iter().find(|(n, _)| *n == name).unwrap().1
}

/// Runs the launch on every target (and compiles its CUDA); each target's first output.
fn every_target(
    k: &JitKernel,
    setup: impl for<'a> Fn(Launch<'a>) -> Launch<'a>,
) -> Vec<(Target, Vec<f32>)> {
    support::every_target(k, setup)
        .into_iter()
        .map(|(t, o)| (t, o[0].to_vec::<f32>().unwrap()))
        .collect()
}

/// A deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The edge values every function sees, then random values: uniform in [-1.5, 1.5] (the
/// domains of the inverse functions), log-uniform magnitudes from 1e-30 to 1e30 of either
/// sign, and random bit patterns.
fn inputs(seed: u64) -> Vec<f32> {
    let mut v = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        0.7,
        -0.7,
        2.0,
        -2.0,
        1e-45,
        -1e-45,
        1e-39,
        -3e-39,
        f32::MIN_POSITIVE,
        5.9604645e-8,
        -5.9e-8,
        1e-7,
        f32::MAX,
        f32::MIN,
        0.99999994,
        -0.99999994,
        1.0000001,
        -1.0000001,
        88.7,
        89.0,
        -87.0,
        -104.0,
        38.5,
        -45.0,
        3.0,
        1e10,
        -1e10,
    ];
    let mut r = Rng(seed);
    while v.len() < N {
        let x = match v.len() % 3 {
            0 => (r.unit() * 3.0 - 1.5) as f32,
            1 => {
                let m = 10f64.powf(r.unit() * 60.0 - 30.0);
                (if r.next() & 1 == 0 { m } else { -m }) as f32
            }
            _ => f32::from_bits(r.next() as u32),
        };
        v.push(x);
    }
    v
}

/// The distance from `got` to the exact `want`, in ulp of f32 at `want`'s magnitude (NaN
/// must match NaN, infinities and zero signs exactly).
fn ulps(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let w32 = want as f32;
    if w32.is_infinite() || got.is_infinite() {
        // Past f32's range, only the rounded value itself is right.
        return if got == w32 { 0.0 } else { f64::INFINITY };
    }
    if want == 0.0 && got == 0.0 {
        return if want.is_sign_negative() == got.is_sign_negative() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let e = (want.abs().max(f32::MIN_POSITIVE as f64)).log2().floor();
    let ulp = 2f64.powf(e - 23.0);
    (got as f64 - want).abs() / ulp
}

/// The inverse error function by bisection on libm's `erf` (`erfc` in the tails, where
/// `1 - |y|` is exact): an independent reference for `erfinv`.
fn erfinv_ref(y: f64) -> f64 {
    let a = y.abs();
    if y.is_nan() || a > 1.0 {
        return f64::NAN;
    }
    if a == 1.0 {
        return f64::INFINITY.copysign(y);
    }
    if y == 0.0 {
        return y;
    }
    let (mut lo, mut hi) = (0.0f64, 10.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        let below = if a <= 0.5 {
            libm::erf(mid) < a
        } else {
            libm::erfc(mid) > 1.0 - a
        };
        if below {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).copysign(y)
}

type Unary = (&'static str, fn(Tensor) -> Tensor, fn(f64) -> f64);

const UNARY: [Unary; 15] = [
    ("tan", |x| libdevice::tan(x), f64::tan),
    ("asin", |x| libdevice::asin(x), f64::asin),
    ("acos", |x| libdevice::acos(x), f64::acos),
    ("atan", |x| libdevice::atan(x), f64::atan),
    ("sinh", |x| libdevice::sinh(x), f64::sinh),
    ("cosh", |x| libdevice::cosh(x), f64::cosh),
    ("asinh", |x| libdevice::asinh(x), libm::asinh),
    ("acosh", |x| libdevice::acosh(x), libm::acosh),
    ("atanh", |x| libdevice::atanh(x), libm::atanh),
    ("log1p", |x| libdevice::log1p(x), f64::ln_1p),
    ("expm1", |x| libdevice::expm1(x), f64::exp_m1),
    ("log10", |x| libdevice::log10(x), f64::log10),
    ("exp10", |x| libdevice::exp10(x), |x| 10f64.powf(x)),
    ("cbrt", |x| libdevice::cbrt(x), f64::cbrt),
    ("erfinv", |x| libdevice::erfinv(x), erfinv_ref),
];

/// The worst error of each function on each target, asserted against the tolerances.
fn check(name: &str, t: Target, xs: &[(f64, f64)], got: &[f32], want: impl Fn(f64, f64) -> f64) {
    let mut worst = (0.0f64, 0usize);
    for (i, &(x, y)) in xs.iter().enumerate() {
        let e = ulps(got[i], want(x, y));
        if e > worst.0 {
            worst = (e, i);
        }
    }
    let (e, i) = worst;
    let (x, y) = xs[i];
    assert!(
        e <= tolerance(name, t),
        "{name}({x:e}, {y:e}) on {t:?}: {} want {:e} ({e:.2} ulp)",
        got[i],
        want(x, y)
    );
}

#[test]
fn unary_functions_on_every_target() {
    let k = tl::jit("libdevice_unary", |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let n = k.scalar(I32, "n");
        let offs = tl::program_id(0) * BLOCK as i32 + tl::arange(0, BLOCK as i64);
        let m = offs.lt(n);
        let v = tl::load(x + offs).mask(m);
        for (i, (_, f, _)) in UNARY.iter().enumerate() {
            tl::store(o + (i * LEN) as i32 + offs, f(v)).mask(m);
        }
    })
    .unwrap();
    let xs = inputs(7);
    let xa = Array::from_slice(&xs, &[N]).unwrap();
    let total = UNARY.len() * LEN;
    for (t, got) in every_target(&k, |l| {
        l.grid([N.div_ceil(BLOCK)])
            .args((&xa, out(&[total], F32).fill(POISON as f64), N as i32))
    }) {
        let pairs: Vec<(f64, f64)> = xs.iter().map(|&x| (x as f64, 0.0)).collect();
        for (i, (name, _, f)) in UNARY.iter().enumerate() {
            let r = &got[i * LEN..(i + 1) * LEN];
            check(name, t, &pairs, r, |x, _| f(x));
            assert!(
                r[N..].iter().all(|&v| v == POISON),
                "{name} on {t:?} wrote past n"
            );
        }
    }
}

type Binary = (
    &'static str,
    fn(Tensor, Tensor) -> Tensor,
    fn(f64, f64) -> f64,
);

const BINARY: [Binary; 3] = [
    ("pow", |x, y| libdevice::pow(x, y), f64::powf),
    ("atan2", |x, y| libdevice::atan2(x, y), f64::atan2),
    ("hypot", |x, y| libdevice::hypot(x, y), libm::hypot),
];

#[test]
fn binary_functions_on_every_target() {
    let k = tl::jit("libdevice_binary", |k| {
        let (x, y, o) = (k.ptr(F32, "x"), k.ptr(F32, "y"), k.ptr(F32, "o"));
        let n = k.scalar(I32, "n");
        let offs = tl::program_id(0) * BLOCK as i32 + tl::arange(0, BLOCK as i64);
        let m = offs.lt(n);
        let (a, b) = (tl::load(x + offs).mask(m), tl::load(y + offs).mask(m));
        for (i, (_, f, _)) in BINARY.iter().enumerate() {
            tl::store(o + (i * LEN) as i32 + offs, f(a, b)).mask(m);
        }
    })
    .unwrap();
    // Every pair of edge values, then random pairs; pow also sees integral exponents
    // (odd and even) of negative bases.
    let edges = &inputs(0)[..36];
    let mut pairs: Vec<(f32, f32)> = vec![];
    for &a in edges.iter().step_by(2) {
        for &b in edges.iter().skip(1).step_by(2) {
            pairs.push((a, b));
        }
    }
    pairs.extend([
        (-2.0, 3.0),
        (-2.0, 4.0),
        (-0.5, -3.0),
        (-8.0, 1.0 / 3.0),
        (-1.0, f32::INFINITY),
        (1.0, f32::NAN),
        (f32::NAN, 0.0),
        (-0.0, -1.0),
        (0.0, -1.0),
        (-0.0, 3.0),
    ]);
    let rand = inputs(11);
    let mut r = Rng(5);
    while pairs.len() < N {
        let a = rand[36 + (r.next() as usize) % (N - 36)];
        let b = match r.next() % 3 {
            0 => (r.unit() * 8.0 - 4.0) as f32,
            1 => (r.next() % 9) as f32 - 4.0,
            _ => rand[36 + (r.next() as usize) % (N - 36)],
        };
        pairs.push((a, b));
    }
    pairs.truncate(N);
    let xa = Array::from_slice(&pairs.iter().map(|p| p.0).collect::<Vec<_>>(), &[N]).unwrap();
    let ya = Array::from_slice(&pairs.iter().map(|p| p.1).collect::<Vec<_>>(), &[N]).unwrap();
    let total = BINARY.len() * LEN;
    let wide: Vec<(f64, f64)> = pairs.iter().map(|&(a, b)| (a as f64, b as f64)).collect();
    for (t, got) in every_target(&k, |l| {
        l.grid([N.div_ceil(BLOCK)]).args((
            &xa,
            &ya,
            out(&[total], F32).fill(POISON as f64),
            N as i32,
        ))
    }) {
        for (i, (name, _, f)) in BINARY.iter().enumerate() {
            let r = &got[i * LEN..(i + 1) * LEN];
            check(name, t, &wide, r, f);
            assert!(
                r[N..].iter().all(|&v| v == POISON),
                "{name} on {t:?} wrote past n"
            );
        }
    }
}

/// C99's special cases, spelled out (the reference above is Rust's f64, which follows C99).
#[test]
fn special_values() {
    let k = tl::jit("libdevice_special", |k| {
        let o = k.ptr(F32, "o");
        let i = tl::arange(0, 16);
        let nan = tl::full([16], f32::NAN, F32);
        let inf = tl::full([16], f32::INFINITY, F32);
        let one = tl::full([16], 1.0f32, F32);
        let zero = tl::full([16], 0.0f32, F32);
        let vals = [
            libdevice::pow(nan, zero),                          // 1
            libdevice::pow(one, nan),                           // 1
            libdevice::pow(-one, inf),                          // 1
            libdevice::pow(-one * 2.0f32, one * 0.5f32),        // NaN
            libdevice::pow(tl::full([16], -0.0f32, F32), -one), // -inf
            libdevice::hypot(inf, nan),                         // inf
            libdevice::hypot(nan, -inf),                        // inf
            libdevice::atan2(zero, -one),                       // pi
            libdevice::atan2(tl::full([16], -0.0f32, F32), tl::full([16], -0.0f32, F32)), // -pi
            libdevice::asin(one),                               // pi/2
            libdevice::acos(-one),                              // pi
            libdevice::atanh(one),                              // inf
            libdevice::erfinv(-one),                            // -inf
            libdevice::acosh(zero),                             // NaN
            libdevice::cbrt(-inf),                              // -inf
            libdevice::log1p(-one),                             // -inf
        ];
        let mut acc = tl::full([16], 0.0f32, F32);
        for (j, v) in vals.into_iter().enumerate() {
            acc = tl::where_(i.eq(j as i32), v, acc);
        }
        tl::store(o + i, acc);
    })
    .unwrap();
    let pi = std::f32::consts::PI;
    let want = [
        1.0,
        1.0,
        1.0,
        f32::NAN,
        f32::NEG_INFINITY,
        f32::INFINITY,
        f32::INFINITY,
        pi,
        -pi,
        pi / 2.0,
        pi,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
    ];
    for (t, got) in every_target(&k, |l| {
        l.grid([1]).args((out(&[16], F32).fill(POISON as f64),))
    }) {
        for (j, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g.is_nan() && w.is_nan()) || *g == w,
                "case {j} on {t:?}: {g}, want {w}"
            );
        }
    }
}

/// fp64 on the interpreter, against the host's libm (an implementation apart from the
/// interpreter's `libm` crate): within 2 ulp of f64.
#[test]
fn fp64_on_the_interpreter() {
    let k = tl::jit("libdevice_f64", |k| {
        let (x, o) = (k.ptr(F64, "x"), k.ptr(F64, "o"));
        let offs = tl::arange(0, 64);
        let v = tl::load(x + offs);
        tl::store(o + offs, libdevice::asinh(v));
        tl::store(o + 64 + offs, libdevice::pow(v, 1.5f64));
        tl::store(o + 128 + offs, libdevice::cbrt(v));
    })
    .unwrap();
    let xs: Vec<f64> = (0..64).map(|i| (i as f64 - 20.0) * 0.37 + 1e-3).collect();
    let xa = Array::from_slice(&xs, &[64]).unwrap();
    let o = k
        .launch()
        .grid([1])
        .args((&xa, out(&[192], F64)))
        .target(Target::Cpu)
        .run()
        .unwrap();
    let got = o[0].to_vec::<f64>().unwrap();
    for (i, &x) in xs.iter().enumerate() {
        for (j, want) in [x.asinh(), x.powf(1.5), x.cbrt()].into_iter().enumerate() {
            let g = got[j * 64 + i];
            let ok = (g.is_nan() && want.is_nan())
                || (g - want).abs() <= 2.0 * f64::EPSILON * want.abs();
            assert!(ok, "function {j} of {x}: {g}, want {want}");
        }
    }
}

/// Triton's libdevice takes fp32 and fp64 only: an integer operand is an error naming it.
#[test]
fn integer_operands_are_errors() {
    let e = tl::jit("libdevice_int", |k| {
        let o = k.ptr(F32, "o");
        let i = tl::arange(0, 16);
        tl::store(o + i, libdevice::asin(i));
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("asin") && e.contains("fp32 or fp64"), "{e}");
    let e = tl::jit("libdevice_int2", |k| {
        let o = k.ptr(F32, "o");
        let i = tl::arange(0, 16);
        tl::store(o + i, libdevice::pow(i, 2));
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("pow") && e.contains("fp32 or fp64"), "{e}");
}
