//! fp64 kernels on the CPU targets: the interpreter (`Target::Cpu`) and the compiled CPU
//! executor (`Target::CpuCompiled`) compute the same bits for loads and stores, arithmetic,
//! comparisons, casts to and from every dtype, `maximum`/`minimum` (and their NaN-propagating
//! forms), max/min/argmax/argmin reductions, `dot`, atomics and the core math functions
//! (both call the host's libm for `exp`, `log`, `sin`, ...); sums and scans agree up to
//! reassociation (each executor adds in its own order, as for f32). `erf` and the
//! `libdevice` functions, which the interpreter computes with the `libm` crate (musl's
//! algorithms) and the compiled executor with the host's libm, agree within 2 ulp (`exp10`
//! 4). Edge values (NaN, ±inf, ±0, subnormals, the largest doubles, rounding ties of the
//! narrow types), ragged sizes and poisoned outputs throughout. Metal and CUDA have no fp64
//! code: the emulated Metal target and the CUDA printer answer `Unsupported`, naming the op,
//! the target and the alternative.

mod support;

use triton_metal::emu::LaneOrder;
use triton_metal::runtime::{out, Launch, Target};
use triton_metal::tl::{self, libdevice, JitKernel};
use triton_metal::{
    Array,
    DType::{self, *},
    Element, Error,
};

const POISON: f64 = -777.0;

/// The CPU targets this machine runs: the interpreter, and the compiled executor with clang.
fn cpu_targets(test: &str) -> Vec<Target> {
    support::targets(test)
        .into_iter()
        .filter(|t| matches!(t, Target::Cpu | Target::CpuCompiled))
        .collect()
}

/// Each CPU target's outputs for the launch `setup` configures.
fn run_cpu(
    k: &JitKernel,
    setup: impl for<'a> Fn(Launch<'a>) -> Launch<'a>,
) -> Vec<(Target, Vec<Array>)> {
    cpu_targets(k.name())
        .into_iter()
        .map(|t| {
            let o = setup(k.launch())
                .target(t)
                .run()
                .unwrap_or_else(|e| panic!("{} on {t:?}: {e}", k.name()));
            (t, o)
        })
        .collect()
}

/// Same bits, or both NaN (a NaN's payload after arithmetic depends on operand order,
/// which C compilers may swap for commutative ops).
fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Doubles worth testing: NaN, ±inf, ±0, subnormals, the extremes, values around integer
/// limits and rounding ties of f32, f16 and bf16, then pseudo-random ones of every
/// magnitude.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let p = |e: i32| 2f64.powi(e);
    let edges = [
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        5e-324,
        -5e-324,
        2.225_073_858_507_201e-308,
        -1e-310,
        f64::MAX,
        f64::MIN,
        1e308,
        -1e308,
        1.0,
        -1.0,
        0.5,
        -2.5,
        300.5,
        -300.5,
        32767.5,
        -32768.75,
        65535.9,
        2147483647.5,
        -2147483648.9,
        2147483648.0,
        4294967295.7,
        4294967296.0,
        9.223_372_036_854_776e18,
        -9.223_372_036_854_776e18,
        1.844_674_407_370_955_2e19,
        1.0 + p(-11) + p(-40),
        1.0 + p(-11),
        1.0 + p(-8) + p(-40),
        -(1.0 + p(-8)),
        1.0 + p(-24) + p(-60),
        65519.99,
        65520.0,
        p(-25) + p(-60),
        3.4e38,
        3.5e38,
        1e-46,
    ];
    let mut s = seed;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s >> 11
    };
    (0..n)
        .map(|i| {
            if i < edges.len() {
                edges[(i + seed as usize) % edges.len()]
            } else {
                let m = next() as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                let e = (next() % 80) as i32 - 40;
                m * 2f64.powi(e)
            }
        })
        .collect()
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

// ---- elementwise ---------------------------------------------------------------------------

const ELEMENTWISE: [&str; 27] = [
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "fma",
    "maximum",
    "minimum",
    "maximum_nan",
    "minimum_nan",
    "clamp",
    "where",
    "neg",
    "abs",
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "floor",
    "ceil",
    "lt",
    "eq",
    "bitcast",
];

