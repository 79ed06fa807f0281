//! The fuzzer's kernels as data: a [`Batch`] of independent [`Prog`]s, each a list of
//! [`Node`]s in SSA order, lowered to DSL calls by [`lower`] (the same code builds the kernel
//! for every target, and the generator calls it node by node to learn result types).

use crate::codegen::ReductionLayout;
use crate::dtype::DType;
use crate::tl::{self, Operand, Tensor};

/// A literal: an input element, a fill, a `full` value or a weak (Rust) scalar operand.
/// Equality compares floats by their bits (NaN equals itself).
#[derive(Clone, Copy, Debug)]
pub enum Lit {
    /// A bool (int1).
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A float (exactly representable in the dtype it is used with).
    Float(f64),
}

impl PartialEq for Lit {
    fn eq(&self, o: &Lit) -> bool {
        match (self, o) {
            (Lit::Bool(a), Lit::Bool(b)) => a == b,
            (Lit::Int(a), Lit::Int(b)) => a == b,
            (Lit::Float(a), Lit::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Lit {
    /// As a DSL operand.
    pub fn operand(self) -> Operand {
        match self {
            Lit::Bool(b) => b.into(),
            Lit::Int(i) => {
                if let Ok(v) = i64::try_from(i) {
                    v.into()
                } else {
                    (i as u64).into()
                }
            }
            Lit::Float(f) => f.into(),
        }
    }
}

/// Elementwise unary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Un {
    Neg,
    Abs,
    Not,
    Floor,
    Ceil,
    Sqrt,
    Exp,
    Exp2,
    Log,
    Log2,
    Rsqrt,
    Sin,
    Cos,
    Erf,
    Sigmoid,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Log1p,
    Expm1,
    Log10,
    Exp10,
    Cbrt,
    Erfinv,
}

impl Un {
    /// Results compared within a tolerance (and never used as operands).
    pub fn inexact(self) -> bool {
        matches!(
            self,
            Un::Exp
                | Un::Exp2
                | Un::Log
                | Un::Log2
                | Un::Rsqrt
                | Un::Sin
                | Un::Cos
                | Un::Erf
                | Un::Sigmoid
                | Un::Tan
                | Un::Asin
                | Un::Acos
                | Un::Atan
                | Un::Sinh
                | Un::Cosh
                | Un::Asinh
                | Un::Acosh
                | Un::Atanh
                | Un::Log1p
                | Un::Expm1
                | Un::Log10
                | Un::Exp10
                | Un::Cbrt
                | Un::Erfinv
        )
    }
}

/// Elementwise binary ops. Integer division, remainder and shifts are guarded in the
/// lowering (divisor 0 or -1 replaced by 7, shift counts masked to the width), because
/// Triton leaves those cases undefined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    FloorDiv,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Max,
    Min,
    MaxNan,
    MinNan,
    Umulhi,
    Pow,
    Atan2,
    Hypot,
}

impl Bin {
    /// Results compared within a tolerance (and never used as operands).
    pub fn inexact(self) -> bool {
        matches!(self, Bin::Pow | Bin::Atan2 | Bin::Hypot)
    }
}

/// Comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// Reductions: builtins and custom combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Red {
    Sum,
    Max,
    Min,
    ArgMax,
    ArgMin,
    XorSum,
    /// `tl::reduce` with `|a, b| a + b`.
    CustomAdd,
    /// `tl::reduce` with `|a, b| tl::maximum(a, b)`.
    CustomMax,
    /// `tl::reduce` with `|a, b| a | b`.
    CustomOr,
}

/// Scans: builtins and custom combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Scan {
    Sum,
    Prod,
    /// `associative_scan` with `|a, b| a + b`.
    CustomAdd,
    /// `associative_scan` with `|a, b| tl::maximum(a, b)`.
    CustomMax,
    /// `associative_scan` with `|a, _| a` (not commutative: the first element wins).
    First,
    /// `associative_scan` with `|_, b| b` (not commutative: the last element wins).
    Last,
}

/// Atomic read-modify-writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Atom {
    Add,
    Max,
    Min,
    And,
    Or,
    Xor,
    Xchg,
}

