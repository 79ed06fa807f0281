//! Running op graphs on MLX arrays, unfused (op by op) and fused (one kernel per group),
//! and comparing the two.
//!
//! A fused group runs through a [`FusedKernel`] chosen by the first [`KernelProvider`]
//! that offers one. [`MlxKernels`] has one for every group: MLX built-ins where MLX has the
//! fused op (softmax, layer norm, RMS norm) and composite MLX
//! evaluations derived from the roles the match found (FMA, GELU, SwiGLU, epilogues,
//! reductions), so a wrong match shows up as a numerical difference. Kernels written with
//! the DSL ([`super::dsl::DslKernels`], [`super::dsl_build::MlxMatmulEpilogueKernels`]) plug in
//! as providers placed in front ([`GraphRunner::with_provider`]).

use std::collections::{BTreeMap, HashMap};
use std::f64::consts::FRAC_1_SQRT_2;

use serde::Serialize;

use super::activation::{GELU_TANH_CUBIC, SQRT_2_OVER_PI};
use super::fusion::{Activation, FusedGraph, FusedGroup, Node, Operand, PatternParams};
use super::lower::{KernelLaunch, PlannedLaunch};
use super::ops::{OpKind, ReduceOp};
use super::spec::{Graph, GraphInput, OpNode, TensorType};
use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mlx;

/// One executable implementation of a fused group.
pub trait FusedKernel {
    /// What runs (`mlx:softmax`, `composite`, ...), for reports.
    fn name(&self) -> String;
    /// Computes the group's result from its inputs, given in `FusedGroup::inputs` order.
    fn run(&self, inputs: &[Array]) -> Result<Array>;
    /// The DSL kernel launches [`FusedKernel::run`] makes for inputs of these shapes (in
    /// `FusedGroup::inputs` order); empty when MLX computes the group.
    fn launches(&self, input_shapes: &[Vec<usize>]) -> Result<Vec<PlannedLaunch>> {
        let _ = input_shapes;
        Ok(Vec::new())
    }
    /// The DSL kernel launches made by the runs so far, in order.
    fn launched(&self) -> Vec<KernelLaunch> {
        Vec::new()
    }
}

/// Offers kernels for groups; the first provider with an answer wins.
pub trait KernelProvider {
    /// A kernel for `group`, or `None` to let the next provider decide.
    fn kernel_for<'g>(&self, group: &'g FusedGroup) -> Option<Box<dyn FusedKernel + 'g>>;
}

/// MLX built-ins and composite MLX evaluations; has a kernel for every group.
#[derive(Clone, Copy, Debug, Default)]
pub struct MlxKernels;

impl KernelProvider for MlxKernels {
    fn kernel_for<'g>(&self, group: &'g FusedGroup) -> Option<Box<dyn FusedKernel + 'g>> {
        Some(match group.params {
            PatternParams::ElementwiseChain => Box::new(CompositeKernel { group }),
            _ => Box::new(PatternKernel { group }),
        })
    }
}

/// Runs a group's original ops one after another inside one lazy MLX graph.
pub struct CompositeKernel<'g> {
    /// The group.
    pub group: &'g FusedGroup,
}

impl FusedKernel for CompositeKernel<'_> {
    fn name(&self) -> String {
        "mlx:composite".into()
    }

    fn run(&self, inputs: &[Array]) -> Result<Array> {
        let mut env = bind_inputs(self.group, inputs)?;
        eval_ops(&self.group.ops, &mut env)?;
        take(&env, &self.group.id, &self.group.ty)
    }
}

/// Computes a group from the roles its match found (see the module docs).
pub struct PatternKernel<'g> {
    /// The group.
    pub group: &'g FusedGroup,
}

