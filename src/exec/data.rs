//! Block values as typed buffers: one `Vec` per value, in a storage class chosen by dtype.
//!
//! Several dtypes share a storage class so that each op needs a handful of tight loops, not
//! one per dtype:
//! - `Bool`: `bool`.
//! - `I32`: `i8`, `i16`, `i32`, `u8`, `u16`, `u32`, held in canonical form: signed types
//!   sign-extended, `u8`/`u16` zero-extended, `u32` as its bits. Add/sub/mul/and/or/xor/shl
//!   are bit-exact in that form after [`normalize_i32`]; division, remainder, right shift,
//!   comparison and max/min look at the dtype.
//! - `I64`: `i64`, and `u64` as its bits.
//! - `F32`: `f16`, `bf16`, `f32`. Narrow floats are widened exactly and every op that makes
//!   a new value rounds it back ([`round_f32`]): Triton computes f16/bf16 math in fp32 and
//!   f32 has more than twice their precision, so one f32 op plus one rounding equals the
//!   correctly rounded narrow op for `+ - * /` and `sqrt`.
//! - `F64`: `f64`.
//! - `Ptr`: pointers packed as `param << 48 | (element offset mod 2^48)`, so `ptr + offset`
//!   is one add on the low bits and a select between two arguments' pointers needs no
//!   special case.

use half::{bf16, f16};

use crate::dtype::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, DType};
use crate::ir::Type;

/// Bits holding the element offset of a packed pointer.
pub(crate) const PTR_OFF_BITS: u32 = 48;
const PTR_OFF_MASK: u64 = (1u64 << PTR_OFF_BITS) - 1;

/// Packs an argument index and an element offset into a pointer.
pub(crate) fn ptr_pack(param: usize, off: i64) -> u64 {
    ((param as u64) << PTR_OFF_BITS) | (off as u64 & PTR_OFF_MASK)
}

/// The argument index of a packed pointer.
#[inline(always)]
pub(crate) fn ptr_param(p: u64) -> usize {
    (p >> PTR_OFF_BITS) as usize
}

/// The (sign-extended) element offset of a packed pointer.
#[inline(always)]
pub(crate) fn ptr_off(p: u64) -> i64 {
    ((p << (64 - PTR_OFF_BITS)) as i64) >> (64 - PTR_OFF_BITS)
}

/// `p + d` elements, keeping the argument index.
#[inline(always)]
pub(crate) fn ptr_add(p: u64, d: i64) -> u64 {
    (p & !PTR_OFF_MASK) | (p.wrapping_add(d as u64) & PTR_OFF_MASK)
}

/// True when the CPU has AVX2 and FMA (checked once by std, then cached).
#[inline(always)]
pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines `pub(crate) fn $name`, which runs `$imp` compiled for AVX2 and FMA when the CPU
/// has them, else for the baseline target. `$imp` and the loops it calls are
/// `#[inline(always)]`, so the whole body is specialised. Results do not depend on the
/// version: Rust never contracts `a * b + c` into an FMA, and every reduction order is
/// fixed in the source.
macro_rules! multiversion {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $t:ty),* $(,)?) -> $ret:ty = $imp:path;) => {
        $(#[$m])*
        pub(crate) fn $name($($arg: $t),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn wide($($arg: $t),*) -> $ret {
                    $imp($($arg),*)
                }
                if $crate::exec::data::has_avx2() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    return unsafe { wide($($arg),*) };
                }
            }
            $imp($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// The storage class of a dtype (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Bool,
    I32,
    I64,
    F32,
    F64,
    Ptr,
}

/// The storage class of values of type `t`.
pub(crate) fn class_of(t: &Type) -> Class {
    if t.ptr {
        return Class::Ptr;
    }
    match t.dtype {
        DType::Bool => Class::Bool,
        DType::I8 | DType::I16 | DType::I32 | DType::U8 | DType::U16 | DType::U32 => Class::I32,
        DType::I64 | DType::U64 => Class::I64,
        DType::F16 | DType::BF16 | DType::F32 => Class::F32,
        DType::F64 => Class::F64,
    }
}

/// One value: a flat row-major buffer (a scalar has one element).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Ptr(Vec<u64>),
}

