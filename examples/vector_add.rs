//! Triton's vector add (tutorial 01) as a `#[jit]` function, launched on MLX arrays and
//! checked against MLX's own `add`.
//!
//! `cargo run --release --example vector_add`

use triton_metal::runtime::{cdiv, grid, out_like};
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, DType::F32, HardwareInfo};

/// The kernel, as a Triton user writes it (also used by the benches): `add_kernel()` returns
/// the `JitKernel`.
#[jit]
pub fn add_kernel(
    x_ptr: Ptr<F32>,
    y_ptr: Ptr<F32>,
    output_ptr: Ptr<F32>,
    n_elements: i32,
    BLOCK_SIZE: Constexpr,
) {
    let pid = tl::program_id(axis = 0);
    let block_start = pid * BLOCK_SIZE;
    let offsets = block_start + tl::arange(0, BLOCK_SIZE);
    let mask = offsets < n_elements;
    let x = tl::load(x_ptr + offsets, mask = mask);
    let y = tl::load(y_ptr + offsets, mask = mask);
    tl::store(output_ptr + offsets, x + y, mask = mask);
}

fn main() -> triton_metal::Result<()> {
    let add = add_kernel()?;

    // A size that is not a multiple of BLOCK_SIZE, so the mask matters.
    let n = 98_432;
    let x = mlx::random::uniform(&[n], F32, 0.0, 1.0, 0)?;
    let y = mlx::random::uniform(&[n], F32, 0.0, 1.0, 1)?;
    let out = add
        .launch()
        .grid(grid(move |meta| [cdiv(n, meta["BLOCK_SIZE"])]))
        .args((&x, &y, out_like(&x).fill(f64::NAN), n as i32))
        .constexpr("BLOCK_SIZE", 1024)
        .run()?;

    // The output is a lazy MLX array: it composes with MLX ops and is computed on demand.
    let reference = mlx::add(&x, &y)?;
    let max_err = max_abs_diff(&out[0], &reference)?;
    let hw = HardwareInfo::detect()?;
    println!("vector_add: n = {n}, ran on {} ({})", hw.backend, hw.name);
    println!("max |triton_metal - mlx.add| = {max_err:e}");
    let first: Vec<f32> = mlx::slice(&out[0], &[0], &[4])?.to_vec()?;
    println!("out[..4] = {first:?}");
    if max_err != 0.0 {
        return Err(triton_metal::Error::Runtime {
            kernel: "add_kernel".into(),
            msg: format!("result differs from MLX (max error {max_err})"),
        });
    }
    println!("verified: identical to MLX");
    Ok(())
}
