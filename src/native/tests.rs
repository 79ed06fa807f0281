//! Tests of the compiled CPU executor's own behaviour (semantics per op are covered by
//! tests/ops.rs on every target): bounds errors, nothing touched outside a buffer, shared
//! outputs, scalar argument dtypes, limits. Each compiles its kernels with clang, so each
//! skips (or fails under `TRITON_METAL_REQUIRE_EMU`) when there is none.

use std::collections::BTreeMap;

use super::execute_native;
use crate::dtype::DType::*;
use crate::emu::Emulator;
use crate::error::Error;
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

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A 4-byte aligned byte buffer of `n` f32 (Vec<u32> storage).
fn out_buf(n: usize, fill: f32) -> Vec<u32> {
    vec![fill.to_bits(); n]
}

fn run() -> bool {
    Emulator::should_run("compiled CPU executor").expect("clang check")
}

/// `out[offs] = x[offs] * 2` over `BLOCK`-element programs, with or without the mask.
fn scale(masked: bool) -> Kernel {
    kernel("scale", &[("BLOCK", 64)], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let n = k.scalar(I32, "n");
        let offs = tl::program_id(0) * k.constexpr("BLOCK") + tl::arange(0, 64);
        let mask = offs.lt(n);
        let v = if masked {
            tl::load(x + offs).mask(mask)
        } else {
            tl::load(x + offs)
        };
        let st = tl::store(out + offs, v * 2.0);
        if masked {
            st.mask(mask);
        }
    })
}

#[test]
fn masked_ragged_tail_matches_the_interpreter_and_leaves_the_rest() {
    if !run() {
        return;
    }
    let k = scale(true);
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let xb = f32s(&x);
    let mut a = out_buf(1024, f32::NAN);
    let mut b = out_buf(1024, f32::NAN);
    for (buf, native) in [(&mut a, true), (&mut b, false)] {
        let mut args = [
            ExecArg::from(&xb[..]),
            ExecArg::from(bytes_mut(buf)),
            ExecArg::from(n as i32),
        ];
        run_on(native, &k, [16, 1, 1], &mut args)
            .unwrap_or_else(|e| panic!("native={native}: {e}"));
    }
    let got = from_f32s(bytes_mut(&mut a));
    for i in 0..n {
        assert_eq!(got[i], x[i] * 2.0, "element {i}");
    }
    assert!(got[n..].iter().all(|v| v.is_nan()), "tail was written");
    assert_eq!(a, b, "compiled and interpreted results differ");
}

#[test]
fn out_of_bounds_load_names_kernel_op_program_and_offset() {
    if !run() {
        return;
    }
    let k = scale(false);
    let x = f32s(&vec![1.0; 100]);
    let mut out = out_buf(128, 0.0);
    let mut args = [
        ExecArg::from(&x[..]),
        ExecArg::from(bytes_mut(&mut out)),
        ExecArg::from(100i32),
    ];
    let e = execute_native(&k, [2, 1, 1], &mut args).expect_err("x has 100 elements");
    let msg = e.to_string();
    assert!(matches!(e, Error::Runtime { .. }), "{e:?}");
    for want in [
        "scale",
        "op `load`",
        "program (1, 0, 0)",
        "offset 100",
        "`x_ptr` (100 elements)",
    ] {
        assert!(msg.contains(want), "missing {want:?} in: {msg}");
    }
}

#[test]
fn out_of_bounds_store_writes_nothing_outside_the_buffer() {
    if !run() {
        return;
    }
    let k = scale(false);
    let x = f32s(&vec![3.0; 128]);
    // The output is the middle of a larger allocation: its neighbours must stay intact.
    let mut whole = out_buf(96 + 32, -1.0);
    let (inner, _) = whole.split_at_mut(96);
    let (_, inner) = inner.split_at_mut(32);
    let mut args = [
        ExecArg::from(&x[..]),
        ExecArg::from(bytes_mut(inner)),
        ExecArg::from(128i32),
    ];
    let e = execute_native(&k, [2, 1, 1], &mut args).expect_err("out has 64 elements");
    let msg = e.to_string();
    assert!(
        msg.contains("op `store`") && msg.contains("`out_ptr` (64 elements)"),
        "{msg}"
    );
    let all = from_f32s(bytes_mut(&mut whole));
    assert!(all[..32].iter().all(|&v| v == -1.0), "before the buffer");
    assert!(all[96..].iter().all(|&v| v == -1.0), "after the buffer");
}

