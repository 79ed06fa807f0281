//! Fused groups as DSL kernels built at run time from what the match found.
//!
//! The DSL is a runtime builder, so a group's elementwise ops become an expression (a small
//! straight-line program over the group's inputs) and the expression is traced into a
//! kernel once per distinct expression and input layout, then cached:
//!
//! - elementwise chains: one kernel over the flattened result;
//! - matmul + bias (+ activation): a DSL matmul (`tl::dot` over K tiles, as
//!   `examples/matmul.rs`) with the bias and activation applied to the accumulator before
//!   the only store ([`DslKernels`](super::dsl::DslKernels); batched products use MLX's
//!   matmul and the epilogue kernel); or, with [`MlxMatmulEpilogueKernels`], MLX's matmul
//!   followed by the bias and activation as one DSL epilogue kernel;
//! - conv2d + bias + activation: MLX's conv2d, then the DSL epilogue;
//! - attention: MLX's fused scaled-dot-product attention (no epilogue to fuse);
//! - hierarchical reductions: the reduced axes moved last (an MLX transpose, skipped when
//!   they already are), then one DSL kernel per output row that computes the elementwise
//!   prologue on each loaded block and accumulates sum/mean/max/min in f32.
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
use super::fusion::{Activation, FusedGroup, PatternParams};
use super::ops::{OpCategory, OpKind, ReduceOp};
use super::runner::{attention_formula, sdpa, swap_last_two, FusedKernel, KernelProvider};
use super::spec::OpNode;
use crate::array::Array;
use crate::dtype::DType::{F32, I32};
use crate::error::{Error, Result};
use crate::mlx;
use crate::runtime::out;
use crate::tl::{self, libdevice, JitKernel, Tensor};

/// Elements per program of the elementwise and epilogue kernels.
const BLOCK: i64 = 1024;
/// Largest column block of the reduction kernel.
const RED_BLOCK: usize = 1024;

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

/// An input for a kernel over `shape`: read in place, or broadcast by MLX first.
fn bind(x: &Array, shape: &[usize]) -> Result<(Array, Mode)> {
    let x = f32_of(x)?;
    let xs = x.shape();
    if xs == shape {
        return Ok((x, Mode::Full));
    }
    let lead = xs.iter().take_while(|&&d| d == 1).count();
    let core = &xs[lead..];
    if xs.len() <= shape.len() && shape.ends_with(core) {
        return Ok((x, Mode::Suffix));
    }
    Ok((mlx::contiguous(&mlx::broadcast_to(&x, shape)?)?, Mode::Full))
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

fn first(v: Vec<Array>, name: &str) -> Result<Array> {
    v.into_iter().next().ok_or_else(|| Error::Runtime {
        kernel: name.to_string(),
        msg: "no output".into(),
    })
}

/// Runs `expr` elementwise over `shape` on `inputs` (one per kernel input); f32 result.
pub(crate) fn run_elementwise(expr: &Expr, inputs: &[Array], shape: &[usize]) -> Result<Array> {
    if inputs.len() != expr.inputs {
        return Err(Error::InvalidArgument(format!(
            "fused elementwise kernel takes {} inputs, got {}",
            expr.inputs,
            inputs.len()
        )));
    }
    let bound: Vec<(Array, Mode)> = inputs
        .iter()
        .map(|x| bind(x, shape))
        .collect::<Result<_>>()?;
    let modes: Vec<Mode> = bound.iter().map(|b| b.1).collect();
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
    let mut launch = kernel.launch();
    for (a, mode) in &bound {
        launch = launch.arg(a);
        if *mode == Mode::Suffix {
            launch = launch.arg(a.size() as i32);
        }
    }
    let y = launch
        .arg(out(shape, F32))
        .arg(n as i32)
        .grid([n.div_ceil(BLOCK as usize).max(1)])
        .constexpr("BLOCK", BLOCK)
        .run()?;
    first(y, kernel.name())
}

/// The combine of a DSL reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
}

