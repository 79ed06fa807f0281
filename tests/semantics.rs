//! Corner cases of Triton's semantics, each written once as a user would write it and run on
//! every target: the CPU interpreter, the compiled CPU executor, the generated Metal on the
//! emulator in both lane orders, and the generated CUDA compiled by NVRTC (run where an
//! NVIDIA GPU is present). The expected values are what Triton 3.6 computes on an H100
//! (`benches/gpu/semantics_probe.py`, results in `benches/README.md`).

mod support;

use support::every_target;

use triton_metal::runtime::{out, ReductionLayout, Target};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{
    Array,
    DType::{self, *},
    Element,
};

// ---- reductions ---------------------------------------------------------------------------

/// `argmax`/`argmin` of int32 rows with ties: the left-most index of the extreme, in every
/// reduction layout (the values and the indices are staged side by side in scratch memory).
#[test]
fn argmax_argmin_of_int32_rows_with_ties() {
    const ROWS: usize = 4;
    const COLS: usize = 1024;
    let k = tl::jit("argmax_i32", |k| {
        let (x, amax, amin) = (k.ptr(I32, "x"), k.ptr(I32, "amax"), k.ptr(I32, "amin"));
        let rows = tl::arange(0, ROWS as i64);
        let cols = tl::arange(0, COLS as i64);
        let v = tl::load(x + rows.col() * COLS as i64 + cols.row());
        tl::store(amax + rows, tl::argmax(v, 1));
        tl::store(amin + rows, tl::argmin(v, 1));
    })
    .unwrap();
    // Small values (many ties), with the extremes planted more than once per row.
    let mut s = 12345u64;
    let mut x: Vec<i32> = (0..ROWS * COLS)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 50) as i32 - 25
        })
        .collect();
    let plants = [
        (41, 876, 984, 115),
        (900, 3, 1023, 0),
        (984, 985, 10, 11),
        (115, 1000, 500, 7),
    ];
    for (r, &(hi0, hi1, lo0, lo1)) in plants.iter().enumerate() {
        x[r * COLS + hi0] = 1000 + r as i32;
        x[r * COLS + hi1] = 1000 + r as i32;
        x[r * COLS + lo0] = i32::MIN;
        x[r * COLS + lo1] = i32::MIN;
    }
    let want_max: Vec<i32> = plants.iter().map(|p| p.0.min(p.1) as i32).collect();
    let want_min: Vec<i32> = plants.iter().map(|p| p.2.min(p.3) as i32).collect();
    let xa = Array::from_slice(&x, &[x.len()]).unwrap();
    for layout in [
        None,
        Some(ReductionLayout::Default),
        Some(ReductionLayout::Tiled),
        Some(ReductionLayout::Coalesced),
        Some(ReductionLayout::RowMajor),
        Some(ReductionLayout::ColumnMajor),
    ] {
        let got = every_target(&k, |l| {
            let l = l.grid([1]).args((
                &xa,
                out(&[ROWS], I32).fill(-7.0),
                out(&[ROWS], I32).fill(-7.0),
            ));
            match layout {
                Some(r) => l.reduction_layout(r),
                None => l,
            }
        });
        for (t, o) in &got {
            assert_eq!(
                o[0].to_vec::<i32>().unwrap(),
                want_max,
                "argmax {layout:?} on {t:?}"
            );
            assert_eq!(
                o[1].to_vec::<i32>().unwrap(),
                want_min,
                "argmin {layout:?} on {t:?}"
            );
        }
    }
}

// ---- conversions ----------------------------------------------------------------------------

/// Float to integer as Triton converts on NVIDIA GPUs (measured on an H100): truncate toward
/// zero, saturate at the range of a 16-, 32- or 64-bit integer, NaN to 0 (to the bit
/// pattern 0x8000_0000_0000_0000 for 64-bit results); an 8-bit result is the low byte of
/// the saturated 16-bit one.
fn triton_float_to_int(x: f64, d: DType) -> i128 {
    let sat = |lo: i128, hi: i128| -> i128 {
        let t = x.trunc();
        if x.is_nan() {
            0
        } else if t >= hi as f64 {
            hi
        } else if t <= lo as f64 {
            lo
        } else {
            t as i128
        }
    };
    match d {
        I8 => sat(-32768, 32767) as i16 as i8 as i128,
        U8 => sat(0, 65535) as u16 as u8 as i128,
        I16 => sat(-32768, 32767),
        U16 => sat(0, 65535),
        I32 => sat(i32::MIN as i128, i32::MAX as i128),
        U32 => sat(0, u32::MAX as i128),
        I64 if x.is_nan() => i64::MIN as i128,
        U64 if x.is_nan() => 1 << 63,
        I64 => sat(i64::MIN as i128, i64::MAX as i128),
        U64 => sat(0, u64::MAX as i128),
        _ => unreachable!("not an integer dtype"),
    }
}

/// Any integer array's values, exactly.
fn ints(a: &Array) -> Vec<i128> {
    fn of<T: Element + Into<i128>>(a: &Array) -> Vec<i128> {
        a.to_vec::<T>()
            .unwrap()
            .into_iter()
            .map(Into::into)
            .collect()
    }
    match a.dtype() {
        I8 => of::<i8>(a),
        I16 => of::<i16>(a),
        I32 => of::<i32>(a),
        I64 => of::<i64>(a),
        U8 => of::<u8>(a),
        U16 => of::<u16>(a),
        U32 => of::<u32>(a),
        U64 => of::<u64>(a),
        d => panic!("{d} is not an integer dtype"),
    }
}

