//! The fusion optimizer: finds known subgraphs (FMA, elementwise chains, GELU, LayerNorm,
//! RMSNorm, SwiGLU, softmax, matmul+bias(+activation), conv+bias+activation, attention,
//! hierarchical reductions) and replaces each with one [`FusedGroup`].
//!
//! Rules run in a fixed order ([`fuse`] lists it), larger patterns before the ones they
//! contain; inside a rule anchors are tried from the end of the graph backwards so the
//! outermost match wins. A match is only taken when every intermediate value it swallows
//! is read by nothing outside the group and is not a graph output, so fusion never
//! recomputes or drops a value somebody else needs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::f64::consts::{FRAC_1_SQRT_2, SQRT_2};
use std::fmt;

use serde::Serialize;

use super::activation::{GELU_TANH_CUBIC, SQRT_2_OVER_PI};
use super::ops::{OpCategory, OpKind, ReduceOp};
use super::pattern::{dsl::*, Bindings, Matcher, P};
use super::spec::{Graph, GraphInput, OpNode, TensorType};

/// A fusion pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// `a * b + c`.
    Fma,
    /// Connected elementwise ops with no other consumer of the intermediates.
    ElementwiseChain,
    /// GELU spelled out (erf or tanh form).
    Gelu,
    /// Layer normalisation over the last axis, optional weight and bias.
    LayerNorm,
    /// RMS normalisation over the last axis, optional weight.
    RmsNorm,
    /// `silu(gate) * up`.
    SwiGlu,
    /// `exp(x - max) / sum(exp(x - max))` along one axis.
    Softmax,
    /// `act(a @ b + bias)`, activation optional.
    MatmulBias,
    /// `act(conv2d(x, w) + bias)`.
    ConvBiasActivation,
    /// `softmax(q @ k^T * scale) @ v`.
    Attention,
    /// Nested reductions with one combine collapsed into one, and/or an elementwise
    /// prologue computed inside the reduction.
    HierarchicalReduction,
}

impl Pattern {
    /// Every pattern.
    pub const ALL: [Pattern; 11] = [
        Pattern::Fma,
        Pattern::ElementwiseChain,
        Pattern::Gelu,
        Pattern::LayerNorm,
        Pattern::RmsNorm,
        Pattern::SwiGlu,
        Pattern::Softmax,
        Pattern::MatmulBias,
        Pattern::ConvBiasActivation,
        Pattern::Attention,
        Pattern::HierarchicalReduction,
    ];

    /// Snake-case name (`layer_norm`).
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Fma => "fma",
            Pattern::ElementwiseChain => "elementwise_chain",
            Pattern::Gelu => "gelu",
            Pattern::LayerNorm => "layer_norm",
            Pattern::RmsNorm => "rms_norm",
            Pattern::SwiGlu => "swiglu",
            Pattern::Softmax => "softmax",
            Pattern::MatmulBias => "matmul_bias",
            Pattern::ConvBiasActivation => "conv_bias_activation",
            Pattern::Attention => "attention",
            Pattern::HierarchicalReduction => "hierarchical_reduction",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An epilogue activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// GELU, erf form.
    Gelu,
    /// GELU, tanh approximation.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// Logistic sigmoid.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
}

/// An operand of a fused FMA: a value id or a constant.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operand {
    /// A value (group input).
    Value(String),
    /// A constant.
    Scalar(f64),
}

