//! Executor tests: DSL kernels run on byte buffers and checked against f64 references, with
//! ragged sizes (masks), poisoned outputs and Triton's semantic rules.

use std::collections::BTreeMap;

use half::{bf16, f16};

use super::{execute, ExecArg};
use crate::dtype::DType::{self, *};
use crate::error::Error;
use crate::ir::Kernel;
use crate::tl::{self, *};

/// Numbers whose every bit pattern is valid (so byte views both ways are sound).
trait Plain: Copy + Default + std::fmt::Debug {}
impl Plain for i8 {}
impl Plain for i16 {}
impl Plain for i32 {}
impl Plain for i64 {}
impl Plain for u8 {}
impl Plain for u16 {}
impl Plain for u32 {}
impl Plain for u64 {}
impl Plain for f16 {}
impl Plain for bf16 {}
impl Plain for f32 {}
impl Plain for f64 {}

fn bytes<T: Plain>(v: &[T]) -> &[u8] {
    // SAFETY: `Plain` types have no padding; the view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn bytes_mut<T: Plain>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as above, and every byte pattern is a valid `Plain` value.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

fn kernel(name: &str, cx: &[(&str, i64)], f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    let m: BTreeMap<String, i64> = cx.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    match tl::build(name, &m, f) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    }
}

/// Deterministic pseudo-random floats in [-2, 2).
fn randf(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

const POISON: f32 = -1234.5;

fn close(got: f32, want: f64, tol: f64) -> bool {
    (got as f64 - want).abs() <= tol * (1.0 + want.abs())
}

#[test]
fn vector_add_ragged_with_poisoned_tail() {
    let k = kernel("add_kernel", &[("BLOCK_SIZE", 256)], |k| {
        let (x_ptr, y_ptr, out_ptr) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "y_ptr"), k.ptr(F32, "out"));
        let n = k.scalar(I32, "n_elements");
        let block = k.constexpr("BLOCK_SIZE");
        let offsets = program_id(0) * block + arange(0, block);
        let mask = offsets.lt(n);
        let x = load(x_ptr + offsets).mask(mask);
        let y = load(y_ptr + offsets).mask(mask);
        store(out_ptr + offsets, x + y).mask(mask);
    });
    for n in [1usize, 255, 256, 1000, 4097] {
        let (x, y) = (randf(n, 1), randf(n, 2));
        // The output is longer than n: the tail must stay poisoned.
        let mut out = vec![POISON; n + 300];
        execute(
            &k,
            [n.div_ceil(256), 1, 1],
            &mut [
                bytes(&x).into(),
                bytes(&y).into(),
                bytes_mut(&mut out).into(),
                (n as i32).into(),
            ],
        )
        .unwrap();
        for i in 0..n {
            assert_eq!(out[i], x[i] + y[i], "n={n} i={i}");
        }
        assert!(out[n..].iter().all(|&v| v == POISON), "n={n}: tail written");
    }
}

fn softmax_kernel(dtype: DType) -> Kernel {
    kernel("softmax", &[("BLOCK", 128)], |k| {
        let (out, inp) = (k.ptr(dtype, "out"), k.ptr(dtype, "inp"));
        let (stride, ncols) = (k.scalar(I32, "stride"), k.scalar(I32, "n_cols"));
        let block = k.constexpr("BLOCK");
        let row = program_id(0);
        let cols = arange(0, block);
        let mask = cols.lt(ncols);
        let x = load(inp + row * stride + cols)
            .mask(mask)
            .other(f32::NEG_INFINITY)
            .to(F32);
        let z = x - max(x, 0);
        let num = exp(z);
        let den = sum(num, 0);
        store(out + row * stride + cols, (num / den).to(dtype)).mask(mask);
    })
}

#[test]
fn softmax_rows_match_reference() {
    let k = softmax_kernel(F32);
    let (rows, cols, stride) = (37usize, 100usize, 103usize);
    let x = randf(rows * stride, 3);
    let mut out = vec![POISON; rows * stride];
    execute(
        &k,
        [rows, 1, 1],
        &mut [
            bytes_mut(&mut out).into(),
            bytes(&x).into(),
            (stride as i32).into(),
            (cols as i32).into(),
        ],
    )
    .unwrap();
    for r in 0..rows {
        let row = &x[r * stride..r * stride + cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let den: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
        for c in 0..stride {
            let got = out[r * stride + c];
            if c < cols {
                let want = (row[c] as f64 - m).exp() / den;
                assert!(close(got, want, 1e-5), "({r},{c}): {got} vs {want}");
            } else {
                assert_eq!(got, POISON);
            }
        }
    }
}

#[test]
fn softmax_f16_rounds_through_f32() {
    let k = softmax_kernel(F16);
    let (rows, cols) = (3usize, 77usize);
    let x: Vec<f16> = randf(rows * cols, 9)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let mut out = vec![f16::from_f32(POISON); rows * cols];
    execute(
        &k,
        [rows, 1, 1],
        &mut [
            bytes_mut(&mut out).into(),
            bytes(&x).into(),
            (cols as i32).into(),
            (cols as i32).into(),
        ],
    )
    .unwrap();
    for r in 0..rows {
        let row: Vec<f64> = x[r * cols..(r + 1) * cols]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let den: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for c in 0..cols {
            let want = (row[c] - m).exp() / den;
            let got = out[r * cols + c].to_f64();
            assert!(
                (got - want).abs() <= 1e-3 * want.max(1e-3),
                "{got} vs {want}"
            );
        }
    }
}

fn matmul_kernel(ab: DType) -> Kernel {
    kernel("matmul", &[("BM", 32), ("BN", 32), ("BK", 16)], |k| {
        let (a_ptr, b_ptr, c_ptr) = (k.ptr(ab, "a"), k.ptr(ab, "b"), k.ptr(F32, "c"));
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
        let rm = program_id(0) * bm + arange(0, bm);
        let rn = program_id(1) * bn + arange(0, bn);
        let rk = arange(0, bk);
        let a_ptrs = a_ptr + (rm.col() * kk + rk.row());
        let b_ptrs = b_ptr + (rk.col() * n + rn.row());
        let acc = zeros([bm, bn], F32);
        let (acc, _, _) =
            range(0, cdiv(kk, bk), 1).fold((acc, a_ptrs, b_ptrs), |i, (acc, ap, bp)| {
                let k_rem = kk - i * bk;
                let a = load(ap)
                    .mask(rm.col().lt(m) & rk.row().lt(k_rem))
                    .other(0.0);
                let b = load(bp)
                    .mask(rk.col().lt(k_rem) & rn.row().lt(n))
                    .other(0.0);
                (dot(a, b, acc), ap + bk, bp + bk * n)
            });
        let mask = rm.col().lt(m) & rn.row().lt(n);
        store(c_ptr + rm.col() * n + rn.row(), acc).mask(mask);
    })
}

#[test]
fn matmul_masked_tails_f32_and_f16() {
    let (m, n, kk) = (70usize, 50usize, 40usize);
    let a = randf(m * kk, 4);
    let b = randf(kk * n, 5);
    let want = |a: &[f64], b: &[f64]| -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..kk).map(|p| a[i * kk + p] * b[p * n + j]).sum();
            }
        }
        c
    };
    let grid = [m.div_ceil(32), n.div_ceil(32), 1];
    let scalars = |v: &mut Vec<ExecArg<'_>>| {
        v.extend([(m as i32).into(), (n as i32).into(), (kk as i32).into()])
    };
    // f32
    let k = matmul_kernel(F32);
    let mut c = vec![POISON; m * n];
    let mut args = vec![bytes(&a).into(), bytes(&b).into(), bytes_mut(&mut c).into()];
    scalars(&mut args);
    execute(&k, grid, &mut args).unwrap();
    let r = want(
        &a.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        &b.iter().map(|&x| x as f64).collect::<Vec<_>>(),
    );
    for (g, w) in c.iter().zip(&r) {
        assert!(close(*g, *w, 1e-5), "{g} vs {w}");
    }
    // f16 inputs, f32 accumulation
    let k = matmul_kernel(F16);
    let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
    let bh: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
    let mut c = vec![POISON; m * n];
    let mut args = vec![
        bytes(&ah).into(),
        bytes(&bh).into(),
        bytes_mut(&mut c).into(),
    ];
    scalars(&mut args);
    execute(&k, grid, &mut args).unwrap();
    let r = want(
        &ah.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
        &bh.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
    );
    for (g, w) in c.iter().zip(&r) {
        assert!(close(*g, *w, 1e-5), "{g} vs {w}");
    }
}

