//! Layout plans edited from a launch (`Launch::override_plan`), as a user would: for each
//! kind of decision the launch builds the plan two ways (the optimizer's and an override),
//! the printed code differs accordingly and the results agree on every target (the
//! interpreter, which has no plan, the compiled CPU executor, emulated Metal in both lane
//! orders; CUDA printed and compiled by NVRTC). A bad override fails the launch with a
//! clear error, and programs printed from different plans never share a cache entry.

mod support;

use std::sync::Arc;

use half::f16;
use support::{cuda_compiles, every_target, targets};
use triton_metal::ir::{Kernel, OpId};
use triton_metal::opt::plan::DotLowering;
use triton_metal::runtime::{
    out, Decision, KernelPlan, LaneOrder, Launch, LaunchOptions, ReductionLayout, Scalar,
    ScanStrategy, Target,
};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{
    Array,
    DType::{F16, F32, I32},
    Error, Result,
};

const ROWS: usize = 4;
const COLS: usize = 256;
/// Ragged: the blocks are `ROWS x COLS`, the arrays smaller.
const N_ROWS: usize = 7;
const N_COLS: usize = 203;

/// Deterministic pseudo-random numbers in `[0, 1)`.
fn uniform(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

/// Random f32 rows with edge values planted: NaN, ±inf, ±0, subnormals and the smallest
/// normal; row 0 starts with -0.0s (whose sum is -0.0) and row 1 has no specials at all.
fn f32_input(seed: u64) -> Vec<f32> {
    let mut x: Vec<f32> = uniform(N_ROWS * N_COLS, seed)
        .into_iter()
        .map(|u| (u * 8.0 - 4.0) as f32)
        .collect();
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        -1e-45,
        1e-45,
    ];
    for (i, u) in uniform(3 * N_ROWS, seed ^ 0x5eed).chunks(3).enumerate() {
        if i == 1 {
            continue;
        }
        let at = i * N_COLS + 8 + (u[0] * (N_COLS - 8) as f64) as usize;
        x[at] = specials[(u[1] * specials.len() as f64) as usize];
        let at = i * N_COLS + 8 + (u[2] * (N_COLS - 8) as f64) as usize;
        x[at] = specials[i % specials.len()];
    }
    x[..8].fill(-0.0);
    x[2 * N_COLS + 100] = f32::INFINITY;
    x[2 * N_COLS + 150] = f32::NEG_INFINITY;
    x[3 * N_COLS + 5] = f32::NAN;
    x
}

/// The inclusive prefix sums of each row (of `n_cols`) in f64, with IEEE's specials: NaN
/// after a NaN or after both infinities, an infinity after one, -0.0 while only -0.0s have
/// been added.
fn f32_cumsum_ref(x: &[f32], n_cols: usize) -> Vec<(f64, f64)> {
    let mut want = Vec::with_capacity(x.len());
    for row in x.chunks(n_cols) {
        let (mut sum, mut abs, mut all_neg_zero) = (0.0f64, 0.0f64, true);
        let (mut nan, mut pinf, mut ninf) = (false, false, false);
        for &v in row {
            nan |= v.is_nan();
            pinf |= v == f32::INFINITY;
            ninf |= v == f32::NEG_INFINITY;
            all_neg_zero &= v == 0.0 && v.is_sign_negative();
            if v.is_finite() {
                sum += v as f64;
                abs += (v as f64).abs();
            }
            want.push(match () {
                _ if nan || (pinf && ninf) => (f64::NAN, 0.0),
                _ if pinf => (f64::INFINITY, 0.0),
                _ if ninf => (f64::NEG_INFINITY, 0.0),
                _ if all_neg_zero => (-0.0, 0.0),
                _ => (sum, abs),
            });
        }
    }
    want
}

