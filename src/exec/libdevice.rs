//! Triton's `libdevice` math on the interpreter: every function in `f64` (the `libm`
//! crate, a port of musl's), an `f32` result rounded once from it, so within 1 ulp of the
//! correctly rounded result.

use crate::ir::{BinaryOp, UnaryOp};

/// The `f64` function of a unary op.
pub(crate) fn unary_fn(kind: UnaryOp) -> fn(f64) -> f64 {
    match kind {
        UnaryOp::Exp => libm::exp,
        UnaryOp::Exp2 => libm::exp2,
        UnaryOp::Log => libm::log,
        UnaryOp::Log2 => libm::log2,
        UnaryOp::Sqrt => libm::sqrt,
        UnaryOp::Rsqrt => |x| 1.0 / libm::sqrt(x),
        UnaryOp::Sin => libm::sin,
        UnaryOp::Cos => libm::cos,
        UnaryOp::Erf => libm::erf,
        UnaryOp::Floor => libm::floor,
        UnaryOp::Ceil => libm::ceil,
        UnaryOp::Abs => libm::fabs,
        UnaryOp::Tan => libm::tan,
        UnaryOp::Asin => libm::asin,
        UnaryOp::Acos => libm::acos,
        UnaryOp::Atan => libm::atan,
        UnaryOp::Sinh => libm::sinh,
        UnaryOp::Cosh => libm::cosh,
        UnaryOp::Asinh => libm::asinh,
        UnaryOp::Acosh => acosh,
        UnaryOp::Atanh => libm::atanh,
        UnaryOp::Log1p => libm::log1p,
        UnaryOp::Expm1 => libm::expm1,
        UnaryOp::Log10 => libm::log10,
        UnaryOp::Exp10 => libm::exp10,
        UnaryOp::Cbrt => libm::cbrt,
        UnaryOp::Erfinv => erfinv,
    }
}

/// `acosh`, NaN below 1: musl's (and so `libm`'s) reads the exponent without the sign and
/// returns finite values for `x <= 0` (`acosh(-1)` = -0.31).
fn acosh(x: f64) -> f64 {
    if x < 1.0 {
        f64::NAN
    } else {
        libm::acosh(x)
    }
}

/// The `f64` function of a `libdevice` binary op (`None` for the others).
pub(crate) fn binary_fn(kind: BinaryOp) -> Option<fn(f64, f64) -> f64> {
    Some(match kind {
        BinaryOp::Pow => libm::pow,
        BinaryOp::Atan2 => libm::atan2,
        BinaryOp::Hypot => libm::hypot,
        _ => return None,
    })
}

/// The inverse error function: ±inf at ±1, NaN outside [-1, 1] and for NaN.
///
/// Giles' single-precision approximation as the start, then Newton steps on `erf(x) = y`
/// (on `ln erfc(x) = ln(1 - y)` where `|y| > 0.5`: `1 - y` is exact there and `erf` would
/// cancel) until a step stops changing `x`: a few ulp of `f64`.
pub fn erfinv(y: f64) -> f64 {
    let a = y.abs();
    if y.is_nan() || a > 1.0 {
        return f64::NAN;
    }
    if a == 1.0 {
        return f64::INFINITY.copysign(y);
    }
    if y == 0.0 {
        return y;
    }
    let mut w = -((1.0 - a) * (1.0 + a)).ln();
    let p = if w < 5.0 {
        w -= 2.5;
        [
            2.810_226_36e-08,
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ]
        .iter()
        .fold(0.0, |p, c| p * w + c)
    } else {
        w = w.sqrt() - 3.0;
        [
            -0.000_200_214_257,
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ]
        .iter()
        .fold(0.0, |p, c| p * w + c)
    };
    // Work on |y| and restore the sign at the end.
    let mut x = p * a;
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    for _ in 0..20 {
        let d = two_over_sqrt_pi * (-x * x).exp();
        let step = if a <= 0.5 {
            (libm::erf(x) - a) / d
        } else {
            // Newton on ln(erfc(x)) = ln(1 - y), nearly quadratic in the tail where
            // erfc's own convexity would make plain steps creep.
            let e = libm::erfc(x);
            -(e.ln() - (1.0 - a).ln()) * e / d
        };
        let next = x - step;
        if next == x || !next.is_finite() {
            break;
        }
        x = next;
    }
    x.copysign(y)
}

#[cfg(test)]
mod tests {
    use super::{acosh, erfinv};

    #[test]
    fn acosh_is_nan_below_one() {
        for x in [
            0.999,
            0.0,
            -0.0,
            -1.0,
            -1.5,
            -2.0,
            -1_336_577.0,
            f64::NEG_INFINITY,
        ] {
            assert!(acosh(x).is_nan(), "acosh({x}) = {}", acosh(x));
        }
        assert!(acosh(f64::NAN).is_nan());
        assert_eq!(acosh(1.0), 0.0);
        assert_eq!(acosh(f64::INFINITY), f64::INFINITY);
        assert!((acosh(10.0) - 2.993_222_846_126_381).abs() < 1e-15);
    }

    #[test]
    fn erfinv_inverts_erf() {
        for i in 1..2000 {
            let x = i as f64 * 0.003;
            let y = libm::erf(x);
            if y < 1.0 {
                let r = erfinv(y);
                // y carries a rounding error of half an ulp, which moves the exact inverse
                // by that over erf'(x).
                let slope = std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp();
                let tol = 4.0 * f64::EPSILON * (x + y / slope);
                assert!((r - x).abs() <= tol, "{x}: {r}");
                assert_eq!(erfinv(-y), -r);
            }
        }
        // Tails through erfc: 1 - y exact.
        for x in [3.0f64, 4.0, 5.0, 5.8] {
            let q = libm::erfc(x);
            let r = erfinv(1.0 - q);
            let back = libm::erfc(r);
            assert!(((back - (1.0 - (1.0 - q))) / q).abs() < 1e-12, "{x}: {r}");
        }
        assert_eq!(erfinv(1.0), f64::INFINITY);
        assert_eq!(erfinv(-1.0), f64::NEG_INFINITY);
        assert!(erfinv(1.5).is_nan() && erfinv(f64::NAN).is_nan());
        assert!(erfinv(-0.0).is_sign_negative() && erfinv(0.0) == 0.0);
    }
}
