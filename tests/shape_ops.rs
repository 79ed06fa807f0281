//! Triton's standard shape functions (`flip`, `cat`, `view`, `expand_dims` over several
//! axes, `trans` with an order), `sort`, `cumprod(reverse=True)` and `sum(dtype=)`, written
//! as a user would and run on every target against a reference computed here, with
//! edge values (NaN, ±inf, ±0), masked tails and poisoned outputs.

mod support;

use support::every_target;

use triton_metal::runtime::out;
use triton_metal::tl;
use triton_metal::{Array, DType::*};

const POISON: f64 = -777.0;

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    let edges = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.5,
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

/// `flip` on either axis, `cat`, `expand_dims` over several axes, `trans` with an order
/// and `view` of a [4, 8] block (the last row masked off and read as `other`).
#[test]
fn flip_cat_expand_trans() {
    let (r, c) = (4usize, 8usize);
    let k = tl::jit("shape_fns", |k| {
        let (x, y, o) = (k.ptr(F32, "x"), k.ptr(F32, "y"), k.ptr(F32, "o"));
        let rows = k.scalar(I32, "rows");
        let (ri, ci) = (tl::arange(0, 4), tl::arange(0, 8));
        let idx = ri.col() * 8 + ci.row();
        let m = ri.col().lt(rows) & ci.row().lt(8);
        let a = tl::load_with(x + idx, m, 0.25f32);
        let b = tl::load(y + idx);
        tl::store(o + idx, tl::flip(a, 1));
        tl::store(o + 32 + idx, tl::flip(a, -2));
        let cat_idx = tl::arange(0, 8).col() * 8 + ci.row();
        tl::store(o + 64 + cat_idx, tl::cat(a, b, true));
        // [8] -> [1, 8, 1] -> [8]
        let e = tl::expand_dims_axes(tl::load(x + ci), [0, -1]);
        assert_eq!(e.shape(), vec![1, 8, 1]);
        tl::store(o + 128 + ci, tl::view(e, [8]));
        // [4, 8] viewed as [2, 2, 8], permuted to [8, 2, 2].
        let t = tl::trans_dims(tl::view(a, [2, 2, 8]), [2, 0, 1]);
        assert_eq!(t.shape(), vec![8, 2, 2]);
        tl::store(o + 136 + tl::arange(0, 32), tl::reshape(t, [32]));
    })
    .unwrap();
    let xs = values(r * c, 1);
    let ys = values(r * c, 2);
    let rows = 3usize;
    let xa = Array::from_slice(&xs, &[r * c]).unwrap();
    let ya = Array::from_slice(&ys, &[r * c]).unwrap();
    let mut a = xs.clone();
    a[rows * c..].iter_mut().for_each(|v| *v = 0.25);
    let at = |i: usize, j: usize| a[i * c + j];
    let mut want = vec![];
    want.extend(
        (0..r)
            .flat_map(|i| (0..c).map(move |j| (i, c - 1 - j)))
            .map(|(i, j)| at(i, j)),
    );
    want.extend(
        (0..r)
            .flat_map(|i| (0..c).map(move |j| (r - 1 - i, j)))
            .map(|(i, j)| at(i, j)),
    );
    want.extend(&a);
    want.extend(&ys);
    want.extend(&xs[..8]);
    // t[p][q][s] = a3[q][s][p] with a3 = a as [2, 2, 8].
    for p in 0..8 {
        for q in 0..2 {
            for s in 0..2 {
                want.push(a[q * 16 + s * 8 + p]);
            }
        }
    }
    let total = want.len() + 8;
    for (t, o) in every_target(&k, |l| {
        l.grid([1])
            .args((&xa, &ya, out(&[total], F32).fill(POISON), rows as i32))
    }) {
        let got = o[0].to_vec::<f32>().unwrap();
        assert!(
            same_bits(&got[..want.len()], &want),
            "{t:?}:\n{got:?}\nwant\n{want:?}"
        );
        assert!(
            got[want.len()..].iter().all(|&v| v == POISON as f32),
            "{t:?}: tail"
        );
    }
}

/// Triton's bitonic network, element by element: `(x[j] > x[p]) ^ descending-run` swaps.
fn network(v: &mut [f32], pre: usize, n: usize, post: usize, descending: bool) {
    let k = n.trailing_zeros();
    for stage in 1..=k {
        for i in (k - stage)..k {
            let d = 1usize << (k - 1 - i);
            for o in 0..pre {
                for q in 0..post {
                    for j in (0..n).filter(|j| j & d == 0) {
                        let dir = if stage < k {
                            (j >> stage) & 1 == 1
                        } else {
                            descending
                        };
                        let (a, b) = ((o * n + j) * post + q, (o * n + j + d) * post + q);
                        if (v[a] > v[b]) ^ dir {
                            v.swap(a, b);
                        }
                    }
                }
            }
        }
    }
}

