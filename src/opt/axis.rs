//! Contiguity, divisibility and constancy of integer values along the flat element index
//! (Triton's `AxisInfo`), to decide where loads and stores can use vector instructions.
//!
//! For a block value, `contig = c` means the flat index splits into aligned runs of `c`
//! elements whose values step by +1; `cst = c` means aligned runs of `c` equal elements;
//! `div` divides the first value of every run. The flat-index view makes `reshape` and
//! `expand_dims` free; anything not understood is `(1, 1, 1)`.
//!
//! `x % n` keeps runs of `gcd(contig(x), div(n))` only when `x` is non-negative (C's
//! remainder takes the dividend's sign), so the analysis also tracks which integer values
//! are non-negative. Like Triton's, it assumes index arithmetic does not wrap: a wrapped
//! index addresses memory out of bounds with or without vector accesses.

use crate::ir::{BinaryOp, CmpPred, Const, Hint, Kernel, Op, Value, ValueDef};

/// What is known about one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisInfo {
    /// Length of aligned +1 runs.
    pub contig: u64,
    /// Power of two dividing the first value of each run.
    pub div: u64,
    /// Length of aligned constant runs.
    pub cst: u64,
}

const MAX_DIV: u64 = 1 << 30;

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn pow2_div(v: i64) -> u64 {
    if v == 0 {
        MAX_DIV
    } else {
        (1u64 << v.unsigned_abs().trailing_zeros()).min(MAX_DIV)
    }
}

impl AxisInfo {
    const UNKNOWN: AxisInfo = AxisInfo {
        contig: 1,
        div: 1,
        cst: 1,
    };
}

/// Analyses every value of `k` (loop-carried values and op results it does not model are
/// unknown).
pub fn analyse(k: &Kernel) -> Vec<AxisInfo> {
    run(k, false)
}

/// [`analyse`], except that `x % n` keeps `gcd(contig(x), div(n))`-runs whatever the sign
/// of `x` (as Triton's analysis assumes). A negative dividend can break such a run, so code
/// may access a run at once only after checking at run time that its offsets are
/// consecutive; divisibility and constancy are the same as [`analyse`]'s.
pub fn analyse_unchecked(k: &Kernel) -> Vec<AxisInfo> {
    run(k, true)
}

