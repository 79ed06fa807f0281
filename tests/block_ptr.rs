//! Block pointers (`make_block_ptr`, `advance`, `load`/`store` with `boundary_check` and
//! `padding_option`) and tensor descriptors (`make_tensor_descriptor`, `desc.load`,
//! `desc.store`), written as a user would and run on every target against references
//! computed here: ragged shapes, padded and column-major strides, negative offsets, both
//! `order`s, edge values, poisoned outputs; and the build errors for bad arguments. The
//! reference model here is the one `benches/gpu/block_ptr_probe.py` compared with Triton 3.6
//! on an H100 (benches/README.md): block pointers agree in every case, descriptor loads too.

mod support;

use support::every_target;

use triton_metal::runtime::{out, Target};
use triton_metal::tl;
use triton_metal::{jit, mlx, Array, DType, DType::*};

#[allow(dead_code)]
#[path = "../examples/persistent_matmul.rs"]
mod persistent_matmul;

const POISON: f64 = -777.0;

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Values with NaN, ±inf, ±0 and a subnormal among ordinary numbers.
fn values(n: usize, seed: u32) -> Vec<f32> {
    let edges = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MAX,
        -2.0,
        1e-40,
    ];
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(97));
            if h % 7 == 0 {
                edges[(h as usize / 7) % edges.len()]
            } else {
                ((h >> 8) % 2001) as f32 / 100.0 - 10.0
            }
        })
        .collect()
}

