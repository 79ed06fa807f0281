//! Control flow with explicit loop-carried values: `range(..).fold`, `while_loop`, `if_`,
//! `static_range`, and custom-combine `reduce` / `associative_scan`.

use super::builder::{op_any, Builder, Res};
use super::ops::Axis;
use super::semantics::Opnd;
use super::tensor::{resolve, Operand, Tensor};
use crate::error::SourceLoc;
use crate::ir::{RegionId, Type, Value};

/// Values carried through loops, branches and combine functions: a [`Tensor`], `()`, tuples
/// of up to 8 carries, arrays and `Vec<Tensor>`.
pub trait Carry: Sized {
    /// Appends the tensors, in order.
    fn flatten(&self, out: &mut Vec<Tensor>);
    /// Rebuilds a value of the same structure as `self` from `it`.
    fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self;
    /// Appends what the value's type fixes besides its tensors (a block pointer's block
    /// shape), one entry per such value (empty for a failed operation's handle): every
    /// branch and loop iteration must keep it.
    fn static_type(&self, out: &mut Vec<String>) {
        let _ = out;
    }
}

impl Carry for Tensor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(*self);
    }
    fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        it.next().unwrap_or_else(Tensor::poison)
    }
}

impl Carry for () {
    fn flatten(&self, _: &mut Vec<Tensor>) {}
    fn unflatten(&self, _: &mut dyn Iterator<Item = Tensor>) -> Self {}
}

impl<T: Carry> Carry for Vec<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|t| t.flatten(out));
    }
    fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.iter().map(|t| t.unflatten(it)).collect()
    }
    fn static_type(&self, out: &mut Vec<String>) {
        self.iter().for_each(|t| t.static_type(out));
    }
}

impl<T: Carry, const N: usize> Carry for [T; N] {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|t| t.flatten(out));
    }
    fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        std::array::from_fn(|i| self[i].unflatten(it))
    }
    fn static_type(&self, out: &mut Vec<String>) {
        self.iter().for_each(|t| t.static_type(out));
    }
}

macro_rules! tuple_carry {
    ($(($($t:ident $i:tt),*)),*) => {$(
        impl<$($t: Carry),*> Carry for ($($t,)*) {
            fn flatten(&self, out: &mut Vec<Tensor>) {
                $(self.$i.flatten(out);)*
            }
            fn unflatten(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
                ($(self.$i.unflatten(it),)*)
            }
            fn static_type(&self, out: &mut Vec<String>) {
                $(self.$i.static_type(out);)*
            }
        }
    )*};
}
tuple_carry!((A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3), (A 0, B 1, C 2, D 3, E 4),
    (A 0, B 1, C 2, D 3, E 4, F 5), (A 0, B 1, C 2, D 3, E 4, F 5, G 6),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7));

fn values(b: &Builder, c: &impl Carry) -> Res<Vec<Value>> {
    let mut ts = Vec::new();
    c.flatten(&mut ts);
    ts.into_iter().map(|t| b.value(t)).collect()
}

/// Checks that `new` (what a branch or loop body yields) keeps the static parts of
/// `old`'s type ([`Carry::static_type`]): `what` names `new`, `before` names `old`.
fn same_static_type(old: &impl Carry, new: &impl Carry, what: &str, before: &str) -> Res<()> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    old.static_type(&mut a);
    new.static_type(&mut b);
    for (x, y) in a.iter().zip(&b) {
        if !x.is_empty() && !y.is_empty() && x != y {
            return Err(format!(
                "{what}: a {y} where {before} a {x} (a block pointer or \
                 descriptor keeps its block shape through branches and loops, as Triton's \
                 types require; use a separate variable for each block shape)"
            ));
        }
    }
    Ok(())
}

fn types(b: &Builder, vs: &[Value]) -> Vec<Type> {
    vs.iter().map(|v| b.ty(*v).clone()).collect()
}

fn rebuild<C: Carry>(b: &Builder, template: &C, vs: &[Value]) -> C {
    let mut it = vs.iter().map(|v| b.handle(*v));
    template.unflatten(&mut it)
}

/// A runtime `range(lo, hi, step)`; consume it with [`Range::fold`] or [`Range::for_each`].
#[derive(Clone, Copy, Debug)]
#[must_use = "a range does nothing until .fold() or .for_each()"]
pub struct Range {
    lo: Operand,
    hi: Operand,
    step: Operand,
    loc: SourceLoc,
}

