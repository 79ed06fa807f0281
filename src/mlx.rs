//! MLX reference operations: thin, lazy wrappers over MLX's own ops, used as the ground
//! truth in tests and examples and as building blocks next to kernels.
//!
//! Every function returns a new lazy [`Array`]; MLX errors (shape mismatches, bad
//! reshapes, ...) come back as [`Error::Mlx`] with MLX's message.

use crate::array::{dims_to_i32, Array};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ffi::bridge;

fn unary(op: &str, a: &Array) -> Result<Array> {
    Array::wrap(bridge::op_unary(op, a.raw())?, a.pending().clone())
}

fn binary(op: &str, a: &Array, b: &Array) -> Result<Array> {
    Array::wrap(
        bridge::op_binary(op, a.raw(), b.raw())?,
        Array::merged_pending(&[a, b]),
    )
}

fn reduce(op: &str, a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    let (axes, all) = match axes {
        Some(ax) => (ax, false),
        None => (&[][..], true),
    };
    Array::wrap(
        bridge::op_reduce(op, a.raw(), axes, all, keep_dims)?,
        a.pending().clone(),
    )
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:literal),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: &Array) -> Result<Array> { unary($op, a) }
    )*};
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:literal),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: &Array, b: &Array) -> Result<Array> { binary($op, a, b) }
    )*};
}

unary_ops! {
    /// Elementwise `e^x`.
    exp => "exp",
    /// Elementwise natural log.
    log => "log",
    /// Elementwise base-2 log.
    log2 => "log2",
    /// Elementwise square root.
    sqrt => "sqrt",
    /// Elementwise `1/sqrt(x)`.
    rsqrt => "rsqrt",
    /// Elementwise absolute value.
    abs => "abs",
    /// Elementwise negation.
    negative => "negative",
    /// Elementwise sine.
    sin => "sin",
    /// Elementwise cosine.
    cos => "cos",
    /// Elementwise error function.
    erf => "erf",
    /// Elementwise floor.
    floor => "floor",
    /// Elementwise ceiling.
    ceil => "ceil",
    /// Elementwise logistic sigmoid.
    sigmoid => "sigmoid",
    /// Elementwise hyperbolic tangent.
    tanh => "tanh",
    /// Elementwise square.
    square => "square",
}

binary_ops! {
    /// Elementwise `a + b` with NumPy broadcasting and MLX type promotion.
    add => "add",
    /// Elementwise `a - b`.
    subtract => "subtract",
    /// Elementwise `a * b`.
    multiply => "multiply",
    /// Elementwise `a / b` (true division).
    divide => "divide",
    /// Matrix product (batched over leading dims).
    matmul => "matmul",
    /// Elementwise maximum.
    maximum => "maximum",
    /// Elementwise minimum.
    minimum => "minimum",
    /// Elementwise power.
    power => "power",
    /// Elementwise `a == b` (bool).
    equal => "equal",
    /// Elementwise `a < b` (bool).
    less => "less",
    /// Elementwise `a > b` (bool).
    greater => "greater",
}

/// Sum over `axes` (`None`: all axes).
pub fn sum(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("sum", a, axes, keep_dims)
}

/// Maximum over `axes` (`None`: all axes).
pub fn max(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("max", a, axes, keep_dims)
}

/// Minimum over `axes` (`None`: all axes).
pub fn min(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("min", a, axes, keep_dims)
}

/// Mean over `axes` (`None`: all axes).
pub fn mean(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("mean", a, axes, keep_dims)
}

/// Product over `axes` (`None`: all axes).
pub fn prod(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("prod", a, axes, keep_dims)
}

/// Index of the maximum along `axis` (`None`: of the flattened array), as uint32.
pub fn argmax(a: &Array, axis: Option<i32>, keep_dims: bool) -> Result<Array> {
    let axes = axis.map(|x| [x]);
    reduce("argmax", a, axes.as_ref().map(|x| &x[..]), keep_dims)
}

/// Index of the minimum along `axis` (`None`: of the flattened array), as uint32.
pub fn argmin(a: &Array, axis: Option<i32>, keep_dims: bool) -> Result<Array> {
    let axes = axis.map(|x| [x]);
    reduce("argmin", a, axes.as_ref().map(|x| &x[..]), keep_dims)
}

/// Inclusive cumulative sum along `axis`.
pub fn cumsum(a: &Array, axis: i32) -> Result<Array> {
    reduce("cumsum", a, Some(&[axis]), false)
}

/// Inclusive cumulative product along `axis`.
pub fn cumprod(a: &Array, axis: i32) -> Result<Array> {
    reduce("cumprod", a, Some(&[axis]), false)
}

/// `cond ? x : y`, elementwise with broadcasting.
pub fn where_(cond: &Array, x: &Array, y: &Array) -> Result<Array> {
    Array::wrap(
        bridge::op_where(cond.raw(), x.raw(), y.raw())?,
        Array::merged_pending(&[cond, x, y]),
    )
}

/// Softmax over `axes` (computed in the input precision unless `precise`).
pub fn softmax(a: &Array, axes: &[i32], precise: bool) -> Result<Array> {
    Array::wrap(
        bridge::op_softmax(a.raw(), axes, precise)?,
        a.pending().clone(),
    )
}

/// Layer normalisation over the last axis (MLX `fast::layer_norm`).
pub fn layer_norm(
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    eps: f32,
) -> Result<Array> {
    let w = weight.map_or(std::ptr::null(), |w| w.raw() as *const _);
    let b = bias.map_or(std::ptr::null(), |b| b.raw() as *const _);
    let mut deps = vec![x];
    deps.extend(weight);
    deps.extend(bias);
    // SAFETY: the pointers are null or borrowed from live arrays for this call.
    let r = unsafe { bridge::op_layer_norm(x.raw(), w, b, eps)? };
    Array::wrap(r, Array::merged_pending(&deps))
}

