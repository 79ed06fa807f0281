//! The integer analysis of kernel IR: what is known about every integer and pointer value,
//! for the printers' vector accesses (`opt::plan`, `codegen`), the interpreter's closed
//! forms of index arithmetic (`exec::lazy`) and the proof that programs access a buffer
//! disjointly (`exec::disjoint`). One walk over the kernel derives three kinds of facts:
//!
//! - [`AxisInfo`] (Triton's `AxisInfo`), true for every launch: contiguity, divisibility and
//!   constancy along the flat element index, to decide where loads and stores can use vector
//!   instructions. `contig = c` means the flat index splits into aligned runs of `c`
//!   elements whose values step by +1; `cst = c` means aligned runs of `c` equal elements;
//!   `div` divides the first value of every run. The flat-index view makes `reshape` and
//!   `expand_dims` free; anything not understood is `(1, 1, 1)`.
//! - Non-negativity: `x % n` keeps runs of `gcd(contig(x), div(n))` only when `x` is
//!   non-negative (C's remainder takes the dividend's sign). Like Triton's, these two
//!   assume index arithmetic does not wrap: a wrapped index addresses memory out of bounds
//!   with or without vector accesses.
//! - [`Form`], for one launch whose grid and integer scalar arguments are known
//!   ([`analyse_launch`]): the value as an exact [`Affine`] function of the program id and
//!   the lane, plus a spread no formula tracks (a loop's induction variable, a product of
//!   ranges), and for pointers the argument they point into. These forms model exact
//!   arithmetic: a value whose range over the whole grid could wrap its dtype (or a pointer
//!   offset that could wrap the executors' 48-bit packed offset) is unknown. Only `+`, `-`,
//!   multiplication by a constant (or of two program-independent values), `arange`,
//!   constants, integer scalar arguments, `program_id`, `num_programs`, `for` induction
//!   variables, widening and narrowing integer casts and shape-only ops are modelled.

use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpPred, Const, Hint, Kernel, Op, OpData, ParamKind, Value, ValueDef};

/// What is known about one value along its flat element index, for every launch.
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

/// An integer over the programs of a launch and the lanes of a block:
/// `pid · pid_coef + lane · i + x` for program `pid` and flat element index `i`, with `x`
/// somewhere in `[lo, hi]`. Arithmetic on it is exact (`i128`; the values it is built from
/// are checked to fit 64 bits, see [`Affine::fits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Affine {
    /// Coefficient of each program-id axis.
    pub pid: [i128; 3],
    /// Coefficient of the flat element index.
    pub lane: i128,
    /// Lowest value of the program- and lane-independent part.
    pub lo: i128,
    /// Highest value of the program- and lane-independent part.
    pub hi: i128,
}

impl Affine {
    /// The constant `v`.
    pub const fn konst(v: i128) -> Affine {
        Affine {
            pid: [0; 3],
            lane: 0,
            lo: v,
            hi: v,
        }
    }

    /// Lane `i` holds `base + stride · i`, in every program.
    pub const fn lanes(base: i64, stride: i64) -> Affine {
        Affine {
            pid: [0; 3],
            lane: stride as i128,
            lo: base as i128,
            hi: base as i128,
        }
    }

    /// `(base, stride)` when the value is exactly `base + stride · i` in every program.
    pub fn exact_lanes(&self) -> Option<(i128, i128)> {
        (self.pid == [0; 3] && self.lo == self.hi).then_some((self.lo, self.lane))
    }

    /// The value when it is one constant everywhere.
    pub fn constant(&self) -> Option<i128> {
        self.exact_lanes().filter(|&(_, s)| s == 0).map(|(b, _)| b)
    }

    /// True when no program id enters the value.
    pub fn pid_free(&self) -> bool {
        self.pid == [0; 3]
    }

    /// The same values over lanes `0..n`, with the lane term folded into the spread (for a
    /// value whose elements move to other flat indices: broadcasts, permutes, splats).
    pub fn spread(self, n: usize) -> Affine {
        let top = self.lane * (n.max(1) as i128 - 1);
        Affine {
            lane: 0,
            lo: self.lo + top.min(0),
            hi: self.hi + top.max(0),
            ..self
        }
    }

    /// The lowest and highest value over every program of `grid` and lanes `0..n`.
    pub fn range(&self, grid: [usize; 3], n: usize) -> (i128, i128) {
        let s = self.spread(n);
        let (mut lo, mut hi) = (s.lo, s.hi);
        for (c, g) in self.pid.iter().zip(grid) {
            let top = c * (g.max(1) as i128 - 1);
            lo += top.min(0);
            hi += top.max(0);
        }
        (lo, hi)
    }

    /// Whether every value over `grid` and lanes `0..n`, and the lane coefficient, fit `d`
    /// (`i32` or `i64`; other dtypes never do). Program-id coefficients must fit 64 bits,
    /// which keeps every product of two checked forms inside `i128`.
    pub fn fits(&self, d: DType, grid: [usize; 3], n: usize) -> bool {
        let Some((min, max)) = int_bounds(d) else {
            return false;
        };
        let ok = |x: i128| x >= min && x <= max;
        let (lo, hi) = self.range(grid, n);
        n > 0
            && self.lo <= self.hi
            && self.pid.iter().all(|c| c.abs() <= i64::MAX as i128)
            && ok(self.lane)
            && ok(lo)
            && ok(hi)
    }

