//! Every threadgroup buffer a kernel's printed code goes through, computed from the kernel
//! IR, its plan and the launch options before anything is printed: reductions, scans,
//! shape ops (broadcast, permute, join, split, reshape to a scalar), scalar atomics and
//! `tl.dot` staging. [`super::plan::KernelPlan::place_arena`] places them in the arena; the
//! printers look each one up by op, role and dtype and never add one.
//!
//! Whether a shape op moves data at all depends on how the printers hold its source
//! ([`Held`]): a uniform value is one variable every thread has, and a block that is a pure
//! function of its element index (a "recipe": `arange`, uniform scalars and elementwise ops)
//! is recomputed in the new layout. Only other blocks go through threadgroup memory. The
//! printers keep a recipe exactly where [`held`] says so.
//!
//! ```
//! use triton_metal::opt::buffers::{held, requests, Held};
//! use triton_metal::opt::options::LaunchOptions;
//! use triton_metal::opt::plan::{plan, MatrixUnit, Printer};
//! use triton_metal::opt::smem::Role;
//! use triton_metal::{tl, DType::F32};
//! let k = tl::jit("rowmax", |k| {
//!     let x = k.ptr(F32, "x");
//!     let o = k.ptr(F32, "o");
//!     let offs = tl::arange(0, 256);
//!     tl::store(o + tl::program_id(0), tl::load(x + offs).max(0));
//! })?.specialize_with(&[])?;
//! let printer = Printer { threads: 128, matrix: MatrixUnit::Simdgroup8x8, widest_vector: 4, static_shared: None };
//! let opts = LaunchOptions::default();
//! let p = plan(&k, &opts, printer);
//! // The offsets are recomputed wherever they are needed; the max goes through memory.
//! assert!(held(&k).iter().any(|h| matches!(h, Held::Recipe(_))));
//! assert!(requests(&k, &p, &opts).iter().all(|r| r.role == Role::Reduce));
//! # Ok::<(), triton_metal::Error>(())
//! ```

use super::blocked::{layout_of, AxisGeo};
use super::options::{LaunchOptions, ReductionLayout};
use super::pipeline::AheadLoad;
use super::plan::{
    dot_dims, mma_operand_tile, simdgroup_pitches, simdgroup_stage_elems, DotLowering, KernelPlan,
    MatrixUnit, ScanStrategy, MMA_C_PAD,
};
use super::smem::{Request, Role};
use crate::dtype::DType;
use crate::ir::{Kernel, Op, OpId, ReduceKind, RegionId, ScanKind, Value};

/// How the printers hold a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// One variable every thread holds (scalars, splats, elementwise ops of them).
    Uniform,
    /// A block recomputed from its element index: the expression's operation count.
    Recipe(u32),
    /// A block in registers of its layout: changing its layout moves data.
    Block,
}

/// Most operations in one recipe: longer expressions are moved, not recomputed.
pub const MAX_RECIPE_OPS: u32 = 24;

/// The element type offsets into pointer parameters have: 64-bit when some pointer
/// arithmetic takes a 64-bit offset or a pointer is cast from an integer, else 32-bit.
pub fn offset_dtype(k: &Kernel) -> DType {
    let wide = k.ops.iter().any(|o| match o.op {
        Op::AddPtr { offset, .. } => k.ty(offset).dtype.size_bytes() == 8,
        Op::IntToPtr { .. } => true,
        _ => false,
    });
    if wide {
        DType::I64
    } else {
        DType::I32
    }
}

/// Per value (by index), how the GPU printers hold it. Values whose holding depends on
/// control flow (loop-carried, branch results) count as [`Held::Block`].
pub fn held(k: &Kernel) -> Vec<Held> {
    fn walk(k: &Kernel, r: RegionId, h: &mut [Held]) {
        for &a in &k.region(r).args {
            h[a.index()] = if k.ty(a).is_block() {
                Held::Block
            } else {
                Held::Uniform
            };
        }
        for &id in &k.region(r).ops {
            let data = k.op(id);
            for sub in data.op.regions() {
                walk(k, sub, h);
            }
            for res in data.results.iter() {
                h[res.index()] = of_op(k, &data.op, res, h);
            }
        }
    }
    let mut h = vec![Held::Block; k.values.len()];
    walk(k, k.body, &mut h);
    h
}

