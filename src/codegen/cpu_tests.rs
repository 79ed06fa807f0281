//! What the CPU dialect computes where it is read instead of storing
//! (`opt::cpu::lazy_values`): the printed C++ of small kernels. Results are covered on every
//! target by tests/ops.rs.

use std::collections::BTreeMap;

use crate::dtype::DType::*;
use crate::emu::Emulator;
use crate::exec::test_support::{bytes_mut, run_on};
use crate::exec::ExecArg;
use crate::ir::Kernel;
use crate::tl::{self, *};

fn source(name: &str, f: impl FnOnce(&mut KernelBuilder)) -> String {
    let k: Kernel = match tl::build(name, &BTreeMap::new(), f) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    };
    match super::cpu::compile(&k, false) {
        Ok(p) => p.source,
        Err(e) => panic!("compile failed: {e}"),
    }
}

#[test]
fn a_load_read_by_two_ops_is_read_from_the_argument_by_both() {
    // The softmax shape: the row feeds the max and the subtraction.
    let src = source("two_readers", |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let offs = tl::arange(0, 256);
        let row = tl::load(x + offs);
        tl::store(out + offs, row - row.max(0));
    });
    assert!(
        src.contains("tm_lazy<float>([&](uint tm_k) { return float(x_src[tm_k]); })"),
        "not read lazily:\n{src}"
    );
    // Both readers go through the lazy read; no loop copies the row into its array first.
    assert!(src.contains("tm_fmax(lane[tm_e], x_1[tm_i])"), "{src}");
    assert!(src.contains("(x_1[tm_k] - max_1)"), "{src}");
}

#[test]
fn a_value_read_twice_by_one_op_is_not_stored() {
    // layer_norm's variance: `d * d` with `d` a select.
    let src = source("square", |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let n = k.scalar(I32, "n");
        let offs = tl::arange(0, 256);
        let v = tl::load(x + offs).mask(offs.lt(n)).other(0.0f32);
        let d = tl::where_(offs.lt(n), v - 1.0f32, 0.0f32);
        tl::store(out, (d * d).sum(0));
    });
    assert!(!src.contains("float select["), "d was stored:\n{src}");
}

#[test]
fn a_stored_argument_is_not_read_twice() {
    // Re-reading is only for read-only arguments: `x` is written here, so the loaded block
    // is kept in its array.
    let src = source("in_place", |k| {
        let x = k.ptr(F32, "x_ptr");
        let offs = tl::arange(0, 256);
        let row = tl::load(x + offs);
        tl::store(x + offs, row - row.max(0));
    });
    assert!(!src.contains("x_src"), "{src}");
    // Without shared outputs (the launch proved each program's elements its own), the
    // block is read and written with plain accesses, one bounds check each.
    let body = src
        .split("#line 1 \"kernel.cpp\"")
        .nth(1)
        .unwrap_or_default();
    assert!(!body.contains("tm_atomic_"), "{body}");
    assert!(body.contains("x[tm_i] = tm_src[tm_i];"), "{body}");
}

/// Per row `pid` of `n` elements, over the blocks of 64 at offsets `range(lo, hi, 64)`: a
/// sum from `tl.zeros`, a running product from `tl.full(1)` and a maximum from the first
/// block (not uniform), carried through one loop; each stored reduced over its lanes.
fn blocked(k: &mut KernelBuilder) {
    let (x, sums, prods, maxs) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "sum_ptr"),
        k.ptr(F32, "prod_ptr"),
        k.ptr(F32, "max_ptr"),
    );
    let (n, lo, hi) = (k.scalar(I32, "n"), k.scalar(I32, "lo"), k.scalar(I32, "hi"));
    let pid = tl::program_id(0);
    let row = x + pid * n;
    let cols = tl::arange(0, 64);
    let first = tl::load(row + cols)
        .mask(cols.lt(n))
        .other(f32::NEG_INFINITY);
    let [s, p, m] = tl::range(lo, hi, 64).fold(
        [tl::zeros([64], F32), tl::full([64], 1.0f32, F32), first],
        |off, [s, p, m]| {
            let c = off + cols;
            let v = tl::load(row + c).mask(c.lt(n)).other(0.0f32);
            [s + v, p * tl::where_(c.lt(n), v, 1.0f32), tl::maximum(m, v)]
        },
    );
    tl::store(sums + pid, s.sum(0));
    tl::store(prods + pid, p.sum(0));
    tl::store(maxs + pid, m.max(0));
}

#[test]
fn a_loop_from_zeros_starts_without_filling_its_accumulator() {
    let src = source("blocked", blocked);
    assert!(
        src.lines()
            .any(|l| l.trim_start().starts_with("if (trips") && l.contains(" > 0) {")),
        "not peeled:\n{src}"
    );
    assert!(src.contains("(0.0f + "), "{src}");
}

/// [`blocked`]'s three results per row, in f64.
fn blocked_reference(x: &[f32], n: usize, lo: i32, hi: i32, row: usize) -> [f64; 3] {
    let at = |c: usize| x[row * n + c] as f64;
    let mut s = [0.0f64; 64];
    let mut p = [1.0f64; 64];
    let mut m: Vec<f64> = (0..64)
        .map(|j| if j < n { at(j) } else { f64::NEG_INFINITY })
        .collect();
    for off in (lo..hi).step_by(64) {
        for j in 0..64 {
            let c = off as usize + j;
            let v = if c < n { at(c) } else { 0.0 };
            s[j] += v;
            p[j] *= if c < n { v } else { 1.0 };
            m[j] = m[j].max(v);
        }
    }
    [
        s.iter().sum(),
        p.iter().sum(),
        m.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    ]
}

#[test]
fn a_peeled_loop_matches_the_interpreter_for_zero_one_and_many_iterations() {
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    let k: Kernel = match tl::build("blocked", &BTreeMap::new(), blocked) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    };
    let (rows, n) = (3usize, 200usize);
    let x: Vec<f32> = (0..rows * n)
        .map(|i| 0.75 + ((i * 7919) % 101) as f32 / 200.0)
        .collect();
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    // No iteration, one, a ragged last block, a start past the first block.
    for (lo, hi) in [(0, 0), (5, 5), (0, 64), (0, 200), (64, 130), (128, 200)] {
        let mut got = Vec::new();
        for native in [true, false] {
            let mut outs = vec![vec![f32::NAN.to_bits(); rows]; 3];
            let [s, p, m] = &mut outs[..] else {
                unreachable!()
            };
            let mut args = [
                ExecArg::from(&xb[..]),
                ExecArg::from(bytes_mut(s)),
                ExecArg::from(bytes_mut(p)),
                ExecArg::from(bytes_mut(m)),
                ExecArg::from(n as i32),
                ExecArg::from(lo),
                ExecArg::from(hi),
            ];
            run_on(native, &k, [rows, 1, 1], &mut args)
                .unwrap_or_else(|e| panic!("native={native} lo={lo} hi={hi}: {e}"));
            got.push(outs);
        }
        for row in 0..rows {
            let want = blocked_reference(&x, n, lo, hi, row);
            for (which, w) in want.iter().enumerate() {
                for (t, outs) in got.iter().enumerate() {
                    let g = f32::from_bits(outs[which][row]) as f64;
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "{} result {which} row {row} lo={lo} hi={hi}: {g} vs {w}",
                        ["compiled", "interpreted"][t]
                    );
                }
            }
        }
    }
}