impl Default for Data {
    fn default() -> Self {
        Data::Bool(Vec::new())
    }
}

/// Applies `$body` to the inner `Vec` of any variant, bound to `$v`.
macro_rules! with_vec {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::exec::data::Data::Bool($v) => $body,
            $crate::exec::data::Data::I32($v) => $body,
            $crate::exec::data::Data::I64($v) => $body,
            $crate::exec::data::Data::F32($v) => $body,
            $crate::exec::data::Data::F64($v) => $body,
            $crate::exec::data::Data::Ptr($v) => $body,
        }
    };
}

/// Runs `$body` with `$s` the source's `Vec` and `$o` the output's `Vec` of the same
/// variant (cleared, allocation kept when the variant already matches).
macro_rules! same_kind {
    ($src:expr, $out:expr, |$s:ident, $o:ident| $body:expr) => {
        match $src {
            $crate::exec::data::Data::Bool($s) => {
                let $o = $out.bools();
                $body
            }
            $crate::exec::data::Data::I32($s) => {
                let $o = $out.i32s();
                $body
            }
            $crate::exec::data::Data::I64($s) => {
                let $o = $out.i64s();
                $body
            }
            $crate::exec::data::Data::F32($s) => {
                let $o = $out.f32s();
                $body
            }
            $crate::exec::data::Data::F64($s) => {
                let $o = $out.f64s();
                $body
            }
            $crate::exec::data::Data::Ptr($s) => {
                let $o = $out.ptrs();
                $body
            }
        }
    };
}
pub(crate) use same_kind;

macro_rules! accessor {
    ($name:ident, $variant:ident, $t:ty) => {
        /// Turns `self` into an empty buffer of this variant, keeping the allocation when
        /// it already is one (values are rewritten every program and loop iteration).
        pub(crate) fn $name(&mut self) -> &mut Vec<$t> {
            if !matches!(self, Data::$variant(_)) {
                *self = Data::$variant(Vec::new());
            }
            match self {
                Data::$variant(v) => {
                    v.clear();
                    v
                }
                _ => unreachable!("variant was set just above"),
            }
        }
    };
}

impl Data {
    accessor!(bools, Bool, bool);
    accessor!(i32s, I32, i32);
    accessor!(i64s, I64, i64);
    accessor!(f32s, F32, f32);
    accessor!(f64s, F64, f64);
    accessor!(ptrs, Ptr, u64);

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        with_vec!(self, v => v.len())
    }

    /// Element `i` as an integer (floats truncate; used for scalars such as loop bounds).
    pub(crate) fn get_i64(&self, i: usize, dtype: DType) -> Option<i64> {
        Some(match self {
            Data::Bool(v) => *v.get(i)? as i64,
            Data::I32(v) => widen_i32(*v.get(i)?, dtype),
            Data::I64(v) => *v.get(i)?,
            Data::F32(v) => *v.get(i)? as i64,
            Data::F64(v) => *v.get(i)? as i64,
            Data::Ptr(v) => *v.get(i)? as i64,
        })
    }

    /// Element `i` as a bool (non-zero).
    pub(crate) fn get_bool(&self, i: usize) -> Option<bool> {
        Some(match self {
            Data::Bool(v) => *v.get(i)?,
            Data::I32(v) => *v.get(i)? != 0,
            Data::I64(v) => *v.get(i)? != 0,
            Data::F32(v) => *v.get(i)? != 0.0,
            Data::F64(v) => *v.get(i)? != 0.0,
            Data::Ptr(v) => *v.get(i)? != 0,
        })
    }

    /// Copies `src` into `self`, reusing `self`'s allocation when the variants match.
    pub(crate) fn assign(&mut self, src: &Data) {
        same_kind!(src, self, |s, o| o.extend_from_slice(s))
    }
}

