//! Fused groups as DSL kernels built at run time from what the match found.
//!
//! The DSL is a runtime builder, so a group's elementwise ops become an expression (a small
//! straight-line program over the group's inputs) and the expression is traced into a
//! kernel once per distinct expression and input layout, then cached:
//!
//! - elementwise chains: one kernel over the flattened result;
//! - matmul + bias (+ activation): a DSL matmul (`tl::dot` over K tiles, as
//!   `examples/matmul.rs`) with the bias and activation applied to the accumulator before
//!   the only store ([`DslKernels`]; batched products use MLX's
//!   matmul and the epilogue kernel); or, with [`MlxMatmulEpilogueKernels`], MLX's matmul
//!   followed by the bias and activation as one DSL epilogue kernel;
//! - conv2d + bias + activation: MLX's conv2d, then the DSL epilogue;
//! - attention: MLX's fused scaled-dot-product attention (no epilogue to fuse);
//! - hierarchical reductions: the reduced axes moved last (an MLX transpose, skipped when
//!   they already are), then one DSL kernel per output row that computes the elementwise
//!   prologue on each loaded block and accumulates sum/mean/max/min in f32; rows longer
//!   than [`TWO_STAGE_THRESHOLD`](super::lower::TWO_STAGE_THRESHOLD) run in two stages as
//!   [`reduce_split`] chooses for the provider's chip (partials per program, then a
//!   final pass over each row's partials).
//!
//! Every launch (kernel, grid, constexprs, warps) is derived from the input shapes before
//! anything runs ([`FusedKernel::launches`]) and run as derived.
//!
//! Operands whose shape (without leading 1s) is a suffix of the result's (a bias `[N]` of
//! an `[M, N]` result, a scalar) are read in place with `offset % len`; any other
//! broadcast is materialised by MLX first. Everything computes in f32 and the result is
//! cast to the group's dtype.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use super::activation;
use super::dsl::DslKernels;
use super::fusion::{Activation, FusedGroup, PatternParams};
use super::lower::{
    reduce_block, reduce_split, split_chunk, KernelLaunch, KernelRef, PlannedLaunch,
};
use super::ops::{OpCategory, OpKind, ReduceOp};
use super::runner::{attention_formula, sdpa, swap_last_two, FusedKernel, KernelProvider};
use super::spec::OpNode;
use crate::array::Array;
use crate::dtype::DType::{F32, I32};
use crate::error::{Error, Result};
use crate::mlx;
use crate::opt::HardwareProfile;
use crate::runtime::{out, Arg};
use crate::tl::{self, libdevice, JitKernel, Tensor};

/// Elements per program of the elementwise and epilogue kernels.
const BLOCK: usize = 1024;

/// An elementwise function of f32 blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ew {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Fma,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Abs,
    Neg,
    Sin,
    Cos,
    Erf,
    Floor,
    Ceil,
    Square,
    Sigmoid,
    Tanh,
    Relu,
    Gelu,
    GeluTanh,
    Silu,
}

impl Ew {
    fn of(kind: OpKind) -> Option<Ew> {
        Some(match kind {
            OpKind::Add => Ew::Add,
            OpKind::Sub => Ew::Sub,
            OpKind::Mul => Ew::Mul,
            OpKind::Div => Ew::Div,
            OpKind::Maximum => Ew::Maximum,
            OpKind::Minimum => Ew::Minimum,
            OpKind::Fma => Ew::Fma,
            OpKind::Exp => Ew::Exp,
            OpKind::Exp2 => Ew::Exp2,
            OpKind::Log => Ew::Log,
            OpKind::Log2 => Ew::Log2,
            OpKind::Sqrt => Ew::Sqrt,
            OpKind::Rsqrt => Ew::Rsqrt,
            OpKind::Abs => Ew::Abs,
            OpKind::Neg => Ew::Neg,
            OpKind::Sin => Ew::Sin,
            OpKind::Cos => Ew::Cos,
            OpKind::Erf => Ew::Erf,
            OpKind::Floor => Ew::Floor,
            OpKind::Ceil => Ew::Ceil,
            OpKind::Square => Ew::Square,
            OpKind::Sigmoid => Ew::Sigmoid,
            OpKind::Tanh => Ew::Tanh,
            OpKind::Relu => Ew::Relu,
            OpKind::Gelu => Ew::Gelu,
            OpKind::Silu => Ew::Silu,
            // `pow` of a negative base (MLX: NaN or a signed integer power) has no exact
            // single spelling with the DSL's exp2/log2; such chains stay with MLX.
            _ => return None,
        })
    }

    fn of_activation(a: Activation) -> Ew {
        match a {
            Activation::Relu => Ew::Relu,
            Activation::Gelu => Ew::Gelu,
            Activation::GeluTanh => Ew::GeluTanh,
            Activation::Silu => Ew::Silu,
            Activation::Sigmoid => Ew::Sigmoid,
            Activation::Tanh => Ew::Tanh,
        }
    }

    fn arity(self) -> usize {
        match self {
            Ew::Add | Ew::Sub | Ew::Mul | Ew::Div | Ew::Maximum | Ew::Minimum => 2,
            Ew::Fma => 3,
            _ => 1,
        }
    }

