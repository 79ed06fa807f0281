//! `dot`: `a @ b + acc` with a register-blocked f32 micro-kernel.
//!
//! The f32 kernel keeps a 4 x NR tile of the output in registers while walking K, so each
//! loaded row of `b` feeds four rows of output. It is compiled twice: for the baseline
//! target and, when the CPU has them (checked at run time), with AVX2 and FMA.

use super::data::{round_f32, Data};
use crate::dtype::DType;

type Res = std::result::Result<(), String>;

const MR: usize = 4;

/// `c += a @ b` for row-major `a: m x k`, `b: k x n`, `c: m x n`.
#[inline(always)]
fn gemm_body<const NR: usize, const FMA: bool>(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    let madd = |x: f32, y: f32, acc: f32| if FMA { x.mul_add(y, acc) } else { acc + x * y };
    let m_main = if n >= NR { m / MR * MR } else { 0 };
    let n_main = n / NR * NR;
    for i0 in (0..m_main).step_by(MR) {
        let rows: [&[f32]; MR] = std::array::from_fn(|r| &a[(i0 + r) * k..(i0 + r + 1) * k]);
        for j0 in (0..n_main).step_by(NR) {
            let mut acc = [[0f32; NR]; MR];
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r.copy_from_slice(&c[(i0 + r) * n + j0..(i0 + r) * n + j0 + NR]);
            }
            for p in 0..k {
                let brow = &b[p * n + j0..p * n + j0 + NR];
                for r in 0..MR {
                    let av = rows[r][p];
                    for j in 0..NR {
                        acc[r][j] = madd(av, brow[j], acc[r][j]);
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate() {
                c[(i0 + r) * n + j0..(i0 + r) * n + j0 + NR].copy_from_slice(acc_r);
            }
        }
        // Columns past the last full NR block.
        for r in 0..MR {
            let crow = &mut c[(i0 + r) * n..(i0 + r + 1) * n];
            for p in 0..k {
                let av = rows[r][p];
                let brow = &b[p * n..(p + 1) * n];
                for j in n_main..n {
                    crow[j] = madd(av, brow[j], crow[j]);
                }
            }
        }
    }
    // Rows past the last full MR block: i-k-j, which still vectorises over j.
    for i in m_main..m {
        let crow = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            let av = a[i * k + p];
            let brow = &b[p * n..(p + 1) * n];
            for (cv, bv) in crow.iter_mut().zip(brow) {
                *cv = madd(av, *bv, *cv);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gemm_avx2(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm_body::<16, true>(m, n, k, a, b, c)
}

fn gemm_f32(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features `gemm_avx2` is compiled for (checked
            // just above); the function itself only does safe slice arithmetic.
            unsafe { gemm_avx2(m, n, k, a, b, c) };
            return;
        }
    }
    gemm_body::<8, false>(m, n, k, a, b, c)
}

fn gemm_generic<T: Copy>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    c: &mut [T],
    madd: impl Fn(T, T, T) -> T,
) {
    for i in 0..m {
        let crow = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            let av = a[i * k + p];
            for (cv, bv) in crow.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *cv = madd(av, *bv, *cv);
            }
        }
    }
}

/// `out = a @ b + acc` for `[M,K] x [K,N]` or batched `[B,M,K] x [B,K,N]`; the result has
/// `acc`'s dtype `d` and products accumulate in f32 (f64 for f64, wrapping i32/i64 for
/// integers).
pub(crate) fn dot(
    d: DType,
    a: &Data,
    b: &Data,
    acc: &Data,
    a_shape: &[usize],
    b_shape: &[usize],
    out: &mut Data,
) -> Res {
    out.assign(acc);
    dot_into(d, a, b, out, a_shape, b_shape)
}

/// `c += a @ b` in place (`c` holds the accumulator), as [`dot`].
pub(crate) fn dot_into(
    d: DType,
    a: &Data,
    b: &Data,
    acc: &mut Data,
    a_shape: &[usize],
    b_shape: &[usize],
) -> Res {
    let r = a_shape.len();
    if r < 2 || b_shape.len() != r {
        return Err(format!("dot of shapes {a_shape:?} and {b_shape:?}"));
    }
    let (m, k, n) = (a_shape[r - 2], a_shape[r - 1], b_shape[r - 1]);
    let batch = if r == 3 { a_shape[0] } else { 1 };
    if b_shape[r - 2] != k || acc.len() != batch * m * n || a.len() != batch * m * k {
        return Err(format!(
            "dot shapes do not match: {a_shape:?} x {b_shape:?}"
        ));
    }
    macro_rules! batched {
        ($a:expr, $b:expr, $c:expr, $f:expr) => {
            for bi in 0..batch {
                $f(
                    &$a[bi * m * k..(bi + 1) * m * k],
                    &$b[bi * k * n..(bi + 1) * k * n],
                    &mut $c[bi * m * n..(bi + 1) * m * n],
                );
            }
        };
    }
    match (a, b, &mut *acc) {
        (Data::F32(a), Data::F32(b), Data::F32(c)) => {
            batched!(a, b, c, |a, b, c| gemm_f32(m, n, k, a, b, c));
            round_f32(c, d);
        }
        (Data::F64(a), Data::F64(b), Data::F64(c)) => {
            batched!(a, b, c, |a, b, c| gemm_generic(
                m,
                n,
                k,
                a,
                b,
                c,
                |x: f64, y: f64, z: f64| { x.mul_add(y, z) }
            ));
        }
        (Data::I32(a), Data::I32(b), Data::I32(c)) => {
            batched!(a, b, c, |a, b, c| gemm_generic(
                m,
                n,
                k,
                a,
                b,
                c,
                |x: i32, y: i32, z: i32| { z.wrapping_add(x.wrapping_mul(y)) }
            ));
            super::data::normalize_i32(c, d);
        }
        (Data::I32(a), Data::I32(b), Data::F32(c)) => {
            let fa: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            let fb: Vec<f32> = b.iter().map(|&x| x as f32).collect();
            batched!(fa, fb, c, |a, b, c| gemm_f32(m, n, k, a, b, c));
            round_f32(c, d);
        }
        (Data::I64(a), Data::I64(b), Data::I64(c)) => {
            batched!(a, b, c, |a, b, c| gemm_generic(
                m,
                n,
                k,
                a,
                b,
                c,
                |x: i64, y: i64, z: i64| { z.wrapping_add(x.wrapping_mul(y)) }
            ));
        }
        _ => {
            return Err(format!(
                "dot of these operand types into {d} is not supported"
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &[f32]) -> Vec<f64> {
        let mut out: Vec<f64> = c.iter().map(|&x| x as f64).collect();
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    out[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
            }
        }
        out
    }

    #[test]
    fn gemm_matches_reference_on_ragged_shapes() {
        for &(m, n, k) in &[
            (4, 16, 16),
            (8, 32, 16),
            (5, 19, 7),
            (1, 1, 1),
            (64, 64, 32),
            (2, 8, 3),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
                .collect();
            let c: Vec<f32> = (0..m * n).map(|i| (i % 3) as f32).collect();
            let mut out = Data::default();
            dot(
                DType::F32,
                &Data::F32(a.clone()),
                &Data::F32(b.clone()),
                &Data::F32(c.clone()),
                &[m, k],
                &[k, n],
                &mut out,
            )
            .unwrap();
            let Data::F32(got) = out else { panic!() };
            let want = reference(m, n, k, &a, &b, &c);
            for (g, w) in got.iter().zip(&want) {
                assert!((*g as f64 - w).abs() < 1e-4, "{m}x{n}x{k}: {g} vs {w}");
            }
        }
    }
}
