//! Fused groups as kernels written with our own DSL (`tl`), launched like user kernels.
//!
//! [`DslKernels`] covers FMA, GELU (erf and tanh), SwiGLU, softmax over the last axis,
//! LayerNorm and RMSNorm over the last axis, for float results; and, with kernels built at
//! run time from the group's ops ([`super::dsl_build`]), elementwise chains, matmul + bias
//! (+ activation) as one DSL kernel, conv2d + bias + activation as MLX's conv2d followed by
//! a DSL epilogue, hierarchical sum/mean/max/min reductions with their elementwise prologue, and
//! attention as MLX's fused scaled-dot-product attention. Rows longer than 16384 and
//! whatever has no DSL spelling (`pow`, integer results, argmax) are left to the next
//! provider (`MlxKernels`): put `DslKernels` first in `GraphRunner::with_provider`.
//!
//! The provider plans for one chip (the split of long reductions, see
//! [`super::lower::reduce_split`]) and launches on one [`Target`].

use std::sync::{Mutex, OnceLock};

use super::activation;
use super::dsl_build::{execute, planned};
use super::fusion::{FusedGroup, Operand, PatternParams};
use super::lower::{KernelLaunch, KernelRef, PlannedLaunch};
use super::runner::{FusedKernel, KernelProvider};
use crate::array::Array;
use crate::dtype::DType::{self, F32, I32};
use crate::error::{Error, Result};
use crate::mlx;
use crate::opt::options::LaunchOptions;
use crate::opt::HardwareProfile;
use crate::runtime::{self, out, Target};
use crate::tl::{self, JitKernel, Tensor};

/// Longest row the row-wise kernels hold in one block.
const MAX_ROW: usize = 16384;
const BLOCK: usize = 1024;

/// Provides DSL kernels for the patterns listed in the module docs.
#[derive(Clone, Debug)]
pub struct DslKernels {
    hw: HardwareProfile,
    target: Target,
}

impl DslKernels {
    /// Kernels planned for `hw` and launched on `target`.
    pub fn new(hw: HardwareProfile, target: Target) -> DslKernels {
        DslKernels { hw, target }
    }

    /// The chip the launches are planned for.
    pub fn hardware(&self) -> &HardwareProfile {
        &self.hw
    }

    /// Where the kernels run.
    pub fn target(&self) -> Target {
        self.target
    }
}

impl Default for DslKernels {
    /// Planned for [`HardwareProfile::detect`] (the default launch profile when that fails)
    /// and launched on [`Target::Auto`].
    fn default() -> DslKernels {
        let hw = HardwareProfile::detect().unwrap_or_else(|_| LaunchOptions::default().target);
        DslKernels::new(hw, Target::Auto)
    }
}

enum Plan {
    /// `out = f(x0, x1, x2)` elementwise over the flattened result.
    Elementwise(&'static str, [Arg; 3]),
    /// Row-wise over the last axis: `(kind, x, weight, bias, eps)`.
    Rows(RowKind, String, Option<String>, Option<String>, f64),
}

#[derive(Clone)]
enum Arg {
    Value(String),
    Scalar(f64),
}

#[derive(Clone, Copy, PartialEq)]
enum RowKind {
    Softmax,
    LayerNorm,
    RmsNorm,
}

impl KernelProvider for DslKernels {
    fn kernel_for<'g>(&self, group: &'g FusedGroup) -> Option<Box<dyn FusedKernel + 'g>> {
        // Kernels built from the group's op list (chains, epilogues, reductions).
        if let Some(k) = super::dsl_build::plan(group, true, self) {
            return Some(Box::new(k));
        }
        if !group.ty.dtype.is_float() || group.ty.shape.is_empty() {
            return None;
        }
        let val = |s: &String| Arg::Value(s.clone());
        let opnd = |o: &Operand| match o {
            Operand::Value(v) => Arg::Value(v.clone()),
            Operand::Scalar(s) => Arg::Scalar(*s),
        };
        let last = *group.ty.shape.last()?;
        let plan = match &group.params {
            PatternParams::Fma { a, b, c } => Plan::Elementwise("fma", [opnd(a), opnd(b), opnd(c)]),
            PatternParams::Gelu { x, tanh: false } => {
                Plan::Elementwise("gelu", [val(x), Arg::Scalar(0.0), Arg::Scalar(0.0)])
            }
            PatternParams::Gelu { x, tanh: true } => {
                Plan::Elementwise("gelu_tanh", [val(x), Arg::Scalar(0.0), Arg::Scalar(0.0)])
            }
            PatternParams::SwiGlu { gate, up } => {
                Plan::Elementwise("swiglu", [val(gate), val(up), Arg::Scalar(0.0)])
            }
            PatternParams::Softmax { x, axis } if *axis + 1 == group.ty.shape.len() => {
                Plan::Rows(RowKind::Softmax, x.clone(), None, None, 0.0)
            }
            PatternParams::LayerNorm {
                x,
                weight,
                bias,
                eps,
            } => Plan::Rows(
                RowKind::LayerNorm,
                x.clone(),
                weight.clone(),
                bias.clone(),
                *eps,
            ),
            PatternParams::RmsNorm { x, weight, eps } => {
                Plan::Rows(RowKind::RmsNorm, x.clone(), weight.clone(), None, *eps)
            }
            _ => return None,
        };
        if matches!(plan, Plan::Rows(..)) && last > MAX_ROW {
            return None;
        }
        Some(Box::new(DslKernel {
            group,
            plan,
            cfg: self.clone(),
            log: Mutex::new(Vec::new()),
        }))
    }
}

