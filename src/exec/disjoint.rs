//! Which writable buffers the programs of one launch provably store to disjointly.
//!
//! Programs run in parallel, so by default every access to a writable buffer is atomic
//! (`memory.rs`). When this analysis proves, for one launch (grid and scalar arguments
//! known), that each program's loads and stores of a buffer land in a window of offsets no
//! other program's loads or stores reach, and that nothing in the kernel runs an atomic on
//! that buffer, the buffer's loads and stores can be plain (vectorised, bulk) accesses
//! without a data race: an element one program stores is touched by no other program. That
//! covers updates in place (`x[offs] = f(x[offs])`, what `inout` arguments run).
//!
//! Which argument a pointer points into follows `+` of offsets, the shape ops and `for`
//! loops that carry a pointer into one argument (`a_ptrs += step`); a memory op through a
//! pointer not followed to one argument (loaded, selected, cast from an integer) makes
//! every buffer non-disjoint.
//!
//! Two proofs, the second tried where the first fails:
//!
//! - Affine windows. The offsets come from the integer analysis
//!   ([`crate::opt::axis::analyse_launch`]): every pointer is an argument plus `c0·pid0 +
//!   c1·pid1 + c2·pid2 + x`, with `x` in an interval over all lanes (and loop iterations)
//!   of one program. All loads and stores of the buffer must share one coefficient vector
//!   `c`; their windows are merged into one `[lo, hi]` per program. Taking the grid axes
//!   with more than one program in increasing `|c|`, each `|c_a|` must be at least the span
//!   covered by one program's window plus all smaller axes' programs (a mixed-radix
//!   argument), which makes `pid -> window` injective into pairwise disjoint sets.
//! - Program by program (grids of a few thousand programs): each program's offsets are
//!   evaluated with its program id a constant, exactly per element, as boxes `base + Σ
//!   coef_d · i_d` (a 2-D tile of rows `stride` apart is such a box; its interval hull
//!   would overlap the neighbouring tiles). This follows `//`, `%` and `minimum` of the
//!   program id, which is how Triton's grouped ordering derives `pid_m` and `pid_n`. Boxes
//!   of one shape are compared by their mixed-radix digits: two meet exactly when their
//!   remainders below the lowest coefficient agree and their digit ranges overlap in
//!   every dimension. Accesses whose offsets depend on a loop's induction variable or
//!   carried values are left to the first proof.
//!
//! A program's loads then meet only its own stores, which the same thread made earlier in
//! program order. Masks only remove lanes, so they are ignored (windows and boxes cover
//! masked-off lanes too, so reading a whole block and selecting the active lanes stays
//! inside them).

use crate::dtype::DType;
use crate::ir::{BinaryOp, Kernel, Op, OpId, ParamKind, Value, ValueDef};
use crate::opt::axis::{self, Affine, Form, Launch};

/// The most form evaluations (programs times ops) the per-program proof spends on one
/// buffer; past it, the buffer keeps atomic accesses.
const PER_PROGRAM_BUDGET: usize = 1 << 14;

/// One launch's accesses, per parameter.
struct Accesses {
    /// Per parameter: the windows of its loads and stores (coefficients, spread), and
    /// whether it is stored to; `None` once disproved (an atomic).
    windows: Vec<Option<(Vec<Affine>, bool)>>,
    /// Per parameter: the pointers of its loads and stores.
    ptrs: Vec<Vec<Value>>,
    /// Per parameter: whether an access's offsets are not an affine launch form.
    unknown: Vec<bool>,
    /// A memory op through a pointer the analysis cannot attribute to one argument.
    poisoned: bool,
}

impl Accesses {
    fn record(
        &mut self,
        form: &[Form],
        origin: &[Option<usize>],
        k: &Kernel,
        ptr: Value,
        store: bool,
    ) {
        let param = match form[ptr.index()] {
            Form::Ptr { param, off } => {
                if let Some((w, _)) = &mut self.windows[param] {
                    w.push(off.spread(k.ty(ptr).numel()));
                }
                param
            }
            _ => match origin[ptr.index()] {
                Some(param) => {
                    self.unknown[param] = true;
                    param
                }
                None => {
                    self.poisoned = true;
                    return;
                }
            },
        };
        if let Some((_, stored)) = &mut self.windows[param] {
            *stored |= store;
        }
        self.ptrs[param].push(ptr);
    }

    /// An atomic: the buffer keeps atomic accesses.
    fn atomic(&mut self, origin: &[Option<usize>], ptr: Value) {
        match origin[ptr.index()] {
            Some(param) => self.windows[param] = None,
            None => self.poisoned = true,
        }
    }