/// One op of a program; operands are indices of earlier nodes of the same program.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A tile of input buffer `buf`, masked (with `other`) or not.
    Load {
        /// Input buffer.
        buf: usize,
        /// Masked with the program's ragged mask.
        masked: bool,
        /// `other=` for masked lanes.
        other: Lit,
    },
    /// `tl::full` of the tile's shape, or 0-d when `scalar`.
    Full {
        /// Element type.
        dtype: DType,
        /// The value.
        value: Lit,
        /// 0-d instead of a tile.
        scalar: bool,
    },
    /// Global element index along `axis` of the tile (i32; rank 2: `[R, 1]` or `[1, C]`).
    Index {
        /// Axis.
        axis: usize,
    },
    /// The runtime i32 scalar parameter `s{idx}` (0-d).
    Param {
        /// Scalar parameter.
        idx: usize,
    },
    /// `op(a)`.
    Unary(Un, usize),
    /// `op(a, b)`.
    Binary(Bin, usize, usize),
    /// `op(a, lit)` with a weakly typed Rust scalar.
    BinLit(Bin, usize, Lit),
    /// `a.op(b)`.
    Cmp(Cmp, usize, usize),
    /// `tl::where_(c, a, b)`.
    Where(usize, usize, usize),
    /// `tl::fma(a, b, c)`.
    Fma(usize, usize, usize),
    /// `a.to(dtype)`.
    Cast(usize, DType),
    /// `a.bitcast(dtype)`.
    Bitcast(usize, DType),
    /// A reduction over `axis` (`None`: all), keeping dims or not.
    Reduce {
        /// Which.
        op: Red,
        /// Operand.
        a: usize,
        /// Axis (`None`: all).
        axis: Option<usize>,
        /// `keep_dims`.
        keep: bool,
    },
    /// A scan along `axis`.
    Scan {
        /// Which.
        op: Scan,
        /// Operand.
        a: usize,
        /// Axis.
        axis: usize,
        /// `reverse=True`.
        reverse: bool,
    },
    /// `tl::dot(a, b, acc)`.
    Dot(usize, usize, Option<usize>),
    /// `range(s[lo], s[hi], s[step]).fold(init, |i, acc| op(acc, x or i))`.
    Loop {
        /// Initial carried value.
        init: usize,
        /// Operand combined each iteration (`None`: the induction variable, cast).
        x: Option<usize>,
        /// Combine.
        op: Bin,
        /// Scalar parameters holding lo, hi, step.
        bounds: [usize; 3],
    },
    /// `if_(s[idx] > k, || then(a), || els(a))`.
    If {
        /// Scalar parameter tested.
        idx: usize,
        /// Threshold.
        k: i64,
        /// Operand.
        a: usize,
        /// Then-branch op.
        then: Un,
        /// Else-branch op.
        els: Un,
    },
    /// An atomic on output buffer `buf`; `shared`: every program hits the same tile.
    Atomic {
        /// Which.
        op: Atom,
        /// Output buffer.
        buf: usize,
        /// Value.
        val: usize,
        /// Masked with the program's mask.
        masked: bool,
        /// All programs update one tile (else each its own).
        shared: bool,
    },
}

impl Node {
    /// Operand node indices.
    pub fn operands(&self) -> Vec<usize> {
        match *self {
            Node::Load { .. } | Node::Full { .. } | Node::Index { .. } | Node::Param { .. } => {
                vec![]
            }
            Node::Unary(_, a)
            | Node::BinLit(_, a, _)
            | Node::Cast(a, _)
            | Node::Bitcast(a, _)
            | Node::Reduce { a, .. }
            | Node::Scan { a, .. }
            | Node::If { a, .. } => vec![a],
            Node::Atomic { val, .. } => vec![val],
            Node::Binary(_, a, b) | Node::Cmp(_, a, b) => vec![a, b],
            Node::Where(a, b, c) | Node::Fma(a, b, c) => vec![a, b, c],
            Node::Dot(a, b, c) => {
                let mut v = vec![a, b];
                v.extend(c);
                v
            }
            Node::Loop { init, x, .. } => {
                let mut v = vec![init];
                v.extend(x);
                v
            }
        }
    }