/// `got` against [`f32_cumsum_ref`]: specials exactly, -0.0 by its sign, sums within
/// float reassociation of the magnitudes added.
fn check_f32_cumsum(got: &[f32], want: &[(f64, f64)], n_cols: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &(w, abs))) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || (w == 0.0 && w.is_sign_negative() && abs == 0.0) {
            g as f64 == w && g.is_sign_negative() == w.is_sign_negative()
        } else {
            ((g as f64) - w).abs() <= 1e-5 * abs.max(1.0)
        };
        assert!(
            ok,
            "{what}: element {i} (row {}, col {}) is {g}, want {w}",
            i / n_cols,
            i % n_cols
        );
    }
}

/// Row-wise `cumsum` of a ragged array in `[rows, cols]` blocks.
fn cumsum_rows(name: &str, dtype: triton_metal::DType, [rows, cols]: [usize; 2]) -> JitKernel {
    tl::jit(name, move |k| {
        let (x, y) = (k.ptr(dtype, "x"), k.ptr(dtype, "y"));
        let (n_rows, n_cols) = (k.scalar(I32, "n_rows"), k.scalar(I32, "n_cols"));
        let rows = tl::program_id(0) * rows as i64 + tl::arange(0, rows as i64);
        let cols = tl::arange(0, cols as i64);
        let offs = rows.col() * n_cols + cols.row();
        let mask = rows.col().lt(n_rows) & cols.row().lt(n_cols);
        let v = tl::load(x + offs).mask(mask).other(0);
        tl::store(y + offs, tl::cumsum(v, 1)).mask(mask);
    })
    .unwrap()
}

/// The ops of `plan` holding a decision that `pick` selects.
fn ops_where(plan: &KernelPlan, pick: impl Fn(&Decision) -> bool) -> Vec<OpId> {
    plan.decisions()
        .filter(|(_, d, _)| pick(d))
        .map(|(op, _, _)| op)
        .collect()
}

/// The override of the scan tests: every scan staged and walked serially.
fn serial_scans(plan: &mut KernelPlan, _: &Kernel, _: &LaunchOptions) -> Result<()> {
    for op in ops_where(plan, |d| matches!(d, Decision::Scan(_))) {
        plan.set_scan(op, ScanStrategy::Serial, "test: staged");
    }
    Ok(())
}

/// The launch of [`cumsum_rows`] (blocks of `rows` rows) on the 2-D array `x`, the output
/// poisoned with `poison`, its scans staged when `serial`.
fn scan_launch<'k>(
    l: Launch<'k>,
    (x, rows): (&Array, usize),
    poison: Scalar,
    serial: bool,
) -> Launch<'k> {
    let shape = x.shape();
    let l = l.grid([shape[0].div_ceil(rows)]).args((
        x,
        out(&shape, x.dtype()).fill(poison),
        shape[0] as i32,
        shape[1] as i32,
    ));
    if serial {
        l.override_plan(serial_scans)
    } else {
        l
    }
}

#[test]
fn scan_strategy_override_changes_the_code_not_the_result() {
    let k = cumsum_rows("cumsum_f32", F32, [ROWS, COLS]);
    let x = f32_input(0xc0ffee);
    let xa = Array::from_slice(&x, &[N_ROWS, N_COLS]).unwrap();
    let want = f32_cumsum_ref(&x, N_COLS);
    let nan = Scalar::from(f32::NAN);
    // The optimizer runs this scan on SIMD-group collectives; the override stages it.
    let metal = |serial| {
        let l = scan_launch(k.launch(), (&xa, ROWS), nan, serial)
            .target(Target::Emulated(LaneOrder::Forward));
        (l.plan().unwrap(), l.msl().unwrap())
    };
    let ((p0, m0), (p1, m1)) = (metal(false), metal(true));
    assert!(p0.to_string().contains("scan collective ; default"), "{p0}");
    assert!(
        p1.to_string().contains("scan serial ; test: staged"),
        "{p1}"
    );
    assert!(m0.source.contains("tm_lane"), "{}", m0.source);
    assert!(!m1.source.contains("tm_lane"), "{}", m1.source);
    assert!(m1.source.contains("tm_run"), "{}", m1.source);
    let cuda = |serial| {
        scan_launch(k.launch(), (&xa, ROWS), nan, serial)
            .cuda()
            .unwrap()
    };
    let (c0, c1) = (cuda(false), cuda(true));
    assert!(c0.source.contains("__shfl_up_sync"), "{}", c0.source);
    assert!(!c1.source.contains("__shfl_up_sync"), "{}", c1.source);
    for serial in [false, true] {
        for (t, outs) in every_target(&k, |l| scan_launch(l, (&xa, ROWS), nan, serial)) {
            let got = outs[0].to_vec::<f32>().unwrap();
            check_f32_cumsum(&got, &want, N_COLS, &format!("serial={serial} on {t:?}"));
        }
    }
}

