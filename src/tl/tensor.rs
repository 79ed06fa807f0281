//! [`Tensor`] handles, [`Operand`]s (tensors or Rust scalars) and operator overloading.

use std::ops;

use super::builder::{self, op};
use super::semantics::Opnd;
use crate::dtype::DType;
use crate::error::SourceLoc;
use crate::ir::{BinaryOp, CmpPred, Type, Value};

/// A block (or scalar) value of the kernel being built: a small `Copy` handle.
///
/// Handles are only meaningful inside the `jit` closure that created them. Arithmetic
/// operators work between tensors and with Rust numbers (`x + 1`, `2.0 * x`), following
/// Triton's promotion rules: a Rust number acts like a Python scalar in Triton and does not
/// widen a tensor of the same or a higher kind.
#[derive(Clone, Copy, Hash)]
pub struct Tensor {
    v: Value,
    build: u32,
}

impl Tensor {
    pub(crate) fn new(v: Value, build: u32) -> Tensor {
        Tensor { v, build }
    }

    /// The handle returned by failed operations (the kernel build reports the error).
    pub(crate) fn poison() -> Tensor {
        Tensor {
            v: Value(u32::MAX),
            build: 0,
        }
    }

    pub(crate) fn value(self) -> Value {
        self.v
    }

    pub(crate) fn build_id(self) -> u32 {
        self.build
    }

    /// The IR value this handle stands for.
    pub fn id(self) -> Value {
        self.v
    }

    /// True for the handle of a failed operation.
    pub fn is_poisoned(self) -> bool {
        self.build == 0
    }

    /// The type, if this is a live handle of the current build.
    pub fn ty(self) -> Option<Type> {
        builder::with(|b| {
            let b = b?;
            b.value(self).ok().map(|v| b.ty(v).clone())
        })
    }

    /// Element dtype (pointee dtype for pointers); `f32` for a dead handle.
    pub fn dtype(self) -> DType {
        self.ty().map(|t| t.dtype).unwrap_or(DType::F32)
    }

    /// Block shape (empty for scalars and dead handles).
    pub fn shape(self) -> Vec<usize> {
        self.ty().map(|t| t.shape).unwrap_or_default()
    }

    /// Number of elements (1 for scalars).
    pub fn numel(self) -> usize {
        self.shape().iter().product()
    }

    /// True for pointers and blocks of pointers.
    pub fn is_ptr(self) -> bool {
        self.ty().map(|t| t.ptr).unwrap_or(false)
    }
}

impl std::fmt::Debug for Tensor {
    /// `Tensor(%5: f32[16])` inside the build; `Tensor(%5)` outside, `Tensor(<failed>)` for the
    /// result of a failed operation.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_poisoned() {
            return f.write_str("Tensor(<failed>)");
        }
        match self.ty() {
            Some(t) => write!(f, "Tensor({}: {t})", self.v),
            None => write!(f, "Tensor({})", self.v),
        }
    }
}

/// A Rust scalar used as an operand: Triton's "Python scalar" (weakly typed).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An integer literal.
    Int(i128),
    /// A float literal.
    Float(f64),
    /// A bool literal.
    Bool(bool),
}

/// An operand of a DSL function: a [`Tensor`] or a Rust scalar.
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    /// A tensor.
    Tensor(Tensor),
    /// A Rust number or bool.
    Scalar(Scalar),
}

impl From<Tensor> for Operand {
    fn from(t: Tensor) -> Self {
        Operand::Tensor(t)
    }
}

