//! Helpers for checking kernels against references (used by the examples and tests).

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mlx;

/// The largest `|actual - expected|` over all elements, computed in f64 after converting
/// both to f32. A NaN in only one of the two at some position (for example an element the
/// kernel never wrote over a NaN-poisoned output) counts as an infinite error; NaN in both
/// counts as equal. Shapes must match exactly.
pub fn max_abs_diff(actual: &Array, expected: &Array) -> Result<f64> {
    if actual.shape() != expected.shape() {
        return Err(Error::InvalidArgument(format!(
            "max_abs_diff: shapes differ: {:?} vs {:?}",
            actual.shape(),
            expected.shape()
        )));
    }
    let a = mlx::astype(actual, DType::F32)?.to_vec::<f32>()?;
    let e = mlx::astype(expected, DType::F32)?.to_vec::<f32>()?;
    Ok(a.iter().zip(&e).fold(0.0f64, |m, (x, y)| {
        let d = match (x.is_nan(), y.is_nan()) {
            (true, true) => 0.0,
            (false, false) if x == y => 0.0,
            (false, false) => (*x as f64 - *y as f64).abs(),
            _ => f64::INFINITY,
        };
        m.max(d)
    }))
}
