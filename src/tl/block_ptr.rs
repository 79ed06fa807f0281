//! Block pointers (`make_block_ptr`, `advance`, `load`/`store` with `boundary_check=`,
//! Triton up to 3.8) and tensor descriptors (`make_tensor_descriptor`, `desc.load`,
//! `desc.store`, Triton 3.9).
//!
//! Both describe a block of a strided tensor in memory: a base pointer, the tensor's shape
//! and strides, and the block's offsets and (constexpr) shape. They are lowered while the
//! kernel is built, the way Triton's `RewriteTensorPointer` pass lowers them for GPUs
//! without TMA: a block of pointers `base + sum_i (offset_i + arange(block_i)) * stride_i`
//! (64-bit index arithmetic) and, for the checked dimensions, the mask
//! `0 <= offset_i + arange(block_i) < shape_i`; the padding option becomes the load's
//! `other`. So the IR holds only ordinary pointer arithmetic, masked loads and stores, and
//! every target runs block pointers without code of its own; an unchecked access outside
//! a buffer is reported by the CPU and emulator bounds checks like any other load.
//!
//! The handles are small `Copy` values holding IR scalars, like [`Tensor`]: they live only
//! inside the kernel's closure, can be carried through loops and branches ([`Carry`]), and
//! a mistake (rank mismatch, a boundary check on a dimension that does not exist, an
//! unknown padding option) is a build error naming the kernel, the op, the argument and
//! the line.

use std::fmt;

use super::builder::{op, op_any, Builder, Res};
use super::control::Carry;
use super::ops::IntoShape;
use super::semantics::Opnd;
use super::tensor::{resolve, Operand, Scalar, Tensor};
use crate::dtype::DType;
use crate::error::SourceLoc;
use crate::ir::{BinaryOp, CmpPred, Const, Op, OpId, Value};

/// The most dimensions a block pointer has.
pub const MAX_BLOCK_PTR_DIMS: usize = 8;

/// The most dimensions a tensor descriptor has (Triton's limit, TMA's).
pub const MAX_DESCRIPTOR_DIMS: usize = 5;

/// A list of index operands (shapes, strides, offsets): `(m, k)`, `(x, 0)`, `[a, b]` or a
/// `Vec`, each entry a scalar [`Tensor`] or a Rust integer. Tuples may mix the two, as
/// Triton's tuples do.
pub trait IntoOperands {
    /// The entries, in order.
    fn into_operands(self) -> Vec<Operand>;
}

impl<T: Into<Operand>, const N: usize> IntoOperands for [T; N] {
    fn into_operands(self) -> Vec<Operand> {
        self.into_iter().map(Into::into).collect()
    }
}

impl<T: Into<Operand>> IntoOperands for Vec<T> {
    fn into_operands(self) -> Vec<Operand> {
        self.into_iter().map(Into::into).collect()
    }
}

impl<T: Into<Operand> + Copy> IntoOperands for &[T] {
    fn into_operands(self) -> Vec<Operand> {
        self.iter().map(|&t| t.into()).collect()
    }
}

impl IntoOperands for () {
    fn into_operands(self) -> Vec<Operand> {
        Vec::new()
    }
}

macro_rules! tuple_operands {
    ($(($($t:ident $i:tt),*)),*) => {$(
        impl<$($t: Into<Operand>),*> IntoOperands for ($($t,)*) {
            fn into_operands(self) -> Vec<Operand> {
                vec![$(self.$i.into()),*]
            }
        }
    )*};
}
tuple_operands!((A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3), (A 0, B 1, C 2, D 3, E 4),
    (A 0, B 1, C 2, D 3, E 4, F 5), (A 0, B 1, C 2, D 3, E 4, F 5, G 6),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7));

/// What out-of-bounds elements of a checked load read as (Triton's `padding_option`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Padding {
    /// `""`: not given (masked lanes read 0 here; Triton leaves them undefined).
    Unset,
    /// `"zero"`.
    Zero,
    /// `"nan"` (floats only).
    Nan,
}

fn padding(p: &str) -> Res<Padding> {
    match p {
        "" => Ok(Padding::Unset),
        "zero" => Ok(Padding::Zero),
        "nan" => Ok(Padding::Nan),
        other => Err(format!(
            "`padding_option` must be \"zero\" or \"nan\", got {other:?}"
        )),
    }
}

