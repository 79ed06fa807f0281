//! Each pass on DSL-built kernels: it fires where it should, the result verifies, and the
//! CPU executor gives the same outputs before and after on ragged random inputs.

use super::*;
use crate::dtype::DType::{F32, I32};
use crate::exec::{execute, ExecArg};
use crate::ir::Op;
use crate::tl::{self, KernelBuilder};

const N: usize = 300;

fn build(f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    let cx = [("BLOCK".to_string(), 128i64)].into_iter().collect();
    tl::build("passes", &cx, f).expect("kernel builds")
}

/// `x_ptr`, `y_ptr` inputs, `out_ptr` output, `n`; 3 programs of 128.
fn run(k: &Kernel) -> Vec<f32> {
    let x: Vec<f32> = (0..N).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let y: Vec<f32> = (0..N).map(|i| (i as f32 * 0.11).cos() + 0.5).collect();
    let mut out = vec![f32::NAN; N];
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
    let (xb, yb) = (bytes(&x), bytes(&y));
    let mut ob = bytes(&out);
    let mut args = [
        ExecArg::Buffer(&xb),
        ExecArg::Buffer(&yb),
        ExecArg::BufferMut(&mut ob),
        ExecArg::Int(N as i64),
    ];
    execute(k, [3, 1, 1], &mut args).expect("kernel runs");
    for (o, c) in out.iter_mut().zip(ob.chunks_exact(4)) {
        *o = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
    }
    out
}

fn kernel(body: fn(tl::Tensor, tl::Tensor, tl::Tensor) -> tl::Tensor) -> Kernel {
    build(move |k| {
        let (x, y, o) = (
            k.ptr(F32, "x_ptr"),
            k.ptr(F32, "y_ptr"),
            k.ptr(F32, "out_ptr"),
        );
        let n = k.scalar(I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        let r = body(
            tl::load(x + offs).mask(mask),
            tl::load(y + offs).mask(mask),
            offs,
        );
        tl::store(o + offs, r).mask(mask);
    })
}

fn stat<'a>(stats: &'a [PassStats], name: &str) -> &'a PassStats {
    stats.iter().find(|s| s.name == name).expect("pass ran")
}

fn has(k: &Kernel, f: impl Fn(&Op) -> bool) -> usize {
    k.walk().into_iter().filter(|id| f(&k.op(*id).op)).count()
}

#[test]
fn constant_folding_and_cse_keep_results() {
    let k = kernel(|x, y, offs| {
        let c = tl::full([128], 3, I32) * 5 + 2; // folds to 17
        let i = (offs % c) + (offs % c); // the second `offs % c` is a duplicate
        x * y + i.to(F32) - x * y
    });
    let before = run(&k);
    let (opt, stats) = pipeline(&k, &PassOptions { exact: true }).unwrap();
    assert!(stat(&stats, "constant-fold").changed >= 2, "{stats:?}");
    assert!(stat(&stats, "cse").changed >= 2, "{stats:?}");
    assert!(opt.walk().len() < k.walk().len());
    assert_eq!(
        has(&opt, |o| matches!(o, Op::Fma { .. })),
        0,
        "exact: no FMA"
    );
    let after = run(&opt);
    assert_eq!(
        before.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        after.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn fma_contraction_only_when_allowed() {
    let k = kernel(|x, y, _| x * y + y);
    let (exact, _) = pipeline(&k, &PassOptions { exact: true }).unwrap();
    assert_eq!(has(&exact, |o| matches!(o, Op::Fma { .. })), 0);
    let (fast, stats) = pipeline(&k, &PassOptions::default()).unwrap();
    assert_eq!(stat(&stats, "fma-contraction").changed, 1, "{stats:?}");
    assert_eq!(has(&fast, |o| matches!(o, Op::Fma { .. })), 1);
    let (a, b) = (run(&k), run(&fast));
    for (p, q) in a.iter().zip(&b) {
        assert!((p - q).abs() <= 1e-6 * (1.0 + p.abs()), "{p} vs {q}");
    }
    // A product with a second use is not contracted (it would be computed twice).
    let shared = kernel(|x, y, _| {
        let p = x * y;
        (p + y) * p
    });
    let (s, _) = pipeline(&shared, &PassOptions::default()).unwrap();
    assert_eq!(has(&s, |o| matches!(o, Op::Fma { .. })), 0);
}

#[test]
fn barriers_without_a_hazard_are_dropped() {
    let k = build(|k| {
        let (x, _y, o) = (
            k.ptr(F32, "x_ptr"),
            k.ptr(F32, "y_ptr"),
            k.ptr(F32, "out_ptr"),
        );
        let n = k.scalar(I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        tl::debug_barrier(); // nothing before it
        tl::debug_barrier();
        let v = tl::load(x + offs).mask(mask);
        tl::debug_barrier(); // orders the load before the store: kept
        tl::debug_barrier(); // nothing since the last one
        tl::store(o + offs, v * 2.0).mask(mask);
    });
    let before = run(&k);
    let (opt, stats) = pipeline(&k, &PassOptions::default()).unwrap();
    assert_eq!(stat(&stats, "barrier-elimination").changed, 3, "{stats:?}");
    assert_eq!(has(&opt, |o| matches!(o, Op::DebugBarrier)), 1);
    assert_eq!(before, run(&opt));
}

#[test]
fn dead_code_is_removed_and_stats_print() {
    // The DSL already drops dead ops, so plant one in the text form.
    let k = kernel(|x, y, _| x - y);
    let text = k.ir();
    let sub = text.lines().find(|l| l.contains(" = sub ")).expect("a sub");
    let (lhs, _) = sub.trim().split_once(" = ").unwrap();
    let next = k.values.len();
    let dead = format!("  %{next} = exp {lhs} : f32[128]");
    let planted = text.replacen(sub, &format!("{sub}\n{dead}"), 1);
    let parsed = Kernel::parse_ir(&planted).expect("planted IR parses");
    assert_eq!(parsed.walk().len(), k.walk().len() + 1);
    let (opt, stats) = pipeline(&parsed, &PassOptions::default()).unwrap();
    assert_eq!(opt.walk().len(), k.walk().len(), "{stats:?}");
    assert_eq!(run(&k), run(&opt));
    let lines: Vec<String> = stats.iter().map(|s| s.to_string()).collect();
    assert!(lines.iter().any(|l| l.contains("dead-code")), "{lines:?}");
}
