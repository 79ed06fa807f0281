//! Elementwise ops over whole blocks: one tight loop per op and storage class.
//!
//! Operands of one op have equal lengths in verified kernels. Inside custom combine
//! regions (run over many lanes at once, see `reduce.rs`) a scalar constant meets a
//! many-lane value, so a one-element operand broadcasts.

use super::data::{
    canon_i32, f64_to_f32_class, multiversion, normalize_i32, ptr_add, round_f32, widen_i32, Class,
    Data,
};
use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpPred, UnaryOp};

type Res = std::result::Result<(), String>;

fn len_err(a: usize, b: usize) -> String {
    format!("operand lengths differ: {a} vs {b}")
}

/// `out = (0..n).map(f)` as one indexed loop. `Vec::extend` reaches its loop through
/// generic helpers that are not always inlined into the AVX2 copies of the callers
/// (`multiversion!`), which left the hottest loops (softmax's `exp`) in SSE; this loop is
/// always compiled with the caller's target features.
#[inline(always)]
pub(crate) fn fill_with<O>(out: &mut Vec<O>, n: usize, f: impl Fn(usize) -> O) {
    out.clear();
    out.reserve(n);
    for (i, s) in out.spare_capacity_mut()[..n].iter_mut().enumerate() {
        s.write(f(i));
    }
    // SAFETY: the loop above initialised the first `n` elements (`f` cannot skip one; if it
    // panics, the length stays 0).
    unsafe { out.set_len(n) }
}

/// `out[i] = f(a[i])`.
#[inline(always)]
pub(crate) fn map_into<A: Copy, O>(a: &[A], out: &mut Vec<O>, f: impl Fn(A) -> O) {
    fill_with(out, a.len(), |i| f(a[i]));
}

/// `out[i] = f(a[i], b[i])`, broadcasting a one-element operand.
#[inline(always)]
pub(crate) fn zip2<A: Copy, B: Copy, O>(
    a: &[A],
    b: &[B],
    out: &mut Vec<O>,
    f: impl Fn(A, B) -> O,
) -> Res {
    if a.len() == b.len() {
        let b = &b[..a.len()];
        fill_with(out, a.len(), |i| f(a[i], b[i]));
    } else if a.len() == 1 {
        let x = a[0];
        map_into(b, out, |y| f(x, y));
    } else if b.len() == 1 {
        let y = b[0];
        map_into(a, out, |x| f(x, y));
    } else {
        out.clear();
        return Err(len_err(a.len(), b.len()));
    }
    Ok(())
}

/// `out[i] = f(a[i], b[i], c[i])`, broadcasting one-element operands.
#[inline(always)]
pub(crate) fn zip3<A: Copy, B: Copy, C: Copy, O>(
    a: &[A],
    b: &[B],
    c: &[C],
    out: &mut Vec<O>,
    f: impl Fn(A, B, C) -> O,
) -> Res {
    if a.len() == b.len() && b.len() == c.len() {
        let (b, c) = (&b[..a.len()], &c[..a.len()]);
        fill_with(out, a.len(), |i| f(a[i], b[i], c[i]));
        return Ok(());
    }
    out.clear();
    let n = a.len().max(b.len()).max(c.len());
    for s in [a.len(), b.len(), c.len()] {
        if s != n && s != 1 {
            return Err(len_err(s, n));
        }
    }
    let at = |s: usize, i: usize| if s == 1 { 0 } else { i };
    out.extend((0..n).map(|i| f(a[at(a.len(), i)], b[at(b.len(), i)], c[at(c.len(), i)])));
    Ok(())
}

fn kind_err(what: &str, d: DType) -> String {
    format!("{what} is not defined on {d}")
}