/// Every elementwise op on pairs of edge values, bit for bit against Rust's f64 (the host's
/// libm for the math functions), over a ragged size with a masked tail.
#[test]
fn elementwise_ops_are_bit_exact() {
    const BLOCK: i64 = 64;
    let k = tl::jit("f64_elementwise", |k| {
        let (x, y, o) = (k.ptr(F64, "x"), k.ptr(F64, "y"), k.ptr(F64, "o"));
        let n = k.scalar(I32, "n");
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        let a = tl::load(x + offs).mask(m);
        let b = tl::load(y + offs).mask(m);
        let r = [
            a + b,
            a - b,
            a * b,
            a / b,
            a % b,
            tl::fma(a, b, a),
            tl::maximum(a, b),
            tl::minimum(a, b),
            tl::maximum_nan(a, b),
            tl::minimum_nan(a, b),
            tl::clamp(a, -1.5f64, 2.0f64),
            tl::where_(a.lt(b), a, b),
            -a,
            tl::abs(a),
            tl::exp(a),
            tl::exp2(a),
            tl::log(a),
            tl::log2(a),
            tl::sqrt(a),
            tl::rsqrt(a),
            tl::sin(a),
            tl::cos(a),
            tl::floor(a),
            tl::ceil(a),
            a.lt(b).cast(F64),
            a.eq(b).cast(F64),
            tl::bitcast(tl::bitcast(a, I64) ^ 1i64, F64),
        ];
        for (i, v) in r.into_iter().enumerate() {
            tl::store(o + n * i as i64 + offs, v).mask(m);
        }
    })
    .unwrap();
    let n = 333;
    let (xs, ys) = (values(n, 1), values(n, 7));
    let (xa, ya) = (
        Array::from_slice(&xs, &[n]).unwrap(),
        Array::from_slice(&ys, &[n]).unwrap(),
    );
    let outs = run_cpu(&k, |l| {
        l.grid([n.div_ceil(BLOCK as usize)]).args((
            &xa,
            &ya,
            out(&[n * ELEMENTWISE.len() + 5], F64).fill(POISON),
            n as i32,
        ))
    });
    let canon = f64::from_bits(!0 >> 1);
    let rmax = |a: f64, b: f64| {
        if b.is_nan() || a > b || (a == b && !a.is_sign_negative()) {
            a
        } else {
            b
        }
    };
    let rmin = |a: f64, b: f64| {
        if b.is_nan() || a < b || (a == b && a.is_sign_negative()) {
            a
        } else {
            b
        }
    };
    for (t, o) in &outs {
        let got = f64s(&o[0]);
        for i in 0..n {
            let (a, b) = (xs[i], ys[i]);
            let want = [
                a + b,
                a - b,
                a * b,
                a / b,
                a % b,
                a.mul_add(b, a),
                rmax(a, b),
                rmin(a, b),
                if a.is_nan() || b.is_nan() {
                    canon
                } else {
                    rmax(a, b)
                },
                if a.is_nan() || b.is_nan() {
                    canon
                } else {
                    rmin(a, b)
                },
                // Triton's default `propagate_nan=NONE`: NaN ignored like `maximum`.
                rmin(rmax(a, -1.5), 2.0),
                if a < b { a } else { b },
                // Triton's `-x` is `0 - x`: -(+0.0) is +0.0.
                0.0 - a,
                a.abs(),
                a.exp(),
                a.exp2(),
                a.ln(),
                a.log2(),
                a.sqrt(),
                1.0 / a.sqrt(),
                a.sin(),
                a.cos(),
                a.floor(),
                a.ceil(),
                (a < b) as u8 as f64,
                (a == b) as u8 as f64,
                f64::from_bits(a.to_bits() ^ 1),
            ];
            for (j, w) in want.into_iter().enumerate() {
                let g = got[j * n + i];
                let exact = matches!(ELEMENTWISE[j], "maximum_nan" | "minimum_nan" | "bitcast");
                let ok = if exact {
                    g.to_bits() == w.to_bits()
                } else {
                    same(g, w)
                };
                assert!(
                    ok,
                    "{t:?}: {}({a:e}, {b:e}) = {g:e} ({:#x}), want {w:e} ({:#x})",
                    ELEMENTWISE[j],
                    g.to_bits(),
                    w.to_bits()
                );
            }
        }
        assert!(
            got[n * ELEMENTWISE.len()..].iter().all(|&g| g == POISON),
            "{t:?}: tail"
        );
    }
    assert_eq!(outs.len(), cpu_targets("f64_elementwise").len());
}