#[test]
fn integer_division_wraps_and_casts_follow_c() {
    let k = kernel("ints", &[], |k| {
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
    let mut o = vec![0i32; 48];
    execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&x).into(), bytes(&y).into(), bytes_mut(&mut o).into()],
    )
    .unwrap();
    for i in 0..8 {
        assert_eq!(o[i], x[i] / y[i], "div {i}");
        assert_eq!(o[8 + i], x[i] % y[i], "rem {i}");
        assert_eq!(o[16 + i], x[i].wrapping_mul(y[i]), "mul {i}");
        assert_eq!(o[24 + i], x[i] as i8 as i32, "narrow {i}");
        assert_eq!(o[32 + i], (x[i] >> 1).wrapping_add(y[i] << 2), "shift {i}");
        assert_eq!(
            o[40 + i],
            ((x[i] as u32 as u64 * y[i] as u32 as u64) >> 32) as i32,
            "umulhi {i}"
        );
    }
}

#[test]
fn float_semantics_fmod_casts_compare_and_math() {
    let k = kernel("floats", &[], |k| {
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
    });
    let nan = f32::NAN;
    let x = [5.5f32, -5.5, -2.7, 2.7, nan, 1.0, 1.000_488_3, 0.3];
    let y = [2.0f32, 2.0, 1.0, -1.0, 1.0, nan, 3.0, 0.7];
    let (mut oi, mut of, mut oh) = (vec![0i32; 24], vec![0f32; 64], vec![f16::ZERO; 8]);
    execute(
        &k,
        [1, 1, 1],
        &mut [
            bytes(&x).into(),
            bytes(&y).into(),
            bytes_mut(&mut oi).into(),
            bytes_mut(&mut of).into(),
            bytes_mut(&mut oh).into(),
        ],
    )
    .unwrap();
    for i in 0..8 {
        let (xf, yf) = (x[i] as f64, y[i] as f64);
        let same = |g: f32, w: f64| (g.is_nan() && w.is_nan()) || close(g, w, 1e-6);
        assert!(same(of[i], xf % yf), "fmod {i}: {}", of[i]);
        if !x[i].is_nan() {
            assert_eq!(oi[i], x[i].trunc() as i32, "f->i {i}");
        }
        assert_eq!(oi[8 + i], (x[i] < y[i]) as i32, "lt {i}");
        assert_eq!(oi[16 + i], (x[i] != y[i]) as i32, "ne is unordered {i}");
        assert_eq!(
            oh[i].to_bits(),
            f16::from_f32(x[i]).to_bits(),
            "f16 rne {i}"
        );
        assert!(same(of[8 + i], xf.exp()), "exp {i}");
        assert!(same(of[16 + i], xf.abs().sqrt()), "sqrt {i}");
        assert!(same(of[24 + i], libm::erf(xf)), "erf {i}");
        assert!(same(of[32 + i], 1.0 / (1.0 + (-xf).exp())), "sigmoid {i}");
        assert!(same(of[40 + i], xf * yf + 1.0), "fma {i}");
        if !x[i].is_nan() {
            assert!(same(of[48 + i], xf.clamp(-1.0, 1.0)), "clamp {i}");
        }
        let w = xf.abs().ln() + xf.sin() + yf.cos() + xf.floor() + yf.ceil();
        assert!(same(of[56 + i], w), "mix {i}: {} vs {w}", of[56 + i]);
    }
    // 1 + 2^-11 is halfway between two f16 values: ties go to even.
    assert_eq!(oh[6].to_f32(), 1.0);
}

#[test]
fn masked_loads_give_zero_or_other_and_stores_skip() {
    let k = kernel("masks", &[], |k| {
        let (a, o) = (k.ptr(I32, "a"), k.ptr(I32, "o"));
        let offs = arange(0, 16);
        let m = offs.lt(5);
        let x = load(a + offs).mask(m);
        let y = load(a + offs).mask(m).other(-9);
        store(o + offs, x).mask(offs.ge(2));
        store(o + 16 + offs, y).mask((offs % 2).eq(1));
    });
    // `a` has only 5 elements: masked-off lanes beyond it are never touched.
    let a = [1, 2, 3, 4, 5];
    let mut o = vec![77i32; 32];
    execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&a).into(), bytes_mut(&mut o).into()],
    )
    .unwrap();
    for i in 0..16 {
        let x = if i < 5 { a[i] } else { 0 };
        let y = if i < 5 { a[i] } else { -9 };
        assert_eq!(o[i], if i >= 2 { x } else { 77 }, "x {i}");
        assert_eq!(o[16 + i], if i % 2 == 1 { y } else { 77 }, "y {i}");
    }
}

