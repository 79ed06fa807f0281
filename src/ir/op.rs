//! The op set: one [`Op`] enum grouped by family, and its property table ([`Op::props`]).
//!
//! Operands are stored inline; results are the op's [`ValueRange`](super::ValueRange) in
//! [`OpData`](super::OpData). Result types live on the values. Element semantics that depend
//! on the dtype (signed vs unsigned division, float vs int compare) are read from the
//! operand types: every binary/compare op has operands of one identical type.

use super::kernel::{RegionId, Value};
use super::types::Const;

/// Elementwise unary math. Operand and result have the same type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `e^x` (float).
    Exp,
    /// `2^x` (float).
    Exp2,
    /// Natural log (float).
    Log,
    /// Base-2 log (float).
    Log2,
    /// Square root (float).
    Sqrt,
    /// `1/sqrt(x)` (float).
    Rsqrt,
    /// Sine (float).
    Sin,
    /// Cosine (float).
    Cos,
    /// Error function (float).
    Erf,
    /// Round toward -inf (float).
    Floor,
    /// Round toward +inf (float).
    Ceil,
    /// Absolute value (float: clears the sign bit; signed int: wrapping `abs`; unsigned: identity).
    Abs,
    /// Tangent (float).
    Tan,
    /// Arcsine (float; NaN outside [-1, 1]).
    Asin,
    /// Arccosine (float; NaN outside [-1, 1]).
    Acos,
    /// Arctangent (float).
    Atan,
    /// Hyperbolic sine (float).
    Sinh,
    /// Hyperbolic cosine (float).
    Cosh,
    /// Inverse hyperbolic sine (float).
    Asinh,
    /// Inverse hyperbolic cosine (float; NaN below 1).
    Acosh,
    /// Inverse hyperbolic tangent (float; ±inf at ±1, NaN outside [-1, 1]).
    Atanh,
    /// `ln(1 + x)`, accurate for small `x` (float).
    Log1p,
    /// `e^x - 1`, accurate for small `x` (float).
    Expm1,
    /// Base-10 log (float).
    Log10,
    /// `10^x` (float).
    Exp10,
    /// Cube root (float; odd: `cbrt(-x) = -cbrt(x)`).
    Cbrt,
    /// Inverse error function (float; ±inf at ±1, NaN outside [-1, 1]).
    Erfinv,
}

impl UnaryOp {
    /// Text name (Triton's).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Exp => "exp",
            UnaryOp::Exp2 => "exp2",
            UnaryOp::Log => "log",
            UnaryOp::Log2 => "log2",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Abs => "abs",
            UnaryOp::Tan => "tan",
            UnaryOp::Asin => "asin",
            UnaryOp::Acos => "acos",
            UnaryOp::Atan => "atan",
            UnaryOp::Sinh => "sinh",
            UnaryOp::Cosh => "cosh",
            UnaryOp::Asinh => "asinh",
            UnaryOp::Acosh => "acosh",
            UnaryOp::Atanh => "atanh",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Expm1 => "expm1",
            UnaryOp::Log10 => "log10",
            UnaryOp::Exp10 => "exp10",
            UnaryOp::Cbrt => "cbrt",
            UnaryOp::Erfinv => "erfinv",
        }
    }

    /// True if only defined for float operands.
    pub fn float_only(self) -> bool {
        !matches!(self, UnaryOp::Abs)
    }

    /// True for the math functions of Triton's `libdevice` beyond the core set (printed by
    /// `codegen::math`).
    pub fn is_libdevice(self) -> bool {
        matches!(
            self,
            UnaryOp::Tan
                | UnaryOp::Asin
                | UnaryOp::Acos
                | UnaryOp::Atan
                | UnaryOp::Sinh
                | UnaryOp::Cosh
                | UnaryOp::Asinh
                | UnaryOp::Acosh
                | UnaryOp::Atanh
                | UnaryOp::Log1p
                | UnaryOp::Expm1
                | UnaryOp::Log10
                | UnaryOp::Exp10
                | UnaryOp::Cbrt
                | UnaryOp::Erfinv
        )
    }

    /// Every unary op.
    pub const ALL: [UnaryOp; 27] = [
        UnaryOp::Exp,
        UnaryOp::Exp2,
        UnaryOp::Log,
        UnaryOp::Log2,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Abs,
        UnaryOp::Tan,
        UnaryOp::Asin,
        UnaryOp::Acos,
        UnaryOp::Atan,
        UnaryOp::Sinh,
        UnaryOp::Cosh,
        UnaryOp::Asinh,
        UnaryOp::Acosh,
        UnaryOp::Atanh,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Log10,
        UnaryOp::Exp10,
        UnaryOp::Cbrt,
        UnaryOp::Erfinv,
    ];
}

