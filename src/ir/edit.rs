//! Editing helpers for passes: use counts, use replacement, and compaction (renumbering the
//! arenas in program order, dropping everything unreachable from the body). Dead-code and
//! common-subexpression elimination live with the other passes (`crate::passes`).

use super::kernel::{
    Kernel, OpData, OpId, RegionData, RegionId, Value, ValueData, ValueDef, ValueRange,
};
use super::op::Op;
use super::types::Type;
use crate::dtype::DType;

impl Kernel {
    /// How many operands (of ops reachable from the body) refer to each value.
    pub fn use_counts(&self) -> Vec<u32> {
        let mut uses = vec![0u32; self.values.len()];
        for id in self.walk() {
            self.op(id).op.for_each_operand(|v| {
                if let Some(u) = uses.get_mut(v.index()) {
                    *u += 1;
                }
            });
        }
        uses
    }

    /// Renumbers values, ops and regions in program order (params first, then region arguments
    /// and op results as they are defined), dropping ops, values and regions that are not
    /// reachable from the body. Hints on dropped values are dropped.
    pub fn compact(&mut self) {
        let n = self.values.len();
        let mut c = Compactor {
            old_values: std::mem::take(&mut self.values),
            old_ops: std::mem::take(&mut self.ops),
            old_regions: std::mem::take(&mut self.regions),
            vmap: vec![None; n],
            values: Vec::with_capacity(n),
            ops: Vec::new(),
            regions: Vec::new(),
        };
        c.ops.reserve(c.old_ops.len());
        c.regions.reserve(c.old_regions.len());
        for (i, p) in self.params.iter_mut().enumerate() {
            p.value = c.new_value(p.value, ValueDef::Param(i as u32));
        }
        c.region(self.body, None);
        let Compactor {
            vmap,
            values,
            ops,
            regions,
            ..
        } = c;
        let map = |v: Value| vmap.get(v.index()).copied().flatten();
        self.hints = std::mem::take(&mut self.hints)
            .into_iter()
            .filter_map(|(v, h)| Some((map(v)?, h)))
            .collect();
        self.values = values;
        self.ops = ops;
        self.regions = regions;
        self.body = RegionId(0);
    }
}

struct Compactor {
    old_values: Vec<ValueData>,
    old_ops: Vec<OpData>,
    old_regions: Vec<RegionData>,
    vmap: Vec<Option<Value>>,
    values: Vec<ValueData>,
    ops: Vec<OpData>,
    regions: Vec<RegionData>,
}

impl Compactor {
    fn new_value(&mut self, old: Value, def: ValueDef) -> Value {
        let v = Value(self.values.len() as u32);
        if let Some(vd) = self.old_values.get_mut(old.index()) {
            let ty = std::mem::replace(&mut vd.ty, Type::scalar(DType::Bool));
            self.values.push(ValueData { ty, def });
            self.vmap[old.index()] = Some(v);
        }
        v
    }

    fn region(&mut self, old_r: RegionId, parent: Option<OpId>) -> RegionId {
        let r = RegionId(self.regions.len() as u32);
        self.regions.push(RegionData {
            args: Vec::new(),
            ops: Vec::new(),
            parent,
        });
        let Some(old) = self.old_regions.get_mut(old_r.index()) else {
            return r;
        };
        let (old_args, old_ops) = (std::mem::take(&mut old.args), std::mem::take(&mut old.ops));
        let args: Vec<Value> = old_args
            .iter()
            .enumerate()
            .map(|(i, a)| self.new_value(*a, ValueDef::RegionArg(r, i as u32)))
            .collect();
        self.regions[r.index()].args = args;
        for old_id in old_ops {
            let Some(data) = self.old_ops.get_mut(old_id.index()) else {
                continue;
            };
            let mut op = std::mem::replace(&mut data.op, Op::DebugBarrier);
            let (old_results, loc) = (data.results, data.loc);
            let id = OpId(self.ops.len() as u32);
            let start = self.values.len() as u32;
            for (i, v) in old_results.iter().enumerate() {
                self.new_value(v, ValueDef::OpResult(id, i as u32));
            }
            let results = ValueRange {
                start,
                len: self.values.len() as u32 - start,
            };
            op.for_each_operand_mut(|v| {
                if let Some(Some(n)) = self.vmap.get(v.index()) {
                    *v = *n;
                }
            });
            // Reserve the id before nested ops take theirs.
            self.ops.push(OpData {
                op: Op::DebugBarrier,
                results,
                loc,
                parent: r,
            });
            let mut subs = Vec::new();
            op.for_each_region_mut(|sub| subs.push(*sub));
            let mut it = subs
                .into_iter()
                .map(|s| self.region(s, Some(id)))
                .collect::<Vec<_>>()
                .into_iter();
            op.for_each_region_mut(|sub| {
                if let Some(n) = it.next() {
                    *sub = n;
                }
            });
            self.ops[id.index()].op = op;
            self.regions[r.index()].ops.push(id);
        }
        r
    }
}

impl Kernel {
    /// Replaces every operand use of `from` with `to` (types must match; not checked here).
    pub fn replace_all_uses(&mut self, from: Value, to: Value) {
        for d in &mut self.ops {
            d.op.for_each_operand_mut(|v| {
                if *v == from {
                    *v = to;
                }
            });
        }
    }
}
