//! Triton's grouped GEMM (tutorial 08): one launch multiplies several matrix pairs of
//! different sizes, `C_g = A_g @ B_g`, with a fixed number of programs that walk every
//! group's output tiles in turn (`tile_idx += NUM_SM`), as the tutorial's persistent loop
//! does. fp16 inputs, fp32 accumulation, fp16 outputs; ragged M, N and K per group (no size
//! a multiple of its block, so every tile edge is masked); each group checked against MLX's
//! matmul of the same inputs in f32.
//!
//! Two forms of the kernel:
//! - `grouped_matmul_kernel`, the tutorial's own: tables of addresses (`group_a_ptrs`, ...)
//!   read in the kernel and cast to pointers (`.to(tl::pointer_type(F16))`), passed as
//!   `ptr_table(..)` arguments. MLX arrays have no stable addresses, so the launch hands the
//!   kernel its own: they reach exactly the table's arrays, bounds-checked. The CPU targets
//!   run it; Metal and CUDA (whose kernels take a fixed list of arrays) refuse it with
//!   `Unsupported`, which this example reports and moves on from.
//! - `grouped_matmul_offsets_kernel`, the same loop on every target: all groups' A, B and C
//!   concatenated into three flat arrays, with each group's element offset loaded in the
//!   kernel where the tutorial loads an address.
//!
//! `cargo run --release --example grouped_gemm`

use triton_metal::runtime::{out, ptr_table, Arg};
use triton_metal::tl::{self, JitKernel, Tensor};
use triton_metal::{
    jit, mlx, Array,
    DType::{F16, F32, I32},
    Error,
};

/// One output tile of group `g`'s `C = A @ B` (`M x K` times `K x N`, row-major with leading
/// dimensions `lda`, `ldb`, `ldc`): the tile's rows, columns and the K tail masked.
#[jit]
#[rustfmt::skip]
fn gemm_tile(
    a_ptr: Tensor, b_ptr: Tensor, c_ptr: Tensor,
    gm: Tensor, gn: Tensor, gk: Tensor,
    lda: Tensor, ldb: Tensor, ldc: Tensor,
    tile_m_idx: Tensor, tile_n_idx: Tensor,
    BLOCK_SIZE_M: i64, BLOCK_SIZE_N: i64, BLOCK_SIZE_K: i64,
) {
    let offs_am = tile_m_idx * BLOCK_SIZE_M + tl::arange(0, BLOCK_SIZE_M);
    let offs_bn = tile_n_idx * BLOCK_SIZE_N + tl::arange(0, BLOCK_SIZE_N);
    let offs_k = tl::arange(0, BLOCK_SIZE_K);
    let mut a_ptrs = a_ptr + offs_am.col() * lda + offs_k.row();
    let mut b_ptrs = b_ptr + offs_k.col() * ldb + offs_bn.row();
    let mut accumulator = tl::zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype = F32);
    for kk in tl::range(0, tl::cdiv(gk, BLOCK_SIZE_K)) {
        let k_left = gk - kk * BLOCK_SIZE_K;
        let a = tl::load(a_ptrs, mask = (offs_am.col() < gm) & (offs_k.row() < k_left), other = 0.0);
        let b = tl::load(b_ptrs, mask = (offs_k.col() < k_left) & (offs_bn.row() < gn), other = 0.0);
        accumulator = tl::dot(a, b, accumulator);
        a_ptrs += BLOCK_SIZE_K;
        b_ptrs += BLOCK_SIZE_K * ldb;
    }
    let c = accumulator.to(F16);
    let c_ptrs = c_ptr + ldc * offs_am.col() + offs_bn.row();
    tl::store(c_ptrs, c, mask = (offs_am.col() < gm) & (offs_bn.row() < gn));
}

