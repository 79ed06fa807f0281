//! Benchmarks behind the `triton-metal` tool: the reduction layouts of the code generator
//! timed and checked on the current device ([`reductions`]), and their PNG plot (`plot`,
//! feature `cli`).

#[cfg(feature = "cli")]
pub mod plot;
pub mod reductions;

pub use reductions::{BenchReport, BenchRow, BenchTarget, ReductionBench};
