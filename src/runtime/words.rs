//! Outputs that a Metal kernel with atomics keeps in 32-bit words
//! ([`MetalProgram::word_outputs`]): MLX declares every output of such a kernel
//! `device atomic<T>*` and Metal's atomics are 32-bit, so an output of another width is
//! allocated as `float` words (its bytes rounded up to a multiple of 4, so that the word of
//! the last element lies inside the buffer) and read back as its own dtype afterwards.

use crate::array::Array;
use crate::codegen::MetalProgram;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mlx;
use crate::runtime::OutputSpec;

/// The words holding `spec`.
pub(crate) fn spec(spec: &OutputSpec) -> OutputSpec {
    let n: usize = spec.shape.iter().product();
    OutputSpec {
        shape: vec![MetalProgram::words(spec.dtype, n)],
        dtype: DType::F32,
    }
}

/// The float MLX's init value must be for the words of an output of `dtype` to start
/// holding the element whose bytes are `one` (repeated), where one can: the pattern must
/// repeat within a word, and MLX converts the init value to each output's dtype on the
/// device, where a NaN or subnormal float might not keep its bits.
pub(crate) fn init_for(dtype: DType, one: &[u8]) -> Option<f32> {
    let mut word = [0u8; 4];
    for (i, b) in word.iter_mut().enumerate() {
        *b = one[i % one.len()];
    }
    let w = f32::from_ne_bytes(word);
    let repeats = dtype.size_bytes() <= 4 || one[..4] == one[4..];
    (repeats && (w.is_normal() || w == 0.0)).then_some(w)
}

/// The output `spec` read back from the words the kernel wrote.
pub(crate) fn read(words: &Array, spec: &OutputSpec) -> Result<Array> {
    let n: usize = spec.shape.iter().product();
    let elems = mlx::view(words, spec.dtype)?;
    let flat = mlx::reshape(&elems, &[-1])?;
    let head = mlx::slice(&flat, &[0], &[n])?;
    let shape = spec
        .shape
        .iter()
        .map(|&d| i32::try_from(d))
        .collect::<std::result::Result<Vec<i32>, _>>()
        .map_err(|_| Error::InvalidArgument(format!("output shape {:?} too large", spec.shape)))?;
    mlx::reshape(&head, &shape)
}
