//! Cross-target differential fuzzing: random well-typed kernels written with the DSL, run
//! on the interpreter, the compiled CPU executor and the emulated Metal path in both lane
//! orders (and, with `TRITON_METAL_NVRTC_DIR` set, their CUDA text compiled by NVRTC), all
//! compared with the interpreter.
//!
//! A kernel is a [`Batch`] of independent programs (elementwise chains over every dtype,
//! casts, comparisons, `where`, ragged masks, reductions and scans on every axis, `dot`,
//! loops with runtime bounds and steps, `if`, atomics) over inputs full of edge values;
//! one batch is one clang compile per target. Comparisons are bit for bit (any NaN equals
//! any NaN) except the results of transcendental functions ([`Tol`]); float sums, scans,
//! products and dots only ever see values whose results are exact in any order, so they are
//! compared bit for bit too. A disagreement is shrunk ([`shrink`]) and printed as a `#[test]`
//! written with the DSL ([`rust_test`]). Known open bugs are excluded by name
//! ([`Known`]). FUZZING.md tells how to run it and what it found.

mod ast;
mod case;
mod gen;
mod print;
mod shrink;
mod values;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use ast::{Batch, Lit, Node, Prog, Tol};
pub use case::{Case, Finding, FuzzTarget, Outcome};
pub use gen::gen_batch;
pub use print::rust_test;
pub use shrink::{compact, shrink};
pub use values::{float_bits, float_of};

use crate::dtype::DType;
use crate::error::Result;
use crate::tl;

/// A small deterministic generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.bits() % n.max(1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.bits() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// A random element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

/// A class of bugs the generator can avoid (or the comparison forgive) so that every other
/// disagreement stands out. [`Known::OPEN`] lists the classes open on this revision; the
/// others are fixed on main and generated like everything else (a [`Config`] that lists one
/// in `known_open` still avoids it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Known {
    /// int32 `argmax`/`argmin` stage values and indices through one scratch array on Metal
    /// and CUDA (issue 21: "int32 argmax/argmin give wrong indices"): no i32 arg-reductions.
    ArgI32Scratch,
    /// Float to integer casts of NaN, ±inf and out-of-range values differ between targets
    /// (issue 21: "Float → integer conversions"): no float-to-int casts.
    FloatToIntCast,
    /// `maximum(-0.0, 0.0)` and f16 `minimum` of zeros differ (issue 21: "Signed zeros"):
    /// -0 and +0 compare equal.
    SignedZero,
    /// Negative runtime loop steps are rejected (issue 21: "Loops"): steps are 1..=3.
    NonPositiveStep,
    /// Reverse scans pass the combine's operands in the wrong order (issue 21: "Reverse
    /// scans"): no reverse scans with a non-commutative combine.
    ReverseScanOrder,
}

impl Known {
    /// The classes open on this revision.
    pub const OPEN: [Known; 0] = [];
}

/// What to generate and where to run it.
#[derive(Clone, Debug)]
pub struct Config {
    /// Known bug classes to avoid.
    pub known_open: Vec<Known>,
    /// Dtypes programs use.
    pub dtypes: Vec<DType>,
    /// Most programs per batch.
    pub max_progs: usize,
    /// Most ops per program.
    pub max_nodes: usize,
    /// Targets compared with the interpreter.
    pub targets: Vec<FuzzTarget>,
    /// Time to spend shrinking one disagreement (zero: report it unshrunk).
    pub shrink_budget: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            known_open: Known::OPEN.to_vec(),
            dtypes: DType::ALL.to_vec(),
            max_progs: 8,
            max_nodes: 10,
            targets: FuzzTarget::ALL.to_vec(),
            shrink_budget: Duration::from_secs(300),
        }
    }
}

/// The [`Case`] that runs a batch: its kernel, launch and tolerances.
pub fn case_of(b: &Batch, cfg: &Config) -> Result<Case> {
    let shared = Arc::new(b.clone());
    let kernel = tl::jit(&format!("fuzz_{}", b.seed), move |k| ast::lower(&shared, k))?;
    let mut c = Case::new(kernel, b.grid).num_warps(b.num_warps);
    if let Some(l) = b.layout {
        c = c.layout(l);
    }
    for x in &b.inputs {
        c = c.input_bits(x.dtype, x.bits.clone());
    }
    for o in &b.outputs {
        c = c.output(o.dtype, o.len, o.fill);
    }
    for &s in &b.scalars {
        c = c.scalar(s);
    }
    for p in &b.progs {
        for s in &p.sinks {
            let t = gen::sink_tol(&p.nodes[s.node]);
            if t != Tol::Exact {
                let len = b.outputs[s.out].len;
                c = c.tolerance(s.out, s.base..s.base + len, t);
            }
        }
    }
    if cfg.known_open.contains(&Known::SignedZero) {
        c = c.zero_sign_free();
    }
    Ok(c)
}

