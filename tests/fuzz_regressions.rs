//! Kernels the differential fuzzer (src/fuzz, FUZZING.md) found disagreeing between
//! targets, shrunk and printed by it, each run on every target (interpreter, compiled CPU,
//! emulated Metal in both lane orders, NVRTC) through `fuzz::Case`, which fails while any
//! target differs from the interpreter.

use triton_metal::fuzz::{Case, Tol};
use triton_metal::tl;
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