// ---- casts ---------------------------------------------------------------------------------

/// Doubles to every dtype (integers truncate and saturate, NaN gives 0, or the bits
/// 0x8000000000000000 for 64-bit integers; 8-bit integers are the low byte of the 16-bit
/// result; f16 and bf16 round once) and back, the same on both CPU targets, with the
/// values Triton defines checked here.
#[test]
fn casts_to_and_from_every_dtype() {
    const BLOCK: i64 = 64;
    let to = [I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, Bool];
    let k = tl::jit("f64_casts", move |k| {
        let x = k.ptr(F64, "x");
        let outs: Vec<_> = to
            .iter()
            .map(|&d| k.ptr(d, &format!("o_{}", d.short_name())))
            .collect();
        let back = k.ptr(F64, "back");
        let n = k.scalar(I32, "n");
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        let a = tl::load(x + offs).mask(m);
        for (i, (&d, &o)) in to.iter().zip(&outs).enumerate() {
            let c = a.cast(d);
            tl::store(o + offs, c).mask(m);
            // ... and back to f64 (from every dtype).
            tl::store(back + n * i as i64 + offs, c.cast(F64)).mask(m);
        }
    })
    .unwrap();
    let n = 150;
    let xs = values(n, 3);
    let xa = Array::from_slice(&xs, &[n]).unwrap();
    let outs = run_cpu(&k, |l| {
        let mut args: Vec<triton_metal::runtime::Arg> = vec![(&xa).into()];
        for &d in &to {
            args.push(out(&[n], d).fill(1.0));
        }
        args.push(out(&[n * to.len()], F64).fill(POISON));
        args.push((n as i32).into());
        l.grid([n.div_ceil(BLOCK as usize)]).args(args)
    });
    fn bits<T: Element + Copy>(a: &Array, f: impl Fn(T) -> u64) -> Vec<u64> {
        a.to_vec::<T>().unwrap().into_iter().map(f).collect()
    }
    let as_bits = |d: DType, a: &Array| -> Vec<u64> {
        match d {
            I8 => bits(a, |v: i8| v as u8 as u64),
            I16 => bits(a, |v: i16| v as u16 as u64),
            I32 => bits(a, |v: i32| v as u32 as u64),
            I64 => bits(a, |v: i64| v as u64),
            U8 => bits(a, |v: u8| v as u64),
            U16 => bits(a, |v: u16| v as u64),
            U32 => bits(a, |v: u32| v as u64),
            U64 => bits(a, |v: u64| v),
            F16 => bits(a, |v: half::f16| v.to_bits() as u64),
            BF16 => bits(a, |v: half::bf16| v.to_bits() as u64),
            F32 => bits(a, |v: f32| v.to_bits() as u64),
            _ => bits(a, |v: bool| v as u64),
        }
    };
    // Triton's integer conversions (PTX `cvt.rzi.sat`, NaN 0; 64-bit NaN 1 << 63).
    let int_want = |d: DType, x: f64| -> u64 {
        match d {
            I8 => x as i16 as i8 as u8 as u64,
            I16 => x as i16 as u16 as u64,
            I32 => x as i32 as u32 as u64,
            I64 if x.is_nan() => 1 << 63,
            I64 => x as i64 as u64,
            U8 => x as u16 as u8 as u64,
            U16 => x as u16 as u64,
            U32 => x as u32 as u64,
            U64 if x.is_nan() => 1 << 63,
            U64 => x as u64,
            F32 => (x as f32).to_bits() as u64,
            _ => (x != 0.0) as u64,
        }
    };
    let reference = &outs[0].1;
    for (t, o) in &outs {
        for (i, &d) in to.iter().enumerate() {
            let (got, base) = (as_bits(d, &o[i]), as_bits(d, &reference[i]));
            for (j, &x) in xs.iter().enumerate() {
                assert_eq!(got[j], base[j], "{t:?}: {x:e} to {d:?}");
                if !matches!(d, F16 | BF16) {
                    assert_eq!(got[j], int_want(d, x), "{t:?}: {x:e} to {d:?}");
                }
            }
            let back = f64s(&o[to.len()]);
            let base_back = f64s(&reference[to.len()]);
            for j in 0..n {
                assert!(
                    same(back[i * n + j], base_back[i * n + j]),
                    "{t:?}: {:e} to {d:?} and back",
                    xs[j]
                );
            }
        }
        // Rounded once to the 16-bit floats: just above a tie rounds up, a tie to even.
        let f16 = o[8].to_vec::<half::f16>().unwrap();
        let bf16 = o[9].to_vec::<half::bf16>().unwrap();
        let p = |e: i32| 2f64.powi(e);
        for (j, &x) in xs.iter().enumerate() {
            let want16 = [
                (1.0 + p(-11) + p(-40), 1.0 + p(-10)),
                (1.0 + p(-11), 1.0),
                (65519.99, 65504.0),
                (65520.0, f64::INFINITY),
                (p(-25) + p(-60), p(-24)),
                (1e308, f64::INFINITY),
            ];
            let want_bf = [
                (1.0 + p(-8) + p(-40), 1.0 + p(-7)),
                (-(1.0 + p(-8)), -1.0),
                (1.0 + p(-11) + p(-40), 1.0),
                (3.5e38, f64::INFINITY),
            ];
            if let Some(&(_, w)) = want16.iter().find(|(v, _)| v.to_bits() == x.to_bits()) {
                assert_eq!(f16[j].to_f64(), w, "{t:?}: {x:e} to F16");
            }
            if let Some(&(_, w)) = want_bf.iter().find(|(v, _)| v.to_bits() == x.to_bits()) {
                assert_eq!(bf16[j].to_f64(), w, "{t:?}: {x:e} to BF16");
            }
        }
    }
}