/// What a match found, by role. Value ids are the group's inputs (or, for
/// [`PatternParams::HierarchicalReduction::source`], possibly a prologue op).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "pattern", rename_all = "snake_case")]
pub enum PatternParams {
    /// `a * b + c`.
    Fma {
        /// Left factor.
        a: Operand,
        /// Right factor.
        b: Operand,
        /// Addend.
        c: Operand,
    },
    /// Evaluated op by op.
    ElementwiseChain,
    /// GELU of `x`.
    Gelu {
        /// Input.
        x: String,
        /// Tanh approximation (else erf).
        tanh: bool,
    },
    /// Layer norm of `x` over its last axis.
    LayerNorm {
        /// Input.
        x: String,
        /// Scale of shape `[last]`.
        weight: Option<String>,
        /// Shift of shape `[last]`.
        bias: Option<String>,
        /// Epsilon.
        eps: f64,
    },
    /// RMS norm of `x` over its last axis.
    RmsNorm {
        /// Input.
        x: String,
        /// Scale of shape `[last]`.
        weight: Option<String>,
        /// Epsilon.
        eps: f64,
    },
    /// `silu(gate) * up`.
    SwiGlu {
        /// Gate.
        gate: String,
        /// Up projection.
        up: String,
    },
    /// Softmax of `x` along `axis`.
    Softmax {
        /// Input.
        x: String,
        /// Axis (non-negative).
        axis: usize,
    },
    /// `act(a @ b + bias)`.
    MatmulBias {
        /// Left matrix.
        a: String,
        /// Right matrix.
        b: String,
        /// Bias (broadcast).
        bias: String,
        /// Epilogue activation.
        activation: Option<Activation>,
    },
    /// `act(conv2d(x, w) + bias)`.
    ConvBiasActivation {
        /// NHWC input.
        x: String,
        /// OHWI weight.
        w: String,
        /// Bias (broadcast).
        bias: String,
        /// Activation.
        activation: Activation,
    },
    /// `softmax(q @ k^T * scale) @ v`.
    Attention {
        /// Queries `[.., Lq, D]`.
        q: String,
        /// Keys: `[.., Lk, D]` when `k_transposed`, else already `[.., D, Lk]`.
        k: String,
        /// Values `[.., Lk, Dv]`.
        v: String,
        /// Multiplier of the scores.
        scale: f64,
        /// The graph transposed `k` itself (the group absorbed that transpose).
        k_transposed: bool,
    },
    /// One reduction over `axes` of `source`.
    HierarchicalReduction {
        /// Combine.
        op: ReduceOp,
        /// Axes of `source` reduced.
        axes: Vec<usize>,
        /// The value reduced: a group input, or the last prologue op.
        source: String,
        /// Elementwise ops computed inside the reduction.
        prologue_ops: usize,
        /// Reductions collapsed into this one.
        reductions: usize,
    },
}

/// A fused subgraph: its ops, its external inputs and what the match found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FusedGroup {
    /// Id of the group's result (the id of its last op, so consumers are unchanged).
    pub id: String,
    /// Which pattern.
    pub pattern: Pattern,
    /// The original ops, in evaluation order.
    pub ops: Vec<OpNode>,
    /// External operand ids, in first-use order.
    pub inputs: Vec<String>,
    /// Result type.
    #[serde(flatten)]
    pub ty: TensorType,
    /// Roles found by the match.
    pub params: PatternParams,
}

impl FusedGroup {
    /// The operand a pattern is "of" (softmax's `x`, GELU's `x`, ...), for patterns that
    /// nest inside larger ones.
    pub fn primary_input(&self) -> &str {
        match &self.params {
            PatternParams::Gelu { x, .. }
            | PatternParams::LayerNorm { x, .. }
            | PatternParams::RmsNorm { x, .. }
            | PatternParams::Softmax { x, .. }
            | PatternParams::ConvBiasActivation { x, .. } => x,
            PatternParams::SwiGlu { gate, .. } => gate,
            PatternParams::MatmulBias { a, .. } => a,
            PatternParams::Attention { q, .. } => q,
            _ => &self.inputs[0],
        }
    }
}

/// A node of a fused graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Node {
    /// An op left as it was.
    Op(OpNode),
    /// A fused group.
    Group(FusedGroup),
}

impl Node {
    /// Result id.
    pub fn id(&self) -> &str {
        match self {
            Node::Op(o) => &o.id,
            Node::Group(g) => &g.id,
        }
    }

    /// Operand ids.
    pub fn inputs(&self) -> &[String] {
        match self {
            Node::Op(o) => &o.inputs,
            Node::Group(g) => &g.inputs,
        }
    }

    /// Result type.
    pub fn ty(&self) -> &TensorType {
        match self {
            Node::Op(o) => &o.ty,
            Node::Group(g) => &g.ty,
        }
    }

    /// The op, when not fused.
    pub fn as_op(&self) -> Option<&OpNode> {
        match self {
            Node::Op(o) => Some(o),
            Node::Group(_) => None,
        }
    }

    /// The group, when fused.
    pub fn as_group(&self) -> Option<&FusedGroup> {
        match self {
            Node::Group(g) => Some(g),
            Node::Op(_) => None,
        }
    }

    fn into_ops(self) -> Vec<OpNode> {
        match self {
            Node::Op(o) => vec![o],
            Node::Group(g) => g.ops,
        }
    }
}

/// A graph after fusion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FusedGraph {
    /// Inputs (as in the original graph).
    pub inputs: Vec<GraphInput>,
    /// Ops and groups in evaluation order.
    pub nodes: Vec<Node>,
    /// Result ids (unchanged).
    pub outputs: Vec<String>,
}

impl FusedGraph {
    /// The fused groups.
    pub fn groups(&self) -> impl Iterator<Item = &FusedGroup> {
        self.nodes.iter().filter_map(Node::as_group)
    }
}