    /// Rewrites operand indices with `f`.
    pub fn map_operands(&mut self, f: impl Fn(usize) -> usize) {
        match self {
            Node::Load { .. } | Node::Full { .. } | Node::Index { .. } | Node::Param { .. } => {}
            Node::Unary(_, a)
            | Node::BinLit(_, a, _)
            | Node::Cast(a, _)
            | Node::Bitcast(a, _)
            | Node::Reduce { a, .. }
            | Node::Scan { a, .. }
            | Node::If { a, .. }
            | Node::Atomic { val: a, .. } => *a = f(*a),
            Node::Binary(_, a, b) | Node::Cmp(_, a, b) => {
                *a = f(*a);
                *b = f(*b);
            }
            Node::Where(a, b, c) | Node::Fma(a, b, c) => {
                *a = f(*a);
                *b = f(*b);
                *c = f(*c);
            }
            Node::Dot(a, b, c) => {
                *a = f(*a);
                *b = f(*b);
                if let Some(c) = c {
                    *c = f(*c);
                }
            }
            Node::Loop { init, x, .. } => {
                *init = f(*init);
                if let Some(x) = x {
                    *x = f(*x);
                }
            }
        }
    }

    /// Results compared within a tolerance rather than bit for bit.
    pub fn inexact(&self) -> bool {
        match self {
            Node::Unary(u, _) => u.inexact(),
            Node::Binary(b, ..) => b.inexact(),
            _ => false,
        }
    }
}

/// How a stored node is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tol {
    /// Bit for bit (any NaN equals any NaN).
    Exact,
    /// Within this many units in the last place of the output dtype.
    Ulps(u32),
}

/// A stored result: node `node` broadcast to the tile, written to output `out` at `base`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sink {
    /// Node stored.
    pub node: usize,
    /// Output buffer.
    pub out: usize,
    /// First element of this sink's region.
    pub base: usize,
    /// Store masked with the program's mask.
    pub masked: bool,
}

/// One independent program of a batch: a tile shape, masks from scalar parameters, nodes
/// and stores.
#[derive(Clone, Debug, PartialEq)]
pub struct Prog {
    /// 1 or 2.
    pub rank: usize,
    /// Rows (1 for rank 1).
    pub r: usize,
    /// Columns.
    pub c: usize,
    /// Scalar parameters bounding rows (rank 1: elements) and columns for the mask.
    pub mask_by: [usize; 2],
    /// The ops.
    pub nodes: Vec<Node>,
    /// The stores.
    pub sinks: Vec<Sink>,
}

impl Prog {
    /// Elements per tile.
    pub fn tile(&self) -> usize {
        self.r * self.c
    }

    /// The tile's shape.
    pub fn shape(&self) -> Vec<usize> {
        if self.rank == 1 {
            vec![self.c]
        } else {
            vec![self.r, self.c]
        }
    }
}

/// An input buffer: dtype and element bits.
#[derive(Clone, Debug, PartialEq)]
pub struct InBuf {
    /// Element type.
    pub dtype: DType,
    /// Elements as bit patterns (low bits).
    pub bits: Vec<u64>,
}

/// An output buffer: dtype, length and the value it holds before the kernel runs.
#[derive(Clone, Debug)]
pub struct OutBuf {
    /// Element type.
    pub dtype: DType,
    /// Elements.
    pub len: usize,
    /// Initial value (exact in f32, as Metal's fill rounds through it).
    pub fill: f64,
}

impl PartialEq for OutBuf {
    fn eq(&self, o: &OutBuf) -> bool {
        self.dtype == o.dtype && self.len == o.len && self.fill.to_bits() == o.fill.to_bits()
    }
}

/// A kernel of several independent programs sharing parameters: one clang compile per
/// target covers all of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// The seed it was generated from.
    pub seed: u64,
    /// Programs.
    pub progs: Vec<Prog>,
    /// Input buffers (parameters `in0..`).
    pub inputs: Vec<InBuf>,
    /// Output buffers (parameters `out0..`, after the inputs).
    pub outputs: Vec<OutBuf>,
    /// i32 scalar parameters (`s0..`, last).
    pub scalars: Vec<i32>,
    /// Programs launched (axis 0).
    pub grid: usize,
    /// `num_warps`.
    pub num_warps: usize,
    /// Reduction layout override.
    pub layout: Option<ReductionLayout>,
}