/// Scans along an axis one thread's chunk holds: collective on the compiled CPU executor
/// too (registers only), so there the override changes the plan and the code as well.
#[test]
fn narrow_scans_follow_the_override_on_every_compiled_target() {
    const BLOCK: [usize; 2] = [32, 8];
    let (n_rows, n_cols) = (45, 7);
    let k = cumsum_rows("cumsum_narrow", F32, BLOCK);
    // Specials in every row but the first three; the first starts with -0.0s.
    let mut x: Vec<f32> = uniform(n_rows * n_cols, 99)
        .into_iter()
        .map(|u| (u * 2.0 - 1.0) as f32)
        .collect();
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 1e-45];
    for r in 3..n_rows {
        x[r * n_cols + r % n_cols] = specials[r % specials.len()];
    }
    x[..3].fill(-0.0);
    let want = f32_cumsum_ref(&x, n_cols);
    let xa = Array::from_slice(&x, &[n_rows, n_cols]).unwrap();
    let nan = Scalar::from(f32::NAN);
    for t in [
        Target::CpuCompiled,
        Target::Emulated(LaneOrder::Forward),
        Target::Cuda,
    ] {
        let plan = |serial| {
            scan_launch(k.launch(), (&xa, BLOCK[0]), nan, serial)
                .target(t)
                .plan()
                .unwrap()
                .to_string()
        };
        assert!(plan(false).contains("scan collective ; default"), "{t:?}");
        assert!(plan(true).contains("scan serial ; test: staged"), "{t:?}");
    }
    for serial in [false, true] {
        for (t, outs) in every_target(&k, |l| scan_launch(l, (&xa, BLOCK[0]), nan, serial)) {
            let got = outs[0].to_vec::<f32>().unwrap();
            check_f32_cumsum(&got, &want, n_cols, &format!("serial={serial} on {t:?}"));
        }
    }
}

#[test]
fn integer_scans_agree_exactly_under_both_strategies() {
    let k = cumsum_rows("cumsum_i32", I32, [ROWS, COLS]);
    let mut x: Vec<i32> = uniform(N_ROWS * N_COLS, 77)
        .into_iter()
        .map(|u| (u * 4e9 - 2e9) as i32)
        .collect();
    for (i, v) in [i32::MAX, i32::MIN, 0, -1, i32::MAX, 1, i32::MIN]
        .iter()
        .enumerate()
    {
        x[i * N_COLS + 3 * i + 1] = *v;
    }
    // Two's complement wraps: every order of the additions gives the same bits.
    let want: Vec<i32> = x
        .chunks(N_COLS)
        .flat_map(|r| {
            r.iter().scan(0i32, |s, &v| {
                *s = s.wrapping_add(v);
                Some(*s)
            })
        })
        .collect();
    let xa = Array::from_slice(&x, &[N_ROWS, N_COLS]).unwrap();
    for serial in [false, true] {
        let got = every_target(&k, |l| {
            scan_launch(l, (&xa, ROWS), Scalar::from(-7), serial)
        });
        for (t, outs) in got {
            assert_eq!(
                outs[0].to_vec::<i32>().unwrap(),
                want,
                "serial={serial} on {t:?}"
            );
        }
    }
}

