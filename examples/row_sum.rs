//! Row sums: one program per row, looping over the columns in blocks and reducing each
//! block with `tl::sum` (a COALESCED hierarchical reduction on GPUs). Checked against
//! `mlx::sum`.
//!
//! `cargo run --release --example row_sum`

use triton_metal::runtime::out;
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, DType::F32, Error};

/// The kernel, as a Triton user writes it (also used by the benches): `row_sum_kernel()`
/// returns the `JitKernel` named `row_sum`.
#[jit(name = "row_sum")]
pub fn row_sum_kernel(x_ptr: Ptr<F32>, out_ptr: Ptr<F32>, n_cols: i32, BLOCK_SIZE: Constexpr) {
    let row = tl::program_id(0);
    let cols = tl::arange(0, BLOCK_SIZE);
    let mut acc = tl::zeros([BLOCK_SIZE], F32);
    for start in tl::range(0, n_cols, BLOCK_SIZE) {
        let c = start + cols;
        acc += tl::load(x_ptr + row * n_cols + c, mask = c < n_cols, other = 0.0);
    }
    tl::store(out_ptr + row, tl::sum(acc, axis = 0));
}

fn main() -> triton_metal::Result<()> {
    let row_sum = row_sum_kernel()?;

    let (rows, cols) = (1000usize, 3001usize);
    let x = mlx::random::uniform(&[rows, cols], F32, -1.0, 1.0, 0)?;
    let y = row_sum
        .launch()
        .grid([rows])
        .args((&x, out(&[rows], F32).fill(f64::NAN), cols as i32))
        .constexpr("BLOCK_SIZE", 512)
        .run()?;
    let reference = mlx::sum(&x, Some(&[1]), false)?;
    let max_err = max_abs_diff(&y[0], &reference)?;
    println!("row_sum {rows}x{cols}: max |triton_metal - mlx.sum| = {max_err:e}");
    if max_err > 1e-3 {
        return Err(Error::Runtime {
            kernel: "row_sum".into(),
            msg: format!("max error {max_err}"),
        });
    }
    println!("verified against MLX");
    Ok(())
}
