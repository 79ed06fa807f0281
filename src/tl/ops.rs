//! The `triton.language` functions: argument normalisation only; `semantics.rs` does the work.

use super::block_ptr::{self, Pointer};
use super::builder::{op, op_any};
use super::semantics::Opnd;
use super::tensor::{compare, resolve, Operand, Tensor};
use crate::dtype::DType;
use crate::error::SourceLoc;
use crate::ir::{AtomicOp, CmpPred, OpId, ReduceKind, ScanKind, UnaryOp};

/// A block shape argument: `[64, 32]`, `&[m, n]`, `vec![..]` of `i64`, `i32` or `usize`.
pub trait IntoShape {
    /// The dims.
    fn into_shape(self) -> Vec<i64>;
}

macro_rules! shape_impls {
    ($($t:ty),*) => {$(
        impl<const N: usize> IntoShape for [$t; N] {
            fn into_shape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
        impl IntoShape for &[$t] {
            fn into_shape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
        impl IntoShape for Vec<$t> {
            fn into_shape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
        impl IntoShape for &Vec<$t> {
            fn into_shape(self) -> Vec<i64> { self.iter().map(|&d| d as i64).collect() }
        }
    )*};
}
shape_impls!(i64, i32, usize, u32);

/// The axis argument of reductions: an axis (`1`, negative counts from the end), `None`
/// (all axes, giving a scalar), optionally with Triton's `keep_dims` (see [`keep_dims`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis {
    /// The axis, `None` for all.
    pub axis: Option<i64>,
    /// Keep reduced dims as size 1.
    pub keep_dims: bool,
}

impl From<i64> for Axis {
    fn from(a: i64) -> Self {
        Axis {
            axis: Some(a),
            keep_dims: false,
        }
    }
}

impl From<i32> for Axis {
    fn from(a: i32) -> Self {
        Axis {
            axis: Some(a as i64),
            keep_dims: false,
        }
    }
}

impl From<usize> for Axis {
    fn from(a: usize) -> Self {
        Axis {
            axis: Some(a as i64),
            keep_dims: false,
        }
    }
}

impl From<Option<i64>> for Axis {
    fn from(a: Option<i64>) -> Self {
        Axis {
            axis: a,
            keep_dims: false,
        }
    }
}

/// `axis` with `keep_dims=True`: `tl::sum(x, tl::keep_dims(1))`; `keep_dims(None)` for all axes.
pub fn keep_dims(axis: impl Into<Axis>) -> Axis {
    Axis {
        keep_dims: true,
        ..axis.into()
    }
}

// ---- programs -----------------------------------------------------------------------------

/// `program_id(axis)`: this program's index along `axis` (0, 1 or 2); `i32` scalar.
#[track_caller]
pub fn program_id(axis: i64) -> Tensor {
    op("program_id", SourceLoc::caller(), |b| {
        b.program_id(axis, false)
    })
}

/// `num_programs(axis)`: the grid size along `axis`; `i32` scalar.
#[track_caller]
pub fn num_programs(axis: i64) -> Tensor {
    op("num_programs", SourceLoc::caller(), |b| {
        b.program_id(axis, true)
    })
}

// ---- creation -----------------------------------------------------------------------------

/// `arange(start, end)`: `i32[end - start]` holding `start..end`; `end - start` a power of two.
#[track_caller]
pub fn arange(start: i64, end: i64) -> Tensor {
    op("arange", SourceLoc::caller(), |b| b.arange(start, end))
}

/// `full(shape, value, dtype)`.
#[track_caller]
pub fn full(shape: impl IntoShape, value: impl Into<Operand>, dtype: DType) -> Tensor {
    let (loc, shape, value) = (SourceLoc::caller(), shape.into_shape(), value.into());
    op("full", loc, |b| {
        let v = resolve(b, value)?;
        b.full(&shape, v, dtype)
    })
}

/// `zeros(shape, dtype)`.
#[track_caller]
pub fn zeros(shape: impl IntoShape, dtype: DType) -> Tensor {
    let (loc, shape) = (SourceLoc::caller(), shape.into_shape());
    op("zeros", loc, |b| {
        b.full(&shape, Opnd::Weak(super::Scalar::Int(0)), dtype)
    })
}

/// `zeros_like(x)`.
#[track_caller]
pub fn zeros_like(x: Tensor) -> Tensor {
    let loc = SourceLoc::caller();
    op("zeros_like", loc, |b| {
        let v = b.value(x)?;
        let t = b.ty(v).clone();
        if t.ptr {
            return Err(format!("zeros_like of a pointer ({t})"));
        }
        Ok(b.constant(crate::ir::Const::Int(0), t))
    })
}

// ---- memory -------------------------------------------------------------------------------

/// `load(ptr)`; add Triton's `mask=` and `other=` with [`Tensor::mask`] and [`Tensor::other`]:
/// `tl::load(p + offs).mask(offs.lt(n)).other(0.0)`. Of a [`BlockPtr`](super::BlockPtr), the
/// block without boundary checks ([`load_block`](super::load_block) adds them).
#[track_caller]
pub fn load(ptr: impl Into<Pointer>) -> Tensor {
    let loc = SourceLoc::caller();
    let ptr = match ptr.into() {
        Pointer::Tensor(t) => t,
        Pointer::Block(p) => return block_ptr::load_at(loc, *p, Vec::new(), ""),
    };
    op("load", loc, |b| {
        let p = b.value(ptr)?;
        b.load(p, None, None)
    })
}

/// `load(ptr, mask=mask, other=other)` in one call.
#[track_caller]
pub fn load_with(ptr: Tensor, mask: impl Into<Operand>, other: impl Into<Operand>) -> Tensor {
    let (loc, mask, other) = (SourceLoc::caller(), mask.into(), other.into());
    op("load", loc, |b| {
        let p = b.value(ptr)?;
        let (m, o) = (resolve(b, mask)?, resolve(b, other)?);
        b.load(p, Some(m), Some(o))
    })
}

/// A recorded `store`; [`Store::mask`] adds Triton's `mask=`.
#[derive(Clone, Copy, Debug)]
pub struct Store {
    op: Option<(OpId, u32)>,
}

impl Store {
    /// Only lanes where `mask` is true are written.
    #[track_caller]
    pub fn mask(self, mask: impl Into<Operand>) -> Store {
        let (loc, mask) = (SourceLoc::caller(), mask.into());
        if let Some((id, build)) = self.op {
            op_any("store", loc, |b| {
                if b.id != build {
                    return Err("this store belongs to another kernel build".into());
                }
                let m = resolve(b, mask)?;
                b.patch_store(id, m)
            });
        }
        self
    }
}

/// `store(ptr, value)`; chain `.mask(m)` for Triton's `mask=`. `value` is broadcast to the
/// pointer shape and cast to the pointee dtype. Through a [`BlockPtr`](super::BlockPtr), the
/// block without boundary checks ([`store_block`](super::store_block) adds them).
#[track_caller]
pub fn store(ptr: impl Into<Pointer>, value: impl Into<Operand>) -> Store {
    let (loc, value) = (SourceLoc::caller(), value.into());
    let ptr = match ptr.into() {
        Pointer::Tensor(t) => t,
        Pointer::Block(p) => {
            let op = block_ptr::store_at(loc, *p, value, Vec::new());
            return Store { op };
        }
    };
    let op = op_any("store", loc, |b| {
        let p = b.value(ptr)?;
        let v = resolve(b, value)?;
        Ok((b.store(p, v, None)?, b.id))
    });
    Store { op }
}

/// `store(ptr, value, mask=mask)` in one call.
#[track_caller]
pub fn store_with(ptr: Tensor, value: impl Into<Operand>, mask: impl Into<Operand>) {
    let (loc, value, mask) = (SourceLoc::caller(), value.into(), mask.into());
    op_any("store", loc, |b| {
        let p = b.value(ptr)?;
        let (v, m) = (resolve(b, value)?, resolve(b, mask)?);
        b.store(p, v, Some(m))
    });
}

macro_rules! atomics {
    ($($name:ident => $kind:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "(ptr, val)`: returns the old values; chain `.mask(m)` for `mask=`.")]
        #[track_caller]
        pub fn $name(ptr: Tensor, val: impl Into<Operand>) -> Tensor {
            let (loc, val) = (SourceLoc::caller(), val.into());
            op(stringify!($name), loc, |b| {
                let p = b.value(ptr)?;
                let v = resolve(b, val)?;
                b.atomic_rmw(AtomicOp::$kind, p, v, None)
            })
        }
    )*};
}
atomics!(atomic_add => Add, atomic_max => Max, atomic_min => Min, atomic_and => And,
    atomic_or => Or, atomic_xor => Xor, atomic_xchg => Xchg);

