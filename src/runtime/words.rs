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
use crate::runtime::launch::fill_bytes;
use crate::runtime::OutputSpec;

/// The words holding `spec`, and the fill of each word (the fill's bytes repeated), or an
/// error where MLX's float init value cannot carry that pattern.
pub(crate) fn spec(
    kernel: &str,
    name: &str,
    spec: &OutputSpec,
    fill: Option<f64>,
) -> Result<(OutputSpec, Option<f64>)> {
    let n: usize = spec.shape.iter().product();
    let words = OutputSpec {
        shape: vec![MetalProgram::words(spec.dtype, n)],
        dtype: DType::F32,
    };
    let Some(v) = fill else {
        return Ok((words, None));
    };
    let mut one = vec![0u8; spec.dtype.size_bytes()];
    fill_bytes(&mut one, spec.dtype, v);
    let mut word = [0u8; 4];
    for (i, b) in word.iter_mut().enumerate() {
        *b = one[i % one.len()];
    }
    let w = f32::from_ne_bytes(word);
    // MLX converts the init value to each output's dtype on the device: a NaN or subnormal
    // float might not keep its bits there.
    if spec.dtype.size_bytes() > 4 && one[..4] != one[4..] || !(w.is_normal() || w == 0.0) {
        return Err(Error::Unsupported(format!(
            "kernel `{kernel}`: output `{name}` ({}) is filled with {v}, but in a kernel with \
             atomics Metal holds it in 32-bit words that MLX's float init value cannot fill \
             with that pattern; store the value from the kernel, or run on Target::Cpu, \
             Target::CpuCompiled or CUDA",
            spec.dtype
        )));
    }
    Ok((words, Some(w as f64)))
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

/// [`spec`] for each output the program keeps in words (`words[i]`), the others as given.
pub(crate) fn specs(
    kernel: &str,
    names: &[String],
    outputs: &[(OutputSpec, Option<f64>)],
    words: &[bool],
) -> Result<Vec<(OutputSpec, Option<f64>)>> {
    outputs
        .iter()
        .enumerate()
        .map(|(i, (o, fill))| match words.get(i) {
            Some(true) => spec(kernel, names.get(i).map_or("", |s| s), o, *fill),
            _ => Ok((o.clone(), *fill)),
        })
        .collect()
}

/// The program's outputs with each one kept in words read back as its own `outputs` spec.
pub(crate) fn read_all(
    outs: Vec<Array>,
    outputs: &[(OutputSpec, Option<f64>)],
    words: &[bool],
) -> Result<Vec<Array>> {
    outs.into_iter()
        .enumerate()
        .map(|(i, a)| match (words.get(i), outputs.get(i)) {
            (Some(true), Some((o, _))) => read(&a, o),
            _ => Ok(a),
        })
        .collect()
}