/// Integers and narrow floats to f64 (exact, or rounded to nearest for 64-bit integers).
#[test]
fn casts_into_f64() {
    let k = tl::jit("to_f64", |k| {
        let (a, b, c, h, o) = (
            k.ptr(I64, "a"),
            k.ptr(U64, "b"),
            k.ptr(I32, "c"),
            k.ptr(BF16, "h"),
            k.ptr(F64, "o"),
        );
        let offs = tl::arange(0, 8);
        tl::store(o + offs, tl::load(a + offs).cast(F64));
        tl::store(o + 8 + offs, tl::load(b + offs).cast(F64));
        tl::store(o + 16 + offs, tl::load(c + offs).cast(F64));
        tl::store(o + 24 + offs, tl::load(h + offs).cast(F64));
    })
    .unwrap();
    let a = [
        i64::MIN,
        i64::MAX,
        -1,
        (1 << 53) + 1,
        -(1 << 60) - 3,
        0,
        7,
        1 << 62,
    ];
    let b = [
        u64::MAX,
        1 << 63,
        (1 << 63) + 1025,
        0,
        1,
        (1 << 53) + 1,
        12345,
        u64::MAX - 2048,
    ];
    let c = [i32::MIN, i32::MAX, -1, 0, 1, 100, -100, 77];
    let h: Vec<half::bf16> = [
        1.5f32,
        -0.0,
        f32::INFINITY,
        f32::NAN,
        1e-40,
        3e38,
        -2.0,
        0.1,
    ]
    .iter()
    .map(|&v| half::bf16::from_f32(v))
    .collect();
    let arrs = (
        Array::from_slice(&a, &[8]).unwrap(),
        Array::from_slice(&b, &[8]).unwrap(),
        Array::from_slice(&c, &[8]).unwrap(),
        Array::from_slice(&h, &[8]).unwrap(),
    );
    for (t, o) in run_cpu(&k, |l| {
        l.grid([1]).args((
            &arrs.0,
            &arrs.1,
            &arrs.2,
            &arrs.3,
            out(&[32], F64).fill(POISON),
        ))
    }) {
        let got = f64s(&o[0]);
        let want: Vec<f64> = (a.iter().map(|&v| v as f64))
            .chain(b.iter().map(|&v| v as f64))
            .chain(c.iter().map(|&v| v as f64))
            .chain(h.iter().map(|v| v.to_f64()))
            .collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(same(*g, *w), "{t:?}: element {i}: {g:e}, want {w:e}");
        }
    }
}

