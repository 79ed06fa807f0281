//! Triton's persistent matmul (tutorial 09): a fixed number of programs, each looping over
//! output tiles with a stride of the grid size, in two forms: pointer arithmetic with masks
//! (`matmul_kernel_persistent`) and tensor descriptors made in the kernel
//! (`matmul_kernel_descriptor_persistent`, with and without the split epilogue). fp16
//! inputs, fp32 accumulation, fp16 output; ragged M, N and K; checked against an f64
//! reference.
//!
//! `cargo run --release --example persistent_matmul`

use triton_metal::runtime::{cdiv, out};
use triton_metal::tl::{self, JitKernel, Tensor};
use triton_metal::{
    jit, mlx, Array,
    DType::{F16, F32},
    Error,
};

/// Grouped ordering of tile `tile_id`: its (row, column) of tiles.
#[jit]
fn compute_pid(
    tile_id: Tensor,
    num_pid_in_group: Tensor,
    num_pid_m: Tensor,
    GROUP_SIZE_M: i64,
) -> (Tensor, Tensor) {
    let group_id = tl::floordiv(tile_id, num_pid_in_group);
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = tl::minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + tile_id % group_size_m;
    let pid_n = tl::floordiv(tile_id % num_pid_in_group, group_size_m);
    (pid_m, pid_n)
}

/// The persistent kernel with pointer arithmetic: tile rows and columns past M and N are
/// clamped to 0 for the loads, the K tail is masked, the store is masked.
#[jit(name = "matmul_kernel_persistent")]
#[rustfmt::skip]
pub fn matmul_kernel_persistent(
    a_ptr: Ptr<F16>, b_ptr: Ptr<F16>, c_ptr: Ptr<F16>,
    M: i32, N: i32, K: i32,
    stride_am: i32, stride_ak: i32,
    stride_bk: i32, stride_bn: i32,
    stride_cm: i32, stride_cn: i32,
    BLOCK_SIZE_M: Constexpr, BLOCK_SIZE_N: Constexpr, BLOCK_SIZE_K: Constexpr,
    GROUP_SIZE_M: Constexpr,
) {
    let start_pid = tl::program_id(axis = 0);
    let num_pid_m = tl::cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = tl::cdiv(N, BLOCK_SIZE_N);
    let k_tiles = tl::cdiv(K, BLOCK_SIZE_K);
    let num_tiles = num_pid_m * num_pid_n;
    let offs_k_for_mask = tl::arange(0, BLOCK_SIZE_K);
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;

    for tile_id in tl::range(start_pid, num_tiles, tl::num_programs(axis = 0)) {
        let (pid_m, pid_n) = compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M);
        let start_m = pid_m * BLOCK_SIZE_M;
        let start_n = pid_n * BLOCK_SIZE_N;
        let mut offs_am = start_m + tl::arange(0, BLOCK_SIZE_M);
        let mut offs_bn = start_n + tl::arange(0, BLOCK_SIZE_N);
        offs_am = tl::where_(offs_am < M, offs_am, 0);
        offs_bn = tl::where_(offs_bn < N, offs_bn, 0);

        let mut accumulator = tl::zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype = F32);
        for ki in tl::range(0, k_tiles) {
            let offs_k = ki * BLOCK_SIZE_K + tl::arange(0, BLOCK_SIZE_K);
            let a_ptrs = a_ptr + (offs_am.col() * stride_am + offs_k.row() * stride_ak);
            let b_ptrs = b_ptr + (offs_k.col() * stride_bk + offs_bn.row() * stride_bn);
            let remaining = K - ki * BLOCK_SIZE_K;
            let a = tl::load(a_ptrs, mask = offs_k_for_mask.row() < remaining, other = 0.0);
            let b = tl::load(b_ptrs, mask = offs_k_for_mask.col() < remaining, other = 0.0);
            accumulator = tl::dot(a, b, accumulator);
        }

        let offs_cm = pid_m * BLOCK_SIZE_M + tl::arange(0, BLOCK_SIZE_M);
        let offs_cn = pid_n * BLOCK_SIZE_N + tl::arange(0, BLOCK_SIZE_N);
        let c_ptrs = c_ptr + stride_cm * offs_cm.col() + stride_cn * offs_cn.row();
        let c_mask = (offs_cm.col() < M) & (offs_cn.row() < N);
        tl::store(c_ptrs, accumulator.to(F16), mask = c_mask);
    }
}