/// Triton's `make_block_ptr(base, shape, strides, offsets, block_shape, order)`: a pointer
/// to a `block_shape` block at `offsets` of a tensor of `shape` and `strides` (in
/// elements) starting at `base`. Load and store through it with [`load`](super::load) /
/// [`load_block`] and [`store`](super::store) / [`store_block`]; move it with [`advance`].
///
/// A `Copy` handle, like [`Tensor`]; it can be carried through loops and branches (its
/// base, shape, strides and offsets are carried). The block shape is part of its type, as
/// in Triton: a branch or loop body that yields one of another block shape is a build
/// error; the order, a layout hint, is the initial value's.
#[derive(Clone, Copy)]
pub struct BlockPtr {
    base: Tensor,
    rank: u8,
    /// `i64` scalars.
    shape: [Tensor; MAX_BLOCK_PTR_DIMS],
    /// `i64` scalars.
    strides: [Tensor; MAX_BLOCK_PTR_DIMS],
    /// `i64` scalars (Triton takes 32-bit offsets and sums them in 64 bits).
    offsets: [Tensor; MAX_BLOCK_PTR_DIMS],
    block_shape: [u32; MAX_BLOCK_PTR_DIMS],
    order: [u8; MAX_BLOCK_PTR_DIMS],
}

impl BlockPtr {
    fn poison() -> BlockPtr {
        BlockPtr {
            base: Tensor::poison(),
            rank: 0,
            shape: [Tensor::poison(); MAX_BLOCK_PTR_DIMS],
            strides: [Tensor::poison(); MAX_BLOCK_PTR_DIMS],
            offsets: [Tensor::poison(); MAX_BLOCK_PTR_DIMS],
            block_shape: [0; MAX_BLOCK_PTR_DIMS],
            order: [0; MAX_BLOCK_PTR_DIMS],
        }
    }

    /// The block's shape (empty for the handle of a failed operation).
    pub fn block_shape(&self) -> Vec<usize> {
        self.block_shape[..self.rank as usize]
            .iter()
            .map(|&d| d as usize)
            .collect()
    }

    /// The `order` it was made with (a permutation of the dimensions; a layout hint).
    pub fn order(&self) -> Vec<usize> {
        self.order[..self.rank as usize]
            .iter()
            .map(|&d| d as usize)
            .collect()
    }

    /// The pointee dtype of the base pointer.
    pub fn dtype(&self) -> DType {
        self.base.dtype()
    }

    /// The base pointer.
    pub fn base(&self) -> Tensor {
        self.base
    }

    /// The current offsets (`i64` scalars).
    pub fn offsets(&self) -> Vec<Tensor> {
        self.offsets[..self.rank as usize].to_vec()
    }

    /// True for the handle of a failed operation.
    pub fn is_poisoned(&self) -> bool {
        self.rank == 0
    }

    fn dims(&self, b: &Builder) -> Res<Dims> {
        if self.is_poisoned() {
            return Err("use of a block pointer from a failed operation".into());
        }
        let r = self.rank as usize;
        let vals = |ts: &[Tensor]| -> Res<Vec<Value>> { ts.iter().map(|t| b.value(*t)).collect() };
        Ok(Dims {
            base: b.value(self.base)?,
            shape: vals(&self.shape[..r])?,
            strides: vals(&self.strides[..r])?,
            offsets: vals(&self.offsets[..r])?,
            block: self.block_shape(),
        })
    }
}

impl fmt::Debug for BlockPtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_poisoned() {
            return f.write_str("BlockPtr(<failed>)");
        }
        write!(
            f,
            "BlockPtr(base {:?}, block {:?}, order {:?})",
            self.base,
            self.block_shape(),
            self.order()
        )
    }
}

impl Carry for BlockPtr {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        let r = self.rank as usize;
        out.push(self.base);
        out.extend_from_slice(&self.shape[..r]);
        out.extend_from_slice(&self.strides[..r]);
        out.extend_from_slice(&self.offsets[..r]);
    }

    fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        let r = self.rank as usize;
        let mut p = *self;
        p.base = it.next().unwrap_or_else(Tensor::poison);
        for list in [&mut p.shape, &mut p.strides, &mut p.offsets] {
            for t in list[..r].iter_mut() {
                *t = it.next().unwrap_or_else(Tensor::poison);
            }
        }
        p
    }

    fn static_type(&self, out: &mut Vec<String>) {
        out.push(if self.is_poisoned() {
            String::new()
        } else {
            format!("block pointer of block_shape {:?}", self.block_shape())
        });
    }
}

/// Triton's `make_tensor_descriptor(base, shape, strides, block_shape)` (3.9): a
/// description of a strided tensor from which [`TensorDescriptor::load`] reads and
/// [`TensorDescriptor::store`] writes `block_shape` blocks at given offsets. Every
/// dimension is bounds-checked: out-of-bounds elements read as zero (NaN with
/// [`TensorDescriptor::padding_option`]`("nan")`) and out-of-bounds stores are dropped.
///
/// A `Copy` handle, like [`Tensor`]; it can be carried through loops and branches.
#[derive(Clone, Copy)]
pub struct TensorDescriptor {
    base: Tensor,
    rank: u8,
    /// `i32` values held as `i64` scalars.
    shape: [Tensor; MAX_DESCRIPTOR_DIMS],
    /// `i64` scalars.
    strides: [Tensor; MAX_DESCRIPTOR_DIMS],
    block_shape: [u32; MAX_DESCRIPTOR_DIMS],
    nan: bool,
}