/// Elementwise binary arithmetic and bitwise ops. Both operands and the result share one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+` (ints wrap).
    Add,
    /// `-` (ints wrap).
    Sub,
    /// `*` (ints wrap).
    Mul,
    /// `/`: IEEE division for floats; for ints C division truncating toward zero
    /// (signed or unsigned by dtype; Triton's `//`).
    Div,
    /// `%`: `fmod` for floats; C remainder (sign of the dividend) for ints.
    Rem,
    /// Bitwise and (logical and on `bool`).
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
    /// Shift left.
    Shl,
    /// Shift right: arithmetic for signed ints, logical for unsigned.
    Shr,
    /// Maximum; for floats NaN is ignored (`fmax`, Triton's `PropagateNan.NONE`).
    Max,
    /// Minimum; for floats NaN is ignored (`fmin`).
    Min,
    /// Float maximum that propagates NaN (`PropagateNan.ALL`).
    MaxNan,
    /// Float minimum that propagates NaN.
    MinNan,
    /// High half of the full-width *unsigned* product of two 32- or 64-bit integers
    /// (Triton's `umulhi`, whatever the operands' signedness).
    MulHi,
    /// `x^y` (float), with C99's special cases (`pow(x, ±0) = 1` even for NaN `x`,
    /// `pow(1, y) = 1`, `pow(-1, ±inf) = 1`, a negative `x` with an integral `y` is defined).
    Pow,
    /// `atan2(y, x)`: the angle of the point `(x, y)` in `[-pi, pi]` (float), C99's signed
    /// zeros and infinities.
    Atan2,
    /// `sqrt(x^2 + y^2)` without undue overflow or underflow (float); an infinite operand
    /// gives +inf even if the other is NaN.
    Hypot,
}

impl BinaryOp {
    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Rem => "rem",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::Shl => "shl",
            BinaryOp::Shr => "shr",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::MaxNan => "max_nan",
            BinaryOp::MinNan => "min_nan",
            BinaryOp::MulHi => "mulhi",
            BinaryOp::Pow => "pow",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::Hypot => "hypot",
        }
    }

    /// `a op b == b op a`.
    pub fn is_commutative(self) -> bool {
        matches!(
            self,
            BinaryOp::Add
                | BinaryOp::Mul
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::Max
                | BinaryOp::Min
                | BinaryOp::MaxNan
                | BinaryOp::MinNan
                | BinaryOp::MulHi
                | BinaryOp::Hypot
        )
    }

    /// True if the op is only defined on floats (the `libdevice` functions and the
    /// NaN-propagating max/min).
    pub fn float_only(self) -> bool {
        matches!(
            self,
            BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot | BinaryOp::MaxNan | BinaryOp::MinNan
        )
    }

    /// True for the math functions of Triton's `libdevice` (printed by `codegen::math`).
    pub fn is_libdevice(self) -> bool {
        matches!(self, BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot)
    }

    /// True if the op is only defined on integers (and `bool`).
    pub fn int_only(self) -> bool {
        matches!(
            self,
            BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::Shl
                | BinaryOp::Shr
                | BinaryOp::MulHi
        )
    }

    /// Every binary op.
    pub const ALL: [BinaryOp; 18] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::MaxNan,
        BinaryOp::MinNan,
        BinaryOp::MulHi,
        BinaryOp::Pow,
        BinaryOp::Atan2,
        BinaryOp::Hypot,
    ];
}

/// Comparison predicates. Operands share one type; the result is `bool` of the same shape.
/// Ints compare signed or unsigned by dtype; floats compare ordered (false on NaN) except
/// [`CmpPred::Ne`], which is unordered (true on NaN), as in Triton.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpPred {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl CmpPred {
    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            CmpPred::Lt => "lt",
            CmpPred::Le => "le",
            CmpPred::Gt => "gt",
            CmpPred::Ge => "ge",
            CmpPred::Eq => "eq",
            CmpPred::Ne => "ne",
        }
    }
}

