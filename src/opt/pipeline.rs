//! Which loads of a `for` loop can be issued ahead of their iteration (Triton's
//! `num_stages` software pipelining): a load whose only use is an operand of the loop's
//! `tl.dot` can be copied asynchronously into one of `stages` shared-memory buffers,
//! `stages - 1` iterations before the dot reads it (on Metal: loaded into registers one
//! iteration early and stored into the other of two threadgroup buffers).
//!
//! Issuing a load early is sound when its address and mask for a later iteration are
//! known early and nothing in the loop writes memory. The analysis asks for the shape
//! Triton's tutorials have:
//! - the pointer is a loop-carried block advanced by a loop-invariant offset
//!   (`ptrs += BLOCK_K * stride`), so iteration `t + d` reads `ptrs + d * offset`; or, on
//!   the CUDA ring ([`ring_loads`]), it is computed in the body from the induction
//!   variable and values defined before the loop only (flash attention's
//!   `k_base + (start_n + offs_n)[None, :] * stride_kn + ...`), so it is recomputed for
//!   `iv + d * step` like the mask;
//! - the mask (if any) is computed in the body from the induction variable and values
//!   defined before the loop only, so it can be recomputed for `iv + d * step`;
//! - `other` is absent or the constant 0 (the copy fills masked elements with zeros);
//! - the loop body writes no memory and has no barrier, at any depth.

use super::buffers::Held;
use crate::ir::{Const, Kernel, Op, OpId, RegionId, Value, ValueDef};

/// One load of a loop that can be issued ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AheadLoad {
    /// The load op (in the loop body).
    pub load: OpId,
    /// The dot whose operand it is.
    pub dot: OpId,
    /// 0 for the dot's A operand, 1 for B.
    pub operand: usize,
    /// Index of the loop-carried value holding the pointers (into the loop's `init`), or
    /// `None` when the body computes them from the induction variable ([`Self::ptr_ops`]).
    pub carried: Option<usize>,
    /// The offset the loop adds to carried pointers each iteration (the pointer itself when
    /// they are recomputed).
    pub step: Value,
    /// Ops of the body that compute recomputed pointers, in program order (recomputed for
    /// a later induction variable); empty for carried pointers.
    pub ptr_ops: Vec<OpId>,
    /// A recomputed pointer the integer analysis proves to run +1 over the ring's chunk
    /// (false: operand B copied along K, see [`ring_loads`]); true for carried pointers.
    pub runs: bool,
    /// Ops of the body that compute the mask, in program order (recomputed for a later
    /// induction variable).
    pub mask_ops: Vec<OpId>,
    /// Ops of the body that compute `step`, in program order (loop-invariant).
    pub step_ops: Vec<OpId>,
}

fn uses_in(k: &Kernel, r: RegionId, v: Value, out: &mut Vec<OpId>) {
    for &id in &k.region(r).ops {
        let mut hit = false;
        k.op(id).op.for_each_operand(|x| hit |= x == v);
        if hit {
            out.push(id);
        }
        for sub in k.op(id).op.regions() {
            uses_in(k, sub, v, out);
        }
    }
}

fn writes_or_syncs(k: &Kernel, r: RegionId) -> bool {
    k.region(r).ops.iter().any(|&id| {
        let op = &k.op(id).op;
        op.props().writes_memory
            || matches!(op, Op::DebugBarrier)
            || op.regions().any(|sub| writes_or_syncs(k, sub))
    })
}

/// The ops of region `r` (top level) that `v` depends on, in program order, when they are
/// all pure, have no regions and reach no argument of `r` other than those in `allowed`;
/// `None` otherwise.
fn pure_slice(k: &Kernel, r: RegionId, v: Value, allowed: &[Value]) -> Option<Vec<OpId>> {
    let args = &k.region(r).args;
    let mut seen = Vec::new();
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        match k.value(x)?.def {
            ValueDef::Param(_) => {}
            ValueDef::RegionArg(reg, _) if reg == r => {
                if !allowed.contains(&x) || !args.contains(&x) {
                    return None;
                }
            }
            ValueDef::RegionArg(..) => {}
            ValueDef::OpResult(id, _) => {
                let d = k.op(id);
                if d.parent != r {
                    // Defined outside the body: available before the loop.
                    if !is_outside(k, d.parent, r) {
                        return None;
                    }
                    continue;
                }
                if seen.contains(&id) {
                    continue;
                }
                if !d.op.props().pure || d.op.regions().next().is_some() {
                    return None;
                }
                seen.push(id);
                d.op.for_each_operand(|o| stack.push(o));
            }
        }
    }
    let order = &k.region(r).ops;
    seen.sort_by_key(|id| order.iter().position(|x| x == id));
    Some(seen)
}