const INT_DTYPES: [DType; 8] = [I8, I16, I32, I64, U8, U16, U32, U64];

#[test]
fn float_to_int_saturates_like_triton_on_nvidia() {
    let f32_values: Vec<f32> = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -1.0,
        -0.5,
        0.5,
        -0.0,
        2.7,
        -2.7,
        127.9,
        -128.9,
        128.0,
        -129.0,
        255.9,
        256.0,
        300.5,
        -300.5,
        32767.9,
        32768.0,
        -32769.0,
        65535.5,
        65536.0,
        70000.0,
        2147483520.0,
        2147483648.0,
        -2147483648.0,
        -2147483904.0,
        4294967040.0,
        4294967296.0,
        1e10,
        -1e10,
        9.2e18,
        9.3e18,
        -9.3e18,
        1.8e19,
        1.9e19,
        3e38,
        -3e38,
    ];
    let n = f32_values.len();
    let xs = Array::from_slice(&f32_values, &[n]).unwrap();
    let f16_values: Vec<half::f16> = f32_values.iter().map(|&v| half::f16::from_f32(v)).collect();
    let hs = Array::from_slice(&f16_values, &[n]).unwrap();
    for (src, input) in [(F32, &xs), (F16, &hs)] {
        let k = tl::jit("float_to_int", move |k| {
            let x = k.ptr(src, "x");
            let outs: Vec<_> = INT_DTYPES
                .iter()
                .map(|&d| k.ptr(d, &format!("o_{d}")))
                .collect();
            let offs = tl::arange(0, 64);
            let mask = offs.lt(n as i64);
            let v = tl::load(x + offs).mask(mask);
            for (o, d) in outs.into_iter().zip(INT_DTYPES) {
                tl::store(o + offs, v.to(d)).mask(mask);
            }
        })
        .unwrap();
        let stored: Vec<f64> = match src {
            F32 => f32_values.iter().map(|&v| v as f64).collect(),
            _ => f16_values.iter().map(|v| v.to_f64()).collect(),
        };
        let got = every_target(&k, |l| {
            let l = l.grid([1]).arg(input);
            INT_DTYPES.iter().fold(l, |l, &d| l.arg(out(&[n], d)))
        });
        for (t, o) in &got {
            for (a, d) in o.iter().zip(INT_DTYPES) {
                let got = ints(a);
                for (i, x) in stored.iter().enumerate() {
                    assert_eq!(
                        got[i],
                        triton_float_to_int(*x, d),
                        "{src} {x} -> {d} on {t:?}"
                    );
                }
            }
        }
    }
    // Spot values of the H100 measurement (benches/README.md).
    assert_eq!(triton_float_to_int(300.5, I8), 44);
    assert_eq!(triton_float_to_int(f64::INFINITY, I8), -1);
    assert_eq!(triton_float_to_int(-1.0, U32), 0);
    assert_eq!(triton_float_to_int(65504.0, U8), 224);
    assert_eq!(triton_float_to_int(f64::NAN, I64), i64::MIN as i128);
    assert_eq!(triton_float_to_int(f64::NAN, U64), 1 << 63);
}

// ---- max / min --------------------------------------------------------------------------------

/// Triton's `maximum`/`minimum` (measured on an H100): a NaN operand is ignored unless both
/// are NaN (`propagate_nan=ALL`: NaN wins), +0 is greater than -0 whatever the order.
fn triton_max_min(a: f64, b: f64, max: bool, nan_wins: bool) -> f64 {
    if a.is_nan() || b.is_nan() {
        if nan_wins || (a.is_nan() && b.is_nan()) {
            return f64::NAN;
        }
        return if a.is_nan() { b } else { a };
    }
    if a == b {
        // Equal: the same number, or zeros of either sign.
        let negative = if max {
            a.is_sign_negative() && b.is_sign_negative()
        } else {
            a.is_sign_negative() || b.is_sign_negative()
        };
        return if a != 0.0 {
            a
        } else if negative {
            -0.0
        } else {
            0.0
        };
    }
    if (a > b) == max {
        a
    } else {
        b
    }
}

