//! The kernel DSL, mirroring `triton.language`.
//!
//! A kernel is a Rust closure given to [`jit`]; inside it, `tl::` functions and operators on
//! [`Tensor`] handles record typed IR ops into the kernel being built (held in a thread-local
//! only while the closure runs, like Triton's implicit builder). Constexprs specialise the
//! kernel: the closure re-runs once per constexpr set and `k.constexpr("BLOCK")` returns the
//! concrete value, usable in shapes.
//!
//! ```
//! use triton_metal::{tl, DType::{F32, I32}};
//! let add = tl::jit("add_kernel", |k| {
//!     let (x_ptr, y_ptr, out_ptr) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "y_ptr"), k.ptr(F32, "output_ptr"));
//!     let n = k.scalar(I32, "n_elements");
//!     let block = k.constexpr("BLOCK_SIZE");
//!     let pid = tl::program_id(0);
//!     let offsets = pid * block + tl::arange(0, block);
//!     let mask = offsets.lt(n);
//!     let x = tl::load(x_ptr + offsets).mask(mask);
//!     let y = tl::load(y_ptr + offsets).mask(mask);
//!     tl::store(out_ptr + offsets, x + y).mask(mask);
//! })?;
//! let kernel = add.specialize_with(&[("BLOCK_SIZE", 1024)])?;
//! assert_eq!(kernel.outputs(), vec![2]);
//! # Ok::<(), triton_metal::Error>(())
//! ```
//!
//! ## Triton to Rust
//!
//! | Triton | here |
//! |---|---|
//! | `@triton.jit def k(x_ptr, n, BLOCK: tl.constexpr)` | `tl::jit("k", \|k\| { let x_ptr = k.ptr(F32, "x_ptr"); let n = k.scalar(I32, "n"); let block = k.constexpr("BLOCK"); .. })` |
//! | `a + b`, `a * 2`, `a / b`, `a // b`, `a % b`, `-a`, `~a`, `a & b`, `a << 2` | `a + b`, `a * 2`, `a / b`, `tl::floordiv(a, b)`, `a % b`, `-a`, `!a`, `a & b`, `a << 2` |
//! | `a < b`, `a == b` | `a.lt(b)`, `a.eq(b)` (also `le gt ge ne`) |
//! | `x[:, None]`, `x[None, :]` | `x.col()`, `x.row()` (or `x.expand_dims(1)`) |
//! | `tl.load(p, mask=m, other=0.0)` | `tl::load(p).mask(m).other(0.0)` or `tl::load_with(p, m, 0.0)` |
//! | `tl.store(p, v, mask=m)` | `tl::store(p, v).mask(m)` |
//! | `tl.sum(x, axis=1, keep_dims=True)`, `tl.max(x)` | `tl::sum(x, tl::keep_dims(1))`, `tl::max(x, None)` |
//! | `tl.where(c, a, b)` | `tl::where_(c, a, b)` |
//! | `tl.dot(a, b, acc)`, `tl.dot(a, b, out_dtype=tl.float16)` | `tl::dot(a, b, acc)` / `tl::dot(a, b, None)`, `tl::dot_out(a, b, None, F16)` |
//! | `x.to(tl.float16)`, `x.to(tl.int32, bitcast=True)` | `x.to(F16)`, `x.bitcast(I32)` |
//! | `tl.load(table + g).to(tl.pointer_type(tl.float16))` | `tl::load(table + g).to(tl::pointer_type(F16))` (a `runtime::ptr_table` argument; CPU targets) |
//! | `for i in range(lo, hi, step): acc += ..` | `let acc = tl::range(lo, hi, step).fold(acc, \|i, acc\| acc + ..)` |
//! | `while c: ..`, `if c: .. else: ..` | `tl::while_loop(init, \|v\| cond, \|v\| next)`, `tl::if_(c, \|\| a, \|\| b)` |
//! | `for i in tl.static_range(4)` | `for i in tl::static_range(0, 4, 1)` (plain Rust, unrolled) |
//! | `tl.reduce(x, 0, combine)`, `tl.associative_scan(x, 0, combine)` | `tl::reduce(x, 0, \|a, b\| ..)`, `tl::associative_scan(x, 0, false, \|a, b\| ..)` |
//! | `tl.float32`, `tl.int1` | `DType::F32` (or `tl::float32`), `DType::Bool` (`tl::int1`) |
//! | `libdevice.asin(x)`, `libdevice.pow(x, y)` (`from triton.language.extra import libdevice`) | `tl::libdevice::asin(x)`, `tl::libdevice::pow(x, y)` |
//! | `tl.sort(x, dim, descending=True)`, `tl.flip(x, dim)` | `tl::sort(x, dim, true)`, `tl::flip(x, dim)` |
//! | `tl.cat(a, b, can_reorder=True)`, `x.view(shape)` | `tl::cat(a, b, true)`, `tl::view(x, shape)` |
//! | `tl.expand_dims(x, (0, 2))`, `tl.trans(x, 2, 0, 1)` | `tl::expand_dims_axes(x, [0, 2])`, `tl::trans_dims(x, [2, 0, 1])` |
//! | `tl.cumsum(x, 0, reverse=True)`, `tl.cumprod(x, 0, reverse=True)` | `tl::cumsum_reverse(x, 0)`, `tl::cumprod_reverse(x, 0)` |
//! | `tl.sum(x, 1, dtype=tl.float32)` | `tl::sum_dtype(x, 1, F32)` |
//! | `tl.make_block_ptr(b, shape, strides, offsets, block_shape, order)`, `tl.advance(p, offs)` | `tl::make_block_ptr(b, (m, n), (sm, 1), (o, 0), [BM, BN], [1, 0])`, `tl::advance(p, (0, BN))` |
//! | `tl.load(p, boundary_check=(0, 1), padding_option="zero")`, `tl.store(p, v, boundary_check=(0,))` | `tl::load_block(p, [0, 1], "zero")`, `tl::store_block(p, v, [0])` |
//! | `d = tl.make_tensor_descriptor(b, [m, n], [sm, 1], [BM, BN])`, `d.load([i, j])`, `d.store([i, j], v)` | `let d = tl::make_tensor_descriptor(b, (m, n), (sm, 1), [BM, BN]);`, `d.load((i, j))`, `d.store((i, j), v)` |
//!
//! Semantics follow Triton 3.x (promotion, broadcasting, `/` vs [`floordiv`], reductions,
//! Philox random numbers); `semantics.rs` holds the rules. Mistakes never panic: the first
//! one is returned from [`jit`] / [`JitKernel::specialize`] as
//! [`Error::Build`](crate::Error::Build) with the kernel, the op and the user's source line.

