//! Reductions and scans along one axis, viewing a block as `[outer, n, inner]`.
//!
//! Builtin kinds run as loops: along a contiguous axis (`inner == 1`) with 16 independent
//! accumulators so the loop vectorises; along an outer axis row by row over `inner`. Custom
//! combine regions are driven by `interp.rs` with the axis helpers at the end of this file.

use super::data::{canon_i32, multiversion, round_f32, same_kind, Data};
use super::elementwise::{max_f32, max_f64, min_f32, min_f64};
use crate::dtype::DType;
use crate::ir::{ReduceKind, ScanKind};

type Res = std::result::Result<(), String>;

/// `(outer, n, inner)` of `shape` around `axis`.
pub(crate) fn split_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

const LANES: usize = 16;

/// Folds a contiguous slice with `LANES` independent accumulators, then folds those.
#[inline(always)]
fn fold_lanes<T: Copy>(s: &[T], init: T, f: impl Fn(T, T) -> T + Copy) -> T {
    let mut acc = [init; LANES];
    let chunks = s.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = f(*a, *x);
        }
    }
    let mut r = init;
    for a in acc {
        r = f(r, a);
    }
    rest.iter().fold(r, |r, &x| f(r, x))
}

/// Reduces `[outer, n, inner]` with an associative, commutative `f` starting from `init`.
#[inline(always)]
fn fold_axis<T: Copy>(
    s: &[T],
    (outer, n, inner): (usize, usize, usize),
    init: T,
    f: impl Fn(T, T) -> T + Copy,
    out: &mut Vec<T>,
) {
    out.clear();
    if inner == 1 {
        // A plain loop, not `extend(map(..))`: the iterator adapters are separate functions
        // that are not inlined into the caller's AVX2 copy, which left this loop in SSE.
        out.reserve(outer);
        for o in 0..outer {
            out.push(fold_lanes(&s[o * n..(o + 1) * n], init, f));
        }
        return;
    }
    for o in 0..outer {
        let base = out.len();
        out.resize(base + inner, init);
        let acc = &mut out[base..];
        for j in 0..n {
            let row = &s[(o * n + j) * inner..(o * n + j + 1) * inner];
            for (a, x) in acc.iter_mut().zip(row) {
                *a = f(*a, *x);
            }
        }
    }
}

/// Index of the best element along the axis: `better(candidate, best)`; left-most on ties.
#[inline(always)]
fn arg_axis<T: Copy>(
    s: &[T],
    (outer, n, inner): (usize, usize, usize),
    better: impl Fn(T, T) -> bool,
    out: &mut Vec<i32>,
) {
    out.clear();
    for o in 0..outer {
        for t in 0..inner {
            let at = |j: usize| s[(o * n + j) * inner + t];
            let (mut best, mut idx) = (at(0), 0usize);
            for j in 1..n {
                let v = at(j);
                if better(v, best) {
                    best = v;
                    idx = j;
                }
            }
            out.push(idx as i32);
        }
    }
}

fn fmax<T: PartialOrd + Copy>(nan: fn(T) -> bool) -> impl Fn(T, T) -> bool + Copy {
    // Greater, or a number replacing a NaN: NaN is ignored unless everything is NaN.
    move |v, best| v > best || (nan(best) && !nan(v))
}

fn fmin<T: PartialOrd + Copy>(nan: fn(T) -> bool) -> impl Fn(T, T) -> bool + Copy {
    move |v, best| v < best || (nan(best) && !nan(v))
}

