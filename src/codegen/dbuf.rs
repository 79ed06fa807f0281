//! Spelling of [`crate::opt::plan::Decision::Ahead`] on Metal: the two operand loads of a
//! `for` loop's `simdgroup_matrix` dot go through two threadgroup staging buffers, one K
//! step ahead of the MMAs that read them.
//!
//! Before the loop, iteration 0's tiles are loaded and stored into buffer 0, then one
//! barrier. At the top of iteration `t`, every thread loads iteration `t + 1`'s elements
//! from device memory into registers (pointers advanced by one step, masks recomputed for
//! the next induction variable; masked elements are 0, as `other` is 0 or absent). The dot
//! reads buffer `t % 2`. After the body, the registers go into buffer `(t + 1) % 2`, then one
//! barrier: one barrier per K step instead of two. No barrier is needed before those
//! stores: buffer `(t + 1) % 2` was last read by the MMAs of iteration `t - 1`, which every
//! thread finished before the barrier that ended that iteration. The device loads of step
//! `t + 1` are in flight while the MMAs of step `t` run.
//!
//! Each buffer holds A `[m][pa]` then B `[k][pb]`, rows padded as
//! [`crate::opt::plan::simdgroup_pitches`] says for half the arena's budget, the layout
//! `dot.rs` reads.

use super::lower::{unsigned_offset, unsupported_on, Lowering, Repr};
use crate::error::Result;
use crate::ir::{Op, OpId, RegionId};
use crate::opt::buffers::DoubleBuffer as Ring;
use crate::opt::smem::Role;

/// Buffers of the ring.
const STAGES: usize = crate::opt::buffers::DOUBLE_BUFFERS;

