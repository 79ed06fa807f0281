//! `triton-metal`: the analysis tools of the seed backend, in one binary.
//!
//! Tables for people, `--format json` for programs (`profiles`, `check-system` and
//! `bench-reductions` also take `--json`; in `analyze`, `layouts` and `fuse`, `--json FILE`
//! is the seed tools' input flag). Exit codes: 0 success, 1 a check failed (a missing
//! requirement, fused != unfused, a benchmarked result off MLX's), 2 bad input (one line on
//! stderr).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use triton_metal::bench::{plot, reductions, BenchTarget, ReductionBench};
use triton_metal::codegen::ReductionLayout;
use triton_metal::device::{self, Backend, HardwareInfo};
use triton_metal::graph::dsl::DslKernels;
use triton_metal::graph::lower::{fused_types, KernelLaunch, NodePlan};
use triton_metal::graph::{
    fuse, random_inputs, samples, FusionSummary, Graph, GraphRunner, GraphSpec, Node, OpSpec,
    TensorType,
};
use triton_metal::opt::plan::{Decision, KernelPlan};
use triton_metal::opt::{HardwareProfile, MemoryLayout, HW_ENV_VAR};
use triton_metal::runtime::{LaneOrder, Target};
use triton_metal::{codegen, mlx, Array, DType, Error};

#[derive(Parser)]
#[command(
    name = "triton-metal",
    version,
    propagate_version = true,
    about = "Memory-layout analysis, fusion and system checks for triton-metal kernels"
)]
struct Cli {
    /// Plan for this chip instead of the detected one (m1 .. m4-max, apple, sm80, sm90,
    /// cpu); overrides TRITON_METAL_HW.
    #[arg(long, global = true, value_name = "NAME")]
    hw: Option<String>,
    /// Output format on stdout.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    format: Format,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Which ops get the COALESCED layout (the seeds' simple analyzer).
    Analyze(OpsInput),
    /// Layout and launch parameters per op (the seeds' memory-layout analyzer).
    Layouts(OpsInput),
    /// Writes a sample op file (seed format), or a sample graph for `fuse`.
    SampleOps {
        /// More ops: a sweep of reduction sizes and axes, matmuls, conv, norms.
        #[arg(long)]
        large: bool,
        /// A transformer-block graph that exercises the fusion patterns instead.
        #[arg(long, conflicts_with = "large")]
        graph: bool,
        /// Write to FILE instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Runs the fusion optimizer on a JSON graph and prints what it fused.
    Fuse {
        /// The op graph.
        #[arg(long, value_name = "FILE")]
        json: PathBuf,
        /// Also run the fused graph with this crate's DSL kernels (MLX for groups that have
        /// none) and the unfused graph op by op with MLX on random inputs, and compare.
        #[arg(long)]
        verify: bool,
        /// Where --verify runs the DSL kernels: auto (TRITON_METAL_TARGET, else Metal on a
        /// Mac, else the CPU executor), cpu (interpreter), cpu-compiled, metal, emulated
        /// or emulated-reverse (the generated MSL through the emulation harness).
        #[arg(long, value_enum, default_value_t = FuseTarget::Auto, requires = "verify")]
        target: FuseTarget,
        /// Relative tolerance of --verify (default: 1e-3 for f32 outputs, 1e-2 for f16,
        /// 5e-2 for bf16).
        #[arg(long, requires = "verify")]
        rtol: Option<f64>,
        /// Absolute tolerance of --verify (default: 1e-4 for f32, 1e-3 for f16, 1e-2 for
        /// bf16).
        #[arg(long, requires = "verify")]
        atol: Option<f64>,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write the fused graph and summary as JSON to FILE.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Show the ops of every group.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Lists the hardware profiles planning can target.
    Profiles {
        /// JSON on stdout (same as --format json).
        #[arg(long)]
        json: bool,
    },
    /// Times a row-sum kernel in each reduction layout on this device and checks every
    /// result against MLX (Metal on a Mac; elsewhere the CPU executor, which says so).
    BenchReductions {
        /// Input sizes as ROWSxCOLS, comma-separated (the sum runs over COLS).
        #[arg(
            long,
            value_name = "SIZES",
            default_value = "128x1024,256x1024,1024x4096"
        )]
        sizes: String,
        /// Layouts, comma-separated: DEFAULT, ROW_MAJOR, COLUMN_MAJOR, TILED, COALESCED, or
        /// all.
        #[arg(long, value_name = "LAYOUTS", default_value = "all")]
        layouts: String,
        /// Element type: float16, float32 or bfloat16.
        #[arg(long, value_name = "DTYPE", default_value = "float32")]
        dtype: String,
        /// Where to run: auto (Metal if MLX has a Metal device, else the CPU executor),
        /// cpu, metal, or emulated (the generated MSL through the emulation harness: a
        /// correctness check; its timings mean nothing).
        #[arg(long, value_enum, default_value_t = BenchTargetArg::Auto)]
        target: BenchTargetArg,
        /// Timed repetitions per size and layout (after one warm-up launch).
        #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
        reps: i64,
        /// SIMD-groups per program (threads = num_warps x 32).
        #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
        num_warps: i64,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also draw GB/s per size and layout as a PNG to FILE.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// JSON on stdout (same as --format json).
        #[arg(long)]
        json: bool,
    },
    /// OS, MLX, device, chip generation, Metal/CUDA and emulation-harness availability.
    CheckSystem {
        /// Treat a missing emulation harness (clang++) as a failure, as CI does
        /// (also TRITON_METAL_REQUIRE_EMU=1).
        #[arg(long)]
        require_emu: bool,
        /// JSON on stdout (same as --format json).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FuseTarget {
    Auto,
    Cpu,
    CpuCompiled,
    Metal,
    Emulated,
    EmulatedReverse,
}

impl FuseTarget {
    fn target(self) -> Target {
        match self {
            FuseTarget::Auto => Target::Auto,
            FuseTarget::Cpu => Target::Cpu,
            FuseTarget::CpuCompiled => Target::CpuCompiled,
            FuseTarget::Metal => Target::Metal,
            FuseTarget::Emulated => Target::Emulated(LaneOrder::Forward),
            FuseTarget::EmulatedReverse => Target::Emulated(LaneOrder::Reverse),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BenchTargetArg {
    Auto,
    Cpu,
    Metal,
    Emulated,
}

#[derive(clap::Args)]
struct OpsInput {
    /// Op file or graph in the seed JSON format.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A kernel's IR text (as `TRITON_METAL_CACHE_DIR` or `TRITON_METAL_DEBUG` dumps it):
    /// print the layout plan the compiler uses for it on --hw instead.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "operation"])]
    ir: Option<PathBuf>,
    /// SIMD-groups per program for --ir.
    #[arg(long, default_value_t = 4, requires = "ir")]
    num_warps: u32,
    /// One op as TYPE:[d0,d1,...][:AXIS], e.g. "tt.reduce:[1024,512]:1" (repeatable).
    #[arg(long, value_name = "SPEC")]
    operation: Vec<String>,
    /// Write the results as JSON to FILE.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// More detail per op.
    #[arg(long, short)]
    verbose: bool,
    /// Fuse the graph first and report each node of the fused graph: fused groups with
    /// the kernels they launch, other ops as the MLX ops they stay.
    #[arg(long, conflicts_with = "ir")]
    fused: bool,
}

/// A failure: bad input exits 2, a failed check 1; a closed stdout (the reader went
/// away, as `| head` does) ends the program quietly.
enum Fail {
    Input(String),
    Check(String),
    Quiet,
}

/// Writes `text` to stdout and flushes it. A closed pipe is [`Fail::Quiet`]; any other write
/// error (a full disk, `> /dev/full`) is a one-line error.
fn emit(text: &str) -> Res<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())
        .and_then(|()| o.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => Fail::Quiet,
            _ => Fail::Check(format!("cannot write to standard output: {e}")),
        })
}

/// `print!` that reports write errors instead of panicking (see [`emit`]).
macro_rules! out {
    ($($t:tt)*) => { emit(&format!($($t)*))? };
}

/// `println!` that reports write errors instead of panicking (see [`emit`]).
macro_rules! outln {
    ($($t:tt)*) => { emit(&format!("{}\n", format_args!($($t)*)))? };
}

/// `eprintln!` that ignores a closed or failing stderr instead of panicking.
macro_rules! note {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        match e {
            Error::InvalidArgument(m) => Fail::Input(m),
            other => Fail::Check(other.to_string()),
        }
    }
}