// ---- reductions, scans, dot --------------------------------------------------------------

/// Row reductions and scans of a ragged [16, 64] f64 block (masked columns): `sum` (-0.0 is
/// the identity: a row of -0.0 sums to -0.0), `max`/`min` (NaN ignored unless every element
/// is NaN), `argmax`/`argmin` (left-most on ties), `cumsum`, `cumprod` and a whole-block
/// sum. Max, min and the indices are the same bits on both CPU targets; sums and scans agree
/// up to reassociation (each executor adds in its own order, as for f32), and exactly
/// where the order cannot matter.
#[test]
fn reductions_and_scans() {
    const R: i64 = 16;
    const C: i64 = 64;
    let k = tl::jit("f64_reduce", |k| {
        let (x, o) = (k.ptr(F64, "x"), k.ptr(F64, "o"));
        let (ai, scan) = (k.ptr(I32, "ai"), k.ptr(F64, "scan"));
        let ncols = k.scalar(I32, "ncols");
        let rows = tl::arange(0, R);
        let cols = tl::arange(0, C);
        let m = cols.row().lt(ncols);
        let idx = rows.col() * ncols + cols.row();
        let v = tl::load(x + idx).mask(m).other(-0.0f64);
        // Masked lanes read NaN, which max/min/argmax/argmin ignore.
        let w = tl::load(x + idx).mask(m).other(f64::NAN);
        let (lo, hi) = (w, w);
        tl::store(o + rows, tl::sum(v, 1));
        tl::store(o + R + rows, tl::max(lo, 1));
        tl::store(o + 2 * R + rows, tl::min(hi, 1));
        tl::store(o + 3 * R, tl::sum(v, None::<i64>));
        tl::store(ai + rows, tl::argmax(lo, 1));
        tl::store(ai + R + rows, tl::argmin(hi, 1));
        tl::store(scan + idx, tl::cumsum(v, 1)).mask(m);
        tl::store(scan + R * ncols + idx, tl::cumprod(v, 1)).mask(m);
    })
    .unwrap();
    let ncols = 45usize;
    let mut xs = values(16 * ncols, 11);
    for c in 0..ncols {
        xs[ncols + c] = -0.0; // row 1: all -0.0
        xs[2 * ncols + c] = f64::NAN; // row 2: all NaN
        xs[3 * ncols + c] = if c % 3 == 0 {
            f64::NAN
        } else {
            c as f64 - 20.0
        }; // NaN ignored
        xs[4 * ncols + c] = if c % 7 == 0 { 5.0 } else { 1.0 }; // ties
        xs[5 * ncols + c] = (c as f64 * 0.37).sin() * 1.1; // products stay finite
    }
    xs[6 * ncols] = f64::INFINITY;
    xs[6 * ncols + 1] = f64::NEG_INFINITY;
    let xa = Array::from_slice(&xs, &[16 * ncols]).unwrap();
    let outs = run_cpu(&k, |l| {
        l.grid([1]).args((
            &xa,
            out(&[3 * 16 + 1], F64).fill(POISON),
            out(&[32], I32).fill(-5.0),
            out(&[2 * 16 * ncols], F64).fill(POISON),
            ncols as i32,
        ))
    });
    let (base, ai0) = (f64s(&outs[0].1[0]), outs[0].1[1].to_vec::<i32>().unwrap());
    // Reassociation error bound of a sum (or product) of these magnitudes.
    let close = |g: f64, w: f64, scale: f64| same(g, w) || (g - w).abs() <= 1e-14 * scale;
    let row_abs = |r: usize, upto: usize| -> f64 {
        xs[r * ncols..r * ncols + upto]
            .iter()
            .map(|v| v.abs())
            .sum()
    };
    for (t, o) in &outs {
        let (red, ai, scan) = (f64s(&o[0]), o[1].to_vec::<i32>().unwrap(), f64s(&o[2]));
        let base_scan = f64s(&outs[0].1[2]);
        for (i, (g, w)) in red.iter().zip(&base).enumerate() {
            let ok = match i {
                0..=15 => close(*g, *w, row_abs(i, ncols)),
                48 => close(*g, *w, xs.iter().map(|v| v.abs()).sum()),
                _ => same(*g, *w),
            };
            assert!(ok, "{t:?}: reduction {i}: {g:e}, want {w:e}");
        }
        for (i, (g, w)) in scan.iter().zip(&base_scan).enumerate() {
            let (r, c) = (i / ncols % 16, i % ncols);
            let scale = if i < 16 * ncols {
                row_abs(r, c + 1)
            } else {
                w.abs() * 10.0
            };
            assert!(close(*g, *w, scale), "{t:?}: scan {i}: {g:e}, want {w:e}");
        }
        assert_eq!(ai, ai0, "{t:?}: argmax/argmin");
        // Values Triton defines.
        assert_eq!(red[1].to_bits(), (-0.0f64).to_bits(), "{t:?}: sum of -0.0");
        assert!(
            red[16 + 2].is_nan() && red[32 + 2].is_nan(),
            "{t:?}: max of NaN"
        );
        assert_eq!(
            (red[16 + 3], red[32 + 3]),
            (24.0, -19.0),
            "{t:?}: NaN ignored"
        );
        assert_eq!((ai[4], ai[16 + 4]), (0, 1), "{t:?}: left-most ties");
        assert_eq!(
            (red[16 + 6], red[32 + 6]),
            (f64::INFINITY, f64::NEG_INFINITY),
            "{t:?}: infinities"
        );
        assert!(red[6].is_nan(), "{t:?}: inf + -inf");
        let want4: f64 = (0..ncols).map(|c| xs[4 * ncols + c]).sum();
        assert_eq!(red[4], want4, "{t:?}: exact row sum");
        let mut acc = 1.0f64;
        for c in 0..ncols {
            acc *= xs[5 * ncols + c];
            let g = scan[16 * ncols + 5 * ncols + c];
            assert!(
                close(g, acc, acc.abs() * 10.0),
                "{t:?}: cumprod of row 5 at {c}"
            );
        }
        assert!(scan.iter().all(|v| *v != POISON), "{t:?}: scan lanes");
    }
}