/// `range(lo, hi, step)` with runtime bounds (scalar tensors or Rust integers), with
/// Python's semantics: a negative step counts down (`range(10, 0, -3)` runs 10, 7, 4, 1). A
/// zero step is a build error when it is a Rust integer; at run time the CPU targets report
/// it as an error and GPU code runs no iteration (Triton's own loop would not end).
#[track_caller]
pub fn range(lo: impl Into<Operand>, hi: impl Into<Operand>, step: impl Into<Operand>) -> Range {
    Range {
        lo: lo.into(),
        hi: hi.into(),
        step: step.into(),
        loc: SourceLoc::caller(),
    }
}

impl Range {
    /// `for i in range(..)` with loop-carried values: `body(i, carried) -> new carried`; returns
    /// the final carried values. Carried values keep their types across iterations.
    pub fn fold<C: Carry>(self, init: C, body: impl FnOnce(Tensor, C) -> C) -> C {
        let loc = self.loc;
        let start = op_any("for", loc, |b| {
            let (lo, hi, step) = (
                resolve(b, self.lo)?,
                resolve(b, self.hi)?,
                resolve(b, self.step)?,
            );
            let bounds = b.loop_bounds(lo, hi, step)?;
            let init_vals = values(b, &init)?;
            let mut tys = vec![b.ty(bounds[0]).clone()];
            tys.extend(types(b, &init_vals));
            let (r, args) = b.push_region(&tys)?;
            let iv = b.handle(args[0]);
            let carried = rebuild(b, &init, &args[1..]);
            Ok((bounds, init_vals, r, iv, carried))
        });
        let Some((bounds, init_vals, r, iv, carried)) = start else {
            return init;
        };
        let new = body(iv, carried);
        let results = op_any("for", loc, |b| {
            same_static_type(&init, &new, "loop-carried values", "the loop starts with")?;
            let yields = values(b, &new)?;
            let want = types(b, &init_vals);
            b.finish_region(r, &yields, Some(&want), "loop-carried values")?;
            Ok(b.emit_for(bounds, init_vals, r))
        });
        match results {
            Some(vs) => op_any("for", loc, |b| Ok(rebuild(b, &init, &vs))).unwrap_or(init),
            None => init,
        }
    }

    /// `for i in range(..)` without carried values.
    pub fn for_each(self, body: impl FnOnce(Tensor)) {
        self.fold((), |i, ()| body(i));
    }
}

/// `while cond(carried): carried = body(carried)`; returns the final carried values.
#[track_caller]
pub fn while_loop<C: Carry>(
    init: C,
    cond: impl FnOnce(C) -> Tensor,
    body: impl FnOnce(C) -> C,
) -> C {
    let loc = SourceLoc::caller();
    let start = op_any("while", loc, |b| {
        let init_vals = values(b, &init)?;
        let tys = types(b, &init_vals);
        let (r, args) = b.push_region(&tys)?;
        Ok((init_vals, tys, r, rebuild(b, &init, &args)))
    });
    let Some((init_vals, tys, rc, carried)) = start else {
        return init;
    };
    let c = cond(carried);
    let body_start = op_any("while", loc, |b| {
        let c = b.value(c)?;
        let c = b.scalar_cond(Opnd::Val(c))?;
        b.finish_region(rc, &[c], None, "while condition")?;
        let (r, args) = b.push_region(&tys)?;
        Ok((r, rebuild(b, &init, &args)))
    });
    let Some((rb, carried)) = body_start else {
        return init;
    };
    let new = body(carried);
    op_any("while", loc, |b| {
        same_static_type(&init, &new, "loop-carried values", "the loop starts with")?;
        let yields = values(b, &new)?;
        b.finish_region(rb, &yields, Some(&tys), "loop-carried values")?;
        let vs = b.emit_while(init_vals, rc, rb);
        Ok(rebuild(b, &init, &vs))
    })
    .unwrap_or(init)
}

/// `if cond: then() else: else_()` on a scalar condition; both branches return values of the
/// same types (`()` for none).
#[track_caller]
pub fn if_<C: Carry>(
    cond: impl Into<Operand>,
    then: impl FnOnce() -> C,
    else_: impl FnOnce() -> C,
) -> C {
    let (loc, cond) = (SourceLoc::caller(), cond.into());
    let start = op_any("if", loc, |b| {
        let c = resolve(b, cond)?;
        let c = b.scalar_cond(c)?;
        let (r, _) = b.push_region(&[])?;
        Ok((c, r))
    });
    let t = then();
    let Some((c, rt)) = start else { return t };
    let mid = op_any("if", loc, |b| {
        let yields = values(b, &t)?;
        let tys = types(b, &yields);
        b.finish_region(rt, &yields, None, "then branch")?;
        let (r, _) = b.push_region(&[])?;
        Ok((tys, r))
    });
    let Some((tys, re)) = mid else { return t };
    let e = else_();
    op_any("if", loc, |b| {
        same_static_type(
            &t,
            &e,
            "else branch (must match the then branch)",
            "the then branch yields",
        )?;
        let yields = values(b, &e)?;
        b.finish_region(
            re,
            &yields,
            Some(&tys),
            "else branch (must match the then branch)",
        )?;
        let vs = b.emit_if(c, rt, re, tys);
        Ok(rebuild(b, &t, &vs))
    })
    .unwrap_or(t)
}

