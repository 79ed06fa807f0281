//! Arrays updated in place (`inout(&array)`) and exact output fills, written as a user would
//! write them and run on every target: the CPU interpreter, the compiled CPU executor, the
//! generated Metal on the emulator under each of its schedules, and the generated CUDA
//! compiled by NVRTC. Results are checked bit for bit against Rust references on random
//! data with edge values and ragged sizes.

mod support;

use support::every_target;

use triton_metal::runtime::{inout, out, Target};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{
    mlx, Array,
    DType::{self, *},
    Element,
};

/// A deterministic stream of pseudo-random 64-bit words.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }

    /// Floats in [-8, 8) mixed with NaN, ±inf, ±0, subnormals and extremes.
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        const EDGES: [f32; 8] = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0e-40,
            f32::MAX,
            f32::MIN,
        ];
        (0..n)
            .map(|_| match self.next() % 8 {
                0 => EDGES[(self.next() % 8) as usize],
                _ => (self.next() % 16_000) as f32 / 1000.0 - 8.0,
            })
            .collect()
    }

    /// Integers over the whole i32 range, with extremes and small values.
    fn i32s(&mut self, n: usize) -> Vec<i32> {
        (0..n)
            .map(|_| match self.next() % 6 {
                0 => [i32::MIN, i32::MAX, 0, -1][(self.next() % 4) as usize],
                1 => (self.next() % 100) as i32 - 50,
                _ => self.next() as i32,
            })
            .collect()
    }
}

fn vals<T: Element>(a: &Array) -> Vec<T> {
    a.to_vec::<T>().unwrap()
}

/// `got` equals `want` bit for bit (floats compared by their bits, so NaN and -0 count).
fn same_bits<T: Element + Copy + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bits = |x: &T| {
        let mut b = vec![0u8; std::mem::size_of::<T>()];
        // SAFETY: T is a plain element type (no padding, no pointers); its bytes are read.
        unsafe {
            std::ptr::copy_nonoverlapping(x as *const T as *const u8, b.as_mut_ptr(), b.len())
        };
        b
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            bits(g),
            bits(w),
            "{what}: element {i}: got {g:?}, want {w:?}"
        );
    }
}

// ---- stores and loads ---------------------------------------------------------------------

/// A kernel storing only the even elements below `n`: every other element keeps the
/// argument's value (NaN, infinities and signed zeros included), in a ragged last block.
#[test]
fn unstored_elements_keep_the_arguments_values() {
    const BLOCK: i64 = 128;
    let k = tl::jit("store_evens", |k| {
        let (x, n) = (k.ptr(F32, "x"), k.scalar(I32, "n"));
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let even = (offs % 2).eq(0) & offs.lt(n);
        tl::store(x + offs, tl::cast(offs, F32) * 0.5).mask(even);
    })
    .unwrap();
    let n = 1000usize;
    let xs = Rng(1).f32s(n);
    let x = Array::from_slice(&xs, &[n]).unwrap();
    let want: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { i as f32 * 0.5 } else { xs[i] })
        .collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(BLOCK as usize)])
            .args((inout(&x), n as i32))
    }) {
        same_bits(&format!("{t:?}"), &vals::<f32>(&o[0]), &want);
    }
    // The argument itself is unchanged.
    same_bits("argument", &vals::<f32>(&x), &xs);
}

