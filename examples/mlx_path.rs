//! What the MLX path costs on top of the kernel: the examples' kernels launched as a user
//! launches them (`Launch::run` with `Target::Auto`: MLX's `fast::cuda_kernel` when MLX's
//! default device is an NVIDIA GPU in a `--features cuda` build, the CPU executor when it is
//! the CPU) against MLX's own ops doing the same work (`add`, `softmax`, `layer_norm`,
//! `matmul`, `scaled_dot_product_attention`), both timed from the host:
//!
//! - `build_us`: the call returns a lazy array; nothing is evaluated (graph building, argument
//!   checks, specialisation and program cache look-ups);
//! - `tiny_us`: one call plus `eval` on a tiny input (1 element, 1 row, a 16³ matmul, 16
//!   keys): the fixed cost of one launch, kernel included;
//! - `e2e_ms`: one call plus `eval` at the measured size, with its bandwidth or FLOP rate;
//! - `queued_ms`: `--queue` calls built, then one `eval` of all of them, per call (launches
//!   back to back: the closest a host-side clock gets to the kernel's own time).
//!
//! Each figure is the median of `--reps` (default 30) after `--warmup` (default 5) calls;
//! `queued_ms` of `max(5, reps / queue)` rounds. Before timing, each side's result is
//! checked against MLX's op at the measured and at the tiny size, with triton-metal's output
//! poisoned with NaN (an element the kernel does not write shows as an infinite error); the
//! timed launches do not poison (no extra fill pass). A failing case prints its error and the
//! next case runs; the exit status is 1 when any case failed or did not match.
//!
//! Output: a `{"kind":"run",..}` JSON line naming MLX's version, default device and the
//! target `Target::Auto` resolves to (so a CPU fallback on a GPU machine shows), one
//! `{"kind":"case",..}` JSON line per case and side (`grep '^{'`), then a table.
//!
//! Here (CPU; `Target::Auto` runs the interpreted CPU executor, so use small sizes):
//!
//! ```text
//! cargo run --release --example mlx_path -- --small
//! cargo run --release --features cuda --example mlx_path -- --small
//! ```
//!
//! On an NVIDIA GPU: build on a Linux x86-64 machine against the pinned mlx-cpu wheel (same
//! headers and ABI as mlx-cuda-13 0.32.4), copy the binary, and put MLX's CUDA `libmlx.so`
//! (the `mlx/lib` folder of a `pip install mlx-cuda-13==0.32.4`) and the CUDA libraries it
//! needs first on the library path; the binary's RUNPATH names the CPU wheel's folder, which
//! `LD_LIBRARY_PATH` overrides:
//!
//! ```text
//! cargo build --release --features cuda --example mlx_path
//! # -> target/release/examples/mlx_path
//! LD_LIBRARY_PATH=$SITE/mlx/lib:$NVIDIA_LIBS ./mlx_path
//! ```
//!
//! Options: `--small`, `--reps N`, `--warmup N`, `--queue N`, `--cases a,b,..` (of
//! `vector_add,softmax,layer_norm,matmul_f16,matmul_f32,attention`), `--target
//! auto|cuda|cpu|cpu-compiled`, and sizes `--add-n N`, `--softmax RxC`, `--layer-norm RxC`,
//! `--matmul MxNxK`, `--attention ZxHxNxD`. The defaults are the sizes of
//! `benches/gpu/bench.py`'s kernel-level cases.

#[allow(dead_code)]
#[path = "fused_attention.rs"]
mod fused_attention;
#[allow(dead_code)]
#[path = "fused_softmax.rs"]
mod fused_softmax;
#[allow(dead_code)]
#[path = "layer_norm.rs"]
mod layer_norm;
#[allow(dead_code)]
#[path = "matmul.rs"]
mod matmul;
#[allow(dead_code)]
#[path = "vector_add.rs"]
mod vector_add;

use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use triton_metal::device::{default_device, mlx_version};
use triton_metal::runtime::{cdiv, grid, out, out_like, Arg, Target};
use triton_metal::testing::max_abs_diff;
use triton_metal::{
    mlx, Array, Backend,
    DType::{self, F16, F32},
    Device, Error, HardwareInfo, Result,
};

/// A call that builds one lazy result from the case's inputs; `true` poisons
/// triton-metal's output with NaN first (MLX's ops allocate their own outputs).
type Call = Box<dyn Fn(&[Array], bool) -> Result<Array>>;

