//! Triton's standard-library shape functions and sorting (`flip`, `cat`, `view`, `sort`,
//! `expand_dims` over several axes, `trans` with an order, `cumprod(reverse=)`,
//! `sum(dtype=)`), written with the core ops so that every target runs them as it runs
//! those (`reshape`, `permute`, `join`/`split`, `where`).

use super::builder::op;
use super::builder::{Builder, Res};
use super::ops::IntoShape;
use super::semantics::Opnd;
use super::tensor::{Scalar, Tensor};
use crate::dtype::DType;
use crate::error::SourceLoc;
use crate::ir::{BinaryOp, CmpPred, ReduceKind, ScanKind, Value};

/// The log2 of `n` if `n` is a power of two.
fn log2_exact(n: usize) -> Option<u32> {
    n.is_power_of_two().then(|| n.trailing_zeros())
}

fn int(n: i64) -> Opnd {
    Opnd::Weak(Scalar::Int(n as i128))
}

/// `v` (of `numel` elements) as `[a, 2, c]`, split into the halves `[a, c]` at index 0 and
/// 1 of the middle dim.
fn halves(b: &mut Builder, v: Value, a: usize, c: usize) -> Res<(Value, Value)> {
    let y = b.reshape(v, &[a, 2, c])?;
    let y = b.permute(y, &[0, 2, 1])?;
    b.split(y)
}

/// The inverse of [`halves`]: `[a, 2, c]` from the two halves, reshaped to `shape`.
fn unhalves(b: &mut Builder, l: Value, r: Value, shape: &[usize]) -> Res<Value> {
    let y = b.join(l, r)?;
    let y = b.permute(y, &[0, 2, 1])?;
    b.reshape(y, shape)
}

/// `(size of the dims before `axis`, size of `axis`, size of the dims after)`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

fn axis_of(b: &Builder, v: Value, axis: i64, what: &str) -> Res<(Vec<usize>, usize)> {
    let t = b.ty(v).clone();
    if !t.is_block() || t.ptr {
        return Err(format!("{what} needs a block of numbers, got {t}"));
    }
    let r = t.rank() as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..r).contains(&a) {
        return Err(format!("{what}: axis {axis} is out of range for {t}"));
    }
    if log2_exact(t.shape[a as usize]).is_none() {
        return Err(format!(
            "{what}: the size of axis {axis} must be a power of two, got {t}"
        ));
    }
    Ok((t.shape.clone(), a as usize))
}

/// `flip(x, dim)`: the elements of `x` in reverse order along `dim` (any axis; Triton's
/// own only flips the last). The axis' size must be a power of two, as in Triton. The
/// halves of every power-of-two segment are swapped, from the whole axis down to pairs.
#[track_caller]
pub fn flip(x: Tensor, dim: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("flip", loc, |b| {
        let v = b.value(x)?;
        let (shape, axis) = axis_of(b, v, dim, "flip")?;
        let (pre, n, post) = around(&shape, axis);
        let mut v = v;
        let mut seg = n;
        while seg > 1 {
            let (a, c) = (pre * (n / seg), (seg / 2) * post);
            let (l, r) = halves(b, v, a, c)?;
            v = unhalves(b, r, l, &shape)?;
            seg /= 2;
        }
        Ok(v)
    })
}

/// `cat(a, b, can_reorder=True)`: `a` and `b` (one shape) concatenated along the first
/// dim. Triton allows only `can_reorder=True`, which lets the result's order be any
/// permutation; here it is always `a`'s elements then `b`'s, which both values permit.
#[track_caller]
pub fn cat(a: Tensor, b: Tensor, can_reorder: bool) -> Tensor {
    let loc = SourceLoc::caller();
    let _ = can_reorder;
    op("cat", loc, |bd| {
        let (x, y) = (bd.value(a)?, bd.value(b)?);
        let (tx, ty) = (bd.ty(x).clone(), bd.ty(y).clone());
        if tx != ty || !tx.is_block() {
            return Err(format!(
                "cat needs two blocks of one type and shape, got {tx} and {ty}"
            ));
        }
        let j = bd.join(x, y)?;
        let r = tx.rank() as i64;
        let order: Vec<i64> = std::iter::once(r).chain(0..r).collect();
        let j = bd.permute(j, &order)?;
        let mut shape = tx.shape.clone();
        shape[0] *= 2;
        bd.reshape(j, &shape)
    })
}

/// `view(x, shape)`: Triton's reshape that may reorder elements; here the order is kept
/// (the same as [`reshape`](super::reshape)), which Triton permits.
#[track_caller]
pub fn view(x: Tensor, shape: impl IntoShape) -> Tensor {
    super::reshape(x, shape)
}