/// The parameters of a kernel being built.
pub struct Params {
    /// Input pointers.
    pub inputs: Vec<Tensor>,
    /// Output pointers.
    pub outputs: Vec<Tensor>,
    /// Scalars.
    pub scalars: Vec<Tensor>,
}

/// The index tensors of a program's tile.
pub struct TileIdx {
    /// Element offsets of the tile in a `grid * tile` buffer.
    pub offs: Tensor,
    /// Offsets within the tile (for shared atomics).
    pub local: Tensor,
    /// The ragged mask.
    pub mask: Tensor,
    /// Index along axis 0 (`[R, 1]`, or `[C]` for rank 1) and axis 1 (`[1, C]`).
    pub index: [Tensor; 2],
}

/// Builds a program's index tensors.
pub fn tile_idx(p: &Prog, params: &Params) -> TileIdx {
    let pid = tl::program_id(0);
    let s = |i: usize| params.scalars[i];
    if p.rank == 1 {
        let local = tl::arange(0, p.c as i64);
        let offs = pid * p.c as i64 + local;
        let mask = offs.lt(s(p.mask_by[0]));
        TileIdx {
            offs,
            local,
            mask,
            index: [offs, offs],
        }
    } else {
        let rows = pid * p.r as i64 + tl::arange(0, p.r as i64);
        let lrows = tl::arange(0, p.r as i64);
        let cols = tl::arange(0, p.c as i64);
        let (rc, cr) = (rows.col(), cols.row());
        let offs = rc * p.c as i64 + cr;
        let local = lrows.col() * p.c as i64 + cr;
        let mask = rc.lt(s(p.mask_by[0])) & cr.lt(s(p.mask_by[1]));
        TileIdx {
            offs,
            local,
            mask,
            index: [rc, cr],
        }
    }
}

fn unary(u: Un, a: Tensor) -> Tensor {
    match u {
        Un::Neg => -a,
        Un::Abs => tl::abs(a),
        Un::Not => !a,
        Un::Floor => tl::floor(a),
        Un::Ceil => tl::ceil(a),
        Un::Sqrt => tl::sqrt(a),
        Un::Exp => tl::exp(a),
        Un::Exp2 => tl::exp2(a),
        Un::Log => tl::log(a),
        Un::Log2 => tl::log2(a),
        Un::Rsqrt => tl::rsqrt(a),
        Un::Sin => tl::sin(a),
        Un::Cos => tl::cos(a),
        Un::Erf => tl::erf(a),
        Un::Sigmoid => tl::sigmoid(a),
        Un::Tan => tl::libdevice::tan(a),
        Un::Asin => tl::libdevice::asin(a),
        Un::Acos => tl::libdevice::acos(a),
        Un::Atan => tl::libdevice::atan(a),
        Un::Sinh => tl::libdevice::sinh(a),
        Un::Cosh => tl::libdevice::cosh(a),
        Un::Asinh => tl::libdevice::asinh(a),
        Un::Acosh => tl::libdevice::acosh(a),
        Un::Atanh => tl::libdevice::atanh(a),
        Un::Log1p => tl::libdevice::log1p(a),
        Un::Expm1 => tl::libdevice::expm1(a),
        Un::Log10 => tl::libdevice::log10(a),
        Un::Exp10 => tl::libdevice::exp10(a),
        Un::Cbrt => tl::libdevice::cbrt(a),
        Un::Erfinv => tl::libdevice::erfinv(a),
    }
}

/// The guarded divisor: 0 and -1 (signed) become 7.
pub fn safe_divisor(b: Operand) -> Operand {
    match b {
        Operand::Tensor(t) => {
            let bad = if t.dtype().is_signed_int() {
                t.eq(0) | t.eq(-1)
            } else {
                t.eq(0)
            };
            tl::where_(bad, 7, t).into()
        }
        other => other,
    }
}

fn shift_count(a: Tensor, b: Operand) -> Operand {
    let bits = a.dtype().bits() as i64;
    match b {
        Operand::Tensor(t) => (t & (bits - 1)).into(),
        other => other,
    }
}

