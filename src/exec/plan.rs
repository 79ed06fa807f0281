//! What a launch works out about a kernel before running it: which ops are skipped,
//! computed once per worker or once per loop, which buffers may be taken over, which
//! loads run inside their use. Each analysis is a function from the IR (and, where it
//! says, the launch's arguments) to a table indexed by op or value; the interpreter
//! (`interp.rs`) only reads the tables.

use crate::ir::{Kernel, Op, OpId, Value, ValueDef};

/// Everything the interpreter reads about a kernel for one launch, indexed by op or value.
pub(crate) struct Plan {
    /// Per op: computed once per worker ([`invariant_ops`]).
    pub(crate) invariant: Vec<bool>,
    /// Pointer folding ([`Folded`]).
    pub(crate) folded: Folded,
    /// Per value: its buffer may be taken over by its only use ([`stealable`]).
    pub(crate) steal: Vec<bool>,
    /// Per op: same value in every iteration of its loop ([`loop_invariant_ops`]).
    pub(crate) loop_invariant: Vec<bool>,
    /// Per op: may touch closed-form values ([`prep_needed`]).
    pub(crate) prep: Vec<bool>,
    /// Per value: the load that computes it, run only by its single use
    /// ([`deferred_loads`]).
    pub(crate) deferred: Vec<Option<OpId>>,
    /// Per op: never run in its place (a folded `addptr`/`splat` or a deferred load).
    pub(crate) skip: Vec<bool>,
}

impl Plan {
    /// The plan for `kernel` when the arguments flagged in `read_only` are passed
    /// read-only.
    pub(crate) fn new(kernel: &Kernel, read_only: &[bool]) -> Plan {
        let invariant = invariant_ops(kernel, read_only);
        let folded = Folded::new(kernel);
        let steal = stealable(kernel, &invariant, &folded);
        let loop_invariant = loop_invariant_ops(kernel, &steal);
        let prep = prep_needed(kernel);
        let deferred = deferred_loads(kernel, &invariant);
        let mut skip = folded.skip.clone();
        for lid in deferred.iter().flatten() {
            skip[lid.index()] = true;
        }
        Plan {
            invariant,
            folded,
            steal,
            loop_invariant,
            prep,
            deferred,
            skip,
        }
    }
}

/// `addptr(splat(p), offsets)` whose only uses are as the address of loads, stores and
/// atomics: the op is skipped and the memory ops read `p` and `offsets` directly, which
/// saves building a block of 64-bit pointers and lets contiguity be checked on the offsets.
#[derive(Default)]
pub(crate) struct Folded {
    /// Per value: `(scalar pointer, offsets)` for folded `addptr` results.
    pub(crate) by_value: Vec<Option<(Value, Value)>>,
    /// Per op: a folded `addptr` or `splat` (not executed).
    pub(crate) skip: Vec<bool>,
    /// Per value: a skipped `splat` whose consumers (binary ops and comparisons, which
    /// broadcast a one-element operand) read its scalar source instead.
    pub(crate) alias: Vec<Option<Value>>,
}

impl Folded {
    /// Finds the foldable `addptr` ops of `k`.
    pub(crate) fn new(k: &Kernel) -> Folded {
        let mut by_value: Vec<Option<(Value, Value)>> = vec![None; k.values.len()];
        let mut skip = vec![false; k.ops.len()];
        for d in &k.ops {
            if let (Op::AddPtr { ptr, offset }, Some(r)) = (&d.op, d.result()) {
                let splat_src = k.def_op(*ptr).and_then(|id| match k.op(id).op {
                    Op::Splat { src } => Some(src),
                    _ => None,
                });
                if let Some(s) = splat_src {
                    by_value[r.index()] = Some((s, *offset));
                }
            }
        }
        // Any use other than as a memory op's address keeps the pointers materialised.
        for d in &k.ops {
            let addr = match &d.op {
                Op::Load { ptr, .. }
                | Op::Store { ptr, .. }
                | Op::AtomicRmw { ptr, .. }
                | Op::AtomicCas { ptr, .. } => Some(*ptr),
                _ => None,
            };
            let mut first_addr = true;
            d.op.for_each_operand(|v| {
                if Some(v) == addr && first_addr {
                    first_addr = false;
                } else {
                    by_value[v.index()] = None;
                }
            });
        }
        // A splat whose only uses are folded `addptr`s is not needed either.
        let mut needed = vec![false; k.values.len()];
        for (i, d) in k.ops.iter().enumerate() {
            let folded = matches!((&d.op, d.result()), (Op::AddPtr { .. }, Some(r)) if by_value[r.index()].is_some());
            skip[i] = folded;
            match &d.op {
                Op::AddPtr { offset, .. } if folded => needed[offset.index()] = true,
                op => op.for_each_operand(|v| needed[v.index()] = true),
            }
        }
        for (i, d) in k.ops.iter().enumerate() {
            if let (Op::Splat { .. }, Some(r)) = (&d.op, d.result()) {
                skip[i] |= !needed[r.index()];
            }
        }
        // Splats feeding only binary ops and comparisons, each of which keeps at least one
        // full-size operand (so its result still has the block's length).
        let is_splat = |v: Value| {
            k.def_op(v)
                .is_some_and(|id| matches!(k.op(id).op, Op::Splat { .. }))
        };
        let mut bad = vec![false; k.values.len()];
        for d in &k.ops {
            match &d.op {
                Op::Binary { lhs, rhs, .. } | Op::Cmp { lhs, rhs, .. } => {
                    if is_splat(*lhs) && is_splat(*rhs) {
                        bad[lhs.index()] = true;
                    }
                }
                op => op.for_each_operand(|v| bad[v.index()] = true),
            }
        }
        let mut alias = vec![None; k.values.len()];
        for (i, d) in k.ops.iter().enumerate() {
            if let (Op::Splat { src }, Some(r)) = (&d.op, d.result()) {
                if !bad[r.index()] && !skip[i] {
                    alias[r.index()] = Some(*src);
                    skip[i] = true;
                }
            }
        }
        Folded {
            by_value,
            skip,
            alias,
        }
    }
}