type Res<T> = Result<T, Fail>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            // One line: clap's first, without the usage block.
            let text = e.render().to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            note!("{line} (see --help)");
            return ExitCode::from(2);
        }
    };
    match run(&cli) {
        Ok(code) => code,
        Err(Fail::Input(m)) => {
            note!("error: {}", one_line(&m));
            ExitCode::from(2)
        }
        Err(Fail::Check(m)) => {
            note!("error: {}", one_line(&m));
            ExitCode::from(1)
        }
        Err(Fail::Quiet) => ExitCode::SUCCESS,
    }
}

fn one_line(s: &str) -> String {
    s.lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

fn run(cli: &Cli) -> Res<ExitCode> {
    match &cli.cmd {
        Cmd::Analyze(i) => analyze(cli, i, false),
        Cmd::Layouts(i) => analyze(cli, i, true),
        Cmd::SampleOps {
            large,
            graph,
            output,
        } => {
            let spec = if *graph {
                samples::sample_graph()
            } else {
                samples::sample_ops(*large)
            };
            let text = spec.to_json();
            match output {
                Some(p) => {
                    write_file(p, &text)?;
                    note!("wrote {} ops to {}", spec.ops.len(), p.display());
                }
                None => outln!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Fuse {
            json,
            verify,
            target,
            rtol,
            atol,
            seed,
            output,
            verbose,
        } => fuse_cmd(
            cli,
            json,
            *verify,
            *seed,
            target.target(),
            (*rtol, *atol),
            output.as_deref(),
            *verbose,
        ),
        Cmd::Profiles { json } => profiles(cli.format == Format::Json || *json),
        Cmd::BenchReductions {
            sizes,
            layouts,
            dtype,
            target,
            reps,
            num_warps,
            seed,
            output,
            json,
        } => {
            let flag = |name: &'static str| {
                move |e: Error| match e {
                    Error::InvalidArgument(m) => Fail::Input(format!("--{name}: {m}")),
                    other => other.into(),
                }
            };
            let count = |name: &str, v: i64, expected: &str| {
                usize::try_from(v).map_err(|_| {
                    Fail::Input(format!(
                        "--{name} {v}: expected a positive count ({expected})"
                    ))
                })
            };
            let bench = ReductionBench {
                sizes: reductions::parse_sizes(sizes).map_err(flag("sizes"))?,
                layouts: reductions::parse_layouts(layouts).map_err(flag("layouts"))?,
                dtype: reductions::parse_dtype(dtype).map_err(flag("dtype"))?,
                target: match target {
                    BenchTargetArg::Auto => BenchTarget::Auto,
                    BenchTargetArg::Cpu => BenchTarget::Cpu,
                    BenchTargetArg::Metal => BenchTarget::Metal,
                    BenchTargetArg::Emulated => BenchTarget::Emulated,
                },
                reps: count("reps", *reps, "1..=10000")?,
                num_warps: count("num_warps", *num_warps, "a power of two up to 32")?,
                seed: *seed,
            };
            bench_reductions(
                &bench,
                output.as_deref(),
                cli.format == Format::Json || *json,
            )
        }
        Cmd::CheckSystem { require_emu, json } => {
            check_system(cli, *require_emu, cli.format == Format::Json || *json)
        }
    }
}

fn bench_reductions(bench: &ReductionBench, png: Option<&Path>, as_json: bool) -> Res<ExitCode> {
    bench.validate()?;
    if let Some(p) = png {
        check_png_output(p)?;
    }
    let total = (bench.sizes.len() * bench.layouts.len()) as u64;
    // Hidden by indicatif itself when stderr is not a terminal.
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = bench.run(|done, _, what| {
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    });
    bar.finish_and_clear();
    let report = report?;
    if let Some(p) = png {
        plot::plot_png(&report, p)?;
    }
    if as_json {
        outln!(
            "{}",
            pretty(&serde_json::to_value(&report).unwrap_or(Value::Null))
        );
    } else {
        out!("{}", report.table());
    }
    if let Some(p) = png {
        note!("wrote {}", p.display());
    }
    let failed = report.rows.iter().filter(|r| !r.ok).count();
    if failed > 0 {
        note!("error: {failed} result(s) differ from MLX by more than the tolerance");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks before any long work that a PNG can be written to `p`: a `.png` name in an
/// existing folder, and a file this process may create or overwrite.
fn check_png_output(p: &Path) -> Res<()> {
    let bad = |why: String| Fail::Input(format!("--output {}: {why}", p.display()));
    if p.is_dir() {
        return Err(bad("is a directory".into()));
    }
    if !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        return Err(bad(
            "the plot is a PNG image: give a file name ending in .png".into(),
        ));
    }
    let existed = p.exists();
    // Opened for writing without truncating, so an existing file keeps its contents if the
    // benchmark fails later; one created here is removed again.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .map_err(|e| bad(format!("cannot be written: {e}")))?;
    if !existed {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

fn profile(cli: &Cli) -> Res<HardwareProfile> {
    match &cli.hw {
        Some(name) => HardwareProfile::named(name).map_err(|e| match e {
            Error::InvalidArgument(m) => Fail::Input(format!("--hw: {m}")),
            other => other.into(),
        }),
        None => Ok(HardwareProfile::detect()?),
    }
}

fn read_file(p: &Path) -> Res<String> {
    std::fs::read_to_string(p).map_err(|e| Fail::Input(format!("cannot read {}: {e}", p.display())))
}

fn write_file(p: &Path, text: &str) -> Res<()> {
    std::fs::write(p, text).map_err(|e| Fail::Input(format!("cannot write {}: {e}", p.display())))
}

fn load_graph(p: &Path) -> Res<Graph> {
    let text = read_file(p)?;
    Graph::from_json(&text).map_err(|e| Fail::Input(format!("{}: {}", p.display(), strip(e))))
}

fn strip(e: Error) -> String {
    match e {
        Error::InvalidArgument(m) => m,
        other => other.to_string(),
    }
}

fn shapes_of(types: &HashMap<&str, &TensorType>, op_inputs: &[String]) -> String {
    op_inputs
        .iter()
        .filter_map(|r| types.get(r.as_str()))
        .map(|t| format!("{:?}", t.shape).replace(' ', ""))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Simple aligned table.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            // Padded by hand: `format!`'s width must fit in 16 bits, a cell need not.
            .map(|(i, c)| {
                let pad = w[i].saturating_sub(c.chars().count());
                format!("{c}{}", " ".repeat(pad))
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// The layout plan of the kernel in IR file `path` for the profile's printer.
fn kernel_plan(cli: &Cli, path: &Path, num_warps: u32) -> Res<ExitCode> {
    let hw = profile(cli)?;
    let text = read_file(path)?;
    let kernel = triton_metal::ir::Kernel::parse_ir(&text)
        .map_err(|e| Fail::Input(format!("{}: {}", path.display(), strip(e))))?;
    if num_warps == 0 || !num_warps.is_power_of_two() || num_warps > 32 {
        return Err(Fail::Input(format!(
            "--num-warps {num_warps}: expected a power of two from 1 to 32"
        )));
    }
    let plan = printer_plan(&kernel, &hw, num_warps);
    let opts = printer_options(&hw, num_warps);
    let layouts = triton_metal::opt::values::value_layouts(&kernel, &plan, &opts);
    match cli.format {
        Format::Table => emit(&format!(
            "{} ({})\n{plan}{}",
            hw.chip.display_name(),
            hw.chip.name(),
            triton_metal::opt::values::text(&kernel, &plan, &opts)
        ))?,
        Format::Json => {
            let decisions: Vec<Value> = plan
                .decisions()
                .map(|(op, d, why)| json!({"op": op.to_string(), "decision": d.to_string(), "why": why}))
                .collect();
            let values: Vec<Value> = layouts
                .iter()
                .enumerate()
                .filter(|(_, l)| !matches!(l, triton_metal::opt::values::ValueLayout::Uniform))
                .map(|(i, l)| {
                    json!({"value": format!("%{i}"), "type": kernel.values[i].ty.to_string(), "layout": l.to_string(), "regs": l.regs()})
                })
                .collect();
            let doc = json!({
                "tool": "layouts",
                "kernel": plan.kernel,
                "chip": hw.chip.name(),
                "threads": plan.printer.threads,
                "vec": plan.vec,
                "vec_why": plan.vec_why,
                "decisions": decisions,
                "values": values,
                "plan": plan.to_string(),
            });
            emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).map_err(|e| Fail::Check(e.to_string()))?
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The launch options `layouts --ir` plans with.
fn printer_options(hw: &HardwareProfile, num_warps: u32) -> codegen::LaunchOptions {
    codegen::LaunchOptions::default()
        .num_warps(num_warps)
        .target(hw.clone())
}

/// The layout plan the printer of `hw`'s dialect uses for `kernel` at `num_warps`.
fn printer_plan(
    kernel: &triton_metal::ir::Kernel,
    hw: &HardwareProfile,
    num_warps: u32,
) -> KernelPlan {
    let opts = printer_options(hw, num_warps);
    match hw.backend {
        Backend::Cuda => codegen::cuda::plan(kernel, &opts),
        _ => codegen::metal::plan(kernel, &opts),
    }
}

/// One launch of a node and the plan its kernel is printed with.
struct LaunchReport {
    launch: KernelLaunch,
    plan: KernelPlan,
}

impl LaunchReport {
    /// The strategies of the kernel's reductions, in op order.
    fn reductions(&self) -> Vec<ReductionLayout> {
        self.plan
            .decisions()
            .filter_map(|(_, d, _)| match d {
                Decision::Reduce(r) => Some(*r),
                _ => None,
            })
            .collect()
    }

    fn json(&self) -> Value {
        let decisions: Vec<Value> = self
            .plan
            .decisions()
            .map(
                |(op, d, why)| json!({"op": op.to_string(), "decision": d.to_string(), "why": why}),
            )
            .collect();
        json!({
            "kernel": self.launch.kernel,
            "stage": self.launch.stage,
            "grid": self.launch.grid,
            "constexprs": self.launch.constexprs,
            "num_warps": self.launch.num_warps,
            "threads": self.plan.printer.threads,
            "vec": self.plan.vec,
            "vec_why": self.plan.vec_why,
            "decisions": decisions,
            "plan": self.plan.to_string(),
        })
    }
}

/// The launches of `node` with the plans of their kernels on `hw`.
fn launch_reports(node: &NodePlan, hw: &HardwareProfile) -> Res<Vec<LaunchReport>> {
    node.launches
        .iter()
        .map(|l| {
            let kernel = l.jit().specialize_with(&l.constexpr_pairs())?;
            Ok(LaunchReport {
                launch: l.launch.clone(),
                plan: printer_plan(&kernel, hw, l.launch.num_warps as u32),
            })
        })
        .collect()
}

/// The reduction strategy a node's kernels use, as the seeds name it: the strongest of its
/// reductions' (`None` when its kernels reduce nothing or MLX computes it).
fn node_layout(reports: &[LaunchReport]) -> Option<MemoryLayout> {
    let all: Vec<ReductionLayout> = reports.iter().flat_map(LaunchReport::reductions).collect();
    let flag = |r: ReductionLayout| match r {
        ReductionLayout::Coalesced => MemoryLayout::COALESCED,
        ReductionLayout::Tiled => MemoryLayout::TILED,
        ReductionLayout::ColumnMajor => MemoryLayout::COLUMN_MAJOR,
        ReductionLayout::RowMajor => MemoryLayout::ROW_MAJOR,
        _ => MemoryLayout::DEFAULT,
    };
    all.into_iter().map(flag).max_by_key(|l| l.bits())
}

/// How a node runs, in a few words.
fn runs_as(node: &NodePlan) -> &'static str {
    if !node.is_dsl() {
        "mlx"
    } else if node.kernel.starts_with("dsl:") {
        "dsl"
    } else {
        "mlx+dsl"
    }
}

/// One op or node analysed: id, type or pattern, input ids, what runs it, its launches.
type NodeRow = (String, String, Vec<String>, NodePlan, Vec<LaunchReport>);

fn analyze(cli: &Cli, input: &OpsInput, detailed: bool) -> Res<ExitCode> {
    if let Some(path) = &input.ir {
        return kernel_plan(cli, path, input.num_warps);
    }
    let hw = profile(cli)?;
    let mut spec = match &input.json {
        Some(p) => {
            let text = read_file(p)?;
            GraphSpec::from_json(&text)
                .map_err(|e| Fail::Input(format!("{}: {}", p.display(), strip(e))))?
        }
        None => GraphSpec::default(),
    };
    for s in &input.operation {
        let mut op = OpSpec::from_operation_str(s)?;
        // Two operations of one type would share the id derived from it.
        let base = op.id.clone().unwrap_or_else(|| "op".into());
        let mut n = 1;
        while spec.ops.iter().any(|o| o.id == op.id) {
            n += 1;
            op.id = Some(format!("{base}_{n}"));
        }
        spec.ops.push(op);
    }
    if spec.ops.is_empty() {
        if detailed {
            spec = samples::sample_ops(false);
        } else {
            return Err(Fail::Input(
                "nothing to analyze: give --json FILE or --operation TYPE:[dims][:axis]".into(),
            ));
        }
    }
    let graph = Graph::from_spec(&spec).map_err(|e| match (&input.json, e) {
        (Some(p), Error::InvalidArgument(m)) => Fail::Input(format!("{}: {m}", p.display())),
        (_, e) => e.into(),
    })?;
    let runner =
        GraphRunner::new().with_provider(Box::new(DslKernels::new(hw.clone(), Target::Auto)));
    // Each op lowered on its own to the kernel that would run it, or with --fused each
    // node of the fused graph (groups, and the ops left as MLX ops).
    let (fused, _) = fuse(&graph);
    let types: HashMap<&str, &TensorType> = if input.fused {
        fused_types(&fused)
    } else {
        graph.types()
    };
    let mut nodes: Vec<NodeRow> = Vec::new();
    if input.fused {
        for (n, node) in fused.nodes.iter().zip(runner.plan_fused(&fused)?) {
            let reports = launch_reports(&node, &hw)?;
            let what = match n {
                Node::Op(op) => op.type_name.clone(),
                Node::Group(g) => g.pattern.to_string(),
            };
            nodes.push((n.id().to_string(), what, n.inputs().to_vec(), node, reports));
        }
    } else {
        for op in &graph.ops {
            let node = runner.plan_op(op, &types)?;
            let reports = launch_reports(&node, &hw)?;
            nodes.push((
                op.id.clone(),
                op.type_name.clone(),
                op.inputs.clone(),
                node,
                reports,
            ));
        }
    }
    let coalesced = nodes
        .iter()
        .filter(|(.., r)| node_layout(r) == Some(MemoryLayout::COALESCED))
        .count();
    let ops_json: Vec<Value> = nodes
        .iter()
        .map(|(id, what, inputs, node, reports)| {
            let layout = node_layout(reports);
            let mut v = json!({
                "id": id,
                "type": what,
                "input_shapes": inputs.iter().filter_map(|r| types.get(r.as_str())).map(|t| &t.shape).collect::<Vec<_>>(),
                "kernel": node.kernel,
                "runs_as": runs_as(node),
                "layout": layout.map(|l| l.to_string()),
                "layout_value": layout.map(|l| l.bits()),
                "coalesced": layout == Some(MemoryLayout::COALESCED),
            });
            if detailed || input.verbose {
                v["launches"] = Value::Array(reports.iter().map(LaunchReport::json).collect());
            }
            v
        })
        .collect();
    let doc = json!({
        "tool": if detailed { "layouts" } else { "analyze" },
        "version": env!("CARGO_PKG_VERSION"),
        "hardware": hw,
        "ops": ops_json,
        "fused": input.fused,
        "summary": {"ops": nodes.len(), "coalesced": coalesced},
    });
    if let Some(p) = &input.output {
        write_file(p, &pretty(&doc))?;
    }
    if cli.format == Format::Json {
        outln!("{}", pretty(&doc));
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = format!("hardware: {hw}\n");
    if detailed {
        // One row per launch: the kernel, its launch shape and its plan on --hw.
        let mut rows: Vec<Vec<String>> = Vec::new();
        for (id, what, _, node, reports) in &nodes {
            if reports.is_empty() {
                rows.push(vec![
                    id.clone(),
                    what.clone(),
                    node.kernel.clone(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
                continue;
            }
            for (i, r) in reports.iter().enumerate() {
                let l = &r.launch;
                let decisions: Vec<String> =
                    r.plan.decisions().map(|(_, d, _)| d.to_string()).collect();
                let mut row = vec![
                    if i == 0 { id.clone() } else { String::new() },
                    if i == 0 { what.clone() } else { String::new() },
                    l.kernel.clone(),
                    l.stage.into(),
                    l.grid_text(),
                    l.constexprs_text(),
                    l.num_warps.to_string(),
                    r.plan.printer.threads.to_string(),
                    r.plan.vec.to_string(),
                    if reports.len() > 1 {
                        format!("yes x{}", reports[0].launch.grid[1])
                    } else {
                        "no".into()
                    },
                    if decisions.is_empty() {
                        "-".into()
                    } else {
                        decisions.join(", ")
                    },
                ];
                if input.verbose {
                    row.push(r.plan.vec_why.clone());
                }
                rows.push(row);
            }
        }
        let mut header = vec![
            "ID",
            "TYPE",
            "KERNEL",
            "STAGE",
            "GRID",
            "CONSTEXPRS",
            "WARPS",
            "THREADS",
            "VEC",
            "TWO-STAGE",
            "DECISIONS",
        ];
        if input.verbose {
            header.push("WHY VEC");
        }
        out.push_str(&table(&header, &rows));
    } else {
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|(id, what, inputs, node, reports)| {
                let layout = node_layout(reports);
                let mut r = vec![
                    id.clone(),
                    what.clone(),
                    shapes_of(&types, inputs),
                    node.kernel.clone(),
                    layout.map_or("-".into(), |l| format!("{l} ({})", l.bits())),
                    if layout == Some(MemoryLayout::COALESCED) {
                        "yes"
                    } else {
                        "no"
                    }
                    .into(),
                ];
                if input.verbose {
                    r.push(
                        reports
                            .iter()
                            .map(|r| {
                                format!(
                                    "{} {} {}, {} threads, vec {}",
                                    r.launch.stage,
                                    r.launch.grid_text(),
                                    r.launch.constexprs_text(),
                                    r.plan.printer.threads,
                                    r.plan.vec
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; "),
                    );
                }
                r
            })
            .collect();
        let mut header = vec!["ID", "TYPE", "SHAPES", "KERNEL", "LAYOUT", "COALESCED"];
        if input.verbose {
            header.push("LAUNCHES");
        }
        out.push_str(&table(&header, &rows));
    }
    out.push_str(&format!(
        "{coalesced} of {} {} use the COALESCED layout\n",
        nodes.len(),
        if input.fused { "nodes" } else { "ops" }
    ));
    out!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn human_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KiB", f / K)
    } else {
        format!("{b} B")
    }
}

/// Tolerances of a comparison of results of `dtype`: f32 results of a deep graph (the
/// sample's attention and matmuls amplify last-bit differences) are compared at 1e-3
/// relative; half-precision results at their own precision.
fn tolerances(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (1e-2, 1e-3),
        DType::BF16 => (5e-2, 1e-2),
        _ => (1e-3, 1e-4),
    }
}

#[allow(clippy::too_many_arguments)]
fn fuse_cmd(
    cli: &Cli,
    path: &Path,
    verify: bool,
    seed: u64,
    target: Target,
    tol: (Option<f64>, Option<f64>),
    output: Option<&Path>,
    verbose: bool,
) -> Res<ExitCode> {
    for (name, v) in [("rtol", tol.0), ("atol", tol.1)] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(Fail::Input(format!(
                "--{name} {v}: expected a finite tolerance >= 0"
            )));
        }
    }
    let graph = load_graph(path)?;
    let hw = profile(cli)?;
    let (fused, summary) = fuse(&graph);
    // The fused side: this crate's DSL kernels, MLX where a group has none.
    let runner = GraphRunner::new().with_provider(Box::new(DslKernels::new(hw.clone(), target)));
    let plans: BTreeMap<String, NodePlan> = runner
        .plan_fused(&fused)?
        .into_iter()
        .map(|p| (p.id.clone(), p))
        .collect();
    let comparison = if verify {
        let feeds = random_inputs(&graph.inputs, seed)?;
        let types = graph.types();
        let (rtol, atol) = graph
            .outputs
            .iter()
            .filter_map(|o| types.get(o.as_str()))
            .map(|t| tolerances(t.dtype))
            .fold((0.0f64, 0.0f64), |(r, a), (r2, a2)| (r.max(r2), a.max(a2)));
        let (rtol, atol) = (tol.0.unwrap_or(rtol), tol.1.unwrap_or(atol));
        Some(runner.compare(&graph, &fused, &feeds, rtol, atol)?)
    } else {
        None
    };
    let groups_json: Vec<Value> = summary
        .groups
        .iter()
        .filter_map(|g| plans.get(&g.id))
        .map(|p| {
            json!({
                "group": p.id,
                "pattern": p.what,
                "kernel": p.kernel,
                "runs_as": runs_as(p),
                "launches": p.launches.iter().map(|l| &l.launch).collect::<Vec<_>>(),
            })
        })
        .collect();
    let doc = json!({
        "hardware": hw,
        "target": target_name(target),
        "summary": summary,
        "kernels": groups_json,
        "fused_graph": fused,
        "verification": comparison,
    });
    if let Some(p) = output {
        write_file(p, &pretty(&doc))?;
    }
    let ok = comparison.as_ref().is_none_or(|c| c.all_close());
    if cli.format == Format::Json {
        let mut d = doc;
        if let Value::Object(m) = &mut d {
            m.remove("fused_graph");
        }
        outln!("{}", pretty(&d));
    } else {
        outln!("hardware: {hw}");
        out!("{}", summary_table(&summary, &plans, verbose));
        if let Some(c) = &comparison {
            let rows: Vec<Vec<String>> = c
                .kernels
                .iter()
                .map(|k| {
                    let how = if k.launches.is_empty() {
                        "mlx (no DSL kernel)"
                    } else if k.kernel.starts_with("dsl:") {
                        "dsl"
                    } else {
                        "mlx+dsl"
                    };
                    vec![
                        k.group.clone(),
                        k.kernel.clone(),
                        how.into(),
                        if k.launches.is_empty() {
                            "-".into()
                        } else {
                            k.launches
                                .iter()
                                .map(|l| format!("{} {}", l.stage, l.grid_text()))
                                .collect::<Vec<_>>()
                                .join(", ")
                        },
                    ]
                })
                .collect();
            outln!(
                "verification: fused graph on this crate's kernels ({}) vs unfused graph on MLX",
                target_name(target)
            );
            out!(
                "{}",
                table(&["GROUP", "KERNEL THAT RAN", "RUNS AS", "LAUNCHED"], &rows)
            );
            let rows: Vec<Vec<String>> = c
                .outputs
                .iter()
                .map(|o| {
                    vec![
                        o.id.clone(),
                        o.elements.to_string(),
                        format!("{:.3e}", o.max_abs_diff),
                        if o.mismatches == 0 {
                            "ok".into()
                        } else {
                            format!("{} mismatches", o.mismatches)
                        },
                    ]
                })
                .collect();
            outln!("outputs (rtol {}, atol {}):", c.rtol, c.atol);
            out!(
                "{}",
                table(&["OUTPUT", "ELEMENTS", "MAX |DIFF|", "STATUS"], &rows)
            );
        }
    }
    if ok {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Fail::Check(
            "fused and unfused results differ beyond tolerance".into(),
        ))
    }
}

fn target_name(t: Target) -> &'static str {
    match t {
        Target::Cpu => "cpu",
        Target::CpuCompiled => "cpu-compiled",
        Target::Metal => "metal",
        Target::Emulated(LaneOrder::Reverse) => "emulated-reverse",
        Target::Emulated(_) => "emulated",
        _ => "auto",
    }
}

fn summary_table(s: &FusionSummary, plans: &BTreeMap<String, NodePlan>, verbose: bool) -> String {
    let mut out = format!(
        "{} ops -> {} nodes, {} fused groups, {} of memory traffic saved\n",
        s.ops_before,
        s.nodes_after,
        s.groups.len(),
        human_bytes(s.bytes_saved)
    );
    if s.groups.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = s
        .groups
        .iter()
        .map(|g| {
            let plan = plans.get(&g.id);
            vec![
                g.id.clone(),
                g.pattern.to_string(),
                if verbose {
                    g.ops.join(",")
                } else {
                    g.ops.len().to_string()
                },
                human_bytes(g.bytes_unfused),
                human_bytes(g.bytes_fused),
                human_bytes(g.bytes_saved),
                plan.map_or("-".into(), |p| p.kernel.clone()),
                plan.filter(|p| p.is_dsl()).map_or("-".into(), |p| {
                    p.launches
                        .iter()
                        .map(|l| format!("{} {}", l.launch.grid_text(), l.launch.constexprs_text()))
                        .collect::<Vec<_>>()
                        .join(" then ")
                }),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "GROUP",
            "PATTERN",
            "OPS",
            "UNFUSED",
            "FUSED",
            "SAVED",
            "KERNEL",
            "LAUNCH (GRID CONSTEXPRS)",
        ],
        &rows,
    ));
    out
}

fn profiles(as_json: bool) -> Res<ExitCode> {
    let all = HardwareProfile::all();
    if as_json {
        outln!("{}", pretty(&json!(all)));
        return Ok(ExitCode::SUCCESS);
    }
    let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v}"));
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|p| {
            vec![
                p.chip.name().into(),
                p.chip.display_name().into(),
                p.backend.to_string(),
                p.compute_units.to_string(),
                p.simd_width.to_string(),
                p.max_threads_per_threadgroup.to_string(),
                format!("{} KB", p.threadgroup_memory_bytes / 1024),
                opt(p.memory_bandwidth_gbps),
                opt(p.fp32_tflops),
                if p.simdgroup_matrix { "yes" } else { "no" }.into(),
                if p.bfloat { "yes" } else { "no" }.into(),
                p.vector_width(DType::F32).to_string(),
                p.matmul_tile.to_string(),
            ]
        })
        .collect();
    out!(
        "{}",
        table(
            &[
                "NAME",
                "CHIP",
                "BACKEND",
                "CORES",
                "SIMD",
                "MAX-THREADS",
                "TG-MEM",
                "GB/S",
                "FP32-TFLOPS",
                "MATRIX",
                "BF16",
                "VEC(F32)",
                "MATMUL-TILE",
            ],
            &rows
        )
    );
    outln!("select one with --hw NAME or {HW_ENV_VAR}=NAME");
    Ok(ExitCode::SUCCESS)
}

fn os_description() -> String {
    let pretty = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        });
    let base = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    match pretty {
        Some(p) => format!("{base} ({p})"),
        None => base,
    }
}

fn check_system(cli: &Cli, require_emu: bool, as_json: bool) -> Res<ExitCode> {
    let require_emu =
        require_emu || std::env::var("TRITON_METAL_REQUIRE_EMU").is_ok_and(|v| v == "1");
    // (name, value, requirement met)
    let mut rows: Vec<(String, String, Option<bool>)> = Vec::new();
    rows.push(("os".into(), os_description(), None));
    let mlx_version = device::mlx_version();
    let mlx_ok = match &mlx_version {
        Ok(v) => {
            // Loading is not enough: evaluate something.
            let works = Array::from_slice(&[1.0f32, 2.0], &[2])
                .and_then(|a| mlx::sum(&a, None, false))
                .and_then(|s| s.item::<f32>())
                .is_ok_and(|x| x == 3.0);
            rows.push((
                "mlx".into(),
                format!("{v}{}", if works { "" } else { " (evaluation FAILED)" }),
                Some(works),
            ));
            works
        }
        Err(e) => {
            rows.push(("mlx".into(), format!("not usable: {e}"), Some(false)));
            false
        }
    };
    let info = HardwareInfo::detect();
    let mut backend_ok = false;
    match &info {
        Ok(hw) => {
            rows.push(("backend".into(), hw.backend.to_string(), None));
            rows.push(("device".into(), hw.name.clone(), None));
            rows.push((
                "chip generation".into(),
                match (hw.apple_generation, &hw.architecture) {
                    (Some(g), Some(a)) => format!("Apple M{g} ({a})"),
                    (None, Some(a)) => format!("unknown Apple GPU ({a})"),
                    _ => "not an Apple GPU".into(),
                },
                None,
            ));
            // The CPU executor runs everywhere MLX does; GPUs add to it.
            backend_ok = mlx_ok;
        }
        Err(e) => rows.push((
            "device".into(),
            format!("detection failed: {e}"),
            Some(false),
        )),
    }
    // MLX makes an available GPU its default device, so the default device's backend
    // tells which GPU runtime this build can reach.
    let backend = info.as_ref().ok().map(|h| h.backend);
    let metal = mlx_ok && backend == Some(Backend::Metal);
    let cuda = mlx_ok && backend == Some(Backend::Cuda);
    rows.push((
        "metal".into(),
        if metal { "available" } else { "not available" }.into(),
        None,
    ));
    rows.push((
        "cuda".into(),
        if cuda { "available" } else { "not available" }.into(),
        None,
    ));
    rows.push((
        "cpu executor".into(),
        if backend_ok {
            "available"
        } else {
            "not available"
        }
        .into(),
        Some(backend_ok),
    ));
    // The emulator needs clang >= 15 (`_Float16` for Metal's `half`); ask it, not PATH.
    let clang = triton_metal::emu::Emulator::compiler_version();
    rows.push((
        "emulation harness".into(),
        match clang {
            Some(v) => v.to_string(),
            None => "no clang++ >= 15 found (Debian 12: apt-get install clang-19)".into(),
        },
        if require_emu {
            Some(clang.is_some())
        } else {
            None
        },
    ));
    // The compiled CPU executor (`Target::CpuCompiled`) builds kernels with the same clang.
    rows.push((
        "compiled cpu executor".into(),
        match clang {
            Some(_) if backend_ok => "available (Target::CpuCompiled)".into(),
            Some(_) => "not available (no CPU executor)".into(),
            None => "not available: needs clang++ >= 15 (Target::Cpu interprets)".into(),
        },
        None,
    ));
    let plan_for = profile(cli);
    rows.push((
        "planning profile".into(),
        match &plan_for {
            Ok(p) => format!(
                "{p}{}",
                match (&cli.hw, std::env::var(HW_ENV_VAR)) {
                    (Some(_), _) => " [--hw]".to_string(),
                    (None, Ok(v)) if !v.is_empty() => format!(" [{HW_ENV_VAR}={v}]"),
                    _ => " [detected]".to_string(),
                }
            ),
            Err(Fail::Input(m)) | Err(Fail::Check(m)) => format!("invalid: {m}"),
            Err(Fail::Quiet) => "invalid".into(),
        },
        Some(plan_for.is_ok()),
    ));
    let missing: Vec<&str> = rows
        .iter()
        .filter(|r| r.2 == Some(false))
        .map(|r| r.0.as_str())
        .collect();
    let ok = missing.is_empty();
    if as_json {
        let items: Vec<Value> = rows
            .iter()
            .map(|(k, v, req)| json!({"check": k, "value": v, "required": req.is_some(), "ok": req.unwrap_or(true)}))
            .collect();
        let doc = json!({
            "ok": ok,
            "missing": missing,
            "checks": items,
            "metal": metal,
            "cuda": cuda,
            "emulation_harness": clang.is_some(),
            "compiled_cpu_executor": clang.is_some() && backend_ok,
            "mlx_version": mlx_version.as_ref().ok(),
        });
        outln!("{}", pretty(&doc));
    } else {
        let table_rows: Vec<Vec<String>> = rows
            .iter()
            .map(|(k, v, req)| {
                vec![
                    k.clone(),
                    match req {
                        Some(true) => "ok".into(),
                        Some(false) => "MISSING".into(),
                        None => "".into(),
                    },
                    v.clone(),
                ]
            })
            .collect();
        out!("{}", table(&["CHECK", "STATUS", "VALUE"], &table_rows));
        if ok {
            outln!("all requirements met");
        } else {
            outln!("missing: {}", missing.join(", "));
        }
    }
    if ok {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}
