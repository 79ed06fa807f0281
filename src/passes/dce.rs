//! Dead-code elimination: pure ops whose results nobody reads are removed, repeatedly, so
//! chains that only fed dead ops go too. Ops with effects (stores, atomics, barriers, ops
//! with regions) always stay. The DSL runs it on every kernel it builds; the pipeline runs
//! it after every pass.

use crate::ir::{Kernel, OpId};

/// Removes dead pure ops (see [`Kernel::remove_dead_ops`]); returns how many.
pub fn eliminate_dead_code(k: &mut Kernel) -> usize {
    k.remove_dead_ops()
}

impl Kernel {
    /// Removes pure ops none of whose results is used, until none is left; returns how many
    /// were removed. Removed ops stay in the arena, unplaced: call [`Kernel::compact`] next.
    pub fn remove_dead_ops(&mut self) -> usize {
        let mut removed = 0;
        loop {
            let uses = self.use_counts();
            let before = removed;
            for r in 0..self.regions.len() {
                let ops = std::mem::take(&mut self.regions[r].ops);
                let kept: Vec<OpId> = ops
                    .into_iter()
                    .filter(|id| {
                        let d = &self.ops[id.index()];
                        let dead = d.op.props().pure
                            && !d.results.is_empty()
                            && d.results
                                .iter()
                                .all(|v| uses.get(v.index()).is_some_and(|u| *u == 0));
                        removed += dead as usize;
                        !dead
                    })
                    .collect();
                self.regions[r].ops = kept;
            }
            if removed == before {
                return removed;
            }
        }
    }
}
