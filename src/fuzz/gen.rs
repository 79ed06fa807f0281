//! Random well-typed kernels: each program is generated inside a throwaway build of the DSL,
//! so result types and shapes come from the DSL itself; a choice the DSL rejects discards
//! the program and the generator draws again.

use std::collections::BTreeMap;

use super::ast::*;
use super::values::{lit_of, random_bits, Kind};
use super::{Config, Known, Rng};
use crate::codegen::ReductionLayout;
use crate::dtype::DType;
use crate::tl::{self, Tensor};

/// Elements per input buffer and program (the largest tile).
pub const MAX_TILE: usize = 1024;

#[derive(Clone, Copy)]
struct Info {
    dtype: DType,
    shape_id: usize,
    /// 0: any values; 1: sums exact in any order; 2: products too.
    nice: u8,
    /// May be an operand (inexact results and results of shared atomics may not).
    usable: bool,
    /// Its NaNs have the same bits on every target: not a float, or moved without
    /// arithmetic from loads, literals and bitcasts. Arithmetic on NaNs gives a NaN whose
    /// sign and payload IEEE 754 leaves open (GPUs give one canonical NaN, CPUs propagate an
    /// operand's payload), so only these values may be bitcast to integers.
    nan_bits: bool,
}

struct Gen<'a> {
    rng: &'a mut Rng,
    cfg: &'a Config,
    batch: &'a mut Batch,
    kinds: &'a mut Vec<Kind>,
    prog: Prog,
    infos: Vec<Info>,
    shapes: Vec<Vec<usize>>,
    done: Vec<Tensor>,
    params: Params,
    idx: Option<TileIdx>,
    dtypes: Vec<DType>,
    /// Dtypes of this batch (f64 only in batches for the CPU targets).
    all: Vec<DType>,
    /// Atomics allowed; then every output is i32, u32 or f32 (MLX makes every output of
    /// such a kernel atomic on Metal).
    atomics: bool,
    /// Outputs holding stores (not atomics).
    sink_outs: Vec<usize>,
    failed: bool,
}

fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let x = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let y = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return None;
        };
    }
    Some(out)
}

const ALL_UN: [Un; 30] = [
    Un::Neg,
    Un::Abs,
    Un::Not,
    Un::Floor,
    Un::Ceil,
    Un::Sqrt,
    Un::Exp,
    Un::Exp2,
    Un::Log,
    Un::Log2,
    Un::Rsqrt,
    Un::Sin,
    Un::Cos,
    Un::Erf,
    Un::Sigmoid,
    Un::Tan,
    Un::Asin,
    Un::Acos,
    Un::Atan,
    Un::Sinh,
    Un::Cosh,
    Un::Asinh,
    Un::Acosh,
    Un::Atanh,
    Un::Log1p,
    Un::Expm1,
    Un::Log10,
    Un::Exp10,
    Un::Cbrt,
    Un::Erfinv,
];

const ALL_BIN: [Bin; 19] = [
    Bin::Add,
    Bin::Sub,
    Bin::Mul,
    Bin::Div,
    Bin::Rem,
    Bin::FloorDiv,
    Bin::And,
    Bin::Or,
    Bin::Xor,
    Bin::Shl,
    Bin::Shr,
    Bin::Max,
    Bin::Min,
    Bin::MaxNan,
    Bin::MinNan,
    Bin::Umulhi,
    Bin::Pow,
    Bin::Atan2,
    Bin::Hypot,
];

fn is_num(d: DType) -> bool {
    d != DType::Bool
}

fn is_math(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64)
}

fn un_ok(u: Un, d: DType) -> bool {
    match u {
        Un::Neg | Un::Abs => is_num(d),
        Un::Not => !d.is_float(),
        _ => is_math(d),
    }
}