struct DslKernel<'g> {
    group: &'g FusedGroup,
    plan: Plan,
    cfg: DslKernels,
    log: Mutex<Vec<KernelLaunch>>,
}

/// An elementwise body over three operands.
type Ternary = fn(Tensor, Tensor, Tensor) -> Tensor;

fn elementwise_kernel(name: &'static str) -> Result<&'static JitKernel> {
    static KERNELS: OnceLock<Vec<(&'static str, JitKernel)>> = OnceLock::new();
    let all = KERNELS.get_or_init(|| {
        let ops: [(&'static str, Ternary); 4] = [
            ("fma", |a, b, c| tl::fma(a, b, c)),
            ("gelu", |x, _, _| activation::gelu(x)),
            ("gelu_tanh", |x, _, _| activation::gelu_tanh(x)),
            ("swiglu", |g, u, _| activation::silu(g) * u),
        ];
        ops.into_iter()
            .filter_map(|(name, f)| {
                tl::jit(&format!("fused_{name}"), move |k| {
                    let (a, b, c) = (
                        k.ptr(F32, "a_ptr"),
                        k.ptr(F32, "b_ptr"),
                        k.ptr(F32, "c_ptr"),
                    );
                    let o = k.ptr(F32, "out_ptr");
                    let n = k.scalar(I32, "n");
                    let block = k.constexpr("BLOCK");
                    let offs = tl::program_id(0) * block + tl::arange(0, block);
                    let m = offs.lt(n);
                    let r = f(
                        tl::load(a + offs).mask(m),
                        tl::load(b + offs).mask(m),
                        tl::load(c + offs).mask(m),
                    );
                    tl::store(o + offs, r).mask(m);
                })
                .ok()
                .map(|k| (name, k))
            })
            .collect()
    });
    all.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| k)
        .ok_or_else(|| Error::Unsupported(format!("fused kernel `{name}` failed to build")))
}

fn row_kernel(kind: RowKind) -> Result<&'static JitKernel> {
    static KERNELS: OnceLock<Vec<JitKernel>> = OnceLock::new();
    let all = KERNELS.get_or_init(|| {
        [RowKind::Softmax, RowKind::LayerNorm, RowKind::RmsNorm]
            .into_iter()
            .filter_map(|kind| {
                let name = match kind {
                    RowKind::Softmax => "fused_softmax",
                    RowKind::LayerNorm => "fused_layer_norm",
                    RowKind::RmsNorm => "fused_rms_norm",
                };
                tl::jit(name, move |k| {
                    let (x, w, b, o) = (
                        k.ptr(F32, "x_ptr"),
                        k.ptr(F32, "w_ptr"),
                        k.ptr(F32, "b_ptr"),
                        k.ptr(F32, "out_ptr"),
                    );
                    let n = k.scalar(I32, "n_cols");
                    let eps = k.scalar(F32, "eps");
                    let block = k.constexpr("BLOCK");
                    let row = tl::program_id(0);
                    let cols = tl::arange(0, block);
                    let m = cols.lt(n);
                    let base = row * n + cols;
                    let r = match kind {
                        RowKind::Softmax => {
                            let v = tl::load(x + base).mask(m).other(f32::NEG_INFINITY);
                            let e = (v - v.max(0)).exp();
                            e / e.sum(0)
                        }
                        RowKind::LayerNorm | RowKind::RmsNorm => {
                            let v = tl::load(x + base).mask(m).other(0.0);
                            let wv = tl::load(w + cols).mask(m).other(0.0);
                            let centred = if kind == RowKind::LayerNorm {
                                tl::where_(m, v - v.sum(0) / n, 0.0)
                            } else {
                                v
                            };
                            let rstd = tl::rsqrt((centred * centred).sum(0) / n + eps);
                            let y = centred * rstd * wv;
                            if kind == RowKind::LayerNorm {
                                y + tl::load(b + cols).mask(m).other(0.0)
                            } else {
                                y
                            }
                        }
                    };
                    tl::store(o + base, r).mask(m);
                })
                .ok()
            })
            .collect()
    });
    let i = match kind {
        RowKind::Softmax => 0,
        RowKind::LayerNorm => 1,
        RowKind::RmsNorm => 2,
    };
    all.get(i)
        .ok_or_else(|| Error::Unsupported("fused row kernel failed to build".into()))
}

impl DslKernel<'_> {
    /// The one launch: a program per `BLOCK` elements, or per row with the row in one
    /// block.
    fn launch(&self) -> Result<PlannedLaunch> {
        let shape = &self.group.ty.shape;
        let n: usize = shape.iter().product();
        Ok(match &self.plan {
            Plan::Elementwise(name, _) => planned(
                KernelRef::Static(elementwise_kernel(name)?),
                "elementwise",
                [n.div_ceil(BLOCK).max(1), 1, 1],
                &[("BLOCK", BLOCK)],
            ),
            Plan::Rows(kind, ..) => {
                let last = shape.last().copied().unwrap_or(1).max(1);
                planned(
                    KernelRef::Static(row_kernel(*kind)?),
                    "rows",
                    [(n / last).max(1), 1, 1],
                    &[("BLOCK", last.next_power_of_two())],
                )
            }
        })
    }

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
        let a = inputs.get(i).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "fused group `{}`: missing input {i}",
                self.group.id
            ))
        })?;
        f32_of(a)
    }

    fn arg(&self, inputs: &[Array], a: &Arg) -> Result<Array> {
        let shape = &self.group.ty.shape;
        match a {
            Arg::Scalar(s) => mlx::full(shape, *s, F32),
            Arg::Value(id) => {
                let x = self.input(inputs, id)?;
                if &x.shape() == shape {
                    Ok(x)
                } else {
                    // Broadcast operands are materialised at the result shape.
                    mlx::contiguous(&mlx::broadcast_to(&x, shape)?)
                }
            }
        }
    }
}