fn run(k: &Kernel, assume_nonneg: bool) -> Vec<AxisInfo> {
    let n = |v: Value| k.ty(v).numel() as u64;
    let mut info = vec![AxisInfo::UNKNOWN; k.values.len()];
    let nonneg = non_negative(k);
    for p in &k.params {
        let mut a = AxisInfo {
            contig: 1,
            div: if k.ty(p.value).ptr { MAX_DIV } else { 1 },
            cst: 1,
        };
        for h in k.hints_of(p.value) {
            if let Hint::MultipleOf(m) = h {
                if let Some(&m) = m.first() {
                    a.div = pow2_div(m);
                }
            }
        }
        info[p.value.index()] = a;
    }
    for id in k.walk() {
        let data = k.op(id);
        if let Op::For { init, body, .. } = &data.op {
            // `p += uniform` in a loop (Triton's `a_ptrs += BLOCK_K * stride`) keeps the
            // initial value's runs; the loop's results keep them too. A value the body
            // yields unchanged (a block pointer's shape and strides) is its initial value.
            let args = &k.region(*body).args;
            for (j, v) in init.iter().enumerate() {
                if invariant_source(k, args[j + 1]).is_some() {
                    info[args[j + 1].index()] = info[v.index()];
                    if let Some(r) = data.results.get(j) {
                        info[r.index()] = info[v.index()];
                    }
                } else if uniform_step(k, *body, args[j + 1], j) {
                    let a = AxisInfo {
                        div: 1,
                        ..info[v.index()]
                    };
                    info[args[j + 1].index()] = a;
                    if let Some(r) = data.results.get(j) {
                        info[r.index()] = a;
                    }
                }
            }
            continue;
        }
        let Some(res) = data.result() else { continue };
        let whole = n(res);
        let get = |v: Value, info: &Vec<AxisInfo>| info[v.index()];
        let r = match &data.op {
            Op::Constant { value } => AxisInfo {
                contig: 1,
                div: match value {
                    Const::Int(v) => pow2_div(*v),
                    Const::Float(_) => 1,
                },
                cst: whole,
            },
            Op::ProgramId { .. } | Op::NumPrograms { .. } => AxisInfo {
                cst: whole,
                ..AxisInfo::UNKNOWN
            },
            Op::Arange { start, .. } => AxisInfo {
                contig: whole,
                div: pow2_div(*start),
                cst: 1,
            },
            Op::Splat { src } => AxisInfo {
                contig: 1,
                div: get(*src, &info).div,
                cst: whole,
            },
            Op::ExpandDims { src, .. } | Op::Reshape { src } => get(*src, &info),
            Op::Broadcast { src } => {
                let (ss, ds) = (&k.ty(*src).shape, &k.ty(res).shape);
                let s = get(*src, &info);
                // Trailing dims the broadcast stretches, and the trailing run it keeps.
                let mut stretched = 1u64;
                let mut kept = 1u64;
                for (a, b) in ss.iter().zip(ds).rev() {
                    if a == b && stretched == 1 {
                        kept *= *a as u64;
                    } else if a != b && kept == 1 {
                        stretched *= *b as u64;
                    } else {
                        break;
                    }
                }
                if s.cst >= n(*src) {
                    AxisInfo { cst: whole, ..s }
                } else if stretched > 1 {
                    AxisInfo {
                        contig: 1,
                        div: s.div,
                        cst: stretched,
                    }
                } else {
                    AxisInfo {
                        contig: s.contig.min(kept),
                        div: s.div,
                        cst: s.cst.min(kept),
                    }
                }
            }
            Op::Binary { kind, lhs, rhs } => {
                let (a, b) = (get(*lhs, &info), get(*rhs, &info));
                match kind {
                    BinaryOp::Add => AxisInfo {
                        contig: gcd(a.contig, b.cst).max(gcd(a.cst, b.contig)),
                        div: gcd(a.div, b.div),
                        cst: gcd(a.cst, b.cst),
                    },
                    BinaryOp::Sub => AxisInfo {
                        contig: gcd(a.contig, b.cst),
                        div: gcd(a.div, b.div),
                        cst: gcd(a.cst, b.cst),
                    },
                    BinaryOp::Mul => AxisInfo {
                        // `x * 1` keeps `x`'s runs (a stride specialised to 1).
                        contig: match (int_value(k, *lhs), int_value(k, *rhs)) {
                            (_, Some(1)) => a.contig,
                            (Some(1), _) => b.contig,
                            _ => 1,
                        },
                        div: (a.div * b.div).min(MAX_DIV),
                        cst: gcd(a.cst, b.cst),
                    },
                    BinaryOp::Rem => AxisInfo {
                        // A non-negative +1 run starting at a multiple of d = div(n) wraps
                        // only at multiples of n, so runs of gcd(contig, d) survive.
                        contig: if b.cst >= n(*rhs) && (assume_nonneg || nonneg[lhs.index()]) {
                            gcd(a.contig, b.div)
                        } else {
                            1
                        },
                        // x - trunc(x / n) * n: a multiple of d when x and n are, either sign.
                        div: gcd(a.div, b.div),
                        cst: gcd(a.cst, b.cst),
                    },
                    _ => AxisInfo {
                        cst: gcd(a.cst, b.cst),
                        ..AxisInfo::UNKNOWN
                    },
                }
            }
            Op::AddPtr { ptr, offset } => {
                let (a, b) = (get(*ptr, &info), get(*offset, &info));
                AxisInfo {
                    contig: gcd(a.contig, b.cst).max(gcd(a.cst, b.contig)),
                    div: gcd(a.div, b.div),
                    cst: gcd(a.cst, b.cst),
                }
            }
            Op::Cmp { pred, lhs, rhs } => {
                let (a, b) = (get(*lhs, &info), get(*rhs, &info));
                // `x < c` over a +1 run that starts at a multiple of d stays constant over
                // runs of gcd(contig, d, div(c)) (Triton's rule for lt/ge against splats).
                let mut cst = gcd(a.cst, b.cst);
                if matches!(pred, CmpPred::Lt | CmpPred::Ge) && b.cst >= whole {
                    cst = cst.max(gcd(gcd(a.contig, a.div), b.div));
                }
                AxisInfo {
                    cst,
                    ..AxisInfo::UNKNOWN
                }
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => {
                let c = get(*cond, &info).cst;
                let (a, b) = (get(*on_true, &info), get(*on_false, &info));
                AxisInfo {
                    cst: gcd(c, gcd(a.cst, b.cst)),
                    ..AxisInfo::UNKNOWN
                }
            }
            // Widening an integer keeps its runs and divisibility (no wrapping, as above):
            // the i64 index arithmetic of block pointers.
            Op::Cast { src } if int_widening(k, *src, res) => get(*src, &info),
            Op::Cast { src } => AxisInfo {
                contig: 1,
                div: 1,
                cst: get(*src, &info).cst,
            },
            _ => AxisInfo::UNKNOWN,
        };
        info[res.index()] = with_hints(k, res, r);
        for extra in data.results.iter().skip(1) {
            info[extra.index()] = AxisInfo::UNKNOWN;
        }
    }
    info
}

/// Whether casting `src` to `res` is an integer conversion that keeps every value (to at
/// least as many bits; `bool` excluded).
fn int_widening(k: &Kernel, src: Value, res: Value) -> bool {
    let (a, b) = (k.ty(src).dtype, k.ty(res).dtype);
    a.is_int() && b.is_int() && a.bits() <= b.bits() && !k.ty(src).ptr
}

/// The value a `for` loop's block argument or result always equals, when the body yields
/// the argument unchanged: the loop's initial value for it.
fn invariant_source(k: &Kernel, v: Value) -> Option<Value> {
    let (op, j, arg) = match k.values[v.index()].def {
        ValueDef::RegionArg(r, i) if i > 0 => {
            let op = k.region(r).parent?;
            (op, i as usize - 1, v)
        }
        ValueDef::OpResult(op, i) => {
            let Op::For { body, .. } = &k.op(op).op else {
                return None;
            };
            (op, i as usize, *k.region(*body).args.get(i as usize + 1)?)
        }
        _ => return None,
    };
    let Op::For { init, body, .. } = &k.op(op).op else {
        return None;
    };
    let last = *k.region(*body).ops.last()?;
    match &k.op(last).op {
        Op::Yield { values } if values.get(j) == Some(&arg) => init.get(j).copied(),
        _ => None,
    }
}

/// The integer a value holds in every element, if it is a constant (or a splat, broadcast,
/// reshape or widening of one, or a loop value that keeps one).
fn int_value(k: &Kernel, v: Value) -> Option<i64> {
    if let Some(src) = invariant_source(k, v) {
        return int_value(k, src);
    }
    match &k.op(k.def_op(v)?).op {
        Op::Constant {
            value: Const::Int(c),
        } => Some(*c),
        Op::Splat { src }
        | Op::Broadcast { src }
        | Op::ExpandDims { src, .. }
        | Op::Reshape { src } => int_value(k, *src),
        Op::Cast { src } if int_widening(k, *src, v) => int_value(k, *src),
        _ => None,
    }
}

/// Which integer values are non-negative: program ids, aranges from a non-negative start,
/// non-negative constants, unsigned values, and sums, products, minima and maxima of
/// non-negative values, their quotients by positive constants and their remainders (assuming, as the contiguity rules do, that
/// index arithmetic does not wrap).
fn non_negative(k: &Kernel) -> Vec<bool> {
    let mut nn = vec![false; k.values.len()];
    for (i, v) in k.values.iter().enumerate() {
        nn[i] = v.ty.dtype.is_unsigned_int() && !v.ty.ptr;
    }
    for id in k.walk() {
        let data = k.op(id);
        let Some(res) = data.result() else { continue };
        if nn[res.index()] {
            continue;
        }
        let get = |v: &Value, nn: &Vec<bool>| nn[v.index()];
        nn[res.index()] = match &data.op {
            Op::Constant {
                value: Const::Int(c),
            } => *c >= 0,
            Op::ProgramId { .. } | Op::NumPrograms { .. } => true,
            Op::Arange { start, .. } => *start >= 0,
            Op::Splat { src }
            | Op::Broadcast { src }
            | Op::ExpandDims { src, .. }
            | Op::Reshape { src } => get(src, &nn),
            Op::Cast { src } if int_widening(k, *src, res) => get(src, &nn),
            Op::Binary { kind, lhs, rhs } => match kind {
                BinaryOp::Add | BinaryOp::Mul | BinaryOp::Min | BinaryOp::Max => {
                    get(lhs, &nn) && get(rhs, &nn)
                }
                // Integer division by 0 gives -1: only positive constant divisors.
                BinaryOp::Div => get(lhs, &nn) && int_value(k, *rhs).is_some_and(|d| d > 0),
                // `x % 0` is `x`; otherwise C's remainder has the dividend's sign.
                BinaryOp::Rem => get(lhs, &nn),
                _ => false,
            },
            _ => false,
        };
    }
    nn
}

/// True when the body yields `arg + u` (or `ptr + u`) in slot `j`, `u` a splat or constant.
fn uniform_step(k: &Kernel, body: crate::ir::RegionId, arg: Value, j: usize) -> bool {
    let Some(&last) = k.region(body).ops.last() else {
        return false;
    };
    let Op::Yield { values } = &k.op(last).op else {
        return false;
    };
    let Some(def) = values.get(j).and_then(|y| k.def_op(*y)) else {
        return false;
    };
    let step = match &k.op(def).op {
        Op::AddPtr { ptr, offset } if *ptr == arg => *offset,
        Op::Binary {
            kind: BinaryOp::Add,
            lhs,
            rhs,
        } if *lhs == arg => *rhs,
        _ => return false,
    };
    k.ty(step).is_scalar()
        || matches!(
            k.def_op(step).map(|o| &k.op(o).op),
            Some(Op::Splat { .. } | Op::Constant { .. })
        )
}

/// Applies `multiple_of` / `max_contiguous` hints on `v` (their innermost value: runs of
/// the flat index follow the innermost dim).
fn with_hints(k: &Kernel, v: Value, mut a: AxisInfo) -> AxisInfo {
    let inner = k.ty(v).shape.last().copied().unwrap_or(1) as u64;
    for h in k.hints_of(v) {
        match h {
            Hint::MultipleOf(m) => {
                if let Some(&m) = m.last() {
                    a.div = a.div.max(pow2_div(m));
                }
            }
            Hint::MaxContiguous(m) => {
                if let Some(&m) = m.last() {
                    let c = 1u64 << (m.max(1) as u64).ilog2();
                    a.contig = a.contig.max(c.min(inner));
                }
            }
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::analyse;
    use crate::dtype::DType::{F32, I32};
    use crate::ir::Op;
    use crate::tl;

    /// A block pointer advanced in a loop carries its shape and strides through it
    /// unchanged, in 64-bit arithmetic: the load inside the loop still sees unit-stride rows
    /// (runs as long as the block's inner dimension).
    #[test]
    fn block_pointer_loads_in_loops_keep_their_rows() {
        let k = tl::build("bp_loop", &Default::default(), |k| {
            let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
            let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
            let p = tl::make_block_ptr(x, (m, n), (n, 1), (0, 0), [8, 16], [1, 0]);
            let (acc, _) = tl::range(0, n, 16).fold((tl::zeros([8, 16], F32), p), |_, (acc, p)| {
                let v = tl::load_block(p, [0, 1], "zero");
                (acc + v, tl::advance(p, (0, 16)))
            });
            tl::store(
                o + tl::arange(0, 8).col() * 16 + tl::arange(0, 16).row(),
                acc,
            );
        })
        .unwrap();
        let info = analyse(&k);
        let ptr = k
            .ops
            .iter()
            .find_map(|d| match &d.op {
                Op::Load { ptr, .. } => Some(*ptr),
                _ => None,
            })
            .unwrap();
        assert_eq!(info[ptr.index()].contig, 16, "{}", k.ir());
    }
}
