//! Which writable buffers the programs of one launch provably store to disjointly.
//!
//! Programs run in parallel, so by default every access to a writable buffer is atomic
//! (`memory.rs`). When this analysis proves, for one launch (grid and scalar arguments
//! known), that each program's loads and stores of a buffer land in a window of offsets no
//! other program's loads or stores reach, and that nothing in the kernel runs an atomic on
//! that buffer, the buffer's loads and stores can be plain (vectorised, bulk) accesses
//! without a data race: an element one program stores is touched by no other program. That
//! covers updates in place (`x[offs] = f(x[offs])`, what `inout` arguments run).
//!
//! The offsets come from the integer analysis ([`crate::opt::axis::analyse_launch`]):
//! every pointer is an argument plus `c0·pid0 + c1·pid1 + c2·pid2 + x`, with `x` in an
//! interval over all lanes (and loop iterations) of one program; a pointer the analysis
//! cannot follow to one argument makes every buffer non-disjoint.
//!
//! Disjointness: all loads and stores of the buffer must share one coefficient vector `c`;
//! their windows are merged into one `[lo, hi]` per program. Taking the grid axes with more
//! than one program in increasing `|c|`, each `|c_a|` must be at least the span covered by
//! one program's window plus all smaller axes' programs (a mixed-radix argument), which
//! makes `pid -> window` injective into pairwise disjoint sets. A program's loads then meet
//! only its own stores, which the same thread made earlier in program order. Masks only
//! remove lanes, so they are ignored (windows cover masked-off lanes too, so reading a
//! whole block and selecting the active lanes stays inside the window).

use crate::ir::{Kernel, Op, ParamKind, Value};
use crate::opt::axis::{self, Affine, Form, Launch};

/// One launch's accesses, per parameter.
struct Accesses {
    /// Per parameter: the windows of its loads and stores (coefficients, spread), and
    /// whether it is stored to; `None` once disproved (an atomic).
    windows: Vec<Option<(Vec<Affine>, bool)>>,
    /// A memory op through a pointer the analysis cannot attribute to one argument.
    poisoned: bool,
}

impl Accesses {
    fn record(&mut self, form: &[Form], k: &Kernel, ptr: Value, store: bool) {
        match form[ptr.index()] {
            Form::Ptr { param, off } => {
                if let Some((w, stored)) = &mut self.windows[param] {
                    w.push(off.spread(k.ty(ptr).numel()));
                    *stored |= store;
                }
            }
            _ => self.poisoned = true,
        }
    }

    /// An atomic: the buffer keeps atomic accesses.
    fn atomic(&mut self, form: &[Form], ptr: Value) {
        match form[ptr.index()] {
            Form::Ptr { param, .. } => self.windows[param] = None,
            _ => self.poisoned = true,
        }
    }

    /// Whether the accesses recorded for `param` include a store and lie in windows that are
    /// pairwise disjoint across the programs of `grid`.
    fn disjoint(&self, param: usize, grid: [usize; 3]) -> bool {
        let Some((ws, true)) = self.windows.get(param).and_then(|w| w.as_ref()) else {
            return false;
        };
        let Some(first) = ws.first() else {
            return false;
        };
        if ws.iter().any(|w| w.pid != first.pid || w.lo > w.hi) {
            return false;
        }
        let lo = ws.iter().map(|w| w.lo).min().unwrap_or(0);
        let hi = ws.iter().map(|w| w.hi).max().unwrap_or(0);
        let mut axes: Vec<(i128, i128)> = (0..3)
            .filter(|&a| grid[a] > 1)
            .map(|a| (first.pid[a].abs(), grid[a] as i128))
            .collect();
        axes.sort();
        let mut span = hi - lo + 1;
        for (c, g) in axes {
            if c < span {
                return false;
            }
            span += c * (g - 1);
        }
        true
    }
}