/// `atomic_cas(ptr, cmp, val)`: where `*ptr == cmp` store `val`; returns the old values.
#[track_caller]
pub fn atomic_cas(ptr: Tensor, cmp: impl Into<Operand>, val: impl Into<Operand>) -> Tensor {
    let (loc, cmp, val) = (SourceLoc::caller(), cmp.into(), val.into());
    op("atomic_cas", loc, |b| {
        let p = b.value(ptr)?;
        let (c, v) = (resolve(b, cmp)?, resolve(b, val)?);
        b.atomic_cas(p, c, v)
    })
}

// ---- elementwise --------------------------------------------------------------------------

macro_rules! math1 {
    ($($name:ident => $kind:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "(x)` elementwise (Triton accepts fp32 and fp64).")]
        #[track_caller]
        pub fn $name(x: impl Into<Operand>) -> Tensor {
            let (loc, x) = (SourceLoc::caller(), x.into());
            op(stringify!($name), loc, |b| {
                let x = resolve(b, x)?;
                b.unary(UnaryOp::$kind, x)
            })
        }
    )*};
}
math1!(exp => Exp, exp2 => Exp2, log => Log, log2 => Log2, sqrt => Sqrt, rsqrt => Rsqrt,
    sin => Sin, cos => Cos, erf => Erf, floor => Floor, ceil => Ceil);

/// `sqrt_rn(x)`: correctly rounded square root (the IR's `sqrt` is IEEE already).
#[track_caller]
pub fn sqrt_rn(x: impl Into<Operand>) -> Tensor {
    let (loc, x) = (SourceLoc::caller(), x.into());
    op("sqrt_rn", loc, |b| {
        let x = resolve(b, x)?;
        b.require_f32(x, "sqrt_rn")?;
        b.unary(UnaryOp::Sqrt, x)
    })
}

/// `abs(x)` (any number type).
#[track_caller]
pub fn abs(x: impl Into<Operand>) -> Tensor {
    let (loc, x) = (SourceLoc::caller(), x.into());
    op("abs", loc, |b| {
        let x = resolve(b, x)?;
        b.unary(UnaryOp::Abs, x)
    })
}

