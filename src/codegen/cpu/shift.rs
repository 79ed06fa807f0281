//! Pointer blocks a `for` loop carries and advances by a uniform offset, held as their
//! start plus one scalar ([`crate::opt::cpu::CpuPlan::shifted`]), spelled.
//!
//! The slot's variable keeps the block's start (assigned once, before the loop); a second
//! variable, the shift, sums the offsets the iterations add, in the offsets' unsigned type
//! (wrapping, as the element-wise adds wrap); the loop's argument and its result are a lazy
//! block reading `start[i] + shift`. Each iteration's update is one scalar add.

use std::collections::BTreeSet;

use crate::codegen::lower::{Lowering, Repr};
use crate::codegen::LayoutChoice;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Op, OpId, RegionId, Value};

/// One shifted slot while its loop is printed.
pub(in crate::codegen) struct Shifted {
    /// The carried slot.
    pub slot: usize,
    /// The variable summing the offsets.
    pub shift: String,
    /// The variable holding the start.
    pub start: String,
}

impl Lowering<'_> {
    /// The carried slots of `for` loop `id` the plan holds as start plus shift (none when
    /// the plan has no CPU decisions).
    pub(in crate::codegen) fn shifted_slots(&self, id: OpId) -> Vec<usize> {
        self.cpu
            .as_ref()
            .map_or_else(Vec::new, |c| c.plan.shifted(id).to_vec())
    }

    /// The offsets' signed and unsigned C types.
    fn offset_types(&self) -> Result<(&'static str, &'static str)> {
        let (s, u) = if self.off_dtype == DType::I64 {
            (DType::I64, DType::U64)
        } else {
            (DType::I32, DType::U32)
        };
        Ok((self.cty(s)?, self.cty(u)?))
    }

    /// After the carried variables got their initial values: for each shifted slot of
    /// `slots`, declares its shift (0) and a lazy block reading `start[i] + shift`, which
    /// replaces the slot's entry of `vars` (the loop's argument and result).
    pub(in crate::codegen) fn open_shifts(
        &mut self,
        slots: &[usize],
        vars: &mut [Repr],
    ) -> Result<Vec<Shifted>> {
        let (st, ut) = self.offset_types()?;
        let mut out = Vec::new();
        for &slot in slots {
            let Some(Repr::Block(start)) = vars.get(slot).cloned() else {
                continue;
            };
            let shift = self.fresh(&format!("{start}shift"));
            self.line(format!("{st} {shift} = 0;"));
            let name = self.fresh(&format!("{start}at"));
            self.line(format!(
                "const auto {name} = tm_lazy<{st}>([&](uint tm_k) {{ return {st}({ut}({start}[tm_k]) + {ut}({shift})); }});"
            ));
            self.record_lazy(&name, BTreeSet::from([start.clone(), shift.clone()]), 1);
            self.layouts.push(LayoutChoice {
                op: format!("carried {start}"),
                layout: "its start plus one scalar offset".into(),
            });
            vars[slot] = Repr::Block(name);
            out.push(Shifted { slot, shift, start });
        }
        Ok(out)
    }

    /// Before `for` loop `id` (over `body`), after [`Self::open_shifts`]: for each load the
    /// plan checks once ([`crate::opt::cpu::CpuPlan::rows_checked_once`]) through one of
    /// the shifted slots, whether each of its rows runs +1, from the slot's start, into a
    /// table the load's row copies read ([`super::CpuStage::row_runs`]).
    pub(in crate::codegen) fn open_row_checks(
        &mut self,
        body: RegionId,
        shifts: &[Shifted],
    ) -> Result<()> {
        let args = self.k.region(body).args.clone();
        let (_, ut) = self.offset_types()?;
        for i in 0..self.k.ops.len() {
            let id = OpId(i as u32);
            let (Op::Load { ptr, .. }, Some(res)) = (&self.k.op(id).op, self.k.op(id).result())
            else {
                continue;
            };
            if !self
                .cpu
                .as_ref()
                .is_some_and(|c| c.plan.rows_checked_once(id))
            {
                continue;
            }
            let Some(s) = shifts.iter().find(|s| args.get(s.slot + 1) == Some(ptr)) else {
                continue;
            };
            let lay = self.layout(res);
            let c = self.ty(res).shape.last().copied().unwrap_or(1);
            let start = s.start.clone();
            let runs = self.fresh(&format!("{start}runs"));
            self.line(format!("bool {runs}[{}];", lay.n / c));
            self.open(format!(
                "for (uint tm_r = 0; tm_r < {}u; ++tm_r)",
                lay.n / c
            ));
            self.line(format!("const uint tm_i = tm_r * {c}u;"));
            self.line("bool tm_run = true;");
            self.line(format!(
                "for (uint tm_e = 0; tm_e < {c}u; ++tm_e) tm_run &= bool({ut}({start}[tm_i + tm_e]) == {ut}({start}[tm_i]) + tm_e);"
            ));
            self.line(format!("{runs}[tm_r] = tm_run;"));
            self.close();
            if let Some(c) = self.cpu.as_mut() {
                c.row_runs.insert(id, runs);
            }
        }
        Ok(())
    }

    /// At the end of an iteration whose `yield` gives `ys`: each shifted slot's offset
    /// (`arg + off`), read into a constant before the other carried variables are assigned
    /// (it may read one of them). The caller assigns those, then [`Self::advance_shifts`].
    pub(in crate::codegen) fn stage_shifts(
        &mut self,
        shifts: &[Shifted],
        ys: &[Value],
    ) -> Result<Vec<String>> {
        let (st, _) = self.offset_types()?;
        let mut out = Vec::new();
        for s in shifts {
            let off = ys
                .get(s.slot)
                .and_then(|y| self.k.def_op(*y))
                .and_then(|d| match &self.k.op(d).op {
                    Op::AddPtr { offset, .. } => Some(*offset),
                    _ => None,
                })
                .ok_or_else(|| {
                    crate::codegen::lower::unsupported_on(
                        self.d,
                        self.k,
                        format!("carried slot {} shifted without its offset", s.slot),
                    )
                })?;
            let name = self.fresh("shift_by");
            self.line(format!("const {st} {name} = {st}({});", self.el(off, "")));
            out.push(name);
        }
        Ok(out)
    }

    /// Adds each staged offset to its slot's shift.
    pub(in crate::codegen) fn advance_shifts(
        &mut self,
        shifts: &[Shifted],
        steps: &[String],
    ) -> Result<()> {
        let (st, ut) = self.offset_types()?;
        for (s, step) in shifts.iter().zip(steps) {
            let v = &s.shift;
            self.line(format!("{v} = {st}({ut}({v}) + {ut}({step}));"));
        }
        Ok(())
    }
}