#[test]
fn reductions_nan_ties_and_widening() {
    let k = kernel("red", &[], |k| {
        let (a, b8, of, oi) = (
            k.ptr(F32, "a"),
            k.ptr(I8, "b"),
            k.ptr(F32, "of"),
            k.ptr(I32, "oi"),
        );
        let r = arange(0, 4);
        let c = arange(0, 8);
        let x = load(a + r.col() * 8 + c.row()); // [4, 8]
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
    let (mut of, mut oi) = (vec![0f32; 25], vec![0i32; 14]);
    execute(
        &k,
        [1, 1, 1],
        &mut [
            bytes(&x).into(),
            bytes(&b).into(),
            bytes_mut(&mut of).into(),
            bytes_mut(&mut oi).into(),
        ],
    )
    .unwrap();
    assert_eq!(of[0], 11.5);
    assert!(of[1].is_nan());
    assert_eq!(of[12], 3.0);
    assert!(of[13].is_nan(), "all-NaN max is NaN");
    assert_eq!(of[14], 5.0, "max ignores NaN");
    assert_eq!(of[15], -1.0);
    assert_eq!(of[16], -1.0, "min ignores NaN");
    assert_eq!(of[18], -5.0);
    assert_eq!(&oi[0..4], &[1, 0, 1, 0], "argmax left-most on ties");
    assert_eq!(oi[4 + 2], 2, "argmin ignores NaN");
    assert_eq!(oi[4 + 7], 3);
    assert_eq!(oi[12], 433, "int8 sum widens to int32");
    assert_eq!(oi[13], 127);
    assert!(of[24].is_nan());
}

#[test]
fn scans_and_custom_combines() {
    let k = kernel("scan", &[], |k| {
        let (a, o) = (k.ptr(I32, "a"), k.ptr(I32, "o"));
        let offs = arange(0, 8);
        let x = load(a + offs);
        store(o + offs, cumsum(x, 0));
        store(o + 8 + offs, cumprod(x, 0));
        store(o + 16 + offs, cumsum_reverse(x, 0));
        // Non-commutative associative combine: affine maps composed left to right, encoded
        // as (mul, add) pairs; checks operand order in both scan directions and in reduce.
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
    let x = [3, 1, 4, 1, 5, 9, 2, 6];
    let mut o = vec![0i32; 43];
    execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&x).into(), bytes_mut(&mut o).into()],
    )
    .unwrap();
    let mut acc = (0, 1);
    for i in 0..8 {
        acc = (acc.0 + x[i], acc.1 * x[i]);
        assert_eq!(o[i], acc.0);
        assert_eq!(o[8 + i], acc.1);
        assert_eq!(o[16 + i], x[i..].iter().sum::<i32>());
    }
    // Forward: c_i = sum_{j<=i} x_j * 2^(i-j); m_i = 2^(i+1).
    for i in 0..8 {
        let c: i32 = (0..=i).map(|j| x[j] << (i - j)).sum();
        assert_eq!(o[24 + i], (2 << i) + c, "forward scan {i}");
        // Reverse (Triton's): the forward scan of the flipped row, folding x_7 .. x_i.
        let c: i32 = (i..8).map(|j| x[j] << (j - i)).sum();
        assert_eq!(o[32 + i], c, "reverse scan {i}");
    }
    assert_eq!(o[40], (0..8).map(|j| x[j] << (7 - j)).sum::<i32>());
    assert_eq!((o[41], o[42]), (9, 5));
}

#[test]
fn control_flow_for_while_if() {
    let k = kernel("cf", &[], |k| {
        let (p, o) = (k.ptr(I32, "p"), k.ptr(I32, "o"));
        let n = k.scalar(I32, "n");
        let offs = arange(0, 8);
        let x = load(p + offs);
        let i = while_loop(program_id(0) + 1, |i| i.lt(n), |i| i * 2);
        let y = if_(i.gt(100), || x + 1, || x - 1);
        // Carried values swapped every iteration.
        let (a, b) = range(0, n, 3).fold((x, y), |j, (a, b)| (b + j, a));
        store(o + program_id(0) * 24 + offs, a);
        store(o + program_id(0) * 24 + 8 + offs, b);
        store(o + program_id(0) * 24 + 16 + offs, zeros([8], I32) + i);
    });
    let x: Vec<i32> = (0..8).collect();
    for n in [0i32, 7, 200] {
        let mut o = vec![0i32; 48];
        execute(
            &k,
            [2, 1, 1],
            &mut [bytes(&x).into(), bytes_mut(&mut o).into(), n.into()],
        )
        .unwrap();
        for pid in 0..2 {
            let mut i = pid + 1;
            while i < n {
                i *= 2;
            }
            let y: Vec<i32> = x
                .iter()
                .map(|v| if i > 100 { v + 1 } else { v - 1 })
                .collect();
            let (mut a, mut b) = (x.clone(), y);
            let mut j = 0;
            while j < n {
                let na: Vec<i32> = b.iter().map(|v| v + j).collect();
                b = a;
                a = na;
                j += 3;
            }
            let base = pid as usize * 24;
            assert_eq!(&o[base..base + 8], &a[..], "n={n} pid={pid}");
            assert_eq!(&o[base + 8..base + 16], &b[..]);
            assert!(o[base + 16..base + 24].iter().all(|&v| v == i));
        }
    }
}

#[test]
fn atomics_from_many_programs() {
    let k = kernel("atomics", &[], |k| {
        let (f, q) = (k.ptr(F32, "f"), k.ptr(I32, "q"));
        let offs = arange(0, 16);
        let pid = program_id(0);
        let z = zeros([16], I32);
        atomic_add(f + z, 1.0).mask(offs.lt(10));
        atomic_add(q + z, 1);
        atomic_max(q + 1 + z, pid * 16 + offs);
        atomic_min(q + 2 + z, pid * 16 + offs);
        atomic_or(q + 3 + z, 1 << (offs % 8));
        atomic_xor(q + 4 + z, 1);
        let bit = (zeros_like(pid) + 1) << (pid % 4);
        atomic_and(q + 5 + z, !bit);
        // One winner per slot: cas 0 -> pid + 1.
        let old = atomic_cas(q + 6 + pid % 2, 0, pid + 1);
        atomic_xchg(q + 8 + pid, old);
    });
    let progs = 64usize;
    let mut f = vec![0f32; 1];
    let mut q = vec![0i32; 8 + progs];
    q[2] = i32::MAX;
    q[5] = -1;
    execute(
        &k,
        [progs, 1, 1],
        &mut [bytes_mut(&mut f).into(), bytes_mut(&mut q).into()],
    )
    .unwrap();
    assert_eq!(f[0], (progs * 10) as f32);
    assert_eq!(q[0], (progs * 16) as i32);
    assert_eq!(q[1], (progs * 16 - 1) as i32);
    assert_eq!(q[2], 0);
    assert_eq!(q[3], 0xff);
    assert_eq!(q[4], 0, "an even number of xors");
    assert_eq!(q[5], !0xf);
    assert!(q[6] > 0 && q[7] > 0);
    let winners = q[8..].iter().filter(|&&v| v == 0).count();
    assert_eq!(winners, 2, "exactly one cas per slot sees 0");
}

#[test]
fn philox_matches_known_answers() {
    let k = kernel("philox", &[], |k| {
        let (o, seed) = (k.ptr(U32, "o"), k.scalar(I64, "seed"));
        let offs = arange(0, 2);
        let [a, b, c, d] = randint4x(seed, zeros([2], I32));
        store(o + offs * 4, a);
        store(o + offs * 4 + 1, b);
        store(o + offs * 4 + 2, c);
        store(o + offs * 4 + 3, d);
    });
    let mut o = vec![0u32; 8];
    execute(&k, [1, 1, 1], &mut [bytes_mut(&mut o).into(), 0i64.into()]).unwrap();
    // Random123's known-answer vector for philox4x32-10 with counter 0 and key 0.
    assert_eq!(&o[..4], &[0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);

    let k = kernel("rand", &[], |k| {
        let (o, seed) = (k.ptr(F32, "o"), k.scalar(I32, "seed"));
        let offs = arange(0, 1024);
        store(o + offs, rand(seed, offs));
        store(o + 1024 + offs, randn(seed, offs));
    });
    let mut o = vec![0f32; 2048];
    execute(&k, [1, 1, 1], &mut [bytes_mut(&mut o).into(), 42i32.into()]).unwrap();
    assert!(o[..1024].iter().all(|&v| (0.0..1.0).contains(&v)));
    let mean: f32 = o[..1024].iter().sum::<f32>() / 1024.0;
    assert!((mean - 0.5).abs() < 0.05, "uniform mean {mean}");
    let nmean: f32 = o[1024..].iter().sum::<f32>() / 1024.0;
    let var: f32 = o[1024..].iter().map(|v| v * v).sum::<f32>() / 1024.0;
    assert!(
        nmean.abs() < 0.1 && (var - 1.0).abs() < 0.15,
        "normal {nmean} {var}"
    );
}

#[test]
fn shape_ops_join_split_permute_broadcast() {
    let k = kernel("shapes", &[], |k| {
        let (a, o) = (k.ptr(I32, "a"), k.ptr(I32, "o"));
        let r = arange(0, 4);
        let c = arange(0, 8);
        let x = load(a + r.col() * 8 + c.row()); // [4, 8]
        let t = trans(x); // [8, 4]
        store(o + c.col() * 4 + r.row(), t);
        let j = join(r, r * 10); // [4, 2]
        store(o + 32 + arange(0, 8), j.reshape([8]));
        let (lo, hi) = split(j);
        store(o + 40 + r, hi - lo);
        let p = permute(x.reshape([2, 2, 8]), [2, 0, 1]); // [8, 2, 2]
        store(o + 44 + arange(0, 32), p.reshape([32]));
        let b = broadcast_to(r.col(), [4, 8]);
        store(o + 76 + arange(0, 32), b.reshape([32]));
        store(o + 108 + r, expand_dims(r, 0).reshape([4]) * 2);
    });
    let x: Vec<i32> = (0..32).collect();
    let mut o = vec![0i32; 112];
    execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&x).into(), bytes_mut(&mut o).into()],
    )
    .unwrap();
    for i in 0..4 {
        for j in 0..8 {
            assert_eq!(o[j * 4 + i], x[i * 8 + j]);
            assert_eq!(o[76 + i * 8 + j], i as i32);
        }
        assert_eq!(&o[32 + 2 * i..34 + 2 * i], &[i as i32, 10 * i as i32]);
        assert_eq!(o[40 + i], 9 * i as i32);
        assert_eq!(o[108 + i], 2 * i as i32);
    }
    for k2 in 0..8 {
        for a0 in 0..2 {
            for a1 in 0..2 {
                assert_eq!(o[44 + k2 * 4 + a0 * 2 + a1], x[a0 * 16 + a1 * 8 + k2]);
            }
        }
    }
}

