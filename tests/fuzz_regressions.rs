//! Kernels the differential fuzzer (src/fuzz, FUZZING.md) found disagreeing between
//! targets, shrunk and printed by it, each run on every target (interpreter, compiled CPU,
//! emulated Metal in both lane orders, NVRTC) through `fuzz::Case`, which fails while any
//! target differs from the interpreter.

use triton_metal::fuzz::{self, Case, Tol};
use triton_metal::runtime::ReductionLayout;
use triton_metal::tl::{self, Tensor};
use triton_metal::DType::*;

/// Fuzz seed 102 (found with `--allow FloatToIntCast`): f16 NaN and ±inf cast to i64, then
/// back to f16 by an addition, compared with zero. The interpreter turned NaN into 0 (`true`
/// at element 11, a NaN), the compiled CPU executor and emulated Metal into INT64_MIN
/// (`false`); every target now saturates like Triton on NVIDIA.
#[test]
fn fuzz_seed_102_f16_nan_inf_to_i64() {
    let kernel = tl::jit("fuzz_seed_102", |k| {
        let in0 = k.ptr(F16, "in0");
        let out0 = k.ptr(Bool, "out0");
        let s0 = k.scalar(I32, "s0");
        let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
        let _mask = offs.lt(s0);
        let v0 = tl::load(in0 + offs);
        let v1 = v0.to(I64);
        let v2 = tl::full([16], 0.0, F16);
        let v3 = v1 + v2;
        let v4 = v3.eq(v2);
        tl::store(out0 + offs, tl::broadcast_to(v4, [16]));
    })
    .unwrap();
    Case::new(kernel, 1)
        .num_warps(1)
        .input(
            F16,
            16,
            &[
                (0, 0xbc00),
                (1, 0xbc00),
                (2, 0x8000),
                (3, 0xc000),
                (4, 0x4000),
                (5, 0x3c00),
                (6, 0x7c00),
                (7, 0xfc00),
                (8, 0x3c00),
                (9, 0xbc00),
                (10, 0x8000),
                (11, 0x7e00),
                (12, 0x4000),
                (13, 0x7c00),
                (14, 0xfc00),
                (15, 0x7c00),
            ],
        )
        .output(Bool, 16, 1.0)
        .scalar(1)
        .zero_sign_free()
        .assert_agree();
}

/// Fuzz seed 7 (CI budget run): `erf(NaN)` was -1.0 on the compiled CPU executor and
/// emulated Metal (the header's `tm_erf` clamped NaN to -4 first); the interpreter gives NaN.
#[test]
fn fuzz_seed_7_erf_of_nan() {
    let kernel = tl::jit("fuzz_seed_7", |k| {
        let in0 = k.ptr(F32, "in0");
        let out0 = k.ptr(F32, "out0");
        let offs = tl::program_id(0) * 4 + tl::arange(0, 4);
        let v0 = tl::load(in0 + offs);
        let v1 = tl::erf(v0);
        tl::store(out0 + offs, v1);
    })
    .unwrap();
    Case::new(kernel, 1)
        .num_warps(1)
        .input(
            F32,
            4,
            &[
                (0, 0x7fc00000),
                (1, 0xffffffff),
                (2, 0x7f800001),
                (3, 0xff800000),
            ],
        )
        .output(F32, 4, -7.25)
        .tolerance(0, 0..4, Tol::Ulps(4))
        .assert_agree();
}

/// Fuzz seed 1112 (long run): `erf(-1.1754944e-38)` (the smallest normal f32) was 23 ulp
/// off on the compiled CPU executor and emulated Metal: `tm_erf` computed `x * p / q`, whose
/// `x * p` is a subnormal with few bits left.
#[test]
fn fuzz_seed_1112_erf_of_tiny_values() {
    let kernel = tl::jit("fuzz_seed_1112", |k| {
        let in0 = k.ptr(F32, "in0");
        let out0 = k.ptr(F32, "out0");
        let offs = tl::program_id(0) * 4 + tl::arange(0, 4);
        let v0 = tl::load(in0 + offs);
        let v1 = tl::erf(v0);
        tl::store(out0 + offs, v1);
    })
    .unwrap();
    Case::new(kernel, 1)
        .num_warps(1)
        .input(
            F32,
            4,
            &[
                (0, 0x80800000),
                (1, 0x00800000),
                (2, 0x00000001),
                (3, 0x80123456),
            ],
        )
        .output(F32, 4, f64::NAN)
        .tolerance(0, 0..4, Tol::Ulps(4))
        .assert_agree();
}