/// For each parameter of `k`: true when it is a pointer that this launch (grid, integer
/// scalar arguments `ints`, `None` where unknown or not an integer) stores to and runs no
/// atomic on, and whose every element that one program stores no other program loads or
/// stores.
pub(crate) fn disjoint_stores(k: &Kernel, grid: [usize; 3], ints: &[Option<i64>]) -> Vec<bool> {
    let form = axis::analyse_launch(k, Launch { grid, ints }).form;
    let mut a = Accesses {
        windows: k
            .params
            .iter()
            .map(|p| matches!(p.kind, ParamKind::Ptr(_)).then(|| (Vec::new(), false)))
            .collect(),
        poisoned: false,
    };
    for id in k.walk() {
        match &k.op(id).op {
            Op::Load { ptr, .. } => a.record(&form, k, *ptr, false),
            Op::Store { ptr, .. } => a.record(&form, k, *ptr, true),
            Op::AtomicRmw { ptr, .. } | Op::AtomicCas { ptr, .. } => a.atomic(&form, *ptr),
            _ => {}
        }
    }
    (0..k.params.len())
        .map(|i| !a.poisoned && a.disjoint(i, grid))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::disjoint_stores;
    use crate::dtype::DType::{F32, I32};
    use crate::ir::Kernel;
    use crate::tl::{self, *};

    fn kernel(f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
        match tl::build("k", &BTreeMap::new(), f) {
            Ok(k) => k,
            Err(e) => panic!("build failed: {e}"),
        }
    }

    /// `(x, out, n)`: `out[pid*step + arange(0, width)] = x[...]`, masked by `n`.
    fn windowed(step: i64, width: i64) -> Kernel {
        kernel(|k| {
            let (x, out) = (k.ptr(F32, "x"), k.ptr(F32, "out"));
            let n = k.scalar(I32, "n");
            let offs = tl::program_id(0) * step + tl::arange(0, width);
            let m = offs.lt(n);
            tl::store(out + offs, tl::load(x + offs).mask(m)).mask(m);
        })
    }

    #[test]
    fn blocks_of_program_id_are_disjoint() {
        // Vector add's pattern, ragged tail included (masks only remove lanes).
        let k = windowed(64, 64);
        assert_eq!(
            disjoint_stores(&k, [17, 1, 1], &[None, None, Some(1000)]),
            [false, true, false]
        );
        // Windows narrower than the step leave gaps: still disjoint.
        let k = windowed(64, 32);
        assert!(disjoint_stores(&k, [17, 1, 1], &[None, None, Some(9)])[1]);
    }

    #[test]
    fn plain_stores_keep_masked_tails_and_bounds_checks() {
        use crate::exec::{execute, ExecArg};
        let k = windowed(64, 64);
        let n = 1000usize;
        assert!(disjoint_stores(&k, [16, 1, 1], &[None, None, Some(n as i64)])[1]);
        let x: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5 - 7.0).collect();
        let mut out = vec![f32::NAN; 1024];
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_ne_bytes()).collect();
        // SAFETY (test): viewing an f32 buffer as bytes.
        let ob = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, 4096) };
        execute(
            &k,
            [16, 1, 1],
            &mut [
                ExecArg::Buffer(&xb),
                ExecArg::BufferMut(ob),
                ExecArg::Int(n as i64),
            ],
        )
        .unwrap();
        assert!(out[..n].iter().zip(&x).all(|(o, x)| o == x));
        assert!(
            out[n..].iter().all(|o| o.is_nan()),
            "masked-off lanes untouched"
        );
        // A plain buffer too short for the stores is still an error, not a write past it.
        let mut short = vec![0f32; 900];
        // SAFETY (test): as above.
        let sb = unsafe { std::slice::from_raw_parts_mut(short.as_mut_ptr() as *mut u8, 3600) };
        let r = execute(
            &k,
            [16, 1, 1],
            &mut [
                ExecArg::Buffer(&xb),
                ExecArg::BufferMut(sb),
                ExecArg::Int(n as i64),
            ],
        );
        let msg = format!("{:?}", r.unwrap_err());
        assert!(msg.contains("store") && msg.contains("offset"), "{msg}");
    }

    #[test]
    fn overlapping_or_shared_offsets_are_not_disjoint() {
        // Overlapping windows.
        let k = windowed(32, 64);
        assert!(!disjoint_stores(&k, [4, 1, 1], &[None, None, Some(256)])[1]);
        // One program alone cannot race with anyone.
        assert!(disjoint_stores(&k, [1, 1, 1], &[None, None, Some(256)])[1]);
        // Every program stores to offset 0.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            tl::store(out, 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [2, 1, 1], &[None]), [false]);
        assert_eq!(disjoint_stores(&k, [1, 1, 1], &[None]), [true]);
        // Offsets that do not depend on the program.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            tl::store(out + tl::arange(0, 16), 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [3, 1, 1], &[None]), [false]);
        // The program id on an axis the offsets ignore.
        let k = windowed(64, 64);
        assert!(!disjoint_stores(&k, [4, 2, 1], &[None, None, Some(256)])[1]);
    }

    #[test]
    fn two_dimensional_grids_need_mixed_radix_strides() {
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            let s1 = k.scalar(I32, "s1");
            let offs = tl::program_id(1) * s1 + tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + offs, 1.0f32);
        });
        // Axis 0 covers 4 * 16 = 64 elements: a row stride of 64 is disjoint, 48 is not.
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, Some(64)]),
            [true, false]
        );
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, Some(48)]),
            [false, false]
        );
        // Negative strides walk backwards, still disjoint.
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, Some(-64)]),
            [true, false]
        );
        // An unknown stride proves nothing.
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, None]),
            [false, false]
        );
    }

    #[test]
    fn a_program_may_read_what_it_alone_stores() {
        // An update in place: each program reads and writes its own block, ragged tail
        // masked.
        let k = kernel(|k| {
            let x = k.ptr(F32, "x");
            let n = k.scalar(I32, "n");
            let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
            let m = offs.lt(n);
            tl::store(x + offs, tl::load(x + offs).mask(m) * 2.0f32).mask(m);
        });
        assert_eq!(
            disjoint_stores(&k, [16, 1, 1], &[None, Some(1000)]),
            [true, false]
        );
        // Rows updated in a loop over columns (a normalisation in place): the reads and
        // writes of one row stay inside it when rows are at least a loop's reach apart.
        let k = kernel(|k| {
            let x = k.ptr(F32, "x");
            let (stride, n) = (k.scalar(I32, "stride"), k.scalar(I32, "n"));
            let row = x + tl::program_id(0) * stride;
            let total = tl::range(0, n, 32).fold(tl::zeros(&[32usize][..], F32), |off, acc| {
                let cols = off + tl::arange(0, 32);
                acc + tl::load(row + cols).mask(cols.lt(n))
            });
            let s = tl::sum(total, 0);
            tl::range(0, n, 32).for_each(|off| {
                let cols = off + tl::arange(0, 32);
                let v = tl::load(row + cols).mask(cols.lt(n));
                tl::store(row + cols, v / s).mask(cols.lt(n));
            });
        });
        let run = |stride, n| disjoint_stores(&k, [8, 1, 1], &[None, Some(stride), Some(n)])[0];
        assert!(run(96, 96));
        assert!(run(100, 64));
        assert!(!run(64, 96));
    }

    #[test]
    fn reading_what_another_program_stores_keeps_atomics() {
        // Program i loads the block program i + 1 stores.
        let shifted = |by: i64| {
            kernel(move |k| {
                let x = k.ptr(F32, "x");
                let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
                tl::store(x + offs, tl::load(x + offs + by) + 1.0f32);
            })
        };
        assert_eq!(disjoint_stores(&shifted(64), [4, 1, 1], &[None]), [false]);
        // One element of the neighbour's block, or of the previous one, is enough.
        assert_eq!(disjoint_stores(&shifted(1), [4, 1, 1], &[None]), [false]);
        assert_eq!(disjoint_stores(&shifted(-1), [4, 1, 1], &[None]), [false]);
        // A single program has no one to race with.
        assert_eq!(disjoint_stores(&shifted(64), [1, 1, 1], &[None]), [true]);
        // Every program reads element 0, which program 0 stores.
        let k = kernel(|k| {
            let x = k.ptr(F32, "x");
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(x + offs, tl::load(x) + 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None]), [false]);
        // Loads through a data-dependent offset.
        let k = kernel(|k| {
            let (idx, x) = (k.ptr(I32, "idx"), k.ptr(F32, "x"));
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(x + offs, tl::load(x + tl::load(idx + offs)));
        });
        assert_eq!(
            disjoint_stores(&k, [4, 1, 1], &[None, None]),
            [false, false]
        );
        // A buffer that is only read is not reported (nothing to make plain), and reading
        // another argument anywhere does not matter.
        let k = kernel(|k| {
            let (y, x) = (k.ptr(F32, "y"), k.ptr(F32, "x"));
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(x + offs, tl::load(y + offs + 5) + tl::load(x + offs));
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None, None]), [false, true]);
    }

    /// What the executors do with the answer: a buffer another program reads stays atomic,
    /// a buffer each program updates alone becomes plain.
    #[test]
    fn binding_keeps_atomics_where_programs_share_elements() {
        use crate::exec::{bind, ExecArg};
        let kernel_by = |by: i64| {
            kernel(move |k| {
                let x = k.ptr(F32, "x");
                let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
                let m = (offs + by).lt(256);
                tl::store(x + offs, tl::load(x + offs + by).mask(m) * 2.0f32);
            })
        };
        for (by, plain) in [(64, false), (0, true)] {
            let mut buf = vec![0u8; 256 * 4];
            let k = kernel_by(by);
            let mut args = [ExecArg::BufferMut(&mut buf)];
            let b = bind(&k, [4, 1, 1], &mut args).unwrap();
            let m = b.mems[0].as_ref().unwrap();
            assert_eq!(m.is_plain(), plain, "loads shifted by {by}");
        }
    }

    #[test]
    fn atomics_and_unknown_pointers_disable_it() {
        // An atomic on the output.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + offs, 1.0f32);
            atomic_add(out + offs, 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None]), [false]);
        // Data-dependent offsets.
        let k = kernel(|k| {
            let (idx, out) = (k.ptr(I32, "idx"), k.ptr(F32, "out"));
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + tl::load(idx + offs), 1.0f32);
        });
        assert_eq!(
            disjoint_stores(&k, [4, 1, 1], &[None, None]),
            [false, false]
        );
        // A loop-carried pointer is not followed, and poisons every buffer.
        let k = kernel(|k| {
            let (a, out) = (k.ptr(F32, "a"), k.ptr(F32, "out"));
            let offs = tl::program_id(0) * 64 + tl::arange(0, 16);
            tl::store(a + offs, 1.0f32);
            tl::range(0, 4, 1).fold(out + offs, |_, p| {
                tl::store(p, 2.0f32);
                p + 16
            });
        });
        assert_eq!(
            disjoint_stores(&k, [4, 1, 1], &[None, None]),
            [false, false]
        );
    }

    #[test]
    fn offsets_that_could_wrap_are_unknown() {
        let k = windowed(1 << 30, 64);
        // pid * 2^30 wraps i32 from the third program on.
        assert!(!disjoint_stores(&k, [3, 1, 1], &[None, None, Some(0)])[1]);
        assert!(disjoint_stores(&k, [2, 1, 1], &[None, None, Some(0)])[1]);
    }

    #[test]
    fn loops_over_columns_use_the_last_step() {
        // layer_norm's store loop: `for off in range(0, n, B): store(y + row*stride + off + arange(B))`.
        let k = kernel(|k| {
            let y = k.ptr(F32, "y");
            let (stride, n) = (k.scalar(I32, "stride"), k.scalar(I32, "n"));
            let row = y + tl::program_id(0) * stride;
            tl::range(0, n, 32).for_each(|off| {
                let cols = off + tl::arange(0, 32);
                tl::store(row + cols, 1.0f32).mask(cols.lt(n));
            });
        });
        let run = |stride, n| disjoint_stores(&k, [8, 1, 1], &[None, Some(stride), Some(n)])[0];
        assert!(run(96, 96));
        assert!(run(100, 64));
        // A ragged row: the last block's masked-off lanes reach the next row; masks are not
        // analysed, so this is (conservatively) not disjoint.
        assert!(!run(90, 90));
        assert!(!run(64, 96));
    }
}