mod block_ptr;
mod builder;
mod control;
#[doc(hidden)]
pub mod expand;
mod jit;
mod ops;
mod semantics;
mod standard;
mod tensor;

pub use crate::ir::MAX_NESTING;
pub use block_ptr::{
    advance, load_block, make_block_ptr, make_tensor_descriptor, store_block, BlockPtr,
    IntoOperands, Pointer, TensorDescriptor, MAX_BLOCK_PTR_DIMS, MAX_DESCRIPTOR_DIMS,
};
pub use control::{
    associative_scan, if_, if_then, range, reduce, static_range, while_loop, Carry, Range,
};
pub use jit::{
    build, jit, ArgType, ConstexprKind, ConstexprValue, IntoSignature, JitKernel, KernelBuilder,
    Signature,
};
pub use ops::*;
pub use semantics::{computation_type, integer_promote, scalar_dtype};
pub use standard::{
    cat, cumprod_reverse, dot_with, expand_dims_axes, flip, gather, histogram, sort, sum_dtype,
    topk, trans_dims, view,
};
pub use tensor::{Operand, Scalar, Tensor};

pub use crate::dtype::DType::{
    Bool as int1, BF16 as bfloat16, F16 as float16, F32 as float32, F64 as float64, I16 as int16,
    I32 as int32, I64 as int64, I8 as int8, U16 as uint16, U32 as uint32, U64 as uint64,
    U8 as uint8,
};

#[cfg(test)]
mod tests;