/// `x = load(p); store(p, x * 3 + 1)` on f32 and i32 (wrapping), masked at a ragged end:
/// each element is computed from the argument's value, the tail past `n` is untouched.
#[test]
fn load_then_store_the_same_elements() {
    const BLOCK: i64 = 256;
    let k = tl::jit("axpb_in_place", |k| {
        let (xf, xi, n) = (k.ptr(F32, "xf"), k.ptr(I32, "xi"), k.scalar(I32, "n"));
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        let f = tl::load(xf + offs).mask(m);
        tl::store(xf + offs, f * 3.0 + 1.0).mask(m);
        let i = tl::load(xi + offs).mask(m);
        tl::store(xi + offs, i * 3 + 1).mask(m);
    })
    .unwrap();
    let (len, n) = (1100usize, 1037usize);
    let mut rng = Rng(2);
    let (fs, is) = (rng.f32s(len), rng.i32s(len));
    let (xf, xi) = (
        Array::from_slice(&fs, &[len]).unwrap(),
        Array::from_slice(&is, &[len]).unwrap(),
    );
    let want_f: Vec<f32> = (0..len)
        .map(|i| if i < n { fs[i] * 3.0 + 1.0 } else { fs[i] })
        .collect();
    let want_i: Vec<i32> = (0..len)
        .map(|i| {
            if i < n {
                is[i].wrapping_mul(3).wrapping_add(1)
            } else {
                is[i]
            }
        })
        .collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([len.div_ceil(BLOCK as usize)])
            .args((inout(&xf), inout(&xi), n as i32))
    }) {
        same_bits(&format!("{t:?} f32"), &vals::<f32>(&o[0]), &want_f);
        same_bits(&format!("{t:?} i32"), &vals::<i32>(&o[1]), &want_i);
    }
}

/// Rows updated block by block in a loop, each from its row's wrapping sum: every program
/// reads and writes only its own row when rows are padded (`stride` 64: the CPU executors
/// access the array without atomics), and the masked tail of a ragged row reaches into the
/// next row's offsets when they are packed (`stride` 45: atomic accesses). Both are exact,
/// and elements past `n` in a padded row keep the argument's values.
#[test]
fn rows_updated_in_place_block_by_block() {
    const BLOCK: i64 = 32;
    let k = tl::jit("row_minus_sum", |k| {
        let (x, stride, n) = (k.ptr(I32, "x"), k.scalar(I32, "stride"), k.scalar(I32, "n"));
        let row = x + tl::program_id(0) * stride;
        let acc = tl::range(0, n, BLOCK).fold(tl::zeros([BLOCK], I32), |off, acc| {
            let cols = off + tl::arange(0, BLOCK);
            acc + tl::load(row + cols).mask(cols.lt(n)).other(0)
        });
        let s = tl::sum(acc, 0);
        tl::range(0, n, BLOCK).for_each(|off| {
            let cols = off + tl::arange(0, BLOCK);
            let m = cols.lt(n);
            let v = tl::load(row + cols).mask(m);
            tl::store(row + cols, v * 2 - s).mask(m);
        });
    })
    .unwrap();
    let (rows, n) = (7usize, 45usize);
    for stride in [64usize, 45] {
        let len = rows * stride;
        let xs = Rng(7 + stride as u64).i32s(len);
        let x = Array::from_slice(&xs, &[len]).unwrap();
        let mut want = xs.clone();
        for r in 0..rows {
            let row = &mut want[r * stride..r * stride + n];
            let s = row.iter().fold(0i32, |a, &v| a.wrapping_add(v));
            for v in row {
                *v = v.wrapping_mul(2).wrapping_sub(s);
            }
        }
        for (t, o) in every_target(&k, |l| {
            l.grid([rows]).args((inout(&x), stride as i32, n as i32))
        }) {
            same_bits(
                &format!("{t:?} stride {stride}"),
                &vals::<i32>(&o[0]),
                &want,
            );
        }
    }
}

/// Program `i` also reads the block that program `i + 1` updates: a read that races with
/// that program's stores, so the CPU executors keep atomic accesses for the array (the
/// proof refuses it; `exec::disjoint`'s tests check the refusal). The value read enters the
/// result only as `v - v`, so the result is the same in every order the programs run.
#[test]
fn reading_the_next_programs_block_while_it_is_updated() {
    const BLOCK: i64 = 64;
    let k = tl::jit("next_block", |k| {
        let (x, n) = (k.ptr(I32, "x"), k.scalar(I32, "n"));
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        let next = tl::load(x + offs + BLOCK)
            .mask((offs + BLOCK).lt(n))
            .other(0);
        let own = tl::load(x + offs).mask(m);
        tl::store(x + offs, own * 3 + (next - next)).mask(m);
    })
    .unwrap();
    let n = 1000usize;
    let xs = Rng(9).i32s(n);
    let x = Array::from_slice(&xs, &[n]).unwrap();
    let want: Vec<i32> = xs.iter().map(|v| v.wrapping_mul(3)).collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(BLOCK as usize)])
            .args((inout(&x), n as i32))
    }) {
        same_bits(&format!("{t:?}"), &vals::<i32>(&o[0]), &want);
    }
}

