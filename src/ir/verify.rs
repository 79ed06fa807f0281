//! The verifier: structural and typing rules every kernel satisfies after every stage.
//!
//! Checks that every op sits in exactly one region, that operands are defined before use
//! (in the same or an enclosing region), that regions end in `yield` with the right types,
//! and the per-op typing rules documented on [`Op`]. Errors are [`Error::Build`] naming the
//! kernel, the op, its user source location and the types involved.

use super::kernel::{Hint, Kernel, OpData, OpId, ParamKind, RegionId, Value, ValueDef};
use super::op::{AtomicOp, BinaryOp, Op, ReduceKind, ScanKind};
use super::types::{Const, Type};
use crate::dtype::DType;
use crate::error::{Error, Result, SourceLoc};

/// Verifies `kernel`.
pub fn verify(kernel: &Kernel) -> Result<()> {
    Verifier::new(kernel).run()
}

struct Verifier<'k> {
    k: &'k Kernel,
    defined: Vec<bool>,
    seen_op: Vec<bool>,
    /// Definitions visible outside the isolated (combine) regions being checked.
    isolated: Vec<Vec<bool>>,
    /// An error from a nested region, passed up unchanged through the owning op.
    nested: Option<Error>,
    /// Regions open around the one being checked (the body is depth 0).
    depth: usize,
}