impl FusedKernel for PatternKernel<'_> {
    fn name(&self) -> String {
        let how = match self.group.params {
            PatternParams::Softmax { .. } => "mlx:softmax",
            PatternParams::LayerNorm { .. } => "mlx:fast::layer_norm",
            PatternParams::RmsNorm { .. } => "mlx:fast::rms_norm",
            _ => "mlx:formula",
        };
        format!("{how} ({})", self.group.pattern)
    }

    fn run(&self, inputs: &[Array]) -> Result<Array> {
        let g = self.group;
        let env = bind_inputs(g, inputs)?;
        let get = |id: &str| -> Result<Array> {
            env.get(id).cloned().ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "fused group `{}`: `{id}` is not one of its inputs",
                    g.id
                ))
            })
        };
        let dt = if g.ty.dtype.is_float() {
            g.ty.dtype
        } else {
            DType::F32
        };
        let out = match &g.params {
            PatternParams::Fma { a, b, c } => {
                let o = |x: &Operand| match x {
                    Operand::Value(id) => get(id),
                    Operand::Scalar(s) => scalar(*s, dt),
                };
                mlx::add(&mlx::multiply(&o(a)?, &o(b)?)?, &o(c)?)?
            }
            PatternParams::ElementwiseChain => CompositeKernel { group: g }.run(inputs)?,
            PatternParams::Gelu { x, tanh } => {
                let act = if *tanh {
                    Activation::GeluTanh
                } else {
                    Activation::Gelu
                };
                activate(&get(x)?, act)?
            }
            PatternParams::LayerNorm {
                x,
                weight,
                bias,
                eps,
            } => {
                let w = weight.as_deref().map(get).transpose()?;
                let b = bias.as_deref().map(get).transpose()?;
                mlx::layer_norm(&get(x)?, w.as_ref(), b.as_ref(), *eps as f32)?
            }
            PatternParams::RmsNorm { x, weight, eps } => {
                let w = weight.as_deref().map(get).transpose()?;
                mlx::rms_norm(&get(x)?, w.as_ref(), *eps as f32)?
            }
            PatternParams::SwiGlu { gate, up } => {
                let g = get(gate)?;
                mlx::multiply(&activate(&g, Activation::Silu)?, &get(up)?)?
            }
            PatternParams::Softmax { x, axis } => mlx::softmax(&get(x)?, &[*axis as i32], true)?,
            PatternParams::MatmulBias {
                a,
                b,
                bias,
                activation,
            } => {
                let y = mlx::add(&mlx::matmul(&get(a)?, &get(b)?)?, &get(bias)?)?;
                match activation {
                    Some(act) => activate(&y, *act)?,
                    None => y,
                }
            }
            PatternParams::ConvBiasActivation {
                x,
                w,
                bias,
                activation,
            } => activate(
                &mlx::add(&mlx::conv2d(&get(x)?, &get(w)?)?, &get(bias)?)?,
                *activation,
            )?,
            PatternParams::Attention {
                q,
                k,
                v,
                scale,
                k_transposed,
            } => {
                let k = get(k)?;
                let kt = if *k_transposed { swap_last_two(&k)? } else { k };
                attention_formula(&get(q)?, &kt, &get(v)?, *scale)?
            }
            PatternParams::HierarchicalReduction {
                op, axes, source, ..
            } => {
                let mut env = env.clone();
                let prologue: Vec<OpNode> = g
                    .ops
                    .iter()
                    .filter(|o| !matches!(o.kind.category(), super::ops::OpCategory::Reduction))
                    .cloned()
                    .collect();
                eval_ops(&prologue, &mut env)?;
                let src = env.get(source).cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!("fused group `{}`: no value `{source}`", g.id))
                })?;
                let axes: Vec<i32> = axes.iter().map(|&a| a as i32).collect();
                let r = reduce(*op, &src, Some(&axes), true)?;
                let shape: Vec<i32> = g.ty.shape.iter().map(|&d| d as i32).collect();
                mlx::reshape(&r, &shape)?
            }
        };
        conform(out, &g.ty, &g.id)
    }
}