/// `expand_dims(x, axes)` with several axes: each axis is a position in the result (of
/// rank `rank(x) + axes.len()`, negative counting from its end), as Triton.
#[track_caller]
pub fn expand_dims_axes(x: Tensor, axes: impl IntoShape) -> Tensor {
    let (loc, axes) = (SourceLoc::caller(), axes.into_shape());
    op("expand_dims", loc, |b| {
        let v = b.value(x)?;
        let r = (b.ty(v).rank() + axes.len()) as i64;
        let mut norm: Vec<i64> = Vec::with_capacity(axes.len());
        for &a in &axes {
            let n = if a < 0 { a + r } else { a };
            if !(0..r).contains(&n) {
                return Err(format!(
                    "expand_dims axis {a} is out of range for a result of rank {r}"
                ));
            }
            if norm.contains(&n) {
                return Err(format!("expand_dims axes repeat axis {a}: {axes:?}"));
            }
            norm.push(n);
        }
        norm.sort_unstable();
        let mut v = v;
        for a in norm {
            v = b.expand_dims(v, a)?;
        }
        Ok(v)
    })
}

/// `trans(x, *dims)`: [`permute`](super::permute) by `dims` (Triton's `trans` with an
/// order; [`trans`](super::trans) without one swaps the last two dims).
#[track_caller]
pub fn trans_dims(x: Tensor, dims: impl IntoShape) -> Tensor {
    super::permute(x, dims)
}

/// `cumprod(x, axis, reverse=True)`: the running product from the end of `axis`.
#[track_caller]
pub fn cumprod_reverse(x: Tensor, axis: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("cumprod", loc, |b| {
        let v = b.value(x)?;
        b.scan_builtin(ScanKind::Prod, v, axis, true)
    })
}

/// `sum(x, axis, dtype=d)`: `x` cast to `d` (Triton casts before reducing), then summed
/// in `d`: a result of `d` (an 8- or 16-bit integer sum wraps as Triton's does); `axis` as
/// in [`sum`](super::sum).
#[track_caller]
pub fn sum_dtype(x: Tensor, axis: impl Into<super::Axis>, dtype: DType) -> Tensor {
    let (loc, ax) = (SourceLoc::caller(), axis.into());
    op("sum", loc, |b| {
        if dtype.is_bool() {
            return Err("sum with dtype=int1 is not supported (sum as int32)".into());
        }
        let v = b.value(x)?;
        let v = b.cast(v, dtype)?;
        // Narrow integers are summed in 32 bits, whose low bits are the wrapped sum.
        let r = b.reduce_builtin(ReduceKind::Sum, v, ax.axis, ax.keep_dims)?;
        b.cast(r, dtype)
    })
}

/// `sort(x, dim, descending)`: `x` sorted along `dim` (any axis whose size is a power of
/// two) by a bitonic network, the same network as Triton's: element pairs are compared
/// with `>` and swapped where it (xor the pair's direction) holds, so where there is no
/// NaN the result is Triton's. A NaN compares false both ways and stays where the network
/// leaves it; the result is always a permutation of the input (Triton's own extracts the
/// pairs by multiplying by 0 and 1, which turns a NaN or inf into NaN elsewhere).
#[track_caller]
pub fn sort(x: Tensor, dim: i64, descending: bool) -> Tensor {
    let loc = SourceLoc::caller();
    op("sort", loc, |b| {
        let v = b.value(x)?;
        sort_network(b, v, dim, descending, "sort")
    })
}

/// `topk(x, k, dim=-1, descending=True)`: the `k` largest (`descending=false`: smallest)
/// elements along the last axis (the only `dim` Triton takes), in sorted order (largest
/// first; smallest first with `descending=false`), `k` a power of two not
/// above the axis' size. Sorted with [`sort`]'s network, then the leading `k` kept (the
/// halves of the axis split off until `k` remain); where a NaN is present the result is
/// [`sort`]'s, which may differ from Triton's.
#[track_caller]
pub fn topk(x: Tensor, k: i64, dim: i64, descending: bool) -> Tensor {
    let loc = SourceLoc::caller();
    op("topk", loc, |b| {
        let v = b.value(x)?;
        let (shape, axis) = axis_of(b, v, dim, "topk")?;
        if axis + 1 != shape.len() {
            return Err(format!(
                "topk: only the last axis is supported (as in Triton), got dim {dim}"
            ));
        }
        let n = shape[axis];
        if k <= 0 || !(k as u64).is_power_of_two() || k as usize > n {
            return Err(format!(
                "topk: k must be a power of two between 1 and the last axis' size {n}, got {k}"
            ));
        }
        let mut v = sort_network(b, v, -1, descending, "topk")?;
        let pre: usize = shape[..axis].iter().product();
        let mut m = n;
        while m > k as usize {
            m /= 2;
            v = halves(b, v, pre, m)?.0;
        }
        let mut out = shape.clone();
        out[axis] = m;
        b.reshape(v, &out)
    })
}