    /// `self + sign · b` (`sign` is 1 or -1).
    pub fn add(self, b: Affine, sign: i128) -> Affine {
        let (blo, bhi) = if sign > 0 {
            (b.lo, b.hi)
        } else {
            (-b.hi, -b.lo)
        };
        Affine {
            pid: [0, 1, 2].map(|a| self.pid[a] + sign * b.pid[a]),
            lane: self.lane + sign * b.lane,
            lo: self.lo + blo,
            hi: self.hi + bhi,
        }
    }

    /// `self · k`.
    fn scale(self, k: i128) -> Affine {
        Affine {
            pid: self.pid.map(|c| c * k),
            lane: self.lane * k,
            lo: (self.lo * k).min(self.hi * k),
            hi: (self.lo * k).max(self.hi * k),
        }
    }

    /// `self · b` over lanes `0..n`: exact when one side is a constant; a range when both
    /// are program-independent; otherwise not affine.
    pub fn mul(self, b: Affine, n: usize) -> Option<Affine> {
        if let Some(k) = b.constant() {
            return Some(self.scale(k));
        }
        if let Some(k) = self.constant() {
            return Some(b.scale(k));
        }
        if !(self.pid_free() && b.pid_free()) {
            return None;
        }
        let (a, b) = (self.spread(n), b.spread(n));
        let p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi];
        Some(Affine {
            lo: *p.iter().min()?,
            hi: *p.iter().max()?,
            ..Affine::konst(0)
        })
    }

    /// `self kind b` over lanes `0..n` for the ops the forms model (`+`, `-`, `*`).
    pub fn binary(self, kind: BinaryOp, b: Affine, n: usize) -> Option<Affine> {
        match kind {
            BinaryOp::Add => Some(self.add(b, 1)),
            BinaryOp::Sub => Some(self.add(b, -1)),
            BinaryOp::Mul => self.mul(b, n),
            _ => None,
        }
    }
}

/// The range of the integer dtypes the launch forms model (signed: comparisons and the lack
/// of wrap-around are then plain integer facts).
fn int_bounds(d: DType) -> Option<(i128, i128)> {
    match d {
        DType::I32 => Some((i32::MIN as i128, i32::MAX as i128)),
        DType::I64 => Some((i64::MIN as i128, i64::MAX as i128)),
        _ => None,
    }
}

/// The lanes `i < n` where `a pred b` holds, when they are a prefix `0..k`: `Some(k)`. Both
/// operands must be exact lane formulas ([`Affine::exact_lanes`]); `==` and `!=` are not
/// modelled.
pub fn true_prefix(pred: CmpPred, a: Affine, b: Affine, n: usize) -> Option<usize> {
    // The difference `a - b = d0 + ds * i`, exact.
    let (d0, ds) = a.add(b, -1).exact_lanes()?;
    // Every supported predicate as `c0 + cs * i < 0`.
    let (c0, cs) = match pred {
        CmpPred::Lt => (d0, ds),
        CmpPred::Le => (d0 - 1, ds),
        CmpPred::Gt => (-d0, -ds),
        CmpPred::Ge => (-d0 - 1, -ds),
        CmpPred::Eq | CmpPred::Ne => return None,
    };
    // Non-decreasing in `i`: the true lanes are a prefix.
    if cs < 0 {
        return None;
    }
    let k = if c0 >= 0 {
        0
    } else if cs == 0 {
        n as i128
    } else {
        // Lanes with i < -c0 / cs, i.e. the first ceil(-c0 / cs).
        (-c0 + cs - 1) / cs
    };
    Some(k.clamp(0, n as i128) as usize)
}

/// Largest magnitude a packed pointer offset (48 bits, sign-extended) holds without
/// wrapping.
const PTR_OFF_MAX: i128 = (1 << 47) - 1;

/// A value over every program and lane of one launch ([`analyse_launch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Not modelled.
    Unknown,
    /// An integer; every value it takes in the launch fits its dtype.
    Int(Affine),
    /// A pointer into argument `param` (a parameter index) at element offsets `off`.
    Ptr {
        /// The parameter the pointer points into.
        param: usize,
        /// Element offsets from the argument's start.
        off: Affine,
    },
}

/// What one launch tells the analysis beyond the kernel.
#[derive(Clone, Copy, Debug)]
pub struct Launch<'a> {
    /// Programs per axis.
    pub grid: [usize; 3],
    /// Per parameter: the value of an integer scalar argument (`None`: unknown or not one).
    pub ints: &'a [Option<i64>],
}

/// Every fact the walk derives, per value.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// Contiguity, divisibility and constancy along the flat index.
    pub axis: Vec<AxisInfo>,
    /// Whether the value is a non-negative integer (assuming no wrap-around).
    pub nonneg: Vec<bool>,
    /// The value over the launch (all [`Form::Unknown`] without one).
    pub form: Vec<Form>,
}