/// What a case moves or computes, for its rate.
#[derive(Clone, Copy)]
enum Work {
    /// Bytes read and written (each input read once, each output written once).
    Bytes(f64),
    /// Floating-point operations.
    Flops(f64),
}

impl Work {
    fn rate(self, seconds: f64) -> (f64, &'static str) {
        match self {
            Work::Bytes(b) => (b / seconds / 1e9, "GB/s"),
            Work::Flops(f) => (f / seconds / 1e12, "TFLOP/s"),
        }
    }
}

/// One piece of work, done by a kernel of the examples and by MLX's op.
struct Case {
    name: &'static str,
    size: String,
    work: Work,
    /// Largest `|ours - mlx|` accepted, relative to `max(1, max |mlx|)`.
    rtol: f64,
    big: Vec<Array>,
    tiny: Vec<Array>,
    ours: Call,
    theirs: Call,
}

/// Settings from the command line.
struct Opts {
    reps: usize,
    warmup: usize,
    queue: usize,
    cases: Vec<String>,
    target: Target,
    add_n: usize,
    softmax: [usize; 2],
    layer_norm: [usize; 2],
    matmul: [usize; 3],
    attention: [usize; 4],
}

const CASES: [&str; 6] = [
    "vector_add",
    "softmax",
    "layer_norm",
    "matmul_f16",
    "matmul_f32",
    "attention",
];

const USAGE: &str = "usage: mlx_path [--small] [--reps N] [--warmup N] [--queue N] \
[--cases vector_add,softmax,layer_norm,matmul_f16,matmul_f32,attention] \
[--target auto|cuda|cpu|cpu-compiled] [--add-n N] [--softmax RxC] [--layer-norm RxC] \
[--matmul MxNxK] [--attention ZxHxNxD]";

fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// `"4x8"` as `[4, 8]`.
fn dims<const N: usize>(flag: &str, v: &str) -> Result<[usize; N]> {
    let parts: Vec<usize> = v
        .split(['x', ','])
        .map(|p| p.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(format!("{flag} {v}: {e}")))?;
    let parts: [usize; N] = parts
        .try_into()
        .map_err(|_| bad(format!("{flag} {v}: expected {N} sizes separated by 'x'")))?;
    if parts.contains(&0) {
        return Err(bad(format!("{flag} {v}: sizes must be positive")));
    }
    Ok(parts)
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let small = args.iter().any(|a| a == "--small");
    let mut o = if small {
        Opts {
            reps: 30,
            warmup: 3,
            queue: 4,
            cases: Vec::new(),
            target: Target::Auto,
            add_n: 1 << 16,
            softmax: [256, 1024],
            layer_norm: [256, 1024],
            matmul: [128, 128, 128],
            attention: [1, 2, 128, 64],
        }
    } else {
        Opts {
            reps: 30,
            warmup: 5,
            queue: 10,
            cases: Vec::new(),
            target: Target::Auto,
            add_n: 1 << 28,
            softmax: [32768, 4096],
            layer_norm: [4096, 8192],
            matmul: [4096, 4096, 4096],
            attention: [4, 32, 4096, 64],
        }
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--small" {
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(bad(USAGE));
        }
        const VALUED: [&str; 10] = [
            "--reps",
            "--warmup",
            "--queue",
            "--add-n",
            "--softmax",
            "--layer-norm",
            "--matmul",
            "--attention",
            "--cases",
            "--target",
        ];
        if !VALUED.contains(&flag.as_str()) {
            return Err(bad(format!("unknown option {flag}\n{USAGE}")));
        }
        let value = it
            .next()
            .ok_or_else(|| bad(format!("{flag} needs a value\n{USAGE}")))?;
        let count = |v: &str| {
            v.parse::<usize>()
                .map_err(|e| bad(format!("{flag} {v}: {e}")))
        };
        match flag.as_str() {
            "--reps" => o.reps = count(value)?.max(1),
            "--warmup" => o.warmup = count(value)?,
            "--queue" => o.queue = count(value)?.max(1),
            "--add-n" => o.add_n = count(value)?.max(1),
            "--softmax" => o.softmax = dims(flag, value)?,
            "--layer-norm" => o.layer_norm = dims(flag, value)?,
            "--matmul" => o.matmul = dims(flag, value)?,
            "--attention" => o.attention = dims(flag, value)?,
            "--cases" => {
                o.cases = value.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(c) = o.cases.iter().find(|c| !CASES.contains(&c.as_str())) {
                    return Err(bad(format!(
                        "--cases: unknown case `{c}` (cases: {})",
                        CASES.join(",")
                    )));
                }
            }
            "--target" => {
                o.target = match value.as_str() {
                    "auto" => Target::Auto,
                    "cuda" => Target::Cuda,
                    "cpu" => Target::Cpu,
                    "cpu-compiled" => Target::CpuCompiled,
                    other => {
                        return Err(bad(format!(
                            "--target {other}: expected auto, cuda, cpu or cpu-compiled"
                        )))
                    }
                }
            }
            other => return Err(bad(format!("unknown option {other}\n{USAGE}"))),
        }
    }
    if o.cases.is_empty() {
        o.cases = CASES.iter().map(|c| c.to_string()).collect();
    }
    Ok(o)
}