/// One fused group in the summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FusionEntry {
    /// Group id.
    pub id: String,
    /// Pattern.
    pub pattern: Pattern,
    /// Ids of the ops fused.
    pub ops: Vec<String>,
    /// Bytes the ops move unfused: every op reads its operands and writes its result.
    pub bytes_unfused: u64,
    /// Bytes the group moves: its external inputs once and its result.
    pub bytes_fused: u64,
    /// `bytes_unfused - bytes_fused`.
    pub bytes_saved: u64,
}

/// What fusion did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FusionSummary {
    /// Ops before.
    pub ops_before: usize,
    /// Nodes (ops + groups) after.
    pub nodes_after: usize,
    /// One entry per group.
    pub groups: Vec<FusionEntry>,
    /// Sum of `bytes_saved`.
    pub bytes_saved: u64,
}

impl FusionSummary {
    /// Groups found with this pattern.
    pub fn count(&self, p: Pattern) -> usize {
        self.groups.iter().filter(|g| g.pattern == p).count()
    }
}

/// A rule's result: the pattern, the nodes covered (including the anchor) and the roles.
struct Found {
    pattern: Pattern,
    members: BTreeSet<usize>,
    params: PatternParams,
}

type Rule = fn(&Ctx, usize) -> Option<Found>;

struct Ctx<'a> {
    nodes: &'a [Node],
    m: Matcher<'a>,
    consumers: HashMap<&'a str, Vec<usize>>,
    outputs: &'a HashSet<String>,
}

impl<'a> Ctx<'a> {
    fn new(nodes: &'a [Node], outputs: &'a HashSet<String>) -> Ctx<'a> {
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for r in n.inputs() {
                consumers.entry(r.as_str()).or_default().push(i);
            }
        }
        Ctx {
            nodes,
            m: Matcher::new(nodes),
            consumers,
            outputs,
        }
    }

    fn op(&self, id: &str) -> Option<&'a OpNode> {
        self.m.producer(id).and_then(|(_, n)| n.as_op())
    }

    fn ty(&self, id: &str) -> Option<&'a TensorType> {
        self.m.producer(id).map(|(_, n)| n.ty())
    }

    /// Every member but the anchor is read only inside the group and is no output.
    fn self_contained(&self, members: &BTreeSet<usize>, anchor: usize) -> bool {
        members.iter().all(|&i| {
            i == anchor || {
                let id = self.nodes[i].id();
                !self.outputs.contains(id)
                    && self
                        .consumers
                        .get(id)
                        .is_none_or(|cs| cs.iter().all(|c| members.contains(c)))
            }
        })
    }

    /// A reduction op over exactly the last axis of its input, keeping dims.
    fn last_axis_keepdims(&self, id: &str) -> bool {
        self.op(id).is_some_and(|o| {
            let rank = self.ty(&o.inputs[0]).map_or(0, |t| t.shape.len());
            o.args.keep_dims && rank >= 1 && o.args.reduce_axes(rank) == vec![rank - 1]
        })
    }

    /// Shape of `id` is exactly `[last dim of x]`.
    fn is_row_param(&self, id: &str, x: &str) -> bool {
        match (self.ty(id), self.ty(x)) {
            (Some(p), Some(t)) => t.shape.last().is_some_and(|&n| p.shape == vec![n]),
            _ => false,
        }
    }
}

fn found(pattern: Pattern, b: Bindings, anchor: usize, params: PatternParams) -> Found {
    let mut members = b.members;
    members.insert(anchor);
    Found {
        pattern,
        members,
        params,
    }
}

fn val(b: &Bindings, name: &str) -> Option<String> {
    b.value(name).map(str::to_string)
}

// ---- softmax ----------------------------------------------------------------------

fn softmax_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let exp = at(
        "e",
        un(
            OpKind::Exp,
            one_of(vec![
                bin(OpKind::Sub, v("x"), at("m", un(OpKind::Max, v("x")))),
                v("x"),
            ]),
        ),
    );
    let p = bin(OpKind::Div, exp, at("s", un(OpKind::Sum, v("e"))));
    let b = c.m.matches(&p, c.nodes[anchor].id())?;
    let s = c.op(b.value("s")?)?;
    let rank = c.ty(b.value("e")?)?.shape.len();
    let axes = s.args.reduce_axes(rank);
    if axes.len() != 1 || !s.args.keep_dims {
        return None;
    }
    if let Some(m) = b.value("m") {
        let m = c.op(m)?;
        if m.args.reduce_axes(rank) != axes || !m.args.keep_dims {
            return None;
        }
    }
    let x = val(&b, "x")?;
    Some(found(
        Pattern::Softmax,
        b,
        anchor,
        PatternParams::Softmax { x, axis: axes[0] },
    ))
}