    fn apply(self, a: &[Tensor]) -> Tensor {
        let x = a[0];
        match self {
            Ew::Add => x + a[1],
            Ew::Sub => x - a[1],
            Ew::Mul => x * a[1],
            Ew::Div => tl::div(x, a[1]),
            Ew::Maximum => tl::maximum(x, a[1]),
            Ew::Minimum => tl::minimum(x, a[1]),
            Ew::Fma => tl::fma(x, a[1], a[2]),
            Ew::Exp => tl::exp(x),
            Ew::Exp2 => tl::exp2(x),
            Ew::Log => tl::log(x),
            Ew::Log2 => tl::log2(x),
            Ew::Sqrt => tl::sqrt(x),
            Ew::Rsqrt => tl::rsqrt(x),
            Ew::Abs => tl::abs(x),
            Ew::Neg => -x,
            Ew::Sin => tl::sin(x),
            Ew::Cos => tl::cos(x),
            Ew::Erf => tl::erf(x),
            Ew::Floor => tl::floor(x),
            Ew::Ceil => tl::ceil(x),
            Ew::Square => x * x,
            Ew::Sigmoid => tl::sigmoid(x),
            Ew::Tanh => libdevice::tanh(x),
            Ew::Relu => tl::maximum(x, 0.0f32),
            Ew::Gelu => activation::gelu(x),
            Ew::GeluTanh => activation::gelu_tanh(x),
            Ew::Silu => activation::silu(x),
        }
    }
}

/// An operand of one step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Src {
    /// Kernel input `i`.
    In(usize),
    /// The result of step `i`.
    Step(usize),
    /// A constant.
    Const(f64),
}

/// A straight-line elementwise program over `inputs` kernel inputs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Expr {
    pub inputs: usize,
    pub steps: Vec<(Ew, Vec<Src>)>,
    pub result: Src,
}

impl Expr {
    /// `act(in0 + in1)` (or `in0 + in1`): a matmul/conv epilogue.
    pub fn bias_activation(act: Option<Activation>) -> Expr {
        let mut steps = vec![(Ew::Add, vec![Src::In(0), Src::In(1)])];
        if let Some(a) = act {
            steps.push((Ew::of_activation(a), vec![Src::Step(0)]));
        }
        Expr {
            inputs: 2,
            result: Src::Step(steps.len() - 1),
            steps,
        }
    }

    /// `in0`: a reduction without a prologue.
    pub fn identity() -> Expr {
        Expr {
            inputs: 1,
            steps: Vec::new(),
            result: Src::In(0),
        }
    }

    /// The program computing `result` from `ops` (elementwise, in evaluation order); the
    /// second value lists, per kernel input, its index in `group_inputs`. `None` when an
    /// op has no DSL spelling or a value is neither a group input nor computed before.
    pub fn from_ops(
        ops: &[&OpNode],
        group_inputs: &[String],
        result: &str,
    ) -> Option<(Expr, Vec<usize>)> {
        let mut used: Vec<usize> = Vec::new();
        let mut at: HashMap<&str, usize> = HashMap::new();
        let mut steps = Vec::with_capacity(ops.len());
        for op in ops {
            if op.kind.category() != OpCategory::Elementwise || !op.ty.dtype.is_float() {
                return None;
            }
            let ew = Ew::of(op.kind)?;
            let mut args = Vec::with_capacity(3);
            for id in &op.inputs {
                args.push(if let Some(&s) = at.get(id.as_str()) {
                    Src::Step(s)
                } else {
                    let g = group_inputs.iter().position(|x| x == id)?;
                    let i = used.iter().position(|&u| u == g).unwrap_or_else(|| {
                        used.push(g);
                        used.len() - 1
                    });
                    Src::In(i)
                });
            }
            if let Some(s) = op.args.scalar {
                if op.args.reverse {
                    args.insert(0, Src::Const(s));
                } else {
                    args.push(Src::Const(s));
                }
            }
            if args.len() != ew.arity() || args.iter().all(|a| matches!(a, Src::Const(_))) {
                return None;
            }
            at.insert(op.id.as_str(), steps.len());
            steps.push((ew, args));
        }
        let result = match at.get(result) {
            Some(&s) => Src::Step(s),
            None => {
                let g = group_inputs.iter().position(|x| x == result)?;
                used.push(g);
                Src::In(used.len() - 1)
            }
        };
        Some((
            Expr {
                inputs: used.len(),
                steps,
                result,
            },
            used,
        ))
    }

    /// Traces the program on loaded blocks; constants become `splat(c)`.
    fn eval(&self, ins: &[Tensor], splat: &dyn Fn(f64) -> Tensor) -> Tensor {
        let mut done: Vec<Tensor> = Vec::with_capacity(self.steps.len());
        let get = |s: Src, done: &[Tensor]| match s {
            Src::In(i) => ins[i],
            Src::Step(i) => done[i],
            Src::Const(c) => splat(c),
        };
        for (ew, args) in &self.steps {
            let a: Vec<Tensor> = args.iter().map(|&s| get(s, &done)).collect();
            let r = ew.apply(&a);
            done.push(r);
        }
        get(self.result, &done)
    }
}

/// How a kernel reads one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mode {
    /// One element per result element.
    Full,
    /// A suffix of the result's shape, read at `offset % len`.
    Suffix,
}

fn f32_of(a: &Array) -> Result<Array> {
    if a.dtype() == F32 {
        Ok(a.clone())
    } else {
        mlx::astype(a, F32)
    }
}

/// How a kernel over `shape` reads an input of shape `xs`: in place ([`Mode::Full`] when
/// the shapes are equal, [`Mode::Suffix`] when `xs` without leading 1s ends `shape`), or
/// `None` when MLX broadcasts it first (then it is read as `Full`).
fn mode_of(xs: &[usize], shape: &[usize]) -> Option<Mode> {
    if xs == shape {
        return Some(Mode::Full);
    }
    let lead = xs.iter().take_while(|&&d| d == 1).count();
    (xs.len() <= shape.len() && shape.ends_with(&xs[lead..])).then_some(Mode::Suffix)
}