impl TensorDescriptor {
    fn poison() -> TensorDescriptor {
        TensorDescriptor {
            base: Tensor::poison(),
            rank: 0,
            shape: [Tensor::poison(); MAX_DESCRIPTOR_DIMS],
            strides: [Tensor::poison(); MAX_DESCRIPTOR_DIMS],
            block_shape: [0; MAX_DESCRIPTOR_DIMS],
            nan: false,
        }
    }

    /// The block's shape (`desc.block_shape`; empty for a failed operation's handle).
    pub fn block_shape(&self) -> Vec<usize> {
        self.block_shape[..self.rank as usize]
            .iter()
            .map(|&d| d as usize)
            .collect()
    }

    /// The element dtype (`desc.dtype`).
    pub fn dtype(&self) -> DType {
        self.base.dtype()
    }

    /// The tensor's shape (`desc.shape`; `i64` scalars holding Triton's `i32` values).
    pub fn shape(&self) -> Vec<Tensor> {
        self.shape[..self.rank as usize].to_vec()
    }

    /// The tensor's strides (`desc.strides`; `i64` scalars).
    pub fn strides(&self) -> Vec<Tensor> {
        self.strides[..self.rank as usize].to_vec()
    }

    /// True for the handle of a failed operation.
    pub fn is_poisoned(&self) -> bool {
        self.rank == 0
    }

    /// `make_tensor_descriptor(.., padding_option=p)`: `"zero"` (the default) or `"nan"`
    /// (floating-point tensors only), what out-of-bounds elements read as.
    #[track_caller]
    pub fn padding_option(self, p: &str) -> TensorDescriptor {
        let loc = SourceLoc::caller();
        op_any("make_tensor_descriptor", loc, |b| {
            if self.is_poisoned() {
                return Err("use of a tensor descriptor from a failed operation".into());
            }
            let nan = match padding(p)? {
                Padding::Nan => {
                    let d = b.ty(b.value(self.base)?).dtype;
                    if !d.is_float() {
                        return Err(format!(
                            "padding option \"nan\" is not supported for {d:?} tensors \
                             (floating-point only)"
                        ));
                    }
                    true
                }
                _ => false,
            };
            Ok(TensorDescriptor { nan, ..self })
        })
        .unwrap_or_else(TensorDescriptor::poison)
    }

    /// `desc.load(offsets)`: the `block_shape` block at `offsets` (one 32-bit integer per
    /// dimension); elements outside the tensor read as zero (or NaN, see
    /// [`TensorDescriptor::padding_option`]).
    #[track_caller]
    pub fn load(&self, offsets: impl IntoOperands) -> Tensor {
        let (loc, offsets) = (SourceLoc::caller(), offsets.into_operands());
        let d = *self;
        op("descriptor_load", loc, |b| {
            let dims = d.dims(b, offsets)?;
            let check = vec![true; dims.block.len()];
            let (ptrs, mask) = addresses(b, &dims, &check)?;
            let other = if d.nan {
                Scalar::Float(f64::NAN)
            } else {
                Scalar::Int(0)
            };
            let other = mask.map(|_| Opnd::Weak(other));
            let v = b.load(ptrs, mask.map(Opnd::Val), other)?;
            mark(b, v);
            Ok(v)
        })
    }

    /// `desc.store(offsets, value)`: writes `value` (of exactly the block's shape; cast to
    /// the descriptor's dtype) at `offsets`; elements outside the tensor are dropped.
    #[track_caller]
    pub fn store(&self, offsets: impl IntoOperands, value: impl Into<Operand>) {
        let (loc, offsets, value) = (SourceLoc::caller(), offsets.into_operands(), value.into());
        let d = *self;
        op_any("descriptor_store", loc, |b| {
            let dims = d.dims(b, offsets)?;
            let v = match value {
                Operand::Tensor(t) => b.value(t)?,
                Operand::Scalar(s) => {
                    return Err(format!(
                        "the value must be a block of shape {:?}, got the scalar {s:?} \
                         (Triton's rule: use tl::full)",
                        dims.block
                    ))
                }
            };
            let vt = b.ty(v).clone();
            if vt.ptr || vt.shape != dims.block {
                return Err(format!(
                    "the value ({vt}) must have exactly the descriptor's block shape {:?}",
                    dims.block
                ));
            }
            let check = vec![true; dims.block.len()];
            let (ptrs, mask) = addresses(b, &dims, &check)?;
            let id = b.store(ptrs, Opnd::Val(v), mask.map(Opnd::Val))?;
            b.block_ops.push(id);
            Ok(())
        });
    }