// ---- norms ------------------------------------------------------------------------

fn squares(name: &'static str, inner: P) -> P {
    one_of(vec![
        un(OpKind::Square, inner.clone()),
        bin(OpKind::Mul, inner.clone(), v(name)),
        sc(OpKind::Pow, inner, 2.0),
    ])
}

fn normalize(x: &'static str, var: P) -> P {
    let ve = P::AnyScalar(OpKind::Add, Box::new(var), "eps");
    one_of(vec![
        bin(OpKind::Mul, v(x), un(OpKind::Rsqrt, ve.clone())),
        bin(OpKind::Div, v(x), un(OpKind::Sqrt, ve)),
    ])
}

fn affine(norm: P, with_bias: bool) -> P {
    let mut alts = Vec::new();
    if with_bias {
        alts.push(bin(
            OpKind::Add,
            bin(OpKind::Mul, norm.clone(), v("gamma")),
            v("beta"),
        ));
        alts.push(bin(OpKind::Add, norm.clone(), v("beta")));
    }
    alts.push(bin(OpKind::Mul, norm.clone(), v("gamma")));
    alts.push(norm);
    one_of(alts)
}

fn layer_norm_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let d = at(
        "d",
        bin(OpKind::Sub, v("x"), at("mu", un(OpKind::Mean, v("x")))),
    );
    let var = at("var", un(OpKind::Mean, squares("d", d)));
    let p = affine(normalize("d", var), true);
    let b = c.m.matches(&p, c.nodes[anchor].id())?;
    if !c.last_axis_keepdims(b.value("mu")?) || !c.last_axis_keepdims(b.value("var")?) {
        return None;
    }
    let x = val(&b, "x")?;
    let weight = val(&b, "gamma");
    let bias = val(&b, "beta");
    for p in weight.iter().chain(&bias) {
        if !c.is_row_param(p, &x) {
            return None;
        }
    }
    let eps = b.scalar("eps")?;
    Some(found(
        Pattern::LayerNorm,
        b,
        anchor,
        PatternParams::LayerNorm {
            x,
            weight,
            bias,
            eps,
        },
    ))
}

fn rms_norm_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let ms = at("ms", un(OpKind::Mean, squares("x", v("x"))));
    let p = affine(normalize("x", ms), false);
    let b = c.m.matches(&p, c.nodes[anchor].id())?;
    if !c.last_axis_keepdims(b.value("ms")?) {
        return None;
    }
    let x = val(&b, "x")?;
    let weight = val(&b, "gamma");
    if let Some(w) = &weight {
        if !c.is_row_param(w, &x) {
            return None;
        }
    }
    let eps = b.scalar("eps")?;
    Some(found(
        Pattern::RmsNorm,
        b,
        anchor,
        PatternParams::RmsNorm { x, weight, eps },
    ))
}

// ---- activations ------------------------------------------------------------------

fn gelu_pattern() -> P {
    let erf_arg = one_of(vec![
        sc(OpKind::Mul, v("x"), FRAC_1_SQRT_2),
        sc(OpKind::Div, v("x"), SQRT_2),
    ]);
    let erf_branch = at("erf", sc(OpKind::Add, un(OpKind::Erf, erf_arg), 1.0));
    let cube = one_of(vec![
        sc(OpKind::Pow, v("x"), 3.0),
        bin(OpKind::Mul, v("x"), bin(OpKind::Mul, v("x"), v("x"))),
        bin(OpKind::Mul, v("x"), un(OpKind::Square, v("x"))),
    ]);
    let inner = bin(OpKind::Add, v("x"), sc(OpKind::Mul, cube, GELU_TANH_CUBIC));
    let tanh_branch = at(
        "tanh",
        sc(
            OpKind::Add,
            un(OpKind::Tanh, sc(OpKind::Mul, inner, SQRT_2_OVER_PI)),
            1.0,
        ),
    );
    let mut alts = Vec::new();
    for branch in [erf_branch, tanh_branch] {
        alts.push(bin(
            OpKind::Mul,
            sc(OpKind::Mul, v("x"), 0.5),
            branch.clone(),
        ));
        alts.push(sc(
            OpKind::Mul,
            bin(OpKind::Mul, v("x"), branch.clone()),
            0.5,
        ));
        alts.push(bin(OpKind::Mul, v("x"), sc(OpKind::Mul, branch, 0.5)));
    }
    one_of(alts)
}