/// Whether region `def` (where a value is defined) encloses region `r`.
pub(crate) fn is_outside(k: &Kernel, def: RegionId, mut r: RegionId) -> bool {
    loop {
        let Some(owner) = k.region(r).parent else {
            return false;
        };
        r = k.op(owner).parent;
        if r == def {
            return true;
        }
    }
}

fn is_zero(k: &Kernel, v: Value) -> bool {
    let Some(id) = k.def_op(v) else { return false };
    match &k.op(id).op {
        Op::Constant { value } => match value {
            Const::Int(i) => *i == 0,
            Const::Float(f) => *f == 0.0 && f.is_sign_positive(),
        },
        Op::Splat { src } => is_zero(k, *src),
        _ => false,
    }
}

/// The loads of `for` loop `id` that can be issued ahead, when both operands of every dot
/// on a carried accumulator in `resident` qualify; `None` otherwise. Their pointers are
/// loop-carried (the shape the Metal double buffer and the CPU prefetch spell).
pub fn ahead_loads(k: &Kernel, id: OpId, resident: &[usize]) -> Option<Vec<AheadLoad>> {
    loads_of(k, id, resident, None)
}

/// The loads of `for` loop `id` the CUDA ring can issue ahead: the operand loads of every
/// `tl.dot` of the body, through carried pointers or pointers the body computes from the
/// induction variable, when the loop keeps an accumulator in `resident`. A recomputed
/// pointer qualifies only where the integer analysis proves its elements run +1 over
/// `min_run` (whole `cp.async` chunks; an element-wise copy would gain nothing from the
/// ring), or, for operand `b`, where its offsets and mask are recipes (the ring may then
/// copy it along K, testing the runs as it goes). An operand `a` that is no such load (staged before the loop, in registers, or
/// not proven to run) stays with its dot, and so does a dot's `a` when its `b` does; any
/// other operand that does not qualify leaves the loop without a ring (`None`).
pub fn ring_loads(
    k: &Kernel,
    id: OpId,
    resident: &[usize],
    min_run: usize,
) -> Option<Vec<AheadLoad>> {
    loads_of(k, id, resident, Some(min_run))
}

fn loads_of(
    k: &Kernel,
    id: OpId,
    resident: &[usize],
    min_run: Option<usize>,
) -> Option<Vec<AheadLoad>> {
    let recompute = min_run.is_some();
    let (axis, how) = if recompute {
        (super::axis::analyse(k), super::buffers::held(k))
    } else {
        (Vec::new(), Vec::new())
    };
    let Op::For { body, init, .. } = &k.op(id).op else {
        return None;
    };
    let body = *body;
    if resident.is_empty() || writes_or_syncs(k, body) {
        return None;
    }
    let args = k.region(body).args.clone();
    let iv = args[0];
    let yields = match k.region(body).ops.last().map(|&y| &k.op(y).op) {
        Some(Op::Yield { values }) => values.clone(),
        _ => return None,
    };
    let mut dots = Vec::new();
    if recompute {
        dots.extend(
            k.region(body)
                .ops
                .iter()
                .copied()
                .filter(|&d| matches!(k.op(d).op, Op::Dot { .. })),
        );
    } else {
        for &slot in resident {
            let acc = *args.get(slot + 1)?;
            let on: Vec<OpId> = k
                .region(body)
                .ops
                .iter()
                .copied()
                .filter(|&d| matches!(k.op(d).op, Op::Dot { acc: a, .. } if a == acc))
                .collect();
            if on.len() != 1 {
                return None;
            }
            dots.push(on[0]);
        }
    }
    let mut out = Vec::new();
    for dot in dots {
        let Op::Dot { a, b, .. } = k.op(dot).op else {
            return None;
        };
        let mut of_dot = Vec::new();
        for (operand, v) in [a, b].into_iter().enumerate() {
            let in_body = k.def_op(v).is_some_and(|d| k.op(d).parent == body);
            let is_load = in_body
                && k.def_op(v)
                    .is_some_and(|d| matches!(k.op(d).op, Op::Load { .. }));
            if recompute && operand == 0 && !is_load {
                continue;
            }
            let load = k.def_op(v)?;
            let Op::Load { ptr, mask, other } = k.op(load).op else {
                return None;
            };
            if k.op(load).parent != body || other.is_some_and(|o| !is_zero(k, o)) {
                return None;
            }
            let mut uses = Vec::new();
            uses_in(k, body, v, &mut uses);
            if uses != [dot] {
                return None;
            }
            let mask_ops = match mask {
                Some(m) => pure_slice(k, body, m, &[iv])?,
                None => Vec::new(),
            };
            let carried = args
                .iter()
                .position(|&x| x == ptr)
                .and_then(|p| p.checked_sub(1))
                .filter(|&c| c < init.len());
            let (carried, step, step_ops, ptr_ops, runs) = match carried {
                Some(c) => {
                    let next = k.def_op(*yields.get(c)?)?;
                    let Op::AddPtr { ptr: p, offset } = k.op(next).op else {
                        return None;
                    };
                    if p != ptr || k.op(next).parent != body {
                        return None;
                    }
                    let step_ops = pure_slice(k, body, offset, &[])?;
                    (Some(c), offset, step_ops, Vec::new(), true)
                }
                None if recompute && k.ty(ptr).is_block() => {
                    let runs = min_run.is_some_and(|r| axis[ptr.index()].contig >= r as u64);
                    // Operand B not proven to run along N is copied along K, each element's
                    // offset and mask recomputed from its index: they must be recipes.
                    let recipe = |v: Value| matches!(how[v.index()], Held::Recipe(_));
                    let along_k = operand == 1 && recipe(ptr) && mask.is_none_or(recipe);
                    match pure_slice(k, body, ptr, &[iv]).filter(|_| runs || along_k) {
                        Some(ptr_ops) => (None, ptr, Vec::new(), ptr_ops, runs),
                        // Staged by its dot, as is the dot's `a`.
                        None if operand == 1 => {
                            of_dot.clear();
                            continue;
                        }
                        None => continue,
                    }
                }
                None => return None,
            };
            of_dot.push(AheadLoad {
                load,
                dot,
                operand,
                carried,
                step,
                mask_ops,
                step_ops,
                ptr_ops,
                runs,
            });
        }
        out.extend(of_dot);
    }
    Some(out)
}

