//! Bridges between MLX arrays and the emulator's buffers, so a launch built for a Mac can
//! be run unchanged on Linux (`runtime::MetalKernelCall::emulate`).

use super::EmuBuffer;
use crate::{Array, DType, Result};

/// Calls `$f::<T>` with the Rust element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            DType::Bool => $f::<bool>($($arg),*),
            DType::I8 => $f::<i8>($($arg),*),
            DType::I16 => $f::<i16>($($arg),*),
            DType::I32 => $f::<i32>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
            DType::U8 => $f::<u8>($($arg),*),
            DType::U16 => $f::<u16>($($arg),*),
            DType::U32 => $f::<u32>($($arg),*),
            DType::U64 => $f::<u64>($($arg),*),
            DType::F16 => $f::<half::f16>($($arg),*),
            DType::BF16 => $f::<half::bf16>($($arg),*),
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
        }
    };
}

fn buffer_of<T: crate::Element>(name: &str, a: &Array) -> Result<EmuBuffer> {
    Ok(EmuBuffer::new(name, &a.shape(), &a.to_vec::<T>()?))
}

fn array_of<T: crate::Element>(b: &EmuBuffer) -> Result<Array> {
    Array::from_slice(&b.to_vec::<T>()?, &b.shape)
}

impl EmuBuffer {
    /// The (evaluated, row-major) contents of an MLX array.
    pub fn from_array(name: &str, a: &Array) -> Result<EmuBuffer> {
        with_element!(a.dtype(), buffer_of(name, a))
    }

    /// An MLX array holding this buffer's elements.
    pub fn to_array(&self) -> Result<Array> {
        with_element!(self.dtype, array_of(self))
    }
}