fn of_op(k: &Kernel, op: &Op, res: Value, h: &[Held]) -> Held {
    if !k.ty(res).is_block() {
        return Held::Uniform;
    }
    let at = |v: Value| h[v.index()];
    match op {
        Op::Constant { .. } | Op::Splat { .. } => Held::Uniform,
        Op::Arange { .. } => Held::Recipe(1),
        op if op.is_elementwise() || matches!(op, Op::AddPtr { .. }) => {
            let mut args = Vec::new();
            op.for_each_operand(|v| args.push(at(v)));
            if args.iter().all(|a| *a == Held::Uniform) {
                return Held::Uniform;
            }
            let mut ops = 1u32;
            for a in args {
                ops += match a {
                    Held::Uniform => 1,
                    Held::Recipe(n) => n,
                    Held::Block => return Held::Block,
                };
            }
            if ops <= MAX_RECIPE_OPS {
                Held::Recipe(ops)
            } else {
                Held::Block
            }
        }
        Op::Broadcast { src } | Op::Permute { src, .. } | Op::ExpandDims { src, .. } => at(*src),
        Op::Reshape { src } => at(*src),
        Op::Split { src } if at(*src) == Held::Uniform => Held::Uniform,
        _ => Held::Block,
    }
}

/// Collects the requests of one op.
struct Reqs<'a> {
    k: &'a Kernel,
    op: OpId,
    role: Role,
    off: DType,
    out: Vec<Request>,
}

impl Reqs<'_> {
    fn push(&mut self, dtype: DType, elems: usize) {
        self.out.push(Request {
            op: self.op,
            role: self.role,
            dtype,
            elems,
        });
    }

    /// The element type a value is staged as (pointers: their offsets).
    fn edt(&self, v: Value) -> DType {
        let t = self.k.ty(v);
        if t.ptr {
            self.off
        } else {
            t.dtype
        }
    }

    /// The `int` indices of an arg-reduction next to `elems` values of `dt`: after the
    /// values when they are `i32` themselves (one buffer per dtype).
    fn indices(&mut self, dt: DType, elems: usize) {
        let e = if dt == DType::I32 { 2 * elems } else { elems };
        self.push(DType::I32, e);
    }
}