/// Where `target` runs, by the rule `Target::Auto` follows (the environment, then MLX's
/// default device).
fn target_label(target: Target) -> String {
    match target {
        Target::Auto => {}
        Target::Cuda => return "cuda".into(),
        Target::Cpu => return "cpu (interpreted)".into(),
        Target::CpuCompiled => return "cpu-compiled".into(),
        other => return format!("{other:?}"),
    }
    if let Ok(v) = std::env::var("TRITON_METAL_TARGET") {
        let v = v.trim().to_ascii_lowercase();
        if !v.is_empty() && v != "auto" {
            return format!("{v} (from TRITON_METAL_TARGET)");
        }
    }
    match (default_device(), HardwareInfo::detect()) {
        (Ok(Device::Cpu), _) => "cpu (interpreted)".into(),
        (Ok(Device::Gpu), Ok(hw)) => match hw.backend {
            Backend::Cuda if cfg!(feature = "cuda") => "cuda".into(),
            Backend::Metal => "metal".into(),
            other => format!("none: a {other} GPU and no launcher in this build"),
        },
        (Err(e), _) | (_, Err(e)) => format!("unknown ({e})"),
    }
}

fn i32_of(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| bad(format!("{what} = {v} does not fit the kernel's i32")))
}

fn poisoned(a: Arg, poison: bool) -> Arg {
    if poison {
        a.fill(f64::NAN)
    } else {
        a
    }
}

fn first(outs: Vec<Array>, kernel: &str) -> Result<Array> {
    outs.into_iter().next().ok_or_else(|| Error::Runtime {
        kernel: kernel.into(),
        msg: "the launch returned no output".into(),
    })
}

/// A `[rows, cols]` shape from the first input.
fn rows_cols(inputs: &[Array]) -> Result<(usize, usize)> {
    match inputs.first().map(|a| a.shape()).as_deref() {
        Some(&[r, c]) => Ok((r, c)),
        other => Err(bad(format!("expected a 2-D input, got shape {other:?}"))),
    }
}

fn evaluated(arrays: Vec<Array>) -> Result<Vec<Array>> {
    Array::eval_all(&arrays.iter().collect::<Vec<_>>())?;
    Ok(arrays)
}

fn vector_add(o: &Opts) -> Result<Case> {
    let kernel = vector_add::add_kernel()?;
    let target = o.target;
    let n = o.add_n;
    let inputs = |n: usize| {
        evaluated(vec![
            mlx::random::uniform(&[n], F32, -1.0, 1.0, 1)?,
            mlx::random::uniform(&[n], F32, -1.0, 1.0, 2)?,
        ])
    };
    Ok(Case {
        name: "vector_add",
        size: format!("n={n} f32"),
        work: Work::Bytes(3.0 * 4.0 * n as f64),
        rtol: 0.0,
        big: inputs(n)?,
        tiny: inputs(1)?,
        ours: Box::new(move |x, poison| {
            let n = x[0].size();
            let outs = kernel
                .launch()
                .grid(grid(move |meta| [cdiv(n, meta["BLOCK_SIZE"])]))
                .args((
                    &x[0],
                    &x[1],
                    poisoned(out_like(&x[0]), poison),
                    i32_of(n, "n_elements")?,
                ))
                .constexpr("BLOCK_SIZE", 1024)
                .target(target)
                .run()?;
            first(outs, "add_kernel")
        }),
        theirs: Box::new(|x, _| mlx::add(&x[0], &x[1])),
    })
}

