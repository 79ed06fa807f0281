//! Shrinking a disagreeing batch: drop programs, stores and ops, simplify shapes, inputs
//! and scalars, keeping every step that still disagrees in the same way.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::ast::*;
use super::case::{Finding, FuzzTarget};
use super::{case_of, Config};
use crate::dtype::DType;
use crate::tl;

/// Dtype and shape of every node of a program.
pub type NodeTypes = Vec<(DType, Vec<usize>)>;

/// Dtype and shape of every node of every program (`None` when the batch does not build).
pub fn node_types(b: &Batch) -> Option<Vec<NodeTypes>> {
    let mut out = Vec::new();
    let built = tl::build("fuzz_types", &BTreeMap::new(), |k| {
        let params = declare(b, k);
        for p in &b.progs {
            let idx = tile_idx(p, &params);
            let mut done = Vec::new();
            let mut tys = Vec::new();
            for n in &p.nodes {
                let t = emit(p, n, &done, &params, &idx);
                tys.push((t.dtype(), t.shape()));
                done.push(t);
            }
            for s in &p.sinks {
                emit_sink(p, s, &done, &params, &idx);
            }
            out.push(tys);
        }
    });
    built.ok().map(|_| out)
}

/// Removes ops no store or atomic needs, then buffers and scalars nothing uses.
pub fn compact(b: &Batch) -> Batch {
    let mut b = b.clone();
    for p in &mut b.progs {
        let mut live = vec![false; p.nodes.len()];
        for s in &p.sinks {
            live[s.node] = true;
        }
        for (i, n) in p.nodes.iter().enumerate() {
            if matches!(n, Node::Atomic { .. }) {
                live[i] = true;
            }
        }
        for i in (0..p.nodes.len()).rev() {
            if live[i] {
                for o in p.nodes[i].operands() {
                    live[o] = true;
                }
            }
        }
        let mut map = vec![usize::MAX; p.nodes.len()];
        let mut nodes = Vec::new();
        for (i, n) in p.nodes.iter().enumerate() {
            if live[i] {
                map[i] = nodes.len();
                let mut n = n.clone();
                n.map_operands(|o| map[o]);
                nodes.push(n);
            }
        }
        p.nodes = nodes;
        for s in &mut p.sinks {
            s.node = map[s.node];
        }
    }
    let (mut ins, mut outs, mut scal) = (
        vec![false; b.inputs.len()],
        vec![false; b.outputs.len()],
        vec![false; b.scalars.len()],
    );
    for p in &b.progs {
        scal[p.mask_by[0]] = true;
        scal[p.mask_by[1]] = true;
        for s in &p.sinks {
            outs[s.out] = true;
        }
        for n in &p.nodes {
            match *n {
                Node::Load { buf, .. } => ins[buf] = true,
                Node::Param { idx } | Node::If { idx, .. } => scal[idx] = true,
                Node::Loop { bounds, .. } => bounds.iter().for_each(|&i| scal[i] = true),
                Node::Atomic { buf, .. } => outs[buf] = true,
                _ => {}
            }
        }
    }
    let renumber = |used: &[bool]| {
        let mut m = vec![usize::MAX; used.len()];
        let mut k = 0;
        for (i, &u) in used.iter().enumerate() {
            if u {
                m[i] = k;
                k += 1;
            }
        }
        m
    };
    let (mi, mo, ms) = (renumber(&ins), renumber(&outs), renumber(&scal));
    for p in &mut b.progs {
        p.mask_by = [ms[p.mask_by[0]], ms[p.mask_by[1]]];
        for s in &mut p.sinks {
            s.out = mo[s.out];
        }
        for n in &mut p.nodes {
            match n {
                Node::Load { buf, .. } => *buf = mi[*buf],
                Node::Param { idx } | Node::If { idx, .. } => *idx = ms[*idx],
                Node::Loop { bounds, .. } => bounds.iter_mut().for_each(|i| *i = ms[*i]),
                Node::Atomic { buf, .. } => *buf = mo[*buf],
                _ => {}
            }
        }
    }
    keep(&mut b.inputs, &ins);
    keep(&mut b.outputs, &outs);
    keep(&mut b.scalars, &scal);
    resize_outputs(&mut b);
    // Inputs only need the elements the programs' tiles reach.
    let mut need = vec![0; b.inputs.len()];
    for p in &b.progs {
        for n in &p.nodes {
            if let Node::Load { buf, .. } = *n {
                need[buf] = need[buf].max(p.tile() * b.grid);
            }
        }
    }
    for (x, n) in b.inputs.iter_mut().zip(need) {
        x.bits.truncate(n);
    }
    b
}