fn binary(op: Bin, a: Tensor, b: Operand) -> Tensor {
    match op {
        Bin::Add => a + b,
        Bin::Sub => a - b,
        Bin::Mul => a * b,
        Bin::Div => a / b,
        Bin::Rem => {
            if a.dtype().is_float() {
                a % b
            } else {
                a % safe_divisor(b)
            }
        }
        Bin::FloorDiv => tl::floordiv(a, safe_divisor(b)),
        Bin::And => a & b,
        Bin::Or => a | b,
        Bin::Xor => a ^ b,
        Bin::Shl => a << shift_count(a, b),
        Bin::Shr => a >> shift_count(a, b),
        Bin::Max => tl::maximum(a, b),
        Bin::Min => tl::minimum(a, b),
        Bin::MaxNan => tl::maximum_nan(a, b),
        Bin::MinNan => tl::minimum_nan(a, b),
        Bin::Umulhi => tl::umulhi(a, b),
        Bin::Pow => tl::libdevice::pow(a, b),
        Bin::Atan2 => tl::libdevice::atan2(a, b),
        Bin::Hypot => tl::libdevice::hypot(a, b),
    }
}

fn axis_of(axis: Option<usize>, keep: bool) -> tl::Axis {
    match (axis, keep) {
        (Some(a), true) => tl::keep_dims(a as i64),
        (Some(a), false) => (a as i64).into(),
        (None, _) => None::<i64>.into(),
    }
}

/// Emits node `n` of program `p` given the tensors of the nodes before it.
pub fn emit(p: &Prog, n: &Node, done: &[Tensor], params: &Params, idx: &TileIdx) -> Tensor {
    let t = |i: usize| done[i];
    match *n {
        Node::Load { buf, masked, other } => {
            let ptr = params.inputs[buf] + idx.offs;
            if masked {
                tl::load(ptr).mask(idx.mask).other(other.operand())
            } else {
                tl::load(ptr)
            }
        }
        Node::Full {
            dtype,
            value,
            scalar,
        } => {
            let shape = if scalar { vec![] } else { p.shape() };
            tl::full(shape, value.operand(), dtype)
        }
        Node::Index { axis } => idx.index[axis],
        Node::Param { idx: i } => params.scalars[i],
        Node::Unary(u, a) => unary(u, t(a)),
        Node::Binary(op, a, b) => binary(op, t(a), t(b).into()),
        Node::BinLit(op, a, l) => binary(op, t(a), l.operand()),
        Node::Cmp(c, a, b) => {
            let (a, b) = (t(a), t(b));
            match c {
                Cmp::Lt => a.lt(b),
                Cmp::Le => a.le(b),
                Cmp::Gt => a.gt(b),
                Cmp::Ge => a.ge(b),
                Cmp::Eq => a.eq(b),
                Cmp::Ne => a.ne(b),
            }
        }
        Node::Where(c, a, b) => tl::where_(t(c), t(a), t(b)),
        Node::Fma(a, b, c) => tl::fma(t(a), t(b), t(c)),
        Node::Cast(a, d) => t(a).to(d),
        Node::Bitcast(a, d) => t(a).bitcast(d),
        Node::Reduce { op, a, axis, keep } => {
            let (x, ax) = (t(a), axis_of(axis, keep));
            match op {
                Red::Sum => tl::sum(x, ax),
                Red::Max => tl::max(x, ax),
                Red::Min => tl::min(x, ax),
                Red::ArgMax => tl::argmax(x, ax),
                Red::ArgMin => tl::argmin(x, ax),
                Red::XorSum => tl::xor_sum(x, ax),
                Red::CustomAdd => tl::reduce(x, ax, |a: Tensor, b: Tensor| a + b),
                Red::CustomMax => tl::reduce(x, ax, |a: Tensor, b: Tensor| tl::maximum(a, b)),
                Red::CustomOr => tl::reduce(x, ax, |a: Tensor, b: Tensor| a | b),
            }
        }
        Node::Scan {
            op,
            a,
            axis,
            reverse,
        } => {
            let (x, ax) = (t(a), axis as i64);
            match (op, reverse) {
                (Scan::Sum, false) => tl::cumsum(x, ax),
                (Scan::Sum, true) => tl::cumsum_reverse(x, ax),
                (Scan::Prod, _) => tl::cumprod(x, ax),
                (Scan::CustomAdd, r) => {
                    tl::associative_scan(x, ax, r, |a: Tensor, b: Tensor| a + b)
                }
                (Scan::CustomMax, r) => {
                    tl::associative_scan(x, ax, r, |a: Tensor, b: Tensor| tl::maximum(a, b))
                }
                (Scan::First, r) => tl::associative_scan(x, ax, r, |a: Tensor, _b: Tensor| a),
                (Scan::Last, r) => tl::associative_scan(x, ax, r, |_a: Tensor, b: Tensor| b),
            }
        }
        Node::Dot(a, b, acc) => tl::dot(t(a), t(b), acc.map(t)),
        Node::Loop {
            init,
            x,
            op,
            bounds: [lo, hi, step],
        } => {
            let s = |i: usize| params.scalars[i];
            let xv = x.map(t);
            tl::range(s(lo), s(hi), s(step)).fold(t(init), |i, acc: Tensor| {
                let v = match xv {
                    Some(x) => x,
                    None => i.to(acc.dtype()),
                };
                binary(op, acc, v.into())
            })
        }
        Node::If {
            idx: i,
            k,
            a,
            then,
            els,
        } => {
            let x = t(a);
            tl::if_(params.scalars[i].gt(k), || unary(then, x), || unary(els, x))
        }
        Node::Atomic {
            op,
            buf,
            val,
            masked,
            shared,
        } => {
            let ptr = params.outputs[buf] + if shared { idx.local } else { idx.offs };
            let v = t(val);
            let r = match op {
                Atom::Add => tl::atomic_add(ptr, v),
                Atom::Max => tl::atomic_max(ptr, v),
                Atom::Min => tl::atomic_min(ptr, v),
                Atom::And => tl::atomic_and(ptr, v),
                Atom::Or => tl::atomic_or(ptr, v),
                Atom::Xor => tl::atomic_xor(ptr, v),
                Atom::Xchg => tl::atomic_xchg(ptr, v),
            };
            if masked {
                r.mask(idx.mask)
            } else {
                r
            }
        }
    }
}