/// Bit-exact comparison of floats, any NaN equal to any NaN.
fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn maximum_minimum_signed_zeros_and_nan() {
    let specials = [-0.0, 0.0, f64::NAN, 1.0, f64::NEG_INFINITY, f64::INFINITY];
    let pairs: Vec<(f64, f64)> = specials
        .iter()
        .flat_map(|&a| specials.iter().map(move |&b| (a, b)))
        .collect();
    let n = pairs.len();
    for d in [F32, F16, BF16] {
        let k = tl::jit("max_min", move |k| {
            let (a, b) = (k.ptr(d, "a"), k.ptr(d, "b"));
            let o: Vec<_> = (0..4).map(|i| k.ptr(d, &format!("o{i}"))).collect();
            let offs = tl::arange(0, 64);
            let m = offs.lt(n as i64);
            let (x, y) = (tl::load(a + offs).mask(m), tl::load(b + offs).mask(m));
            tl::store(o[0] + offs, tl::maximum(x, y)).mask(m);
            tl::store(o[1] + offs, tl::minimum(x, y)).mask(m);
            tl::store(o[2] + offs, tl::maximum_nan(x, y)).mask(m);
            tl::store(o[3] + offs, tl::minimum_nan(x, y)).mask(m);
        })
        .unwrap();
        let arr = |v: Vec<f64>| {
            match d {
                F32 => Array::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), &[n]),
                F16 => Array::from_slice(
                    &v.iter()
                        .map(|&x| half::f16::from_f64(x))
                        .collect::<Vec<_>>(),
                    &[n],
                ),
                _ => Array::from_slice(
                    &v.iter()
                        .map(|&x| half::bf16::from_f64(x))
                        .collect::<Vec<_>>(),
                    &[n],
                ),
            }
            .unwrap()
        };
        let (aa, ba) = (
            arr(pairs.iter().map(|p| p.0).collect()),
            arr(pairs.iter().map(|p| p.1).collect()),
        );
        let got = every_target(&k, |l| {
            let l = l.grid([1]).args((&aa, &ba));
            (0..4).fold(l, |l, _| l.arg(out(&[n], d)))
        });
        for (t, o) in &got {
            for (j, (max, nan_wins)) in [(true, false), (false, false), (true, true), (false, true)]
                .into_iter()
                .enumerate()
            {
                let v = floats(&o[j]);
                for (i, &(a, b)) in pairs.iter().enumerate() {
                    let want = triton_max_min(a, b, max, nan_wins);
                    assert!(
                        same(v[i], want),
                        "{d} {}({a}, {b}) nan_wins={nan_wins} on {t:?}: got {}, want {want}",
                        if max { "maximum" } else { "minimum" },
                        v[i]
                    );
                }
            }
        }
    }
    assert!(same(triton_max_min(-0.0, 0.0, true, false), 0.0));
    assert!(same(triton_max_min(0.0, -0.0, false, false), -0.0));
}

/// Any float array's values as f64.
fn floats(a: &Array) -> Vec<f64> {
    match a.dtype() {
        F32 => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        F16 => a
            .to_vec::<half::f16>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect(),
        BF16 => a
            .to_vec::<half::bf16>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect(),
        d => panic!("{d} is not a float dtype"),
    }
}

/// `max`/`min` reductions ignore NaN (NaN only when the whole row is) and order -0 < +0, in
/// every reduction layout.
#[test]
fn max_min_reductions_ignore_nan_and_order_signed_zeros() {
    let nan = f32::NAN;
    let rows: [[f32; 4]; 6] = [
        [1.0, nan, 3.0, 2.0],
        [nan, 1.0, 3.0, 2.0],
        [1.0, 3.0, 2.0, nan],
        [nan; 4],
        [-0.0, 0.0, -0.0, 0.0],
        [0.0, -0.0, 0.0, -0.0],
    ];
    let want_max = [3.0, 3.0, 3.0, f64::NAN, 0.0, 0.0];
    let want_min = [1.0, 1.0, 1.0, f64::NAN, -0.0, -0.0];
    // Each row repeated along 64 columns so lanes and SIMD-groups take part.
    const COLS: usize = 256;
    let x: Vec<f32> = rows
        .iter()
        .flat_map(|r| (0..COLS).map(move |c| r[c % 4]))
        .collect();
    for d in [F32, F16] {
        let k = tl::jit("max_min_rows", move |k| {
            let (x, mx, mn) = (k.ptr(d, "x"), k.ptr(F32, "mx"), k.ptr(F32, "mn"));
            let r = tl::arange(0, 8);
            let c = tl::arange(0, COLS as i64);
            let m = r.col().lt(6) & c.row().ge(0);
            let v = tl::load(x + r.col() * COLS as i64 + c.row())
                .mask(m)
                .other(0.0);
            tl::store(mx + r, tl::max(v, 1).to(F32)).mask(r.lt(6));
            tl::store(mn + r, tl::min(v, 1).to(F32)).mask(r.lt(6));
        })
        .unwrap();
        let xa = match d {
            F32 => Array::from_slice(&x, &[x.len()]),
            _ => Array::from_slice(
                &x.iter()
                    .map(|&v| half::f16::from_f32(v))
                    .collect::<Vec<_>>(),
                &[x.len()],
            ),
        }
        .unwrap();
        for layout in ReductionLayout::ALL {
            let got = every_target(&k, |l| {
                l.grid([1])
                    .args((&xa, out(&[6], F32), out(&[6], F32)))
                    .reduction_layout(layout)
            });
            for (t, o) in &got {
                let (mx, mn) = (floats(&o[0]), floats(&o[1]));
                for i in 0..6 {
                    assert!(
                        same(mx[i], want_max[i]),
                        "{d} max row {i} {layout:?} on {t:?}: {}",
                        mx[i]
                    );
                    assert!(
                        same(mn[i], want_min[i]),
                        "{d} min row {i} {layout:?} on {t:?}: {}",
                        mn[i]
                    );
                }
            }
        }
    }
}

// ---- integers -------------------------------------------------------------------------------

