//! The cross-target differential fuzzer, for as long as wanted:
//!
//! ```sh
//! cargo run --release --example fuzz -- --seeds 0..1000 --time 10m
//! ```
//!
//! Options: `--seeds A..B` (default `0..1000000`), `--time 30s|10m|2h` (default: until the
//! seeds are done), `--progs N` (most programs per batch, default 8), `--no-shrink`,
//! `--shrink-time 5m`, `--hang 15m` (a batch running longer ends the run, exit code 3), `--targets cpu-compiled,emulated,emulated-reverse,nvrtc`,
//! `--print SEED` (print that seed's kernel as a Rust test and stop), `--no-known` (do not avoid the known open bugs), `--allow NAME` (do not avoid that one
//! class, e.g. `FloatToIntCast`), `--out FILE` (append reports there).
//! Prints a progress line every 25 batches, each disagreement as a Rust test, and totals.
//! Exit code 1 when a disagreement was found.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use triton_metal::fuzz::{self, Config, FuzzTarget};

fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| format!("bad duration `{s}`"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("bad duration unit in `{s}` (s, m, h)")),
    };
    Ok(Duration::from_secs(secs))
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("fuzz: {e}");
        std::process::exit(2);
    }
}

fn real_main() -> Result<(), String> {
    let mut seeds = 0..1_000_000u64;
    let mut time = None;
    let mut cfg = Config::default();
    let mut out: Option<String> = None;
    let mut hang = Duration::from_secs(900);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--seeds" => {
                let v = val()?;
                let (lo, hi) = v.split_once("..").ok_or("--seeds wants A..B")?;
                seeds = lo.parse().map_err(|_| "bad seed")?..hi.parse().map_err(|_| "bad seed")?;
            }
            "--time" => time = Some(duration(&val()?)?),
            "--hang" => hang = duration(&val()?)?,
            "--progs" => cfg.max_progs = val()?.parse().map_err(|_| "bad --progs")?,
            "--no-shrink" => cfg.shrink_budget = Duration::ZERO,
            "--shrink-time" => cfg.shrink_budget = duration(&val()?)?,
            "--no-known" => cfg.known_open.clear(),
            "--allow" => {
                let name = val()?;
                let before = cfg.known_open.len();
                cfg.known_open.retain(|k| format!("{k:?}") != name);
                if cfg.known_open.len() == before {
                    return Err(format!("`{name}` is not an open known bug class"));
                }
            }
            "--out" => out = Some(val()?),
            "--print" => {
                let seed: u64 = val()?.parse().map_err(|_| "bad --print seed")?;
                let b = fuzz::compact(&fuzz::gen_batch(seed, &cfg));
                println!(
                    "{}",
                    fuzz::rust_test(&b, &cfg, &format!("fuzz_seed_{seed}"), "")
                );
                return Ok(());
            }
            "--targets" => {
                let mut t = vec![FuzzTarget::Cpu];
                for name in val()?.split(',') {
                    t.push(match name {
                        "cpu-compiled" => FuzzTarget::CpuCompiled,
                        "emulated" => FuzzTarget::EmuForward,
                        "emulated-reverse" => FuzzTarget::EmuReverse,
                        "nvrtc" => FuzzTarget::Nvrtc,
                        other => return Err(format!("unknown target `{other}`")),
                    });
                }
                cfg.targets = t;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let start = Instant::now();
    // A batch that runs longer than `hang` (a target looping forever) ends the process
    // with its seed, so a run can go on from the next one.
    let current = Arc::new((AtomicU64::new(seeds.start), AtomicU64::new(0)));
    {
        let current = current.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            let since = current.1.load(Ordering::SeqCst);
            let now = start.elapsed().as_secs();
            if now.saturating_sub(since) > hang.as_secs() {
                println!(
                    "seed {} ran for more than {}s: a target hangs; rerun from the next seed",
                    current.0.load(Ordering::SeqCst),
                    hang.as_secs()
                );
                std::process::exit(3);
            }
        });
    }
    println!(
        "fuzz: seeds {}..{}, known open bugs avoided: {:?}",
        seeds.start, seeds.end, cfg.known_open
    );
    let mut reported = 0;
    let stats = fuzz::run(seeds, time, &cfg, |seed, s| {
        current.0.store(seed + 1, Ordering::SeqCst);
        current.1.store(start.elapsed().as_secs(), Ordering::SeqCst);
        for r in &s.reports[reported..] {
            let text = format!("// seed {}: {}\n{}\n", r.seed, r.finding, r.repro);
            println!("{text}");
            if let Some(path) = &out {
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                {
                    let _ = f.write_all(text.as_bytes());
                }
            }
        }
        reported = s.reports.len();
        if s.batches % 25 == 0 {
            println!(
                "[{:>6.0}s] seed {seed}: {} batches, {} programs, ran {:?}, {} disagreements",
                start.elapsed().as_secs_f64(),
                s.batches,
                s.programs,
                s.ran,
                s.reports.len()
            );
        }
    });
    println!(
        "done in {:.0}s: {} batches, {} programs; programs run per target: {:?}; {} disagreements",
        start.elapsed().as_secs_f64(),
        stats.batches,
        stats.programs,
        stats.ran,
        stats.reports.len()
    );
    let secs: Vec<String> = (stats.time.iter())
        .map(|(t, d)| format!("{t:?} {:.0}s", d.as_secs_f64()))
        .collect();
    println!("time per target (compiles included): {}", secs.join(", "));
    for (m, n) in &stats.unsupported {
        println!("unsupported x{n}: {m}");
    }
    if !stats.reports.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