/// Read-modify-write atomics (`atomic_add` ...). The op returns the old values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `atomic_add` (ints and floats).
    Add,
    /// `atomic_max` (ints, floats).
    Max,
    /// `atomic_min` (ints, floats).
    Min,
    /// `atomic_and` (ints).
    And,
    /// `atomic_or` (ints).
    Or,
    /// `atomic_xor` (ints).
    Xor,
    /// `atomic_xchg`.
    Xchg,
}

impl AtomicOp {
    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
            AtomicOp::And => "and",
            AtomicOp::Or => "or",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "xchg",
        }
    }
}

/// Memory ordering of an atomic (Triton's `sem=`). Triton's default, when none is given,
/// is `AcqRel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSem {
    /// `"relaxed"`: atomicity only.
    Relaxed,
    /// `"acquire"`: later accesses of the thread stay after it.
    Acquire,
    /// `"release"`: earlier accesses of the thread stay before it.
    Release,
    /// `"acq_rel"`: both.
    AcqRel,
}

impl MemSem {
    /// Every ordering, in text order.
    pub const ALL: [MemSem; 4] = [
        MemSem::Relaxed,
        MemSem::Acquire,
        MemSem::Release,
        MemSem::AcqRel,
    ];

    /// Triton's spelling.
    pub fn name(self) -> &'static str {
        match self {
            MemSem::Relaxed => "relaxed",
            MemSem::Acquire => "acquire",
            MemSem::Release => "release",
            MemSem::AcqRel => "acq_rel",
        }
    }

    /// Whether earlier accesses are ordered before the atomic.
    pub fn releases(self) -> bool {
        matches!(self, MemSem::Release | MemSem::AcqRel)
    }

    /// Whether later accesses are ordered after the atomic.
    pub fn acquires(self) -> bool {
        matches!(self, MemSem::Acquire | MemSem::AcqRel)
    }
}

/// The threads an atomic's ordering is promised to (Triton's `scope=`; default `Gpu`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemScope {
    /// `"cta"`: the threads of one program.
    Cta,
    /// `"gpu"`: every program of the launch.
    #[default]
    Gpu,
    /// `"sys"`: the whole system (host and other devices included).
    Sys,
}

impl MemScope {
    /// Every scope, in text order.
    pub const ALL: [MemScope; 3] = [MemScope::Cta, MemScope::Gpu, MemScope::Sys];

    /// Triton's spelling.
    pub fn name(self) -> &'static str {
        match self {
            MemScope::Cta => "cta",
            MemScope::Gpu => "gpu",
            MemScope::Sys => "sys",
        }
    }
}

/// What a [`Op::Reduce`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum (result dtype = input dtype; the DSL widens small ints first).
    Sum,
    /// Maximum, NaN ignored (all-NaN gives NaN).
    Max,
    /// Minimum, NaN ignored.
    Min,
    /// Index (`i32`) of the maximum, left-most on ties.
    ArgMax,
    /// Index (`i32`) of the minimum, left-most on ties.
    ArgMin,
    /// Bitwise xor (`xor_sum`).
    Xor,
    /// User combine function in the op's `combine` region.
    Custom,
}

impl ReduceKind {
    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::ArgMax => "argmax",
            ReduceKind::ArgMin => "argmin",
            ReduceKind::Xor => "xor_sum",
            ReduceKind::Custom => "custom",
        }
    }
}

/// What a [`Op::Scan`] computes (inclusive scans).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// Running sum.
    Sum,
    /// Running product.
    Prod,
    /// User combine function in the op's `combine` region.
    Custom,
}

impl ScanKind {
    /// Text name.
    pub fn name(self) -> &'static str {
        match self {
            ScanKind::Sum => "cumsum",
            ScanKind::Prod => "cumprod",
            ScanKind::Custom => "custom",
        }
    }
}

