//! The block-level interpreter: runs one program's ops in order, each op on whole blocks.
//!
//! Every SSA value owns one slot of an environment (`Vec<Data>`); a thread keeps its
//! environment across the programs it runs, so after the first program the slots' buffers
//! are reused and ops allocate nothing. Region arguments (loop-carried values) are slots
//! too; loops copy yielded values into them between iterations.

use super::data::{fill_const, ptr_off, ptr_pack, ptr_param, same_kind, Data};
use super::lazy::{self, Lazy};
use super::memops::{self, MaskArg, MemErr, PtrArg};
use super::memory::Mem;
use super::plan::Plan;
use super::reduce_layout::{self, ReduceStrategy};
use super::{dot, elementwise as ew, reduce, shape};
use crate::error::{Error, Result};
use crate::ir::{Kernel, Op, OpId, ParamKind, RegionId, Value, ValueDef};

/// One launch: the kernel, its argument buffers and scalar values, and the grid.
pub(crate) struct Launch<'k, 'a> {
    pub(crate) kernel: &'k Kernel,
    pub(crate) mems: Vec<Option<Mem<'a>>>,
    /// Per parameter: its value in every program (scalars, and pointers at offset 0).
    pub(crate) params: Vec<Data>,
    pub(crate) grid: [usize; 3],
    /// What was worked out about the kernel for this launch.
    pub(crate) plan: Plan,
    /// Builtin reductions in a GPU layout's order (see `reduce_layout.rs`); `None`: the
    /// executor's fastest order.
    pub(crate) reduce_strategy: Option<ReduceStrategy>,
    /// The buffers of pointer-table entries (after the parameters' in `mems`).
    pub(crate) table: Vec<super::TableSlot>,
}

thread_local! {
    /// Environments of finished launches, per thread (at most `POOL_MAX`).
    static POOL: std::cell::RefCell<Vec<Env>> = const { std::cell::RefCell::new(Vec::new()) };
}
const POOL_MAX: usize = 4;

/// An [`Env`] on loan from the thread's pool.
pub(crate) struct PooledEnv(Option<Env>);

impl PooledEnv {
    /// The environment.
    pub(crate) fn get(&mut self) -> &mut Env {
        self.0.get_or_insert_with(|| Env {
            vals: Vec::new(),
            side: Side::default(),
        })
    }
}

impl Drop for PooledEnv {
    fn drop(&mut self) {
        if let Some(env) = self.0.take() {
            // `try_with`: during thread teardown the pool may already be gone.
            let _ = POOL.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX {
                    p.push(env);
                }
            });
        }
    }
}

/// A worker's values: one slot per SSA value, kept across the programs it runs.
pub(crate) struct Env {
    vals: Vec<Data>,
    side: Side,
}

/// What a worker knows about its slots besides their buffers.
#[derive(Default)]
pub(crate) struct Side {
    /// Per op: an invariant op already computed in `vals`.
    done: Vec<bool>,
    /// Per value: the value in closed form (`lazy.rs`); its buffer is stale unless
    /// `filled`.
    lazy: Vec<Option<Lazy>>,
    /// Per value: a lazy value's buffer has been written out.
    filled: Vec<bool>,
}

/// `(base, stride)` of a value in affine form (a scalar has stride 0).
type Affine = (i64, i64);

/// An error message plus what the interpreter knows about where it happened.
type OpRes = std::result::Result<(), String>;

fn take(env: &mut [Data], v: Value) -> Data {
    std::mem::take(&mut env[v.index()])
}

/// Runs `f(env, &mut slot_of_r)` with the result slot taken out of `env` (SSA results
/// never alias their operands).
fn with_out(env: &mut [Data], r: Value, f: impl FnOnce(&[Data], &mut Data) -> OpRes) -> OpRes {
    let mut out = take(env, r);
    let res = f(env, &mut out);
    env[r.index()] = out;
    res
}

/// `env[dst] = env[src]`, reusing `dst`'s buffer.
fn copy(env: &mut [Data], dst: Value, src: Value) {
    if dst != src {
        let mut d = take(env, dst);
        d.assign(&env[src.index()]);
        env[dst.index()] = d;
    }
}

/// Broadcasts a one-element buffer to `lanes` elements (combine regions may yield constants).
fn fit_lanes(d: &mut Data, lanes: usize) {
    if d.len() == 1 && lanes > 1 {
        let one = d.clone();
        same_kind!(&one, d, |s, o| o.resize(lanes, s[0]));
    }
}