#[test]
fn per_op_reduction_strategies_from_a_launch() {
    let k = tl::jit("row_stats", |k| {
        let (x, s, m) = (k.ptr(F32, "x"), k.ptr(F32, "s"), k.ptr(F32, "m"));
        let (n_rows, n_cols) = (k.scalar(I32, "n_rows"), k.scalar(I32, "n_cols"));
        let rows = tl::program_id(0) * ROWS as i64 + tl::arange(0, ROWS as i64);
        let cols = tl::arange(0, COLS as i64);
        let mask = rows.col().lt(n_rows) & cols.row().lt(n_cols);
        let v = tl::load(x + rows.col() * n_cols + cols.row())
            .mask(mask)
            .other(0);
        let w = tl::load(x + rows.col() * n_cols + cols.row())
            .mask(mask)
            .other(f32::NEG_INFINITY);
        tl::store(s + rows, tl::sum(v, 1)).mask(rows.lt(n_rows));
        tl::store(m + rows, w.max(1)).mask(rows.lt(n_rows));
    })
    .unwrap();
    let x = f32_input(0xbeef);
    let xa = Array::from_slice(&x, &[N_ROWS, N_COLS]).unwrap();
    let emu = Target::Emulated(LaneOrder::Forward);
    let p = stats_launch(k.launch(), &xa, true)
        .target(emu)
        .plan()
        .unwrap()
        .to_string();
    assert!(p.contains("reduce TILED ; test: tree"), "{p}");
    assert!(p.contains("reduce COLUMN_MAJOR ; test: columns"), "{p}");
    let src = |s| {
        stats_launch(k.launch(), &xa, s)
            .msl()
            .unwrap()
            .source
            .clone()
    };
    assert_ne!(src(false), src(true));
    let cu = |s| {
        stats_launch(k.launch(), &xa, s)
            .cuda()
            .unwrap()
            .source
            .clone()
    };
    assert_ne!(cu(false), cu(true));
    for s in [false, true] {
        for (t, outs) in every_target(&k, |l| stats_launch(l, &xa, s)) {
            let (sum, max) = (
                outs[0].to_vec::<f32>().unwrap(),
                outs[1].to_vec::<f32>().unwrap(),
            );
            for (r, row) in x.chunks(N_COLS).enumerate() {
                let want_max = row
                    .iter()
                    .copied()
                    .filter(|v| !v.is_nan())
                    .fold(f32::NEG_INFINITY, f32::max);
                let what = format!("split={s} on {t:?}, row {r}");
                assert_eq!(max[r].to_bits(), want_max.to_bits(), "max {what}");
                let want = f32_cumsum_ref(row, N_COLS);
                let (w, abs) = want[N_COLS - 1];
                let ok = if w.is_nan() {
                    sum[r].is_nan()
                } else if w.is_infinite() || w == 0.0 && abs == 0.0 {
                    sum[r] as f64 == w && sum[r].is_sign_negative() == w.is_sign_negative()
                } else {
                    ((sum[r] as f64) - w).abs() <= 1e-5 * abs.max(1.0)
                };
                assert!(ok, "sum {what}: {} want {w}", sum[r]);
            }
        }
    }
}

/// The launch of `row_stats` on `x`, outputs poisoned; with `split`, the sum takes a
/// pairwise tree and the max a walk down the staged columns.
fn stats_launch<'k>(l: Launch<'k>, x: &Array, split: bool) -> Launch<'k> {
    let l = l.grid([N_ROWS.div_ceil(ROWS)]).args((
        x,
        out(&[N_ROWS], F32).fill(f32::NAN),
        out(&[N_ROWS], F32).fill(f32::NAN),
        N_ROWS as i32,
        N_COLS as i32,
    ));
    if !split {
        return l;
    }
    l.override_plan(|plan, _, _| {
        let reds = ops_where(plan, |d| matches!(d, Decision::Reduce(_)));
        let [sum, max] = reds[..] else {
            return Err(Error::InvalidArgument(format!(
                "two reductions, got {reds:?}"
            )));
        };
        plan.set(sum, Decision::Reduce(ReductionLayout::Tiled), "test: tree");
        plan.set(
            max,
            Decision::Reduce(ReductionLayout::ColumnMajor),
            "test: columns",
        );
        Ok(())
    })
}