/// Tutorial 08's kernel: the groups' matrices are reached through tables of addresses.
#[jit]
#[rustfmt::skip]
pub fn grouped_matmul_kernel(
    group_a_ptrs: Ptr<I64>, group_b_ptrs: Ptr<I64>, group_c_ptrs: Ptr<I64>,
    group_gemm_sizes: Ptr<I32>,  // [M, N, K] per group
    g_lds: Ptr<I32>,             // [lda, ldb, ldc] per group
    group_size: i32,
    NUM_SM: Constexpr,
    BLOCK_SIZE_M: Constexpr, BLOCK_SIZE_N: Constexpr, BLOCK_SIZE_K: Constexpr,
) {
    let mut tile_idx = tl::program_id(axis = 0);
    // Triton's `last_problem_end = 0`: a scalar i32 carried through the loop.
    let mut last_problem_end = tl::zeros([0i64; 0], dtype = I32);
    for g in tl::range(0, group_size) {
        let gm = tl::load(group_gemm_sizes + g * 3);
        let gn = tl::load(group_gemm_sizes + g * 3 + 1);
        let gk = tl::load(group_gemm_sizes + g * 3 + 2);
        let num_m_tiles = tl::cdiv(gm, BLOCK_SIZE_M);
        let num_n_tiles = tl::cdiv(gn, BLOCK_SIZE_N);
        let num_tiles = num_m_tiles * num_n_tiles;
        while (tile_idx >= last_problem_end) & (tile_idx < last_problem_end + num_tiles) {
            let lda = tl::load(g_lds + g * 3);
            let ldb = tl::load(g_lds + g * 3 + 1);
            let ldc = tl::load(g_lds + g * 3 + 2);
            let a_ptr = tl::load(group_a_ptrs + g).to(tl::pointer_type(F16));
            let b_ptr = tl::load(group_b_ptrs + g).to(tl::pointer_type(F16));
            let c_ptr = tl::load(group_c_ptrs + g).to(tl::pointer_type(F16));
            let tile_idx_in_gemm = tile_idx - last_problem_end;
            let tile_m_idx = tl::floordiv(tile_idx_in_gemm, num_n_tiles);
            let tile_n_idx = tile_idx_in_gemm % num_n_tiles;
            gemm_tile(a_ptr, b_ptr, c_ptr, gm, gn, gk, lda, ldb, ldc, tile_m_idx, tile_n_idx,
                BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K);
            tile_idx += NUM_SM;
        }
        last_problem_end += num_tiles;
    }
}

/// The same loop for every target: A, B and C are flat arrays holding every group's
/// matrix, and `group_offsets` gives each group's first element in each (`[a, b, c]`).
#[jit]
#[rustfmt::skip]
pub fn grouped_matmul_offsets_kernel(
    a_base: Ptr<F16>, b_base: Ptr<F16>, c_base: Ptr<F16>,
    group_offsets: Ptr<I32>,     // [a, b, c] element offsets per group
    group_gemm_sizes: Ptr<I32>,  // [M, N, K] per group
    g_lds: Ptr<I32>,             // [lda, ldb, ldc] per group
    group_size: i32,
    NUM_SM: Constexpr,
    BLOCK_SIZE_M: Constexpr, BLOCK_SIZE_N: Constexpr, BLOCK_SIZE_K: Constexpr,
) {
    let mut tile_idx = tl::program_id(axis = 0);
    // Triton's `last_problem_end = 0`: a scalar i32 carried through the loop.
    let mut last_problem_end = tl::zeros([0i64; 0], dtype = I32);
    for g in tl::range(0, group_size) {
        let gm = tl::load(group_gemm_sizes + g * 3);
        let gn = tl::load(group_gemm_sizes + g * 3 + 1);
        let gk = tl::load(group_gemm_sizes + g * 3 + 2);
        let num_m_tiles = tl::cdiv(gm, BLOCK_SIZE_M);
        let num_n_tiles = tl::cdiv(gn, BLOCK_SIZE_N);
        let num_tiles = num_m_tiles * num_n_tiles;
        while (tile_idx >= last_problem_end) & (tile_idx < last_problem_end + num_tiles) {
            let lda = tl::load(g_lds + g * 3);
            let ldb = tl::load(g_lds + g * 3 + 1);
            let ldc = tl::load(g_lds + g * 3 + 2);
            let a_ptr = a_base + tl::load(group_offsets + g * 3);
            let b_ptr = b_base + tl::load(group_offsets + g * 3 + 1);
            let c_ptr = c_base + tl::load(group_offsets + g * 3 + 2);
            let tile_idx_in_gemm = tile_idx - last_problem_end;
            let tile_m_idx = tl::floordiv(tile_idx_in_gemm, num_n_tiles);
            let tile_n_idx = tile_idx_in_gemm % num_n_tiles;
            gemm_tile(a_ptr, b_ptr, c_ptr, gm, gn, gk, lda, ldb, ldc, tile_m_idx, tile_n_idx,
                BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K);
            tile_idx += NUM_SM;
        }
        last_problem_end += num_tiles;
    }
}