    /// Whether the accesses recorded for `param` include a store and lie in windows that are
    /// pairwise disjoint across the programs of `grid`, by the affine forms.
    fn disjoint(&self, param: usize, grid: [usize; 3]) -> bool {
        let Some((ws, true)) = self.windows.get(param).and_then(|w| w.as_ref()) else {
            return false;
        };
        let Some(first) = ws.first() else {
            return false;
        };
        if self.unknown[param] || ws.iter().any(|w| w.pid != first.pid || w.lo > w.hi) {
            return false;
        }
        let lo = ws.iter().map(|w| w.lo).min().unwrap_or(0);
        let hi = ws.iter().map(|w| w.hi).max().unwrap_or(0);
        let mut axes: Vec<(i128, i128)> = (0..3)
            .filter(|&a| grid[a] > 1)
            .map(|a| (first.pid[a].abs(), grid[a] as i128))
            .collect();
        axes.sort();
        let mut span = hi - lo + 1;
        for (c, g) in axes {
            if c < span {
                return false;
            }
            span += c * (g - 1);
        }
        true
    }
}

/// The argument each pointer value points into, following `+` of offsets, the shape ops and
/// `for` loops that carry a pointer into the same argument (`a_ptrs += step`); `None` for
/// pointers from anywhere else (loaded, selected, cast from integers).
fn origins(k: &Kernel, walk: &[OpId]) -> Vec<Option<usize>> {
    let mut origin: Vec<Option<usize>> = vec![None; k.values.len()];
    for (i, p) in k.params.iter().enumerate() {
        if matches!(p.kind, ParamKind::Ptr(_)) {
            origin[p.value.index()] = Some(i);
        }
    }
    // Carried pointers start as their initial value's; a loop whose body yields a pointer
    // into another argument (or an unknown one) loses that carried value, and the walk
    // repeats until nothing changes (each repetition removes one at least).
    let mut lost: Vec<(OpId, usize)> = Vec::new();
    loop {
        let mut changed = false;
        for &id in walk {
            let data = k.op(id);
            match &data.op {
                Op::For { init, body, .. } => {
                    let args = &k.region(*body).args;
                    for (j, v) in init.iter().enumerate() {
                        let o = if lost.contains(&(id, j)) {
                            None
                        } else {
                            origin[v.index()]
                        };
                        if let Some(a) = args.get(j + 1) {
                            origin[a.index()] = o;
                        }
                        if let Some(r) = data.results.get(j) {
                            origin[r.index()] = o;
                        }
                    }
                }
                Op::AddPtr { ptr: src, .. }
                | Op::Splat { src }
                | Op::Broadcast { src }
                | Op::ExpandDims { src, .. }
                | Op::Reshape { src }
                | Op::Permute { src, .. } => {
                    if let Some(r) = data.result() {
                        origin[r.index()] = if k.ty(r).ptr {
                            origin[src.index()]
                        } else {
                            None
                        };
                    }
                }
                _ => {}
            }
        }
        for &id in walk {
            let Op::For { init, body, .. } = &k.op(id).op else {
                continue;
            };
            let Some(Op::Yield { values }) = k.region(*body).ops.last().map(|&y| &k.op(y).op)
            else {
                continue;
            };
            for (j, (v, y)) in init.iter().zip(values).enumerate() {
                let o = origin[v.index()];
                if o.is_some() && origin[y.index()] != o && !lost.contains(&(id, j)) {
                    lost.push((id, j));
                    changed = true;
                }
            }
        }
        if !changed {
            return origin;
        }
    }
}

/// Blocks of higher rank are not followed by the per-program proof.
const MAX_RANK: usize = 4;

/// A value of one program, exactly: the element at index `(i_0, .., i_r)` of its block is
/// `base + Σ coef[d] · i_d` (an integer, or an element offset into argument `param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lattice {
    param: Option<usize>,
    base: i128,
    coef: [i128; MAX_RANK],
}

impl Lattice {
    fn konst(v: i128) -> Lattice {
        Lattice {
            param: None,
            base: v,
            coef: [0; MAX_RANK],
        }
    }

    fn constant(&self) -> Option<i128> {
        (self.param.is_none() && self.coef == [0; MAX_RANK]).then_some(self.base)
    }

    /// The lowest and highest element over a block of `shape`.
    fn range(&self, shape: &[usize]) -> (i128, i128) {
        let (mut lo, mut hi) = (self.base, self.base);
        for (c, &n) in self.coef.iter().zip(shape) {
            let top = c * (n.max(1) as i128 - 1);
            lo += top.min(0);
            hi += top.max(0);
        }
        (lo, hi)
    }
}