/// A program reads back its own earlier stores: through the same offsets (the same
/// thread), and, after `debug_barrier`, in reverse order (other threads of the program).
/// Elements not yet stored when read still give the argument's values.
#[test]
fn a_program_reads_its_own_earlier_stores() {
    const BLOCK: i64 = 64;
    let k = tl::jit("read_back", |k| {
        let (x, y, z) = (k.ptr(I32, "x"), k.ptr(I32, "y"), k.ptr(I32, "z"));
        let base = tl::program_id(0) * BLOCK;
        let offs = base + tl::arange(0, BLOCK);
        let half = tl::arange(0, BLOCK).lt(BLOCK / 2);
        // Before any store: the argument's values.
        let before = tl::load(x + offs);
        tl::store(x + offs, before + 1000).mask(half);
        // The same elements: the first half stored, the second still the argument's.
        tl::store(y + offs, tl::load(x + offs));
        tl::debug_barrier();
        let rev = base + (BLOCK - 1) - tl::arange(0, BLOCK);
        tl::store(z + offs, tl::load(x + rev));
    })
    .unwrap();
    let programs = 5usize;
    let n = programs * 64;
    let xs = Rng(3).i32s(n);
    let x = Array::from_slice(&xs, &[n]).unwrap();
    let stored: Vec<i32> = (0..n)
        .map(|i| {
            if i % 64 < 32 {
                xs[i].wrapping_add(1000)
            } else {
                xs[i]
            }
        })
        .collect();
    let reversed: Vec<i32> = (0..n).map(|i| stored[i / 64 * 64 + 63 - i % 64]).collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([programs]).args((
            inout(&x),
            out(&[n], I32).fill(i32::MIN),
            out(&[n], I32).fill(i32::MIN),
        ))
    }) {
        same_bits(&format!("{t:?} x"), &vals::<i32>(&o[0]), &stored);
        same_bits(&format!("{t:?} y"), &vals::<i32>(&o[1]), &stored);
        same_bits(&format!("{t:?} z"), &vals::<i32>(&o[2]), &reversed);
    }
}

// ---- atomics ------------------------------------------------------------------------------

/// `atomic_add` counting into existing counters (wrapping at the i32 limits): the result
/// is the argument plus the histogram, and the old values each bin's adds return are the
/// argument's value and every count after it, once each.
#[test]
fn atomic_add_counts_on_existing_data() {
    const BLOCK: i64 = 128;
    let bins = 13usize;
    let k = tl::jit("count_in_place", |k| {
        let (keys, counts, olds, n) = (
            k.ptr(I32, "keys"),
            k.ptr(I32, "counts"),
            k.ptr(I32, "olds"),
            k.scalar(I32, "n"),
        );
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        let key = tl::load(keys + offs).mask(m);
        let old = tl::atomic_add(counts + key, 1).mask(m);
        tl::store(olds + offs, old).mask(m);
    })
    .unwrap();
    let n = 1500usize;
    let mut rng = Rng(4);
    let keys: Vec<i32> = (0..n).map(|_| (rng.next() % bins as u64) as i32).collect();
    let mut start = rng.i32s(bins);
    start[0] = i32::MAX - 3; // wraps
    let (ka, ca) = (
        Array::from_slice(&keys, &[n]).unwrap(),
        Array::from_slice(&start, &[bins]).unwrap(),
    );
    let mut hist = vec![0i32; bins];
    for &key in &keys {
        hist[key as usize] += 1;
    }
    let want: Vec<i32> = (0..bins).map(|b| start[b].wrapping_add(hist[b])).collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(BLOCK as usize)]).args((
            &ka,
            inout(&ca),
            out(&[n], I32).fill(0),
            n as i32,
        ))
    }) {
        same_bits(&format!("{t:?} counts"), &vals::<i32>(&o[0]), &want);
        let olds = vals::<i32>(&o[1]);
        for b in 0..bins {
            let mut got: Vec<i32> = (0..n)
                .filter(|&i| keys[i] as usize == b)
                .map(|i| olds[i])
                .collect();
            got.sort_unstable_by_key(|v| v.wrapping_sub(start[b]) as u32);
            let seq: Vec<i32> = (0..hist[b]).map(|c| start[b].wrapping_add(c)).collect();
            assert_eq!(got, seq, "{t:?}: old values of bin {b}");
        }
    }
}