/// `sigmoid(x) = 1 / (1 + exp(-x))`.
#[track_caller]
pub fn sigmoid(x: impl Into<Operand>) -> Tensor {
    let (loc, x) = (SourceLoc::caller(), x.into());
    op("sigmoid", loc, |b| {
        let x = resolve(b, x)?;
        b.sigmoid(x)
    })
}

macro_rules! binary_fns {
    ($($(#[$m:meta])* $name:ident => |$b:ident, $x:ident, $y:ident| $body:expr;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl Into<Operand>, y: impl Into<Operand>) -> Tensor {
            let (loc, x, y) = (SourceLoc::caller(), x.into(), y.into());
            op(stringify!($name), loc, |$b| {
                let ($x, $y) = (resolve($b, x)?, resolve($b, y)?);
                $body
            })
        }
    )*};
}
binary_fns! {
    /// `maximum(x, y)`; for floats NaN is ignored (Triton's default `PropagateNan.NONE`).
    maximum => |b, x, y| b.max_min(x, y, true, false);
    /// `minimum(x, y)`; for floats NaN is ignored.
    minimum => |b, x, y| b.max_min(x, y, false, false);
    /// `maximum(x, y, propagate_nan=PropagateNan.ALL)`.
    maximum_nan => |b, x, y| b.max_min(x, y, true, true);
    /// `minimum(x, y, propagate_nan=PropagateNan.ALL)`.
    minimum_nan => |b, x, y| b.max_min(x, y, false, true);
    /// `umulhi(x, y)`: high 32 (64) bits of the unsigned product of 32-bit (64-bit) integers.
    umulhi => |b, x, y| b.umulhi(x, y);
    /// `cdiv(x, d) = (x + d - 1) // d`.
    cdiv => |b, x, y| b.cdiv(x, y);
    /// Triton's `x // y` on integers (truncates toward zero, like C); of two Rust integers,
    /// constexpr arithmetic: Python's floor division (`floordiv(-7, 2)` is -4).
    floordiv => |b, x, y| b.floordiv(x, y);
    /// `x / y` (true division: int / int gives fp32); same as the `/` operator.
    div => |b, x, y| b.truediv(x, y);
    /// `fdiv(x, y)`: division of floats (IEEE here; Triton's may be approximate).
    fdiv => |b, x, y| b.fdiv(x, y);
    /// `div_rn(x, y)`: IEEE round-to-nearest division of fp32 values.
    div_rn => |b, x, y| {
        b.require_f32(x, "div_rn")?;
        b.require_f32(y, "div_rn")?;
        b.fdiv(x, y)
    };
    /// `x % y` (C remainder for ints, fmod for floats); same as the `%` operator. Of two Rust
    /// numbers it is constexpr arithmetic, Python's modulo (the divisor's sign), as
    /// [`floordiv`] of two Rust integers is Python's floor division.
    rem => |b, x, y| b.rem(x, y);
}

/// `fma(x, y, z) = x * y + z` fused.
#[track_caller]
pub fn fma(x: impl Into<Operand>, y: impl Into<Operand>, z: impl Into<Operand>) -> Tensor {
    let (loc, x, y, z) = (SourceLoc::caller(), x.into(), y.into(), z.into());
    op("fma", loc, |b| {
        let (x, y, z) = (resolve(b, x)?, resolve(b, y)?, resolve(b, z)?);
        b.fma(x, y, z)
    })
}

/// `clamp(x, min, max)` (floats; NaN ignored).
#[track_caller]
pub fn clamp(x: impl Into<Operand>, min: impl Into<Operand>, max: impl Into<Operand>) -> Tensor {
    let (loc, x, lo, hi) = (SourceLoc::caller(), x.into(), min.into(), max.into());
    op("clamp", loc, |b| {
        let (x, lo, hi) = (resolve(b, x)?, resolve(b, lo)?, resolve(b, hi)?);
        b.clamp(x, lo, hi, false)
    })
}

/// `where(cond, x, y)` (`where` is a Rust keyword).
#[track_caller]
pub fn where_(cond: impl Into<Operand>, x: impl Into<Operand>, y: impl Into<Operand>) -> Tensor {
    let (loc, c, x, y) = (SourceLoc::caller(), cond.into(), x.into(), y.into());
    op("where", loc, |b| {
        let (c, x, y) = (resolve(b, c)?, resolve(b, x)?, resolve(b, y)?);
        b.where_(c, x, y)
    })
}

/// `x.to(dtype)`: value conversion; `x.to(pointer_type(dtype))` of 64-bit integers makes
/// pointers ([`int_to_ptr`]).
#[track_caller]
pub fn cast(x: Tensor, dtype: impl Into<CastTarget>) -> Tensor {
    let loc = SourceLoc::caller();
    match dtype.into() {
        CastTarget::Value(dtype) => op("cast", loc, |b| {
            let v = b.value(x)?;
            b.cast(v, dtype)
        }),
        CastTarget::Pointer(dtype) => op("int_to_ptr", loc, |b| {
            let v = b.value(x)?;
            b.int_to_ptr(v, dtype)
        }),
    }
}

/// What [`cast`] (`x.to(..)`) converts to: values of a dtype, or pointers to one
/// ([`pointer_type`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastTarget {
    /// Numbers of this dtype (a value conversion).
    Value(DType),
    /// Pointers to elements of this dtype (`int_to_ptr`).
    Pointer(DType),
}