/// [`sort`]'s bitonic network on `v` along `dim` (`what` names the op in errors).
fn sort_network(b: &mut Builder, v: Value, dim: i64, descending: bool, what: &str) -> Res<Value> {
    {
        let (shape, axis) = axis_of(b, v, dim, what)?;
        let (pre, n, post) = around(&shape, axis);
        if pre * n * post > i32::MAX as usize {
            return Err(format!(
                "{what} of {} elements is too large",
                pre * n * post
            ));
        }
        let k = n.trailing_zeros();
        let mut v = v;
        for stage in 1..=k {
            for i in (k - stage)..k {
                // Partners differ in bit `k - 1 - i` of the index along the axis.
                let (a, c) = (pre << i, (n >> (i + 1)) * post);
                let (l, r) = halves(b, v, a, c)?;
                let mut swap = b.compare(CmpPred::Gt, Opnd::Val(l), Opnd::Val(r))?;
                let dir = if stage < k {
                    // Runs of 2^stage alternate up and down: bit `stage` of the index
                    // along the axis of the pair's left element.
                    Some(direction(b, a, c, post, n, stage)?)
                } else if descending {
                    Some(b.full(
                        &[a as i64, c as i64],
                        Opnd::Weak(Scalar::Bool(true)),
                        DType::Bool,
                    )?)
                } else {
                    None
                };
                if let Some(d) = dir {
                    swap = b.bitwise(BinaryOp::Xor, Opnd::Val(swap), Opnd::Val(d))?;
                }
                let nl = b.where_(Opnd::Val(swap), Opnd::Val(r), Opnd::Val(l))?;
                let nr = b.where_(Opnd::Val(swap), Opnd::Val(l), Opnd::Val(r))?;
                v = unhalves(b, nl, nr, &shape)?;
            }
        }
        Ok(v)
    }
}

/// For the left elements of the pairs laid out as `[a, c]` (element `(p, q)` at flat index
/// `2cp + q` of `[pre, n, post]`): whether bit `stage` of its index along the axis is set.
fn direction(b: &mut Builder, a: usize, c: usize, post: usize, n: usize, stage: u32) -> Res<Value> {
    let rows = b.arange(0, a as i64)?;
    let rows = b.expand_dims(rows, 1)?;
    let cols = b.arange(0, c as i64)?;
    let cols = b.expand_dims(cols, 0)?;
    let rows = b.mul(Opnd::Val(rows), int(2 * c as i64))?;
    let flat = b.add(Opnd::Val(rows), Opnd::Val(cols))?;
    let idx = b.floordiv(Opnd::Val(flat), int(post as i64))?;
    let idx = b.rem(Opnd::Val(idx), int(n as i64))?;
    let bit = b.bitwise(BinaryOp::Shr, Opnd::Val(idx), int(stage as i64))?;
    let bit = b.bitwise(BinaryOp::And, Opnd::Val(bit), int(1))?;
    b.compare(CmpPred::Ne, Opnd::Val(bit), int(0))
}

/// The same-width integer whose bits carry `d` through an integer sum unchanged (`None`:
/// `bool`, carried as 0/1).
fn carrier(d: DType) -> Option<DType> {
    match d.size_bytes() {
        _ if d.is_bool() => None,
        1 => Some(DType::U8),
        2 => Some(DType::U16),
        4 => Some(DType::U32),
        _ => Some(DType::U64),
    }
}

/// Elements of the one-hot block `[.., J, K, ..]` (`index` against `arange(K)`) that
/// [`gather`] and [`histogram`] build.
const ONE_HOT_MAX: usize = 1 << 20;