fn bin_ok(op: Bin, a: DType, b: DType) -> bool {
    let ints = a.is_int() && b.is_int();
    let intb = !a.is_float() && !b.is_float();
    let floats = a.is_float() && b.is_float();
    match op {
        Bin::Add | Bin::Sub | Bin::Mul | Bin::Div => is_num(a) && is_num(b),
        Bin::Rem => ints || floats,
        Bin::FloorDiv | Bin::Shl | Bin::Shr => ints,
        Bin::And | Bin::Or | Bin::Xor => intb,
        Bin::Max | Bin::Min => ints || floats,
        Bin::MaxNan | Bin::MinNan => floats,
        Bin::Umulhi => a == b && matches!(a, DType::I32 | DType::U32 | DType::I64 | DType::U64),
        // Triton's libdevice takes fp32 and fp64 (after promotion).
        Bin::Pow | Bin::Atan2 | Bin::Hypot => a == b && is_math(a),
    }
}

impl Gen<'_> {
    fn open(&self, k: Known) -> bool {
        self.cfg.known_open.contains(&k)
    }

    fn scalar(&mut self, v: i32, k: &mut tl::KernelBuilder) -> usize {
        let i = self.batch.scalars.len();
        self.batch.scalars.push(v);
        self.params
            .scalars
            .push(k.scalar(DType::I32, &format!("s{i}")));
        i
    }

    fn output(&mut self, o: OutBuf, k: &mut tl::KernelBuilder) -> usize {
        let i = self.batch.outputs.len();
        self.params.outputs.push(k.ptr(o.dtype, &format!("out{i}")));
        self.batch.outputs.push(o);
        i
    }

    fn input(&mut self, d: DType, kind: Kind, k: &mut tl::KernelBuilder) -> usize {
        let reuse: Vec<usize> = (0..self.batch.inputs.len())
            .filter(|&i| self.batch.inputs[i].dtype == d && self.kinds[i] == kind)
            .collect();
        if !reuse.is_empty() && self.rng.chance(0.6) {
            return reuse[self.rng.below(reuse.len() as u64) as usize];
        }
        let len = self.batch.grid * MAX_TILE;
        let bits = (0..len).map(|_| random_bits(self.rng, d, kind)).collect();
        let i = self.batch.inputs.len();
        self.batch.inputs.push(InBuf { dtype: d, bits });
        self.kinds.push(kind);
        self.params.inputs.push(k.ptr(d, &format!("in{i}")));
        i
    }

    fn shape_id(&mut self, s: Vec<usize>) -> usize {
        if let Some(i) = self.shapes.iter().position(|x| *x == s) {
            return i;
        }
        self.shapes.push(s);
        self.shapes.len() - 1
    }

    /// Records and emits `n`; `None` when the DSL rejected it.
    fn push(&mut self, n: Node, nice: u8) -> Option<usize> {
        let idx = self.idx.as_ref()?;
        let t = emit(&self.prog, &n, &self.done, &self.params, idx);
        if t.is_poisoned() {
            self.failed = true;
            return None;
        }
        let usable = !n.inexact() && !matches!(n, Node::Atomic { shared: true, .. });
        let usable = usable
            && !matches!(
                n,
                Node::Reduce {
                    axis: Some(_),
                    keep: false,
                    ..
                } if self.prog.rank == 2
            );
        let shape_id = self.shape_id(t.shape());
        let nan_bits = !t.dtype().is_float()
            || match n {
                Node::Load { .. } | Node::Full { .. } | Node::Bitcast(..) => true,
                Node::Where(_, a, b) => self.infos[a].nan_bits && self.infos[b].nan_bits,
                _ => false,
            };
        self.infos.push(Info {
            dtype: t.dtype(),
            shape_id,
            nice,
            usable,
            nan_bits,
        });
        self.prog.nodes.push(n);
        self.done.push(t);
        Some(self.prog.nodes.len() - 1)
    }

    fn shape(&self, n: usize) -> &[usize] {
        &self.shapes[self.infos[n].shape_id]
    }

    /// A random usable node satisfying `f`, recent ones more likely.
    fn pick(&mut self, f: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let c: Vec<usize> = (0..self.infos.len())
            .filter(|&i| self.infos[i].usable && f(self, i))
            .collect();
        if c.is_empty() {
            return None;
        }
        if self.rng.chance(0.5) {
            let k = c.len().min(3);
            return Some(c[c.len() - 1 - self.rng.below(k as u64) as usize]);
        }
        Some(c[self.rng.below(c.len() as u64) as usize])
    }

    fn dtype(&mut self) -> DType {
        let d = self.dtypes.clone();
        *self.rng.pick(&d)
    }

    fn new_load(&mut self, k: &mut tl::KernelBuilder) -> Option<usize> {
        let d = self.dtype();
        let kind = if d.is_float() {
            *self
                .rng
                .pick(&[Kind::Edge, Kind::Edge, Kind::Nice, Kind::Pow2])
        } else {
            Kind::Edge
        };
        let buf = self.input(d, kind, k);
        let masked = self.rng.chance(0.7);
        let other = lit_of(d, random_bits(self.rng, d, kind));
        let nice = match kind {
            Kind::Edge => 0,
            Kind::Nice => 1,
            Kind::Pow2 => 2,
        };
        self.push(Node::Load { buf, masked, other }, nice)
    }

    fn new_full(&mut self) -> Option<usize> {
        let d = self.dtype();
        let kind = *self.rng.pick(&[Kind::Edge, Kind::Nice]);
        let value = lit_of(d, random_bits(self.rng, d, kind));
        let scalar = self.rng.chance(0.3);
        let nice = if kind == Kind::Nice { 1 } else { 0 };
        self.push(
            Node::Full {
                dtype: d,
                value,
                scalar,
            },
            nice,
        )
    }

    fn operand(&mut self, k: &mut tl::KernelBuilder) -> Option<usize> {
        if self.rng.chance(0.8) {
            if let Some(n) = self.pick(|_, _| true) {
                return Some(n);
            }
        }
        if self.rng.chance(0.8) {
            self.new_load(k)
        } else {
            self.new_full()
        }
    }

    fn compatible(&self, a: usize, b: usize) -> bool {
        broadcast(self.shape(a), self.shape(b)).is_some()
    }

    fn step(&mut self, k: &mut tl::KernelBuilder) -> Option<usize> {
        let rank = self.prog.rank;
        match self.rng.below(100) {
            0..=9 => self.new_load(k),
            10..=13 => self.new_full(),
            14..=16 => {
                let axis = self.rng.below(rank as u64) as usize;
                self.push(Node::Index { axis }, 0)
            }
            17..=18 => {
                let v = self.rng.below(21) as i32 - 10;
                let idx = if self.batch.scalars.is_empty() || self.rng.chance(0.5) {
                    self.scalar(v, k)
                } else {
                    self.rng.below(self.batch.scalars.len() as u64) as usize
                };
                self.push(Node::Param { idx }, 0)
            }
            19..=30 => {
                let a = self.operand(k)?;
                let d = self.infos[a].dtype;
                let ops: Vec<Un> = ALL_UN.iter().copied().filter(|u| un_ok(*u, d)).collect();
                if ops.is_empty() {
                    return None;
                }
                let u = *self.rng.pick(&ops);
                let nice = if matches!(u, Un::Neg | Un::Abs) {
                    self.infos[a].nice
                } else {
                    0
                };
                self.push(Node::Unary(u, a), nice)
            }
            31..=50 => {
                let a = self.operand(k)?;
                let b = if self.rng.chance(0.3) {
                    self.pick(|g, i| g.infos[i].dtype == g.infos[a].dtype && g.compatible(a, i))
                } else {
                    self.pick(|g, i| g.compatible(a, i))
                }?;
                let (da, db) = (self.infos[a].dtype, self.infos[b].dtype);
                let ops: Vec<Bin> = ALL_BIN
                    .iter()
                    .copied()
                    .filter(|o| bin_ok(*o, da, db))
                    .collect();
                if ops.is_empty() {
                    return None;
                }
                let op = *self.rng.pick(&ops);
                let nice =
                    if matches!(op, Bin::Max | Bin::Min | Bin::MaxNan | Bin::MinNan) && da == db {
                        self.infos[a].nice.min(self.infos[b].nice)
                    } else {
                        0
                    };
                self.push(Node::Binary(op, a, b), nice)
            }
            51..=56 => {
                let a = self.operand(k)?;
                let d = self.infos[a].dtype;
                let lits: Vec<(Bin, crate::fuzz::ast::Lit)> = if d.is_float() {
                    vec![
                        (Bin::Add, Lit::Float(1.5)),
                        (Bin::Mul, Lit::Float(-2.0)),
                        (Bin::Sub, Lit::Int(3)),
                        (Bin::Div, Lit::Float(3.0)),
                        (Bin::Max, Lit::Float(0.0)),
                        (Bin::Rem, Lit::Float(2.5)),
                    ]
                } else if d == DType::Bool {
                    vec![(Bin::And, Lit::Bool(true)), (Bin::Add, Lit::Int(1))]
                } else {
                    vec![
                        (Bin::Add, Lit::Int(7)),
                        (Bin::Mul, Lit::Int(-3)),
                        (Bin::Sub, Lit::Int(1)),
                        (Bin::FloorDiv, Lit::Int(-4)),
                        (Bin::Rem, Lit::Int(5)),
                        (Bin::And, Lit::Int(0x55)),
                        (Bin::Shl, Lit::Int(3)),
                        (Bin::Shr, Lit::Int(1)),
                        (Bin::Add, Lit::Float(0.5)),
                        (Bin::Max, Lit::Int(-1)),
                    ]
                };
                let (op, l) = *self.rng.pick(&lits);
                self.push(Node::BinLit(op, a, l), 0)
            }
            57..=62 => {
                let a = self.operand(k)?;
                let b = self.pick(|g, i| {
                    g.compatible(a, i)
                        && (g.infos[i].dtype == DType::Bool) == (g.infos[a].dtype == DType::Bool)
                })?;
                let c = *self
                    .rng
                    .pick(&[Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge, Cmp::Eq, Cmp::Ne]);
                self.push(Node::Cmp(c, a, b), 0)
            }
            63..=67 => {
                let c = self.pick(|g, i| g.infos[i].dtype == DType::Bool)?;
                let a = self.pick(|g, i| g.compatible(c, i))?;
                let b = self.pick(|g, i| {
                    g.compatible(c, i)
                        && g.compatible(a, i)
                        && g.infos[i].dtype.is_float() == g.infos[a].dtype.is_float()
                })?;
                let nice = if self.infos[a].dtype == self.infos[b].dtype {
                    self.infos[a].nice.min(self.infos[b].nice)
                } else {
                    0
                };
                self.push(Node::Where(c, a, b), nice)
            }
            68..=69 => {
                let a = self.pick(|g, i| g.infos[i].dtype.is_float())?;
                let b =
                    self.pick(|g, i| g.infos[i].dtype == g.infos[a].dtype && g.compatible(a, i))?;
                let c = self.pick(|g, i| {
                    g.infos[i].dtype == g.infos[a].dtype && g.compatible(a, i) && g.compatible(b, i)
                })?;
                self.push(Node::Fma(a, b, c), 0)
            }
            70..=76 => {
                let a = self.operand(k)?;
                let from = self.infos[a].dtype;
                let all = self.all.clone();
                let to = *self.rng.pick(&all);
                if from.is_float() && to.is_int() && self.open(Known::FloatToIntCast) {
                    return None;
                }
                let nice = if from.is_float() && to.is_float() {
                    self.infos[a].nice
                } else {
                    0
                };
                if self.rng.chance(0.2)
                    && to != DType::Bool
                    && from != DType::Bool
                    && self.infos[a].nan_bits
                {
                    let same: Vec<DType> = all
                        .iter()
                        .copied()
                        .filter(|d| d.bits() == from.bits() && *d != DType::Bool)
                        .collect();
                    let to = *self.rng.pick(&same);
                    return self.push(Node::Bitcast(a, to), 0);
                }
                self.push(Node::Cast(a, to), nice)
            }
            77..=84 => self.reduce(),
            85..=89 => self.scan(),
            90..=91 => self.dot(),
            92..=94 => self.looped(k),
            95..=96 => {
                let a = self.operand(k)?;
                let d = self.infos[a].dtype;
                let ops: Vec<Un> = [Un::Neg, Un::Abs, Un::Not, Un::Floor, Un::Ceil]
                    .into_iter()
                    .filter(|u| un_ok(*u, d))
                    .collect();
                if ops.is_empty() {
                    return None;
                }
                let (then, els) = (*self.rng.pick(&ops), *self.rng.pick(&ops));
                let idx = if self.batch.scalars.is_empty() || self.rng.chance(0.3) {
                    let v = self.rng.below(9) as i32 - 4;
                    self.scalar(v, k)
                } else {
                    self.rng.below(self.batch.scalars.len() as u64) as usize
                };
                let kk = self.rng.below(5) as i64 - 2;
                self.push(
                    Node::If {
                        idx,
                        k: kk,
                        a,
                        then,
                        els,
                    },
                    0,
                )
            }
            _ if self.atomics => self.atomic(k),
            _ => self.new_full(),
        }
    }

    fn reduce(&mut self) -> Option<usize> {
        let a = self.pick(|g, i| !g.shape(i).is_empty())?;
        let d = self.infos[a].dtype;
        let shape = self.shape(a).to_vec();
        let axis = if self.rng.chance(0.2) {
            None
        } else {
            Some(self.rng.below(shape.len() as u64) as usize)
        };
        let keep = self.rng.chance(0.7);
        let len: usize = match axis {
            Some(ax) => shape[ax],
            None => shape.iter().product(),
        };
        let sum_ok = !d.is_float() || (self.infos[a].nice >= 1 && self.float_sum_len_ok(d, len));
        let mut ops = vec![Red::Max, Red::Min, Red::CustomMax];
        if sum_ok {
            ops.extend([Red::Sum, Red::CustomAdd]);
        }
        if !(d == DType::I32 && self.open(Known::ArgI32Scratch)) {
            ops.extend([Red::ArgMax, Red::ArgMin]);
        }
        if d.is_int() {
            ops.extend([Red::XorSum, Red::CustomOr]);
        }
        if d == DType::Bool {
            ops.retain(|o| matches!(o, Red::Sum | Red::CustomOr | Red::Max | Red::Min));
            ops.push(Red::CustomOr);
        }
        let op = *self.rng.pick(&ops);
        self.push(Node::Reduce { op, a, axis, keep }, 0)
    }

    fn float_sum_len_ok(&self, d: DType, len: usize) -> bool {
        match d {
            DType::F16 => len <= 256,
            DType::BF16 => len <= 32,
            _ => true,
        }
    }

    fn scan(&mut self) -> Option<usize> {
        let a = self.pick(|g, i| !g.shape(i).is_empty())?;
        let d = self.infos[a].dtype;
        let shape = self.shape(a).to_vec();
        let axis = self.rng.below(shape.len() as u64) as usize;
        let reverse = self.rng.chance(0.4);
        let nice = self.infos[a].nice;
        let mut ops = vec![Scan::CustomMax];
        if !d.is_float() || (nice >= 1 && self.float_sum_len_ok(d, shape[axis])) {
            ops.extend([Scan::Sum, Scan::CustomAdd]);
        }
        if (!d.is_float() || nice >= 2) && !reverse {
            ops.push(Scan::Prod);
        }
        if !(reverse && self.open(Known::ReverseScanOrder)) {
            ops.extend([Scan::First, Scan::Last]);
        }
        if d == DType::Bool {
            ops.retain(|o| matches!(o, Scan::First | Scan::Last | Scan::CustomMax));
        }
        let op = *self.rng.pick(&ops);
        let keeps_nice = matches!(op, Scan::CustomMax | Scan::First | Scan::Last);
        self.push(
            Node::Scan {
                op,
                a,
                axis,
                reverse,
            },
            if keeps_nice { nice } else { 0 },
        )
    }

    fn dot(&mut self) -> Option<usize> {
        let p = &self.prog;
        if p.rank != 2 || p.r != p.c || p.r < 16 {
            return None;
        }
        let tile = self.prog.shape();
        let ok = |g: &Self, i: usize| {
            let d = g.infos[i].dtype;
            g.shape(i) == tile
                && (d == DType::I8
                    || (matches!(d, DType::F16 | DType::BF16 | DType::F32) && g.infos[i].nice >= 1))
        };
        let a = self.pick(ok)?;
        let b = self.pick(|g, i| ok(g, i) && g.infos[i].dtype == g.infos[a].dtype)?;
        let acc_d = if self.infos[a].dtype == DType::I8 {
            DType::I32
        } else {
            DType::F32
        };
        let acc = if self.rng.chance(0.4) {
            self.pick(|g, i| {
                g.shape(i) == tile
                    && g.infos[i].dtype == acc_d
                    && (acc_d == DType::I32 || g.infos[i].nice >= 1)
            })
        } else {
            None
        };
        self.push(Node::Dot(a, b, acc), 0)
    }

    fn looped(&mut self, k: &mut tl::KernelBuilder) -> Option<usize> {
        let init = self.pick(|g, i| g.infos[i].dtype != DType::Bool)?;
        let d = self.infos[init].dtype;
        let x = if self.rng.chance(0.3) {
            None
        } else {
            Some(self.pick(|g, i| {
                g.infos[i].dtype == d
                    && broadcast(g.shape(init), g.shape(i)).as_deref() == Some(g.shape(init))
            })?)
        };
        let mut ops = vec![Bin::Add, Bin::Sub, Bin::Mul, Bin::Max, Bin::Min];
        if d.is_int() {
            ops.push(Bin::Xor);
        }
        let op = *self.rng.pick(&ops);
        let lo = self.rng.below(6) as i32 - 2;
        let hi = self.rng.below(9) as i32 - 1;
        let step = if self.open(Known::NonPositiveStep) {
            1 + self.rng.below(3) as i32
        } else {
            *self.rng.pick(&[1, 2, 3, -1, -2])
        };
        let bounds = [self.scalar(lo, k), self.scalar(hi, k), self.scalar(step, k)];
        self.push(
            Node::Loop {
                init,
                x,
                op,
                bounds,
            },
            0,
        )
    }

    fn atomic(&mut self, k: &mut tl::KernelBuilder) -> Option<usize> {
        let val =
            self.pick(|g, i| matches!(g.infos[i].dtype, DType::I32 | DType::U32 | DType::F32))?;
        let d = self.infos[val].dtype;
        let shared = self.rng.chance(0.5);
        // Float max/min order NaNs by sign (IEEE totalOrder, as Triton): only operands
        // whose NaN bits every target defines alike.
        let mut ops = if d.is_int() || self.infos[val].nan_bits {
            vec![Atom::Max, Atom::Min]
        } else {
            vec![]
        };
        if d.is_int() {
            ops.extend([Atom::Add, Atom::And, Atom::Or, Atom::Xor]);
        } else if !shared || self.infos[val].nice >= 1 {
            ops.push(Atom::Add);
        }
        if !shared {
            ops.push(Atom::Xchg);
        }
        if ops.is_empty() {
            return None;
        }
        let op = *self.rng.pick(&ops);
        let tile = self.prog.tile();
        let len = if shared { tile } else { tile * self.batch.grid };
        let fill = if d.is_float() {
            *self.rng.pick(&[0.0, -0.0, 1.5, -3.0, f64::NAN])
        } else if d == DType::U32 {
            self.rng.below(40) as f64
        } else {
            self.rng.below(41) as f64 - 20.0
        };
        let buf = self.output(
            OutBuf {
                dtype: d,
                len,
                fill,
            },
            k,
        );
        let masked = self.rng.chance(0.5);
        self.push(
            Node::Atomic {
                op,
                buf,
                val,
                masked,
                shared,
            },
            0,
        )
    }

    fn sink(&mut self, node: usize, k: &mut tl::KernelBuilder) -> bool {
        let mut node = node;
        let mut d = self.infos[node].dtype;
        if self.atomics && !matches!(d, DType::I32 | DType::U32 | DType::F32) {
            let to = if d.is_float() { DType::F32 } else { DType::I32 };
            match self.push(Node::Cast(node, to), 0) {
                Some(n) => node = n,
                None => return false,
            }
            d = to;
        }
        // Mostly 77, which every dtype but bool holds exactly: outputs sharing a fill cost
        // Metal no extra buffers (see `fits_metal`).
        let fill = if d == DType::Bool {
            1.0
        } else if self.rng.chance(0.7) {
            77.0
        } else if d.is_float() {
            *self.rng.pick(&[f64::NAN, -7.25])
        } else {
            *self.rng.pick(&[90.0, 3.0])
        };
        let len = self.prog.tile() * self.batch.grid;
        // Stores of one dtype share a buffer, each in its own region: fewer parameters.
        let shared = (0..self.batch.outputs.len())
            .find(|&o| self.sink_outs.contains(&o) && self.batch.outputs[o].dtype == d);
        let (out, base) = match shared {
            Some(o) if self.rng.chance(0.8) => {
                let base = self.batch.outputs[o].len;
                self.batch.outputs[o].len += len;
                (o, base)
            }
            _ => {
                let o = self.output(
                    OutBuf {
                        dtype: d,
                        len,
                        fill,
                    },
                    k,
                );
                self.sink_outs.push(o);
                (o, 0)
            }
        };
        let s = Sink {
            node,
            out,
            base,
            masked: self.rng.chance(0.6),
        };
        let Some(idx) = self.idx.as_ref() else {
            return false;
        };
        emit_sink(&self.prog, &s, &self.done, &self.params, idx);
        self.prog.sinks.push(s);
        true
    }
}