#[test]
fn a_bad_override_is_refused_naming_kernel_op_and_line() {
    let k = tl::jit("rev_cumsum", |k| {
        let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
        let offs = tl::arange(0, 128);
        tl::store(y + offs, tl::cumsum_reverse(tl::load(x + offs), 0));
    })
    .unwrap();
    let xa = Array::from_slice(&[1.0f32; 128], &[128]).unwrap();
    fn collective(plan: &mut KernelPlan, _: &Kernel, _: &LaunchOptions) -> Result<()> {
        for op in ops_where(plan, |d| matches!(d, Decision::Scan(_))) {
            plan.set_scan(op, ScanStrategy::Collective, "test");
        }
        Ok(())
    }
    let compiled: Vec<Target> = targets("rev_cumsum")
        .into_iter()
        .filter(|t| *t != Target::Cpu)
        .chain([Target::Cuda])
        .collect();
    for t in compiled {
        let launch = || {
            k.launch()
                .grid([1])
                .args((&xa, out(&[128], F32)))
                .target(t)
                .override_plan(collective)
        };
        let msg = match t {
            Target::Cuda => launch().cuda().map(|_| ()),
            _ => launch().run().map(|_| ()),
        }
        .expect_err("a collective reverse scan")
        .to_string();
        for part in [
            "rev_cumsum",
            "scan",
            "a reverse scan",
            "plan_overrides.rs",
            "use serial",
        ] {
            assert!(msg.contains(part), "{t:?}: `{part}` not in: {msg}");
        }
        assert!(launch().plan().is_err(), "{t:?}");
    }
    // What the plan is for is not the edit's to change.
    let e = k
        .launch()
        .grid([1])
        .args((&xa, out(&[128], F32)))
        .target(Target::Emulated(LaneOrder::Forward))
        .override_plan(|plan, _, _| {
            plan.printer.threads = 64;
            Ok(())
        })
        .msl()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rev_cumsum") && e.contains(".num_warps(..)"),
        "{e}"
    );
    // The interpreter has no plan to edit: it runs.
    let y = k
        .launch()
        .grid([1])
        .args((&xa, out(&[128], F32)))
        .target(Target::Cpu)
        .override_plan(collective)
        .run()
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap()[0], 128.0);
    // An error of the edit itself fails the launch, naming the kernel.
    let e = k
        .launch()
        .grid([1])
        .args((&xa, out(&[128], F32)))
        .target(Target::Emulated(LaneOrder::Forward))
        .override_plan(|_, _, _| Err(Error::InvalidArgument("no such op".into())))
        .msl()
        .unwrap_err()
        .to_string();
    assert!(e.contains("rev_cumsum") && e.contains("no such op"), "{e}");
}

