//! Which writable buffers the programs of one launch provably store to disjointly.
//!
//! Programs run in parallel, so by default every access to a writable buffer is atomic
//! (`memory.rs`). When this analysis proves, for one launch (grid and scalar arguments
//! known), that each program's stores to a buffer land in a window of offsets no other
//! program's stores reach, and that nothing in the kernel loads from or runs an atomic on
//! that buffer, the buffer's stores can be plain (vectorised, bulk) writes without a data
//! race.
//!
//! Every integer value is abstracted over all programs and all lanes as
//! `c0·pid0 + c1·pid1 + c2·pid2 + x` with `x` in an interval `[lo, hi]` (an affine function
//! of the program id plus a program-independent spread). Only `+`, `-`, multiplication by
//! a constant (or of two program-independent values), `arange`, constants, integer scalar
//! arguments, `program_id`, `num_programs`, `for` induction variables and shape-only ops
//! are modelled; anything else is unknown. A value whose range over the whole grid could
//! wrap its dtype (or a pointer offset that could wrap the packed pointer) is unknown too,
//! so the model is exact arithmetic. A store through a pointer the analysis cannot follow
//! to one argument makes every buffer non-disjoint.
//!
//! Disjointness: all stores to the buffer must share one coefficient vector `c`; their
//! windows are merged into one `[lo, hi]` per program. Taking the grid axes with more than
//! one program in increasing `|c|`, each `|c_a|` must be at least the span covered by one
//! program's window plus all smaller axes' programs (a mixed-radix argument), which makes
//! `pid -> window` injective into pairwise disjoint sets. Masks only remove lanes, so they
//! are ignored.

use crate::dtype::DType;
use crate::ir::{BinaryOp, Kernel, Op, ParamKind, RegionId, Value};

/// `coef · pid + [lo, hi]`, exact.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Aff {
    coef: [i128; 3],
    lo: i128,
    hi: i128,
}

impl Aff {
    fn konst(v: i128) -> Aff {
        Aff {
            coef: [0; 3],
            lo: v,
            hi: v,
        }
    }

    fn pid_free(&self) -> bool {
        self.coef == [0; 3]
    }

    /// The value's range over every program of `grid`.
    fn range(&self, grid: [usize; 3]) -> (i128, i128) {
        let (mut lo, mut hi) = (self.lo, self.hi);
        for (c, g) in self.coef.iter().zip(grid) {
            let top = c * (g.max(1) as i128 - 1);
            lo += top.min(0);
            hi += top.max(0);
        }
        (lo, hi)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Abs {
    Unknown,
    Int(Aff),
    /// A pointer into argument `param` at element offsets `off`.
    Ptr {
        param: usize,
        off: Aff,
    },
}

/// Largest magnitude a packed pointer offset (48 bits, sign-extended) holds without
/// wrapping.
const PTR_OFF_MAX: i128 = (1 << 47) - 1;

struct Analysis<'k> {
    k: &'k Kernel,
    grid: [usize; 3],
    vals: Vec<Abs>,
    /// Per parameter: the store windows (coefficients, lo, hi), or `None` once disproved.
    windows: Vec<Option<Vec<Aff>>>,
    /// A memory op through a pointer the analysis cannot attribute to one argument.
    poisoned: bool,
}

impl Analysis<'_> {
    fn get(&self, v: Value) -> Abs {
        self.vals.get(v.index()).copied().unwrap_or(Abs::Unknown)
    }

    /// `a` as the value of integer dtype `d`, or unknown when it could wrap.
    fn int(&self, a: Aff, d: DType) -> Abs {
        let (lo, hi) = a.range(self.grid);
        let (min, max) = match d {
            DType::I32 => (i32::MIN as i128, i32::MAX as i128),
            DType::I64 => (i64::MIN as i128, i64::MAX as i128),
            _ => return Abs::Unknown,
        };
        // Bounded coefficients keep every product in `mul` inside i128.
        let big = a.coef.iter().any(|c| c.abs() > i64::MAX as i128);
        if big || lo > hi || lo < min || hi > max {
            return Abs::Unknown;
        }
        Abs::Int(a)
    }

    fn ptr(&self, param: usize, off: Aff) -> Abs {
        let (lo, hi) = off.range(self.grid);
        let big = off.coef.iter().any(|c| c.abs() > i64::MAX as i128);
        if big || lo < -PTR_OFF_MAX || hi > PTR_OFF_MAX {
            return Abs::Unknown;
        }
        Abs::Ptr { param, off }
    }

