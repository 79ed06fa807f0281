//! `dot(input_precision=)` on fp32 operands and Philox with 64-bit offsets, on every target
//! (CPU interpreter, compiled CPU executor, emulated Metal in both lane orders; CUDA
//! compiled by NVRTC), against references computed here: TF32 rounding and f64 sums, and
//! Philox-4x32-10 as Triton's `randint4x` calls it.

mod support;

use support::every_target;

use triton_metal::runtime::{out, Target};
use triton_metal::tl;
use triton_metal::{Array, DType::*};

/// PTX's `cvt.rna.tf32.f32`: to nearest, ties away from zero; inf and NaN unchanged.
fn tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    f32::from_bits(x.to_bits().wrapping_add(0x1000) & 0xFFFF_E000)
}

/// `input_precision` of a 32x16 @ 16x32 fp32 dot: each result is within fp32 summation error
/// of the f64 sum of its precision's products, and the three precisions really differ.
#[test]
fn dot_input_precision() {
    const M: usize = 32;
    const K: usize = 16;
    let a: Vec<f32> = (0..M * K)
        .map(|i| ((i * 2654435761usize) % 100003) as f32 / 7919.0 - 6.3)
        .collect();
    let b: Vec<f32> = (0..K * M)
        .map(|i| ((i * 40503usize) % 99991) as f32 / 6007.0 - 8.1)
        .collect();
    let (aa, ba) = (
        Array::from_slice(&a, &[M * K]).unwrap(),
        Array::from_slice(&b, &[K * M]).unwrap(),
    );
    let split = |x: f32| {
        let h = tf32(x);
        (h, tf32(x - h))
    };
    let mut errs = Vec::new();
    for prec in ["ieee", "tf32", "tf32x3"] {
        let name = format!("dot_{prec}");
        let k = tl::jit(&name, move |k| {
            let (pa, pb, po) = (k.ptr(F32, "a"), k.ptr(F32, "b"), k.ptr(F32, "o"));
            let (m, kk) = (tl::arange(0, M as i64), tl::arange(0, K as i64));
            let x = tl::load(pa + m.col() * K as i32 + kk.row());
            let y = tl::load(pb + kk.col() * M as i32 + m.row());
            let z = tl::dot_with(x, y, None, None, prec);
            tl::store(po + m.col() * M as i32 + m.row(), z);
        })
        .unwrap();
        let mut want = vec![0.0f64; M * M];
        let mut tol = vec![0.0f64; M * M];
        let mut exact = vec![0.0f64; M * M];
        for i in 0..M {
            for j in 0..M {
                for t in 0..K {
                    let (x, y) = (a[i * K + t], b[t * M + j]);
                    exact[i * M + j] += x as f64 * y as f64;
                    let p = match prec {
                        "ieee" => x as f64 * y as f64,
                        "tf32" => tf32(x) as f64 * tf32(y) as f64,
                        _ => {
                            let ((xh, xl), (yh, yl)) = (split(x), split(y));
                            xl as f64 * yh as f64 + xh as f64 * yl as f64 + xh as f64 * yh as f64
                        }
                    };
                    want[i * M + j] += p;
                    tol[i * M + j] +=
                        3.0 * K as f64 * (x as f64 * y as f64).abs() * f32::EPSILON as f64;
                }
            }
        }
        let mut worst = 0.0f64;
        for (t, o) in every_target(&k, |l| {
            l.grid([1])
                .args((&aa, &ba, out(&[M * M], F32).fill(f64::NAN)))
        }) {
            let got = o[0].to_vec::<f32>().unwrap();
            for e in 0..M * M {
                let d = (got[e] as f64 - want[e]).abs();
                assert!(
                    d <= tol[e],
                    "{name} on {t:?}: [{e}] {} vs {} (tol {})",
                    got[e],
                    want[e],
                    tol[e]
                );
                worst = worst.max((got[e] as f64 - exact[e]).abs());
            }
        }
        errs.push(worst);
    }
    // TF32 loses about 3 decimal digits; tf32x3 recovers nearly fp32.
    assert!(errs[1] > 100.0 * errs[0], "{errs:?}");
    assert!(errs[2] < errs[1] / 100.0, "{errs:?}");
    let e = tl::jit("dot_bad_precision", |k| {
        let p = k.ptr(F32, "p");
        let x = tl::load(p + tl::arange(0, 16).col() * 16 + tl::arange(0, 16).row());
        tl::store(
            p,
            tl::sum(tl::sum(tl::dot_with(x, x, None, None, "bf16x9"), 0), 0),
        );
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(e.contains("bf16x9") && e.contains("tf32x3"), "{e}");
}

/// Philox-4x32 with Triton's counters `(offset_lo, offset_hi, 0, 0)` and key `(seed_lo,
/// seed_hi)`: the first of the four outputs.
fn philox(seed: u64, offset: u64) -> u32 {
    let (mut c0, mut c1, mut c2, mut c3) = (offset as u32, (offset >> 32) as u32, 0u32, 0u32);
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    let mulhi = |a: u32, b: u32| ((a as u64 * b as u64) >> 32) as u32;
    for _ in 0..10 {
        let (a0, a2) = (c0, c2);
        c0 = mulhi(0xCD9E_8D57, a2) ^ c1 ^ k0;
        c2 = mulhi(0xD251_1F53, a0) ^ c3 ^ k1;
        c1 = 0xCD9E_8D57u32.wrapping_mul(a2);
        c3 = 0xD251_1F53u32.wrapping_mul(a0);
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    c0
}

/// `randint` and `rand` with int64 offsets past 2^32 and negative (Triton takes the high
/// word as the second counter), and uint64 ones; an int64 offset below 2^31 gives what the
/// same int32 offset gives.
#[test]
fn philox_with_64_bit_offsets() {
    for d in [I64, U64, I32] {
        let name = format!("philox_{}", d.short_name());
        let k = tl::jit(&name, move |k| {
            let sd = if d == I32 { I32 } else { I64 };
            let (seed, base) = (k.scalar(I64, "seed"), k.scalar(sd, "base").to(d));
            let (pi, pf) = (k.ptr(U32, "ints"), k.ptr(F32, "floats"));
            let offs = tl::arange(0, 64);
            let o = base + offs.to(d);
            tl::store(pi + offs, tl::randint(seed, o).to(U32));
            tl::store(pf + offs, tl::rand(seed, o));
        })
        .unwrap();
        let bases: Vec<i64> = match d {
            I32 => vec![0, 1 << 30, -40],
            _ => vec![0, (1 << 32) - 5, -3, (1 << 40) + 7],
        };
        for base in bases {
            let seed: i64 = 0x1234_5678_9ABC;
            let runs = every_target(&k, |l| {
                let l = l.grid([1]);
                match d {
                    I32 => l.args((seed, base as i32, out(&[64], U32), out(&[64], F32))),
                    _ => l.args((seed, base, out(&[64], U32), out(&[64], F32))),
                }
            });
            let off = |i: i64| -> u64 {
                match d {
                    I32 => (base as i32).wrapping_add(i as i32) as u32 as u64,
                    _ => base.wrapping_add(i) as u64,
                }
            };
            let want: Vec<u32> = (0..64).map(|i| philox(seed as u64, off(i))).collect();
            let wantf: Vec<f32> = want
                .iter()
                .map(|&r| {
                    let x = r as i32;
                    let x = if x < 0 { -x - 1 } else { x };
                    x as f32 * (4.656_612_734_2e-10_f64 as f32)
                })
                .collect();
            for (t, o) in runs {
                assert_eq!(
                    o[0].to_vec::<u32>().unwrap(),
                    want,
                    "{name} base {base} on {t:?}"
                );
                assert_eq!(
                    o[1].to_vec::<f32>().unwrap(),
                    wantf,
                    "{name} base {base} on {t:?}"
                );
            }
        }
    }
}

/// A matmul whose K loop carries the accumulator, on ragged sizes (masked tails in M, N
/// and K) with zeros of both signs, NaN, infinities and tiny and large values: the compiled
/// CPU executor gives the interpreter's bits, whether its dot accumulates into the loop's
/// variable (the accumulator's only use) or into a block of its own (the loop also reads
/// the old accumulator after the dot: `dot(a, b, acc) - acc`).
#[test]
fn dot_accumulator_carried_by_a_loop_matches_the_interpreter_bit_for_bit() {
    const M: usize = 37;
    const N: usize = 45;
    const K: usize = 70;
    let val = |i: usize, seed: usize| -> f32 {
        match (i * 7 + seed) % 41 {
            3 => 0.0,
            5 => -0.0,
            9 => 1.0e-30,
            13 => 3.0e30,
            _ if i == 17 * seed + 4 => f32::NAN,
            _ if i == 29 * seed + 11 => f32::INFINITY,
            _ => ((i * 2654435761usize + seed) % 100003) as f32 / 7919.0 - 6.3,
        }
    };
    let a: Vec<f32> = (0..M * K).map(|i| val(i, 1)).collect();
    let b: Vec<f32> = (0..K * N).map(|i| val(i, 2)).collect();
    let (aa, ba) = (
        Array::from_slice(&a, &[M * K]).unwrap(),
        Array::from_slice(&b, &[K * N]).unwrap(),
    );
    for reread in [false, true] {
        let name = if reread { "mm_acc_reread" } else { "mm_acc" };
        let k = tl::jit(name, move |k| {
            let (pa, pb, pc) = (k.ptr(F32, "a"), k.ptr(F32, "b"), k.ptr(F32, "c"));
            let (bm, bn, bk) = (16i64, 32i64, 16i64);
            let offs_m = tl::program_id(0) * bm as i32 + tl::arange(0, bm);
            let offs_n = tl::program_id(1) * bn as i32 + tl::arange(0, bn);
            let offs_k = tl::arange(0, bk);
            let acc = tl::zeros([bm, bn], F32);
            let acc: tl::Tensor = tl::range(0, K as i32, bk as i32).fold(acc, |k0, acc| {
                let ks = offs_k + k0;
                let x = tl::load(pa + offs_m.col() * K as i32 + ks.row())
                    .mask(offs_m.col().lt(M as i32) & ks.row().lt(K as i32))
                    .other(0.0);
                let y = tl::load(pb + ks.col() * N as i32 + offs_n.row())
                    .mask(ks.col().lt(K as i32) & offs_n.row().lt(N as i32))
                    .other(0.0);
                let d = tl::dot(x, y, acc);
                if reread {
                    d - acc
                } else {
                    d
                }
            });
            let cm = offs_m.col().lt(M as i32) & offs_n.row().lt(N as i32);
            tl::store(pc + offs_m.col() * N as i32 + offs_n.row(), acc).mask(cm);
        })
        .unwrap();
        let run = |t: Target| {
            k.launch()
                .grid([M.div_ceil(16), N.div_ceil(32)])
                .args((&aa, &ba, out(&[M * N], F32).fill(f64::NAN)))
                .target(t)
                .run()
                .unwrap_or_else(|e| panic!("{name} on {t:?}: {e}"))[0]
                .to_vec::<f32>()
                .unwrap()
        };
        let want = run(Target::Cpu);
        if !support::targets(name).contains(&Target::CpuCompiled) {
            continue;
        }
        let got = run(Target::CpuCompiled);
        let finite = want.iter().filter(|x| x.is_finite()).count();
        assert!(
            finite > M * N / 2 && finite < M * N,
            "{name}: {finite} finite"
        );
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert!(
                w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                "{name}: element {i}: interpreter {w:e}, compiled {g:e}"
            );
        }
        // Without the re-read, the dot is an f64-checked matmul.
        if !reread {
            for i in 0..M {
                for j in 0..N {
                    let (mut s, mut mag) = (0.0f64, 0.0f64);
                    for t in 0..K {
                        let p = a[i * K + t] as f64 * b[t * N + j] as f64;
                        s += p;
                        mag += p.abs();
                    }
                    let w = want[i * N + j] as f64;
                    if s.is_finite() && mag < 1e38 {
                        assert!((w - s).abs() <= 4.0 * K as f64 * mag * f32::EPSILON as f64);
                    }
                }
            }
        }
    }
}