/// `dot` of f64 blocks accumulates in f64 with one rounding per product (an FMA) in k
/// order, and a 3-D batched one: exactly the reference computed here.
#[test]
fn dot_accumulates_in_f64() {
    let k = tl::jit("f64_dot", |k| {
        let (a, b, c, o) = (
            k.ptr(F64, "a"),
            k.ptr(F64, "b"),
            k.ptr(F64, "c"),
            k.ptr(F64, "o"),
        );
        let r = tl::arange(0, 16);
        let q = tl::arange(0, 32);
        let x = tl::load(a + r.col() * 32 + q.row());
        let y = tl::load(b + q.col() * 16 + r.row());
        let acc = tl::load(c + r.col() * 16 + r.row());
        tl::store(o + r.col() * 16 + r.row(), tl::dot(x, y, acc));
    })
    .unwrap();
    let a: Vec<f64> = values(16 * 32, 5)
        .into_iter()
        .map(|v| v.clamp(-1e3, 1e3))
        .collect();
    let b: Vec<f64> = values(32 * 16, 6)
        .into_iter()
        .map(|v| v.clamp(-1e3, 1e3))
        .collect();
    let c: Vec<f64> = values(256, 8)
        .into_iter()
        .map(|v| v.clamp(-1e3, 1e3))
        .collect();
    let mut want = c.clone();
    for i in 0..16 {
        for j in 0..16 {
            for p in 0..32 {
                want[i * 16 + j] = a[i * 32 + p].mul_add(b[p * 16 + j], want[i * 16 + j]);
            }
        }
    }
    let arr = |v: &[f64]| Array::from_slice(v, &[v.len()]).unwrap();
    let (aa, ba, ca) = (arr(&a), arr(&b), arr(&c));
    for (t, o) in run_cpu(&k, |l| {
        l.grid([1])
            .args((&aa, &ba, &ca, out(&[256], F64).fill(POISON)))
    }) {
        let got = f64s(&o[0]);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(same(*g, *w), "{t:?}: c[{i}] = {g:e}, want {w:e}");
        }
    }
}