/// `atomic_max` on existing i32 and f32 data (extremes and infinities in the argument):
/// each element ends as the maximum of its value and every value aimed at it.
#[test]
fn atomic_max_on_existing_data() {
    const BLOCK: i64 = 64;
    let slots = 7usize;
    let k = tl::jit("max_in_place", move |k| {
        let (vi, vf, mi, mf, n) = (
            k.ptr(I32, "vi"),
            k.ptr(F32, "vf"),
            k.ptr(I32, "mi"),
            k.ptr(F32, "mf"),
            k.scalar(I32, "n"),
        );
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        let slot = offs % slots as i64;
        tl::atomic_max(mi + slot, tl::load(vi + offs).mask(m)).mask(m);
        tl::atomic_max(mf + slot, tl::load(vf + offs).mask(m)).mask(m);
    })
    .unwrap();
    let n = 300usize;
    let mut rng = Rng(5);
    let vi = rng.i32s(n);
    let vf: Vec<f32> = (0..n)
        .map(|_| (rng.next() % 20_000) as f32 / 100.0 - 100.0)
        .collect();
    let mut si = rng.i32s(slots);
    si[1] = i32::MAX;
    si[2] = i32::MIN;
    let mut sf: Vec<f32> = (0..slots).map(|s| s as f32 * 10.0 - 30.0).collect();
    sf[3] = f32::INFINITY;
    sf[4] = f32::NEG_INFINITY;
    sf[5] = 1.0e30;
    let (via, vfa, sia, sfa) = (
        Array::from_slice(&vi, &[n]).unwrap(),
        Array::from_slice(&vf, &[n]).unwrap(),
        Array::from_slice(&si, &[slots]).unwrap(),
        Array::from_slice(&sf, &[slots]).unwrap(),
    );
    let (mut want_i, mut want_f) = (si.clone(), sf.clone());
    for i in 0..n {
        want_i[i % slots] = want_i[i % slots].max(vi[i]);
        want_f[i % slots] = want_f[i % slots].max(vf[i]);
    }
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(BLOCK as usize)])
            .args((&via, &vfa, inout(&sia), inout(&sfa), n as i32))
    }) {
        same_bits(&format!("{t:?} i32"), &vals::<i32>(&o[0]), &want_i);
        same_bits(&format!("{t:?} f32"), &vals::<f32>(&o[1]), &want_f);
    }
}