/// Analyses every value of `k` (loop-carried values and op results it does not model are
/// unknown).
pub fn analyse(k: &Kernel) -> Vec<AxisInfo> {
    run(k, false, None).axis
}

/// [`analyse`], except that `x % n` keeps `gcd(contig(x), div(n))`-runs whatever the sign
/// of `x` (as Triton's analysis assumes). A negative dividend can break such a run, so code
/// may access a run at once only after checking at run time that its offsets are
/// consecutive; divisibility and constancy are the same as [`analyse`]'s.
pub fn analyse_unchecked(k: &Kernel) -> Vec<AxisInfo> {
    run(k, true, None).axis
}

/// Every fact about `k`, with the [`Form`] of each value over the programs of `launch`.
pub fn analyse_launch(k: &Kernel, launch: Launch<'_>) -> Analysis {
    run(k, false, Some(launch))
}

fn run(k: &Kernel, assume_nonneg: bool, launch: Option<Launch<'_>>) -> Analysis {
    // A loop's step may be computed in its body, after the loop's arguments are analysed:
    // a second pass reads the steps' facts from the first (sound on their own, since the
    // first pass knows nothing of the carried values beyond their runs).
    let first = pass(k, assume_nonneg, launch, None);
    let stepped = k.walk().into_iter().any(|id| match &k.op(id).op {
        Op::For { init, body, .. } => (0..init.len())
            .any(|j| uniform_step(k, *body, k.region(*body).args[j + 1], j).is_some()),
        _ => false,
    });
    if stepped {
        pass(k, assume_nonneg, launch, Some(&first.axis))
    } else {
        first
    }
}

fn pass(
    k: &Kernel,
    assume_nonneg: bool,
    launch: Option<Launch<'_>>,
    steps: Option<&[AxisInfo]>,
) -> Analysis {
    let mut a = Analysis {
        axis: vec![AxisInfo::UNKNOWN; k.values.len()],
        nonneg: k
            .values
            .iter()
            .map(|v| v.ty.dtype.is_unsigned_int() && !v.ty.ptr)
            .collect(),
        form: vec![Form::Unknown; k.values.len()],
    };
    for (i, p) in k.params.iter().enumerate() {
        let mut ax = AxisInfo {
            contig: 1,
            div: if k.ty(p.value).ptr { MAX_DIV } else { 1 },
            cst: 1,
        };
        for h in k.hints_of(p.value) {
            if let Hint::MultipleOf(m) = h {
                if let Some(&m) = m.first() {
                    ax.div = pow2_div(m);
                }
            }
        }
        a.axis[p.value.index()] = ax;
        if let Some(l) = launch {
            a.form[p.value.index()] = match (p.kind, l.ints.get(i).copied().flatten()) {
                (ParamKind::Ptr(_), _) => Form::Ptr {
                    param: i,
                    off: Affine::konst(0),
                },
                (ParamKind::Scalar(d), Some(x)) => int_form(Affine::konst(x as i128), d, l, 1),
                _ => Form::Unknown,
            };
        }
    }
    for id in k.walk() {
        let data = k.op(id);
        if let Op::For { .. } = &data.op {
            for_loop(k, data, &mut a, launch, steps);
            continue;
        }
        let Some(res) = data.result() else { continue };
        if !a.nonneg[res.index()] {
            a.nonneg[res.index()] = nonneg_of(k, data, res, &a.nonneg);
        }
        let ax = axis_of(k, data, res, &a.axis, &a.nonneg, assume_nonneg);
        a.axis[res.index()] = with_hints(k, res, ax);
        for extra in data.results.iter().skip(1) {
            a.axis[extra.index()] = AxisInfo::UNKNOWN;
        }
        if let Some(l) = launch {
            a.form[res.index()] = form_of(k, data, res, &a.form, l);
        }
    }
    a
}