/// An input for a kernel over `shape`: read in place, or broadcast by MLX first.
fn bind(x: &Array, shape: &[usize]) -> Result<(Array, Mode)> {
    let x = f32_of(x)?;
    match mode_of(&x.shape(), shape) {
        Some(m) => Ok((x, m)),
        None => Ok((mlx::contiguous(&mlx::broadcast_to(&x, shape)?)?, Mode::Full)),
    }
}

fn cache() -> &'static Mutex<HashMap<String, Arc<JitKernel>>> {
    static C: OnceLock<Mutex<HashMap<String, Arc<JitKernel>>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// The kernel for `key`, built by `build(name)` the first time.
fn cached(
    prefix: &str,
    key: String,
    build: impl FnOnce(&str) -> Result<JitKernel>,
) -> Result<Arc<JitKernel>> {
    if let Some(k) = cache().lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(k.clone());
    }
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    let k = Arc::new(build(&format!("{prefix}_{:016x}", h.finish()))?);
    cache()
        .lock()
        .map_err(|_| poisoned())?
        .entry(key)
        .or_insert(k.clone());
    Ok(k)
}

fn poisoned() -> Error {
    Error::Runtime {
        kernel: "fused".into(),
        msg: "kernel cache lock poisoned".into(),
    }
}

/// Warps per program of every fused kernel.
pub(crate) const NUM_WARPS: usize = 4;

/// A launch of `kernel` over `grid` with integer constexprs `cx`.
pub(crate) fn planned(
    kernel: KernelRef,
    stage: &'static str,
    grid: [usize; 3],
    cx: &[(&str, usize)],
) -> PlannedLaunch {
    let name = match &kernel {
        KernelRef::Static(k) => k.name().to_string(),
        KernelRef::Shared(k) => k.name().to_string(),
    };
    PlannedLaunch::new(
        kernel,
        KernelLaunch {
            kernel: name,
            stage,
            grid,
            constexprs: cx.iter().map(|(k, v)| (k.to_string(), *v as i64)).collect(),
            num_warps: NUM_WARPS,
        },
    )
}

/// Runs `p` with `args` on `cfg`'s target, recording the launch in `log`; returns the
/// first output.
pub(crate) fn execute(
    p: &PlannedLaunch,
    args: Vec<Arg>,
    cfg: &DslKernels,
    log: &Mutex<Vec<KernelLaunch>>,
) -> Result<Array> {
    let l = &p.launch;
    let mut launch = p
        .jit()
        .launch()
        .grid(l.grid)
        .num_warps(l.num_warps)
        .target(cfg.target());
    for a in args {
        launch = launch.arg(a);
    }
    for (k, v) in &l.constexprs {
        launch = launch.constexpr(k, *v);
    }
    let y = launch.run()?;
    log.lock().map_err(|_| poisoned())?.push(l.clone());
    y.into_iter().next().ok_or_else(|| Error::Runtime {
        kernel: l.kernel.clone(),
        msg: "no output".into(),
    })
}

/// The elementwise kernel computing `expr` over `shape` from inputs of `in_shapes`, its
/// launch, and how it reads each input.
fn elementwise_plan(
    expr: &Expr,
    in_shapes: &[Vec<usize>],
    shape: &[usize],
) -> Result<(PlannedLaunch, Vec<Mode>)> {
    if in_shapes.len() != expr.inputs {
        return Err(Error::InvalidArgument(format!(
            "fused elementwise kernel takes {} inputs, got {}",
            expr.inputs,
            in_shapes.len()
        )));
    }
    let modes: Vec<Mode> = in_shapes
        .iter()
        .map(|s| mode_of(s, shape).unwrap_or(Mode::Full))
        .collect();
    let key = format!("ew|{modes:?}|{expr:?}");
    let (e, m) = (expr.clone(), modes.clone());
    let kernel = cached("fused_chain", key, move |name| {
        tl::jit(name, move |k| {
            let params: Vec<(Tensor, Option<Tensor>)> = m
                .iter()
                .enumerate()
                .map(|(i, mode)| {
                    let p = k.ptr(F32, &format!("in{i}"));
                    let len = (*mode == Mode::Suffix).then(|| k.scalar(I32, &format!("len{i}")));
                    (p, len)
                })
                .collect();
            let o = k.ptr(F32, "out_ptr");
            let n = k.scalar(I32, "n");
            let block = k.constexpr("BLOCK");
            let offs = tl::program_id(0) * block + tl::arange(0, block);
            let mask = offs.lt(n);
            let vals: Vec<Tensor> = params
                .iter()
                .map(|&(p, len)| match len {
                    None => tl::load(p + offs).mask(mask),
                    Some(l) => tl::load(p + offs % l).mask(mask),
                })
                .collect();
            let r = e.eval(&vals, &|c| tl::full([block], c, F32));
            tl::store(o + offs, r).mask(mask);
        })
    })?;
    let n: usize = shape.iter().product();
    let p = planned(
        KernelRef::Shared(kernel),
        "elementwise",
        [n.div_ceil(BLOCK).max(1), 1, 1],
        &[("BLOCK", BLOCK)],
    );
    Ok((p, modes))
}

