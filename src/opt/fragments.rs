//! Dot results that stay in their `mma.sync` C fragments (Triton's MMA layout kept past the
//! dot): the values computed from them elementwise, the row reductions of those values and
//! a following dot's `a` operand are spelled on the fragments themselves, so the product
//! never goes through shared memory. Flash attention's `qk -> p` step is the case this
//! serves: the scores' row maximum and sum come from the fragments, and `p` feeds the
//! `p @ v` dot from registers.
//!
//! A loop's resident accumulator has a region too ([`loop_region`]): after the loop it is
//! computed on elementwise and stored, each element from its register (the tutorial
//! matmul's cast and masked store of C), so it never goes through shared memory either.
//!
//! A region is a fact of the IR; whether a dot keeps it is the plan's decision
//! ([`super::plan::KernelPlan::keeps_fragments`]), taken only where every warp owns whole
//! rows (one warp along N), so row reductions stay inside a warp and the C fragments of
//! two neighbouring N tiles are exactly an A fragment of the next dot.

use super::buffers::Held;
use crate::dtype::DType;
use crate::ir::{Kernel, Op, OpId, ReduceKind, Value};

/// The values and consumers of a dot result kept in its fragments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The dot whose C fragments hold the region.
    pub dot: OpId,
    /// Rows of the accumulator.
    pub m: usize,
    /// Columns of the accumulator.
    pub n: usize,
    /// Elementwise ops spelled on the fragments, in program order.
    pub ops: Vec<OpId>,
    /// Broadcasts of `[m, 1]` or `[1, n]` blocks read straight into the fragments (the
    /// factors of those ops).
    pub factors: Vec<OpId>,
    /// Reductions along axis 1 of region values (their results leave the fragments).
    pub reduces: Vec<OpId>,
    /// Dots taking a region value (f16 or bf16) as operand `a` from registers.
    pub a_of: Vec<OpId>,
    /// Stores of region values, each element written from its fragment register (pointer
    /// offsets and mask recomputed from the element's index).
    pub stores: Vec<OpId>,
    /// The `for` loop and carried slot whose result the region starts from, when it is a
    /// loop's resident accumulator rather than `dot`'s own result.
    pub from_loop: Option<(OpId, usize)>,
}

impl Region {
    /// Every value held in the fragments: the dot's (or the loop's) result, the ops' and
    /// the factors'.
    pub fn values(&self, k: &Kernel) -> Vec<Value> {
        let root = match self.from_loop {
            Some((f, slot)) => k.op(f).results.iter().nth(slot),
            None => k.op(self.dot).result(),
        };
        root.into_iter()
            .chain(
                self.ops
                    .iter()
                    .chain(&self.factors)
                    .filter_map(|&o| k.op(o).result()),
            )
            .collect()
    }
}

/// Whether `op` is elementwise (unary, binary, compare, select, cast).
pub(crate) fn elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary { .. } | Op::Binary { .. } | Op::Cmp { .. } | Op::Select { .. } | Op::Cast { .. }
    )
}

/// The region of dot `dot`: its `[m, n]` f32 result (from a uniform accumulator), the
/// elementwise ops of its block that take it or other region values (with uniform operands,
/// `[m, n]` blocks recomputed from their element index (masks of `arange`s), or
/// `[m, 1]`/`[1, n]` broadcasts used only there), ending in axis-1 `sum`/`max`/`min`
/// reductions and in dots taking an f16/bf16 region value as `a`. `None` when any region
/// value has another use (a store, a yield, a use in a nested region, a shape op...).
pub fn region(k: &Kernel, dot: OpId) -> Option<Region> {
    let Op::Dot { acc, .. } = k.op(dot).op else {
        return None;
    };
    let res = k.op(dot).result()?;
    let ty = k.ty(res);
    // How the printer holds each value: uniform, recomputed from its index, or a block.
    let how = super::buffers::held(k);
    let uniform = |v: Value| how[v.index()] == Held::Uniform;
    if ty.shape.len() != 2 || ty.dtype != DType::F32 || !uniform(acc) {
        return None;
    }
    let (m, n) = (ty.shape[0], ty.shape[1]);
    grow(k, dot, res, (m, n), None)
}

