//! Row vectors held in the row slices of `mma.sync` C fragments (Triton's
//! `SliceLayout(dim=1, parent=MMA)`): flash attention's running maximum `m_i`, its
//! denominator `l_i` and the rescale `alpha`.
//!
//! A row reduction of a value kept in fragments ([`super::fragments`]) ends, after the
//! shuffles over the four lanes of a row, with every thread holding the results of the rows
//! its fragments cover: two rows per 16-row tile, `2 * fm` in all. Kept there, the row
//! vectors computed from such results elementwise (and carried by a `for` loop) need no
//! shared memory: `x[:, None]` broadcast into fragments reads the thread's own slot, so
//! the reduction's write, barrier and read and the broadcast's write, barrier and read
//! disappear. Slot `p` of thread `lane` of warp `w` holds row
//! `w * 16 * fm + (p / 2) * 16 + lane / 4 + (p % 2) * 8` (the four lanes of a row hold
//! the same value).
//!
//! A set of such values is a [`Component`]: values linked by the ops that compute them,
//! starting from row reductions of fragments on one warp grid, with every use one that the
//! slices serve (elementwise ops into the set, `expand_dims`/`reshape`, broadcasts into
//! fragments of the same grid, and the loop's own yield). Whether a component is kept is
//! the plan's decision ([`super::plan::KernelPlan::rows`]), recorded on its reductions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::buffers::{held, Held};
use super::fragments::elementwise;
use super::plan::{resident_chain, DotLowering, KernelPlan, WarpGrid};
use crate::ir::{Kernel, Op, OpId, Value};

/// Row vectors kept in row slices of one warp grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    /// The grid whose fragment rows the slices follow (one warp along N, every warp active).
    pub grid: WarpGrid,
    /// The row reductions of fragments the values start from.
    pub reduces: Vec<OpId>,
    /// Every value of the component (`[m]` or `[m, 1]` blocks).
    pub values: BTreeSet<Value>,
}

impl Component {
    /// Registers per thread of each value: two rows per 16-row tile.
    pub fn slots(&self) -> usize {
        2 * self.grid.fm
    }
}

/// The slot of fragment register `r` of a C fragment array on `grid` (register
/// `4 * (i * fn + j) + e` holds row `(e / 2) * 8` of M tile `i`): `2 * i + e / 2`.
pub fn slot_of_register(r: &str, grid: WarpGrid) -> String {
    format!("(2u * (({r} >> 2) / {}u) + (({r} >> 1) & 1u))", grid.fn_)
}

/// The warp grid of an `mma.sync` dot whose fragments have whole rows per warp and no idle
/// warp.
fn rows_grid(p: &KernelPlan, dot: OpId) -> Option<WarpGrid> {
    let warps = (p.printer.threads / 32).max(1);
    match p.dot(dot) {
        DotLowering::Mma(g) if g.wn == 1 && g.active() == warps => Some(g),
        _ => None,
    }
}