    fn dims(&self, b: &mut Builder, offsets: Vec<Operand>) -> Res<Dims> {
        if self.is_poisoned() {
            return Err("use of a tensor descriptor from a failed operation".into());
        }
        let r = self.rank as usize;
        if offsets.len() != r {
            return Err(format!(
                "expected {r} offsets (one per dimension of the descriptor), but got {}",
                offsets.len()
            ));
        }
        let offsets = offsets
            .into_iter()
            .enumerate()
            .map(|(i, o)| index(b, o, "offsets", i, Width::Offset))
            .collect::<Res<Vec<_>>>()?;
        let vals = |ts: &[Tensor]| -> Res<Vec<Value>> { ts.iter().map(|t| b.value(*t)).collect() };
        Ok(Dims {
            base: b.value(self.base)?,
            shape: vals(&self.shape[..r])?,
            strides: vals(&self.strides[..r])?,
            offsets,
            block: self.block_shape(),
        })
    }
}

impl fmt::Debug for TensorDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_poisoned() {
            return f.write_str("TensorDescriptor(<failed>)");
        }
        write!(
            f,
            "TensorDescriptor(base {:?}, block {:?}{})",
            self.base,
            self.block_shape(),
            if self.nan { ", padding nan" } else { "" }
        )
    }
}

impl Carry for TensorDescriptor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        let r = self.rank as usize;
        out.push(self.base);
        out.extend_from_slice(&self.shape[..r]);
        out.extend_from_slice(&self.strides[..r]);
    }

    fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        let r = self.rank as usize;
        let mut d = *self;
        d.base = it.next().unwrap_or_else(Tensor::poison);
        for list in [&mut d.shape, &mut d.strides] {
            for t in list[..r].iter_mut() {
                *t = it.next().unwrap_or_else(Tensor::poison);
            }
        }
        d
    }

    fn static_type(&self, out: &mut Vec<String>) {
        out.push(if self.is_poisoned() {
            String::new()
        } else {
            format!(
                "tensor descriptor of block_shape {:?}{}",
                self.block_shape(),
                if self.nan { " padded with NaN" } else { "" }
            )
        });
    }
}

/// The pointer argument of [`load`](super::load) and [`store`](super::store): a pointer
/// (or block of pointers) [`Tensor`], or a [`BlockPtr`].
#[derive(Clone, Debug)]
pub enum Pointer {
    /// A pointer or a block of pointers.
    Tensor(Tensor),
    /// A block pointer (`make_block_ptr`).
    Block(Box<BlockPtr>),
}

impl From<Tensor> for Pointer {
    fn from(t: Tensor) -> Self {
        Pointer::Tensor(t)
    }
}

impl From<&Tensor> for Pointer {
    fn from(t: &Tensor) -> Self {
        Pointer::Tensor(*t)
    }
}

impl From<BlockPtr> for Pointer {
    fn from(p: BlockPtr) -> Self {
        Pointer::Block(Box::new(p))
    }
}

impl From<&BlockPtr> for Pointer {
    fn from(p: &BlockPtr) -> Self {
        Pointer::Block(Box::new(*p))
    }
}

// ---- the lowering -------------------------------------------------------------------------

/// The resolved values of a block access: `i64` shape, strides and offsets.
struct Dims {
    base: Value,
    shape: Vec<Value>,
    strides: Vec<Value>,
    offsets: Vec<Value>,
    block: Vec<usize>,
}

/// The integer constant `v` holds, if it is one.
fn const_int(b: &Builder, v: Value) -> Option<i64> {
    let id = b.k.def_op(v)?;
    match b.k.op(id).op {
        Op::Constant {
            value: Const::Int(x),
        } => Some(x),
        _ => None,
    }
}