fn gelu_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let b = c.m.matches(&gelu_pattern(), c.nodes[anchor].id())?;
    let x = val(&b, "x")?;
    let tanh = b.value("tanh").is_some();
    Some(found(
        Pattern::Gelu,
        b,
        anchor,
        PatternParams::Gelu { x, tanh },
    ))
}

fn swiglu_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let silu = one_of(vec![
        un(OpKind::Silu, v("g")),
        bin(OpKind::Mul, v("g"), un(OpKind::Sigmoid, v("g"))),
    ]);
    let b =
        c.m.matches(&bin(OpKind::Mul, silu, v("u")), c.nodes[anchor].id())?;
    let gate = val(&b, "g")?;
    let up = val(&b, "u")?;
    Some(found(
        Pattern::SwiGlu,
        b,
        anchor,
        PatternParams::SwiGlu { gate, up },
    ))
}

/// The activation computed by node `i` on its first operand, if it is one.
fn activation_of(node: &Node) -> Option<Activation> {
    match node {
        Node::Op(o) => match o.kind {
            OpKind::Relu => Some(Activation::Relu),
            OpKind::Gelu => Some(Activation::Gelu),
            OpKind::Silu => Some(Activation::Silu),
            OpKind::Sigmoid => Some(Activation::Sigmoid),
            OpKind::Tanh => Some(Activation::Tanh),
            _ => None,
        },
        Node::Group(g) => match g.params {
            PatternParams::Gelu { tanh: false, .. } => Some(Activation::Gelu),
            PatternParams::Gelu { tanh: true, .. } => Some(Activation::GeluTanh),
            _ => None,
        },
    }
}

fn activated(inner: P) -> P {
    let mut alts: Vec<P> = [
        OpKind::Relu,
        OpKind::Gelu,
        OpKind::Silu,
        OpKind::Sigmoid,
        OpKind::Tanh,
    ]
    .into_iter()
    .map(|k| un(k, inner.clone()))
    .collect();
    alts.push(P::Group(Pattern::Gelu, Box::new(inner)));
    one_of(alts)
}

// ---- matmul / conv epilogues -------------------------------------------------------

fn epilogue_rule(
    c: &Ctx,
    anchor: usize,
    producer: OpKind,
    need_activation: bool,
) -> Option<(Bindings, Option<Activation>)> {
    let core = bin(
        OpKind::Add,
        at("mm", bin(producer, v("a"), v("b"))),
        v("bias"),
    );
    let node = &c.nodes[anchor];
    let act = activation_of(node);
    let p = if act.is_some() {
        activated(core)
    } else if need_activation {
        return None;
    } else {
        core
    };
    let b = c.m.matches(&p, node.id())?;
    Some((b, act))
}

fn matmul_bias_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let (b, activation) = epilogue_rule(c, anchor, OpKind::Dot, false)?;
    let params = PatternParams::MatmulBias {
        a: val(&b, "a")?,
        b: val(&b, "b")?,
        bias: val(&b, "bias")?,
        activation,
    };
    Some(found(Pattern::MatmulBias, b, anchor, params))
}

fn conv_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let (b, activation) = epilogue_rule(c, anchor, OpKind::Conv2d, true)?;
    let params = PatternParams::ConvBiasActivation {
        x: val(&b, "a")?,
        w: val(&b, "b")?,
        bias: val(&b, "bias")?,
        activation: activation?,
    };
    Some(found(Pattern::ConvBiasActivation, b, anchor, params))
}

// ---- attention ----------------------------------------------------------------------

fn attention_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let kt = one_of(vec![at("kT", un(OpKind::Trans, v("k"))), v("kt")]);
    let scores = at("s", bin(OpKind::Dot, v("q"), kt));
    let scaled = one_of(vec![
        P::AnyScalar(OpKind::Mul, Box::new(scores.clone()), "mul"),
        P::AnyScalar(OpKind::Div, Box::new(scores.clone()), "div"),
        scores,
    ]);
    let probs = at(
        "p",
        one_of(vec![
            P::Group(Pattern::Softmax, Box::new(scaled.clone())),
            un(OpKind::Softmax, scaled),
        ]),
    );
    let b =
        c.m.matches(&bin(OpKind::Dot, probs, v("v")), c.nodes[anchor].id())?;
    let rank = c.ty(b.value("s")?)?.shape.len();
    let axis = match c.m.producer(b.value("p")?)?.1 {
        Node::Group(g) => match g.params {
            PatternParams::Softmax { axis, .. } => axis,
            _ => return None,
        },
        Node::Op(o) => o.args.softmax_axis(rank),
    };
    if axis + 1 != rank {
        return None;
    }
    let (k, k_transposed) = match b.value("kT") {
        Some(t) => {
            let t = c.op(t)?;
            let in_rank = c.ty(&t.inputs[0])?.shape.len();
            let mut swap: Vec<usize> = (0..in_rank).collect();
            swap.swap(in_rank - 2, in_rank - 1);
            if t.args.perm.as_ref().is_some_and(|p| *p != swap) {
                return None;
            }
            (val(&b, "k")?, true)
        }
        None => (val(&b, "kt")?, false),
    };
    let scale = match (b.scalar("mul"), b.scalar("div")) {
        (Some(m), _) => m,
        (_, Some(d)) if d != 0.0 => 1.0 / d,
        (_, Some(_)) => return None,
        _ => 1.0,
    };
    let params = PatternParams::Attention {
        q: val(&b, "q")?,
        k,
        v: val(&b, "v")?,
        scale,
        k_transposed,
    };
    Some(found(Pattern::Attention, b, anchor, params))
}

