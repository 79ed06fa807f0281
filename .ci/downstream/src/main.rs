//! Triton's vector add from a dependent crate, through the public API only: the kernel is
//! built with the DSL, launched on MLX arrays and its result checked element by element.

use triton_metal::runtime::{cdiv, grid, out_like};
use triton_metal::{tl, Array, DType};

fn main() -> triton_metal::Result<()> {
    let add = tl::jit("add_kernel", |k| {
        let (x_ptr, y_ptr, out_ptr) = (
            k.ptr(DType::F32, "x_ptr"),
            k.ptr(DType::F32, "y_ptr"),
            k.ptr(DType::F32, "output_ptr"),
        );
        let n = k.scalar(DType::I32, "n_elements");
        let block = k.constexpr("BLOCK_SIZE");
        let offsets = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offsets.lt(n);
        let x = tl::load(x_ptr + offsets).mask(mask);
        let y = tl::load(y_ptr + offsets).mask(mask);
        tl::store(out_ptr + offsets, x + y).mask(mask);
    })?;

    let n = 1000;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    let (x, y) = (Array::from_slice(&xs, &[n])?, Array::from_slice(&ys, &[n])?);
    let out = add
        .launch()
        .grid(grid(move |meta| [cdiv(n, meta["BLOCK_SIZE"])]))
        .args((&x, &y, out_like(&x), n as i32))
        .constexpr("BLOCK_SIZE", 256)
        .run()?;
    let got: Vec<f32> = out[0].to_vec()?;
    let bad = (0..n).filter(|&i| got[i] != xs[i] + ys[i]).count();
    if bad != 0 {
        eprintln!("downstream: {bad} of {n} elements differ from x + y");
        std::process::exit(1);
    }
    println!("downstream: vector add of {n} elements verified");
    Ok(())
}