fn bind_inputs(g: &FusedGroup, inputs: &[Array]) -> Result<HashMap<String, Array>> {
    if inputs.len() != g.inputs.len() {
        return Err(Error::InvalidArgument(format!(
            "fused group `{}` takes {} inputs, got {}",
            g.id,
            g.inputs.len(),
            inputs.len()
        )));
    }
    Ok(g.inputs
        .iter()
        .cloned()
        .zip(inputs.iter().cloned())
        .collect())
}

fn take(env: &HashMap<String, Array>, id: &str, ty: &TensorType) -> Result<Array> {
    let a = env
        .get(id)
        .cloned()
        .ok_or_else(|| Error::InvalidArgument(format!("no value `{id}` was computed")))?;
    conform(a, ty, id)
}

/// Checks the shape MLX produced and casts to the dtype the graph declared (MLX and the
/// graph agree on promotion except for scalar operands, where MLX may widen).
fn conform(a: Array, ty: &TensorType, id: &str) -> Result<Array> {
    if a.shape() != ty.shape {
        return Err(Error::Mlx(format!(
            "`{id}`: MLX produced shape {:?}, the graph says {:?}",
            a.shape(),
            ty.shape
        )));
    }
    if a.dtype() != ty.dtype {
        mlx::astype(&a, ty.dtype)
    } else {
        Ok(a)
    }
}

fn scalar(v: f64, dtype: DType) -> Result<Array> {
    mlx::full(&[], v, dtype)
}

/// `softmax(q @ kt * scale) @ v` with MLX's matmul and softmax.
pub(crate) fn attention_formula(q: &Array, kt: &Array, v: &Array, scale: f64) -> Result<Array> {
    let s = mlx::matmul(q, kt)?;
    let s = mlx::multiply(&s, &scalar(scale, s.dtype())?)?;
    mlx::matmul(&mlx::softmax(&s, &[-1], true)?, v)
}

/// MLX's fused attention over `[.., L, D]` operands with equal leading axes (seen as
/// `[batch, 1 head, L, D]`); `None` when the shapes or dtypes do not fit it.
pub(crate) fn sdpa(q: &Array, k: &Array, v: &Array, scale: f64) -> Result<Option<Array>> {
    let (sq, sk, sv) = (q.shape(), k.shape(), v.shape());
    let n = sq.len();
    let fits = n >= 2
        && sk.len() == n
        && sv.len() == n
        && sq[..n - 2] == sk[..n - 2]
        && sq[..n - 2] == sv[..n - 2]
        && sq[n - 1] == sk[n - 1]
        && sk[n - 2] == sv[n - 2]
        && q.dtype().is_float()
        && q.dtype() == k.dtype()
        && q.dtype() == v.dtype();
    if !fits {
        return Ok(None);
    }
    let batch: usize = sq[..n - 2].iter().product();
    let four = |a: &Array, s: &[usize]| {
        mlx::reshape(a, &[batch as i32, 1, s[n - 2] as i32, s[n - 1] as i32])
    };
    let o = mlx::scaled_dot_product_attention(
        &four(q, &sq)?,
        &four(k, &sk)?,
        &four(v, &sv)?,
        scale as f32,
    )?;
    let mut shape: Vec<i32> = sq[..n - 1].iter().map(|&d| d as i32).collect();
    shape.push(sv[n - 1] as i32);
    Ok(Some(mlx::reshape(&o, &shape)?))
}

pub(crate) fn swap_last_two(a: &Array) -> Result<Array> {
    let n = a.ndim();
    if n < 2 {
        return Ok(a.clone());
    }
    let mut perm: Vec<i32> = (0..n as i32).collect();
    perm.swap(n - 2, n - 1);
    mlx::transpose(a, Some(&perm))
}

fn float_dtype(a: &Array) -> DType {
    if a.dtype().is_float() {
        a.dtype()
    } else {
        DType::F32
    }
}

