//! Running kernels: the MLX custom primitive for the CPU executor, launches, caches.

pub mod cpu_primitive;
pub mod mlx_kernel;

pub use mlx_kernel::{cpu_launch, MetalKernelCall, OutputSpec};