/// Runs `expr` elementwise over `shape` on `inputs` (one per kernel input); f32 result.
fn run_elementwise(
    expr: &Expr,
    inputs: &[Array],
    shape: &[usize],
    cfg: &DslKernels,
    log: &Mutex<Vec<KernelLaunch>>,
) -> Result<Array> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(Array::shape).collect();
    let (p, modes) = elementwise_plan(expr, &shapes, shape)?;
    let mut args: Vec<Arg> = Vec::new();
    for (x, want) in inputs.iter().zip(&modes) {
        let (a, mode) = bind(x, shape)?;
        debug_assert_eq!(mode, *want);
        let len = a.size() as i32;
        args.push(a.into());
        if mode == Mode::Suffix {
            args.push(len.into());
        }
    }
    let n: usize = shape.iter().product();
    args.push(out(shape, F32));
    args.push((n as i32).into());
    execute(&p, args, cfg, log)
}

/// The combine of a DSL reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
}

/// The kernel reducing chunks of rows: program `(row, part)` reduces the prologue `expr`
/// over columns `[part * chunk, (part + 1) * chunk)` of `row` (clipped to `n_cols`) and
/// stores one value at `row * num_programs(1) + part`; a mean divides the sum by `count`.
fn reduce_kernel(expr: &Expr, red: Red) -> Result<Arc<JitKernel>> {
    let key = format!("red|{red:?}|{expr:?}");
    let e = expr.clone();
    cached("fused_reduce", key, move |name| {
        tl::jit(name, move |k| {
            let ptrs: Vec<Tensor> = (0..e.inputs)
                .map(|i| k.ptr(F32, &format!("in{i}")))
                .collect();
            let o = k.ptr(F32, "out_ptr");
            let n_cols = k.scalar(I32, "n_cols");
            let chunk = k.scalar(I32, "chunk");
            let count = k.scalar(I32, "count");
            let block = k.constexpr("BLOCK");
            let row = tl::program_id(0);
            let part = tl::program_id(1);
            let start = part * chunk;
            let cols = tl::arange(0, block);
            let init = match red {
                Red::Sum | Red::Mean => 0.0f32,
                Red::Max => f32::NEG_INFINITY,
                Red::Min => f32::INFINITY,
            };
            // Max and min propagate NaN, as the graph's reductions (MLX's) do: NaNs are
            // counted next to the NaN-ignoring combine.
            let zeros = tl::full([block], 0.0f32, F32);
            let (acc, nans) = tl::range(0, chunk, block).fold(
                (tl::full([block], init, F32), zeros),
                |j, (acc, nans)| {
                    let c = start + j + cols;
                    let m = c.lt(n_cols);
                    let vals: Vec<Tensor> = ptrs
                        .iter()
                        .map(|&p| tl::load(p + row * n_cols + c).mask(m).other(0.0f32))
                        .collect();
                    let v = tl::where_(m, e.eval(&vals, &|x| tl::full([block], x, F32)), init);
                    match red {
                        Red::Sum | Red::Mean => (acc + v, nans),
                        Red::Max => (
                            tl::maximum(acc, v),
                            nans + tl::where_(v.ne(v), 1.0f32, 0.0f32),
                        ),
                        Red::Min => (
                            tl::minimum(acc, v),
                            nans + tl::where_(v.ne(v), 1.0f32, 0.0f32),
                        ),
                    }
                },
            );
            let r = match red {
                Red::Sum => tl::sum(acc, 0),
                Red::Mean => tl::sum(acc, 0) / count,
                Red::Max => tl::max(acc, 0),
                Red::Min => tl::min(acc, 0),
            };
            let r = match red {
                Red::Max | Red::Min => tl::where_(tl::sum(nans, 0).gt(0.0f32), f32::NAN, r),
                _ => r,
            };
            tl::store(o + row * tl::num_programs(1) + part, r);
        })
    })
}

/// The launches reducing the trailing `cols` elements of each of `rows` rows of the
/// prologue's result, as [`reduce_split`] splits them for `hw`: one kernel, or partials per
/// program and then a final pass over each row's partials.
fn reduce_plan(
    expr: &Expr,
    red: Red,
    rows: usize,
    cols: usize,
    hw: &HardwareProfile,
) -> Result<Vec<PlannedLaunch>> {
    let s = reduce_split(rows, cols, hw);
    let rows = rows.max(1);
    if !s.two_stage() {
        return Ok(vec![planned(
            KernelRef::Shared(reduce_kernel(expr, red)?),
            "reduce",
            [rows, 1, 1],
            &[("BLOCK", s.block)],
        )]);
    }
    // A mean's partials are sums; the final pass divides by the row's length.
    let first = if red == Red::Mean { Red::Sum } else { red };
    Ok(vec![
        planned(
            KernelRef::Shared(reduce_kernel(expr, first)?),
            "partials",
            [rows, s.partials, 1],
            &[("BLOCK", s.block)],
        ),
        planned(
            KernelRef::Shared(reduce_kernel(&Expr::identity(), red)?),
            "final",
            [rows, 1, 1],
            &[("BLOCK", reduce_block(s.partials))],
        ),
    ])
}

/// Reduces the trailing `cols` elements of every row of the prologue's result.
fn run_rows_reduce(
    plan: &[PlannedLaunch],
    inputs: &[Array],
    (rows, cols): (usize, usize),
    cfg: &DslKernels,
    log: &Mutex<Vec<KernelLaunch>>,
) -> Result<Array> {
    let rows = rows.max(1);
    let chunk = |p: &PlannedLaunch, len: usize| {
        let b = p
            .launch
            .constexprs
            .get("BLOCK")
            .copied()
            .unwrap_or(1)
            .max(1) as usize;
        split_chunk(len, p.launch.grid[1], b)
    };
    match plan {
        [one] => {
            let mut args: Vec<Arg> = inputs.iter().map(Arg::from).collect();
            args.push(out(&[rows], F32));
            args.extend([cols as i32, chunk(one, cols) as i32, cols as i32].map(Arg::from));
            execute(one, args, cfg, log)
        }
        [partials, fin] => {
            let parts = partials.launch.grid[1];
            let mut args: Vec<Arg> = inputs.iter().map(Arg::from).collect();
            args.push(out(&[rows * parts], F32));
            args.extend([cols as i32, chunk(partials, cols) as i32, cols as i32].map(Arg::from));
            let p = execute(partials, args, cfg, log)?;
            let args = vec![
                Arg::from(&p),
                out(&[rows], F32),
                Arg::from(parts as i32),
                Arg::from(chunk(fin, parts) as i32),
                Arg::from(cols as i32),
            ];
            execute(fin, args, cfg, log)
        }
        _ => Err(Error::Runtime {
            kernel: "fused_reduce".into(),
            msg: format!("a reduction plan of {} launches", plan.len()),
        }),
    }
}

