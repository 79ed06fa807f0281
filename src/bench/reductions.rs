//! Row sums in every reduction layout, timed and checked against MLX on the current device.
//!
//! One kernel, written with the DSL as a Triton user would: each program sums `ROWS` rows
//! of an `[M, N]` array, looping over the columns in blocks of `BLOCK` (a power of two, at
//! most 4096), accumulating in f32 and reducing the `[ROWS, BLOCK]` accumulator with
//! `tl::sum(.., 1)`. That reduction is forced into each layout with
//! `Launch::reduction_layout`:
//!
//! - [`BenchTarget::Metal`]: the generated MSL of each layout through MLX's
//!   `fast::metal_kernel` (not verified on Apple GPU);
//! - [`BenchTarget::Cpu`]: the CPU executor, whose builtin reductions then combine elements
//!   in the layout's order ([`crate::exec::ReduceStrategy`]); this is what runs on Linux;
//! - [`BenchTarget::Emulated`]: the generated MSL of each layout compiled with clang and run
//!   by the emulation harness ([`crate::emu`]); a correctness check of the Metal code only,
//!   its timings say nothing about GPU speed.
//!
//! Every row reports the median time over the timed repetitions (launch, then evaluation of
//! the output), the bandwidth that implies (input and output bytes over the median), and
//! the largest difference from `mlx::sum` of the input in f32.

use std::time::Instant;

use serde::Serialize;

use crate::array::Array;
use crate::codegen::ReductionLayout;
use crate::device::{Backend, HardwareInfo};
use crate::dtype::DType::{self, BF16, F16, F32, I32};
use crate::emu::{Emulator, LaneOrder};
use crate::error::{Error, Result};
use crate::mlx;
use crate::runtime::{out, Target};
use crate::testing::max_abs_diff;
use crate::tl::{self, JitKernel};

/// Most elements one benchmarked array may have (1 GiB of f32).
pub const MAX_ELEMENTS: usize = 1 << 28;

/// Elements of one program's `[ROWS, BLOCK]` tile: 16 KiB of f32, half the threadgroup
/// memory of an Apple GPU, so the staged layouts fit.
const TILE: usize = 4096;

/// Where the layouts run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BenchTarget {
    /// Metal when MLX's default device is a Metal GPU, otherwise the CPU executor.
    #[default]
    Auto,
    /// The CPU executor.
    Cpu,
    /// Generated MSL through MLX (needs a Metal device).
    Metal,
    /// Generated MSL through the emulation harness (needs clang >= 15).
    Emulated,
}

/// One (size, layout) measurement.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// Rows of the input (one sum each).
    pub rows: usize,
    /// Columns of the input (the reduced axis).
    pub cols: usize,
    /// The layout's flag name (`COALESCED`, ..).
    pub layout: String,
    /// The element type (`float16`, `float32`, `bfloat16`).
    pub dtype: String,
    /// What ran it: `cpu-executor`, `metal` or `emulated-metal`.
    pub target: String,
    /// The device name MLX reports (CPU model or GPU).
    pub device: String,
    /// Median seconds per launch (launch and evaluation).
    pub median_s: f64,
    /// Input and output bytes over the median time, in GB/s (10^9 bytes).
    pub gb_per_s: f64,
    /// Largest `|result - mlx.sum(x as f32)|` over the rows.
    pub max_abs_err: f64,
    /// The error the result may have and still be right (see [`tolerance`]).
    pub tolerance: f64,
    /// `max_abs_err <= tolerance`.
    pub ok: bool,
    /// Timed repetitions.
    pub reps: usize,
}

/// A whole run: what ran where, notes for the reader, one row per size and layout.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// `cpu-executor`, `metal` or `emulated-metal`.
    pub target: String,
    /// The device name MLX reports.
    pub device: String,
    /// The element type.
    pub dtype: String,
    /// What the numbers mean on this target (always at least one line).
    pub notes: Vec<String>,
    /// Sizes in the order given, layouts in the order given within each size.
    pub rows: Vec<BenchRow>,
}