/// Finite values (for sums and products).
fn finite(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2246822519)
                .wrapping_add(seed.wrapping_mul(3266489917));
            ((h >> 9) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

const BM: usize = 8;
const BN: usize = 16;

/// A tensor of `m` x `n` in a buffer, with strides `(sm, sn)` in elements.
struct Strided {
    data: Vec<f32>,
    m: usize,
    n: usize,
    sm: usize,
    sn: usize,
}

impl Strided {
    fn at(&self, r: i64, c: i64) -> Option<f32> {
        let inside = (0..self.m as i64).contains(&r) && (0..self.n as i64).contains(&c);
        inside.then(|| self.data[r as usize * self.sm + c as usize * self.sn])
    }
}

/// Ragged 13 x 37 tiles through block pointers: one kernel loads every tile three ways
/// (`boundary_check=(0, 1)` with padding "zero", "nan" and Triton's default, the second
/// through a pointer made with `order=(0, 1)` and the checks listed as `(1, 0)`), writes
/// the whole tiles out, and copies the tensor into a wider output through a checked block
/// store (the columns past `n` keep their poison). Row-major with padded rows and
/// column-major layouts of the input run through the same kernel.
#[test]
fn block_ptr_tiles_ragged_and_strided() {
    let k = tl::jit("block_tiles", |k| {
        let x = k.ptr(F32, "x");
        let (tz, tn, t0, y) = (
            k.ptr(F32, "tiles_zero"),
            k.ptr(F32, "tiles_nan"),
            k.ptr(F32, "tiles_default"),
            k.ptr(F32, "y"),
        );
        let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
        let (sm, sn, ldy) = (
            k.scalar(I32, "sm"),
            k.scalar(I32, "sn"),
            k.scalar(I32, "ldy"),
        );
        let (p0, p1) = (tl::program_id(0), tl::program_id(1));
        let at = (p0 * BM as i64, p1 * BN as i64);
        let src = tl::make_block_ptr(x, (m, n), (sm, sn), at, [BM, BN], [1, 0]);
        let src_c = tl::make_block_ptr(x, (m, n), (sm, sn), at, [BM, BN], [0, 1]);
        let zero = tl::load_block(src, [0, 1], "zero");
        let nan = tl::load_block(src_c, [1, 0], "nan");
        let default = tl::load_block(src, [0, 1], "");
        let tile = (p0 * tl::num_programs(1) + p1) * (BM * BN) as i64;
        let idx = tl::arange(0, BM as i64).col() * BN as i64 + tl::arange(0, BN as i64).row();
        tl::store(tz + tile + idx, zero);
        tl::store(tn + tile + idx, nan);
        tl::store(t0 + tile + idx, default);
        let dst = tl::make_block_ptr(y, (m, n), (ldy, 1), at, [BM, BN], [1, 0]);
        tl::store_block(dst, nan, [0, 1]);
    })
    .unwrap();
    let (m, n) = (13usize, 37usize);
    let (g0, g1) = (m.div_ceil(BM), n.div_ceil(BN));
    let ldy = n + 3;
    let row_major = Strided {
        data: values(m * 40, 1),
        m,
        n,
        sm: 40,
        sn: 1,
    };
    let col_major = Strided {
        data: values(16 * n, 2),
        m,
        n,
        sm: 1,
        sn: 16,
    };
    for x in [row_major, col_major] {
        let xa = Array::from_slice(&x.data, &[x.data.len()]).unwrap();
        let tiles = g0 * g1 * BM * BN;
        let want_tiles = |pad: f32| -> Vec<f32> {
            let mut w = vec![];
            for t0 in 0..g0 {
                for t1 in 0..g1 {
                    for a in 0..BM {
                        for b in 0..BN {
                            let (r, c) = ((t0 * BM + a) as i64, (t1 * BN + b) as i64);
                            w.push(x.at(r, c).unwrap_or(pad));
                        }
                    }
                }
            }
            w
        };
        let mut want_y = vec![POISON as f32; m * ldy];
        for r in 0..m {
            for c in 0..n {
                want_y[r * ldy + c] = x.at(r as i64, c as i64).unwrap();
            }
        }
        for (t, o) in every_target(&k, |l| {
            l.grid([g0, g1]).args((
                &xa,
                out(&[tiles], F32).fill(POISON),
                out(&[tiles], F32).fill(POISON),
                out(&[tiles], F32).fill(POISON),
                out(&[m * ldy], F32).fill(POISON),
                m as i32,
                n as i32,
                x.sm as i32,
                x.sn as i32,
                ldy as i32,
            ))
        }) {
            let got: Vec<Vec<f32>> = o.iter().map(|a| a.to_vec::<f32>().unwrap()).collect();
            assert!(
                same_bits(&got[0], &want_tiles(0.0)),
                "{t:?} zero: {:?}",
                got[0]
            );
            assert!(same_bits(&got[1], &want_tiles(f32::NAN)), "{t:?} nan");
            // Triton leaves the default padding undefined; here it reads 0.
            assert!(same_bits(&got[2], &want_tiles(0.0)), "{t:?} default");
            assert!(same_bits(&got[3], &want_y), "{t:?} y: {:?}", got[3]);
        }
    }
}

/// Triton's block-pointer matmul (its tutorial's form, written with `#[jit]`): block
/// pointers advanced along K inside the loop, checked loads with zero padding, a checked
/// store; ragged M, N, K and a transposed (column-major) B.
#[jit]
fn block_ptr_matmul(
    a_ptr: Ptr<F32>,
    b_ptr: Ptr<F32>,
    c_ptr: Ptr<F32>,
    M: i32,
    N: i32,
    K: i32,
    stride_am: i32,
    stride_ak: i32,
    stride_bk: i32,
    stride_bn: i32,
    stride_cm: i32,
    stride_cn: i32,
    BLOCK_M: Constexpr,
    BLOCK_N: Constexpr,
    BLOCK_K: Constexpr,
) {
    let pid_m = tl::program_id(axis = 0);
    let pid_n = tl::program_id(axis = 1);
    let mut a_block_ptr = tl::make_block_ptr(
        base = a_ptr,
        shape = (M, K),
        strides = (stride_am, stride_ak),
        offsets = (pid_m * BLOCK_M, 0),
        block_shape = (BLOCK_M, BLOCK_K),
        order = (1, 0),
    );
    let mut b_block_ptr = tl::make_block_ptr(
        base = b_ptr,
        shape = (K, N),
        strides = (stride_bk, stride_bn),
        offsets = (0, pid_n * BLOCK_N),
        block_shape = (BLOCK_K, BLOCK_N),
        order = (0, 1),
    );
    let mut accumulator = tl::zeros((BLOCK_M, BLOCK_N), dtype = F32);
    for _k in tl::range(0, K, BLOCK_K) {
        let a = tl::load(
            a_block_ptr,
            boundary_check = (0, 1),
            padding_option = "zero",
        );
        let b = tl::load(
            b_block_ptr,
            boundary_check = (0, 1),
            padding_option = "zero",
        );
        accumulator = tl::dot(a, b, acc = accumulator);
        a_block_ptr = tl::advance(a_block_ptr, (0, BLOCK_K));
        b_block_ptr = tl::advance(base = b_block_ptr, offsets = (BLOCK_K, 0));
    }
    let c_block_ptr = tl::make_block_ptr(
        base = c_ptr,
        shape = (M, N),
        strides = (stride_cm, stride_cn),
        offsets = (pid_m * BLOCK_M, pid_n * BLOCK_N),
        block_shape = (BLOCK_M, BLOCK_N),
        order = (1, 0),
    );
    tl::store(c_block_ptr, accumulator, boundary_check = (0, 1));
}

#[test]
fn block_ptr_matmul_advances_in_a_loop() {
    let k = block_ptr_matmul().unwrap();
    let (m, n, kk) = (37usize, 29usize, 45usize);
    let a = finite(m * kk, 3);
    // B is K x N stored column-major: element (k, j) at j * K + k.
    let bt = finite(n * kk, 4);
    let ldc = n + 2;
    let mut want = vec![POISON; m * ldc];
    for i in 0..m {
        for j in 0..n {
            want[i * ldc + j] = (0..kk)
                .map(|q| a[i * kk + q] as f64 * bt[j * kk + q] as f64)
                .sum();
        }
    }
    let (aa, ba) = (
        Array::from_slice(&a, &[m * kk]).unwrap(),
        Array::from_slice(&bt, &[n * kk]).unwrap(),
    );
    let (bm, bn, bk) = (16usize, 16usize, 16usize);
    for (t, o) in every_target(&k, |l| {
        l.grid([m.div_ceil(bm), n.div_ceil(bn)])
            .args((
                &aa,
                &ba,
                out(&[m * ldc], F32).fill(POISON),
                m as i32,
                n as i32,
                kk as i32,
                kk as i32,
                1,
                1,
                kk as i32,
                ldc as i32,
                1,
            ))
            .constexpr("BLOCK_M", bm as i64)
            .constexpr("BLOCK_N", bn as i64)
            .constexpr("BLOCK_K", bk as i64)
    }) {
        let got = o[0].to_vec::<f32>().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tol = if *w == POISON {
                0.0
            } else {
                1e-4 * (1.0 + w.abs())
            };
            assert!(
                (*g as f64 - w).abs() <= tol,
                "{t:?}: c[{i}] = {g}, want {w}"
            );
        }
    }
}