/// Single-precision `exp` with no libm call so the loop vectorises: Cody-Waite range
/// reduction to `[-ln2/2, ln2/2]`, a degree-6 polynomial, and exponent assembly; within
/// 2 ulp of the correctly rounded result (Triton's GPU `exp` is an approximation too).
#[inline(always)]
pub(crate) fn fast_exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer with plain float
    // arithmetic (`round()` would be a libm call that stops the loop vectorising).
    const SHIFT: f32 = 12_582_912.0;
    // Not `clamp`: a NaN must become a finite number here (it is restored at the end).
    #[allow(clippy::manual_clamp)]
    let xc = x.max(-104.0).min(88.8);
    let t = xc * LOG2E + SHIFT;
    let n = t - SHIFT;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_452 + r * 0.001_388_949_3)))));
    // 2^n split in two factors so that n down to -150 (denormal results) stays exact.
    // The integer n sits in the low mantissa bits of t (|n| < 2^22); reading it from the
    // bits avoids Rust's saturating float-to-int cast, which does not vectorise.
    let n = (t.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let h = n >> 1;
    let s1 = f32::from_bits(((h + 127) as u32) << 23);
    let s2 = f32::from_bits(((n - h + 127) as u32) << 23);
    let y = p * s1 * s2;
    let y = if x > 88.8 { f32::INFINITY } else { y };
    let y = if x < -104.0 { 0.0 } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

macro_rules! float_unary {
    ($name:ident, $t:ty, $erf:path, $exp:expr) => {
        #[inline(always)]
        fn $name(kind: UnaryOp, a: &[$t], o: &mut Vec<$t>) {
            match kind {
                UnaryOp::Exp => map_into(a, o, $exp),
                UnaryOp::Exp2 => map_into(a, o, <$t>::exp2),
                UnaryOp::Log => map_into(a, o, <$t>::ln),
                UnaryOp::Log2 => map_into(a, o, <$t>::log2),
                UnaryOp::Sqrt => map_into(a, o, <$t>::sqrt),
                UnaryOp::Rsqrt => map_into(a, o, |x| 1.0 / x.sqrt()),
                UnaryOp::Sin => map_into(a, o, <$t>::sin),
                UnaryOp::Cos => map_into(a, o, <$t>::cos),
                UnaryOp::Erf => map_into(a, o, $erf),
                UnaryOp::Floor => map_into(a, o, <$t>::floor),
                UnaryOp::Ceil => map_into(a, o, <$t>::ceil),
                UnaryOp::Abs => map_into(a, o, <$t>::abs),
                k => {
                    let f = super::libdevice::unary_fn(k);
                    map_into(a, o, |x| f(x as f64) as $t)
                }
            }
        }
    };
}
float_unary!(unary_f32, f32, erf_f32, fast_exp);
float_unary!(unary_f64, f64, libm::erf, f64::exp);

fn erf_f32(x: f32) -> f32 {
    libm::erf(x as f64) as f32
}

/// Elementwise unary math (floats computed in at least f32, then rounded to `d`).
#[inline(always)]
fn unary_impl(kind: UnaryOp, d: DType, a: &Data, out: &mut Data) -> Res {
    match a {
        Data::F32(a) => {
            let o = out.f32s();
            unary_f32(kind, a, o);
            round_f32(o, d);
        }
        Data::F64(a) => unary_f64(kind, a, out.f64s()),
        Data::I32(a) if kind == UnaryOp::Abs => {
            let o = out.i32s();
            if d.is_unsigned_int() {
                o.extend_from_slice(a);
            } else {
                map_into(a, o, |x| x.wrapping_abs());
                normalize_i32(o, d);
            }
        }
        Data::I64(a) if kind == UnaryOp::Abs => {
            let o = out.i64s();
            if d.is_unsigned_int() {
                o.extend_from_slice(a);
            } else {
                map_into(a, o, |x| x.wrapping_abs());
            }
        }
        Data::Bool(a) if kind == UnaryOp::Abs => out.bools().extend_from_slice(a),
        _ => return Err(kind_err(kind.name(), d)),
    }
    Ok(())
}

macro_rules! float_max_min {
    ($max:ident, $min:ident, $t:ty) => {
        /// Triton's `maximum` (and `max` reductions) of floats: a NaN operand is ignored (the
        /// result is NaN only when both are) and +0 is greater than -0, whatever the order.
        #[inline(always)]
        pub(crate) fn $max(a: $t, b: $t) -> $t {
            if b.is_nan() || a > b || (a == b && !a.is_sign_negative()) {
                a
            } else {
                b
            }
        }

        /// Triton's `minimum` of floats: NaN ignored, -0 less than +0.
        #[inline(always)]
        pub(crate) fn $min(a: $t, b: $t) -> $t {
            if b.is_nan() || a < b || (a == b && a.is_sign_negative()) {
                a
            } else {
                b
            }
        }
    };
}
float_max_min!(max_f32, min_f32, f32);
float_max_min!(max_f64, min_f64, f64);

macro_rules! float_binary {
    ($name:ident, $t:ty, $max:ident, $min:ident) => {
        #[inline(always)]
        fn $name(kind: BinaryOp, d: DType, a: &[$t], b: &[$t], o: &mut Vec<$t>) -> Res {
            match kind {
                BinaryOp::Add => zip2(a, b, o, |x, y| x + y),
                BinaryOp::Sub => zip2(a, b, o, |x, y| x - y),
                BinaryOp::Mul => zip2(a, b, o, |x, y| x * y),
                BinaryOp::Div => zip2(a, b, o, |x, y| x / y),
                // Rust's float `%` is C's fmod.
                BinaryOp::Rem => zip2(a, b, o, |x, y| x % y),
                BinaryOp::Max => zip2(a, b, o, $max),
                BinaryOp::Min => zip2(a, b, o, $min),
                // A NaN result is the canonical NaN (every payload bit set), as PTX's
                // `max.NaN` and the generated code give.
                BinaryOp::MaxNan => zip2(a, b, o, |x, y| {
                    if x.is_nan() || y.is_nan() {
                        <$t>::from_bits(!0 >> 1)
                    } else {
                        $max(x, y)
                    }
                }),
                BinaryOp::MinNan => zip2(a, b, o, |x, y| {
                    if x.is_nan() || y.is_nan() {
                        <$t>::from_bits(!0 >> 1)
                    } else {
                        $min(x, y)
                    }
                }),
                k => match super::libdevice::binary_fn(k) {
                    Some(f) => zip2(a, b, o, |x, y| f(x as f64, y as f64) as $t),
                    None => Err(kind_err(kind.name(), d)),
                },
            }
        }
    };
}
float_binary!(binary_f32, f32, max_f32, min_f32);
float_binary!(binary_f64, f64, max_f64, min_f64);

/// Integer binary ops in the `I32` class (values canonical for `d`, see `data.rs`).
#[inline(always)]
fn binary_i32(kind: BinaryOp, d: DType, a: &[i32], b: &[i32], o: &mut Vec<i32>) -> Res {
    let unsigned = d == DType::U32;
    let bits = d.bits();
    match kind {
        BinaryOp::Add => zip2(a, b, o, i32::wrapping_add),
        BinaryOp::Sub => zip2(a, b, o, i32::wrapping_sub),
        BinaryOp::Mul => zip2(a, b, o, i32::wrapping_mul),
        // Division by zero is undefined in Triton; give all ones (as GPUs do) rather than trap.
        BinaryOp::Div if unsigned => zip2(a, b, o, |x, y| {
            (x as u32).checked_div(y as u32).unwrap_or(u32::MAX) as i32
        }),
        BinaryOp::Div => zip2(a, b, o, |x, y| if y == 0 { -1 } else { x.wrapping_div(y) }),
        BinaryOp::Rem if unsigned => zip2(a, b, o, |x, y| {
            (x as u32).checked_rem(y as u32).unwrap_or(x as u32) as i32
        }),
        BinaryOp::Rem => zip2(a, b, o, |x, y| if y == 0 { x } else { x.wrapping_rem(y) }),
        BinaryOp::And => zip2(a, b, o, |x, y| x & y),
        BinaryOp::Or => zip2(a, b, o, |x, y| x | y),
        BinaryOp::Xor => zip2(a, b, o, |x, y| x ^ y),
        // Shifts by the width or more are undefined in Triton; give 0 (sign fill for `>>`).
        BinaryOp::Shl => zip2(a, b, o, |x, y| if (y as u32) < bits { x << y } else { 0 }),
        BinaryOp::Shr if unsigned => zip2(a, b, o, |x, y| {
            (x as u32).checked_shr(y as u32).unwrap_or(0) as i32
        }),
        BinaryOp::Shr if d.is_unsigned_int() => {
            zip2(a, b, o, |x, y| if (y as u32) < 32 { x >> y } else { 0 })
        }
        BinaryOp::Shr => zip2(a, b, o, |x, y| x >> (y as u32).min(31)),
        BinaryOp::Max | BinaryOp::MaxNan if unsigned => {
            zip2(a, b, o, |x, y| (x as u32).max(y as u32) as i32)
        }
        BinaryOp::Min | BinaryOp::MinNan if unsigned => {
            zip2(a, b, o, |x, y| (x as u32).min(y as u32) as i32)
        }
        BinaryOp::Max | BinaryOp::MaxNan => zip2(a, b, o, i32::max),
        BinaryOp::Min | BinaryOp::MinNan => zip2(a, b, o, i32::min),
        // Triton's `umulhi` is the unsigned high half whatever the signedness.
        BinaryOp::MulHi => zip2(a, b, o, |x, y| {
            ((x as u32 as u64 * y as u32 as u64) >> 32) as i32
        }),
        BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot => Err(kind_err(kind.name(), d)),
    }
}

#[inline(always)]
fn binary_i64(kind: BinaryOp, d: DType, a: &[i64], b: &[i64], o: &mut Vec<i64>) -> Res {
    let unsigned = d == DType::U64;
    match kind {
        BinaryOp::Add => zip2(a, b, o, i64::wrapping_add),
        BinaryOp::Sub => zip2(a, b, o, i64::wrapping_sub),
        BinaryOp::Mul => zip2(a, b, o, i64::wrapping_mul),
        BinaryOp::Div if unsigned => zip2(a, b, o, |x, y| {
            (x as u64).checked_div(y as u64).unwrap_or(u64::MAX) as i64
        }),
        BinaryOp::Div => zip2(a, b, o, |x, y| if y == 0 { -1 } else { x.wrapping_div(y) }),
        BinaryOp::Rem if unsigned => zip2(a, b, o, |x, y| {
            (x as u64).checked_rem(y as u64).unwrap_or(x as u64) as i64
        }),
        BinaryOp::Rem => zip2(a, b, o, |x, y| if y == 0 { x } else { x.wrapping_rem(y) }),
        BinaryOp::And => zip2(a, b, o, |x, y| x & y),
        BinaryOp::Or => zip2(a, b, o, |x, y| x | y),
        BinaryOp::Xor => zip2(a, b, o, |x, y| x ^ y),
        BinaryOp::Shl => zip2(a, b, o, |x, y| x.checked_shl(y as u32).unwrap_or(0)),
        BinaryOp::Shr if unsigned => zip2(a, b, o, |x, y| {
            (x as u64).checked_shr(y as u32).unwrap_or(0) as i64
        }),
        BinaryOp::Shr => zip2(a, b, o, |x, y| x >> (y as u64).min(63)),
        BinaryOp::Max | BinaryOp::MaxNan if unsigned => {
            zip2(a, b, o, |x, y| (x as u64).max(y as u64) as i64)
        }
        BinaryOp::Min | BinaryOp::MinNan if unsigned => {
            zip2(a, b, o, |x, y| (x as u64).min(y as u64) as i64)
        }
        BinaryOp::Max | BinaryOp::MaxNan => zip2(a, b, o, i64::max),
        BinaryOp::Min | BinaryOp::MinNan => zip2(a, b, o, i64::min),
        BinaryOp::MulHi => zip2(a, b, o, |x, y| {
            ((x as u64 as u128 * y as u64 as u128) >> 64) as i64
        }),
        BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot => Err(kind_err(kind.name(), d)),
    }
}

/// `int1` arithmetic modulo 2 (Triton's `i1` is one bit wide).
#[inline(always)]
fn binary_bool(kind: BinaryOp, d: DType, a: &[bool], b: &[bool], o: &mut Vec<bool>) -> Res {
    match kind {
        BinaryOp::And | BinaryOp::Min | BinaryOp::Mul | BinaryOp::MinNan => {
            zip2(a, b, o, |x, y| x & y)
        }
        BinaryOp::Or | BinaryOp::Max | BinaryOp::MaxNan => zip2(a, b, o, |x, y| x | y),
        BinaryOp::Xor | BinaryOp::Add | BinaryOp::Sub => zip2(a, b, o, |x, y| x ^ y),
        // x / 0 is all ones; x / 1 = x.
        BinaryOp::Div => zip2(a, b, o, |x, y| x | !y),
        BinaryOp::Rem => zip2(a, b, o, |x, y| x & !y),
        BinaryOp::Shl | BinaryOp::Shr => zip2(a, b, o, |x, y| x & !y),
        BinaryOp::MulHi | BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot => {
            Err(kind_err(kind.name(), d))
        }
    }
}

/// Elementwise binary op of dtype `d`.
#[inline(always)]
fn binary_impl(kind: BinaryOp, d: DType, a: &Data, b: &Data, out: &mut Data) -> Res {
    match (a, b) {
        (Data::F32(a), Data::F32(b)) => binary_f32_slices_impl(kind, d, a, b, out),
        (Data::F64(a), Data::F64(b)) => binary_f64(kind, d, a, b, out.f64s()),
        (Data::I32(a), Data::I32(b)) => {
            let o = out.i32s();
            binary_i32(kind, d, a, b, o)?;
            normalize_i32(o, d);
            Ok(())
        }
        (Data::I64(a), Data::I64(b)) => binary_i64(kind, d, a, b, out.i64s()),
        (Data::Bool(a), Data::Bool(b)) => binary_bool(kind, d, a, b, out.bools()),
        _ => Err(kind_err(kind.name(), d)),
    }
}

#[inline(always)]
fn cmp_with<T: Copy + PartialOrd>(p: CmpPred, a: &[T], b: &[T], o: &mut Vec<bool>) -> Res {
    match p {
        CmpPred::Lt => zip2(a, b, o, |x, y| x < y),
        CmpPred::Le => zip2(a, b, o, |x, y| x <= y),
        CmpPred::Gt => zip2(a, b, o, |x, y| x > y),
        CmpPred::Ge => zip2(a, b, o, |x, y| x >= y),
        CmpPred::Eq => zip2(a, b, o, |x, y| x == y),
        // `!=` on floats is unordered (true with NaN), as `PartialOrd` gives.
        CmpPred::Ne => zip2(a, b, o, |x, y| x != y),
    }
}

#[inline(always)]
fn cmp_mapped<T: Copy, U: Copy + PartialOrd>(
    p: CmpPred,
    a: &[T],
    b: &[T],
    o: &mut Vec<bool>,
    f: impl Fn(T) -> U + Copy,
) -> Res {
    match p {
        CmpPred::Lt => zip2(a, b, o, |x, y| f(x) < f(y)),
        CmpPred::Le => zip2(a, b, o, |x, y| f(x) <= f(y)),
        CmpPred::Gt => zip2(a, b, o, |x, y| f(x) > f(y)),
        CmpPred::Ge => zip2(a, b, o, |x, y| f(x) >= f(y)),
        CmpPred::Eq => zip2(a, b, o, |x, y| f(x) == f(y)),
        CmpPred::Ne => zip2(a, b, o, |x, y| f(x) != f(y)),
    }
}

/// Comparison giving `bool` (signed or unsigned by dtype; floats ordered except `!=`).
#[inline(always)]
fn cmp_impl(p: CmpPred, d: DType, a: &Data, b: &Data, out: &mut Data) -> Res {
    let o = out.bools();
    match (a, b) {
        (Data::F32(a), Data::F32(b)) => cmp_with(p, a, b, o),
        (Data::F64(a), Data::F64(b)) => cmp_with(p, a, b, o),
        (Data::I32(a), Data::I32(b)) if d == DType::U32 => cmp_mapped(p, a, b, o, |x| x as u32),
        (Data::I32(a), Data::I32(b)) => cmp_with(p, a, b, o),
        (Data::I64(a), Data::I64(b)) if d == DType::U64 => cmp_mapped(p, a, b, o, |x| x as u64),
        (Data::I64(a), Data::I64(b)) => cmp_with(p, a, b, o),
        (Data::Bool(a), Data::Bool(b)) => cmp_with(p, a, b, o),
        (Data::Ptr(a), Data::Ptr(b)) => cmp_with(p, a, b, o),
        _ => Err(kind_err(p.name(), d)),
    }
}

/// `where(cond, a, b)`.
#[inline(always)]
fn select_impl(cond: &Data, a: &Data, b: &Data, out: &mut Data) -> Res {
    let Data::Bool(c) = cond else {
        return Err("select condition is not bool".into());
    };
    macro_rules! sel {
        ($a:expr, $b:expr, $o:expr) => {
            zip3(c, $a, $b, $o, |c, x, y| if c { x } else { y })
        };
    }
    match (a, b) {
        (Data::Bool(a), Data::Bool(b)) => sel!(a, b, out.bools()),
        (Data::I32(a), Data::I32(b)) => sel!(a, b, out.i32s()),
        (Data::I64(a), Data::I64(b)) => sel!(a, b, out.i64s()),
        (Data::F32(a), Data::F32(b)) => sel!(a, b, out.f32s()),
        (Data::F64(a), Data::F64(b)) => sel!(a, b, out.f64s()),
        (Data::Ptr(a), Data::Ptr(b)) => sel!(a, b, out.ptrs()),
        _ => Err("select branches have different types".into()),
    }
}

/// Fused `a * b + c` (one rounding in f32/f64, then to `d`).
#[inline(always)]
fn fma_impl(d: DType, a: &Data, b: &Data, c: &Data, out: &mut Data) -> Res {
    match (a, b, c) {
        (Data::F32(a), Data::F32(b), Data::F32(c)) => {
            let o = out.f32s();
            zip3(a, b, c, o, f32::mul_add)?;
            round_f32(o, d);
            Ok(())
        }
        (Data::F64(a), Data::F64(b), Data::F64(c)) => zip3(a, b, c, out.f64s(), f64::mul_add),
        _ => Err(kind_err("fma", d)),
    }
}

/// `min(max(x, lo), hi)`; NaN in `x` propagates only with `propagate_nan`.
#[inline(always)]
fn clamp_impl(d: DType, nan: bool, x: &Data, lo: &Data, hi: &Data, out: &mut Data) -> Res {
    macro_rules! cl {
        ($x:expr, $lo:expr, $hi:expr, $o:expr) => {
            zip3($x, $lo, $hi, $o, |x, l, h| {
                if nan && x.is_nan() {
                    x
                } else {
                    x.max(l).min(h)
                }
            })
        };
    }
    match (x, lo, hi) {
        (Data::F32(x), Data::F32(l), Data::F32(h)) => cl!(x, l, h, out.f32s()),
        (Data::F64(x), Data::F64(l), Data::F64(h)) => cl!(x, l, h, out.f64s()),
        _ => Err(kind_err("clamp", d)),
    }
}

/// An `I32`/`I64`-class integer of dtype `s` as an exact `i128`.
#[inline(always)]
fn int_value_i32(x: i32, s: DType) -> i64 {
    widen_i32(x, s)
}

/// Value conversion from dtype `s` to dtype `d` (see [`crate::ir::Op::Cast`]).
pub(crate) fn cast(s: DType, d: DType, a: &Data, out: &mut Data) -> Res {
    let dst = super::data::class_of(&crate::ir::Type::scalar(d));
    match (a, dst) {
        // Same class: float re-rounding or integer re-canonicalisation.
        (Data::F32(a), Class::F32) => {
            let o = out.f32s();
            o.extend_from_slice(a);
            round_f32(o, d);
        }
        (Data::F32(a), Class::F64) => map_into(a, out.f64s(), |x| x as f64),
        (Data::F64(a), Class::F32) => map_into(a, out.f32s(), |x| f64_to_f32_class(x, d)),
        (Data::F64(a), Class::F64) => out.f64s().extend_from_slice(a),
        (Data::F32(a), Class::I32) => {
            let o = out.i32s();
            float_to_i32(a.iter().map(|&x| x as f64), d, o);
        }
        (Data::F64(a), Class::I32) => float_to_i32(a.iter().copied(), d, out.i32s()),
        (Data::F32(a), Class::I64) => float_to_i64(a.iter().map(|&x| x as f64), d, out.i64s()),
        (Data::F64(a), Class::I64) => float_to_i64(a.iter().copied(), d, out.i64s()),
        (Data::I32(a), Class::I32) => {
            let o = out.i32s();
            map_into(a, o, |x| canon_i32(x, d));
        }
        (Data::I32(a), Class::I64) => map_into(a, out.i64s(), |x| int_value_i32(x, s)),
        (Data::I64(a), Class::I32) => map_into(a, out.i32s(), |x| canon_i32(x as i32, d)),
        (Data::I64(a), Class::I64) => out.i64s().extend_from_slice(a),
        (Data::I32(a), Class::F32) => {
            let o = out.f32s();
            if d == DType::F32 {
                map_into(a, o, |x| int_value_i32(x, s) as f32);
            } else {
                // An i32 is exact in f64, so this is one rounding to the narrow type.
                o.extend(
                    a.iter()
                        .map(|&x| f64_to_f32_class(int_value_i32(x, s) as f64, d)),
                );
            }
        }
        (Data::I32(a), Class::F64) => out
            .f64s()
            .extend(a.iter().map(|&x| int_value_i32(x, s) as f64)),
        (Data::I64(a), Class::F32) => {
            let o = out.f32s();
            if s == DType::U64 {
                map_into(a, o, |x| x as u64 as f32);
            } else {
                map_into(a, o, |x| x as f32);
            }
            round_f32(o, d);
        }
        (Data::I64(a), Class::F64) => {
            let o = out.f64s();
            if s == DType::U64 {
                map_into(a, o, |x| x as u64 as f64);
            } else {
                map_into(a, o, |x| x as f64);
            }
        }
        (Data::Bool(a), Class::Bool) => out.bools().extend_from_slice(a),
        (Data::Bool(a), Class::I32) => map_into(a, out.i32s(), |x| x as i32),
        (Data::Bool(a), Class::I64) => map_into(a, out.i64s(), |x| x as i64),
        (Data::Bool(a), Class::F32) => map_into(a, out.f32s(), |x| x as u8 as f32),
        (Data::Bool(a), Class::F64) => map_into(a, out.f64s(), |x| x as u8 as f64),
        (Data::I32(a), Class::Bool) => map_into(a, out.bools(), |x| x != 0),
        (Data::I64(a), Class::Bool) => map_into(a, out.bools(), |x| x != 0),
        (Data::F32(a), Class::Bool) => map_into(a, out.bools(), |x| x != 0.0),
        (Data::F64(a), Class::Bool) => map_into(a, out.bools(), |x| x != 0.0),
        _ => return Err(format!("cannot cast {s} to {d}")),
    }
    Ok(())
}

/// Float to a narrow integer as Triton computes it on NVIDIA GPUs (PTX `cvt.rzi`):
/// truncate toward zero and saturate at the range of a 16-, 32- or 64-bit integer, NaN
/// giving 0. An 8-bit result is the low byte of the saturated 16-bit one (`300.5` to `i8` is
/// 44, `inf` is -1), as Triton converts through a 16-bit register.
fn float_to_i32(a: impl Iterator<Item = f64>, d: DType, o: &mut Vec<i32>) {
    // Rust's float-to-int `as` truncates, saturates and maps NaN to 0.
    match d {
        DType::I8 => o.extend(a.map(|x| x as i16 as i8 as i32)),
        DType::U8 => o.extend(a.map(|x| x as u16 as u8 as i32)),
        DType::I16 => o.extend(a.map(|x| x as i16 as i32)),
        DType::U16 => o.extend(a.map(|x| x as u16 as i32)),
        DType::U32 => o.extend(a.map(|x| x as u32 as i32)),
        _ => o.extend(a.map(|x| x as i32)),
    }
}

/// Float to a 64-bit integer: truncate and saturate like [`float_to_i32`], except that NaN
/// gives the bit pattern `0x8000_0000_0000_0000` (for `u64` too), PTX's answer.
fn float_to_i64(a: impl Iterator<Item = f64>, d: DType, o: &mut Vec<i64>) {
    if d == DType::U64 {
        o.extend(a.map(|x| {
            if x.is_nan() {
                i64::MIN
            } else {
                x as u64 as i64
            }
        }));
    } else {
        o.extend(a.map(|x| if x.is_nan() { i64::MIN } else { x as i64 }));
    }
}

/// The raw bits of each element of dtype `d` (zero-extended).
pub(crate) fn to_bits(d: DType, a: &Data, o: &mut Vec<u64>) {
    o.clear();
    match a {
        Data::Bool(v) => o.extend(v.iter().map(|&x| x as u64)),
        Data::I32(v) => {
            let mask = if d.bits() >= 32 {
                u32::MAX
            } else {
                (1u32 << d.bits()) - 1
            };
            o.extend(v.iter().map(|&x| (x as u32 & mask) as u64))
        }
        Data::I64(v) => o.extend(v.iter().map(|&x| x as u64)),
        Data::F32(v) => match d {
            DType::F16 => o.extend(v.iter().map(|&x| crate::dtype::f32_to_f16_bits(x) as u64)),
            DType::BF16 => o.extend(v.iter().map(|&x| crate::dtype::f32_to_bf16_bits(x) as u64)),
            _ => o.extend(v.iter().map(|&x| x.to_bits() as u64)),
        },
        Data::F64(v) => o.extend(v.iter().map(|&x| x.to_bits())),
        Data::Ptr(v) => o.extend_from_slice(v),
    }
}

/// Elements of dtype `d` from raw bits (inverse of [`to_bits`]).
pub(crate) fn from_bits(d: DType, bits: &[u64], out: &mut Data) {
    let it = bits.iter().copied();
    match super::data::class_of(&crate::ir::Type::scalar(d)) {
        Class::Bool => out.bools().extend(it.map(|b| b & 1 != 0)),
        Class::I32 => out.i32s().extend(it.map(|b| canon_i32(b as u32 as i32, d))),
        Class::I64 => out.i64s().extend(it.map(|b| b as i64)),
        Class::F32 => match d {
            DType::F16 => out
                .f32s()
                .extend(it.map(|b| crate::dtype::f16_bits_to_f32(b as u16))),
            DType::BF16 => out
                .f32s()
                .extend(it.map(|b| crate::dtype::bf16_bits_to_f32(b as u16))),
            _ => out.f32s().extend(it.map(|b| f32::from_bits(b as u32))),
        },
        Class::F64 => out.f64s().extend(it.map(f64::from_bits)),
        Class::Ptr => out.ptrs().extend(it),
    }
}

/// Reinterprets bits: `s` and `d` have the same width.
pub(crate) fn bitcast(s: DType, d: DType, a: &Data, out: &mut Data) -> Res {
    match (a, d) {
        // Same-class fast paths that need no conversion at all.
        (Data::F32(a), DType::F32) if s == DType::F32 => out.f32s().extend_from_slice(a),
        (Data::I32(a), DType::I32 | DType::U32) if s.bits() == 32 => {
            out.i32s().extend_from_slice(a)
        }
        (Data::F32(a), DType::I32 | DType::U32) if s == DType::F32 => {
            out.i32s().extend(a.iter().map(|x| x.to_bits() as i32))
        }
        (Data::I32(a), DType::F32) if s.bits() == 32 => out
            .f32s()
            .extend(a.iter().map(|&x| f32::from_bits(x as u32))),
        _ => {
            let mut bits = Vec::with_capacity(a.len());
            to_bits(s, a, &mut bits);
            from_bits(d, &bits, out);
        }
    }
    Ok(())
}

/// `ptr + offset` in elements (offset signed or unsigned by its dtype `od`).
#[inline(always)]
fn add_ptr_impl(od: DType, p: &Data, off: &Data, out: &mut Data) -> Res {
    let Data::Ptr(p) = p else {
        return Err("addptr base is not a pointer".into());
    };
    let o = out.ptrs();
    match off {
        Data::I32(v) if od == DType::U32 => zip2(p, v, o, |p, x| ptr_add(p, x as u32 as i64)),
        Data::I32(v) => zip2(p, v, o, |p, x| ptr_add(p, x as i64)),
        Data::I64(v) => zip2(p, v, o, ptr_add),
        _ => Err("addptr offset is not an integer".into()),
    }
}

/// Philox-4x32 rounds, as `triton.language.random.philox_impl`.
pub(crate) fn philox(rounds: u32, c: [&Data; 4], k: [&Data; 2], outs: &mut [Data; 4]) -> Res {
    const KEY_A: u32 = 0x9E37_79B9;
    const KEY_B: u32 = 0xBB67_AE85;
    const ROUND_A: u32 = 0xD251_1F53;
    const ROUND_B: u32 = 0xCD9E_8D57;
    fn get(d: &Data) -> std::result::Result<&[i32], String> {
        match d {
            Data::I32(v) => Ok(v.as_slice()),
            _ => Err("philox operands must be u32".to_string()),
        }
    }
    let (c0, c1, c2, c3) = (get(c[0])?, get(c[1])?, get(c[2])?, get(c[3])?);
    let (k0, k1) = (get(k[0])?, get(k[1])?);
    let n = [c0, c1, c2, c3, k0, k1]
        .iter()
        .map(|s| s.len())
        .max()
        .unwrap_or(0);
    let at = |s: &[i32], i: usize| if s.len() == 1 { s[0] } else { s[i] } as u32;
    for s in [c0, c1, c2, c3, k0, k1] {
        if s.len() != n && s.len() != 1 {
            return Err(len_err(s.len(), n));
        }
    }
    let [o0, o1, o2, o3] = outs;
    let (o0, o1, o2, o3) = (o0.i32s(), o1.i32s(), o2.i32s(), o3.i32s());
    for i in 0..n {
        let (mut x0, mut x1, mut x2, mut x3) = (at(c0, i), at(c1, i), at(c2, i), at(c3, i));
        let (mut y0, mut y1) = (at(k0, i), at(k1, i));
        for _ in 0..rounds {
            let (p0, p2) = (x0, x2);
            x0 = ((ROUND_B as u64 * p2 as u64) >> 32) as u32 ^ x1 ^ y0;
            x2 = ((ROUND_A as u64 * p0 as u64) >> 32) as u32 ^ x3 ^ y1;
            x1 = ROUND_B.wrapping_mul(p2);
            x3 = ROUND_A.wrapping_mul(p0);
            y0 = y0.wrapping_add(KEY_A);
            y1 = y1.wrapping_add(KEY_B);
        }
        o0.push(x0 as i32);
        o1.push(x1 as i32);
        o2.push(x2 as i32);
        o3.push(x3 as i32);
    }
    Ok(())
}

multiversion! {
    /// Elementwise unary math (floats computed in at least f32, then rounded to `d`).
    fn unary(kind: UnaryOp, d: DType, a: &Data, out: &mut Data) -> Res = unary_impl;
}

/// [`binary`] on `f32`-class operands given as slices (one may be a view of an input
/// buffer, see the interpreter's deferred loads).
#[inline(always)]
fn binary_f32_slices_impl(kind: BinaryOp, d: DType, a: &[f32], b: &[f32], out: &mut Data) -> Res {
    let o = out.f32s();
    binary_f32(kind, d, a, b, o)?;
    round_f32(o, d);
    Ok(())
}

multiversion! {
    /// [`binary`] on `f32`-class operands given as slices.
    fn binary_f32_slices(kind: BinaryOp, d: DType, a: &[f32], b: &[f32], out: &mut Data) -> Res = binary_f32_slices_impl;
}

multiversion! {
    /// Elementwise binary op of dtype `d`.
    fn binary(kind: BinaryOp, d: DType, a: &Data, b: &Data, out: &mut Data) -> Res = binary_impl;
}

multiversion! {
    /// Comparison giving `bool` (signed or unsigned by dtype; floats ordered except `!=`).
    fn cmp(p: CmpPred, d: DType, a: &Data, b: &Data, out: &mut Data) -> Res = cmp_impl;
}

/// `where(cond, a, b)` for a condition whose lanes `0..k` are true and the rest false
/// (`n` lanes; `a` and `b` may be one-element).
pub(crate) fn select_prefix(k: usize, n: usize, a: &Data, b: &Data, out: &mut Data) -> Res {
    fn put<T: Copy>(k: usize, n: usize, a: &[T], b: &[T], o: &mut Vec<T>) -> Res {
        o.clear();
        let k = k.min(n);
        for (src, lo, hi) in [(a, 0, k), (b, k, n)] {
            match src.len() {
                1 => o.resize(hi, src[0]),
                l if l == n => o.extend_from_slice(&src[lo..hi]),
                l => return Err(len_err(l, n)),
            }
        }
        Ok(())
    }
    match (a, b) {
        (Data::Bool(a), Data::Bool(b)) => put(k, n, a, b, out.bools()),
        (Data::I32(a), Data::I32(b)) => put(k, n, a, b, out.i32s()),
        (Data::I64(a), Data::I64(b)) => put(k, n, a, b, out.i64s()),
        (Data::F32(a), Data::F32(b)) => put(k, n, a, b, out.f32s()),
        (Data::F64(a), Data::F64(b)) => put(k, n, a, b, out.f64s()),
        (Data::Ptr(a), Data::Ptr(b)) => put(k, n, a, b, out.ptrs()),
        _ => Err("select branches have different types".into()),
    }
}

multiversion! {
    /// `where(cond, a, b)`.
    fn select(cond: &Data, a: &Data, b: &Data, out: &mut Data) -> Res = select_impl;
}

multiversion! {
    /// Fused `a * b + c` (one rounding in f32/f64, then to `d`).
    fn fma(d: DType, a: &Data, b: &Data, c: &Data, out: &mut Data) -> Res = fma_impl;
}

multiversion! {
    /// `min(max(x, lo), hi)`; NaN in `x` propagates only with `propagate_nan`.
    fn clamp(d: DType, nan: bool, x: &Data, lo: &Data, hi: &Data, out: &mut Data) -> Res = clamp_impl;
}

multiversion! {
    /// `ptr + offset` in elements (offset signed or unsigned by its dtype `od`).
    fn add_ptr(od: DType, p: &Data, off: &Data, out: &mut Data) -> Res = add_ptr_impl;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -103.0f32;
        while x < 88.7 {
            let got = fast_exp(x) as f64;
            let want = (x as f64).exp();
            if want > 1e-37 {
                worst = worst.max(((got - want) / want).abs());
            }
            x += 0.01731;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(fast_exp(f32::INFINITY), f32::INFINITY);
        assert!(fast_exp(f32::NAN).is_nan());
        assert_eq!(fast_exp(0.0), 1.0);
    }
}