/// `sort` of [8, 16] blocks along either axis, ascending and descending; NaN-free rows
/// must come out sorted, and every result is the network's (NaN, ±0 placement included).
#[test]
fn sort_along_either_axis() {
    let k = tl::jit("sort_fns", |k| {
        let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
        let idx = tl::arange(0, 8).col() * 16 + tl::arange(0, 16).row();
        let a = tl::load(x + idx);
        tl::store(o + idx, tl::sort(a, 1, false));
        tl::store(o + 128 + idx, tl::sort(a, -1, true));
        tl::store(o + 256 + idx, tl::sort(a, 0, false));
        tl::store(o + 384 + idx, tl::sort(a, 0, true));
        let i = tl::arange(0, 128);
        tl::store(o + 512 + i, tl::sort(tl::load(x + i), 0, false));
    })
    .unwrap();
    let mut xs = values(128, 3);
    // Rows 0-3 without NaN: sorted for sure.
    for v in &mut xs[..64] {
        if v.is_nan() {
            *v = 3.25;
        }
    }
    let xa = Array::from_slice(&xs, &[128]).unwrap();
    let mut want = vec![];
    for (pre, n, post, desc) in [
        (8, 16, 1, false),
        (8, 16, 1, true),
        (1, 8, 16, false),
        (1, 8, 16, true),
        (1, 128, 1, false),
    ] {
        let mut v = xs.clone();
        network(&mut v, pre, n, post, desc);
        want.extend(v);
    }
    for r in 0..4 {
        let row = &want[r * 16..r * 16 + 16];
        assert!(
            row.windows(2).all(|w| w[0] <= w[1]),
            "network row {r}: {row:?}"
        );
    }
    for (t, o) in every_target(&k, |l| {
        l.grid([1]).args((&xa, out(&[648], F32).fill(POISON)))
    }) {
        let got = o[0].to_vec::<f32>().unwrap();
        assert!(
            same_bits(&got[..640], &want),
            "{t:?}:\n{got:?}\nwant\n{want:?}"
        );
        assert!(
            got[640..].iter().all(|&v| v == POISON as f32),
            "{t:?}: tail"
        );
    }
}

/// `cumprod(reverse=True)` and `sum(dtype=int8)` (which wraps) and `sum(dtype=float32)` of
/// integers.
#[test]
fn reverse_cumprod_and_sum_dtype() {
    let k = tl::jit("scan_fns", |k| {
        let (x, xi, o, oi) = (
            k.ptr(F32, "x"),
            k.ptr(I32, "xi"),
            k.ptr(F32, "o"),
            k.ptr(I32, "oi"),
        );
        let idx = tl::arange(0, 4).col() * 8 + tl::arange(0, 8).row();
        tl::store(o + idx, tl::cumprod_reverse(tl::load(x + idx), 1));
        let v = tl::load(xi + idx);
        let r = tl::arange(0, 4);
        tl::store(oi + r, tl::sum_dtype(v, 1, I8).to(I32));
        tl::store(o + 32 + r, tl::sum_dtype(v, 1, F32));
    })
    .unwrap();
    let xs: Vec<f32> = (0..32)
        .map(|i| [1.5f32, -0.5, 2.0, 1.0, -1.0, 0.0, f32::INFINITY][i % 7])
        .collect();
    let xi: Vec<i32> = (0..32).map(|i| i * 37 - 200).collect();
    let mut want = vec![0f32; 36];
    for r in 0..4 {
        let mut acc = 1f32;
        for c in (0..8).rev() {
            acc *= xs[r * 8 + c];
            want[r * 8 + c] = acc;
        }
        want[32 + r] = (0..8).map(|c| xi[r * 8 + c] as f32).sum();
    }
    let want_i: Vec<i32> = (0..4)
        .map(|r| (0..8).fold(0i8, |a, c| a.wrapping_add(xi[r * 8 + c] as i8)) as i32)
        .collect();
    let xa = Array::from_slice(&xs, &[32]).unwrap();
    let xia = Array::from_slice(&xi, &[32]).unwrap();
    for (t, o) in every_target(&k, |l| {
        l.grid([1]).args((
            &xa,
            &xia,
            out(&[36], F32).fill(POISON),
            out(&[4], I32).fill(POISON),
        ))
    }) {
        assert!(
            same_bits(&o[0].to_vec::<f32>().unwrap(), &want),
            "{t:?}: {:?}",
            o[0].to_vec::<f32>()
        );
        assert_eq!(o[1].to_vec::<i32>().unwrap(), want_i, "{t:?}");
    }
}