#[test]
fn negative_offsets_are_out_of_bounds() {
    if !run() {
        return;
    }
    let k = kernel("shift_back", &[], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let offs = tl::arange(0, 32) - 5;
        tl::store(out + tl::arange(0, 32), tl::load(x + offs));
    });
    let x = f32s(&[0.0; 32]);
    let mut out = out_buf(32, 0.0);
    let mut args = [ExecArg::from(&x[..]), ExecArg::from(bytes_mut(&mut out))];
    let msg = execute_native(&k, [1, 1, 1], &mut args)
        .expect_err("offsets start at -5")
        .to_string();
    assert!(msg.contains("offset -5"), "{msg}");
}

#[test]
fn programs_sharing_an_output_store_whole_values() {
    if !run() {
        return;
    }
    // Every program stores its id into the same 256 elements: the disjointness proof
    // fails, so stores are atomic; each element ends up as some program's id.
    let k = kernel("overlap", &[], |k| {
        let out = k.ptr(I32, "out_ptr");
        let pid = tl::program_id(0);
        tl::store(
            out + tl::arange(0, 256),
            tl::zeros(&[256usize][..], I32) + pid,
        );
    });
    let body = |shared: bool| {
        let p = crate::codegen::cpu::compile(&k, shared).expect("prints");
        p.source
            .split("#line 1 \"kernel.cpp\"")
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        body(true).contains("tm_atomic_store("),
        "shared outputs are atomic"
    );
    assert!(!body(false).contains("tm_atomic_store("));
    let mut out = vec![-1i32 as u32; 256];
    let mut args = [ExecArg::from(bytes_mut(&mut out))];
    execute_native(&k, [64, 1, 1], &mut args).expect("runs");
    assert!(
        out.iter().all(|&v| (v as i32) >= 0 && (v as i32) < 64),
        "{out:?}"
    );
}

#[test]
fn scalar_arguments_of_every_width_arrive_intact() {
    if !run() {
        return;
    }
    let k = kernel("scalars", &[], |k| {
        let out = k.ptr(F32, "out_ptr");
        let (a, b, c, d, e) = (
            k.scalar(F16, "a"),
            k.scalar(BF16, "b"),
            k.scalar(I64, "c"),
            k.scalar(Bool, "d"),
            k.scalar(I8, "e"),
        );
        let v = a.to(F32) + b.to(F32) + c.to(F32) + d.to(F32) + e.to(F32);
        tl::store(out + tl::arange(0, 2), tl::zeros(&[2usize][..], F32) + v);
    });
    let mut out = out_buf(2, 0.0);
    let mut args = [
        ExecArg::from(bytes_mut(&mut out)),
        ExecArg::from(1.5f32),
        ExecArg::from(-0.25f32),
        ExecArg::from(1i64 << 33),
        ExecArg::from(true),
        ExecArg::from(-7i8),
    ];
    execute_native(&k, [1, 1, 1], &mut args).expect("runs");
    let want = 1.5 - 0.25 + (1u64 << 33) as f32 + 1.0 - 7.0;
    assert_eq!(from_f32s(bytes_mut(&mut out)), vec![want, want]);
}

#[test]
fn blocks_too_large_for_a_worker_stack_are_unsupported() {
    let k = kernel("huge", &[], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let offs = tl::arange(0, 1 << 19);
        tl::store(out + offs, tl::load(x + offs) * 2.0);
    });
    // Printing alone decides this; no compiler needed. (Index arithmetic alone would fit:
    // it is computed where it is used, never stored.)
    let e = crate::codegen::cpu::compile(&k, false).expect_err("2 MiB blocks");
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("huge") && m.contains("stack")),
        "{e:?}"
    );
}

