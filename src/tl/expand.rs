//! What [`#[jit]`](crate::jit) expands to: Python's operators and statements with Triton's
//! meaning, on top of the builder. An `if` on a `bool` (a constexpr condition) is decided
//! while the kernel is built; on a tensor it becomes a runtime branch. Comparisons and
//! `&&`/`||` of Rust values stay Rust; of tensors they are the DSL's comparisons and logical
//! ops. Not for direct use: write the operators in a `#[jit]` function.

use super::builder::{op, op_any};
use super::control::{if_ as runtime_if, Carry};
use super::tensor::{compare, Operand, Tensor};
use crate::dtype::DType;
use crate::error::SourceLoc;
use crate::ir::CmpPred;

/// The condition of an `if`: a `bool` chooses a branch now, a [`Tensor`] at run time.
pub trait Cond<C> {
    /// Runs `then` or `else_` (both for a runtime branch) and returns the branch's values.
    fn select(self, then: impl FnOnce() -> C, else_: impl FnOnce() -> C) -> C;
}

impl<C> Cond<C> for bool {
    fn select(self, then: impl FnOnce() -> C, else_: impl FnOnce() -> C) -> C {
        if self {
            then()
        } else {
            else_()
        }
    }
}

impl<C: Carry> Cond<C> for Tensor {
    #[track_caller]
    fn select(self, then: impl FnOnce() -> C, else_: impl FnOnce() -> C) -> C {
        runtime_if(self, then, else_)
    }
}

/// `if cond { then } else { else_ }`: a Rust `if` for a `bool`, `tl::if_` for a tensor.
#[track_caller]
pub fn if_<C, K: Cond<C>>(cond: K, then: impl FnOnce() -> C, else_: impl FnOnce() -> C) -> C {
    cond.select(then, else_)
}

/// A copy of a value carried into a branch (every branch starts from the same values).
pub fn carry<T: Clone>(x: &T) -> T {
    x.clone()
}

/// `<`, `<=`, `>`, `>=` of the operands' kind: `bool` for Rust numbers, a tensor otherwise.
pub trait Order<R> {
    /// `bool` or [`Tensor`].
    type Output;
    /// The comparison `pred`.
    fn order(self, pred: CmpPred, rhs: R) -> Self::Output;
}

/// `==`, `!=` of the operands' kind: `bool` for Rust values, a tensor otherwise.
pub trait Equal<R> {
    /// `bool` or [`Tensor`].
    type Output;
    /// `==` (`eq`) or `!=`.
    fn equal(self, eq: bool, rhs: R) -> Self::Output;
}

/// The comparison, recorded under the name of the method the builder form calls (`lt`, ..).
#[track_caller]
fn tensor_cmp(pred: CmpPred, a: Tensor, b: Operand) -> Tensor {
    compare(pred.name(), pred, a.into(), b)
}

/// The predicate with its operands swapped (`a < b` is `b > a`).
fn mirror(pred: CmpPred) -> CmpPred {
    match pred {
        CmpPred::Lt => CmpPred::Gt,
        CmpPred::Le => CmpPred::Ge,
        CmpPred::Gt => CmpPred::Lt,
        CmpPred::Ge => CmpPred::Le,
        p => p,
    }
}

impl<R: Into<Operand>> Order<R> for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn order(self, pred: CmpPred, rhs: R) -> Tensor {
        tensor_cmp(pred, self, rhs.into())
    }
}

impl<R: Into<Operand>> Equal<R> for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn equal(self, eq: bool, rhs: R) -> Tensor {
        let pred = if eq { CmpPred::Eq } else { CmpPred::Ne };
        tensor_cmp(pred, self, rhs.into())
    }
}

macro_rules! rust_operands {
    ($($t:ty),*) => {$(
        impl Order<$t> for $t {
            type Output = bool;
            fn order(self, pred: CmpPred, rhs: $t) -> bool {
                match pred {
                    CmpPred::Lt => self < rhs,
                    CmpPred::Le => self <= rhs,
                    CmpPred::Gt => self > rhs,
                    CmpPred::Ge => self >= rhs,
                    CmpPred::Eq => self == rhs,
                    CmpPred::Ne => self != rhs,
                }
            }
        }
        impl Equal<$t> for $t {
            type Output = bool;
            fn equal(self, eq: bool, rhs: $t) -> bool {
                (self == rhs) == eq
            }
        }
        /// A Rust number on the left: Python's reflected comparison, `x > 5` for `5 < x`.
        impl Order<Tensor> for $t {
            type Output = Tensor;
            #[track_caller]
            fn order(self, pred: CmpPred, rhs: Tensor) -> Tensor {
                tensor_cmp(mirror(pred), rhs, self.into())
            }
        }
        impl Equal<Tensor> for $t {
            type Output = Tensor;
            #[track_caller]
            fn equal(self, eq: bool, rhs: Tensor) -> Tensor {
                rhs.equal(eq, self)
            }
        }
    )*};
}
rust_operands!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64);

