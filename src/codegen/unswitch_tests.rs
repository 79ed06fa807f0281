//! Mask unswitching (decided by `opt::cpu`, spelled by `cpu/unswitch.rs`): which masks are
//! split, and that both paths compute exactly what the interpreter does, including blocks
//! whose offsets wrap around `i32`.

use std::collections::BTreeMap;

use crate::dtype::DType::*;
use crate::emu::Emulator;
use crate::exec::test_support::{bytes_mut, run_on};
use crate::exec::ExecArg;
use crate::ir::Kernel;
use crate::tl::{self, *};

fn kernel(name: &str, cx: &[(&str, i64)], f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    let m: BTreeMap<String, i64> = cx.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    match tl::build(name, &m, f) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    }
}

fn source(k: &Kernel) -> String {
    match super::cpu::compile(k, false) {
        Ok(p) => p.source,
        Err(e) => panic!("compile failed: {e}"),
    }
}

const BLOCK: i64 = 64;

/// `out[i] = 1·(o < hi) + 2·(hi > o) + 4·(o >= lo) + 8·(o < hi & o >= lo)` with
/// `o = i + base` (wrapping): four masks of index arithmetic, each only a `where` condition,
/// so every element is stored whatever the masks say.
fn flags() -> Kernel {
    kernel("flags", &[("BLOCK", BLOCK)], |k| {
        let out = k.ptr(F32, "out_ptr");
        let (base, lo, hi) = (
            k.scalar(I32, "base"),
            k.scalar(I32, "lo"),
            k.scalar(I32, "hi"),
        );
        let idx = tl::program_id(0) * k.constexpr("BLOCK") + tl::arange(0, BLOCK);
        let o = idx + base;
        let below = o.lt(hi);
        let above = hi.gt(o);
        let from = o.ge(lo);
        let v = tl::where_(below, 1.0f32, 0.0f32)
            + tl::where_(above, 2.0f32, 0.0f32)
            + tl::where_(from, 4.0f32, 0.0f32)
            + tl::where_(below & from, 8.0f32, 0.0f32);
        tl::store(out + idx, v);
    })
}

fn flags_expected(n: usize, base: i32, lo: i32, hi: i32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let o = (i as i32).wrapping_add(base);
            let (b, f) = (o < hi, o >= lo);
            [(b, 1.0), (hi > o, 2.0), (f, 4.0), (b && f, 8.0)]
                .iter()
                .map(|&(c, w)| if c { w } else { 0.0 })
                .sum()
        })
        .collect()
}

fn floats(v: &[u32]) -> Vec<f32> {
    v.iter().map(|b| f32::from_bits(*b)).collect()
}

#[test]
fn index_masks_are_split_and_data_masks_are_not() {
    let src = source(&flags());
    assert!(src.contains("_all = "), "no split in:\n{src}");
    assert!(src.contains("(std::true_type{})"), "{src}");

    // A mask computed from loaded data would need a pass over the data to check.
    let data = kernel("data_mask", &[], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let offs = tl::arange(0, 64);
        let v = tl::load(x + offs);
        tl::store(out + offs, v).mask(v.gt(0.0f32));
    });
    assert!(!source(&data).contains("_all = "));

    // A 2-D tile's row and column masks are checked run by run.
    let tile = kernel("tile", &[], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
        let rows = tl::program_id(0) * 16 + tl::arange(0, 16);
        let cols = tl::arange(0, 32);
        let offs = rows.col() * n + cols.row();
        let mask = rows.col().lt(m) & cols.row().lt(n);
        let v = tl::load(x + offs).mask(mask).other(-1.0f32);
        tl::store(out + offs, v).mask(mask);
    });
    // Broadcast masks are checked on their 1-D sources.
    let src = source(&tile);
    assert!(src.contains("_all = "), "{src}");
    assert!(!src.contains("tm_all_runs(16u"), "{src}");

    // A comparison of a broadcast block: checked on each of its 16 constant runs.
    let runs = kernel("runs", &[], |k| {
        let out = k.ptr(F32, "out_ptr");
        let m = k.scalar(I32, "m");
        let rows = tl::program_id(0) * 16 + tl::arange(0, 16);
        let offs = rows.col() * 32 + tl::arange(0, 32).row();
        let mask = tl::broadcast_to(rows.col(), [16, 32]).lt(m);
        tl::store(out + offs, tl::full([16, 32], 1.0f32, F32)).mask(mask);
    });
    let src = source(&runs);
    assert!(src.contains("tm_all_runs(16u"), "{src}");
}

#[test]
fn split_paths_match_the_interpreter_including_wrapped_offsets() {
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    let k = flags();
    let programs = 4usize;
    let n = programs * BLOCK as usize;
    let cases = [
        (0, 0, i32::MAX),                   // every mask all true in every block
        (0, 100, 150),                      // true, mixed and false blocks
        (-70, 0, 1000),                     // negative offsets in the first blocks
        (i32::MAX - 100, 0, i32::MAX - 40), // offsets wrap inside the second block
        (i32::MIN + 10, i32::MIN, 0),       // near the bottom, `>=` at its limit
    ];
    for (base, lo, hi) in cases {
        let want = flags_expected(n, base, lo, hi);
        for native in [true, false] {
            let mut out = vec![f32::NAN.to_bits(); n];
            let mut args = [
                ExecArg::from(bytes_mut(&mut out)),
                ExecArg::from(base),
                ExecArg::from(lo),
                ExecArg::from(hi),
            ];
            run_on(native, &k, [programs, 1, 1], &mut args)
                .unwrap_or_else(|e| panic!("native={native}: {e}"));
            assert_eq!(
                floats(&out),
                want,
                "native={native} base={base} lo={lo} hi={hi}"
            );
        }
    }
}

#[test]
fn split_two_d_tiles_match_the_interpreter() {
    if !Emulator::should_run("compiled CPU executor").expect("clang check") {
        return;
    }
    let k = kernel("tile", &[], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
        let rows = tl::program_id(0) * 16 + tl::arange(0, 16);
        let cols = tl::program_id(1) * 32 + tl::arange(0, 32);
        let offs = rows.col() * n + cols.row();
        // Rows compared after the broadcast (checked run by run), columns before it.
        let mask = tl::broadcast_to(rows.col(), [16, 32]).lt(m) & cols.row().lt(n);
        let v = tl::load(x + offs).mask(mask).other(-1.0f32);
        tl::store(out + offs, v * 3.0f32).mask(mask);
    });
    // 37 x 45: full tiles, tiles ragged in rows, in columns and in both.
    let (m, n) = (37usize, 45usize);
    let x: Vec<f32> = (0..m * n).map(|i| i as f32 * 0.25 - 9.0).collect();
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let grid = [m.div_ceil(16), n.div_ceil(32), 1];
    let mut results = Vec::new();
    for native in [true, false] {
        let mut out = vec![f32::NAN.to_bits(); m * n];
        let mut args = [
            ExecArg::from(&xb[..]),
            ExecArg::from(bytes_mut(&mut out)),
            ExecArg::from(m as i32),
            ExecArg::from(n as i32),
        ];
        run_on(native, &k, grid, &mut args).unwrap_or_else(|e| panic!("native={native}: {e}"));
        let got = floats(&out);
        for (i, (g, v)) in got.iter().zip(&x).enumerate() {
            assert_eq!(*g, v * 3.0, "native={native} element {i}");
        }
        results.push(out);
    }
    assert_eq!(results[0], results[1]);
}
