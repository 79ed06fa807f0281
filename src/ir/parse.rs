//! Parser for the text form printed by `Kernel::ir` (STYLE rule 5: the printer round-trips).
//!
//! Source locations are not part of the text; parsed ops get `<ir>:LINE:1` locations.

use super::kernel::{
    Hint, Kernel, OpData, OpId, Param, ParamKind, RegionData, RegionId, Value, ValueData, ValueDef,
    ValueRange,
};
use super::op::{AtomicOp, BinaryOp, CmpPred, MemScope, MemSem, Op, ReduceKind, ScanKind, UnaryOp};
use super::types::{Const, Type};
use super::verify::verify;
use crate::dtype::DType;
use crate::error::{Error, Result, SourceLoc};

type PResult<T> = std::result::Result<T, String>;

impl Kernel {
    /// Parses the text form (as printed by [`Kernel::ir`]) and verifies the kernel.
    pub fn parse_ir(text: &str) -> Result<Kernel> {
        let mut p = Parser {
            lines: text
                .lines()
                .enumerate()
                .map(|(i, l)| (i + 1, l.trim()))
                .filter(|(_, l)| !l.is_empty() && !l.starts_with("//"))
                .collect(),
            pos: 0,
            values: Vec::new(),
            k: Kernel::new(""),
            depth: 0,
        };
        let k = p.kernel().map_err(|m| {
            let line = p.lines.get(p.pos).map(|l| l.0).unwrap_or(0);
            Error::InvalidArgument(format!("IR text, line {line}: {m}"))
        })?;
        verify(&k)?;
        let mut k = k;
        k.compute_param_access();
        Ok(k)
    }
}

struct Parser<'a> {
    lines: Vec<(usize, &'a str)>,
    pos: usize,
    values: Vec<Option<ValueData>>,
    k: Kernel,
    /// Regions being parsed (the kernel body included).
    depth: usize,
}

/// `f32`, `ptr<f32>`, `i32[4]`, `ptr<f16>[64,32]`.
pub(crate) fn parse_type(s: &str) -> PResult<Type> {
    let s = s.trim();
    let (elem, shape) = match s.find('[') {
        Some(i) => {
            let inner = s[i + 1..]
                .strip_suffix(']')
                .ok_or_else(|| format!("bad type `{s}`"))?;
            let dims = inner
                .split(',')
                .map(|d| {
                    d.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("bad dim in `{s}`"))
                })
                .collect::<PResult<Vec<_>>>()?;
            (&s[..i], dims)
        }
        None => (s, Vec::new()),
    };
    let (ptr, name) = match elem.strip_prefix("ptr<").and_then(|e| e.strip_suffix('>')) {
        Some(inner) => (true, inner),
        None => (false, elem),
    };
    let dtype = DType::parse(name).ok_or_else(|| format!("unknown dtype `{name}`"))?;
    Ok(Type { dtype, ptr, shape })
}

/// Value and region numbers above this are rejected (they would size the arenas).
const MAX_ID: u32 = 1 << 24;

fn parse_value(tok: &str) -> PResult<Value> {
    tok.strip_prefix('%')
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| *n < MAX_ID)
        .map(Value)
        .ok_or_else(|| format!("expected a value like %3, got `{tok}`"))
}

fn parse_int<T: std::str::FromStr>(tok: Option<&str>, what: &str) -> PResult<T> {
    let tok = tok.ok_or_else(|| format!("missing {what}"))?;
    tok.parse::<T>().map_err(|_| format!("bad {what} `{tok}`"))
}

fn parse_list(s: &str) -> PResult<Vec<i64>> {
    let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<i64>()
                .map_err(|_| format!("bad list `{s}`"))
        })
        .collect()
}

/// Operand tokens of an op line: positional values, keyword arguments and flags.
#[derive(Default)]
struct Args<'a> {
    vals: Vec<Value>,
    kw: Vec<(&'a str, &'a str)>,
    flags: Vec<&'a str>,
    list: Option<&'a str>,
    words: Vec<&'a str>,
}