/// A builtin reduction of `src` (dtype `d`, viewed as `dims`) into `out`.
#[inline(always)]
fn reduce_impl(
    kind: ReduceKind,
    d: DType,
    src: &Data,
    dims: (usize, usize, usize),
    out: &mut Data,
) -> Res {
    let unsigned = d.is_unsigned_int();
    match (kind, src) {
        (ReduceKind::Sum, Data::F32(s)) => {
            // -0.0 is the identity of float addition (`x + -0.0 == x` for every `x`, +0.0
            // included): a sum of only -0.0s is -0.0, as IEEE adds them in any order.
            let o = out.f32s();
            fold_axis(s, dims, -0.0, |a, b| a + b, o);
            round_f32(o, d);
        }
        (ReduceKind::Sum, Data::F64(s)) => fold_axis(s, dims, -0.0, |a, b| a + b, out.f64s()),
        (ReduceKind::Sum, Data::I32(s)) => {
            let o = out.i32s();
            fold_axis(s, dims, 0, i32::wrapping_add, o);
            o.iter_mut().for_each(|x| *x = canon_i32(*x, d));
        }
        (ReduceKind::Sum, Data::I64(s)) => fold_axis(s, dims, 0, i64::wrapping_add, out.i64s()),
        (ReduceKind::Sum | ReduceKind::Xor, Data::Bool(s)) => {
            fold_axis(s, dims, false, |a, b| a ^ b, out.bools())
        }
        (ReduceKind::Xor, Data::I32(s)) => fold_axis(s, dims, 0, |a, b| a ^ b, out.i32s()),
        (ReduceKind::Xor, Data::I64(s)) => fold_axis(s, dims, 0, |a, b| a ^ b, out.i64s()),
        // max_f32/min_f32 return the non-NaN operand, so NaN starts and is ignored after.
        (ReduceKind::Max, Data::F32(s)) => fold_axis(s, dims, f32::NAN, max_f32, out.f32s()),
        (ReduceKind::Min, Data::F32(s)) => fold_axis(s, dims, f32::NAN, min_f32, out.f32s()),
        (ReduceKind::Max, Data::F64(s)) => fold_axis(s, dims, f64::NAN, max_f64, out.f64s()),
        (ReduceKind::Min, Data::F64(s)) => fold_axis(s, dims, f64::NAN, min_f64, out.f64s()),
        (ReduceKind::Max, Data::I32(s)) if unsigned => fold_axis(
            s,
            dims,
            0,
            |a, b| (a as u32).max(b as u32) as i32,
            out.i32s(),
        ),
        (ReduceKind::Min, Data::I32(s)) if unsigned => fold_axis(
            s,
            dims,
            -1,
            |a, b| (a as u32).min(b as u32) as i32,
            out.i32s(),
        ),
        (ReduceKind::Max, Data::I32(s)) => fold_axis(s, dims, i32::MIN, i32::max, out.i32s()),
        (ReduceKind::Min, Data::I32(s)) => fold_axis(s, dims, i32::MAX, i32::min, out.i32s()),
        (ReduceKind::Max, Data::I64(s)) if unsigned => fold_axis(
            s,
            dims,
            0,
            |a, b| (a as u64).max(b as u64) as i64,
            out.i64s(),
        ),
        (ReduceKind::Min, Data::I64(s)) if unsigned => fold_axis(
            s,
            dims,
            -1,
            |a, b| (a as u64).min(b as u64) as i64,
            out.i64s(),
        ),
        (ReduceKind::Max, Data::I64(s)) => fold_axis(s, dims, i64::MIN, i64::max, out.i64s()),
        (ReduceKind::Min, Data::I64(s)) => fold_axis(s, dims, i64::MAX, i64::min, out.i64s()),
        (ReduceKind::Max, Data::Bool(s)) => fold_axis(s, dims, false, |a, b| a | b, out.bools()),
        (ReduceKind::Min, Data::Bool(s)) => fold_axis(s, dims, true, |a, b| a & b, out.bools()),
        (ReduceKind::ArgMax, Data::F32(s)) => arg_axis(s, dims, fmax(f32::is_nan), out.i32s()),
        (ReduceKind::ArgMin, Data::F32(s)) => arg_axis(s, dims, fmin(f32::is_nan), out.i32s()),
        (ReduceKind::ArgMax, Data::F64(s)) => arg_axis(s, dims, fmax(f64::is_nan), out.i32s()),
        (ReduceKind::ArgMin, Data::F64(s)) => arg_axis(s, dims, fmin(f64::is_nan), out.i32s()),
        (ReduceKind::ArgMax, Data::I32(s)) if unsigned => {
            arg_axis(s, dims, |v, b| v as u32 > b as u32, out.i32s())
        }
        (ReduceKind::ArgMin, Data::I32(s)) if unsigned => {
            arg_axis(s, dims, |v, b| (v as u32) < b as u32, out.i32s())
        }
        (ReduceKind::ArgMax, Data::I32(s)) => arg_axis(s, dims, |v, b| v > b, out.i32s()),
        (ReduceKind::ArgMin, Data::I32(s)) => arg_axis(s, dims, |v, b| v < b, out.i32s()),
        (ReduceKind::ArgMax, Data::I64(s)) if unsigned => {
            arg_axis(s, dims, |v, b| v as u64 > b as u64, out.i32s())
        }
        (ReduceKind::ArgMin, Data::I64(s)) if unsigned => {
            arg_axis(s, dims, |v, b| (v as u64) < b as u64, out.i32s())
        }
        (ReduceKind::ArgMax, Data::I64(s)) => arg_axis(s, dims, |v, b| v > b, out.i32s()),
        (ReduceKind::ArgMin, Data::I64(s)) => arg_axis(s, dims, |v, b| v < b, out.i32s()),
        (ReduceKind::ArgMax, Data::Bool(s)) => arg_axis(s, dims, |v, b| v & !b, out.i32s()),
        (ReduceKind::ArgMin, Data::Bool(s)) => arg_axis(s, dims, |v, b| !v & b, out.i32s()),
        _ => return Err(format!("reduce {} is not defined on {d}", kind.name())),
    }
    Ok(())
}

