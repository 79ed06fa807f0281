//! The executor's reductions in the order each [`ReductionLayout`] combines elements.
//!
//! With `Launch::reduction_layout(..)` on the CPU target, builtin `sum`/`max`/`min`/`xor`
//! reductions run as the layout's GPU counterpart would order them, over `threads`
//! (`num_warps x 32`) simulated lanes:
//!
//! - DEFAULT: lane `l` folds elements `l, l + threads, ..`; the partials are then folded
//!   in lane order.
//! - ROW_MAJOR: each output walks its row from first to last element.
//! - COLUMN_MAJOR: the reduced axis is the outer loop: every output's accumulator takes
//!   element `j` before any takes `j + 1` (same per-output order as ROW_MAJOR, different
//!   memory walk).
//! - TILED: a pairwise tree: `s[i] = s[i] + s[i + half]`, halving until one is left.
//! - COALESCED: strided lane partials as DEFAULT, then a butterfly (`xor` 16, 8, 4, 2, 1)
//!   inside each 32-lane SIMD-group, then the SIMD-group results in order.
//!
//! Integer and `max`/`min` results do not depend on the order; float sums differ only by
//! rounding. `argmax`/`argmin` (left-most index on ties whatever the order) and custom
//! combine regions keep the executor's default path.

use super::data::{canon_i32, multiversion, round_f32, Data};
use super::elementwise::{max_f32, max_f64, min_f32, min_f64};
use super::reduce;
use crate::dtype::DType;
use crate::ir::ReduceKind;
use crate::opt::options::ReductionLayout;

type Res = std::result::Result<(), String>;

const SIMD_WIDTH: usize = 32;

/// How the CPU executor orders builtin reductions: a layout and the lanes it spreads a
/// row over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceStrategy {
    /// The layout whose combination order is followed.
    pub layout: ReductionLayout,
    /// Simulated threads per program (`num_warps x 32`; at least 1).
    pub threads: usize,
}

impl ReduceStrategy {
    /// `layout` over `num_warps x 32` lanes.
    pub fn new(layout: ReductionLayout, num_warps: usize) -> ReduceStrategy {
        ReduceStrategy {
            layout,
            threads: (num_warps * SIMD_WIDTH).max(1),
        }
    }
}

/// Strided lane partials: lane `l` folds `r[l], r[l + lanes], ..`.
#[inline(always)]
fn lane_partials<T: Copy>(
    r: &[T],
    lanes: usize,
    init: T,
    f: impl Fn(T, T) -> T + Copy,
    p: &mut Vec<T>,
) {
    p.clear();
    p.resize(lanes, init);
    for chunk in r.chunks(lanes) {
        for (a, x) in p.iter_mut().zip(chunk) {
            *a = f(*a, *x);
        }
    }
}

/// One row (contiguous) folded in `layout`'s order; `scratch` is reused across rows.
#[inline(always)]
fn fold_row<T: Copy>(
    st: ReduceStrategy,
    r: &[T],
    init: T,
    f: impl Fn(T, T) -> T + Copy,
    scratch: &mut Vec<T>,
) -> T {
    match st.layout {
        ReductionLayout::RowMajor | ReductionLayout::ColumnMajor => {
            r.iter().fold(init, |a, &x| f(a, x))
        }
        ReductionLayout::Default => {
            lane_partials(r, st.threads, init, f, scratch);
            scratch.iter().fold(init, |a, &x| f(a, x))
        }
        ReductionLayout::Tiled => {
            scratch.clear();
            scratch.extend_from_slice(r);
            let mut len = scratch.len();
            while len > 1 {
                let half = len.div_ceil(2);
                let (lo, hi) = scratch.split_at_mut(half);
                for (a, b) in lo.iter_mut().zip(&hi[..len - half]) {
                    *a = f(*a, *b);
                }
                len = half;
            }
            scratch.first().map_or(init, |&x| f(init, x))
        }
        ReductionLayout::Coalesced => {
            let lanes = st.threads.next_multiple_of(SIMD_WIDTH);
            lane_partials(r, lanes, init, f, scratch);
            let mut acc = init;
            for warp in scratch.chunks_exact_mut(SIMD_WIDTH) {
                let mut off = SIMD_WIDTH / 2;
                while off > 0 {
                    // Every lane reads its partner's value from before the step, as a
                    // simd_shuffle_xor does.
                    let before: [T; SIMD_WIDTH] = std::array::from_fn(|l| warp[l]);
                    for (l, v) in warp.iter_mut().enumerate() {
                        *v = f(before[l], before[l ^ off]);
                    }
                    off /= 2;
                }
                acc = f(acc, warp[0]);
            }
            acc
        }
    }
}