// ---- reductions -----------------------------------------------------------------------

fn collapsible(op: ReduceOp) -> bool {
    !matches!(op, ReduceOp::Argmax | ReduceOp::Argmin)
}

/// (combine, source id, axes of source, reductions) of a reduction node.
fn reduction_of(c: &Ctx, node: &Node) -> Option<(ReduceOp, String, Vec<usize>, usize)> {
    match node {
        Node::Op(o) if o.kind.category() == OpCategory::Reduction => {
            let rank = c.ty(&o.inputs[0])?.shape.len();
            Some((
                o.args.reduce_op?,
                o.inputs[0].clone(),
                o.args.reduce_axes(rank),
                1,
            ))
        }
        Node::Group(g) => match &g.params {
            PatternParams::HierarchicalReduction {
                op,
                axes,
                source,
                prologue_ops: 0,
                reductions,
            } => Some((*op, source.clone(), axes.clone(), *reductions)),
            _ => None,
        },
        _ => None,
    }
}

fn hierarchical_reduction_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    let node = &c.nodes[anchor];
    let (op, mut source, mut axes, mut reductions) = reduction_of(c, node)?;
    if !collapsible(op) {
        return None;
    }
    let mut members: BTreeSet<usize> = [anchor].into();
    // Collapse inner reductions with the same combine: map the outer axes (over the
    // inner result) back onto the inner source's axes.
    while let Some((i, inner)) = c.m.producer(&source) {
        let Some((iop, isrc, iaxes, ired)) = reduction_of(c, inner) else {
            break;
        };
        let mut trial = members.clone();
        trial.insert(i);
        if iop != op || !c.self_contained(&trial, anchor) {
            break;
        }
        let src_rank = c.ty(&isrc)?.shape.len();
        let out_rank = inner.ty().shape.len();
        let kept: Vec<usize> = if out_rank == src_rank {
            (0..src_rank).collect()
        } else {
            (0..src_rank).filter(|a| !iaxes.contains(a)).collect()
        };
        let mut all: BTreeSet<usize> = iaxes.iter().copied().collect();
        for a in &axes {
            all.insert(*kept.get(*a)?);
        }
        axes = all.into_iter().collect();
        source = isrc;
        reductions += ired;
        members = trial;
    }
    // Absorb an elementwise prologue: ops read only by the group.
    let mut prologue = 0;
    let mut frontier = vec![source.clone()];
    while let Some(id) = frontier.pop() {
        let Some((i, n)) = c.m.producer(&id) else {
            continue;
        };
        let Some(o) = n.as_op() else { continue };
        if o.kind.category() != OpCategory::Elementwise || members.contains(&i) {
            continue;
        }
        let mut trial = members.clone();
        trial.insert(i);
        if !c.self_contained(&trial, anchor) {
            continue;
        }
        members = trial;
        prologue += 1;
        frontier.extend(o.inputs.iter().cloned());
    }
    if reductions < 2 && prologue == 0 {
        return None;
    }
    Some(Found {
        pattern: Pattern::HierarchicalReduction,
        members,
        params: PatternParams::HierarchicalReduction {
            op,
            axes,
            source,
            prologue_ops: prologue,
            reductions,
        },
    })
}

// ---- elementwise regions -----------------------------------------------------------

fn is_elementwise_op(n: &Node) -> bool {
    n.as_op()
        .is_some_and(|o| o.kind.category() == OpCategory::Elementwise)
}