fn keep<T>(v: &mut Vec<T>, used: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        used[i - 1]
    });
}

/// Lays out outputs again after a change of grid or tile: each store's region in order,
/// each atomic's buffer whole.
fn resize_outputs(b: &mut Batch) {
    for o in &mut b.outputs {
        o.len = 0;
    }
    for p in &mut b.progs {
        let tile = p.tile();
        for s in &mut p.sinks {
            let o = &mut b.outputs[s.out];
            s.base = o.len;
            o.len += tile * b.grid;
        }
        for n in &p.nodes {
            if let Node::Atomic { buf, shared, .. } = *n {
                b.outputs[buf].len = if shared { tile } else { tile * b.grid };
            }
        }
    }
}

struct Shrinker<'a> {
    cfg: &'a Config,
    finding: &'a Finding,
    targets: Vec<FuzzTarget>,
    deadline: Instant,
    tries: usize,
}

impl Shrinker<'_> {
    fn fails(&mut self, b: &Batch) -> bool {
        if Instant::now() > self.deadline {
            return false;
        }
        self.tries += 1;
        if node_types(b).is_none() {
            return false;
        }
        let Ok(case) = case_of(b, self.cfg) else {
            return false;
        };
        let o = case.run(&self.targets);
        o.findings.iter().any(|f| f.same_kind(self.finding))
    }

    /// Tries each candidate in turn, keeping the first that still fails; true if one did.
    fn first(&mut self, best: &mut Batch, cands: Vec<Batch>) -> bool {
        for c in cands {
            let c = compact(&c);
            if c != *best && self.fails(&c) {
                *best = c;
                return true;
            }
        }
        false
    }

    fn structure(&self, b: &Batch) -> Vec<Batch> {
        let mut v = Vec::new();
        if b.progs.len() > 1 {
            for i in 0..b.progs.len() {
                let mut c = b.clone();
                c.progs = vec![b.progs[i].clone()];
                v.push(c);
            }
            for i in 0..b.progs.len() {
                let mut c = b.clone();
                c.progs.remove(i);
                v.push(c);
            }
        }
        for (pi, p) in b.progs.iter().enumerate() {
            for si in 0..p.sinks.len() {
                if p.sinks.len() > 1 {
                    let mut c = b.clone();
                    c.progs[pi].sinks.remove(si);
                    v.push(c);
                }
            }
        }
        for g in 1..b.grid {
            let mut c = b.clone();
            c.grid = g;
            resize_outputs(&mut c);
            v.push(c);
        }
        v
    }

    fn ops(&self, b: &Batch) -> Vec<Batch> {
        let mut v = Vec::new();
        let Some(types) = node_types(b) else {
            return v;
        };
        for (pi, p) in b.progs.iter().enumerate() {
            for i in (0..p.nodes.len()).rev() {
                let n = &p.nodes[i];
                // An atomic that nothing reads can go.
                if matches!(n, Node::Atomic { .. }) && !p.sinks.iter().any(|s| s.node == i) {
                    let users = p.nodes.iter().any(|m| m.operands().contains(&i));
                    if !users {
                        let mut c = b.clone();
                        c.progs[pi].nodes[i] = Node::Full {
                            dtype: types[pi][i].0,
                            value: Lit::Int(0),
                            scalar: true,
                        };
                        v.push(c);
                    }
                }
                for o in n.operands() {
                    if types[pi][o] == types[pi][i] {
                        let mut c = b.clone();
                        replace_uses(&mut c.progs[pi], i, o);
                        v.push(c);
                    }
                }
                let (d, ref shape) = types[pi][i];
                let is_const = matches!(n, Node::Full { .. });
                if !is_const && (shape.is_empty() || *shape == p.shape()) {
                    for value in [zero(d), one(d)] {
                        let mut c = b.clone();
                        c.progs[pi].nodes[i] = Node::Full {
                            dtype: d,
                            value,
                            scalar: shape.is_empty(),
                        };
                        v.push(c);
                    }
                }
                match *n {
                    Node::Load {
                        buf, masked: true, ..
                    } => {
                        let mut c = b.clone();
                        c.progs[pi].nodes[i] = Node::Load {
                            buf,
                            masked: false,
                            other: zero(d),
                        };
                        v.push(c);
                    }
                    Node::Full {
                        dtype,
                        value,
                        scalar,
                    } if value != zero(dtype) => {
                        let mut c = b.clone();
                        c.progs[pi].nodes[i] = Node::Full {
                            dtype,
                            value: zero(dtype),
                            scalar,
                        };
                        v.push(c);
                    }
                    _ => {}
                }
            }
            for si in 0..p.sinks.len() {
                if p.sinks[si].masked {
                    let mut c = b.clone();
                    c.progs[pi].sinks[si].masked = false;
                    v.push(c);
                }
            }
        }
        v
    }

    fn shapes(&self, b: &Batch) -> Vec<Batch> {
        let mut v = Vec::new();
        for (pi, p) in b.progs.iter().enumerate() {
            for (r, c) in [(p.r / 2, p.c), (p.r, p.c / 2), (1, p.c), (p.r, 1)] {
                if r >= 1 && c >= 1 && (r, c) != (p.r, p.c) && (p.rank == 2 || r == 1) {
                    let mut x = b.clone();
                    x.progs[pi].r = r;
                    x.progs[pi].c = c;
                    resize_outputs(&mut x);
                    v.push(x);
                }
            }
        }
        if b.num_warps > 1 {
            let mut x = b.clone();
            x.num_warps = 1;
            v.push(x);
        }
        if b.layout.is_some() {
            let mut x = b.clone();
            x.layout = None;
            v.push(x);
        }
        v
    }

    fn data(&self, b: &Batch) -> Vec<Batch> {
        let mut v = Vec::new();
        for (bi, inp) in b.inputs.iter().enumerate() {
            let n = inp.bits.len();
            let mut chunk = n.next_power_of_two() / 2;
            while chunk >= 1 {
                let mut start = 0;
                while start < n {
                    let end = (start + chunk).min(n);
                    if inp.bits[start..end].iter().any(|&x| x != 0) {
                        let mut c = b.clone();
                        c.inputs[bi].bits[start..end]
                            .iter_mut()
                            .for_each(|x| *x = 0);
                        v.push(c);
                    }
                    start = end;
                }
                if chunk < n / 64 {
                    break;
                }
                chunk /= 2;
            }
        }
        for (si, &s) in b.scalars.iter().enumerate() {
            for t in [0, 1, s / 2] {
                if t != s {
                    let mut c = b.clone();
                    c.scalars[si] = t;
                    v.push(c);
                }
            }
        }
        v
    }
}

