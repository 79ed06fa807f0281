//! The optimizer: hardware profiles and the layout decisions derived from them.
//!
//! Kernel-IR passes (constant folding, CSE, FMA contraction, barrier elimination) join
//! this module once the IR lands; what is here needs only op descriptions and a profile.
//!
//! ```
//! use triton_metal::graph::OpSpec;
//! use triton_metal::opt::{memory_layout_for_op, HardwareProfile, MemoryLayout};
//!
//! // Plan a row reduction for an M3 Max, whatever machine this runs on.
//! let hw = HardwareProfile::named("m3-max")?;
//! let op = OpSpec::from_operation_str("tt.sum:[256,8192]:1")?;
//! let plan = memory_layout_for_op(&op, &hw)?;
//! assert!(plan.layout.contains(MemoryLayout::COALESCED));
//! let r = plan.reduction.as_ref().unwrap();
//! assert!(r.two_stage && r.partials_per_output >= 2); // 8192 > 1024 elements per row
//! assert_eq!(plan.threads_per_threadgroup % hw.simd_width, 0);
//! # Ok::<(), triton_metal::Error>(())
//! ```

pub(crate) mod axis;
pub mod hardware;
pub mod layout;
pub mod options;
pub mod plan;

pub use hardware::{Chip, HardwareProfile, TileShape, HW_ENV_VAR};
pub use layout::{
    memory_layout_for_op, op_flops, plan_fused, plan_graph, plan_layout, LayoutPlan, MemoryLayout,
    ReductionPlan, Roofline,
};
