//! Element types shared by MLX arrays, the kernel IR and the code generators.

use std::fmt;

/// An element type. The set is MLX's (minus complex), which also covers Triton's
/// scalar types (`int1` is [`DType::Bool`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool` / Triton `int1`.
    Bool,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision (not available on Metal GPUs).
    F64,
}

/// Short aliases in Triton's spelling (`tl.float32` ...), so kernels read like Triton.
pub use DType::{
    Bool as INT1, BF16 as BFLOAT16, F16 as FLOAT16, F32 as FLOAT32, F64 as FLOAT64, I16 as INT16,
    I32 as INT32, I64 as INT64, I8 as INT8, U16 as UINT16, U32 as UINT32, U64 as UINT64,
    U8 as UINT8,
};

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes (`bool` takes one byte, as in MLX).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// Width in bits as Triton counts it (`int1` is 1 bit).
    pub fn bits(self) -> u32 {
        match self {
            DType::Bool => 1,
            other => other.size_bytes() as u32 * 8,
        }
    }

    /// True for the floating point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for signed and unsigned integers (not `bool`).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// True for `i8` .. `i64`.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// True for `u8` .. `u64`.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// True for `bool`.
    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// Triton's name (`fp32`, `int32`, `int1`, ...).
    pub fn triton_name(self) -> &'static str {
        match self {
            DType::Bool => "int1",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
            DType::F32 => "fp32",
            DType::F64 => "fp64",
        }
    }

    /// MLX's name (`float32`, `int32`, `bool`, ...).
    pub fn mlx_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// Parses either Triton's or MLX's name (also `f32`, `i32`, `half`, `float`).
    pub fn parse(name: &str) -> Option<DType> {
        let n = name.trim().to_ascii_lowercase();
        DType::ALL
            .into_iter()
            .find(|d| d.triton_name() == n || d.mlx_name() == n || d.short_name() == n)
            .or(match n.as_str() {
                "half" => Some(DType::F16),
                "float" => Some(DType::F32),
                "double" => Some(DType::F64),
                "int" => Some(DType::I32),
                _ => None,
            })
    }

    /// Rust-style short name (`f32`, `i32`, `bool`, `bf16`).
    pub fn short_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// Rust element types that map to a [`DType`]; used for typed array access.
///
/// # Safety
/// `DTYPE.size_bytes()` must equal `size_of::<Self>()` and, unless `DTYPE` is
/// [`DType::Bool`], every bit pattern of that size must be a valid `Self`. Bool buffers can
/// hold any byte (an output a kernel never wrote), so readers map bytes to `b != 0` before
/// they become `bool`s.
pub unsafe trait Element: Copy + Send + Sync + 'static + fmt::Debug {
    /// The matching dtype.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        // SAFETY: sizes match and all bit patterns are valid (bool bytes are mapped by readers).
        unsafe impl Element for $t { const DTYPE: DType = DType::$d; }
    )*};
}
element!(bool => Bool, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16,
    u32 => U32, u64 => U64, half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64);

/// f16 bits as an f32, exactly; a NaN keeps its sign, payload and signalling bit (a value
/// that is only moved, loaded, stored or bitcast keeps its bits on every target).
#[inline(always)]
pub(crate) fn f16_bits_to_f32(b: u16) -> f32 {
    if b & 0x7c00 == 0x7c00 && b & 0x03ff != 0 {
        let b = b as u32;
        f32::from_bits(((b & 0x8000) << 16) | 0x7f80_0000 | ((b & 0x03ff) << 13))
    } else {
        half::f16::from_bits(b).to_f32()
    }
}

/// An f32 rounded to f16 bits (to nearest even); a NaN keeps its sign and the top ten
/// payload bits, signalling bit included (quiet when none of them is set, to stay a NaN).
#[inline(always)]
pub(crate) fn f32_to_f16_bits(x: f32) -> u16 {
    if x.is_nan() {
        let b = x.to_bits();
        let payload = ((b >> 13) & 0x03ff) as u16;
        ((b >> 16) & 0x8000) as u16 | 0x7c00 | if payload == 0 { 0x0200 } else { payload }
    } else {
        half::f16::from_f32(x).to_bits()
    }
}

/// bf16 bits as an f32 (exact: bf16 is the top half of an f32).
#[inline(always)]
pub(crate) fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// An f32 rounded to bf16 bits (to nearest even); a NaN keeps its sign and top seven
/// payload bits, as [`f32_to_f16_bits`] does.
#[inline(always)]
pub(crate) fn f32_to_bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        let b = (x.to_bits() >> 16) as u16;
        if b & 0x007f == 0 {
            b | 0x0040
        } else {
            b
        }
    } else {
        half::bf16::from_f32(x).to_bits()
    }
}

/// An f64 rounded to f32 for a second rounding to a narrower float: toward zero, with the
/// last bit set when inexact (round to odd). Rounding the result to f16 or bf16 (to nearest
/// even) gives `x` rounded once to that type, as a direct conversion does; rounding through
/// a plain `x as f32` can round twice (`1 + 2^-11 + 2^-40` to f16 would give 1, not
/// `1 + 2^-10`). NaN and values exact in f32 are returned as `x as f32`.
#[inline(always)]
pub(crate) fn f64_to_f32_odd(x: f64) -> f32 {
    let r = x as f32;
    if x.is_nan() || r as f64 == x {
        return r;
    }
    let mut b = r.to_bits();
    if (r as f64).abs() > x.abs() {
        b -= 1;
    }
    f32::from_bits(b | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_to_narrow_floats_rounds_once() {
        let to_f16 = |x: f64| half::f16::from_f32(f64_to_f32_odd(x)).to_f64();
        let to_bf16 = |x: f64| half::bf16::from_f32(f64_to_f32_odd(x)).to_f64();
        // Just above a tie of f16 (and of bf16), below the f32 resolution.
        assert_eq!(
            to_f16(1.0 + 2f64.powi(-11) + 2f64.powi(-40)),
            1.0 + 2f64.powi(-10)
        );
        assert_eq!(to_f16(1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            to_bf16(1.0 + 2f64.powi(-8) + 2f64.powi(-40)),
            1.0 + 2f64.powi(-7)
        );
        assert_eq!(to_bf16(-(1.0 + 2f64.powi(-8))), -1.0);
        // Overflow, subnormals, zeros, infinities.
        assert_eq!(to_f16(65520.0), f64::INFINITY);
        assert_eq!(to_f16(65519.99), 65504.0);
        assert_eq!(to_bf16(1e300), f64::INFINITY);
        assert_eq!(to_f16(2f64.powi(-25) + 2f64.powi(-60)), 2f64.powi(-24));
        assert_eq!(to_f16(2f64.powi(-25)), 0.0);
        assert!(to_f16(-1e-300).is_sign_negative() && to_f16(-1e-300) == 0.0);
        assert_eq!(to_bf16(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert!(to_bf16(f64::NAN).is_nan());
        assert_eq!(f64_to_f32_odd(1e300), f32::from_bits(0x7f7f_ffff));
        assert_eq!(f64_to_f32_odd(0.5), 0.5);
    }

    #[test]
    fn names_parse() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.triton_name()), Some(d));
            assert_eq!(DType::parse(d.mlx_name()), Some(d));
            assert_eq!(DType::parse(d.short_name()), Some(d));
        }
        assert_eq!(DType::parse("complex64"), None);
        assert_eq!(DType::Bool.bits(), 1);
        assert_eq!(DType::BF16.size_bytes(), 2);
    }
}
