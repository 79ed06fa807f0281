//! The scalar-FMA `tl.dot` (the lowering of dots the matrix tiles cannot take, forced here on
//! every dot through a plan override) gives the interpreter's bits on every target: f32,
//! i8 -> i32 and f16 -> f16 dots, 2-D with a K loop carrying the accumulator and 3-D
//! (batched), on ragged masked tiles with NaN, infinities, zeros of both signs, tiny and
//! huge values, under layouts where a thread's C elements span columns only, rows and
//! columns, columns on both sides of the thread bits, batches, or where some threads hold
//! none. The compiled CPU executor runs the same lowering with one thread, A's rows of the
//! f32 tiles read in place. The CUDA of each launch is compiled by NVRTC.

mod support;

use half::f16;
use support::every_target;
use triton_metal::ir::Kernel;
use triton_metal::opt::plan::DotLowering;
use triton_metal::runtime::{out, Arg, Decision, KernelPlan, Launch, LaunchOptions, Target};
use triton_metal::tl::{self, JitKernel, Tensor};
use triton_metal::{
    Array, DType,
    DType::{F16, F32, I32, I8},
    Result,
};

/// Every `tl.dot` a scalar FMA loop, its accumulator out of matrix fragments and its
/// operands staged in their own iteration.
fn scalar_dots(plan: &mut KernelPlan, _: &Kernel, _: &LaunchOptions) -> Result<()> {
    let ops: Vec<_> = plan.decisions().map(|(op, d, _)| (op, d.clone())).collect();
    for (op, d) in ops {
        match d {
            Decision::Resident(_) | Decision::Ahead { .. } => {
                plan.remove(op);
            }
            Decision::Dot(_) => plan.set(op, Decision::Dot(DotLowering::Fma), "test: scalar"),
            _ => {}
        }
    }
    Ok(())
}

/// `n` operand values of `din` from `seed`, with edge values planted at a few places:
/// NaN, ±inf, ±0, tiny and huge magnitudes for floats; the extremes for i8.
fn values(din: DType, n: usize, seed: usize) -> Array {
    let plain = |i: usize| ((i * 2654435761usize + seed * 97) % 100003) as f64 / 7919.0 - 6.3;
    let special = |i: usize| match (i * 7 + seed) % 41 {
        3 => Some(0.0),
        5 => Some(-0.0),
        9 => Some(if din == F16 { 6e-8 } else { 1.0e-30 }),
        13 => Some(if din == F16 { 6000.0 } else { 3.0e30 }),
        _ if i == 17 * seed + 4 => Some(f64::NAN),
        _ if i == 29 * seed + 11 => Some(f64::INFINITY),
        _ if i == 31 * seed + 2 => Some(f64::NEG_INFINITY),
        _ => None,
    };
    match din {
        F32 => {
            let v: Vec<f32> = (0..n)
                .map(|i| special(i).unwrap_or_else(|| plain(i)) as f32)
                .collect();
            Array::from_slice(&v, &[n]).unwrap()
        }
        F16 => {
            let v: Vec<f16> = (0..n)
                .map(|i| f16::from_f64(special(i).unwrap_or_else(|| plain(i) / 4.0)))
                .collect();
            Array::from_slice(&v, &[n]).unwrap()
        }
        _ => {
            let v: Vec<i8> = (0..n)
                .map(|i| match (i * 7 + seed) % 23 {
                    1 => i8::MIN,
                    2 => i8::MAX,
                    3 => 0,
                    _ => (plain(i) * 20.0) as i8,
                })
                .collect();
            Array::from_slice(&v, &[n]).unwrap()
        }
    }
}

/// An output's elements as bits, every NaN as one value (payloads may differ).
fn bits(a: &Array) -> Vec<u32> {
    match a.dtype() {
        F32 => a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
            .collect(),
        F16 => a
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|x| {
                if x.is_nan() {
                    u32::MAX
                } else {
                    x.to_bits() as u32
                }
            })
            .collect(),
        _ => a
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&x| x as u32)
            .collect(),
    }
}

/// How many of an output's elements are finite floats (all of an integer output).
fn finite(a: &Array) -> usize {
    match a.dtype() {
        F32 => a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .filter(|x| x.is_finite())
            .count(),
        F16 => a
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .filter(|x| x.is_finite())
            .count(),
        _ => a.to_vec::<i32>().unwrap().len(),
    }
}