/// The persistent kernel with tensor descriptors made in the kernel: A is M x K and B is
/// N x K (both row-major), C is M x N; the descriptors bounds-check every tile. With
/// `EPILOGUE_SUBTILE = 1` the accumulator is stored as two halves of `BLOCK_SIZE_N / 2`
/// columns (split out of the accumulator with `reshape`, `permute` and `split`).
#[jit(name = "matmul_kernel_descriptor_persistent")]
#[rustfmt::skip]
pub fn matmul_kernel_descriptor_persistent(
    a_ptr: Ptr<F16>, b_ptr: Ptr<F16>, c_ptr: Ptr<F16>,
    M: i32, N: i32, K: i32,
    BLOCK_SIZE_M: Constexpr, BLOCK_SIZE_N: Constexpr, BLOCK_SIZE_K: Constexpr,
    GROUP_SIZE_M: Constexpr, EPILOGUE_SUBTILE: Constexpr,
) {
    let start_pid = tl::program_id(axis = 0);
    let num_pid_m = tl::cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = tl::cdiv(N, BLOCK_SIZE_N);
    let k_tiles = tl::cdiv(K, BLOCK_SIZE_K);
    let num_tiles = num_pid_m * num_pid_n;

    let a_desc = tl::make_tensor_descriptor(
        a_ptr,
        shape = [M, K],
        strides = [K, 1],
        block_shape = [BLOCK_SIZE_M, BLOCK_SIZE_K],
    );
    let b_desc = tl::make_tensor_descriptor(
        b_ptr,
        shape = [N, K],
        strides = [K, 1],
        block_shape = [BLOCK_SIZE_N, BLOCK_SIZE_K],
    );
    let c_block_n = if EPILOGUE_SUBTILE != 0 { BLOCK_SIZE_N / 2 } else { BLOCK_SIZE_N };
    let c_desc = tl::make_tensor_descriptor(
        c_ptr,
        shape = [M, N],
        strides = [N, 1],
        block_shape = [BLOCK_SIZE_M, c_block_n],
    );
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;

    for tile_id in tl::range(start_pid, num_tiles, tl::num_programs(axis = 0)) {
        let (pid_m, pid_n) = compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M);
        let offs_am = pid_m * BLOCK_SIZE_M;
        let offs_bn = pid_n * BLOCK_SIZE_N;

        let mut accumulator = tl::zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype = F32);
        for ki in tl::range(0, k_tiles) {
            let offs_k = ki * BLOCK_SIZE_K;
            let a = a_desc.load([offs_am, offs_k]);
            let b = b_desc.load([offs_bn, offs_k]);
            accumulator = tl::dot(a, b.trans(), accumulator);
        }

        if EPILOGUE_SUBTILE != 0 {
            let acc = tl::reshape(accumulator, (BLOCK_SIZE_M, 2, BLOCK_SIZE_N / 2));
            let acc = tl::permute(acc, (0, 2, 1));
            let (acc0, acc1) = tl::split(acc);
            c_desc.store([offs_am, offs_bn], acc0.to(F16));
            c_desc.store([offs_am, offs_bn + BLOCK_SIZE_N / 2], acc1.to(F16));
        } else {
            c_desc.store([offs_am, offs_bn], accumulator.to(F16));
        }
    }
}

const BLOCK_M: i64 = 64;
const BLOCK_N: i64 = 64;
const BLOCK_K: i64 = 32;
const GROUP_M: i64 = 8;
/// The persistent programs (Triton launches one per SM); fewer than the tiles, and not a
/// divisor of their number, so programs take different numbers of tiles.
const PROGRAMS: usize = 7;

/// `c = a @ b.T` in f64 for `a` of M x K and `b` of N x K.
fn reference(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|q| a[i * k + q] * b[j * k + q]).sum();
        }
    }
    c
}

fn values(a: &Array) -> triton_metal::Result<Vec<f64>> {
    Ok(a.to_vec::<half::f16>()?
        .iter()
        .map(|v| v.to_f64())
        .collect())
}

