//! Where threadgroup barriers go between ops: the plan lists each one with its reason, the
//! verifier checks none is missing, and the printers emit exactly those.
//!
//! Every op that uses threadgroup memory writes its buffers, passes a barrier, and reads
//! them back before it ends; those barriers inside one op's lowering stay with it. Between
//! ops the hazard is the reverse: some thread may still be reading an op's buffer when the
//! next op's threads start writing. [`required`] walks the kernel in program order with the
//! buffers whose reads may be pending since the last barrier, and asks for a barrier
//! before an op's first write ([`When::Before`]; for a `for` keeping accumulators in
//! fragments, before they enter them) when one of its buffers shares bytes with a pending
//! one, and before a `for`'s accumulators leave the fragments after its loop
//! ([`When::After`]). A loop body starts with the reads of the previous iteration pending
//! (every buffer of the body) as well as those before the loop; a branch's join, with the
//! pending reads of both sides. Buffers that share no byte need no barrier between them:
//! with arena reuse off, consecutive ops stop waiting for each other.

use std::collections::BTreeMap;
use std::fmt;

use super::smem::{Arena, Role};
use crate::ir::{Kernel, Op, OpId, RegionId};

/// Where a barrier sits relative to its op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum When {
    /// Before the op's first threadgroup write.
    Before,
    /// After a `for` loop, before its accumulators leave matrix fragments.
    After,
}

impl When {
    /// The name in the plan's text form.
    pub fn name(self) -> &'static str {
        match self {
            When::Before => "before",
            When::After => "after",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<When> {
        [When::Before, When::After]
            .into_iter()
            .find(|w| w.name() == s)
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The barriers `k` needs between ops with `arena`'s buffers, with the reason for each.
pub fn required(k: &Kernel, arena: &Arena) -> BTreeMap<(OpId, When), String> {
    let mut w = Walk {
        k,
        arena,
        out: BTreeMap::new(),
    };
    w.region(k.body, Vec::new());
    w.out
}

struct Walk<'a> {
    k: &'a Kernel,
    arena: &'a Arena,
    out: BTreeMap<(OpId, When), String>,
}

impl Walk<'_> {
    /// Indices of `op`'s buffers, `after`: only those written after its loop.
    fn bufs(&self, op: OpId, after: bool) -> Vec<usize> {
        let for_op = matches!(self.k.op(op).op, Op::For { .. });
        self.arena
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.op == op && (for_op && b.role == Role::AccOut) == after)
            .map(|(i, _)| i)
            .collect()
    }

    /// Every buffer of the ops of region `r` and the regions nested in it.
    fn all_in(&self, r: RegionId, out: &mut Vec<usize>) {
        for &id in &self.k.region(r).ops {
            out.extend(self.bufs(id, false));
            out.extend(self.bufs(id, true));
            if nested(&self.k.op(id).op) {
                for sub in self.k.op(id).op.regions() {
                    self.all_in(sub, out);
                }
            }
        }
    }

    /// Asks for a barrier at `(op, when)` if a buffer of `writes` shares bytes with one of
    /// `pending`; returns what is pending after the writes.
    fn writes(
        &mut self,
        op: OpId,
        when: When,
        writes: &[usize],
        pending: Vec<usize>,
    ) -> Vec<usize> {
        if writes.is_empty() {
            return pending;
        }
        let b = &self.arena.buffers;
        let clash = writes.iter().find_map(|&i| {
            pending
                .iter()
                .find(|&&j| {
                    b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes
                })
                .map(|&j| (i, j))
        });
        if let Some((i, j)) = clash {
            let (lo, hi) = (
                b[i].offset.max(b[j].offset),
                (b[i].offset + b[i].bytes).min(b[j].offset + b[j].bytes),
            );
            self.out.insert(
                (op, when),
                format!(
                    "{op} writes buf #{i} over bytes {lo}..{hi} that reads of buf #{j} ({} {}) may still use",
                    b[j].op,
                    b[j].role.name()
                ),
            );
        }
        writes.to_vec()
    }

    /// Walks region `r` from `pending`; returns what is pending at its end.
    fn region(&mut self, r: RegionId, mut pending: Vec<usize>) -> Vec<usize> {
        for &id in &self.k.region(r).ops {
            let op = &self.k.op(id).op;
            match op {
                Op::DebugBarrier => pending.clear(),
                Op::For { body, .. } => {
                    let entry = self.writes(id, When::Before, &self.bufs(id, false), pending);
                    let mut start = entry.clone();
                    self.all_in(*body, &mut start);
                    let mut after = self.region(*body, start);
                    after.extend(entry);
                    pending = self.writes(id, When::After, &self.bufs(id, true), after);
                }
                Op::While { cond, body, .. } => {
                    let mut start = pending;
                    self.all_in(*cond, &mut start);
                    self.all_in(*body, &mut start);
                    let c = self.region(*cond, start.clone());
                    let b = self.region(*body, c.clone());
                    pending = start.into_iter().chain(c).chain(b).collect();
                }
                Op::If {
                    then_region,
                    else_region,
                    ..
                } => {
                    let t = self.region(*then_region, pending.clone());
                    let e = self.region(*else_region, pending);
                    pending = t.into_iter().chain(e).collect();
                }
                _ => pending = self.writes(id, When::Before, &self.bufs(id, false), pending),
            }
            pending.sort_unstable();
            pending.dedup();
        }
        pending
    }
}

/// Whether the printers lower `op`'s regions as ops of their own (loops and branches), not
/// inline in the op (a custom combine function).
fn nested(op: &Op) -> bool {
    matches!(op, Op::For { .. } | Op::While { .. } | Op::If { .. })
}