/// An activation on MLX arrays.
pub fn activate(x: &Array, act: Activation) -> Result<Array> {
    let dt = float_dtype(x);
    let half = || scalar(0.5, dt);
    let one = || scalar(1.0, dt);
    match act {
        Activation::Relu => mlx::maximum(x, &scalar(0.0, x.dtype())?),
        Activation::Sigmoid => mlx::sigmoid(x),
        Activation::Tanh => mlx::tanh(x),
        Activation::Silu => mlx::multiply(x, &mlx::sigmoid(x)?),
        Activation::Gelu => {
            let e = mlx::erf(&mlx::multiply(x, &scalar(FRAC_1_SQRT_2, dt)?)?)?;
            mlx::multiply(&mlx::multiply(x, &half()?)?, &mlx::add(&e, &one()?)?)
        }
        Activation::GeluTanh => {
            let x3 = mlx::multiply(&mlx::square(x)?, x)?;
            let inner = mlx::add(x, &mlx::multiply(&x3, &scalar(GELU_TANH_CUBIC, dt)?)?)?;
            let t = mlx::tanh(&mlx::multiply(&inner, &scalar(SQRT_2_OVER_PI, dt)?)?)?;
            mlx::multiply(&mlx::multiply(x, &half()?)?, &mlx::add(&t, &one()?)?)
        }
    }
}

fn reduce(op: ReduceOp, x: &Array, axes: Option<&[i32]>, keep: bool) -> Result<Array> {
    match op {
        ReduceOp::Sum => mlx::sum(x, axes, keep),
        ReduceOp::Mean => mlx::mean(x, axes, keep),
        ReduceOp::Max => mlx::max(x, axes, keep),
        ReduceOp::Min => mlx::min(x, axes, keep),
        ReduceOp::Prod => mlx::prod(x, axes, keep),
        ReduceOp::Any => mlx::any(x, axes, keep),
        ReduceOp::All => mlx::all(x, axes, keep),
        ReduceOp::Argmax | ReduceOp::Argmin => {
            let axis = match axes {
                Some([a]) => Some(*a),
                Some(_) if x.ndim() == 1 => Some(0),
                None => None,
                Some(more) => {
                    return Err(Error::InvalidArgument(format!(
                        "{} takes one axis, got {more:?}",
                        op.name()
                    )))
                }
            };
            if op == ReduceOp::Argmax {
                mlx::argmax(x, axis, keep)
            } else {
                mlx::argmin(x, axis, keep)
            }
        }
    }
}

