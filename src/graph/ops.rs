//! The op vocabulary of op graphs: names, arity, categories, typed arguments and shape
//! inference. One table (the `op_kinds!` invocation below: [`OpKind::name`],
//! [`OpKind::arity`], [`OpKind::category`]) declares each op's properties so the validator,
//! the layout planner, the fusion patterns and the runner never re-derive them.

use std::fmt;

use serde_json::{Map, Value};

use crate::dtype::DType;

/// What an op does to memory, which decides its layout and which fusions it can join.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpCategory {
    /// Elementwise with broadcasting (unary, binary, ternary).
    Elementwise,
    /// A reduction over some axes.
    Reduction,
    /// Matrix product.
    Matmul,
    /// Convolution.
    Conv,
    /// Axis permutation.
    Transpose,
    /// Row-wise composite ops (softmax, norms): a reduction and an elementwise pass.
    RowWise,
    /// Reshape and cast: no arithmetic.
    Shape,
}

macro_rules! op_kinds {
    ($($(#[$doc:meta])* $v:ident => $name:literal, $arity:expr, $cat:ident;)*) => {
        /// An op type. The JSON name is `tt.<name>`; see [`OpKind::parse`] for aliases.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind { $($(#[$doc])* $v,)* }

        impl OpKind {
            /// Every op kind.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$v,)*];

            /// Canonical JSON name (`tt.sum`).
            pub fn name(self) -> &'static str {
                match self { $(OpKind::$v => concat!("tt.", $name),)* }
            }

            /// Operand count: `(min, max)`.
            pub fn arity(self) -> (usize, usize) {
                match self { $(OpKind::$v => $arity,)* }
            }

            /// Memory behaviour.
            pub fn category(self) -> OpCategory {
                match self { $(OpKind::$v => OpCategory::$cat,)* }
            }

            fn base_name(self) -> &'static str {
                match self { $(OpKind::$v => $name,)* }
            }
        }
    };
}

// Binary elementwise ops take one operand when `args.scalar` supplies the other.
op_kinds! {
    /// `a + b`.
    Add => "add", (1, 2), Elementwise;
    /// `a - b`.
    Sub => "sub", (1, 2), Elementwise;
    /// `a * b`.
    Mul => "mul", (1, 2), Elementwise;
    /// `a / b`.
    Div => "div", (1, 2), Elementwise;
    /// Elementwise maximum.
    Maximum => "maximum", (1, 2), Elementwise;
    /// Elementwise minimum.
    Minimum => "minimum", (1, 2), Elementwise;
    /// `a ** b`.
    Pow => "pow", (1, 2), Elementwise;
    /// `a * b + c`.
    Fma => "fma", (3, 3), Elementwise;
    /// `e^x`.
    Exp => "exp", (1, 1), Elementwise;
    /// `2^x`.
    Exp2 => "exp2", (1, 1), Elementwise;
    /// Natural log.
    Log => "log", (1, 1), Elementwise;
    /// Base-2 log.
    Log2 => "log2", (1, 1), Elementwise;
    /// Square root.
    Sqrt => "sqrt", (1, 1), Elementwise;
    /// `1 / sqrt(x)`.
    Rsqrt => "rsqrt", (1, 1), Elementwise;
    /// Absolute value.
    Abs => "abs", (1, 1), Elementwise;
    /// Negation.
    Neg => "neg", (1, 1), Elementwise;
    /// Sine.
    Sin => "sin", (1, 1), Elementwise;
    /// Cosine.
    Cos => "cos", (1, 1), Elementwise;
    /// Error function.
    Erf => "erf", (1, 1), Elementwise;
    /// Floor.
    Floor => "floor", (1, 1), Elementwise;
    /// Ceiling.
    Ceil => "ceil", (1, 1), Elementwise;
    /// `x * x`.
    Square => "square", (1, 1), Elementwise;
    /// Logistic sigmoid.
    Sigmoid => "sigmoid", (1, 1), Elementwise;
    /// Hyperbolic tangent.
    Tanh => "tanh", (1, 1), Elementwise;
    /// `max(x, 0)`.
    Relu => "relu", (1, 1), Elementwise;
    /// GELU, erf form `0.5 x (1 + erf(x / sqrt 2))`.
    Gelu => "gelu", (1, 1), Elementwise;
    /// SiLU (swish) `x * sigmoid(x)`.
    Silu => "silu", (1, 1), Elementwise;
    /// Generic reduction; `args.op` picks `sum` (default), `max`, `min`, `mean`, `prod`.
    Reduce => "reduce", (1, 1), Reduction;
    /// Sum.
    Sum => "sum", (1, 1), Reduction;
    /// Mean.
    Mean => "mean", (1, 1), Reduction;
    /// Maximum.
    Max => "max", (1, 1), Reduction;
    /// Minimum.
    Min => "min", (1, 1), Reduction;
    /// Index of the maximum (uint32; one axis).
    Argmax => "argmax", (1, 1), Reduction;
    /// Index of the minimum (uint32; one axis).
    Argmin => "argmin", (1, 1), Reduction;
    /// Logical or (bool).
    Any => "any", (1, 1), Reduction;
    /// Logical and (bool).
    All => "all", (1, 1), Reduction;
    /// Matrix product over the last two axes (leading axes batch and broadcast).
    Dot => "dot", (2, 2), Matmul;
    /// 2-D convolution, stride 1, no padding: NHWC input, OHWI weight.
    Conv2d => "conv2d", (2, 2), Conv;
    /// Axis permutation (`args.perm`; default swaps the last two axes).
    Trans => "trans", (1, 1), Transpose;
    /// Softmax over `args.axis` (default -1).
    Softmax => "softmax", (1, 1), RowWise;
    /// Layer norm over the last axis: `x [, weight [, bias]]`, `args.eps`.
    LayerNorm => "layer_norm", (1, 3), RowWise;
    /// RMS norm over the last axis: `x [, weight]`, `args.eps`.
    RmsNorm => "rms_norm", (1, 2), RowWise;
    /// Reshape to `args.shape` (one entry may be -1).
    Reshape => "reshape", (1, 1), Shape;
    /// Convert to `args.dtype`.
    Cast => "cast", (1, 1), Shape;
}