fn elementwise_rule(c: &Ctx, anchor: usize) -> Option<Found> {
    if !is_elementwise_op(&c.nodes[anchor]) {
        return None;
    }
    // The largest set of elementwise ops, grown from the anchor through operands, whose
    // members other than the anchor are no outputs and are read only inside the set. A
    // candidate joins once every read of it comes from a member; each read is counted once,
    // so this is linear in the size of the chain.
    let mut members: BTreeSet<usize> = [anchor].into();
    let mut unread: HashMap<usize, usize> = HashMap::new();
    let mut work = vec![anchor];
    while let Some(m) = work.pop() {
        for id in c.nodes[m].inputs() {
            let Some((i, n)) = c.m.producer(id) else {
                continue;
            };
            if members.contains(&i) || !is_elementwise_op(n) || c.outputs.contains(id.as_str()) {
                continue;
            }
            let left = unread
                .entry(i)
                .or_insert_with(|| c.consumers.get(id.as_str()).map_or(0, Vec::len));
            *left = left.saturating_sub(1);
            if *left == 0 {
                members.insert(i);
                work.push(i);
            }
        }
    }
    if members.len() < 2 {
        return None;
    }
    let params = fma_params(c, &members, anchor).unwrap_or(PatternParams::ElementwiseChain);
    let pattern = if matches!(params, PatternParams::Fma { .. }) {
        Pattern::Fma
    } else {
        Pattern::ElementwiseChain
    };
    Some(Found {
        pattern,
        members,
        params,
    })
}

fn operand(o: &OpNode, slot: usize) -> Operand {
    match (o.inputs.get(slot), o.args.scalar) {
        (Some(id), _) => Operand::Value(id.clone()),
        (None, Some(s)) => Operand::Scalar(s),
        (None, None) => Operand::Scalar(0.0),
    }
}

/// Exactly `add(mul(a, b), c)`: two members, a multiply feeding an add once.
fn fma_params(c: &Ctx, members: &BTreeSet<usize>, anchor: usize) -> Option<PatternParams> {
    if members.len() != 2 {
        return None;
    }
    let add = c.nodes[anchor].as_op()?;
    let mul_i = *members.iter().find(|&&i| i != anchor)?;
    let mul = c.nodes[mul_i].as_op()?;
    if add.kind != OpKind::Add || mul.kind != OpKind::Mul || mul.args.reverse || add.args.reverse {
        return None;
    }
    let uses = add.inputs.iter().filter(|r| **r == mul.id).count();
    if uses != 1 {
        return None;
    }
    let cpos = add.inputs.iter().position(|r| *r != mul.id);
    let c_op = match cpos {
        Some(p) => Operand::Value(add.inputs[p].clone()),
        None => Operand::Scalar(add.args.scalar?),
    };
    Some(PatternParams::Fma {
        a: operand(mul, 0),
        b: operand(mul, 1),
        c: c_op,
    })
}

// ---- driver ---------------------------------------------------------------------------

/// The rules in the order they run, each with its name. Larger patterns come before
/// the patterns they contain (softmax before attention, GELU before matmul epilogues),
/// elementwise regions last so they only take what nothing else wanted.
const RULES: [(Pattern, Rule); 10] = [
    (Pattern::Softmax, softmax_rule),
    (Pattern::LayerNorm, layer_norm_rule),
    (Pattern::RmsNorm, rms_norm_rule),
    (Pattern::Gelu, gelu_rule),
    (Pattern::SwiGlu, swiglu_rule),
    (Pattern::Attention, attention_rule),
    (Pattern::MatmulBias, matmul_bias_rule),
    (Pattern::ConvBiasActivation, conv_rule),
    (Pattern::HierarchicalReduction, hierarchical_reduction_rule),
    (Pattern::ElementwiseChain, elementwise_rule),
];