/// `if cond: then()` without results.
#[track_caller]
pub fn if_then(cond: impl Into<Operand>, then: impl FnOnce()) {
    if_(cond, then, || ())
}

/// `static_range(lo, hi, step)`: unrolled at build time (an ordinary Rust iterator, with
/// Python's `range` semantics: a negative step counts down, a zero step is empty).
pub fn static_range(lo: i64, hi: i64, step: i64) -> impl Iterator<Item = i64> {
    let first = (step != 0).then_some(lo);
    std::iter::successors(first, move |&i| i.checked_add(step)).take_while(move |&i| {
        if step > 0 {
            i < hi
        } else {
            i > hi
        }
    })
}

fn combine_region<C: Carry>(b: &mut Builder, input: &C, xs: &[Value]) -> Res<(RegionId, C, C)> {
    let scalars: Vec<Type> = xs.iter().map(|v| b.ty(*v).element()).collect();
    let mut tys = scalars.clone();
    tys.extend(scalars);
    let (r, args) = b.push_region(&tys)?;
    let n = xs.len();
    let a = rebuild(b, input, &args[..n]);
    let c = rebuild(b, input, &args[n..]);
    Ok((r, a, c))
}

/// `reduce(input, axis, combine)`: reduces one tensor or a tuple of tensors (of one shape)
/// with a custom associative `combine(a, b)` on scalars.
#[track_caller]
pub fn reduce<C: Carry>(input: C, axis: impl Into<Axis>, combine: impl FnOnce(C, C) -> C) -> C {
    let (loc, ax) = (SourceLoc::caller(), axis.into());
    let start = op_any("reduce", loc, |b| {
        let xs = values(b, &input)?;
        if xs.is_empty() {
            return Err("reduce needs at least one tensor".into());
        }
        let (xs, axis, orig) = b.reduce_prep(&xs, ax.axis)?;
        let (r, a, c) = combine_region(b, &input, &xs)?;
        Ok((xs, axis, orig, r, a, c))
    });
    let Some((xs, axis, orig, r, a, c)) = start else {
        return input;
    };
    let out = combine(a, c);
    op_any("reduce", loc, |b| {
        let yields = values(b, &out)?;
        let want: Vec<Type> = xs.iter().map(|v| b.ty(*v).element()).collect();
        b.finish_region(r, &yields, Some(&want), "combine function results")?;
        let mut vs = b.reduce_custom(xs, axis, r)?;
        if ax.keep_dims {
            for v in vs.iter_mut() {
                *v = b.keep_dims(*v, ax.axis, &orig, axis)?;
            }
        }
        Ok(rebuild(b, &input, &vs))
    })
    .unwrap_or(input)
}

/// `associative_scan(input, axis, combine, reverse)`: inclusive scan with a custom
/// associative `combine(a, b)` on scalars.
#[track_caller]
pub fn associative_scan<C: Carry>(
    input: C,
    axis: i64,
    reverse: bool,
    combine: impl FnOnce(C, C) -> C,
) -> C {
    let loc = SourceLoc::caller();
    let start = op_any("associative_scan", loc, |b| {
        let xs = values(b, &input)?;
        if xs.is_empty() {
            return Err("associative_scan needs at least one tensor".into());
        }
        let ax = b.scan_prep(&xs, axis)?;
        let (r, a, c) = combine_region(b, &input, &xs)?;
        Ok((xs, ax, r, a, c))
    });
    let Some((xs, ax, r, a, c)) = start else {
        return input;
    };
    let out = combine(a, c);
    op_any("associative_scan", loc, |b| {
        let yields = values(b, &out)?;
        let want: Vec<Type> = xs.iter().map(|v| b.ty(*v).element()).collect();
        b.finish_region(r, &yields, Some(&want), "combine function results")?;
        let vs = b.scan_custom(xs, ax, reverse, r)?;
        Ok(rebuild(b, &input, &vs))
    })
    .unwrap_or(input)
}