/// A `for` loop's block arguments and results (`steps`: facts of an earlier pass, which
/// give the divisibility of the uniform steps).
fn for_loop(
    k: &Kernel,
    data: &OpData,
    a: &mut Analysis,
    launch: Option<Launch<'_>>,
    steps: Option<&[AxisInfo]>,
) {
    let Op::For {
        lo,
        hi,
        step,
        init,
        body,
    } = &data.op
    else {
        return;
    };
    // `p += uniform` in a loop (Triton's `a_ptrs += BLOCK_K * stride`) keeps the
    // initial value's runs; the loop's results keep them too. A value the body
    // yields unchanged (a block pointer's shape and strides) is its initial value.
    let args = &k.region(*body).args;
    for (j, v) in init.iter().enumerate() {
        if invariant_source(k, args[j + 1]).is_some() {
            a.axis[args[j + 1].index()] = a.axis[v.index()];
            if let Some(r) = data.results.get(j) {
                a.axis[r.index()] = a.axis[v.index()];
            }
        } else if let Some(step) = uniform_step(k, *body, args[j + 1], j) {
            // `init + t * step` is a multiple of whatever divides both.
            let div = steps.map_or(1, |st| gcd(a.axis[v.index()].div, st[step.index()].div));
            let ax = AxisInfo {
                div,
                ..a.axis[v.index()]
            };
            a.axis[args[j + 1].index()] = ax;
            if let Some(r) = data.results.get(j) {
                a.axis[r.index()] = ax;
            }
        }
    }
    // The induction variable lies in [lo, hi - 1] of its own program, and with constant
    // bounds and step it ends at the last step below `hi`; carried values and results are
    // not followed (unknown).
    let (Some(l), Some(&iv)) = (launch, args.first()) else {
        return;
    };
    let konst = |v: &Value| match a.form[v.index()] {
        Form::Int(x) => x.constant(),
        _ => None,
    };
    let range = match (konst(lo), konst(hi), konst(step)) {
        (Some(l), Some(h), Some(s)) if s > 0 && h > l => Some(Affine {
            lo: l,
            hi: l + (h - 1 - l) / s * s,
            ..Affine::konst(0)
        }),
        _ => match (a.form[lo.index()], a.form[hi.index()]) {
            (Form::Int(l), Form::Int(h))
                if l.pid == h.pid && l.lane == 0 && h.lane == 0 && h.hi > l.lo =>
            {
                Some(Affine {
                    pid: l.pid,
                    lane: 0,
                    lo: l.lo,
                    hi: h.hi - 1,
                })
            }
            _ => None,
        },
    };
    a.form[iv.index()] = range.map_or(Form::Unknown, |r| int_form(r, k.ty(iv).dtype, l, 1));
}

/// `x` as an integer of dtype `d` with `n` lanes, or unknown when it could wrap.
fn int_form(x: Affine, d: DType, l: Launch<'_>, n: usize) -> Form {
    if x.fits(d, l.grid, n) {
        Form::Int(x)
    } else {
        Form::Unknown
    }
}

/// A pointer into `param` at `off` over `n` lanes, or unknown when an offset could wrap the
/// packed pointer.
fn ptr_form(param: usize, off: Affine, l: Launch<'_>, n: usize) -> Form {
    if !off.fits(DType::I64, l.grid, n) {
        return Form::Unknown;
    }
    let (lo, hi) = off.range(l.grid, n);
    if lo < -PTR_OFF_MAX || hi > PTR_OFF_MAX {
        return Form::Unknown;
    }
    Form::Ptr { param, off }
}

/// The launch form of `res`, the result of `data`.
fn form_of(k: &Kernel, data: &OpData, res: Value, form: &[Form], l: Launch<'_>) -> Form {
    let rty = k.ty(res);
    let n = rty.numel();
    let get = |v: &Value| form[v.index()];
    let int = |x: Affine| int_form(x, rty.dtype, l, n);
    match &data.op {
        Op::ProgramId { axis } => {
            let mut pid = [0; 3];
            pid[(*axis as usize).min(2)] = 1;
            int(Affine {
                pid,
                ..Affine::konst(0)
            })
        }
        Op::NumPrograms { axis } => {
            int(Affine::konst(l.grid[(*axis as usize).min(2)].max(1) as i128))
        }
        Op::Constant {
            value: Const::Int(v),
        } if !rty.ptr => int(Affine::konst(*v as i128)),
        Op::Arange { start, end } if end > start => {
            int_form(Affine::lanes(*start, 1), DType::I32, l, n)
        }
        // The flat index is unchanged: element `i` keeps its value.
        Op::ExpandDims { src, .. } | Op::Reshape { src } => get(src),
        // Elements move: what is known is their range.
        Op::Splat { src } | Op::Broadcast { src } | Op::Permute { src, .. } => {
            let m = k.ty(*src).numel();
            match get(src) {
                Form::Int(x) => Form::Int(x.spread(m)),
                Form::Ptr { param, off } => Form::Ptr {
                    param,
                    off: off.spread(m),
                },
                Form::Unknown => Form::Unknown,
            }
        }
        Op::Cast { src } if !rty.ptr => match get(src) {
            Form::Int(x) => int(x),
            _ => Form::Unknown,
        },
        Op::AddPtr { ptr, offset } => match (get(ptr), get(offset)) {
            (Form::Ptr { param, off }, Form::Int(o)) => ptr_form(param, off.add(o, 1), l, n),
            _ => Form::Unknown,
        },
        Op::Binary { kind, lhs, rhs } => match (get(lhs), get(rhs)) {
            (Form::Int(a), Form::Int(b)) => a.binary(*kind, b, n).map_or(Form::Unknown, int),
            _ => Form::Unknown,
        },
        _ => Form::Unknown,
    }
}