#[test]
fn int8_dot_accumulates_in_int32() {
    let k = kernel("idot", &[], |k| {
        let (a, b, o) = (k.ptr(I8, "a"), k.ptr(I8, "b"), k.ptr(I32, "o"));
        let r = arange(0, 16);
        let x = load(a + r.col() * 16 + r.row());
        let y = load(b + r.col() * 16 + r.row());
        store(o + r.col() * 16 + r.row(), dot(x, y, None));
    });
    let a: Vec<i8> = (0..256).map(|i| (i * 37 % 255) as u8 as i8).collect();
    let b: Vec<i8> = (0..256).map(|i| (i * 91 % 251) as u8 as i8).collect();
    let mut o = vec![0i32; 256];
    execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&a).into(), bytes(&b).into(), bytes_mut(&mut o).into()],
    )
    .unwrap();
    for i in 0..16 {
        for j in 0..16 {
            let w: i32 = (0..16)
                .map(|p| a[i * 16 + p] as i32 * b[p * 16 + j] as i32)
                .sum();
            assert_eq!(o[i * 16 + j], w);
        }
    }
}

fn runtime_msg(r: crate::Result<()>) -> String {
    match r {
        Err(Error::Runtime { kernel, msg }) => format!("{kernel}: {msg}"),
        other => panic!("expected a runtime error, got {other:?}"),
    }
}