/// How a value of a loop body depends on the loop's induction variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IvDep {
    /// The same on every iteration.
    Invariant,
    /// `a + iv * b` with `a`, `b` invariant, in wrapping integer arithmetic; `true` when
    /// `b` is one value for every element.
    Affine(bool),
    /// Anything else.
    Other,
}

/// Whether pointer `ptr`, computed in loop body `body` from its induction variable
/// (a recomputed [`AheadLoad`]), is `a + iv * b` with `a` and `b` the same on every
/// iteration, in arithmetic that wraps at a width of at most 32 bits: every op between
/// the induction variable and `ptr` adds, subtracts, multiplies by an invariant value,
/// casts between integers without widening, or only reshapes. Wrapping addition and
/// multiplication keep such a form exact modulo `2^32`, so a 32-bit offset of iteration
/// `t` is the first iteration's plus `t` times the difference of the first two.
/// `Some(true)` when moreover the change per iteration is one value for every element.
pub fn affine_in_iv(k: &Kernel, body: RegionId, ptr: Value) -> Option<bool> {
    let mut memo = std::collections::HashMap::new();
    match iv_dep(k, body, ptr, &mut memo) {
        IvDep::Other => None,
        IvDep::Invariant => Some(true),
        IvDep::Affine(u) => Some(u),
    }
}

/// Whether loop-invariant `v` holds one value for every element: a scalar, a constant, or
/// a scalar splatted or broadcast.
fn uniform(k: &Kernel, v: Value) -> bool {
    if k.ty(v).shape.is_empty() {
        return true;
    }
    match k.def_op(v).map(|d| &k.op(d).op) {
        Some(Op::Constant { .. }) => true,
        Some(Op::Splat { src } | Op::Broadcast { src } | Op::ExpandDims { src, .. }) => {
            uniform(k, *src)
        }
        _ => false,
    }
}

fn iv_dep(
    k: &Kernel,
    body: RegionId,
    v: Value,
    memo: &mut std::collections::HashMap<Value, IvDep>,
) -> IvDep {
    if let Some(&d) = memo.get(&v) {
        return d;
    }
    let d = iv_dep_of(k, body, v, memo);
    memo.insert(v, d);
    d
}

