//! Differential tests: the CPU executor's op tests (`src/exec/tests.rs`), run on the CPU
//! executor and on the generated Metal through the emulator, in both lane orders; every
//! output must match (bit for bit for integers, to rounding for floats, NaN where NaN).
//! Inputs avoid what Metal leaves undefined (NaN to int, division by zero).

use std::collections::BTreeMap;

use half::f16;

use super::*;
use crate::dtype::DType::{self, *};
use crate::emu::{self, EmuBuffer, Emulator, MetalLaunch, OutputSpec};
use crate::exec::{execute, ExecArg};
use crate::ir::{Kernel, ParamKind};
use crate::tl::{self, *};

enum Arg {
    In(EmuBuffer),
    Out(DType, usize),
}

fn input<T: crate::Element>(name: &str, v: &[T]) -> Arg {
    Arg::In(EmuBuffer::new(name, &[v.len()], v))
}

fn scalar<T: crate::Element>(name: &str, v: T) -> Arg {
    Arg::In(EmuBuffer::scalar(name, v))
}

fn kernel(name: &str, f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    match tl::build(name, &BTreeMap::new(), f) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    }
}

fn decode(dt: DType, b: &[u8]) -> Vec<f64> {
    let n = dt.size_bytes();
    b.chunks(n)
        .map(|c| match dt {
            Bool | U8 => c[0] as f64,
            I8 => c[0] as i8 as f64,
            I16 => i16::from_le_bytes([c[0], c[1]]) as f64,
            U16 => u16::from_le_bytes([c[0], c[1]]) as f64,
            I32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
            U32 => u32::from_le_bytes(c.try_into().unwrap()) as f64,
            I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
            U64 => u64::from_le_bytes(c.try_into().unwrap()) as f64,
            F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
            BF16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            F64 => f64::from_le_bytes(c.try_into().unwrap()),
        })
        .collect()
}

fn scalar_arg(b: &EmuBuffer) -> ExecArg<'static> {
    let v = decode(b.dtype, &b.bytes)[0];
    if b.dtype.is_float() {
        ExecArg::Float(v)
    } else if b.dtype.is_bool() {
        ExecArg::Bool(v != 0.0)
    } else {
        ExecArg::Int(v as i64)
    }
}

/// Runs `kernel` on the executor and on emulated Metal; compares every output. Also prints
/// it for CUDA (and compiles that with NVRTC when present).
fn diff(kernel: &Kernel, opts: &LaunchOptions, grid: [usize; 3], args: &[Arg], tol: f64) {
    let prog = match metal::compile(kernel, opts) {
        Ok(p) => p,
        Err(e) => panic!("compile failed: {e}"),
    };
    super::cuda_tests::check_cuda(kernel, opts);
    // Executor.
    let mut outs: Vec<Vec<u8>> = args
        .iter()
        .map(|a| match a {
            Arg::Out(dt, n) => vec![0u8; dt.size_bytes() * n],
            Arg::In(_) => Vec::new(),
        })
        .collect();
    {
        let mut it = outs.iter_mut();
        let mut xargs: Vec<ExecArg> = Vec::new();
        for (a, p) in args.iter().zip(&kernel.params) {
            let o = it.next().unwrap();
            xargs.push(match (a, p.kind) {
                (Arg::Out(..), _) => ExecArg::BufferMut(&mut o[..]),
                (Arg::In(b), ParamKind::Scalar(_)) => scalar_arg(b),
                (Arg::In(b), ParamKind::Ptr(_)) => ExecArg::Buffer(&b.bytes),
            });
        }
        if let Err(e) = execute(kernel, grid, &mut xargs) {
            panic!("executor failed: {e}");
        }
    }
    // Emulated Metal.
    let (g, tg) = prog.launch_dims(grid);
    let mut l = MetalLaunch::new(&prog.name, &prog.source)
        .header(&prog.header)
        .grid(g)
        .threadgroup(tg)
        .atomic_outputs(prog.atomic_outputs);
    for &i in &prog.inputs {
        match &args[i] {
            Arg::In(b) => {
                l = l.input(EmuBuffer {
                    name: kernel.params[i].name.clone(),
                    ..b.clone()
                })
            }
            Arg::Out(..) => panic!("parameter `{}` is an input", kernel.params[i].name),
        }
    }
    for &i in &prog.outputs {
        match &args[i] {
            Arg::Out(dt, n) => {
                l = l.output(OutputSpec::new(&kernel.params[i].name, *dt, &[*n]).init(0.0))
            }
            Arg::In(_) => panic!("parameter `{}` is an output", kernel.params[i].name),
        }
    }
    let got = match emu::run_all_orders(&l) {
        Ok(v) => v,
        Err(e) => panic!("emulated run failed: {e}\n{}", prog.describe()),
    };
    for (k, &i) in prog.outputs.iter().enumerate() {
        let Arg::Out(dt, _) = &args[i] else {
            unreachable!()
        };
        let (want, have) = (decode(*dt, &outs[i]), decode(*dt, &got[k].bytes));
        for (j, (w, h)) in want.iter().zip(&have).enumerate() {
            let ok = (w.is_nan() && h.is_nan()) || (w - h).abs() <= tol * (1.0 + w.abs());
            assert!(
                ok,
                "`{}`: output `{}`[{j}]: executor {w}, metal {h}\n{}",
                kernel.name,
                kernel.params[i].name,
                prog.describe()
            );
        }
    }
}