type Check = std::result::Result<(), String>;

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Check {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

impl<'k> Verifier<'k> {
    fn new(k: &'k Kernel) -> Self {
        Verifier {
            k,
            defined: vec![false; k.values.len()],
            seen_op: vec![false; k.ops.len()],
            nested: None,
            isolated: Vec::new(),
            depth: 0,
        }
    }

    fn err(&self, op: &str, loc: SourceLoc, msg: String) -> Error {
        Error::Build {
            kernel: self.k.name.clone(),
            op: op.to_string(),
            loc,
            msg,
        }
    }

    fn kernel_err(&self, msg: String) -> Error {
        self.err(
            "kernel",
            SourceLoc {
                file: "<kernel>",
                line: 0,
                column: 0,
            },
            msg,
        )
    }

    fn run(mut self) -> Result<()> {
        let k = self.k;
        if k.regions.get(k.body.index()).is_none() {
            return Err(self.kernel_err("body region missing".into()));
        }
        for (i, p) in k.params.iter().enumerate() {
            let ok = match k.value(p.value) {
                Some(v) => {
                    v.def == ValueDef::Param(i as u32)
                        && match p.kind {
                            ParamKind::Ptr(d) => v.ty == Type::pointer(d),
                            ParamKind::Scalar(d) => v.ty == Type::scalar(d),
                        }
                }
                None => false,
            };
            if !ok {
                return Err(self.kernel_err(format!(
                    "param `{}` ({:?}) does not match its value {}",
                    p.name, p.kind, p.value
                )));
            }
            self.defined[p.value.index()] = true;
        }
        for (v, h) in &k.hints {
            let (Hint::MultipleOf(vals) | Hint::MaxContiguous(vals)) = h;
            let ok = k
                .value(*v)
                .is_some_and(|vd| vals.len() == vd.ty.rank().max(1) && vals.iter().all(|x| *x > 0));
            if !ok {
                return Err(self.kernel_err(format!("hint {h:?} does not fit value {v}")));
            }
        }
        if !k.region(k.body).args.is_empty() {
            return Err(self.kernel_err("the body region takes no arguments".into()));
        }
        self.region(k.body, None)?;
        if let Some(i) = self.seen_op.iter().position(|s| !s) {
            let d = &k.ops[i];
            return Err(self.err(
                d.op.name(),
                d.loc,
                format!("op{i} is not placed in any region"),
            ));
        }
        Ok(())
    }

    /// Checks a region; `expect` is the types its `yield` must carry (None: the body).
    fn region(&mut self, r: RegionId, owner: Option<OpId>) -> Result<Vec<Value>> {
        let k = self.k;
        let Some(region) = k.regions.get(r.index()) else {
            return Err(self.kernel_err(format!("region {r} does not exist")));
        };
        if region.parent != owner {
            return Err(self.kernel_err(format!("region {r} has the wrong parent op")));
        }
        let mut scope: Vec<Value> = Vec::new();
        for &a in &region.args {
            if a.index() >= k.values.len()
                || k.values[a.index()].def != ValueDef::RegionArg(r, scope.len() as u32)
            {
                return Err(self.kernel_err(format!("region {r}: bad argument {a}")));
            }
            self.defined[a.index()] = true;
            scope.push(a);
        }
        let mut yielded = Vec::new();
        for (pos, &id) in region.ops.iter().enumerate() {
            let Some(data) = k.ops.get(id.index()) else {
                return Err(self.kernel_err(format!("region {r} lists missing op {id}")));
            };
            if std::mem::replace(&mut self.seen_op[id.index()], true) {
                return Err(self.err(data.op.name(), data.loc, format!("{id} appears twice")));
            }
            let wrap = |v: &Self, msg: String| v.err(data.op.name(), data.loc, msg);
            if data.parent != r {
                return Err(wrap(self, format!("{id} records the wrong parent region")));
            }
            // Operands are defined before use.
            let mut missing = None;
            data.op.for_each_operand(|v| {
                if missing.is_none() && !self.defined.get(v.index()).copied().unwrap_or(false) {
                    missing = Some(v);
                }
            });
            if let Some(v) = missing {
                let outside = self
                    .isolated
                    .last()
                    .is_some_and(|d| d.get(v.index()).copied().unwrap_or(false));
                let msg = if outside {
                    format!("operand {v} comes from outside the combine function (combine functions see only their arguments)")
                } else {
                    format!("operand {v} is not defined before its use")
                };
                return Err(wrap(self, msg));
            }
            let is_last = pos + 1 == region.ops.len();
            if let Op::Yield { values } = &data.op {
                if owner.is_none() || !is_last {
                    return Err(wrap(
                        self,
                        "yield must be the last op of a nested region".into(),
                    ));
                }
                yielded = values.clone();
            } else if is_last && owner.is_some() {
                return Err(wrap(self, "a nested region must end with yield".into()));
            }
            // Results belong to this op and have block dims that are powers of two.
            for (i, v) in data.results.iter().enumerate() {
                match k.values.get(v.index()) {
                    Some(vd) if !vd.ty.shape.iter().all(|d| d.is_power_of_two()) => {
                        return Err(wrap(
                            self,
                            format!(
                                "result {v} has type {}: block dims must be powers of two",
                                vd.ty
                            ),
                        ));
                    }
                    Some(vd) if vd.def == ValueDef::OpResult(id, i as u32) => {}
                    _ => {
                        return Err(wrap(
                            self,
                            format!("result {v} is not recorded as its result"),
                        ))
                    }
                }
            }
            if let Err(m) = self.op(id, data) {
                return Err(self.nested.take().unwrap_or_else(|| wrap(self, m)));
            }
            for v in data.results.iter() {
                self.defined[v.index()] = true;
                scope.push(v);
            }
        }
        if owner.is_some() && region.ops.is_empty() {
            return Err(self.kernel_err(format!("region {r} is empty (needs a yield)")));
        }
        for v in scope {
            self.defined[v.index()] = false;
        }
        Ok(yielded)
    }

    fn ty(&self, v: Value) -> &'k Type {
        self.k.ty(v)
    }

    fn types(&self, vs: &[Value]) -> Vec<Type> {
        vs.iter().map(|v| self.ty(*v).clone()).collect()
    }

    fn fmt_types(tys: &[Type]) -> String {
        let parts: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
        format!("({})", parts.join(", "))
    }

    /// Checks a nested region's args and yields; turns messages into strings.
    fn sub(&mut self, id: OpId, r: RegionId, args: &[Type], yields: &[Type], what: &str) -> Check {
        let got_args: Vec<Type> = match self.k.regions.get(r.index()) {
            Some(reg) => reg
                .args
                .iter()
                .map(|a| self.k.values.get(a.index()).map(|v| v.ty.clone()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("{what} region has a bad argument"))?,
            None => return Err(format!("{what} region {r} does not exist")),
        };
        ensure(got_args == args, || {
            format!(
                "{what} region takes {} but should take {}",
                Self::fmt_types(&got_args),
                Self::fmt_types(args)
            )
        })?;
        if self.depth >= super::MAX_NESTING {
            return Err(format!(
                "control flow nested more than {} levels deep (see tl::MAX_NESTING)",
                super::MAX_NESTING
            ));
        }
        self.depth += 1;
        let checked = self.region(r, Some(id));
        self.depth -= 1;
        let yielded = match checked {
            Ok(y) => y,
            Err(e) => {
                self.nested = Some(e);
                return Err(String::new());
            }
        };
        let got = self.types(&yielded);
        ensure(got == yields, || {
            format!(
                "{what} region yields {} but should yield {}",
                Self::fmt_types(&got),
                Self::fmt_types(yields)
            )
        })
    }

    fn op(&mut self, id: OpId, data: &'k OpData) -> Check {
        let k = self.k;
        let res: Vec<Type> = data.results.iter().map(|v| k.ty(v).clone()).collect();
        let one = |res: &[Type]| -> std::result::Result<Type, String> {
            ensure(res.len() == 1, || {
                format!("expected 1 result, has {}", res.len())
            })?;
            Ok(res[0].clone())
        };
        let num = |t: &Type, what: &str| {
            ensure(!t.ptr, || format!("{what} must not be a pointer, got {t}"))
        };
        let same = |a: &Type, b: &Type, what: &str| {
            ensure(a == b, || format!("{what}: types differ: {a} vs {b}"))
        };
        match &data.op {
            Op::ProgramId { axis } | Op::NumPrograms { axis } => {
                ensure(*axis < 3, || format!("axis must be 0, 1 or 2, got {axis}"))?;
                same(&one(&res)?, &Type::scalar(DType::I32), "result")
            }
            Op::Constant { value } => {
                let t = one(&res)?;
                num(&t, "constant")?;
                match value {
                    Const::Float(_) => ensure(t.dtype.is_float(), || {
                        format!("float constant with non-float type {t}")
                    }),
                    Const::Int(v) => ensure(
                        !t.dtype.is_float() && (!t.dtype.is_bool() || *v == 0 || *v == 1),
                        || format!("integer constant {v} with type {t}"),
                    ),
                }
            }
            Op::Arange { start, end } => {
                let t = one(&res)?;
                let n = end.checked_sub(*start).filter(|n| *n > 0);
                let n = n.ok_or_else(|| format!("arange end {end} <= start {start}"))?;
                same(&t, &Type::block(DType::I32, &[n as usize]), "arange result")
            }
            Op::Splat { src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                ensure(s.is_scalar(), || format!("splat of a block {s}"))?;
                same(&t.element(), s, "splat element")
            }
            Op::Unary { kind, src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                num(s, "operand")?;
                ensure(!kind.float_only() || s.dtype.is_float(), || {
                    format!("{} needs a float operand, got {s}", kind.name())
                })?;
                same(&t, s, "result")
            }
            Op::Binary { kind, lhs, rhs } => {
                let t = one(&res)?;
                let (a, b) = (self.ty(*lhs), self.ty(*rhs));
                same(a, b, "operands")?;
                same(&t, a, "result")?;
                num(a, "operand")?;
                ensure(!kind.int_only() || !a.dtype.is_float(), || {
                    format!("{} needs integer operands, got {a}", kind.name())
                })?;
                ensure(!kind.float_only() || a.dtype.is_float(), || {
                    format!("{} needs float operands, got {a}", kind.name())
                })?;
                ensure(
                    *kind != BinaryOp::MulHi || matches!(a.dtype.bits(), 32 | 64),
                    || format!("umulhi needs 32- or 64-bit integers, got {a}"),
                )
            }
            Op::Cmp { lhs, rhs, .. } => {
                let t = one(&res)?;
                let (a, b) = (self.ty(*lhs), self.ty(*rhs));
                same(a, b, "operands")?;
                num(a, "operand")?;
                same(&t, &a.with_dtype(DType::Bool), "result")
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => {
                let t = one(&res)?;
                let c = self.ty(*cond);
                same(self.ty(*on_true), self.ty(*on_false), "branches")?;
                same(&t, self.ty(*on_true), "result")?;
                same(c, &t.with_dtype(DType::Bool), "condition")
            }
            Op::Fma { a, b, c } => {
                let t = one(&res)?;
                same(self.ty(*a), self.ty(*b), "operands")?;
                same(self.ty(*a), self.ty(*c), "operands")?;
                same(&t, self.ty(*a), "result")?;
                ensure(t.dtype.is_float() && !t.ptr, || {
                    format!("fma needs floats, got {t}")
                })
            }
            Op::Clamp { src, lo, hi, .. } => {
                let t = one(&res)?;
                same(self.ty(*src), self.ty(*lo), "operands")?;
                same(self.ty(*src), self.ty(*hi), "operands")?;
                same(&t, self.ty(*src), "result")?;
                ensure(t.dtype.is_float() && !t.ptr, || {
                    format!("clamp needs floats, got {t}")
                })
            }
            Op::Cast { src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                num(s, "operand")?;
                num(&t, "result")?;
                ensure(s.shape == t.shape, || {
                    format!("cast changes shape: {s} -> {t}")
                })
            }
            Op::Bitcast { src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                ensure(
                    s.shape == t.shape && s.dtype.bits() == t.dtype.bits() && !s.ptr && !t.ptr,
                    || format!("bitcast needs equal shapes and widths: {s} -> {t}"),
                )
            }
            Op::IntToPtr { src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                ensure(!s.ptr && matches!(s.dtype, DType::I64 | DType::U64), || {
                    format!("int_to_ptr needs 64-bit integers, got {s}")
                })?;
                ensure(t.ptr && s.shape == t.shape, || {
                    format!("int_to_ptr gives pointers of the operand's shape: {s} -> {t}")
                })
            }
            Op::AddPtr { ptr, offset } => {
                let t = one(&res)?;
                let (p, o) = (self.ty(*ptr), self.ty(*offset));
                ensure(p.ptr, || format!("addptr base must be a pointer, got {p}"))?;
                ensure(!o.ptr && o.dtype.is_int(), || {
                    format!("addptr offset must be an integer, got {o}")
                })?;
                ensure(p.shape == o.shape, || {
                    format!("addptr shapes differ: {p} vs {o}")
                })?;
                same(&t, p, "result")
            }
            Op::Load { ptr, mask, other } => {
                let t = one(&res)?;
                let p = self.ty(*ptr);
                ensure(p.ptr, || format!("load needs pointers, got {p}"))?;
                same(&t, &p.with_dtype(p.dtype), "result")?;
                self.mask(p, *mask)?;
                if let Some(o) = other {
                    ensure(mask.is_some(), || "`other` given without `mask`".into())?;
                    same(self.ty(*o), &t, "other")?;
                }
                Ok(())
            }
            Op::Store { ptr, value, mask } => {
                ensure(res.is_empty(), || "store has no results".into())?;
                let p = self.ty(*ptr);
                ensure(p.ptr, || format!("store needs pointers, got {p}"))?;
                same(self.ty(*value), &p.with_dtype(p.dtype), "stored value")?;
                self.mask(p, *mask)
            }
            Op::AtomicRmw {
                kind,
                ptr,
                value,
                mask,
                ..
            } => {
                let t = one(&res)?;
                let p = self.ty(*ptr);
                ensure(p.ptr, || format!("atomic needs pointers, got {p}"))?;
                same(self.ty(*value), &p.with_dtype(p.dtype), "value")?;
                same(&t, &p.with_dtype(p.dtype), "result")?;
                ensure(
                    !matches!(kind, AtomicOp::And | AtomicOp::Or | AtomicOp::Xor)
                        || p.dtype.is_int(),
                    || format!("atomic_{} needs integers, got {p}", kind.name()),
                )?;
                self.mask(p, *mask)
            }
            Op::AtomicCas {
                ptr, cmp, value, ..
            } => {
                let t = one(&res)?;
                let p = self.ty(*ptr);
                ensure(p.ptr, || format!("atomic_cas needs pointers, got {p}"))?;
                let want = p.with_dtype(p.dtype);
                same(self.ty(*cmp), &want, "cmp")?;
                same(self.ty(*value), &want, "value")?;
                same(&t, &want, "result")
            }
            Op::Broadcast { src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                ensure(
                    s.rank() == t.rank()
                        && s.dtype == t.dtype
                        && s.ptr == t.ptr
                        && s.shape.iter().zip(&t.shape).all(|(a, b)| a == b || *a == 1),
                    || format!("cannot broadcast {s} to {t}"),
                )
            }
            Op::ExpandDims { src, axis } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                let ax = *axis as usize;
                ensure(ax <= s.rank(), || {
                    format!("axis {axis} out of range for {s}")
                })?;
                let mut shape = s.shape.clone();
                shape.insert(ax, 1);
                same(&t, &s.with_shape(&shape), "result")
            }
            Op::Reshape { src } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                ensure(
                    s.numel() == t.numel() && s.dtype == t.dtype && s.ptr == t.ptr,
                    || format!("cannot reshape {s} to {t}"),
                )
            }
            Op::Permute { src, order } => {
                let t = one(&res)?;
                let s = self.ty(*src);
                let mut sorted: Vec<u32> = order.clone();
                sorted.sort_unstable();
                ensure(
                    sorted.iter().enumerate().all(|(i, d)| *d as usize == i)
                        && order.len() == s.rank(),
                    || format!("{order:?} is not a permutation of the dims of {s}"),
                )?;
                let shape: Vec<usize> = order.iter().map(|d| s.shape[*d as usize]).collect();
                same(&t, &s.with_shape(&shape), "result")
            }
            Op::Join { lhs, rhs } => {
                let t = one(&res)?;
                let a = self.ty(*lhs);
                same(a, self.ty(*rhs), "operands")?;
                let mut shape = a.shape.clone();
                shape.push(2);
                same(&t, &a.with_shape(&shape), "result")
            }
            Op::Split { src } => {
                let s = self.ty(*src);
                ensure(s.shape.last() == Some(&2), || {
                    format!("split needs a last dim of 2, got {s}")
                })?;
                let want = s.with_shape(&s.shape[..s.rank() - 1]);
                ensure(res.len() == 2 && res[0] == want && res[1] == want, || {
                    format!("split of {s} must give two {want}")
                })
            }
            Op::Dot { a, b, acc } => {
                let t = one(&res)?;
                let (ta, tb, tc) = (self.ty(*a), self.ty(*b), self.ty(*acc));
                num(ta, "a")?;
                num(tc, "acc")?;
                ensure(ta.dtype == tb.dtype && !tb.ptr, || {
                    format!("dot operands differ: {ta} vs {tb}")
                })?;
                let r = ta.rank();
                ensure(
                    (r == 2 || r == 3) && tb.rank() == r && tc.rank() == r,
                    || format!("dot needs 2-D or 3-D operands of one rank: {ta}, {tb}, {tc}"),
                )?;
                let (m, kk, k2, n) = (
                    ta.shape[r - 2],
                    ta.shape[r - 1],
                    tb.shape[r - 2],
                    tb.shape[r - 1],
                );
                let batch_ok = r == 2 || (ta.shape[0] == tb.shape[0] && tc.shape[0] == ta.shape[0]);
                ensure(
                    kk == k2 && tc.shape[r - 2] == m && tc.shape[r - 1] == n && batch_ok,
                    || format!("dot shapes do not match: {ta} x {tb} + {tc}"),
                )?;
                same(&t, tc, "result")
            }
            Op::Reduce {
                kind,
                axis,
                srcs,
                combine,
            } => {
                let tys = self.reduce_common(
                    srcs,
                    *axis,
                    combine.is_some(),
                    *kind == ReduceKind::Custom,
                )?;
                let ax = *axis as usize;
                let out_shape: Vec<usize> = tys[0]
                    .shape
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != ax)
                    .map(|(_, d)| *d)
                    .collect();
                let want: Vec<Type> = match kind {
                    ReduceKind::ArgMax | ReduceKind::ArgMin => {
                        vec![Type::block(DType::I32, &out_shape)]
                    }
                    _ => tys.iter().map(|t| t.with_shape(&out_shape)).collect(),
                };
                ensure(
                    *kind != ReduceKind::Xor || tys[0].dtype.is_int() || tys[0].dtype.is_bool(),
                    || format!("xor_sum needs integers or bools, got {}", tys[0]),
                )?;
                ensure(res == want, || {
                    format!(
                        "reduce results are {} but should be {}",
                        Self::fmt_types(&res),
                        Self::fmt_types(&want)
                    )
                })?;
                self.combine(id, *combine, &tys)
            }
            Op::Scan {
                kind,
                axis,
                srcs,
                combine,
                ..
            } => {
                let tys =
                    self.reduce_common(srcs, *axis, combine.is_some(), *kind == ScanKind::Custom)?;
                ensure(res == tys, || {
                    format!(
                        "scan results are {} but should be {}",
                        Self::fmt_types(&res),
                        Self::fmt_types(&tys)
                    )
                })?;
                self.combine(id, *combine, &tys)
            }
            Op::Philox { counters, key, .. } => {
                let t = self.ty(counters[0]);
                ensure(t.dtype == DType::U32 && !t.ptr, || {
                    format!("philox counters must be u32, got {t}")
                })?;
                for v in counters.iter().chain(key) {
                    same(self.ty(*v), t, "philox operands")?;
                }
                ensure(res.len() == 4 && res.iter().all(|r| r == t), || {
                    format!("philox gives four {t}")
                })
            }
            Op::DebugBarrier => ensure(res.is_empty(), || "debug_barrier has no results".into()),
            Op::For {
                lo,
                hi,
                step,
                init,
                body,
            } => {
                let t = self.ty(*lo);
                ensure(t.is_scalar() && t.dtype.is_int() && !t.ptr, || {
                    format!("loop bounds must be integer scalars, got {t}")
                })?;
                same(self.ty(*hi), t, "loop bounds")?;
                same(self.ty(*step), t, "loop bounds")?;
                let carried = self.types(init);
                ensure(res == carried, || {
                    "loop results must match the carried values".into()
                })?;
                let mut args = vec![t.clone()];
                args.extend(carried.iter().cloned());
                self.sub(id, *body, &args, &carried, "for body")
            }
            Op::While { init, cond, body } => {
                let carried = self.types(init);
                ensure(res == carried, || {
                    "loop results must match the carried values".into()
                })?;
                self.sub(
                    id,
                    *cond,
                    &carried,
                    &[Type::scalar(DType::Bool)],
                    "while cond",
                )?;
                self.sub(id, *body, &carried, &carried, "while body")
            }
            Op::If {
                cond,
                then_region,
                else_region,
            } => {
                let c = self.ty(*cond);
                same(c, &Type::scalar(DType::Bool), "if condition")?;
                self.sub(id, *then_region, &[], &res, "then")?;
                self.sub(id, *else_region, &[], &res, "else")
            }
            Op::Yield { .. } => ensure(res.is_empty(), || "yield has no results".into()),
        }
    }

    fn mask(&self, p: &Type, mask: Option<Value>) -> Check {
        match mask {
            Some(m) => {
                let t = self.ty(m);
                ensure(*t == p.with_dtype(DType::Bool), || {
                    format!(
                        "mask must be bool of the pointer shape {:?}, got {t}",
                        p.shape
                    )
                })
            }
            None => Ok(()),
        }
    }

    fn reduce_common(
        &self,
        srcs: &[Value],
        axis: u32,
        has_region: bool,
        custom: bool,
    ) -> std::result::Result<Vec<Type>, String> {
        ensure(!srcs.is_empty(), || "no operands".into())?;
        let tys = self.types(srcs);
        let t0 = &tys[0];
        ensure(t0.is_block() && (axis as usize) < t0.rank(), || {
            format!("axis {axis} out of range for {t0}")
        })?;
        ensure(tys.iter().all(|t| t.shape == t0.shape && !t.ptr), || {
            format!(
                "operands must be number blocks of one shape: {}",
                Self::fmt_types(&tys)
            )
        })?;
        ensure(custom == has_region, || {
            "a combine region is required exactly for custom kinds".into()
        })?;
        ensure(custom || tys.len() == 1, || {
            "builtin kinds take one operand".into()
        })?;
        Ok(tys)
    }

    /// Combine regions are isolated (as Triton's combine functions, separate jit functions):
    /// they see only their own arguments and ops.
    fn combine(&mut self, id: OpId, combine: Option<RegionId>, tys: &[Type]) -> Check {
        let Some(r) = combine else { return Ok(()) };
        let scalars: Vec<Type> = tys.iter().map(|t| t.element()).collect();
        let mut args = scalars.clone();
        args.extend(scalars.iter().cloned());
        let outer = std::mem::replace(&mut self.defined, vec![false; self.k.values.len()]);
        self.isolated.push(outer);
        let res = self.sub(id, r, &args, &scalars, "combine");
        if let Some(outer) = self.isolated.pop() {
            self.defined = outer;
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::Kernel;

    /// `int_to_ptr` takes 64-bit integers and keeps their shape; anything else is refused.
    #[test]
    fn int_to_ptr_takes_64_bit_integers_of_the_same_shape() {
        let text = |src_ty: &str, res_ty: &str| {
            format!("kernel k(%0: {src_ty} x) {{\n  %1 = int_to_ptr %0 : {res_ty}\n}}\n",)
        };
        for (s, r) in [("i64", "ptr<f16>"), ("u64", "ptr<i32>")] {
            let k = Kernel::parse_ir(&text(s, r)).unwrap();
            assert!(
                k.ir().contains(&format!("int_to_ptr %0 : {r}")),
                "{}",
                k.ir()
            );
        }
        for (s, r, why) in [
            ("i32", "ptr<f16>", "needs 64-bit integers"),
            ("f64", "ptr<f16>", "needs 64-bit integers"),
            ("ptr<i64>", "ptr<f16>", "needs 64-bit integers"),
            ("i64", "i64", "gives pointers"),
        ] {
            let e = Kernel::parse_ir(&text(s, r)).unwrap_err().to_string();
            assert!(
                e.contains("int_to_ptr") && e.contains(why),
                "{s} -> {r}: {e}"
            );
        }
    }
}