/// The block of pointers `base + sum_i (offsets_i + arange(block_i)) * strides_i` and,
/// when some dimension is checked, the mask `0 <= offsets_i + arange(block_i) < shape_i`
/// over the checked ones (as Triton's `RewriteTensorPointer` computes them, in `i64`).
fn addresses(b: &mut Builder, d: &Dims, check: &[bool]) -> Res<(Value, Option<Value>)> {
    let r = d.block.len();
    // The block's first element, `base + sum_i offsets_i * strides_i` (scalars), then each
    // dimension's `arange * stride`: the same 64-bit sums, regrouped (addition wraps), so
    // that a unit stride leaves `first + arange`, which the targets see as contiguous.
    let mut first = d.base;
    for i in 0..r {
        if const_int(b, d.offsets[i]) == Some(0) {
            continue;
        }
        let step = if const_int(b, d.strides[i]) == Some(1) {
            d.offsets[i]
        } else {
            b.mul(Opnd::Val(d.offsets[i]), Opnd::Val(d.strides[i]))?
        };
        first = b.add(Opnd::Val(first), Opnd::Val(step))?;
    }
    let mut ptr = first;
    let mut mask: Option<Value> = None;
    let along = |b: &mut Builder, mut v: Value, i: usize| -> Res<Value> {
        for _ in 0..i {
            v = b.expand_dims(v, 0)?;
        }
        for _ in i + 1..r {
            v = b.expand_dims(v, -1)?;
        }
        Ok(v)
    };
    for (i, &checked) in check.iter().enumerate() {
        let ar = b.arange(0, d.block[i] as i64)?;
        let step = if const_int(b, d.strides[i]) == Some(1) {
            ar
        } else {
            let wide = b.cast(ar, DType::I64)?;
            b.mul(Opnd::Val(wide), Opnd::Val(d.strides[i]))?
        };
        let step = along(b, step, i)?;
        ptr = b.add(Opnd::Val(ptr), Opnd::Val(step))?;
        if checked {
            let wide = b.cast(ar, DType::I64)?;
            let idx = if const_int(b, d.offsets[i]) == Some(0) {
                wide
            } else {
                b.add(Opnd::Val(wide), Opnd::Val(d.offsets[i]))?
            };
            let idx = along(b, idx, i)?;
            let lo = b.compare(CmpPred::Ge, Opnd::Val(idx), Opnd::Weak(Scalar::Int(0)))?;
            let hi = b.compare(CmpPred::Lt, Opnd::Val(idx), Opnd::Val(d.shape[i]))?;
            let m = b.bitwise(BinaryOp::And, Opnd::Val(lo), Opnd::Val(hi))?;
            mask = Some(match mask {
                None => m,
                Some(old) => b.bitwise(BinaryOp::And, Opnd::Val(old), Opnd::Val(m))?,
            });
        }
    }
    let ptr = b.broadcast_to(ptr, &d.block)?;
    let mask = match mask {
        Some(m) => Some(b.broadcast_to(m, &d.block)?),
        None => None,
    };
    Ok((ptr, mask))
}

/// Marks the op defining `v` as a block access: `.mask()`/`.other()` refuse it.
fn mark(b: &mut Builder, v: Value) {
    if let Some(id) = b.k.def_op(v) {
        b.block_ops.push(id);
    }
}

/// The range an index operand must fit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Width {
    /// Shapes and strides of block pointers, strides of descriptors: 64-bit.
    Wide,
    /// Offsets: 32-bit (Triton's rule), widened by sign extension.
    Offset,
    /// Shapes of descriptors: 32-bit (Triton's `make_scalar(x, int32)`).
    Narrow,
}

/// An entry of `shape`/`strides`/`offsets` as an `i64` scalar, with Triton's rules.
fn index(b: &mut Builder, o: Operand, what: &str, i: usize, w: Width) -> Res<Value> {
    match o {
        Operand::Scalar(Scalar::Int(x)) => {
            let (lo, hi, bits) = match w {
                Width::Wide => (i64::MIN as i128, i64::MAX as i128, 64),
                _ => (i32::MIN as i128, i32::MAX as i128, 32),
            };
            if x < lo || x > hi {
                return Err(format!(
                    "`{what}[{i}]` = {x} does not fit the {bits}-bit integers Triton takes there"
                ));
            }
            Ok(b.constant(Const::Int(x as i64), crate::ir::Type::scalar(DType::I64)))
        }
        Operand::Scalar(s) => Err(format!("`{what}[{i}]` must be an integer, got {s:?}")),
        Operand::Tensor(t) => {
            let v = b.value(t)?;
            let ty = b.ty(v).clone();
            if ty.ptr || ty.numel() != 1 || !ty.dtype.is_int() {
                return Err(format!("`{what}[{i}]` must be an integer scalar, got {ty}"));
            }
            let v = if ty.is_block() { b.reshape(v, &[])? } else { v };
            let d = ty.dtype;
            match w {
                Width::Wide => b.cast(v, DType::I64),
                Width::Offset | Width::Narrow => {
                    if d.bits() == 64 {
                        return Err(format!(
                            "`{what}[{i}]` is {d:?}, but Triton takes 32-bit integers there: \
                             add `.to(I32)`"
                        ));
                    }
                    // Triton sign-extends the 32-bit value whatever its signedness.
                    let v = if d == DType::U32 {
                        b.bitcast(v, DType::I32)?
                    } else {
                        b.cast(v, DType::I32)?
                    };
                    b.cast(v, DType::I64)
                }
            }
        }
    }
}

/// A scalar pointer argument (`base`).
fn base_pointer(b: &Builder, base: Tensor, what: &str) -> Res<Value> {
    let v = b.value(base)?;
    let t = b.ty(v);
    if !t.ptr || t.is_block() {
        return Err(format!(
            "`base` must be a pointer (not a block of pointers) to start {what} at, got {t}"
        ));
    }
    Ok(v)
}