/// The tolerance of a sink of `node`.
pub fn sink_tol(node: &Node) -> Tol {
    if node.inexact() {
        Tol::Ulps(4)
    } else {
        Tol::Exact
    }
}

/// Whether Metal binds every buffer of a batch's launch (at most [`crate::emu::MAX_BUFFERS`]),
/// counted on the program the emulated target would run, so that every batch the
/// generator makes runs there. A batch Metal refuses for another reason (f64) is kept for
/// the other targets, as is one whose launch fails: the run reports that failure.
fn fits_metal(b: &Batch) -> bool {
    match super::case_of(b, &Config::default()).and_then(|c| c.metal_buffers()) {
        Ok(n) => n <= crate::emu::MAX_BUFFERS,
        Err(_) => true,
    }
}

/// Generates one program into `batch` (its buffers and scalars included); `false` (and
/// `batch` unchanged) when the DSL rejected it.
fn gen_prog(
    rng: &mut Rng,
    cfg: &Config,
    batch: &mut Batch,
    kinds: &mut Vec<Kind>,
    all: &[DType],
    atomics: bool,
    sink_outs: &mut Vec<usize>,
) -> bool {
    let saved = (batch.clone(), kinds.clone(), sink_outs.clone());
    let rank = if rng.chance(0.3) { 1 } else { 2 };
    let dot = rank == 2 && rng.chance(0.15);
    let (r, c) = if dot {
        let n = *rng.pick(&[16, 32]);
        (n, n)
    } else if rank == 1 {
        (1, 1usize << rng.below(11))
    } else {
        let r = 1usize << rng.below(5);
        let big = rng.chance(0.2);
        let c = 1usize << rng.below(if big { 11 } else { 7 });
        (r, c.min(MAX_TILE / r))
    };
    let mut dtypes = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let d = *rng.pick(all);
        dtypes.push(d);
    }
    if dot {
        dtypes.push(*rng.pick(&[DType::F16, DType::BF16, DType::F32, DType::I8]));
    }
    let n_ops = 2 + rng.below(cfg.max_nodes as u64 - 1) as usize;
    let mut ok = false;
    let build = tl::build("fuzz_gen", &BTreeMap::new(), |k| {
        let params = declare(batch, k);
        let mut g = Gen {
            rng,
            cfg,
            batch,
            kinds,
            prog: Prog {
                rank,
                r,
                c,
                mask_by: [0, 0],
                nodes: vec![],
                sinks: vec![],
            },
            infos: vec![],
            shapes: vec![],
            done: vec![],
            params,
            idx: None,
            dtypes,
            all: all.to_vec(),
            atomics,
            sink_outs: sink_outs.clone(),
            failed: false,
        };
        let total = (g.batch.grid * r) as u64;
        let rows_bound = if g.rng.chance(0.7) {
            g.rng.below(total + 1) as i32
        } else {
            total as i32
        };
        let cols_bound = if g.rng.chance(0.6) {
            g.rng.below(c as u64 + 1) as i32
        } else {
            c as i32
        };
        let (b0, b1) = if rank == 1 {
            let t = (g.batch.grid * c) as u64;
            let v = if g.rng.chance(0.7) {
                g.rng.below(t + 1) as i32
            } else {
                t as i32
            };
            (v, v)
        } else {
            (rows_bound, cols_bound)
        };
        let n = g.batch.scalars.len() as u64;
        let m0 = if n > 0 && g.rng.chance(0.5) {
            g.rng.below(n) as usize
        } else {
            g.scalar(b0, k)
        };
        let m1 = if rank == 1 {
            m0
        } else if n > 0 && g.rng.chance(0.5) {
            g.rng.below(n) as usize
        } else {
            g.scalar(b1, k)
        };
        g.prog.mask_by = [m0, m1];
        g.idx = Some(tile_idx(&g.prog, &g.params));
        if g.new_load(k).is_none() {
            return;
        }
        let mut tries = 0;
        while g.prog.nodes.len() < n_ops && tries < n_ops * 4 && !g.failed {
            tries += 1;
            let _ = g.step(k);
        }
        if g.failed {
            return;
        }
        let last = g.prog.nodes.len() - 1;
        let mut sinks = vec![last];
        for i in 0..last {
            let n = &g.prog.nodes[i];
            let wanted = n.inexact() || (!matches!(n, Node::Atomic { .. }) && g.rng.chance(0.15));
            if wanted && sinks.len() < 4 {
                sinks.push(i);
            }
        }
        for s in sinks {
            if matches!(g.prog.nodes[s], Node::Atomic { shared: true, .. }) {
                continue;
            }
            if !g.sink(s, k) {
                return;
            }
        }
        ok = !g.failed;
        *sink_outs = g.sink_outs.clone();
        let prog = std::mem::replace(
            &mut g.prog,
            Prog {
                rank,
                r,
                c,
                mask_by: [0, 0],
                nodes: vec![],
                sinks: vec![],
            },
        );
        g.batch.progs.push(prog);
    });
    let ok = ok && build.is_ok() && fits_metal(batch);
    if !ok {
        *batch = saved.0;
        *kinds = saved.1;
        *sink_outs = saved.2;
    }
    ok
}