impl OpKind {
    /// Parses an op type: `tt.<name>`, the bare name, and the MLIR spellings Triton prints
    /// (`arith.addf`, `arith.mulf`, `math.exp`, ...), plus `tt.matmul`/`tt.transpose`.
    pub fn parse(s: &str) -> Option<OpKind> {
        let lower = s.trim().to_ascii_lowercase();
        let (dialect, base) = match lower.split_once('.') {
            Some((d, b)) => (d, b),
            None => ("", lower.as_str()),
        };
        if !matches!(dialect, "" | "tt" | "arith" | "math" | "mlx") {
            return None;
        }
        let base = match (dialect, base) {
            ("arith", b) if b.len() > 1 && (b.ends_with('f') || b.ends_with('i')) => {
                let stem = &b[..b.len() - 1];
                match stem {
                    "add" | "sub" | "mul" | "div" => stem,
                    "maximum" | "minimum" | "max" | "min" => {
                        if stem.starts_with("max") {
                            "maximum"
                        } else {
                            "minimum"
                        }
                    }
                    "divs" | "divu" => "div",
                    _ => b,
                }
            }
            (_, "matmul") => "dot",
            (_, "transpose") | (_, "permute") => "trans",
            (_, "multiply") => "mul",
            (_, "subtract") => "sub",
            (_, "divide") => "div",
            (_, "negative") => "neg",
            (_, "power") | (_, "powf") => "pow",
            (_, "layernorm") => "layer_norm",
            (_, "rmsnorm") => "rms_norm",
            (_, b) => b,
        };
        OpKind::ALL.iter().copied().find(|k| k.base_name() == base)
    }

    /// True for the binary elementwise ops that accept `args.scalar` in place of an operand.
    pub fn takes_scalar(self) -> bool {
        matches!(
            self,
            OpKind::Add
                | OpKind::Sub
                | OpKind::Mul
                | OpKind::Div
                | OpKind::Maximum
                | OpKind::Minimum
                | OpKind::Pow
        )
    }

    /// True when operand order does not matter.
    pub fn is_commutative(self) -> bool {
        matches!(
            self,
            OpKind::Add | OpKind::Mul | OpKind::Maximum | OpKind::Minimum
        )
    }