/// Reduces the trailing `cols` elements of every row of the prologue's result.
fn run_rows_reduce(
    expr: &Expr,
    red: Red,
    inputs: &[Array],
    rows: usize,
    cols: usize,
) -> Result<Array> {
    let key = format!("red|{red:?}|{expr:?}");
    let e = expr.clone();
    let kernel = cached("fused_reduce", key, move |name| {
        tl::jit(name, move |k| {
            let ptrs: Vec<Tensor> = (0..e.inputs)
                .map(|i| k.ptr(F32, &format!("in{i}")))
                .collect();
            let o = k.ptr(F32, "out_ptr");
            let n_cols = k.scalar(I32, "n_cols");
            let block = k.constexpr("BLOCK");
            let row = tl::program_id(0);
            let cols = tl::arange(0, block);
            let init = match red {
                Red::Sum | Red::Mean => 0.0f32,
                Red::Max => f32::NEG_INFINITY,
                Red::Min => f32::INFINITY,
            };
            let acc =
                tl::range(0, n_cols, block).fold(tl::full([block], init, F32), |start, acc| {
                    let c = start + cols;
                    let m = c.lt(n_cols);
                    let vals: Vec<Tensor> = ptrs
                        .iter()
                        .map(|&p| tl::load(p + row * n_cols + c).mask(m).other(0.0f32))
                        .collect();
                    let v = tl::where_(m, e.eval(&vals, &|x| tl::full([block], x, F32)), init);
                    match red {
                        Red::Sum | Red::Mean => acc + v,
                        Red::Max => tl::maximum(acc, v),
                        Red::Min => tl::minimum(acc, v),
                    }
                });
            let r = match red {
                Red::Sum => tl::sum(acc, 0),
                Red::Mean => tl::sum(acc, 0) / n_cols,
                Red::Max => tl::max(acc, 0),
                Red::Min => tl::min(acc, 0),
            };
            tl::store(o + row, r);
        })
    })?;
    let mut launch = kernel.launch();
    for a in inputs {
        launch = launch.arg(a);
    }
    let y = launch
        .arg(out(&[rows], F32))
        .arg(cols as i32)
        .grid([rows.max(1)])
        .constexpr(
            "BLOCK",
            cols.next_power_of_two().clamp(16, RED_BLOCK) as i64,
        )
        .run()?;
    first(y, kernel.name())
}

/// A 2-D matmul with the epilogue `expr(acc, bias)` fused before the store.
fn run_matmul_epilogue(
    a: &Array,
    b: &Array,
    bias: &Array,
    act: Option<Activation>,
) -> Result<Array> {
    let (m, kd) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[1];
    let (bias, mode) = bind(bias, &[m, n])?;
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
    let (bm, bn, bk) = (32usize, 32usize, 32usize);
    let mut launch = kernel.launch().arg(a).arg(b).arg(&bias);
    if mode == Mode::Suffix {
        launch = launch.arg(bias.size() as i32);
    }
    let y = launch
        .arg(out(&[m, n], F32))
        .arg(m as i32)
        .arg(n as i32)
        .arg(kd as i32)
        .grid([m.div_ceil(bm).max(1), n.div_ceil(bn).max(1)])
        .constexpr("BM", bm as i64)
        .constexpr("BN", bn as i64)
        .constexpr("BK", bk as i64)
        .run()?;
    first(y, kernel.name())
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
}

/// A plan for `group`, if this module has a kernel for it (`fused_matmul`: whole-DSL
/// matmul instead of MLX matmul + DSL epilogue).
pub(crate) fn plan<'g>(group: &'g FusedGroup, fused_matmul: bool) -> Option<BuiltKernel<'g>> {
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
    Some(BuiltKernel { group, plan })
}