/// The benchmark's settings; [`ReductionBench::run`] runs it.
#[derive(Clone, Debug)]
pub struct ReductionBench {
    /// `(rows, cols)` of each input.
    pub sizes: Vec<(usize, usize)>,
    /// Layouts to compare.
    pub layouts: Vec<ReductionLayout>,
    /// `F16`, `F32` or `BF16`.
    pub dtype: DType,
    /// Where to run.
    pub target: BenchTarget,
    /// Timed repetitions per row (after one untimed warm-up launch).
    pub reps: usize,
    /// SIMD-groups per program (threads = `num_warps x 32`).
    pub num_warps: usize,
    /// Seed of the random inputs.
    pub seed: u64,
}

impl Default for ReductionBench {
    /// The seeds' sizes, every layout, f32, the current device, 10 repetitions, 4 warps.
    fn default() -> Self {
        ReductionBench {
            sizes: vec![(128, 1024), (256, 1024), (1024, 4096)],
            layouts: ReductionLayout::ALL.to_vec(),
            dtype: F32,
            target: BenchTarget::Auto,
            reps: 10,
            num_warps: 4,
            seed: 0,
        }
    }
}

/// `ROWSxCOLS[,ROWSxCOLS..]`, e.g. `128x1024,256x1024`.
pub fn parse_sizes(s: &str) -> Result<Vec<(usize, usize)>> {
    let bad = |item: &str, why: &str| {
        Error::InvalidArgument(format!(
            "`{item}` {why} (expected ROWSxCOLS[,ROWSxCOLS..], e.g. 128x1024,256x1024)"
        ))
    };
    let mut sizes = Vec::new();
    for item in s.split(',').map(str::trim) {
        let (r, c) = item
            .split_once(['x', 'X'])
            .ok_or_else(|| bad(item, "is not ROWSxCOLS"))?;
        let parse = |v: &str| v.trim().parse::<usize>().ok().filter(|&v| v > 0);
        let (Some(r), Some(c)) = (parse(r), parse(c)) else {
            return Err(bad(item, "needs two positive integers"));
        };
        if r.checked_mul(c).is_none_or(|e| e > MAX_ELEMENTS) {
            return Err(bad(item, &format!("has more than {MAX_ELEMENTS} elements")));
        }
        sizes.push((r, c));
    }
    Ok(sizes)
}

/// Layout flag names, comma-separated, any case (`DEFAULT`, `ROW_MAJOR`, `COLUMN_MAJOR`,
/// `TILED`, `COALESCED`), or `all`.
pub fn parse_layouts(s: &str) -> Result<Vec<ReductionLayout>> {
    let names: Vec<&str> = ReductionLayout::ALL.iter().map(|l| l.name()).collect();
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        if item.eq_ignore_ascii_case("all") {
            out.extend(ReductionLayout::ALL);
            continue;
        }
        let l = ReductionLayout::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(item))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown reduction layout `{item}` (expected {} or all)",
                    names.join(", ")
                ))
            })?;
        out.push(l);
    }
    let mut seen = Vec::new();
    out.retain(|l| {
        let first = !seen.contains(l);
        seen.push(*l);
        first
    });
    Ok(out)
}

/// `float16`, `float32` or `bfloat16` (also `f16`, `f32`, `bf16`, `half`).
pub fn parse_dtype(s: &str) -> Result<DType> {
    match s.trim().to_ascii_lowercase().as_str() {
        "float16" | "f16" | "half" => Ok(F16),
        "float32" | "f32" | "float" => Ok(F32),
        "bfloat16" | "bf16" => Ok(BF16),
        other => Err(Error::InvalidArgument(format!(
            "unsupported dtype `{other}` (expected float16, float32 or bfloat16)"
        ))),
    }
}

/// The long name of a benchmarked dtype.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        F16 => "float16",
        BF16 => "bfloat16",
        F32 => "float32",
        _ => "other",
    }
}

/// Largest error a correct row sum may have: the result's rounding to `dtype` plus f32
/// accumulation over `cols` terms, both relative to the largest row sum of `|x|`.
pub fn tolerance(dtype: DType, cols: usize, max_abs_row_sum: f64) -> f64 {
    let out_eps = match dtype {
        F16 => 2f64.powi(-10),
        BF16 => 2f64.powi(-7),
        _ => 2f64.powi(-23),
    };
    (2.0 * out_eps + cols as f64 * 2f64.powi(-24)) * max_abs_row_sum
}

