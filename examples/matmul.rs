//! Triton's matmul (tutorial 03): block tiles, grouped program ordering for L2 reuse,
//! and a masked tail along K. Checked against `mlx::matmul`.
//!
//! `cargo run --release --example matmul`

use triton_metal::runtime::{cdiv, grid, out};
use triton_metal::testing::max_abs_diff;
use triton_metal::{
    mlx,
    tl::{self, JitKernel},
    DType::{F32, I32},
    Error,
};

/// The kernel, as a Triton user writes it (also used by the benches).
pub fn matmul_kernel() -> triton_metal::Result<JitKernel> {
    matmul_kernel_for(F32)
}

/// The kernel for `A`, `B`, `C` of `dtype`, accumulating in f32 (Triton's tutorial with
/// `c = accumulator.to(tl.float16)` for f16).
pub fn matmul_kernel_for(dtype: triton_metal::DType) -> triton_metal::Result<JitKernel> {
    tl::jit("matmul_kernel", move |k| {
        let (a_ptr, b_ptr, c_ptr) = (
            k.ptr(dtype, "a_ptr"),
            k.ptr(dtype, "b_ptr"),
            k.ptr(dtype, "c_ptr"),
        );
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (stride_am, stride_ak) = (k.scalar(I32, "stride_am"), k.scalar(I32, "stride_ak"));
        let (stride_bk, stride_bn) = (k.scalar(I32, "stride_bk"), k.scalar(I32, "stride_bn"));
        let (stride_cm, stride_cn) = (k.scalar(I32, "stride_cm"), k.scalar(I32, "stride_cn"));
        let block_m = k.constexpr("BLOCK_SIZE_M");
        let block_n = k.constexpr("BLOCK_SIZE_N");
        let block_k = k.constexpr("BLOCK_SIZE_K");
        let group_m = k.constexpr("GROUP_SIZE_M");

        // Grouped ordering: programs that run together share rows of A.
        let pid = tl::program_id(0);
        let num_pid_m = tl::cdiv(m, block_m);
        let num_pid_n = tl::cdiv(n, block_n);
        let num_pid_in_group = num_pid_n * group_m;
        let group_id = tl::floordiv(pid, num_pid_in_group);
        let first_pid_m = group_id * group_m;
        let group_size_m = tl::minimum(num_pid_m - first_pid_m, group_m);
        let pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m;
        let pid_n = tl::floordiv(pid % num_pid_in_group, group_size_m);

        let offs_am = (pid_m * block_m + tl::arange(0, block_m)) % m;
        let offs_bn = (pid_n * block_n + tl::arange(0, block_n)) % n;
        let offs_k = tl::arange(0, block_k);
        let a_ptrs = a_ptr + (offs_am.col() * stride_am + offs_k.row() * stride_ak);
        let b_ptrs = b_ptr + (offs_k.col() * stride_bk + offs_bn.row() * stride_bn);
        let acc = tl::zeros([block_m, block_n], F32);
        let (acc, _, _) = tl::range(0, tl::cdiv(kk, block_k), 1).fold(
            (acc, a_ptrs, b_ptrs),
            |step, (acc, a_ptrs, b_ptrs)| {
                let remaining = kk - step * block_k;
                let a = tl::load(a_ptrs).mask(offs_k.row().lt(remaining)).other(0.0);
                let b = tl::load(b_ptrs).mask(offs_k.col().lt(remaining)).other(0.0);
                let acc = tl::dot(a, b, acc);
                (
                    acc,
                    a_ptrs + block_k * stride_ak,
                    b_ptrs + block_k * stride_bk,
                )
            },
        );

        let offs_cm = pid_m * block_m + tl::arange(0, block_m);
        let offs_cn = pid_n * block_n + tl::arange(0, block_n);
        let c_ptrs = c_ptr + stride_cm * offs_cm.col() + stride_cn * offs_cn.row();
        let c_mask = offs_cm.col().lt(m) & offs_cn.row().lt(n);
        tl::store(c_ptrs, acc.cast(dtype)).mask(c_mask);
    })
}

fn main() -> triton_metal::Result<()> {
    let matmul = matmul_kernel()?;

    // Ragged sizes: M, N and K are not multiples of the blocks.
    let (m, n, k) = (333usize, 271usize, 190usize);
    let a = mlx::random::normal(&[m, k], F32, 0)?;
    let b = mlx::random::normal(&[k, n], F32, 1)?;
    let c = matmul
        .launch()
        .grid(grid(move |meta| {
            [cdiv(m, meta["BLOCK_SIZE_M"]) * cdiv(n, meta["BLOCK_SIZE_N"])]
        }))
        .args((
            &a,
            &b,
            out(&[m, n], F32).fill(f64::NAN),
            m as i32,
            n as i32,
            k as i32,
            k as i32,
            1,
            n as i32,
            1,
            n as i32,
            1,
        ))
        .constexpr("BLOCK_SIZE_M", 64)
        .constexpr("BLOCK_SIZE_N", 64)
        .constexpr("BLOCK_SIZE_K", 32)
        .constexpr("GROUP_SIZE_M", 8)
        .run()?;
    // The reference runs on MLX's CPU device: plain f32 products and sums. (MLX's GPU
    // matmul on an H100 differed from both by 1.9e-2 here, the size of TF32 rounding.)
    let device = triton_metal::device::default_device()?;
    triton_metal::device::set_default_device(triton_metal::Device::Cpu)?;
    let reference = mlx::matmul(&a, &b);
    triton_metal::device::set_default_device(device)?;
    let reference = reference?;
    let max_err = max_abs_diff(&c[0], &reference)?;
    println!("matmul {m}x{k} @ {k}x{n}: max |triton_metal - mlx.matmul| = {max_err:e}");
    if max_err > 1e-3 {
        return Err(Error::Runtime {
            kernel: "matmul_kernel".into(),
            msg: format!("max error {max_err}"),
        });
    }
    println!("verified against MLX");
    Ok(())
}
