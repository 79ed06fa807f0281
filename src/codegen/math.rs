//! Triton's `libdevice` math beyond the core set ([`UnaryOp::is_libdevice`],
//! [`BinaryOp::is_libdevice`]): each dialect spells a function in [`Dialect::overrides`]
//! under the op's name; a spelling that calls `tm_*` needs the `math` helpers
//! ([`METAL_MATH`], [`CPU_MATH`]).
//!
//! CUDA calls its math library (`asinf`, `powf`, ..., the functions Triton's `libdevice`
//! wraps on NVIDIA GPUs). Metal calls `metal::precise` functions where the language has
//! them: under the default fast math functions the plain names lose accuracy and are
//! undefined for NaN and infinities. What Metal lacks (`log1p`, `expm1`, `cbrt`, `hypot`,
//! `erfinv`) the helpers compute from `precise` functions, with no step that fast math may
//! rewrite into something else: no `(1 + x) - 1`, special values selected on the bits. The
//! compiled CPU executor runs the same helpers over the host's libm.
//!
//! 16-bit floats compute in `float` and round once, as the core math.

use super::dialect::Dialect;
use super::lower::{unsupported_on, Lowering};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{BinaryOp, UnaryOp};

impl Lowering<'_> {
    /// The expression (in `{x}`) of a `libdevice` unary function.
    pub(super) fn math_unary(&mut self, kind: UnaryOp, dt: DType) -> Result<String> {
        if dt == DType::F64 {
            return self.f64_unary(kind.name());
        }
        let call = self.math_template(kind.name(), dt)?;
        Ok(match dt {
            DType::F32 => call,
            _ => format!("{}({})", self.cty(dt)?, call.replace("{x}", "float({x})")),
        })
    }

    /// The expression (in `{a}`, `{b}`) of a `libdevice` binary function.
    pub(super) fn math_binary(&mut self, kind: BinaryOp, dt: DType) -> Result<String> {
        if dt == DType::F64 {
            return self.f64_binary(kind.name());
        }
        let call = self.math_template(kind.name(), dt)?;
        Ok(match dt {
            DType::F32 => call,
            _ => format!(
                "{}({})",
                self.cty(dt)?,
                call.replace("{a}", "float({a})")
                    .replace("{b}", "float({b})")
            ),
        })
    }

    /// The f64 expression (in `{x}`) of the math function `name` (core or `libdevice`),
    /// where the dialect has f64 (the compiled CPU executor, `cpu_runtime.h`): the host
    /// libm's scalar function, as the interpreter calls it for the core functions (`exp`,
    /// `log`, `sin`, ...: the same bits), or, for `erf` and `libdevice`, where the
    /// interpreter runs the `libm` crate (musl's algorithms), within an ulp or two of it;
    /// `erfinv` is the interpreter's Newton iteration over the host's `erf`/`erfc`.
    pub(super) fn f64_unary(&mut self, name: &str) -> Result<String> {
        if self.d.name != "cpu" {
            return Err(unsupported_on(self.d, self.k, format!("`{name}` on F64")));
        }
        Ok(match name {
            "sqrt" | "floor" | "ceil" => format!("__builtin_{name}({{x}})"),
            "rsqrt" => "(1.0 / __builtin_sqrt({x}))".into(),
            "erfinv" => "tm_erfinv_d({x})".into(),
            _ => format!("tm_libm_{name}({{x}})"),
        })
    }

    /// The f64 expression (in `{a}`, `{b}`) of a `libdevice` binary function (see
    /// [`Self::f64_unary`]).
    pub(super) fn f64_binary(&mut self, name: &str) -> Result<String> {
        if self.d.name != "cpu" {
            return Err(unsupported_on(self.d, self.k, format!("`{name}` on F64")));
        }
        Ok(format!("tm_libm_{name}({{a}}, {{b}})"))
    }

    fn math_template(&mut self, name: &str, dt: DType) -> Result<String> {
        if !matches!(dt, DType::F32 | DType::F16 | DType::BF16) {
            return Err(unsupported_on(self.d, self.k, format!("`{name}` on {dt}")));
        }
        let t = math_spelling(self.d, name).ok_or_else(|| {
            unsupported_on(
                self.d,
                self.k,
                format!("`libdevice.{name}` (run the kernel on Target::Cpu)"),
            )
        })?;
        if t.starts_with("tm_") {
            self.helpers.insert("math");
        }
        Ok(t.to_string())
    }
}

/// The dialect's spelling of the `libdevice` function `name`, if it has one.
pub(super) fn math_spelling(d: &Dialect, name: &str) -> Option<&'static str> {
    d.override_for(name)
}