/// Values whose buffer the single op that uses them may take over instead of copying:
/// used exactly once, recomputed every time their region runs (an op result that is
/// neither hoisted nor skipped, or a region argument). The consumer must also sit in the
/// value's own region (checked at the use), so a loop never consumes a value defined
/// before it.
pub(crate) fn stealable(kernel: &Kernel, invariant: &[bool], folded: &Folded) -> Vec<bool> {
    let mut uses = vec![0u32; kernel.values.len()];
    for d in &kernel.ops {
        d.op.for_each_operand(|v| uses[v.index()] += 1);
    }
    kernel
        .values
        .iter()
        .enumerate()
        .map(|(i, vd)| {
            uses[i] == 1
                && match vd.def {
                    ValueDef::OpResult(op, _) => !invariant[op.index()] && !folded.skip[op.index()],
                    ValueDef::RegionArg(..) => true,
                    ValueDef::Param(_) => false,
                }
        })
        .collect()
}

/// Ops of a `for` body that give the same value in every iteration of one run of the
/// loop: pure ops without regions whose operands come from outside the body or from
/// other such ops (`x_ptr + row * stride` inside a loop over columns). The loop runs
/// them in its first iteration only. Excluded: results whose buffer a use may take
/// over or that a yield may move (`steal`), since the slot must still hold the value.
pub(crate) fn loop_invariant_ops(kernel: &Kernel, steal: &[bool]) -> Vec<bool> {
    let mut inv_op = vec![false; kernel.ops.len()];
    let mut inv_val = vec![false; kernel.values.len()];
    for d in &kernel.ops {
        let Op::For { body, .. } = &d.op else {
            continue;
        };
        for &id in &kernel.region(*body).ops {
            let od = kernel.op(id);
            let candidate = match &od.op {
                Op::ProgramId { .. } | Op::NumPrograms { .. } => true,
                Op::Load { .. } | Op::Store { .. } | Op::AtomicRmw { .. } => false,
                Op::AtomicCas { .. } | Op::DebugBarrier | Op::Philox { .. } => false,
                Op::For { .. } | Op::While { .. } | Op::If { .. } | Op::Yield { .. } => false,
                Op::Reduce { combine, .. } | Op::Scan { combine, .. } => combine.is_none(),
                op => op.props().pure,
            };
            let mut all = candidate;
            od.op.for_each_operand(|v| {
                let outside = match kernel.value(v).map(|vd| vd.def) {
                    Some(ValueDef::OpResult(op, _)) => kernel.op(op).parent != *body,
                    Some(ValueDef::RegionArg(r, _)) => r != *body,
                    Some(ValueDef::Param(_)) => true,
                    None => false,
                };
                all &= outside || inv_val[v.index()];
            });
            for r in od.results.iter() {
                all &= !steal[r.index()];
            }
            inv_op[id.index()] = all;
            for r in od.results.iter() {
                inv_val[r.index()] = all;
            }
        }
    }
    inv_op
}

