//! Triton's matmul (tutorial 03): block tiles, grouped program ordering for L2 reuse,
//! and a masked tail along K. Checked against `mlx::matmul`.
//!
//! `cargo run --release --example matmul`

use triton_metal::runtime::{cdiv, grid, out};
use triton_metal::testing::max_abs_diff;
use triton_metal::{jit, mlx, tl, DType::F32, Error};

/// The kernel, as a Triton user writes it (also used by the benches): `A`, `B`, `C` take
/// the dtypes of their arrays (the kernel is built once per dtype signature), accumulating
/// in f32 and storing in `C`'s dtype (Triton's tutorial has `c = accumulator.to(tl.float16)`
/// for f16).
#[jit(name = "matmul_kernel")]
#[rustfmt::skip]
pub fn matmul_kernel(
    a_ptr: Ptr, b_ptr: Ptr, c_ptr: Ptr,
    M: i32, N: i32, K: i32,
    stride_am: i32, stride_ak: i32,
    stride_bk: i32, stride_bn: i32,
    stride_cm: i32, stride_cn: i32,
    BLOCK_SIZE_M: Constexpr, BLOCK_SIZE_N: Constexpr, BLOCK_SIZE_K: Constexpr,
    GROUP_SIZE_M: Constexpr,
) {
    // Grouped ordering: programs that run together share rows of A.
    let pid = tl::program_id(axis = 0);
    let num_pid_m = tl::cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = tl::cdiv(N, BLOCK_SIZE_N);
    let num_pid_in_group = num_pid_n * GROUP_SIZE_M;
    let group_id = tl::floordiv(pid, num_pid_in_group);
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = tl::minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m;
    let pid_n = tl::floordiv(pid % num_pid_in_group, group_size_m);

    let offs_am = (pid_m * BLOCK_SIZE_M + tl::arange(0, BLOCK_SIZE_M)) % M;
    let offs_bn = (pid_n * BLOCK_SIZE_N + tl::arange(0, BLOCK_SIZE_N)) % N;
    let offs_k = tl::arange(0, BLOCK_SIZE_K);
    let mut a_ptrs = a_ptr + (offs_am.col() * stride_am + offs_k.row() * stride_ak);
    let mut b_ptrs = b_ptr + (offs_k.col() * stride_bk + offs_bn.row() * stride_bn);
    let mut accumulator = tl::zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype = F32);
    for k in tl::range(0, tl::cdiv(K, BLOCK_SIZE_K)) {
        let remaining = K - k * BLOCK_SIZE_K;
        let a = tl::load(a_ptrs, mask = offs_k.row() < remaining, other = 0.0);
        let b = tl::load(b_ptrs, mask = offs_k.col() < remaining, other = 0.0);
        accumulator = tl::dot(a, b, accumulator);
        a_ptrs += BLOCK_SIZE_K * stride_ak;
        b_ptrs += BLOCK_SIZE_K * stride_bk;
    }

    let offs_cm = pid_m * BLOCK_SIZE_M + tl::arange(0, BLOCK_SIZE_M);
    let offs_cn = pid_n * BLOCK_SIZE_N + tl::arange(0, BLOCK_SIZE_N);
    let c_ptrs = c_ptr + stride_cm * offs_cm.col() + stride_cn * offs_cn.row();
    let c_mask = (offs_cm.col() < M) & (offs_cn.row() < N);
    tl::store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask = c_mask);
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