impl<'a> Args<'a> {
    fn parse(rest: &'a str) -> PResult<Args<'a>> {
        let mut a = Args::default();
        let rest = match (rest.find('['), rest.rfind(']')) {
            (Some(i), Some(j)) if j > i => {
                a.list = Some(&rest[i..=j]);
                // Only the part before the list carries other tokens (permute).
                &rest[..i]
            }
            _ => rest,
        };
        let mut toks = rest
            .split(|c: char| c == ',' || c == '(' || c == ')' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .peekable();
        while let Some(t) = toks.next() {
            match t {
                "mask" | "other" | "axis" | "rounds" | "sem" | "scope" => {
                    let v = toks
                        .next()
                        .ok_or_else(|| format!("missing value after `{t}`"))?;
                    a.kw.push((t, v));
                }
                "key" | "iter" => {}
                "reverse" | "propagate_nan" => a.flags.push(t),
                t if t.starts_with('%') => a.vals.push(parse_value(t)?),
                t => a.words.push(t),
            }
        }
        Ok(a)
    }

    fn kw(&self, k: &str) -> Option<&'a str> {
        self.kw.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }

    fn kw_val(&self, k: &str) -> PResult<Option<Value>> {
        self.kw(k).map(parse_value).transpose()
    }

    /// An atomic's `sem` and `scope` (defaults where absent).
    fn ordering(&self) -> PResult<(Option<MemSem>, MemScope)> {
        let sem = match self.kw("sem") {
            Some(w) => Some(by_name(&MemSem::ALL, w, |m| m.name()).ok_or("unknown sem")?),
            None => None,
        };
        let scope = match self.kw("scope") {
            Some(w) => by_name(&MemScope::ALL, w, |m| m.name()).ok_or("unknown scope")?,
            None => MemScope::default(),
        };
        Ok((sem, scope))
    }

    fn n(&self, n: usize, name: &str) -> PResult<&[Value]> {
        if self.vals.len() == n {
            Ok(&self.vals)
        } else {
            Err(format!(
                "`{name}` takes {n} operands, got {}",
                self.vals.len()
            ))
        }
    }
}

fn by_name<T: Copy>(all: &[T], name: &str, f: impl Fn(T) -> &'static str) -> Option<T> {
    all.iter().copied().find(|x| f(*x) == name)
}

const ATOMICS: [AtomicOp; 7] = [
    AtomicOp::Add,
    AtomicOp::Max,
    AtomicOp::Min,
    AtomicOp::And,
    AtomicOp::Or,
    AtomicOp::Xor,
    AtomicOp::Xchg,
];
const PREDS: [CmpPred; 6] = [
    CmpPred::Lt,
    CmpPred::Le,
    CmpPred::Gt,
    CmpPred::Ge,
    CmpPred::Eq,
    CmpPred::Ne,
];
const REDUCES: [ReduceKind; 7] = [
    ReduceKind::Sum,
    ReduceKind::Max,
    ReduceKind::Min,
    ReduceKind::ArgMax,
    ReduceKind::ArgMin,
    ReduceKind::Xor,
    ReduceKind::Custom,
];
const SCANS: [ScanKind; 3] = [ScanKind::Sum, ScanKind::Prod, ScanKind::Custom];

impl<'a> Parser<'a> {
    fn line(&self) -> PResult<&'a str> {
        self.lines
            .get(self.pos)
            .map(|l| l.1)
            .ok_or_else(|| "unexpected end of text".to_string())
    }

    fn loc(&self) -> SourceLoc {
        let line = self.lines.get(self.pos).map(|l| l.0).unwrap_or(0) as u32;
        SourceLoc {
            file: "<ir>",
            line,
            column: 1,
        }
    }

    fn define(&mut self, v: Value, ty: Type, def: ValueDef) -> PResult<()> {
        let i = v.index();
        if i >= self.values.len() {
            self.values.resize(i + 1, None);
        }
        if self.values[i].is_some() {
            return Err(format!("{v} is defined twice"));
        }
        self.values[i] = Some(ValueData { ty, def });
        Ok(())
    }

    fn region_slot(&mut self, r: RegionId) {
        if r.index() >= self.k.regions.len() {
            self.k.regions.resize(r.index() + 1, RegionData::default());
        }
    }

