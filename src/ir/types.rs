//! Value types: an element dtype (or a pointer to one) and a static block shape.

use std::fmt;

use crate::dtype::DType;

/// The type of an IR value: a scalar or a block (tensor with a static shape) of either
/// numbers of `dtype` or pointers to elements of `dtype`.
///
/// `shape` empty means a scalar (Triton's non-block type). Block dims are powers of two
/// (Triton's rule; the verifier checks every op result).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    /// Element dtype; for pointers, the pointee dtype.
    pub dtype: DType,
    /// True for pointers (`ptr<dtype>`), which live in device memory and count elements.
    pub ptr: bool,
    /// Block shape, outermost first; empty for scalars.
    pub shape: Vec<usize>,
}

impl Type {
    /// A scalar number type.
    pub fn scalar(dtype: DType) -> Type {
        Type {
            dtype,
            ptr: false,
            shape: Vec::new(),
        }
    }

    /// A scalar pointer to `pointee`.
    pub fn pointer(pointee: DType) -> Type {
        Type {
            dtype: pointee,
            ptr: true,
            shape: Vec::new(),
        }
    }

    /// A block of numbers.
    pub fn block(dtype: DType, shape: &[usize]) -> Type {
        Type {
            dtype,
            ptr: false,
            shape: shape.to_vec(),
        }
    }

    /// True when the shape is non-empty.
    pub fn is_block(&self) -> bool {
        !self.shape.is_empty()
    }

    /// True for a scalar (non-block) type.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    /// Number of dimensions (0 for scalars).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for scalars; saturates instead of overflowing).
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// The same element type (pointer-ness kept) with another shape.
    pub fn with_shape(&self, shape: &[usize]) -> Type {
        Type {
            dtype: self.dtype,
            ptr: self.ptr,
            shape: shape.to_vec(),
        }
    }

    /// The same shape with a number element type of `dtype` (pointer-ness dropped).
    pub fn with_dtype(&self, dtype: DType) -> Type {
        Type {
            dtype,
            ptr: false,
            shape: self.shape.clone(),
        }
    }

    /// The scalar type of one element.
    pub fn element(&self) -> Type {
        Type {
            dtype: self.dtype,
            ptr: self.ptr,
            shape: Vec::new(),
        }
    }

    /// Writes the element part: `f32` or `ptr<f32>`.
    pub fn fmt_element(&self, f: &mut impl fmt::Write) -> fmt::Result {
        if self.ptr {
            write!(f, "ptr<{}>", self.dtype)
        } else {
            write!(f, "{}", self.dtype)
        }
    }
}

impl fmt::Display for Type {
    /// `f32`, `ptr<f16>`, `i32[128]`, `ptr<f32>[64,32]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_element(f)?;
        if self.is_block() {
            f.write_str("[")?;
            for (i, d) in self.shape.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{d}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// A compile-time constant of a scalar dtype (the dtype is the value's [`Type`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Const {
    /// Integer (and `bool`, as 0/1) constants, holding the value; `u64` values above
    /// `i64::MAX` are stored as their two's-complement bits (`v as u64` gives them back).
    Int(i64),
    /// Floating point constants (rounded to the value's dtype when used).
    Float(f64),
}

impl Const {
    /// The integer value (floats truncate toward zero).
    pub fn as_i64(self) -> i64 {
        match self {
            Const::Int(v) => v,
            Const::Float(v) => v as i64,
        }
    }

    /// The value as `f64`.
    pub fn as_f64(self) -> f64 {
        match self {
            Const::Int(v) => v as f64,
            Const::Float(v) => v,
        }
    }
}

impl fmt::Display for Const {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Const::Int(v) => write!(f, "{v}"),
            Const::Float(v) if v.is_nan() => f.write_str("nan"),
            Const::Float(v) if v.is_infinite() => {
                f.write_str(if *v > 0.0 { "inf" } else { "-inf" })
            }
            // `{:?}` keeps a `.0` on integral values and round-trips exactly.
            Const::Float(v) => write!(f, "{v:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        assert_eq!(Type::scalar(DType::I32).to_string(), "i32");
        assert_eq!(Type::pointer(DType::F16).to_string(), "ptr<f16>");
        assert_eq!(
            Type::pointer(DType::F32).with_shape(&[64, 32]).to_string(),
            "ptr<f32>[64,32]"
        );
        assert_eq!(Const::Float(1.0).to_string(), "1.0");
        assert_eq!(Const::Float(f64::NEG_INFINITY).to_string(), "-inf");
        assert_eq!(Type::block(DType::F32, &[4, 2]).numel(), 8);
    }
}