    /// A memory op's pointer operand: marks the buffer as touched by something other than a
    /// plain store (or poisons everything when the pointer is not understood).
    fn touch(&mut self, ptr: Value) {
        match self.get(ptr) {
            Abs::Ptr { param, .. } => self.windows[param] = None,
            _ => self.poisoned = true,
        }
    }

    fn store(&mut self, ptr: Value) {
        match self.get(ptr) {
            Abs::Ptr { param, off } => {
                if let Some(w) = &mut self.windows[param] {
                    w.push(off);
                }
            }
            _ => self.poisoned = true,
        }
    }

    fn region(&mut self, r: RegionId) {
        for &id in &self.k.region(r).ops {
            self.op(id);
        }
    }

    fn op(&mut self, id: crate::ir::OpId) {
        let data = self.k.op(id);
        let res = data.result();
        let rty = res.map(|v| self.k.ty(v));
        // An integer result in the op's dtype (ops without a result stay unknown).
        let int = |a: Aff| rty.map_or(Abs::Unknown, |t| self.int(a, t.dtype));
        let out = match &data.op {
            Op::ProgramId { axis } => {
                let mut coef = [0; 3];
                coef[(*axis as usize).min(2)] = 1;
                Abs::Int(Aff { coef, lo: 0, hi: 0 })
            }
            Op::NumPrograms { axis } => {
                Abs::Int(Aff::konst(self.grid[(*axis as usize).min(2)].max(1) as i128))
            }
            Op::Constant { value } if rty.is_some_and(|t| !t.ptr) => match value {
                crate::ir::Const::Int(v) => int(Aff::konst(*v as i128)),
                crate::ir::Const::Float(_) => Abs::Unknown,
            },
            Op::Arange { start, end } if end > start => self.int(
                Aff {
                    coef: [0; 3],
                    lo: *start as i128,
                    hi: *end as i128 - 1,
                },
                DType::I32,
            ),
            Op::Splat { src, .. }
            | Op::Broadcast { src, .. }
            | Op::ExpandDims { src, .. }
            | Op::Reshape { src, .. }
            | Op::Permute { src, .. } => self.get(*src),
            Op::Cast { src } => match self.get(*src) {
                Abs::Int(a) if rty.is_some_and(|t| !t.ptr) => int(a),
                _ => Abs::Unknown,
            },
            Op::AddPtr { ptr, offset } => match (self.get(*ptr), self.get(*offset)) {
                (Abs::Ptr { param, off }, Abs::Int(o)) => self.ptr(param, add(off, o, 1)),
                _ => Abs::Unknown,
            },
            Op::Binary { kind, lhs, rhs } => match (self.get(*lhs), self.get(*rhs)) {
                (Abs::Int(a), Abs::Int(b)) => match kind {
                    BinaryOp::Add => int(add(a, b, 1)),
                    BinaryOp::Sub => int(add(a, b, -1)),
                    BinaryOp::Mul => match mul(a, b) {
                        Some(m) => int(m),
                        None => Abs::Unknown,
                    },
                    _ => Abs::Unknown,
                },
                _ => Abs::Unknown,
            },
            Op::Load { ptr, .. } | Op::AtomicRmw { ptr, .. } | Op::AtomicCas { ptr, .. } => {
                self.touch(*ptr);
                Abs::Unknown
            }
            Op::Store { ptr, .. } => {
                self.store(*ptr);
                Abs::Unknown
            }
            Op::For {
                lo, hi, step, body, ..
            } => {
                let args = &self.k.region(*body).args;
                // The induction variable lies in [lo, hi - 1] of its own program, and with
                // constant bounds and step it ends at the last step below `hi`; carried
                // values are not followed (unknown).
                let konst = |a: Abs| match a {
                    Abs::Int(a) if a.pid_free() && a.lo == a.hi => Some(a.lo),
                    _ => None,
                };
                let exact = match (
                    konst(self.get(*lo)),
                    konst(self.get(*hi)),
                    konst(self.get(*step)),
                ) {
                    (Some(l), Some(h), Some(s)) if s > 0 && h > l => Some(Aff {
                        coef: [0; 3],
                        lo: l,
                        hi: l + (h - 1 - l) / s * s,
                    }),
                    _ => None,
                };
                let iv = match (self.get(*lo), self.get(*hi), args.first()) {
                    (_, _, Some(&v)) if exact.is_some() => {
                        exact.map_or(Abs::Unknown, |e| self.int(e, self.k.ty(v).dtype))
                    }
                    (Abs::Int(l), Abs::Int(h), Some(&v)) if l.coef == h.coef && h.hi > l.lo => self
                        .int(
                            Aff {
                                coef: l.coef,
                                lo: l.lo,
                                hi: h.hi - 1,
                            },
                            self.k.ty(v).dtype,
                        ),
                    _ => Abs::Unknown,
                };
                if let Some(&v) = args.first() {
                    self.vals[v.index()] = iv;
                }
                self.region(*body);
                Abs::Unknown
            }
            _ => {
                // Region args (carried values, combine operands) stay unknown.
                for r in data.op.regions() {
                    self.region(r);
                }
                Abs::Unknown
            }
        };
        if let Some(v) = res {
            self.vals[v.index()] = out;
        }
    }

