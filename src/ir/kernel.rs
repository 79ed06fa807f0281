//! The kernel: arenas of values, ops and regions (data) plus each region's op order (layout).

use std::collections::BTreeMap;
use std::fmt;

use super::op::Op;
use super::types::Type;
use crate::dtype::DType;
use crate::error::SourceLoc;

macro_rules! entity {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// Index into the kernel's arena.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity!(
    /// An SSA value: a kernel parameter, an op result or a region argument.
    Value, "%"
);
entity!(
    /// An op in the kernel's op arena.
    OpId, "op"
);
entity!(
    /// A region (op list with block arguments) in the kernel's region arena.
    RegionId, "^r"
);

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueDef {
    /// The runtime parameter with this index in [`Kernel::params`].
    Param(u32),
    /// Result `index` of an op.
    OpResult(OpId, u32),
    /// Block argument `index` of a region.
    RegionArg(RegionId, u32),
}

/// A value's type and definition.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    /// Its type.
    pub ty: Type,
    /// Its definition.
    pub def: ValueDef,
}

/// A contiguous run of values (an op's results are allocated together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ValueRange {
    /// First value.
    pub start: u32,
    /// Number of values.
    pub len: u32,
}

impl ValueRange {
    /// Number of values.
    pub fn len(self) -> usize {
        self.len as usize
    }

    /// True if empty.
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The `i`-th value, if any.
    pub fn get(self, i: usize) -> Option<Value> {
        (i < self.len()).then(|| Value(self.start + i as u32))
    }

    /// The values in order.
    pub fn iter(self) -> impl ExactSizeIterator<Item = Value> {
        (self.start..self.start + self.len).map(Value)
    }
}

/// One op with its results and the user source location that created it.
#[derive(Clone, Debug, PartialEq)]
pub struct OpData {
    /// The op and its operands.
    pub op: Op,
    /// Its results.
    pub results: ValueRange,
    /// Where the user's Rust code built it.
    pub loc: SourceLoc,
    /// The region whose op list holds it.
    pub parent: RegionId,
}

impl OpData {
    /// The first result (most ops have exactly one).
    pub fn result(&self) -> Option<Value> {
        self.results.get(0)
    }
}

/// A region: block arguments and an ordered op list (the last op is a `yield` except in
/// the kernel body).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RegionData {
    /// Block arguments (loop induction variable and carried values, combine operands).
    pub args: Vec<Value>,
    /// Ops in program order.
    pub ops: Vec<OpId>,
    /// The op owning this region (`None` for the kernel body).
    pub parent: Option<OpId>,
}

/// The kind of a runtime kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A pointer to elements of this dtype (an array argument).
    Ptr(DType),
    /// A scalar of this dtype, passed by value.
    Scalar(DType),
}

/// A runtime parameter (constexprs are not runtime parameters: see [`Kernel::constexprs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Name as declared.
    pub name: String,
    /// Pointer or scalar.
    pub kind: ParamKind,
    /// The SSA value standing for it in the body.
    pub value: Value,
    /// A pointer that some `store` or atomic may write through (the runtime returns it as an
    /// output).
    pub stored: bool,
    /// A pointer that some `load` or atomic may read through.
    pub loaded: bool,
}

/// Semantic no-op hints attached to a value (`multiple_of`, `max_contiguous`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hint {
    /// Every element (per dim) is a multiple of these.
    MultipleOf(Vec<i64>),
    /// The first this-many elements (per dim) are contiguous.
    MaxContiguous(Vec<i64>),
}

/// A verified kernel specialised for one set of constexpr values.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// Kernel name.
    pub name: String,
    /// Runtime parameters in declaration order.
    pub params: Vec<Param>,
    /// Constexpr names and values of this specialisation, in declaration order.
    pub constexprs: Vec<(String, i64)>,
    /// Value arena.
    pub values: Vec<ValueData>,
    /// Op arena (data; program order lives in the regions).
    pub ops: Vec<OpData>,
    /// Region arena.
    pub regions: Vec<RegionData>,
    /// The top-level region (no args, no terminator).
    pub body: RegionId,
    /// Hints on values.
    pub hints: Vec<(Value, Hint)>,
}

impl Kernel {
    /// An empty kernel with an empty body region.
    pub fn new(name: impl Into<String>) -> Kernel {
        Kernel {
            name: name.into(),
            params: Vec::new(),
            constexprs: Vec::new(),
            values: Vec::new(),
            ops: Vec::new(),
            regions: vec![RegionData::default()],
            body: RegionId(0),
            hints: Vec::new(),
        }
    }

