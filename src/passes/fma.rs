//! FMA contraction: `a * b + c` (float) becomes one fused op when the product has no other
//! use. One rounding instead of two, so results can differ in the last bit: off when exact
//! results are requested.

use crate::ir::{BinaryOp, Kernel, Op, Value};

/// Contracts multiply-adds; returns how many adds became FMAs.
pub fn contract_fma(k: &mut Kernel) -> usize {
    let uses = k.use_counts();
    let mut contracted = 0;
    for id in k.walk() {
        let (lhs, rhs) = match &k.ops[id.index()].op {
            Op::Binary {
                kind: BinaryOp::Add,
                lhs,
                rhs,
            } => (*lhs, *rhs),
            _ => continue,
        };
        if !k.ty(lhs).dtype.is_float() {
            continue;
        }
        let parent = k.ops[id.index()].parent;
        // A product used only here, defined in the same region (so it runs exactly as often).
        let product = |v: Value| -> Option<(Value, Value)> {
            if uses.get(v.index()).copied() != Some(1) {
                return None;
            }
            let d = k.op(k.def_op(v)?);
            match d.op {
                Op::Binary {
                    kind: BinaryOp::Mul,
                    lhs,
                    rhs,
                } if d.parent == parent => Some((lhs, rhs)),
                _ => None,
            }
        };
        let fused = match (product(lhs), product(rhs)) {
            (Some((a, b)), _) => Some((a, b, rhs)),
            (None, Some((a, b))) => Some((a, b, lhs)),
            _ => None,
        };
        if let Some((a, b, c)) = fused {
            k.ops[id.index()].op = Op::Fma { a, b, c };
            contracted += 1;
        }
    }
    contracted
}