/// `f32` loads whose only use is a binary op later in the same region, with nothing
/// in between that could store: the load is not run in its place but by that op,
/// which reads a contiguous, fully active run of a read-only input in place instead
/// of copying it (`acc + tl.load(x + offs)`, `x + y`), and otherwise runs the load
/// then. Memory seen is the same either way: no store of this program comes between,
/// and other programs' writes are unordered with respect to this one.
pub(crate) fn deferred_loads(kernel: &Kernel, invariant: &[bool]) -> Vec<Option<OpId>> {
    let mut uses = vec![0u32; kernel.values.len()];
    for d in &kernel.ops {
        d.op.for_each_operand(|v| uses[v.index()] += 1);
    }
    let mut out = vec![None; kernel.values.len()];
    for region in &kernel.regions {
        let ops = &region.ops;
        for (pos, &lid) in ops.iter().enumerate() {
            let ld = kernel.op(lid);
            let (Op::Load { .. }, Some(v)) = (&ld.op, ld.result()) else {
                continue;
            };
            if invariant[lid.index()]
                || uses[v.index()] != 1
                || kernel.ty(v).dtype != crate::dtype::DType::F32
            {
                continue;
            }
            for &uid in &ops[pos + 1..] {
                let u = &kernel.op(uid).op;
                if let Op::Binary { lhs, rhs, .. } = u {
                    if *lhs == v || *rhs == v {
                        out[v.index()] = Some(lid);
                        break;
                    }
                }
                let mut reads = false;
                u.for_each_operand(|x| reads |= x == v);
                let writes = matches!(
                    u,
                    Op::Store { .. }
                        | Op::AtomicRmw { .. }
                        | Op::AtomicCas { .. }
                        | Op::DebugBarrier
                        | Op::For { .. }
                        | Op::While { .. }
                        | Op::If { .. }
                );
                if reads || writes {
                    break;
                }
            }
        }
    }
    out
}

/// Ops that may read or make closed-form values (`lazy.rs`): those with an operand or
/// result that an `arange`, binary op or comparison of a 1-D block produced. The
/// others skip the interpreter's `prepare` step.
pub(crate) fn prep_needed(kernel: &Kernel) -> Vec<bool> {
    let mut maybe = vec![false; kernel.values.len()];
    for d in &kernel.ops {
        if matches!(d.op, Op::Arange { .. } | Op::Binary { .. } | Op::Cmp { .. }) {
            for r in d.results.iter() {
                let t = kernel.ty(r);
                maybe[r.index()] = t.shape.len() == 1 && t.numel() > 1;
            }
        }
    }
    kernel
        .ops
        .iter()
        .map(|d| {
            let mut any = d.results.iter().any(|r| maybe[r.index()]);
            d.op.for_each_operand(|v| any |= maybe[v.index()]);
            any
        })
        .collect()
}

/// Which ops compute the same value in every program (pure, and fed only by parameters
/// and other such ops): a worker computes them once and keeps them (`Env::done`).
///
/// Loads count too when their addresses are invariant and derive only from arguments
/// passed read-only (`read_only[param]`): nothing writes those buffers during a launch,
/// so such a load (a layer norm's weights, say) gives every program the same block.
pub(crate) fn invariant_ops(kernel: &Kernel, read_only: &[bool]) -> Vec<bool> {
    let mut inv_val = vec![false; kernel.values.len()];
    // Pointer values that can only point into read-only arguments.
    let mut ro_val = vec![false; kernel.values.len()];
    for (i, p) in kernel.params.iter().enumerate() {
        inv_val[p.value.index()] = true;
        ro_val[p.value.index()] = read_only.get(i).copied().unwrap_or(false);
    }
    let mut inv_op = vec![false; kernel.ops.len()];
    for id in kernel.walk() {
        let d = kernel.op(id);
        let candidate = match &d.op {
            Op::Load { ptr, .. } => ro_val[ptr.index()],
            Op::ProgramId { .. } | Op::Store { .. } => false,
            Op::AtomicRmw { .. } | Op::AtomicCas { .. } | Op::DebugBarrier => false,
            Op::For { .. } | Op::While { .. } | Op::If { .. } | Op::Yield { .. } => false,
            Op::Reduce { combine, .. } | Op::Scan { combine, .. } => combine.is_none(),
            _ => d.op.props().pure,
        };
        let ro = match &d.op {
            Op::AddPtr { ptr, .. } => ro_val[ptr.index()],
            Op::Splat { src }
            | Op::Broadcast { src }
            | Op::ExpandDims { src, .. }
            | Op::Reshape { src }
            | Op::Permute { src, .. }
            | Op::Split { src } => ro_val[src.index()],
            Op::Select {
                on_true, on_false, ..
            } => ro_val[on_true.index()] && ro_val[on_false.index()],
            Op::Join { lhs, rhs } => ro_val[lhs.index()] && ro_val[rhs.index()],
            _ => false,
        };
        let mut all = candidate;
        d.op.for_each_operand(|v| all &= inv_val[v.index()]);
        inv_op[id.index()] = all;
        for r in d.results.iter() {
            inv_val[r.index()] = all;
            ro_val[r.index()] = ro;
        }
    }
    inv_op
}