#[test]
fn out_of_bounds_and_bad_arguments_are_errors() {
    let k = kernel("oob", &[("B", 64)], |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let offs = program_id(0) * k.constexpr("B") + arange(0, 64);
        store(o + offs, load(x + offs));
    });
    let x = vec![1f32; 100];
    let mut o = vec![0f32; 128];
    let msg = runtime_msg(execute(
        &k,
        [2, 1, 1],
        &mut [bytes(&x).into(), bytes_mut(&mut o).into()],
    ));
    assert!(msg.starts_with("oob: op `load`"), "{msg}");
    assert!(msg.contains("program (1, 0, 0)"), "{msg}");
    assert!(msg.contains("offset 127"), "{msg}");
    assert!(msg.contains("`x` (100 elements)"), "{msg}");
    assert!(msg.contains("tests.rs"), "names the user's line: {msg}");

    let y = vec![1f32; 128];
    let mut short = vec![0f32; 70];
    let msg = runtime_msg(execute(
        &k,
        [2, 1, 1],
        &mut [bytes(&y).into(), bytes_mut(&mut short).into()],
    ));
    assert!(
        msg.contains("op `store`") && msg.contains("offset 127"),
        "{msg}"
    );

    // Negative offsets are caught too.
    let k2 = kernel("neg", &[], |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let offs = arange(0, 4) - 2;
        store(o + arange(0, 4), load(x + offs));
    });
    let msg = runtime_msg(execute(
        &k2,
        [1, 1, 1],
        &mut [bytes(&y).into(), bytes_mut(&mut o).into()],
    ));
    assert!(msg.contains("offset -2"), "{msg}");

    // Wrong argument count, kinds, ranges, read-only outputs.
    let launch = |r: crate::Result<()>| match r {
        Err(Error::Launch { msg, .. }) => msg,
        other => panic!("expected a launch error, got {other:?}"),
    };
    let m = launch(execute(&k, [1, 1, 1], &mut [bytes(&y).into()]));
    assert!(m.contains("expected 2 arguments"), "{m}");
    let m = launch(execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&y).into(), bytes(&y).into()],
    ));
    assert!(m.contains("`o`") && m.contains("mutable"), "{m}");
    let m = launch(execute(
        &k,
        [1, 1, 1],
        &mut [1i32.into(), bytes_mut(&mut o).into()],
    ));
    assert!(m.contains("needs a buffer"), "{m}");
    let ks = kernel("sc", &[], |k| {
        let (o, s) = (k.ptr(I8, "o"), k.scalar(I8, "s"));
        store(o, s);
    });
    let mut b = vec![0i8; 1];
    let m = launch(execute(
        &ks,
        [1, 1, 1],
        &mut [bytes_mut(&mut b).into(), 300i32.into()],
    ));
    assert!(m.contains("`s`") && m.contains("does not fit"), "{m}");
    let m = launch(execute(
        &ks,
        [1, 1, 1],
        &mut [bytes_mut(&mut b).into(), 1.5f32.into()],
    ));
    assert!(m.contains("float"), "{m}");
    // Misaligned writable buffers are refused rather than accessed unsoundly.
    let mut words = vec![0u32; 4];
    let m = launch(execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&y).into(), (&mut bytes_mut(&mut words)[1..]).into()],
    ));
    assert!(m.contains("aligned"), "{m}");
}

#[test]
fn grid_axes_and_num_programs() {
    let k = kernel("grid", &[], |k| {
        let o = k.ptr(I32, "o");
        let (x, y, z) = (program_id(0), program_id(1), program_id(2));
        let (nx, ny) = (num_programs(0), num_programs(1));
        let lin = (z * ny + y) * nx + x;
        store(o + lin, x * 100 + y * 10 + z + num_programs(2) * 1000);
    });
    let mut o = vec![-1i32; 24];
    execute(&k, [4, 3, 2], &mut [bytes_mut(&mut o).into()]).unwrap();
    for z in 0..2 {
        for y in 0..3 {
            for x in 0..4 {
                assert_eq!(o[(z * 3 + y) * 4 + x], (x * 100 + y * 10 + z + 2000) as i32);
            }
        }
    }
    execute(&k, [0, 1, 1], &mut [bytes_mut(&mut o).into()]).unwrap();
}

/// The executor's buffer-reuse shortcuts (hoisting, moving loop-carried values, in-place
/// accumulation, folded splats) must not change results in the cases they do not cover.
#[test]
fn reuse_shortcuts_keep_semantics() {
    let k = kernel("reuse", &[], |k| {
        let (a, o) = (k.ptr(F32, "a"), k.ptr(F32, "o"));
        let n = k.scalar(I32, "n");
        let r = arange(0, 16);
        let x = load(a + r.col() * 16 + r.row()); // [16, 16]
                                                  // Yielding a value defined before the loop, every iteration.
        let outer = x * 2.0;
        let y = range(0, n, 1).fold(x, |_, _| outer);
        store(o + r.col() * 16 + r.row(), y);
        // A dot whose accumulator is defined outside the loop: never accumulated in place.
        let acc0 = x + 1.0;
        let d = range(0, n, 1).fold(zeros([16, 16], F32), |_, _| dot(x, x, acc0));
        store(o + 256 + r.col() * 16 + r.row(), d);
        // Splats on both sides of one op, and an invariant op inside a branch that the
        // first program does not take.
        let s = load(a) + 0.0;
        let both = (zeros([16], F32) + s) + (zeros([16], F32) + s);
        let pid = program_id(0);
        let z = if_(
            pid.gt(0),
            || zeros([16], F32) + 5.0,
            || zeros([16], F32) - 5.0,
        );
        store(o + 512 + pid * 32 + r, both);
        store(o + 512 + pid * 32 + 16 + r, z);
    });
    let a: Vec<f32> = (0..256).map(|i| (i % 7) as f32 - 3.0).collect();
    for n in [0i32, 1, 3] {
        let mut o = vec![POISON; 512 + 4 * 32];
        // One worker so the branch's invariant op is first skipped, then needed.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| {
            execute(
                &k,
                [4, 1, 1],
                &mut [bytes(&a).into(), bytes_mut(&mut o).into(), n.into()],
            )
        })
        .unwrap();
        for i in 0..16 {
            for j in 0..16 {
                let x = a[i * 16 + j];
                let want_y = if n > 0 { 2.0 * x } else { x };
                assert_eq!(o[i * 16 + j], want_y, "y n={n}");
                let dd: f32 = (0..16).map(|p| a[i * 16 + p] * a[p * 16 + j]).sum();
                let want_d = if n > 0 { dd + x + 1.0 } else { 0.0 };
                assert!((o[256 + i * 16 + j] - want_d).abs() < 1e-3, "dot n={n}");
            }
        }
        for pid in 0..4 {
            let base = 512 + pid * 32;
            assert!(o[base..base + 16].iter().all(|&v| v == 2.0 * a[0]));
            let z = if pid > 0 { 5.0 } else { -5.0 };
            assert!(o[base + 16..base + 32].iter().all(|&v| v == z), "pid {pid}");
        }
    }
}

