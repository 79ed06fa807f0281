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
//! Semantics follow Triton 3.x (promotion, broadcasting, `/` vs [`floordiv`], reductions,
//! Philox random numbers); `semantics.rs` holds the rules. Mistakes never panic: the first
//! one is returned from [`jit`] / [`JitKernel::specialize`] as
//! [`Error::Build`](crate::Error::Build) with the kernel, the op and the user's source line.

mod builder;
mod control;
mod jit;
mod ops;
mod semantics;
mod tensor;

pub use control::{
    associative_scan, if_, if_then, range, reduce, static_range, while_loop, Carry, Range,
};
pub use jit::{build, jit, JitKernel, KernelBuilder};
pub use ops::*;
pub use semantics::{computation_type, integer_promote, scalar_dtype};
pub use tensor::{Operand, Scalar, Tensor};

pub use crate::dtype::DType::{
    Bool as int1, BF16 as bfloat16, F16 as float16, F32 as float32, F64 as float64, I16 as int16,
    I32 as int32, I64 as int64, I8 as int8, U16 as uint16, U32 as uint32, U64 as uint64,
    U8 as uint8,
};

#[cfg(test)]
mod tests;
