//! Barrier elimination: a `debug_barrier` orders memory accesses, so one with no memory
//! access since the previous barrier (or since the start of its region) guards nothing and
//! is dropped. Barriers after control flow are kept: the nested region may access memory.

use crate::ir::{Kernel, Op};

/// Drops barriers that guard no memory access; returns how many were dropped.
pub fn eliminate_barriers(k: &mut Kernel) -> usize {
    let mut dropped = 0;
    for r in 0..k.regions.len() {
        let ops = std::mem::take(&mut k.regions[r].ops);
        let mut kept = Vec::with_capacity(ops.len());
        let mut touched_memory = false;
        for id in ops {
            let op = &k.ops[id.index()].op;
            if matches!(op, Op::DebugBarrier) {
                if !touched_memory {
                    dropped += 1;
                    continue;
                }
                touched_memory = false;
            } else {
                let p = op.props();
                touched_memory |=
                    p.reads_memory || p.writes_memory || op.regions().next().is_some();
            }
            kept.push(id);
        }
        k.regions[r].ops = kept;
    }
    dropped
}