/// The lengths of the per-dimension lists, checked against `block_shape`.
fn same_rank(lists: &[(&str, usize)], block: usize) -> Res<()> {
    for (name, n) in lists {
        if *n != block {
            return Err(format!(
                "`{name}` has {n} entries but `block_shape` has {block}: give one per dimension"
            ));
        }
    }
    Ok(())
}

/// `boundary_check`: distinct dimensions of the block, as a per-dimension flag.
fn boundary_check(dims: &[i64], rank: usize) -> Res<Vec<bool>> {
    let mut check = vec![false; rank];
    for &d in dims {
        if d < 0 || d as usize >= rank {
            return Err(format!(
                "`boundary_check` names dimension {d}, but the block has {rank} \
                 (dimensions 0..{rank})"
            ));
        }
        if std::mem::replace(&mut check[d as usize], true) {
            return Err(format!("`boundary_check` names dimension {d} twice"));
        }
    }
    Ok(check)
}

// ---- the functions ------------------------------------------------------------------------

/// `make_block_ptr(base, shape, strides, offsets, block_shape, order)`: a [`BlockPtr`] to
/// the `block_shape` block at `offsets` of the tensor of `shape` and `strides` (counted in
/// elements) that starts at `base`.
///
/// `shape` and `strides` are 64-bit integers (scalar tensors or Rust integers), `offsets`
/// 32-bit ones; `block_shape` holds powers of two (constexprs) and `order` is a permutation
/// of the dimensions (Triton's layout hint: accepted and checked, without effect on the
/// result).
///
/// ```
/// use triton_metal::{tl, DType::{F32, I32}};
/// let k = tl::jit("copy_tile", |k| {
///     let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
///     let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
///     let pid = tl::program_id(0);
///     let src = tl::make_block_ptr(x, (m, n), (n, 1), (pid * 16, 0), [16, 32], [1, 0]);
///     let dst = tl::make_block_ptr(y, (m, n), (n, 1), (pid * 16, 0), [16, 32], [1, 0]);
///     let tile = tl::load_block(src, [0, 1], "zero");
///     tl::store_block(dst, tile * 2.0, [0, 1]);
/// })?;
/// assert_eq!(k.specialize_with(&[])?.outputs(), vec![1]);
/// # Ok::<(), triton_metal::Error>(())
/// ```
#[track_caller]
pub fn make_block_ptr(
    base: Tensor,
    shape: impl IntoOperands,
    strides: impl IntoOperands,
    offsets: impl IntoOperands,
    block_shape: impl IntoShape,
    order: impl IntoShape,
) -> BlockPtr {
    let loc = SourceLoc::caller();
    let (shape, strides, offsets) = (
        shape.into_operands(),
        strides.into_operands(),
        offsets.into_operands(),
    );
    let (block_shape, order) = (block_shape.into_shape(), order.into_shape());
    op_any("make_block_ptr", loc, |b| {
        let base_v = base_pointer(b, base, "a block pointer")?;
        let r = block_shape.len();
        if r == 0 {
            return Err(
                "`block_shape` is empty: a block pointer has at least one dimension".into(),
            );
        }
        if r > MAX_BLOCK_PTR_DIMS {
            return Err(format!(
                "`block_shape` has {r} dimensions; block pointers have at most {MAX_BLOCK_PTR_DIMS}"
            ));
        }
        same_rank(
            &[
                ("shape", shape.len()),
                ("strides", strides.len()),
                ("offsets", offsets.len()),
                ("order", order.len()),
            ],
            r,
        )?;
        let block = b
            .check_shape(&block_shape)
            .map_err(|e| format!("`block_shape`: {e}"))?;
        let mut sorted = order.clone();
        sorted.sort_unstable();
        if sorted.iter().enumerate().any(|(i, &o)| o != i as i64) {
            return Err(format!(
                "`order` must be a permutation of 0..{r}, got {order:?}"
            ));
        }
        let mut p = BlockPtr::poison();
        p.rank = r as u8;
        p.base = b.handle(base_v);
        for i in 0..r {
            let (s, st) = (
                index(b, shape[i], "shape", i, Width::Wide)?,
                index(b, strides[i], "strides", i, Width::Wide)?,
            );
            let o = index(b, offsets[i], "offsets", i, Width::Offset)?;
            (p.shape[i], p.strides[i], p.offsets[i]) = (b.handle(s), b.handle(st), b.handle(o));
            p.block_shape[i] = block[i] as u32;
            p.order[i] = order[i] as u8;
        }
        Ok(p)
    })
    .unwrap_or_else(BlockPtr::poison)
}