/// Stores a sink: the node broadcast to the tile (a reduction without `keep_dims` first
/// gets its axis back).
pub fn emit_sink(p: &Prog, s: &Sink, done: &[Tensor], params: &Params, idx: &TileIdx) {
    let mut v = done[s.node];
    if let Node::Reduce {
        axis: Some(ax),
        keep: false,
        ..
    } = p.nodes[s.node]
    {
        if p.rank == 2 {
            v = v.expand_dims(ax as i64);
        }
    }
    let v = tl::broadcast_to(v, p.shape());
    let ptr = params.outputs[s.out] + (idx.offs + s.base as i64);
    if s.masked {
        tl::store(ptr, v).mask(idx.mask);
    } else {
        tl::store(ptr, v);
    }
}

/// Declares the batch's parameters (inputs, outputs, scalars, in that order).
pub fn declare(b: &Batch, k: &mut tl::KernelBuilder) -> Params {
    Params {
        inputs: (b.inputs.iter().enumerate())
            .map(|(i, x)| k.ptr(x.dtype, &format!("in{i}")))
            .collect(),
        outputs: (b.outputs.iter().enumerate())
            .map(|(i, x)| k.ptr(x.dtype, &format!("out{i}")))
            .collect(),
        scalars: (0..b.scalars.len())
            .map(|i| k.scalar(DType::I32, &format!("s{i}")))
            .collect(),
    }
}

/// The whole kernel body of a batch.
pub fn lower(b: &Batch, k: &mut tl::KernelBuilder) {
    let params = declare(b, k);
    for p in &b.progs {
        let idx = tile_idx(p, &params);
        let mut done = Vec::with_capacity(p.nodes.len());
        for n in &p.nodes {
            let t = emit(p, n, &done, &params, &idx);
            done.push(t);
        }
        for s in &p.sinks {
            emit_sink(p, s, &done, &params, &idx);
        }
    }
}