/// RMS normalisation over the last axis (MLX `fast::rms_norm`).
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    let w = weight.map_or(std::ptr::null(), |w| w.raw() as *const _);
    let mut deps = vec![x];
    deps.extend(weight);
    // SAFETY: as in `layer_norm`.
    let r = unsafe { bridge::op_rms_norm(x.raw(), w, eps)? };
    Array::wrap(r, Array::merged_pending(&deps))
}

/// `softmax(q @ k^T * scale) @ v` as one op (MLX `fast::scaled_dot_product_attention`):
/// `q [B, H, Lq, D]`, `k [B, H, Lk, D]`, `v [B, H, Lk, Dv]` of one float dtype.
pub fn scaled_dot_product_attention(q: &Array, k: &Array, v: &Array, scale: f32) -> Result<Array> {
    Array::wrap(
        bridge::op_sdpa(q.raw(), k.raw(), v.raw(), scale)?,
        Array::merged_pending(&[q, k, v]),
    )
}

/// Converts to `dtype` (float -> int truncates toward zero, as C).
pub fn astype(a: &Array, dtype: DType) -> Result<Array> {
    Array::wrap(
        bridge::op_astype(a.raw(), dtype.into())?,
        a.pending().clone(),
    )
}

/// The same bytes read as `dtype` (the last axis scales by the ratio of the sizes).
pub fn view(a: &Array, dtype: DType) -> Result<Array> {
    Array::wrap(bridge::op_view(a.raw(), dtype.into())?, a.pending().clone())
}

/// Reshapes (one dimension may be `-1`).
pub fn reshape(a: &Array, shape: &[i32]) -> Result<Array> {
    Array::wrap(bridge::op_reshape(a.raw(), shape)?, a.pending().clone())
}

/// Permutes axes (`None`: reverses them).
pub fn transpose(a: &Array, axes: Option<&[i32]>) -> Result<Array> {
    let (axes, rev) = match axes {
        Some(ax) => (ax, false),
        None => (&[][..], true),
    };
    Array::wrap(
        bridge::op_transpose(a.raw(), axes, rev)?,
        a.pending().clone(),
    )
}

/// Broadcasts to `shape`.
pub fn broadcast_to(a: &Array, shape: &[usize]) -> Result<Array> {
    let s = dims_to_i32(shape, "broadcast_to")?;
    Array::wrap(bridge::op_broadcast_to(a.raw(), &s)?, a.pending().clone())
}

/// A row-major contiguous copy (a no-op when already contiguous).
pub fn contiguous(a: &Array) -> Result<Array> {
    Array::wrap(bridge::op_contiguous(a.raw())?, a.pending().clone())
}

/// `a[start..stop]` per axis.
pub fn slice(a: &Array, start: &[usize], stop: &[usize]) -> Result<Array> {
    let s = dims_to_i32(start, "slice start")?;
    let e = dims_to_i32(stop, "slice stop")?;
    Array::wrap(bridge::op_slice(a.raw(), &s, &e)?, a.pending().clone())
}

/// An array of `shape` filled with `value` converted to `dtype`.
pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Array> {
    let s = dims_to_i32(shape, "full")?;
    Array::wrap(
        bridge::op_full(&s, value, dtype.into())?,
        Default::default(),
    )
}

/// Zeros of `shape` and `dtype`.
pub fn zeros(shape: &[usize], dtype: DType) -> Result<Array> {
    full(shape, 0.0, dtype)
}

/// `[start, start + step, ...)` below `stop`.
pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Array> {
    if step == 0.0 {
        return Err(Error::InvalidArgument("arange: step must not be 0".into()));
    }
    Array::wrap(
        bridge::op_arange(start, stop, step, dtype.into())?,
        Default::default(),
    )
}

/// Seeded random arrays (MLX's generator: the same seed gives the same values).
pub mod random {
    use super::*;

    /// Uniform values in `[lo, hi)`.
    pub fn uniform(shape: &[usize], dtype: DType, lo: f64, hi: f64, seed: u64) -> Result<Array> {
        if !dtype.is_float() {
            return Err(Error::InvalidArgument(format!(
                "random::uniform: dtype {dtype} is not a float type"
            )));
        }
        let s = dims_to_i32(shape, "random::uniform")?;
        Array::wrap(
            bridge::op_random_uniform(&s, dtype.into(), lo, hi, seed)?,
            Default::default(),
        )
    }

    /// Standard normal values.
    pub fn normal(shape: &[usize], dtype: DType, seed: u64) -> Result<Array> {
        if !dtype.is_float() {
            return Err(Error::InvalidArgument(format!(
                "random::normal: dtype {dtype} is not a float type"
            )));
        }
        let s = dims_to_i32(shape, "random::normal")?;
        Array::wrap(
            bridge::op_random_normal(&s, dtype.into(), seed)?,
            Default::default(),
        )
    }
}

/// True where any element over `axes` is non-zero (`None`: all axes); gives bool.
pub fn any(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("any", a, axes, keep_dims)
}

/// True where every element over `axes` is non-zero (`None`: all axes); gives bool.
pub fn all(a: &Array, axes: Option<&[i32]>, keep_dims: bool) -> Result<Array> {
    reduce("all", a, axes, keep_dims)
}

/// 2-D convolution, stride 1, no padding: `input` is NHWC, `weight` is OHWI (MLX's
/// layout), the result is `[N, H - KH + 1, W - KW + 1, O]`.
pub fn conv2d(input: &Array, weight: &Array) -> Result<Array> {
    binary("conv2d", input, weight)
}