/// Bytes of `vals` stored as dtype `d` (ints wrap to the width, floats round to nearest).
fn encode(d: DType, vals: &[f64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &v in vals {
        let i = v as i128;
        match d {
            I8 | U8 => out.push(i as u8),
            I16 | U16 => out.extend((i as u16).to_le_bytes()),
            I32 | U32 => out.extend((i as u32).to_le_bytes()),
            I64 | U64 => out.extend((i as u64).to_le_bytes()),
            F16 => out.extend(f16::from_f64(v).to_le_bytes()),
            BF16 => out.extend(bf16::from_f64(v).to_le_bytes()),
            F32 => out.extend((v as f32).to_le_bytes()),
            F64 => out.extend(v.to_le_bytes()),
            Bool => out.push((v != 0.0) as u8),
        }
    }
    out
}

/// Element `i` of a buffer of dtype `d`, as f64 (u64/i64 values here stay below 2^53).
fn decode(d: DType, b: &[u8], i: usize) -> f64 {
    let s = d.size_bytes();
    let e = &b[i * s..(i + 1) * s];
    match d {
        I8 => e[0] as i8 as f64,
        U8 | Bool => e[0] as f64,
        I16 => i16::from_le_bytes([e[0], e[1]]) as f64,
        U16 => u16::from_le_bytes([e[0], e[1]]) as f64,
        I32 => i32::from_le_bytes(e.try_into().unwrap()) as f64,
        U32 => u32::from_le_bytes(e.try_into().unwrap()) as f64,
        I64 => i64::from_le_bytes(e.try_into().unwrap()) as f64,
        U64 => u64::from_le_bytes(e.try_into().unwrap()) as f64,
        F16 => f16::from_le_bytes([e[0], e[1]]).to_f64(),
        BF16 => bf16::from_le_bytes([e[0], e[1]]).to_f64(),
        F32 => f32::from_le_bytes(e.try_into().unwrap()) as f64,
        F64 => f64::from_le_bytes(e.try_into().unwrap()),
    }
}

/// Wraps an exact integer result to dtype `d`'s width and signedness.
fn wrap(d: DType, v: i128) -> f64 {
    match d {
        I8 => v as i8 as f64,
        U8 => v as u8 as f64,
        I16 => v as i16 as f64,
        U16 => v as u16 as f64,
        I32 => v as i32 as f64,
        U32 => v as u32 as f64,
        I64 => v as i64 as f64,
        U64 => v as u64 as f64,
        _ => v as f64,
    }
}

/// Rounds an exact result to float dtype `d`.
fn round_to(d: DType, v: f64) -> f64 {
    match d {
        F16 => f16::from_f64(v).to_f64(),
        BF16 => bf16::from_f64(v).to_f64(),
        F32 => v as f32 as f64,
        _ => v,
    }
}

#[test]
fn arithmetic_on_every_dtype() {
    let a_vals: Vec<f64> = vec![7.0, -7.0, 100.0, 3.0, 120.0, 1.5, -2.25, 0.0];
    let b_vals: Vec<f64> = vec![2.0, 3.0, -7.0, 100.0, 9.0, 2.5, 4.0, 5.0];
    for d in [I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64] {
        let k = kernel("dtypes", &[], |k| {
            let (a, b, o) = (k.ptr(d, "a"), k.ptr(d, "b"), k.ptr(d, "o"));
            let oc = k.ptr(I32, "oc");
            let offs = arange(0, 8);
            let (x, y) = (load(a + offs), load(b + offs));
            store(o + offs, x + y);
            store(o + 8 + offs, x * y);
            store(o + 16 + offs, x - y);
            store(o + 24 + offs, maximum(x, y));
            if d.is_float() {
                store(o + 32 + offs, (x / y).to(d));
            } else {
                store(o + 32 + offs, floordiv(x, y));
                store(o + 40 + offs, x % y);
            }
            store(oc + offs, x.lt(y).to(I32));
            store(oc + 8 + offs, x.to(F32).to(I32));
        });
        // Unsigned types see the two's-complement bits of the negative inputs (u64 takes
        // magnitudes: its wrapped negatives are not exact in the f64 the test computes in).
        let input = |v: f64| match d {
            _ if d.is_float() => round_to(d, v),
            U64 => v.trunc().abs(),
            _ => wrap(d, v.trunc() as i128),
        };
        let a_in: Vec<f64> = a_vals.iter().map(|&v| input(v)).collect();
        let b_in: Vec<f64> = b_vals.iter().map(|&v| input(v)).collect();
        let (ab, bb) = (encode(d, &a_in), encode(d, &b_in));
        let mut o = vec![0u64; 48];
        let mut oc = vec![0i32; 16];
        execute(
            &k,
            [1, 1, 1],
            &mut [
                ab.as_slice().into(),
                bb.as_slice().into(),
                bytes_mut(&mut o).into(),
                bytes_mut(&mut oc).into(),
            ],
        )
        .unwrap_or_else(|e| panic!("{d}: {e}"));
        let ob = bytes(&o);
        for i in 0..8 {
            let (x, y) = (a_in[i], b_in[i]);
            let got = |slot: usize| decode(d, ob, slot * 8 + i);
            let (sum, prod, diff) = if d.is_float() {
                (round_to(d, x + y), round_to(d, x * y), round_to(d, x - y))
            } else {
                let (xi, yi) = (x as i128, y as i128);
                (wrap(d, xi + yi), wrap(d, xi * yi), wrap(d, xi - yi))
            };
            assert_eq!(got(0), sum, "{d} add {x} {y}");
            assert_eq!(got(1), prod, "{d} mul {x} {y}");
            assert_eq!(got(2), diff, "{d} sub {x} {y}");
            assert_eq!(got(3), x.max(y), "{d} max {x} {y}");
            if d.is_float() {
                let want = round_to(d, round_to(F32, x / y));
                assert!(
                    (got(4) - want).abs() <= want.abs() * 1e-6,
                    "{d} div {x} {y}"
                );
            } else {
                let (xi, yi) = (x as i128, y as i128);
                assert_eq!(got(4), wrap(d, xi / yi), "{d} floordiv {x} {y}");
                assert_eq!(got(5), wrap(d, xi % yi), "{d} rem {x} {y}");
            }
            assert_eq!(oc[i], (x < y) as i32, "{d} lt {x} {y}");
            assert_eq!(oc[8 + i], (x as f32) as i32, "{d} to f32 to i32 {x}");
        }
    }
}

/// Random DSL programs that build are run on small buffers: the executor returns Ok or an
/// error (out-of-bounds addresses are likely), and never panics.
#[test]
fn random_programs_run_without_panics() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let dtypes = [Bool, I8, I32, I64, U8, U32, F16, BF16, F32, F64];
    let (mut built, mut ran, mut failed) = (0, 0, 0);
    for _ in 0..6000 {
        let len = 1 + next() % 6;
        let script: Vec<u64> = (0..len).map(|_| next()).collect();
        let m: BTreeMap<String, i64> = BTreeMap::new();
        let Ok(Ok(k)) = std::panic::catch_unwind(|| {
            tl::build("fuzz", &m, |k| {
                let p = k.ptr(F32, "p");
                let q = k.ptr(I32, "q");
                let mut pool = vec![
                    arange(0, 8),
                    program_id(0),
                    k.scalar(I32, "n"),
                    load(p + arange(0, 8)),
                ];
                for &w in &script {
                    let pick = |i: u64| pool[(i % pool.len() as u64) as usize];
                    let (a, b) = (pick(w >> 8), pick(w >> 16));
                    let d = dtypes[((w >> 24) % dtypes.len() as u64) as usize];
                    let t = match w % 30 {
                        0 => a + b,
                        1 => a * 3,
                        2 => a / b,
                        3 => floordiv(a, b),
                        4 => a % b,
                        5 => a.lt(b),
                        6 => a.to(d),
                        7 => exp(a),
                        8 => where_(a.gt(0), a, b),
                        9 => sum(a, 0),
                        10 => a.col() + b.row(),
                        11 => a & b,
                        12 => a >> b,
                        13 => maximum(a, b),
                        14 => reshape(a, [2, 4]),
                        15 => dot(a, b, None),
                        16 => cumsum(a, 0),
                        17 => argmin(a, 0),
                        18 => load(q + a).mask(a.lt(4)).other(1),
                        19 => {
                            store(q + a, b).mask(a.lt(b));
                            a
                        }
                        20 => range(0, 3, 1).fold(a, |i, acc| acc + i),
                        21 => if_(a.eq(0), || b, || b * 2),
                        22 => join(a, b),
                        23 => split(a).1,
                        24 => trans(a),
                        25 => atomic_add(q + a, b).mask(a.gt(1)),
                        26 => randint(a, b),
                        27 => tl::reduce(a, 0, |x, y| x * y),
                        28 => load(p + a),
                        _ => {
                            associative_scan((a, b), 0, true, |(x, y), (u, v)| {
                                (x + u, maximum(y, v))
                            })
                            .0
                        }
                    };
                    pool.push(t);
                }
                store(p + arange(0, 8), pool[pool.len() - 1]);
            })
        }) else {
            continue;
        };
        built += 1;
        let mut p = vec![0.5f32, -1.0, 2.0, 3.0, 0.0, 7.0, -3.5, 1.0];
        let mut q = vec![3i32, 0, -2, 5, 1, 7, 2, 4];
        let n = (next() % 9) as i32 - 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            execute(
                &k,
                [2, 1, 1],
                &mut [bytes_mut(&mut p).into(), bytes_mut(&mut q).into(), n.into()],
            )
        }));
        match r {
            Ok(Ok(())) => ran += 1,
            Ok(Err(Error::Runtime { .. })) => failed += 1,
            Ok(Err(e)) => panic!("unexpected error kind {e}\n{}", k.ir()),
            Err(_) => panic!("the executor panicked on\n{}", k.ir()),
        }
    }
    eprintln!("random programs: {built} built, {ran} ran, {failed} runtime errors");
    assert!(ran > 50 && failed > 0);
}