    fn kernel(&mut self) -> PResult<Kernel> {
        let head = self.line()?;
        let rest = head
            .strip_prefix("kernel ")
            .ok_or("expected `kernel NAME(...) {`")?;
        let open = rest.find('(').ok_or("expected `(` after the kernel name")?;
        let close = rest.rfind(')').ok_or("expected `)`")?;
        self.k.name = rest[..open].trim().to_string();
        let params = &rest[open + 1..close];
        for (i, p) in params
            .split(", ")
            .filter(|p| !p.trim().is_empty())
            .enumerate()
        {
            // `%0: ptr<f32> x_ptr`
            let (v, rest) = p
                .split_once(": ")
                .ok_or_else(|| format!("bad param `{p}`"))?;
            let (ty, name) = rest
                .rsplit_once(' ')
                .ok_or_else(|| format!("bad param `{p}`"))?;
            let (v, ty) = (parse_value(v.trim())?, parse_type(ty)?);
            if ty.is_block() {
                return Err(format!("param `{name}` must be a scalar or pointer"));
            }
            let kind = if ty.ptr {
                ParamKind::Ptr(ty.dtype)
            } else {
                ParamKind::Scalar(ty.dtype)
            };
            self.define(v, ty, ValueDef::Param(i as u32))?;
            self.k.params.push(Param {
                name: name.to_string(),
                kind,
                value: v,
                stored: false,
                loaded: false,
            });
        }
        let tail = rest[close + 1..].trim();
        let tail = tail
            .strip_suffix('{')
            .ok_or("expected `{` at the end of the kernel line")?
            .trim();
        if let Some(cs) = tail.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            for c in cs.split(", ") {
                let (n, v) = c
                    .split_once('=')
                    .ok_or_else(|| format!("bad constexpr `{c}`"))?;
                self.k
                    .constexprs
                    .push((n.to_string(), parse_int(Some(v), "constexpr value")?));
            }
        }
        self.pos += 1;
        while let Some(rest) = self.line()?.strip_prefix("hint ") {
            let (name, rest) = rest.split_once(' ').ok_or("bad hint")?;
            let (v, list) = rest.split_once(", ").ok_or("bad hint")?;
            let vals = parse_list(list)?;
            let h = match name {
                "multiple_of" => Hint::MultipleOf(vals),
                "max_contiguous" => Hint::MaxContiguous(vals),
                _ => return Err(format!("unknown hint `{name}`")),
            };
            self.k.hints.push((parse_value(v)?, h));
            self.pos += 1;
        }
        let end = self.region_ops(RegionId(0))?;
        if end != "}" {
            return Err("the kernel body must end with `}`".into());
        }
        self.pos += 1;
        if self.pos != self.lines.len() {
            return Err("text after the end of the kernel".into());
        }
        let mut values = Vec::with_capacity(self.values.len());
        for (i, v) in std::mem::take(&mut self.values).into_iter().enumerate() {
            values.push(v.ok_or_else(|| format!("%{i} is never defined"))?);
        }
        let mut k = std::mem::replace(&mut self.k, Kernel::new(""));
        k.values = values;
        Ok(k)
    }

    /// Parses op lines into region `r` until a closing line (`}` or `} role {`), which is
    /// returned (not consumed).
    fn region_ops(&mut self, r: RegionId) -> PResult<&'a str> {
        // The kernel body is the first level.
        if self.depth > super::MAX_NESTING {
            return Err(format!(
                "regions nested more than {} levels deep (see tl::MAX_NESTING)",
                super::MAX_NESTING
            ));
        }
        self.depth += 1;
        let end = self.region_lines(r);
        self.depth -= 1;
        end
    }

    fn region_lines(&mut self, r: RegionId) -> PResult<&'a str> {
        loop {
            let line = self.line()?;
            if line.starts_with('}') {
                return Ok(line);
            }
            self.op_line(r, line)?;
        }
    }

    fn op_line(&mut self, parent: RegionId, line: &'a str) -> PResult<()> {
        let loc = self.loc();
        let id = OpId(self.k.ops.len() as u32);
        let (results, body) = match line.split_once(" = ") {
            Some((rs, body)) if rs.starts_with('%') => (
                rs.split(", ")
                    .map(parse_value)
                    .collect::<PResult<Vec<_>>>()?,
                body,
            ),
            _ => (Vec::new(), line),
        };
        // Trailing ` role {` opens regions.
        let (body, opens) = match body.strip_suffix('{') {
            Some(b) => (
                b.trim_end().rsplit_once(' ').map(|x| x.0).unwrap_or(""),
                true,
            ),
            None => (body, false),
        };
        let (body, types) = match body.rsplit_once(" : ") {
            Some((b, t)) => (
                b,
                t.split(", ").map(parse_type).collect::<PResult<Vec<_>>>()?,
            ),
            None => (body, Vec::new()),
        };
        if types.len() != results.len() {
            return Err(format!(
                "{} results but {} types",
                results.len(),
                types.len()
            ));
        }
        for (i, r) in results.iter().enumerate() {
            if r.0 != results[0].0.saturating_add(i as u32) {
                return Err("an op's results must be consecutive values".into());
            }
        }
        let (name, rest) = body.split_once(' ').unwrap_or((body, ""));
        let a = Args::parse(rest)?;
        // Nested regions come right after the op line.
        self.pos += 1;
        let mut regions = Vec::new();
        if opens {
            loop {
                let head = self.line()?;
                let (rid, args) = head
                    .strip_prefix("^r")
                    .and_then(|h| h.strip_suffix("):"))
                    .and_then(|h| h.split_once('('))
                    .ok_or_else(|| {
                        format!("expected a region header like `^r1(...):`, got `{head}`")
                    })?;
                let r = RegionId(parse_int(Some(rid), "region id")?);
                if r.0 >= MAX_ID {
                    return Err(format!("region id {r} is too large"));
                }
                self.region_slot(r);
                let mut arg_vals = Vec::new();
                for (i, arg) in args.split(", ").filter(|x| !x.is_empty()).enumerate() {
                    let (v, t) = arg
                        .split_once(": ")
                        .ok_or_else(|| format!("bad region arg `{arg}`"))?;
                    let v = parse_value(v)?;
                    self.define(v, parse_type(t)?, ValueDef::RegionArg(r, i as u32))?;
                    arg_vals.push(v);
                }
                self.k.regions[r.index()].args = arg_vals;
                self.k.regions[r.index()].parent = Some(id);
                self.pos += 1;
                // Reserve the op id before nested ops take ids.
                if regions.is_empty() {
                    self.k.ops.push(OpData {
                        op: Op::DebugBarrier,
                        results: ValueRange::default(),
                        loc,
                        parent,
                    });
                }
                let end = self.region_ops(r)?;
                regions.push(r);
                self.pos += 1;
                if end == "}" {
                    break;
                }
                if !end.ends_with('{') {
                    return Err(format!("expected `}}` or `}} role {{`, got `{end}`"));
                }
            }
        }
        let op = self.make_op(name, &a, &regions)?;
        let range = ValueRange {
            start: results.first().map(|v| v.0).unwrap_or(0),
            len: results.len() as u32,
        };
        for (i, (v, t)) in results.iter().zip(types).enumerate() {
            self.define(*v, t, ValueDef::OpResult(id, i as u32))?;
        }
        let data = OpData {
            op,
            results: range,
            loc,
            parent,
        };
        if regions.is_empty() {
            self.k.ops.push(data);
        } else {
            self.k.ops[id.index()] = data;
        }
        self.region_slot(parent);
        self.k.regions[parent.index()].ops.push(id);
        Ok(())
    }

    fn make_op(&self, name: &str, a: &Args<'_>, regions: &[RegionId]) -> PResult<Op> {
        let v = &a.vals;
        let word = |i: usize| a.words.get(i).copied();
        let region = |i: usize| {
            regions
                .get(i)
                .copied()
                .ok_or_else(|| format!("`{name}` needs region {i}"))
        };
        Ok(match name {
            "program_id" | "num_programs" => {
                let axis = parse_int(word(0), "axis")?;
                if name == "program_id" {
                    Op::ProgramId { axis }
                } else {
                    Op::NumPrograms { axis }
                }
            }
            "constant" => {
                let w = word(0).ok_or("missing constant value")?;
                let value = match w {
                    "inf" => Const::Float(f64::INFINITY),
                    "-inf" => Const::Float(f64::NEG_INFINITY),
                    "nan" => Const::Float(f64::NAN),
                    w if w.contains(['.', 'e', 'E']) => Const::Float(parse_int(Some(w), "float")?),
                    w => Const::Int(parse_int(Some(w), "integer")?),
                };
                Op::Constant { value }
            }
            "arange" => Op::Arange {
                start: parse_int(word(0), "start")?,
                end: parse_int(word(1), "end")?,
            },
            "splat" => Op::Splat {
                src: a.n(1, name)?[0],
            },
            "cast" => Op::Cast {
                src: a.n(1, name)?[0],
            },
            "bitcast" => Op::Bitcast {
                src: a.n(1, name)?[0],
            },
            "int_to_ptr" => Op::IntToPtr {
                src: a.n(1, name)?[0],
            },
            "broadcast" => Op::Broadcast {
                src: a.n(1, name)?[0],
            },
            "reshape" => Op::Reshape {
                src: a.n(1, name)?[0],
            },
            "split" => Op::Split {
                src: a.n(1, name)?[0],
            },
            "expand_dims" => Op::ExpandDims {
                src: a.n(1, name)?[0],
                axis: parse_int(a.kw("axis"), "axis")?,
            },
            "permute" => {
                let order = parse_list(a.list.ok_or("permute needs an order list")?)?;
                Op::Permute {
                    src: a.n(1, name)?[0],
                    order: order.iter().map(|d| *d as u32).collect(),
                }
            }
            "select" => {
                let v = a.n(3, name)?;
                Op::Select {
                    cond: v[0],
                    on_true: v[1],
                    on_false: v[2],
                }
            }
            "fma" => {
                let v = a.n(3, name)?;
                Op::Fma {
                    a: v[0],
                    b: v[1],
                    c: v[2],
                }
            }
            "clamp" => {
                let v = a.n(3, name)?;
                Op::Clamp {
                    src: v[0],
                    lo: v[1],
                    hi: v[2],
                    propagate_nan: a.flags.contains(&"propagate_nan"),
                }
            }
            "addptr" => {
                let v = a.n(2, name)?;
                Op::AddPtr {
                    ptr: v[0],
                    offset: v[1],
                }
            }
            "join" => {
                let v = a.n(2, name)?;
                Op::Join {
                    lhs: v[0],
                    rhs: v[1],
                }
            }
            "dot" => {
                let v = a.n(3, name)?;
                Op::Dot {
                    a: v[0],
                    b: v[1],
                    acc: v[2],
                }
            }
            "load" => Op::Load {
                ptr: a.n(1, name)?[0],
                mask: a.kw_val("mask")?,
                other: a.kw_val("other")?,
            },
            "store" => {
                let v = a.n(2, name)?;
                Op::Store {
                    ptr: v[0],
                    value: v[1],
                    mask: a.kw_val("mask")?,
                }
            }
            "atomic_cas" => {
                let v = a.n(3, name)?;
                let (sem, scope) = a.ordering()?;
                Op::AtomicCas {
                    ptr: v[0],
                    cmp: v[1],
                    value: v[2],
                    sem,
                    scope,
                }
            }
            "reduce" => {
                let kind = by_name(&REDUCES, word(0).unwrap_or(""), |k| k.name())
                    .ok_or("unknown reduce kind")?;
                let combine = if kind == ReduceKind::Custom {
                    Some(region(0)?)
                } else {
                    None
                };
                Op::Reduce {
                    kind,
                    axis: parse_int(a.kw("axis"), "axis")?,
                    srcs: v.clone(),
                    combine,
                }
            }
            "scan" => {
                let kind = by_name(&SCANS, word(0).unwrap_or(""), |k| k.name())
                    .ok_or("unknown scan kind")?;
                let combine = if kind == ScanKind::Custom {
                    Some(region(0)?)
                } else {
                    None
                };
                Op::Scan {
                    kind,
                    axis: parse_int(a.kw("axis"), "axis")?,
                    reverse: a.flags.contains(&"reverse"),
                    srcs: v.clone(),
                    combine,
                }
            }
            "philox" => {
                let v = a.n(6, name)?;
                Op::Philox {
                    counters: [v[0], v[1], v[2], v[3]],
                    key: [v[4], v[5]],
                    rounds: parse_int(a.kw("rounds"), "rounds")?,
                }
            }
            "debug_barrier" => Op::DebugBarrier,
            "for" => {
                if v.len() < 3 {
                    return Err("`for` needs lo, hi, step".into());
                }
                Op::For {
                    lo: v[0],
                    hi: v[1],
                    step: v[2],
                    init: v[3..].to_vec(),
                    body: region(0)?,
                }
            }
            "while" => Op::While {
                init: v.clone(),
                cond: region(0)?,
                body: region(1)?,
            },
            "if" => Op::If {
                cond: a.n(1, name)?[0],
                then_region: region(0)?,
                else_region: region(1)?,
            },
            "yield" => Op::Yield { values: v.clone() },
            other => {
                if let Some(kind) = other
                    .strip_prefix("atomic_")
                    .and_then(|k| by_name(&ATOMICS, k, |x| x.name()))
                {
                    let v = a.n(2, name)?;
                    let (sem, scope) = a.ordering()?;
                    Op::AtomicRmw {
                        kind,
                        ptr: v[0],
                        value: v[1],
                        mask: a.kw_val("mask")?,
                        sem,
                        scope,
                    }
                } else if let Some(kind) = by_name(&UnaryOp::ALL, other, |x| x.name()) {
                    Op::Unary {
                        kind,
                        src: a.n(1, name)?[0],
                    }
                } else if let Some(kind) = by_name(&BinaryOp::ALL, other, |x| x.name()) {
                    let v = a.n(2, name)?;
                    Op::Binary {
                        kind,
                        lhs: v[0],
                        rhs: v[1],
                    }
                } else if let Some(pred) = by_name(&PREDS, other, |x| x.name()) {
                    let v = a.n(2, name)?;
                    Op::Cmp {
                        pred,
                        lhs: v[0],
                        rhs: v[1],
                    }
                } else {
                    return Err(format!("unknown op `{other}`"));
                }
            }
        })
    }
}
