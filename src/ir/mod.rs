//! The kernel IR: typed SSA over block tensors with static shapes.
//!
//! A [`Kernel`] holds arenas of values, ops and regions (STYLE rules 1-2): values, ops and
//! regions are `u32` newtypes ([`Value`], [`OpId`], [`RegionId`]); an op's data
//! ([`OpData`]) is kept apart from program order (each [`RegionData::ops`]). There is one
//! [`Op`] enum, grouped by family, with its properties in one table ([`Op::props`]).
//! Loops and branches own regions whose block arguments carry loop values.
//!
//! Kernels come from the DSL (`crate::tl`), which verifies them before
//! handing them out; `Kernel::ir` prints the text form.

mod kernel;
mod op;
mod types;

pub use kernel::{
    Hint, Kernel, OpData, OpId, Param, ParamKind, RegionData, RegionId, Value, ValueData, ValueDef,
    ValueRange,
};
pub use op::{AtomicOp, BinaryOp, CmpPred, Op, OpProps, ReduceKind, ScanKind, UnaryOp};
pub use types::{Const, Type};
mod edit;
mod filecheck;
mod parse;
mod text;
mod verify;

pub use filecheck::filecheck;
pub use verify::verify;