/// Every threadgroup buffer `k`'s printed code converts through under plan `p` and `opts`
/// (none for a one-thread printer, which has no threadgroup memory).
pub fn requests(k: &Kernel, p: &KernelPlan, opts: &LaunchOptions) -> Vec<Request> {
    let threads = p.printer.threads;
    if threads <= 1 {
        return Vec::new();
    }
    let base = opts.vector_elems();
    let lay = |n: usize| layout_of(n, p.vec, base, threads);
    let h = held(k);
    let off = offset_dtype(k);
    let regions = p.fragment_regions(k);
    // Row vectors kept in the row slices of fragments move through no buffer.
    let sliced: std::collections::BTreeSet<Value> = super::rows::kept(k, p)
        .into_iter()
        .flat_map(|c| c.values)
        .collect();
    let mut all = Vec::new();
    for (i, data) in k.ops.iter().enumerate() {
        let op = OpId(i as u32);
        let mut r = Reqs {
            k,
            op,
            role: Role::of_op(&data.op),
            off,
            out: Vec::new(),
        };
        let numel = |v: Value| k.ty(v).numel();
        let block = |v: Value| h[v.index()] == Held::Block;
        let res = data.result();
        match &data.op {
            Op::Broadcast { src } | Op::Permute { src, .. } => {
                // A broadcast to its own shape is the value itself; a permute moves data
                // even then (a square transpose).
                let same = matches!(data.op, Op::Broadcast { .. })
                    && Some(&k.ty(*src).shape) == res.map(|v| &k.ty(v).shape);
                if block(*src) && !same && !sliced.contains(src) {
                    if let Some(res) = res {
                        r.push(r.edt(res), numel(*src));
                    }
                }
            }
            Op::Reshape { src } | Op::ExpandDims { src, .. } => {
                if let Some(res) = res.filter(|&v| block(*src) && !k.ty(v).is_block()) {
                    r.push(r.edt(res), numel(*src));
                }
            }
            Op::Join { lhs, .. } => {
                if let Some(res) = res {
                    r.push(r.edt(res), 2 * numel(*lhs));
                }
            }
            Op::Split { src } if h[src.index()] != Held::Uniform => {
                r.push(r.edt(*src), numel(*src));
            }
            Op::AtomicRmw { ptr, .. } | Op::AtomicCas { ptr, .. } if !k.ty(*ptr).is_block() => {
                if let Some(res) = res {
                    r.push(r.edt(res), 1);
                }
            }
            Op::Reduce {
                kind: ReduceKind::Custom,
                srcs,
                axis,
                ..
            }
            | Op::Scan {
                kind: ScanKind::Custom,
                srcs,
                axis,
                ..
            } => {
                // Every source staged row-major, sources of one dtype one after another.
                let n = AxisGeo::new(&k.ty(srcs[0]).shape, *axis as usize).n;
                let mut used = std::collections::BTreeMap::<DType, usize>::new();
                for &s in srcs {
                    let e = used.entry(r.edt(s)).or_insert(0);
                    *e += n;
                    let (dt, e) = (r.edt(s), *e);
                    r.push(dt, e);
                }
            }
            Op::Reduce { srcs, .. } if regions.iter().any(|g| g.reduces.contains(&op)) => {
                // Row results of fragments, one per row, read back in the blocked layout
                // unless they stay in the fragments' row slices.
                if let Some(res) = res.filter(|v| !sliced.contains(v)) {
                    r.push(r.edt(srcs[0]), numel(res));
                }
            }
            Op::Reduce {
                kind, srcs, axis, ..
            } => {
                let (x, Some(res)) = (srcs[0], res) else {
                    continue;
                };
                let geo = AxisGeo::new(&k.ty(x).shape, *axis as usize);
                let l = lay(geo.n);
                let (dt, arg) = (
                    r.edt(x),
                    matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin),
                );
                let (la, wa) = geo.axis_thread_bits(l);
                match p.reduction(op) {
                    ReductionLayout::Coalesced => {
                        let nk = 1usize << geo.kept_reg_bits(l);
                        if wa > 0 {
                            r.push(dt, nk * threads);
                            if arg {
                                r.indices(dt, nk * threads);
                            }
                        }
                        if k.ty(res).is_block() || l.has_idle_threads() {
                            r.push(r.edt(res), geo.nout);
                        }
                    }
                    ReductionLayout::Default => {
                        let e = geo.nout << (la + wa);
                        r.push(dt, e);
                        if arg {
                            r.indices(dt, e);
                        }
                    }
                    s => {
                        r.push(dt, geo.n);
                        if arg && s == ReductionLayout::Tiled {
                            r.indices(dt, geo.n);
                        }
                    }
                }
            }
            Op::Scan { srcs, axis, .. } => {
                let x = srcs[0];
                let geo = AxisGeo::new(&k.ty(x).shape, *axis as usize);
                let (l, dt) = (lay(geo.n), r.edt(x));
                if p.scan(op) == ScanStrategy::Collective {
                    if geo.axis_thread_bits(l).1 > 0 {
                        r.push(dt, l.regs() * threads);
                    }
                } else {
                    r.push(dt, geo.n);
                }
            }
            Op::Dot { a, b, acc } => {
                // A staged before the loop or taken from registers: not staged by the dot.
                let a_staged = !p.hoists(op) && !regions.iter().any(|g| g.a_of.contains(&op));
                dot(
                    &mut r,
                    p,
                    (*a, *b),
                    h[acc.index()] == Held::Uniform,
                    a_staged,
                )
            }
            Op::For { init, .. } => {
                for &s in p.resident(op) {
                    let Some(&v) = init.get(s) else { continue };
                    let sh = &k.ty(v).shape;
                    let (m, n) = (sh[0], sh[1]);
                    let rows = p.band_rows(op, m, n).unwrap_or(m).clamp(1, m);
                    let mma = p.printer.matrix.mma_sync();
                    r.role = Role::AccIn;
                    if h[v.index()] != Held::Uniform {
                        r.push(DType::F32, if mma { m * n } else { rows * n });
                    }
                    // A result stored from its fragments never leaves them.
                    if !regions.iter().any(|g| g.from_loop == Some((op, s))) {
                        r.role = Role::AccOut;
                        r.push(DType::F32, acc_out_elems(mma, m, n, rows));
                    }
                }
                if let Some(d) = double_buffer(k, p, op) {
                    r.role = Role::Ring;
                    r.push(d.stage, DOUBLE_BUFFERS * d.elems);
                }
                // A loop-invariant operand A staged once, before the loop.
                for d in (0..k.ops.len() as u32).map(OpId) {
                    if !p.hoists(d) || p.hoistable(k, d) != Some(op) {
                        continue;
                    }
                    if let (Op::Dot { a, .. }, Some(mnk)) = (&k.op(d).op, dot_dims(k, d)) {
                        let (rows, _, pitch) = mma_operand_tile(mnk, 0);
                        r.role = Role::Hoisted;
                        r.push(r.edt(*a), rows * pitch);
                    }
                }
            }
            _ => {}
        }
        all.append(&mut r.out);
    }
    all
}