const BLOCK_M: i64 = 32;
const BLOCK_N: i64 = 32;
const BLOCK_K: i64 = 16;
/// Programs of the persistent loop (the tutorial launches one per SM): fewer than the
/// tiles and no divisor of their number, so programs take different numbers of tiles and
/// cross group boundaries.
const PROGRAMS: usize = 5;

/// `(M, N, K)` per group: ragged, one row, one column, K below and above one block.
const GROUPS: [(usize, usize, usize); 5] = [
    (70, 33, 45),
    (16, 64, 32),
    (1, 17, 100),
    (129, 40, 19),
    (9, 1, 7),
];

/// Deterministic values in [-2, 2) as f16 (exactly representable steps of 1/64).
fn values(n: usize, seed: u64) -> Vec<half::f16> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            half::f16::from_f32(((s >> 20) % 256) as f32 / 64.0 - 2.0)
        })
        .collect()
}

/// The largest `|c - ref| / (1 + |ref|)` of group `g`'s output (`c`, any shape holding
/// `m * n` values in order) against MLX's f32 matmul; NaN (an element never written) is
/// infinite.
fn group_error(
    c: &[half::f16],
    a: &[half::f16],
    b: &[half::f16],
    (m, n, k): (usize, usize, usize),
) -> triton_metal::Result<f64> {
    let f32s = |v: &[half::f16], shape: &[usize]| {
        Array::from_slice(v, shape).and_then(|x| mlx::astype(&x, F32))
    };
    let want = mlx::matmul(&f32s(a, &[m, k])?, &f32s(b, &[k, n])?)?.to_vec::<f32>()?;
    Ok(c.iter()
        .zip(&want)
        .map(|(g, w)| {
            let e = (g.to_f64() - *w as f64).abs() / (1.0 + w.abs() as f64);
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
    println!("{name}: max |c - MLX matmul| / (1 + |MLX matmul|) = {err:e}");
    if err > 2e-3 {
        return Err(Error::Runtime {
            kernel: name.into(),
            msg: format!("max error {err}"),
        });
    }
    Ok(())
}

struct Problem {
    a: Vec<Vec<half::f16>>,
    b: Vec<Vec<half::f16>>,
    sizes: Array,
    lds: Array,
    tiles: usize,
}

fn problem() -> triton_metal::Result<Problem> {
    let a = GROUPS
        .iter()
        .enumerate()
        .map(|(g, &(m, _, k))| values(m * k, 2 * g as u64 + 1))
        .collect();
    let b = GROUPS
        .iter()
        .enumerate()
        .map(|(g, &(_, n, k))| values(k * n, 2 * g as u64 + 2))
        .collect();
    let sizes: Vec<i32> = GROUPS
        .iter()
        .flat_map(|&(m, n, k)| [m as i32, n as i32, k as i32])
        .collect();
    let lds: Vec<i32> = GROUPS
        .iter()
        .flat_map(|&(_, n, k)| [k as i32, n as i32, n as i32])
        .collect();
    let tiles = GROUPS
        .iter()
        .map(|&(m, n, _)| m.div_ceil(BLOCK_M as usize) * n.div_ceil(BLOCK_N as usize))
        .sum();
    Ok(Problem {
        a,
        b,
        sizes: Array::from_slice(&sizes, &[sizes.len()])?,
        lds: Array::from_slice(&lds, &[lds.len()])?,
        tiles,
    })
}

fn configure<'k>(k: &'k JitKernel, p: &Problem) -> triton_metal::runtime::Launch<'k> {
    k.launch()
        .grid([PROGRAMS.min(p.tiles)])
        .constexpr("NUM_SM", PROGRAMS.min(p.tiles) as i64)
        .constexpr("BLOCK_SIZE_M", BLOCK_M)
        .constexpr("BLOCK_SIZE_N", BLOCK_N)
        .constexpr("BLOCK_SIZE_K", BLOCK_K)
}

/// The flat-array form; the worst group's error.
fn run_offsets(p: &Problem) -> triton_metal::Result<f64> {
    let (mut a, mut b, mut offsets, mut c_len) = (Vec::new(), Vec::new(), Vec::new(), 0usize);
    for (g, &(m, n, _)) in GROUPS.iter().enumerate() {
        offsets.extend([a.len() as i32, b.len() as i32, c_len as i32]);
        a.extend_from_slice(&p.a[g]);
        b.extend_from_slice(&p.b[g]);
        c_len += m * n;
    }
    let k = grouped_matmul_offsets_kernel()?;
    let c = configure(&k, p)
        .args((
            &Array::from_slice(&a, &[a.len()])?,
            &Array::from_slice(&b, &[b.len()])?,
            out(&[c_len], F16).fill(f64::NAN),
            &Array::from_slice(&offsets, &[offsets.len()])?,
            &p.sizes,
            &p.lds,
            GROUPS.len() as i32,
        ))
        .run()?;
    let c = c[0].to_vec::<half::f16>()?;
    let mut worst = 0.0f64;
    for (g, &(m, n, k)) in GROUPS.iter().enumerate() {
        let at = offsets[3 * g + 2] as usize;
        worst = worst.max(group_error(
            &c[at..at + m * n],
            &p.a[g],
            &p.b[g],
            (m, n, k),
        )?);
    }
    Ok(worst)
}

/// The pointer-table form; the worst group's error.
fn run_tables(p: &Problem) -> triton_metal::Result<f64> {
    let arrays = |v: &[Vec<half::f16>], dims: &dyn Fn(usize) -> [usize; 2]| {
        v.iter()
            .enumerate()
            .map(|(g, x)| Array::from_slice(x, &dims(g)))
            .collect::<triton_metal::Result<Vec<Array>>>()
    };
    let a = arrays(&p.a, &|g| [GROUPS[g].0, GROUPS[g].2])?;
    let b = arrays(&p.b, &|g| [GROUPS[g].2, GROUPS[g].1])?;
    let c: Vec<Arg> = GROUPS
        .iter()
        .map(|&(m, n, _)| out(&[m, n], F16).fill(f64::NAN))
        .collect();
    let k = grouped_matmul_kernel()?;
    let c = configure(&k, p)
        .args((
            ptr_table(&a),
            ptr_table(&b),
            ptr_table(c),
            &p.sizes,
            &p.lds,
            GROUPS.len() as i32,
        ))
        .run()?;
    let mut worst = 0.0f64;
    for (g, &size) in GROUPS.iter().enumerate() {
        let cg = c[g].to_vec::<half::f16>()?;
        worst = worst.max(group_error(&cg, &p.a[g], &p.b[g], size)?);
    }
    Ok(worst)
}

fn main() -> triton_metal::Result<()> {
    let p = problem()?;
    let shapes: Vec<String> = GROUPS
        .iter()
        .map(|(m, n, k)| format!("{m}x{k} @ {k}x{n}"))
        .collect();
    println!(
        "{} groups: {}; {} tiles over {PROGRAMS} programs",
        GROUPS.len(),
        shapes.join(", "),
        p.tiles
    );
    check(
        "grouped_matmul_offsets_kernel (flat arrays + offsets)",
        run_offsets(&p)?,
    )?;
    match run_tables(&p) {
        Ok(err) => check("grouped_matmul_kernel (pointer tables)", err)?,
        // Metal and CUDA take no tables of addresses; the CPU targets never say this.
        Err(Error::Unsupported(m))
            if m.contains("not supported on Metal") || m.contains("not supported on CUDA") =>
        {
            println!("grouped_matmul_kernel (pointer tables): not run on this target: {m}")
        }
        Err(e) => return Err(e),
    }
    println!("verified against MLX's matmul, group by group");
    Ok(())
}