/// Fuses a graph; returns the fused graph and what was fused.
pub fn fuse(graph: &Graph) -> (FusedGraph, FusionSummary) {
    let mut nodes: Vec<Node> = graph.ops.iter().cloned().map(Node::Op).collect();
    // Graph inputs are not nodes; the matcher needs their types, so they ride along as
    // a prefix of pseudo-nodes that no rule can anchor on or absorb.
    let outputs: HashSet<String> = graph.outputs.iter().cloned().collect();
    let input_nodes: Vec<Node> = graph
        .inputs
        .iter()
        .map(|i| {
            Node::Op(OpNode {
                id: i.id.clone(),
                kind: OpKind::Cast,
                type_name: "input".into(),
                args: Default::default(),
                inputs: vec![],
                ty: i.ty.clone(),
            })
        })
        .collect();
    let n_inputs = input_nodes.len();
    let snapshot =
        |nodes: &[Node]| -> Vec<Node> { input_nodes.iter().chain(nodes).cloned().collect() };
    // Each pass matches the rule at every anchor, top down, against one snapshot of the
    // graph and applies every hit at once; passes repeat until one finds nothing (a new
    // group may anchor a larger match of the same rule: a reduction of a collapsed
    // reduction). A hit never shares a node with an earlier hit of its pass: members other
    // than the anchor are read only inside their group, and producers come before their
    // consumers, so applying the hits together gives the graph that applying them one at a
    // time would. One pass is linear in the graph (plus what the rule looks at).
    for (_, rule) in RULES {
        loop {
            let all = snapshot(&nodes);
            let ctx = Ctx::new(&all, &outputs);
            // Node index (without the input prefix) -> the hit it belongs to.
            let mut taken: Vec<Option<usize>> = vec![None; nodes.len()];
            let mut hits: Vec<(usize, BTreeSet<usize>, Found)> = Vec::new();
            for anchor in (0..nodes.len()).rev() {
                if taken[anchor].is_some() {
                    continue;
                }
                let Some(f) = rule(&ctx, anchor + n_inputs) else {
                    continue;
                };
                if f.members.len() < 2
                    || !f.members.iter().all(|&m| m >= n_inputs)
                    || !ctx.self_contained(&f.members, anchor + n_inputs)
                {
                    continue;
                }
                let members: BTreeSet<usize> = f.members.iter().map(|m| m - n_inputs).collect();
                if members.iter().any(|&m| taken[m].is_some()) {
                    continue;
                }
                for &m in &members {
                    taken[m] = Some(hits.len());
                }
                hits.push((anchor, members, f));
            }
            if hits.is_empty() {
                break;
            }
            let groups: Vec<FusedGroup> = hits
                .into_iter()
                .map(|(anchor, members, f)| {
                    build_group(&nodes, &members, anchor, f.pattern, f.params)
                })
                .collect();
            let mut groups: Vec<Option<FusedGroup>> = groups.into_iter().map(Some).collect();
            let mut kept = Vec::with_capacity(nodes.len());
            for (i, n) in nodes.into_iter().enumerate() {
                match taken[i] {
                    None => kept.push(n),
                    Some(h) => {
                        if groups[h].as_ref().is_some_and(|g| g.id == n.id()) {
                            kept.extend(groups[h].take().map(Node::Group));
                        }
                    }
                }
            }
            nodes = kept;
        }
    }
    let fused = FusedGraph {
        inputs: graph.inputs.clone(),
        nodes,
        outputs: graph.outputs.clone(),
    };
    let summary = summarize(graph, &fused);
    (fused, summary)
}

fn build_group(
    nodes: &[Node],
    members: &BTreeSet<usize>,
    anchor: usize,
    pattern: Pattern,
    params: PatternParams,
) -> FusedGroup {
    let inner_ids: HashSet<&str> = members.iter().map(|&i| nodes[i].id()).collect();
    let mut inputs: Vec<String> = Vec::new();
    let mut ops = Vec::new();
    for &i in members {
        for r in nodes[i].inputs() {
            if !inner_ids.contains(r.as_str()) && !inputs.contains(r) {
                inputs.push(r.clone());
            }
        }
        ops.extend(nodes[i].clone().into_ops());
    }
    FusedGroup {
        id: nodes[anchor].id().to_string(),
        pattern,
        ops,
        inputs,
        ty: nodes[anchor].ty().clone(),
        params,
    }
}

fn summarize(graph: &Graph, fused: &FusedGraph) -> FusionSummary {
    let types = graph.types();
    let bytes_of = |id: &str| types.get(id).map_or(0, |t| t.bytes());
    let groups: Vec<FusionEntry> = fused
        .groups()
        .map(|g| {
            let unfused: u64 = g
                .ops
                .iter()
                .map(|o| o.inputs.iter().map(|r| bytes_of(r)).sum::<u64>() + o.ty.bytes())
                .sum();
            let fused_bytes: u64 = g.inputs.iter().map(|r| bytes_of(r)).sum::<u64>() + g.ty.bytes();
            FusionEntry {
                id: g.id.clone(),
                pattern: g.pattern,
                ops: g.ops.iter().map(|o| o.id.clone()).collect(),
                bytes_unfused: unfused,
                bytes_fused: fused_bytes,
                bytes_saved: unfused.saturating_sub(fused_bytes),
            }
        })
        .collect();
    FusionSummary {
        ops_before: graph.ops.len(),
        nodes_after: fused.nodes.len(),
        bytes_saved: groups.iter().map(|g| g.bytes_saved).sum(),
        groups,
    }
}
