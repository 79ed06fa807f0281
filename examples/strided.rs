//! The strided kernel of the seed backend's README: each program touches
//! `pid * BLOCK_SIZE + arange(0, BLOCK_SIZE) * stride`. Checked against MLX on the exact
//! set of covered elements (the rest keep the output's fill value).
//!
//! `cargo run --release --example strided`

use triton_metal::runtime::{cdiv, grid, out_like};
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, Array, DType::F32, Error};

/// The kernel, as a Triton user writes it (also used by the benches): `strided_kernel()`
/// returns the `JitKernel`.
#[jit]
pub fn strided_kernel(
    x_ptr: Ptr<F32>,
    output_ptr: Ptr<F32>,
    stride: i32,
    n_elements: i32,
    BLOCK_SIZE: Constexpr,
) {
    let block_start = tl::program_id(0) * BLOCK_SIZE;
    let indices = block_start + tl::arange(0, BLOCK_SIZE) * stride;
    let mask = indices < n_elements;
    let x = tl::load(x_ptr + indices, mask = mask);
    tl::store(output_ptr + indices, x * 2.0, mask = mask);
}

fn main() -> triton_metal::Result<()> {
    let strided = strided_kernel()?;

    let (n, stride, block) = (50_001usize, 3usize, 256usize);
    let x = mlx::random::normal(&[n], F32, 0)?;
    let y = strided
        .launch()
        .grid(grid(move |meta| [cdiv(n, meta["BLOCK_SIZE"])]))
        .args((&x, out_like(&x).fill(-7.0), stride as i32, n as i32))
        .constexpr("BLOCK_SIZE", block as i64)
        .run()?;

    let mut covered = vec![false; n];
    for pid in 0..cdiv(n, block) {
        for j in 0..block {
            let i = pid * block + j * stride;
            if i < n {
                covered[i] = true;
            }
        }
    }
    let count = covered.iter().filter(|c| **c).count();
    let covered = Array::from_slice(&covered, &[n])?;
    let two = mlx::full(&[1], 2.0, F32)?;
    let reference = mlx::where_(
        &covered,
        &mlx::multiply(&x, &two)?,
        &mlx::full(&[1], -7.0, F32)?,
    )?;
    let max_err = max_abs_diff(&y[0], &reference)?;
    println!("strided n = {n}, stride = {stride}: {count} elements written");
    println!("max |triton_metal - reference| = {max_err:e}");
    if max_err != 0.0 {
        return Err(Error::Runtime {
            kernel: "strided_kernel".into(),
            msg: format!("max error {max_err}"),
        });
    }
    println!("verified against MLX");
    Ok(())
}