/// Whether the result `res` of `data` is a non-negative integer: program ids, aranges from a
/// non-negative start, non-negative constants, unsigned values, and sums, products, minima
/// and maxima of non-negative values, their quotients by positive constants and their
/// remainders (assuming, as the contiguity rules do, that index arithmetic does not wrap).
fn nonneg_of(k: &Kernel, data: &OpData, res: Value, nn: &[bool]) -> bool {
    let get = |v: &Value| nn[v.index()];
    match &data.op {
        Op::Constant {
            value: Const::Int(c),
        } => *c >= 0,
        Op::ProgramId { .. } | Op::NumPrograms { .. } => true,
        Op::Arange { start, .. } => *start >= 0,
        Op::Splat { src }
        | Op::Broadcast { src }
        | Op::ExpandDims { src, .. }
        | Op::Reshape { src } => get(src),
        Op::Cast { src } if int_widening(k, *src, res) => get(src),
        Op::Binary { kind, lhs, rhs } => match kind {
            BinaryOp::Add | BinaryOp::Mul | BinaryOp::Min | BinaryOp::Max => get(lhs) && get(rhs),
            // Integer division by 0 gives -1: only positive constant divisors.
            BinaryOp::Div => get(lhs) && int_value(k, *rhs).is_some_and(|d| d > 0),
            // `x % 0` is `x`; otherwise C's remainder has the dividend's sign.
            BinaryOp::Rem => get(lhs),
            _ => false,
        },
        _ => false,
    }
}

/// The [`AxisInfo`] of the result `res` of `data` (before hints).
fn axis_of(
    k: &Kernel,
    data: &OpData,
    res: Value,
    info: &[AxisInfo],
    nonneg: &[bool],
    assume_nonneg: bool,
) -> AxisInfo {
    let n = |v: Value| k.ty(v).numel() as u64;
    let whole = n(res);
    let get = |v: Value, info: &[AxisInfo]| info[v.index()];
    match &data.op {
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
            div: get(*src, info).div,
            cst: whole,
        },
        Op::ExpandDims { src, .. } | Op::Reshape { src } => get(*src, info),
        Op::Broadcast { src } => {
            let (ss, ds) = (&k.ty(*src).shape, &k.ty(res).shape);
            let s = get(*src, info);
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
                // Every source element starts a run of its own.
                AxisInfo {
                    contig: 1,
                    div: div_at(s, 1),
                    cst: stretched,
                }
            } else {
                let contig = s.contig.min(kept);
                AxisInfo {
                    contig,
                    div: div_at(s, contig),
                    cst: s.cst.min(kept),
                }
            }
        }
        Op::Binary { kind, lhs, rhs } => {
            let (a, b) = (get(*lhs, info), get(*rhs, info));
            match kind {
                BinaryOp::Add => {
                    let contig = gcd(a.contig, b.cst).max(gcd(a.cst, b.contig));
                    AxisInfo {
                        contig,
                        div: gcd(div_at(a, contig), div_at(b, contig)),
                        cst: gcd(a.cst, b.cst),
                    }
                }
                BinaryOp::Sub => {
                    let contig = gcd(a.contig, b.cst);
                    AxisInfo {
                        contig,
                        div: gcd(div_at(a, contig), div_at(b, contig)),
                        cst: gcd(a.cst, b.cst),
                    }
                }
                BinaryOp::Mul => {
                    // `x * 1` keeps `x`'s runs (a stride specialised to 1).
                    let contig = match (int_value(k, *lhs), int_value(k, *rhs)) {
                        (_, Some(1)) => a.contig,
                        (Some(1), _) => b.contig,
                        _ => 1,
                    };
                    AxisInfo {
                        contig,
                        div: (div_at(a, contig) * div_at(b, contig)).min(MAX_DIV),
                        cst: gcd(a.cst, b.cst),
                    }
                }
                BinaryOp::Rem => {
                    // A non-negative +1 run starting at a multiple of d = div(n) wraps
                    // only at multiples of n, so runs of gcd(contig, d) survive.
                    let contig = if b.cst >= n(*rhs) && (assume_nonneg || nonneg[lhs.index()]) {
                        gcd(a.contig, b.div)
                    } else {
                        1
                    };
                    AxisInfo {
                        contig,
                        // x - trunc(x / n) * n: a multiple of d when x and n are, either
                        // sign.
                        div: gcd(div_at(a, contig), div_at(b, contig)),
                        cst: gcd(a.cst, b.cst),
                    }
                }
                _ => AxisInfo {
                    cst: gcd(a.cst, b.cst),
                    ..AxisInfo::UNKNOWN
                },
            }
        }
        Op::AddPtr { ptr, offset } => {
            let (a, b) = (get(*ptr, info), get(*offset, info));
            let contig = gcd(a.contig, b.cst).max(gcd(a.cst, b.contig));
            AxisInfo {
                contig,
                div: gcd(div_at(a, contig), div_at(b, contig)),
                cst: gcd(a.cst, b.cst),
            }
        }
        Op::Cmp { pred, lhs, rhs } => {
            let (a, b) = (get(*lhs, info), get(*rhs, info));
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
            let c = get(*cond, info).cst;
            let (a, b) = (get(*on_true, info), get(*on_false, info));
            AxisInfo {
                cst: gcd(c, gcd(a.cst, b.cst)),
                ..AxisInfo::UNKNOWN
            }
        }
        // Widening an integer keeps its runs and divisibility (no wrapping, as above):
        // the i64 index arithmetic of block pointers.
        Op::Cast { src } if int_widening(k, *src, res) => get(*src, info),
        Op::Cast { src } => AxisInfo {
            contig: 1,
            div: 1,
            cst: get(*src, info).cst,
        },
        _ => AxisInfo::UNKNOWN,
    }
}