/// Inclusive scan with `f` along the axis (from the end when `reverse`).
#[inline(always)]
fn scan_axis<T: Copy>(
    s: &[T],
    (outer, n, inner): (usize, usize, usize),
    reverse: bool,
    f: impl Fn(T, T) -> T + Copy,
    out: &mut Vec<T>,
) {
    out.clear();
    out.extend_from_slice(s);
    for o in 0..outer {
        let block = &mut out[o * n * inner..(o + 1) * n * inner];
        for step in 1..n {
            let (j, prev) = if reverse {
                (n - 1 - step, n - step)
            } else {
                (step, step - 1)
            };
            let (lo, hi) = block.split_at_mut(j.max(prev) * inner);
            let (cur, before): (&mut [T], &[T]) = if reverse {
                (&mut lo[j * inner..(j + 1) * inner], &hi[..inner])
            } else {
                (&mut hi[..inner], &lo[prev * inner..(prev + 1) * inner])
            };
            for (c, p) in cur.iter_mut().zip(before) {
                *c = f(*p, *c);
            }
        }
    }
}

/// A builtin scan (`cumsum`, `cumprod`) of `src` (dtype `d`).
#[inline(always)]
fn scan_impl(
    kind: ScanKind,
    d: DType,
    src: &Data,
    dims: (usize, usize, usize),
    reverse: bool,
    out: &mut Data,
) -> Res {
    let prod = kind == ScanKind::Prod;
    match src {
        Data::F32(s) => {
            // The running value is rounded each step, as Triton's narrow-float scan is.
            let narrow = d != DType::F32;
            let round = move |x: f32| super::data::round1(x, d);
            let o = out.f32s();
            match (prod, narrow) {
                (false, false) => scan_axis(s, dims, reverse, |a, b| a + b, o),
                (true, false) => scan_axis(s, dims, reverse, |a, b| a * b, o),
                (false, true) => scan_axis(s, dims, reverse, move |a, b| round(a + b), o),
                (true, true) => scan_axis(s, dims, reverse, move |a, b| round(a * b), o),
            }
        }
        Data::F64(s) if prod => scan_axis(s, dims, reverse, |a, b| a * b, out.f64s()),
        Data::F64(s) => scan_axis(s, dims, reverse, |a, b| a + b, out.f64s()),
        Data::I32(s) => {
            let o = out.i32s();
            if prod {
                scan_axis(s, dims, reverse, i32::wrapping_mul, o)
            } else {
                scan_axis(s, dims, reverse, i32::wrapping_add, o)
            }
            o.iter_mut().for_each(|x| *x = canon_i32(*x, d));
        }
        Data::I64(s) if prod => scan_axis(s, dims, reverse, i64::wrapping_mul, out.i64s()),
        Data::I64(s) => scan_axis(s, dims, reverse, i64::wrapping_add, out.i64s()),
        Data::Bool(s) if prod => scan_axis(s, dims, reverse, |a, b| a & b, out.bools()),
        Data::Bool(s) => scan_axis(s, dims, reverse, |a, b| a ^ b, out.bools()),
        Data::Ptr(_) => return Err(format!("scan is not defined on pointers ({d})")),
    }
    Ok(())
}

