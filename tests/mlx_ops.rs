//! MLX reference ops checked against values computed independently in Rust (f64).

use approx::assert_relative_eq;
use triton_metal::{mlx, Array, DType};

type Binary = fn(&Array, &Array) -> triton_metal::Result<Array>;
type Unary = fn(&Array) -> triton_metal::Result<Array>;
type BinCase = (&'static str, Binary, fn(f64, f64) -> f64);
type UnCase<'a> = (&'a Array, &'a Vec<f32>, Unary, fn(f64) -> f64);

fn data(n: usize, seed: u32) -> Vec<f32> {
    // A small LCG: deterministic, independent of MLX's generator.
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

const R: usize = 5;
const C: usize = 7;

fn mat(seed: u32) -> (Vec<f32>, Array) {
    let v = data(R * C, seed);
    let a = Array::from_slice(&v, &[R, C]).unwrap();
    (v, a)
}

#[test]
fn elementwise_binary() {
    let (x, a) = mat(1);
    let (y, b) = mat(2);
    let cases: [BinCase; 6] = [
        ("add", mlx::add, |a, b| a + b),
        ("subtract", mlx::subtract, |a, b| a - b),
        ("multiply", mlx::multiply, |a, b| a * b),
        ("divide", mlx::divide, |a, b| a / b),
        ("maximum", mlx::maximum, f64::max),
        ("minimum", mlx::minimum, f64::min),
    ];
    for (name, op, f) in cases {
        let got = op(&a, &b).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(p, q)| f(*p as f64, *q as f64))
            .collect();
        println!("{name}");
        close(&got, &want, 1e-6);
    }
    // Broadcasting a row.
    let row = Array::from_slice(&y[..C], &[C]).unwrap();
    let got = mlx::add(&a, &row).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f64> = (0..R * C).map(|i| x[i] as f64 + y[i % C] as f64).collect();
    close(&got, &want, 1e-6);
}

#[test]
fn elementwise_unary() {
    let (x, a) = mat(3);
    let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.1).collect();
    let p = Array::from_slice(&pos, &[R, C]).unwrap();
    let cases: [UnCase; 10] = [
        (&a, &x, mlx::exp, f64::exp),
        (&p, &pos, mlx::log, f64::ln),
        (&p, &pos, mlx::sqrt, f64::sqrt),
        (&p, &pos, mlx::rsqrt, |v| 1.0 / v.sqrt()),
        (&a, &x, mlx::abs, f64::abs),
        (&a, &x, mlx::sin, f64::sin),
        (&a, &x, mlx::cos, f64::cos),
        (&a, &x, mlx::floor, f64::floor),
        (&a, &x, mlx::ceil, f64::ceil),
        (&a, &x, mlx::sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
    ];
    for (arr, src, op, f) in cases {
        let got = op(arr).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f64> = src.iter().map(|v| f(*v as f64)).collect();
        close(&got, &want, 1e-5);
    }
}

#[test]
fn reductions_over_axes() {
    let (x, a) = mat(4);
    let at = |r: usize, c: usize| x[r * C + c] as f64;
    let rows_sum: Vec<f64> = (0..R).map(|r| (0..C).map(|c| at(r, c)).sum()).collect();
    close(
        &mlx::sum(&a, Some(&[1]), false).unwrap().to_vec().unwrap(),
        &rows_sum,
        1e-5,
    );
    let s = mlx::sum(&a, Some(&[1]), true).unwrap();
    assert_eq!(s.shape(), vec![R, 1]);
    let cols_max: Vec<f64> = (0..C)
        .map(|c| (0..R).map(|r| at(r, c)).fold(f64::MIN, f64::max))
        .collect();
    close(
        &mlx::max(&a, Some(&[0]), false).unwrap().to_vec().unwrap(),
        &cols_max,
        0.0,
    );
    let all_min = x.iter().fold(f32::MAX, |m, v| m.min(*v));
    assert_eq!(
        mlx::min(&a, None, false).unwrap().item::<f32>().unwrap(),
        all_min
    );
    let mean: f64 = x.iter().map(|v| *v as f64).sum::<f64>() / (R * C) as f64;
    assert_relative_eq!(
        mlx::mean(&a, None, false).unwrap().item::<f32>().unwrap() as f64,
        mean,
        epsilon = 1e-5
    );

    let am = mlx::argmax(&a, Some(1), false).unwrap();
    let am = mlx::astype(&am, DType::I32)
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    for (r, got) in am.iter().enumerate() {
        let best = (0..C).fold(0, |b, c| if at(r, c) > at(r, b) { c } else { b });
        assert_eq!(*got as usize, best);
    }
    let an = mlx::argmin(&a, None, false).unwrap();
    let an = mlx::astype(&an, DType::I32).unwrap().item::<i32>().unwrap();
    let best = (0..R * C).fold(0, |b, i| if x[i] < x[b] { i } else { b });
    assert_eq!(an as usize, best);

    let cs = mlx::cumsum(&a, 1).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f64> = (0..R * C)
        .map(|i| (0..=i % C).map(|c| at(i / C, c)).sum())
        .collect();
    close(&cs, &want, 1e-5);
}

#[test]
fn matmul_softmax_norms() {
    let (x, a) = mat(5);
    let (y, _) = mat(6);
    let b = Array::from_slice(&y, &[C, R]).unwrap();
    let got = mlx::matmul(&a, &b).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f64> = (0..R * R)
        .map(|i| {
            (0..C)
                .map(|k| x[i / R * C + k] as f64 * y[k * R + i % R] as f64)
                .sum()
        })
        .collect();
    close(&got, &want, 1e-5);

    let sm = mlx::softmax(&a, &[1], true)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let mut want = Vec::new();
    for r in 0..R {
        let row: Vec<f64> = x[r * C..(r + 1) * C].iter().map(|v| *v as f64).collect();
        let m = row.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
        want.extend(row.iter().map(|v| (v - m).exp() / z));
    }
    close(&sm, &want, 1e-5);

    let w: Vec<f32> = data(C, 7);
    let bias: Vec<f32> = data(C, 8);
    let wa = Array::from_slice(&w, &[C]).unwrap();
    let ba = Array::from_slice(&bias, &[C]).unwrap();
    let ln = mlx::layer_norm(&a, Some(&wa), Some(&ba), 1e-5)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let rn = mlx::rms_norm(&a, Some(&wa), 1e-5)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let (mut want_ln, mut want_rn) = (Vec::new(), Vec::new());
    for r in 0..R {
        let row: Vec<f64> = x[r * C..(r + 1) * C].iter().map(|v| *v as f64).collect();
        let mu = row.iter().sum::<f64>() / C as f64;
        let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / C as f64;
        let ms = row.iter().map(|v| v * v).sum::<f64>() / C as f64;
        for c in 0..C {
            want_ln.push((row[c] - mu) / (var + 1e-5).sqrt() * w[c] as f64 + bias[c] as f64);
            want_rn.push(row[c] / (ms + 1e-5).sqrt() * w[c] as f64);
        }
    }
    close(&ln, &want_ln, 1e-4);
    close(&rn, &want_rn, 1e-4);
}

#[test]
fn shape_ops_where_and_casts() {
    let (x, a) = mat(9);
    let r = mlx::reshape(&a, &[C as i32, -1]).unwrap();
    assert_eq!(r.shape(), vec![C, R]);
    assert_eq!(r.to_vec::<f32>().unwrap(), x);
    let t = mlx::transpose(&a, Some(&[1, 0])).unwrap();
    let tv = mlx::contiguous(&t).unwrap().to_vec::<f32>().unwrap();
    for i in 0..R {
        for j in 0..C {
            assert_eq!(tv[j * R + i], x[i * C + j]);
        }
    }
    let cond = mlx::greater(&a, &mlx::zeros(&[], DType::F32).unwrap()).unwrap();
    let w = mlx::where_(&cond, &a, &mlx::full(&[1], -9.0, DType::F32).unwrap()).unwrap();
    let want: Vec<f64> = x
        .iter()
        .map(|v| if *v > 0.0 { *v as f64 } else { -9.0 })
        .collect();
    close(&w.to_vec().unwrap(), &want, 0.0);
    // float -> int truncates toward zero.
    let i = mlx::astype(&a, DType::I32)
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    assert_eq!(i, x.iter().map(|v| v.trunc() as i32).collect::<Vec<_>>());
    let bc = mlx::broadcast_to(&Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap(), &[3, 2]).unwrap();
    assert_eq!(
        bc.to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    );
    let ar = mlx::arange(0.0, 5.0, 1.0, DType::I32).unwrap();
    assert_eq!(ar.to_vec::<i32>().unwrap(), vec![0, 1, 2, 3, 4]);
    let sl = mlx::slice(&a, &[1, 2], &[3, 4]).unwrap();
    assert_eq!(sl.to_vec::<f32>().unwrap(), vec![x[9], x[10], x[16], x[17]]);
}

#[test]
fn seeded_random() {
    let u1 = mlx::random::uniform(&[1000], DType::F32, -1.0, 1.0, 42)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let u2 = mlx::random::uniform(&[1000], DType::F32, -1.0, 1.0, 42)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let u3 = mlx::random::uniform(&[1000], DType::F32, -1.0, 1.0, 43)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(u1, u2);
    assert_ne!(u1, u3);
    assert!(u1.iter().all(|v| (-1.0..1.0).contains(v)));
    let mean = u1.iter().sum::<f32>() / 1000.0;
    assert!(mean.abs() < 0.1, "{mean}");
    let n = mlx::random::normal(&[4000], DType::F32, 7)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let m = n.iter().sum::<f32>() / 4000.0;
    let var = n.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / 4000.0;
    assert!(m.abs() < 0.1 && (var - 1.0).abs() < 0.1, "{m} {var}");
    assert!(mlx::random::uniform(&[3], DType::I32, 0.0, 1.0, 1).is_err());
}

#[test]
fn mlx_errors_carry_mlx_messages() {
    let a = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let b = Array::from_slice(&[1.0f32; 8], &[4, 2]).unwrap();
    let e = mlx::matmul(&a, &b).unwrap_err().to_string();
    assert!(e.starts_with("MLX error:") && e.contains("matmul"), "{e}");
    let e = mlx::reshape(&a, &[4, 2]).unwrap_err().to_string();
    assert!(e.contains("reshape"), "{e}");
    let c = Array::from_slice(&[1.0f32; 2], &[2]).unwrap();
    let e = mlx::add(&a, &c).unwrap_err().to_string();
    assert!(e.contains("broadcast"), "{e}");
    let e = mlx::argmax(&a, Some(5), false).unwrap_err().to_string();
    assert!(e.starts_with("MLX error:"), "{e}");
}

#[test]
fn fused_attention_matches_an_f64_reference() {
    // Ragged: Lq != Lk, D != Dv, two batch entries.
    let (b, lq, lk, d, dv) = (2usize, 7usize, 9usize, 12usize, 5usize);
    let (q, k, v) = (
        data(b * lq * d, 1),
        data(b * lk * d, 2),
        data(b * lk * dv, 3),
    );
    let scale = 1.0 / (d as f64).sqrt();
    let mut want = vec![0f64; b * lq * dv];
    for bi in 0..b {
        for i in 0..lq {
            let s: Vec<f64> = (0..lk)
                .map(|j| {
                    (0..d)
                        .map(|c| q[(bi * lq + i) * d + c] as f64 * k[(bi * lk + j) * d + c] as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = s.iter().copied().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..dv {
                want[(bi * lq + i) * dv + c] = (0..lk)
                    .map(|j| e[j] / z * v[(bi * lk + j) * dv + c] as f64)
                    .sum();
            }
        }
    }
    let arr = |x: &[f32], l: usize, w: usize| Array::from_slice(x, &[b, 1, l, w]).unwrap();
    let o = mlx::scaled_dot_product_attention(
        &arr(&q, lq, d),
        &arr(&k, lk, d),
        &arr(&v, lk, dv),
        scale as f32,
    )
    .unwrap();
    assert_eq!(o.shape(), vec![b, 1, lq, dv]);
    close(&o.to_vec::<f32>().unwrap(), &want, 2e-6);
}
