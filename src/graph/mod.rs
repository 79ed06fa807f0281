//! Op graphs: the seed tools' JSON format, validation, fusion, lowering to DSL kernels and
//! a runner.
//!
//! ```text
//! JSON --GraphSpec--> Graph (validated) --fuse()--> FusedGraph + FusionSummary
//!                       |                              |
//!                       |                              +--> GraphRunner::plan_fused: the
//!                       |                              |    kernel and launches per group
//!                       +--- GraphRunner::run ---------+--> GraphRunner::run_fused
//!                            (MLX, op by op)                (DslKernels, MLX fallback)
//!                                                           --> outputs, compared
//! ```
//!
//! ```
//! use triton_metal::graph::{fuse, random_inputs, Graph, GraphRunner, Pattern};
//!
//! let g = Graph::from_json(r#"{
//!   "inputs": [{"id": "a", "shape": [4, 8]}, {"id": "b", "shape": [4, 8]}, {"id": "c", "shape": [8]}],
//!   "ops": [
//!     {"type": "tt.mul", "id": "m", "inputs": ["a", "b"]},
//!     {"type": "tt.add", "id": "y", "inputs": ["m", "c"]}
//!   ]
//! }"#)?;
//! let (fused, summary) = fuse(&g);
//! assert_eq!(summary.groups[0].pattern, Pattern::Fma);
//! assert_eq!(summary.bytes_saved, 256); // the product is never written and read back
//!
//! let feeds = random_inputs(&g.inputs, 0)?;
//! let cmp = GraphRunner::new().compare(&g, &fused, &feeds, 1e-5, 1e-6)?;
//! assert!(cmp.all_close());
//! # Ok::<(), triton_metal::Error>(())
//! ```

mod activation;
pub mod dsl;
pub mod dsl_build;
pub mod fusion;
pub mod layout;
pub mod lower;
pub mod ops;
pub mod pattern;
pub mod runner;
pub mod samples;
pub mod spec;

pub use fusion::{
    fuse, Activation, FusedGraph, FusedGroup, FusionEntry, FusionSummary, Node, Operand, Pattern,
    PatternParams,
};
pub use layout::{
    memory_layout_for_op, op_flops, plan_fused, plan_graph, plan_layout, LayoutPlan, ReductionPlan,
};
pub use lower::{KernelLaunch, NodePlan, PlannedLaunch};
pub use ops::{OpArgs, OpCategory, OpKind, ReduceOp};
pub use runner::{
    random_inputs, run_op, Comparison, CompositeKernel, FusedKernel, GraphRunner, KernelChoice,
    KernelProvider, MlxKernels, OutputDiff, PatternKernel,
};
pub use spec::{Graph, GraphInput, GraphSpec, InputSpec, OpNode, OpSpec, TensorType};
