//! Triton's layer norm forward (tutorial 05): one program per row, looping over the row in
//! blocks to get the mean and variance, then normalising. Checked against
//! `mlx::layer_norm`.
//!
//! `cargo run --release --example layer_norm`

use triton_metal::runtime::out;
use triton_metal::testing::max_abs_diff;
use triton_metal::{
    mlx,
    tl::{self, JitKernel},
    DType::{F32, I32},
    Error,
};

/// The kernel, as a Triton user writes it (also used by the benches).
pub fn layer_norm_kernel() -> triton_metal::Result<JitKernel> {
    layer_norm_kernel_for(F32)
}

/// The kernel for `X`, `Y`, `W`, `B` of `dtype`; statistics and arithmetic in f32.
pub fn layer_norm_kernel_for(dtype: triton_metal::DType) -> triton_metal::Result<JitKernel> {
    tl::jit("layer_norm_fwd", move |k| {
        let x_ptr = k.ptr(dtype, "X");
        let y_ptr = k.ptr(dtype, "Y");
        let w_ptr = k.ptr(dtype, "W");
        let b_ptr = k.ptr(dtype, "B");
        let stride = k.scalar(I32, "stride");
        let n = k.scalar(I32, "N");
        let eps = k.scalar(F32, "eps");
        let block = k.constexpr("BLOCK_SIZE");
        let row = tl::program_id(0);
        let x_row = x_ptr + row * stride;
        let y_row = y_ptr + row * stride;
        let cols0 = tl::arange(0, block);

        let sum = tl::range(0, n, block).fold(tl::zeros([block], F32), |off, acc| {
            let cols = off + cols0;
            acc + tl::load(x_row + cols).mask(cols.lt(n)).other(0.0).cast(F32)
        });
        let mean = sum.sum(0) / n;
        let var = tl::range(0, n, block).fold(tl::zeros([block], F32), |off, acc| {
            let cols = off + cols0;
            let x = tl::load(x_row + cols).mask(cols.lt(n)).other(0.0).cast(F32);
            let d = tl::where_(cols.lt(n), x - mean, 0.0);
            acc + d * d
        });
        let rstd = tl::rsqrt(var.sum(0) / n + eps);
        tl::range(0, n, block).for_each(|off| {
            let cols = off + cols0;
            let mask = cols.lt(n);
            let w = tl::load(w_ptr + cols).mask(mask).cast(F32);
            let b = tl::load(b_ptr + cols).mask(mask).cast(F32);
            let x = tl::load(x_row + cols).mask(mask).other(0.0).cast(F32);
            tl::store(y_row + cols, ((x - mean) * rstd * w + b).cast(dtype)).mask(mask);
        });
    })
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