#[test]
fn launches_differing_only_in_the_plan_do_not_share_programs() {
    let k = cumsum_rows("cumsum_cache", F32, [ROWS, COLS]);
    let xa = Array::from_slice(&f32_input(5), &[N_ROWS, N_COLS]).unwrap();
    let launch = |serial: bool| {
        let l = k
            .launch()
            .grid([N_ROWS.div_ceil(ROWS)])
            .args((
                &xa,
                out(&[N_ROWS, N_COLS], F32),
                N_ROWS as i32,
                N_COLS as i32,
            ))
            .target(Target::Emulated(LaneOrder::Forward));
        if serial {
            l.override_plan(serial_scans)
        } else {
            l
        }
    };
    let (a, b, again) = (
        launch(false).msl().unwrap(),
        launch(true).msl().unwrap(),
        launch(true).msl().unwrap(),
    );
    assert!(!Arc::ptr_eq(&a, &b));
    assert_ne!(a.name, b.name);
    assert_ne!(a.source, b.source);
    // The same edit finds the program it printed before.
    assert!(Arc::ptr_eq(&b, &again));
    let (a, b, again) = (
        launch(false).cuda().unwrap(),
        launch(true).cuda().unwrap(),
        launch(true).cuda().unwrap(),
    );
    assert!(!Arc::ptr_eq(&a, &b));
    assert_ne!(a.source, b.source);
    assert!(Arc::ptr_eq(&b, &again));
    // An edit that sets the decision the optimizer made prints the same code (but is its
    // own entry: keyed by the plan text, reasons included).
    let same = launch(false)
        .override_plan(|plan, _, _| {
            for op in ops_where(plan, |d| matches!(d, Decision::Scan(_))) {
                plan.set_scan(op, ScanStrategy::Collective, "test: as planned");
            }
            Ok(())
        })
        .msl()
        .unwrap();
    assert_eq!(same.source, launch(false).msl().unwrap().source);
    cuda_compiles(&launch(true)).unwrap();
}

/// `c = a @ b` of f16 `[m, k] x [k, n]` into f32, in 32x32 tiles, K in steps of 16.
fn matmul_f16() -> JitKernel {
    tl::jit("mm_f16", |k| {
        let (a, b, c) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F32, "c"));
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let offs_m = tl::program_id(0) * 32 + tl::arange(0, 32);
        let offs_n = tl::program_id(1) * 32 + tl::arange(0, 32);
        let offs_k = tl::arange(0, 16);
        let acc: tl::Tensor = tl::range(0, kk, 16).fold(tl::zeros([32, 32], F32), |k0, acc| {
            let ks = offs_k + k0;
            let at = tl::load(a + offs_m.col() * kk + ks.row())
                .mask(offs_m.col().lt(m) & ks.row().lt(kk))
                .other(0.0);
            let bt = tl::load(b + ks.col() * n + offs_n.row())
                .mask(ks.col().lt(kk) & offs_n.row().lt(n))
                .other(0.0);
            tl::dot(at, bt, acc)
        });
        tl::store(c + offs_m.col() * n + offs_n.row(), acc)
            .mask(offs_m.col().lt(m) & offs_n.row().lt(n));
    })
    .unwrap()
}

/// The override of the dot test: every `tl.dot` a scalar FMA loop, its accumulator out of
/// matrix fragments and its operands staged in their own iteration.
fn scalar_dots(plan: &mut KernelPlan, _: &Kernel, _: &LaunchOptions) -> Result<()> {
    for op in ops_where(plan, |d| {
        matches!(d, Decision::Resident(_) | Decision::Ahead { .. })
    }) {
        plan.remove(op);
    }
    for op in ops_where(plan, |d| matches!(d, Decision::Dot(_))) {
        plan.set(op, Decision::Dot(DotLowering::Fma), "test: scalar");
    }
    Ok(())
}

/// The launch of [`matmul_f16`] on `a` and `b`, the output poisoned, operands staged in
/// their own iteration; with `scalar`, [`scalar_dots`].
fn mm_launch<'k>(l: Launch<'k>, (a, b): (&Array, &Array), scalar: bool) -> Launch<'k> {
    let (m, kk, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    let l = l
        .grid([m.div_ceil(32), n.div_ceil(32)])
        .args((
            a,
            b,
            out(&[m, n], F32).fill(f32::NAN),
            m as i32,
            n as i32,
            kk as i32,
        ))
        .num_stages(1);
    if scalar {
        l.override_plan(scalar_dots)
    } else {
        l
    }
}