/// The result dtype of a dot of `din` inputs.
fn acc_dtype(din: DType) -> DType {
    match din {
        I8 => I32,
        F16 => F16,
        _ => F32,
    }
}

/// A `[m, k] x [k, n]` product in `bm x bn` tiles (a program per tile), its K loop in steps
/// of `bk` carrying the accumulator, tails in M, N and K masked.
fn matmul(
    din: DType,
    (m, n, kk): (usize, usize, usize),
    (bm, bn, bk): (i64, i64, i64),
) -> JitKernel {
    let dout = acc_dtype(din);
    let name = format!("dot_fma_{}_{bm}x{bn}x{bk}", din.short_name());
    tl::jit(&name, move |k| {
        let (pa, pb, pc) = (k.ptr(din, "a"), k.ptr(din, "b"), k.ptr(dout, "c"));
        let (m, n, kk) = (m as i32, n as i32, kk as i32);
        let offs_m = tl::program_id(0) * bm as i32 + tl::arange(0, bm);
        let offs_n = tl::program_id(1) * bn as i32 + tl::arange(0, bn);
        let offs_k = tl::arange(0, bk);
        let acc = tl::zeros([bm, bn], dout);
        let acc: Tensor = tl::range(0, kk, bk as i32).fold(acc, |k0, acc| {
            let ks = offs_k + k0;
            let x = tl::load(pa + offs_m.col() * kk + ks.row())
                .mask(offs_m.col().lt(m) & ks.row().lt(kk))
                .other(0);
            let y = tl::load(pb + ks.col() * n + offs_n.row())
                .mask(ks.col().lt(kk) & offs_n.row().lt(n))
                .other(0);
            tl::dot_out(x, y, acc, dout)
        });
        let cm = offs_m.col().lt(m) & offs_n.row().lt(n);
        tl::store(pc + offs_m.col() * n + offs_n.row(), acc).mask(cm);
    })
    .unwrap()
}

/// A batched `[batch, m, k] x [batch, k, n]` product in one `[batch, bm, bk] x [batch, bk,
/// bn]` tile, M, N and K masked to `m`, `n` and `k`.
fn batched(
    din: DType,
    (batch, m, n, kk): (usize, usize, usize, usize),
    (bm, bn, bk): (i64, i64, i64),
) -> JitKernel {
    let dout = acc_dtype(din);
    let name = format!("dot_fma3_{}_{batch}x{bm}x{bn}x{bk}", din.short_name());
    tl::jit(&name, move |k| {
        let (pa, pb, pc) = (k.ptr(din, "a"), k.ptr(din, "b"), k.ptr(dout, "c"));
        let (m, n, kk) = (m as i32, n as i32, kk as i32);
        let nb = batch as i64;
        let bi = tl::reshape(tl::arange(0, nb), [nb, 1, 1]);
        let (rm, rk, cn, ck) = (
            tl::reshape(tl::arange(0, bm), [1i64, bm, 1]),
            tl::reshape(tl::arange(0, bk), [1i64, bk, 1]),
            tl::reshape(tl::arange(0, bn), [1i64, 1, bn]),
            tl::reshape(tl::arange(0, bk), [1i64, 1, bk]),
        );
        let x = tl::load(pa + bi * (m * kk) + rm * kk + ck)
            .mask(rm.lt(m) & ck.lt(kk))
            .other(0);
        let y = tl::load(pb + bi * (kk * n) + rk * n + cn)
            .mask(rk.lt(kk) & cn.lt(n))
            .other(0);
        let z = tl::dot_out(x, y, None, dout);
        tl::store(pc + bi * (m * n) + rm * n + cn, z).mask(rm.lt(m) & cn.lt(n));
    })
    .unwrap()
}

/// The launch of a test kernel on `a` and `b` into `c`, every dot scalar.
fn launch<'k>(
    l: Launch<'k>,
    (a, b): (&Array, &Array),
    c: Arg,
    grid: [usize; 2],
    warps: usize,
) -> Launch<'k> {
    l.grid(grid)
        .num_warps(warps)
        .num_stages(1)
        .args((a, b, c))
        .override_plan(scalar_dots)
}