/// `atomic_cas` claiming slots of an existing table: a free slot (-1) goes to exactly one
/// of the programs aiming at it, which alone sees -1; an occupied slot keeps its owner and
/// every program aiming at it sees that owner.
#[test]
fn atomic_cas_claims_free_slots_of_existing_data() {
    let slots = 9usize;
    let k = tl::jit("claim_slots", move |k| {
        let (table, seen) = (k.ptr(I32, "table"), k.ptr(I32, "seen"));
        let pid = tl::program_id(0);
        let old = tl::atomic_cas(table + pid % slots as i64, -1, pid);
        tl::store(seen + pid, old);
    })
    .unwrap();
    let programs = 40usize;
    let start: Vec<i32> = (0..slots)
        .map(|s| if s % 3 == 0 { 1000 + s as i32 } else { -1 })
        .collect();
    let ta = Array::from_slice(&start, &[slots]).unwrap();
    for (t, o) in every_target(&k, |l| {
        l.grid([programs])
            .args((inout(&ta), out(&[programs], I32).fill(i32::MIN)))
    }) {
        let (table, seen) = (vals::<i32>(&o[0]), vals::<i32>(&o[1]));
        for s in 0..slots {
            let aiming: Vec<usize> = (0..programs).filter(|p| p % slots == s).collect();
            if start[s] != -1 {
                assert_eq!(table[s], start[s], "{t:?}: occupied slot {s}");
                assert!(
                    aiming.iter().all(|&p| seen[p] == start[s]),
                    "{t:?}: slot {s}"
                );
            } else {
                let owner = table[s];
                assert!(
                    aiming.contains(&(owner as usize)),
                    "{t:?}: slot {s} owner {owner}"
                );
                for &p in &aiming {
                    let want = if p == owner as usize { -1 } else { owner };
                    assert_eq!(seen[p], want, "{t:?}: program {p} at slot {s}");
                }
            }
        }
    }
}

// ---- views --------------------------------------------------------------------------------

/// A transposed view and a slice updated in place: the kernel sees each in its logical
/// row-major order (as every input), and the result is a new row-major array of that
/// shape; the viewed arrays are unchanged.
#[test]
fn views_are_updated_in_their_logical_order() {
    const BLOCK: i64 = 64;
    let k = tl::jit("add_index", |k| {
        let (x, n) = (k.ptr(F32, "x"), k.scalar(I32, "n"));
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n) & (offs % 3).ne(1);
        let v = tl::load(x + offs).mask(m);
        tl::store(x + offs, v + tl::cast(offs, F32)).mask(m);
    })
    .unwrap();
    let (r, c) = (9usize, 14usize);
    let base: Vec<f32> = Rng(6).f32s(r * c);
    let a = Array::from_slice(&base, &[r, c]).unwrap();
    let at = mlx::transpose(&a, None).unwrap(); // (c, r), not contiguous
    let sl = mlx::slice(&a, &[2, 3], &[7, 11]).unwrap(); // (5, 8)
    let logical_t: Vec<f32> = (0..c * r).map(|i| base[(i % r) * c + i / r]).collect();
    let logical_s: Vec<f32> = (0..5 * 8)
        .map(|i| base[(2 + i / 8) * c + 3 + i % 8])
        .collect();
    let updated = |v: &[f32]| -> Vec<f32> {
        v.iter()
            .enumerate()
            .map(|(i, &x)| if i % 3 != 1 { x + i as f32 } else { x })
            .collect()
    };
    for (view, logical, shape) in [(&at, &logical_t, [c, r]), (&sl, &logical_s, [5, 8])] {
        let len = shape[0] * shape[1];
        for (t, o) in every_target(&k, |l| {
            l.grid([len.div_ceil(BLOCK as usize)])
                .args((inout(view), len as i32))
        }) {
            assert_eq!(o[0].shape(), shape, "{t:?}");
            same_bits(
                &format!("{t:?} {shape:?}"),
                &vals::<f32>(&o[0]),
                &updated(logical),
            );
        }
        same_bits("view", &vals::<f32>(view), logical);
    }
    same_bits("base", &vals::<f32>(&a), &base);
}

// ---- fills --------------------------------------------------------------------------------