/// `gather(src, index, axis)`: `out[.., j, ..] = src[.., index[.., j, ..], ..]` along
/// `axis`; `index` has `src`'s rank and its shape off `axis`, the result has `index`'s
/// shape. An index outside `[0, src.shape[axis])` gives 0 (Triton leaves it undefined).
/// Each index is compared with every position of the axis and the one match is summed in
/// the element's bits, so every target computes it with its builtin ops, bit-exactly
/// (NaN payloads and -0.0 included); the work is `index.numel() x src.shape[axis]`, at
/// most 2^20.
#[track_caller]
pub fn gather(src: Tensor, index: Tensor, axis: i64) -> Tensor {
    let loc = SourceLoc::caller();
    op("gather", loc, |b| {
        let (s, i) = (b.value(src)?, b.value(index)?);
        let (st, it) = (b.ty(s).clone(), b.ty(i).clone());
        if !st.is_block() || st.ptr {
            return Err(format!("gather: src must be a block of numbers, got {st}"));
        }
        if !it.is_block() || it.ptr || !it.dtype.is_int() {
            return Err(format!(
                "gather: index must be a block of integers, got {it}"
            ));
        }
        let r = st.rank() as i64;
        if it.rank() as i64 != r {
            return Err(format!(
                "gather: src and index must have the same rank, got {st} and {it}"
            ));
        }
        let a = if axis < 0 { axis + r } else { axis };
        if !(0..r).contains(&a) {
            return Err(format!("gather: axis {axis} is out of range for {st}"));
        }
        let a = a as usize;
        for d in 0..st.rank() {
            if d != a && st.shape[d] != it.shape[d] {
                return Err(format!(
                    "gather: index dim {d} must match the source's ({st} and {it})"
                ));
            }
        }
        let k = st.shape[a];
        if it.numel().saturating_mul(k) > ONE_HOT_MAX {
            return Err(format!(
                "gather: {} indices into an axis of {k} exceed the {ONE_HOT_MAX} elements \
                 this gather compares at once (gather in smaller blocks)",
                it.numel()
            ));
        }
        let bits = match carrier(st.dtype) {
            Some(c) => b.bitcast(s, c)?,
            None => b.cast(s, DType::U8)?,
        };
        // [.., 1, K, ..] against [.., J, 1, ..].
        let bits = b.expand_dims(bits, a as i64)?;
        let idx = b.expand_dims(i, a as i64 + 1)?;
        let mut pos_shape = vec![1usize; st.rank() + 1];
        pos_shape[a + 1] = k;
        let pos = b.arange(0, k as i64)?;
        let pos = b.reshape(pos, &pos_shape)?;
        let hit = b.compare(CmpPred::Eq, Opnd::Val(idx), Opnd::Val(pos))?;
        let picked = b.where_(Opnd::Val(hit), Opnd::Val(bits), int(0))?;
        let summed = b.reduce_builtin(ReduceKind::Sum, picked, Some(a as i64 + 1), false)?;
        match carrier(st.dtype) {
            Some(c) => {
                let c_bits = b.cast(summed, c)?;
                b.bitcast(c_bits, st.dtype)
            }
            None => b.compare(CmpPred::Ne, Opnd::Val(summed), int(0)),
        }
    })
}

/// `histogram(x, num_bins, mask=)`: `out[v]` (int32) counts the elements of the 1-D integer
/// block `x` equal to `v`, for `v` in `[0, num_bins)` (a power of two, as every block
/// size); elements outside that range, or whose `mask` is false, are not counted. Each
/// element is compared with every bin and the matches summed, on every target with its
/// builtin ops; `x.numel() x num_bins` is at most 2^20.
#[track_caller]
pub fn histogram(x: Tensor, num_bins: i64, mask: Option<Tensor>) -> Tensor {
    let loc = SourceLoc::caller();
    op("histogram", loc, |b| {
        let v = b.value(x)?;
        let t = b.ty(v).clone();
        if t.rank() != 1 || t.ptr || !t.dtype.is_int() {
            return Err(format!("histogram needs a 1-D block of integers, got {t}"));
        }
        if num_bins <= 0 || !(num_bins as u64).is_power_of_two() {
            return Err(format!(
                "histogram: num_bins must be a power of two, got {num_bins}"
            ));
        }
        let n = t.shape[0];
        if n.saturating_mul(num_bins as usize) > ONE_HOT_MAX {
            return Err(format!(
                "histogram: {n} elements into {num_bins} bins exceed the {ONE_HOT_MAX} \
                 comparisons made at once (count smaller blocks)"
            ));
        }
        let row = b.expand_dims(v, 0)?;
        let bins = b.arange(0, num_bins)?;
        let bins = b.expand_dims(bins, 1)?;
        let mut hit = b.compare(CmpPred::Eq, Opnd::Val(row), Opnd::Val(bins))?;
        if let Some(m) = mask {
            let m = b.value(m)?;
            let mt = b.ty(m).clone();
            if !mt.dtype.is_bool() {
                return Err(format!("histogram: mask must be a block of int1, got {mt}"));
            }
            let m = b.broadcast_to(m, &[n])?;
            let m = b.expand_dims(m, 0)?;
            hit = b.bitwise(BinaryOp::And, Opnd::Val(hit), Opnd::Val(m))?;
        }
        let ones = b.cast(hit, DType::I32)?;
        b.reduce_builtin(ReduceKind::Sum, ones, Some(1), false)
    })
}