/// Floats of the buffer an `[m, n]` accumulator leaves matrix fragments through, in bands
/// of `rows` rows (`mma.sync` pads banded rows by [`MMA_C_PAD`]).
fn acc_out_elems(mma: bool, m: usize, n: usize, rows: usize) -> usize {
    match (mma, rows >= m) {
        (true, true) => m * n,
        (true, false) => rows * (n + MMA_C_PAD),
        (false, _) => rows * n,
    }
}

/// Staging buffers of a `for` loop whose `simdgroup_matrix` dot has its two operand loads
/// issued ahead into [`DOUBLE_BUFFERS`] buffers ([`super::plan::Decision::Ahead`]).
pub const DOUBLE_BUFFERS: usize = 2;

/// A `for` loop whose `simdgroup_matrix` dot has its A and B loads double-buffered.
#[derive(Clone, Debug)]
pub struct DoubleBuffer {
    /// The loads of A and B, in that order.
    pub loads: Vec<AheadLoad>,
    /// The dot's `(m, n, k)`.
    pub mnk: (usize, usize, usize),
    /// Staging dtype of A and B.
    pub stage: DType,
    /// Elements per row of staged A and B ([`super::plan::simdgroup_pitches`] for one
    /// buffer's share of the budget).
    pub pitches: (usize, usize),
    /// Elements of one buffer (A first, B at `m * pitches.0`).
    pub elems: usize,
}