/// Integer arithmetic wraps (two's complement) and over-wide shifts give 0 (the sign for an
/// arithmetic `>>`), as Triton computes on an H100; the printed C-family code has no
/// signed overflow (`abs(INT_MIN)` is INT_MIN, not whatever the compiler assumes).
#[test]
fn integer_wraparound_abs_and_shifts() {
    let xs: Vec<i32> = vec![i32::MIN, i32::MAX, -1, 1, 123456789, -123456789, 7, -7];
    let ss: Vec<i32> = vec![0, 1, 31, 32, 33, 40, -1, 64];
    let k = tl::jit("int_wrap", |k| {
        let (x, s, o) = (k.ptr(I32, "x"), k.ptr(I32, "s"), k.ptr(I32, "o"));
        let offs = tl::arange(0, 8);
        let (x, s) = (tl::load(x + offs), tl::load(s + offs));
        tl::store(o + offs, tl::abs(x));
        tl::store(o + 8 + offs, x + 2147483647);
        tl::store(o + 16 + offs, x * 65537);
        tl::store(o + 24 + offs, -x);
        tl::store(o + 32 + offs, x << s);
        tl::store(o + 40 + offs, x >> s);
        let u = tl::bitcast(x, U32) >> s.to(U32);
        tl::store(o + 48 + offs, tl::bitcast(u, I32));
    })
    .unwrap();
    let (xa, sa) = (
        Array::from_slice(&xs, &[8]).unwrap(),
        Array::from_slice(&ss, &[8]).unwrap(),
    );
    // Triton 3.6 on an H100 (benches/gpu/semantics_probe.py).
    let want: Vec<i32> = [
        [-2147483648, 2147483647, 1, 1, 123456789, 123456789, 7, 7],
        [
            -1,
            -2,
            2147483646,
            -2147483648,
            -2024026860,
            2024026858,
            -2147483642,
            2147483640,
        ],
        [
            -2147483648,
            2147418111,
            -65537,
            65537,
            -730804971,
            730804971,
            458759,
            -458759,
        ],
        [
            -2147483648,
            -2147483647,
            1,
            -1,
            -123456789,
            123456789,
            -7,
            7,
        ],
        [-2147483648, -2, -2147483648, 0, 0, 0, 0, 0],
        [-2147483648, 1073741823, -1, 0, 0, -1, 0, -1],
        [-2147483648, 1073741823, 1, 0, 0, 0, 0, 0],
    ]
    .concat();
    let got = every_target(&k, |l| l.grid([1]).args((&xa, &sa, out(&[56], I32))));
    for (t, o) in &got {
        assert_eq!(o[0].to_vec::<i32>().unwrap(), want, "on {t:?}");
    }
}

/// `floordiv` and `%` of two Rust integers are Triton constexpr arithmetic, i.e. Python's
/// (rounding toward -inf); on tensors they are C's (toward zero), as Triton computes them.
#[test]
fn constexpr_floordiv_and_modulo_follow_python() {
    let cases: [(i64, i64); 5] = [(-7, 2), (7, -2), (-7, -2), (-6, 3), (-7, 3)];
    for (a, b) in cases {
        let k = tl::jit("constexpr_divmod", move |k| {
            let (x, o) = (k.ptr(I32, "x"), k.ptr(I32, "o"));
            tl::store(o, tl::floordiv(a, b));
            tl::store(o + 1, tl::rem(a, b));
            let (u, v) = (tl::load(x), tl::load(x + 1));
            tl::store(o + 2, tl::floordiv(u, v));
            tl::store(o + 3, u % v);
        })
        .unwrap();
        let xa = Array::from_slice(&[a as i32, b as i32], &[2]).unwrap();
        let py_div = (a as f64 / b as f64).floor() as i32;
        let py_mod = (a - b * py_div as i64) as i32;
        let want = vec![py_div, py_mod, (a / b) as i32, (a % b) as i32];
        let got = every_target(&k, |l| l.grid([1]).args((&xa, out(&[4], I32))));
        for (t, o) in &got {
            assert_eq!(o[0].to_vec::<i32>().unwrap(), want, "{a} // {b} on {t:?}");
        }
    }
}

/// Lanes of `x` that `mask` keeps at `offs + start`, the others `far` elements away; each
/// iteration adds `by` to the pointers (the first time before the loop), `o` sums the loads.
fn far_lanes(dt: DType) -> JitKernel {
    tl::jit("far_lanes", move |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let n = k.scalar(I32, "n");
        let (start, far, by) = (
            k.scalar(dt, "start"),
            k.scalar(dt, "far"),
            k.scalar(dt, "by"),
        );
        let iters = k.scalar(I32, "iters");
        let offs = tl::arange(0, 64);
        let mask = offs.lt(n);
        let p: tl::Tensor = x + tl::where_(mask, offs + start, offs + far) + by;
        let init: (tl::Tensor, tl::Tensor) = (tl::zeros([64], F32), p);
        let (acc, _) = tl::range(0, iters, 1).fold(init, |_, (acc, p)| {
            (acc + tl::load(p).mask(mask).other(0.0), p + by)
        });
        tl::store(o + offs, acc).mask(mask);
    })
    .unwrap()
}

