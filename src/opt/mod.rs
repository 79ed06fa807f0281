//! The optimizer: hardware profiles and the layout decisions derived from them.
//!
//! Kernel-IR passes (constant folding, CSE, FMA contraction, barrier elimination) join
//! this module once the IR lands; what is here needs only op descriptions and a profile.

pub mod hardware;
pub mod layout;

pub use hardware::{Chip, HardwareProfile, TileShape, HW_ENV_VAR};
pub use layout::{
    memory_layout_for_op, op_flops, plan_fused, plan_graph, plan_layout, LayoutPlan, MemoryLayout,
    ReductionPlan, Roofline,
};