impl BuiltKernel<'_> {
    fn input(&self, inputs: &[Array], id: &str) -> Result<Array> {
        let i = self
            .group
            .inputs
            .iter()
            .position(|x| x == id)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "fused group `{}`: `{id}` is not one of its inputs",
                    self.group.id
                ))
            })?;
        inputs.get(i).cloned().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "fused group `{}`: missing input {i}",
                self.group.id
            ))
        })
    }

    fn at(&self, inputs: &[Array], used: &[usize]) -> Result<Vec<Array>> {
        used.iter()
            .map(|&i| {
                inputs.get(i).cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "fused group `{}`: missing input {i}",
                        self.group.id
                    ))
                })
            })
            .collect()
    }

    fn reduce(
        &self,
        expr: &Expr,
        ins: Vec<Array>,
        red: Red,
        axes: &[usize],
        source_shape: &[usize],
    ) -> Result<Array> {
        let nd = source_shape.len();
        if axes.is_empty() || axes.iter().any(|&a| a >= nd) {
            return Err(Error::InvalidArgument(format!(
                "fused group `{}`: reduction axes {axes:?} of a rank-{nd} value",
                self.group.id
            )));
        }
        let kept: Vec<usize> = (0..nd).filter(|a| !axes.contains(a)).collect();
        let mut reduced = axes.to_vec();
        reduced.sort_unstable();
        let perm: Vec<i32> = kept.iter().chain(&reduced).map(|&a| a as i32).collect();
        let identity = perm.iter().enumerate().all(|(i, &p)| i as i32 == p);
        let cols: usize = reduced.iter().map(|&a| source_shape[a]).product();
        let rows: usize = kept.iter().map(|&a| source_shape[a]).product();
        // Every prologue input laid out as the source, reduced axes last, row-major.
        let laid: Vec<Array> = ins
            .iter()
            .map(|x| {
                let x = f32_of(x)?;
                let x = if x.shape() == source_shape {
                    x
                } else {
                    mlx::broadcast_to(&x, source_shape)?
                };
                let x = if identity {
                    x
                } else {
                    mlx::transpose(&x, Some(&perm))?
                };
                mlx::contiguous(&mlx::reshape(&x, &[-1])?)
            })
            .collect::<Result<_>>()?;
        let y = run_rows_reduce(expr, red, &laid, rows, cols)?;
        let shape: Vec<i32> = self.group.ty.shape.iter().map(|&d| d as i32).collect();
        mlx::reshape(&y, &shape)
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
        let y = match &self.plan {
            Plan::Elementwise(e, used) => run_elementwise(e, &self.at(inputs, used)?, &g.ty.shape)?,
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
                run_elementwise(&Expr::bias_activation(*act), &[heavy, bias], &g.ty.shape)?
            }
            Plan::FusedMatmul { a, b, bias, act } => {
                let (a, b) = (
                    f32_of(&self.input(inputs, a)?)?,
                    f32_of(&self.input(inputs, b)?)?,
                );
                let (sa, sb) = (a.shape(), b.shape());
                if sa.len() != 2 || sb.len() != 2 || sa[1] != sb[0] {
                    // Batched or broadcast products: MLX matmul, DSL epilogue.
                    let bias = self.input(inputs, bias)?;
                    let mm = mlx::matmul(&a, &b)?;
                    run_elementwise(&Expr::bias_activation(*act), &[mm, bias], &g.ty.shape)?
                } else {
                    run_matmul_epilogue(&a, &b, &self.input(inputs, bias)?, *act)?
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
                let shape = match source_shape {
                    Some(s) => s.clone(),
                    // The source is a group input: reduce it as it is.
                    None => ins.first().map(Array::shape).unwrap_or_default(),
                };
                self.reduce(expr, ins, *red, axes, &shape)?
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
/// whatever [`DslKernels`](super::dsl::DslKernels) offers. `DslKernels` itself runs those
/// groups as one DSL kernel (matmul and epilogue), which measured faster on the CPU
/// executor (`benches/README.md`); on Apple GPUs, where MLX's matmul is a tuned
/// `simdgroup_matrix` kernel, this provider may be the better one (not verified on Apple
/// GPU).
#[derive(Clone, Copy, Debug, Default)]
pub struct MlxMatmulEpilogueKernels;

impl KernelProvider for MlxMatmulEpilogueKernels {
    fn kernel_for<'g>(&self, group: &'g FusedGroup) -> Option<Box<dyn FusedKernel + 'g>> {
        if matches!(group.params, PatternParams::MatmulBias { .. }) {
            return plan(group, false).map(|k| Box::new(k) as Box<dyn FusedKernel + 'g>);
        }
        super::dsl::DslKernels.kernel_for(group)
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