/// Tile of the fused matmul: `BM`, `BN`, `BK`.
const MM_TILE: (usize, usize, usize) = (32, 32, 32);

/// The fused matmul + epilogue kernel for a bias read as `mode`, and its launch over an
/// `m x n` result.
fn matmul_plan(m: usize, n: usize, mode: Mode, act: Option<Activation>) -> Result<PlannedLaunch> {
    let expr = Expr::bias_activation(act);
    let key = format!("mm|{mode:?}|{expr:?}");
    let kernel = cached("fused_matmul", key, move |name| {
        tl::jit(name, move |k| {
            let (a_ptr, b_ptr, bias_ptr) = (
                k.ptr(F32, "a_ptr"),
                k.ptr(F32, "b_ptr"),
                k.ptr(F32, "bias_ptr"),
            );
            let bias_len = (mode == Mode::Suffix).then(|| k.scalar(I32, "bias_len"));
            let c_ptr = k.ptr(F32, "c_ptr");
            let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
            let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
            let pid_m = tl::program_id(0);
            let pid_n = tl::program_id(1);
            let rm = pid_m * bm + tl::arange(0, bm);
            let rn = pid_n * bn + tl::arange(0, bn);
            let rk = tl::arange(0, bk);
            let m_ok = rm.col().lt(m);
            let n_ok = rn.row().lt(n);
            let acc = tl::range(0, kk, bk).fold(tl::zeros([bm, bn], F32), |k0, acc| {
                let ks = k0 + rk;
                let a = tl::load(a_ptr + rm.col() * kk + ks.row())
                    .mask(m_ok & ks.row().lt(kk))
                    .other(0.0f32);
                let b = tl::load(b_ptr + ks.col() * n + rn.row())
                    .mask(ks.col().lt(kk) & n_ok)
                    .other(0.0f32);
                tl::dot(a, b, acc)
            });
            let idx = rm.col() * n + rn.row();
            let ok = m_ok & n_ok;
            let bias = match bias_len {
                None => tl::load(bias_ptr + idx).mask(ok).other(0.0f32),
                Some(l) => tl::load(bias_ptr + idx % l).mask(ok).other(0.0f32),
            };
            let y = expr.eval(&[acc, bias], &|c| tl::full([bm, bn], c, F32));
            tl::store(c_ptr + idx, y).mask(ok);
        })
    })?;
    let (bm, bn, bk) = MM_TILE;
    Ok(planned(
        KernelRef::Shared(kernel),
        "matmul",
        [m.div_ceil(bm).max(1), n.div_ceil(bn).max(1), 1],
        &[("BM", bm), ("BN", bn), ("BK", bk)],
    ))
}

/// A 2-D matmul with the epilogue `act(acc + bias)` fused before the store.
fn run_matmul_epilogue(
    (a, b, bias): (&Array, &Array, &Array),
    act: Option<Activation>,
    cfg: &DslKernels,
    log: &Mutex<Vec<KernelLaunch>>,
) -> Result<Array> {
    let (m, kd) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[1];
    let (bias, mode) = bind(bias, &[m, n])?;
    let p = matmul_plan(m, n, mode, act)?;
    let mut args: Vec<Arg> = vec![a.into(), b.into(), Arg::from(&bias)];
    if mode == Mode::Suffix {
        args.push((bias.size() as i32).into());
    }
    args.push(out(&[m, n], F32));
    args.extend([m as i32, n as i32, kd as i32].map(Arg::from));
    execute(&p, args, cfg, log)
}

/// The shape of `a @ b` (batch axes broadcast); empty for operands below rank 2.
fn matmul_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    if a.len() < 2 || b.len() < 2 {
        return Vec::new();
    }
    let (ba, bb) = (&a[..a.len() - 2], &b[..b.len() - 2]);
    let n = ba.len().max(bb.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    let mut out: Vec<usize> = (0..n).map(|i| at(ba, i).max(at(bb, i))).collect();
    out.push(a[a.len() - 2]);
    out.push(b[b.len() - 1]);
    out
}

/// What a group runs as.
enum Plan {
    /// `expr` over the group inputs at `used` positions.
    Elementwise(Expr, Vec<usize>),
    /// MLX matmul or conv2d of inputs `(x, w)`, then the bias/activation epilogue.
    HeavyThenEpilogue {
        conv: bool,
        x: String,
        w: String,
        bias: String,
        act: Option<Activation>,
    },
    /// The whole matmul + epilogue as one DSL kernel.
    FusedMatmul {
        a: String,
        b: String,
        bias: String,
        act: Option<Activation>,
    },
    /// MLX's fused scaled-dot-product attention (`k` as given, transposed when
    /// `k_transposed` says the graph transposed it).
    Attention {
        q: String,
        k: String,
        v: String,
        scale: f64,
        k_transposed: bool,
    },
    /// Prologue `expr` (inputs at `used`) on `source`'s shape, reduced over `axes`.
    Reduce {
        expr: Expr,
        used: Vec<usize>,
        red: Red,
        axes: Vec<usize>,
        source_shape: Option<Vec<usize>>,
    },
}

