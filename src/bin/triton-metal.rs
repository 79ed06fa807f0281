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
use triton_metal::device::{self, Backend, HardwareInfo};
use triton_metal::graph::{
    fuse, plan_fused, plan_graph, random_inputs, samples, FusionSummary, Graph, GraphRunner,
    GraphSpec, LayoutPlan, OpSpec, TensorType,
};
use triton_metal::opt::{HardwareProfile, HW_ENV_VAR};
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
        /// Also run the graph fused and unfused on random inputs with MLX and compare.
        #[arg(long)]
        verify: bool,
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
            seed,
            output,
            verbose,
        } => fuse_cmd(cli, json, *verify, *seed, output.as_deref(), *verbose),
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

fn plan_json(p: &LayoutPlan) -> Value {
    serde_json::to_value(p).unwrap_or(Value::Null)
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
    let opts = codegen::LaunchOptions::default()
        .num_warps(num_warps)
        .target(hw.clone());
    let plan = match hw.backend {
        Backend::Cuda => codegen::cuda::plan(&kernel, &opts),
        _ => codegen::metal::plan(&kernel, &opts),
    };
    match cli.format {
        Format::Table => emit(&format!(
            "{} ({})\n{plan}",
            hw.chip.display_name(),
            hw.chip.name()
        ))?,
        Format::Json => {
            let decisions: Vec<Value> = plan
                .decisions()
                .map(|(op, d, why)| json!({"op": op.to_string(), "decision": d.to_string(), "why": why}))
                .collect();
            let doc = json!({
                "tool": "layouts",
                "kernel": plan.kernel,
                "chip": hw.chip.name(),
                "threads": plan.printer.threads,
                "vec": plan.vec,
                "vec_why": plan.vec_why,
                "decisions": decisions,
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
    let plans = plan_graph(&graph, &hw);
    let types = graph.types();
    let coalesced = plans.iter().filter(|(_, p)| p.is_coalesced()).count();
    let ops_json: Vec<Value> = graph
        .ops
        .iter()
        .zip(&plans)
        .map(|(op, (_, plan))| {
            let mut v = json!({
                "id": op.id,
                "type": op.type_name,
                "input_shapes": op.inputs.iter().filter_map(|r| types.get(r.as_str())).map(|t| &t.shape).collect::<Vec<_>>(),
                "layout": plan.layout.to_string(),
                "layout_value": plan.layout.bits(),
                "coalesced": plan.is_coalesced(),
            });
            if detailed || input.verbose {
                v["plan"] = plan_json(plan);
            }
            v
        })
        .collect();
    let doc = json!({
        "tool": if detailed { "layouts" } else { "analyze" },
        "version": env!("CARGO_PKG_VERSION"),
        "hardware": hw,
        "ops": ops_json,
        "summary": {"ops": graph.ops.len(), "coalesced": coalesced},
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
        let rows: Vec<Vec<String>> = graph
            .ops
            .iter()
            .zip(&plans)
            .map(|(op, (_, p))| {
                let mut r = vec![
                    op.id.clone(),
                    op.type_name.clone(),
                    p.dtype.to_string(),
                    p.layout.to_string(),
                    p.threads_per_threadgroup.to_string(),
                    p.simdgroups.to_string(),
                    p.vector_width.to_string(),
                    p.elements_per_thread.to_string(),
                    p.threadgroups.to_string(),
                    p.threadgroup_memory_bytes.to_string(),
                    p.tile.map_or("-".into(), |t| t.to_string()),
                    p.reduction.as_ref().map_or("-".into(), |r| {
                        if r.two_stage {
                            format!("yes x{}", r.partials_per_output)
                        } else {
                            "no".into()
                        }
                    }),
                    match (p.roofline.limit, p.roofline.min_time_us) {
                        (Some(l), Some(t)) => format!("{l} >={t:.2}us"),
                        _ => format!("{:.2} flop/B", p.roofline.intensity),
                    },
                ];
                if input.verbose {
                    r.push(p.reason.clone());
                }
                r
            })
            .collect();
        let mut header = vec![
            "ID",
            "TYPE",
            "DTYPE",
            "LAYOUT",
            "THREADS",
            "SIMDGROUPS",
            "VEC",
            "ELEMS/THREAD",
            "THREADGROUPS",
            "TG-MEM",
            "TILE",
            "TWO-STAGE",
            "BOUND",
        ];
        if input.verbose {
            header.push("WHY");
        }
        out.push_str(&table(&header, &rows));
    } else {
        let rows: Vec<Vec<String>> = graph
            .ops
            .iter()
            .zip(&plans)
            .map(|(op, (_, p))| {
                let mut r = vec![
                    op.id.clone(),
                    op.type_name.clone(),
                    shapes_of(&types, &op.inputs),
                    format!("{} ({})", p.layout, p.layout.bits()),
                    if p.is_coalesced() { "yes" } else { "no" }.into(),
                ];
                if input.verbose {
                    r.push(format!(
                        "{} threads, {} simdgroups, vec {}{}",
                        p.threads_per_threadgroup,
                        p.simdgroups,
                        p.vector_width,
                        p.reduction.as_ref().filter(|r| r.two_stage).map_or(
                            String::new(),
                            |r| format!(", two-stage x{}", r.partials_per_output)
                        )
                    ));
                }
                r
            })
            .collect();
        let mut header = vec!["ID", "TYPE", "SHAPES", "LAYOUT", "COALESCED"];
        if input.verbose {
            header.push("PARAMETERS");
        }
        out.push_str(&table(&header, &rows));
    }
    out.push_str(&format!(
        "{coalesced} of {} ops use the COALESCED layout\n",
        graph.ops.len()
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

fn fuse_cmd(
    cli: &Cli,
    path: &Path,
    verify: bool,
    seed: u64,
    output: Option<&Path>,
    verbose: bool,
) -> Res<ExitCode> {
    let graph = load_graph(path)?;
    let hw = profile(cli)?;
    let (fused, summary) = fuse(&graph);
    let plans: BTreeMap<String, LayoutPlan> = plan_fused(&fused, &hw).into_iter().collect();
    let comparison = if verify {
        let feeds = random_inputs(&graph.inputs, seed)?;
        Some(GraphRunner::new().compare(&graph, &fused, &feeds, 1e-4, 1e-5)?)
    } else {
        None
    };
    let doc = json!({
        "hardware": hw,
        "summary": summary,
        "layouts": plans,
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
            let kernels: BTreeMap<&str, &str> = c
                .kernels
                .iter()
                .map(|k| (k.group.as_str(), k.kernel.as_str()))
                .collect();
            if verbose {
                for (g, k) in &kernels {
                    outln!("  {g}: {k}");
                }
            }
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
            outln!(
                "verification (fused vs unfused on MLX, rtol {}, atol {}):",
                c.rtol,
                c.atol
            );
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

fn summary_table(s: &FusionSummary, plans: &BTreeMap<String, LayoutPlan>, verbose: bool) -> String {
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
                plans.get(&g.id).map_or("-".into(), |p| {
                    format!(
                        "{} {}x{}",
                        p.layout, p.threadgroups, p.threads_per_threadgroup
                    )
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
            "LAYOUT (GROUPS x THREADS)",
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