#[test]
fn dot_lowering_override_changes_the_code_not_the_result() {
    let k = matmul_f16();
    let (m, n, kk) = (37usize, 45usize, 50usize);
    let round = |v: f64| f16::from_f64(v).to_f64();
    let mut a: Vec<f64> = uniform(m * kk, 3)
        .into_iter()
        .map(|u| round(u * 2.0 - 1.0))
        .collect();
    let b: Vec<f64> = uniform(kk * n, 4)
        .into_iter()
        .map(|u| round(u * 2.0 - 1.0))
        .collect();
    // Specials in rows of A: NaN and infinities reach whole rows of C; f16's extremes and
    // zeros of both signs are ordinary products.
    a[2 * kk + 7] = f64::NAN;
    a[5 * kk + 3] = f64::INFINITY;
    a[9 * kk] = f64::NEG_INFINITY;
    a[11 * kk + 1] = 65504.0;
    a[12 * kk + 2] = -65504.0;
    a[13 * kk + 4] = -0.0;
    a[14 * kk + 5] = 6e-8;
    // Each element with the sum of its products' magnitudes (the scale of f32 rounding).
    let want: Vec<(f64, f64)> = (0..m * n)
        .map(|i| {
            let terms = (0..kk).map(|p| a[i / n * kk + p] * b[p * n + i % n]);
            (terms.clone().sum(), terms.map(f64::abs).sum())
        })
        .collect();
    let to16 = |v: &[f64]| -> Vec<f16> { v.iter().map(|&x| f16::from_f64(x)).collect() };
    let (aa, ba) = (
        Array::from_slice(&to16(&a), &[m, kk]).unwrap(),
        Array::from_slice(&to16(&b), &[kk, n]).unwrap(),
    );
    let emu = Target::Emulated(LaneOrder::Forward);
    let metal = |s| {
        mm_launch(k.launch(), (&aa, &ba), s)
            .target(emu)
            .msl()
            .unwrap()
            .source
            .clone()
    };
    assert!(metal(false).contains("simdgroup_multiply_accumulate"));
    assert!(!metal(true).contains("simdgroup_multiply_accumulate"));
    let cuda = |s| {
        mm_launch(k.launch(), (&aa, &ba), s)
            .cuda()
            .unwrap()
            .source
            .clone()
    };
    assert!(cuda(false).contains("mma.sync"));
    assert!(!cuda(true).contains("mma.sync"));
    let cpu = |s| {
        let p = mm_launch(k.launch(), (&aa, &ba), s)
            .target(Target::CpuCompiled)
            .plan()
            .unwrap();
        p.decisions()
            .filter_map(|(_, d, _)| match d {
                Decision::Dot(l) => Some(*l),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(cpu(false), [DotLowering::Rows]);
    assert_eq!(cpu(true), [DotLowering::Fma]);
    for s in [false, true] {
        for (t, outs) in every_target(&k, |l| mm_launch(l, (&aa, &ba), s)) {
            let got = outs[0].to_vec::<f32>().unwrap();
            for (i, (&g, &(w, abs))) in got.iter().zip(&want).enumerate() {
                let ok = if w.is_nan() {
                    g.is_nan()
                } else if w.is_infinite() {
                    g as f64 == w
                } else {
                    (g as f64 - w).abs() <= 1e-5 * abs.max(1.0)
                };
                assert!(
                    ok,
                    "scalar={s} on {t:?}: c[{}, {}] = {g}, want {w}",
                    i / n,
                    i % n
                );
            }
        }
    }
}

/// Edits of every kind, sensible or not, on a tiled matmul and a kernel of reductions and
/// scans: each compiles or is refused with an error naming the kernel, never a panic.
#[test]
fn every_edit_compiles_or_is_refused_with_the_kernels_name() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    type Edit = fn(&mut KernelPlan, &Kernel, &LaunchOptions);
    fn each(plan: &mut KernelPlan, pick: fn(&Decision) -> bool, f: &dyn Fn(&mut KernelPlan, OpId)) {
        for op in ops_where(plan, pick) {
            f(plan, op);
        }
    }
    let edits: Vec<(&str, Edit)> = vec![
        ("chunks of 1", |p, _, _| p.vec = 1),
        ("chunks of 8", |p, _, _| p.vec = 8),
        ("chunks of 16", |p, _, _| p.vec = 16),
        ("tiles staged as f32", |p, _, _| {
            each(p, |d| matches!(d, Decision::Dot(_)), &|p, o| {
                p.set(o, Decision::Dot(DotLowering::Simdgroup { stage: F32 }), "t")
            })
        }),
        ("rows of C", |p, _, _| {
            each(p, |d| matches!(d, Decision::Dot(_)), &|p, o| {
                p.set(o, Decision::Dot(DotLowering::Rows), "t")
            })
        }),
        ("K slices of 8", |p, _, _| {
            each(p, |d| matches!(d, Decision::Dot(_)), &|p, o| {
                p.set_k_slice(o, 8, "t")
            })
        }),
        ("K slices of 3", |p, _, _| {
            each(p, |d| matches!(d, Decision::Dot(_)), &|p, o| {
                p.set_k_slice(o, 3, "t")
            })
        }),
        ("bands of 8 rows", |p, _, _| {
            each(
                p,
                |d| matches!(d, Decision::Dot(_) | Decision::Resident(_)),
                &|p, o| p.set_band_rows(o, (32, 32), 8, "t"),
            )
        }),
        ("bands of 7 rows", |p, _, _| {
            each(
                p,
                |d| matches!(d, Decision::Dot(_) | Decision::Resident(_)),
                &|p, o| p.set_band_rows(o, (32, 32), 7, "t"),
            )
        }),
        ("tiled reductions", |p, _, _| {
            each(p, |d| matches!(d, Decision::Reduce(_)), &|p, o| {
                p.set(o, Decision::Reduce(ReductionLayout::Tiled), "t")
            })
        }),
        ("collective scans", |p, _, _| {
            each(p, |d| matches!(d, Decision::Scan(_)), &|p, o| {
                p.set_scan(o, ScanStrategy::Collective, "t")
            })
        }),
        ("no buffer sharing", |p, _, _| p.set_reuse(false)),
        ("barriers everywhere", |p, k, o| {
            p.set_barrier_everywhere(k, o)
        }),
        ("every decision dropped", |p, _, _| {
            each(p, |_| true, &|p, o| {
                p.remove(o);
            })
        }),
        ("a scan decision on a dot", |p, _, _| {
            each(p, |d| matches!(d, Decision::Dot(_)), &|p, o| {
                p.set_scan(o, ScanStrategy::Serial, "t")
            })
        }),
    ];
    let mm = matmul_f16();
    let stats = cumsum_rows("scans_for_edits", F32, [8, 64]);
    let a = Array::from_slice(&[f16::ONE; 32 * 48], &[32, 48]).unwrap();
    let b = Array::from_slice(&[f16::ONE; 48 * 32], &[48, 32]).unwrap();
    let x = Array::from_slice(&[1.0f32; 8 * 64], &[8, 64]).unwrap();
    let nan = Scalar::from(f32::NAN);
    for (what, edit) in edits {
        for t in [
            Target::Emulated(LaneOrder::Forward),
            Target::Cuda,
            Target::CpuCompiled,
        ] {
            for warps in [1, 4] {
                let launches = [
                    (mm.name(), mm_launch(mm.launch(), (&a, &b), false)),
                    (
                        stats.name(),
                        scan_launch(stats.launch(), (&x, 8), nan, false),
                    ),
                ];
                for (name, l) in launches {
                    let l = l.num_warps(warps).target(t).override_plan(move |p, k, o| {
                        edit(p, k, o);
                        Ok(())
                    });
                    let got = catch_unwind(AssertUnwindSafe(|| match t {
                        Target::Cuda => l.cuda().map(|_| ()),
                        Target::Emulated(_) => l.msl().map(|_| ()),
                        _ => l.plan().map(|_| ()),
                    }))
                    .unwrap_or_else(|_| panic!("{what} on {name}, {t:?}, {warps} warps: a panic"));
                    if let Err(e) = got {
                        let e = e.to_string();
                        assert!(e.contains(&format!("`{name}`")), "{what} on {t:?}: {e}");
                    }
                }
            }
        }
    }
}