impl Equal<bool> for bool {
    type Output = bool;
    fn equal(self, eq: bool, rhs: bool) -> bool {
        (self == rhs) == eq
    }
}

impl<'b> Equal<&'b str> for &str {
    type Output = bool;
    fn equal(self, eq: bool, rhs: &'b str) -> bool {
        (self == rhs) == eq
    }
}

/// Triton's `x.dtype` of a tensor (not a pointer, whose `dtype` is a pointer type: its
/// element dtype is `x.dtype.element_ty`).
#[track_caller]
pub fn dtype(x: Tensor) -> DType {
    let loc = SourceLoc::caller();
    op_any("dtype", loc, |b| {
        let v = b.value(x)?;
        let ty = b.ty(v);
        if ty.ptr {
            return Err(format!(
                "`.dtype` of a pointer is Triton's pointer type, not a dtype: write \
                 `.dtype.element_ty` for the {} elements it points to",
                ty.dtype
            ));
        }
        Ok(ty.dtype)
    })
    .unwrap_or(DType::F32)
}

/// Triton's `x_ptr.dtype.element_ty`: the dtype of the elements a pointer points to.
#[track_caller]
pub fn element_ty(x: Tensor) -> DType {
    let loc = SourceLoc::caller();
    op_any("element_ty", loc, |b| {
        let v = b.value(x)?;
        let ty = b.ty(v);
        if !ty.ptr {
            return Err(format!(
                "`.dtype.element_ty` is the element dtype of a pointer, and this is a tensor \
                 of {}: write `.dtype`",
                ty.dtype
            ));
        }
        Ok(ty.dtype)
    })
    .unwrap_or(DType::F32)
}

impl Equal<DType> for DType {
    type Output = bool;
    fn equal(self, eq: bool, rhs: DType) -> bool {
        (self == rhs) == eq
    }
}

/// `a < b`.
#[track_caller]
pub fn lt<A: Order<B>, B>(a: A, b: B) -> A::Output {
    a.order(CmpPred::Lt, b)
}

/// `a <= b`.
#[track_caller]
pub fn le<A: Order<B>, B>(a: A, b: B) -> A::Output {
    a.order(CmpPred::Le, b)
}

/// `a > b`.
#[track_caller]
pub fn gt<A: Order<B>, B>(a: A, b: B) -> A::Output {
    a.order(CmpPred::Gt, b)
}

/// `a >= b`.
#[track_caller]
pub fn ge<A: Order<B>, B>(a: A, b: B) -> A::Output {
    a.order(CmpPred::Ge, b)
}

/// `a == b`.
#[track_caller]
pub fn eq<A: Equal<B>, B>(a: A, b: B) -> A::Output {
    a.equal(true, b)
}

/// `a != b`.
#[track_caller]
pub fn ne<A: Equal<B>, B>(a: A, b: B) -> A::Output {
    a.equal(false, b)
}

/// `&&` and `||`: short-circuiting on `bool`s; on tensors Triton's `logical_and` /
/// `logical_or` of `bool` tensors (both sides are evaluated).
pub trait Logic<R> {
    /// `bool` or [`Tensor`].
    type Output;
    /// `self && rhs()` (`or` false) or `self || rhs()` (`or` true).
    fn logic(self, or: bool, rhs: impl FnOnce() -> R) -> Self::Output;
}

impl Logic<bool> for bool {
    type Output = bool;
    fn logic(self, or: bool, rhs: impl FnOnce() -> bool) -> bool {
        if or {
            self || rhs()
        } else {
            self && rhs()
        }
    }
}

impl Logic<Tensor> for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn logic(self, or: bool, rhs: impl FnOnce() -> Tensor) -> Tensor {
        let loc = SourceLoc::caller();
        let name = if or { "logical_or" } else { "logical_and" };
        let rhs = rhs();
        for x in [self, rhs] {
            let dtype = x.dtype();
            if !x.is_poisoned() && x.ty().is_some() && dtype != DType::Bool {
                return op(name, loc, move |_| {
                    Err(format!(
                        "`{}` needs bool tensors, got {dtype}: compare first (`x != 0`)",
                        if or { "||" } else { "&&" }
                    ))
                });
            }
        }
        if or {
            self | rhs
        } else {
            self & rhs
        }
    }
}

/// `a && b`.
#[track_caller]
pub fn and<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Output {
    a.logic(false, b)
}

/// `a || b`.
#[track_caller]
pub fn or<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Output {
    a.logic(true, b)
}