/// Fills that MLX's float32 init value cannot carry (i32 16777217, i64 beyond 2^53, u32
/// near its top) and two outputs with different fills, exact on every target: the
/// unstored elements hold the fill, the stored ones the kernel's values.
#[test]
fn fills_are_exact_in_the_outputs_dtype() {
    let k = tl::jit("fill_exact", |k| {
        let (a, b, c, d) = (
            k.ptr(I32, "a"),
            k.ptr(I64, "b"),
            k.ptr(U32, "c"),
            k.ptr(F32, "d"),
        );
        let offs = tl::arange(0, 8);
        let m = offs.lt(3);
        tl::store(a + offs, offs).mask(m);
        tl::store(b + offs, tl::cast(offs, I64)).mask(m);
        tl::store(c + offs, tl::cast(offs, U32)).mask(m);
        tl::store(d + offs, tl::cast(offs, F32)).mask(m);
    })
    .unwrap();
    let big = (1i64 << 62) + 1;
    let outs = every_target(&k, |l| {
        l.grid([1]).args((
            out(&[8], I32).fill(16_777_217),
            out(&[8], I64).fill(big),
            out(&[8], U32).fill(u32::MAX - 2),
            out(&[8], F32).fill(f64::NAN),
        ))
    });
    /// 0, 1, 2 stored, the fill after.
    fn want<T: From<u8> + Copy>(fill: T) -> Vec<T> {
        (0..8u8)
            .map(|i| if i < 3 { T::from(i) } else { fill })
            .collect()
    }
    for (t, o) in outs {
        same_bits(
            &format!("{t:?} i32"),
            &vals::<i32>(&o[0]),
            &want(16_777_217),
        );
        same_bits(&format!("{t:?} i64"), &vals::<i64>(&o[1]), &want(big));
        same_bits(
            &format!("{t:?} u32"),
            &vals::<u32>(&o[2]),
            &want(u32::MAX - 2),
        );
        let d = vals::<f32>(&o[3]);
        assert_eq!(&d[..3], &[0.0, 1.0, 2.0], "{t:?} f32");
        assert!(d[3..].iter().all(|v| v.is_nan()), "{t:?} f32: {d:?}");
    }
}

// ---- errors -------------------------------------------------------------------------------

/// What `out(..)` and `inout(..)` refuse, with messages that say what to pass instead.
#[test]
fn misused_outputs_are_errors() {
    let k = tl::jit("misuse", |k| {
        let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
        let offs = tl::arange(0, 16);
        tl::store(y + offs, tl::load(x + offs) + tl::load(y + offs));
    })
    .unwrap();
    let a = Array::from_slice(&[1.0f32; 16], &[16]).unwrap();
    let run = |x: triton_metal::runtime::Arg, y: triton_metal::runtime::Arg| {
        k.launch()
            .grid([1])
            .args((x, y))
            .target(Target::Cpu)
            .run()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    // A pointer only read is an input.
    let e = run(out(&[16], F32), inout(&a));
    assert!(
        e.contains("argument 0 (`x`)") && e.contains("only reads") && e.contains("array itself"),
        "{e}"
    );
    // A pointer read and written needs contents.
    let e = run((&a).into(), out(&[16], F32));
    assert!(
        e.contains("argument 1 (`y`)") && e.contains("inout(&array)") && e.contains(".fill("),
        "{e}"
    );
    // A pointer written is not a plain input.
    let e = run((&a).into(), (&a).into());
    assert!(
        e.contains("argument 1 (`y`)") && e.contains("inout(&array)"),
        "{e}"
    );
    // The dtype of an array updated in place is the pointer's.
    let ai = Array::from_slice(&[1i32; 16], &[16]).unwrap();
    let e = run((&a).into(), inout(&ai));
    assert!(e.contains("argument 1 (`y`)") && e.contains("f32"), "{e}");
    // A fill must be a value of the output's dtype.
    let ki = tl::jit("fill_range", |k| {
        let y = k.ptr(I8, "y");
        tl::store(y + tl::arange(0, 16), 1);
    })
    .unwrap();
    for bad in [300.0, 1.5, f64::NAN] {
        let e = ki
            .launch()
            .grid([1])
            .args((out(&[16], I8).fill(bad),))
            .target(Target::Cpu)
            .run()
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("argument 0 (`y`)") && e.contains("fill"), "{e}");
    }
    // The output a read-write pointer gets with a fill is defined: the fill.
    let o = k
        .launch()
        .grid([1])
        .args((&a, out(&[16], F32).fill(2.0)))
        .target(Target::Cpu)
        .run()
        .unwrap();
    assert_eq!(vals::<f32>(&o[0]), vec![3.0f32; 16]);
}