/// The lattice of `res` (the result of `data`) in one program, when every element is exact
/// and fits its dtype (signed 32- or 64-bit integers; pointer offsets within 2^47).
fn lattice_of(
    k: &Kernel,
    data: &crate::ir::OpData,
    res: Value,
    pid: [usize; 3],
    lat: &[Option<Lattice>],
) -> Option<Lattice> {
    let ty = k.ty(res);
    let shape = &ty.shape;
    if shape.len() > MAX_RANK {
        return None;
    }
    let get = |v: &Value| lat[v.index()];
    let both = |a: &Value, b: &Value| Some((get(a)?, get(b)?));
    let l = match &data.op {
        Op::ProgramId { axis } => Lattice::konst(pid[(*axis as usize).min(2)] as i128),
        Op::Constant {
            value: crate::ir::Const::Int(v),
        } if !ty.ptr => Lattice::konst(*v as i128),
        Op::Arange { start, .. } => {
            let mut l = Lattice::konst(*start as i128);
            l.coef[0] = 1;
            l
        }
        Op::Splat { src } => get(src).filter(|s| s.coef == [0; MAX_RANK])?,
        Op::Broadcast { src } => {
            let mut s = get(src)?;
            let from = &k.ty(*src).shape;
            if from.len() != shape.len() {
                return None;
            }
            for (d, &n) in from.iter().enumerate() {
                if n == 1 {
                    s.coef[d] = 0;
                }
            }
            s
        }
        Op::ExpandDims { src, axis } => {
            let mut s = get(src)?;
            let axis = *axis as usize;
            if axis >= shape.len() {
                return None;
            }
            for d in (axis + 1..MAX_RANK).rev() {
                s.coef[d] = s.coef[d - 1];
            }
            s.coef[axis] = 0;
            s
        }
        Op::Permute { src, order } => {
            let s = get(src)?;
            let mut r = s;
            for (d, &o) in order.iter().enumerate() {
                r.coef[d] = *s.coef.get(o as usize)?;
            }
            r
        }
        Op::Cast { src } if !ty.ptr => get(src).filter(|s| s.param.is_none())?,
        Op::AddPtr { ptr, offset } => {
            let (p, o) = both(ptr, offset)?;
            if o.param.is_some() {
                return None;
            }
            Lattice {
                param: Some(p.param?),
                base: p.base + o.base,
                coef: std::array::from_fn(|d| p.coef[d] + o.coef[d]),
            }
        }
        Op::Binary { kind, lhs, rhs } => {
            let (a, b) = both(lhs, rhs)?;
            if a.param.is_some() || b.param.is_some() {
                return None;
            }
            match kind {
                BinaryOp::Add | BinaryOp::Sub => {
                    let s = if *kind == BinaryOp::Add { 1 } else { -1 };
                    Lattice {
                        param: None,
                        base: a.base + s * b.base,
                        coef: std::array::from_fn(|d| a.coef[d] + s * b.coef[d]),
                    }
                }
                BinaryOp::Mul => match (a.constant(), b.constant()) {
                    (_, Some(c)) => Lattice {
                        param: None,
                        base: a.base * c,
                        coef: a.coef.map(|x| x * c),
                    },
                    (Some(c), _) => Lattice {
                        param: None,
                        base: b.base * c,
                        coef: b.coef.map(|x| x * c),
                    },
                    _ => return None,
                },
                // As the interpreter divides signed integers: truncating, `x / 0 = -1`,
                // `x % 0 = x`; a block whose elements all lie in one `[q·m, (q+1)·m)`,
                // `m > 0`, divides to `q` and leaves its remainders in place.
                BinaryOp::Div | BinaryOp::Rem => {
                    let m = b.constant()?;
                    let ra = a.range(shape);
                    match a.constant() {
                        Some(x) if m == 0 => {
                            Lattice::konst(if *kind == BinaryOp::Div { -1 } else { x })
                        }
                        Some(x) if *kind == BinaryOp::Div => Lattice::konst(x / m),
                        Some(x) => Lattice::konst(x % m),
                        None if m > 0 && ra.0 >= 0 && ra.0 / m == ra.1 / m => {
                            let q = ra.0 / m;
                            if *kind == BinaryOp::Div {
                                Lattice::konst(q)
                            } else {
                                Lattice {
                                    base: a.base - q * m,
                                    ..a
                                }
                            }
                        }
                        None => return None,
                    }
                }
                BinaryOp::Min | BinaryOp::Max => {
                    let (x, y) = (a.constant()?, b.constant()?);
                    Lattice::konst(if *kind == BinaryOp::Min {
                        x.min(y)
                    } else {
                        x.max(y)
                    })
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    // Every element must be the value the program computes: no wrap-around.
    let (lo, hi) = l.range(shape);
    let (min, max) = match (ty.ptr, ty.dtype) {
        (true, _) => (-(1i128 << 47), (1i128 << 47) - 1),
        (false, DType::I32) => (i32::MIN as i128, i32::MAX as i128),
        (false, DType::I64) => (i64::MIN as i128, i64::MAX as i128),
        _ => return None,
    };
    (lo >= min && hi <= max && l.coef.iter().all(|c| c.abs() <= i64::MAX as i128)).then_some(l)
}

/// The dimensions of an access's box that move (`n > 1`, `coef != 0`): `(coef, n)` with
/// `coef > 0` (a negative coefficient walks the same box from its other end), by
/// increasing coefficient, unused ones `(0, 0)` at the end.
type Dims = [(i128, i128); MAX_RANK];

/// One access of a program as a box of offsets `base + Σ coef[d] · i_d`, `0 <= i_d < n[d]`.
fn boxed(l: &Lattice, shape: &[usize]) -> (i128, Dims, usize) {
    let mut base = l.base;
    let mut dims: Dims = [(0, 0); MAX_RANK];
    let mut rank = 0;
    for (&c, &n) in l.coef.iter().zip(shape) {
        if n > 1 && c != 0 {
            if c < 0 {
                base += c * (n as i128 - 1);
            }
            dims[rank] = (c.abs(), n as i128);
            rank += 1;
        }
    }
    dims[..rank].sort_unstable();
    (base, dims, rank)
}

/// Where a box lies in the mixed-radix digits of its dimensions: its first digit per
/// dimension (highest first) and the remainder below the lowest coefficient, when all of
/// its elements' digits are those plus their indices, i.e. below each coefficient the
/// box's highest element stays below it (no row of the box carries into the next digit).
fn digits(base: i128, dims: &[(i128, i128)]) -> Option<([i128; MAX_RANK], i128)> {
    let mut q = [0i128; MAX_RANK];
    let mut r = base;
    for (d, &(c, _)) in dims.iter().enumerate().rev() {
        q[dims.len() - 1 - d] = r.div_euclid(c);
        r = r.rem_euclid(c);
    }
    let mut top = r;
    for (d, &(c, n)) in dims.iter().enumerate() {
        top += (q[dims.len() - 1 - d] + n - 1) * c;
        if dims.get(d + 1).is_some_and(|&(c1, _)| top >= c1) {
            return None;
        }
    }
    Some((q, r))
}

/// Whether the accesses `ptrs` of argument `param` touch, program by program, sets of
/// offsets of which no two programs' meet. Each program's offsets are evaluated with its
/// program id a constant (what Triton's grouped ordering needs: its `pid_m`, `pid_n` come
/// from `//`, `%` and `minimum` of the program id), each access a box (a block of offsets,
/// exact per element: a 2-D tile of rows `stride` apart is a box, not an interval); boxes
/// of one shape are compared by their digits in the box's mixed radix.
fn disjoint_per_program(
    k: &Kernel,
    l: Launch<'_>,
    walk: &[OpId],
    param: usize,
    ptrs: &[Value],
) -> bool {
    let programs = l.grid.iter().product::<usize>();
    if ptrs.is_empty() {
        return false;
    }
    // The ops the accesses' offsets come from, and which of them depend on the program id.
    let mut needed = vec![false; k.ops.len()];
    let mut seen = vec![false; k.values.len()];
    let mut work: Vec<Value> = ptrs.to_vec();
    while let Some(v) = work.pop() {
        if std::mem::replace(&mut seen[v.index()], true) {
            continue;
        }
        if let Some(ValueDef::OpResult(op, _)) = k.value(v).map(|d| d.def) {
            if !matches!(
                k.op(op).op,
                Op::For { .. } | Op::While { .. } | Op::If { .. }
            ) {
                needed[op.index()] = true;
                k.op(op).op.for_each_operand(|x| work.push(x));
            }
        }
    }
    let ops: Vec<OpId> = walk.iter().copied().filter(|o| needed[o.index()]).collect();
    let mut varies = vec![false; k.values.len()];
    for &o in &ops {
        let data = k.op(o);
        let mut v = matches!(data.op, Op::ProgramId { .. });
        data.op.for_each_operand(|x| v |= varies[x.index()]);
        if let Some(r) = data.result() {
            varies[r.index()] = v;
        }
    }
    let (fixed, per): (Vec<OpId>, Vec<OpId>) = ops
        .iter()
        .partition(|&&o| k.op(o).result().is_some_and(|r| !varies[r.index()]));
    if programs.saturating_mul(per.len().max(1)) > PER_PROGRAM_BUDGET {
        return false;
    }
    let mut lat: Vec<Option<Lattice>> = vec![None; k.values.len()];
    for (i, p) in k.params.iter().enumerate() {
        lat[p.value.index()] = match p.kind {
            ParamKind::Ptr(_) => Some(Lattice {
                param: Some(i),
                ..Lattice::konst(0)
            }),
            ParamKind::Scalar(DType::I32 | DType::I64) => l
                .ints
                .get(i)
                .copied()
                .flatten()
                .map(|x| Lattice::konst(x as i128)),
            ParamKind::Scalar(_) => None,
        };
    }
    let eval = |ops: &[OpId], pid: [usize; 3], lat: &mut Vec<Option<Lattice>>| {
        for &o in ops {
            let data = k.op(o);
            if let Some(r) = data.result() {
                lat[r.index()] = lattice_of(k, data, r, pid, lat);
            }
        }
    };
    eval(&fixed, [0; 3], &mut lat);
    // Every access's box, tagged with its program; all must have one shape.
    let mut shape: Option<(Dims, usize)> = None;
    let mut boxes: Vec<(i128, [i128; MAX_RANK], usize)> = Vec::with_capacity(programs * ptrs.len());
    for p in 0..programs {
        let pid = [
            p % l.grid[0],
            p / l.grid[0] % l.grid[1],
            p / (l.grid[0] * l.grid[1]),
        ];
        eval(&per, pid, &mut lat);
        for &ptr in ptrs {
            let Some(x) = lat[ptr.index()].filter(|x| x.param == Some(param)) else {
                return false;
            };
            let (base, dims, rank) = boxed(&x, &k.ty(ptr).shape);
            if *shape.get_or_insert((dims, rank)) != (dims, rank) {
                return false;
            }
            let Some((q, r)) = digits(base, &dims[..rank]) else {
                return false;
            };
            boxes.push((r, q, p));
        }
    }
    let Some((dims, rank)) = shape else {
        return false;
    };
    // Two boxes of one shape meet when their remainders agree and their digit ranges
    // overlap in every dimension: sorted by remainder and digits (highest first), a box
    // can meet only the boxes after it whose highest digit is less than its extent away.
    let n = |d: usize| dims[rank - 1 - d].1;
    boxes.sort_unstable();
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            if b.0 != a.0 || (rank > 0 && b.1[0] - a.1[0] >= n(0)) {
                break;
            }
            if b.2 != a.2 && (1..rank).all(|d| (b.1[d] - a.1[d]).abs() < n(d)) {
                return false;
            }
        }
    }
    true
}

/// For each parameter of `k`: true when it is a pointer that this launch (grid, integer
/// scalar arguments `ints`, `None` where unknown or not an integer) stores to and runs no
/// atomic on, and whose every element that one program stores no other program loads or
/// stores.
pub(crate) fn disjoint_stores(k: &Kernel, grid: [usize; 3], ints: &[Option<i64>]) -> Vec<bool> {
    let launch = Launch { grid, ints };
    let form = axis::analyse_launch(k, launch).form;
    let walk = k.walk();
    let origin = origins(k, &walk);
    let mut a = Accesses {
        windows: k
            .params
            .iter()
            .map(|p| matches!(p.kind, ParamKind::Ptr(_)).then(|| (Vec::new(), false)))
            .collect(),
        ptrs: vec![Vec::new(); k.params.len()],
        unknown: vec![false; k.params.len()],
        poisoned: false,
    };
    for &id in &walk {
        match &k.op(id).op {
            Op::Load { ptr, .. } => a.record(&form, &origin, k, *ptr, false),
            Op::Store { ptr, .. } => a.record(&form, &origin, k, *ptr, true),
            Op::AtomicRmw { ptr, .. } | Op::AtomicCas { ptr, .. } => a.atomic(&origin, *ptr),
            _ => {}
        }
    }
    (0..k.params.len())
        .map(|i| {
            !a.poisoned
                && (a.disjoint(i, grid)
                    || (matches!(a.windows[i], Some((_, true)))
                        && disjoint_per_program(k, launch, &walk, i, &a.ptrs[i])))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::disjoint_stores;
    use crate::dtype::DType::{F32, I32};
    use crate::ir::Kernel;
    use crate::tl::{self, *};

    fn kernel(f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
        match tl::build("k", &BTreeMap::new(), f) {
            Ok(k) => k,
            Err(e) => panic!("build failed: {e}"),
        }
    }

    /// `(x, out, n)`: `out[pid*step + arange(0, width)] = x[...]`, masked by `n`.
    fn windowed(step: i64, width: i64) -> Kernel {
        kernel(|k| {
            let (x, out) = (k.ptr(F32, "x"), k.ptr(F32, "out"));
            let n = k.scalar(I32, "n");
            let offs = tl::program_id(0) * step + tl::arange(0, width);
            let m = offs.lt(n);
            tl::store(out + offs, tl::load(x + offs).mask(m)).mask(m);
        })
    }

    #[test]
    fn blocks_of_program_id_are_disjoint() {
        // Vector add's pattern, ragged tail included (masks only remove lanes).
        let k = windowed(64, 64);
        assert_eq!(
            disjoint_stores(&k, [17, 1, 1], &[None, None, Some(1000)]),
            [false, true, false]
        );
        // Windows narrower than the step leave gaps: still disjoint.
        let k = windowed(64, 32);
        assert!(disjoint_stores(&k, [17, 1, 1], &[None, None, Some(9)])[1]);
    }

    #[test]
    fn plain_stores_keep_masked_tails_and_bounds_checks() {
        use crate::exec::{execute, ExecArg};
        let k = windowed(64, 64);
        let n = 1000usize;
        assert!(disjoint_stores(&k, [16, 1, 1], &[None, None, Some(n as i64)])[1]);
        let x: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5 - 7.0).collect();
        let mut out = vec![f32::NAN; 1024];
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_ne_bytes()).collect();
        // SAFETY (test): viewing an f32 buffer as bytes.
        let ob = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, 4096) };
        execute(
            &k,
            [16, 1, 1],
            &mut [
                ExecArg::Buffer(&xb),
                ExecArg::BufferMut(ob),
                ExecArg::Int(n as i64),
            ],
        )
        .unwrap();
        assert!(out[..n].iter().zip(&x).all(|(o, x)| o == x));
        assert!(
            out[n..].iter().all(|o| o.is_nan()),
            "masked-off lanes untouched"
        );
        // A plain buffer too short for the stores is still an error, not a write past it.
        let mut short = vec![0f32; 900];
        // SAFETY (test): as above.
        let sb = unsafe { std::slice::from_raw_parts_mut(short.as_mut_ptr() as *mut u8, 3600) };
        let r = execute(
            &k,
            [16, 1, 1],
            &mut [
                ExecArg::Buffer(&xb),
                ExecArg::BufferMut(sb),
                ExecArg::Int(n as i64),
            ],
        );
        let msg = format!("{:?}", r.unwrap_err());
        assert!(msg.contains("store") && msg.contains("offset"), "{msg}");
    }

    #[test]
    fn overlapping_or_shared_offsets_are_not_disjoint() {
        // Overlapping windows.
        let k = windowed(32, 64);
        assert!(!disjoint_stores(&k, [4, 1, 1], &[None, None, Some(256)])[1]);
        // One program alone cannot race with anyone.
        assert!(disjoint_stores(&k, [1, 1, 1], &[None, None, Some(256)])[1]);
        // Every program stores to offset 0.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            tl::store(out, 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [2, 1, 1], &[None]), [false]);
        assert_eq!(disjoint_stores(&k, [1, 1, 1], &[None]), [true]);
        // Offsets that do not depend on the program.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            tl::store(out + tl::arange(0, 16), 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [3, 1, 1], &[None]), [false]);
        // The program id on an axis the offsets ignore.
        let k = windowed(64, 64);
        assert!(!disjoint_stores(&k, [4, 2, 1], &[None, None, Some(256)])[1]);
    }

    #[test]
    fn two_dimensional_grids_need_mixed_radix_strides() {
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            let s1 = k.scalar(I32, "s1");
            let offs = tl::program_id(1) * s1 + tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + offs, 1.0f32);
        });
        // Axis 0 covers 4 * 16 = 64 elements: a row stride of 64 is disjoint, 48 is not.
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, Some(64)]),
            [true, false]
        );
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, Some(48)]),
            [false, false]
        );
        // Negative strides walk backwards, still disjoint.
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, Some(-64)]),
            [true, false]
        );
        // An unknown stride proves nothing.
        assert_eq!(
            disjoint_stores(&k, [4, 3, 1], &[None, None]),
            [false, false]
        );
    }

    #[test]
    fn a_program_may_read_what_it_alone_stores() {
        // An update in place: each program reads and writes its own block, ragged tail
        // masked.
        let k = kernel(|k| {
            let x = k.ptr(F32, "x");
            let n = k.scalar(I32, "n");
            let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
            let m = offs.lt(n);
            tl::store(x + offs, tl::load(x + offs).mask(m) * 2.0f32).mask(m);
        });
        assert_eq!(
            disjoint_stores(&k, [16, 1, 1], &[None, Some(1000)]),
            [true, false]
        );
        // Rows updated in a loop over columns (a normalisation in place): the reads and
        // writes of one row stay inside it when rows are at least a loop's reach apart.
        let k = kernel(|k| {
            let x = k.ptr(F32, "x");
            let (stride, n) = (k.scalar(I32, "stride"), k.scalar(I32, "n"));
            let row = x + tl::program_id(0) * stride;
            let total = tl::range(0, n, 32).fold(tl::zeros(&[32usize][..], F32), |off, acc| {
                let cols = off + tl::arange(0, 32);
                acc + tl::load(row + cols).mask(cols.lt(n))
            });
            let s = tl::sum(total, 0);
            tl::range(0, n, 32).for_each(|off| {
                let cols = off + tl::arange(0, 32);
                let v = tl::load(row + cols).mask(cols.lt(n));
                tl::store(row + cols, v / s).mask(cols.lt(n));
            });
        });
        let run = |stride, n| disjoint_stores(&k, [8, 1, 1], &[None, Some(stride), Some(n)])[0];
        assert!(run(96, 96));
        assert!(run(100, 64));
        assert!(!run(64, 96));
    }

    #[test]
    fn reading_what_another_program_stores_keeps_atomics() {
        // Program i loads the block program i + 1 stores.
        let shifted = |by: i64| {
            kernel(move |k| {
                let x = k.ptr(F32, "x");
                let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
                tl::store(x + offs, tl::load(x + offs + by) + 1.0f32);
            })
        };
        assert_eq!(disjoint_stores(&shifted(64), [4, 1, 1], &[None]), [false]);
        // One element of the neighbour's block, or of the previous one, is enough.
        assert_eq!(disjoint_stores(&shifted(1), [4, 1, 1], &[None]), [false]);
        assert_eq!(disjoint_stores(&shifted(-1), [4, 1, 1], &[None]), [false]);
        // A single program has no one to race with.
        assert_eq!(disjoint_stores(&shifted(64), [1, 1, 1], &[None]), [true]);
        // Every program reads element 0, which program 0 stores.
        let k = kernel(|k| {
            let x = k.ptr(F32, "x");
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(x + offs, tl::load(x) + 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None]), [false]);
        // Loads through a data-dependent offset.
        let k = kernel(|k| {
            let (idx, x) = (k.ptr(I32, "idx"), k.ptr(F32, "x"));
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(x + offs, tl::load(x + tl::load(idx + offs)));
        });
        assert_eq!(
            disjoint_stores(&k, [4, 1, 1], &[None, None]),
            [false, false]
        );
        // A buffer that is only read is not reported (nothing to make plain), and reading
        // another argument anywhere does not matter.
        let k = kernel(|k| {
            let (y, x) = (k.ptr(F32, "y"), k.ptr(F32, "x"));
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(x + offs, tl::load(y + offs + 5) + tl::load(x + offs));
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None, None]), [false, true]);
    }

    /// What the executors do with the answer: a buffer another program reads stays atomic,
    /// a buffer each program updates alone becomes plain.
    #[test]
    fn binding_keeps_atomics_where_programs_share_elements() {
        use crate::exec::{bind, ExecArg};
        let kernel_by = |by: i64| {
            kernel(move |k| {
                let x = k.ptr(F32, "x");
                let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
                let m = (offs + by).lt(256);
                tl::store(x + offs, tl::load(x + offs + by).mask(m) * 2.0f32);
            })
        };
        for (by, plain) in [(64, false), (0, true)] {
            let mut buf = vec![0u8; 256 * 4];
            let k = kernel_by(by);
            let mut args = [ExecArg::BufferMut(&mut buf)];
            let b = bind(&k, [4, 1, 1], &mut args).unwrap();
            let m = b.mems[0].as_ref().unwrap();
            assert_eq!(m.is_plain(), plain, "loads shifted by {by}");
        }
    }

    #[test]
    fn atomics_and_unknown_pointers_disable_it() {
        // An atomic on the output.
        let k = kernel(|k| {
            let out = k.ptr(F32, "out");
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + offs, 1.0f32);
            atomic_add(out + offs, 1.0f32);
        });
        assert_eq!(disjoint_stores(&k, [4, 1, 1], &[None]), [false]);
        // Data-dependent offsets.
        let k = kernel(|k| {
            let (idx, out) = (k.ptr(I32, "idx"), k.ptr(F32, "out"));
            let offs = tl::program_id(0) * 16 + tl::arange(0, 16);
            tl::store(out + tl::load(idx + offs), 1.0f32);
        });
        assert_eq!(
            disjoint_stores(&k, [4, 1, 1], &[None, None]),
            [false, false]
        );
        // A loop-carried pointer's offsets are not followed: its buffer keeps atomics, and
        // the pointer stays inside it, so the other buffer is still proven.
        let carried = |switch: bool| {
            kernel(move |k| {
                let (a, out) = (k.ptr(F32, "a"), k.ptr(F32, "out"));
                let offs = tl::program_id(0) * 64 + tl::arange(0, 16);
                tl::store(a + offs, 1.0f32);
                tl::range(0, 4, 1).fold(out + offs, |_, p| {
                    tl::store(p, 2.0f32);
                    if switch {
                        a + offs
                    } else {
                        p + 16
                    }
                });
            })
        };
        assert_eq!(
            disjoint_stores(&carried(false), [4, 1, 1], &[None, None]),
            [true, false]
        );
        // A loop that carries a pointer into `out` in and one into `a` out: the carried
        // pointer may point into either, which poisons every buffer.
        assert_eq!(
            disjoint_stores(&carried(true), [4, 1, 1], &[None, None]),
            [false, false]
        );
    }

    /// Triton's tutorial matmul (grouped ordering: `pid_m`, `pid_n` from `//`, `%` and
    /// `minimum` of the program id; A's and B's pointer blocks carried by the K loop);
    /// `swizzle` replaces `pid_n`'s `//` by a `%` that maps several programs to one block.
    fn grouped_matmul(swizzle: bool) -> Kernel {
        kernel(move |k| {
            let (a, b, c) = (k.ptr(F32, "a"), k.ptr(F32, "b"), k.ptr(F32, "c"));
            let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
            let (bm, bn, bk, group) = (16, 16, 16, 4);
            let pid = tl::program_id(0);
            let num_pid_m = tl::cdiv(m, bm);
            let num_pid_n = tl::cdiv(n, bn);
            let num_pid_in_group = num_pid_n * group;
            let first_pid_m = tl::floordiv(pid, num_pid_in_group) * group;
            let group_size_m = tl::minimum(num_pid_m - first_pid_m, group);
            let pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m;
            let pid_n = if swizzle {
                (pid % num_pid_in_group) % 2
            } else {
                tl::floordiv(pid % num_pid_in_group, group_size_m)
            };
            let offs_am = (pid_m * bm + tl::arange(0, bm)) % m;
            let offs_bn = (pid_n * bn + tl::arange(0, bn)) % n;
            let offs_k = tl::arange(0, bk);
            let a_ptrs = a + (offs_am.col() * kk + offs_k.row());
            let b_ptrs = b + (offs_k.col() * n + offs_bn.row());
            let acc = tl::zeros([bm, bn], F32);
            let (acc, _, _): (Tensor, Tensor, Tensor) = tl::range(0, tl::cdiv(kk, bk), 1).fold(
                (acc, a_ptrs, b_ptrs),
                |i, (acc, pa, pb)| {
                    let left = kk - i * bk;
                    let x = tl::load(pa).mask(offs_k.row().lt(left)).other(0.0f32);
                    let y = tl::load(pb).mask(offs_k.col().lt(left)).other(0.0f32);
                    (tl::dot(x, y, acc), pa + bk, pb + n * bk)
                },
            );
            let offs_cm = pid_m * bm + tl::arange(0, bm);
            let offs_cn = pid_n * bn + tl::arange(0, bn);
            let mask = offs_cm.col().lt(m) & offs_cn.row().lt(n);
            tl::store(c + (offs_cm.col() * n + offs_cn.row()), acc).mask(mask);
        })
    }

    #[test]
    fn grouped_orderings_are_checked_program_by_program() {
        let k = grouped_matmul(false);
        let run = |k: &Kernel, (m, n, kk): (i64, i64, i64)| {
            let programs = (m as usize).div_ceil(16) * (n as usize).div_ceil(16);
            disjoint_stores(
                k,
                [programs, 1, 1],
                &[None, None, None, Some(m), Some(n), Some(kk)],
            )
        };
        // The offsets of C each program's store reaches, masked lanes included (what the
        // proof reasons about), by the kernel's arithmetic.
        let overlap = |(m, n): (i64, i64)| {
            let (npm, npn) = ((m + 15) / 16, (n + 15) / 16);
            let mut owner = std::collections::HashMap::new();
            for pid in 0..npm * npn {
                let first = pid / (npn * 4) * 4;
                let gsz = (npm - first).min(4);
                let (pm, pn) = (first + pid % (npn * 4) % gsz, pid % (npn * 4) / gsz);
                for i in 0..16 {
                    for j in 0..16 {
                        let off = (pm * 16 + i) * n + pn * 16 + j;
                        if *owner.entry(off).or_insert(pid) != pid {
                            return true;
                        }
                    }
                }
            }
            false
        };
        // Square, ragged M and K (the last group has fewer rows of blocks), one row or one
        // column of blocks: proven.
        for size in [(256, 256, 256), (333, 256, 190), (16, 96, 7), (100, 16, 30)] {
            assert!(!overlap((size.0, size.1)), "{size:?}");
            assert_eq!(
                run(&k, size),
                [false, false, true, false, false, false],
                "{size:?}"
            );
        }
        // A ragged N: the last column of blocks reaches into the next rows of C with lanes
        // its mask turns off; masks are not analysed, so C keeps atomics.
        for size in [(333, 271, 190), (16, 100, 7)] {
            assert!(overlap((size.0, size.1)), "{size:?}");
            assert_eq!(run(&k, size), [false; 6], "{size:?}");
        }
        // Several programs store the same block of C.
        assert_eq!(
            run(&grouped_matmul(true), (256, 256, 256)),
            [false, false, false, false, false, false]
        );
        // The launch does not give N: `pid_n` is unknown.
        assert!(
            !disjoint_stores(
                &k,
                [16, 1, 1],
                &[None, None, None, Some(64), None, Some(64)]
            )[2]
        );
    }

    #[test]
    fn offsets_that_could_wrap_are_unknown() {
        let k = windowed(1 << 30, 64);
        // pid * 2^30 wraps i32 from the third program on.
        assert!(!disjoint_stores(&k, [3, 1, 1], &[None, None, Some(0)])[1]);
        assert!(disjoint_stores(&k, [2, 1, 1], &[None, None, Some(0)])[1]);
    }

    #[test]
    fn loops_over_columns_use_the_last_step() {
        // layer_norm's store loop: `for off in range(0, n, B): store(y + row*stride + off + arange(B))`.
        let k = kernel(|k| {
            let y = k.ptr(F32, "y");
            let (stride, n) = (k.scalar(I32, "stride"), k.scalar(I32, "n"));
            let row = y + tl::program_id(0) * stride;
            tl::range(0, n, 32).for_each(|off| {
                let cols = off + tl::arange(0, 32);
                tl::store(row + cols, 1.0f32).mask(cols.lt(n));
            });
        });
        let run = |stride, n| disjoint_stores(&k, [8, 1, 1], &[None, Some(stride), Some(n)])[0];
        assert!(run(96, 96));
        assert!(run(100, 64));
        // A ragged row: the last block's masked-off lanes reach the next row; masks are not
        // analysed, so this is (conservatively) not disjoint.
        assert!(!run(90, 90));
        assert!(!run(64, 96));
    }
}
