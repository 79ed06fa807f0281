//! The compiled CPU executor's decisions as the plan holds them (`opt::cpu`): each names
//! the fact that drove it, the text round-trips, the verifier refuses what the kernel
//! cannot take, and for each kind of decision an override changes the printed C++ but not
//! the results (the interpreter and the compiled executor against an f64 reference, edge
//! values, ragged rows, poisoned outputs).

use super::tests::{build, rnd};
use crate::dtype::DType::F32;
use crate::emu::Emulator;
use crate::exec::test_support::bytes_mut;
use crate::exec::ExecArg;
use crate::ir::{Kernel, Op, OpId};
use crate::opt::plan::KernelPlan;
use crate::tl::{self, KernelBuilder, Tensor};

const BLOCK: i64 = 128;

/// Per row `pid` of `n` elements, in blocks of `BLOCK` columns: the row sum (a loop from
/// `tl.zeros`), then `y = 2x - sum` stored per block and the row maximum of `y` (a loop from
/// `-inf`).
pub(crate) fn row_stats(k: &mut KernelBuilder) {
    let (x, y, sums, maxs) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(F32, "sum_ptr"),
        k.ptr(F32, "max_ptr"),
    );
    let n = k.scalar(crate::DType::I32, "n");
    let block = k.constexpr("BLOCK");
    let pid = tl::program_id(0);
    let cols = tl::arange(0, block);
    let acc: Tensor = tl::range(0, n, block).fold(tl::zeros([block], F32), |off, acc| {
        let c = off + cols;
        acc + tl::load(x + pid * n + c).mask(c.lt(n)).other(0.0f32)
    });
    let s = acc.sum(0);
    tl::store(sums + pid, s);
    let m: Tensor =
        tl::range(0, n, block).fold(tl::full([block], f32::NEG_INFINITY, F32), |off, m| {
            let c = off + cols;
            let v = tl::load(x + pid * n + c).mask(c.lt(n)).other(0.0f32);
            let out = v * 2.0f32 - s;
            tl::store(y + pid * n + c, out).mask(c.lt(n));
            tl::maximum(m, tl::where_(c.lt(n), out, f32::NEG_INFINITY))
        });
    tl::store(maxs + pid, m.max(0));
}

fn kernel() -> Kernel {
    build("row_stats", &[("BLOCK", BLOCK)], row_stats)
}

/// The printed C++ of `k` under `plan` (the part after the runtime header).
fn body(k: &Kernel, plan: &KernelPlan) -> String {
    let p = super::cpu::compile_with(k, false, plan).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&p.plan, plan);
    p.source
        .split("#line 1 \"kernel.cpp\"")
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// The kernel's plan with one kind of CPU decision overridden everywhere.
fn overridden(k: &Kernel, kind: &str) -> KernelPlan {
    let mut p = super::cpu::plan(k);
    let cpu = p.cpu.as_mut().expect("CPU decisions");
    match kind {
        "recipes" => {
            cpu.recipes = false;
            cpu.recipes_why = "override".into();
        }
        "lazy" => {
            for v in taken(cpu.lazy_decisions()) {
                cpu.set_lazy(v, false, "override");
            }
        }
        "unswitch" => {
            for v in taken(cpu.unswitch_decisions()) {
                cpu.set_unswitched(v, false, "override");
            }
        }
        "peel" => {
            for op in loops(k) {
                cpu.set_peeled(op, Vec::new(), "override");
            }
        }
        "lanes1" | "lanes8" => {
            let lanes = if kind == "lanes1" { 1 } else { 8 };
            for op in reductions(k) {
                cpu.set_lanes(op, lanes, "override");
            }
        }
        "whole" => {
            for op in taken(cpu.whole_decisions()) {
                cpu.set_whole(op, false, "override");
            }
        }
        "rows" => {
            for op in taken(cpu.rows_decisions()) {
                cpu.set_rows(op, false, "override");
            }
        }
        "branch_free" => {
            cpu.branch_free = false;
            cpu.branch_free_why = "override".into();
        }
        _ => unreachable!("{kind}"),
    }
    p
}

/// What the decisions take (at least one).
fn taken<'a, K>(decisions: impl Iterator<Item = (K, bool, &'a str)>) -> Vec<K> {
    let on: Vec<K> = decisions.filter(|d| d.1).map(|d| d.0).collect();
    assert!(!on.is_empty());
    on
}

fn ops_where(k: &Kernel, f: impl Fn(&Op) -> bool) -> Vec<OpId> {
    (0..k.ops.len())
        .map(|i| OpId(i as u32))
        .filter(|&o| f(&k.op(o).op))
        .collect()
}

fn loops(k: &Kernel) -> Vec<OpId> {
    ops_where(k, |o| matches!(o, Op::For { .. }))
}

fn reductions(k: &Kernel) -> Vec<OpId> {
    ops_where(k, |o| matches!(o, Op::Reduce { .. }))
}

const KINDS: [&str; 8] = [
    "recipes",
    "lazy",
    "unswitch",
    "peel",
    "lanes1",
    "lanes8",
    "whole",
    "branch_free",
];

/// Whether `src` combines conditions with `&` (a `bool(..) & bool(..)` chain).
fn branch_free(src: &str) -> bool {
    src.contains(") & bool(")
}