impl<'k, 'a> Launch<'k, 'a> {
    /// An environment for this launch, reusing a pooled one of this thread when there is
    /// one (its buffers keep their capacity, so repeated launches do not allocate and
    /// fault in fresh pages). It goes back to the pool when dropped.
    pub(crate) fn env(&self) -> PooledEnv {
        let mut env = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| Env {
            vals: Vec::new(),
            side: Side::default(),
        });
        env.vals
            .resize_with(self.kernel.values.len(), Data::default);
        let side = &mut env.side;
        side.done.clear();
        side.done.resize(self.kernel.ops.len(), false);
        side.lazy.clear();
        side.lazy.resize(self.kernel.values.len(), None);
        side.filled.clear();
        side.filled.resize(self.kernel.values.len(), false);
        for (p, d) in self.kernel.params.iter().zip(&self.params) {
            env.vals[p.value.index()].assign(d);
        }
        PooledEnv(Some(env))
    }

    /// The region defining `v` (`None` for parameters).
    fn home(&self, v: Value) -> Option<RegionId> {
        match self.kernel.value(v)?.def {
            ValueDef::OpResult(op, _) => Some(self.kernel.op(op).parent),
            ValueDef::RegionArg(r, _) => Some(r),
            ValueDef::Param(_) => None,
        }
    }

    /// Whether the op `user` (the single use of `v`) may take `v`'s buffer.
    fn can_steal(&self, v: Value, user: OpId) -> bool {
        self.plan.steal[v.index()] && self.home(v) == Some(self.kernel.op(user).parent)
    }

    /// The parameters' values (pointers at offset 0 of their argument).
    pub(crate) fn param_data(kernel: &Kernel, scalars: &[Option<Data>]) -> Vec<Data> {
        kernel
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| match p.kind {
                ParamKind::Ptr(_) => Data::Ptr(vec![ptr_pack(i, 0)]),
                ParamKind::Scalar(_) => scalars.get(i).cloned().flatten().unwrap_or_default(),
            })
            .collect()
    }

    /// Runs program `pid` in `env`.
    pub(crate) fn run_program(&self, env: &mut Env, pid: [usize; 3]) -> Result<()> {
        let Env { vals, side } = env;
        self.region(vals, side, self.kernel.body, pid)
    }

    fn err(&self, id: OpId, pid: [usize; 3], msg: impl std::fmt::Display) -> Error {
        let d = self.kernel.op(id);
        Error::Runtime {
            kernel: self.kernel.name.clone(),
            msg: format!(
                "op `{}` ({id}, built at {}) in program ({}, {}, {}): {msg}",
                d.op.name(),
                d.loc,
                pid[0],
                pid[1],
                pid[2]
            ),
        }
    }

    /// The message of a failed access by op `id` (whose first operand is the pointer).
    fn mem_msg(&self, id: OpId, e: MemErr) -> String {
        let k = self.kernel;
        let name = |p: usize| super::slot_name(k, &self.table, p);
        match e {
            MemErr::OutOfBounds { param, off, len } => format!(
                "offset {off} is out of bounds for {} ({len} elements)",
                name(param)
            ),
            MemErr::ReadOnly { param } if param >= k.params.len() => format!(
                "{} is read-only (an input array: give the table out(..) or inout(..) entries \
                 to write through them)",
                name(param)
            ),
            MemErr::ReadOnly { param } => format!(
                "{} is read-only (pass it as a mutable buffer to write it)",
                name(param)
            ),
            MemErr::NotABuffer { param } => {
                let pointee = k.op(id).op.operands().first().map(|&v| k.ty(v).dtype);
                match pointee {
                    Some(d) if param >= k.params.len() => {
                        super::bad_pointer_msg(k, &self.table, param, d)
                    }
                    _ => format!("pointer into {} which is not a buffer", name(param)),
                }
            }
            MemErr::Internal(m) => m,
        }
    }

    /// The addresses of a memory op: folded base + offsets, or a pointer block.
    fn ptr_arg<'e>(
        &self,
        env: &'e [Data],
        side: &Side,
        v: Value,
    ) -> std::result::Result<PtrArg<'e>, MemErr> {
        let k = self.kernel;
        if let Some((base, off)) = self.plan.folded.by_value[v.index()] {
            let b = match &env[base.index()] {
                Data::Ptr(b) if b.len() == 1 => b[0],
                _ => {
                    return Err(MemErr::Internal(
                        "folded base is not a scalar pointer".into(),
                    ))
                }
            };
            match side.lazy[off.index()] {
                Some(Lazy::Affine {
                    base: start,
                    stride,
                }) => {
                    return Ok(PtrArg::Affine {
                        base: b,
                        start,
                        stride,
                        len: k.ty(off).numel(),
                    })
                }
                Some(Lazy::Prefix(_)) => {
                    return Err(MemErr::Internal("folded offsets are a mask".into()))
                }
                None => {}
            }
            return match &env[off.index()] {
                Data::I32(o) => Ok(PtrArg::Off32 {
                    base: b,
                    off: o,
                    unsigned: k.ty(off).dtype == crate::dtype::DType::U32,
                }),
                Data::I64(o) => Ok(PtrArg::Off64 { base: b, off: o }),
                _ => Err(MemErr::Internal("folded offsets are not integers".into())),
            };
        }
        match &env[v.index()] {
            Data::Ptr(p) => Ok(PtrArg::Block(p)),
            _ => Err(MemErr::Internal("address is not a pointer".into())),
        }
    }

    /// Where to read operand `v`: a folded splat reads its scalar source.
    #[inline(always)]
    fn operand(&self, v: Value) -> Value {
        self.plan.folded.alias[v.index()].unwrap_or(v)
    }

    /// The values yielded by the region's terminator.
    fn yields(&self, r: RegionId) -> &'k [Value] {
        let k = self.kernel;
        match k.region(r).ops.last().map(|&id| &k.op(id).op) {
            Some(Op::Yield { values }) => values,
            _ => &[],
        }
    }

    fn region(
        &self,
        env: &mut [Data],
        side: &mut Side,
        r: RegionId,
        pid: [usize; 3],
    ) -> Result<()> {
        self.region_iter(env, side, r, pid, false)
    }

    /// Runs region `r`; `repeat`: a loop body after its first iteration, whose
    /// loop-invariant ops still hold their values.
    fn region_iter(
        &self,
        env: &mut [Data],
        side: &mut Side,
        r: RegionId,
        pid: [usize; 3],
        repeat: bool,
    ) -> Result<()> {
        for &id in &self.kernel.region(r).ops {
            let i = id.index();
            // Program-invariant ops keep their value from the first program this worker ran.
            let hoisted = self.plan.invariant[i];
            if (hoisted && side.done[i])
                || self.plan.skip[i]
                || (repeat && self.plan.loop_invariant[i])
            {
                continue;
            }
            if self.plan.prep[i] {
                self.prepare(env, side, id);
            }
            self.op(env, side, id, pid)?;
            if hoisted {
                side.done[id.index()] = true;
            }
        }
        Ok(())
    }

    /// The block of deferred load `lid` viewed in place: an `f32` run of a read-only
    /// input at consecutive addresses with every lane active, in bounds.
    fn load_view(&self, env: &[Data], side: &Side, lid: OpId) -> Option<&'a [f32]> {
        let Op::Load { ptr, mask, .. } = &self.kernel.op(lid).op else {
            return None;
        };
        let PtrArg::Affine {
            base,
            start,
            stride,
            len,
        } = self.ptr_arg(env, side, *ptr).ok()?
        else {
            return None;
        };
        let full = match self.mask_arg(env, side, *mask) {
            MaskArg::All => true,
            MaskArg::Prefix(k) => k >= len,
            MaskArg::Block(_) => false,
        };
        if !full || (stride != 1 && len > 1) {
            return None;
        }
        let first = usize::try_from(ptr_off(base).checked_add(start)?).ok()?;
        self.mems
            .get(ptr_param(base))?
            .as_ref()?
            .view_run::<f32>(first, len)
    }

    /// Binary op `id` with deferred-load operands: each is viewed in place or, failing
    /// that, loaded now.
    #[allow(clippy::too_many_arguments)]
    fn fused_binary(
        &self,
        env: &mut [Data],
        side: &mut Side,
        id: OpId,
        pid: [usize; 3],
        kind: crate::ir::BinaryOp,
        d: crate::dtype::DType,
        ops: [Value; 2],
        res: Value,
    ) -> Result<()> {
        let mut views: [Option<&'a [f32]>; 2] = [None, None];
        for (view, v) in views.iter_mut().zip(ops) {
            if let Some(lid) = self.plan.deferred[v.index()] {
                *view = self.load_view(env, side, lid);
                if view.is_none() {
                    if self.plan.prep[lid.index()] {
                        self.prepare(env, side, lid);
                    }
                    self.op(env, side, lid, pid)?;
                }
            }
            self.fill(env, side, v);
        }
        with_out(env, res, |env, o| {
            let slice = |view: Option<&'a [f32]>, v: Value| match (view, &env[v.index()]) {
                (Some(s), _) => Ok(s),
                (None, Data::F32(s)) => Ok(s.as_slice()),
                _ => Err(format!("operand {v} is not an f32-class block")),
            };
            ew::binary_f32_slices(
                kind,
                d,
                slice(views[0], ops[0])?,
                slice(views[1], ops[1])?,
                o,
            )
        })
        .map_err(|e| self.err(id, pid, e))
    }

    /// Before op `id` runs: its results lose their closed forms, and the operands it cannot
    /// read in closed form are written out.
    fn prepare(&self, env: &mut [Data], side: &mut Side, id: OpId) {
        let d = self.kernel.op(id);
        for r in d.results.iter() {
            side.lazy[r.index()] = None;
        }
        let keep = |v: Value| match &d.op {
            Op::Binary { .. } | Op::Cmp { .. } => true,
            Op::Select { cond, .. } => v == *cond,
            Op::Load { mask, .. } | Op::Store { mask, .. } => Some(v) == *mask,
            _ => false,
        };
        d.op.for_each_operand(|v| {
            if !keep(v) {
                self.fill(env, side, v);
            }
        });
    }

    /// Writes out `v`'s buffer if it is only known in closed form.
    fn fill(&self, env: &mut [Data], side: &mut Side, v: Value) {
        if let (Some(l), false) = (side.lazy[v.index()], side.filled[v.index()]) {
            let t = self.kernel.ty(v);
            lazy::materialize(l, t.dtype, t.numel(), &mut env[v.index()]);
            side.filled[v.index()] = true;
        }
    }

    /// Marks `r` as known in closed form (its buffer is not written).
    fn set_lazy(side: &mut Side, r: Value, l: Lazy) {
        side.lazy[r.index()] = Some(l);
        side.filled[r.index()] = false;
    }

    /// Operand `v` of dtype `d` as `(base, stride)`: a closed form, or a one-element value.
    fn affine_of(
        &self,
        env: &[Data],
        side: &Side,
        v: Value,
        d: crate::dtype::DType,
    ) -> Option<Affine> {
        match side.lazy[v.index()] {
            Some(Lazy::Affine { base, stride }) => Some((base, stride)),
            Some(Lazy::Prefix(_)) => None,
            None if env[v.index()].len() == 1 => env[v.index()].get_i64(0, d).map(|x| (x, 0)),
            None => None,
        }
    }

    /// The operands of a binary op or comparison of dtype `d` as `(lanes, a, b)` in affine
    /// form, when its result `r` may be kept in closed form: a 1-D block of a signed
    /// integer dtype, with an operand already in closed form.
    fn affine_pair(
        &self,
        env: &[Data],
        side: &Side,
        r: Value,
        [a, b]: [Value; 2],
        d: crate::dtype::DType,
    ) -> Option<(usize, Affine, Affine)> {
        let t = self.kernel.ty(r);
        let lazy_operand = side.lazy[a.index()].is_some() || side.lazy[b.index()].is_some();
        if t.shape.len() != 1 || t.numel() < 2 || !lazy_operand || !lazy::affine_dtype(d) {
            return None;
        }
        Some((
            t.numel(),
            self.affine_of(env, side, a, d)?,
            self.affine_of(env, side, b, d)?,
        ))
    }

    /// A memory op's mask: a lane prefix, or the block.
    fn mask_arg<'e>(&self, env: &'e [Data], side: &Side, m: Option<Value>) -> MaskArg<'e> {
        match m {
            None => MaskArg::All,
            Some(m) => match side.lazy[m.index()] {
                Some(Lazy::Prefix(k)) => MaskArg::Prefix(k),
                _ => MaskArg::Block(&env[m.index()]),
            },
        }
    }

    fn op(&self, env: &mut [Data], side: &mut Side, id: OpId, pid: [usize; 3]) -> Result<()> {
        let k = self.kernel;
        let data = k.op(id);
        let res0 = data.results.get(0);
        let ty = |v: Value| k.ty(v);
        let r0 = || res0.ok_or_else(|| self.err(id, pid, "op has no result"));
        let wrap = |e: String| self.err(id, pid, e);
        let memw = |e: MemErr| self.err(id, pid, self.mem_msg(id, e));
        match &data.op {
            Op::ProgramId { axis } => {
                let v = pid.get(*axis as usize).copied().unwrap_or(0) as i32;
                let r = r0()?;
                let o = env[r.index()].i32s();
                o.push(v);
            }
            Op::NumPrograms { axis } => {
                let v = self.grid.get(*axis as usize).copied().unwrap_or(1) as i32;
                let r = r0()?;
                env[r.index()].i32s().push(v);
            }
            Op::Constant { value } => {
                let r = r0()?;
                let t = ty(r);
                fill_const(&mut env[r.index()], t, *value, t.numel());
            }
            Op::Arange { start, end } if end - start > 1 => {
                let base = *start;
                Self::set_lazy(side, r0()?, Lazy::Affine { base, stride: 1 });
            }
            Op::Arange { start, end } => {
                let r = r0()?;
                env[r.index()]
                    .i32s()
                    .extend((*start..*end).map(|x| x as i32));
            }
            Op::Splat { src } => {
                let r = r0()?;
                let n = ty(r).numel();
                with_out(env, r, |env, out| {
                    let s = &env[src.index()];
                    if s.len() != 1 {
                        return Err("splat of a non-scalar".into());
                    }
                    same_kind!(s, out, |s, o| o.resize(n, s[0]));
                    Ok(())
                })
                .map_err(wrap)?;
            }
            Op::Unary { kind, src } => {
                let d = ty(*src).dtype;
                with_out(env, r0()?, |env, o| {
                    ew::unary(*kind, d, &env[src.index()], o)
                })
                .map_err(wrap)?;
            }
            Op::Binary { kind, lhs, rhs } => {
                let d = ty(*lhs).dtype;
                let (l, r) = (self.operand(*lhs), self.operand(*rhs));
                let res = r0()?;
                if self.plan.deferred[l.index()].is_some()
                    || self.plan.deferred[r.index()].is_some()
                {
                    return self.fused_binary(env, side, id, pid, *kind, d, [l, r], res);
                }
                let form = self.affine_pair(env, side, res, [l, r], d);
                if let Some(f) = form.and_then(|(n, a, b)| lazy::binary(*kind, a, b, n, d)) {
                    Self::set_lazy(side, res, f);
                    return Ok(());
                }
                self.fill(env, side, l);
                self.fill(env, side, r);
                with_out(env, res, |env, o| {
                    ew::binary(*kind, d, &env[l.index()], &env[r.index()], o)
                })
                .map_err(wrap)?;
            }
            Op::Cmp { pred, lhs, rhs } => {
                let d = ty(*lhs).dtype;
                let (l, r) = (self.operand(*lhs), self.operand(*rhs));
                let res = r0()?;
                let form = self.affine_pair(env, side, res, [l, r], d);
                if let Some(f) = form.and_then(|(n, a, b)| lazy::cmp(*pred, a, b, n)) {
                    Self::set_lazy(side, res, f);
                    return Ok(());
                }
                self.fill(env, side, l);
                self.fill(env, side, r);
                with_out(env, res, |env, o| {
                    ew::cmp(*pred, d, &env[l.index()], &env[r.index()], o)
                })
                .map_err(wrap)?;
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => {
                if let Some(Lazy::Prefix(k)) = side.lazy[cond.index()] {
                    let n = ty(r0()?).numel();
                    // One side everywhere: take that block over when nothing else uses it.
                    let whole = match k {
                        0 => Some(*on_false),
                        k if k >= n => Some(*on_true),
                        _ => None,
                    };
                    if let Some(v) = whole.filter(|&v| env[v.index()].len() == n) {
                        if self.can_steal(v, id) {
                            env.swap(r0()?.index(), v.index());
                            return Ok(());
                        }
                    }
                    return with_out(env, r0()?, |env, o| {
                        ew::select_prefix(k, n, &env[on_true.index()], &env[on_false.index()], o)
                    })
                    .map_err(wrap);
                }
                with_out(env, r0()?, |env, o| {
                    ew::select(
                        &env[cond.index()],
                        &env[on_true.index()],
                        &env[on_false.index()],
                        o,
                    )
                })
                .map_err(wrap)?;
            }
            Op::Fma { a, b, c } => {
                let d = ty(*a).dtype;
                with_out(env, r0()?, |env, o| {
                    ew::fma(d, &env[a.index()], &env[b.index()], &env[c.index()], o)
                })
                .map_err(wrap)?;
            }
            Op::Clamp {
                src,
                lo,
                hi,
                propagate_nan,
            } => {
                let d = ty(*src).dtype;
                with_out(env, r0()?, |env, o| {
                    ew::clamp(
                        d,
                        *propagate_nan,
                        &env[src.index()],
                        &env[lo.index()],
                        &env[hi.index()],
                        o,
                    )
                })
                .map_err(wrap)?;
            }
            Op::Cast { src } => {
                let r = r0()?;
                let (s, d) = (ty(*src).dtype, ty(r).dtype);
                with_out(env, r, |env, o| ew::cast(s, d, &env[src.index()], o)).map_err(wrap)?;
            }
            Op::Bitcast { src } => {
                let r = r0()?;
                let (s, d) = (ty(*src).dtype, ty(r).dtype);
                with_out(env, r, |env, o| ew::bitcast(s, d, &env[src.index()], o)).map_err(wrap)?;
            }
            Op::IntToPtr { src } => {
                let d = ty(r0()?).dtype;
                with_out(env, r0()?, |env, o| {
                    let Data::I64(x) = &env[src.index()] else {
                        return Err("int_to_ptr of a value that is not 64-bit".to_string());
                    };
                    let o = o.ptrs();
                    o.extend(
                        x.iter()
                            .map(|&x| super::int_to_ptr(k, &self.table, x as u64, d)),
                    );
                    Ok(())
                })
                .map_err(wrap)?;
            }
            Op::AddPtr { ptr, offset } => {
                let od = ty(*offset).dtype;
                with_out(env, r0()?, |env, o| {
                    ew::add_ptr(od, &env[ptr.index()], &env[offset.index()], o)
                })
                .map_err(wrap)?;
            }
            Op::Load { ptr, mask, other } => {
                let pt = ty(*ptr);
                let run = pt.shape.last().copied().unwrap_or(1);
                let r = r0()?;
                let mut out = take(env, r);
                let res = self.ptr_arg(env, side, *ptr).and_then(|p| {
                    memops::load(
                        &self.mems,
                        pt.dtype,
                        run,
                        p,
                        self.mask_arg(env, side, *mask),
                        other.map(|o| &env[o.index()]),
                        &mut out,
                    )
                });
                env[r.index()] = out;
                res.map_err(memw)?;
            }
            Op::Store { ptr, value, mask } => {
                let pt = ty(*ptr);
                let run = pt.shape.last().copied().unwrap_or(1);
                self.ptr_arg(env, side, *ptr)
                    .and_then(|p| {
                        memops::store(
                            &self.mems,
                            pt.dtype,
                            run,
                            p,
                            &env[value.index()],
                            self.mask_arg(env, side, *mask),
                        )
                    })
                    .map_err(memw)?;
            }
            // Every atomic is a sequentially consistent compare-and-swap on the shared
            // buffer: each `sem=` and `scope=` is honoured (or exceeded).
            Op::AtomicRmw {
                kind,
                ptr,
                value,
                mask,
                ..
            } => {
                let d = ty(*ptr).dtype;
                let r = r0()?;
                let mut out = take(env, r);
                let res = self.ptr_arg(env, side, *ptr).and_then(|p| {
                    memops::atomic_rmw(
                        &self.mems,
                        *kind,
                        d,
                        p,
                        &env[value.index()],
                        mask.map_or(MaskArg::All, |m| MaskArg::Block(&env[m.index()])),
                        &mut out,
                    )
                });
                env[r.index()] = out;
                res.map_err(memw)?;
            }
            Op::AtomicCas {
                ptr, cmp, value, ..
            } => {
                let d = ty(*ptr).dtype;
                let r = r0()?;
                let mut out = take(env, r);
                let res = self.ptr_arg(env, side, *ptr).and_then(|p| {
                    memops::atomic_cas(
                        &self.mems,
                        d,
                        p,
                        &env[cmp.index()],
                        &env[value.index()],
                        &mut out,
                    )
                });
                env[r.index()] = out;
                res.map_err(memw)?;
            }
            Op::Broadcast { src } => {
                let r = r0()?;
                let (from, to) = (&ty(*src).shape, &ty(r).shape);
                with_out(env, r, |env, o| {
                    shape::broadcast(&env[src.index()], from, to, o)
                })
                .map_err(wrap)?;
            }
            Op::ExpandDims { src, .. } | Op::Reshape { src } => copy(env, r0()?, *src),
            Op::Permute { src, order } => {
                let from = &ty(*src).shape;
                with_out(env, r0()?, |env, o| {
                    shape::permute(&env[src.index()], from, order, o)
                })
                .map_err(wrap)?;
            }
            Op::Join { lhs, rhs } => {
                with_out(env, r0()?, |env, o| {
                    shape::join(&env[lhs.index()], &env[rhs.index()], o)
                })
                .map_err(wrap)?;
            }
            Op::Split { src } => {
                let (Some(a), Some(b)) = (data.results.get(0), data.results.get(1)) else {
                    return Err(self.err(id, pid, "split needs two results"));
                };
                let (mut x, mut y) = (take(env, a), take(env, b));
                let res = shape::split(&env[src.index()], &mut x, &mut y);
                env[a.index()] = x;
                env[b.index()] = y;
                res.map_err(wrap)?;
            }
            Op::Dot { a, b, acc } => {
                let r = r0()?;
                let d = ty(r).dtype;
                let (sa, sb) = (&ty(*a).shape, &ty(*b).shape);
                if self.can_steal(*acc, id) {
                    // Accumulate in the accumulator's own buffer (the loop-carried `acc`).
                    let mut c = take(env, *acc);
                    let res = dot::dot_into(d, &env[a.index()], &env[b.index()], &mut c, sa, sb);
                    env[acc.index()] = std::mem::replace(&mut env[r.index()], c);
                    res.map_err(wrap)?;
                } else {
                    with_out(env, r, |env, o| {
                        dot::dot(
                            d,
                            &env[a.index()],
                            &env[b.index()],
                            &env[acc.index()],
                            sa,
                            sb,
                            o,
                        )
                    })
                    .map_err(wrap)?;
                }
            }
            Op::Reduce {
                kind,
                axis,
                srcs,
                combine,
            } => {
                let src0 = *srcs
                    .first()
                    .ok_or_else(|| self.err(id, pid, "reduce without operands"))?;
                let t = ty(src0);
                let dims = reduce::split_axis(&t.shape, *axis as usize);
                match combine {
                    Some(region) => self.custom_reduce(env, side, id, pid, srcs, dims, *region)?,
                    None => {
                        let d = t.dtype;
                        let strategy = self.reduce_strategy;
                        with_out(env, r0()?, |env, o| match strategy {
                            Some(st) => {
                                reduce_layout::reduce(st, *kind, d, &env[src0.index()], dims, o)
                            }
                            None => reduce::reduce(*kind, d, &env[src0.index()], dims, o),
                        })
                        .map_err(wrap)?;
                    }
                }
            }
            Op::Scan {
                kind,
                axis,
                reverse,
                srcs,
                combine,
            } => {
                let src0 = *srcs
                    .first()
                    .ok_or_else(|| self.err(id, pid, "scan without operands"))?;
                let t = ty(src0);
                let dims = reduce::split_axis(&t.shape, *axis as usize);
                match combine {
                    Some(region) => {
                        self.custom_scan(env, side, id, pid, srcs, dims, *reverse, *region)?
                    }
                    None => {
                        let d = t.dtype;
                        with_out(env, r0()?, |env, o| {
                            reduce::scan(*kind, d, &env[src0.index()], dims, *reverse, o)
                        })
                        .map_err(wrap)?;
                    }
                }
            }
            Op::Philox {
                counters,
                key,
                rounds,
            } => {
                let rs: Vec<Value> = data.results.iter().collect();
                if rs.len() != 4 {
                    return Err(self.err(id, pid, "philox needs four results"));
                }
                let mut outs = [
                    take(env, rs[0]),
                    take(env, rs[1]),
                    take(env, rs[2]),
                    take(env, rs[3]),
                ];
                let c = counters.map(|v| &env[v.index()]);
                let kk = key.map(|v| &env[v.index()]);
                let res = ew::philox(*rounds, c, kk, &mut outs);
                for (r, o) in rs.iter().zip(outs) {
                    env[r.index()] = o;
                }
                res.map_err(wrap)?;
            }
            // Programs run their whole block at once, so every "thread" of a program has
            // already reached any barrier.
            Op::DebugBarrier | Op::Yield { .. } => {}
            Op::For {
                lo,
                hi,
                step,
                init,
                body,
            } => self.for_loop(env, side, id, pid, [*lo, *hi, *step], init, *body)?,
            Op::While { init, cond, body } => {
                self.while_loop(env, side, id, pid, init, *cond, *body)?
            }
            Op::If {
                cond,
                then_region,
                else_region,
            } => {
                let c = &env[cond.index()];
                if c.len() != 1 {
                    return Err(self.err(id, pid, "if condition is not a scalar"));
                }
                let taken = if c.get_bool(0).unwrap_or(false) {
                    *then_region
                } else {
                    *else_region
                };
                self.region(env, side, taken, pid)?;
                for (r, y) in data.results.iter().zip(self.yields(taken)) {
                    copy(env, r, *y);
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn for_loop(
        &self,
        env: &mut [Data],
        side: &mut Side,
        id: OpId,
        pid: [usize; 3],
        bounds: [Value; 3],
        init: &[Value],
        body: RegionId,
    ) -> Result<()> {
        let k = self.kernel;
        let d = k.ty(bounds[0]).dtype;
        let get = |v: Value| {
            env[v.index()]
                .get_i64(0, d)
                .ok_or_else(|| self.err(id, pid, "loop bound is empty"))
        };
        let (lo, hi, step) = (get(bounds[0])?, get(bounds[1])?, get(bounds[2])?);
        if step == 0 {
            return Err(self.err(id, pid, "range step is 0"));
        }
        let args = &k.region(body).args;
        let Some((&iv, carried)) = args.split_first() else {
            return Err(self.err(id, pid, "for body has no induction variable"));
        };
        for (a, v) in carried.iter().zip(init) {
            copy(env, *a, *v);
        }
        let ys = self.yields(body);
        let mut tmp = self.feed_back_tmp(ys, body);
        let iv_ty = k.ty(iv);
        // Python's `range`: a negative step counts down. Bounds are exact in i64 and the
        // loop stops before the induction variable would leave it.
        let mut i = lo;
        while if step > 0 { i < hi } else { i > hi } {
            fill_const(&mut env[iv.index()], iv_ty, crate::ir::Const::Int(i), 1);
            self.region_iter(env, side, body, pid, i != lo)?;
            self.feed_back(env, side, body, ys, carried, &mut tmp);
            i = match i.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
        // The carried slots are dead until the loop runs again (and then re-initialised):
        // hand their buffers to the results instead of copying.
        for (r, a) in k.op(id).results.iter().zip(carried) {
            env.swap(r.index(), a.index());
        }
        Ok(())
    }

    /// Passes yielded values to the carried slots. A yielded op result of the body used
    /// nowhere else is moved (buffers swapped); anything else is copied through `tmp` first,
    /// since a yield may pass carried values along in another order.
    fn feed_back(
        &self,
        env: &mut [Data],
        side: &mut Side,
        body: RegionId,
        ys: &[Value],
        carried: &[Value],
        tmp: &mut [Data],
    ) {
        let moved = |y: Value| self.moved(y, body);
        for (t, y) in tmp.iter_mut().zip(ys) {
            if !moved(*y) {
                t.assign(&env[y.index()]);
            }
        }
        for (y, a) in ys.iter().zip(carried) {
            if moved(*y) {
                env.swap(y.index(), a.index());
                // The slot now holds the carried buffer, not `y`'s closed form.
                side.lazy[y.index()] = None;
            }
        }
        for ((t, y), a) in tmp.iter_mut().zip(ys).zip(carried) {
            if !moved(*y) {
                std::mem::swap(t, &mut env[a.index()]);
            }
        }
    }

    /// Whether yielded value `y` of loop body `body` is moved into its carried slot (see
    /// [`Launch::feed_back`]).
    fn moved(&self, y: Value, body: RegionId) -> bool {
        self.plan.steal[y.index()]
            && matches!(
                self.kernel.value(y).map(|v| v.def),
                Some(ValueDef::OpResult(..))
            )
            && self.home(y) == Some(body)
    }

    /// Scratch slots for [`Launch::feed_back`]: one per yielded value, or none (no
    /// allocation) when every yielded value is moved.
    fn feed_back_tmp(&self, ys: &[Value], body: RegionId) -> Vec<Data> {
        if ys.iter().all(|&y| self.moved(y, body)) {
            Vec::new()
        } else {
            vec![Data::default(); ys.len()]
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn while_loop(
        &self,
        env: &mut [Data],
        side: &mut Side,
        id: OpId,
        pid: [usize; 3],
        init: &[Value],
        cond: RegionId,
        body: RegionId,
    ) -> Result<()> {
        let k = self.kernel;
        let (cargs, bargs) = (&k.region(cond).args, &k.region(body).args);
        for (a, v) in cargs.iter().zip(init) {
            copy(env, *a, *v);
        }
        let cy = self.yields(cond);
        let by = self.yields(body);
        let mut tmp = self.feed_back_tmp(by, body);
        loop {
            self.region(env, side, cond, pid)?;
            let go = cy
                .first()
                .and_then(|c| env[c.index()].get_bool(0))
                .ok_or_else(|| self.err(id, pid, "while condition yields no value"))?;
            if !go {
                break;
            }
            for (b, c) in bargs.iter().zip(cargs) {
                copy(env, *b, *c);
            }
            self.region(env, side, body, pid)?;
            self.feed_back(env, side, body, by, cargs, &mut tmp);
        }
        for (r, a) in k.op(id).results.iter().zip(cargs) {
            copy(env, r, *a);
        }
        Ok(())
    }

    /// Runs a combine region over many lanes at once: args `left` and `right` (one `Data`
    /// per operand, `lanes` elements each); returns the yielded values.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn combine(
        &self,
        env: &mut [Data],
        side: &mut Side,
        id: OpId,
        pid: [usize; 3],
        region: RegionId,
        left: &[Data],
        right: &[Data],
        lanes: usize,
    ) -> Result<Vec<Data>> {
        let args = &self.kernel.region(region).args;
        if args.len() != left.len() + right.len() {
            return Err(self.err(
                id,
                pid,
                "combine region takes the wrong number of arguments",
            ));
        }
        for (a, d) in args.iter().zip(left.iter().chain(right)) {
            env[a.index()].assign(d);
        }
        self.region(env, side, region, pid)?;
        Ok(self
            .yields(region)
            .iter()
            .map(|y| {
                let mut d = env[y.index()].clone();
                fit_lanes(&mut d, lanes);
                d
            })
            .collect())
    }

    /// Tree reduction with a custom combine: pairs `(2i, 2i+1)` are combined level by
    /// level, which keeps operand order for associative, non-commutative combines.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn custom_reduce(
        &self,
        env: &mut [Data],
        side: &mut Side,
        id: OpId,
        pid: [usize; 3],
        srcs: &[Value],
        (outer, n, inner): (usize, usize, usize),
        region: RegionId,
    ) -> Result<()> {
        let mut cur: Vec<Data> = srcs.iter().map(|v| env[v.index()].clone()).collect();
        let mut m = n;
        while m > 1 {
            let h = m / 2;
            let evens: Vec<usize> = (0..h).map(|i| 2 * i).collect();
            let odds: Vec<usize> = (0..h).map(|i| 2 * i + 1).collect();
            let pick = |idx: &[usize]| -> Result<Vec<Data>> {
                cur.iter()
                    .map(|c| {
                        let mut d = Data::default();
                        reduce::gather_axis(c, (outer, m, inner), idx, &mut d)
                            .map(|_| d)
                            .map_err(|e| self.err(id, pid, e))
                    })
                    .collect()
            };
            let (left, right) = (pick(&evens)?, pick(&odds)?);
            let combined =
                self.combine(env, side, id, pid, region, &left, &right, outer * h * inner)?;
            let tail = (m % 2 == 1).then(|| pick(&[m - 1])).transpose()?;
            cur = match tail {
                None => combined,
                Some(t) => combined
                    .iter()
                    .zip(&t)
                    .map(|(c, last)| {
                        let mut d = Data::default();
                        reduce::concat_axis(c, h, last, 1, outer, inner, &mut d)
                            .map(|_| d)
                            .map_err(|e| self.err(id, pid, e))
                    })
                    .collect::<Result<_>>()?,
            };
            m = m.div_ceil(2);
        }
        for (r, c) in self.kernel.op(id).results.iter().zip(cur) {
            env[r.index()] = c;
        }
        Ok(())
    }

    /// Inclusive scan with a custom combine (Hillis-Steele: log2(n) whole-block steps).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn custom_scan(
        &self,
        env: &mut [Data],
        side: &mut Side,
        id: OpId,
        pid: [usize; 3],
        srcs: &[Value],
        (outer, n, inner): (usize, usize, usize),
        reverse: bool,
        region: RegionId,
    ) -> Result<()> {
        let dims = (outer, n, inner);
        let flip: Vec<usize> = (0..n).rev().collect();
        let pick = |cur: &[Data], idx: &[usize]| -> Result<Vec<Data>> {
            cur.iter()
                .map(|c| {
                    let mut d = Data::default();
                    reduce::gather_axis(c, dims, idx, &mut d)
                        .map(|_| d)
                        .map_err(|e| self.err(id, pid, e))
                })
                .collect()
        };
        let mut cur: Vec<Data> = srcs.iter().map(|v| env[v.index()].clone()).collect();
        if reverse {
            cur = pick(&cur, &flip)?;
        }
        let mut d = 1;
        while d < n {
            let earlier: Vec<usize> = (0..n - d).collect();
            let later: Vec<usize> = (d..n).collect();
            let (a, b) = (pick(&cur, &earlier)?, pick(&cur, &later)?);
            // A reverse scan is the forward scan of the flipped sequence (Triton's): the
            // running value from the end is the combine's left operand.
            let combined =
                self.combine(env, side, id, pid, region, &a, &b, outer * (n - d) * inner)?;
            let head = pick(&cur, &(0..d).collect::<Vec<_>>())?;
            cur = head
                .iter()
                .zip(&combined)
                .map(|(h, c)| {
                    let mut out = Data::default();
                    reduce::concat_axis(h, d, c, n - d, outer, inner, &mut out)
                        .map(|_| out)
                        .map_err(|e| self.err(id, pid, e))
                })
                .collect::<Result<_>>()?;
            d *= 2;
        }
        if reverse {
            cur = pick(&cur, &flip)?;
        }
        for (r, c) in self.kernel.op(id).results.iter().zip(cur) {
            env[r.index()] = c;
        }
        Ok(())
    }
}