/// The largest `|got - want| / (1 + |want|)`, with NaN (an unwritten element) as infinite.
fn max_error(got: &Array, want: &[f64]) -> triton_metal::Result<f64> {
    Ok(values(got)?
        .iter()
        .zip(want)
        .map(|(g, w)| {
            let e = (g - w).abs() / (1.0 + w.abs());
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        })
        .fold(0.0, f64::max))
}

fn check(name: &str, err: f64) -> triton_metal::Result<()> {
    // fp16 output: one rounding of the f32 sum (2^-11 relative) dominates.
    println!("{name}: max |c - f64 reference| / (1 + |reference|) = {err:e}");
    if err > 2e-3 {
        return Err(Error::Runtime {
            kernel: name.into(),
            msg: format!("max error {err}"),
        });
    }
    Ok(())
}

fn run_persistent(k: &JitKernel, m: usize, n: usize, kk: usize) -> triton_metal::Result<f64> {
    let a = mlx::random::normal(&[m, kk], F16, 10)?;
    // B is N x K: element (k, j) of the K x N operand at j * K + k.
    let b = mlx::random::normal(&[n, kk], F16, 11)?;
    let tiles = cdiv(m, BLOCK_M as usize) * cdiv(n, BLOCK_N as usize);
    let c = k
        .launch()
        .grid([PROGRAMS.min(tiles)])
        .args((
            &a,
            &b,
            out(&[m, n], F16).fill(f64::NAN),
            m as i32,
            n as i32,
            kk as i32,
            kk as i32,
            1,
            1,
            kk as i32,
            n as i32,
            1,
        ))
        .constexpr("BLOCK_SIZE_M", BLOCK_M)
        .constexpr("BLOCK_SIZE_N", BLOCK_N)
        .constexpr("BLOCK_SIZE_K", BLOCK_K)
        .constexpr("GROUP_SIZE_M", GROUP_M)
        .run()?;
    let want = reference(&values(&a)?, &values(&b)?, m, n, kk);
    max_error(&c[0], &want)
}

fn run_descriptor(
    k: &JitKernel,
    m: usize,
    n: usize,
    kk: usize,
    subtile: i64,
) -> triton_metal::Result<f64> {
    let a = mlx::random::normal(&[m, kk], F16, 20)?;
    let b = mlx::random::normal(&[n, kk], F16, 21)?;
    let tiles = cdiv(m, BLOCK_M as usize) * cdiv(n, BLOCK_N as usize);
    let c = k
        .launch()
        .grid([PROGRAMS.min(tiles)])
        .args((
            &a,
            &b,
            out(&[m, n], F16).fill(f64::NAN),
            m as i32,
            n as i32,
            kk as i32,
        ))
        .constexpr("BLOCK_SIZE_M", BLOCK_M)
        .constexpr("BLOCK_SIZE_N", BLOCK_N)
        .constexpr("BLOCK_SIZE_K", BLOCK_K)
        .constexpr("GROUP_SIZE_M", GROUP_M)
        .constexpr("EPILOGUE_SUBTILE", subtile)
        .run()?;
    let want = reference(&values(&a)?, &values(&b)?, m, n, kk);
    max_error(&c[0], &want)
}

fn main() -> triton_metal::Result<()> {
    // Ragged: no size is a multiple of its block.
    let (m, n, k) = (333usize, 271usize, 190usize);
    let persistent = matmul_kernel_persistent()?;
    check(
        &format!("matmul_kernel_persistent {m}x{k} @ {k}x{n}"),
        run_persistent(&persistent, m, n, k)?,
    )?;
    // Triton's descriptors need rows of a multiple of 16 bytes (TMA's rule): N and K are
    // multiples of 8 fp16 elements, still not of the blocks.
    let (m, n, k) = (333usize, 264usize, 200usize);
    let descriptor = matmul_kernel_descriptor_persistent()?;
    for subtile in [0, 1] {
        check(
            &format!(
                "matmul_kernel_descriptor_persistent {m}x{k} @ {k}x{n}, EPILOGUE_SUBTILE={subtile}"
            ),
            run_descriptor(&descriptor, m, n, k, subtile)?,
        )?;
    }
    println!("verified against an f64 reference");
    Ok(())
}