/// 1-D block pointers of several dtypes: a negative offset (lanes below 0 read the
/// padding), `advance` by a negative and a positive amount, a check on the only dimension,
/// `i32` with zero padding, `f16` with NaN padding, and a `bool` block pointer (read as
/// `i8`, as in Triton; stored from `i8`).
#[test]
fn block_ptr_offsets_advance_and_dtypes() {
    let k = tl::jit("block_1d", |k| {
        let (xi, xh, xb) = (k.ptr(I32, "xi"), k.ptr(F16, "xh"), k.ptr(Bool, "xb"));
        let (oi, oh, ob, obo) = (
            k.ptr(I32, "oi"),
            k.ptr(F16, "oh"),
            k.ptr(I8, "ob"),
            k.ptr(Bool, "ob_out"),
        );
        let n = k.scalar(I32, "n");
        let lanes = tl::arange(0, 16);
        let pi = tl::make_block_ptr(xi, (n,), (1,), (-5,), [16], [0]);
        tl::store(oi + lanes, tl::load_block(pi, [0], "zero"));
        let pi = tl::advance(pi, (8,));
        tl::store(oi + 16 + lanes, tl::load_block(pi, [0], "zero"));
        let pi = tl::advance(pi, (-16,));
        tl::store(oi + 32 + lanes, tl::load_block(pi, [0], "zero"));
        let ph = tl::make_block_ptr(xh, (n,), (1,), (3,), [16], [0]);
        tl::store(oh + lanes, tl::load_block(ph, [0], "nan"));
        let pb = tl::make_block_ptr(xb, (n,), (1,), (0,), [16], [0]);
        let bits = tl::load_block(pb, [0], "zero");
        tl::store(ob + lanes, bits);
        let pbo = tl::make_block_ptr(obo, (n,), (1,), (0,), [16], [0]);
        tl::store_block(pbo, bits * 3, [0]);
    })
    .unwrap();
    let n = 10usize;
    let xi: Vec<i32> = (0..n as i32).map(|i| i * 7 - 20).collect();
    let xh: Vec<half::f16> = (0..n)
        .map(|i| half::f16::from_f32(i as f32 - 4.5))
        .collect();
    let xb: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
    let (ia, ha, ba) = (
        Array::from_slice(&xi, &[n]).unwrap(),
        Array::from_slice(&xh, &[n]).unwrap(),
        Array::from_slice(&xb, &[n]).unwrap(),
    );
    let window = |start: i64| -> Vec<Option<usize>> {
        (start..start + 16)
            .map(|i| (0..n as i64).contains(&i).then_some(i as usize))
            .collect()
    };
    let mut want_i = vec![];
    for s in [-5, 3, -13] {
        want_i.extend(window(s).iter().map(|i| i.map_or(0, |i| xi[i])));
    }
    let want_h: Vec<f32> = window(3)
        .iter()
        .map(|i| i.map_or(f32::NAN, |i| xh[i].to_f32()))
        .collect();
    let want_b: Vec<i8> = window(0)
        .iter()
        .map(|i| i.map_or(0, |i| xb[i] as i8))
        .collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([1]).args((
            &ia,
            &ha,
            &ba,
            out(&[48], I32).fill(POISON),
            out(&[16], F16).fill(POISON),
            out(&[16], I8).fill(-7.0),
            out(&[n], Bool),
            n as i32,
        ))
    }) {
        assert_eq!(o[0].to_vec::<i32>().unwrap(), want_i, "{t:?} i32");
        let h: Vec<f32> = o[1]
            .to_vec::<half::f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert!(same_bits(&h, &want_h), "{t:?} f16: {h:?}");
        assert_eq!(o[2].to_vec::<i8>().unwrap(), want_b, "{t:?} bool as i8");
        assert_eq!(o[3].to_vec::<bool>().unwrap(), xb, "{t:?} bool store");
    }
}