    /// True for elementwise activations that may close a matmul/conv epilogue.
    pub fn is_activation(self) -> bool {
        matches!(
            self,
            OpKind::Relu | OpKind::Gelu | OpKind::Silu | OpKind::Sigmoid | OpKind::Tanh
        )
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a reduction combines elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Product.
    Prod,
    /// Index of the maximum.
    Argmax,
    /// Index of the minimum.
    Argmin,
    /// Logical or.
    Any,
    /// Logical and.
    All,
}

impl ReduceOp {
    fn parse(s: &str) -> Option<ReduceOp> {
        Some(match s.to_ascii_lowercase().as_str() {
            "sum" | "add" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" | "maximum" => ReduceOp::Max,
            "min" | "minimum" => ReduceOp::Min,
            "prod" | "mul" => ReduceOp::Prod,
            "argmax" => ReduceOp::Argmax,
            "argmin" => ReduceOp::Argmin,
            "any" | "or" => ReduceOp::Any,
            "all" | "and" => ReduceOp::All,
            _ => return None,
        })
    }

    /// The combine's name (`sum`, `max`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
            ReduceOp::Argmax => "argmax",
            ReduceOp::Argmin => "argmin",
            ReduceOp::Any => "any",
            ReduceOp::All => "all",
        }
    }
}

/// Typed op arguments, read from the JSON `args` object by [`OpArgs::parse`].
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OpArgs {
    /// Reduction / softmax axes (normalised to non-negative); `None`: all axes (reductions)
    /// or the last axis (softmax).
    pub axes: Option<Vec<usize>>,
    /// Keep reduced axes as size 1.
    pub keep_dims: bool,
    /// Constant second operand of a binary elementwise op.
    pub scalar: Option<f64>,
    /// The scalar is the *left* operand (`scalar - x`, `scalar / x`).
    pub reverse: bool,
    /// Reduction combine (`tt.reduce`), or the op's own for `tt.sum` etc.
    pub reduce_op: Option<ReduceOp>,
    /// Permutation (`tt.trans`).
    pub perm: Option<Vec<usize>>,
    /// Target shape (`tt.reshape`; -1 allowed once).
    pub shape: Option<Vec<i64>>,
    /// Target dtype (`tt.cast`).
    pub dtype: Option<DType>,
    /// Epsilon of the norms.
    pub eps: Option<f64>,
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}

/// Normalises an axis against `ndim` (negative counts from the end).
pub fn norm_axis(axis: i64, ndim: usize) -> Option<usize> {
    let n = ndim as i64;
    let a = if axis < 0 { axis + n } else { axis };
    (0..n).contains(&a).then_some(a as usize)
}