impl From<DType> for CastTarget {
    fn from(d: DType) -> CastTarget {
        CastTarget::Value(d)
    }
}

/// Triton's `tl.pointer_type(dtype)`, for `x.to(tl::pointer_type(F16))`.
pub fn pointer_type(dtype: DType) -> CastTarget {
    CastTarget::Pointer(dtype)
}

/// Triton's `x.to(tl.pointer_type(dtype))` of an `int64` scalar or block: pointers to
/// `dtype` elements at those addresses, as Triton's grouped GEMM tutorial reads them from
/// a table (`tl.load(group_a_ptrs + g).to(tl.pointer_type(tl.float16))`).
///
/// Addresses come from a `ptr_table` launch argument (`runtime::ptr_table`): the kernel's
/// `i64` pointer parameter then holds one address per array of the table, and the pointer
/// cast from element `g` reaches array `g`, bounds-checked like any argument. An integer
/// that is not one of those addresses (an offset added before the cast included: offset
/// the pointer after it), or a cast to another pointee dtype than the array's, gives a
/// pointer whose every access is an error naming the op; the cast itself never fails, so
/// masked-off lanes may hold anything. Runs on `Target::Cpu` and `Target::CpuCompiled`;
/// Metal and CUDA refuse it with `Unsupported` (their kernels take a fixed list of arrays:
/// concatenate the groups and pass offsets instead).
#[track_caller]
pub fn int_to_ptr(x: Tensor, dtype: DType) -> Tensor {
    let loc = SourceLoc::caller();
    op("int_to_ptr", loc, |b| {
        let v = b.value(x)?;
        b.int_to_ptr(v, dtype)
    })
}

/// `x.to(dtype, bitcast=True)`.
#[track_caller]
pub fn bitcast(x: Tensor, dtype: DType) -> Tensor {
    let loc = SourceLoc::caller();
    op("bitcast", loc, |b| {
        let v = b.value(x)?;
        b.bitcast(v, dtype)
    })
}

// ---- shapes -------------------------------------------------------------------------------

/// `reshape(x, shape)` (row-major).
#[track_caller]
pub fn reshape(x: Tensor, shape: impl IntoShape) -> Tensor {
    let (loc, shape) = (SourceLoc::caller(), shape.into_shape());
    op("reshape", loc, |b| {
        let v = b.value(x)?;
        let s = b.check_shape(&shape)?;
        b.reshape(v, &s)
    })
}

/// `expand_dims(x, axis)`.
#[track_caller]
pub fn expand_dims(x: Tensor, axis: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("expand_dims", loc, |b| {
        let v = b.value(x)?;
        b.expand_dims(v, axis)
    })
}

/// `broadcast_to(x, shape)`.
#[track_caller]
pub fn broadcast_to(x: Tensor, shape: impl IntoShape) -> Tensor {
    let (loc, shape) = (SourceLoc::caller(), shape.into_shape());
    op("broadcast_to", loc, |b| {
        let v = b.value(x)?;
        let s = b.check_shape(&shape)?;
        let r = b.ty(v).rank();
        let v = if r < s.len() {
            let mut v = v;
            for _ in r..s.len() {
                v = b.expand_dims(v, 0)?;
            }
            v
        } else {
            v
        };
        b.broadcast_to(v, &s)
    })
}

/// `trans(x)`: swaps the last two dims (`permute` for other orders).
#[track_caller]
pub fn trans(x: Tensor) -> Tensor {
    let loc = SourceLoc::caller();
    op("trans", loc, |b| {
        let v = b.value(x)?;
        let r = b.ty(v).rank() as i64;
        if r < 2 {
            return Err(format!("trans needs at least 2 dims, got {}", b.ty(v)));
        }
        let mut dims: Vec<i64> = (0..r).collect();
        dims.swap(r as usize - 2, r as usize - 1);
        b.permute(v, &dims)
    })
}

/// `permute(x, dims)`: result dim `i` is input dim `dims[i]`.
#[track_caller]
pub fn permute(x: Tensor, dims: impl IntoShape) -> Tensor {
    let (loc, dims) = (SourceLoc::caller(), dims.into_shape());
    op("permute", loc, |b| {
        let v = b.value(x)?;
        b.permute(v, &dims)
    })
}

/// `join(a, b)`: stacks along a new last dim of size 2.
#[track_caller]
pub fn join(a: Tensor, b: Tensor) -> Tensor {
    let loc = SourceLoc::caller();
    op("join", loc, |bd| {
        let (x, y) = (bd.value(a)?, bd.value(b)?);
        bd.join(x, y)
    })
}

/// `split(a)`: the two halves of a last dim of size 2.
#[track_caller]
pub fn split(a: Tensor) -> (Tensor, Tensor) {
    let loc = SourceLoc::caller();
    let r = op_any("split", loc, |b| {
        let v = b.value(a)?;
        let (x, y) = b.split(v)?;
        Ok((b.handle(x), b.handle(y)))
    });
    r.unwrap_or((Tensor::poison(), Tensor::poison()))
}

// ---- linear algebra -----------------------------------------------------------------------

/// `dot(a, b, acc)`: `a @ b (+ acc)`; fp32 accumulation for floats (int8 gives int32).
/// Pass `None` for no accumulator.
#[track_caller]
pub fn dot(a: Tensor, b: Tensor, acc: impl Into<Option<Tensor>>) -> Tensor {
    let (loc, acc) = (SourceLoc::caller(), acc.into());
    op("dot", loc, |bd| {
        let (x, y) = (bd.value(a)?, bd.value(b)?);
        let c = acc.map(|c| bd.value(c)).transpose()?;
        bd.dot(x, y, c, None)
    })
}

