//! First-iteration peeling of `for` loops whose carried blocks start uniform, as the plan
//! decides ([`crate::opt::cpu::CpuPlan::peeled`]), for the compiled CPU executor.
//!
//! Triton's blocked reductions start from `tl.zeros` (`acc = tl.zeros(...)`, then
//! `acc += x` per block). Printed as written, every program fills the accumulator array
//! with zeros and then reads it back in the first iteration. With the first iteration
//! printed on its own, where the carried blocks are still their uniform initial values,
//! that iteration computes `0.0f + x` straight into the accumulator: no fill, no read back
//! (layer_norm 4096×1024 in `benches/executor.rs`, three runs each: 1.01–1.02 ms before,
//! 0.89–0.93 ms after, with the machine's copy at similar speed). Iterations run
//! in the same sequence, so every value is unchanged: the peeled copy is iteration `lo`
//! when `lo < hi`, the loop goes on from `lo + step` (the same wrapping addition the loop
//! makes), and when no iteration runs the variables take their initial values.

use crate::codegen::lower::{Lowering, Repr};
use crate::error::Result;
use crate::ir::{OpId, RegionId, Value};

impl Lowering<'_> {
    /// For `for` loop `id` with initial values `init`: per carried value, whether its
    /// first iteration sees it still uniform, when the plan peels the loop
    /// ([`crate::opt::cpu::CpuPlan::peeled`]) and no carried value lives in matrix
    /// fragments; else `None`.
    pub(in crate::codegen) fn uniform_inits_to_peel(
        &self,
        id: OpId,
        init: &[Value],
        frag_of: &[Option<(String, usize, usize)>],
    ) -> Option<Vec<bool>> {
        let slots = self.cpu.as_ref()?.plan.peeled(id);
        if slots.is_empty() || frag_of.iter().any(Option::is_some) {
            return None;
        }
        Some((0..init.len()).map(|s| slots.contains(&s)).collect())
    }

    /// Prints `if (runs) {` (the loop runs at least once) and the first iteration
    /// (induction variable `lo`, carried values that start uniform still uniform), after
    /// giving the other carried variables their initial values. The caller prints the loop
    /// from the second iteration, then calls [`Lowering::end_peel`].
    pub(in crate::codegen) fn peel_first_iteration(
        &mut self,
        body: RegionId,
        init: &[Value],
        vars: &[Repr],
        uniform: &[bool],
        iv_t: &str,
        (lo, runs): (&str, &str),
    ) -> Result<()> {
        let (now_vars, now_init) = pick(vars, init, uniform, false);
        self.assign_carried(&now_vars, &now_init)?;
        self.open(format!("if ({runs})"));
        self.line("{");
        self.indent += 1;
        let args = self.k.region(body).args.clone();
        let iv = self.fresh("iv");
        self.line(format!("const {iv_t} {iv} = {lo};"));
        self.set(args[0], Repr::Scalar(iv));
        for (k, v) in init.iter().enumerate() {
            let r = if uniform[k] {
                self.repr(*v).clone()
            } else {
                vars[k].clone()
            };
            self.set(args[k + 1], r);
        }
        self.hazard.reads_pending = true;
        let ys = self.region_split(body)?;
        self.assign_carried(vars, &ys)?;
        self.end_splits();
        self.close();
        self.forget_region(body);
        Ok(())
    }

    /// Closes [`Lowering::peel_first_iteration`]'s `if`: when the loop runs no iteration,
    /// the carried variables that started uniform take their initial values.
    pub(in crate::codegen) fn end_peel(
        &mut self,
        init: &[Value],
        vars: &[Repr],
        uniform: &[bool],
    ) -> Result<()> {
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        let (later_vars, later_init) = pick(vars, init, uniform, true);
        self.assign_carried(&later_vars, &later_init)?;
        self.close();
        Ok(())
    }

    /// Drops what the first lowering of `body` recorded about its values, so the second
    /// (the loop) cannot read a representation or recipe made for the peeled iteration.
    fn forget_region(&mut self, body: RegionId) {
        let mut values: Vec<Value> = self.k.region(body).args.clone();
        let mut regions = vec![body];
        while let Some(r) = regions.pop() {
            for &id in &self.k.region(r).ops {
                values.extend(self.k.op(id).results.iter());
                regions.extend(self.k.op(id).op.regions());
                values.extend(
                    self.k
                        .op(id)
                        .op
                        .regions()
                        .flat_map(|sub| self.k.region(sub).args.clone()),
                );
            }
        }
        for v in values {
            self.reprs[v.index()] = None;
            self.recipes[v.index()] = None;
        }
    }
}

/// The carried variables and initial values whose `uniform` flag is `which`.
fn pick(vars: &[Repr], init: &[Value], uniform: &[bool], which: bool) -> (Vec<Repr>, Vec<Value>) {
    (0..vars.len())
        .filter(|&k| uniform[k] == which)
        .map(|k| (vars[k].clone(), init[k]))
        .unzip()
}