// ---- atomics -------------------------------------------------------------------------------

/// f64 atomics from 8 programs on 16 shared elements: add (of integers, exact in any order),
/// max/min (Triton's order, IEEE totalOrder: program 3's +NaN operands win `atomic_max`
/// and lose `atomic_min`), xchg and cas; the returned old values too.
#[test]
fn atomics_on_f64() {
    let k = tl::jit("f64_atomics", |k| {
        let (s, mx, mn, x, cas, old) = (
            k.ptr(F64, "sum"),
            k.ptr(F64, "mx"),
            k.ptr(F64, "mn"),
            k.ptr(F64, "x"),
            k.ptr(F64, "cas"),
            k.ptr(F64, "old"),
        );
        let pid = tl::program_id(0);
        let offs = tl::arange(0, 16);
        let v = (pid * 16 + offs).cast(F64) - 50.0f64;
        let v = tl::where_((offs % 5).eq(0) & pid.eq(3), f64::NAN, v);
        tl::atomic_add(s + offs, (pid + 1).cast(F64) * 0.5f64);
        tl::atomic_max(mx + offs, v);
        tl::atomic_min(mn + offs, v);
        tl::atomic_xchg(x + offs, v);
        // Only the program that sees 0.0 (the first) swaps in its id + 1.
        let o = tl::atomic_cas(cas + offs, 0.0f64, (pid + 1).cast(F64));
        tl::store(old + pid * 16 + offs, o);
    })
    .unwrap();
    for (t, o) in run_cpu(&k, |l| {
        l.grid([8]).args((
            out(&[16], F64).fill(-0.0),
            out(&[16], F64).fill(f64::NEG_INFINITY),
            out(&[16], F64).fill(f64::INFINITY),
            out(&[16], F64).fill(POISON),
            out(&[16], F64).fill(0.0),
            out(&[128], F64).fill(POISON),
        ))
    }) {
        let (s, mx, mn, x, cas, old) = (
            f64s(&o[0]),
            f64s(&o[1]),
            f64s(&o[2]),
            f64s(&o[3]),
            f64s(&o[4]),
            f64s(&o[5]),
        );
        for e in 0..16 {
            assert_eq!(s[e], 18.0, "{t:?}: sum[{e}]");
            if e % 5 == 0 {
                assert_eq!(mx[e].to_bits(), f64::NAN.to_bits(), "{t:?}: max[{e}]");
            } else {
                assert_eq!(mx[e], (7 * 16 + e) as f64 - 50.0, "{t:?}: max[{e}]");
            }
            assert_eq!(mn[e], e as f64 - 50.0, "{t:?}: min[{e}]");
            let written: Vec<f64> = (0..8)
                .map(|p| {
                    if e % 5 == 0 && p == 3 {
                        f64::NAN
                    } else {
                        (p * 16 + e) as f64 - 50.0
                    }
                })
                .collect();
            assert!(
                written.iter().any(|w| same(*w, x[e])),
                "{t:?}: xchg[{e}] = {}",
                x[e]
            );
            let winner = cas[e];
            assert!((1.0..=8.0).contains(&winner), "{t:?}: cas[{e}] = {winner}");
            for p in 0..8 {
                let want = if p as f64 + 1.0 == winner {
                    0.0
                } else {
                    winner
                };
                assert_eq!(
                    old[p * 16 + e],
                    want,
                    "{t:?}: old value of program {p} at {e}"
                );
            }
        }
    }
}

// ---- math ----------------------------------------------------------------------------------

