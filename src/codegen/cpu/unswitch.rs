//! Mask unswitching for the compiled CPU executor: the masks the plan unswitches
//! ([`crate::opt::cpu::CpuPlan::unswitched`]), spelled.
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
//! masked use does, measured), so the plan unswitches only masks whose check reads a few
//! elements ([`Lowering::all_true`] prints it): comparisons of a run-contiguous or
//! run-constant integer block with a uniform bound (`offs < n`, `rows[:, None] < m`), their
//! broadcasts, and `&` of such masks; at most [`crate::opt::cpu::MAX_OPEN`] at once, since
//! each doubles the code after it.

use crate::codegen::lower::{Lowering, Repr};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{BinaryOp, CmpPred, Op, RegionId, Value};
use crate::opt::cpu::MIN_RUN;

/// One unswitched mask: the lambda holding the rest of its region.
#[derive(Clone, Debug)]
pub(in crate::codegen) struct Split {
    /// The mask's value (its reads go through the flag while the split is open).
    mask: Value,
    /// `const bool` that is true when every element of the mask is.
    all: String,
    /// The generic lambda holding the rest of the region.
    rest: String,
}

impl Lowering<'_> {
    /// Lowers region `r` like [`Lowering::region`], unswitching its masks; the caller
    /// prints what uses the yielded values, then calls [`Lowering::end_splits`].
    pub fn region_split(&mut self, r: RegionId) -> Result<Vec<Value>> {
        let Some(cpu) = self.cpu.as_mut() else {
            return self.region_ops(r, false);
        };
        cpu.splits.push(Vec::new());
        self.region_ops(r, true)
    }

    /// Closes the splits [`Lowering::region_split`] opened and calls each lambda on its
    /// two paths.
    pub fn end_splits(&mut self) {
        let Some(cpu) = self.cpu.as_mut() else {
            return;
        };
        let frame = cpu.splits.pop().unwrap_or_default();
        for s in frame.into_iter().rev() {
            if let Some(cpu) = self.cpu.as_mut() {
                cpu.flags.remove(&s.mask);
            }
            self.indent -= 1;
            self.line("};");
            self.line(format!(
                "if ({}) {}(std::true_type{{}}); else {}(std::false_type{{}});",
                s.all, s.rest, s.rest
            ));
        }
    }

    /// Opens a split after `v`'s definition when the plan unswitches mask `v`.
    pub(in crate::codegen) fn maybe_split(&mut self, v: Value) {
        if !self.cpu.as_ref().is_some_and(|c| c.plan.unswitched(v)) {
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
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.flags.insert(v, flag);
            if let Some(frame) = cpu.splits.last_mut() {
                frame.push(Split { mask: v, all, rest });
            }
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