/// Bad axes are build errors naming the function (block sizes are powers of two already).
#[test]
fn bad_arguments_are_errors() {
    let e = tl::jit("bad_sort", |k| {
        let o = k.ptr(F32, "o");
        let i = tl::arange(0, 8);
        let v = tl::reshape(i.to(F32), [2, 4]);
        let v = tl::cat(v, v, true); // [4, 4]
        let w = tl::view(v, [16]);
        let z = tl::sort(tl::reshape(tl::cat(w, w, true), [2, 16]), 2, false);
        tl::store(o + tl::arange(0, 32), tl::reshape(z, [32]));
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("sort") && e.contains("out of range"), "{e}");
    let e = tl::jit("bad_flip", |k| {
        let o = k.ptr(F32, "o");
        let v = tl::full([2, 4], 1.0f32, F32);
        tl::store(o + tl::arange(0, 8), tl::reshape(tl::flip(v, -3), [8]));
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("flip") && e.contains("out of range"), "{e}");
}

/// `gather` along either axis of a 2-D block (values bit-exact: NaN, -0.0, inf, a
/// subnormal), with indices out of range (negative, past the end) giving 0; on f32, f16
/// and i64 sources with i32 and i64 indices.
#[test]
fn gather_along_either_axis() {
    const R: usize = 8;
    const C: usize = 16;
    for axis in [0usize, 1] {
        for (sd, id) in [(F32, I32), (F16, I64), (I64, I32)] {
            let name = format!("gather_{axis}_{}_{}", sd.short_name(), id.short_name());
            // index: [R, C] along axis 1 (J = C), [R2, C] along axis 0 (J = 4).
            let (ir, ic) = if axis == 1 { (R, 8) } else { (4, C) };
            let k = tl::jit(&name, move |k| {
                let (s, i, o) = (k.ptr(sd, "s"), k.ptr(id, "i"), k.ptr(sd, "o"));
                let (rs, cs) = (tl::arange(0, R as i64), tl::arange(0, C as i64));
                let src = tl::load(s + rs.col() * C as i32 + cs.row());
                let (ri, ci) = (tl::arange(0, ir as i64), tl::arange(0, ic as i64));
                let idx = tl::load(i + ri.col() * ic as i32 + ci.row());
                let g = tl::gather(src, idx, axis as i64);
                tl::store(o + ri.col() * ic as i32 + ci.row(), g);
            })
            .unwrap();
            let vals = values(R * C, 3);
            let n = if axis == 1 { C } else { R } as i64;
            let idx: Vec<i64> = (0..ir * ic)
                .map(|j| match j % 11 {
                    0 => -1,
                    5 => n,
                    _ => (j as i64 * 7 + 3) % n,
                })
                .collect();
            let want: Vec<f64> = (0..ir * ic)
                .map(|j| {
                    let (r, c) = (j / ic, j % ic);
                    let x = idx[j];
                    if !(0..n).contains(&x) {
                        return 0.0;
                    }
                    let x = x as usize;
                    let e = if axis == 1 { r * C + x } else { x * C + c };
                    vals[e] as f64
                })
                .collect();
            let src = match sd {
                F32 => Array::from_slice(&vals, &[R * C]).unwrap(),
                F16 => {
                    let h: Vec<half::f16> = vals.iter().map(|&x| half::f16::from_f32(x)).collect();
                    Array::from_slice(&h, &[R * C]).unwrap()
                }
                _ => {
                    let h: Vec<i64> = vals
                        .iter()
                        .map(|&x| {
                            if x.is_finite() {
                                (x * 1e12) as i64
                            } else {
                                -1 << 62
                            }
                        })
                        .collect();
                    Array::from_slice(&h, &[R * C]).unwrap()
                }
            };
            let ia = if id == I32 {
                let v: Vec<i32> = idx.iter().map(|&x| x as i32).collect();
                Array::from_slice(&v, &[ir * ic]).unwrap()
            } else {
                Array::from_slice(&idx, &[ir * ic]).unwrap()
            };
            for (t, o) in every_target(&k, |l| {
                l.grid([1])
                    .args((&src, &ia, out(&[ir * ic], sd).fill(POISON)))
            }) {
                match sd {
                    F32 => {
                        let got = o[0].to_vec::<f32>().unwrap();
                        let w: Vec<f32> = want.iter().map(|&x| x as f32).collect();
                        assert!(same_bits(&got, &w), "{name} on {t:?}: {got:?}\n{w:?}");
                    }
                    F16 => {
                        let got: Vec<u16> = o[0]
                            .to_vec::<half::f16>()
                            .unwrap()
                            .iter()
                            .map(|x| x.to_bits())
                            .collect();
                        let w: Vec<u16> = want
                            .iter()
                            .map(|&x| half::f16::from_f64(x).to_bits())
                            .collect();
                        let nan = |b: u16| half::f16::from_bits(b).is_nan();
                        assert!(
                            got.iter()
                                .zip(&w)
                                .all(|(a, b)| a == b || (nan(*a) && nan(*b))),
                            "{name} on {t:?}: {got:?}\n{w:?}"
                        );
                    }
                    _ => {
                        let got = o[0].to_vec::<i64>().unwrap();
                        let w: Vec<i64> = (0..ir * ic)
                            .map(|j| {
                                let x = idx[j];
                                if !(0..n).contains(&x) {
                                    return 0;
                                }
                                let (r, c, x) = (j / ic, j % ic, x as usize);
                                let v = vals[if axis == 1 { r * C + x } else { x * C + c }];
                                if v.is_finite() {
                                    (v * 1e12) as i64
                                } else {
                                    -1 << 62
                                }
                            })
                            .collect();
                        assert_eq!(got, w, "{name} on {t:?}");
                    }
                }
            }
        }
    }
}

/// `histogram` with and without a mask, counting values in `[0, num_bins)` only (negative
/// values and values past the last bin are not counted).
#[test]
fn histogram_with_a_mask() {
    for masked in [false, true] {
        let name = format!("histogram_{masked}");
        let k = tl::jit(&name, move |k| {
            let (x, n, o) = (k.ptr(I32, "x"), k.scalar(I32, "n"), k.ptr(I32, "o"));
            let offs = tl::arange(0, 128);
            let v = tl::load(x + offs);
            let h = if masked {
                tl::histogram(v, 16, Some(offs.lt(n)))
            } else {
                tl::histogram(v, 16, None)
            };
            tl::store(o + tl::arange(0, 16), h);
        })
        .unwrap();
        let xs: Vec<i32> = (0..128).map(|i| (i * 37 % 23) - 3).collect();
        let n = 77usize;
        let mut want = vec![0i32; 16];
        for (i, &v) in xs.iter().enumerate() {
            if (0..16).contains(&v) && (!masked || i < n) {
                want[v as usize] += 1;
            }
        }
        let xa = Array::from_slice(&xs, &[128]).unwrap();
        for (t, o) in every_target(&k, |l| {
            l.grid([1])
                .args((&xa, n as i32, out(&[16], I32).fill(POISON)))
        }) {
            assert_eq!(o[0].to_vec::<i32>().unwrap(), want, "{name} on {t:?}");
        }
    }
}

/// `topk` of each row of a 4x32 block (infinities and signed zeros among the values), the
/// largest or the smallest `k` in sorted order, for `k` from 1 to the whole row.
#[test]
fn topk_of_rows() {
    for (k, desc) in [(8usize, true), (8, false), (1, true), (32, true)] {
        let name = format!("topk_{k}_{desc}");
        let kern = tl::jit(&name, move |kb| {
            let (x, o) = (kb.ptr(F32, "x"), kb.ptr(F32, "o"));
            let (r, c) = (tl::arange(0, 4), tl::arange(0, 32));
            let v = tl::load(x + r.col() * 32 + c.row());
            let t = tl::topk(v, k as i64, -1, desc);
            tl::store(o + r.col() * k as i32 + tl::arange(0, k as i64).row(), t);
        })
        .unwrap();
        let vals: Vec<f32> = values(128, 11)
            .into_iter()
            .map(|x| if x.is_nan() { 4.25 } else { x })
            .collect();
        let mut want = Vec::new();
        for row in vals.chunks(32) {
            let mut r = row.to_vec();
            r.sort_by(|a, b| a.partial_cmp(b).unwrap());
            if desc {
                r.reverse();
            }
            want.extend_from_slice(&r[..k]);
        }
        let xa = Array::from_slice(&vals, &[128]).unwrap();
        for (t, o) in every_target(&kern, |l| {
            l.grid([1]).args((&xa, out(&[4 * k], F32).fill(POISON)))
        }) {
            assert_eq!(o[0].to_vec::<f32>().unwrap(), want, "{name} on {t:?}");
        }
    }
    let e = tl::jit("topk_bad_k", |kb| {
        let x = kb.ptr(F32, "x");
        let v = tl::load(x + tl::arange(0, 32));
        tl::store(x + tl::arange(0, 4), tl::topk(v, 3, -1, true));
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(e.contains("topk") && e.contains("power of two"), "{e}");
}