/// Runs one op with MLX's ops (the unfused reference semantics).
pub fn run_op(op: &OpNode, inputs: &[&Array]) -> Result<Array> {
    let x = inputs
        .first()
        .copied()
        .ok_or_else(|| Error::InvalidArgument(format!("op `{}` has no inputs", op.id)))?;
    let dt = float_dtype(x);
    // The second operand of a binary op: the other input, or the scalar (on the left
    // when `reverse`).
    let pair = || -> Result<(Array, Array)> {
        match (inputs.get(1), op.args.scalar) {
            (Some(y), _) => Ok((x.clone(), (*y).clone())),
            (None, Some(s)) => {
                let sdt = if x.dtype().is_float() || s.fract() != 0.0 {
                    dt
                } else {
                    x.dtype()
                };
                let s = scalar(s, sdt)?;
                Ok(if op.args.reverse {
                    (s, x.clone())
                } else {
                    (x.clone(), s)
                })
            }
            (None, None) => Err(Error::InvalidArgument(format!(
                "op `{}` ({}) needs a second operand",
                op.id, op.kind
            ))),
        }
    };
    let axes: Option<Vec<i32>> = op
        .args
        .axes
        .as_ref()
        .map(|a| a.iter().map(|&d| d as i32).collect());
    let out = match op.kind {
        OpKind::Add => pair().and_then(|(a, b)| mlx::add(&a, &b))?,
        OpKind::Sub => pair().and_then(|(a, b)| mlx::subtract(&a, &b))?,
        OpKind::Mul => pair().and_then(|(a, b)| mlx::multiply(&a, &b))?,
        OpKind::Div => pair().and_then(|(a, b)| mlx::divide(&a, &b))?,
        OpKind::Maximum => pair().and_then(|(a, b)| mlx::maximum(&a, &b))?,
        OpKind::Minimum => pair().and_then(|(a, b)| mlx::minimum(&a, &b))?,
        OpKind::Pow => pair().and_then(|(a, b)| mlx::power(&a, &b))?,
        OpKind::Fma => mlx::add(&mlx::multiply(x, inputs[1])?, inputs[2])?,
        OpKind::Exp => mlx::exp(x)?,
        OpKind::Exp2 => mlx::power(&scalar(2.0, dt)?, x)?,
        OpKind::Log => mlx::log(x)?,
        OpKind::Log2 => mlx::log2(x)?,
        OpKind::Sqrt => mlx::sqrt(x)?,
        OpKind::Rsqrt => mlx::rsqrt(x)?,
        OpKind::Abs => mlx::abs(x)?,
        OpKind::Neg => mlx::negative(x)?,
        OpKind::Sin => mlx::sin(x)?,
        OpKind::Cos => mlx::cos(x)?,
        OpKind::Erf => mlx::erf(x)?,
        OpKind::Floor => mlx::floor(x)?,
        OpKind::Ceil => mlx::ceil(x)?,
        OpKind::Square => mlx::square(x)?,
        OpKind::Sigmoid => mlx::sigmoid(x)?,
        OpKind::Tanh => mlx::tanh(x)?,
        OpKind::Relu => activate(x, Activation::Relu)?,
        OpKind::Gelu => activate(x, Activation::Gelu)?,
        OpKind::Silu => activate(x, Activation::Silu)?,
        OpKind::Reduce
        | OpKind::Sum
        | OpKind::Mean
        | OpKind::Max
        | OpKind::Min
        | OpKind::Argmax
        | OpKind::Argmin
        | OpKind::Any
        | OpKind::All => {
            let r = op.args.reduce_op.unwrap_or(ReduceOp::Sum);
            reduce(r, x, axes.as_deref(), op.args.keep_dims)?
        }
        OpKind::Dot => mlx::matmul(x, inputs[1])?,
        OpKind::Conv2d => mlx::conv2d(x, inputs[1])?,
        OpKind::Trans => match &op.args.perm {
            Some(p) => {
                let p: Vec<i32> = p.iter().map(|&d| d as i32).collect();
                mlx::transpose(x, Some(&p))?
            }
            None => swap_last_two(x)?,
        },
        OpKind::Softmax => {
            let axis = op.args.softmax_axis(x.ndim()) as i32;
            mlx::softmax(x, &[axis], true)?
        }
        OpKind::LayerNorm => mlx::layer_norm(
            x,
            inputs.get(1).copied(),
            inputs.get(2).copied(),
            op.args.eps.unwrap_or(1e-5) as f32,
        )?,
        OpKind::RmsNorm => mlx::rms_norm(
            x,
            inputs.get(1).copied(),
            op.args.eps.unwrap_or(1e-5) as f32,
        )?,
        OpKind::Reshape => {
            let s: Vec<i32> = op.ty.shape.iter().map(|&d| d as i32).collect();
            mlx::reshape(x, &s)?
        }
        OpKind::Cast => mlx::astype(x, op.ty.dtype)?,
    };
    conform(out, &op.ty, &op.id)
}

fn eval_ops(ops: &[OpNode], env: &mut HashMap<String, Array>) -> Result<()> {
    for op in ops {
        let ins: Vec<Array> = op
            .inputs
            .iter()
            .map(|r| {
                env.get(r).cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!("op `{}`: value `{r}` is not available", op.id))
                })
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&Array> = ins.iter().collect();
        let out = run_op(op, &refs)?;
        env.insert(op.id.clone(), out);
    }
    Ok(())
}

