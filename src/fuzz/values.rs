//! Element values: bit patterns per dtype, edge values, arrays from bits and back.

use half::{bf16, f16};

use super::ast::Lit;
use super::Rng;
use crate::array::Array;
use crate::dtype::DType;
use crate::error::Result;

/// Which values an input buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Edge values (NaN, ±inf, ±0, subnormals, extremes, ties) mixed with random ones.
    Edge,
    /// Floats whose sums and products are exact in any order: ±0, ±0.5, ±1, ±1.5, ±2,
    /// ±inf, NaN.
    Nice,
    /// Floats whose products are exact in any order: ±0, ±1, ±2, ±inf, NaN.
    Pow2,
}

const NICE: [f64; 13] = [
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.0,
    -1.0,
    1.5,
    -1.5,
    2.0,
    -2.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
];
const POW2: [f64; 9] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0,
    -2.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
];

/// Bits of float `v` in `d` (rounded to nearest even).
pub fn float_bits(d: DType, v: f64) -> u64 {
    match d {
        DType::F16 => f16::from_f64(v).to_bits() as u64,
        DType::BF16 => bf16::from_f64(v).to_bits() as u64,
        DType::F32 => (v as f32).to_bits() as u64,
        _ => v.to_bits(),
    }
}

/// Float value of bits `b` of float dtype `d`.
pub fn float_of(d: DType, b: u64) -> f64 {
    match d {
        DType::F16 => f16::from_bits(b as u16).to_f64(),
        DType::BF16 => bf16::from_bits(b as u16).to_f64(),
        DType::F32 => f32::from_bits(b as u32) as f64,
        _ => f64::from_bits(b),
    }
}

/// Integer value of bits `b` of integer or bool dtype `d`.
pub fn int_of(d: DType, b: u64) -> i128 {
    let bits = d.size_bytes() * 8;
    if d.is_signed_int() {
        let sh = 64 - bits;
        (((b << sh) as i64) >> sh) as i128
    } else if d == DType::Bool {
        (b & 1) as i128
    } else {
        let m = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        (b & m) as i128
    }
}

/// The bits of integer `v` in `d` (two's complement, truncated).
pub fn int_bits(d: DType, v: i128) -> u64 {
    if d == DType::Bool {
        return (v != 0) as u64;
    }
    let bits = d.size_bytes() * 8;
    let m = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    (v as u64) & m
}

/// The literal bits `b` of `d` stand for.
pub fn lit_of(d: DType, b: u64) -> Lit {
    if d.is_float() {
        Lit::Float(float_of(d, b))
    } else if d == DType::Bool {
        Lit::Bool(b & 1 == 1)
    } else {
        Lit::Int(int_of(d, b))
    }
}