/// Runs `k` on `grid` with `warps` warps on every target, every dot scalar; checks the
/// printed programs take the scalar path and every target gives the interpreter's bits.
fn check(
    k: &JitKernel,
    din: DType,
    (na, nb, nc): (usize, usize, usize),
    grid: [usize; 2],
    warps: usize,
) {
    let (a, b) = (values(din, na, 1), values(din, nb, 2));
    let dout = acc_dtype(din);
    let poison = if dout == I32 { -7.0 } else { f64::NAN };
    let emu = Target::Emulated(triton_metal::runtime::LaneOrder::Forward);
    let msl = launch(
        k.launch(),
        (&a, &b),
        out(&[nc], dout).fill(poison),
        grid,
        warps,
    )
    .target(emu)
    .msl()
    .unwrap();
    assert!(
        msl.layouts
            .iter()
            .any(|l| l.layout.starts_with("scalar FMA")),
        "{}: {:?}",
        k.name(),
        msl.layouts
    );
    let cuda = launch(
        k.launch(),
        (&a, &b),
        out(&[nc], dout).fill(poison),
        grid,
        warps,
    )
    .cuda()
    .unwrap();
    assert!(
        cuda.layouts
            .iter()
            .any(|l| l.layout.starts_with("scalar FMA")),
        "{}: {:?}",
        k.name(),
        cuda.layouts
    );
    let runs = every_target(k, |l| {
        launch(l, (&a, &b), out(&[nc], dout).fill(poison), grid, warps)
    });
    let want = &runs
        .iter()
        .find(|(t, _)| *t == Target::Cpu)
        .expect("the interpreter runs")
        .1[0];
    let fin = finite(want);
    if dout != I32 {
        assert!(
            fin > nc / 2 && fin < nc,
            "{}: {fin} of {nc} finite",
            k.name()
        );
    }
    let want = bits(want);
    let mut bad = Vec::new();
    for (t, o) in &runs {
        let got = bits(&o[0]);
        let wrong: Vec<usize> = (0..nc).filter(|&i| got[i] != want[i]).collect();
        if let Some(&i) = wrong.first() {
            bad.push(format!(
                "{t:?}: {} of {nc} elements differ, the first [{i}]: {:#x}, the interpreter's {:#x}",
                wrong.len(),
                got[i],
                want[i]
            ));
        }
    }
    assert!(bad.is_empty(), "{}: {bad:#?}", k.name());
}

#[test]
fn two_d_scalar_dots_give_the_interpreters_bits() {
    let (m, n, kk) = (37usize, 45usize, 70usize);
    let sizes = (m * kk, kk * n, m * n);
    let grid = |bm: usize, bn: usize| [m.div_ceil(bm), n.div_ceil(bn)];
    // (input dtype, tile, warps): per thread 4 columns (16x32 on 4 warps); 16 rows x 4
    // columns (64x32 on 1 warp); idle threads (16x16 on 8 warps); columns on both sides of
    // the thread bits (16x256 on 1 warp).
    let cases: [(DType, (i64, i64, i64), usize); 7] = [
        (F32, (16, 32, 16), 4),
        (F32, (64, 32, 32), 1),
        (F32, (16, 16, 32), 8),
        (F32, (16, 256, 16), 1),
        (I8, (32, 32, 16), 2),
        (I8, (16, 16, 32), 8),
        (F16, (32, 16, 16), 4),
    ];
    for (din, tile, warps) in cases {
        let k = matmul(din, (m, n, kk), tile);
        check(
            &k,
            din,
            sizes,
            grid(tile.0 as usize, tile.1 as usize),
            warps,
        );
    }
}

#[test]
fn batched_scalar_dots_give_the_interpreters_bits() {
    // [2, 16, 16] on one warp: a batch bit, a row bit and two column bits in registers.
    let (batch, m, n, kk) = (2usize, 13usize, 11usize, 29usize);
    let sizes = (batch * m * kk, batch * kk * n, batch * m * n);
    for din in [F32, I8] {
        let k = batched(din, (batch, m, n, kk), (16, 16, 32));
        check(&k, din, sizes, [1, 1], 1);
    }
}