/// `dot(a, b, acc, out_dtype=out)` (e.g. `F16` accumulation for fp16 inputs).
#[track_caller]
pub fn dot_out(a: Tensor, b: Tensor, acc: impl Into<Option<Tensor>>, out: DType) -> Tensor {
    let (loc, acc) = (SourceLoc::caller(), acc.into());
    op("dot", loc, |bd| {
        let (x, y) = (bd.value(a)?, bd.value(b)?);
        let c = acc.map(|c| bd.value(c)).transpose()?;
        bd.dot(x, y, c, Some(out))
    })
}

// ---- reductions and scans -----------------------------------------------------------------

macro_rules! reductions {
    ($($(#[$m:meta])* $name:ident => $kind:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: Tensor, axis: impl Into<Axis>) -> Tensor {
            let (loc, ax) = (SourceLoc::caller(), axis.into());
            op(stringify!($name), loc, |b| {
                let v = b.value(x)?;
                b.reduce_builtin(ReduceKind::$kind, v, ax.axis, ax.keep_dims)
            })
        }
    )*};
}
reductions! {
    /// `sum(x, axis)`; ints narrower than 32 bits are summed as 32-bit.
    sum => Sum;
    /// `max(x, axis)`; NaN ignored; inputs narrower than 32 bits widen to fp32/int32.
    max => Max;
    /// `min(x, axis)`; NaN ignored; inputs narrower than 32 bits widen to fp32/int32.
    min => Min;
    /// `argmax(x, axis)`: `i32` index of the maximum, left-most on ties.
    argmax => ArgMax;
    /// `argmin(x, axis)`: `i32` index of the minimum, left-most on ties.
    argmin => ArgMin;
    /// `xor_sum(x, axis)` (integers).
    xor_sum => Xor;
}

/// `cumsum(x, axis)`: inclusive running sum.
#[track_caller]
pub fn cumsum(x: Tensor, axis: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("cumsum", loc, |b| {
        let v = b.value(x)?;
        b.scan_builtin(ScanKind::Sum, v, axis, false)
    })
}

/// `cumsum(x, axis, reverse=True)`.
#[track_caller]
pub fn cumsum_reverse(x: Tensor, axis: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("cumsum", loc, |b| {
        let v = b.value(x)?;
        b.scan_builtin(ScanKind::Sum, v, axis, true)
    })
}

/// `cumprod(x, axis)`: inclusive running product.
#[track_caller]
pub fn cumprod(x: Tensor, axis: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("cumprod", loc, |b| {
        let v = b.value(x)?;
        b.scan_builtin(ScanKind::Prod, v, axis, false)
    })
}

// ---- random -------------------------------------------------------------------------------

/// Philox rounds Triton uses by default.
pub const N_ROUNDS_DEFAULT: u32 = 10;

/// `randint(seed, offset)`: a `u32` block of Philox-4x32-10 output, bit-compatible with Triton.
#[track_caller]
pub fn randint(seed: impl Into<Operand>, offset: Tensor) -> Tensor {
    let (loc, seed) = (SourceLoc::caller(), seed.into());
    op("randint", loc, |b| {
        let (s, o) = (resolve(b, seed)?, b.value(offset)?);
        Ok(b.randint4x(s, o, N_ROUNDS_DEFAULT)?[0])
    })
}

/// `randint4x(seed, offset)`: four `u32` blocks.
#[track_caller]
pub fn randint4x(seed: impl Into<Operand>, offset: Tensor) -> [Tensor; 4] {
    let (loc, seed) = (SourceLoc::caller(), seed.into());
    op_any("randint4x", loc, |b| {
        let (s, o) = (resolve(b, seed)?, b.value(offset)?);
        let r = b.randint4x(s, o, N_ROUNDS_DEFAULT)?;
        Ok(r.map(|v| b.handle(v)))
    })
    .unwrap_or([Tensor::poison(); 4])
}

/// `rand(seed, offset)`: uniform `f32` in `[0, 1)`.
#[track_caller]
pub fn rand(seed: impl Into<Operand>, offset: Tensor) -> Tensor {
    let (loc, seed) = (SourceLoc::caller(), seed.into());
    op("rand", loc, |b| {
        let (s, o) = (resolve(b, seed)?, b.value(offset)?);
        b.rand(s, o, N_ROUNDS_DEFAULT)
    })
}

/// `randn(seed, offset)`: standard normal `f32` (Box-Muller).
#[track_caller]
pub fn randn(seed: impl Into<Operand>, offset: Tensor) -> Tensor {
    let (loc, seed) = (SourceLoc::caller(), seed.into());
    op("randn", loc, |b| {
        let (s, o) = (resolve(b, seed)?, b.value(offset)?);
        b.randn(s, o, N_ROUNDS_DEFAULT)
    })
}

// ---- misc ---------------------------------------------------------------------------------

/// `debug_barrier()`.
#[track_caller]
pub fn debug_barrier() {
    op_any("debug_barrier", SourceLoc::caller(), |b| {
        b.debug_barrier();
        Ok(())
    });
}

/// `static_assert(cond, msg)`: fails the build (with this location) when `cond` is false.
#[track_caller]
pub fn static_assert(cond: bool, msg: &str) {
    op_any("static_assert", SourceLoc::caller(), |_| {
        if cond {
            Ok(())
        } else {
            Err(format!("static_assert failed: {msg}"))
        }
    });
}

