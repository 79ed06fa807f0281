//! # triton-metal
//!
//! Triton-style GPU kernels written in Rust, compiled to Metal Shading Language (or
//! CUDA) and run through MLX; the same kernels run everywhere on a CPU executor that
//! plugs into MLX as a custom primitive. Start with the [`guide`].
//!
//! # Public API
//!
//! What this crate promises to keep (changes follow semantic versioning):
//!
//! | module / item | what it is |
//! |---|---|
//! | [`tl`], [`jit`] | the kernel DSL mirroring `triton.language`, and the `#[jit]` attribute |
//! | [`runtime`] | launching: [`runtime::Target`], grids, arguments, outputs, the CPU output cache |
//! | [`Array`], [`mlx`], [`testing`] | MLX arrays, MLX's reference ops, comparing results with them |
//! | [`device`], [`DType`], [`Element`] | devices, hardware information, element types |
//! | [`Error`], [`Result`], [`SourceLoc`] | errors (`#[non_exhaustive]`, with sources) |
//! | [`Config`] ([`config`]) | the library's settings and their environment variables |
//! | [`opt`], [`graph`], [`tune`] | hardware profiles and layout analysis, op-graph fusion with its reports, autotuning |
//! | [`guide`] | the users' guide (documentation only) |
//!
//! The modules `codegen`, `emu`, `exec`, `native`, `fuzz`, `ir`, `passes` and `bench` are
//! public only so that this crate's own tool, tests, examples and benchmarks can reach them:
//! they are hidden from the documentation and may change in any release. The items users
//! need from them are re-exported in [`runtime`] ([`runtime::LaneOrder`],
//! [`runtime::ReductionLayout`], [`runtime::PassOptions`], [`runtime::MetalProgram`],
//! [`runtime::CudaProgram`]). A specialised kernel's IR prints with `Display`; its structure
//! is not part of the API.
#![deny(missing_docs)]

// The `#[jit]` expansion names `::triton_metal`, also inside this crate's own tests.
extern crate self as triton_metal;

pub(crate) mod cache;
pub(crate) mod clang;
pub mod dtype;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod emu;
pub mod error;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod exec;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod fuzz;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod ir;
pub mod tl;

pub use dtype::{DType, Element};
pub use error::{Error, Result, SourceLoc};

#[doc = include_str!("jit.md")]
pub use triton_metal_macros::jit;

pub mod array;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod bench;
pub mod config;
pub mod device;
pub(crate) mod ffi;
#[cfg(test)]
mod layering;
pub mod mlx;
pub(crate) mod mlx_abi;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod native;
pub mod runtime;
pub(crate) mod settings;
pub mod testing;
pub mod tune;

#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod codegen;
pub mod graph;
#[doc = include_str!("guide.md")]
pub mod guide {}
pub mod opt;
#[doc(hidden)]
#[allow(rustdoc::broken_intra_doc_links)]
pub mod passes;

pub use array::Array;
pub use config::Config;
pub use device::{Backend, Device, HardwareInfo};