/// An operation. Grouped by family; see each variant for operand and result types.
///
/// Regions (loop bodies, branches, combine functions) are [`RegionId`]s into the kernel's
/// region arena; a region's block arguments are its [`RegionData::args`](super::RegionData).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    // ---- program ----------------------------------------------------------------------
    /// `program_id(axis)`: `i32` scalar.
    ProgramId {
        /// 0, 1 or 2.
        axis: u8,
    },
    /// `num_programs(axis)`: `i32` scalar.
    NumPrograms {
        /// 0, 1 or 2.
        axis: u8,
    },

    // ---- creation ---------------------------------------------------------------------
    /// A constant; if the result type is a block, every element holds `value` (splat).
    Constant {
        /// The value (interpreted in the result dtype).
        value: Const,
    },
    /// `arange(start, end)`: `i32[end - start]`, element `i` is `start + i`.
    Arange {
        /// First value.
        start: i64,
        /// One past the last value.
        end: i64,
    },
    /// Scalar to block of the result shape (same element type).
    Splat {
        /// Scalar operand.
        src: Value,
    },

    // ---- elementwise ------------------------------------------------------------------
    /// Unary math; result type = operand type.
    Unary {
        /// Which function.
        kind: UnaryOp,
        /// Operand.
        src: Value,
    },
    /// Binary arithmetic/bitwise; operands and result share one type.
    Binary {
        /// Which op.
        kind: BinaryOp,
        /// Left operand.
        lhs: Value,
        /// Right operand.
        rhs: Value,
    },
    /// Comparison; operands share one type, result is `bool` of that shape.
    Cmp {
        /// Predicate.
        pred: CmpPred,
        /// Left operand.
        lhs: Value,
        /// Right operand.
        rhs: Value,
    },
    /// `where(cond, a, b)`: all three of one shape, `cond` is `bool`, result type = `a`'s = `b`'s.
    Select {
        /// `bool` condition.
        cond: Value,
        /// Taken where `cond`.
        on_true: Value,
        /// Taken elsewhere.
        on_false: Value,
    },
    /// `a * b + c` fused (float); all of one type.
    Fma {
        /// Multiplicand.
        a: Value,
        /// Multiplier.
        b: Value,
        /// Addend.
        c: Value,
    },
    /// `clamp(x, lo, hi)` (float): `min(max(x, lo), hi)`; all of one type.
    Clamp {
        /// Value.
        src: Value,
        /// Lower bound.
        lo: Value,
        /// Upper bound.
        hi: Value,
        /// If true a NaN in `src` gives NaN, else NaN is ignored like [`BinaryOp::Max`].
        propagate_nan: bool,
    },
    /// Value conversion to the result dtype (same shape): float->int truncates toward zero,
    /// float narrowing rounds to nearest even, int narrowing truncates bits, int widening
    /// sign-extends signed sources (zero-extends unsigned and `bool`), int->float rounds to
    /// nearest. (Conversion to `bool` is emitted as `!= 0` by the DSL, never as a cast.)
    Cast {
        /// Operand.
        src: Value,
    },
    /// Reinterprets the bits as the result dtype (same width, same shape).
    Bitcast {
        /// Operand.
        src: Value,
    },
    /// `int -> pointer` (Triton's `x.to(tl.pointer_type(dtype))`): a 64-bit integer (or
    /// block of them) to pointers to the result's pointee dtype, same shape. Only an
    /// address a launch gave the kernel (an element of a `ptr_table` argument) can be
    /// dereferenced; any other integer gives a pointer whose every access is an error.
    IntToPtr {
        /// `i64` or `u64` operand.
        src: Value,
    },
    /// `ptr + offset`: pointer arithmetic in elements. `ptr` and `offset` have the same
    /// shape; `offset` is a signed or unsigned int; result type = `ptr`'s type.
    AddPtr {
        /// Pointer (block).
        ptr: Value,
        /// Element offsets.
        offset: Value,
    },

    // ---- memory -----------------------------------------------------------------------
    /// Loads `ptr` (scalar or block of pointers); result is the pointee dtype in `ptr`'s shape.
    /// Masked-off lanes give `other` (same type as the result) or 0 without it.
    Load {
        /// Pointers.
        ptr: Value,
        /// `bool` of `ptr`'s shape.
        mask: Option<Value>,
        /// Fill value, result type; only with `mask`.
        other: Option<Value>,
    },
    /// Stores `value` (pointee dtype, `ptr`'s shape) where `mask` is true. No result.
    Store {
        /// Pointers.
        ptr: Value,
        /// Values, pointee dtype, `ptr`'s shape.
        value: Value,
        /// `bool` of `ptr`'s shape.
        mask: Option<Value>,
    },
    /// Atomic read-modify-write; result = old values (pointee dtype, `ptr`'s shape); masked-off
    /// lanes are not touched and return 0.
    AtomicRmw {
        /// Which update.
        kind: AtomicOp,
        /// Pointers.
        ptr: Value,
        /// Operand values, pointee dtype, `ptr`'s shape.
        value: Value,
        /// `bool` of `ptr`'s shape.
        mask: Option<Value>,
        /// `sem=`; `None`: Triton's default (`acq_rel`).
        sem: Option<MemSem>,
        /// `scope=`.
        scope: MemScope,
    },
    /// Atomic compare-and-swap: where `*ptr == cmp` store `value`; result = old values.
    AtomicCas {
        /// Pointers.
        ptr: Value,
        /// Expected values.
        cmp: Value,
        /// New values.
        value: Value,
        /// `sem=`; `None`: Triton's default (`acq_rel`).
        sem: Option<MemSem>,
        /// `scope=`.
        scope: MemScope,
    },

    // ---- shape ------------------------------------------------------------------------
    /// Broadcasts a block to the result shape (same rank; size-1 dims stretch).
    Broadcast {
        /// Operand.
        src: Value,
    },
    /// Inserts a size-1 dim at `axis` (a scalar becomes a `[1]` block).
    ExpandDims {
        /// Operand.
        src: Value,
        /// New dim's position in the result.
        axis: u32,
    },
    /// Row-major reshape to the result shape (same element count; to a scalar when the result
    /// is a scalar and the operand has one element).
    Reshape {
        /// Operand.
        src: Value,
    },
    /// Permutes dims: result dim `i` is operand dim `order[i]` (`trans`, `permute`).
    Permute {
        /// Operand.
        src: Value,
        /// A permutation of `0..rank`.
        order: Vec<u32>,
    },
    /// Stacks two blocks of one type along a new last dim of size 2.
    Join {
        /// Goes to index 0 of the new dim.
        lhs: Value,
        /// Goes to index 1.
        rhs: Value,
    },
    /// Splits a block whose last dim is 2 into two results without that dim.
    Split {
        /// Operand.
        src: Value,
    },

    // ---- linear algebra ---------------------------------------------------------------
    /// Matrix product `a @ b + acc`: `[M,K] x [K,N] + [M,N]` or batched `[B,M,K] x [B,K,N]`.
    /// `a` and `b` share a dtype; result type = `acc`'s type; products are accumulated in the
    /// accumulator dtype (full precision; no tf32).
    Dot {
        /// Left matrix.
        a: Value,
        /// Right matrix.
        b: Value,
        /// Accumulator.
        acc: Value,
    },

    // ---- reductions and scans ---------------------------------------------------------
    /// Reduces `srcs` (one shape) along `axis`; results drop that dim (a 1-D input gives
    /// scalars). Builtin kinds take one source; `ArgMax`/`ArgMin` give `i32`. `Custom`
    /// takes `n` sources and runs `combine` (args: `n` accumulator scalars then `n` new
    /// scalars; yields `n` scalars); results have the sources' dtypes. Combine regions are
    /// isolated: they use only their arguments and their own ops (like Triton's combine
    /// functions, which are separate jit functions).
    Reduce {
        /// What to compute.
        kind: ReduceKind,
        /// Reduced dim.
        axis: u32,
        /// Sources.
        srcs: Vec<Value>,
        /// Combine region for `Custom`.
        combine: Option<RegionId>,
    },
    /// Inclusive scan along `axis`; results have the sources' types. `Custom` as for
    /// [`Op::Reduce`].
    Scan {
        /// What to compute.
        kind: ScanKind,
        /// Scanned dim.
        axis: u32,
        /// Scan from the end.
        reverse: bool,
        /// Sources.
        srcs: Vec<Value>,
        /// Combine region for `Custom`.
        combine: Option<RegionId>,
    },

    // ---- random -----------------------------------------------------------------------
    /// Philox-4x32 with `rounds` rounds (Triton uses 10): counters `c0..c3` and keys `k0, k1`
    /// are `u32` of one shape; four `u32` results of that shape.
    Philox {
        /// Counter words.
        counters: [Value; 4],
        /// Key words.
        key: [Value; 2],
        /// Number of rounds.
        rounds: u32,
    },

    // ---- synchronisation --------------------------------------------------------------
    /// `debug_barrier()`: all threads of the program reach this point.
    DebugBarrier,

    // ---- control flow -----------------------------------------------------------------
    /// `for iv in range(lo, hi, step)` with loop-carried values. `lo, hi, step` are int
    /// scalars of one dtype; the body runs for `iv = lo, lo + step, ...` while `iv < hi`
    /// (no iteration if `lo >= hi`). Body args: `iv` then the carried values; body yields the
    /// new carried values; results are the final carried values (the initial ones if the
    /// body never ran).
    For {
        /// Start.
        lo: Value,
        /// End (exclusive).
        hi: Value,
        /// Step (> 0 at run time).
        step: Value,
        /// Initial carried values.
        init: Vec<Value>,
        /// Loop body.
        body: RegionId,
    },
    /// `while` loop: `cond` region (args = carried) yields one `bool` scalar; while true,
    /// `body` (args = carried) yields the next carried values. Results = the carried values
    /// for which `cond` first yielded false.
    While {
        /// Initial carried values.
        init: Vec<Value>,
        /// Condition region.
        cond: RegionId,
        /// Body region.
        body: RegionId,
    },
    /// `if cond` on a `bool` scalar; both regions (no args) yield the results.
    If {
        /// Condition.
        cond: Value,
        /// Taken when true.
        then_region: RegionId,
        /// Taken when false.
        else_region: RegionId,
    },
    /// Region terminator: passes values to the enclosing op.
    Yield {
        /// Yielded values.
        values: Vec<Value>,
    },
}