/// Pointer arithmetic of masked-off lanes may leave the range of the offsets (32 or 64
/// bits): it is not undefined in the printed code (it wraps, and no such lane is accessed),
/// so the lanes kept compute the same on every target, and nothing masked off is written or
/// reported out of bounds.
#[test]
fn pointer_offsets_of_masked_lanes_past_the_offset_range() {
    let x: Vec<f32> = (0..256).map(|i| i as f32 * 0.5 - 3.0).collect();
    let xa = Array::from_slice(&x, &[x.len()]).unwrap();
    for (dt, max, min) in [
        (I32, i32::MAX as i64, i32::MIN as i64),
        (I64, i64::MAX, i64::MIN),
    ] {
        let k = far_lanes(dt);
        // Past the maximum, then below the minimum; 13 lanes kept, 3 steps.
        for (start, far, by) in [(0i64, max - 40, 50i64), (200, min + 40, -50)] {
            let want: Vec<f32> = (0..64)
                .map(|i| match i < 13 {
                    true => (1..=3).map(|j| x[(i + start + j * by) as usize]).sum(),
                    false => f32::NAN,
                })
                .collect();
            let got = every_target(&k, |l| {
                let l = l.grid([1]);
                let o = out(&[64], F32).fill(f64::NAN);
                match dt {
                    I32 => l.args((&xa, o, 13, start as i32, far as i32, by as i32, 3)),
                    _ => l.args((&xa, o, 13, start, far, by, 3)),
                }
            });
            for (t, o) in &got {
                let o = o[0].to_vec::<f32>().unwrap();
                for (i, (g, w)) in o.iter().zip(&want).enumerate() {
                    assert!(
                        g == w || (g.is_nan() && w.is_nan()),
                        "{dt} lane {i} ({start}, {far}, {by}) on {t:?}: {g} != {w}"
                    );
                }
            }
        }
    }
}

// ---- scans, swizzle ---------------------------------------------------------------------------

/// A reverse scan is the forward scan of the flipped sequence (Triton's): the running value
/// from the end is the combine's left operand, so `|a, b| a` over 1..=8 gives 8 everywhere.
#[test]
fn reverse_scan_passes_the_running_value_first() {
    let k = tl::jit("reverse_scan", |k| {
        let (x, o) = (k.ptr(I32, "x"), k.ptr(I32, "o"));
        let offs = tl::arange(0, 8);
        let v = tl::load(x + offs);
        tl::store(o + offs, tl::associative_scan(v, 0, true, |a, _b| a));
        tl::store(o + 8 + offs, tl::associative_scan(v, 0, true, |_a, b| b));
        tl::store(o + 16 + offs, tl::associative_scan(v, 0, false, |a, _b| a));
        tl::store(o + 24 + offs, tl::associative_scan(v, 0, false, |_a, b| b));
    })
    .unwrap();
    let xa = Array::from_slice(&(1..=8).collect::<Vec<i32>>(), &[8]).unwrap();
    let want: Vec<i32> = [
        [8; 8],
        [1, 2, 3, 4, 5, 6, 7, 8],
        [1; 8],
        [1, 2, 3, 4, 5, 6, 7, 8],
    ]
    .concat();
    let got = every_target(&k, |l| l.grid([1]).args((&xa, out(&[32], I32))));
    for (t, o) in &got {
        assert_eq!(o[0].to_vec::<i32>().unwrap(), want, "on {t:?}");
    }
}

/// Triton's `swizzle2d`, including a last group with fewer rows (`swizzle2d(3, 0, 5, 7, 3)`
/// is (3, 0)).
#[test]
fn swizzle2d_with_a_partial_last_group() {
    fn triton(i: i64, j: i64, size_i: i64, size_j: i64, size_g: i64) -> (i64, i64) {
        let ij = i * size_j + j;
        let size_gj = size_g * size_j;
        let group = ij / size_gj;
        let off_i = group * size_g;
        let size_g = (size_i - off_i).min(size_g);
        let ij = ij % size_gj;
        (off_i + ij % size_g, ij / size_g)
    }
    assert_eq!(triton(3, 0, 5, 7, 3), (3, 0));
    assert_eq!(triton(4, 0, 5, 7, 3), (4, 3));
    for (si, sj, sg) in [(5, 7, 3), (4, 4, 2), (7, 3, 4)] {
        let k = tl::jit("swizzle", move |k| {
            let o = k.ptr(I32, "o");
            let i = tl::arange(0, 8).col() + tl::zeros([8, 8], I32);
            let j = tl::arange(0, 8).row() + tl::zeros([8, 8], I32);
            let (ni, nj) = tl::swizzle2d(i, j, si, sj, sg);
            let at = (i * 8 + j) * 2;
            tl::store(o + at, ni);
            tl::store(o + at + 1, nj);
        })
        .unwrap();
        let got = every_target(&k, |l| l.grid([1]).args((out(&[128], I32),)));
        for (t, o) in &got {
            let v = o[0].to_vec::<i32>().unwrap();
            for i in 0..si {
                for j in 0..sj {
                    let at = 2 * (i * 8 + j) as usize;
                    let (wi, wj) = triton(i, j, si, sj, sg);
                    assert_eq!(
                        (v[at] as i64, v[at + 1] as i64),
                        (wi, wj),
                        "swizzle2d({i}, {j}, {si}, {sj}, {sg}) on {t:?}"
                    );
                }
            }
        }
    }
}

// ---- loops -----------------------------------------------------------------------------------

/// The values a `for` loop's induction variable takes, recorded by the kernel (count first).
fn loop_kernel(name: &str, constant: Option<(i64, i64, i64)>) -> JitKernel {
    try_loop_kernel(name, constant).unwrap()
}