impl OpArgs {
    /// Reads the `args` object of an op of `kind` whose first operand has rank `ndim`.
    /// Errors name the field (`args.axis`), never the op: the caller adds the op id.
    pub fn parse(kind: OpKind, args: &Map<String, Value>, ndim: usize) -> Result<OpArgs, String> {
        let mut out = OpArgs::default();
        for (key, v) in args {
            match key.as_str() {
                "axis" | "axes" | "dim" => {
                    let list: Vec<i64> =
                        match v {
                            Value::Null => continue,
                            Value::Array(xs) => xs
                                .iter()
                                .map(int)
                                .collect::<Option<_>>()
                                .ok_or(format!("args.{key}: expected integers, got {v}"))?,
                            _ => vec![int(v)
                                .ok_or(format!("args.{key}: expected an integer, got {v}"))?],
                        };
                    let mut axes = Vec::new();
                    for a in list {
                        let n = norm_axis(a, ndim).ok_or(format!(
                            "args.{key}: axis {a} is out of range for a {ndim}-d input"
                        ))?;
                        if axes.contains(&n) {
                            return Err(format!("args.{key}: axis {a} is repeated"));
                        }
                        axes.push(n);
                    }
                    out.axes = Some(axes);
                }
                "keep_dims" | "keepdims" | "keep_dim" => {
                    out.keep_dims = v
                        .as_bool()
                        .ok_or(format!("args.{key}: expected true or false, got {v}"))?;
                }
                "scalar" | "value" | "constant" => {
                    out.scalar =
                        Some(num(v).ok_or(format!("args.{key}: expected a number, got {v}"))?);
                }
                "reverse" | "scalar_first" => {
                    out.reverse = v
                        .as_bool()
                        .ok_or(format!("args.{key}: expected true or false, got {v}"))?;
                }
                "op" | "combine" | "reduce_op" => {
                    let s = v
                        .as_str()
                        .ok_or(format!("args.{key}: expected a string, got {v}"))?;
                    out.reduce_op = Some(ReduceOp::parse(s).ok_or(format!(
                        "args.{key}: unknown reduction `{s}` (sum, mean, max, min, prod, argmax, argmin, any, all)"
                    ))?);
                }
                "perm" | "permutation" | "order" => {
                    let p: Vec<i64> = v
                        .as_array()
                        .and_then(|xs| xs.iter().map(int).collect())
                        .ok_or(format!("args.{key}: expected a list of axes, got {v}"))?;
                    let mut seen = vec![false; ndim];
                    let mut perm = Vec::new();
                    for a in &p {
                        match norm_axis(*a, ndim) {
                            Some(n) if !seen[n] => {
                                seen[n] = true;
                                perm.push(n);
                            }
                            _ => {
                                return Err(format!(
                                    "args.{key}: {v} is not a permutation of {ndim} axes"
                                ))
                            }
                        }
                    }
                    if perm.len() != ndim {
                        return Err(format!(
                            "args.{key}: {v} is not a permutation of {ndim} axes"
                        ));
                    }
                    out.perm = Some(perm);
                }
                "shape" => {
                    let s: Vec<i64> = v
                        .as_array()
                        .and_then(|xs| xs.iter().map(int).collect())
                        .ok_or(format!("args.shape: expected a list of integers, got {v}"))?;
                    out.shape = Some(s);
                }
                "dtype" => {
                    let s = v
                        .as_str()
                        .ok_or(format!("args.dtype: expected a string, got {v}"))?;
                    out.dtype =
                        Some(DType::parse(s).ok_or(format!("args.dtype: unknown dtype `{s}`"))?);
                }
                "eps" | "epsilon" => {
                    let e = num(v).ok_or(format!("args.{key}: expected a number, got {v}"))?;
                    if !(e >= 0.0 && e.is_finite()) {
                        return Err(format!("args.{key}: must be a finite number >= 0, got {e}"));
                    }
                    out.eps = Some(e);
                }
                // Free-form notes (the seed files carry some) are allowed and ignored.
                "name" | "comment" | "note" | "description" => {}
                other => return Err(format!("args.{other}: unknown argument for {kind}")),
            }
        }
        if out.reduce_op.is_some() && kind != OpKind::Reduce {
            return Err(format!(
                "args.op: only tt.reduce takes a combine, not {kind}"
            ));
        }
        out.reduce_op = match kind {
            OpKind::Reduce => Some(out.reduce_op.unwrap_or(ReduceOp::Sum)),
            OpKind::Sum => Some(ReduceOp::Sum),
            OpKind::Mean => Some(ReduceOp::Mean),
            OpKind::Max => Some(ReduceOp::Max),
            OpKind::Min => Some(ReduceOp::Min),
            OpKind::Argmax => Some(ReduceOp::Argmax),
            OpKind::Argmin => Some(ReduceOp::Argmin),
            OpKind::Any => Some(ReduceOp::Any),
            OpKind::All => Some(ReduceOp::All),
            _ => None,
        };
        if out.scalar.is_some() && !kind.takes_scalar() {
            return Err(format!("args.scalar: {kind} takes no scalar operand"));
        }
        if out.reverse && out.scalar.is_none() {
            return Err("args.reverse: needs args.scalar".into());
        }
        if out.axes.is_some()
            && !matches!(kind.category(), OpCategory::Reduction)
            && kind != OpKind::Softmax
        {
            return Err(format!("args.axis: {kind} takes no axis"));
        }
        if out.perm.is_some() && kind != OpKind::Trans {
            return Err(format!("args.perm: {kind} takes no permutation"));
        }
        if out.shape.is_some() != (kind == OpKind::Reshape) {
            return Err(if kind == OpKind::Reshape {
                "args.shape: tt.reshape needs a target shape".into()
            } else {
                format!("args.shape: {kind} takes no shape")
            });
        }
        if kind == OpKind::Cast && out.dtype.is_none() {
            return Err("args.dtype: tt.cast needs a target dtype".into());
        }
        if out.eps.is_some() && !matches!(kind, OpKind::LayerNorm | OpKind::RmsNorm) {
            return Err(format!("args.eps: {kind} takes no epsilon"));
        }
        Ok(out)
    }