fn hint(name: &'static str, loc: SourceLoc, x: Tensor, values: Vec<i64>, multiple: bool) -> Tensor {
    op(name, loc, |b| {
        let v = b.value(x)?;
        b.hint(name, v, values, multiple)
    })
}

/// `multiple_of(x, values)`: a hint (semantic no-op) that elements are multiples of `values`.
#[track_caller]
pub fn multiple_of(x: Tensor, values: impl IntoShape) -> Tensor {
    hint(
        "multiple_of",
        SourceLoc::caller(),
        x,
        values.into_shape(),
        true,
    )
}

/// `max_contiguous(x, values)`: a hint (semantic no-op) about contiguous runs.
#[track_caller]
pub fn max_contiguous(x: Tensor, values: impl IntoShape) -> Tensor {
    hint(
        "max_contiguous",
        SourceLoc::caller(),
        x,
        values.into_shape(),
        false,
    )
}

// ---- Tensor methods -----------------------------------------------------------------------

macro_rules! cmp_methods {
    ($($(#[$m:meta])* $name:ident => $pred:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(self, other: impl Into<Operand>) -> Tensor {
            compare(stringify!($name), CmpPred::$pred, self.into(), other.into())
        }
    )*};
}

macro_rules! forward {
    ($($(#[$m:meta])* $name:ident($($arg:ident: $t:ty),*) => $f:path;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(self $(, $arg: $t)*) -> Tensor {
            $f(self $(, $arg)*)
        }
    )*};
}

impl Tensor {
    cmp_methods! {
        /// `self < other` (`bool` block).
        lt => Lt;
        /// `self <= other`.
        le => Le;
        /// `self > other`.
        gt => Gt;
        /// `self >= other`.
        ge => Ge;
        /// `self == other`.
        eq => Eq;
        /// `self != other`.
        ne => Ne;
    }

    forward! {
        /// `x.to(dtype)`; `x.to(pointer_type(dtype))` casts 64-bit integers to pointers
        /// ([`int_to_ptr`]).
        to(dtype: impl Into<CastTarget>) => cast;
        /// `x.to(dtype, bitcast=True)`.
        bitcast(dtype: DType) => bitcast;
        /// `expand_dims(x, axis)`.
        expand_dims(axis: i64) => expand_dims;
        /// `reshape(x, shape)`.
        reshape(shape: impl IntoShape) => reshape;
        /// `broadcast_to(x, shape)`.
        broadcast_to(shape: impl IntoShape) => broadcast_to;
        /// `trans(x)`.
        trans() => trans;
        /// `permute(x, dims)`.
        permute(dims: impl IntoShape) => permute;
        /// `sum(x, axis)`.
        sum(axis: impl Into<Axis>) => sum;
        /// `max(x, axis)`.
        max(axis: impl Into<Axis>) => max;
        /// `min(x, axis)`.
        min(axis: impl Into<Axis>) => min;
        /// `argmax(x, axis)`.
        argmax(axis: impl Into<Axis>) => argmax;
        /// `argmin(x, axis)`.
        argmin(axis: impl Into<Axis>) => argmin;
        /// `cumsum(x, axis)`.
        cumsum(axis: i64) => cumsum;
        /// `exp(x)`.
        exp() => exp;
        /// `log(x)`.
        log() => log;
        /// `sqrt(x)`.
        sqrt() => sqrt;
        /// `abs(x)`.
        abs() => abs;
        /// `sigmoid(x)`.
        sigmoid() => sigmoid;
        /// `exp2(x)`.
        exp2() => exp2;
        /// `log2(x)`.
        log2() => log2;
        /// `rsqrt(x)`.
        rsqrt() => rsqrt;
        /// `sin(x)`.
        sin() => sin;
        /// `cos(x)`.
        cos() => cos;
        /// `erf(x)`.
        erf() => erf;
        /// `floor(x)`.
        floor() => floor;
        /// `ceil(x)`.
        ceil() => ceil;
        /// `cumprod(x, axis)`.
        cumprod(axis: i64) => cumprod;
        /// `xor_sum(x, axis)`.
        xor_sum(axis: impl Into<Axis>) => xor_sum;
        /// `ravel(x)`.
        ravel() => ravel;
        /// `softmax(x)` (axis 0).
        softmax() => softmax;
    }

    /// `split(x)`.
    #[track_caller]
    pub fn split(self) -> (Tensor, Tensor) {
        split(self)
    }

    /// `x[:, None]`: a new axis at position 1 (for 1-D `x`: a column `[n, 1]`).
    #[track_caller]
    pub fn col(self) -> Tensor {
        expand_dims(self, 1)
    }

    /// `x[None, :]`: a new leading axis (a row).
    #[track_caller]
    pub fn row(self) -> Tensor {
        expand_dims(self, 0)
    }

    /// `x.to(dtype)` (alias of [`Tensor::to`]); `x.cast(pointer_type(d))` casts integers to
    /// pointers ([`int_to_ptr`]).
    #[track_caller]
    pub fn cast(self, dtype: impl Into<CastTarget>) -> Tensor {
        cast(self, dtype)
    }

    /// Triton's `mask=` of the `load` (or atomic) that produced `self`.
    #[track_caller]
    pub fn mask(self, mask: impl Into<Operand>) -> Tensor {
        let (loc, mask) = (SourceLoc::caller(), mask.into());
        op("load", loc, |b| {
            let v = b.value(self)?;
            let m = resolve(b, mask)?;
            b.patch_load(v, Some(m), None)
        })
    }

