//! Mask unswitching for one-thread dialects (the compiled CPU executor).
//!
//! Triton kernels mask every access (`offs < n`), yet in all blocks but the last of a row
//! or a tensor every lane is active. A one-thread program evaluates the mask per element
//! in every loop that reads it (a compare and a select, or a masked load or store), which
//! cost a quarter of `layer_norm`'s compute (measured on its generated code). So where a mask is defined, the rest of its
//! region is printed once as a generic lambda and called on one of two paths: with
//! `std::true_type` when the mask is true everywhere (checked once per block), where every
//! read of the mask folds to `true` at compile time, and with `std::false_type` otherwise,
//! where it reads the mask as before. Both paths compute the same values by construction.
//!
//! The check must cost far less than a pass over the mask (a full pass costs what one
//! masked use does, measured), so only masks that [`Lowering::all_true`] decides from a few
//! elements qualify: comparisons of a run-contiguous or run-constant integer block with a
//! uniform bound (`offs < n`, `rows[:, None] < m`), their broadcasts, and `&` of such
//! masks. At most [`MAX_OPEN`] are open at once, since each doubles the code after it.

use super::lower::{Lowering, Repr};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{BinaryOp, CmpPred, Kernel, Op, RegionId, Value};

/// Shortest run of consecutive or equal elements checked by its ends (shorter runs would
/// make the check cost about as much as a masked pass).
const MIN_RUN: u64 = 16;

/// Unswitched masks open at once (the code after the last one is printed 2^n times).
const MAX_OPEN: usize = 2;

/// One unswitched mask: the lambda holding the rest of its region.
#[derive(Clone, Debug)]
pub(super) struct Split {
    /// The mask's value (its reads go through the flag while the split is open).
    mask: Value,
    /// `const bool` that is true when every element of the mask is.
    all: String,
    /// The generic lambda holding the rest of the region.
    rest: String,
}

/// Per value: a block `bool` used as a load/store/atomic mask or a `where` condition and
/// computed from index arithmetic only.
pub(super) fn unswitchable_masks(k: &Kernel) -> Vec<bool> {
    let n = k.values.len();
    let mut used_as_mask = vec![false; n];
    for o in &k.ops {
        let m = match &o.op {
            Op::Load { mask, .. } | Op::Store { mask, .. } | Op::AtomicRmw { mask, .. } => *mask,
            Op::Select { cond, .. } => Some(*cond),
            _ => None,
        };
        if let Some(m) = m {
            used_as_mask[m.index()] = true;
        }
    }
    let mut memo: Vec<Option<bool>> = vec![None; n];
    (0..n)
        .map(|i| {
            let ty = &k.values[i].ty;
            used_as_mask[i]
                && ty.is_block()
                && ty.dtype == DType::Bool
                && index_only(k, Value(i as u32), &mut memo)
        })
        .collect()
}

/// Whether `v` is a uniform scalar or a block built from index arithmetic alone.
fn index_only(k: &Kernel, v: Value, memo: &mut Vec<Option<bool>>) -> bool {
    if let Some(r) = memo[v.index()] {
        return r;
    }
    // Cycles cannot occur (SSA), but a loop-carried block has no defining op: not indexed.
    memo[v.index()] = Some(false);
    let r = k.ty(v).is_scalar()
        || match k.def_op(v).map(|id| &k.op(id).op) {
            Some(Op::ProgramId { .. } | Op::NumPrograms { .. })
            | Some(Op::Constant { .. } | Op::Arange { .. }) => true,
            Some(
                Op::Splat { src }
                | Op::Broadcast { src }
                | Op::ExpandDims { src, .. }
                | Op::Reshape { src }
                | Op::Cast { src },
            ) => index_only(k, *src, memo),
            Some(Op::Binary { lhs, rhs, .. } | Op::Cmp { lhs, rhs, .. }) => {
                index_only(k, *lhs, memo) && index_only(k, *rhs, memo)
            }
            Some(Op::Select {
                cond,
                on_true,
                on_false,
            }) => {
                index_only(k, *cond, memo)
                    && index_only(k, *on_true, memo)
                    && index_only(k, *on_false, memo)
            }
            _ => false,
        };
    memo[v.index()] = Some(r);
    r
}