    /// The JSON `args` object that parses back to these arguments for an op of `kind`.
    pub fn to_json(&self, kind: OpKind) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(a) = &self.axes {
            m.insert("axis".into(), Value::from(a.clone()));
        }
        if self.keep_dims {
            m.insert("keep_dims".into(), Value::Bool(true));
        }
        if let Some(s) = self.scalar {
            m.insert("scalar".into(), Value::from(s));
        }
        if self.reverse {
            m.insert("reverse".into(), Value::Bool(true));
        }
        if let (OpKind::Reduce, Some(r)) = (kind, self.reduce_op) {
            m.insert("op".into(), Value::from(r.name()));
        }
        if let Some(p) = &self.perm {
            m.insert("perm".into(), Value::from(p.clone()));
        }
        if let Some(s) = &self.shape {
            m.insert("shape".into(), Value::from(s.clone()));
        }
        if let Some(d) = self.dtype {
            m.insert("dtype".into(), Value::from(d.mlx_name()));
        }
        if let Some(e) = self.eps {
            m.insert("eps".into(), Value::from(e));
        }
        m
    }

    /// The reduced axes of a reduction over a `ndim`-d input (all axes when unspecified).
    pub fn reduce_axes(&self, ndim: usize) -> Vec<usize> {
        let mut a = self.axes.clone().unwrap_or_else(|| (0..ndim).collect());
        a.sort_unstable();
        a
    }

    /// The softmax axis over a `ndim`-d input (the last when unspecified).
    pub fn softmax_axis(&self, ndim: usize) -> usize {
        self.axes
            .as_ref()
            .and_then(|a| a.first().copied())
            .unwrap_or(ndim.saturating_sub(1))
    }
}

/// NumPy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// MLX-style result dtype of a binary op on two dtypes (the wider float wins; fp16 beats
/// bf16 only at equal width is MLX's rule: fp16 + bf16 gives fp32).
pub fn promote(a: DType, b: DType) -> DType {
    if a == b {
        return a;
    }
    match (a.is_float(), b.is_float()) {
        (true, false) => a,
        (false, true) => b,
        (true, true) => {
            if a.size_bytes() != b.size_bytes() {
                if a.size_bytes() > b.size_bytes() {
                    a
                } else {
                    b
                }
            } else {
                DType::F32
            }
        }
        (false, false) => {
            if a.is_bool() {
                b
            } else if b.is_bool() || a.size_bytes() >= b.size_bytes() {
                a
            } else {
                b
            }
        }
    }
}