/// Fuzz seed 90086 (long run on a 16-core host, 2026-11-25): an f16 signalling NaN (0x7c90)
/// loaded and bitcast to u16 came out quieted (0x7e90) on the interpreter, which holds f16
/// values as f32; loads, stores and bitcasts move bits, so every target now gives 0x7c90.
/// The bf16 twin and NaNs of both signs are checked too.
#[test]
fn fuzz_seed_90086_f16_signalling_nan_bitcast() {
    for dt in [F16, BF16] {
        let kernel = tl::jit("fuzz_seed_90086", move |k| {
            let in0 = k.ptr(dt, "in0");
            let out0 = k.ptr(U16, "out0");
            let out1 = k.ptr(dt, "out1");
            let offs = tl::arange(0, 8);
            let v0 = tl::load(in0 + offs);
            tl::store(out0 + offs, v0.bitcast(U16));
            tl::store(out1 + offs, v0);
        })
        .unwrap();
        let nans: &[(usize, u64)] = if dt == F16 {
            &[(1, 0x7d00), (5, 0x7c90), (6, 0xfc01), (7, 0xfe7f)]
        } else {
            &[(1, 0x7f81), (5, 0x7f90), (6, 0xff81), (7, 0xffc1)]
        };
        Case::new(kernel, 1)
            .num_warps(1)
            .input(dt, 8, nans)
            .output(U16, 8, 90.0)
            .output(dt, 8, 90.0)
            .assert_agree();
    }
}

/// Fuzz seed 60105 (16-core run, 2026-11-25): a `[1, 1]` reduce with a combine function in
/// one program, then a `[1, 8]` store in the next; on emulated Metal in forward lane order
/// elements 4..7 of the store were left unwritten.
#[test]
fn fuzz_seed_60105_store_after_a_one_element_custom_reduce() {
    let kernel = tl::jit("fuzz_seed_60105", |k| {
        let out0 = k.ptr(F32, "out0");
        let out1 = k.ptr(I32, "out1");
        {
            let offs = tl::program_id(0) + tl::arange(0, 1);
            let offs = offs.col() + tl::arange(0, 1).row();
            let v0 = tl::full([1, 1], 0.0, F32);
            let v1 = tl::reduce(v0, tl::keep_dims(0), |a: Tensor, b: Tensor| {
                tl::maximum(a, b)
            });
            tl::store(out0 + offs, tl::rsqrt(v1));
        }
        {
            let offs = (tl::program_id(0) * 8 + tl::arange(0, 1)).col() + tl::arange(0, 8).row();
            tl::store(out1 + offs, tl::full([1, 8], 0i64, I32));
        }
    })
    .unwrap();
    Case::new(kernel, 1)
        .num_warps(1)
        .output(F32, 1, -7.25)
        .output(I32, 8, 90.0)
        .expect(0, vec![f32::INFINITY.to_bits() as u64])
        .expect(1, vec![0; 8])
        .assert_agree();
}

/// The values of one dtype's tiles in `fuzz_seed_80079_sum_of_negative_zeros`: a `[4, 256]`
/// tile whose columns from `s0` on are masked (`other = -0.0`), then a `[4, 8]` tile.
/// Row 0 is all -0.0; row 1 has one +0.0; row 2 has 1.0 and -1.0 (an exact +0.0); row 3
/// has a +0.0 only where it is masked. Columns 200.. hold +0.0 in memory, masked away.
fn signed_zero_tiles() -> Vec<f64> {
    let mut v = vec![-0.0; 4 * 256 + 32];
    for r in 0..4 {
        for c in 200..256 {
            v[r * 256 + c] = 0.0;
        }
    }
    v[256 + 7] = 0.0;
    v[512 + 3] = 1.0;
    v[512 + 100] = -1.0;
    v[768 + 230] = 0.0;
    // [4, 8]: column 1 has a +0.0, column 2 sums 1.0 - 1.0, the rest are -0.0.
    v[1024 + 8 + 1] = 0.0;
    v[1024 + 2] = 1.0;
    v[1024 + 24 + 2] = -1.0;
    v
}

