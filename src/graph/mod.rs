//! Op graphs: the seed tools' JSON format, validation, fusion and an MLX runner.
//!
//! ```text
//! JSON --GraphSpec--> Graph (validated) --fuse()--> FusedGraph + FusionSummary
//!                       |                              |
//!                       +--- GraphRunner (MLX) --------+--> outputs, compared
//! ```

pub mod fusion;
pub mod ops;
pub mod pattern;
pub mod runner;
pub mod samples;
pub mod spec;

pub use fusion::{
    fuse, Activation, FusedGraph, FusedGroup, FusionEntry, FusionSummary, Node, Operand, Pattern,
    PatternParams,
};
pub use ops::{OpArgs, OpCategory, OpKind, ReduceOp};
pub use runner::{
    random_inputs, run_op, Comparison, CompositeKernel, FusedKernel, GraphRunner, KernelChoice,
    KernelProvider, MlxKernels, OutputDiff, PatternKernel,
};
pub use spec::{Graph, GraphInput, GraphSpec, InputSpec, OpNode, OpSpec, TensorType};
