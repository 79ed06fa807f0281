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
//! elements, and hands this printer that check ([`AllTrue`], from
//! [`crate::opt::cpu::CpuPlan::unswitch_tests`]): comparisons of a run-contiguous or
//! run-constant integer block with a uniform bound (`offs < n`, `rows[:, None] < m`), their
//! broadcasts, and `&` of such masks; at most [`crate::opt::cpu::MAX_OPEN`] at once, since
//! each doubles the code after it.

use crate::codegen::lower::{Lowering, Repr};
use crate::error::Result;
use crate::ir::{CmpPred, RegionId, Value};
use crate::opt::cpu::AllTrue;

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
        let Some(check) = self
            .cpu
            .as_ref()
            .and_then(|c| c.tests.get(&v))
            .and_then(|t| self.spell_all_true(t))
        else {
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

    /// The plan's all-true test of a mask ([`AllTrue`]) as a C condition; `None` when a
    /// value it names as uniform is not held as one here.
    fn spell_all_true(&self, t: &AllTrue) -> Option<String> {
        match t {
            AllTrue::Uniform(v) => self
                .is_uniform(*v)
                .then(|| format!("bool({})", self.el(*v, ""))),
            AllTrue::And(a, b) => Some(format!(
                "({} && {})",
                self.spell_all_true(a)?,
                self.spell_all_true(b)?
            )),
            AllTrue::Runs {
                x,
                pred,
                bound,
                run,
                runs,
                step,
                ..
            } => {
                let sym = match pred {
                    CmpPred::Lt => "<",
                    CmpPred::Le => "<=",
                    CmpPred::Gt => ">",
                    CmpPred::Ge => ">=",
                    CmpPred::Eq | CmpPred::Ne => return None,
                };
                let b = self.el(*bound, "");
                let first = self.el(*x, &format!("tm_r * {run}u"));
                let per_run = if *step == 0 {
                    format!("{first} {sym} {b}")
                } else {
                    let last = self.el(*x, &format!("tm_r * {run}u + {}u", run - 1));
                    // The run holds first..=last: the largest is `last`, the smallest `first`.
                    let hi = match pred {
                        CmpPred::Lt | CmpPred::Le => &last,
                        _ => &first,
                    };
                    format!("{first} <= {last} && {hi} {sym} {b}")
                };
                Some(if *runs == 1 {
                    format!("[&](uint tm_r) {{ return bool({per_run}); }}(0u)")
                } else {
                    format!("tm_all_runs({runs}u, [&](uint tm_r) {{ return bool({per_run}); }})")
                })
            }
        }
    }
}