/// Picks positions `idx` along the axis of `[outer, n, inner]`: `[outer, idx.len(), inner]`.
pub(crate) fn gather_axis(
    src: &Data,
    (outer, n, inner): (usize, usize, usize),
    idx: &[usize],
    out: &mut Data,
) -> Res {
    if src.len() != outer * n * inner || idx.iter().any(|&j| j >= n) {
        return Err(format!(
            "combine operand has {} elements, expected {outer} x {n} x {inner}",
            src.len()
        ));
    }
    same_kind!(src, out, |s, o| {
        o.reserve(outer * idx.len() * inner);
        for ob in 0..outer {
            for &j in idx {
                let at = (ob * n + j) * inner;
                o.extend_from_slice(&s[at..at + inner]);
            }
        }
    });
    Ok(())
}

/// Concatenates `[outer, na, inner]` and `[outer, nb, inner]` along the axis.
pub(crate) fn concat_axis(
    a: &Data,
    na: usize,
    b: &Data,
    nb: usize,
    outer: usize,
    inner: usize,
    out: &mut Data,
) -> Res {
    if a.len() != outer * na * inner || b.len() != outer * nb * inner {
        return Err(format!(
            "combine results have {} and {} elements, expected {outer} x ({na} + {nb}) x {inner}",
            a.len(),
            b.len()
        ));
    }
    macro_rules! cat {
        ($a:expr, $b:expr, $o:expr) => {{
            let o = $o;
            for ob in 0..outer {
                o.extend_from_slice(&$a[ob * na * inner..(ob + 1) * na * inner]);
                o.extend_from_slice(&$b[ob * nb * inner..(ob + 1) * nb * inner]);
            }
        }};
    }
    match (a, b) {
        (Data::Bool(a), Data::Bool(b)) => cat!(a, b, out.bools()),
        (Data::I32(a), Data::I32(b)) => cat!(a, b, out.i32s()),
        (Data::I64(a), Data::I64(b)) => cat!(a, b, out.i64s()),
        (Data::F32(a), Data::F32(b)) => cat!(a, b, out.f32s()),
        (Data::F64(a), Data::F64(b)) => cat!(a, b, out.f64s()),
        (Data::Ptr(a), Data::Ptr(b)) => cat!(a, b, out.ptrs()),
        _ => return Err("concatenated blocks differ in type".into()),
    }
    Ok(())
}

multiversion! {
    /// A builtin reduction of `src` (dtype `d`, viewed as `dims`) into `out`.
    fn reduce(
        kind: ReduceKind,
        d: DType,
        src: &Data,
        dims: (usize, usize, usize),
        out: &mut Data,
    ) -> Res = reduce_impl;
}