/// Loads with program-independent addresses are computed once per worker only when their
/// buffer is read-only; a buffer the kernel writes is re-read by every program.
#[test]
fn invariant_loads_only_from_read_only_buffers() {
    let bump = kernel("bump", &[], |k| {
        let w = k.ptr(F32, "w");
        let offs = arange(0, 8);
        store(w + offs, load(w + offs) + 1.0);
    });
    let scale = kernel("scale", &[], |k| {
        let (w, o) = (k.ptr(F32, "w"), k.ptr(F32, "o"));
        let offs = arange(0, 8);
        store(o + program_id(0) * 8 + offs, load(w + offs) * 2.0);
    });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        let mut w = vec![0f32; 8];
        execute(&bump, [5, 1, 1], &mut [bytes_mut(&mut w).into()]).unwrap();
        assert!(w.iter().all(|&v| v == 5.0), "{w:?}");
        let mut o = vec![0f32; 40];
        execute(
            &scale,
            [5, 1, 1],
            &mut [bytes(&w).into(), bytes_mut(&mut o).into()],
        )
        .unwrap();
        assert!(o.iter().all(|&v| v == 10.0), "{o:?}");
    });
}

#[test]
fn closed_form_offsets_and_masks_match_blocks() {
    // Offsets and masks the executor keeps in closed form (`lazy.rs`), read by every kind
    // of consumer: memory ops (strided, reversed, splat offsets), a select, ops that need
    // the block written out (casts, stores of the mask itself), a loop-carried offset, and
    // arithmetic that would wrap (falls back to wrapping block ops).
    let k = kernel("lazy", &[], |k| {
        let (a, o) = (k.ptr(F32, "a"), k.ptr(I32, "o"));
        let f = k.ptr(F32, "f");
        let n = k.scalar(I32, "n");
        let pid = program_id(0);
        let r = arange(0, 64);
        let offs = pid * 64 + r;
        let base = pid * 11 * 64;
        // Every predicate against a scalar, both operand orders, stored as ints.
        let preds = [
            offs.lt(n),
            offs.le(n),
            offs.gt(n),
            offs.ge(n),
            n.gt(offs),
            (offs * 2 - 7).lt(n),
            (r * n - r * n + n).lt(offs), // stride-0 operand
            (r * -1 + 100).lt(n),         // decreasing: not a prefix
        ];
        for (i, p) in preds.into_iter().enumerate() {
            store(o + base + (i as i32) * 64 + r, p.cast(I32));
        }
        // Affine values themselves, incl. a product that wraps i32.
        store(o + base + 8 * 64 + r, offs * 3 - 2);
        store(o + base + 9 * 64 + r, (offs + 1) * (1 << 29));
        // Loads: masked prefix, stride 2, reversed, splat offsets, masked select.
        let m = offs.lt(n);
        let x = load(a + offs).mask(m).other(-1.0);
        let s2 = load(a + r * 2).mask((r * 2).lt(n));
        let rev = load(a + (63 - r));
        let sp = load(a + (r * n - r * n) + 5);
        let sel = where_(m, x * 2.0, -3.0);
        let fb = pid * 5 * 64;
        store(f + fb + r, x);
        store(f + fb + 64 + r, s2);
        store(f + fb + 128 + r, rev);
        store(f + fb + 192 + r, sp + 0.0);
        store(f + fb + 256 + r, sel).mask(offs.ge(3));
        // A suffix mask on the store above is a block mask; a loop carries offsets.
        let sum = range(0, n, 64).fold(zeros([64], F32), |c, acc| {
            let cols = c + r;
            acc + load(a + cols).mask(cols.lt(n))
        });
        store(o + base + 10 * 64 + r, sum.cast(I32));
    });
    for n in [0i32, 1, 63, 64, 100, 128, 200] {
        let progs = 3usize;
        let a: Vec<f32> = (0..256).map(|i| i as f32).collect();
        let mut o = vec![-77i32; progs * 11 * 64];
        let mut fo = vec![POISON; progs * 5 * 64];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                execute(
                    &k,
                    [progs, 1, 1],
                    &mut [
                        bytes(&a).into(),
                        bytes_mut(&mut o).into(),
                        bytes_mut(&mut fo).into(),
                        n.into(),
                    ],
                )
            })
            .unwrap();
            for p in 0..progs {
                let base = p * 11 * 64;
                for i in 0..64 {
                    let off = (p * 64 + i) as i64;
                    let n = n as i64;
                    let want = [
                        off < n,
                        off <= n,
                        off > n,
                        off >= n,
                        n > off,
                        off * 2 - 7 < n,
                        n < off,
                        100 - (i as i64) < n,
                    ];
                    for (j, w) in want.iter().enumerate() {
                        assert_eq!(
                            o[base + j * 64 + i],
                            *w as i32,
                            "n={n} p={p} pred {j} lane {i}"
                        );
                    }
                    assert_eq!(o[base + 8 * 64 + i] as i64, off * 3 - 2);
                    assert_eq!(
                        o[base + 9 * 64 + i],
                        ((off + 1) as i32).wrapping_mul(1 << 29)
                    );
                    let fb = p * 5 * 64;
                    let x = if off < n { a[off as usize] } else { -1.0 };
                    assert_eq!(fo[fb + i], x, "n={n} p={p} x {i}");
                    let s2 = if ((2 * i) as i64) < n { a[2 * i] } else { 0.0 };
                    assert_eq!(fo[fb + 64 + i], s2);
                    assert_eq!(fo[fb + 128 + i], a[63 - i]);
                    assert_eq!(fo[fb + 192 + i], a[5]);
                    if off >= 3 {
                        let sel = if off < n { 2.0 * x } else { -3.0 };
                        assert_eq!(fo[fb + 256 + i], sel, "n={n} p={p} sel {i}");
                    } else {
                        assert_eq!(fo[fb + 256 + i], POISON);
                    }
                    let sum: f32 = (0..n.max(0) as usize)
                        .filter(|c| c % 64 == i)
                        .map(|c| a[c])
                        .sum();
                    assert_eq!(o[base + 10 * 64 + i], sum as i32, "n={n} sum {i}");
                }
            }
        }
    }
}