fn emu_ok(test: &str) -> bool {
    match Emulator::should_run(test) {
        Ok(run) => run,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn diff_integer_ops() {
    if !emu_ok("diff_integer_ops") {
        return;
    }
    let k = kernel("ints", |k| {
        let (a, b, o) = (k.ptr(I32, "a"), k.ptr(I32, "b"), k.ptr(I32, "o"));
        let offs = arange(0, 8);
        let (x, y) = (load(a + offs), load(b + offs));
        store(o + offs, floordiv(x, y));
        store(o + 8 + offs, x % y);
        store(o + 16 + offs, x * y);
        store(o + 24 + offs, (x.to(I8)).to(I32));
        store(o + 32 + offs, (x >> 1) + (y << 2));
        store(o + 40 + offs, umulhi(x, y));
    });
    let x = [7, -7, 7, -7, i32::MAX, 300, -129, 65537];
    let y = [2, 2, -2, -2, 2, 7, 3, 65536];
    let args = [input("a", &x), input("b", &y), Arg::Out(I32, 48)];
    diff(&k, &LaunchOptions::default(), [1, 1, 1], &args, 0.0);
}

#[test]
fn diff_two_element_blocks_load_and_store_packed_pairs() {
    if !emu_ok("diff_two_element_blocks_load_and_store_packed_pairs") {
        return;
    }
    let k = kernel("pairs", |k| {
        let (a, o) = (k.ptr(F32, "a"), k.ptr(F32, "o"));
        let (h, ho) = (k.ptr(F16, "h"), k.ptr(F16, "ho"));
        let offs = arange(0, 2);
        store(o + offs, load(a + offs) * 2.0 + 1.0);
        store(o + 2 + offs, load(a + 2 + offs) - 3.0);
        store(ho + offs, load(h + offs) * 2.0);
    });
    let args = [
        input("a", &[1.5f32, -2.0, 8.0, 0.25]),
        Arg::Out(F32, 4),
        input("h", &[f16::from_f32(0.5), f16::from_f32(-3.0)]),
        Arg::Out(F16, 2),
    ];
    let src = msl(&k, &LaunchOptions::default()).unwrap().source.clone();
    assert!(
        src.contains("tm_vload2(") && src.contains("packed_half2"),
        "{src}"
    );
    diff(&k, &LaunchOptions::default(), [1, 1, 1], &args, 0.0);
}

#[test]
fn diff_float_ops() {
    if !emu_ok("diff_float_ops") {
        return;
    }
    let k = kernel("floats", |k| {
        let (a, b) = (k.ptr(F32, "a"), k.ptr(F32, "b"));
        let (oi, of, oh) = (k.ptr(I32, "oi"), k.ptr(F32, "of"), k.ptr(F16, "oh"));
        let offs = arange(0, 8);
        let (x, y) = (load(a + offs), load(b + offs));
        store(of + offs, x % y);
        store(oi + offs, x.to(I32));
        store(oi + 8 + offs, x.lt(y).to(I32));
        store(oi + 16 + offs, x.ne(y).to(I32));
        store(oh + offs, x.to(F16));
        store(of + 8 + offs, exp(x));
        store(of + 16 + offs, sqrt(abs(x)));
        store(of + 24 + offs, erf(x));
        store(of + 32 + offs, sigmoid(x));
        store(of + 40 + offs, fma(x, y, 1.0));
        store(of + 48 + offs, clamp(x, -1.0, 1.0));
        store(
            of + 56 + offs,
            log(abs(x)) + sin(x) + cos(y) + floor(x) + ceil(y),
        );
        store(of + 64 + offs, maximum(x, y) - minimum(x, y));
    });
    let x = [5.5f32, -5.5, -2.7, 2.7, 0.25, 1.0, 1.000_488_3, 0.3];
    let y = [2.0f32, 2.0, 1.0, -1.0, 1.0, f32::NAN, 3.0, 0.7];
    let args = [
        input("a", &x),
        input("b", &y),
        Arg::Out(I32, 24),
        Arg::Out(F32, 72),
        Arg::Out(F16, 8),
    ];
    diff(&k, &LaunchOptions::default(), [1, 1, 1], &args, 2e-6);
}

#[test]
fn diff_masks_reductions_scans_custom_combines() {
    if !emu_ok("diff_masks_reductions_scans_custom_combines") {
        return;
    }
    let masks = kernel("masks", |k| {
        let (a, o) = (k.ptr(I32, "a"), k.ptr(I32, "o"));
        let offs = arange(0, 16);
        let m = offs.lt(5);
        let x = load(a + offs).mask(m);
        let y = load(a + offs).mask(m).other(-9);
        store(o + offs, x).mask(offs.ge(2));
        store(o + 16 + offs, y).mask((offs % 2).eq(1));
    });
    let args = [input("a", &[1i32, 2, 3, 4, 5]), Arg::Out(I32, 32)];
    diff(&masks, &LaunchOptions::default(), [1, 1, 1], &args, 0.0);

    let red = kernel("red", |k| {
        let (a, b8, of, oi) = (
            k.ptr(F32, "a"),
            k.ptr(I8, "b"),
            k.ptr(F32, "of"),
            k.ptr(I32, "oi"),
        );
        let r = arange(0, 4);
        let c = arange(0, 8);
        let x = load(a + r.col() * 8 + c.row());
        store(of + r, sum(x, 1));
        store(of + 4 + c, sum(x, 0));
        store(of + 12 + r, max(x, 1));
        store(of + 16 + c, min(x, 0));
        store(oi + r, argmax(x, 1));
        store(oi + 4 + c, argmin(x, 0));
        let xb = load(b8 + c);
        store(oi + 12, sum(xb, 0));
        store(oi + 13, max(xb, 0).to(I32));
        store(of + 24, sum(x, None));
    });
    let nan = f32::NAN;
    #[rustfmt::skip]
    let x: [f32; 32] = [
        1.0, 3.0, 3.0, -1.0, 0.0, 2.0, 3.0, 0.5,
        nan, nan, nan, nan, nan, nan, nan, nan,
        nan, 5.0, -5.0, 5.0, 1.0, nan, 2.0, 2.0,
        -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0,
    ];
    let b: [i8; 8] = [100, 100, 100, -3, 7, 127, 1, 1];
    for layout in ReductionLayout::ALL {
        let args = [
            input("a", &x),
            input("b", &b),
            Arg::Out(F32, 25),
            Arg::Out(I32, 14),
        ];
        diff(
            &red,
            &LaunchOptions::default().reduction_layout(layout),
            [1, 1, 1],
            &args,
            1e-6,
        );
    }

    let scan = kernel("scan", |k| {
        let (a, o) = (k.ptr(I32, "a"), k.ptr(I32, "o"));
        let offs = arange(0, 8);
        let x = load(a + offs);
        store(o + offs, cumsum(x, 0));
        store(o + 8 + offs, cumprod(x, 0));
        store(o + 16 + offs, cumsum_reverse(x, 0));
        let one = zeros_like(x) + 1;
        let (m, c) = associative_scan((one * 2, x), 0, false, |(m1, c1), (m2, c2)| {
            (m1 * m2, c1 * m2 + c2)
        });
        store(o + 24 + offs, m + c);
        let (_, c) = associative_scan((one * 2, x), 0, true, |(m1, c1), (m2, c2)| {
            (m1 * m2, c1 * m2 + c2)
        });
        store(o + 32 + offs, c);
        let (_, c) = tl::reduce((one * 2, x), 0, |(m1, c1), (m2, c2)| {
            (m1 * m2, c1 * m2 + c2)
        });
        store(o + 40, c);
        let (mx, idx) = tl::reduce((x, offs), 0, |(a, ia), (b, ib)| {
            let gt = a.gt(b) | (a.eq(b) & ia.lt(ib));
            (where_(gt, a, b), where_(gt, ia, ib))
        });
        store(o + 41, mx);
        store(o + 42, idx);
    });
    let args = [input("a", &[3i32, 1, 4, 1, 5, 9, 2, 6]), Arg::Out(I32, 43)];
    diff(&scan, &LaunchOptions::default(), [1, 1, 1], &args, 0.0);
}

#[test]
fn diff_control_flow_grid_and_shapes() {
    if !emu_ok("diff_control_flow_grid_and_shapes") {
        return;
    }
    let cf = kernel("cf", |k| {
        let (p, o) = (k.ptr(I32, "p"), k.ptr(I32, "o"));
        let n = k.scalar(I32, "n");
        let offs = arange(0, 8);
        let x = load(p + offs);
        let i = while_loop(program_id(0) + 1, |i| i.lt(n), |i| i * 2);
        let y = if_(i.gt(100), || x + 1, || x - 1);
        let (a, b) = range(0, n, 3).fold((x, y), |j, (a, b)| (b + j, a));
        store(o + program_id(0) * 24 + offs, a);
        store(o + program_id(0) * 24 + 8 + offs, b);
        store(o + program_id(0) * 24 + 16 + offs, zeros([8], I32) + i);
    });
    let x: Vec<i32> = (0..8).collect();
    for n in [0i32, 7, 200] {
        let args = [input("p", &x), Arg::Out(I32, 48), scalar("n", n)];
        diff(&cf, &LaunchOptions::default(), [2, 1, 1], &args, 0.0);
    }

    let grid = kernel("grid", |k| {
        let o = k.ptr(I32, "o");
        let (x, y, z) = (program_id(0), program_id(1), program_id(2));
        let (nx, ny) = (num_programs(0), num_programs(1));
        let lin = (z * ny + y) * nx + x;
        store(o + lin, x * 100 + y * 10 + z + num_programs(2) * 1000);
    });
    diff(
        &grid,
        &LaunchOptions::default(),
        [4, 3, 2],
        &[Arg::Out(I32, 24)],
        0.0,
    );

    let shapes = kernel("shapes", |k| {
        let (a, o) = (k.ptr(I32, "a"), k.ptr(I32, "o"));
        let r = arange(0, 4);
        let c = arange(0, 8);
        let x = load(a + r.col() * 8 + c.row());
        let t = trans(x);
        store(o + c.col() * 4 + r.row(), t);
        let j = join(r, r * 10);
        store(o + 32 + arange(0, 8), j.reshape([8]));
        let (lo, hi) = split(j);
        store(o + 40 + r, hi - lo);
        let p = permute(x.reshape([2, 2, 8]), [2, 0, 1]);
        store(o + 44 + arange(0, 32), p.reshape([32]));
        let b = broadcast_to(r.col(), [4, 8]);
        store(o + 76 + arange(0, 32), b.reshape([32]));
        store(o + 108 + r, expand_dims(r, 0).reshape([4]) * 2);
        // The same through loaded (not index-computed) values: threadgroup memory moves.
        let lr = load(a + r);
        store(
            o + 112 + arange(0, 32),
            broadcast_to(lr.col(), [4, 8]).reshape([32]),
        );
        store(o + 144 + arange(0, 32), trans(x * 3).reshape([32]));
    });
    let x: Vec<i32> = (0..32).collect();
    for warps in [1, 4] {
        let args = [input("a", &x), Arg::Out(I32, 176)];
        diff(
            &shapes,
            &LaunchOptions::default().num_warps(warps),
            [1, 1, 1],
            &args,
            0.0,
        );
    }
}

#[test]
fn diff_philox_and_int8_dot() {
    if !emu_ok("diff_philox_and_int8_dot") {
        return;
    }
    let ph = kernel("philox", |k| {
        let (o, seed) = (k.ptr(U32, "o"), k.scalar(I64, "seed"));
        let offs = arange(0, 2);
        let [a, b, c, d] = randint4x(seed, zeros([2], I32));
        store(o + offs * 4, a);
        store(o + offs * 4 + 1, b);
        store(o + offs * 4 + 2, c);
        store(o + offs * 4 + 3, d);
    });
    diff(
        &ph,
        &LaunchOptions::default(),
        [1, 1, 1],
        &[Arg::Out(U32, 8), scalar("seed", 0i64)],
        0.0,
    );
    let rnd = kernel("rand", |k| {
        let (o, seed) = (k.ptr(F32, "o"), k.scalar(I32, "seed"));
        let offs = arange(0, 1024);
        store(o + offs, rand(seed, offs));
        store(o + 1024 + offs, randn(seed, offs));
    });
    diff(
        &rnd,
        &LaunchOptions::default(),
        [1, 1, 1],
        &[Arg::Out(F32, 2048), scalar("seed", 42i32)],
        1e-5,
    );

    let idot = kernel("idot", |k| {
        let (a, b, o) = (k.ptr(I8, "a"), k.ptr(I8, "b"), k.ptr(I32, "o"));
        let r = arange(0, 16);
        let x = load(a + r.col() * 16 + r.row());
        let y = load(b + r.col() * 16 + r.row());
        store(o + r.col() * 16 + r.row(), dot(x, y, None));
    });
    let a: Vec<i8> = (0..256).map(|i| (i * 37 % 255) as u8 as i8).collect();
    let b: Vec<i8> = (0..256).map(|i| (i * 91 % 251) as u8 as i8).collect();
    let args = [input("a", &a), input("b", &b), Arg::Out(I32, 256)];
    diff(&idot, &LaunchOptions::default(), [1, 1, 1], &args, 0.0);
}

#[test]
fn diff_scans_over_every_bit_placement() {
    if !emu_ok("diff_scans_over_every_bit_placement") {
        return;
    }
    let k = kernel("scans", |k| {
        let (a, o) = (k.ptr(F32, "a"), k.ptr(F32, "o"));
        let i = arange(0, 1024);
        let x = load(a + i);
        store(o + i, cumsum(x, 0));
        let t = x.reshape([16, 64]);
        store(o + 1024 + i, cumsum(t, 1).reshape([1024]));
        store(o + 2048 + i, cumsum(t, 0).reshape([1024]));
        let u = x.reshape([128, 8]);
        store(o + 3072 + i, cumprod(u, 1).reshape([1024]));
        store(o + 4096 + i, cumsum(x.reshape([2, 512]), 1).reshape([1024]));
        let s = load(a + arange(0, 64));
        store(o + 5120 + arange(0, 64), cumsum(s, 0));
        store(o + 5184 + arange(0, 64), cumsum_reverse(s, 0));
    });
    let x: Vec<f32> = (0..1024)
        .map(|i| 0.9 + ((i * 37) % 23) as f32 / 100.0)
        .collect();
    for warps in [1, 2, 4, 8] {
        let args = [input("a", &x), Arg::Out(F32, 5248)];
        diff(
            &k,
            &LaunchOptions::default().num_warps(warps),
            [1, 1, 1],
            &args,
            1e-5,
        );
    }
}

#[test]
fn diff_half_and_bfloat() {
    if !emu_ok("diff_half_and_bfloat") {
        return;
    }
    for dt in [F16, BF16] {
        let k = kernel("halves", |k| {
            let (a, o, of) = (k.ptr(dt, "a"), k.ptr(dt, "o"), k.ptr(F32, "of"));
            let r = arange(0, 16);
            let c = arange(0, 16);
            let x = load(a + r.col() * 16 + c.row());
            store(
                o + r.col() * 16 + c.row(),
                exp(x.to(F32)).to(dt) * x + x / 3.0,
            );
            store(o + 256 + r, max(x, 1));
            store(o + 272 + c, sum(x, 0));
            store(of + r, argmax(x, 1).to(F32));
            store(
                of + 16 + r.col() * 4 + arange(0, 4).row(),
                dot(x, load(a + r.col() * 4 + arange(0, 4).row()), None),
            );
            store(o + 288 + c, (x.to(F32) * 2.0).to(dt).sum(0));
        });
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 29) % 31) as f32 / 16.0 - 1.0)
            .collect();
        let args = |buf: Arg| [buf, Arg::Out(dt, 304), Arg::Out(F32, 80)];
        let a = if dt == F16 {
            input(
                "a",
                &x.iter().map(|v| f16::from_f32(*v)).collect::<Vec<_>>(),
            )
        } else {
            input(
                "a",
                &x.iter()
                    .map(|v| half::bf16::from_f32(*v))
                    .collect::<Vec<_>>(),
            )
        };
        for layout in [ReductionLayout::Coalesced, ReductionLayout::Tiled] {
            let a = match &a {
                Arg::In(b) => Arg::In(b.clone()),
                Arg::Out(..) => unreachable!(),
            };
            diff(
                &k,
                &LaunchOptions::default().reduction_layout(layout),
                [1, 1, 1],
                &args(a),
                1e-2,
            );
        }
    }
}