/// Reduces `[outer, n, inner]` along `n` in `st`'s order.
#[inline(always)]
fn fold_axis<T: Copy>(
    st: ReduceStrategy,
    s: &[T],
    (outer, n, inner): (usize, usize, usize),
    init: T,
    f: impl Fn(T, T) -> T + Copy,
    out: &mut Vec<T>,
) {
    out.clear();
    if st.layout == ReductionLayout::ColumnMajor {
        // Reduced axis outermost: every output takes element `j` before any takes `j + 1`.
        out.resize(outer * inner, init);
        if inner == 1 {
            for j in 0..n {
                for (o, a) in out.iter_mut().enumerate() {
                    *a = f(*a, s[o * n + j]);
                }
            }
            return;
        }
        for o in 0..outer {
            let acc = &mut out[o * inner..(o + 1) * inner];
            for j in 0..n {
                let row = &s[(o * n + j) * inner..(o * n + j + 1) * inner];
                for (a, x) in acc.iter_mut().zip(row) {
                    *a = f(*a, *x);
                }
            }
        }
        return;
    }
    let mut scratch = Vec::new();
    if inner == 1 {
        out.extend((0..outer).map(|o| fold_row(st, &s[o * n..(o + 1) * n], init, f, &mut scratch)));
        return;
    }
    let mut col = Vec::with_capacity(n);
    for o in 0..outer {
        for t in 0..inner {
            col.clear();
            col.extend((0..n).map(|j| s[(o * n + j) * inner + t]));
            out.push(fold_row(st, &col, init, f, &mut scratch));
        }
    }
}

#[inline(always)]
fn reduce_impl(
    st: ReduceStrategy,
    kind: ReduceKind,
    d: DType,
    src: &Data,
    dims: (usize, usize, usize),
    out: &mut Data,
) -> Res {
    let unsigned = d.is_unsigned_int();
    match (kind, src) {
        (ReduceKind::Sum, Data::F32(s)) => {
            // -0.0, the identity of float addition (see `reduce.rs`), also pads idle lanes.
            let o = out.f32s();
            fold_axis(st, s, dims, -0.0, |a, b| a + b, o);
            round_f32(o, d);
        }
        (ReduceKind::Sum, Data::F64(s)) => fold_axis(st, s, dims, -0.0, |a, b| a + b, out.f64s()),
        (ReduceKind::Sum, Data::I32(s)) => {
            let o = out.i32s();
            fold_axis(st, s, dims, 0, i32::wrapping_add, o);
            o.iter_mut().for_each(|x| *x = canon_i32(*x, d));
        }
        (ReduceKind::Sum, Data::I64(s)) => fold_axis(st, s, dims, 0, i64::wrapping_add, out.i64s()),
        (ReduceKind::Sum | ReduceKind::Xor, Data::Bool(s)) => {
            fold_axis(st, s, dims, false, |a, b| a ^ b, out.bools())
        }
        (ReduceKind::Xor, Data::I32(s)) => fold_axis(st, s, dims, 0, |a, b| a ^ b, out.i32s()),
        (ReduceKind::Xor, Data::I64(s)) => fold_axis(st, s, dims, 0, |a, b| a ^ b, out.i64s()),
        (ReduceKind::Max, Data::F32(s)) => fold_axis(st, s, dims, f32::NAN, max_f32, out.f32s()),
        (ReduceKind::Min, Data::F32(s)) => fold_axis(st, s, dims, f32::NAN, min_f32, out.f32s()),
        (ReduceKind::Max, Data::F64(s)) => fold_axis(st, s, dims, f64::NAN, max_f64, out.f64s()),
        (ReduceKind::Min, Data::F64(s)) => fold_axis(st, s, dims, f64::NAN, min_f64, out.f64s()),
        (ReduceKind::Max, Data::I32(s)) if unsigned => fold_axis(
            st,
            s,
            dims,
            0,
            |a, b| (a as u32).max(b as u32) as i32,
            out.i32s(),
        ),
        (ReduceKind::Min, Data::I32(s)) if unsigned => fold_axis(
            st,
            s,
            dims,
            -1,
            |a, b| (a as u32).min(b as u32) as i32,
            out.i32s(),
        ),
        (ReduceKind::Max, Data::I32(s)) => fold_axis(st, s, dims, i32::MIN, i32::max, out.i32s()),
        (ReduceKind::Min, Data::I32(s)) => fold_axis(st, s, dims, i32::MAX, i32::min, out.i32s()),
        (ReduceKind::Max, Data::I64(s)) if unsigned => fold_axis(
            st,
            s,
            dims,
            0,
            |a, b| (a as u64).max(b as u64) as i64,
            out.i64s(),
        ),
        (ReduceKind::Min, Data::I64(s)) if unsigned => fold_axis(
            st,
            s,
            dims,
            -1,
            |a, b| (a as u64).min(b as u64) as i64,
            out.i64s(),
        ),
        (ReduceKind::Max, Data::I64(s)) => fold_axis(st, s, dims, i64::MIN, i64::max, out.i64s()),
        (ReduceKind::Min, Data::I64(s)) => fold_axis(st, s, dims, i64::MAX, i64::min, out.i64s()),
        (ReduceKind::Max, Data::Bool(s)) => {
            fold_axis(st, s, dims, false, |a, b| a | b, out.bools())
        }
        (ReduceKind::Min, Data::Bool(s)) => fold_axis(st, s, dims, true, |a, b| a & b, out.bools()),
        _ => return reduce::reduce(kind, d, src, dims, out),
    }
    Ok(())
}