/// A batch of random programs, deterministic from `seed`.
pub fn gen_batch(seed: u64, cfg: &Config) -> Batch {
    let mut rng = Rng::new(seed);
    let layouts = [
        None,
        None,
        Some(ReductionLayout::Default),
        Some(ReductionLayout::RowMajor),
        Some(ReductionLayout::ColumnMajor),
        Some(ReductionLayout::Tiled),
        Some(ReductionLayout::Coalesced),
    ];
    let mut b = Batch {
        seed,
        progs: vec![],
        inputs: vec![],
        outputs: vec![],
        scalars: vec![],
        grid: 1 + rng.below(3) as usize,
        num_warps: *rng.pick(&[1, 2, 4, 4, 8]),
        layout: *rng.pick(&layouts),
    };
    let mut kinds = Vec::new();
    let mut sink_outs = Vec::new();
    // f64 runs on the CPU targets only (Metal and CUDA answer `Unsupported`): rare batches.
    let with_f64 = rng.chance(0.05);
    let all: Vec<DType> = (cfg.dtypes.iter().copied())
        .filter(|&d| with_f64 || d != DType::F64)
        .collect();
    let atomics = rng.chance(0.3);
    let want = 1 + rng.below(cfg.max_progs as u64) as usize;
    let mut attempts = 0;
    while b.progs.len() < want && attempts < want * 6 {
        attempts += 1;
        gen_prog(
            &mut rng,
            cfg,
            &mut b,
            &mut kinds,
            &all,
            atomics,
            &mut sink_outs,
        );
    }
    b
}