impl Lowering<'_> {
    /// The ring of `for` loop `id`, when the plan stages its dot's operand loads in two
    /// buffers.
    pub(super) fn dbuf_of(&self, id: OpId) -> Option<Ring> {
        crate::opt::buffers::double_buffer(self.k, &self.plan, id)
    }

    /// The arena view of the ring (requested for the loop being lowered).
    fn ring_buf(&mut self, ring: &Ring) -> Result<String> {
        self.smem_buf(Role::Ring, ring.stage, STAGES * ring.elems)
    }

    /// Loads the elements of every load of `ring` into new register arrays, for the
    /// carried pointers' iteration (`next` false) or the one after it (`next` true),
    /// induction variable `iv`; returns their names.
    fn dbuf_fetch(
        &mut self,
        ring: &Ring,
        body: RegionId,
        iv: &str,
        next: bool,
    ) -> Result<Vec<String>> {
        let mask_ops: Vec<OpId> = ring
            .loads
            .iter()
            .flat_map(|l| l.mask_ops.iter().copied())
            .collect();
        self.relower(body, &mask_ops, iv)?;
        let mut names = Vec::new();
        for l in &ring.loads {
            let Op::Load { ptr, other, .. } = self.k.op(l.load).op else {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    "a staged dot operand that is not a load",
                ));
            };
            // `other` is absent or the constant 0, possibly defined in the body (not
            // lowered yet): masked elements take 0.
            let saved_other = other.map(|o| (o, self.reprs[o.index()].clone()));
            if let Some(o) = other {
                let ct = self.cty(self.edt(o))?;
                self.set(o, Repr::Scalar(format!("{ct}(0)")));
            }
            let saved = self.repr(ptr).clone();
            if next {
                let Repr::Block(offs) = &saved else {
                    return Err(unsupported_on(
                        self.d,
                        self.k,
                        "a dot operand staged ahead through uniform pointers",
                    ));
                };
                let ot = self.cty(self.off_dtype)?;
                let ut = unsigned_offset(self.off_dtype);
                let lay = self.layout(ptr);
                let np = self.fresh("next_off");
                self.line(format!("{ot} {np}[{}];", lay.regs()));
                self.open_regs(lay, false);
                // Wrapping, as the pointer arithmetic it computes ahead.
                self.line(format!(
                    "{np}[tm_i] = {ot}({ut}({offs}[tm_i]) + {ut}({ot}({})));",
                    self.el(l.step, "tm_i")
                ));
                self.close();
                self.set(ptr, Repr::Block(np));
            }
            let mark = self.layouts.len();
            let r = self.op(l.load);
            self.layouts.truncate(mark);
            self.set(ptr, saved);
            if let Some((o, r)) = saved_other {
                self.reprs[o.index()] = r;
            }
            r?;
            let res = self
                .k
                .op(l.load)
                .result()
                .ok_or_else(|| unsupported_on(self.d, self.k, "a load without a result"))?;
            names.push(self.materialize(res)?);
        }
        Ok(names)
    }

    /// Stores the register arrays `names` (from [`Self::dbuf_fetch`]) into buffer `stage`
    /// (a C expression) of the ring.
    fn dbuf_store(&mut self, ring: &Ring, buf: &str, names: &[String], stage: &str) -> Result<()> {
        let sct = self.cty(ring.stage)?;
        let at = format!("({buf} + ({stage}) * {}u)", ring.elems);
        for (l, name) in ring.loads.iter().zip(names) {
            let Some(res) = self.k.op(l.load).result() else {
                continue;
            };
            let lay = self.layout(res);
            let x = if self.edt(res) == ring.stage {
                format!("{name}[tm_i]")
            } else {
                format!("{sct}({name}[tm_i])")
            };
            self.stage_operand(&at, &x, lay, l.operand, ring.mnk, None, ring.pitches);
        }
        Ok(())
    }

    /// Before the loop (carried values assigned): the loop-invariant pointer steps, then
    /// iteration 0's tiles into buffer 0 and a barrier. `lo` and `trips` name the loop's
    /// start and trip count.
    pub(super) fn dbuf_prologue(
        &mut self,
        ring: &Ring,
        body: RegionId,
        (lo, trips): (&str, &str),
    ) -> Result<()> {
        let buf = self.ring_buf(ring)?;
        let step_ops: Vec<OpId> = ring
            .loads
            .iter()
            .flat_map(|l| l.step_ops.iter().copied())
            .collect();
        let mark = self.layouts.len();
        for op in step_ops {
            self.op(op)?;
        }
        self.layouts.truncate(mark);
        self.smem_write_begin();
        self.open(format!("if (0u < {trips})"));
        let names = self.dbuf_fetch(ring, body, lo, false)?;
        self.dbuf_store(ring, &buf, &names, "0u")?;
        self.close();
        self.smem_write_end();
        Ok(())
    }

    /// At the top of iteration `t` (`iv` its induction variable): loads iteration
    /// `t + 1`'s tiles into registers and points the loads' results at buffer `t % 2`.
    /// Returns the registers, for [`Self::dbuf_iteration_end`].
    pub(super) fn dbuf_iteration(
        &mut self,
        ring: &Ring,
        body: RegionId,
        (iv, step, trips, t): (&str, &str, &str, &str),
        (iv_t, u): (&str, &str),
    ) -> Result<Vec<String>> {
        let buf = self.ring_buf(ring)?;
        let mut regs = Vec::new();
        for l in &ring.loads {
            let Some(res) = self.k.op(l.load).result() else {
                continue;
            };
            let lay = self.layout(res);
            let dt = self.edt(res);
            regs.push(self.declare_block("next_tile", dt, lay.n)?);
        }
        self.open(format!("if ({t} + 1u < {trips})"));
        let next = format!("{iv_t}({u}({iv}) + {u}({step}))");
        let names = self.dbuf_fetch(ring, body, &next, true)?;
        for (r, (name, l)) in regs.iter().zip(names.iter().zip(&ring.loads)) {
            let Some(res) = self.k.op(l.load).result() else {
                continue;
            };
            let lay = self.layout(res);
            self.open_regs(lay, false);
            self.line(format!("{r}[tm_i] = {name}[tm_i];"));
            self.close();
        }
        self.close();
        let cur = self.fresh("stage");
        self.line(format!("const uint {cur} = uint({t} & 1u);"));
        for l in &ring.loads {
            let Some(res) = self.k.op(l.load).result() else {
                continue;
            };
            self.set(
                res,
                Repr::Block(format!("({buf} + {cur} * {}u)", ring.elems)),
            );
            self.ring_vals.insert(res);
        }
        Ok(regs)
    }

    /// After the body of iteration `t`: the next step's registers `regs` into the other
    /// buffer, then the one barrier of the step.
    pub(super) fn dbuf_iteration_end(
        &mut self,
        ring: &Ring,
        regs: &[String],
        (t, trips): (&str, &str),
    ) -> Result<()> {
        let buf = self.ring_buf(ring)?;
        self.open(format!("if ({t} + 1u < {trips})"));
        self.dbuf_store(ring, &buf, regs, &format!("({t} + 1u) & 1u"))?;
        self.line(self.d.barrier);
        self.close();
        Ok(())
    }

    /// After the loop: the loads' results are no longer in the ring.
    pub(super) fn dbuf_epilogue(&mut self, ring: &Ring) {
        for l in &ring.loads {
            if let Some(res) = self.k.op(l.load).result() {
                self.ring_vals.remove(&res);
            }
        }
    }

    /// Buffers of the ring the operands of the dot being lowered are staged in (1 when
    /// they are not staged ahead).
    pub(super) fn ring_stages(&self) -> usize {
        self.cur_op
            .and_then(|op| self.plan.dot_stages(self.k, op))
            .unwrap_or(1)
            .max(1)
    }
}