/// A block pointer without `boundary_check` is not guarded (Triton's rule): a block that
/// reaches before and past the buffer is an out-of-bounds access, reported on every target
/// that checks accesses (the emulator's schedules guard one edge of a buffer each).
#[test]
fn unchecked_block_ptr_access_is_reported() {
    let k = tl::jit("block_unchecked", |k| {
        let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
        let n = k.scalar(I32, "n");
        let p = tl::make_block_ptr(x, (n,), (1,), (-3,), [16], [0]);
        tl::store(y + tl::arange(0, 16), tl::load(p));
    })
    .unwrap();
    let x = Array::from_slice(&[1.0f32; 10], &[10]).unwrap();
    let launch = |t: Target| {
        k.launch()
            .grid([1])
            .args((&x, out(&[16], F32), 10))
            .target(t)
    };
    support::cuda_compiles(&launch(Target::Cuda)).unwrap();
    for t in support::targets(k.name()) {
        let e = match launch(t).run() {
            Err(e) => e,
            Ok(y) => y[0].eval().expect_err(&format!("{t:?}: a load outside x")),
        }
        .to_string();
        assert!(
            e.contains("block_unchecked") && e.contains("out of bounds"),
            "{t:?}: {e}"
        );
    }
}

/// Tensor descriptors of `dtype` over a ragged 13 x 37 tensor with padded rows: tiles read
/// at offsets shifted by (-3, -8) (so tiles straddle every edge, negative indices
/// included; the last dimension's shift is 16 bytes of either dtype, which an H100's TMA
/// requires) with zero and NaN padding, and a copy into a wider output through
/// `desc.store` (the out-of-bounds part of every tile dropped, the padding columns
/// keeping their poison).
fn descriptor_tiles(dtype: DType) {
    let k = tl::jit("desc_tiles", move |k| {
        let x = k.ptr(dtype, "x");
        let (tz, tn, y) = (
            k.ptr(dtype, "tiles_zero"),
            k.ptr(dtype, "tiles_nan"),
            k.ptr(dtype, "y"),
        );
        let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
        let (ldx, ldy) = (k.scalar(I32, "ldx"), k.scalar(I32, "ldy"));
        let (p0, p1) = (tl::program_id(0), tl::program_id(1));
        let dx = tl::make_tensor_descriptor(x, (m, n), (ldx, 1), [BM, BN]);
        let dn = tl::make_tensor_descriptor(x, [m, n], (ldx, 1), [BM, BN]).padding_option("nan");
        let dy = tl::make_tensor_descriptor(y, (m, n), (ldy, 1), [BM, BN]);
        let shifted = (p0 * BM as i64 - 3, p1 * BN as i64 - 8);
        let tile = (p0 * tl::num_programs(1) + p1) * (BM * BN) as i64;
        let idx = tl::arange(0, BM as i64).col() * BN as i64 + tl::arange(0, BN as i64).row();
        tl::store(tz + tile + idx, dx.load(shifted));
        tl::store(tn + tile + idx, dn.load(shifted));
        let at = (p0 * BM as i64, p1 * BN as i64);
        dy.store(at, dx.load(at));
    })
    .unwrap();
    let (m, n, ldx) = (13usize, 37usize, 40usize);
    let (g0, g1) = (m.div_ceil(BM) + 1, n.div_ceil(BN) + 1);
    let ldy = n + 3;
    let round = |v: f32| match dtype {
        F16 => half::f16::from_f32(v).to_f32(),
        _ => v,
    };
    let x = Strided {
        data: values(m * ldx, 5).into_iter().map(round).collect(),
        m,
        n,
        sm: ldx,
        sn: 1,
    };
    let xa = mlx::astype(&Array::from_slice(&x.data, &[x.data.len()]).unwrap(), dtype).unwrap();
    let tiles = g0 * g1 * BM * BN;
    let want_tiles = |pad: f32| -> Vec<f32> {
        let mut w = vec![];
        for t0 in 0..g0 {
            for t1 in 0..g1 {
                for a in 0..BM {
                    for b in 0..BN {
                        let r = (t0 * BM + a) as i64 - 3;
                        let c = (t1 * BN + b) as i64 - 8;
                        w.push(x.at(r, c).unwrap_or(pad));
                    }
                }
            }
        }
        w
    };
    let mut want_y = vec![POISON as f32; m * ldy];
    for r in 0..m {
        for c in 0..n {
            want_y[r * ldy + c] = x.at(r as i64, c as i64).unwrap();
        }
    }
    let poison = round(POISON as f32);
    want_y.iter_mut().for_each(|v| *v = round(*v));
    for (t, o) in every_target(&k, |l| {
        l.grid([g0, g1]).args((
            &xa,
            out(&[tiles], dtype).fill(POISON),
            out(&[tiles], dtype).fill(POISON),
            out(&[m * ldy], dtype).fill(POISON),
            m as i32,
            n as i32,
            ldx as i32,
            ldy as i32,
        ))
    }) {
        let got: Vec<Vec<f32>> = o
            .iter()
            .map(|a| mlx::astype(a, F32).unwrap().to_vec::<f32>().unwrap())
            .collect();
        assert!(same_bits(&got[0], &want_tiles(0.0)), "{t:?} {dtype:?} zero");
        assert!(
            same_bits(&got[1], &want_tiles(f32::NAN)),
            "{t:?} {dtype:?} nan"
        );
        assert!(same_bits(&got[2], &want_y), "{t:?} {dtype:?} y");
        assert!(got[2].contains(&poison));
    }
}

