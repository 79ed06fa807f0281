//! The kernel IR: typed SSA over block tensors with static shapes.
//!
//! A [`Kernel`] holds arenas of values, ops and regions (STYLE rules 1-2): values, ops and
//! regions are `u32` newtypes ([`Value`], [`OpId`], [`RegionId`]); an op's data
//! ([`OpData`]) is kept apart from program order (each [`RegionData::ops`]). There is one
//! [`Op`] enum, grouped by family, with its properties in one table ([`Op::props`]).
//! Loops and branches own regions whose block arguments carry loop values.
//!
//! Kernels come from the DSL ([`crate::tl`]), which verifies them ([`verify`]) before
//! handing them out. Passes are functions over a `Kernel`; [`Kernel::remove_dead_ops`],
//! [`Kernel::compact`] and [`Kernel::use_counts`] help them.
//!
//! ## Text form
//!
//! [`Kernel::ir`] prints, [`Kernel::parse_ir`] parses (round trip), [`filecheck`] matches
//! `// check:` lines for IR file tests (`tests/filetests/*.ir`):
//!
//! ```text
//! kernel NAME(%0: ptr<f32> x, %1: i32 n) [BLOCK=4] {     params; constexprs of this specialisation
//!   hint multiple_of %5, [16]                              value hints
//!   %2 = program_id 0 : i32                                results = op operands, attrs : result types
//!   %6 = load %5, mask %4, other %3 : f32[4]
//!   store %5, %6, mask %4                                  no results
//!   %9 = for %7, %1, %8 iter(%6) : f32[4] body {           regions: ROLE {, `^rN(args):`, ops, yield
//!   ^r1(%10: i32, %11: f32[4]):
//!     yield %11
//!   }
//!   %12, %13 = if %c : i32, i32 then { .. } else { .. }    (regions on their own lines)
//! }
//! ```
//! Types: `f32`, `bool`, `ptr<f16>`, `i32[64,32]`, `ptr<f32>[64]`. Lines starting with `//`
//! are comments. Source locations are not printed.

mod kernel;
mod op;
mod types;

pub use kernel::{
    Hint, Kernel, OpData, OpId, Param, ParamKind, RegionData, RegionId, Value, ValueData, ValueDef,
    ValueRange,
};
pub use op::{
    int_to_ptr_unsupported, AtomicOp, BinaryOp, CmpPred, MemScope, MemSem, Op, OpProps, ReduceKind,
    ScanKind, UnaryOp,
};
pub use types::{Const, Type};
mod edit;
mod filecheck;
mod parse;
mod text;
mod verify;

pub use filecheck::filecheck;
pub use verify::verify;

/// How deep control-flow regions may nest: the bodies of `for`, `while` and `if`, and the
/// combine regions of `reduce`/`associative_scan`, each add a level. The DSL, the IR parser
/// and the verifier reject a deeper kernel with an error naming the op and its source line,
/// so every executor and printer works within bounded recursion and the generated Metal,
/// CUDA and C++ stays far below the bracket-nesting limit of their compilers (256 in clang
/// and in Apple's Metal compiler). Python-written Triton kernels cannot come close: CPython
/// allows 20 statically nested loops.
pub const MAX_NESTING: usize = 64;