/// A group run by a kernel of this module.
pub(crate) struct BuiltKernel<'g> {
    group: &'g FusedGroup,
    plan: Plan,
    cfg: DslKernels,
    log: Mutex<Vec<KernelLaunch>>,
}

/// A plan for `group`, if this module has a kernel for it (`fused_matmul`: whole-DSL
/// matmul instead of MLX matmul + DSL epilogue).
pub(crate) fn plan<'g>(
    group: &'g FusedGroup,
    fused_matmul: bool,
    cfg: &DslKernels,
) -> Option<BuiltKernel<'g>> {
    if !group.ty.dtype.is_float() {
        return None;
    }
    let plan = match &group.params {
        PatternParams::ElementwiseChain => {
            let ops: Vec<&OpNode> = group.ops.iter().collect();
            let (e, used) = Expr::from_ops(&ops, &group.inputs, &group.id)?;
            Plan::Elementwise(e, used)
        }
        PatternParams::MatmulBias {
            a,
            b,
            bias,
            activation,
        } if fused_matmul => Plan::FusedMatmul {
            a: a.clone(),
            b: b.clone(),
            bias: bias.clone(),
            act: *activation,
        },
        PatternParams::MatmulBias {
            a,
            b,
            bias,
            activation,
        } => Plan::HeavyThenEpilogue {
            conv: false,
            x: a.clone(),
            w: b.clone(),
            bias: bias.clone(),
            act: *activation,
        },
        PatternParams::ConvBiasActivation {
            x,
            w,
            bias,
            activation,
        } => Plan::HeavyThenEpilogue {
            conv: true,
            x: x.clone(),
            w: w.clone(),
            bias: bias.clone(),
            act: Some(*activation),
        },
        PatternParams::Attention {
            q,
            k,
            v,
            scale,
            k_transposed,
        } => Plan::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            scale: *scale,
            k_transposed: *k_transposed,
        },
        PatternParams::HierarchicalReduction {
            op, axes, source, ..
        } => {
            let red = match op {
                ReduceOp::Sum => Red::Sum,
                ReduceOp::Mean => Red::Mean,
                ReduceOp::Max => Red::Max,
                ReduceOp::Min => Red::Min,
                _ => return None,
            };
            let prologue: Vec<&OpNode> = group
                .ops
                .iter()
                .filter(|o| o.kind.category() != OpCategory::Reduction)
                .collect();
            let source_shape = prologue
                .iter()
                .find(|o| &o.id == source)
                .map(|o| o.ty.shape.clone());
            let (expr, used) = Expr::from_ops(&prologue, &group.inputs, source)?;
            Plan::Reduce {
                expr,
                used,
                red,
                axes: axes.clone(),
                source_shape,
            }
        }
        _ => return None,
    };
    Some(BuiltKernel {
        group,
        plan,
        cfg: cfg.clone(),
        log: Mutex::new(Vec::new()),
    })
}

/// The permutation moving a reduction's axes last (`None` when they already are), then the
/// rows and columns of the value so laid out.
type RowsLayout = (Option<Vec<i32>>, usize, usize);

/// How a reduction over `axes` of a `shape` value is laid out.
fn reduce_layout(shape: &[usize], axes: &[usize]) -> RowsLayout {
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let mut reduced = axes.to_vec();
    reduced.sort_unstable();
    let perm: Vec<i32> = kept.iter().chain(&reduced).map(|&a| a as i32).collect();
    let identity = perm.iter().enumerate().all(|(i, &p)| i as i32 == p);
    let cols: usize = reduced.iter().map(|&a| shape[a]).product();
    let rows: usize = kept.iter().map(|&a| shape[a]).product();
    ((!identity).then_some(perm), rows, cols)
}