#[test]
fn deferred_loads_keep_load_semantics() {
    // Loads consumed by one binary op are run by that op (viewed in place when the run is
    // contiguous, fully active and read-only). Every other case must behave as a load in
    // program order: masked tails, strided runs, a buffer the kernel also writes, a store
    // between the load and its use, and out-of-bounds reads.
    let k = kernel("deferred", &[], |k| {
        let (a, w, o) = (k.ptr(F32, "a"), k.ptr(F32, "w"), k.ptr(F32, "o"));
        let n = k.scalar(I32, "n");
        let pid = program_id(0);
        let r = arange(0, 32);
        let offs = pid * 32 + r;
        let m = offs.lt(n);
        let base = pid * 5 * 32;
        // Contiguous and full (in place) or with a masked tail (loaded).
        store(o + base + r, load(a + offs).mask(m) + 1.0);
        // Strided: loaded.
        store(o + base + 32 + r, load(a + r * 2) * 2.0);
        // `w` is written below, so it is not read-only: loaded.
        let wv = load(w + offs);
        store(o + base + 64 + r, wv - 3.0);
        // A store between the load and its use: the load must see the old value.
        let old = load(w + offs);
        store(w + offs, zeros([32], F32) + 100.0);
        store(o + base + 96 + r, old + 0.5);
        // Both operands deferred.
        store(o + base + 128 + r, load(a + r) + load(a + r + 32));
    });
    let a: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
    for n in [64i32, 50] {
        let mut w: Vec<f32> = (0..64).map(|i| -(i as f32)).collect();
        let w0 = w.clone();
        let mut o = vec![POISON; 2 * 5 * 32];
        execute(
            &k,
            [2, 1, 1],
            &mut [
                bytes(&a).into(),
                bytes_mut(&mut w).into(),
                bytes_mut(&mut o).into(),
                n.into(),
            ],
        )
        .unwrap();
        for p in 0..2 {
            let base = p * 5 * 32;
            for i in 0..32 {
                let off = p * 32 + i;
                let x = if (off as i32) < n { a[off] } else { 0.0 };
                assert_eq!(o[base + i], x + 1.0, "n={n} masked {off}");
                assert_eq!(o[base + 32 + i], a[2 * i] * 2.0);
                assert_eq!(o[base + 64 + i], w0[off] - 3.0);
                assert_eq!(o[base + 96 + i], w0[off] + 0.5, "store before use {off}");
                assert_eq!(o[base + 128 + i], a[i] + a[i + 32]);
            }
        }
        assert!(w.iter().all(|&v| v == 100.0));
    }
    // A deferred load out of bounds is still reported as that load.
    let k = kernel("deferred_oob", &[], |k| {
        let (a, o) = (k.ptr(F32, "a"), k.ptr(F32, "o"));
        let r = arange(0, 16);
        store(o + r, load(a + r + 8) + 1.0);
    });
    let a = vec![1.0f32; 20];
    let mut o = vec![0.0f32; 16];
    let msg = runtime_msg(execute(
        &k,
        [1, 1, 1],
        &mut [bytes(&a).into(), bytes_mut(&mut o).into()],
    ));
    assert!(
        msg.contains("op `load`") && msg.contains("out of bounds"),
        "{msg}"
    );
}