/// What Triton computes (IEEE addition, -0.0 + -0.0 = -0.0, exact here in any order):
/// the outputs of `fuzz_seed_80079_sum_of_negative_zeros` for one dtype.
fn signed_zero_sums(x: &[f64], s0: usize) -> Vec<f64> {
    let a = |r: usize, c: usize| if c < s0 { x[r * 256 + c] } else { -0.0 };
    let b = |r: usize, c: usize| x[1024 + r * 8 + c];
    let sum = |it: &mut dyn Iterator<Item = f64>| it.fold(-0.0, |s, v| s + v);
    let mut o = Vec::new();
    o.extend((0..4).map(|r| sum(&mut (0..256).map(|c| a(r, c)))));
    o.extend((0..256).map(|c| sum(&mut (0..4).map(|r| a(r, c)))));
    for r in 0..4 {
        let mut run = a(r, 0);
        o.push(run);
        for c in 1..256 {
            run += a(r, c);
            o.push(run);
        }
    }
    o.push(sum(&mut (0..1024).map(|i| a(i / 256, i % 256))));
    o.extend((0..4).map(|r| sum(&mut (0..8).map(|c| b(r, c)))));
    o.extend((0..8).map(|c| sum(&mut (0..4).map(|r| b(r, c)))));
    let mut cum = vec![0.0; 32];
    for c in 0..8 {
        cum[c] = b(0, c);
        for r in 1..4 {
            cum[r * 8 + c] = cum[(r - 1) * 8 + c] + b(r, c);
        }
    }
    o.extend(cum);
    o
}

/// Fuzz seed 80079 (16-core run, 2026-11-25): the sum of `-0.0`s. The interpreter and the
/// GPU paths started sums from +0.0 (and Metal's `simd_sum` may add into +0.0), so `sum` of
/// `[-0.0]` was +0.0; Triton on an H100 gives -0.0, IEEE's answer. -0.0 is the identity of
/// float addition on every target now: sums along rows and columns and of everything, and
/// `cumsum`, of f32, f16 and bf16 tiles with masked elements, wide rows (staged through
/// threadgroup memory, `simd_sum` in the COALESCED layout) and tiles smaller than the
/// program (idle threads), under every reduction layout.
#[test]
fn fuzz_seed_80079_sum_of_negative_zeros() {
    let kernel = || {
        tl::jit("fuzz_seed_80079", |k| {
            let ins: Vec<_> = [F32, F16, BF16]
                .into_iter()
                .map(|d| k.ptr(d, &format!("x_{d}")))
                .collect();
            let outs: Vec<_> = [F32, F16, BF16]
                .into_iter()
                .map(|d| k.ptr(d, &format!("out_{d}")))
                .collect();
            let s0 = k.scalar(I32, "s0");
            for (x, o) in ins.into_iter().zip(outs) {
                let (r4, c256, c8) = (tl::arange(0, 4), tl::arange(0, 256), tl::arange(0, 8));
                let offs = r4.col() * 256 + c256.row();
                let a = tl::load(x + offs).mask(c256.row().lt(s0)).other(-0.0);
                tl::store(o + r4, tl::sum(a, 1));
                tl::store(o + 4 + c256, tl::sum(a, 0));
                tl::store(o + 260 + offs, tl::cumsum(a, 1));
                tl::store(
                    o + 1284 + tl::arange(0, 1),
                    tl::broadcast_to(tl::sum(a, None), [1]),
                );
                let small = r4.col() * 8 + c8.row();
                let b = tl::load(x + 1024 + small);
                tl::store(o + 1285 + r4, tl::sum(b, 1));
                tl::store(o + 1289 + c8, tl::sum(b, 0));
                tl::store(o + 1297 + small, tl::cumsum(b, 0));
            }
        })
        .unwrap()
    };
    let s0 = 200;
    let x = signed_zero_tiles();
    let want = signed_zero_sums(&x, s0);
    assert_eq!(
        want[0].to_bits(),
        (-0.0f64).to_bits(),
        "row 0 of the reference"
    );
    let one_warp = [ReductionLayout::Coalesced, ReductionLayout::Default];
    for layout in ReductionLayout::ALL {
        for warps in [1, 4] {
            if warps == 1 && !one_warp.contains(&layout) {
                continue;
            }
            let mut case = Case::new(kernel(), 1).num_warps(warps).layout(layout);
            for d in [F32, F16, BF16] {
                case = case.input_bits(d, x.iter().map(|&v| fuzz::float_bits(d, v)).collect());
            }
            for (k, d) in [F32, F16, BF16].into_iter().enumerate() {
                let bits = want.iter().map(|&v| fuzz::float_bits(d, v)).collect();
                case = case.output(d, want.len(), 90.0).expect(k, bits);
            }
            case.scalar(s0 as i32).assert_agree();
        }
    }
}