fn replace_uses(p: &mut Prog, from: usize, to: usize) {
    for n in p.nodes.iter_mut().skip(from + 1) {
        n.map_operands(|o| if o == from { to } else { o });
    }
    for s in &mut p.sinks {
        if s.node == from {
            s.node = to;
        }
    }
}

fn zero(d: DType) -> Lit {
    if d.is_float() {
        Lit::Float(0.0)
    } else if d == DType::Bool {
        Lit::Bool(false)
    } else {
        Lit::Int(0)
    }
}

fn one(d: DType) -> Lit {
    if d.is_float() {
        Lit::Float(1.0)
    } else if d == DType::Bool {
        Lit::Bool(true)
    } else {
        Lit::Int(1)
    }
}

/// Shrinks `b` while it keeps disagreeing like `finding` (same target, same kind), for at
/// most `budget`. Returns the smallest batch found and the number of candidates run.
pub fn shrink(b: &Batch, cfg: &Config, finding: &Finding, budget: Duration) -> (Batch, usize) {
    let mut s = Shrinker {
        cfg,
        finding,
        targets: vec![finding.target()],
        deadline: Instant::now() + budget,
        tries: 0,
    };
    let mut best = compact(b);
    loop {
        if Instant::now() > s.deadline {
            break;
        }
        let c = s.structure(&best);
        if s.first(&mut best, c) {
            continue;
        }
        let c = s.ops(&best);
        if s.first(&mut best, c) {
            continue;
        }
        let c = s.shapes(&best);
        if s.first(&mut best, c) {
            continue;
        }
        let c = s.data(&best);
        if s.first(&mut best, c) {
            continue;
        }
        break;
    }
    (best, s.tries)
}
