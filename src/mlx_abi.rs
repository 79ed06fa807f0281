//! Facts of MLX's `fast::metal_kernel` contract that the Metal printer (`codegen::abi`) and
//! the emulator's copy of MLX's signature writer (`emu::signature`) both rely on, written
//! once.

/// Inputs with fewer elements than this are passed in the `constant` address space.
pub const MAX_CONSTANT_ARRAY_SIZE: usize = 8;

/// MLX's table of Metal attributes, in MLX's order, with their parameter types. A kernel
/// parameter is added for each name that occurs anywhere in the source.
pub const METAL_ATTRIBUTES: [(&str, &str); 20] = [
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
];