/// Fuzz seed 300009 (16-core run at 3eb3363): `acosh` of values at or below 0 (here
/// -1336577.0) was finite on the interpreter, whose `f64` `acosh` (musl's, through `libm`)
/// drops the sign; NaN below 1 on every target now, as C99 and CUDA's `acoshf` give.
#[test]
fn fuzz_seed_300009_acosh_below_one() {
    let kernel = tl::jit("fuzz_seed_300009", |k| {
        let in0 = k.ptr(F32, "in0");
        let out0 = k.ptr(F32, "out0");
        let offs = tl::program_id(0) * 1024 + tl::arange(0, 1024);
        let v0 = tl::load(in0 + offs);
        let v1 = tl::libdevice::acosh(v0);
        tl::store(out0 + offs, v1);
    })
    .unwrap();
    let inputs: Vec<(usize, u64)> = [
        0x0080_0000u64, // smallest normal
        0xc040_0000,    // -3.0
        0x8000_0001,    // -smallest subnormal
        0x437f_8000,    // 255.0
        0x3cf7_7b69,
        0xbf80_0000, // -1.0
        0xc9a3_1708, // -1336577.0
        0xbb79_2de1,
        0xbfc0_0000, // -1.5
        0x8000_0000, // -0.0
        0x3f80_0000, // 1.0
        0x7f80_0000, // inf
        0xff80_0000, // -inf
    ]
    .into_iter()
    .enumerate()
    .map(|(i, b)| (900 + i, b))
    .collect();
    Case::new(kernel, 1)
        .num_warps(1)
        .input(F32, 1024, &inputs)
        .output(F32, 1024, f64::NAN)
        .tolerance(0, 0..1024, Tol::Ulps(4))
        .assert_agree();
}

/// Fuzz seed 250118 (16-core run at 3eb3363): `maximum_nan` of an f16 NaN, bitcast to bf16
/// and reduced by `argmin`. The interpreter returned Rust's default NaN (`0x7e00` in f16),
/// the generated code the NaN operand (`0xfc84`, quieted to `0xfe84`): different bf16
/// values after the bitcast, so different minima. Every target now returns the canonical
/// NaN of PTX's `max.NaN` (`0x7fff`).
#[test]
fn fuzz_seed_250118_nan_of_maximum_nan() {
    let kernel = tl::jit("fuzz_seed_250118", |k| {
        let in0 = k.ptr(F16, "in0");
        let out0 = k.ptr(I32, "out0");
        let out1 = k.ptr(U16, "out1");
        let rows = tl::program_id(0) * 16 + tl::arange(0, 16);
        let cols = tl::arange(0, 16);
        let offs = rows.col() * 16 + cols.row();
        let v0 = tl::full([16, 16], 0.0, F16);
        let v1 = tl::load(in0 + offs);
        let v2 = tl::maximum_nan(v1, v0);
        let v3 = tl::minimum_nan(v0, v1);
        let v4 = v2.bitcast(BF16);
        tl::store(
            out0 + offs,
            tl::broadcast_to(tl::argmin(v4, tl::keep_dims(1)), [16, 16]),
        );
        tl::store(out1 + offs, v3.bitcast(U16));
    })
    .unwrap();
    let nan = 0x7fffu64;
    let want: Vec<u64> = (0..256)
        .map(|i| match i {
            212 | 214 | 215 => nan,
            213 => 0x8400,
            _ => 0,
        })
        .collect();
    Case::new(kernel, 1)
        .num_warps(1)
        .input(
            F16,
            256,
            &[(212, 0xfc84), (213, 0x8400), (214, 0x7c01), (215, 0xfe00)],
        )
        .output(I32, 256, 77.0)
        .output(U16, 256, 77.0)
        .expect(1, want)
        .assert_agree();
}

