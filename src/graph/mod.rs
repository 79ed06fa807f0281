//! Op graphs: the seed tools' JSON format, validation, fusion and an MLX runner.
//!
//! ```text
//! JSON --GraphSpec--> Graph (validated) --fuse()--> FusedGraph + FusionSummary
//!                       |                              |
//!                       +--- GraphRunner (MLX) --------+--> outputs, compared
//! ```

pub mod ops;
pub mod spec;

pub use ops::{OpArgs, OpCategory, OpKind, ReduceOp};
pub use spec::{Graph, GraphInput, GraphSpec, InputSpec, OpNode, OpSpec, TensorType};
