//! Triton's fused softmax (tutorial 02): one program per row, the row held in one block.
//! Checked against `mlx::softmax`.
//!
//! `cargo run --release --example fused_softmax`

use triton_metal::runtime::out;
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, DType::F32, Error};

/// The kernel, as a Triton user writes it (also used by the benches): `softmax_kernel()`
/// returns the `JitKernel`.
#[jit]
pub fn softmax_kernel(
    output_ptr: Ptr<F32>,
    input_ptr: Ptr<F32>,
    input_row_stride: i32,
    output_row_stride: i32,
    n_cols: i32,
    BLOCK_SIZE: Constexpr,
) {
    let row_idx = tl::program_id(0);
    let col_offsets = tl::arange(0, BLOCK_SIZE);
    let mask = col_offsets < n_cols;
    let input_ptrs = input_ptr + row_idx * input_row_stride + col_offsets;
    let row = tl::load(input_ptrs, mask = mask, other = f32::NEG_INFINITY);
    // Subtract the row max for numerical stability.
    let numerator = tl::exp(row - tl::max(row, axis = 0));
    let denominator = tl::sum(numerator, axis = 0);
    let output_ptrs = output_ptr + row_idx * output_row_stride + col_offsets;
    tl::store(output_ptrs, numerator / denominator, mask = mask);
}

fn main() -> triton_metal::Result<()> {
    let softmax = softmax_kernel()?;

    // 781 columns: the block (1024) is masked at the end of every row.
    let (rows, cols) = (1823usize, 781usize);
    let x = mlx::random::normal(&[rows, cols], F32, 0)?;
    let block = cols.next_power_of_two() as i64;
    let y = softmax
        .launch()
        .grid([rows])
        .args((
            out(&[rows, cols], F32).fill(f64::NAN),
            &x,
            cols as i32,
            cols as i32,
            cols as i32,
        ))
        .constexpr("BLOCK_SIZE", block)
        .run()?;
    let reference = mlx::softmax(&x, &[1], true)?;
    let max_err = max_abs_diff(&y[0], &reference)?;
    println!("fused_softmax {rows}x{cols}: max |triton_metal - mlx.softmax| = {max_err:e}");
    if max_err > 1e-6 {
        return Err(Error::Runtime {
            kernel: "softmax_kernel".into(),
            msg: format!("max error {max_err}"),
        });
    }
    println!("verified against MLX");
    Ok(())
}