impl BuiltKernel<'_> {
    fn index(&self, id: &str) -> Result<usize> {
        self.group
            .inputs
            .iter()
            .position(|x| x == id)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "fused group `{}`: `{id}` is not one of its inputs",
                    self.group.id
                ))
            })
    }

    fn input(&self, inputs: &[Array], id: &str) -> Result<Array> {
        let i = self.index(id)?;
        inputs.get(i).cloned().ok_or_else(|| self.missing(i))
    }

    fn missing(&self, i: usize) -> Error {
        Error::InvalidArgument(format!(
            "fused group `{}`: missing input {i}",
            self.group.id
        ))
    }

    fn at<T: Clone>(&self, inputs: &[T], used: &[usize]) -> Result<Vec<T>> {
        used.iter()
            .map(|&i| inputs.get(i).cloned().ok_or_else(|| self.missing(i)))
            .collect()
    }

    fn shape_of(&self, shapes: &[Vec<usize>], id: &str) -> Result<Vec<usize>> {
        let i = self.index(id)?;
        shapes.get(i).cloned().ok_or_else(|| self.missing(i))
    }

    /// The reduced source's shape, and its layout once the reduced axes are last.
    fn reduce_dims(
        &self,
        source_shape: &Option<Vec<usize>>,
        used_shapes: &[Vec<usize>],
        axes: &[usize],
    ) -> Result<(Vec<usize>, RowsLayout)> {
        let shape = match source_shape {
            Some(s) => s.clone(),
            // The source is a group input: reduce it as it is.
            None => used_shapes.first().cloned().unwrap_or_default(),
        };
        let nd = shape.len();
        if axes.is_empty() || axes.iter().any(|&a| a >= nd) {
            return Err(Error::InvalidArgument(format!(
                "fused group `{}`: reduction axes {axes:?} of a rank-{nd} value",
                self.group.id
            )));
        }
        let layout = reduce_layout(&shape, axes);
        Ok((shape, layout))
    }

    /// The launches for inputs of `shapes` (see [`FusedKernel::launches`]).
    fn launches_for(&self, shapes: &[Vec<usize>]) -> Result<Vec<PlannedLaunch>> {
        let g = self.group;
        Ok(match &self.plan {
            Plan::Elementwise(e, used) => {
                vec![elementwise_plan(e, &self.at(shapes, used)?, &g.ty.shape)?.0]
            }
            Plan::HeavyThenEpilogue {
                conv,
                x,
                w,
                bias,
                act,
            } => {
                let heavy = if *conv {
                    g.ty.shape.clone()
                } else {
                    matmul_shape(&self.shape_of(shapes, x)?, &self.shape_of(shapes, w)?)
                };
                let b = self.shape_of(shapes, bias)?;
                let e = Expr::bias_activation(*act);
                vec![elementwise_plan(&e, &[heavy, b], &g.ty.shape)?.0]
            }
            Plan::FusedMatmul { a, b, bias, act } => {
                let (sa, sb) = (self.shape_of(shapes, a)?, self.shape_of(shapes, b)?);
                let sbias = self.shape_of(shapes, bias)?;
                if sa.len() != 2 || sb.len() != 2 || sa[1] != sb[0] {
                    let e = Expr::bias_activation(*act);
                    vec![elementwise_plan(&e, &[matmul_shape(&sa, &sb), sbias], &g.ty.shape)?.0]
                } else {
                    let (m, n) = (sa[0], sb[1]);
                    let mode = mode_of(&sbias, &[m, n]).unwrap_or(Mode::Full);
                    vec![matmul_plan(m, n, mode, *act)?]
                }
            }
            Plan::Attention { .. } => Vec::new(),
            Plan::Reduce {
                expr,
                used,
                red,
                axes,
                source_shape,
            } => {
                let (_, (_, rows, cols)) =
                    self.reduce_dims(source_shape, &self.at(shapes, used)?, axes)?;
                reduce_plan(expr, *red, rows, cols, self.cfg.hardware())?
            }
        })
    }

    fn log(&self) -> &Mutex<Vec<KernelLaunch>> {
        &self.log
    }
}

impl FusedKernel for BuiltKernel<'_> {
    fn name(&self) -> String {
        let how = match &self.plan {
            Plan::Elementwise(..) => "dsl:fused_chain",
            Plan::HeavyThenEpilogue { conv: false, .. } => "mlx:matmul+dsl:epilogue",
            Plan::HeavyThenEpilogue { conv: true, .. } => "mlx:conv2d+dsl:epilogue",
            Plan::FusedMatmul { .. } => "dsl:fused_matmul_epilogue",
            Plan::Reduce { .. } => "dsl:fused_reduce",
            Plan::Attention { .. } => "mlx:fast::scaled_dot_product_attention",
        };
        format!("{how} ({})", self.group.pattern)
    }

    fn launches(&self, input_shapes: &[Vec<usize>]) -> Result<Vec<PlannedLaunch>> {
        self.launches_for(input_shapes)
    }

    fn launched(&self) -> Vec<KernelLaunch> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn run(&self, inputs: &[Array]) -> Result<Array> {
        let g = self.group;
        if inputs.len() != g.inputs.len() {
            return Err(Error::InvalidArgument(format!(
                "fused group `{}` takes {} inputs, got {}",
                g.id,
                g.inputs.len(),
                inputs.len()
            )));
        }
        let (cfg, log) = (&self.cfg, self.log());
        let y = match &self.plan {
            Plan::Elementwise(e, used) => {
                run_elementwise(e, &self.at(inputs, used)?, &g.ty.shape, cfg, log)?
            }
            Plan::HeavyThenEpilogue {
                conv,
                x,
                w,
                bias,
                act,
            } => {
                let (x, w) = (
                    f32_of(&self.input(inputs, x)?)?,
                    f32_of(&self.input(inputs, w)?)?,
                );
                let heavy = if *conv {
                    mlx::conv2d(&x, &w)?
                } else {
                    mlx::matmul(&x, &w)?
                };
                let bias = self.input(inputs, bias)?;
                let e = Expr::bias_activation(*act);
                run_elementwise(&e, &[heavy, bias], &g.ty.shape, cfg, log)?
            }
            Plan::FusedMatmul { a, b, bias, act } => {
                let (a, b) = (
                    f32_of(&self.input(inputs, a)?)?,
                    f32_of(&self.input(inputs, b)?)?,
                );
                let (sa, sb) = (a.shape(), b.shape());
                let bias = self.input(inputs, bias)?;
                if sa.len() != 2 || sb.len() != 2 || sa[1] != sb[0] {
                    // Batched or broadcast products: MLX matmul, DSL epilogue.
                    let mm = mlx::matmul(&a, &b)?;
                    let e = Expr::bias_activation(*act);
                    run_elementwise(&e, &[mm, bias], &g.ty.shape, cfg, log)?
                } else {
                    run_matmul_epilogue((&a, &b, &bias), *act, cfg, log)?
                }
            }
            Plan::Attention {
                q,
                k,
                v,
                scale,
                k_transposed,
            } => {
                let (q, v) = (self.input(inputs, q)?, self.input(inputs, v)?);
                let k = self.input(inputs, k)?;
                // MLX's fused attention takes k as [.., Lk, D]: the graph's transpose is
                // undone rather than computed.
                let k_rows = if *k_transposed { k } else { swap_last_two(&k)? };
                match sdpa(&q, &k_rows, &v, *scale)? {
                    Some(o) => o,
                    // Broadcast leading axes or mixed dtypes: MLX's matmul and softmax.
                    None => attention_formula(&q, &swap_last_two(&k_rows)?, &v, *scale)?,
                }
            }
            Plan::Reduce {
                expr,
                used,
                red,
                axes,
                source_shape,
            } => {
                let ins = self.at(inputs, used)?;
                let shapes: Vec<Vec<usize>> = ins.iter().map(Array::shape).collect();
                let (shape, (perm, rows, cols)) = self.reduce_dims(source_shape, &shapes, axes)?;
                let plan = reduce_plan(expr, *red, rows, cols, cfg.hardware())?;
                // Every prologue input laid out as the source, reduced axes last, row-major.
                let laid: Vec<Array> = ins
                    .iter()
                    .map(|x| {
                        let x = f32_of(x)?;
                        let x = if x.shape() == shape {
                            x
                        } else {
                            mlx::broadcast_to(&x, &shape)?
                        };
                        let x = match &perm {
                            None => x,
                            Some(p) => mlx::transpose(&x, Some(p))?,
                        };
                        mlx::contiguous(&mlx::reshape(&x, &[-1])?)
                    })
                    .collect::<Result<_>>()?;
                let y = run_rows_reduce(&plan, &laid, (rows, cols), cfg, log)?;
                let out_shape: Vec<i32> = g.ty.shape.iter().map(|&d| d as i32).collect();
                mlx::reshape(&y, &out_shape)?
            }
        };
        if y.shape() != g.ty.shape {
            return Err(Error::Runtime {
                kernel: self.name(),
                msg: format!(
                    "result shape {:?}, the graph says {:?}",
                    y.shape(),
                    g.ty.shape
                ),
            });
        }
        if g.ty.dtype == F32 {
            Ok(y)
        } else {
            mlx::astype(&y, g.ty.dtype)
        }
    }
}