/// The benchmarked kernel for one element type (see the module docs).
pub fn row_sum_kernel(dtype: DType) -> Result<JitKernel> {
    if !matches!(dtype, F16 | F32 | BF16) {
        return Err(Error::InvalidArgument(format!(
            "bench-reductions: dtype {dtype} (expected float16, float32 or bfloat16)"
        )));
    }
    let name = format!("bench_row_sum_{}", dtype_name(dtype));
    tl::jit(&name, move |k| {
        let x = k.ptr(dtype, "x_ptr");
        let o = k.ptr(dtype, "out_ptr");
        let n_rows = k.scalar(I32, "n_rows");
        let n_cols = k.scalar(I32, "n_cols");
        let rows_per = k.constexpr("ROWS");
        let block = k.constexpr("BLOCK");
        let rows = tl::program_id(0) * rows_per + tl::arange(0, rows_per);
        let cols = tl::arange(0, block);
        let row_ok = rows.col().lt(n_rows);
        let base = x + rows.col() * n_cols;
        let acc =
            tl::range(0, n_cols, block).fold(tl::zeros([rows_per, block], F32), |start, acc| {
                let c = (start + cols).row();
                acc + tl::load(base + c)
                    .mask(row_ok & c.lt(n_cols))
                    .other(0.0)
                    .cast(F32)
            });
        tl::store(o + rows, acc.sum(1).cast(dtype)).mask(rows.lt(n_rows));
    })
}

/// `(ROWS, BLOCK)` of the tile for an `[m, n]` input.
fn tile(m: usize, n: usize) -> (usize, usize) {
    let block = n.next_power_of_two().min(TILE);
    let rows = (TILE / block).min(m.next_power_of_two()).max(1);
    (rows, block)
}