fn try_loop_kernel(
    name: &str,
    constant: Option<(i64, i64, i64)>,
) -> triton_metal::Result<JitKernel> {
    tl::jit(name, move |k| {
        let o = k.ptr(I32, "o");
        let (lo, hi, step): (tl::Operand, tl::Operand, tl::Operand) = match constant {
            Some((a, b, c)) => (a.into(), b.into(), c.into()),
            None => (
                k.scalar(I32, "lo").into(),
                k.scalar(I32, "hi").into(),
                k.scalar(I32, "step").into(),
            ),
        };
        let n = tl::range(lo, hi, step).fold(tl::zeros([0i64; 0], I32), |i, n| {
            tl::store(o + 1 + tl::minimum(n, 30), i);
            n + 1
        });
        tl::store(o, n);
    })
}

fn loop_values(o: &Array) -> Vec<i32> {
    let v = o.to_vec::<i32>().unwrap();
    v[1..1 + v[0].clamp(0, 30) as usize].to_vec()
}

/// Python's `range`: negative steps count down (Triton accepts them as constants), bounds
/// near `i32::MAX` do not wrap, on every target.
#[test]
fn range_with_negative_steps_and_bounds_near_the_limit() {
    let cases: [((i64, i64, i64), Vec<i32>); 5] = [
        ((10, 0, -3), vec![10, 7, 4, 1]),
        ((9, -1, -4), vec![9, 5, 1]),
        ((0, i32::MAX as i64, 1 << 30), vec![0, 1 << 30]),
        (
            (i32::MAX as i64 - 2, i32::MAX as i64, 1),
            vec![i32::MAX - 2, i32::MAX - 1],
        ),
        (
            (i32::MIN as i64 + 2, i32::MIN as i64, -1),
            vec![i32::MIN + 2, i32::MIN + 1],
        ),
    ];
    let runtime = loop_kernel("range_runtime", None);
    for ((lo, hi, step), want) in cases {
        let k = loop_kernel("range_constant", Some((lo, hi, step)));
        let got = every_target(&k, |l| l.grid([1]).args((out(&[32], I32).fill(-1.0),)));
        for (t, o) in &got {
            assert_eq!(
                loop_values(&o[0]),
                want,
                "range({lo}, {hi}, {step}) constant on {t:?}"
            );
        }
        let got = every_target(&runtime, |l| {
            l.grid([1]).args((
                out(&[32], I32).fill(-1.0),
                lo as i32,
                hi as i32,
                step as i32,
            ))
        });
        for (t, o) in &got {
            assert_eq!(
                loop_values(&o[0]),
                want,
                "range({lo}, {hi}, {step}) runtime on {t:?}"
            );
        }
    }
}

/// A zero step: a build error as a constant; at run time an error on the CPU targets and no
/// iteration in GPU code (Triton's own loop would never end).
#[test]
fn range_with_a_zero_step() {
    let e = try_loop_kernel("range_zero_const", Some((0, 10, 0)))
        .err()
        .unwrap();
    assert!(e.to_string().contains("range step must not be zero"), "{e}");
    let k = loop_kernel("range_zero", None);
    for t in support::targets("range_zero") {
        // CPU outputs are lazy: a failure surfaces when they are read.
        let r = k
            .launch()
            .grid([1])
            .args((out(&[32], I32).fill(-1.0), 0, 10, 0))
            .target(t)
            .run()
            .and_then(|o| o[0].to_vec::<i32>());
        match t {
            Target::Cpu | Target::CpuCompiled => {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("range step is 0"), "{t:?}: {e}");
            }
            _ => assert_eq!(r.unwrap()[0], 0, "{t:?}: no iteration"),
        }
    }
}

// ---- launches ----------------------------------------------------------------------------------

/// An output that a specialisation never stores to still comes back (holding its fill), on
/// the GPU paths as on the CPU ones, and a fill float32 cannot hold is exact everywhere
/// (MLX starts outputs from one float32 init value; Metal runs such a fill in place).
#[test]
fn unstored_outputs_and_exact_fills() {
    let k = tl::jit("maybe_store", |k| {
        let (a, b) = (k.ptr(I32, "a"), k.ptr(I32, "b"));
        let store_b = k.constexpr("STORE_B");
        let offs = tl::arange(0, 16);
        tl::store(a + offs, offs * 3);
        if store_b != 0 {
            tl::store(b + offs, offs);
        }
    })
    .unwrap();
    let want_a: Vec<i32> = (0..16).map(|i| i * 3).collect();
    let got = every_target(&k, |l| {
        l.grid([1])
            .args((out(&[16], I32), out(&[16], I32).fill(-5.0)))
            .constexpr("STORE_B", 0)
    });
    for (t, o) in &got {
        assert_eq!(o[0].to_vec::<i32>().unwrap(), want_a, "on {t:?}");
        assert_eq!(o[1].to_vec::<i32>().unwrap(), vec![-5; 16], "on {t:?}");
    }
    // 16777217 is not a float32.
    let partial = tl::jit("partial_store", |k| {
        let o = k.ptr(I32, "o");
        let offs = tl::arange(0, 16);
        tl::store(o + offs, offs).mask(offs.lt(4));
    })
    .unwrap();
    for t in support::targets("partial_store") {
        let r = partial
            .launch()
            .grid([1])
            .args((out(&[16], I32).fill(16777217.0),))
            .target(t)
            .run();
        let v = r.unwrap()[0].to_vec::<i32>().unwrap();
        assert_eq!(&v[..4], &[0, 1, 2, 3], "{t:?}");
        assert!(v[4..].iter().all(|&x| x == 16777217), "{t:?}: {v:?}");
    }
}