    /// Whether the stores recorded for `param` are pairwise disjoint across programs.
    fn disjoint(&self, param: usize) -> bool {
        let Some(ws) = self.windows.get(param).and_then(|w| w.as_ref()) else {
            return false;
        };
        let Some(first) = ws.first() else {
            return false;
        };
        if ws.iter().any(|w| w.coef != first.coef || w.lo > w.hi) {
            return false;
        }
        let lo = ws.iter().map(|w| w.lo).min().unwrap_or(0);
        let hi = ws.iter().map(|w| w.hi).max().unwrap_or(0);
        let mut axes: Vec<(i128, i128)> = (0..3)
            .filter(|&a| self.grid[a] > 1)
            .map(|a| (first.coef[a].abs(), self.grid[a] as i128))
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

fn add(a: Aff, b: Aff, sign: i128) -> Aff {
    let (blo, bhi) = if sign > 0 {
        (b.lo, b.hi)
    } else {
        (-b.hi, -b.lo)
    };
    Aff {
        coef: [
            a.coef[0] + sign * b.coef[0],
            a.coef[1] + sign * b.coef[1],
            a.coef[2] + sign * b.coef[2],
        ],
        lo: a.lo + blo,
        hi: a.hi + bhi,
    }
}

fn mul(a: Aff, b: Aff) -> Option<Aff> {
    let scale = |a: Aff, k: i128| Aff {
        coef: a.coef.map(|c| c * k),
        lo: (a.lo * k).min(a.hi * k),
        hi: (a.lo * k).max(a.hi * k),
    };
    // Magnitudes stay far below i128's range: every input fits i64 (checked by `int`).
    if b.pid_free() && b.lo == b.hi {
        Some(scale(a, b.lo))
    } else if a.pid_free() && a.lo == a.hi {
        Some(scale(b, a.lo))
    } else if a.pid_free() && b.pid_free() {
        let p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi];
        Some(Aff {
            coef: [0; 3],
            lo: *p.iter().min()?,
            hi: *p.iter().max()?,
        })
    } else {
        None
    }
}

/// For each parameter of `k`: true when it is a pointer that this launch (grid, integer
/// scalar arguments `ints`, `None` where unknown or not an integer) only stores to, with
/// every program's stores provably disjoint from every other program's.
pub(crate) fn disjoint_stores(k: &Kernel, grid: [usize; 3], ints: &[Option<i64>]) -> Vec<bool> {
    let mut a = Analysis {
        k,
        grid,
        vals: vec![Abs::Unknown; k.values.len()],
        windows: k
            .params
            .iter()
            .map(|p| matches!(p.kind, ParamKind::Ptr(_)).then(Vec::new))
            .collect(),
        poisoned: false,
    };
    for (i, p) in k.params.iter().enumerate() {
        let v = match (p.kind, ints.get(i).copied().flatten()) {
            (ParamKind::Ptr(_), _) => Abs::Ptr {
                param: i,
                off: Aff::konst(0),
            },
            (ParamKind::Scalar(d @ (DType::I32 | DType::I64)), Some(x)) => {
                a.int(Aff::konst(x as i128), d)
            }
            _ => Abs::Unknown,
        };
        if let Some(slot) = a.vals.get_mut(p.value.index()) {
            *slot = v;
        }
    }
    a.region(k.body);
    (0..k.params.len())
        .map(|i| !a.poisoned && a.disjoint(i))
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
    fn loads_atomics_and_unknown_pointers_disable_it() {
        // The output is also read.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + offs, tl::load(out + offs) + 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None]), [false]);
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