/// Triton's `input_precision=` of `dot` on fp32 operands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Precision {
    Ieee,
    Tf32,
    Tf32x3,
}

/// `x` (f32) rounded to TF32 (10 explicit mantissa bits), to nearest with ties away from
/// zero as PTX's `cvt.rna.tf32.f32`; infinities and NaN unchanged.
fn to_tf32(b: &mut Builder, x: Value) -> Res<Value> {
    let t = b.ty(x).with_dtype(DType::U32);
    let bits = b.bitcast(x, DType::U32)?;
    let half = b.constant(crate::ir::Const::Int(0x1000), t.clone());
    let keep = b.constant(crate::ir::Const::Int(0xFFFF_E000), t.clone());
    let exp = b.constant(crate::ir::Const::Int(0x7F80_0000), t);
    let up = b.add(Opnd::Val(bits), Opnd::Val(half))?;
    let r = b.bitwise(BinaryOp::And, Opnd::Val(up), Opnd::Val(keep))?;
    let r = b.bitcast(r, DType::F32)?;
    let e = b.bitwise(BinaryOp::And, Opnd::Val(bits), Opnd::Val(exp))?;
    let finite = b.compare(CmpPred::Ne, Opnd::Val(e), Opnd::Val(exp))?;
    b.where_(Opnd::Val(finite), Opnd::Val(r), Opnd::Val(x))
}

/// `x - high` rounded to TF32: the low part of the split `tf32x3` multiplies (0 where it is
/// not finite, so an infinity or NaN stays in the high part alone).
fn tf32_low(b: &mut Builder, x: Value, high: Value) -> Res<Value> {
    let d = b.sub(Opnd::Val(x), Opnd::Val(high))?;
    let low = to_tf32(b, d)?;
    let zero = b.constant(crate::ir::Const::Float(0.0), b.ty(low).clone());
    let same = b.sub(Opnd::Val(low), Opnd::Val(low))?;
    let finite = b.compare(CmpPred::Eq, Opnd::Val(same), Opnd::Val(zero))?;
    b.where_(Opnd::Val(finite), Opnd::Val(low), Opnd::Val(zero))
}

/// `dot(a, b, acc, out_dtype=, input_precision=)`: Triton's `input_precision` on fp32
/// operands, the same on every target: `"ieee"` multiplies the fp32 values (what
/// [`dot`](super::dot) does); `"tf32"` rounds both operands to TF32 first (`cvt.rna`), as
/// the NVIDIA tensor cores' TF32 input does (products of TF32 values are exact in fp32;
/// sums stay fp32); `"tf32x3"` splits each operand into a TF32 high and low part and sums
/// the three products `low*high + high*low + high*high`, Triton's algorithm, close to
/// fp32 accuracy. Other operand dtypes ignore it, as in Triton.
#[track_caller]
pub fn dot_with(
    a: Tensor,
    b: Tensor,
    acc: impl Into<Option<Tensor>>,
    out_dtype: Option<DType>,
    input_precision: &str,
) -> Tensor {
    let (loc, acc) = (SourceLoc::caller(), acc.into());
    op("dot", loc, |bd| {
        let prec = match input_precision.to_ascii_lowercase().as_str() {
            "ieee" => Precision::Ieee,
            "tf32" => Precision::Tf32,
            "tf32x3" => Precision::Tf32x3,
            other => {
                return Err(format!(
                    "input_precision must be one of \"tf32\", \"tf32x3\", \"ieee\"; got \"{other}\""
                ))
            }
        };
        let (x, y) = (bd.value(a)?, bd.value(b)?);
        let c = acc.map(|c| bd.value(c)).transpose()?;
        let f32s = bd.ty(x).dtype == DType::F32 && bd.ty(y).dtype == DType::F32;
        if prec == Precision::Ieee || !f32s {
            return bd.dot(x, y, c, out_dtype);
        }
        let (xh, yh) = (to_tf32(bd, x)?, to_tf32(bd, y)?);
        if prec == Precision::Tf32 {
            return bd.dot(xh, yh, c, out_dtype);
        }
        let (xl, yl) = (tf32_low(bd, x, xh)?, tf32_low(bd, y, yh)?);
        let c = bd.dot(xl, yh, c, out_dtype)?;
        let c = bd.dot(xh, yl, Some(c), out_dtype)?;
        bd.dot(xh, yh, Some(c), out_dtype)
    })
}