#[test]
fn descriptor_tiles_f32() {
    descriptor_tiles(F32);
}

#[test]
fn descriptor_tiles_f16() {
    descriptor_tiles(F16);
}

/// The kernels of the `persistent_matmul` example (which runs itself on the other targets in
/// `tests/examples.rs`) compile as CUDA with NVRTC, descriptors and split epilogue included.
#[test]
fn persistent_matmul_kernels_compile_as_cuda() {
    let a = Array::from_slice(&[half::f16::ZERO; 64 * 64], &[64, 64]).unwrap();
    let k = persistent_matmul::matmul_kernel_persistent().unwrap();
    let l = k
        .launch()
        .grid([4])
        .args((&a, &a, out(&[64, 64], F16), 64, 64, 64, 64, 1, 1, 64, 64, 1))
        .constexpr("BLOCK_SIZE_M", 64)
        .constexpr("BLOCK_SIZE_N", 64)
        .constexpr("BLOCK_SIZE_K", 32)
        .constexpr("GROUP_SIZE_M", 8)
        .target(Target::Cuda);
    support::cuda_compiles(&l).unwrap();
    let k = persistent_matmul::matmul_kernel_descriptor_persistent().unwrap();
    for subtile in [0, 1] {
        let l = k
            .launch()
            .grid([4])
            .args((&a, &a, out(&[64, 64], F16), 64, 64, 64))
            .constexpr("BLOCK_SIZE_M", 64)
            .constexpr("BLOCK_SIZE_N", 64)
            .constexpr("BLOCK_SIZE_K", 32)
            .constexpr("GROUP_SIZE_M", 8)
            .constexpr("EPILOGUE_SUBTILE", subtile)
            .target(Target::Cuda);
        support::cuda_compiles(&l).unwrap();
    }
}

