//! Triton's layer norm forward (tutorial 05): one program per row, looping over the row in
//! blocks to get the mean and variance, then normalising. Checked against
//! `mlx::layer_norm`.
//!
//! `cargo run --release --example layer_norm`

use triton_metal::runtime::out;
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, DType::F32, Error};

/// The kernel, as a Triton user writes it (also used by the benches): `X`, `Y`, `W`, `B`
/// take the dtypes of their arrays (the kernel is built once per dtype signature), with
/// statistics and arithmetic in f32.
#[jit(name = "layer_norm_fwd")]
#[rustfmt::skip]
pub fn layer_norm_kernel(
    mut X: Ptr, mut Y: Ptr, W: Ptr, B: Ptr,
    stride: i32, N: i32, eps: f32,
    BLOCK_SIZE: Constexpr,
) {
    let row = tl::program_id(0);
    X += row * stride;
    Y += row * stride;
    let offs = tl::arange(0, BLOCK_SIZE);
    let mut _mean = tl::zeros([BLOCK_SIZE], dtype = F32);
    for off in tl::range(0, N, BLOCK_SIZE) {
        let cols = off + offs;
        _mean += tl::load(X + cols, mask = cols < N, other = 0.0).to(F32);
    }
    let mean = tl::sum(_mean, axis = 0) / N;
    let mut _var = tl::zeros([BLOCK_SIZE], dtype = F32);
    for off in tl::range(0, N, BLOCK_SIZE) {
        let cols = off + offs;
        let x = tl::load(X + cols, mask = cols < N, other = 0.0).to(F32);
        let x = tl::where_(cols < N, x - mean, 0.0);
        _var += x * x;
    }
    let rstd = tl::rsqrt(tl::sum(_var, axis = 0) / N + eps);
    for off in tl::range(0, N, BLOCK_SIZE) {
        let cols = off + offs;
        let mask = cols < N;
        let w = tl::load(W + cols, mask = mask).to(F32);
        let b = tl::load(B + cols, mask = mask).to(F32);
        let x = tl::load(X + cols, mask = mask, other = 0.0).to(F32);
        tl::store(Y + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask = mask);
    }
}

fn main() -> triton_metal::Result<()> {
    let layer_norm = layer_norm_kernel()?;

    let (rows, cols) = (1151usize, 1000usize);
    let x = mlx::random::normal(&[rows, cols], F32, 0)?;
    let w = mlx::random::uniform(&[cols], F32, 0.5, 1.5, 1)?;
    let b = mlx::random::uniform(&[cols], F32, -0.5, 0.5, 2)?;
    let eps = 1e-5f32;
    let y = layer_norm
        .launch()
        .grid([rows])
        .args((
            &x,
            out(&[rows, cols], F32).fill(f64::NAN),
            &w,
            &b,
            cols as i32,
            cols as i32,
            eps,
        ))
        .constexpr("BLOCK_SIZE", 256)
        .run()?;
    let reference = mlx::layer_norm(&x, Some(&w), Some(&b), eps)?;
    let max_err = max_abs_diff(&y[0], &reference)?;
    println!("layer_norm {rows}x{cols}: max |triton_metal - mlx.layer_norm| = {max_err:e}");
    if max_err > 1e-4 {
        return Err(Error::Runtime {
            kernel: "layer_norm_fwd".into(),
            msg: format!("max error {max_err}"),
        });
    }
    println!("verified against MLX");
    Ok(())
}