    /// The type of a value.
    ///
    /// Panics if `v` is not a value of this kernel (an internal invariant; the verifier
    /// checks every operand first).
    pub fn ty(&self, v: Value) -> &Type {
        &self.values[v.index()].ty
    }

    /// The value's data, if it exists.
    pub fn value(&self, v: Value) -> Option<&ValueData> {
        self.values.get(v.index())
    }

    /// The op's data. Panics on a foreign id.
    pub fn op(&self, id: OpId) -> &OpData {
        &self.ops[id.index()]
    }

    /// The region's data. Panics on a foreign id.
    pub fn region(&self, id: RegionId) -> &RegionData {
        &self.regions[id.index()]
    }

    /// The op defining `v`, if it is an op result.
    pub fn def_op(&self, v: Value) -> Option<OpId> {
        match self.value(v)?.def {
            ValueDef::OpResult(op, _) => Some(op),
            _ => None,
        }
    }

    /// The runtime parameter called `name`, with its index.
    pub fn param(&self, name: &str) -> Option<(usize, &Param)> {
        self.params.iter().enumerate().find(|(_, p)| p.name == name)
    }

    /// The value of a constexpr of this specialisation.
    pub fn constexpr(&self, name: &str) -> Option<i64> {
        self.constexprs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// The constexprs as a map.
    pub fn constexpr_map(&self) -> BTreeMap<String, i64> {
        self.constexprs.iter().cloned().collect()
    }

    /// Indices (into [`Kernel::params`]) of the pointer params written by the kernel.
    pub fn outputs(&self) -> Vec<usize> {
        self.params
            .iter()
            .enumerate()
            .filter(|(_, p)| p.stored)
            .map(|(i, _)| i)
            .collect()
    }

    /// Hints recorded on `v`.
    pub fn hints_of(&self, v: Value) -> impl Iterator<Item = &Hint> {
        self.hints
            .iter()
            .filter(move |(h, _)| *h == v)
            .map(|(_, h)| h)
    }

    /// All ops in program order, walking nested regions depth first (an op before the ops
    /// of its regions).
    pub fn walk(&self) -> Vec<OpId> {
        let mut out = Vec::with_capacity(self.ops.len());
        self.walk_region(self.body, &mut out);
        out
    }

    fn walk_region(&self, r: RegionId, out: &mut Vec<OpId>) {
        for &id in &self.region(r).ops {
            out.push(id);
            for sub in self.op(id).op.regions() {
                self.walk_region(sub, out);
            }
        }
    }

    /// Recomputes [`Param::stored`] and [`Param::loaded`] by tracing which parameters each
    /// pointer value may derive from (through pointer arithmetic, shape ops, selects,
    /// loop-carried values and branch results). The kernel must be verified.
    pub fn compute_param_access(&mut self) {
        let nparams = self.params.len();
        if nparams == 0 {
            return;
        }
        let words = nparams.div_ceil(64);
        let origin = self.pointer_origins();
        // Row 0 collects the loaded params, row 1 the stored ones.
        let mut access = ParamSets::new(2, words);
        for data in &self.ops {
            match &data.op {
                Op::Load { ptr, .. } => access.union_from(0, &origin, ptr.index()),
                Op::Store { ptr, .. } => access.union_from(1, &origin, ptr.index()),
                Op::AtomicRmw { ptr, .. } | Op::AtomicCas { ptr, .. } => {
                    access.union_from(0, &origin, ptr.index());
                    access.union_from(1, &origin, ptr.index());
                }
                _ => {}
            }
        }
        for (i, p) in self.params.iter_mut().enumerate() {
            let is_ptr = matches!(p.kind, ParamKind::Ptr(_));
            p.loaded = is_ptr && access.contains(0, i);
            p.stored = is_ptr && access.contains(1, i);
        }
    }

    /// The first store or atomic (in program order) that may write through parameter
    /// `param`. The kernel must be verified.
    pub fn store_through(&self, param: usize) -> Option<OpId> {
        let origin = self.pointer_origins();
        self.walk().into_iter().find(|&id| match &self.op(id).op {
            Op::Store { ptr, .. } | Op::AtomicRmw { ptr, .. } | Op::AtomicCas { ptr, .. } => {
                origin.contains(ptr.index(), param)
            }
            _ => false,
        })
    }

    /// The set of pointer params each value may derive from, as a bit set of `words` u64s
    /// per value (one bit per parameter, however many there are).
    fn pointer_origins(&self) -> ParamSets {
        let nparams = self.params.len();
        let words = nparams.div_ceil(64);
        let mut origin = ParamSets::new(self.values.len(), words);
        for (i, p) in self.params.iter().enumerate() {
            if matches!(p.kind, ParamKind::Ptr(_)) {
                origin.insert(p.value.index(), i);
            }
        }
        let order = self.walk();
        // Iterate to a fixed point (loops feed yields back into region args).
        loop {
            let mut changed = false;
            let mut join = |dst: Value, src: usize, origin: &mut ParamSets| {
                changed |= origin.union_into(dst.index(), src);
            };
            for &id in &order {
                let data = self.op(id);
                // The value whose set flows into every result of this op.
                let mut from: Option<Value> = None;
                let mut pair: Option<(Value, Value)> = None;
                match &data.op {
                    Op::AddPtr { ptr, .. } => from = Some(*ptr),
                    Op::Splat { src }
                    | Op::Broadcast { src }
                    | Op::ExpandDims { src, .. }
                    | Op::Reshape { src }
                    | Op::Permute { src, .. }
                    | Op::Split { src }
                    | Op::Bitcast { src }
                    | Op::Cast { src } => from = Some(*src),
                    Op::Select {
                        on_true, on_false, ..
                    } => pair = Some((*on_true, *on_false)),
                    Op::Join { lhs, rhs } => pair = Some((*lhs, *rhs)),
                    Op::For { init, body, .. } => {
                        let r = self.region(*body);
                        for (k, v) in init.iter().enumerate() {
                            if let Some(a) = r.args.get(k + 1) {
                                join(*a, v.index(), &mut origin);
                            }
                        }
                    }
                    Op::While {
                        init, cond, body, ..
                    } => {
                        for r in [*cond, *body] {
                            for (k, v) in init.iter().enumerate() {
                                if let Some(a) = self.region(r).args.get(k) {
                                    join(*a, v.index(), &mut origin);
                                }
                            }
                        }
                    }
                    Op::Yield { values } => {
                        // Feed yields to the parent's results (and loop args).
                        let parent = self.region(data.parent).parent;
                        if let Some(p) = parent {
                            let pd = self.op(p);
                            let arg_shift = match pd.op {
                                Op::For { .. } => Some(1usize),
                                Op::While { .. } => Some(0),
                                _ => None,
                            };
                            let is_cond =
                                matches!(pd.op, Op::While { cond, .. } if cond == data.parent);
                            if !is_cond {
                                for (k, v) in values.iter().enumerate() {
                                    let b = v.index();
                                    if let Some(r) = pd.results.get(k) {
                                        join(r, b, &mut origin);
                                    }
                                    if let Some(shift) = arg_shift {
                                        for reg in pd.op.regions() {
                                            if let Some(a) = self.region(reg).args.get(k + shift) {
                                                join(*a, b, &mut origin);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    _ => {}
                }
                for src in from
                    .into_iter()
                    .chain(pair.into_iter().flat_map(|(a, b)| [a, b]))
                {
                    for r in data.results.iter() {
                        join(r, src.index(), &mut origin);
                    }
                }
            }
            if !changed {
                break;
            }
        }
        origin
    }
}

/// One bit set of parameter indices per row (value), `words` u64s each, in one vector.
struct ParamSets {
    words: usize,
    bits: Vec<u64>,
}

impl ParamSets {
    fn new(rows: usize, words: usize) -> ParamSets {
        ParamSets {
            words,
            bits: vec![0; rows * words],
        }
    }

    fn row(&self, r: usize) -> std::ops::Range<usize> {
        r * self.words..(r + 1) * self.words
    }

    fn insert(&mut self, r: usize, param: usize) {
        self.bits[r * self.words + param / 64] |= 1 << (param % 64);
    }

    fn contains(&self, r: usize, param: usize) -> bool {
        self.bits[r * self.words + param / 64] & (1 << (param % 64)) != 0
    }

    /// Adds row `src` to row `dst`; true if `dst` grew.
    fn union_into(&mut self, dst: usize, src: usize) -> bool {
        let mut grew = false;
        for w in 0..self.words {
            let (d, s) = (dst * self.words + w, src * self.words + w);
            let merged = self.bits[d] | self.bits[s];
            grew |= merged != self.bits[d];
            self.bits[d] = merged;
        }
        grew
    }

    /// Adds row `src` of `other` to row `dst` of `self` (same width).
    fn union_from(&mut self, dst: usize, other: &ParamSets, src: usize) {
        let (d, s) = (self.row(dst), other.row(src));
        for (a, b) in self.bits[d].iter_mut().zip(&other.bits[s]) {
            *a |= b;
        }
    }
}
