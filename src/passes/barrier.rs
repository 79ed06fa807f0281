//! Barrier elimination: a `debug_barrier` orders memory accesses, so one with no memory
//! access since the previous barrier guards nothing and is dropped. Only straight-line code
//! is proven: at the start of a nested region (a loop body, a branch) the accesses before
//! the region op, or those of the loop's previous iteration, may still be pending, so a
//! barrier there is kept; so is a barrier after control flow (the nested region may access
//! memory). The kernel's top-level region starts with nothing pending.

use crate::ir::{Kernel, Op};

/// Drops barriers that guard no memory access; returns how many were dropped.
pub fn eliminate_barriers(k: &mut Kernel) -> usize {
    let mut dropped = 0;
    for r in 0..k.regions.len() {
        let ops = std::mem::take(&mut k.regions[r].ops);
        let mut kept = Vec::with_capacity(ops.len());
        let mut touched_memory = r != k.body.index();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tl;
    use crate::DType::F32;

    fn barriers(k: &Kernel) -> usize {
        k.regions
            .iter()
            .flat_map(|r| &r.ops)
            .filter(|id| matches!(k.ops[id.index()].op, Op::DebugBarrier))
            .count()
    }

    #[test]
    fn a_barrier_opening_a_loop_body_or_a_branch_is_kept() {
        let k = tl::jit("ping_pong", |k| {
            let (buf, x) = (k.ptr(F32, "buf"), k.ptr(F32, "x"));
            let block = k.constexpr("BLOCK");
            let offs = tl::arange(0, block);
            tl::debug_barrier(); // nothing before it in the kernel: dropped
            tl::store(buf + offs, tl::load(x + offs));
            tl::range(0, 4, 1).for_each(|_| {
                tl::debug_barrier(); // orders the previous iteration's store: kept
                let v = tl::load(buf + ((block - 1) - offs));
                tl::debug_barrier();
                tl::store(buf + offs, v * 2.0);
            });
            tl::if_then(tl::program_id(0).eq(0), || {
                tl::debug_barrier(); // orders the loop's last store: kept
                tl::store(buf + offs, tl::load(buf + ((block - 1) - offs)));
            });
        })
        .unwrap()
        .specialize_with(&[("BLOCK", 64)])
        .unwrap();
        let mut k = (*k).clone();
        assert_eq!(barriers(&k), 4);
        assert_eq!(eliminate_barriers(&mut k), 1);
        assert_eq!(barriers(&k), 3);
    }
}