fn softmax(o: &Opts) -> Result<Case> {
    let kernel = fused_softmax::softmax_kernel()?;
    let target = o.target;
    let [rows, cols] = o.softmax;
    let inputs = |rows: usize| evaluated(vec![mlx::random::normal(&[rows, cols], F32, 3)?]);
    Ok(Case {
        name: "softmax",
        size: format!("{rows}x{cols} f32"),
        work: Work::Bytes(2.0 * 4.0 * (rows * cols) as f64),
        rtol: 1e-5,
        big: inputs(rows)?,
        tiny: inputs(1)?,
        ours: Box::new(move |x, poison| {
            let (rows, cols) = rows_cols(x)?;
            let c = i32_of(cols, "n_cols")?;
            // Triton's tutorial: the row in one block, more warps for longer rows.
            let block = cols.next_power_of_two();
            let warps = match block {
                b if b >= 4096 => 16,
                b if b >= 2048 => 8,
                _ => 4,
            };
            let outs = kernel
                .launch()
                .grid([rows])
                .args((poisoned(out(&[rows, cols], F32), poison), &x[0], c, c, c))
                .constexpr("BLOCK_SIZE", block as i64)
                .num_warps(warps)
                .target(target)
                .run()?;
            first(outs, "softmax_kernel")
        }),
        theirs: Box::new(|x, _| mlx::softmax(&x[0], &[-1], false)),
    })
}

fn layer_norm(o: &Opts) -> Result<Case> {
    let kernel = layer_norm::layer_norm_kernel()?;
    let target = o.target;
    let [rows, cols] = o.layer_norm;
    let eps = 1e-5f32;
    let inputs = |rows: usize| {
        evaluated(vec![
            mlx::astype(&mlx::random::normal(&[rows, cols], F32, 4)?, F16)?,
            mlx::random::uniform(&[cols], F16, 0.5, 1.5, 5)?,
            mlx::random::uniform(&[cols], F16, -0.5, 0.5, 6)?,
        ])
    };
    Ok(Case {
        name: "layer_norm",
        size: format!("{rows}x{cols} f16"),
        work: Work::Bytes(2.0 * (2 * rows * cols + 2 * cols) as f64),
        rtol: 1e-2,
        big: inputs(rows)?,
        tiny: inputs(1)?,
        ours: Box::new(move |x, poison| {
            let (rows, cols) = rows_cols(x)?;
            let c = i32_of(cols, "N")?;
            // Triton's tutorial: blocks of at most 64 KiB, a warp per 256 elements up to 8.
            let block = cols.next_power_of_two().min(2048);
            let outs = kernel
                .launch()
                .grid([rows])
                .args((
                    &x[0],
                    poisoned(out(&[rows, cols], F16), poison),
                    &x[1],
                    &x[2],
                    c,
                    c,
                    eps,
                ))
                .constexpr("BLOCK_SIZE", block as i64)
                .num_warps((block / 256).clamp(1, 8))
                .target(target)
                .run()?;
            first(outs, "layer_norm_fwd")
        }),
        theirs: Box::new(move |x, _| mlx::layer_norm(&x[0], Some(&x[1]), Some(&x[2]), eps)),
    })
}