impl From<&Tensor> for Operand {
    fn from(t: &Tensor) -> Self {
        Operand::Tensor(*t)
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Operand {
            fn from(x: $t) -> Self {
                Operand::Scalar(Scalar::Int(x as i128))
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl From<f32> for Operand {
    fn from(x: f32) -> Self {
        Operand::Scalar(Scalar::Float(x as f64))
    }
}

impl From<f64> for Operand {
    fn from(x: f64) -> Self {
        Operand::Scalar(Scalar::Float(x))
    }
}

impl From<bool> for Operand {
    fn from(x: bool) -> Self {
        Operand::Scalar(Scalar::Bool(x))
    }
}

/// Resolves an operand against the builder.
pub(crate) fn resolve(b: &builder::Builder, o: Operand) -> builder::Res<Opnd> {
    match o {
        Operand::Tensor(t) => Ok(Opnd::Val(b.value(t)?)),
        Operand::Scalar(s) => Ok(Opnd::Weak(s)),
    }
}

#[track_caller]
fn binary(name: &'static str, kind: BinaryOp, a: Operand, b: Operand) -> Tensor {
    let loc = SourceLoc::caller();
    op(name, loc, |bd| {
        let (a, b) = (resolve(bd, a)?, resolve(bd, b)?);
        bd.binary_dispatch(kind, a, b)
    })
}

#[track_caller]
pub(crate) fn compare(name: &'static str, pred: CmpPred, a: Operand, b: Operand) -> Tensor {
    let loc = SourceLoc::caller();
    op(name, loc, |bd| {
        let (a, b) = (resolve(bd, a)?, resolve(bd, b)?);
        bd.compare(pred, a, b)
    })
}

macro_rules! binop {
    ($tr:ident, $m:ident, $atr:ident, $am:ident, $name:literal, $kind:expr) => {
        impl<T: Into<Operand>> ops::$tr<T> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $m(self, rhs: T) -> Tensor {
                binary($name, $kind, self.into(), rhs.into())
            }
        }
        impl<T: Into<Operand>> ops::$atr<T> for Tensor {
            #[track_caller]
            fn $am(&mut self, rhs: T) {
                *self = binary($name, $kind, (*self).into(), rhs.into());
            }
        }
        binop!(@rev $tr, $m, $name, $kind, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64, bool);
    };
    (@rev $tr:ident, $m:ident, $name:literal, $kind:expr, $($t:ty),*) => {$(
        impl ops::$tr<Tensor> for $t {
            type Output = Tensor;
            #[track_caller]
            fn $m(self, rhs: Tensor) -> Tensor {
                binary($name, $kind, self.into(), rhs.into())
            }
        }
    )*};
}

// `/` is Triton's true division (int / int gives fp32); see `tl::floordiv` for `//`.
binop!(Add, add, AddAssign, add_assign, "add", BinaryOp::Add);
binop!(Sub, sub, SubAssign, sub_assign, "sub", BinaryOp::Sub);
binop!(Mul, mul, MulAssign, mul_assign, "mul", BinaryOp::Mul);
binop!(Div, div, DivAssign, div_assign, "truediv", BinaryOp::Div);
binop!(Rem, rem, RemAssign, rem_assign, "mod", BinaryOp::Rem);
binop!(
    BitAnd,
    bitand,
    BitAndAssign,
    bitand_assign,
    "and",
    BinaryOp::And
);
binop!(BitOr, bitor, BitOrAssign, bitor_assign, "or", BinaryOp::Or);
binop!(
    BitXor,
    bitxor,
    BitXorAssign,
    bitxor_assign,
    "xor",
    BinaryOp::Xor
);
binop!(Shl, shl, ShlAssign, shl_assign, "shl", BinaryOp::Shl);
binop!(Shr, shr, ShrAssign, shr_assign, "shr", BinaryOp::Shr);

impl ops::Neg for Tensor {
    type Output = Tensor;
    /// `-x` (Triton: `0 - x`).
    #[track_caller]
    fn neg(self) -> Tensor {
        let loc = SourceLoc::caller();
        op("neg", loc, |b| {
            let x = b.value(self)?;
            b.minus(x)
        })
    }
}

impl ops::Not for Tensor {
    type Output = Tensor;
    /// `~x`: bitwise invert (logical not on `bool`).
    #[track_caller]
    fn not(self) -> Tensor {
        let loc = SourceLoc::caller();
        op("invert", loc, |b| {
            let x = b.value(self)?;
            b.invert(x)
        })
    }
}