/// The divisibility of the first value of each run of `c` elements when `x`'s runs are cut
/// into runs of `c` (a power of two): `x.div` holds for the first value of each of `x`'s
/// runs, and inside a +1 run the value at offset `j * c` is `first + j * c`, a multiple
/// of `min(x.div, c)` only. (Triton's `mul` rule drops a contiguous operand's
/// divisibility to 1 for the same reason.)
fn div_at(x: AxisInfo, c: u64) -> u64 {
    if c >= x.contig {
        x.div
    } else {
        x.div.min(c)
    }
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

/// The step `u` when the body yields `arg + u` (or `ptr + u`) in slot `j`, `u` a splat or
/// constant.
fn uniform_step(k: &Kernel, body: crate::ir::RegionId, arg: Value, j: usize) -> Option<Value> {
    let &last = k.region(body).ops.last()?;
    let Op::Yield { values } = &k.op(last).op else {
        return None;
    };
    let def = values.get(j).and_then(|y| k.def_op(*y))?;
    let step = match &k.op(def).op {
        Op::AddPtr { ptr, offset } if *ptr == arg => *offset,
        Op::Binary {
            kind: BinaryOp::Add,
            lhs,
            rhs,
        } if *lhs == arg => *rhs,
        _ => return None,
    };
    let uniform = k.ty(step).is_scalar()
        || matches!(
            k.def_op(step).map(|o| &k.op(o).op),
            Some(Op::Splat { .. } | Op::Constant { .. })
        );
    uniform.then_some(step)
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

/// The exact difference between neighbouring elements of integer, pointer or boolean
/// block `v` along dimension `axis` (in elements for pointers): `Some(s)` when
/// `v[.., i + 1, ..] - v[.., i, ..] == s` for every `i`, and `Some(0)` also for a boolean
/// constant along it; `None` where the walk cannot tell. Scalars are constant along every
/// axis. Like [`analyse`], this assumes index arithmetic does not wrap. The walk follows
/// `arange`, shape ops that keep the dimension, `+`, `-`, products with an integer
/// constant, casts widening within one signedness and pointer offsets; any other op keeps
/// only constancy.
pub fn step_along(k: &Kernel, v: Value, axis: usize) -> Option<i64> {
    let mut memo = std::collections::HashMap::new();
    step_memo(k, v, axis, &mut memo)
}

fn step_memo(
    k: &Kernel,
    v: Value,
    axis: usize,
    memo: &mut std::collections::HashMap<(Value, usize), Option<i64>>,
) -> Option<i64> {
    if let Some(&s) = memo.get(&(v, axis)) {
        return s;
    }
    let s = step_of(k, v, axis, memo);
    memo.insert((v, axis), s);
    s
}

/// The integer value every element of `v` holds, when it is a constant.
fn int_constant(k: &Kernel, v: Value) -> Option<i64> {
    let d = k.def_op(v)?;
    match &k.op(d).op {
        Op::Constant {
            value: Const::Int(c),
        } => Some(*c),
        Op::Splat { src } | Op::Broadcast { src } | Op::ExpandDims { src, .. } => {
            int_constant(k, *src)
        }
        _ => None,
    }
}

fn step_of(
    k: &Kernel,
    v: Value,
    axis: usize,
    memo: &mut std::collections::HashMap<(Value, usize), Option<i64>>,
) -> Option<i64> {
    let shape = &k.ty(v).shape;
    if axis >= shape.len() || shape[axis] == 1 {
        return Some(0);
    }
    let d = k.def_op(v)?;
    let mut rec = |x: Value, a: usize| step_memo(k, x, a, memo);
    // Constant along the axis when every operand is.
    let all_const = |xs: &[Value], rec: &mut dyn FnMut(Value, usize) -> Option<i64>| {
        xs.iter().all(|&x| rec(x, axis) == Some(0)).then_some(0)
    };
    match &k.op(d).op {
        Op::Constant { .. } | Op::Splat { .. } | Op::ProgramId { .. } | Op::NumPrograms { .. } => {
            Some(0)
        }
        Op::Arange { .. } => (axis == 0).then_some(1),
        Op::ExpandDims { src, axis: e } => {
            let e = *e as usize;
            match axis.cmp(&e) {
                std::cmp::Ordering::Equal => Some(0),
                std::cmp::Ordering::Less => rec(*src, axis),
                std::cmp::Ordering::Greater => rec(*src, axis - 1),
            }
        }
        Op::Broadcast { src } => {
            let ss = &k.ty(*src).shape;
            let lead = shape.len().checked_sub(ss.len())?;
            if axis < lead || ss[axis - lead] == 1 {
                Some(0)
            } else {
                rec(*src, axis - lead)
            }
        }
        Op::Binary { kind, lhs, rhs } => {
            let (a, b) = (rec(*lhs, axis), rec(*rhs, axis));
            match kind {
                BinaryOp::Add => a?.checked_add(b?),
                BinaryOp::Sub => a?.checked_sub(b?),
                BinaryOp::Mul => match (a, b) {
                    (Some(0), Some(0)) => Some(0),
                    (Some(s), Some(0)) => s.checked_mul(int_constant(k, *rhs)?),
                    (Some(0), Some(s)) => s.checked_mul(int_constant(k, *lhs)?),
                    _ => None,
                },
                _ => (a == Some(0) && b == Some(0)).then_some(0),
            }
        }
        Op::AddPtr { ptr, offset } => rec(*ptr, axis)?.checked_add(rec(*offset, axis)?),
        Op::Cast { src } => {
            let s = rec(*src, axis)?;
            let (from, to) = (k.ty(*src).dtype, k.ty(v).dtype);
            if s == 0 {
                Some(0)
            } else {
                (from.is_int()
                    && to.is_int()
                    && from.is_signed_int() == to.is_signed_int()
                    && to.bits() >= from.bits())
                .then_some(s)
            }
        }
        Op::Cmp { lhs, rhs, .. } => all_const(&[*lhs, *rhs], &mut rec),
        Op::Select {
            cond,
            on_true,
            on_false,
        } => all_const(&[*cond, *on_true, *on_false], &mut rec),
        Op::Unary { src, .. } | Op::Bitcast { src } | Op::IntToPtr { src } => {
            all_const(&[*src], &mut rec)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{analyse, analyse_launch, step_along, Affine, Form, Launch};
    use crate::dtype::DType::{self, F32, I32};
    use crate::ir::Op;
    use crate::tl;

    /// The offsets of vector add, over one launch: exact in the program id and the lane,
    /// through the pointer arithmetic; unknown once the grid makes them wrap int32.
    #[test]
    fn launch_forms_follow_program_ids_and_lanes() {
        let k = tl::build("vadd", &Default::default(), |k| {
            let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
            let n = k.scalar(I32, "n");
            let offs = tl::program_id(0) * 1024 + tl::arange(0, 1024);
            let m = offs.lt(n);
            tl::store(o + offs, tl::load(x + offs).mask(m) + 1.0f32).mask(m);
        })
        .unwrap();
        let store_ptr = |k: &crate::ir::Kernel| {
            k.ops
                .iter()
                .find_map(|d| match &d.op {
                    Op::Store { ptr, .. } => Some(*ptr),
                    _ => None,
                })
                .unwrap()
        };
        let ints = [None, None, Some(5000)];
        let a = analyse_launch(
            &k,
            Launch {
                grid: [5, 1, 1],
                ints: &ints,
            },
        );
        let off = Affine {
            pid: [1024, 0, 0],
            lane: 1,
            lo: 0,
            hi: 0,
        };
        assert_eq!(a.form[store_ptr(&k).index()], Form::Ptr { param: 1, off });
        assert_eq!(a.axis[store_ptr(&k).index()].contig, 1024);
        // 2^21 programs of 1024 end at 2^31 - 1; one more could wrap.
        let a = analyse_launch(
            &k,
            Launch {
                grid: [1 << 21, 1, 1],
                ints: &ints,
            },
        );
        assert!(matches!(a.form[store_ptr(&k).index()], Form::Ptr { .. }));
        let a = analyse_launch(
            &k,
            Launch {
                grid: [(1 << 21) + 1, 1, 1],
                ints: &ints,
            },
        );
        assert_eq!(a.form[store_ptr(&k).index()], Form::Unknown);
    }

    /// `range` and `fits` against every value a small form takes.
    #[test]
    fn ranges_are_exact_hulls() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: i64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % (2 * m as u64 + 1)) as i64 - m
        };
        for _ in 0..2000 {
            let a = Affine {
                pid: [next(9) as i128, next(9) as i128, next(3) as i128],
                lane: next(5) as i128,
                lo: next(20) as i128,
                hi: 0,
            };
            let a = Affine {
                hi: a.lo + next(4).unsigned_abs() as i128,
                ..a
            };
            let grid = [1 + next(3).unsigned_abs() as usize, 2, 1];
            let n = 1 + next(6).unsigned_abs() as usize;
            let mut vals = Vec::new();
            for p0 in 0..grid[0] as i128 {
                for p1 in 0..grid[1] as i128 {
                    for i in 0..n as i128 {
                        for x in [a.lo, a.hi] {
                            vals.push(a.pid[0] * p0 + a.pid[1] * p1 + a.lane * i + x);
                        }
                    }
                }
            }
            let want = (*vals.iter().min().unwrap(), *vals.iter().max().unwrap());
            assert_eq!(a.range(grid, n), want, "{a:?} {grid:?} {n}");
            let b = a.spread(n);
            assert_eq!(b.range(grid, 1), want, "{a:?} spread over {n}");
            // Shifted to the top of int32, the form fits exactly when its maximum does.
            let top = Affine {
                lo: a.lo + i32::MAX as i128 - want.1,
                hi: a.hi + i32::MAX as i128 - want.1,
                ..a
            };
            assert!(top.fits(DType::I32, grid, n));
            let over = Affine {
                lo: top.lo + 1,
                hi: top.hi + 1,
                ..a
            };
            assert!(!over.fits(DType::I32, grid, n));
        }
    }

    /// A pointer advanced in a loop by a step computed in the body is a multiple of what
    /// divides both its start and the step; an odd step leaves only its runs.
    #[test]
    fn carried_pointers_keep_the_divisibility_of_start_and_step() {
        let build = |step: i32| {
            tl::build("carried", &Default::default(), move |k| {
                let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
                let (n, m) = (k.scalar(I32, "n"), k.scalar(I32, "m"));
                let p0 = x + (tl::program_id(0) * 64 + tl::arange(0, 32));
                let (acc, _) = tl::range(0, n, 1)
                    .fold((tl::zeros([32], F32), p0), |_, (acc, p)| {
                        (acc + tl::load(p), p + m * step)
                    });
                tl::store(o + tl::arange(0, 32), acc);
            })
            .unwrap()
        };
        let load_ptr = |k: &crate::ir::Kernel| {
            k.ops
                .iter()
                .find_map(|d| match &d.op {
                    Op::Load { ptr, .. } => Some(*ptr),
                    _ => None,
                })
                .unwrap()
        };
        let k = build(32);
        let info = analyse(&k)[load_ptr(&k).index()];
        assert_eq!((info.contig, info.div), (32, 32), "{}", k.ir());
        let k = build(3);
        let info = analyse(&k)[load_ptr(&k).index()];
        assert_eq!((info.contig, info.div), (32, 1), "{}", k.ir());
    }

    /// A run's divisibility holds for its first value only: once the runs are cut (a
    /// broadcast of a column, a product with a run-time stride), the values in between set
    /// it. Rows `r * stride + c` of a tile start at multiples of the stride's divisibility,
    /// not of the tile's: with an odd stride no chunk of a row is aligned.
    #[test]
    fn cut_runs_keep_only_the_divisibility_every_value_has() {
        let k = tl::build("rows", &Default::default(), |k| {
            let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
            let stride = k.scalar(I32, "stride");
            let rows = tl::program_id(0) * 64 + tl::arange(0, 64);
            let cols = tl::program_id(1) * 64 + tl::arange(0, 64);
            let v = tl::load(x + rows.col() * stride + cols.row());
            tl::store(o + rows * stride, v.sum(1));
        })
        .unwrap();
        let info = analyse(&k);
        let ptrs: Vec<crate::ir::Value> = k
            .ops
            .iter()
            .filter_map(|d| match &d.op {
                Op::Load { ptr, .. } | Op::Store { ptr, .. } => Some(*ptr),
                _ => None,
            })
            .collect();
        // The tile: runs of 64 along a row, each starting at `r * stride + 64 * pid1`.
        assert_eq!(
            (info[ptrs[0].index()].contig, info[ptrs[0].index()].div),
            (64, 1)
        );
        // `rows * stride`: no run, and no value but the first a multiple of 64.
        assert_eq!(
            (info[ptrs[1].index()].contig, info[ptrs[1].index()].div),
            (1, 1)
        );
        // The broadcast column alone: every row its own constant run.
        let bcast = k
            .ops
            .iter()
            .find_map(|d| match &d.op {
                Op::Broadcast { src } if k.ty(*src).shape == [64, 1] => d.result(),
                _ => None,
            })
            .unwrap();
        assert_eq!(info[bcast.index()].div, 1);
    }

    /// Steps along one dimension: a transposed tile (`d` down, `n` across) steps by its
    /// constant stride down and by the run-time stride across, its mask on `n` is constant
    /// down; a product with a run-time value, a division or a mask on both dimensions is
    /// not known.
    #[test]
    fn steps_along_a_dimension_follow_aranges_strides_and_masks() {
        let k = tl::build("kt", &Default::default(), |k| {
            let (x, o) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
            let (stride, n) = (k.scalar(I32, "stride"), k.scalar(I32, "n"));
            let d = tl::arange(0, 16);
            let cols = tl::program_id(0) * 32 + tl::arange(0, 32);
            let t = tl::load(x + d.col() * 3 + cols.row() * stride).mask(cols.row().lt(n));
            let u = tl::load(x + d.col() * stride + tl::floordiv(d.col() + cols.row(), 2))
                .mask(d.col().lt(cols.row()));
            tl::store(o + d.col() * 32 + cols.row(), t + u);
        })
        .unwrap();
        let loads: Vec<(crate::ir::Value, crate::ir::Value)> = k
            .ops
            .iter()
            .filter_map(|d| match &d.op {
                Op::Load { ptr, mask, .. } => Some((*ptr, (*mask)?)),
                _ => None,
            })
            .collect();
        let (p, m) = loads[0];
        assert_eq!(step_along(&k, p, 0), Some(3));
        assert_eq!(step_along(&k, p, 1), None);
        assert_eq!(step_along(&k, m, 0), Some(0));
        assert_eq!(step_along(&k, m, 1), None);
        let (p, m) = loads[1];
        assert_eq!(step_along(&k, p, 0), None);
        assert_eq!(step_along(&k, m, 0), None);
        let store = k
            .ops
            .iter()
            .find_map(|d| match &d.op {
                Op::Store { ptr, .. } => Some(*ptr),
                _ => None,
            })
            .unwrap();
        assert_eq!(step_along(&k, store, 0), Some(32));
        assert_eq!(step_along(&k, store, 1), Some(1));
    }

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
