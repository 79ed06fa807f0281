//! Triton's seeded dropout (tutorial 04): the keep-mask comes from Philox-4x32-10
//! (`tl::rand(seed, offsets)`), so the same seed gives the same mask without storing it.
//! Checked against an independent Rust Philox (Triton's algorithm) and MLX.
//!
//! `cargo run --release --example dropout`

use triton_metal::runtime::{cdiv, grid, out_like};
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, Array, DType::F32, Error};

/// Triton's `tl.rand`: Philox-4x32-10 on (offset, 0, 0, 0) keyed by the seed, first word
/// mapped to [0, 1).
fn triton_rand(seed: u64, offset: u32) -> f32 {
    let (mut c0, mut c1, mut c2, mut c3) = (offset, 0u32, 0u32, 0u32);
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    for _ in 0..10 {
        let (a, b) = (0xD251_1F53u32, 0xCD9E_8D57u32);
        let (p0, p2) = (c0, c2);
        c0 = ((b as u64 * p2 as u64) >> 32) as u32 ^ c1 ^ k0;
        c2 = ((a as u64 * p0 as u64) >> 32) as u32 ^ c3 ^ k1;
        c1 = b.wrapping_mul(p2);
        c3 = a.wrapping_mul(p0);
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    let x = c0 as i32;
    let x = if x < 0 {
        x.wrapping_neg().wrapping_sub(1)
    } else {
        x
    };
    x as f32 * 4.656_612_734_2e-10_f64 as f32
}

/// The kernel, as a Triton user writes it (also used by the benches): `dropout_kernel()`
/// returns the `JitKernel` named `seeded_dropout`.
#[jit(name = "seeded_dropout")]
pub fn dropout_kernel(
    x_ptr: Ptr<F32>,
    output_ptr: Ptr<F32>,
    n_elements: i32,
    p: f32,
    seed: i32,
    BLOCK_SIZE: Constexpr,
) {
    let offsets = tl::program_id(0) * BLOCK_SIZE + tl::arange(0, BLOCK_SIZE);
    let mask = offsets < n_elements;
    let x = tl::load(x_ptr + offsets, mask = mask);
    let random = tl::rand(seed, offsets);
    let x_keep = random > p;
    let output = tl::where_(x_keep, x / (1.0 - p), 0.0);
    tl::store(output_ptr + offsets, output, mask = mask);
}

fn main() -> triton_metal::Result<()> {
    let dropout = dropout_kernel()?;

    let n = 100_003usize;
    let p = 0.3f32;
    let x = mlx::random::uniform(&[n], F32, 1.0, 2.0, 0)?;
    let run = |seed: i32| {
        dropout
            .launch()
            .grid(grid(move |meta| [cdiv(n, meta["BLOCK_SIZE"])]))
            .args((&x, out_like(&x).fill(f64::NAN), n as i32, p, seed))
            .constexpr("BLOCK_SIZE", 1024)
            .run()
            .map(|mut v| v.remove(0))
    };
    let (a, b, c) = (run(123)?, run(123)?, run(7)?);
    let (a, b, c) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?, c.to_vec::<f32>()?);
    if a != b {
        return Err(Error::Runtime {
            kernel: "seeded_dropout".into(),
            msg: "same seed gave different masks".into(),
        });
    }
    let kept = a.iter().filter(|v| **v != 0.0).count() as f64 / n as f64;
    let differ = a
        .iter()
        .zip(&c)
        .filter(|(u, v)| (**u == 0.0) != (**v == 0.0))
        .count();

    // Reference: Triton's Philox in plain Rust gives the mask; MLX applies it.
    let keep: Vec<bool> = (0..n).map(|i| triton_rand(123, i as u32) > p).collect();
    let keep = Array::from_slice(&keep, &[n])?;
    let scale = mlx::full(&[1], 1.0 / (1.0 - p as f64), F32)?;
    let reference = mlx::where_(&keep, &mlx::multiply(&x, &scale)?, &mlx::zeros(&[1], F32)?)?;
    let got = Array::from_slice(&a, &[n])?;
    let max_err = max_abs_diff(&got, &reference)?;
    println!(
        "dropout n = {n}, p = {p}: kept {:.4} of elements (expect {:.2})",
        kept,
        1.0 - p
    );
    println!("same seed -> same mask; seed 7 differs on {differ} elements");
    println!("max |triton_metal - reference (Rust Philox + MLX)| = {max_err:e}");
    if max_err > 1e-6 || differ == 0 {
        return Err(Error::Runtime {
            kernel: "seeded_dropout".into(),
            msg: format!("max error {max_err}"),
        });
    }
    println!("verified: bit-compatible keep-mask, values match MLX");
    Ok(())
}
