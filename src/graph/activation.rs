//! The activation formulas, written once: the constants the fusion patterns match, the DSL
//! form the fused kernels compute and (in [`super::runner::activate`]) the MLX form the
//! references compute.

use std::f64::consts::FRAC_1_SQRT_2;

use crate::tl::{self, libdevice, Tensor};

/// The cubic term's coefficient of GELU's tanh approximation:
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub(crate) const GELU_TANH_CUBIC: f64 = 0.044715;

/// `sqrt(2 / pi)`, the tanh approximation's scale.
pub(crate) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// GELU, erf form: `0.5 x (1 + erf(x / sqrt(2)))`.
pub(crate) fn gelu(x: Tensor) -> Tensor {
    x * 0.5f32 * (tl::erf(x * FRAC_1_SQRT_2 as f32) + 1.0f32)
}

/// GELU, tanh approximation.
pub(crate) fn gelu_tanh(x: Tensor) -> Tensor {
    let u = (x + x * x * x * GELU_TANH_CUBIC as f32) * SQRT_2_OVER_PI as f32;
    x * 0.5f32 * (libdevice::tanh(u) + 1.0f32)
}

/// SiLU: `x sigmoid(x)`.
pub(crate) fn silu(x: Tensor) -> Tensor {
    x * tl::sigmoid(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constants_are_the_formulas() {
        assert!((SQRT_2_OVER_PI - (2.0 / std::f64::consts::PI).sqrt()).abs() < 1e-16);
        assert_eq!(GELU_TANH_CUBIC, 0.044715);
    }
}