/// The value of a canonical `I32`-class element as `i64` (zero-extends `u32`).
#[inline(always)]
pub(crate) fn widen_i32(x: i32, dtype: DType) -> i64 {
    if dtype == DType::U32 {
        x as u32 as i64
    } else {
        x as i64
    }
}

/// Truncates `x` to `dtype`'s width and returns it in canonical `I32`-class form.
#[inline(always)]
pub(crate) fn canon_i32(x: i32, dtype: DType) -> i32 {
    match dtype {
        DType::I8 => x as i8 as i32,
        DType::U8 => x as u8 as i32,
        DType::I16 => x as i16 as i32,
        DType::U16 => x as u16 as i32,
        _ => x,
    }
}

/// Re-canonicalises a whole `I32`-class buffer after wrapping arithmetic.
#[inline(always)]
pub(crate) fn normalize_i32(v: &mut [i32], dtype: DType) {
    match dtype {
        DType::I8 => v.iter_mut().for_each(|x| *x = *x as i8 as i32),
        DType::U8 => v.iter_mut().for_each(|x| *x = *x as u8 as i32),
        DType::I16 => v.iter_mut().for_each(|x| *x = *x as i16 as i32),
        DType::U16 => v.iter_mut().for_each(|x| *x = *x as u16 as i32),
        _ => {}
    }
}

/// Rounds one f32 to `dtype` (identity for f32).
#[inline(always)]
pub(crate) fn round1(x: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => f16_bits_to_f32(f32_to_f16_bits(x)),
        DType::BF16 => bf16_bits_to_f32(f32_to_bf16_bits(x)),
        _ => x,
    }
}

/// Rounds a whole `F32`-class buffer to `dtype` (round to nearest even).
#[inline(always)]
pub(crate) fn round_f32(v: &mut [f32], dtype: DType) {
    match dtype {
        DType::F16 => v
            .iter_mut()
            .for_each(|x| *x = f16_bits_to_f32(f32_to_f16_bits(*x))),
        DType::BF16 => v
            .iter_mut()
            .for_each(|x| *x = bf16_bits_to_f32(f32_to_bf16_bits(*x))),
        _ => {}
    }
}

/// Rounds an f64 straight to an `F32`-class dtype (one rounding, no double rounding).
#[inline(always)]
pub(crate) fn f64_to_f32_class(x: f64, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(crate::dtype::f64_to_f32_odd(x)).to_f32(),
        DType::BF16 => bf16::from_f32(crate::dtype::f64_to_f32_odd(x)).to_f32(),
        _ => x as f32,
    }
}

/// A buffer of `n` copies of a constant in `t`'s storage class (`out` is reused).
pub(crate) fn fill_const(out: &mut Data, t: &Type, value: crate::ir::Const, n: usize) {
    use crate::ir::Const;
    let d = t.dtype;
    match class_of(t) {
        Class::Bool => out.bools().resize(n, value.as_i64() != 0),
        Class::I32 => {
            let x = canon_i32(value.as_i64() as i32, d);
            out.i32s().resize(n, x)
        }
        Class::I64 => out.i64s().resize(n, value.as_i64()),
        Class::F32 => {
            let x = match value {
                Const::Float(f) => f64_to_f32_class(f, d),
                Const::Int(i) => f64_to_f32_class(i as f64, d),
            };
            out.f32s().resize(n, x)
        }
        Class::F64 => out.f64s().resize(n, value.as_f64()),
        Class::Ptr => out.ptrs().resize(n, value.as_i64() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_packing_round_trips_negative_offsets() {
        let p = ptr_pack(3, 10);
        assert_eq!(ptr_param(p), 3);
        assert_eq!(ptr_off(p), 10);
        let q = ptr_add(p, -25);
        assert_eq!((ptr_param(q), ptr_off(q)), (3, -15));
        assert_eq!(ptr_off(ptr_add(q, 15)), 0);
    }

    #[test]
    fn canonical_small_ints_wrap() {
        assert_eq!(canon_i32(200, DType::I8), -56);
        assert_eq!(canon_i32(-1, DType::U16), 65535);
        assert_eq!(widen_i32(-1, DType::U32), u32::MAX as i64);
    }
}
