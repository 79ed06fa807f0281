//! Common-subexpression elimination: a pure, region-free op equal to one that dominates it
//! (earlier in the same or an enclosing region, same operands, attributes and result
//! types) reuses that op's results. Combine regions of reductions and scans are isolated
//! and only match inside themselves.

use std::collections::HashMap;

use crate::ir::{Kernel, Op, RegionId, ValueRange};

/// Replaces repeated pure ops by their first occurrence (see [`Kernel::cse`]); returns how
/// many were replaced.
pub fn eliminate_common_subexpressions(k: &mut Kernel) -> usize {
    k.cse()
}

impl Kernel {
    /// Common-subexpression elimination of pure, region-free ops: an op equal to one that
    /// dominates it (earlier in the same or an enclosing region) reuses its results. Returns
    /// how many ops were replaced; call [`Kernel::remove_dead_ops`] and
    /// [`Kernel::compact`] afterwards. Opt-in: the DSL does not run it.
    pub fn cse(&mut self) -> usize {
        let mut scopes: Vec<HashMap<String, ValueRange>> = Vec::new();
        let mut replaced = 0;
        self.cse_region(self.body, &mut scopes, &mut replaced);
        replaced
    }

    fn cse_region(
        &mut self,
        r: RegionId,
        scopes: &mut Vec<HashMap<String, ValueRange>>,
        replaced: &mut usize,
    ) {
        scopes.push(HashMap::new());
        let ops = self
            .regions
            .get(r.index())
            .map(|rd| rd.ops.clone())
            .unwrap_or_default();
        for id in ops {
            let (op, results) = {
                let d = &self.ops[id.index()];
                (d.op.clone(), d.results)
            };
            let subs: Vec<RegionId> = op.regions().collect();
            if subs.is_empty() && op.props().pure && !results.is_empty() {
                let tys: Vec<String> = results.iter().map(|v| self.ty(v).to_string()).collect();
                let key = format!("{op:?}|{}", tys.join(","));
                let found = scopes.iter().rev().find_map(|s| s.get(&key).copied());
                match found {
                    Some(prev) => {
                        for (old, new) in results.iter().zip(prev.iter()) {
                            self.replace_all_uses(old, new);
                        }
                        *replaced += 1;
                    }
                    None => {
                        if let Some(s) = scopes.last_mut() {
                            s.insert(key, results);
                        }
                    }
                }
            }
            // Combine regions are isolated: they cannot reuse values from outside.
            let isolated = matches!(op, Op::Reduce { .. } | Op::Scan { .. });
            for sub in subs {
                if isolated {
                    self.cse_region(sub, &mut Vec::new(), replaced);
                } else {
                    self.cse_region(sub, scopes, replaced);
                }
            }
        }
        scopes.pop();
    }
}
