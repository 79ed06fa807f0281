//! # triton-metal
//!
//! Triton-style GPU kernels written in Rust, compiled to Metal Shading Language (or
//! CUDA) and run through MLX; the same kernels run everywhere on a CPU executor that
//! plugs into MLX as a custom primitive.
#![deny(missing_docs)]

// The `#[jit]` expansion names `::triton_metal`, also inside this crate's own tests.
extern crate self as triton_metal;

pub mod dtype;
pub mod emu;
pub mod error;
pub mod exec;
pub mod ir;
pub mod tl;

pub use dtype::{DType, Element};
pub use error::{Error, Result, SourceLoc};

#[doc = include_str!("jit.md")]
pub use triton_metal_macros::jit;

pub mod array;
pub mod bench;
pub mod config;
pub mod device;
pub(crate) mod ffi;
pub mod mlx;
pub mod runtime;
pub(crate) mod settings;
pub mod testing;
pub mod tune;

pub mod codegen;
pub mod graph;
pub mod opt;
pub mod passes;

pub use array::Array;
pub use config::Config;
pub use device::{Backend, Device, HardwareInfo};