multiversion! {
    /// A builtin reduction of `src` (dtype `d`, viewed as `dims`) in `st`'s order.
    fn reduce(
        st: ReduceStrategy,
        kind: ReduceKind,
        d: DType,
        src: &Data,
        dims: (usize, usize, usize),
        out: &mut Data,
    ) -> Res = reduce_impl;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategies(warps: usize) -> impl Iterator<Item = ReduceStrategy> {
        ReductionLayout::ALL
            .into_iter()
            .map(move |l| ReduceStrategy::new(l, warps))
    }

    fn f32s(d: &Data) -> &[f32] {
        match d {
            Data::F32(v) => v,
            other => panic!("expected f32 data, got {other:?}"),
        }
    }

    /// Deterministic values in [-1, 1) of mixed magnitude, so order changes the rounding.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                u * if i % 7 == 0 { 1000.0 } else { 1.0 }
            })
            .collect()
    }

    #[test]
    fn every_layout_sums_like_f64_along_each_axis() {
        // Ragged sizes: below, at and above one lane per thread and one SIMD-group.
        for (outer, n, inner) in [(1, 1, 1), (3, 31, 1), (2, 257, 1), (5, 1000, 1), (2, 33, 3)] {
            let v = values(outer * n * inner, (n * 31 + inner) as u64);
            let src = Data::F32(v.clone());
            let mut want = vec![0f64; outer * inner];
            for o in 0..outer {
                for j in 0..n {
                    for t in 0..inner {
                        want[o * inner + t] += v[(o * n + j) * inner + t] as f64;
                    }
                }
            }
            for st in strategies(2) {
                let mut out = Data::default();
                reduce(
                    st,
                    ReduceKind::Sum,
                    DType::F32,
                    &src,
                    (outer, n, inner),
                    &mut out,
                )
                .unwrap();
                let got = f32s(&out);
                assert_eq!(got.len(), want.len(), "{st:?}");
                for (g, w) in got.iter().zip(&want) {
                    let tol = 1e-5 * n as f64 * 1000.0;
                    assert!(
                        (*g as f64 - w).abs() <= tol,
                        "{st:?} {outer}x{n}x{inner}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn float_sums_of_negative_zeros_in_every_order() {
        // Fewer elements than lanes too, so the layouts with lane partials pad idle lanes.
        for n in [1, 5, 32, 100, 256, 300] {
            for st in strategies(2).chain(strategies(8)) {
                let mut v = vec![-0.0f32; n];
                let mut out = Data::default();
                reduce(
                    st,
                    ReduceKind::Sum,
                    DType::F32,
                    &Data::F32(v.clone()),
                    (1, n, 1),
                    &mut out,
                )
                .unwrap();
                assert_eq!(
                    f32s(&out)[0].to_bits(),
                    (-0.0f32).to_bits(),
                    "{st:?} n = {n}"
                );
                v[n / 2] = 0.0;
                reduce(
                    st,
                    ReduceKind::Sum,
                    DType::F16,
                    &Data::F32(v),
                    (1, n, 1),
                    &mut out,
                )
                .unwrap();
                assert_eq!(f32s(&out)[0].to_bits(), 0, "{st:?} n = {n}");
            }
        }
    }

    #[test]
    fn layouts_really_combine_in_different_orders() {
        // 64 elements over 32 lanes: lane 0 holds big and 1, lane 1 holds -big and 1.
        // A left fold gives (big - big) + 1 + 1 = 2; every layout that pairs them first
        // loses a one to rounding (big + 1 == big in f32) and gives 1.
        let big = 16_777_216f32;
        let mut v = vec![0f32; 64];
        v[0] = big;
        v[1] = -big;
        v[32] = 1.0;
        v[33] = 1.0;
        let src = Data::F32(v);
        let sum = |l: ReductionLayout| {
            let mut out = Data::default();
            let st = ReduceStrategy::new(l, 1);
            reduce(st, ReduceKind::Sum, DType::F32, &src, (1, 64, 1), &mut out).unwrap();
            f32s(&out)[0]
        };
        assert_eq!(sum(ReductionLayout::RowMajor), 2.0);
        assert_eq!(sum(ReductionLayout::ColumnMajor), 2.0);
        assert_eq!(sum(ReductionLayout::Default), 1.0);
        assert_eq!(sum(ReductionLayout::Coalesced), 1.0);
        assert_eq!(sum(ReductionLayout::Tiled), 1.0);
    }

    #[test]
    fn launch_reduction_layout_selects_the_order_on_the_cpu_target() -> crate::Result<()> {
        use crate::runtime::{out, Target};
        use crate::{tl, Array};
        let k = tl::jit("row_sum64", |k| {
            let (x, o) = (k.ptr(DType::F32, "x"), k.ptr(DType::F32, "o"));
            tl::store(o, tl::load(x + tl::arange(0, 64)).sum(0));
        })?;
        let big = 16_777_216f32;
        let mut v = vec![0f32; 64];
        (v[0], v[1], v[32], v[33]) = (big, -big, 1.0, 1.0);
        let x = Array::from_slice(&v, &[64])?;
        for (layout, want) in [
            (ReductionLayout::RowMajor, 2.0),
            (ReductionLayout::ColumnMajor, 2.0),
            (ReductionLayout::Default, 1.0),
            (ReductionLayout::Tiled, 1.0),
            (ReductionLayout::Coalesced, 1.0),
        ] {
            let y = k
                .launch()
                .grid([1])
                .args((&x, out(&[1], DType::F32)))
                .num_warps(1)
                .reduction_layout(layout)
                .target(Target::Cpu)
                .run()?;
            assert_eq!(y[0].to_vec::<f32>()?, vec![want], "{layout:?}");
        }
        Ok(())
    }

    #[test]
    fn narrow_floats_round_once_and_integers_match_exactly() {
        let v: Vec<f32> = values(300, 9)
            .into_iter()
            .map(|x| half::f16::from_f32(x / 1000.0).to_f32())
            .collect();
        let src = Data::F32(v.clone());
        let exact: f64 = v.iter().map(|&x| x as f64).sum();
        for st in strategies(4) {
            let mut out = Data::default();
            reduce(st, ReduceKind::Sum, DType::F16, &src, (1, 300, 1), &mut out).unwrap();
            let got = f32s(&out)[0];
            assert_eq!(got, half::f16::from_f32(got).to_f32(), "{st:?}: not an f16");
            assert!(
                (got as f64 - exact).abs() <= 2e-3 * exact.abs().max(1.0),
                "{st:?}"
            );
        }
        let ints = Data::I32((0..1000).map(|i| (i * 7919) % 2001 - 1000).collect());
        let mut base = Data::default();
        for kind in [
            ReduceKind::Sum,
            ReduceKind::Max,
            ReduceKind::Min,
            ReduceKind::Xor,
        ] {
            reduce::reduce(kind, DType::I32, &ints, (4, 250, 1), &mut base).unwrap();
            for st in strategies(1) {
                let mut out = Data::default();
                reduce(st, kind, DType::I32, &ints, (4, 250, 1), &mut out).unwrap();
                assert_eq!(out, base, "{kind:?} {st:?}");
            }
        }
    }

    #[test]
    fn nan_is_ignored_by_max_in_every_order() {
        let src = Data::F32(vec![f32::NAN, 3.0, -1.0, f32::NAN, 2.0]);
        for st in strategies(1) {
            let mut out = Data::default();
            reduce(st, ReduceKind::Max, DType::F32, &src, (1, 5, 1), &mut out).unwrap();
            assert_eq!(f32s(&out), &[3.0], "{st:?}");
        }
    }
}