#[test]
fn every_cpu_decision_names_its_reason_and_the_text_round_trips() {
    let k = kernel();
    let p = super::cpu::plan(&k);
    let text = p.to_string();
    let cpu = p.cpu.as_ref().expect("a one-thread plan has CPU decisions");
    assert!(cpu.recipes, "{text}");
    assert!(
        text.contains("cpu recipes=on ; one thread per program"),
        "{text}"
    );
    assert!(text.contains("cpu lazy_depth=16 ;"), "{text}");
    // The first loop starts from `tl.zeros`, the second from `tl.full(-inf)`: both peeled,
    // their one carried block uniform.
    for op in loops(&k) {
        assert_eq!(cpu.peeled(op), &[0], "{text}");
        assert!(
            text.contains(&format!("cpu {op} peel=0 ; ")) && text.contains("start uniform"),
            "{text}"
        );
    }
    // Both reductions fold 128 elements in 32 lanes; the reason says it is not the host's
    // vector width.
    for op in reductions(&k) {
        assert_eq!(cpu.lanes(op), 32);
        assert!(
            text.contains(&format!("cpu {op} lanes=32 ; 128 elements per output")),
            "{text}"
        );
    }
    assert!(text.contains("the same on every host"), "{text}");
    // The masks `c < n` are unswitched, tested on their runs of 128 consecutive indices:
    // the first loop's, and the first two of the second loop's three (the third would open
    // a third split at once, more than MAX_OPEN).
    assert_eq!(crate::opt::cpu::MAX_OPEN, 2);
    assert_eq!(
        cpu.unswitch_decisions().filter(|d| d.1).count(),
        3,
        "{text}"
    );
    assert!(
        text.contains("unswitch ; index-only mask; all true when `lt` of"),
        "{text}"
    );
    assert!(text.contains("runs of 128 consecutive i32"), "{text}");
    // The printer is handed each test: `c < n` at the ends of the one run of 128.
    let tests = cpu.unswitch_tests(&k);
    assert_eq!(tests.len(), 3, "{tests:?}");
    for t in tests.values() {
        assert!(
            matches!(
                t,
                crate::opt::cpu::AllTrue::Runs {
                    pred: crate::ir::CmpPred::Lt,
                    dtype: crate::DType::I32,
                    run: 128,
                    runs: 1,
                    step: 1,
                    ..
                }
            ),
            "{t:?}"
        );
    }
    // The loads: read by one op each, computed where they are read.
    assert!(text.contains(" lazy ; one use, by `"), "{text}");
    // Every access runs +1 over its 128 elements: checked once for the whole block. The
    // blocks are 1-D: no row copies.
    let accesses = ops_where(&k, |o| matches!(o, Op::Load { .. } | Op::Store { .. }));
    let block_accesses: Vec<OpId> = accesses
        .into_iter()
        .filter(|&o| match &k.op(o).op {
            Op::Load { ptr, .. } | Op::Store { ptr, .. } => k.ty(*ptr).is_block(),
            _ => false,
        })
        .collect();
    assert_eq!(block_accesses.len(), 3, "{text}");
    for op in block_accesses {
        assert!(cpu.whole(op), "{op}: {text}");
        assert!(
            text.contains(&format!("cpu {op} whole=on ; offsets through %"))
                && text.contains("run +1 over all 128 elements"),
            "{text}"
        );
    }
    assert_eq!(cpu.rows_decisions().count(), 0, "{text}");
    assert!(
        cpu.branch_free && text.contains("cpu branch_free=on ; one thread per program"),
        "{text}"
    );
    assert_eq!(KernelPlan::parse(&text).unwrap(), p, "{text}");
    for kind in KINDS {
        let o = overridden(&k, kind);
        let t = o.to_string();
        assert!(t.contains("; override"), "{kind}: {t}");
        assert_eq!(KernelPlan::parse(&t).unwrap(), o, "{t}");
        o.verify(&k).unwrap();
    }
    // GPU plans have no CPU decisions.
    let metal = super::metal::plan(&k, &super::LaunchOptions::default());
    assert!(metal.cpu.is_none());
    assert!(!metal.to_string().contains("cpu "));
}

#[test]
fn the_verifier_refuses_cpu_decisions_the_kernel_cannot_take() {
    let k = kernel();
    let refuse = |p: &KernelPlan, what: &str| {
        let e = super::cpu::compile_with(&k, false, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
    };
    let default = super::cpu::plan(&k);
    let for_ = loops(&k)[0];
    let red = reductions(&k)[0];
    // The reduction's result is stored as a scalar: nothing to compute where read.
    let sum = k.op(red).result().unwrap();
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_lazy(sum, true, "test");
    refuse(&p, "do not each read it once");
    // A loaded block is no mask built from index arithmetic.
    let load = ops_where(&k, |o| matches!(o, Op::Load { .. }))[0];
    let mut p = default.clone();
    p.cpu
        .as_mut()
        .unwrap()
        .set_unswitched(k.op(load).result().unwrap(), true, "test");
    refuse(&p, "not a block mask built from index arithmetic");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_peeled(red, vec![0], "test");
    refuse(&p, "not a `for`");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_peeled(for_, vec![3], "test");
    refuse(&p, "carried slot 3 does not start as a uniform block");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_lanes(red, 3, "test");
    refuse(&p, "3 reduction lanes");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_lanes(for_, 8, "test");
    refuse(&p, "not a builtin reduction");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().lazy_depth = 0;
    refuse(&p, "depth 0");
    // Whole-block accesses and row copies only on loads and stores of the right shape.
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_whole(red, true, "test");
    refuse(&p, "not a load or store");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_rows(load, true, "test");
    refuse(&p, "a block of 1 dimension(s)");
    let store = ops_where(&k, |o| matches!(o, Op::Store { .. }))[0];
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_rows(store, true, "test");
    refuse(&p, "copied by rows: a block of 0 dimension(s)");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_rows(red, true, "test");
    refuse(&p, "row copies on an op that is not a load or store");
    // A 2-D tile whose rows are `stride` apart runs +1 along its rows only.
    let t = tile_kernel();
    let tload = ops_where(&t, |o| matches!(o, Op::Load { .. }))[0];
    let mut p = super::cpu::plan(&t);
    p.cpu.as_mut().unwrap().set_whole(tload, true, "test");
    let e = super::cpu::compile_with(&t, false, &p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("run +1 over 32 of its 256 elements, not all"),
        "{e}"
    );
    // An unknown setting is no CPU decision.
    let text = default
        .to_string()
        .replace("branch_free=on", "branch_free=maybe");
    let e = KernelPlan::parse(&text).unwrap_err().to_string();
    assert!(e.contains("CPU decision"), "{e}");
    // A plan without CPU decisions, or CPU decisions on a program of many threads.
    let mut p = default.clone();
    p.cpu = None;
    refuse(&p, "without CPU decisions");
    let mut metal = super::metal::plan(&k, &super::LaunchOptions::default());
    metal.cpu = default.cpu.clone();
    let e = metal.verify(&k).unwrap_err().to_string();
    assert!(e.contains("program of 128 threads"), "{e}");
}

#[test]
fn each_cpu_decision_changes_the_code_not_the_result() {
    let k = kernel();
    let default = super::cpu::plan(&k);
    let base = body(&k, &default);
    // What each override takes out of the default code, and what it puts in.
    let lane_decl = |src: &str, n: usize| {
        src.lines()
            .any(|l| l.trim_start().starts_with("float lane") && l.contains(&format!("[{n}];")))
    };
    assert!(base.contains("tm_lazy<int>([=]"), "{base}");
    assert!(base.contains("tm_lazy<float>([&]"), "{base}");
    assert!(base.contains("std::true_type"), "{base}");
    assert!(
        base.lines()
            .any(|l| l.trim_start().starts_with("if (trips") && l.contains(" > 0) {")),
        "{base}"
    );
    assert!(lane_decl(&base, 32), "{base}");
    assert!(base.contains("float* tm_dst = "), "{base}");
    assert!(branch_free(&base), "{base}");
    let mut srcs = vec![base.clone()];
    for kind in KINDS {
        let src = body(&k, &overridden(&k, kind));
        match kind {
            "recipes" => assert!(!src.contains("tm_lazy<int>([=]"), "{src}"),
            "lazy" => assert!(!src.contains("tm_lazy<float>([&]"), "{src}"),
            "unswitch" => assert!(!src.contains("std::true_type"), "{src}"),
            "peel" => assert!(
                !src.lines().any(|l| l.trim_start().starts_with("if (trips")),
                "{src}"
            ),
            "lanes1" => assert!(!src.contains("float lane"), "{src}"),
            "lanes8" => assert!(lane_decl(&src, 8) && !lane_decl(&src, 32), "{src}"),
            "whole" => assert!(!src.contains("tm_dst"), "{src}"),
            _ => assert!(!branch_free(&src), "{src}"),
        }
        assert!(
            !srcs.contains(&src),
            "{kind} printed the same code as another plan"
        );
        srcs.push(src);
    }
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    let mut plans = vec![default];
    plans.extend(KINDS.map(|kind| overridden(&k, kind)));
    for n in [300usize, 128, 37] {
        let rows = 6usize;
        let mut x = rnd(rows * n, n as u64, -4.0, 4.0);
        x[5] = f32::NAN;
        x[n + 7] = f32::INFINITY;
        x[2 * n + 3] = f32::NEG_INFINITY;
        x[2 * n + 30] = f32::INFINITY;
        for (j, v) in x[3 * n..4 * n].iter_mut().enumerate() {
            *v = if j % 2 == 0 { -0.0 } else { 0.0 };
        }
        x[4 * n..5 * n].iter_mut().for_each(|v| *v = -0.0);
        x[5 * n + 1] = 1e30;
        x[5 * n + 2] = -3e29;
        let want = reference(&x, rows, n);
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let run = |plan: Option<&KernelPlan>| -> [Vec<u32>; 3] {
            let mut y = vec![POISON; rows * n];
            let mut s = vec![POISON; rows];
            let mut m = vec![POISON; rows];
            let mut args = [
                ExecArg::from(&xb[..]),
                ExecArg::from(bytes_mut(&mut y)),
                ExecArg::from(bytes_mut(&mut s)),
                ExecArg::from(bytes_mut(&mut m)),
                ExecArg::from(n as i32),
            ];
            let grid = [rows, 1, 1];
            match plan {
                None => crate::exec::execute(&k, grid, &mut args),
                Some(p) => crate::native::execute_native_with(&k, p, grid, &mut args),
            }
            .unwrap_or_else(|e| panic!("{e}"));
            [y, s, m]
        };
        let interp = run(None);
        check(&interp, &want, &format!("interpreter, n={n}"));
        for (i, p) in plans.iter().enumerate() {
            let got = run(Some(p));
            let what = format!(
                "compiled, {} plan, n={n}",
                ["default"].iter().chain(&KINDS).nth(i).unwrap()
            );
            check(&got, &want, &what);
            // The maxima are exact: every plan gives the interpreter's.
            for (r, (g, w)) in got[2].iter().zip(&interp[2]).enumerate() {
                let (g, w) = (f32::from_bits(*g), f32::from_bits(*w));
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{what}: max of row {r}: {g} vs the interpreter's {w}"
                );
            }
        }
    }
}