multiversion! {
    /// A builtin scan (`cumsum`, `cumprod`) of `src` (dtype `d`).
    fn scan(
        kind: ScanKind,
        d: DType,
        src: &Data,
        dims: (usize, usize, usize),
        reverse: bool,
        out: &mut Data,
    ) -> Res = scan_impl;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_args_along_each_axis() {
        // [[1, 5, 5], [7, -2, 0]]
        let s = Data::I32(vec![1, 5, 5, 7, -2, 0]);
        let mut out = Data::default();
        reduce(ReduceKind::Sum, DType::I32, &s, (1, 2, 3), &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![8, 3, 5]));
        reduce(ReduceKind::ArgMax, DType::I32, &s, (2, 3, 1), &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![1, 0]));
        let f = Data::F32(vec![f32::NAN, 2.0, f32::NAN, 2.0]);
        reduce(ReduceKind::Max, DType::F32, &f, (1, 4, 1), &mut out).unwrap();
        assert_eq!(out, Data::F32(vec![2.0]));
        reduce(ReduceKind::ArgMax, DType::F32, &f, (1, 4, 1), &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![1]));
        let all_nan = Data::F32(vec![f32::NAN; 3]);
        reduce(ReduceKind::Min, DType::F32, &all_nan, (1, 3, 1), &mut out).unwrap();
        assert!(matches!(&out, Data::F32(v) if v[0].is_nan()));
    }

    #[test]
    fn float_sums_start_from_negative_zero() {
        let bits = |o: &Data| match o {
            Data::F32(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            Data::F64(v) => v.iter().map(|x| (x.to_bits() >> 32) as u32).collect(),
            _ => unreachable!(),
        };
        let (neg, pos) = ((-0.0f32).to_bits(), 0.0f32.to_bits());
        let mut out = Data::default();
        // Rows of -0s (sum -0), of -0s and one +0 (+0), -1 .. 1 (+0), along both axis kinds.
        for n in [1, 3, 16, 17, 300] {
            let mut v = vec![-0.0f32; 3 * n];
            v[n + n / 2] = 0.0;
            v[2 * n] = -1.0;
            v[3 * n - 1] += 1.0;
            for d in [DType::F32, DType::F16, DType::BF16] {
                reduce(
                    ReduceKind::Sum,
                    d,
                    &Data::F32(v.clone()),
                    (3, n, 1),
                    &mut out,
                )
                .unwrap();
                assert_eq!(bits(&out), [neg, pos, pos], "{d}, n = {n}");
            }
            let w: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            reduce(
                ReduceKind::Sum,
                DType::F64,
                &Data::F64(w),
                (1, 3 * n, 1),
                &mut out,
            )
            .unwrap();
            assert_eq!(bits(&out), [pos], "f64, n = {n}");
            // The same rows as columns: `inner` lanes each fold one column.
            let t: Vec<f32> = (0..3 * n).map(|i| v[(i % 3) * n + i / 3]).collect();
            reduce(
                ReduceKind::Sum,
                DType::F32,
                &Data::F32(t),
                (1, n, 3),
                &mut out,
            )
            .unwrap();
            assert_eq!(bits(&out), [neg, pos, pos], "columns, n = {n}");
        }
        reduce(
            ReduceKind::Sum,
            DType::F64,
            &Data::F64(vec![-0.0; 5]),
            (1, 5, 1),
            &mut out,
        )
        .unwrap();
        assert_eq!(bits(&out), [neg]);
    }

    #[test]
    fn scans_forward_and_reverse() {
        let s = Data::I32(vec![1, 2, 3, 4, 5, 6]);
        let mut out = Data::default();
        scan(ScanKind::Sum, DType::I32, &s, (1, 3, 2), false, &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![1, 2, 4, 6, 9, 12]));
        scan(ScanKind::Sum, DType::I32, &s, (2, 3, 1), true, &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![6, 5, 3, 15, 11, 6]));
        scan(ScanKind::Prod, DType::I32, &s, (1, 6, 1), false, &mut out).unwrap();
        assert_eq!(out, Data::I32(vec![1, 2, 6, 24, 120, 720]));
    }

    #[test]
    fn axis_gather_and_concat() {
        let s = Data::I32((0..12).collect()); // [2, 3, 2]
        let mut g = Data::default();
        gather_axis(&s, (2, 3, 2), &[2, 0], &mut g).unwrap();
        assert_eq!(g, Data::I32(vec![4, 5, 0, 1, 10, 11, 6, 7]));
        let mut c = Data::default();
        concat_axis(&g, 2, &s, 3, 2, 2, &mut c).unwrap();
        assert_eq!(
            c,
            Data::I32(vec![
                4, 5, 0, 1, 0, 1, 2, 3, 4, 5, 10, 11, 6, 7, 6, 7, 8, 9, 10, 11
            ])
        );
    }
}