// ---- errors -------------------------------------------------------------------------------

/// The build error of a kernel whose body is `body`, which must name the kernel, `op`,
/// this file and `line`, and contain each of `parts`.
fn build_error(
    body: impl Fn(&mut tl::KernelBuilder) + Send + Sync + 'static,
    op: &str,
    line: u32,
    parts: &[&str],
) {
    let e = tl::jit("bad_block", move |k| body(k))
        .and_then(|k| k.specialize_with(&[]).map(|_| ()))
        .expect_err("the kernel must not build")
        .to_string();
    let at = format!("{}:{line}:", file!());
    assert!(
        e.contains("kernel `bad_block`") && e.contains(&format!("op `{op}`")) && e.contains(&at),
        "{e} (want op {op} at {at})"
    );
    for p in parts {
        assert!(e.contains(p), "{e} (want {p:?})");
    }
}

#[test]
fn bad_block_ptr_arguments_are_build_errors() {
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_block_ptr(x, (8, 8), (8, 1), (0,), [8, 8], [1, 0]);
        },
        "make_block_ptr",
        line!() - 3,
        &["`offsets` has 1 entries", "`block_shape` has 2"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 6], [1, 0]);
        },
        "make_block_ptr",
        line!() - 3,
        &["`block_shape`", "powers of 2"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 1]);
        },
        "make_block_ptr",
        line!() - 3,
        &["`order` must be a permutation"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let o = k.scalar(I64, "o");
            tl::make_block_ptr(x, (8, 8), (8, 1), (o, 0), [8, 8], [1, 0]);
        },
        "make_block_ptr",
        line!() - 3,
        &["`offsets[0]`", "32-bit", ".to(I32)"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_block_ptr(x, (8, 8.5), (8, 1), (0, 0), [8, 8], [1, 0]);
        },
        "make_block_ptr",
        line!() - 3,
        &["`shape[1]` must be an integer"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x + tl::arange(0, 8), (8,), (1,), (0,), [8], [0]);
            tl::load(p);
        },
        "make_block_ptr",
        line!() - 4,
        &["`base` must be a pointer (not a block of pointers)"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::load_block(p, [0, 2], "zero");
        },
        "load",
        line!() - 3,
        &["`boundary_check` names dimension 2", "dimensions 0..2"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::load_block(p, [1, 1], "zero");
        },
        "load",
        line!() - 3,
        &["dimension 1 twice"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::load_block(p, [0], "zeros");
        },
        "load",
        line!() - 3,
        &["`padding_option` must be \"zero\" or \"nan\", got \"zeros\""],
    );
    build_error(
        |k| {
            let x = k.ptr(I32, "x");
            let p = tl::make_block_ptr(x, (8,), (1,), (0,), [8], [0]);
            tl::load_block(p, [0], "nan");
        },
        "load",
        line!() - 3,
        &["\"nan\" is not supported for I32"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::advance(p, (8,));
        },
        "advance",
        line!() - 3,
        &["`offsets` has 1 entries but the block pointer has 2 dimensions"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::load(p).mask(true);
        },
        "load",
        line!() - 3,
        &["`mask` and `other` cannot be given", "boundary_check"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::store(p, 1.0).mask(false);
        },
        "store",
        line!() - 3,
        &["`mask` and `other` cannot be given"],
    );
    build_error(
        |k| {
            let x = k.ptr(F16, "x");
            let p = tl::make_block_ptr(x, (8,), (1,), (0,), [8], [0]);
            tl::store_block(p, tl::zeros([8], F32), [0]);
        },
        "store",
        line!() - 3,
        &["dtype F32 differs", "F16"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let p = tl::make_block_ptr(x, (8, 8), (8, 1), (0, 0), [8, 8], [1, 0]);
            tl::store(p, tl::zeros([1, 8], F32));
        },
        "store",
        line!() - 3,
        &["shape [1, 8] differs from the block shape [8, 8]"],
    );
}