/// Static properties of an op, declared once in [`Op::props`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpProps {
    /// No side effects and no dependence on memory: may be removed if unused, CSE'd, hoisted.
    pub pure: bool,
    /// Operand order does not matter (for two-operand ops).
    pub commutative: bool,
    /// Ends a region.
    pub terminator: bool,
    /// Reads device memory.
    pub reads_memory: bool,
    /// Writes device memory.
    pub writes_memory: bool,
}

const fn props(pure: bool, commutative: bool) -> OpProps {
    OpProps {
        pure,
        commutative,
        terminator: false,
        reads_memory: false,
        writes_memory: false,
    }
}

impl Op {
    /// The property table.
    pub fn props(&self) -> OpProps {
        const PURE: OpProps = props(true, false);
        match self {
            Op::ProgramId { .. } | Op::NumPrograms { .. } => PURE,
            Op::Constant { .. } | Op::Arange { .. } | Op::Splat { .. } => PURE,
            Op::Unary { .. } => PURE,
            Op::Binary { kind, .. } => props(true, kind.is_commutative()),
            Op::Cmp { pred, .. } => props(true, matches!(pred, CmpPred::Eq | CmpPred::Ne)),
            Op::Select { .. } | Op::Fma { .. } | Op::Clamp { .. } => PURE,
            Op::Cast { .. } | Op::Bitcast { .. } | Op::AddPtr { .. } => PURE,
            Op::IntToPtr { .. } => PURE,
            Op::Load { .. } => OpProps {
                reads_memory: true,
                ..props(false, false)
            },
            Op::Store { .. } => OpProps {
                writes_memory: true,
                ..props(false, false)
            },
            Op::AtomicRmw { .. } | Op::AtomicCas { .. } => OpProps {
                reads_memory: true,
                writes_memory: true,
                ..props(false, false)
            },
            Op::Broadcast { .. }
            | Op::ExpandDims { .. }
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Join { .. }
            | Op::Split { .. } => PURE,
            Op::Dot { .. } => PURE,
            Op::Reduce { .. } | Op::Scan { .. } => PURE,
            Op::Philox { .. } => PURE,
            Op::DebugBarrier => props(false, false),
            // Loops and branches are pure only if their regions are; passes look inside.
            Op::For { .. } | Op::While { .. } | Op::If { .. } => props(false, false),
            Op::Yield { .. } => OpProps {
                terminator: true,
                ..props(false, false)
            },
        }
    }

