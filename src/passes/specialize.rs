//! Triton's integer-argument specialisation: a launch whose integer scalar argument equals 1
//! runs a kernel in which that parameter is the constant 1, and one whose argument is a
//! multiple of 16 runs a kernel that knows it (a `multiple_of(16)` hint on the parameter).
//!
//! Both facts are exact for the launch they come from, so the specialised kernel computes
//! what the general one computes for those arguments. They let the contiguity analysis
//! ([`crate::opt::axis`]) prove unit-stride accesses (`offs * stride` with `stride == 1`)
//! and aligned runs (`x % n` with `n % 16 == 0`), which the printers turn into vector loads.

use crate::ir::{Const, Hint, Kernel, Op, OpData, OpId, ParamKind, Type, ValueData, ValueDef};

/// What a launch's integer argument tells the compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IntFact {
    /// The argument is 1: the parameter becomes a constant.
    One,
    /// The argument is a multiple of 16.
    MultipleOf16,
}

impl IntFact {
    /// The fact an argument `v` gives, if any (0 is a multiple of 16, as in Triton).
    pub fn of(v: i64) -> Option<IntFact> {
        if v == 1 {
            Some(IntFact::One)
        } else if v % 16 == 0 {
            Some(IntFact::MultipleOf16)
        } else {
            None
        }
    }
}

/// The facts of one launch: `(parameter index, fact)` in parameter order. Empty when no
/// argument gives one; the key of a specialisation next to its constexprs.
pub type IntSpec = Vec<(usize, IntFact)>;

/// True for parameters the specialisation looks at: integer scalars (not `bool`).
pub fn specializable(kind: ParamKind) -> bool {
    matches!(kind, ParamKind::Scalar(d) if d.is_int())
}

/// `k` with the facts applied: a parameter known to be 1 is replaced in the body by a
/// constant (the parameter itself stays, so the launch's arguments are unchanged); a
/// multiple of 16 gets a `multiple_of(16)` hint. Facts on other parameters are ignored.
pub fn specialize_integers(k: &Kernel, facts: &[(usize, IntFact)]) -> Kernel {
    let mut out = k.clone();
    let mut consts = Vec::new();
    for &(i, fact) in facts {
        let Some(p) = k.params.get(i) else { continue };
        if !specializable(p.kind) {
            continue;
        }
        match fact {
            IntFact::MultipleOf16 => out.hints.push((p.value, Hint::MultipleOf(vec![16]))),
            IntFact::One => {
                let ParamKind::Scalar(dt) = p.kind else {
                    continue;
                };
                // The constant takes the location of the parameter's first use; an unused
                // parameter has nothing to replace.
                let Some(loc) = k.walk().into_iter().find_map(|id| {
                    let mut uses = false;
                    k.op(id).op.for_each_operand(|v| uses |= v == p.value);
                    uses.then(|| k.op(id).loc)
                }) else {
                    continue;
                };
                let id = OpId(out.ops.len() as u32);
                let v = crate::ir::Value(out.values.len() as u32);
                out.values.push(ValueData {
                    ty: Type::scalar(dt),
                    def: ValueDef::OpResult(id, 0),
                });
                out.ops.push(OpData {
                    op: Op::Constant {
                        value: Const::Int(1),
                    },
                    results: crate::ir::ValueRange { start: v.0, len: 1 },
                    loc,
                    parent: out.body,
                });
                out.replace_all_uses(p.value, v);
                consts.push(id);
            }
        }
    }
    if !consts.is_empty() {
        let body = out.body.index();
        let mut ops = consts;
        ops.append(&mut out.regions[body].ops);
        out.regions[body].ops = ops;
        out.compact();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ir::verify;
    use crate::opt::axis;
    use crate::tl;
    use DType::{F16, I32};

    /// `out[offs % n] = x[offs * stride]`: contiguous only when `stride` is known to be 1.
    fn strided() -> Kernel {
        tl::build("strided", &Default::default(), |k| {
            let x = k.ptr(F16, "x");
            let out = k.ptr(F16, "out");
            let stride = k.scalar(I32, "stride");
            let n = k.scalar(I32, "n");
            let offs = tl::arange(0, 64);
            let v = tl::load(x + offs * stride);
            tl::store(out + offs % n, v);
        })
        .expect("kernel builds")
    }

    fn load_contig(k: &Kernel) -> u64 {
        access_contig(k, true)
    }

    fn access_contig(k: &Kernel, load: bool) -> u64 {
        let info = axis::analyse(k);
        k.walk()
            .into_iter()
            .find_map(|id| match &k.op(id).op {
                Op::Load { ptr, .. } if load => Some(info[ptr.index()].contig),
                Op::Store { ptr, .. } if !load => Some(info[ptr.index()].contig),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn a_remainder_by_a_multiple_of_16_keeps_runs_of_16() {
        let k = strided();
        assert_eq!(access_contig(&k, false), 1);
        let s = specialize_integers(&k, &[(3, IntFact::MultipleOf16)]);
        assert_eq!(access_contig(&s, false), 16);
    }

    #[test]
    fn a_remainder_of_a_possibly_negative_index_keeps_no_runs() {
        // `(offs - m) % n`: the dividend may be negative, where C's remainder is too.
        let k = tl::build("neg", &Default::default(), |k| {
            let out = k.ptr(F16, "out");
            let m = k.scalar(I32, "m");
            let n = k.scalar(I32, "n");
            let offs = tl::arange(0, 64);
            tl::store(out + (offs - m) % n, tl::zeros([64], F16));
        })
        .expect("kernel builds");
        let s = specialize_integers(
            &k,
            &[(1, IntFact::MultipleOf16), (2, IntFact::MultipleOf16)],
        );
        assert_eq!(access_contig(&s, false), 1);
    }

    #[test]
    fn facts_of_arguments() {
        assert_eq!(IntFact::of(1), Some(IntFact::One));
        assert_eq!(IntFact::of(0), Some(IntFact::MultipleOf16));
        assert_eq!(IntFact::of(-32), Some(IntFact::MultipleOf16));
        assert_eq!(IntFact::of(4096), Some(IntFact::MultipleOf16));
        assert_eq!(IntFact::of(2), None);
        assert_eq!(IntFact::of(-1), None);
        assert!(!specializable(ParamKind::Scalar(DType::Bool)));
        assert!(!specializable(ParamKind::Scalar(DType::F32)));
        assert!(specializable(ParamKind::Scalar(DType::U64)));
    }

    #[test]
    fn a_unit_stride_makes_the_load_contiguous() {
        let k = strided();
        assert_eq!(load_contig(&k), 1);
        let s = specialize_integers(&k, &[(2, IntFact::One)]);
        verify(&s).unwrap();
        assert_eq!(s.params.len(), k.params.len());
        assert_eq!(load_contig(&s), 64);
        assert!(s.ir().contains("constant 1"), "{}", s.ir());
        // A multiple of 16 is a hint only: the load stays strided.
        let s = specialize_integers(&k, &[(2, IntFact::MultipleOf16)]);
        verify(&s).unwrap();
        assert_eq!(load_contig(&s), 1);
    }

    #[test]
    fn facts_on_pointers_or_unknown_params_are_ignored() {
        let k = strided();
        let s = specialize_integers(&k, &[(0, IntFact::One), (9, IntFact::One)]);
        assert_eq!(s, k);
    }
}