/// Metal's spellings (see the module docs).
pub(super) const METAL_OVERRIDES: &[(&str, &str)] = &[
    ("erf", "tm_erf({x})"),
    ("tan", "precise::tan({x})"),
    ("asin", "precise::asin({x})"),
    ("acos", "precise::acos({x})"),
    ("atan", "precise::atan({x})"),
    ("sinh", "precise::sinh({x})"),
    ("cosh", "precise::cosh({x})"),
    ("asinh", "precise::asinh({x})"),
    ("acosh", "precise::acosh({x})"),
    ("atanh", "precise::atanh({x})"),
    ("log10", "precise::log10({x})"),
    ("exp10", "precise::exp10({x})"),
    ("log1p", "tm_log1p({x})"),
    ("expm1", "tm_expm1({x})"),
    ("cbrt", "tm_cbrt({x})"),
    ("erfinv", "tm_erfinv({x})"),
    ("pow", "precise::pow({a}, {b})"),
    ("atan2", "precise::atan2({a}, {b})"),
    ("hypot", "tm_hypot({a}, {b})"),
];

/// The compiled CPU executor's spellings: Metal's names over the host's libm
/// (`emu/metal_core.h`), the helpers for what Metal lacks.
pub(super) const CPU_OVERRIDES: &[(&str, &str)] = &[
    ("erf", "tm_erf({x})"),
    ("tan", "tan({x})"),
    ("asin", "asin({x})"),
    ("acos", "acos({x})"),
    ("atan", "atan({x})"),
    ("sinh", "sinh({x})"),
    ("cosh", "cosh({x})"),
    ("asinh", "asinh({x})"),
    ("acosh", "acosh({x})"),
    ("atanh", "atanh({x})"),
    ("log10", "log10({x})"),
    ("exp10", "exp10({x})"),
    ("log1p", "tm_log1p({x})"),
    ("expm1", "tm_expm1({x})"),
    ("cbrt", "tm_cbrt({x})"),
    ("erfinv", "tm_erfinv({x})"),
    ("pow", "pow({a}, {b})"),
    ("atan2", "atan2({a}, {b})"),
    ("hypot", "tm_hypot({a}, {b})"),
];

/// CUDA's spellings: its math library's `float` functions.
pub(super) const CUDA_OVERRIDES: &[(&str, &str)] = &[
    // Triton's `exp2` on fp32: the special function unit's approximation, subnormal
    // results flushed to zero (`super::cuda::EX2`).
    ("exp2", "tm_ex2({x})"),
    ("tan", "tanf({x})"),
    ("asin", "asinf({x})"),
    ("acos", "acosf({x})"),
    ("atan", "atanf({x})"),
    ("sinh", "sinhf({x})"),
    ("cosh", "coshf({x})"),
    ("asinh", "asinhf({x})"),
    ("acosh", "acoshf({x})"),
    ("atanh", "atanhf({x})"),
    ("log10", "log10f({x})"),
    ("exp10", "exp10f({x})"),
    ("log1p", "log1pf({x})"),
    ("expm1", "expm1f({x})"),
    ("cbrt", "cbrtf({x})"),
    ("erfinv", "erfinvf({x})"),
    ("pow", "powf({a}, {b})"),
    ("atan2", "atan2f({a}, {b})"),
    ("hypot", "hypotf({a}, {b})"),
];