    /// Whether the op computes each result element from the operands' elements at the same
    /// index alone (unary, binary, compare, select, fma, clamp, casts): a block op that moves
    /// no data between elements.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary { .. }
                | Op::Binary { .. }
                | Op::Cmp { .. }
                | Op::Select { .. }
                | Op::Fma { .. }
                | Op::Clamp { .. }
                | Op::Cast { .. }
                | Op::Bitcast { .. }
        )
    }

    /// Text name of the op (family name; kinds are printed after it).
    pub fn name(&self) -> &'static str {
        match self {
            Op::ProgramId { .. } => "program_id",
            Op::NumPrograms { .. } => "num_programs",
            Op::Constant { .. } => "constant",
            Op::Arange { .. } => "arange",
            Op::Splat { .. } => "splat",
            Op::Unary { kind, .. } => kind.name(),
            Op::Binary { kind, .. } => kind.name(),
            Op::Cmp { pred, .. } => pred.name(),
            Op::Select { .. } => "select",
            Op::Fma { .. } => "fma",
            Op::Clamp { .. } => "clamp",
            Op::Cast { .. } => "cast",
            Op::Bitcast { .. } => "bitcast",
            Op::AddPtr { .. } => "addptr",
            Op::IntToPtr { .. } => "int_to_ptr",
            Op::Load { .. } => "load",
            Op::Store { .. } => "store",
            Op::AtomicRmw { .. } => "atomic_rmw",
            Op::AtomicCas { .. } => "atomic_cas",
            Op::Broadcast { .. } => "broadcast",
            Op::ExpandDims { .. } => "expand_dims",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Join { .. } => "join",
            Op::Split { .. } => "split",
            Op::Dot { .. } => "dot",
            Op::Reduce { .. } => "reduce",
            Op::Scan { .. } => "scan",
            Op::Philox { .. } => "philox",
            Op::DebugBarrier => "debug_barrier",
            Op::For { .. } => "for",
            Op::While { .. } => "while",
            Op::If { .. } => "if",
            Op::Yield { .. } => "yield",
        }
    }

    /// Calls `f` on every operand, in a fixed order (the printer's order).
    pub fn for_each_operand(&self, mut f: impl FnMut(Value)) {
        self.operands_impl(&mut |v| f(*v));
    }

    /// Calls `f` on every operand mutably (for passes that rename values).
    pub fn for_each_operand_mut(&mut self, mut f: impl FnMut(&mut Value)) {
        // Same order as `for_each_operand`; one implementation over `&mut`.
        let mut g = |v: &mut Value| f(v);
        match self {
            Op::ProgramId { .. }
            | Op::NumPrograms { .. }
            | Op::Constant { .. }
            | Op::Arange { .. }
            | Op::DebugBarrier => {}
            Op::Splat { src }
            | Op::Unary { src, .. }
            | Op::Cast { src }
            | Op::IntToPtr { src }
            | Op::Bitcast { src }
            | Op::Broadcast { src }
            | Op::ExpandDims { src, .. }
            | Op::Reshape { src }
            | Op::Permute { src, .. }
            | Op::Split { src } => g(src),
            Op::Binary { lhs, rhs, .. } | Op::Cmp { lhs, rhs, .. } | Op::Join { lhs, rhs } => {
                g(lhs);
                g(rhs)
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => {
                g(cond);
                g(on_true);
                g(on_false)
            }
            Op::Fma { a, b, c } => {
                g(a);
                g(b);
                g(c)
            }
            Op::Clamp { src, lo, hi, .. } => {
                g(src);
                g(lo);
                g(hi)
            }
            Op::AddPtr { ptr, offset } => {
                g(ptr);
                g(offset)
            }
            Op::Load { ptr, mask, other } => {
                g(ptr);
                mask.iter_mut().for_each(&mut g);
                other.iter_mut().for_each(&mut g)
            }
            Op::Store { ptr, value, mask }
            | Op::AtomicRmw {
                ptr, value, mask, ..
            } => {
                g(ptr);
                g(value);
                mask.iter_mut().for_each(&mut g)
            }
            Op::AtomicCas {
                ptr, cmp, value, ..
            } => {
                g(ptr);
                g(cmp);
                g(value)
            }
            Op::Dot { a, b, acc } => {
                g(a);
                g(b);
                g(acc)
            }
            Op::Reduce { srcs, .. } | Op::Scan { srcs, .. } => srcs.iter_mut().for_each(g),
            Op::Philox { counters, key, .. } => {
                counters.iter_mut().for_each(&mut g);
                key.iter_mut().for_each(g)
            }
            Op::For {
                lo, hi, step, init, ..
            } => {
                g(lo);
                g(hi);
                g(step);
                init.iter_mut().for_each(g)
            }
            Op::While { init, .. } => init.iter_mut().for_each(g),
            Op::If { cond, .. } => g(cond),
            Op::Yield { values } => values.iter_mut().for_each(g),
        }
    }

    fn operands_impl(&self, f: &mut dyn FnMut(&Value)) {
        match self {
            Op::ProgramId { .. }
            | Op::NumPrograms { .. }
            | Op::Constant { .. }
            | Op::Arange { .. }
            | Op::DebugBarrier => {}
            Op::Splat { src }
            | Op::Unary { src, .. }
            | Op::Cast { src }
            | Op::IntToPtr { src }
            | Op::Bitcast { src }
            | Op::Broadcast { src }
            | Op::ExpandDims { src, .. }
            | Op::Reshape { src }
            | Op::Permute { src, .. }
            | Op::Split { src } => f(src),
            Op::Binary { lhs, rhs, .. } | Op::Cmp { lhs, rhs, .. } | Op::Join { lhs, rhs } => {
                f(lhs);
                f(rhs)
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => {
                f(cond);
                f(on_true);
                f(on_false)
            }
            Op::Fma { a, b, c } => {
                f(a);
                f(b);
                f(c)
            }
            Op::Clamp { src, lo, hi, .. } => {
                f(src);
                f(lo);
                f(hi)
            }
            Op::AddPtr { ptr, offset } => {
                f(ptr);
                f(offset)
            }
            Op::Load { ptr, mask, other } => {
                f(ptr);
                mask.iter().for_each(&mut *f);
                other.iter().for_each(f)
            }
            Op::Store { ptr, value, mask }
            | Op::AtomicRmw {
                ptr, value, mask, ..
            } => {
                f(ptr);
                f(value);
                mask.iter().for_each(f)
            }
            Op::AtomicCas {
                ptr, cmp, value, ..
            } => {
                f(ptr);
                f(cmp);
                f(value)
            }
            Op::Dot { a, b, acc } => {
                f(a);
                f(b);
                f(acc)
            }
            Op::Reduce { srcs, .. } | Op::Scan { srcs, .. } => srcs.iter().for_each(f),
            Op::Philox { counters, key, .. } => {
                counters.iter().for_each(&mut *f);
                key.iter().for_each(f)
            }
            Op::For {
                lo, hi, step, init, ..
            } => {
                f(lo);
                f(hi);
                f(step);
                init.iter().for_each(f)
            }
            Op::While { init, .. } => init.iter().for_each(f),
            Op::If { cond, .. } => f(cond),
            Op::Yield { values } => values.iter().for_each(f),
        }
    }

    /// The op's operands, in the printer's order.
    pub fn operands(&self) -> Vec<Value> {
        let mut out = Vec::with_capacity(4);
        self.for_each_operand(|v| out.push(v));
        out
    }

    /// Calls `f` on every region id the op owns, mutably, in [`Op::regions`] order.
    pub fn for_each_region_mut(&mut self, mut f: impl FnMut(&mut RegionId)) {
        match self {
            Op::For { body, .. } => f(body),
            Op::While { cond, body, .. } => {
                f(cond);
                f(body)
            }
            Op::If {
                then_region,
                else_region,
                ..
            } => {
                f(then_region);
                f(else_region)
            }
            Op::Reduce { combine, .. } | Op::Scan { combine, .. } => combine.iter_mut().for_each(f),
            _ => {}
        }
    }

    /// The regions the op owns, in order (`for`: body; `while`: cond, body; `if`: then,
    /// else; custom `reduce`/`scan`: combine).
    pub fn regions(&self) -> impl Iterator<Item = RegionId> {
        let pair: [Option<RegionId>; 2] = match self {
            Op::For { body, .. } => [Some(*body), None],
            Op::While { cond, body, .. } => [Some(*cond), Some(*body)],
            Op::If {
                then_region,
                else_region,
                ..
            } => [Some(*then_region), Some(*else_region)],
            Op::Reduce { combine, .. } | Op::Scan { combine, .. } => [*combine, None],
            _ => [None, None],
        };
        pair.into_iter().flatten()
    }
}

/// Why a target without pointer tables refuses [`Op::IntToPtr`] and `ptr_table` arguments,
/// and what to write instead: one wording for every such target (`target`: its name in
/// messages, e.g. `Metal`).
pub fn int_to_ptr_unsupported(target: &str) -> String {
    format!(
        "pointers cast from integers (`int_to_ptr`, `.to(pointer_type(..))`) and `ptr_table` \
         arguments are not supported on {target}: its kernels take a fixed list of arrays, \
         not a table of addresses. Concatenate the groups into one array and pass each \
         group's offset (examples/grouped_gemm.rs does both), or run on Target::Cpu or \
         Target::CpuCompiled"
    )
}