fn check_feeds(
    inputs: &[GraphInput],
    feeds: &HashMap<String, Array>,
) -> Result<HashMap<String, Array>> {
    let mut env = HashMap::new();
    for i in inputs {
        let a = feeds.get(&i.id).ok_or_else(|| {
            Error::InvalidArgument(format!("graph input `{}` was not given", i.id))
        })?;
        if a.shape() != i.ty.shape {
            return Err(Error::InvalidArgument(format!(
                "graph input `{}`: expected shape {:?}, got {:?}",
                i.id,
                i.ty.shape,
                a.shape()
            )));
        }
        let a = if a.dtype() != i.ty.dtype {
            mlx::astype(a, i.ty.dtype)?
        } else {
            a.clone()
        };
        env.insert(i.id.clone(), a);
    }
    Ok(env)
}

/// Random inputs for a graph: standard normal floats, small integers, random bools.
/// The same seed gives the same arrays.
pub fn random_inputs(inputs: &[GraphInput], seed: u64) -> Result<HashMap<String, Array>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| {
            let s = seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
            let shape = &inp.ty.shape;
            let a = match inp.ty.dtype {
                d if d.is_float() => mlx::random::normal(shape, d, s)?,
                DType::Bool => {
                    let u = mlx::random::uniform(shape, DType::F32, 0.0, 2.0, s)?;
                    mlx::astype(&mlx::floor(&u)?, DType::Bool)?
                }
                d => {
                    let u = mlx::random::uniform(shape, DType::F32, -8.0, 8.0, s)?;
                    mlx::astype(&mlx::floor(&u)?, d)?
                }
            };
            Ok((inp.id.clone(), a))
        })
        .collect()
}

/// Runs graphs with a list of kernel providers.
pub struct GraphRunner {
    providers: Vec<Box<dyn KernelProvider>>,
}

impl Default for GraphRunner {
    fn default() -> Self {
        GraphRunner::new()
    }
}

/// Which kernel ran a fused group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelChoice {
    /// Group id.
    pub group: String,
    /// Pattern name.
    pub pattern: String,
    /// Kernel name.
    pub kernel: String,
    /// The DSL kernel launches that ran, in order; empty when MLX computed the group.
    pub launches: Vec<KernelLaunch>,
}

impl GraphRunner {
    /// A runner with [`MlxKernels`] only.
    pub fn new() -> GraphRunner {
        GraphRunner {
            providers: vec![Box::new(MlxKernels)],
        }
    }

    /// Puts `p` in front of the providers already there.
    pub fn with_provider(mut self, p: Box<dyn KernelProvider>) -> GraphRunner {
        self.providers.insert(0, p);
        self
    }