#[test]
fn f64_kernels_compile() {
    let k = kernel("twice64", &[], |k| {
        let (x, out) = (k.ptr(F64, "x_ptr"), k.ptr(F64, "out_ptr"));
        let offs = tl::arange(0, 16);
        tl::store(out + offs, tl::load(x + offs) * 2.0);
    });
    let p = crate::codegen::cpu::compile(&k, false).expect("the CPU dialect has f64");
    assert!(p.source.contains("tm_buf<double>"), "{}", p.source);
}

#[test]
fn launches_find_their_program_by_the_kernel_and_nan_constants_still_work() {
    if !run() {
        return;
    }
    // `x * c + NaN-guarded c`: a kernel holding a NaN constant never equals itself, so it
    // is found by its IR text on every launch, and never piles up in the by-kernel list.
    let build = |name: &str, c: f32| {
        kernel(name, &[], move |k| {
            let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
            let offs = tl::arange(0, 64);
            let v = tl::load(x + offs);
            let nan_or = tl::where_(v.ne(v), c, 2.0f32);
            tl::store(out + offs, v * nan_or);
        })
    };
    let x: Vec<f32> = (0..64).map(|i| i as f32 - 3.0).collect();
    let xb = f32s(&x);
    for (name, c) in [("by_kernel_plain", 5.0f32), ("by_kernel_nan", f32::NAN)] {
        let k = build(name, c);
        for launch in 0..3 {
            let mut out = out_buf(64, f32::NAN);
            let mut args = [ExecArg::from(&xb[..]), ExecArg::from(bytes_mut(&mut out))];
            execute_native(&k, [1, 1, 1], &mut args).unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = from_f32s(bytes_mut(&mut out));
            let want: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
            assert_eq!(got, want, "{name} launch {launch}");
        }
        let expect = if c.is_nan() { 0 } else { 1 };
        assert_eq!(super::remembered(name), expect, "{name}");
    }
}

/// Distance in units in the last place between two non-NaN floats (across zero too).
fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        i64::from(if i < 0 { i32::MIN - i } else { i })
    };
    (key(a) - key(b)).unsigned_abs()
}

#[test]
fn exp_and_exp2_are_within_one_ulp_of_the_correctly_rounded_result() {
    if !run() {
        return;
    }
    // A spread over every bit pattern, all results that are subnormal or near overflow
    // (densely), and the special values. (The same code was checked on all 2^32 inputs
    // while it was written: at most 1 ulp for both.)
    let mut xs: Vec<f32> = (0..(1u64 << 32) / 4099)
        .map(|i| f32::from_bits((i * 4099 + 7) as u32))
        .collect();
    let around = |x: f32, n: u32| (0..2 * n).map(move |i| f32::from_bits(x.to_bits() - n + i));
    xs.extend(around(-95.5, 1 << 19).step_by(3));
    xs.extend(around(88.722_84, 1 << 12));
    xs.extend(around(-103.972_08, 1 << 12));
    xs.extend(around(127.99, 1 << 12).chain(around(-140.0, 1 << 12)));
    xs.extend([
        0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, 89.0, -104.0, 128.0, -150.0,
    ]);
    xs.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN,
        f32::MAX,
    ]);
    let n = xs.len();
    let xb = f32s(&xs);
    for (name, two) in [("exp", false), ("exp2", true)] {
        let k = kernel(name, &[], |k| {
            let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
            let n = k.scalar(I32, "n");
            let offs = tl::program_id(0) * 1024 + tl::arange(0, 1024);
            let v = tl::load(x + offs).mask(offs.lt(n));
            let y = if two { tl::exp2(v) } else { tl::exp(v) };
            tl::store(out + offs, y).mask(offs.lt(n));
        });
        let mut out = out_buf(n, -7.0);
        let mut args = [
            ExecArg::from(&xb[..]),
            ExecArg::from(bytes_mut(&mut out)),
            ExecArg::from(n as i32),
        ];
        execute_native(&k, [n.div_ceil(1024), 1, 1], &mut args).expect("runs");
        let got = from_f32s(bytes_mut(&mut out));
        for (&x, &y) in xs.iter().zip(&got) {
            let want = if two {
                f64::from(x).exp2()
            } else {
                f64::from(x).exp()
            } as f32;
            if x.is_nan() {
                assert!(y.is_nan(), "{name}({x}) = {y}");
            } else {
                assert!(ulps(y, want) <= 1, "{name}({x:e}) = {y:e}, want {want:e}");
            }
        }
    }
}