/// Matmul + bias (+ activation) as MLX's matmul followed by the DSL epilogue kernel, then
/// whatever [`DslKernels`] offers. `DslKernels` itself runs those groups as one DSL
/// kernel (matmul and epilogue), which measured faster on the CPU executor
/// (`benches/README.md`); on Apple GPUs, where MLX's matmul is a tuned `simdgroup_matrix`
/// kernel, this provider may be the better one (not verified on Apple GPU).
#[derive(Clone, Debug, Default)]
pub struct MlxMatmulEpilogueKernels {
    dsl: DslKernels,
}

impl MlxMatmulEpilogueKernels {
    /// The provider, with the other groups' kernels planned and launched as `dsl`'s.
    pub fn new(dsl: DslKernels) -> MlxMatmulEpilogueKernels {
        MlxMatmulEpilogueKernels { dsl }
    }
}

impl KernelProvider for MlxMatmulEpilogueKernels {
    fn kernel_for<'g>(&self, group: &'g FusedGroup) -> Option<Box<dyn FusedKernel + 'g>> {
        if matches!(group.params, PatternParams::MatmulBias { .. }) {
            return plan(group, false, &self.dsl).map(|k| Box::new(k) as Box<dyn FusedKernel + 'g>);
        }
        self.dsl.kernel_for(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;

    fn ops(json: &str) -> Graph {
        Graph::from_json(json).unwrap()
    }

    #[test]
    fn programs_from_op_lists() {
        let g = ops(
            r#"{"inputs": [{"id": "a", "shape": [4]}, {"id": "b", "shape": [4]}],
            "ops": [{"type": "tt.sub", "id": "s", "inputs": ["a"], "args": {"scalar": 2.0, "reverse": true}},
                    {"type": "tt.mul", "id": "m", "inputs": ["b", "s"]},
                    {"type": "tt.exp", "id": "e", "inputs": ["m"]}]}"#,
        );
        let list: Vec<&OpNode> = g.ops.iter().collect();
        let inputs = vec!["a".to_string(), "b".to_string()];
        let (e, used) = Expr::from_ops(&list, &inputs, "e").unwrap();
        assert_eq!(used, vec![0, 1]);
        assert_eq!(
            e.steps,
            vec![
                (Ew::Sub, vec![Src::Const(2.0), Src::In(0)]),
                (Ew::Mul, vec![Src::In(1), Src::Step(0)]),
                (Ew::Exp, vec![Src::Step(1)]),
            ]
        );
        assert_eq!(e.result, Src::Step(2));
        // Without the op computing `s`, `m` reads a value that is neither an input nor
        // computed before it.
        assert!(Expr::from_ops(&list[1..], &inputs, "e").is_none());
        // `pow` has no exact DSL spelling.
        let g = ops(r#"{"inputs": [{"id": "a", "shape": [4]}],
            "ops": [{"type": "tt.pow", "id": "p", "inputs": ["a"], "args": {"scalar": 2.0}}]}"#);
        let list: Vec<&OpNode> = g.ops.iter().collect();
        assert!(Expr::from_ops(&list, &["a".to_string()], "p").is_none());
    }

    #[test]
    fn suffix_operands_are_read_in_place() -> Result<()> {
        let bias = mlx::zeros(&[1, 5], F32)?;
        assert_eq!(bind(&bias, &[3, 5])?.1, Mode::Suffix);
        let col = mlx::zeros(&[3, 1], F32)?;
        let (m, mode) = bind(&col, &[3, 5])?;
        assert_eq!((mode, m.shape()), (Mode::Full, vec![3, 5]));
        Ok(())
    }
}
