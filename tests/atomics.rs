//! Atomics on every target: 16-bit floats (inside 32-bit words on Metal), 64-bit integers
//! (refused on Metal, which has no 64-bit atomics), compare-and-swap of 16-, 32- and 64-bit
//! elements, and Triton's `sem=`/`scope=`. Each kernel runs on the CPU interpreter, the
//! compiled CPU executor and the emulated Metal in both lane orders; its CUDA is compiled by
//! NVRTC. References are computed in f64 (or exactly, in integers) here.

mod support;

use support::every_target;

use triton_metal::runtime::{out, Launch, Target};
use triton_metal::tl;
use triton_metal::{Array, DType, DType::*};

/// Elements of a 16-bit or 32-bit float array as f64.
fn floats(a: &Array) -> Vec<f64> {
    match a.dtype() {
        F16 => a
            .to_vec::<half::f16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        BF16 => a
            .to_vec::<half::bf16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        F32 => a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect(),
        d => panic!("not a float array: {d}"),
    }
}

/// `x` rounded to `d` (f16 or bf16), as f64.
fn round(x: f64, d: DType) -> f64 {
    match d {
        F16 => half::f16::from_f64(x).to_f64(),
        BF16 => half::bf16::from_f64(x).to_f64(),
        _ => x as f32 as f64,
    }
}

fn array(v: &[f64], d: DType) -> Array {
    match d {
        F16 => {
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x)).collect();
            Array::from_slice(&h, &[v.len()]).unwrap()
        }
        BF16 => {
            let h: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f64(x)).collect();
            Array::from_slice(&h, &[v.len()]).unwrap()
        }
        _ => {
            let h: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Array::from_slice(&h, &[v.len()]).unwrap()
        }
    }
}

/// `atomic_add` on f16 and bf16 outputs of odd lengths (on Metal the last element's word is
/// half outside the data, inside the rounded-up buffer), next to a plain 16-bit output of odd
/// length written element by element (its neighbours in a word belong to other threads). The
/// addends are small multiples of 1/4, so every order of the adds gives the exact sum.
#[test]
fn atomic_add_on_16_bit_floats_of_odd_lengths() {
    for d in [F16, BF16] {
        for n in [1usize, 5, 7] {
            let name = format!("atomic_add_{}_{n}", d.short_name());
            let k = tl::jit(&name, move |k| {
                let (acc, copy, old, v) = (
                    k.ptr(d, "acc"),
                    k.ptr(d, "copy"),
                    k.ptr(d, "old"),
                    k.ptr(d, "v"),
                );
                let pid = tl::program_id(0);
                let offs = pid * 32 + tl::arange(0, 32);
                let x = tl::load(v + offs);
                tl::atomic_add(acc + offs % (n as i32), x);
                let m = offs.lt(n as i32);
                tl::store(copy + offs, x * 2.0).mask(m);
                // Distinct elements: every lane sees the fill.
                let o = tl::atomic_add(old + offs % 64, x).sem("relaxed");
                tl::store(old + 64 + offs, o);
            })
            .unwrap();
            let vals: Vec<f64> = (0..128)
                .map(|i| ((i * 7 % 13) as f64 - 6.0) * 0.25)
                .collect();
            let mut acc = vec![0.0f64; n];
            for (i, x) in vals.iter().enumerate() {
                acc[i % n] += x;
            }
            let va = array(&vals, d);
            // Metal keeps the three 16-bit outputs in 32-bit words.
            let msl = k.launch().msl().unwrap();
            assert_eq!(msl.word_outputs, vec![true; 3]);
            assert!(msl.source.contains("tm_pk_add<"), "{}", msl.source);
            let runs = every_target(&k, |l| {
                l.grid([4]).args((
                    out(&[n], d).fill(0.0),
                    out(&[n], d).fill(-7.0),
                    out(&[192], d).fill(3.0),
                    &va,
                ))
            });
            for (t, o) in runs {
                assert_eq!(floats(&o[0]), acc, "{name} acc on {t:?}");
                let copy: Vec<f64> = vals[..n].iter().map(|x| round(x * 2.0, d)).collect();
                assert_eq!(floats(&o[1]), copy, "{name} copy on {t:?}");
                let old = floats(&o[2]);
                // The first 64 elements got two adds each (programs 0/2 and 1/3), the
                // returned old values are the fill or the fill plus the other add.
                for i in 0..64 {
                    let want = 3.0 + vals[i] + vals[i + 64];
                    assert_eq!(old[i], round(want, d), "{name} old[{i}] on {t:?}");
                }
                for i in 0..128 {
                    let (a, b) = (3.0, round(3.0 + vals[(i + 64) % 128], d));
                    assert!(
                        old[64 + i] == a || old[64 + i] == b,
                        "{name} {t:?}: {}",
                        old[64 + i]
                    );
                }
            }
        }
    }
}