/// The output shape and dtype of `kind` on operands of these shapes and dtypes.
pub fn infer(
    kind: OpKind,
    args: &OpArgs,
    shapes: &[Vec<usize>],
    dtypes: &[DType],
) -> Result<(Vec<usize>, DType), String> {
    let s0 = &shapes[0];
    let d0 = dtypes[0];
    let bcast = |i: usize, acc: &Vec<usize>| {
        broadcast_shapes(acc, &shapes[i]).ok_or(format!(
            "input_shapes[{i}]: {:?} does not broadcast with {:?}",
            shapes[i], acc
        ))
    };
    match kind.category() {
        OpCategory::Elementwise => {
            let mut shape = s0.clone();
            let mut dt = d0;
            for (i, &d) in dtypes.iter().enumerate().skip(1) {
                shape = bcast(i, &shape)?;
                dt = promote(dt, d);
            }
            if kind.takes_scalar() && shapes.len() == 1 && args.scalar.is_none() {
                return Err(format!("{kind} needs two inputs or args.scalar"));
            }
            if kind.takes_scalar() && shapes.len() == 2 && args.scalar.is_some() {
                return Err(format!("args.scalar: {kind} already has two inputs"));
            }
            let unary_float = !kind.takes_scalar() && kind != OpKind::Fma;
            if unary_float
                && !matches!(
                    kind,
                    OpKind::Abs | OpKind::Neg | OpKind::Square | OpKind::Relu
                )
                && !dt.is_float()
            {
                dt = DType::F32;
            }
            if kind == OpKind::Div && !dt.is_float() {
                dt = DType::F32;
            }
            Ok((shape, dt))
        }
        OpCategory::Reduction => {
            let axes = args.reduce_axes(s0.len());
            let op = args.reduce_op.unwrap_or(ReduceOp::Sum);
            if matches!(op, ReduceOp::Argmax | ReduceOp::Argmin) && axes.len() != 1 && s0.len() != 1
            {
                return Err(format!(
                    "args.axis: {} reduces exactly one axis, got {:?}",
                    op.name(),
                    axes
                ));
            }
            let shape: Vec<usize> = s0
                .iter()
                .enumerate()
                .filter_map(|(i, &d)| match (axes.contains(&i), args.keep_dims) {
                    (false, _) => Some(d),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            let dt = match op {
                ReduceOp::Argmax | ReduceOp::Argmin => DType::U32,
                ReduceOp::Any | ReduceOp::All => DType::Bool,
                ReduceOp::Mean if !d0.is_float() => DType::F32,
                _ => d0,
            };
            Ok((shape, dt))
        }
        OpCategory::Matmul => {
            let (a, b) = (&shapes[0], &shapes[1]);
            if a.len() < 2 || b.len() < 2 {
                return Err(format!(
                    "input_shapes: tt.dot needs inputs of rank >= 2, got {a:?} and {b:?}"
                ));
            }
            let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
            let (k2, n) = (b[b.len() - 2], b[b.len() - 1]);
            if k != k2 {
                return Err(format!(
                    "input_shapes: inner dimensions differ: {a:?} @ {b:?} ({k} vs {k2})"
                ));
            }
            let batch = broadcast_shapes(&a[..a.len() - 2], &b[..b.len() - 2]).ok_or(format!(
                "input_shapes: batch dimensions of {a:?} and {b:?} do not broadcast"
            ))?;
            let mut shape = batch;
            shape.extend([m, n]);
            Ok((shape, promote(d0, dtypes[1])))
        }
        OpCategory::Conv => {
            let (x, w) = (&shapes[0], &shapes[1]);
            if x.len() != 4 || w.len() != 4 {
                return Err(format!(
                    "input_shapes: tt.conv2d needs NHWC input and OHWI weight (rank 4), got {x:?} and {w:?}"
                ));
            }
            if x[3] != w[3] {
                return Err(format!(
                    "input_shapes: input channels differ: input {x:?} has {}, weight {w:?} has {}",
                    x[3], w[3]
                ));
            }
            if w[1] > x[1] || w[2] > x[2] {
                return Err(format!(
                    "input_shapes: kernel {}x{} is larger than the input {}x{}",
                    w[1], w[2], x[1], x[2]
                ));
            }
            Ok((
                vec![x[0], x[1] - w[1] + 1, x[2] - w[2] + 1, w[0]],
                promote(d0, dtypes[1]),
            ))
        }
        OpCategory::Transpose => {
            let n = s0.len();
            let perm = match &args.perm {
                Some(p) => p.clone(),
                None if n >= 2 => {
                    let mut p: Vec<usize> = (0..n).collect();
                    p.swap(n - 2, n - 1);
                    p
                }
                None => (0..n).collect(),
            };
            Ok((perm.iter().map(|&i| s0[i]).collect(), d0))
        }
        OpCategory::RowWise => {
            if s0.is_empty() {
                return Err(format!(
                    "input_shapes[0]: {kind} needs an input of rank >= 1"
                ));
            }
            let last = *s0.last().unwrap_or(&1);
            for (i, s) in shapes.iter().enumerate().skip(1) {
                if s.as_slice() != [last] {
                    return Err(format!(
                        "input_shapes[{i}]: {kind} parameters must have shape [{last}], got {s:?}"
                    ));
                }
            }
            let dt = if d0.is_float() { d0 } else { DType::F32 };
            Ok((s0.clone(), dt))
        }
        OpCategory::Shape => match kind {
            OpKind::Cast => Ok((s0.clone(), args.dtype.unwrap_or(d0))),
            _ => {
                let target = args.shape.clone().unwrap_or_default();
                let total: usize = s0.iter().product();
                // Saturating: a user-written target shape may overflow; it then fails the
                // element-count check below instead of wrapping.
                let known: i64 = target
                    .iter()
                    .filter(|&&d| d != -1)
                    .fold(1i64, |a, &d| a.saturating_mul(d));
                let holes = target.iter().filter(|&&d| d == -1).count();
                if target.iter().any(|&d| d < -1 || d == 0) || holes > 1 {
                    return Err(format!("args.shape: {target:?} is not a valid shape"));
                }
                let shape: Vec<usize> = if holes == 1 {
                    if known == 0 || total as i64 % known != 0 {
                        return Err(format!(
                            "args.shape: {target:?} cannot hold the {total} elements of {s0:?}"
                        ));
                    }
                    target
                        .iter()
                        .map(|&d| {
                            if d == -1 {
                                (total as i64 / known) as usize
                            } else {
                                d as usize
                            }
                        })
                        .collect()
                } else {
                    target.iter().map(|&d| d as usize).collect()
                };
                if shape.iter().fold(1usize, |a, &d| a.saturating_mul(d)) != total {
                    return Err(format!(
                        "args.shape: {target:?} does not hold the {total} elements of {s0:?}"
                    ));
                }
                Ok((shape, d0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        for k in OpKind::ALL {
            assert_eq!(OpKind::parse(k.name()), Some(*k));
        }
        assert_eq!(OpKind::parse("arith.addf"), Some(OpKind::Add));
        assert_eq!(OpKind::parse("arith.mulf"), Some(OpKind::Mul));
        assert_eq!(OpKind::parse("math.exp"), Some(OpKind::Exp));
        assert_eq!(OpKind::parse("tt.matmul"), Some(OpKind::Dot));
        assert_eq!(OpKind::parse("tt.transpose"), Some(OpKind::Trans));
        assert_eq!(OpKind::parse("tt.frobnicate"), None);
        assert_eq!(OpKind::parse("foo.add"), None);
    }

    #[test]
    fn broadcasting_and_inference() {
        assert_eq!(broadcast_shapes(&[4, 1], &[3]), Some(vec![4, 3]));
        assert_eq!(broadcast_shapes(&[4, 2], &[3]), None);
        let args = OpArgs::parse(
            OpKind::Sum,
            &serde_json::from_str(r#"{"axis": -1}"#).unwrap(),
            2,
        )
        .unwrap();
        let (s, d) = infer(OpKind::Sum, &args, &[vec![8, 16]], &[DType::F16]).unwrap();
        assert_eq!((s, d), (vec![8], DType::F16));
        let e = infer(
            OpKind::Dot,
            &OpArgs::default(),
            &[vec![2, 3], vec![4, 5]],
            &[DType::F32; 2],
        )
        .unwrap_err();
        assert!(e.contains("inner dimensions differ"), "{e}");
    }

    #[test]
    fn bad_args_name_the_field() {
        let m = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap();
        let e = OpArgs::parse(OpKind::Sum, &m(r#"{"axis": 2}"#), 2).unwrap_err();
        assert!(e.starts_with("args.axis: axis 2 is out of range"), "{e}");
        let e = OpArgs::parse(OpKind::Exp, &m(r#"{"scalar": 1}"#), 2).unwrap_err();
        assert!(e.starts_with("args.scalar"), "{e}");
        let e = OpArgs::parse(OpKind::Sum, &m(r#"{"bogus": 1}"#), 2).unwrap_err();
        let a = OpArgs::parse(
            OpKind::Reduce,
            &m(r#"{"axis": -1, "keep_dims": true, "op": "max"}"#),
            3,
        )
        .unwrap();
        assert_eq!(
            OpArgs::parse(OpKind::Reduce, &a.to_json(OpKind::Reduce), 3).unwrap(),
            a
        );
        assert!(e.starts_with("args.bogus"), "{e}");
    }
}