impl Lowering<'_> {
    /// Lowers region `r` like [`Lowering::region`], unswitching its masks; the caller
    /// prints what uses the yielded values, then calls [`Lowering::end_splits`].
    pub fn region_split(&mut self, r: RegionId) -> Result<Vec<Value>> {
        self.splits.push(Vec::new());
        self.region_ops(r, true)
    }

    /// Closes the splits [`Lowering::region_split`] opened and calls each lambda on its
    /// two paths.
    pub fn end_splits(&mut self) {
        for s in self.splits.pop().unwrap_or_default().into_iter().rev() {
            self.flags.remove(&s.mask);
            self.indent -= 1;
            self.line("};");
            self.line(format!(
                "if ({}) {}(std::true_type{{}}); else {}(std::false_type{{}});",
                s.all, s.rest, s.rest
            ));
        }
    }

    /// Opens a split after `v`'s definition when `v` is a mask worth unswitching.
    pub(super) fn maybe_split(&mut self, v: Value) {
        let open: usize = self.splits.iter().map(Vec::len).sum();
        if !self.d.unswitch_masks
            || open >= MAX_OPEN
            || !self.unswitchable.get(v.index()).copied().unwrap_or(false)
        {
            return;
        }
        let Repr::Block(name) = self.repr(v).clone() else {
            return;
        };
        let Some(check) = self.all_true(v) else {
            return;
        };
        let all = self.fresh(&format!("{name}_all"));
        let rest = self.fresh(&format!("{name}_rest"));
        let flag = self.fresh(&format!("{name}_full"));
        self.line(format!("const bool {all} = {check};"));
        self.line(format!("const auto {rest} = [&](auto {flag}) {{"));
        self.indent += 1;
        self.flags.insert(v, flag);
        if let Some(frame) = self.splits.last_mut() {
            frame.push(Split { mask: v, all, rest });
        }
    }

    /// A C condition, reading a few elements, that holds exactly when every element of the
    /// bool block `v` is true; `None` when no such cheap check is known.
    fn all_true(&self, v: Value) -> Option<String> {
        if self.is_uniform(v) {
            return Some(format!("bool({})", self.el(v, "")));
        }
        match &self.k.op(self.k.def_op(v)?).op {
            Op::Binary {
                kind: BinaryOp::And,
                lhs,
                rhs,
            } => Some(format!(
                "({} && {})",
                self.all_true(*lhs)?,
                self.all_true(*rhs)?
            )),
            // Every source element appears in the result and nothing else does.
            Op::Broadcast { src } | Op::ExpandDims { src, .. } | Op::Reshape { src } => {
                self.all_true(*src)
            }
            Op::Cmp { pred, lhs, rhs } => self.compare_all(*pred, *lhs, *rhs, self.ty(v).numel()),
            _ => None,
        }
    }

    /// [`Self::all_true`] for `lhs pred rhs` over `n` elements, one side uniform, the other
    /// an integer block whose aligned runs are constant or step by +1 (`AxisInfo`).
    fn compare_all(&self, pred: CmpPred, lhs: Value, rhs: Value, n: usize) -> Option<String> {
        let (x, bound, pred) = if self.is_uniform(rhs) {
            (lhs, rhs, pred)
        } else if self.is_uniform(lhs) {
            let flipped = match pred {
                CmpPred::Lt => CmpPred::Gt,
                CmpPred::Le => CmpPred::Ge,
                CmpPred::Gt => CmpPred::Lt,
                CmpPred::Ge => CmpPred::Le,
                CmpPred::Eq | CmpPred::Ne => return None,
            };
            (rhs, lhs, flipped)
        } else {
            return None;
        };
        // 32- and 64-bit only: a run of at most 2^20 elements cannot wrap all the way round,
        // so `first <= last` is exactly "the run did not wrap".
        if !matches!(
            self.edt(x),
            DType::I32 | DType::I64 | DType::U32 | DType::U64
        ) {
            return None;
        }
        let sym = match pred {
            CmpPred::Lt => "<",
            CmpPred::Le => "<=",
            CmpPred::Gt => ">",
            CmpPred::Ge => ">=",
            CmpPred::Eq | CmpPred::Ne => return None,
        };
        let b = self.el(bound, "");
        let info = self.axis[x.index()];
        let n = n as u64;
        let (run, per_run) = if info.cst >= MIN_RUN && n % info.cst == 0 {
            let first = self.el(x, &format!("tm_r * {}u", info.cst));
            (info.cst, format!("{first} {sym} {b}"))
        } else if info.contig >= MIN_RUN && n % info.contig == 0 {
            let c = info.contig;
            let first = self.el(x, &format!("tm_r * {c}u"));
            let last = self.el(x, &format!("tm_r * {c}u + {}u", c - 1));
            // The run holds first..=last: the largest is `last`, the smallest `first`.
            let (lo_ok, hi) = match pred {
                CmpPred::Lt | CmpPred::Le => (format!("{first} <= {last}"), last.clone()),
                _ => (format!("{first} <= {last}"), first.clone()),
            };
            (c, format!("{lo_ok} && {hi} {sym} {b}"))
        } else {
            return None;
        };
        let runs = n / run;
        Some(if runs == 1 {
            format!("[&](uint tm_r) {{ return bool({per_run}); }}(0u)")
        } else {
            format!("tm_all_runs({runs}u, [&](uint tm_r) {{ return bool({per_run}); }})")
        })
    }
}