/// Every component the kernel and the plan's fragment decisions admit, whether or not the
/// plan keeps it.
pub fn candidates(k: &Kernel, p: &KernelPlan) -> Vec<Component> {
    let regions = p.fragment_regions(k);
    let how = held(k);
    let uniform = |v: Value| how[v.index()] == Held::Uniform;
    // Seeds: row reductions of fragments, with their grid.
    let mut seed: HashMap<Value, (OpId, WarpGrid)> = HashMap::new();
    // Broadcasts read by fragments: the grid they are read on.
    let mut factor: HashMap<OpId, WarpGrid> = HashMap::new();
    for r in &regions {
        let Some(g) = rows_grid(p, r.dot) else {
            continue;
        };
        for &red in &r.reduces {
            if let Some(v) = k.op(red).result() {
                seed.insert(v, (red, g));
            }
        }
        for &b in &r.factors {
            factor.insert(b, g);
        }
    }
    if seed.is_empty() {
        return Vec::new();
    }
    // Rescales of resident accumulators (`acc * alpha[:, None]`) read their factor too.
    for (i, data) in k.ops.iter().enumerate() {
        let Op::For { body, .. } = &data.op else {
            continue;
        };
        for &slot in p.resident(OpId(i as u32)) {
            let Some(c) = resident_chain(k, *body, slot, p.printer.matrix) else {
                continue;
            };
            if let (Some(s), Some(g)) = (c.scale, rows_grid(p, c.dot)) {
                factor.insert(s.bcast, g);
            }
        }
    }
    let row_vector = |v: Value| {
        let s = &k.ty(v).shape;
        s.len() == 1 || s.len() == 2 && s[1] == 1
    };
    let uses = k.use_counts();
    // Tentative members: seeds, elementwise results and reshapes of row vectors, and the
    // carried slots (block arguments and results) of `for` loops starting uniform.
    let mut member = vec![false; k.values.len()];
    for &v in seed.keys() {
        member[v.index()] = true;
    }
    for data in &k.ops {
        match &data.op {
            op if elementwise(op) || matches!(op, Op::ExpandDims { .. } | Op::Reshape { .. }) => {
                if let Some(v) = data.result().filter(|&v| row_vector(v) && !uniform(v)) {
                    member[v.index()] = true;
                }
            }
            Op::For { init, body, .. } => {
                let args = &k.region(*body).args;
                for (s, &i) in init.iter().enumerate() {
                    let (Some(&a), Some(r)) = (args.get(s + 1), data.results.get(s)) else {
                        continue;
                    };
                    if uniform(i) && uses[i.index()] == 1 && row_vector(a) {
                        member[a.index()] = true;
                        member[r.index()] = true;
                    }
                }
            }
            _ => {}
        }
    }
    let yields_of = |f: OpId| -> Vec<Value> {
        let Op::For { body, .. } = &k.op(f).op else {
            return Vec::new();
        };
        match k.region(*body).ops.last().map(|&l| &k.op(l).op) {
            Some(Op::Yield { values }) => values.clone(),
            _ => Vec::new(),
        }
    };
    // Prune to the greatest set where every member is computed from members (or uniform
    // values) and every use of a member is one the slices serve.
    loop {
        let mut changed = false;
        let mut drop = |v: Value, member: &mut Vec<bool>| {
            if member[v.index()] {
                member[v.index()] = false;
                changed = true;
            }
        };
        for (i, data) in k.ops.iter().enumerate() {
            let op = OpId(i as u32);
            let mut operands = Vec::new();
            data.op.for_each_operand(|v| operands.push(v));
            let res = data.result();
            let res_member = res.is_some_and(|v| member[v.index()]);
            match &data.op {
                o if elementwise(o) || matches!(o, Op::ExpandDims { .. } | Op::Reshape { .. }) => {
                    let inputs_ok = operands.iter().all(|&v| member[v.index()] || uniform(v));
                    if res_member && !inputs_ok {
                        drop(res.unwrap_or(operands[0]), &mut member);
                    }
                    if !res_member || !inputs_ok {
                        for &v in &operands {
                            drop(v, &mut member);
                        }
                    }
                }
                Op::Reduce { .. } if res.is_some_and(|v| seed.contains_key(&v)) => {}
                Op::Broadcast { src } => {
                    let read = factor.contains_key(&op) && k.ty(*src).shape.len() == 2;
                    if !read {
                        drop(*src, &mut member);
                    }
                }
                Op::For { init, body, .. } => {
                    for s in 0..init.len() {
                        let a = k.region(*body).args[s + 1];
                        let r = data.results.get(s);
                        let y = yields_of(op).get(s).copied();
                        let ok = member[a.index()]
                            && r.is_some_and(|r| member[r.index()])
                            && y.is_some_and(|y| member[y.index()]);
                        if !ok {
                            drop(a, &mut member);
                            if let Some(r) = r {
                                drop(r, &mut member);
                            }
                            if let Some(y) = y {
                                drop(y, &mut member);
                            }
                        }
                    }
                    for &v in init {
                        drop(v, &mut member);
                    }
                }
                Op::Yield { values } => {
                    // A loop body's yield serves its slots (checked above); any other yield
                    // takes no member.
                    let parent = k.region(data.parent).parent;
                    let of_for = parent.is_some_and(|f| matches!(k.op(f).op, Op::For { .. }));
                    if !of_for {
                        for &v in values {
                            drop(v, &mut member);
                        }
                    }
                }
                _ => {
                    for &v in &operands {
                        drop(v, &mut member);
                    }
                    for r in data.results.iter() {
                        if !seed.contains_key(&r) {
                            drop(r, &mut member);
                        }
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Components: members linked by the ops between them.
    let mut parent: Vec<usize> = (0..k.values.len()).collect();
    fn find(p: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while p[r] != r {
            r = p[r];
        }
        let mut y = x;
        while p[y] != r {
            let n = p[y];
            p[y] = r;
            y = n;
        }
        r
    }
    let union = |p: &mut Vec<usize>, a: Value, b: Value| {
        let (x, y) = (find(p, a.index()), find(p, b.index()));
        if x != y {
            p[x] = y;
        }
    };
    for (i, data) in k.ops.iter().enumerate() {
        if let Some(r) = data.result().filter(|&v| member[v.index()]) {
            data.op.for_each_operand(|v| {
                if member[v.index()] {
                    union(&mut parent, r, v);
                }
            });
        }
        if let Op::For { body, .. } = &data.op {
            let f = OpId(i as u32);
            let ys = yields_of(f);
            for (s, &a) in k.region(*body).args[1..].iter().enumerate() {
                if !member[a.index()] {
                    continue;
                }
                if let Some(r) = data.results.get(s) {
                    union(&mut parent, a, r);
                }
                if let Some(&y) = ys.get(s) {
                    union(&mut parent, a, y);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, BTreeSet<Value>> = BTreeMap::new();
    for (i, m) in member.iter().enumerate() {
        if *m {
            let v = Value(i as u32);
            groups.entry(find(&mut parent, i)).or_default().insert(v);
        }
    }
    let mut out = Vec::new();
    for values in groups.into_values() {
        let mut grids = BTreeSet::new();
        let mut reduces = Vec::new();
        for v in &values {
            if let Some(&(red, g)) = seed.get(v) {
                grids.insert((g.wm, g.wn, g.fm));
                reduces.push((red, g));
            }
        }
        // Broadcasts of the component's values read them on their grid.
        for (&b, g) in &factor {
            let Op::Broadcast { src } = k.op(b).op else {
                continue;
            };
            if values.contains(&src) {
                grids.insert((g.wm, g.wn, g.fm));
            }
        }
        if reduces.is_empty() || grids.len() != 1 {
            continue;
        }
        reduces.sort_by_key(|(r, _)| *r);
        out.push(Component {
            grid: reduces[0].1,
            reduces: reduces.into_iter().map(|(r, _)| r).collect(),
            values,
        });
    }
    out
}

/// The components plan `p` keeps in row slices: those whose every reduction carries the
/// plan's `rows` decision.
pub fn kept(k: &Kernel, p: &KernelPlan) -> Vec<Component> {
    candidates(k, p)
        .into_iter()
        .filter(|c| c.reduces.iter().all(|&r| p.rows(r)))
        .collect()
}