/// A disagreement found by [`run`]: the seed, what differed, and the shrunk kernel as a
/// Rust test.
#[derive(Clone, Debug)]
pub struct Report {
    /// Seed of the batch.
    pub seed: u64,
    /// The first disagreement.
    pub finding: Finding,
    /// The shrunk batch as a `#[test]` (the unshrunk one when shrinking was off).
    pub repro: String,
}

/// Totals of a run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Batches (kernels compiled per target).
    pub batches: usize,
    /// Programs generated (each an independent kernel body).
    pub programs: usize,
    /// Programs run, per target.
    pub ran: BTreeMap<FuzzTarget, usize>,
    /// `Unsupported` answers per target and message.
    pub unsupported: BTreeMap<String, usize>,
    /// Disagreements.
    pub reports: Vec<Report>,
    /// Time spent per target (compiles included), shrinking excluded.
    pub time: BTreeMap<FuzzTarget, Duration>,
}

/// Runs the batch of one seed; a disagreement is shrunk and added to `stats.reports`.
pub fn run_seed(seed: u64, cfg: &Config, stats: &mut Stats) {
    let b = gen_batch(seed, cfg);
    if b.progs.is_empty() {
        return;
    }
    stats.batches += 1;
    stats.programs += b.progs.len();
    let case = match case_of(&b, cfg) {
        Ok(c) => c,
        Err(e) => {
            let finding = Finding::Error {
                target: FuzzTarget::Cpu,
                msg: format!("the generated kernel does not build: {e}"),
            };
            stats.reports.push(Report {
                seed,
                finding,
                repro: rust_test(&b, cfg, &format!("fuzz_seed_{seed}"), ""),
            });
            return;
        }
    };
    let o = case.run(&cfg.targets);
    for t in &o.ran {
        *stats.ran.entry(*t).or_default() += b.progs.len();
    }
    for (t, d) in &o.times {
        *stats.time.entry(*t).or_default() += *d;
    }
    for (t, m) in &o.unsupported {
        let first: String = m.chars().take(120).collect();
        *stats
            .unsupported
            .entry(format!("{t:?}: {first}"))
            .or_default() += 1;
    }
    let Some(f) = o.findings.first().cloned() else {
        return;
    };
    let (small, tries) = if cfg.shrink_budget.is_zero() {
        (b.clone(), 0)
    } else {
        shrink(&b, cfg, &f, cfg.shrink_budget)
    };
    // The shrunk kernel's own first disagreement of the same kind, for the note.
    let shown = case_of(&small, cfg)
        .ok()
        .and_then(|c| {
            c.run(&[f.target()])
                .findings
                .into_iter()
                .find(|g| g.same_kind(&f))
        })
        .unwrap_or_else(|| f.clone());
    let note = format!(
        "Fuzz seed {seed} (shrunk in {tries} runs): {shown}.\nIn the original: {}",
        o.findings
            .iter()
            .take(3)
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    );
    stats.reports.push(Report {
        seed,
        finding: shown,
        repro: rust_test(&small, cfg, &format!("fuzz_seed_{seed}"), &note),
    });
}

/// Runs seeds `seeds` in order until they are done or `time` has passed (`None`: no
/// limit); `progress` sees the stats after each batch.
pub fn run(
    seeds: std::ops::Range<u64>,
    time: Option<Duration>,
    cfg: &Config,
    mut progress: impl FnMut(u64, &Stats),
) -> Stats {
    let start = Instant::now();
    let mut stats = Stats::default();
    for seed in seeds {
        if time.is_some_and(|t| start.elapsed() > t) {
            break;
        }
        run_seed(seed, cfg, &mut stats);
        progress(seed, &stats);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_mostly_builds() {
        let cfg = Config::default();
        let mut progs = 0;
        for seed in 0..20 {
            let a = gen_batch(seed, &cfg);
            assert_eq!(a, gen_batch(seed, &cfg), "seed {seed}");
            assert!(shrink::node_types(&a).is_some(), "seed {seed}: {a:?}");
            progs += a.progs.len();
        }
        assert!(progs >= 40, "only {progs} programs in 20 batches");
    }
}