/// An output element no kernel writes (a NaN with a payload the kernel never makes).
const POISON: u32 = 0x7fa5_a5a5;

/// [`row_stats`] in f64: per row the outputs `y`, the sum, the maximum of `y` (`None`
/// where a NaN in `y` leaves it to the NaN rules of `tl.maximum`; -0 below +0), and the
/// row's sum of magnitudes (the scale of the sum's rounding).
struct Reference {
    y: Vec<f64>,
    sum: Vec<f64>,
    max: Vec<Option<f64>>,
    scale: Vec<f64>,
}

fn reference(x: &[f32], rows: usize, n: usize) -> Reference {
    let mut r = Reference {
        y: Vec::new(),
        sum: Vec::new(),
        max: Vec::new(),
        scale: Vec::new(),
    };
    for row in x.chunks(n).take(rows) {
        let sum = row.iter().fold(0.0f64, |a, v| a + *v as f64);
        let ys: Vec<f64> = row.iter().map(|v| 2.0 * *v as f64 - sum).collect();
        let above = |v: f64, m: f64| v > m || (v == 0.0 && m == 0.0 && m.is_sign_negative());
        r.max.push((!ys.iter().any(|v| v.is_nan())).then(|| {
            ys.iter()
                .fold(f64::NEG_INFINITY, |m, &v| if above(v, m) { v } else { m })
        }));
        r.y.extend(ys);
        r.sum.push(sum);
        let scale: f64 = row.iter().map(|v| (*v as f64).abs()).sum();
        r.scale.push(if scale.is_finite() { scale } else { 0.0 });
    }
    r
}

/// Checks `got` (y, sums, maxima) against the f64 reference: NaN where it is NaN, the same
/// infinity, the same signed zero, else within the sum's rounding; every element written.
fn check(got: &[Vec<u32>; 3], want: &Reference, what: &str) {
    let n = got[0].len() / got[1].len();
    let close = |g: u32, w: f64, row: usize, at: String| {
        assert_ne!(g, POISON, "{what}: {at} was not written");
        let g = f32::from_bits(g);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || w == 0.0 {
            (g as f64) == w && g.is_sign_negative() == w.is_sign_negative()
        } else {
            (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs() + 2.0 * want.scale[row])
        };
        assert!(ok, "{what}: {at}: got {g}, want {w}");
    };
    for (i, (&g, &w)) in got[0].iter().zip(&want.y).enumerate() {
        close(g, w, i / n, format!("y[{}][{}]", i / n, i % n));
    }
    for (r, (&g, &w)) in got[1].iter().zip(&want.sum).enumerate() {
        close(g, w, r, format!("sum[{r}]"));
    }
    for (r, (&g, w)) in got[2].iter().zip(&want.max).enumerate() {
        assert_ne!(g, POISON, "{what}: max[{r}] was not written");
        if let Some(w) = w {
            close(g, *w, r, format!("max[{r}]"));
        }
    }
}

const BM: i64 = 8;
const BN: i64 = 32;