/// Runs the kernel once in `layout`; returns the (evaluated) sums.
fn launch_once(
    kernel: &JitKernel,
    x: &Array,
    (m, n): (usize, usize),
    layout: ReductionLayout,
    dtype: DType,
    num_warps: usize,
    target: Target,
) -> Result<Array> {
    let (rows, block) = tile(m, n);
    let y = kernel
        .launch()
        .grid([m.div_ceil(rows)])
        .args((x, out(&[m], dtype).fill(f64::NAN), m as i32, n as i32))
        .constexpr("ROWS", rows as i64)
        .constexpr("BLOCK", block as i64)
        .num_warps(num_warps)
        .reduction_layout(layout)
        .target(target)
        .run()?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Runtime {
            kernel: kernel.name().to_string(),
            msg: "no output".into(),
        })?;
    y.eval()?;
    Ok(y)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl ReductionBench {
    /// Checks the settings: at least one size and layout, a float dtype, reps and warps in
    /// range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.sizes.is_empty() {
            return bad("bench-reductions: no sizes given".into());
        }
        if self.layouts.is_empty() {
            return bad("bench-reductions: no layouts given".into());
        }
        if !matches!(self.dtype, F16 | F32 | BF16) {
            return bad(format!(
                "bench-reductions: dtype {} (expected float16, float32 or bfloat16)",
                self.dtype
            ));
        }
        if self.reps == 0 || self.reps > 10_000 {
            return bad(format!(
                "bench-reductions: reps = {} (expected 1..=10000)",
                self.reps
            ));
        }
        if !self.num_warps.is_power_of_two() || self.num_warps > 32 {
            return bad(format!(
                "bench-reductions: num_warps = {} (expected a power of two up to 32)",
                self.num_warps
            ));
        }
        for &(m, n) in &self.sizes {
            if m == 0 || n == 0 || m.checked_mul(n).is_none_or(|e| e > MAX_ELEMENTS) {
                return bad(format!(
                    "bench-reductions: size {m}x{n} (expected positive sizes of at most \
                     {MAX_ELEMENTS} elements)"
                ));
            }
        }
        Ok(())
    }

    /// Where this run goes and what to tell the reader about it.
    fn resolve(&self) -> Result<(Target, &'static str, Vec<String>)> {
        let metal = HardwareInfo::detect()?.backend == Backend::Metal;
        let cpu_note = |why: &str| {
            format!(
                "{why}: ran on the CPU executor; each layout is the executor's CPU reduction \
                 in that layout's combination order (src/exec/reduce_layout.rs), not a Metal \
                 kernel"
            )
        };
        Ok(match self.target {
            BenchTarget::Metal | BenchTarget::Auto if metal => (
                Target::Metal,
                "metal",
                vec!["Metal: the generated MSL of each layout through MLX's metal_kernel".into()],
            ),
            BenchTarget::Metal => {
                return Err(Error::Unsupported(
                    "bench-reductions: no Metal device here (MLX's default device is not a \
                     Metal GPU); use --target cpu or --target emulated"
                        .into(),
                ))
            }
            BenchTarget::Auto => (
                Target::Cpu,
                "cpu-executor",
                vec![cpu_note("no Metal device on this machine")],
            ),
            BenchTarget::Cpu => (Target::Cpu, "cpu-executor", vec![cpu_note("--target cpu")]),
            BenchTarget::Emulated => {
                if !Emulator::available() {
                    return Err(Error::Unsupported(
                        "bench-reductions: the emulation harness needs clang >= 15 (install \
                         clang-19 or set TRITON_METAL_EMU_CXX)"
                            .into(),
                    ));
                }
                (
                    Target::Emulated(LaneOrder::Forward),
                    "emulated-metal",
                    vec![
                        "emulated Metal: the generated MSL of each layout, compiled with clang \
                         against a Metal shim and run on the CPU with threads as fibers; a \
                         correctness check only, the timings say nothing about GPU speed"
                            .into(),
                    ],
                )
            }
        })
    }

    /// Runs every size and layout; `progress(done, total, what)` is called before each
    /// row and once at the end.
    pub fn run(&self, mut progress: impl FnMut(usize, usize, &str)) -> Result<BenchReport> {
        self.validate()?;
        let (target, target_name, notes) = self.resolve()?;
        let device = HardwareInfo::detect()?.name;
        let kernel = row_sum_kernel(self.dtype)?;
        let total = self.sizes.len() * self.layouts.len();
        let mut rows = Vec::with_capacity(total);
        for (i, &(m, n)) in self.sizes.iter().enumerate() {
            let seed = self.seed.wrapping_add(i as u64);
            let x = mlx::random::uniform(&[m, n], self.dtype, -1.0, 1.0, seed)?;
            let x32 = mlx::astype(&x, F32)?;
            let reference = mlx::sum(&x32, Some(&[1]), false)?;
            let abs_sum = mlx::max(&mlx::sum(&mlx::abs(&x32)?, Some(&[1]), false)?, None, false)?;
            Array::eval_all(&[&x, &reference, &abs_sum])?;
            let tol = tolerance(self.dtype, n, abs_sum.item::<f32>()? as f64);
            for &layout in &self.layouts {
                progress(rows.len(), total, &format!("{m}x{n} {}", layout.name()));
                let context = |e: Error| match e {
                    Error::Unsupported(msg) => Error::Unsupported(format!(
                        "{m}x{n} {} on {target_name}: {msg}",
                        layout.name()
                    )),
                    other => other,
                };
                let run = || {
                    launch_once(
                        &kernel,
                        &x,
                        (m, n),
                        layout,
                        self.dtype,
                        self.num_warps,
                        target,
                    )
                };
                // One untimed launch: specialisation, code generation, compilation.
                let y = run().map_err(context)?;
                let err = max_abs_diff(&y, &reference)?;
                let mut times = Vec::with_capacity(self.reps);
                for _ in 0..self.reps {
                    let t = Instant::now();
                    run().map_err(context)?;
                    times.push(t.elapsed().as_secs_f64());
                }
                let med = median(times);
                let bytes = ((m * n + m) * self.dtype.size_bytes()) as f64;
                rows.push(BenchRow {
                    rows: m,
                    cols: n,
                    layout: layout.name().to_string(),
                    dtype: dtype_name(self.dtype).to_string(),
                    target: target_name.to_string(),
                    device: device.clone(),
                    median_s: med,
                    gb_per_s: bytes / med / 1e9,
                    max_abs_err: err,
                    tolerance: tol,
                    ok: err <= tol,
                    reps: self.reps,
                });
            }
        }
        progress(total, total, "done");
        Ok(BenchReport {
            target: target_name.to_string(),
            device,
            dtype: dtype_name(self.dtype).to_string(),
            notes,
            rows,
        })
    }
}