/// A 16x32 tile of `x` (rows `ld` apart) into `out`: `x[r * ld + (c0 + c) % n]` masked to
/// `rows` rows and `c < n` (`n` a multiple of 8), or `x[r * ld + c]` unmasked. Loads of
/// 32-float rows copy a row at once where its offsets run +1 (checked for the remainder),
/// its mask lanes are set and it lies inside `x`; other rows go element by element.
fn tile(wrapping: bool) -> Kernel {
    kernel("tile", &[], |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let (ld, c0, n, rows) = (
            k.scalar(I32, "ld"),
            k.scalar(I32, "c0"),
            k.scalar(I32, "n"),
            k.scalar(I32, "rows"),
        );
        let (r, c) = (tl::arange(0, 16), tl::arange(0, 32));
        let v = if wrapping {
            let n8 = tl::multiple_of(n, [8]);
            tl::load(x + (r.col() * ld + ((c + c0) % n8).row()))
                .mask(r.col().lt(rows) & c.row().lt(n8))
                .other(-1.0)
        } else {
            tl::load(x + (r.col() * ld + c.row()))
        };
        tl::store(out + r.col() * 32 + c.row(), v);
    })
}

fn copies_rows(k: &Kernel) -> bool {
    let p = crate::codegen::cpu::compile(k, false).expect("prints");
    p.layouts.iter().any(|l| l.layout.starts_with("rows of 32"))
}

fn tile_args<'a>(x: &'a [u8], out: &'a mut [u32], s: [i32; 4]) -> [ExecArg<'a>; 6] {
    [
        ExecArg::from(x),
        ExecArg::from(bytes_mut(out)),
        ExecArg::from(s[0]),
        ExecArg::from(s[1]),
        ExecArg::from(s[2]),
        ExecArg::from(s[3]),
    ]
}

#[test]
fn tile_rows_match_the_interpreter_and_report_the_first_bad_element() {
    if !run() {
        return;
    }
    let x: Vec<f32> = (0..16 * 40).map(|i| i as f32 * 0.25 - 9.0).collect();
    let xb = f32s(&x);
    // (ld, c0, n, rows): rows copied whole; a remainder wrapping inside rows; a masked tail.
    for s in [[40, 3, 1024, 16], [40, 3, 24, 16], [40, 0, 32, 11]] {
        let k = tile(true);
        assert!(copies_rows(&k), "rows are not copied whole");
        let mut a = out_buf(512, f32::NAN);
        let mut b = out_buf(512, f32::NAN);
        for (buf, native) in [(&mut a, true), (&mut b, false)] {
            run_on(native, &k, [1, 1, 1], &mut tile_args(&xb, buf, s))
                .unwrap_or_else(|e| panic!("native={native}: {e}"));
        }
        assert_eq!(a, b, "{s:?}");
        let got = from_f32s(bytes_mut(&mut a));
        let [ld, c0, n, _] = s;
        assert_eq!(got[32 + 23], x[(ld + (23 + c0) % n) as usize], "{s:?}");
    }
    // `x` ends 5 elements before the last row does: the compiled executor reports the
    // first element outside (627, as a straddling 8-element chunk did), the interpreter
    // the last (631).
    let k = tile(false);
    assert!(copies_rows(&k), "rows are not copied whole");
    let short = f32s(&x[..15 * 40 + 27]);
    for native in [true, false] {
        let mut out = out_buf(512, 0.0);
        let e = run_on(
            native,
            &k,
            [1, 1, 1],
            &mut tile_args(&short, &mut out, [40, 0, 0, 16]),
        )
        .expect_err("x is 5 elements short");
        let m = e.to_string();
        let want = if native { "offset 627 " } else { "offset 631 " };
        assert!(
            m.contains(want) && m.contains("op `load`") && m.contains("`x_ptr` (627 elements)"),
            "native={native}: {m}"
        );
    }
}