    /// Triton's `sem=` of the atomic that produced `self`: `"relaxed"`, `"acquire"`,
    /// `"release"` or `"acq_rel"` (Triton's default). Each target honours it or refuses
    /// the kernel with `Unsupported` (the guide's table says which emits what).
    #[track_caller]
    pub fn sem(self, sem: &str) -> Tensor {
        let loc = SourceLoc::caller();
        op("atomic", loc, |b| {
            let v = b.value(self)?;
            b.patch_atomic_ordering(v, Some(sem), None)
        })
    }

    /// Triton's `scope=` of the atomic that produced `self`: `"cta"`, `"gpu"` (Triton's
    /// default) or `"sys"`.
    #[track_caller]
    pub fn scope(self, scope: &str) -> Tensor {
        let loc = SourceLoc::caller();
        op("atomic", loc, |b| {
            let v = b.value(self)?;
            b.patch_atomic_ordering(v, None, Some(scope))
        })
    }

    /// Triton's `other=` of the masked `load` that produced `self`.
    #[track_caller]
    pub fn other(self, other: impl Into<Operand>) -> Tensor {
        let (loc, other) = (SourceLoc::caller(), other.into());
        op("load", loc, |b| {
            let v = b.value(self)?;
            let o = resolve(b, other)?;
            b.patch_load(v, None, Some(o))
        })
    }
}

// ---- standard library (Triton's `standard.py`, written with the functions above) ----------

/// `ravel(x)`: flattens to 1-D.
#[track_caller]
pub fn ravel(x: Tensor) -> Tensor {
    let n = x.numel();
    reshape(x, [n])
}

/// `broadcast(a, b)`: both operands broadcast to their common shape.
#[track_caller]
pub fn broadcast(a: Tensor, b: Tensor) -> (Tensor, Tensor) {
    let loc = SourceLoc::caller();
    op_any("broadcast", loc, |bd| {
        let (x, y) = (bd.value(a)?, bd.value(b)?);
        let (x, y) = bd.broadcast_pair(x, y)?;
        Ok((bd.handle(x), bd.handle(y)))
    })
    .unwrap_or((Tensor::poison(), Tensor::poison()))
}

/// `interleave(a, b)`: alternates the elements of `a` and `b` along the last dim.
#[track_caller]
pub fn interleave(a: Tensor, b: Tensor) -> Tensor {
    let c = join(a, b);
    let mut shape = c.shape();
    if shape.len() <= 1 {
        return c;
    }
    let last = shape.pop().unwrap_or(2) * shape.pop().unwrap_or(1);
    shape.push(last);
    reshape(c, shape)
}

/// `softmax(x)` along axis 0: `exp(x - max(x)) / sum(exp(x - max(x)))`.
#[track_caller]
pub fn softmax(x: Tensor) -> Tensor {
    let z = x - max(x, 0);
    let num = exp(z);
    let den = sum(num, 0);
    num / den
}

/// `swizzle2d(i, j, size_i, size_j, size_g)`: grouped (column-major within groups of
/// `size_g` rows) program ordering, as Triton's standard library.
#[track_caller]
pub fn swizzle2d(
    i: impl Into<Operand>,
    j: impl Into<Operand>,
    size_i: impl Into<Operand>,
    size_j: impl Into<Operand>,
    size_g: impl Into<Operand>,
) -> (Tensor, Tensor) {
    let (i, j, size_i, size_j, size_g) = (
        i.into(),
        j.into(),
        size_i.into(),
        size_j.into(),
        size_g.into(),
    );
    let ij = operand_add(operand_mul(i, size_j), j);
    let size_gj = operand_mul(size_g, size_j);
    let group_id = floordiv(ij, size_gj);
    let off_i = operand_mul(group_id.into(), size_g);
    // The last group may have fewer rows; positions count from the group's first element.
    let size_g = minimum(operand_sub(size_i, off_i.into()), size_g);
    let ij = ij % size_gj;
    let new_i = off_i + ij % size_g;
    let new_j = floordiv(ij, size_g);
    (new_i, new_j)
}

#[track_caller]
fn operand_mul(a: Operand, b: Operand) -> Tensor {
    let loc = SourceLoc::caller();
    op("mul", loc, |bd| {
        let (a, b) = (resolve(bd, a)?, resolve(bd, b)?);
        bd.mul(a, b)
    })
}

#[track_caller]
fn operand_add(a: Tensor, b: Operand) -> Tensor {
    a + b
}

#[track_caller]
fn operand_sub(a: Operand, b: Operand) -> Tensor {
    let loc = SourceLoc::caller();
    op("sub", loc, |bd| {
        let (a, b) = (resolve(bd, a)?, resolve(bd, b)?);
        bd.sub(a, b)
    })
}

/// `max(x, axis, return_indices=True)`: the maxima and their `i32` indices (left-most on ties).
#[track_caller]
pub fn max_with_indices(x: Tensor, axis: impl Into<Axis>) -> (Tensor, Tensor) {
    let axis = axis.into();
    (max(x, axis), argmax(x, axis))
}

/// `min(x, axis, return_indices=True)`: the minima and their `i32` indices.
#[track_caller]
pub fn min_with_indices(x: Tensor, axis: impl Into<Axis>) -> (Tensor, Tensor) {
    let axis = axis.into();
    (min(x, axis), argmin(x, axis))
}