/// A block pointer's block shape is part of its type: branches and loops that would change
/// it are build errors (as in Triton), with the same rank or not; keeping it is fine.
#[test]
fn block_shape_changes_through_branches_and_loops_are_build_errors() {
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let c = k.scalar(I32, "c");
            let p = tl::if_(
                c.gt(0),
                || tl::make_block_ptr(x, (64, 64), (64, 1), (0, 0), [16, 16], [1, 0]),
                || tl::make_block_ptr(x, (64, 64), (64, 1), (0, 0), [16, 32], [1, 0]),
            );
            tl::load(p);
        },
        "if",
        line!() - 8,
        &[
            "else branch",
            "block_shape [16, 32]",
            "then branch yields a block pointer of block_shape [16, 16]",
        ],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let n = k.scalar(I32, "n");
            let p = tl::make_block_ptr(x, (64, 64), (64, 1), (0, 0), [16, 16], [1, 0]);
            let p = tl::range(0, n, 1).fold(p, |_, _| {
                tl::make_block_ptr(x, (64, 64), (64, 1), (0, 0), [32, 16], [1, 0])
            });
            tl::load(p);
        },
        "for",
        line!() - 6,
        &[
            "loop-carried values",
            "block_shape [32, 16]",
            "loop starts with a block pointer of block_shape [16, 16]",
        ],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let n = k.scalar(I32, "n");
            let p = tl::make_block_ptr(x, (64,), (1,), (0,), [16], [0]);
            let (p, _) = tl::while_loop(
                (p, n),
                |(_, i)| i.gt(0),
                |(_, i)| (tl::make_block_ptr(x, (64,), (1,), (0,), [8], [0]), i - 1),
            );
            tl::load(p);
        },
        "while",
        line!() - 8,
        &["block_shape [8]", "block_shape [16]"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let c = k.scalar(I32, "c");
            let d = tl::make_tensor_descriptor(x, (64, 64), (64, 1), [16, 16]);
            let e =
                tl::make_tensor_descriptor(x, (64, 64), (64, 1), [16, 16]).padding_option("nan");
            let d = tl::if_(c.gt(0), || d, || e);
            d.load((0, 0));
        },
        "if",
        line!() - 4,
        &["tensor descriptor of block_shape [16, 16] padded with NaN"],
    );
    // The same block shape through a branch and a loop builds.
    tl::jit("same_block", |k| {
        let x = k.ptr(F32, "x");
        let c = k.scalar(I32, "c");
        let p = tl::if_(
            c.gt(0),
            || tl::make_block_ptr(x, (64, 64), (64, 1), (0, 0), [16, 16], [1, 0]),
            || tl::make_block_ptr(x, (64, 64), (64, 1), (16, 0), [16, 16], [0, 1]),
        );
        let p = tl::range(0, c, 1).fold(p, |_, p| tl::advance(p, (0, 16)));
        tl::load(p);
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap();
}

#[jit]
fn branch_block_shapes(x_ptr: Ptr<F32>, y_ptr: Ptr<F32>, c: i32) {
    let mut p = tl::make_block_ptr(
        base = x_ptr,
        shape = (64, 64),
        strides = (64, 1),
        offsets = (0, 0),
        block_shape = (16, 16),
        order = (1, 0),
    );
    if c > 0 {
        p = tl::make_block_ptr(
            base = x_ptr,
            shape = (64, 64),
            strides = (64, 1),
            offsets = (0, 0),
            block_shape = (16, 32),
            order = (1, 0),
        );
    }
    let q = tl::make_block_ptr(
        base = y_ptr,
        shape = (64, 64),
        strides = (64, 1),
        offsets = (0, 0),
        block_shape = (16, 16),
        order = (1, 0),
    );
    tl::store(q, tl::load(p));
}

#[test]
fn jit_branch_changing_a_block_shape_is_a_build_error() {
    let e = branch_block_shapes()
        .and_then(|k| k.specialize_with(&[]).map(|_| ()))
        .expect_err("the kernel must not build")
        .to_string();
    assert!(
        e.contains("kernel `branch_block_shapes`")
            && e.contains("op `if`")
            && e.contains(file!())
            && e.contains("block_shape [16, 32]")
            && e.contains("block_shape [16, 16]"),
        "{e}"
    );
}

#[test]
fn bad_descriptor_arguments_are_build_errors() {
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let n = k.scalar(I32, "n");
            tl::make_tensor_descriptor(x, (8, 8), (n, n), [8, 8]);
        },
        "make_tensor_descriptor",
        line!() - 3,
        &["last stride must be the constant 1", "run time"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_tensor_descriptor(x, (8, 8), (8, 1), [8, 2]);
        },
        "make_tensor_descriptor",
        line!() - 3,
        &["at least 16 bytes", "2 * 4 = 8 bytes"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_tensor_descriptor(x, (8, 8), (6, 1), [8, 8]);
        },
        "make_tensor_descriptor",
        line!() - 3,
        &["`strides[0]` = 6", "multiple of 16 bytes"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let (shape, strides) = ((2, 2, 2, 2, 2, 8), (1, 1, 1, 1, 8, 1));
            tl::make_tensor_descriptor(x, shape, strides, [1, 1, 1, 1, 1, 8]);
        },
        "make_tensor_descriptor",
        line!() - 3,
        &["1 to 5"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            tl::make_tensor_descriptor(x, (8, 8), (8, 1), [8]);
        },
        "make_tensor_descriptor",
        line!() - 3,
        &["`block_shape` has 1 entries but `shape` has 2"],
    );
    build_error(
        |k| {
            let x = k.ptr(I32, "x");
            tl::make_tensor_descriptor(x, (8, 8), (8, 1), [8, 8]).padding_option("nan");
        },
        "make_tensor_descriptor",
        line!() - 3,
        &["\"nan\" is not supported for I32"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let d = tl::make_tensor_descriptor(x, (8, 8), (8, 1), [8, 8]);
            d.load((0,));
        },
        "descriptor_load",
        line!() - 3,
        &["expected 2 offsets", "got 1"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let d = tl::make_tensor_descriptor(x, (8, 8), (8, 1), [8, 8]);
            d.store((0, 0), 1.0);
        },
        "descriptor_store",
        line!() - 3,
        &["must be a block of shape [8, 8]"],
    );
    build_error(
        |k| {
            let x = k.ptr(F32, "x");
            let d = tl::make_tensor_descriptor(x, (8, 8), (8, 1), [8, 8]);
            d.load((0, 0)).other(1.0);
        },
        "load",
        line!() - 3,
        &["`mask` and `other` cannot be given"],
    );
}