/// Per program, a `[BM, BN]` tile of rows `stride` apart, masked to `m` rows and `n`
/// columns (`other` 0): `y = 2x` (dense, `n` per row) and each row's sum.
pub(crate) fn tile(k: &mut KernelBuilder) {
    let (x, y, sums) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(F32, "sum_ptr"),
    );
    let m = k.scalar(crate::DType::I32, "m");
    let n = k.scalar(crate::DType::I32, "n");
    let stride = k.scalar(crate::DType::I32, "stride");
    let (bm, bn) = (k.constexpr("BM"), k.constexpr("BN"));
    let rows = tl::program_id(0) * bm + tl::arange(0, bm);
    let cols = tl::arange(0, bn);
    let mask = rows.col().lt(m) & cols.row().lt(n);
    let v = tl::load(x + rows.col() * stride + cols.row())
        .mask(mask)
        .other(0.0f32);
    tl::store(y + rows.col() * n + cols.row(), v * 2.0f32).mask(mask);
    tl::store(sums + rows, v.sum(1)).mask(rows.lt(m));
}

fn tile_kernel() -> Kernel {
    build("tile", &[("BM", BM), ("BN", BN)], tile)
}

#[test]
fn row_copies_change_the_code_not_the_result() {
    let k = tile_kernel();
    let default = super::cpu::plan(&k);
    let text = default.to_string();
    let cpu = default.cpu.as_ref().expect("CPU decisions");
    let load = ops_where(&k, |o| matches!(o, Op::Load { .. }))[0];
    assert!(cpu.rows(load), "{text}");
    assert!(
        text.contains(&format!(
            "cpu {load} rows=on ; 8 rows of 32 f32 (128 bytes, a cache line or more)"
        )),
        "{text}"
    );
    // Rows `stride` apart: not one run over the whole block.
    assert!(!cpu.whole(load), "{text}");
    assert_eq!(KernelPlan::parse(&text).unwrap(), default);
    let rows_off = overridden(&k, "rows");
    let branchy = overridden(&k, "branch_free");
    for p in [&rows_off, &branchy] {
        let t = p.to_string();
        assert!(t.contains("; override"), "{t}");
        assert_eq!(KernelPlan::parse(&t).unwrap(), *p, "{t}");
    }
    let base = body(&k, &default);
    assert!(base.contains("__builtin_memcpy(&"), "{base}");
    // The row's mask lanes, all evaluated: `tm_run &= bool(..)`.
    assert!(base.contains("tm_run &= bool("), "{base}");
    // The store of `y` by rows too: one check per row, then its elements.
    assert!(
        base.contains("float* const tm_dst = y_ptr.base + "),
        "{base}"
    );
    assert!(base.contains("tm_dst[tm_e] = "), "{base}");
    let store = ops_where(&k, |o| matches!(o, Op::Store { .. }))[0];
    assert!(cpu.rows(store), "{text}");
    assert!(
        text.contains(&format!("cpu {store} rows=on ; 8 rows of 32 f32"))
            && text.contains("one bounds check per row, then its elements stored unchecked"),
        "{text}"
    );
    let no_rows = body(&k, &rows_off);
    assert!(!no_rows.contains("__builtin_memcpy"), "{no_rows}");
    assert!(!no_rows.contains("tm_dst = y_ptr"), "{no_rows}");
    let no_bits = body(&k, &branchy);
    assert!(
        no_bits.contains("__builtin_memcpy(&") && !no_bits.contains("tm_run &= bool("),
        "{no_bits}"
    );
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    for (m, n, stride) in [(24usize, 32usize, 40usize), (21, 19, 23), (5, 32, 32)] {
        let mut x = rnd(m * stride, (m * n) as u64, -4.0, 4.0);
        // Between rows: values a read past a row's end would put into the sums.
        for r in 0..m {
            x[r * stride + n..(r + 1) * stride].fill(1e20);
        }
        x[1] = f32::NAN;
        x[stride + 2] = f32::INFINITY;
        x[2 * stride + 3] = f32::NEG_INFINITY;
        x[2 * stride + 4] = f32::INFINITY;
        x[3 * stride..3 * stride + n].fill(-0.0);
        x[4 * stride + 1] = 1e30;
        x[4 * stride + 2] = -3e29;
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let run = |plan: Option<&KernelPlan>| -> [Vec<u32>; 2] {
            let mut y = vec![POISON; m * n];
            let mut s = vec![POISON; m];
            let mut args = [
                ExecArg::from(&xb[..]),
                ExecArg::from(bytes_mut(&mut y)),
                ExecArg::from(bytes_mut(&mut s)),
                ExecArg::from(m as i32),
                ExecArg::from(n as i32),
                ExecArg::from(stride as i32),
            ];
            let grid = [m.div_ceil(BM as usize), 1, 1];
            match plan {
                None => crate::exec::execute(&k, grid, &mut args),
                Some(p) => crate::native::execute_native_with(&k, p, grid, &mut args),
            }
            .unwrap_or_else(|e| panic!("{e}"));
            [y, s]
        };
        let want_y: Vec<f64> = (0..m * n)
            .map(|i| 2.0 * x[i / n * stride + i % n] as f64)
            .collect();
        let rows: Vec<&[f32]> = (0..m).map(|r| &x[r * stride..r * stride + n]).collect();
        // Masked lanes add `other` (+0): a row of -0 sums to +0 unless it fills the tile.
        let start = if n < BN as usize { 0.0 } else { -0.0 };
        let want_s: Vec<f64> = rows
            .iter()
            .map(|r| r.iter().fold(start, |a, v| a + *v as f64))
            .collect();
        let scale: Vec<f64> = rows
            .iter()
            .map(|r| r.iter().map(|v| (*v as f64).abs()).sum::<f64>())
            .map(|s| if s.is_finite() { s } else { 0.0 })
            .collect();
        let close = |g: u32, w: f64, scale: f64, what: &str| {
            assert_ne!(g, POISON, "{what} was not written");
            let g = f32::from_bits(g);
            let ok = if w.is_nan() {
                g.is_nan()
            } else if w.is_infinite() || w == 0.0 {
                (g as f64) == w && g.is_sign_negative() == w.is_sign_negative()
            } else {
                (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs() + 2.0 * scale)
            };
            assert!(ok, "{what}: got {g}, want {w}");
        };
        let plans = [None, Some(&default), Some(&rows_off), Some(&branchy)];
        for (i, p) in plans.into_iter().enumerate() {
            let what = [
                "interpreter",
                "compiled",
                "compiled, no rows",
                "compiled, &&",
            ][i];
            let [y, s] = run(p);
            for (j, (&g, &w)) in y.iter().zip(&want_y).enumerate() {
                close(
                    g,
                    w,
                    0.0,
                    &format!("{what} {m}x{n}: y[{}][{}]", j / n, j % n),
                );
            }
            for (r, (&g, &w)) in s.iter().zip(&want_s).enumerate() {
                close(g, w, scale[r], &format!("{what} {m}x{n}: sum[{r}]"));
            }
        }
    }
}