/// The `math` helpers, `$p` qualifying the library functions they call (`precise::` on
/// Metal). Accuracy (f32 against the exact value, with the host's libm as the library;
/// tested in `tests/libdevice.rs`): `log1p`, `expm1` and `hypot` within 2 ulp, `cbrt`
/// within 1, `erfinv` within 3.
///
/// - `log1p` and `expm1`: `x` itself below 2^-24 in magnitude (zeros and subnormals
///   keep their value and sign).
/// - `log1p`: for |x| < 0.5, `2 atanh(s)` with `s = x / (2 + x)` as its odd series
///   (|s| <= 1/3: nine terms); elsewhere `log(1 + x)`, where rounding `1 + x` costs
///   little.
/// - `expm1`: for |x| < 0.7 the Taylor series to `x^11`; elsewhere `exp(x) - 1`.
/// - `cbrt`: `exp2(log2|x| / 3)` and one Newton step `r - (r - |x| / r^2) / 3`, the sign
///   of `x`; zeros, infinities and NaN returned as they are.
/// - `hypot`: `m sqrt(1 + (n/m)^2)` with `m`, `n` the larger and smaller magnitude; an
///   infinite operand gives +inf, else a NaN gives NaN.
/// - `erfinv`: Giles' single-precision approximation (two polynomials in
///   `w = -log((1 - x)(1 + x))`), ±inf at ±1, NaN outside [-1, 1].
macro_rules! math_helpers {
    ($q:literal, $p:literal) => {
        concat!(
            "\n", $q, " bool tm_m_special(float x) { return (as_type<uint>(x) & 0x7fffffffu) >= 0x7f800000u; }\n",
            $q, " float tm_log1p(float x) {\n",
            "  if (fabs(x) < 5.9604645e-8f) return x;\n",
            "  if (fabs(x) < 0.5f) {\n",
            "    const float s = x / (2.0f + x), z = s * s;\n",
            "    float p = 1.0f / 19.0f;\n",
            "    p = p * z + 1.0f / 17.0f;\n",
            "    p = p * z + 1.0f / 15.0f;\n",
            "    p = p * z + 1.0f / 13.0f;\n",
            "    p = p * z + 1.0f / 11.0f;\n",
            "    p = p * z + 1.0f / 9.0f;\n",
            "    p = p * z + 1.0f / 7.0f;\n",
            "    p = p * z + 1.0f / 5.0f;\n",
            "    p = p * z + 1.0f / 3.0f;\n",
            "    return 2.0f * s + 2.0f * s * (z * p);\n",
            "  }\n",
            "  return ", $p, "log(1.0f + x);\n",
            "}\n",
            $q, " float tm_expm1(float x) {\n",
            "  if (fabs(x) < 5.9604645e-8f) return x;\n",
            "  if (fabs(x) < 0.7f) {\n",
            "    float p = 1.0f / 39916800.0f;\n",
            "    p = p * x + 1.0f / 3628800.0f;\n",
            "    p = p * x + 1.0f / 362880.0f;\n",
            "    p = p * x + 1.0f / 40320.0f;\n",
            "    p = p * x + 1.0f / 5040.0f;\n",
            "    p = p * x + 1.0f / 720.0f;\n",
            "    p = p * x + 1.0f / 120.0f;\n",
            "    p = p * x + 1.0f / 24.0f;\n",
            "    p = p * x + 1.0f / 6.0f;\n",
            "    p = p * x + 0.5f;\n",
            "    return x + x * (x * p);\n",
            "  }\n",
            "  return ", $p, "exp(x) - 1.0f;\n",
            "}\n",
            $q, " float tm_cbrt(float x) {\n",
            "  const float a = fabs(x);\n",
            "  if (a == 0.0f || tm_m_special(x)) return x;\n",
            "  float r = ", $p, "exp2(", $p, "log2(a) * (1.0f / 3.0f));\n",
            "  r = r - (r - a / (r * r)) * (1.0f / 3.0f);\n",
            "  return as_type<float>(as_type<uint>(r) | (as_type<uint>(x) & 0x80000000u));\n",
            "}\n",
            $q, " float tm_hypot(float x, float y) {\n",
            "  const float a = fabs(x), b = fabs(y);\n",
            "  if (as_type<uint>(a) == 0x7f800000u || as_type<uint>(b) == 0x7f800000u) return as_type<float>(0x7f800000u);\n",
            "  if (tm_m_special(a) || tm_m_special(b)) return a + b;\n",
            "  const float m = a > b ? a : b, n = a > b ? b : a;\n",
            "  if (m == 0.0f) return 0.0f;\n",
            "  const float r = n / m;\n",
            "  return m * ", $p, "sqrt(1.0f + r * r);\n",
            "}\n",
            $q, " float tm_erfinv(float x) {\n",
            "  const float a = fabs(x);\n",
            "  if (tm_m_special(x) || a > 1.0f) return as_type<float>(0x7fc00000u);\n",
            "  if (a == 1.0f) return as_type<float>(as_type<uint>(x) | 0x7f800000u);\n",
            "  float w = -", $p, "log((1.0f - a) * (1.0f + a)), p;\n",
            "  if (w < 5.0f) {\n",
            "    w = w - 2.5f;\n",
            "    p = 2.81022636e-08f;\n",
            "    p = 3.43273939e-07f + p * w;\n",
            "    p = -3.5233877e-06f + p * w;\n",
            "    p = -4.39150654e-06f + p * w;\n",
            "    p = 0.00021858087f + p * w;\n",
            "    p = -0.00125372503f + p * w;\n",
            "    p = -0.00417768164f + p * w;\n",
            "    p = 0.246640727f + p * w;\n",
            "    p = 1.50140941f + p * w;\n",
            "  } else {\n",
            "    w = ", $p, "sqrt(w) - 3.0f;\n",
            "    p = -0.000200214257f;\n",
            "    p = 0.000100950558f + p * w;\n",
            "    p = 0.00134934322f + p * w;\n",
            "    p = -0.00367342844f + p * w;\n",
            "    p = 0.00573950773f + p * w;\n",
            "    p = -0.0076224613f + p * w;\n",
            "    p = 0.00943887047f + p * w;\n",
            "    p = 1.00167406f + p * w;\n",
            "    p = 2.83297682f + p * w;\n",
            "  }\n",
            "  return p * x;\n",
            "}\n",
        )
    };
}

/// The `math` helpers of Metal (over `metal::precise`).
pub(super) const METAL_MATH: &str = math_helpers!("inline", "precise::");

/// The `math` helpers of the compiled CPU executor (over `emu/metal_core.h`'s libm).
pub(super) const CPU_MATH: &str = math_helpers!("inline", "");
