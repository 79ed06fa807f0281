//! What differs between C-family GPU languages, as data (STYLE rule 10).
//!
//! The printer in `lower.rs` is shared; a dialect is this table of spellings plus the
//! per-op overrides in [`Dialect::overrides`], consulted before the shared printing. Adding
//! CUDA means adding one more `Dialect` value, not another printer. What is still Metal's
//! alone: the `simdgroup_matrix` tile path of `tl.dot` (a dialect without `matrix_8x8`
//! takes the FMA path), the helper header (`metal.rs`), and `uint` as the index type of
//! generated loops (a CUDA header can `typedef unsigned int uint;`).

use crate::dtype::DType;

/// Spellings of one target language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialect {
    /// Short name used in error messages (`metal`, `cuda`).
    pub name: &'static str,
    /// Element type names, indexed like [`DType::ALL`]; `None` when the language lacks it.
    pub types: [Option<&'static str>; 13],
    /// Qualifier of a per-threadgroup array declaration.
    pub shared_array: &'static str,
    /// Qualifier of a read-write pointer into device memory.
    pub device_ptr: &'static str,
    /// Full threadgroup barrier with threadgroup-memory ordering.
    pub barrier: &'static str,
    /// Barrier that also orders device memory (`debug_barrier`).
    pub device_barrier: &'static str,
    /// Index of the thread within its program (threadgroup).
    pub thread_index: &'static str,
    /// Lane within the SIMD-group (warp).
    pub lane_index: &'static str,
    /// SIMD-group (warp) index within the threadgroup.
    pub simdgroup_index: &'static str,
    /// Program id per axis.
    pub program_id: [&'static str; 3],
    /// Number of programs per axis.
    pub num_programs: [&'static str; 3],
    /// Positive infinity and NaN of `float`.
    pub infinity: &'static str,
    /// Quiet NaN of `float`.
    pub nan: &'static str,
    /// Bit reinterpretation, `{ty}` and `{x}` substituted.
    pub bitcast: &'static str,
    /// Butterfly shuffle across lanes, `{x}` and `{m}` (lane mask) substituted.
    pub shuffle_xor: &'static str,
    /// SIMD-wide sum, max and min (`{x}`), when the language has them.
    pub simd_sum: Option<&'static str>,
    /// SIMD-wide max.
    pub simd_max: Option<&'static str>,
    /// SIMD-wide min.
    pub simd_min: Option<&'static str>,
    /// Shuffle from the lane `{d}` below, `{x}` and `{d}` substituted.
    pub shuffle_up: &'static str,
    /// Exclusive prefix sum over the SIMD-group (`{x}`), when the language has one.
    pub prefix_exclusive_sum: Option<&'static str>,
    /// Exclusive prefix product over the SIMD-group (`{x}`).
    pub prefix_exclusive_product: Option<&'static str>,
    /// Relaxed atomic read-modify-write returning the old value: `{op}` (`fetch_add`,
    /// `fetch_max`, `exchange`, ...), `{addr}` and `{val}` substituted.
    pub atomic_rmw: &'static str,
    /// Relaxed atomic load of `{addr}`.
    pub atomic_load: &'static str,
    /// Relaxed atomic store statement of `{val}` to `{addr}`.
    pub atomic_store: &'static str,
    /// High half of the full product (`{a}`, `{b}`).
    pub mulhi: &'static str,
    /// `8x8` matrix fragments (`simdgroup_matrix`) are available.
    pub matrix_8x8: bool,
    /// Per-op overrides, checked before the shared printing.
    pub overrides: &'static [(&'static str, &'static str)],
}

impl Dialect {
    /// The language's name for `dtype`, if it has one.
    pub fn type_name(&self, dtype: DType) -> Option<&'static str> {
        let i = DType::ALL.iter().position(|d| *d == dtype)?;
        self.types[i]
    }

    /// The override template for an op name, if the dialect has one.
    pub fn override_for(&self, op: &str) -> Option<&'static str> {
        self.overrides
            .iter()
            .find(|(name, _)| *name == op)
            .map(|(_, t)| *t)
    }
}

/// Metal Shading Language (MLX `fast::metal_kernel` bodies).
pub const METAL: Dialect = Dialect {
    name: "metal",
    types: [
        Some("bool"),
        Some("char"),
        Some("short"),
        Some("int"),
        Some("long"),
        Some("uchar"),
        Some("ushort"),
        Some("uint"),
        Some("ulong"),
        Some("half"),
        Some("bfloat"),
        Some("float"),
        None,
    ],
    shared_array: "threadgroup",
    device_ptr: "device",
    barrier: "threadgroup_barrier(mem_flags::mem_threadgroup);",
    device_barrier: "threadgroup_barrier(mem_flags::mem_device);",
    thread_index: "thread_index_in_threadgroup",
    lane_index: "thread_index_in_simdgroup",
    simdgroup_index: "simdgroup_index_in_threadgroup",
    program_id: [
        "int(threadgroup_position_in_grid.x)",
        "int(threadgroup_position_in_grid.y)",
        "int(threadgroup_position_in_grid.z)",
    ],
    num_programs: [
        "int(threadgroups_per_grid.x)",
        "int(threadgroups_per_grid.y)",
        "int(threadgroups_per_grid.z)",
    ],
    infinity: "INFINITY",
    nan: "NAN",
    bitcast: "as_type<{ty}>({x})",
    shuffle_xor: "simd_shuffle_xor({x}, {m})",
    simd_sum: Some("simd_sum({x})"),
    simd_max: Some("simd_max({x})"),
    simd_min: Some("simd_min({x})"),
    shuffle_up: "simd_shuffle_up({x}, {d})",
    prefix_exclusive_sum: Some("simd_prefix_exclusive_sum({x})"),
    prefix_exclusive_product: Some("simd_prefix_exclusive_product({x})"),
    atomic_rmw: "atomic_{op}_explicit({addr}, {val}, memory_order_relaxed)",
    atomic_load: "atomic_load_explicit({addr}, memory_order_relaxed)",
    atomic_store: "atomic_store_explicit({addr}, {val}, memory_order_relaxed);",
    mulhi: "mulhi({a}, {b})",
    matrix_8x8: true,
    // Metal has no `erf`; the header defines one.
    overrides: &[("erf", "tm_erf({x})")],
};