/// Each add rounds to the element type: adding 1.0 eight times to 2048 in f16 (spacing 2
/// there) stays 2048 (ties to even), as does 256 in bf16.
#[test]
fn atomic_add_rounds_once_per_add() {
    for (d, start) in [(F16, 2048.0), (BF16, 256.0)] {
        let name = format!("atomic_round_{}", d.short_name());
        let k = tl::jit(&name, move |k| {
            let p = k.ptr(d, "p");
            tl::atomic_add(p, 1.0);
        })
        .unwrap();
        let mut want = start;
        for _ in 0..8 {
            want = round(want + 1.0, d);
        }
        for (t, o) in every_target(&k, |l| l.grid([8]).args((out(&[1], d).fill(start),))) {
            assert_eq!(floats(&o[0]), vec![want], "{name} on {t:?}");
        }
    }
}

/// Compare-and-swap on 16-, 32- and 64-bit elements (Metal: 16-bit inside words, 64-bit
/// refused): eight programs race to claim each element; exactly one sees the old value 0,
/// and the element ends holding the claim of that program.
#[test]
fn atomic_cas_claims_once() {
    for d in [F16, BF16, I16, F32, I32, U32, I64] {
        let name = format!("atomic_cas_{}", d.short_name());
        let k = tl::jit(&name, move |k| {
            let (p, wins, who) = (k.ptr(d, "p"), k.ptr(I32, "wins"), k.ptr(I32, "who"));
            let pid = tl::program_id(0);
            let offs = tl::arange(0, 16);
            let mine = (pid + 1).to(d);
            let old = tl::atomic_cas(p + offs, tl::zeros([16], d), tl::broadcast_to(mine, [16]));
            let won = tl::expand::eq(old, tl::zeros([16], d));
            tl::atomic_add(wins + offs, won.to(I32));
            tl::atomic_add(who + offs, tl::where_(won, pid + 1, 0));
        })
        .unwrap();
        fn setup(l: Launch<'_>, d: DType) -> Launch<'_> {
            l.grid([8]).args((
                out(&[16], d).fill(0.0),
                out(&[16], I32).fill(0.0),
                out(&[16], I32).fill(0.0),
            ))
        }
        support::cuda_compiles(&setup(k.launch(), d)).unwrap();
        for t in support::targets(&name) {
            let r = setup(k.launch(), d).target(t).run();
            if d == I64 && matches!(t, Target::Emulated(_)) {
                let e = r.expect_err("64-bit atomics on Metal").to_string();
                assert!(
                    e.contains("atomic_cas") && e.contains("i64") && e.contains("Metal"),
                    "{e}"
                );
                continue;
            }
            let o = r.unwrap_or_else(|e| panic!("{name} on {t:?}: {e}"));
            let wins = o[1].to_vec::<i32>().unwrap();
            let who = o[2].to_vec::<i32>().unwrap();
            assert_eq!(wins, vec![1; 16], "{name} on {t:?}");
            let p = triton_metal::mlx::astype(&o[0], I64).unwrap();
            let p = p.to_vec::<i64>().unwrap();
            for i in 0..16 {
                assert!((1..=8).contains(&who[i]), "{name} on {t:?}: {who:?}");
                assert_eq!(p[i], who[i] as i64, "{name} on {t:?}: {p:?} {who:?}");
            }
        }
    }
}

/// Every read-modify-write on i64 and u64 with operands beyond 32 bits: exact on the CPU
/// targets and compiled for CUDA; Metal refuses the kernel (Apple GPUs have no 64-bit
/// atomics), naming the op, the target and the alternatives.
#[test]
fn atomics_on_64_bit_integers() {
    for d in [I64, U64] {
        let name = format!("atomic64_{}", d.short_name());
        let k = tl::jit(&name, move |k| {
            let (p, v) = (k.ptr(d, "p"), k.ptr(d, "v"));
            let offs = tl::arange(0, 64);
            let x = tl::load(v + offs);
            let lane = offs % 8;
            tl::atomic_add(p + lane, x);
            tl::atomic_max(p + 8 + lane, x);
            tl::atomic_min(p + 16 + lane, x);
            tl::atomic_and(p + 24 + lane, x);
            tl::atomic_or(p + 32 + lane, x);
            tl::atomic_xor(p + 40 + lane, x);
            // One exchange per element: the old value is the fill.
            let old = tl::atomic_xchg(p + 48 + offs, x);
            tl::store(p + 112 + offs, old);
        })
        .unwrap();
        // Values spread over the whole range, with the sign bit set in some.
        let raw: Vec<u64> = (0..64u64)
            .map(|i| (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i << 40))
            .collect();
        let fill: u64 = 5 << 33;
        let mut want = vec![fill; 176];
        for (i, &x) in raw.iter().enumerate() {
            let l = i % 8;
            let (s, sx) = (want[l], x);
            want[l] = s.wrapping_add(sx);
            let (mx, mn) = if d == I64 {
                (
                    (want[8 + l] as i64).max(x as i64) as u64,
                    (want[16 + l] as i64).min(x as i64) as u64,
                )
            } else {
                (want[8 + l].max(x), want[16 + l].min(x))
            };
            want[8 + l] = mx;
            want[16 + l] = mn;
            want[24 + l] &= x;
            want[32 + l] |= x;
            want[40 + l] ^= x;
            want[48 + i] = x;
            want[112 + i] = fill;
        }
        let v = Array::from_slice(&raw, &[64]).unwrap();
        let v = triton_metal::mlx::view(&v, d).unwrap();
        support::cuda_compiles(
            &k.launch()
                .grid([1])
                .args((out(&[176], d).fill(fill as f64), &v)),
        )
        .unwrap();
        for t in support::targets(&name) {
            let r = k
                .launch()
                .grid([1])
                .args((out(&[176], d).fill(fill as f64), &v))
                .target(t)
                .run();
            if matches!(t, Target::Emulated(_)) {
                let e = r.expect_err("64-bit atomics on Metal").to_string();
                assert!(
                    e.contains("atomic_add")
                        && e.contains(&d.to_string())
                        && e.contains("Metal")
                        && e.contains("Target::Cpu"),
                    "{e}"
                );
                continue;
            }
            let o = r.unwrap_or_else(|e| panic!("{name} on {t:?}: {e}"));
            let got = triton_metal::mlx::view(&o[0], U64)
                .unwrap()
                .to_vec::<u64>()
                .unwrap();
            assert_eq!(got, want, "{name} on {t:?}");
        }
    }
}

/// Triton's `sem=` and `scope=`, written as Triton writes them (`#[jit]` keyword arguments):
/// every combination runs on the CPU targets and compiles for CUDA except `scope="sys"`;
/// Metal runs `relaxed` (and the default) and refuses the orders it cannot give.
#[test]
fn atomic_orderings() {
    use triton_metal::jit;
    #[jit]
    fn ordered(p: Ptr<I32>, q: Ptr<F32>, SEM: Constexpr, SCOPE: Constexpr) {
        let offs = tl::arange(0, 32);
        let sem = ["relaxed", "acquire", "release", "acq_rel"][SEM as usize];
        let scope = ["cta", "gpu", "sys"][SCOPE as usize];
        let old = tl::atomic_add(p + offs % 4, 1, sem = sem, scope = scope);
        tl::atomic_max(
            q + offs,
            old.to(F32),
            mask = offs < 16,
            sem = sem,
            scope = scope,
        );
        let c = tl::atomic_cas(p + 4 + offs, 0, offs + 1, sem = sem, scope = scope);
        tl::store(p + 36 + offs, c);
    }
    let k = ordered().unwrap();
    for sem in 0..4 {
        for scope in 0..3 {
            fn setup(l: Launch<'_>, sem: i64, scope: i64) -> Launch<'_> {
                l.grid([2])
                    .args((out(&[68], I32).fill(0.0), out(&[32], F32).fill(-1.0)))
                    .constexpr("SEM", sem)
                    .constexpr("SCOPE", scope)
            }
            let what = format!("sem {sem} scope {scope}");
            match support::cuda_compiles(&setup(k.launch(), sem, scope)) {
                Ok(()) => assert!(scope != 2, "{what}: CUDA accepted scope=sys"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        scope == 2 && e.contains("scope=\"sys\"") && e.contains("CUDA"),
                        "{e}"
                    );
                }
            }
            for t in support::targets(k.name()) {
                let r = setup(k.launch(), sem, scope).target(t).run();
                let metal = matches!(t, Target::Emulated(_));
                if metal && (sem != 0 || scope == 2) {
                    let e = r.expect_err("Metal refuses").to_string();
                    assert!(
                        e.contains("atomic_add")
                            && e.contains("Metal")
                            && e.contains("Target::Cpu"),
                        "{what}: {e}"
                    );
                    continue;
                }
                let o = r.unwrap_or_else(|e| panic!("{what} on {t:?}: {e}"));
                let p = o[0].to_vec::<i32>().unwrap();
                assert_eq!(&p[..4], &[16; 4], "{what} on {t:?}");
                // Program 0 or 1 claimed each element first; the other saw its claim.
                assert_eq!(
                    &p[4..36],
                    &(1..=32).collect::<Vec<i32>>()[..],
                    "{what} on {t:?}"
                );
                let seen = &p[36..68];
                assert!(seen
                    .iter()
                    .enumerate()
                    .all(|(i, &c)| c == 0 || c == i as i32 + 1));
                let q = o[1].to_vec::<f32>().unwrap();
                for (i, &x) in q.iter().enumerate() {
                    if i < 16 {
                        assert!((0.0..16.0).contains(&x), "{what} on {t:?}: {q:?}");
                    } else {
                        assert_eq!(x, -1.0, "{what} on {t:?}");
                    }
                }
            }
        }
    }
}

/// Bad orderings are build errors naming the argument.
#[test]
fn bad_orderings_are_errors() {
    let e = tl::jit("bad_sem", |k| {
        let p = k.ptr(I32, "p");
        tl::atomic_add(p, 1).sem("seq_cst");
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(e.contains("seq_cst") && e.contains("acq_rel"), "{e}");
    let e = tl::jit("bad_scope", |k| {
        let p = k.ptr(I32, "p");
        tl::atomic_add(p, 1).scope("device");
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(e.contains("device") && e.contains("gpu"), "{e}");
    let e = tl::jit("sem_on_load", |k| {
        let p = k.ptr(I32, "p");
        let x = tl::load(p).sem("relaxed");
        tl::store(p, x);
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(e.contains("atomic"), "{e}");
}

/// `tl.const` pointers (`ConstPtr<T>` / `KernelBuilder::const_ptr`): reading through one
/// runs on every target; a store or an atomic through one (also through pointer arithmetic,
/// a select or a loop-carried pointer) is a build error naming the kernel, the argument and
/// the line of the store.
#[test]
fn const_pointers_are_read_only() {
    use triton_metal::jit;
    #[jit]
    fn scale(x_ptr: ConstPtr<F32>, y_ptr: Ptr<F32>) {
        let offs = tl::arange(0, 16);
        tl::store(y_ptr + offs, tl::load(x_ptr + offs) * 2.0);
    }
    let k = scale().unwrap();
    let xs: Vec<f32> = (0..16).map(|i| i as f32 - 3.5).collect();
    let xa = Array::from_slice(&xs, &[16]).unwrap();
    for (t, o) in every_target(&k, |l| {
        l.grid([1]).args((&xa, out(&[16], F32).fill(f64::NAN)))
    }) {
        let want: Vec<f32> = xs.iter().map(|x| x * 2.0).collect();
        assert_eq!(o[0].to_vec::<f32>().unwrap(), want, "{t:?}");
    }

    let line = line!() + 6;
    let e = tl::jit("store_to_const", |k| {
        let x = k.const_ptr(F32, "x_ptr");
        let offs = tl::arange(0, 16);
        let v = tl::load(x + offs);
        let p = tl::where_(offs.lt(8), x + offs, x + 15 - offs);
        tl::store(p, v + 1.0);
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("store_to_const") && e.contains("x_ptr") && e.contains(&format!(":{line}")),
        "{e}"
    );

    let e = tl::jit("atomic_on_const", |k| {
        let (x, n) = (k.const_ptr(I32, "counts"), k.scalar(I32, "n"));
        let p = tl::range(0, n, 1).fold(x, |_, p| p + 1);
        tl::atomic_add(p, 1);
    })
    .and_then(|k| k.specialize_with(&[]).map(|_| ()))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("atomic_on_const") && e.contains("counts") && e.contains("atomic"),
        "{e}"
    );
}

/// The order of Triton's float `atomic_max`/`atomic_min`: Triton runs the signed integer
/// max/min of the bits for an operand whose sign bit is clear and the unsigned min/max for
/// one whose sign bit is set, which is IEEE totalOrder (-NaN < -inf < ... < -0 < +0 < ... <
/// +inf < +NaN). Every pair of edge values, as old value and operand, on every target; then
/// many lanes racing on few elements, whose result is the totalOrder extreme in any order.
#[test]
fn float_atomic_max_min_follow_total_order() {
    let edges: [u32; 11] = [
        0xffc0_0000, // -NaN
        0xff80_0000, // -inf
        0xbfc0_0000, // -1.5
        0x8000_0001, // -subnormal
        0x8000_0000, // -0
        0x0000_0000, // +0
        0x0000_0001, // +subnormal
        0x4020_0000, // 2.5
        0x7f80_0000, // +inf
        0x7fc0_0000, // +NaN
        0x7fc0_0001, // +NaN, another payload
    ];
    let n = edges.len() * edges.len();
    let (mut old, mut val) = (Vec::new(), Vec::new());
    for &a in &edges {
        for &b in &edges {
            old.push(a);
            val.push(b);
        }
    }
    // 64 racing operands into 8 elements, plus the pairs: old values, then operands.
    let racing: Vec<u32> = (0..64u32)
        .map(|i| edges[(i as usize * 7 + 3) % edges.len()] ^ (i % 3))
        .collect();
    let key = |u: u32| f32::from_bits(u);
    let pick = |a: u32, b: u32, max: bool| {
        let o = key(b).total_cmp(&key(a));
        if (max && o.is_gt()) || (!max && o.is_lt()) {
            b
        } else {
            a
        }
    };
    // Spot checks of the reference against the rule as Triton states it.
    assert_eq!(pick(0x0000_0000, 0x8000_0000, true), 0x0000_0000);
    assert_eq!(pick(0x0000_0000, 0x8000_0000, false), 0x8000_0000);
    assert_eq!(pick(0x3f80_0000, 0x7fc0_0000, true), 0x7fc0_0000);
    assert_eq!(pick(0x3f80_0000, 0xffc0_0000, false), 0xffc0_0000);
    assert_eq!(pick(0xffc0_0000, 0xff80_0000, true), 0xff80_0000);
    let k = tl::jit("atomic_float_order", move |k| {
        let (p, v, q) = (k.ptr(F32, "p"), k.ptr(F32, "v"), k.ptr(F32, "q"));
        let offs = tl::arange(0, 128);
        let m = offs.lt(n as i32);
        let x = tl::load(v + offs).mask(m);
        let a = tl::atomic_max(p + offs, x).mask(m);
        let b = tl::atomic_min(p + n as i32 + offs, x).mask(m);
        tl::store(q + offs, a).mask(m);
        tl::store(q + n as i32 + offs, b).mask(m);
        let r = tl::arange(0, 64);
        let y = tl::load(v + 128 + r);
        tl::atomic_max(p + 2 * n as i32 + r % 8, y);
        tl::atomic_min(p + 2 * n as i32 + 8 + r % 8, y);
    })
    .unwrap();
    let mut p0 = old.clone();
    p0.extend(&old);
    p0.extend([0x7f80_0000u32; 8]); // +inf: any operand but +NaN is below it
    p0.extend([0xff80_0000u32; 8]); // -inf
    let mut vals = val.clone();
    vals.resize(128, 0);
    vals.extend(&racing);
    let mut want_p: Vec<u32> = (0..n).map(|i| pick(old[i], val[i], true)).collect();
    want_p.extend((0..n).map(|i| pick(old[i], val[i], false)));
    let (mut hi, mut lo) = ([0x7f80_0000u32; 8], [0xff80_0000u32; 8]);
    for (i, &y) in racing.iter().enumerate() {
        hi[i % 8] = pick(hi[i % 8], y, true);
        lo[i % 8] = pick(lo[i % 8], y, false);
    }
    want_p.extend(hi);
    want_p.extend(lo);
    let mut want_q = old.clone();
    want_q.extend(&old);
    let arr = |u: &[u32]| {
        let f: Vec<f32> = u.iter().map(|&b| f32::from_bits(b)).collect();
        Array::from_slice(&f, &[f.len()]).unwrap()
    };
    let (p_in, v_in) = (arr(&p0), arr(&vals));
    for (t, outs) in every_target(&k, |l| {
        l.grid([1]).args((
            triton_metal::runtime::inout(&p_in),
            &v_in,
            out(&[2 * n], F32).fill(f64::NAN),
        ))
    }) {
        let bits = |a: &Array| -> Vec<u32> {
            a.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(&outs[0]), want_p, "memory after the atomics on {t:?}");
        assert_eq!(bits(&outs[1]), want_q, "old values returned on {t:?}");
    }
}
