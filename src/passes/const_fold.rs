//! Constant folding: ops whose operands are all constants become constants.
//!
//! Folded: integer `+ - * & | ^` (wrapping to the dtype's width), comparisons, splats of
//! constants, and casts between integer types. Float arithmetic is left alone: folding it
//! on the host could round differently from the device (f16/bf16, fast paths).

use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpPred, Const, Kernel, Op, Value};

/// Folds what it can; returns how many ops became constants.
pub fn fold_constants(k: &mut Kernel) -> usize {
    let mut folded = 0;
    for id in k.walk() {
        let d = &k.ops[id.index()];
        let Some(res) = d.result() else { continue };
        let ty = k.ty(res).clone();
        let new = match &d.op {
            Op::Splat { src } => constant(k, *src),
            Op::Binary { kind, lhs, rhs } if ty.dtype.is_int() => {
                match (int_const(k, *lhs), int_const(k, *rhs)) {
                    (Some(a), Some(b)) => {
                        int_binary(*kind, a, b).map(|v| Const::Int(wrap(v, ty.dtype)))
                    }
                    _ => None,
                }
            }
            Op::Cmp { pred, lhs, rhs } => {
                let dt = k.ty(*lhs).dtype;
                match (int_const(k, *lhs), int_const(k, *rhs)) {
                    (Some(a), Some(b)) if dt.is_int() || dt.is_bool() => {
                        Some(Const::Int(compare(*pred, a, b, dt) as i64))
                    }
                    _ => None,
                }
            }
            Op::Cast { src }
                if ty.dtype.is_int()
                    && (k.ty(*src).dtype.is_int() || k.ty(*src).dtype.is_bool()) =>
            {
                int_const(k, *src).map(|v| Const::Int(wrap(v, ty.dtype)))
            }
            _ => None,
        };
        if let Some(value) = new {
            k.ops[id.index()].op = Op::Constant { value };
            folded += 1;
        }
    }
    folded
}

fn constant(k: &Kernel, v: Value) -> Option<Const> {
    let id = k.def_op(v)?;
    match &k.op(id).op {
        Op::Constant { value } => Some(*value),
        _ => None,
    }
}

fn int_const(k: &Kernel, v: Value) -> Option<i64> {
    match constant(k, v)? {
        Const::Int(i) => Some(wrap(i, k.ty(v).dtype)),
        Const::Float(_) => None,
    }
}

fn int_binary(kind: BinaryOp, a: i64, b: i64) -> Option<i64> {
    Some(match kind {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        BinaryOp::And => a & b,
        BinaryOp::Or => a | b,
        BinaryOp::Xor => a ^ b,
        _ => return None,
    })
}

/// The value as the dtype holds it (sign- or zero-extended back to i64).
fn wrap(v: i64, d: DType) -> i64 {
    match d {
        DType::Bool => (v != 0) as i64,
        DType::I8 => v as i8 as i64,
        DType::I16 => v as i16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U8 => v as u8 as i64,
        DType::U16 => v as u16 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

fn compare(p: CmpPred, a: i64, b: i64, d: DType) -> bool {
    let (ua, ub) = (a as u64, b as u64);
    let unsigned = d == DType::U64;
    match p {
        CmpPred::Eq => a == b,
        CmpPred::Ne => a != b,
        CmpPred::Lt if unsigned => ua < ub,
        CmpPred::Le if unsigned => ua <= ub,
        CmpPred::Gt if unsigned => ua > ub,
        CmpPred::Ge if unsigned => ua >= ub,
        CmpPred::Lt => a < b,
        CmpPred::Le => a <= b,
        CmpPred::Gt => a > b,
        CmpPred::Ge => a >= b,
    }
}