/// The smallest and largest value of integer dtype `d`.
pub fn int_range(d: DType) -> (i128, i128) {
    let bits = d.size_bytes() as u32 * 8;
    if d.is_signed_int() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else if d == DType::Bool {
        (0, 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

fn float_edges(d: DType) -> Vec<f64> {
    let (max, min_normal, min_sub) = match d {
        DType::F16 => (65504.0, 6.103_515_625e-5, 5.960_464_477_539_063e-8),
        DType::BF16 => (
            bf16::MAX.to_f64(),
            bf16::MIN_POSITIVE.to_f64(),
            bf16::from_bits(1).to_f64(),
        ),
        DType::F32 => (
            f32::MAX as f64,
            f32::MIN_POSITIVE as f64,
            f32::from_bits(1) as f64,
        ),
        _ => (f64::MAX, f64::MIN_POSITIVE, f64::from_bits(1)),
    };
    vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        max,
        -max,
        min_normal,
        -min_normal,
        min_sub,
        -min_sub,
        min_normal - min_sub,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        3.5,
        255.5,
        -128.5,
        65504.0,
        65520.0,
        2147483648.0,
        -2147483648.0,
        4294967296.0,
        16777217.0,
        1e30,
        -1e-30,
        0.1,
        3.0,
    ]
}

/// A random value of `d` as bits, drawn as `kind` says.
pub fn random_bits(rng: &mut Rng, d: DType, kind: Kind) -> u64 {
    if d == DType::Bool {
        return rng.below(2);
    }
    if d.is_float() {
        let v = match kind {
            Kind::Nice => NICE[rng.below(NICE.len() as u64) as usize],
            Kind::Pow2 => POW2[rng.below(POW2.len() as u64) as usize],
            Kind::Edge => {
                if rng.chance(0.35) {
                    let e = float_edges(d);
                    e[rng.below(e.len() as u64) as usize]
                } else if rng.chance(0.3) {
                    // Small integers and halves: ties and duplicates.
                    (rng.below(17) as f64 - 8.0) * 0.5
                } else if rng.chance(0.1) {
                    // Raw bits: any value, subnormals and NaN payloads included.
                    return rng.bits() & mask(d);
                } else {
                    let m = (rng.bits() >> 11) as f64 / (1u64 << 53) as f64;
                    let e = rng.below(24) as i32 - 12;
                    (m * 2.0 - 1.0) * 2f64.powi(e)
                }
            }
        };
        return float_bits(d, v);
    }
    let (lo, hi) = int_range(d);
    let v = match rng.below(10) {
        0 => lo,
        1 => hi,
        2 => 0,
        3 => -1,
        4 => lo + 1,
        5 => hi - 1,
        6 => (rng.bits() & mask(d)) as i128,
        _ => rng.below(33) as i128 - 16,
    };
    int_bits(d, v)
}

fn mask(d: DType) -> u64 {
    let bits = d.size_bytes() * 8;
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// An MLX array of `d` holding `bits`.
pub fn array_of_bits(d: DType, bits: &[u64]) -> Result<Array> {
    fn of<T: crate::Element>(bits: &[u64], f: impl Fn(u64) -> T) -> Result<Array> {
        let v: Vec<T> = bits.iter().map(|&b| f(b)).collect();
        Array::from_slice(&v, &[v.len()])
    }
    match d {
        DType::Bool => of(bits, |b| b & 1 == 1),
        DType::I8 => of(bits, |b| b as i8),
        DType::I16 => of(bits, |b| b as i16),
        DType::I32 => of(bits, |b| b as i32),
        DType::I64 => of(bits, |b| b as i64),
        DType::U8 => of(bits, |b| b as u8),
        DType::U16 => of(bits, |b| b as u16),
        DType::U32 => of(bits, |b| b as u32),
        DType::U64 => of(bits, |b| b),
        DType::F16 => of(bits, |b| f16::from_bits(b as u16)),
        DType::BF16 => of(bits, |b| bf16::from_bits(b as u16)),
        DType::F32 => of(bits, |b| f32::from_bits(b as u32)),
        DType::F64 => of(bits, f64::from_bits),
    }
}

/// The elements of `a` as bit patterns.
pub fn bits_of_array(a: &Array) -> Result<Vec<u64>> {
    fn of<T: crate::Element>(a: &Array, f: impl Fn(T) -> u64) -> Result<Vec<u64>> {
        Ok(a.to_vec::<T>()?.into_iter().map(f).collect())
    }
    match a.dtype() {
        DType::Bool => of(a, |x: bool| x as u64),
        DType::I8 => of(a, |x: i8| x as u8 as u64),
        DType::I16 => of(a, |x: i16| x as u16 as u64),
        DType::I32 => of(a, |x: i32| x as u32 as u64),
        DType::I64 => of(a, |x: i64| x as u64),
        DType::U8 => of(a, |x: u8| x as u64),
        DType::U16 => of(a, |x: u16| x as u64),
        DType::U32 => of(a, |x: u32| x as u64),
        DType::U64 => of(a, |x: u64| x),
        DType::F16 => of(a, |x: f16| x.to_bits() as u64),
        DType::BF16 => of(a, |x: bf16| x.to_bits() as u64),
        DType::F32 => of(a, |x: f32| x.to_bits() as u64),
        DType::F64 => of(a, |x: f64| x.to_bits()),
    }
}

/// Whether `a` and `b` (bits of `d`) agree under `ulps` (0: exactly; any NaN equals any
/// NaN). With `zero_sign_free`, -0 equals +0.
pub fn agree(d: DType, a: u64, b: u64, ulps: u32, zero_sign_free: bool) -> bool {
    if a == b {
        return true;
    }
    if !d.is_float() {
        return false;
    }
    let (x, y) = (float_of(d, a), float_of(d, b));
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    if x == y {
        return zero_sign_free || x != 0.0;
    }
    if ulps == 0 || x.is_infinite() || y.is_infinite() {
        return false;
    }
    // Distance in units of the dtype's last place at the larger magnitude (subnormals: the
    // smallest step).
    let mant = match d {
        DType::F16 => 10,
        DType::BF16 => 7,
        DType::F32 => 23,
        _ => 52,
    };
    let min_step = float_of(d, 1);
    let m = x.abs().max(y.abs());
    let ulp = (2f64.powi(m.log2().floor() as i32 - mant)).max(min_step);
    (x - y).abs() <= ulps as f64 * ulp
}

/// A value of `d` written as Rust source.
pub fn rust_lit(d: DType, b: u64) -> String {
    match lit_of(d, b) {
        Lit::Bool(v) => v.to_string(),
        Lit::Int(i) => i.to_string(),
        Lit::Float(f) => float_src(f),
    }
}

/// A float as Rust source (`f64::NAN`, `-0.0`, `1e30`, ...).
pub fn float_src(f: f64) -> String {
    if f.is_nan() {
        "f64::NAN".into()
    } else if f == f64::INFINITY {
        "f64::INFINITY".into()
    } else if f == f64::NEG_INFINITY {
        "f64::NEG_INFINITY".into()
    } else {
        let s = format!("{f:?}");
        if s.contains('.') || s.contains('e') {
            s
        } else {
            format!("{s}.0")
        }
    }
}

/// A literal as Rust source.
pub fn lit_src(l: Lit) -> String {
    match l {
        Lit::Bool(b) => b.to_string(),
        Lit::Int(i) => {
            if i64::try_from(i).is_ok() {
                format!("{i}i64")
            } else {
                format!("{i}u64")
            }
        }
        Lit::Float(f) => float_src(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_and_agreement() {
        assert_eq!(int_of(DType::I8, int_bits(DType::I8, -128)), -128);
        assert_eq!(int_of(DType::U16, int_bits(DType::U16, -1)), 65535);
        assert_eq!(
            float_of(DType::F16, float_bits(DType::F16, 65504.0)),
            65504.0
        );
        let nan_a = float_bits(DType::F32, f64::NAN);
        assert!(agree(DType::F32, nan_a, 0x7fc0_0001, 0, false));
        let (p, n) = (float_bits(DType::F32, 0.0), float_bits(DType::F32, -0.0));
        assert!(!agree(DType::F32, p, n, 0, false));
        assert!(agree(DType::F32, p, n, 0, true));
        let one = float_bits(DType::F32, 1.0);
        assert!(agree(DType::F32, one, one + 1, 1, false));
        assert!(!agree(DType::F32, one, one + 3, 2, false));
        assert!(!agree(DType::I32, 1, 2, 4, false));
    }
}
