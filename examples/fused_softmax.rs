//! Triton's fused softmax (tutorial 02): one program per row, the row held in one block.
//! Checked against `mlx::softmax`.
//!
//! `cargo run --release --example fused_softmax`

use triton_metal::runtime::out;
use triton_metal::testing::max_abs_diff;
use triton_metal::{
    mlx,
    tl::{self, JitKernel},
    DType::{F32, I32},
    Error,
};

/// The kernel, as a Triton user writes it (also used by the benches).
pub fn softmax_kernel() -> triton_metal::Result<JitKernel> {
    tl::jit("softmax_kernel", |k| {
        let output_ptr = k.ptr(F32, "output_ptr");
        let input_ptr = k.ptr(F32, "input_ptr");
        let input_row_stride = k.scalar(I32, "input_row_stride");
        let output_row_stride = k.scalar(I32, "output_row_stride");
        let n_cols = k.scalar(I32, "n_cols");
        let block = k.constexpr("BLOCK_SIZE");
        let row_idx = tl::program_id(0);
        let col_offsets = tl::arange(0, block);
        let mask = col_offsets.lt(n_cols);
        let row = tl::load(input_ptr + row_idx * input_row_stride + col_offsets)
            .mask(mask)
            .other(f32::NEG_INFINITY);
        // Subtract the row max for numerical stability.
        let numerator = (row - row.max(0)).exp();
        let denominator = numerator.sum(0);
        tl::store(
            output_ptr + row_idx * output_row_stride + col_offsets,
            numerator / denominator,
        )
        .mask(mask);
    })
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