/// The double buffering of `for` loop `op`, when the plan stages its dot's two operand
/// loads ahead in [`DOUBLE_BUFFERS`] buffers on `simdgroup_matrix`.
pub fn double_buffer(k: &Kernel, p: &KernelPlan, op: OpId) -> Option<DoubleBuffer> {
    if p.printer.matrix != MatrixUnit::Simdgroup8x8 {
        return None;
    }
    let mut loads = super::pipeline::ahead_loads(k, op, p.resident(op))?;
    let dot = loads.first()?.dot;
    if loads.len() != 2
        || loads
            .iter()
            .any(|l| l.dot != dot || p.ahead(l.load) != Some(DOUBLE_BUFFERS))
    {
        return None;
    }
    loads.sort_by_key(|l| l.operand);
    let DotLowering::Simdgroup { stage } = p.dot(dot) else {
        return None;
    };
    let mnk = dot_dims(k, dot)?;
    let room = p.arena.limit / DOUBLE_BUFFERS;
    Some(DoubleBuffer {
        pitches: simdgroup_pitches(mnk, stage, room),
        elems: simdgroup_stage_elems(mnk, stage, room),
        loads,
        mnk,
        stage,
    })
}

/// The buffers of `tl.dot` `r.op`; a `uniform_acc` (usually zeros) fills the fragments
/// without staging, and only B is staged unless `a_staged`.
fn dot(
    r: &mut Reqs<'_>,
    p: &KernelPlan,
    (a, b): (Value, Value),
    uniform_acc: bool,
    a_staged: bool,
) {
    let (k, op) = (r.k, r.op);
    // An accumulator a loop keeps in fragments: only the operands move.
    let resident = p.accumulates_in_fragments(k, op);
    // A result kept in fragments is never converted to the blocked layout.
    let kept = p.keeps_fragments(op);
    let din = r.edt(a);
    let l = p.dot(op);
    // Operands a loop stages ahead live in its buffers.
    let ahead = |v: Value| {
        k.def_op(v)
            .is_some_and(|d| matches!(k.op(d).op, Op::Load { .. }) && p.ahead(d).is_some())
    };
    match (l, dot_dims(k, op)) {
        (DotLowering::Simdgroup { stage }, Some((m, n, kk))) => {
            let kc = p.k_slice(op).unwrap_or(kk).clamp(1, kk);
            let rows = p.band_rows(op, m, n).unwrap_or(m).clamp(1, m);
            if !resident {
                if !uniform_acc {
                    r.role = Role::AccIn;
                    r.push(DType::F32, rows * n);
                }
                r.role = Role::AccOut;
                r.push(DType::F32, rows * n);
            }
            if p.dot_stages(k, op) != Some(DOUBLE_BUFFERS) {
                r.role = Role::Operands;
                r.push(
                    stage,
                    simdgroup_stage_elems((m, n, kc), stage, p.arena.limit),
                );
            }
        }
        (DotLowering::Mma(_), Some(mnk @ (m, n, _))) => {
            let rows = p.band_rows(op, m, n).unwrap_or(m).clamp(1, m);
            if !resident {
                if !uniform_acc {
                    r.role = Role::AccIn;
                    r.push(DType::F32, m * n);
                }
                if !kept {
                    r.role = Role::AccOut;
                    r.push(DType::F32, acc_out_elems(true, m, n, rows));
                }
            }
            // Operands not in a loop's ring are staged by the dot (A only when it is not
            // staged before the loop or taken from registers).
            let (a_here, b_here) = (a_staged && !ahead(a), !ahead(b));
            if a_here || b_here {
                let elems = |o: usize| {
                    let (rows, _, pitch) = mma_operand_tile(mnk, o);
                    rows * pitch
                };
                r.role = Role::Operands;
                r.push(
                    din,
                    if a_here { elems(0) } else { 0 } + if b_here { elems(1) } else { 0 },
                );
            }
        }
        (DotLowering::Fma, _) if k.ty(a).shape.len() >= 2 => {
            let (sa, sb) = (&k.ty(a).shape, &k.ty(b).shape);
            let rank = sa.len();
            let batch: usize = sa[..rank.saturating_sub(2)].iter().product();
            let (m, kk, n) = (sa[rank - 2], sa[rank - 1], sb[rank - 1]);
            r.role = Role::Operands;
            r.push(din, batch * m * kk + batch * kk * n);
        }
        _ => {}
    }
}
