//! Closed forms of the index arithmetic every Triton kernel starts with.
//!
//! `offs = pid * BLOCK + tl.arange(0, BLOCK)` and `mask = offs < n` are blocks whose
//! elements follow a formula: offsets are `base + stride * i`, masks are "the first `k`
//! lanes". The interpreter keeps such values as that formula (a [`Lazy`] tag on the value's
//! slot) instead of writing the block: adding a scalar or scaling changes two numbers, a
//! comparison against a scalar becomes a lane count, and a load or store through
//! `ptr + offs` under `mask` becomes one bounds check and one copy of the active prefix.
//! Any other consumer asks for the block and gets it written out ([`materialize`]) with
//! exactly the values the plain ops would give.
//!
//! Only signed integers whose every lane is representable get an affine form, so the
//! formula never has to model wrap-around: an op whose result could wrap falls back to
//! the ordinary (wrapping) block op. The forms and their arithmetic are the integer
//! analysis's ([`crate::opt::axis::Affine`] for one program, whose base the interpreter
//! knows at run time); this module keeps them on values and writes them out.

use super::data::{canon_i32, Data};
use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpPred};
use crate::opt::axis::{self, Affine};

/// A block value known in closed form (1-D blocks only; lane `i` of the flat block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lazy {
    /// Lane `i` holds `base + stride * i`, and every lane fits the value's dtype.
    Affine { base: i64, stride: i64 },
    /// A `bool` block whose lanes `0..k` are true and the rest false.
    Prefix(usize),
}

/// Whether lazy integer forms are kept for `d` (signed: comparisons and the lack of
/// wrap-around are then plain integer facts).
pub(crate) fn affine_dtype(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64)
}

/// `a op b` for operands in affine form (a scalar is stride 0), `n` lanes of dtype `d`;
/// `None` when the result is not affine or could wrap. The arithmetic and the range check
/// are the integer analysis's ([`Affine`]), for one program.
pub(crate) fn binary(
    kind: BinaryOp,
    a: (i64, i64),
    b: (i64, i64),
    n: usize,
    d: DType,
) -> Option<Lazy> {
    let r = Affine::lanes(a.0, a.1).binary(kind, Affine::lanes(b.0, b.1), n)?;
    if !r.fits(d, [1; 3], n) {
        return None;
    }
    // `fits` bounded every lane and the stride to `d`, so both fit i64.
    let (base, stride) = r.exact_lanes()?;
    Some(Lazy::Affine {
        base: base as i64,
        stride: stride as i64,
    })
}

/// `a pred b` for operands in affine form, as a lane prefix when the true lanes are one.
pub(crate) fn cmp(pred: CmpPred, a: (i64, i64), b: (i64, i64), n: usize) -> Option<Lazy> {
    axis::true_prefix(pred, Affine::lanes(a.0, a.1), Affine::lanes(b.0, b.1), n).map(Lazy::Prefix)
}

/// Writes the `n` lanes of `l` (of dtype `d`) into `out`, as the block ops would have.
pub(crate) fn materialize(l: Lazy, d: DType, n: usize, out: &mut Data) {
    match l {
        Lazy::Affine { base, stride } => match d {
            DType::I64 | DType::U64 => {
                let o = out.i64s();
                o.extend((0..n as i64).map(|i| base.wrapping_add(stride.wrapping_mul(i))));
            }
            _ => {
                let o = out.i32s();
                o.extend((0..n as i64).map(|i| canon_i32(base.wrapping_add(stride * i) as i32, d)));
            }
        },
        Lazy::Prefix(k) => {
            let o = out.bools();
            o.resize(k.min(n), true);
            o.resize(n, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(l: Lazy, d: DType, n: usize) -> Data {
        let mut out = Data::default();
        materialize(l, d, n, &mut out);
        out
    }

    #[test]
    fn affine_arithmetic_matches_lanes() {
        let n = 37;
        let ar = (0i64, 1i64);
        let Some(Lazy::Affine { base, stride }) = binary(BinaryOp::Mul, ar, (3, 0), n, DType::I32)
        else {
            panic!("mul by a scalar is affine")
        };
        assert_eq!((base, stride), (0, 3));
        let s = binary(BinaryOp::Add, (base, stride), (100, 0), n, DType::I32).unwrap();
        let Data::I32(v) = lanes(s, DType::I32, n) else {
            panic!()
        };
        assert_eq!(v, (0..n as i32).map(|i| 100 + 3 * i).collect::<Vec<_>>());
        // Block times block is not affine.
        assert_eq!(binary(BinaryOp::Mul, ar, ar, n, DType::I32), None);
        assert_eq!(binary(BinaryOp::Div, ar, (2, 0), n, DType::I32), None);
    }

    #[test]
    fn overflow_falls_back() {
        let near = (i32::MAX as i64 - 10, 0);
        assert!(binary(BinaryOp::Add, (0, 1), near, 11, DType::I32).is_some());
        assert_eq!(binary(BinaryOp::Add, (0, 1), near, 12, DType::I32), None);
        // The same sum fits in i64.
        assert!(binary(BinaryOp::Add, (0, 1), near, 12, DType::I64).is_some());
        assert_eq!(
            binary(BinaryOp::Mul, (0, 1), (1 << 40, 0), 4, DType::I32),
            None
        );
    }

    #[test]
    fn comparisons_give_the_true_prefix() {
        // Brute force against lane-by-lane comparisons, all predicates and signs.
        let n = 9usize;
        for a in [(-5i64, 1i64), (3, 2), (4, 0), (7, -1), (0, 3)] {
            for b in [(0i64, 0i64), (5, 0), (-3, 0), (2, 1), (20, -2)] {
                for pred in [CmpPred::Lt, CmpPred::Le, CmpPred::Gt, CmpPred::Ge] {
                    let want: Vec<bool> = (0..n as i64)
                        .map(|i| {
                            let (x, y) = (a.0 + a.1 * i, b.0 + b.1 * i);
                            match pred {
                                CmpPred::Lt => x < y,
                                CmpPred::Le => x <= y,
                                CmpPred::Gt => x > y,
                                _ => x >= y,
                            }
                        })
                        .collect();
                    // `None` (the block op runs instead) is always correct; a form
                    // given must match lane by lane.
                    if let Some(l) = cmp(pred, a, b, n) {
                        assert_eq!(
                            lanes(l, DType::Bool, n),
                            Data::Bool(want),
                            "{a:?} {pred:?} {b:?}"
                        );
                    }
                }
            }
        }
        // The shapes kernels use are recognised: `offs < n`, `offs <= n`, `n > offs`.
        for (pred, a, b) in [
            (CmpPred::Lt, (5, 1), (9, 0)),
            (CmpPred::Le, (5, 1), (9, 0)),
            (CmpPred::Gt, (9, 0), (5, 1)),
            (CmpPred::Ge, (9, 0), (5, 1)),
        ] {
            assert!(cmp(pred, a, b, n).is_some(), "{pred:?}");
        }
        assert_eq!(cmp(CmpPred::Eq, (0, 1), (3, 0), 8), None);
    }

    #[test]
    fn i64_and_narrow_lanes() {
        let Data::I64(v) = lanes(
            Lazy::Affine {
                base: -2,
                stride: 5,
            },
            DType::I64,
            4,
        ) else {
            panic!()
        };
        assert_eq!(v, [-2, 3, 8, 13]);
        assert_eq!(
            lanes(Lazy::Prefix(7), DType::Bool, 3),
            Data::Bool(vec![true; 3])
        );
    }
}