fn f32_of(a: &Array) -> Result<Array> {
    if a.dtype() == F32 {
        Ok(a.clone())
    } else {
        mlx::astype(a, F32)
    }
}

impl FusedKernel for DslKernel<'_> {
    fn name(&self) -> String {
        let what = match &self.plan {
            Plan::Elementwise(n, _) => format!("dsl:fused_{n}"),
            Plan::Rows(RowKind::Softmax, ..) => "dsl:fused_softmax".into(),
            Plan::Rows(RowKind::LayerNorm, ..) => "dsl:fused_layer_norm".into(),
            Plan::Rows(RowKind::RmsNorm, ..) => "dsl:fused_rms_norm".into(),
        };
        format!("{what} ({})", self.group.pattern)
    }

    fn launches(&self, _: &[Vec<usize>]) -> Result<Vec<PlannedLaunch>> {
        Ok(vec![self.launch()?])
    }

    fn launched(&self) -> Vec<KernelLaunch> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn run(&self, inputs: &[Array]) -> Result<Array> {
        let ty = &self.group.ty;
        let n: usize = ty.shape.iter().product();
        let p = self.launch()?;
        let y = match &self.plan {
            Plan::Elementwise(_, args) => {
                let [a, b, c] = [
                    self.arg(inputs, &args[0])?,
                    self.arg(inputs, &args[1])?,
                    self.arg(inputs, &args[2])?,
                ];
                let args: Vec<runtime::Arg> = vec![
                    runtime::Arg::from(&a),
                    runtime::Arg::from(&b),
                    runtime::Arg::from(&c),
                    out(&ty.shape, F32),
                    runtime::Arg::from(n as i32),
                ];
                execute(&p, args, &self.cfg, &self.log)?
            }
            Plan::Rows(_, x, w, b, eps) => {
                let last = ty.shape.last().copied().unwrap_or(1);
                let x = self.input(inputs, x)?;
                let w = match w {
                    Some(id) => self.input(inputs, id)?,
                    None => mlx::full(&[last], 1.0, F32)?,
                };
                let b = match b {
                    Some(id) => self.input(inputs, id)?,
                    None => mlx::zeros(&[last], F32)?,
                };
                let args: Vec<runtime::Arg> = vec![
                    runtime::Arg::from(&x),
                    runtime::Arg::from(&w),
                    runtime::Arg::from(&b),
                    out(&ty.shape, F32),
                    runtime::Arg::from(last as i32),
                    runtime::Arg::from(*eps as f32),
                ];
                execute(&p, args, &self.cfg, &self.log)?
            }
        };
        if ty.dtype == DType::F32 {
            Ok(y)
        } else {
            mlx::astype(&y, ty.dtype)
        }
    }
}