/// Per program a `BM`×`BN` block of `y[i][j] = x[(i % m) * ld + j % n]` (row and column
/// offsets wrapped with `%`, as Triton's matmul tutorial wraps its operands' rows).
fn wrapped_copy(k: &mut KernelBuilder) {
    let (x, y) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "y_ptr"));
    let m = k.scalar(crate::DType::I32, "m");
    let n = k.scalar(crate::DType::I32, "n");
    let ld = k.scalar(crate::DType::I32, "ld");
    let (bm, bn) = (k.constexpr("BM"), k.constexpr("BN"));
    let i = tl::program_id(0) * bm + tl::arange(0, bm);
    let j = tl::program_id(1) * bn + tl::arange(0, bn);
    let rows = i % m;
    let cols = j % n;
    let v = tl::load(x + (rows.col() * ld + cols.row()));
    tl::store(y + (i.col() * bn * tl::num_programs(1) + j.row()), v);
}

#[test]
fn wrapped_offsets_are_tabled_once_per_row_and_give_the_same_results() {
    let (bm, bn) = (16usize, 32usize);
    let k = build(
        "wrapped",
        &[("BM", bm as i64), ("BN", bn as i64)],
        wrapped_copy,
    );
    let default = super::cpu::plan(&k);
    let cpu = default.cpu.as_ref().expect("CPU decisions");
    let rems: Vec<crate::ir::Value> = ops_where(&k, |o| {
        matches!(
            o,
            Op::Binary {
                kind: crate::ir::BinaryOp::Rem,
                ..
            }
        )
    })
    .into_iter()
    .filter_map(|o| k.op(o).result())
    .filter(|v| k.ty(*v).is_block())
    .collect();
    assert_eq!(rems.len(), 2);
    let text = default.to_string();
    for &r in &rems {
        assert!(cpu.tabled(r), "{text}");
    }
    assert!(
        text.contains("integer `%` over 16 elements read through a broadcast to 512"),
        "{text}"
    );
    assert_eq!(KernelPlan::parse(&text).unwrap(), default, "{text}");
    let mut off = default.clone();
    for &r in &rems {
        off.cpu.as_mut().unwrap().set_tabled(r, false, "override");
    }
    let off_text = off.to_string();
    assert!(
        off_text.contains(&format!("{} recomputed ; override", rems[0])),
        "{off_text}"
    );
    assert_eq!(KernelPlan::parse(&off_text).unwrap(), off, "{off_text}");
    let (on_src, off_src) = (body(&k, &default), body(&k, &off));
    // Tabled: a division per row and per column, read through the table where the pointer
    // block's offsets are computed.
    assert!(on_src.contains("rem_at[(((tm_k >> 5) & 15u))]"), "{on_src}");
    // Broadcasts of recipes are recipes too: no array filled per element.
    assert!(
        on_src.contains("const auto bcast = tm_lazy<int>"),
        "{on_src}"
    );
    assert!(!on_src.contains("int bcast"), "{on_src}");
    assert_eq!(on_src.matches("% m)").count(), 1, "{on_src}");
    assert!(off_src.matches("% m)").count() > 1, "{off_src}");
    assert!(!off_src.contains("_at["), "{off_src}");
    // A float block is no index table.
    let load = ops_where(&k, |o| matches!(o, Op::Load { .. }))[0];
    let mut bad = default.clone();
    bad.cpu
        .as_mut()
        .unwrap()
        .set_tabled(k.op(load).result().unwrap(), true, "test");
    let e = super::cpu::compile_with(&k, false, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a block of integers"), "{e}");
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    // Ragged wraps, then a negative row pitch: the first bad offset is reported the same
    // way by every plan.
    for (m, n, ld) in [(5i32, 7i32, 9i32), (16, 32, 32), (3, 1, 1), (5, 7, -9)] {
        let (gm, gn) = (2usize, 2usize);
        let x = rnd(64 * 64, (m * 100 + n + ld) as u64, -4.0, 4.0);
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let run = |plan: Option<&KernelPlan>| {
            let mut y = vec![POISON; gm * bm * gn * bn];
            let mut args = [
                ExecArg::from(&xb[..]),
                ExecArg::from(bytes_mut(&mut y)),
                ExecArg::from(m),
                ExecArg::from(n),
                ExecArg::from(ld),
            ];
            let grid = [gm, gn, 1];
            match plan {
                None => crate::exec::execute(&k, grid, &mut args),
                Some(p) => crate::native::execute_native_with(&k, p, grid, &mut args),
            }
            .map(|_| y)
            .map_err(|e| e.to_string())
        };
        let interp = run(None);
        if ld > 0 {
            let y = interp.as_ref().unwrap_or_else(|e| panic!("{e}"));
            for (e, got) in y.iter().enumerate() {
                let (i, j) = (e / (gn * bn), e % (gn * bn));
                let want = x[(i as i32 % m * ld + j as i32 % n) as usize];
                assert_eq!(*got, want.to_bits(), "m={m} n={n}: y[{i}][{j}]");
            }
        } else {
            let e = interp.as_ref().expect_err("a negative offset");
            assert!(e.contains("offset -9 is out of bounds"), "{e}");
        }
        assert_eq!(run(Some(&default)), interp, "tabled, m={m} n={n}");
        assert_eq!(run(Some(&off)), interp, "recomputed, m={m} n={n}");
    }
}

/// Triton's tutorial matmul (tutorial 03) without the grouped ordering: rows of A and
/// columns of B wrapped with `%` (`N` a multiple of 16, as the launch's integer
/// specialisation finds it for the tutorial's sizes; B's columns start `col0` along, so a
/// row of B may wrap inside a block), pointer blocks the loop carries and advances by
/// `BK * stride`, the K tail masked, C stored under a mask. Programs of odd `pid_m` stop
/// `kdrop` short of `K` (0: none), so programs reading the same tiles of B may mask
/// different rows of them.
pub(crate) fn tutorial_matmul(k: &mut KernelBuilder) {
    let (a, b, c) = (
        k.ptr(F32, "a_ptr"),
        k.ptr(F32, "b_ptr"),
        k.ptr(F32, "c_ptr"),
    );
    let i32_ = crate::DType::I32;
    let (m, n, kk) = (
        k.scalar(i32_, "M"),
        k.scalar(i32_, "N"),
        k.scalar(i32_, "K"),
    );
    let (sam, sbk, scm) = (
        k.scalar(i32_, "stride_am"),
        k.scalar(i32_, "stride_bk"),
        k.scalar(i32_, "stride_cm"),
    );
    let col0 = k.scalar(i32_, "col0");
    let kdrop = k.scalar(i32_, "kdrop");
    let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
    let (pid_m, pid_n) = (tl::program_id(0), tl::program_id(1));
    let offs_am = (pid_m * bm + tl::arange(0, bm)) % m;
    let offs_bn = (pid_n * bn + tl::arange(0, bn) + col0) % tl::multiple_of(n, [16]);
    let offs_k = tl::arange(0, bk);
    let a_ptrs = a + (offs_am.col() * sam + offs_k.row());
    let b_ptrs = b + (offs_k.col() * sbk + offs_bn.row());
    let acc = tl::zeros([bm, bn], F32);
    let (acc, _, _): (Tensor, Tensor, Tensor) =
        tl::range(0, tl::cdiv(kk, bk), 1).fold((acc, a_ptrs, b_ptrs), |i, (acc, pa, pb)| {
            let left = kk - i * bk - (pid_m % 2) * kdrop;
            let x = tl::load(pa).mask(offs_k.row().lt(left)).other(0.0f32);
            let y = tl::load(pb).mask(offs_k.col().lt(left)).other(0.0f32);
            (tl::dot(x, y, acc), pa + bk, pb + sbk * bk)
        });
    let offs_cm = pid_m * bm + tl::arange(0, bm);
    let offs_cn = pid_n * bn + tl::arange(0, bn);
    let mask = offs_cm.col().lt(m) & offs_cn.row().lt(n);
    tl::store(c + (offs_cm.col() * scm + offs_cn.row()), acc).mask(mask);
}

#[test]
fn shifted_pointer_blocks_and_row_checks_once_change_the_code_not_the_result() {
    let (bm, bn, bk) = (16usize, 16usize, 16usize);
    let k = build(
        "tutorial_matmul",
        &[("BM", bm as i64), ("BN", bn as i64), ("BK", bk as i64)],
        tutorial_matmul,
    );
    let default = super::cpu::plan(&k);
    let text = default.to_string();
    let cpu = default.cpu.as_ref().expect("CPU decisions");
    let for_ = loops(&k)[0];
    // The two pointer blocks (slots 1 and 2) advance by uniform offsets; the accumulator
    // (slot 0) is no pointer block.
    assert_eq!(cpu.shifted(for_), &[1, 2], "{text}");
    assert!(
        text.contains(&format!(
            "cpu {for_} shift=1,2 ; carried pointer block(s) 1,2"
        )) && text.contains("one add per iteration instead of 256"),
        "{text}"
    );
    // B's rows run +1 only where `% N` did not wrap: checked, once before the loop. A's
    // are proven to run +1: nothing to check.
    let [la, lb] = ops_where(&k, |o| matches!(o, Op::Load { .. }))[..] else {
        panic!("{text}")
    };
    assert!(cpu.rows(la) && cpu.rows(lb), "{text}");
    assert!(!cpu.rows_checked_once(la), "{text}");
    assert!(cpu.rows_checked_once(lb), "{text}");
    assert!(
        text.contains(&format!("cpu {lb} rowcheck=once ; rows of 16 through %"))
            && text.contains(&format!("slot 2 of {for_} held as start plus shift")),
        "{text}"
    );
    assert_eq!(KernelPlan::parse(&text).unwrap(), default, "{text}");
    let mut no_check = default.clone();
    no_check
        .cpu
        .as_mut()
        .unwrap()
        .set_rows_checked_once(lb, false, "override");
    // Packed tiles need the shift too.
    let mut no_shift = no_check.clone();
    let c = no_shift.cpu.as_mut().unwrap();
    c.set_shifted(for_, Vec::new(), "override");
    c.set_packed(lb, 0, "override");
    for p in [&no_check, &no_shift] {
        let t = p.to_string();
        assert!(t.contains("; override"), "{t}");
        assert_eq!(KernelPlan::parse(&t).unwrap(), *p, "{t}");
    }
    assert!(no_check
        .to_string()
        .contains(&format!("cpu {lb} rowcheck=each ; override")));
    assert!(no_shift
        .to_string()
        .contains(&format!("cpu {for_} shift=none ; override")));
    // What the verifier refuses: a row check once without the shift it relies on, a
    // shifted accumulator, a shift on an op that is no loop, a row check on no load.
    let refuse = |p: &KernelPlan, what: &str| {
        let e = super::cpu::compile_with(&k, false, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
    };
    let mut p = default.clone();
    p.cpu
        .as_mut()
        .unwrap()
        .set_shifted(for_, Vec::new(), "test");
    refuse(&p, "not a carried slot the plan holds as start plus shift");
    let mut p = default.clone();
    p.cpu
        .as_mut()
        .unwrap()
        .set_shifted(for_, vec![0, 1, 2], "test");
    refuse(
        &p,
        "carried slot 0 is no pointer block the loop advances by a uniform offset",
    );
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_shifted(la, vec![1], "test");
    refuse(&p, "shifted slots on an op that is not a `for`");
    let mut p = default.clone();
    p.cpu
        .as_mut()
        .unwrap()
        .set_rows_checked_once(for_, true, "test");
    refuse(&p, "row checks on an op that is not a load");
    let mut p = default.clone();
    p.cpu
        .as_mut()
        .unwrap()
        .set_rows_checked_once(la, true, "test");
    refuse(&p, "proven to run +1 along rows");
    // The code: one scalar add per iteration per pointer block, B's rows checked before
    // the loop; without the decisions, every element updated and every row checked in the
    // loop.
    let (on, off_check, off_shift) = (body(&k, &default), body(&k, &no_check), body(&k, &no_shift));
    let shifted = |src: &str| src.matches("shift = 0;").count();
    let checked_in_loop = |src: &str| src.contains("tm_run &= bool(uint(acc2_at[");
    assert_eq!(shifted(&on), 2, "{on}");
    assert!(on.contains("runs[tm_r] && "), "{on}");
    assert!(!checked_in_loop(&on), "{on}");
    assert_eq!(shifted(&off_check), 2, "{off_check}");
    assert!(checked_in_loop(&off_check), "{off_check}");
    assert!(!off_check.contains("runs[tm_r]"), "{off_check}");
    assert_eq!(shifted(&off_shift), 0, "{off_shift}");
    // The start assigned before the loop; without the shift, again at every iteration.
    let assigned = |src: &str| src.matches("acc1_[tm_i] = ").count();
    assert_eq!(assigned(&on), 1, "{on}");
    assert_eq!(assigned(&off_shift), 2, "{off_shift}");
    tutorial_results_agree(
        &k,
        (bm, bn),
        &[
            ("default", &default),
            ("rows checked in the loop", &no_check),
            ("no shift", &no_shift),
        ],
    );
}

/// Runs [`tutorial_matmul`] (blocks `bm`×`bn`) under each plan and the interpreter on
/// ragged sizes with edge values and poisoned outputs: the interpreter against an f64
/// reference, each plan bit for bit against the interpreter (or the same error).
fn tutorial_results_agree(k: &Kernel, (bm, bn): (usize, usize), plans: &[(&str, &KernelPlan)]) {
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    // Ragged M and K, rows of B wrapping inside a block (`col0`), exact multiples, and a
    // B shorter than K rows or a C shorter than M rows (the same out-of-bounds report from
    // every plan).
    for (m, n, kd, b_rows, col0, kdrop, c_short) in [
        (37usize, 32usize, 50usize, 50usize, 0usize, 0usize, 0usize),
        (32, 32, 48, 48, 5, 0, 0),
        (5, 16, 7, 7, 3, 0, 0),
        (32, 64, 64, 64, 0, 0, 0),
        (19, 48, 40, 33, 0, 0, 0),
        (61, 32, 64, 64, 0, 8, 0),
        (37, 32, 50, 50, 0, 0, 7),
    ] {
        let mut a = rnd(m * kd, (m * n + kd) as u64, -4.0, 4.0);
        let mut b = rnd(b_rows * n, (m + n * kd) as u64, -4.0, 4.0);
        a[1] = f32::NAN;
        a[kd + 2] = f32::INFINITY;
        a[2 * kd + 3] = f32::NEG_INFINITY;
        a[3 * kd..4 * kd].fill(-0.0);
        a[4 * kd + 1] = 1e30;
        b[n + 3] = -0.0;
        b[2 * n + 1] = 1e30;
        b[n * (b_rows - 1)] = f32::INFINITY;
        b[3 * n..4 * n].fill(0.0);
        let ab: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bb: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();
        let run = |plan: Option<&KernelPlan>| {
            let mut c = vec![POISON; m * n - c_short];
            let mut args = [
                ExecArg::from(&ab[..]),
                ExecArg::from(&bb[..]),
                ExecArg::from(bytes_mut(&mut c)),
                ExecArg::from(m as i32),
                ExecArg::from(n as i32),
                ExecArg::from(kd as i32),
                ExecArg::from(kd as i32),
                ExecArg::from(n as i32),
                ExecArg::from(n as i32),
                ExecArg::from(col0 as i32),
                ExecArg::from(kdrop as i32),
            ];
            let grid = [m.div_ceil(bm), n.div_ceil(bn), 1];
            match plan {
                None => crate::exec::execute(k, grid, &mut args),
                Some(p) => crate::native::execute_native_with(k, p, grid, &mut args),
            }
            .map(|_| c)
            .map_err(|e| e.to_string())
        };
        let interp = run(None);
        if b_rows < kd || c_short > 0 {
            let e = interp.as_ref().expect_err("B or C too short");
            assert!(e.contains("out of bounds"), "{e}");
        } else {
            let c = interp.as_ref().unwrap_or_else(|e| panic!("{e}"));
            for i in 0..m {
                for j in 0..n {
                    let jb = (j + col0) % n;
                    let kend = kd - (i / bm % 2) * kdrop;
                    let prods = (0..kend).map(|p| a[i * kd + p] as f64 * b[p * n + jb] as f64);
                    let want: f64 = prods.clone().sum();
                    let scale: f64 = prods.map(f64::abs).sum();
                    let g = c[i * n + j];
                    assert_ne!(g, POISON, "{m}x{n}x{kd}: c[{i}][{j}] was not written");
                    let g = f32::from_bits(g) as f64;
                    let ok = if want.is_nan() {
                        g.is_nan()
                    } else if want.is_infinite() {
                        g == want
                    } else {
                        (g - want).abs() <= 1e-5 * (1.0 + scale)
                    };
                    assert!(ok, "{m}x{n}x{kd}: c[{i}][{j}] = {g}, want {want}");
                }
            }
        }
        for &(what, p) in plans {
            let got = run(Some(p));
            match (&got, &interp) {
                (Ok(g), Ok(w)) => {
                    for (e, (x, y)) in g.iter().zip(w).enumerate() {
                        let (fx, fy) = (f32::from_bits(*x), f32::from_bits(*y));
                        assert!(
                            x == y || (fx.is_nan() && fy.is_nan()),
                            "{what}, {m}x{n}x{kd}: c[{e}] = {fx}, the interpreter's {fy}"
                        );
                    }
                }
                // The same op, program and argument; a store's run that leaves the
                // argument may name another of its offsets than the interpreter does.
                _ => {
                    let (g, w) = (got.as_ref().unwrap_err(), interp.as_ref().unwrap_err());
                    let at = |e: &str| e.split(": offset ").next().unwrap_or_default().to_string();
                    assert_eq!(at(g), at(w), "{what}, {m}x{n}x{kd}");
                    assert!(g.contains(" is out of bounds for argument `"), "{g}");
                }
            }
        }
    }
}

#[test]
fn packed_tiles_change_the_code_not_the_result() {
    let (bm, bn, bk) = (16usize, 16usize, 16usize);
    let k = build(
        "tutorial_matmul",
        &[("BM", bm as i64), ("BN", bn as i64), ("BK", bk as i64)],
        tutorial_matmul,
    );
    let default = super::cpu::plan(&k);
    let text = default.to_string();
    let cpu = default.cpu.as_ref().expect("CPU decisions");
    let for_ = loops(&k)[0];
    let [la, lb] = ops_where(&k, |o| matches!(o, Op::Load { .. }))[..] else {
        panic!("{text}")
    };
    // B's 1 KiB tiles: 16 slots (the most); A is the dot's operand A, not packed.
    assert_eq!(cpu.packed(lb), crate::opt::cpu::MAX_PACK_SLOTS, "{text}");
    assert_eq!(cpu.packed(la), 0, "{text}");
    assert!(
        text.contains(&format!("cpu {lb} pack=16 ; `tl.dot` operand B, "))
            && text.contains("of read-only `b_ptr` through %")
            && text.contains(&format!("(slot 2 of {for_}, start plus shift)"))
            && text.contains("kept in 16 slots of 1024 bytes per worker thread"),
        "{text}"
    );
    assert_eq!(KernelPlan::parse(&text).unwrap(), default, "{text}");
    let mut off = default.clone();
    off.cpu.as_mut().unwrap().set_packed(lb, 0, "override");
    let mut two = default.clone();
    two.cpu.as_mut().unwrap().set_packed(lb, 2, "override");
    for p in [&off, &two] {
        let t = p.to_string();
        assert_eq!(KernelPlan::parse(&t).unwrap(), *p, "{t}");
    }
    assert!(off
        .to_string()
        .contains(&format!("cpu {lb} pack=off ; override")));
    assert!(two
        .to_string()
        .contains(&format!("cpu {lb} pack=2 ; override")));
    let refuse = |p: &KernelPlan, what: &str| {
        let e = super::cpu::compile_with(&k, false, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
    };
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_packed(lb, 17, "test");
    refuse(&p, "packed in 17 slots (at most 16");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_packed(la, 4, "test");
    refuse(&p, "is no `tl.dot`'s operand B");
    let mut p = default.clone();
    p.cpu.as_mut().unwrap().set_packed(for_, 4, "test");
    refuse(&p, "packed tiles on an op that is not a load");
    let mut p = default.clone();
    let c = p.cpu.as_mut().unwrap();
    c.set_shifted(for_, Vec::new(), "test");
    c.set_rows_checked_once(lb, false, "test");
    refuse(&p, "not a carried slot the plan holds as start plus shift");
    // The cache is declared once per call, before the loop over programs, and read
    // through a pointer; without the decision B is a local array.
    let src = |p: &KernelPlan| {
        super::cpu::compile_with(&k, false, p)
            .unwrap_or_else(|e| panic!("{e}"))
            .source
    };
    let (on, no, small) = (src(&default), src(&off), src(&two));
    let before_programs = |s: &str, what: &str| {
        s.find(what)
            .is_some_and(|i| i < s.find("for (int64_t tm_p").unwrap_or(0))
    };
    assert!(before_programs(&on, "float b_pack[16][256];"), "{on}");
    assert!(on.contains("float* const b = b_pack[pk_slot];"), "{on}");
    assert!(on.contains("const uint pk_slot = uint(t % 16u);"), "{on}");
    assert!(before_programs(&small, "float b_pack[2][256];"), "{small}");
    assert!(!no.contains("_pack"), "{no}");
    // The dot prefetches B's next rows only when this iteration's tile was not found.
    assert!(on.contains("if (!pk_hit) for (uint tm_q = "), "{on}");
    assert!(!no.contains("pk_hit"), "{no}");
    assert!(no.contains("float b[256];"), "{no}");
    tutorial_results_agree(
        &k,
        (bm, bn),
        &[
            ("default", &default),
            ("not packed", &off),
            ("two slots", &two),
        ],
    );
}

#[test]
fn rows_read_in_place_change_the_code_not_the_result() {
    for (bm, bn, bk) in [(16usize, 16usize, 16usize), (32, 64, 16)] {
        let k = build(
            "tutorial_matmul",
            &[("BM", bm as i64), ("BN", bn as i64), ("BK", bk as i64)],
            tutorial_matmul,
        );
        let default = super::cpu::plan(&k);
        let text = default.to_string();
        let cpu = default.cpu.as_ref().expect("CPU decisions");
        let for_ = loops(&k)[0];
        let [la, lb] = ops_where(&k, |o| matches!(o, Op::Load { .. }))[..] else {
            panic!("{text}")
        };
        // A's tiles (operand A of the dot, read-only `a_ptr`) are read in place; B's are not.
        assert!(cpu.rows_in_place(la), "{text}");
        assert!(!cpu.rows_in_place(lb), "{text}");
        assert!(
            text.contains(&format!(
                "cpu {la} inplace=on ; `tl.dot` operand A, f32[{bm},{bk}] of read-only `a_ptr`"
            )),
            "{text}"
        );
        assert_eq!(KernelPlan::parse(&text).unwrap(), default, "{text}");
        let mut off = default.clone();
        off.cpu
            .as_mut()
            .unwrap()
            .set_rows_in_place(la, false, "override");
        let t = off.to_string();
        assert!(
            t.contains(&format!("cpu {la} inplace=off ; override")),
            "{t}"
        );
        assert_eq!(KernelPlan::parse(&t).unwrap(), off, "{t}");
        let refuse = |p: &KernelPlan, what: &str| {
            let e = super::cpu::compile_with(&k, false, p)
                .unwrap_err()
                .to_string();
            assert!(e.contains(what), "{e}");
        };
        let mut p = default.clone();
        p.cpu.as_mut().unwrap().set_rows_in_place(lb, true, "test");
        refuse(&p, "is not only a `tl.dot`'s operand A");
        let mut p = default.clone();
        p.cpu
            .as_mut()
            .unwrap()
            .set_rows_in_place(for_, true, "test");
        refuse(&p, "rows read in place on an op that is not a load");
        let mut p = default.clone();
        p.cpu.as_mut().unwrap().set_rows(la, false, "test");
        refuse(&p, "not copied by rows");
        // In place: a table of row pointers, whole rows pointing into `a_ptr`, the others at
        // their copies; the dot's rows of C in vector registers. Copied: neither.
        let src = |p: &KernelPlan| {
            super::cpu::compile_with(&k, false, p)
                .unwrap_or_else(|e| panic!("{e}"))
                .source
        };
        let (on, copied) = (src(&default), src(&off));
        assert!(on.contains(&format!("_rows[{bm}];")), "{on}");
        assert!(on.contains("_rows[tm_r] = a_ptr.base + "), "{on}");
        assert!(on.contains("_rows[tm_r] = &"), "{on}");
        assert!(
            on.contains("tm_acc[3][0] = fma(tm_x3, tm_y[0], tm_acc[3][0]);"),
            "{on}"
        );
        // Both register blocks, the host's chosen when clang compiles: 4 rows of up to 64
        // columns in vectors of 16 with AVX-512, of 16 columns in vectors of 8 elsewhere.
        let (wide, narrow) = on
            .split_once("#if defined(__AVX512F__)")
            .and_then(|(_, r)| r.split_once("#else"))
            .unwrap_or_else(|| panic!("{on}"));
        assert!(wide.contains("vec<float, 16> tm_acc[4]"), "{wide}");
        assert!(
            narrow.contains("vec<float, 8> tm_acc[4][2];") && narrow.contains("#endif"),
            "{narrow}"
        );
        // The next iteration's rows are requested with the rows of C they go with: all four
        // A rows (and B's share) before a 64-column chunk; a share per 16-column chunk, one
        // A row each when the rows have four chunks.
        let group = "for (uint tm_q = tm_m; tm_q < tm_m + 4u; ++tm_q)";
        assert!(wide.contains(group), "{wide}");
        if bn == 64 {
            let spread = "for (uint tm_q = (tm_m * 4u + tm_c0 / 16u * 4u) / 4u; \
                          tm_q < (tm_m * 4u + tm_c0 / 16u * 4u + 4u) / 4u; ++tm_q)";
            assert!(
                narrow.contains(spread) && !narrow.contains(group),
                "{narrow}"
            );
        } else {
            assert!(narrow.contains(group), "{narrow}");
        }
        assert!(
            !copied.contains("_rows[") && !copied.contains("tm_acc"),
            "{copied}"
        );
        tutorial_results_agree(&k, (bm, bn), &[("default", &default), ("A copied", &off)]);
    }
}