/// `erf` and the `libdevice` functions on f64: within 2 ulp between the CPU targets (the
/// interpreter runs the `libm` crate, the compiled executor the host's libm; `exp10` within
/// 4), with NaN and infinities where both put them.
#[test]
fn libdevice_within_two_ulp() {
    const NAMES: [&str; 19] = [
        "erf", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
        "expm1", "log10", "exp10", "cbrt", "erfinv", "pow", "atan2", "hypot",
    ];
    let k = tl::jit("f64_libdevice", |k| {
        let (x, y, o) = (k.ptr(F64, "x"), k.ptr(F64, "y"), k.ptr(F64, "o"));
        let offs = tl::arange(0, 256);
        let a = tl::load(x + offs);
        let b = tl::load(y + offs);
        let r = [
            tl::erf(a),
            libdevice::tan(a),
            libdevice::asin(a),
            libdevice::acos(a),
            libdevice::atan(a),
            libdevice::sinh(a),
            libdevice::cosh(a),
            libdevice::asinh(a),
            libdevice::acosh(a),
            libdevice::atanh(a),
            libdevice::log1p(a),
            libdevice::expm1(a),
            libdevice::log10(a),
            libdevice::exp10(a),
            libdevice::cbrt(a),
            libdevice::erfinv(a),
            libdevice::pow(a, b),
            libdevice::atan2(a, b),
            libdevice::hypot(a, b),
        ];
        for (i, v) in r.into_iter().enumerate() {
            tl::store(o + i as i64 * 256 + offs, v);
        }
    })
    .unwrap();
    let mut xs = values(256, 2);
    // Arguments inside the functions' domains too.
    for (i, x) in xs.iter_mut().enumerate().skip(128) {
        *x = (i as f64 - 192.0) / 64.5;
    }
    let ys = values(256, 9);
    let (xa, ya) = (
        Array::from_slice(&xs, &[256]).unwrap(),
        Array::from_slice(&ys, &[256]).unwrap(),
    );
    let outs = run_cpu(&k, |l| {
        l.grid([1])
            .args((&xa, &ya, out(&[256 * NAMES.len()], F64).fill(POISON)))
    });
    let ulps = |a: f64, b: f64| -> u64 {
        let key = |v: f64| {
            let b = v.to_bits() as i64;
            if b < 0 {
                i64::MIN - b
            } else {
                b
            }
        };
        key(a).abs_diff(key(b))
    };
    let base = f64s(&outs[0].1[0]);
    for (t, o) in &outs {
        let got = f64s(&o[0]);
        for (i, (g, w)) in got.iter().zip(&base).enumerate() {
            // musl's exp10 is exp2 of a rounded product: a few ulp from the exact value.
            let tol = if NAMES[i / 256] == "exp10" { 4 } else { 2 };
            let ok = same(*g, *w) || (g.is_finite() && w.is_finite() && ulps(*g, *w) <= tol);
            assert!(
                ok,
                "{t:?}: {}({:e}, {:e}) = {g:e}, interpreter {w:e}",
                NAMES[i / 256],
                xs[i % 256],
                ys[i % 256]
            );
        }
    }
}

// ---- other targets -------------------------------------------------------------------------

/// Metal has no fp64 and the CUDA printer does not generate it: a clear `Unsupported`
/// naming the kernel, the op and its line, the target and the targets that run it.
#[test]
fn metal_and_cuda_refuse_f64_by_name() {
    let k = tl::jit("f64_scale", |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let offs = tl::arange(0, 16);
        let v = tl::load(x + offs).cast(F64) * 3.0f64;
        tl::store(o + offs, v.cast(F32));
    })
    .unwrap();
    let xa = Array::from_slice(&[1.5f32; 16], &[16]).unwrap();
    let launch = || k.launch().grid([1]).args((&xa, out(&[16], F32)));
    let check = |e: Error, target: &str| {
        let m = e.to_string();
        assert!(matches!(e, Error::Unsupported(_)), "{m}");
        for part in [
            "kernel `f64_scale`",
            "dtype f64",
            "op `cast`",
            file!(),
            target,
            "Target::Cpu or Target::CpuCompiled",
        ] {
            assert!(m.contains(part), "{m} (want {part:?})");
        }
    };
    check(launch().cuda().expect_err("CUDA has no f64 code"), "CUDA");
    if support::targets("f64_scale").contains(&Target::Emulated(LaneOrder::Forward)) {
        let e = launch()
            .target(Target::Emulated(LaneOrder::Forward))
            .run()
            .expect_err("Metal has no fp64");
        check(e, "Apple GPUs have no fp64");
    }
    // The CPU targets run it.
    for (t, o) in run_cpu(&k, |l| l.grid([1]).args((&xa, out(&[16], F32)))) {
        assert_eq!(o[0].to_vec::<f32>().unwrap(), vec![4.5f32; 16], "{t:?}");
    }
}