/// `advance(ptr, offsets)`: the block pointer moved by `offsets` (32-bit integers, one per
/// dimension; counted in elements, not blocks).
#[track_caller]
pub fn advance(ptr: BlockPtr, offsets: impl IntoOperands) -> BlockPtr {
    let (loc, offsets) = (SourceLoc::caller(), offsets.into_operands());
    op_any("advance", loc, |b| {
        let dims = ptr.dims(b)?;
        let r = dims.block.len();
        if offsets.len() != r {
            return Err(format!(
                "`offsets` has {} entries but the block pointer has {r} dimensions",
                offsets.len()
            ));
        }
        let mut p = ptr;
        for (i, o) in offsets.into_iter().enumerate() {
            let inc = index(b, o, "offsets", i, Width::Offset)?;
            if const_int(b, inc) != Some(0) {
                let v = b.add(Opnd::Val(dims.offsets[i]), Opnd::Val(inc))?;
                p.offsets[i] = b.handle(v);
            }
        }
        Ok(p)
    })
    .unwrap_or_else(BlockPtr::poison)
}

/// `load(block_ptr, boundary_check=.., padding_option=..)`: the block the pointer points
/// at. Dimensions listed in `boundary_check` are guarded (elements outside `0..shape` read
/// as `padding_option`: `"zero"`, `"nan"`, or `""` for Triton's default, which reads 0
/// here); the others are not, as in Triton (an access outside the buffer there is an
/// error on the CPU targets and the emulator). `tl::load(block_ptr)` is this with no
/// checks. Loading through a pointer to `bool` gives `i8`, as in Triton.
#[track_caller]
pub fn load_block(ptr: BlockPtr, boundary_check: impl IntoShape, padding_option: &str) -> Tensor {
    load_at(
        SourceLoc::caller(),
        ptr,
        boundary_check.into_shape(),
        padding_option,
    )
}

pub(crate) fn load_at(loc: SourceLoc, ptr: BlockPtr, check: Vec<i64>, pad: &str) -> Tensor {
    op("load", loc, |b| {
        let pad = padding(pad)?;
        let dims = ptr.dims(b)?;
        let elt = b.ty(dims.base).dtype;
        if pad == Padding::Nan && !elt.is_float() {
            return Err(format!(
                "padding option \"nan\" is not supported for {elt:?} block pointers \
                 (floating-point only)"
            ));
        }
        let check = boundary_check(&check, dims.block.len())?;
        let (ptrs, mask) = addresses(b, &dims, &check)?;
        let other = match (mask, pad) {
            (Some(_), Padding::Zero) => Some(Opnd::Weak(Scalar::Int(0))),
            (Some(_), Padding::Nan) => Some(Opnd::Weak(Scalar::Float(f64::NAN))),
            _ => None,
        };
        let v = b.load(ptrs, mask.map(Opnd::Val), other)?;
        mark(b, v);
        if elt == DType::Bool {
            return b.cast(v, DType::I8);
        }
        Ok(v)
    })
}

/// `store(block_ptr, value, boundary_check=..)`: writes `value` (a scalar, broadcast, or a
/// block of exactly the block's shape, of the pointee dtype: Triton does not convert it)
/// to the block. Elements outside `0..shape` along the dimensions in `boundary_check` are
/// dropped; the other dimensions are not guarded. `tl::store(block_ptr, value)` is this
/// with no checks.
#[track_caller]
pub fn store_block(ptr: BlockPtr, value: impl Into<Operand>, boundary_check: impl IntoShape) {
    store_at(
        SourceLoc::caller(),
        ptr,
        value.into(),
        boundary_check.into_shape(),
    );
}

/// The store op (with the build's id), for [`Store`](super::ops::Store).
pub(crate) fn store_at(
    loc: SourceLoc,
    ptr: BlockPtr,
    value: Operand,
    check: Vec<i64>,
) -> Option<(OpId, u32)> {
    op_any("store", loc, |b| {
        let dims = ptr.dims(b)?;
        let elt = b.ty(dims.base).dtype;
        // A block pointer to `bool` holds `i8` values, as in Triton.
        let want = if elt == DType::Bool { DType::I8 } else { elt };
        let v = match resolve(b, value)? {
            Opnd::Weak(s) => b.scalar_const(s, want)?,
            Opnd::Val(v) => {
                let t = b.ty(v).clone();
                if t.ptr {
                    return Err("cannot store pointers".into());
                }
                if t.dtype != want {
                    return Err(format!(
                        "the value's dtype {:?} differs from the block pointer's element dtype \
                         {want:?}: convert it with `.to({want:?})` (Triton does not)",
                        t.dtype
                    ));
                }
                if t.is_block() && t.shape != dims.block {
                    return Err(format!(
                        "the value's shape {:?} differs from the block shape {:?} (Triton \
                         does not broadcast blocks here)",
                        t.shape, dims.block
                    ));
                }
                v
            }
        };
        let v = if elt == DType::Bool {
            b.cast(v, DType::Bool)?
        } else {
            v
        };
        let check = boundary_check(&check, dims.block.len())?;
        let (ptrs, mask) = addresses(b, &dims, &check)?;
        let id = b.store(ptrs, Opnd::Val(v), mask.map(Opnd::Val))?;
        b.block_ops.push(id);
        Ok((id, b.id))
    })
}