impl BenchReport {
    /// The report as an aligned text table, notes first.
    pub fn table(&self) -> String {
        let mut s = String::new();
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str(&format!(
            "{:<12} {:<13} {:<9} {:<15} {:>12} {:>9} {:>11} {:>4}\n",
            "size", "layout", "dtype", "target", "median", "GB/s", "max err", "ok"
        ));
        for r in &self.rows {
            s.push_str(&format!(
                "{:<12} {:<13} {:<9} {:<15} {:>12} {:>9.2} {:>11.3e} {:>4}\n",
                format!("{}x{}", r.rows, r.cols),
                r.layout,
                r.dtype,
                r.target,
                format_time(r.median_s),
                r.gb_per_s,
                r.max_abs_err,
                if r.ok { "yes" } else { "NO" }
            ));
        }
        s.push_str(&format!("device: {}\n", self.device));
        s
    }
}

/// Seconds with a unit people read at a glance (`12.3 us`, `4.56 ms`).
pub fn format_time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_layouts_and_dtypes() {
        assert_eq!(
            parse_sizes("128x1024, 3X5").unwrap(),
            vec![(128, 1024), (3, 5)]
        );
        for bad in ["", "128", "0x4", "4x", "ax4", "65536x65536"] {
            let e = parse_sizes(bad).unwrap_err().to_string();
            assert!(e.contains("ROWSxCOLS"), "{bad}: {e}");
        }
        assert_eq!(
            parse_layouts("coalesced,ROW_MAJOR,Coalesced").unwrap(),
            vec![ReductionLayout::Coalesced, ReductionLayout::RowMajor]
        );
        assert_eq!(parse_layouts("all").unwrap(), ReductionLayout::ALL.to_vec());
        let e = parse_layouts("DEFAULT,DIAGONAL").unwrap_err().to_string();
        assert!(
            e.contains("`DIAGONAL`") && e.contains("COLUMN_MAJOR"),
            "{e}"
        );
        assert_eq!(parse_dtype("bfloat16").unwrap(), BF16);
        assert_eq!(parse_dtype("F16").unwrap(), F16);
        assert!(parse_dtype("int8")
            .unwrap_err()
            .to_string()
            .contains("float32"));
    }

    #[test]
    fn tiles_fit_threadgroup_memory() {
        for (m, n) in [(1, 1), (3, 5), (128, 1024), (7, 4097), (1000, 100_000)] {
            let (r, b) = tile(m, n);
            assert!(r * b <= TILE && r.is_power_of_two() && b.is_power_of_two());
            assert!(b >= n.min(TILE) && r <= m.next_power_of_two());
        }
    }

    #[test]
    fn every_layout_sums_like_mlx_on_the_cpu_executor() -> Result<()> {
        // Ragged sizes: partial tiles in both directions, a column loop of several blocks.
        for dtype in [F32, F16] {
            let bench = ReductionBench {
                sizes: vec![(5, 37), (9, 4099)],
                dtype,
                target: BenchTarget::Cpu,
                reps: 1,
                num_warps: 2,
                ..ReductionBench::default()
            };
            let report = bench.run(|_, _, _| {})?;
            assert_eq!(report.rows.len(), 2 * ReductionLayout::ALL.len());
            assert!(report.notes[0].contains("CPU executor"));
            for r in &report.rows {
                assert!(r.ok, "{r:?}");
                assert!(r.median_s > 0.0 && r.gb_per_s.is_finite(), "{r:?}");
            }
        }
        Ok(())
    }

    #[test]
    fn every_layout_of_the_generated_msl_sums_like_mlx_emulated() -> Result<()> {
        if !Emulator::should_run("bench every_layout_of_the_generated_msl")? {
            return Ok(());
        }
        let bench = ReductionBench {
            sizes: vec![(3, 70)],
            dtype: F16,
            target: BenchTarget::Emulated,
            reps: 1,
            num_warps: 1,
            ..ReductionBench::default()
        };
        let report = bench.run(|_, _, _| {})?;
        assert_eq!(report.target, "emulated-metal");
        for r in &report.rows {
            assert!(r.ok, "{r:?}");
        }
        Ok(())
    }
}