fn matmul(o: &Opts, dtype: DType) -> Result<Case> {
    let kernel = matmul::matmul_kernel()?;
    let target = o.target;
    let [m, n, k] = o.matmul;
    // f16: Triton's config for large sizes on the H100 (benches/gpu/bench.py); f32 (an FMA
    // loop, no tensor cores): the example's tiles.
    let (bm, bn, bk, warps) = if dtype == F16 {
        (128, 128, 64, 8)
    } else {
        (64, 64, 32, 4)
    };
    let inputs = move |m: usize, n: usize, k: usize| {
        evaluated(vec![
            mlx::astype(&mlx::random::normal(&[m, k], F32, 7)?, dtype)?,
            mlx::astype(&mlx::random::normal(&[k, n], F32, 8)?, dtype)?,
        ])
    };
    Ok(Case {
        name: if dtype == F16 {
            "matmul_f16"
        } else {
            "matmul_f32"
        },
        size: format!("{m}x{n}x{k} {dtype}"),
        work: Work::Flops(2.0 * m as f64 * n as f64 * k as f64),
        // f16 outputs; MLX's f32 GPU matmul may round its operands to TF32.
        rtol: 1e-2,
        big: inputs(m, n, k)?,
        tiny: inputs(16, 16, 16)?,
        ours: Box::new(move |x, poison| {
            let (m, k) = rows_cols(x)?;
            let n = rows_cols(&x[1..])?.1;
            let (mi, ni, ki) = (i32_of(m, "M")?, i32_of(n, "N")?, i32_of(k, "K")?);
            let outs = kernel
                .launch()
                .grid(grid(move |meta| {
                    [cdiv(m, meta["BLOCK_SIZE_M"]) * cdiv(n, meta["BLOCK_SIZE_N"])]
                }))
                .args((
                    &x[0],
                    &x[1],
                    poisoned(out(&[m, n], dtype), poison),
                    mi,
                    ni,
                    ki,
                    ki,
                    1,
                    ni,
                    1,
                    ni,
                    1,
                ))
                .constexpr("BLOCK_SIZE_M", bm)
                .constexpr("BLOCK_SIZE_N", bn)
                .constexpr("BLOCK_SIZE_K", bk)
                .constexpr("GROUP_SIZE_M", 8)
                .num_warps(warps)
                .target(target)
                .run()?;
            first(outs, "matmul_kernel")
        }),
        theirs: Box::new(|x, _| mlx::matmul(&x[0], &x[1])),
    })
}

fn attention(o: &Opts) -> Result<Case> {
    let kernel = fused_attention::attn_fwd_kernel()?;
    let target = o.target;
    let [z, h, n_ctx, d] = o.attention;
    let scale = 1.0 / (d as f32).sqrt();
    let inputs = move |z: usize, h: usize, n_ctx: usize| {
        let shape = [z, h, n_ctx, d];
        evaluated(
            (0..3)
                .map(|i| mlx::astype(&mlx::random::normal(&shape, F32, 9 + i)?, F16))
                .collect::<Result<Vec<_>>>()?,
        )
    };
    Ok(Case {
        name: "attention",
        size: format!("Z={z} H={h} N={n_ctx} D={d} f16, not causal"),
        work: Work::Flops(4.0 * (z * h) as f64 * (n_ctx as f64).powi(2) * d as f64),
        rtol: 1e-2,
        big: inputs(z, h, n_ctx)?,
        tiny: inputs(1, 1, 16)?,
        ours: Box::new(move |x, poison| {
            let shape: [usize; 4] = x[0]
                .shape()
                .try_into()
                .map_err(|_| bad("attention: expected [Z, H, N, D] inputs"))?;
            let [z, h, n_ctx, d] = shape;
            let s = [
                i32_of(h * n_ctx * d, "stride_z")?,
                i32_of(n_ctx * d, "stride_h")?,
                i32_of(d, "stride_m")?,
                1,
            ];
            let outs = kernel
                .launch()
                .grid(grid(move |meta| [cdiv(n_ctx, meta["BLOCK_M"]), z * h]))
                .args((
                    &x[0],
                    &x[1],
                    &x[2],
                    poisoned(out(&shape, F16), poison),
                    scale,
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    i32_of(h, "H")?,
                    i32_of(n_ctx, "N_CTX")?,
                ))
                .constexpr("HEAD_DIM", d as i64)
                // Triton's tutorial tiles for head dim 64 on the H100.
                .constexpr("BLOCK_M", 128)
                .constexpr("BLOCK_N", 64)
                .constexpr("CAUSAL", 0)
                .num_warps(4)
                .target(target)
                .run()?;
            first(outs, "attn_fwd")
        }),
        theirs: Box::new(move |x, _| mlx::scaled_dot_product_attention(&x[0], &x[1], &x[2], scale)),
    })
}