/// The region of the result of `for` loop `op`'s carried slot `slot`, which the loop keeps
/// in the fragments of its dot `dot` (a resident accumulator): the elementwise ops after
/// the loop that take it, ending in stores whose pointers and masks are recomputed from
/// the element's index (Triton's tutorial matmul: the cast to f16 and the masked store of
/// C). `None` when a region value has another use.
pub fn loop_region(k: &Kernel, op: OpId, slot: usize, dot: OpId) -> Option<Region> {
    let res = k.op(op).results.iter().nth(slot)?;
    let ty = k.ty(res);
    if ty.shape.len() != 2 || ty.dtype != DType::F32 {
        return None;
    }
    let r = grow(k, dot, res, (ty.shape[0], ty.shape[1]), Some((op, slot)))?;
    (!r.stores.is_empty() && r.reduces.is_empty() && r.a_of.is_empty()).then_some(r)
}

/// The region of `res` (`[m, n]`, defined by `dot`, or by the loop of `from_loop`) over
/// the ops after its definition in the same block.
fn grow(
    k: &Kernel,
    dot: OpId,
    res: Value,
    (m, n): (usize, usize),
    from_loop: Option<(OpId, usize)>,
) -> Option<Region> {
    let ty = k.ty(res);
    let how = super::buffers::held(k);
    let uniform = |v: Value| how[v.index()] == Held::Uniform;
    let def = from_loop.map_or(dot, |(f, _)| f);
    let block = k.op(def).parent;
    let uses = k.use_counts();
    let mut held = vec![res];
    let mut r = Region {
        dot,
        m,
        n,
        ops: Vec::new(),
        factors: Vec::new(),
        reduces: Vec::new(),
        a_of: Vec::new(),
        stores: Vec::new(),
        from_loop,
    };
    let mut seen = vec![0u32; k.values.len()];
    let body = k.region(block).ops.clone();
    let start = body.iter().position(|&o| o == def)? + 1;
    for &o in &body[start..] {
        let data = k.op(o);
        let mut operands = Vec::new();
        data.op.for_each_operand(|v| operands.push(v));
        if !operands.iter().any(|v| held.contains(v)) {
            continue;
        }
        for v in &operands {
            if held.contains(v) {
                seen[v.index()] += 1;
            }
        }
        match &data.op {
            op if elementwise(op) => {
                let out = data.result()?;
                if k.ty(out).shape != ty.shape {
                    return None;
                }
                for &v in &operands {
                    let recipe = matches!(how[v.index()], Held::Recipe(_));
                    if held.contains(&v) || uniform(v) || recipe && k.ty(v).shape == ty.shape {
                        continue;
                    }
                    let b = k.def_op(v)?;
                    let Op::Broadcast { src } = k.op(b).op else {
                        return None;
                    };
                    let s = &k.ty(src).shape;
                    let vector = s.len() == 2 && (s[..] == [m, 1] || s[..] == [1, n]);
                    if !vector || uses[v.index()] != 1 || k.op(b).parent != block {
                        return None;
                    }
                    r.factors.push(b);
                }
                r.ops.push(o);
                held.push(out);
            }
            Op::Reduce {
                kind: ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min,
                axis: 1,
                srcs,
                combine: None,
            } if srcs.len() == 1 => r.reduces.push(o),
            Op::Dot { a, b, acc } => {
                let ok = held.contains(a)
                    && !held.contains(b)
                    && !held.contains(acc)
                    && matches!(k.ty(*a).dtype, DType::F16 | DType::BF16)
                    && k.ty(*b).dtype == k.ty(*a).dtype
                    && k.ty(*b).shape.len() == 2;
                if !ok {
                    return None;
                }
                r.a_of.push(o);
            }
            // Only a loop's accumulator ends in stores: a dot's region values feed on.
            Op::Store { ptr, value, mask }
                if from_loop.is_some()
                    && held.contains(value)
                    && !held.contains(ptr)
                    && matches!(how[ptr.index()], Held::Recipe(_))
                    && k.ty(*ptr).shape == ty.shape
                    && mask.is_none_or(|mk| {
                        !held.contains(&mk)
                            && (uniform(mk)
                                || matches!(how[mk.index()], Held::Recipe(_))
                                    && k.ty(mk).shape == ty.shape)
                    }) =>
            {
                r.stores.push(o)
            }
            _ => return None,
        }
    }
    // Every use of a region value was one of the above (none in nested regions or yields).
    held.iter()
        .all(|v| seen[v.index()] == uses[v.index()])
        .then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType::{F16, F32, I32};
    use crate::tl::{self, Tensor};

    fn build(f: impl FnOnce(&mut tl::KernelBuilder)) -> Kernel {
        tl::build("step", &Default::default(), f).expect("kernel builds")
    }

    /// The flash-attention step on one tile: scores, their row max and sum, `p @ v`.
    fn attention_step(store_scores: bool) -> impl FnOnce(&mut tl::KernelBuilder) {
        move |k| {
            let (q, kt, v, o) = (
                k.ptr(F16, "q"),
                k.ptr(F16, "k"),
                k.ptr(F16, "v"),
                k.ptr(F32, "o"),
            );
            let n_ctx = k.scalar(I32, "N");
            let offs = tl::arange(0, 32);
            let tile = |p: Tensor| tl::load(p + offs.col() * 32 + offs.row());
            let (qt, ktt, vt) = (tile(q), tile(kt), tile(v));
            let s = tl::dot(qt, ktt, tl::zeros([32, 32], F32)) * 0.5;
            let s = tl::where_(offs.row().lt(n_ctx), s, f32::NEG_INFINITY);
            let mx = s.max(1);
            let p = tl::exp2(s - mx.col());
            let l = p.sum(1);
            if store_scores {
                tl::store(o + offs.col() * 32 + offs.row(), p);
            }
            let acc = tl::dot(p.to(F16), vt, tl::zeros([32, 32], F32));
            tl::store(o + offs.col() * 32 + offs.row(), acc / l.col());
        }
    }

    #[test]
    fn the_scores_of_an_attention_step_stay_in_fragments() {
        let k = build(attention_step(false));
        let dots: Vec<OpId> = (0..k.ops.len() as u32)
            .map(OpId)
            .filter(|&o| matches!(k.op(o).op, Op::Dot { .. }))
            .collect();
        let r = region(&k, dots[0]).expect("a region");
        assert_eq!((r.m, r.n), (32, 32));
        assert_eq!(r.reduces.len(), 2);
        assert_eq!(r.a_of, vec![dots[1]]);
        // mul, select, sub, exp2, cast; the row maximum is a factor read by row, the mask
        // is recomputed from its column.
        assert_eq!(r.ops.len(), 5, "{r:?}");
        assert_eq!(r.factors.len(), 1, "{r:?}");
        // The second dot's result is stored after a division by a broadcast: not a region
        // of its own (a store is no consumer of fragments).
        assert!(region(&k, dots[1]).is_none());
    }

    #[test]
    fn a_loop_accumulator_cast_and_stored_is_a_region() {
        let k = build(|k| {
            let (a, b, c) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F16, "c"));
            let n = k.scalar(I32, "N");
            let offs = tl::arange(0, 32);
            let init = (tl::zeros([32, 32], F32), a + offs.col() * 32 + offs.row());
            let (acc, _) = tl::range(0, 4, 1).fold(init, |_, (acc, pa)| {
                let t = tl::load(pa);
                (
                    tl::dot(t, tl::load(b + offs.col() * 32 + offs.row()), acc),
                    pa + 32,
                )
            });
            let mask = offs.col().lt(n) & offs.row().lt(n);
            tl::store(c + offs.col() * 32 + offs.row(), acc.to(F16)).mask(mask);
        });
        let f = OpId(
            k.ops
                .iter()
                .position(|o| matches!(o.op, Op::For { .. }))
                .unwrap() as u32,
        );
        let Op::For { body, .. } = &k.op(f).op else {
            unreachable!()
        };
        let dot = *k
            .region(*body)
            .ops
            .iter()
            .find(|&&o| matches!(k.op(o).op, Op::Dot { .. }))
            .unwrap();
        let r = loop_region(&k, f, 0, dot).expect("a region");
        assert_eq!(
            (r.m, r.n, r.ops.len(), r.stores.len()),
            (32, 32, 1, 1),
            "{r:?}"
        );
        assert_eq!(r.values(&k).len(), 2);
        // A dot's own region never ends in a store.
        assert!(region(&k, dot).is_none());
    }

    #[test]
    fn a_value_stored_from_the_region_ends_it() {
        let k = build(attention_step(true));
        let dot = OpId(
            k.ops
                .iter()
                .position(|o| matches!(o.op, Op::Dot { .. }))
                .unwrap() as u32,
        );
        assert!(region(&k, dot).is_none());
    }
}