    /// The kernel of the first provider that has one for `g`.
    pub fn kernel_for<'g>(&self, g: &'g FusedGroup) -> Result<Box<dyn FusedKernel + 'g>> {
        self.providers
            .iter()
            .find_map(|p| p.kernel_for(g))
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "no kernel for fused group `{}` ({})",
                    g.id, g.pattern
                ))
            })
    }

    /// Runs the unfused graph op by op; returns the outputs by id (lazy arrays).
    pub fn run(
        &self,
        graph: &Graph,
        feeds: &HashMap<String, Array>,
    ) -> Result<BTreeMap<String, Array>> {
        let mut env = check_feeds(&graph.inputs, feeds)?;
        eval_ops(&graph.ops, &mut env)?;
        graph
            .outputs
            .iter()
            .map(|o| {
                Ok((
                    o.clone(),
                    env.get(o).cloned().ok_or_else(|| {
                        Error::InvalidArgument(format!("output `{o}` was not computed"))
                    })?,
                ))
            })
            .collect()
    }

    /// Runs a fused graph; returns the outputs by id and the kernel chosen per group.
    pub fn run_fused(
        &self,
        graph: &FusedGraph,
        feeds: &HashMap<String, Array>,
    ) -> Result<(BTreeMap<String, Array>, Vec<KernelChoice>)> {
        let mut env = check_feeds(&graph.inputs, feeds)?;
        let mut choices = Vec::new();
        for node in &graph.nodes {
            let ins: Vec<Array> = node
                .inputs()
                .iter()
                .map(|r| {
                    env.get(r).cloned().ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "`{}`: value `{r}` is not available",
                            node.id()
                        ))
                    })
                })
                .collect::<Result<_>>()?;
            let out = match node {
                Node::Op(op) => run_op(op, &ins.iter().collect::<Vec<_>>())?,
                Node::Group(g) => {
                    let k = self.kernel_for(g)?;
                    let out = k.run(&ins)?;
                    choices.push(KernelChoice {
                        group: g.id.clone(),
                        pattern: g.pattern.to_string(),
                        kernel: k.name(),
                        launches: k.launched(),
                    });
                    out
                }
            };
            env.insert(node.id().to_string(), out);
        }
        let outs = graph
            .outputs
            .iter()
            .map(|o| {
                Ok((
                    o.clone(),
                    env.get(o).cloned().ok_or_else(|| {
                        Error::InvalidArgument(format!("output `{o}` was not computed"))
                    })?,
                ))
            })
            .collect::<Result<_>>()?;
        Ok((outs, choices))
    }

    /// Runs both and compares every output: `|fused - unfused| <= atol + rtol * |unfused|`
    /// elementwise (NaN equals NaN).
    pub fn compare(
        &self,
        graph: &Graph,
        fused: &FusedGraph,
        feeds: &HashMap<String, Array>,
        rtol: f64,
        atol: f64,
    ) -> Result<Comparison> {
        let reference = self.run(graph, feeds)?;
        let (got, kernels) = self.run_fused(fused, feeds)?;
        let mut outputs = Vec::new();
        for (id, want) in &reference {
            let have = got.get(id).ok_or_else(|| {
                Error::InvalidArgument(format!("fused graph lacks output `{id}`"))
            })?;
            let w = mlx::astype(want, DType::F64)?.to_vec::<f64>()?;
            let h = mlx::astype(have, DType::F64)?.to_vec::<f64>()?;
            let mut max_abs: f64 = 0.0;
            let mut bad = 0usize;
            for (a, b) in h.iter().zip(&w) {
                // NaN equals NaN; infinities of one sign are equal.
                if (a.is_nan() && b.is_nan()) || a == b {
                    continue;
                }
                let d = (a - b).abs();
                // NaN on one side only counts as a mismatch.
                let within = d <= atol + rtol * b.abs();
                if !within {
                    bad += 1;
                }
                if d.is_finite() {
                    max_abs = max_abs.max(d);
                } else if a != b {
                    max_abs = f64::INFINITY;
                }
            }
            outputs.push(OutputDiff {
                id: id.clone(),
                elements: w.len(),
                max_abs_diff: max_abs,
                mismatches: bad,
            });
        }
        Ok(Comparison {
            outputs,
            kernels,
            rtol,
            atol,
        })
    }
}

/// How one output differed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputDiff {
    /// Output id.
    pub id: String,
    /// Elements compared.
    pub elements: usize,
    /// Largest absolute difference.
    pub max_abs_diff: f64,
    /// Elements outside the tolerance.
    pub mismatches: usize,
}

/// Fused vs unfused results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Per output.
    pub outputs: Vec<OutputDiff>,
    /// Kernel per fused group.
    pub kernels: Vec<KernelChoice>,
    /// Relative tolerance used.
    pub rtol: f64,
    /// Absolute tolerance used.
    pub atol: f64,
}

impl Comparison {
    /// Every element of every output within tolerance.
    pub fn all_close(&self) -> bool {
        self.outputs.iter().all(|o| o.mismatches == 0)
    }
}
