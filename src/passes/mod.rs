//! Kernel-IR passes: functions from a kernel to a kernel, each with before/after statistics.
//!
//! [`pipeline`] lists the whole sequence in order (STYLE rule 7). Every pass keeps the kernel
//! valid (the pipeline verifies the result) and keeps its meaning; FMA contraction changes
//! rounding (one rounding instead of two) and is skipped when [`PassOptions::exact`] is set.

mod barrier;
mod const_fold;
mod cse;
mod dce;
mod fma;
mod specialize;

use std::fmt;

use crate::error::Result;
use crate::ir::{verify, Kernel};

pub use barrier::eliminate_barriers;
pub use const_fold::fold_constants;
pub use cse::eliminate_common_subexpressions;
pub use dce::eliminate_dead_code;
pub use fma::contract_fma;
pub use specialize::{specializable, specialize_integers, IntFact, IntSpec};

/// What the pipeline may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PassOptions {
    /// Bit-exact results requested: no FMA contraction.
    pub exact: bool,
}

/// What one pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassStats {
    /// Pass name.
    pub name: &'static str,
    /// Ops reachable from the body before the pass.
    pub ops_before: usize,
    /// Ops reachable from the body after it.
    pub ops_after: usize,
    /// Ops rewritten or removed by the pass.
    pub changed: usize,
}

impl fmt::Display for PassStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<20} {:>4} -> {:>4} ops, {} changed",
            self.name, self.ops_before, self.ops_after, self.changed
        )
    }
}

fn count(k: &Kernel) -> usize {
    k.walk().len()
}

/// Runs `pass`, then drops dead ops and renumbers, recording statistics.
fn step(
    k: &mut Kernel,
    stats: &mut Vec<PassStats>,
    name: &'static str,
    pass: impl FnOnce(&mut Kernel) -> usize,
) {
    let ops_before = count(k);
    let changed = pass(k);
    k.remove_dead_ops();
    k.compact();
    stats.push(PassStats {
        name,
        ops_before,
        ops_after: count(k),
        changed,
    });
}

/// The optimisation pipeline, in order: constant folding, common-subexpression elimination,
/// FMA contraction (unless exact), barrier elimination, dead-code elimination. Returns the
/// optimised kernel (verified) and one [`PassStats`] per pass.
pub fn pipeline(kernel: &Kernel, opts: &PassOptions) -> Result<(Kernel, Vec<PassStats>)> {
    let mut k = kernel.clone();
    let mut stats = Vec::new();
    step(&mut k, &mut stats, "constant-fold", fold_constants);
    step(&mut k, &mut stats, "cse", eliminate_common_subexpressions);
    if !opts.exact {
        step(&mut k, &mut stats, "fma-contraction", contract_fma);
    }
    step(
        &mut k,
        &mut stats,
        "barrier-elimination",
        eliminate_barriers,
    );
    step(&mut k, &mut stats, "dead-code", eliminate_dead_code);
    k.compute_param_access();
    verify(&k)?;
    Ok((k, stats))
}

#[cfg(test)]
mod tests;