fn iv_dep_of(
    k: &Kernel,
    body: RegionId,
    v: Value,
    memo: &mut std::collections::HashMap<Value, IvDep>,
) -> IvDep {
    use IvDep::{Affine, Invariant, Other};
    let Some(info) = k.value(v) else {
        return Other;
    };
    let id = match info.def {
        ValueDef::Param(_) => return Invariant,
        ValueDef::RegionArg(r, i) if r == body => return if i == 0 { Affine(true) } else { Other },
        ValueDef::RegionArg(r, _) => {
            return if is_outside(k, r, body) {
                Invariant
            } else {
                Other
            }
        }
        ValueDef::OpResult(id, _) => id,
    };
    let d = k.op(id);
    if d.parent != body {
        return if is_outside(k, d.parent, body) {
            Invariant
        } else {
            Other
        };
    }
    let mut dep = |x: Value| iv_dep(k, body, x, memo);
    let add = |a: IvDep, b: IvDep| match (a, b) {
        (Other, _) | (_, Other) => Other,
        (Invariant, Invariant) => Invariant,
        (Affine(u), Invariant) | (Invariant, Affine(u)) => Affine(u),
        (Affine(u), Affine(w)) => Affine(u && w),
    };
    match &d.op {
        Op::Constant { .. } | Op::Arange { .. } | Op::ProgramId { .. } | Op::NumPrograms { .. } => {
            Invariant
        }
        Op::Splat { src }
        | Op::Broadcast { src }
        | Op::ExpandDims { src, .. }
        | Op::Reshape { src } => dep(*src),
        Op::Binary { kind, lhs, rhs } => {
            let (a, b) = (dep(*lhs), dep(*rhs));
            match kind {
                crate::ir::BinaryOp::Add | crate::ir::BinaryOp::Sub => add(a, b),
                crate::ir::BinaryOp::Mul => match (a, b) {
                    (Invariant, Invariant) => Invariant,
                    (Affine(u), Invariant) => Affine(u && uniform(k, *rhs)),
                    (Invariant, Affine(u)) => Affine(u && uniform(k, *lhs)),
                    _ => Other,
                },
                _ => add(a, b).min_invariant(),
            }
        }
        Op::AddPtr { ptr, offset } => add(dep(*ptr), dep(*offset)),
        Op::Cast { src } => {
            let s = dep(*src);
            let (from, to) = (k.ty(*src).dtype, k.ty(v).dtype);
            if s == Invariant
                || (from.is_int() && to.is_int() && to.bits() <= from.bits() && to.bits() <= 32)
            {
                s
            } else {
                Other
            }
        }
        op => {
            let mut all = Invariant;
            op.for_each_operand(|x| {
                if dep(x) != Invariant {
                    all = Other;
                }
            });
            all
        }
    }
}

impl IvDep {
    /// An op that is neither a sum nor a product keeps only invariance.
    fn min_invariant(self) -> IvDep {
        if self == IvDep::Invariant {
            self
        } else {
            IvDep::Other
        }
    }
}

#[cfg(test)]
mod tests {
    use super::affine_in_iv;
    use crate::dtype::DType::{F32, I32};
    use crate::ir::{Op, Value};
    use crate::tl::{self, Tensor};

    /// Pointers made of the induction variable by sums and products with loop-invariant
    /// values are affine in it (one change per iteration when the factors are scalars);
    /// a product of the induction variable with itself or a division is not.
    #[test]
    fn pointers_affine_in_the_induction_variable() {
        let k = tl::build("aff", &Default::default(), |k| {
            let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
            let (n, stride) = (k.scalar(I32, "n"), k.scalar(I32, "stride"));
            let r = tl::arange(0, 16);
            let acc: Tensor = tl::range(0, n, 16).fold(tl::zeros([16], F32), |start, acc| {
                let a = tl::load(x + (start + r) * stride);
                let b = tl::load(x + (start + r) * r);
                let c = tl::load(x + start * start + r);
                let d = tl::load(x + tl::floordiv(start, 2) + r);
                let e = tl::load(x + r * 3);
                acc + a + b + c + d + e
            });
            tl::store(o + r, acc);
        })
        .unwrap();
        let loads: Vec<(Value, crate::ir::RegionId)> = k
            .ops
            .iter()
            .filter_map(|d| match &d.op {
                Op::Load { ptr, .. } => Some((*ptr, d.parent)),
                _ => None,
            })
            .collect();
        let got: Vec<Option<bool>> = loads
            .iter()
            .map(|&(p, body)| affine_in_iv(&k, body, p))
            .collect();
        assert_eq!(
            got,
            [Some(true), Some(false), None, None, Some(true)],
            "{k}"
        );
    }
}