/// The same in-place update of narrow dtypes: u8 (wrapping) and f16 arrays.
#[test]
fn narrow_dtypes_update_in_place() {
    fn kernel(dt: DType) -> JitKernel {
        tl::jit(&format!("bump_{dt}"), move |k| {
            let (x, n) = (k.ptr(dt, "x"), k.scalar(I32, "n"));
            let offs = tl::program_id(0) * 32 + tl::arange(0, 32);
            let m = offs.lt(n) & (offs % 4).ne(0);
            let v = tl::load(x + offs).mask(m);
            tl::store(x + offs, v + 1).mask(m);
        })
        .unwrap()
    }
    let n = 75usize;
    let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
    let want: Vec<u8> = (0..n)
        .map(|i| {
            if i % 4 != 0 {
                bytes[i].wrapping_add(1)
            } else {
                bytes[i]
            }
        })
        .collect();
    let k = kernel(U8);
    let xa = Array::from_slice(&bytes, &[n]).unwrap();
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(32)]).args((inout(&xa), n as i32))
    }) {
        same_bits(&format!("{t:?} u8"), &vals::<u8>(&o[0]), &want);
    }
    let fs: Vec<half::f16> = (0..n)
        .map(|i| half::f16::from_f32(i as f32 * 0.25 - 9.0))
        .collect();
    let want: Vec<half::f16> = (0..n)
        .map(|i| {
            if i % 4 != 0 {
                half::f16::from_f32(fs[i].to_f32() + 1.0)
            } else {
                fs[i]
            }
        })
        .collect();
    let k = kernel(F16);
    let xa = Array::from_slice(&fs, &[n]).unwrap();
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(32)]).args((inout(&xa), n as i32))
    }) {
        same_bits(&format!("{t:?} f16"), &vals::<half::f16>(&o[0]), &want);
    }
}

/// Narrow arrays updated in place by a kernel with atomics (Metal keeps such outputs in
/// 32-bit words): f16 counters with `atomic_add`, u8 tags stored to every third element.
#[test]
fn narrow_arrays_in_kernels_with_atomics() {
    const BLOCK: i64 = 32;
    let k = tl::jit("narrow_atomic_in_place", |k| {
        let (acc, tag, n) = (k.ptr(F16, "acc"), k.ptr(U8, "tag"), k.scalar(I32, "n"));
        let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
        let m = offs.lt(n);
        tl::atomic_add(acc + offs % 5, 1.0).mask(m);
        let t = tl::load(tag + offs).mask(m);
        tl::store(tag + offs, t + 1).mask(m & (offs % 3).eq(0));
    })
    .unwrap();
    let n = 101usize;
    let start: Vec<half::f16> = [-3.0f32, 0.5, 7.0, -0.0, 100.0]
        .iter()
        .map(|&v| half::f16::from_f32(v))
        .collect();
    let tags: Vec<u8> = (0..n).map(|i| (i * 53 % 256) as u8).collect();
    let (acc, tag) = (
        Array::from_slice(&start, &[5]).unwrap(),
        Array::from_slice(&tags, &[n]).unwrap(),
    );
    let want_acc: Vec<half::f16> = (0..5)
        .map(|j| {
            half::f16::from_f32(start[j].to_f32() + (0..n).filter(|i| i % 5 == j).count() as f32)
        })
        .collect();
    let want_tag: Vec<u8> = (0..n)
        .map(|i| {
            if i % 3 == 0 {
                tags[i].wrapping_add(1)
            } else {
                tags[i]
            }
        })
        .collect();
    for (t, o) in every_target(&k, |l| {
        l.grid([n.div_ceil(BLOCK as usize)])
            .args((inout(&acc), inout(&tag), n as i32))
    }) {
        same_bits(&format!("{t:?} acc"), &vals::<half::f16>(&o[0]), &want_acc);
        same_bits(&format!("{t:?} tag"), &vals::<u8>(&o[1]), &want_tag);
    }
}