/// Fuzz seed 710112 (16-core run at 38420a9): `atomic_min` of -0.0 into an f32 output
/// filled with +0.0 left -0.0 on the compiled CPU executor and +0.0 on the interpreter
/// (`fminf` and Rust's `f32::min` order the zeros differently). Every target now orders
/// float atomic max/min as Triton does, by IEEE totalOrder (-0.0 below +0.0, NaN by sign:
/// README, "One semantics"), so the minimum is -0.0 and the maximum +0.0; the operands of
/// the shared tile also race between programs.
#[test]
fn fuzz_seed_710112_atomic_min_of_negative_zero() {
    let kernel = tl::jit("fuzz_seed_710112", |k| {
        let in0 = k.ptr(F32, "in0");
        let out0 = k.ptr(F32, "out0");
        let out1 = k.ptr(F32, "out1");
        let cols = tl::arange(0, 64);
        let v0 = tl::full([64], -0.0, F32);
        let _ = tl::atomic_min(out0 + cols, v0);
        let v1 = tl::load(in0 + tl::program_id(0) * 64 + cols);
        let _ = tl::atomic_max(out1 + cols, v1);
    })
    .unwrap();
    // Program 0 offers -0.0 and program 1 +0.0 at even elements, the other way round at
    // odd ones; element 5 also sees a -NaN (below everything) and element 6 a +NaN.
    let mut inputs = Vec::new();
    for i in 0..64usize {
        let (a, b) = if i % 2 == 0 {
            (0x8000_0000u64, 0)
        } else {
            (0, 0x8000_0000)
        };
        inputs.push((i, a));
        inputs.push((64 + i, b));
    }
    inputs[10] = (5, 0xffc0_0000);
    inputs[12] = (6, 0x7fc0_0000);
    let mut max = vec![0u64; 64];
    max[6] = 0x7fc0_0000;
    Case::new(kernel, 2)
        .num_warps(2)
        .input(F32, 128, &inputs)
        .output(F32, 64, 0.0)
        .output(F32, 64, 0.0)
        .expect(0, vec![0x8000_0000; 64])
        .expect(1, max)
        .assert_agree();
}

/// Fuzz seed 980051 (16-core run at d7e39de): `pow` of a signalling NaN (0x7f8dc304) to the
/// power 0 was NaN on the compiled CPU executor and emulated Metal (the host's `powf`
/// returns NaN for a signalling NaN) and 1.0 on the interpreter. C99 makes `pow(x, ±0)` and
/// `pow(+1, y)` 1 for any `x` and `y`, and Triton 3.6 on an H100 gives 1.0 for signalling
/// and quiet NaNs alike (measured 2026-11-25); every target now does.
#[test]
fn fuzz_seed_980051_pow_of_signalling_nan() {
    let kernel = tl::jit("fuzz_seed_980051", |k| {
        let in0 = k.ptr(F32, "in0");
        let in1 = k.ptr(F32, "in1");
        let out0 = k.ptr(F32, "out0");
        let offs = tl::program_id(0) * 8 + tl::arange(0, 8);
        let v2 = tl::libdevice::pow(tl::load(in0 + offs), tl::load(in1 + offs));
        tl::store(out0 + offs, v2);
    })
    .unwrap();
    let (snan, qnan, one) = (0x7f8d_c304u64, 0x7fc0_0000u64, 0x3f80_0000u64);
    Case::new(kernel, 1)
        .num_warps(1)
        .input(
            F32,
            8,
            &[
                (0, snan),
                (1, snan),
                (2, qnan),
                (3, one),
                (4, one),
                (5, 0xff8d_c304),
                (6, one),
            ],
        )
        .input(
            F32,
            8,
            &[
                (1, 0x8000_0000),
                (3, snan),
                (4, qnan),
                (6, 0xff8d_c304),
                (7, snan),
            ],
        )
        .output(F32, 8, 77.0)
        .tolerance(0, 0..8, Tol::Ulps(4))
        .expect(0, vec![one, one, one, one, one, one, one, qnan])
        .assert_agree();
}