fn build_case(name: &str, o: &Opts) -> Result<Case> {
    match name {
        "vector_add" => vector_add(o),
        "softmax" => softmax(o),
        "layer_norm" => layer_norm(o),
        "matmul_f16" => matmul(o, F16),
        "matmul_f32" => matmul(o, F32),
        "attention" => attention(o),
        other => Err(bad(format!("unknown case {other}"))),
    }
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

/// The median of `reps` calls of `once` (each returning the seconds it measured) after
/// `warmup` calls.
fn median_of(reps: usize, warmup: usize, mut once: impl FnMut() -> Result<f64>) -> Result<f64> {
    for _ in 0..warmup {
        once()?;
    }
    Ok(median((0..reps).map(|_| once()).collect::<Result<_>>()?))
}

/// `max |actual - expected|` and whether it is within `rtol * max(1, max |expected|)`.
fn check(actual: &Array, expected: &Array, rtol: f64) -> Result<(f64, bool)> {
    let diff = max_abs_diff(actual, expected)?;
    let magnitude =
        mlx::max(&mlx::abs(&mlx::astype(expected, F32)?)?, None, false)?.item::<f32>()? as f64;
    Ok((diff, diff <= rtol * magnitude.max(1.0)))
}

/// One side's measurements.
struct Timing {
    /// `max |ours - mlx|` at the measured and the tiny size (`None` for MLX's side).
    diff: Option<f64>,
    tiny_diff: Option<f64>,
    ok: bool,
    build_s: f64,
    tiny_s: f64,
    e2e_s: f64,
    queued_s: f64,
}

fn measure(case: &Case, ours: bool, o: &Opts) -> Result<Timing> {
    let call = if ours { &case.ours } else { &case.theirs };
    // triton-metal's results are checked against MLX's first; MLX's side is the reference,
    // evaluated once at both sizes. This also compiles and caches the programs.
    let mut ok = true;
    let mut diffs = [None; 2];
    for (i, inputs) in [&case.big, &case.tiny].into_iter().enumerate() {
        let reference = (case.theirs)(inputs, false)?;
        if ours {
            let (d, good) = check(&call(inputs, true)?, &reference, case.rtol)?;
            diffs[i] = Some(d);
            ok &= good;
        } else {
            reference.eval()?;
        }
    }
    let build_s = median_of(o.reps, o.warmup, || {
        let t = Instant::now();
        let r = call(&case.big, false)?;
        let s = t.elapsed().as_secs_f64();
        drop(r);
        Ok(s)
    })?;
    let eval_once = |inputs: &[Array]| {
        let t = Instant::now();
        call(inputs, false)?.eval()?;
        Ok(t.elapsed().as_secs_f64())
    };
    let tiny_s = median_of(o.reps, o.warmup, || eval_once(&case.tiny))?;
    let e2e_s = median_of(o.reps, o.warmup, || eval_once(&case.big))?;
    let rounds = (o.reps / o.queue).max(5);
    let queued_s = median_of(rounds, 1, || {
        let t = Instant::now();
        let outs = (0..o.queue)
            .map(|_| call(&case.big, false))
            .collect::<Result<Vec<_>>>()?;
        Array::eval_all(&outs.iter().collect::<Vec<_>>())?;
        Ok(t.elapsed().as_secs_f64() / o.queue as f64)
    })?;
    Ok(Timing {
        diff: diffs[0],
        tiny_diff: diffs[1],
        ok,
        build_s,
        tiny_s,
        e2e_s,
        queued_s,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let device = match default_device() {
        Ok(Device::Gpu) => "gpu".to_string(),
        Ok(Device::Cpu) => "cpu".to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    let (backend, hw_name) = match HardwareInfo::detect() {
        Ok(hw) => (hw.backend.to_string(), hw.name),
        Err(e) => ("unknown".into(), e.to_string()),
    };
    let ours_target = target_label(o.target);
    let run = json!({
        "kind": "run",
        "mlx_version": mlx_version().unwrap_or_else(|e| e.to_string()),
        "mlx_default_device": device,
        "backend": backend,
        "device_name": hw_name,
        "feature_cuda": cfg!(feature = "cuda"),
        "triton_metal_target": o.target_label_requested(),
        "triton_metal_runs_on": ours_target,
        "reps": o.reps,
        "warmup": o.warmup,
        "queue": o.queue,
    });
    println!("{run}");
    println!(
        "MLX {} on {device} ({backend}: {hw_name}); feature cuda {}; triton-metal launches \
         ({}) run on: {ours_target}; MLX's ops run on MLX's default device",
        run["mlx_version"].as_str().unwrap_or("?"),
        if cfg!(feature = "cuda") { "on" } else { "off" },
        o.target_label_requested(),
    );

    let mut rows: Vec<[String; 11]> = Vec::new();
    let mut failed = false;
    for name in &o.cases {
        let case = match build_case(name, &o) {
            Ok(c) => c,
            Err(e) => {
                failed = true;
                println!(
                    "{}",
                    json!({"kind": "case", "case": name, "error": e.to_string()})
                );
                rows.push(error_row(name, "", "both", &e));
                continue;
            }
        };
        let mut per_side = Vec::new();
        for ours in [true, false] {
            let (side, on) = if ours {
                ("triton_metal", ours_target.as_str())
            } else {
                ("mlx", device.as_str())
            };
            match measure(&case, ours, &o) {
                Ok(t) => {
                    failed |= !t.ok;
                    let (e2e_rate, unit) = case.work.rate(t.e2e_s);
                    let (queued_rate, _) = case.work.rate(t.queued_s);
                    println!(
                        "{}",
                        json!({
                            "kind": "case", "case": case.name, "size": case.size,
                            "side": side, "runs_on": on,
                            "build_us": t.build_s * 1e6, "tiny_us": t.tiny_s * 1e6,
                            "e2e_ms": t.e2e_s * 1e3, "e2e_rate": e2e_rate,
                            "queued_ms": t.queued_s * 1e3, "queued_rate": queued_rate,
                            "rate_unit": unit,
                            "max_abs_diff": t.diff, "tiny_max_abs_diff": t.tiny_diff,
                            "ok": t.ok,
                        })
                    );
                    rows.push([
                        case.name.into(),
                        case.size.clone(),
                        side.into(),
                        on.into(),
                        format!("{:.1}", t.build_s * 1e6),
                        format!("{:.1}", t.tiny_s * 1e6),
                        format!("{:.3}", t.e2e_s * 1e3),
                        format!("{} {unit}", sig(e2e_rate)),
                        format!("{:.3}", t.queued_s * 1e3),
                        format!("{} {unit}", sig(queued_rate)),
                        match (t.diff, t.tiny_diff) {
                            (Some(d), Some(td)) => {
                                format!("{:.2e}{}", d.max(td), if t.ok { "" } else { " MISMATCH" })
                            }
                            _ => "(reference)".into(),
                        },
                    ]);
                    per_side.push(t);
                }
                Err(e) => {
                    failed = true;
                    println!(
                        "{}",
                        json!({"kind": "case", "case": case.name, "size": case.size,
                               "side": side, "runs_on": on, "error": e.to_string()})
                    );
                    rows.push(error_row(case.name, &case.size, side, &e));
                }
            }
        }
        if let [ours, theirs] = &per_side[..] {
            rows.push([
                case.name.into(),
                String::new(),
                "ratio".into(),
                "ours/mlx".into(),
                format!("{:.2}x", ours.build_s / theirs.build_s),
                format!("{:.2}x", ours.tiny_s / theirs.tiny_s),
                format!("{:.2}x", ours.e2e_s / theirs.e2e_s),
                String::new(),
                format!("{:.2}x", ours.queued_s / theirs.queued_s),
                String::new(),
                String::new(),
            ]);
        }
    }
    print_table(&rows);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

impl Opts {
    fn target_label_requested(&self) -> &'static str {
        match self.target {
            Target::Cuda => "Target::Cuda",
            Target::Cpu => "Target::Cpu",
            Target::CpuCompiled => "Target::CpuCompiled",
            _ => "Target::Auto",
        }
    }
}

/// `v` with about three significant digits.
fn sig(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        a if a >= 0.001 => format!("{v:.4}"),
        _ => format!("{v:.2e}"),
    }
}

fn error_row(name: &str, size: &str, side: &str, e: &Error) -> [String; 11] {
    let mut row: [String; 11] = Default::default();
    row[0] = name.into();
    row[1] = size.into();
    row[2] = side.into();
    row[3] = format!("ERROR: {e}");
    row
}

fn print_table(rows: &[[String; 11]]) {
    let head = [
        "case",
        "size",
        "side",
        "runs on",
        "build µs",
        "tiny µs",
        "e2e ms",
        "e2e rate",
        "queued ms",
        "queued rate",
        "max |diff|",
    ];
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        // An error message spans the rest of its row.
        let cells = if r[3].starts_with("ERROR") {
            3
        } else {
            r.len()
        };
        for (w, c) in width.iter_mut().zip(&r[..cells]) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            if i < 4 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
            s.push_str("  ");
        }
        s.trim_end().to_string()
    };
    println!();
    println!("{}", line(&head.map(String::from)));
    for r in rows {
        println!("{}", line(r));
    }
}
