//! The cross-target differential fuzzer on a fixed budget of seeds: random kernels run on
//! the interpreter, the compiled CPU executor, emulated Metal in both lane orders and (with
//! `TRITON_METAL_NVRTC_DIR`) NVRTC, and must agree. A disagreement fails with the shrunk
//! kernel printed as a Rust test (paste it into tests/fuzz_regressions.rs). Longer runs:
//! `cargo run --release --example fuzz -- --seeds 0..100000 --time 1h` (FUZZING.md).

use triton_metal::emu::Emulator;
use triton_metal::fuzz::{self, Config};

/// Seeds run in CI (about a minute on two cores).
const SEEDS: std::ops::Range<u64> = 0..12;

#[test]
fn targets_agree_on_random_kernels() {
    if !Emulator::should_run("fuzz").unwrap() {
        return;
    }
    // Every target is named explicitly: a run with TRITON_METAL_TARGET set would repeat
    // this one exactly.
    if std::env::var_os("TRITON_METAL_TARGET").is_some() {
        eprintln!("skipping fuzz: TRITON_METAL_TARGET is set and the fuzzer names its targets");
        return;
    }
    let cfg = Config {
        shrink_budget: std::time::Duration::from_secs(120),
        ..Config::default()
    };
    let stats = fuzz::run(SEEDS, None, &cfg, |_, _| {});
    assert!(stats.programs >= 30, "only {} programs", stats.programs);
    for (t, n) in &stats.ran {
        assert!(*n > 0, "{t:?} ran nothing");
    }
    if !stats.reports.is_empty() {
        let text: Vec<String> = (stats.reports.iter())
            .map(|r| format!("// seed {}: {}\n{}", r.seed, r.finding, r.repro))
            .collect();
        panic!(
            "{} of {} batches disagree:\n{}",
            stats.reports.len(),
            stats.batches,
            text.join("\n")
        );
    }
}