/// A grid with an axis of 0 programs runs no program, as Triton's launcher launches nothing
/// then: every output comes back holding its fill or the array it updates in place, on
/// every target (MLX's custom kernels refuse an empty grid, so the GPU paths launch none).
#[test]
fn a_grid_with_a_zero_axis_runs_no_program() {
    let k = tl::jit("zero_grid", |k| {
        let (x, y, z) = (k.ptr(F32, "x"), k.ptr(I32, "y"), k.ptr(F32, "z"));
        let offs = tl::program_id(1) * 16 + tl::arange(0, 16);
        tl::store(y + offs, offs);
        let v = tl::load(z + offs);
        tl::store(z + offs, v + tl::load(x + offs));
    })
    .unwrap();
    let x = Array::from_slice(&[1.0f32; 32], &[32]).unwrap();
    let zs: Vec<f32> = (0..32).map(|i| i as f32 - 3.5).collect();
    let z = Array::from_slice(&zs, &[32]).unwrap();
    for grid in [[0, 2, 1], [1, 0, 1], [1, 2, 0]] {
        // 16777217 is not a float32: the GPU paths carry it as an in-place update.
        let got = every_target(&k, |l| {
            l.grid(grid).args((
                &x,
                out(&[32], I32).fill(16777217.0),
                triton_metal::runtime::inout(&z),
            ))
        });
        for (t, o) in &got {
            assert_eq!(o[0].to_vec::<i32>().unwrap(), vec![16777217; 32], "{t:?}");
            assert_eq!(o[1].to_vec::<f32>().unwrap(), zs, "{t:?} {grid:?}");
        }
    }
}

// ---- math ------------------------------------------------------------------------------------

/// `tanh` within 2 ulp-ish (4e-7 relative) of the exact value over a wide range of
/// magnitudes, small ones included, where `(1 - e^-2x) / (1 + e^-2x)` cancels (libdevice's
/// worst case on an H100 was 1.8e-7).
#[test]
fn tanh_is_accurate_near_zero() {
    let mut xs: Vec<f32> = (0..2000)
        .map(|i| 10f64.powf(-6.0 + 7.3 * i as f64 / 2000.0) as f32)
        .collect();
    xs.extend([1e-3, 1.01e-3, 5e-4, 0.55, 0.6, 0.625, 9.0, 20.0]);
    let neg: Vec<f32> = xs.iter().map(|x| -x).collect();
    xs.extend(neg);
    let n = xs.len();
    let k = tl::jit("tanh", |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let n = k.scalar(I32, "n");
        let offs = tl::program_id(0) * 1024 + tl::arange(0, 1024);
        let m = offs.lt(n);
        tl::store(o + offs, tl::libdevice::tanh(tl::load(x + offs).mask(m))).mask(m);
    })
    .unwrap();
    let xa = Array::from_slice(&xs, &[n]).unwrap();
    let got = every_target(&k, |l| {
        l.grid([n.div_ceil(1024)])
            .args((&xa, out(&[n], F32), n as i32))
    });
    for (t, o) in &got {
        let v = o[0].to_vec::<f32>().unwrap();
        for (x, y) in xs.iter().zip(&v) {
            let want = (*x as f64).tanh();
            let rel = ((*y as f64) - want).abs() / want.abs();
            assert!(
                rel <= 4e-7,
                "tanh({x}) on {t:?}: {y}, want {want} (rel {rel:.2e})"
            );
        }
    }
}

/// `xor_sum` of booleans (Triton allows int1).
#[test]
fn xor_sum_of_booleans() {
    let k = tl::jit("xor_bool", |k| {
        let (x, o) = (k.ptr(I32, "x"), k.ptr(I32, "o"));
        let r = tl::arange(0, 4);
        let c = tl::arange(0, 64);
        let v = tl::load(x + r.col() * 64 + c.row()).ne(0);
        tl::store(o + r, tl::xor_sum(v, 1).to(I32));
    })
    .unwrap();
    let x: Vec<i32> = (0..256)
        .map(|i| ((i * 7 + i / 64) % 3 == 0) as i32)
        .collect();
    let want: Vec<i32> = (0..4)
        .map(|r| x[r * 64..(r + 1) * 64].iter().fold(0, |a, b| a ^ b))
        .collect();
    let xa = Array::from_slice(&x, &[256]).unwrap();
    let got = every_target(&k, |l| l.grid([1]).args((&xa, out(&[4], I32))));
    for (t, o) in &got {
        assert_eq!(o[0].to_vec::<i32>().unwrap(), want, "on {t:?}");
    }
}

