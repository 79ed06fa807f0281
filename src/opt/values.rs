//! The layout of every value of a kernel under its plan: which thread holds which elements.
//!
//! A block value of `n` elements is spread over the program's threads in chunks of a width
//! fixed by the plan ([`super::blocked::layout_of`]), so a
//! value's layout depends on its element count alone and same-shape elementwise ops,
//! `reshape` and `expand_dims` never move data. The exceptions are the `tl.dot`
//! accumulators a `for` loop keeps in matrix fragments ([`Decision::Resident`]): the loop's
//! carried values in those slots and the dots that accumulate into them live in the dot's
//! fragments until the loop ends, and so does a rescale on the way (`acc * alpha[:, None]`,
//! [`super::plan::ResidentChain`]) with its broadcast factor; and on `mma.sync` the row vectors
//! computed from row reductions of fragments live in the fragments' row slices
//! ([`super::rows`]). Every move between layouts is a `convert` record of the
//! plan; the printers read each value's layout from here.

use std::fmt;

use super::blocked::{layout_of, BlockedLayout};
use super::options::LaunchOptions;
use super::plan::{resident_chain, Decision, DotLowering, KernelPlan, WarpGrid};
use crate::ir::{Kernel, Op, OpId, ValueDef};

/// Where one value's elements live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueLayout {
    /// One value for the whole program (a scalar).
    Uniform,
    /// Chunks of consecutive elements spread over the threads.
    Blocked(BlockedLayout),
    /// A `tl.dot` accumulator kept in the fragments of the dot `dot` (its lowering in the
    /// plan) across the iterations of a loop.
    Fragments {
        /// The dot whose fragments hold it.
        dot: OpId,
        /// That dot's lowering.
        lowering: DotLowering,
    },
    /// A row vector kept in the row slices of `mma.sync` fragments on `grid`
    /// ([`super::rows`]): each thread holds the rows its fragments cover.
    Rows {
        /// The warp grid whose fragment rows it follows.
        grid: WarpGrid,
    },
}

impl ValueLayout {
    /// Register slots per thread of a blocked layout (0 otherwise).
    pub fn regs(&self) -> usize {
        match *self {
            ValueLayout::Blocked(b) => b.regs(),
            ValueLayout::Rows { grid } => 2 * grid.fm,
            _ => 0,
        }
    }
}

impl fmt::Display for ValueLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueLayout::Uniform => write!(f, "uniform"),
            ValueLayout::Blocked(b) => write!(
                f,
                "blocked<vec={} threads={} regs={}>",
                b.vec,
                b.threads,
                b.regs()
            ),
            ValueLayout::Fragments { dot, lowering } => {
                write!(f, "fragments<{}> of {dot}", Decision::Dot(*lowering))
            }
            ValueLayout::Rows { grid } => write!(
                f,
                "rows<warps={} tiles={} regs={}> of mma fragments",
                grid.wm,
                grid.fm,
                2 * grid.fm
            ),
        }
    }
}

/// The blocked layout of an `n`-element block under `plan` for `opts`
/// ([`super::blocked::layout_of`]).
pub fn blocked(plan: &KernelPlan, opts: &LaunchOptions, n: usize) -> ValueLayout {
    ValueLayout::Blocked(layout_of(
        n,
        plan.vec,
        opts.vector_elems(),
        plan.printer.threads,
    ))
}

/// The layout of every value of `k` under `plan`, indexed by value.
pub fn value_layouts(k: &Kernel, plan: &KernelPlan, opts: &LaunchOptions) -> Vec<ValueLayout> {
    let mut out: Vec<ValueLayout> = k
        .values
        .iter()
        .map(|v| {
            if v.ty.is_scalar() {
                ValueLayout::Uniform
            } else {
                blocked(plan, opts, v.ty.numel())
            }
        })
        .collect();
    for r in plan.fragment_regions(k) {
        let frags = ValueLayout::Fragments {
            dot: r.dot,
            lowering: plan.dot(r.dot),
        };
        for v in r.values(k) {
            out[v.index()] = frags;
        }
    }
    if plan.printer.matrix.mma_sync() {
        for c in super::rows::kept(k, plan) {
            for v in &c.values {
                out[v.index()] = ValueLayout::Rows { grid: c.grid };
            }
        }
    }
    // Program order: a loop's resident slots are marked before its body's dots are seen.
    for id in k.walk() {
        let data = k.op(id);
        match &data.op {
            Op::For { body, .. } => {
                let args = &k.region(*body).args;
                for &slot in plan.resident(id) {
                    if let Some(c) = resident_chain(k, *body, slot, plan.printer.matrix) {
                        let frags = ValueLayout::Fragments {
                            dot: c.dot,
                            lowering: plan.dot(c.dot),
                        };
                        if let Some(arg) = args.get(slot + 1) {
                            out[arg.index()] = frags;
                        }
                        // A rescale on the way is applied to the fragments: its factor is
                        // broadcast straight into them.
                        for op in c.scale.iter().flat_map(|r| [r.bcast, r.mul]) {
                            if let Some(v) = k.op(op).result() {
                                out[v.index()] = frags;
                            }
                        }
                    }
                }
            }
            Op::Dot { acc, .. } => {
                if let (ValueLayout::Fragments { dot, lowering }, Some(res)) =
                    (out[acc.index()], data.result())
                {
                    out[res.index()] = ValueLayout::Fragments { dot, lowering };
                }
            }
            _ => {}
        }
    }
    out
}

/// One line per value: `%v dtype[shape] layout`, with the op defining it (or the loop
/// whose block argument it is).
pub fn text(k: &Kernel, plan: &KernelPlan, opts: &LaunchOptions) -> String {
    let layouts = value_layouts(k, plan, opts);
    let mut s = format!("values @{}\n", k.name);
    for (i, (v, lay)) in k.values.iter().zip(&layouts).enumerate() {
        if matches!(lay, ValueLayout::Uniform) {
            continue;
        }
        let from = match v.def {
            ValueDef::OpResult(op, _) => op.to_string(),
            ValueDef::RegionArg(r, j) => match k.region(r).parent {
                Some(op) => format!("{op} arg{j}"),
                None => format!("arg{j}"),
            },
            ValueDef::Param(_) => "param".to_string(),
        };
        s.push_str(&format!("  %{i} {} {lay} ; {from}\n", v.ty));
    }
    s
}