/// `triton.language.extra.libdevice`'s math functions (fp32 and fp64 operands, as
/// Triton's; cast 16-bit floats with `.to(F32)` first).
///
/// Each function is one IR op computed by the target's own math library where it has
/// one: on CUDA the functions Triton's `libdevice` calls on NVIDIA GPUs (`asinf`, `powf`,
/// ...), on Metal `metal::precise` (accurate under the default fast math), on the CPU
/// targets the host's libm. Where a language lacks one (Metal: `log1p`, `expm1`, `cbrt`,
/// `hypot`, `erfinv`), `codegen::math` prints it. Special values follow C99 (`asin(2)`
/// and `pow(-2, 0.5)` are NaN, `atanh(1)` and `erfinv(1)` are +inf, `pow(NaN, 0)` is 1,
/// `hypot(inf, NaN)` is +inf). The interpreter computes in f64 and rounds once (within
/// 1 ulp of the correctly rounded f32). The compiled CPU executor and emulated Metal are
/// tested within 1 to 3 ulp of f32 against an f64 reference, per function
/// (`tests/libdevice.rs`); CUDA's documented bounds are 1 to 4 ulp.
pub mod libdevice {
    use super::{abs, exp, op, resolve, where_, Operand, SourceLoc, Tensor};
    use crate::ir::{BinaryOp, UnaryOp};

    /// `tanh(x)`: for `|x| < 0.625` an odd polynomial `x + x^3 P(x^2)` (Cephes' `tanhf`
    /// coefficients, where `1 - e` below would cancel), else `sign(x) * (1 - e) / (1 + e)`
    /// with `e = exp(-2|x|)`; about 2 ulp everywhere in fp32.
    #[track_caller]
    pub fn tanh(x: impl Into<Operand>) -> Tensor {
        let x = match x.into() {
            Operand::Tensor(t) => t,
            Operand::Scalar(s) => {
                super::full([0i64; 0], Operand::Scalar(s), crate::dtype::DType::F32)
            }
        };
        let ax = abs(x);
        let z = x * x;
        let p = (((z * -5.704_988_727_45e-3 + 2.063_908_879_54e-2) * z - 5.373_971_555_31e-2) * z
            + 1.333_144_220_36e-1)
            * z
            - 3.333_328_194_22e-1;
        let small = x + x * z * p;
        let e = exp(ax * -2.0);
        let t = (1.0f64 - e) / (1.0f64 + e);
        let signed = where_(x.lt(0), -t, t);
        where_(ax.lt(0.625), small, signed)
    }

    macro_rules! unary {
        ($($(#[$m:meta])* $name:ident => $kind:ident;)*) => {$(
            $(#[$m])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>) -> Tensor {
                let (loc, x) = (SourceLoc::caller(), x.into());
                op(stringify!($name), loc, |b| {
                    let x = resolve(b, x)?;
                    b.unary(UnaryOp::$kind, x)
                })
            }
        )*};
    }
    unary! {
        /// `tan(x)`.
        tan => Tan;
        /// `asin(x)`: NaN outside [-1, 1].
        asin => Asin;
        /// `acos(x)`: NaN outside [-1, 1].
        acos => Acos;
        /// `atan(x)`.
        atan => Atan;
        /// `sinh(x)`.
        sinh => Sinh;
        /// `cosh(x)`.
        cosh => Cosh;
        /// `asinh(x)`.
        asinh => Asinh;
        /// `acosh(x)`: NaN below 1.
        acosh => Acosh;
        /// `atanh(x)`: ±inf at ±1, NaN outside [-1, 1].
        atanh => Atanh;
        /// `log1p(x) = ln(1 + x)`, accurate for tiny `x`.
        log1p => Log1p;
        /// `expm1(x) = e^x - 1`, accurate for tiny `x`.
        expm1 => Expm1;
        /// `log10(x)`.
        log10 => Log10;
        /// `exp10(x) = 10^x`.
        exp10 => Exp10;
        /// `cbrt(x)`: the real cube root (negative for negative `x`).
        cbrt => Cbrt;
        /// `erfinv(x)`: the inverse of `erf`; ±inf at ±1, NaN outside [-1, 1].
        erfinv => Erfinv;
    }

    macro_rules! binary {
        ($($(#[$m:meta])* $name:ident => $kind:ident;)*) => {$(
            $(#[$m])*
            #[track_caller]
            pub fn $name(x: impl Into<Operand>, y: impl Into<Operand>) -> Tensor {
                let (loc, x, y) = (SourceLoc::caller(), x.into(), y.into());
                op(stringify!($name), loc, |b| {
                    let (x, y) = (resolve(b, x)?, resolve(b, y)?);
                    b.libdevice2(BinaryOp::$kind, x, y)
                })
            }
        )*};
    }
    binary! {
        /// `pow(x, y) = x^y` with C99's special cases: `pow(x, ±0) = 1` for any `x` (NaN
        /// included), `pow(1, y) = 1` for any `y`, a negative `x` to an integral `y` is
        /// `±|x|^y`, to a non-integral one NaN.
        pow => Pow;
        /// `atan2(y, x)`: the angle of `(x, y)` in [-pi, pi], C99's signed zeros and
        /// infinities (`atan2(±0, -0) = ±pi`).
        atan2 => Atan2;
        /// `hypot(x, y) = sqrt(x^2 + y^2)` without intermediate overflow; +inf if either is
        /// infinite (even if the other is NaN).
        hypot => Hypot;
    }
}