/// `dot(.., out_dtype=F16)`: products summed in fp32 and rounded to fp16 once per `dot`, on
/// every target. (Triton on an H100 rounds once per 16-wide slice of K: the same result for
/// K <= 16 and for the sum below, where rounding after every product would stay at 1.0.)
#[test]
fn dot_with_f16_output_accumulates_in_f32() {
    const K: usize = 64;
    let k2 = tl::jit("dot_f16_out", |k| {
        let (a, b, o) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F16, "o"));
        let r = tl::arange(0, 16);
        let kk = tl::arange(0, K as i64);
        let x = tl::load(a + r.col() * K as i64 + kk.row());
        let y = tl::load(b + kk.col() * 16 + r.row());
        tl::store(o + r.col() * 16 + r.row(), tl::dot_out(x, y, None, F16));
    })
    .unwrap();
    let f16s = |v: &[f64]| {
        v.iter()
            .map(|&x| half::f16::from_f64(x))
            .collect::<Vec<_>>()
    };
    // All ones times [1, 2^-11, 2^-11, ...]: 1 + 63 * 2^-11 = 1.0307..., 1.03125 in fp16.
    let ones = f16s(&vec![1.0; 16 * K]);
    let tiny: Vec<f64> = (0..K * 16)
        .map(|i| if i < 16 { 1.0 } else { 2f64.powi(-11) })
        .collect();
    let (aa, ba) = (
        Array::from_slice(&ones, &[16 * K]).unwrap(),
        Array::from_slice(&f16s(&tiny), &[K * 16]).unwrap(),
    );
    let got = every_target(&k2, |l| l.grid([1]).args((&aa, &ba, out(&[256], F16))));
    for (t, o) in &got {
        assert!(
            floats(&o[0]).iter().all(|&v| v == 1.03125),
            "{t:?}: {:?}",
            floats(&o[0])
        );
    }
    // Random operands: the fp16 rounding of the exact sum, give or take fp32's summation error.
    let mut s = 7u64;
    let mut rnd = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
            })
            .collect()
    };
    let (av, bv) = (f16s(&rnd(16 * K)), f16s(&rnd(K * 16)));
    let (aa, ba) = (
        Array::from_slice(&av, &[16 * K]).unwrap(),
        Array::from_slice(&bv, &[K * 16]).unwrap(),
    );
    let want: Vec<f64> = (0..256)
        .map(|i| {
            let (r, c) = (i / 16, i % 16);
            (0..K)
                .map(|j| av[r * K + j].to_f64() * bv[j * 16 + c].to_f64())
                .sum::<f64>()
        })
        .collect();
    let got = every_target(&k2, |l| l.grid([1]).args((&aa, &ba, out(&[256], F16))));
    for (t, o) in &got {
        for (g, w) in floats(&o[0]).iter().zip(&want) {
            let ulp = half::f16::from_f64(*w).to_f64().abs() * 2f64.powi(-10);
            assert!((g - w).abs() <= ulp.max(1e-4), "{t:?}: {g} vs {w}");
        }
    }
}

/// A batched (3-D) `dot` with fp16 output, within Triton's test tolerance (rtol 1e-2).
#[test]
fn batched_dot_with_f16_output() {
    let k3 = tl::jit("dot3_f16_out", |k| {
        let (a, b, o) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F16, "o"));
        let bi = tl::reshape(tl::arange(0, 2), [2i64, 1, 1]);
        let (rm, rn) = (
            tl::reshape(tl::arange(0, 16), [1i64, 16, 1]),
            tl::reshape(tl::arange(0, 16), [1i64, 1, 16]),
        );
        let (km, kn) = (
            tl::reshape(tl::arange(0, 32), [1i64, 32, 1]),
            tl::reshape(tl::arange(0, 32), [1i64, 1, 32]),
        );
        let x = tl::load(a + bi * 512 + rm * 32 + kn);
        let y = tl::load(b + bi * 512 + km * 16 + rn);
        let at = bi * 256 + rm * 16 + rn;
        tl::store(o + at, tl::dot_out(x, y, None, F16));
    })
    .unwrap();
    let vals: Vec<half::f16> = (0..1024)
        .map(|i| half::f16::from_f64(((i * 37 % 101) as f64 - 50.0) / 25.0))
        .collect();
    let va = Array::from_slice(&vals, &[1024]).unwrap();
    let want: Vec<f64> = (0..512)
        .map(|i| {
            let (bi, r, c) = (i / 256, (i / 16) % 16, i % 16);
            (0..32)
                .map(|j| {
                    vals[bi * 512 + r * 32 + j].to_f64() * vals[bi * 512 + j * 16 + c].to_f64()
                })
                .sum::<f64>()
        })
        .collect();
    let got = every_target(&k3, |l| l.grid([1]).args((&va, &va, out(&[512], F16))));
    for (t, o) in &got {
        for (g, w) in floats(&o[0]).iter().zip(&want) {
            assert!((g - w).abs() <= 1e-2 * w.abs() + 1e-2, "{t:?}: {g} vs {w}");
        }
    }
}

/// `atomic_add` on bf16 (Triton allows it): every target gives the exact sum (Metal adds
/// inside the 32-bit word that holds the element; CUDA adds natively).
#[test]
fn atomic_add_on_bf16() {
    let k = tl::jit("atomic_bf16", |k| {
        let (p, v) = (k.ptr(BF16, "p"), k.ptr(BF16, "v"));
        let offs = tl::arange(0, 64);
        tl::atomic_add(p + offs % 2, tl::load(v + offs));
    })
    .unwrap();
    let ones = Array::from_slice(&[half::bf16::from_f32(1.0); 64], &[64]).unwrap();
    for (t, o) in every_target(&k, |l| l.grid([4]).args((out(&[2], BF16).fill(0.0), &ones))) {
        let v: Vec<f32> = o[0]
            .to_vec::<half::bf16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect();
        assert_eq!(v, vec![128.0, 128.0], "{t:?}");
    }
}