/// `make_tensor_descriptor(base, shape, strides, block_shape)` (Triton 3.9): a
/// [`TensorDescriptor`] of the tensor of `shape` (32-bit integers) and `strides` (64-bit,
/// in elements) starting at `base`, read and written in `block_shape` blocks. Triton's
/// requirements are build errors: 1 to 5 dimensions, the last stride the constant 1, the
/// block's last dimension at least 16 bytes, and strides given as Rust integers multiples
/// of 16 bytes (strides known only at run time are not checked: any stride works here).
/// Chain [`TensorDescriptor::padding_option`] for `padding_option="nan"`.
///
/// ```
/// use triton_metal::{tl, DType::{F32, I32}};
/// let k = tl::jit("scale_tiles", |k| {
///     let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
///     let (m, n) = (k.scalar(I32, "m"), k.scalar(I32, "n"));
///     let src = tl::make_tensor_descriptor(x, (m, n), (n, 1), [16, 32]);
///     let dst = tl::make_tensor_descriptor(y, (m, n), (n, 1), [16, 32]);
///     let at = (tl::program_id(0) * 16, tl::program_id(1) * 32);
///     dst.store(at, src.load(at) * 2.0);
/// })?;
/// assert_eq!(k.specialize_with(&[])?.outputs(), vec![1]);
/// # Ok::<(), triton_metal::Error>(())
/// ```
#[track_caller]
pub fn make_tensor_descriptor(
    base: Tensor,
    shape: impl IntoOperands,
    strides: impl IntoOperands,
    block_shape: impl IntoShape,
) -> TensorDescriptor {
    let loc = SourceLoc::caller();
    let (shape, strides, block_shape) = (
        shape.into_operands(),
        strides.into_operands(),
        block_shape.into_shape(),
    );
    op_any("make_tensor_descriptor", loc, |b| {
        let base_v = base_pointer(b, base, "a tensor descriptor")?;
        let r = shape.len();
        if !(1..=MAX_DESCRIPTOR_DIMS).contains(&r) {
            return Err(format!(
                "`shape` has {r} dimensions; tensor descriptors have 1 to {MAX_DESCRIPTOR_DIMS}"
            ));
        }
        if strides.len() != r {
            return Err(format!(
                "`strides` has {} entries but `shape` has {r}",
                strides.len()
            ));
        }
        if block_shape.len() != r {
            return Err(format!(
                "`block_shape` has {} entries but `shape` has {r}",
                block_shape.len()
            ));
        }
        let block = b
            .check_shape(&block_shape)
            .map_err(|e| format!("`block_shape`: {e}"))?;
        let elt = b.ty(base_v).dtype;
        let elem = elt.bits() as usize / 8;
        if block[r - 1] * elem < 16 {
            return Err(format!(
                "the block's last dimension must hold at least 16 bytes, but got {} * {elem} \
                 = {} bytes ({elt:?})",
                block[r - 1],
                block[r - 1] * elem
            ));
        }
        for (i, s) in strides.iter().enumerate() {
            let given = match s {
                Operand::Scalar(Scalar::Int(x)) => Some(*x),
                Operand::Tensor(t) => const_int(b, b.value(*t)?).map(i128::from),
                _ => None,
            };
            if i == r - 1 {
                if given != Some(1) {
                    return Err(format!(
                        "the last stride must be the constant 1 (a contiguous last dimension), \
                         got {}",
                        given.map_or("a value known only at run time".into(), |x| x.to_string())
                    ));
                }
            } else if let Some(x) = given {
                if (x * elem as i128) % 16 != 0 {
                    return Err(format!(
                        "`strides[{i}]` = {x} elements of {elt:?} is not a multiple of 16 bytes"
                    ));
                }
            }
        }
        let mut d = TensorDescriptor::poison();
        d.rank = r as u8;
        d.base = b.handle(base_v);
        for i in 0..r {
            let s = index(b, shape[i], "shape", i, Width::Narrow)?;
            let st = index(b, strides[i], "strides", i, Width::Wide)?;
            (d.shape[i], d.strides[i]) = (b.handle(s), b.handle(st));
            d.block_shape[i] = block[i] as u32;
        }
        Ok(d)
    })
    .unwrap_or_else(TensorDescriptor::poison)
}
