//! Running kernels: the MLX custom primitive for the CPU executor, launches, caches.

pub mod launch;
mod memo;
pub mod mlx_kernel;
mod words;

pub use crate::ffi::cpu_primitive;

pub use launch::{
    cdiv, grid, inout, out, out_like, ptr_table, Arg, Grid, IntoArgs, Launch, Meta, PlanEdit,
    Scalar, Target, MAX_COMPILED_OPS, MAX_EMULATED_OPS, MAX_GRID,
};
// What launches take and return from the modules outside the public API.
pub use crate::codegen::{CudaProgram, LaunchOptions, MetalProgram, ReductionLayout};
pub use crate::emu::LaneOrder;
pub use crate::opt::plan::{Decision, KernelPlan, ScanStrategy};
pub use crate::passes::PassOptions;
pub use mlx_kernel::{
    cpu_launch, cpu_output_cache_bytes, set_cpu_output_cache_limit, CudaKernelCall, KernelCall,
    MetalKernelCall, OutputSpec,
};
