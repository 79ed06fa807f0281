//! Triton's fused attention forward (tutorial 06, "Flash Attention v2"): one program per
//! `BLOCK_M` query rows of one (batch, head); it walks the keys in blocks of `BLOCK_N`,
//! keeping a running row maximum `m_i`, a running denominator `l_i` and the unnormalised
//! output `acc` in registers (online softmax in base 2), so the `N_CTX x N_CTX` score matrix
//! never reaches memory. Causal and non-causal, head dims 64 and 128, f16 inputs with f32
//! accumulation, sequence lengths that are not multiples of the blocks (masked tails).
//! Checked against MLX (matmul, mask, softmax, matmul in f32).
//!
//! `cargo run --release --example fused_attention`

use triton_metal::runtime::{cdiv, grid, out};
use triton_metal::testing::max_abs_diff;
use triton_metal::{
    jit, mlx,
    tl::{self, JitKernel},
    Array,
    DType::{F16, F32},
    Error,
};

/// The kernel, as a Triton user writes it: `Q`, `K`, `V` and `Out` are `[Z, H, N_CTX,
/// HEAD_DIM]` f16 tensors (any strides), `sm_scale` the softmax scale. `CAUSAL` (0 or 1)
/// masks keys after the query; `HEAD_DIM`, `BLOCK_M` and `BLOCK_N` are powers of two.
#[jit(name = "attn_fwd")]
#[rustfmt::skip]
pub fn attn_fwd_kernel(
    Q: Ptr<F16>, K: Ptr<F16>, V: Ptr<F16>, Out: Ptr<F16>,
    sm_scale: f32,
    stride_qz: i32, stride_qh: i32, stride_qm: i32, stride_qk: i32,
    stride_kz: i32, stride_kh: i32, stride_kn: i32, stride_kk: i32,
    stride_vz: i32, stride_vh: i32, stride_vn: i32, stride_vk: i32,
    stride_oz: i32, stride_oh: i32, stride_om: i32, stride_ok: i32,
    H: i32, N_CTX: i32,
    HEAD_DIM: Constexpr, BLOCK_M: Constexpr, BLOCK_N: Constexpr, CAUSAL: Constexpr,
) {
    let start_m = tl::program_id(0);
    let off_hz = tl::program_id(1);
    let off_z = tl::floordiv(off_hz, H);
    let off_h = off_hz % H;
    let q_base = Q + off_z * stride_qz + off_h * stride_qh;
    let k_base = K + off_z * stride_kz + off_h * stride_kh;
    let v_base = V + off_z * stride_vz + off_h * stride_vh;
    let o_base = Out + off_z * stride_oz + off_h * stride_oh;

    let offs_m = start_m * BLOCK_M + tl::arange(0, BLOCK_M);
    let offs_n = tl::arange(0, BLOCK_N);
    let offs_d = tl::arange(0, HEAD_DIM);
    let q_mask = offs_m.col() < N_CTX;
    let q = tl::load(q_base + offs_m.col() * stride_qm + offs_d.row() * stride_qk, mask = q_mask, other = 0.0);

    // Scores in base 2: exp(x * sm_scale) == exp2(x * sm_scale * log2(e)).
    let qk_scale = sm_scale * 1.44269504;
    let mut m_i = tl::full([BLOCK_M], f32::NEG_INFINITY, F32);
    let mut l_i = tl::full([BLOCK_M], 1.0, F32);
    let mut acc = tl::zeros((BLOCK_M, HEAD_DIM), dtype = F32);
    // Causal programs stop at the last key their rows may see.
    let mut hi = N_CTX;
    if CAUSAL != 0 {
        hi = tl::minimum((start_m + 1) * BLOCK_M, N_CTX);
    }
    for start_n in tl::range(0, hi, BLOCK_N) {
        let cols = start_n + offs_n;
        // K is read transposed, [HEAD_DIM, BLOCK_N], so that q @ k is a plain dot.
        let k = tl::load(k_base + offs_d.col() * stride_kk + cols.row() * stride_kn, mask = cols.row() < N_CTX, other = 0.0);
        let mut valid = cols.row() < N_CTX;
        if CAUSAL != 0 {
            valid = valid & (offs_m.col() >= cols.row());
        }
        let qk = tl::where_(valid, tl::dot(q, k) * qk_scale, f32::NEG_INFINITY);
        let m_ij = tl::maximum(m_i, tl::max(qk, axis = 1));
        let p = tl::exp2(qk - m_ij.col());
        let alpha = tl::exp2(m_i - m_ij);
        l_i = l_i * alpha + tl::sum(p, axis = 1);
        let v = tl::load(v_base + cols.col() * stride_vn + offs_d.row() * stride_vk, mask = cols.col() < N_CTX, other = 0.0);
        acc = tl::dot(p.to(F16), v, acc = acc * alpha.col());
        m_i = m_ij;
    }
    acc = acc / l_i.col();
    tl::store(o_base + offs_m.col() * stride_om + offs_d.row() * stride_ok, acc.to(F16), mask = q_mask);
}

/// Row-major strides of a 4-D shape, as the kernel's `i32` arguments.
fn strides(shape: [usize; 4]) -> [i32; 4] {
    [
        (shape[1] * shape[2] * shape[3]) as i32,
        (shape[2] * shape[3]) as i32,
        shape[3] as i32,
        1,
    ]
}

/// Runs the kernel on `[z, h, n_ctx, head_dim]` inputs.
#[allow(clippy::too_many_arguments)]
fn attention(
    kernel: &JitKernel,
    q: &Array,
    k: &Array,
    v: &Array,
    shape: [usize; 4],
    sm_scale: f32,
    causal: bool,
    (block_m, block_n): (usize, usize),
) -> triton_metal::Result<Array> {
    let [z, h, n_ctx, head_dim] = shape;
    let s = strides(shape);
    let outs = kernel
        .launch()
        .grid(grid(move |meta| [cdiv(n_ctx, meta["BLOCK_M"]), z * h]))
        .args((
            q,
            k,
            v,
            out(&shape, F16).fill(f64::NAN),
            sm_scale,
            s[0],
            s[1],
            s[2],
            s[3],
            s[0],
            s[1],
            s[2],
            s[3],
            s[0],
            s[1],
            s[2],
            s[3],
            s[0],
            s[1],
            s[2],
            s[3],
            h as i32,
            n_ctx as i32,
        ))
        .constexpr("HEAD_DIM", head_dim as i64)
        .constexpr("BLOCK_M", block_m as i64)
        .constexpr("BLOCK_N", block_n as i64)
        .constexpr("CAUSAL", causal as i64)
        .num_warps(4)
        .run()?;
    Ok(outs.into_iter().next().expect("one output"))
}

/// softmax(q kᵀ · scale, causal mask) v in f32 on MLX's CPU device.
fn reference(
    q: &Array,
    k: &Array,
    v: &Array,
    n_ctx: usize,
    sm_scale: f32,
    causal: bool,
) -> triton_metal::Result<Array> {
    let (q, k, v) = (
        mlx::astype(q, F32)?,
        mlx::astype(k, F32)?,
        mlx::astype(v, F32)?,
    );
    let kt = mlx::transpose(&k, Some(&[0, 1, 3, 2]))?;
    let scores = mlx::multiply(
        &mlx::matmul(&q, &kt)?,
        &mlx::full(&[], sm_scale as f64, F32)?,
    )?;
    let scores = if causal {
        let rows = mlx::reshape(&mlx::arange(0.0, n_ctx as f64, 1.0, F32)?, &[-1, 1])?;
        let cols = mlx::reshape(&mlx::arange(0.0, n_ctx as f64, 1.0, F32)?, &[1, -1])?;
        let future = mlx::less(&rows, &cols)?;
        mlx::where_(&future, &mlx::full(&[], f64::NEG_INFINITY, F32)?, &scores)?
    } else {
        scores
    };
    mlx::matmul(&mlx::softmax(&scores, &[-1], true)?, &v)
}

fn main() -> triton_metal::Result<()> {
    let kernel = attn_fwd_kernel()?;
    let device = triton_metal::device::default_device()?;
    // Ragged sequence lengths; the blocks suit every target's threadgroup memory.
    let cases = [
        ([2, 3, 157, 64], false, (32, 32)),
        ([2, 3, 157, 64], true, (32, 32)),
        ([1, 2, 100, 128], false, (16, 32)),
        ([1, 2, 100, 128], true, (16, 32)),
    ];
    for (i, (shape, causal, blocks)) in cases.into_iter().enumerate() {
        let seed = 10 * i as u64;
        let q = mlx::astype(&mlx::random::normal(&shape, F32, seed)?, F16)?;
        let k = mlx::astype(&mlx::random::normal(&shape, F32, seed + 1)?, F16)?;
        let v = mlx::astype(&mlx::random::normal(&shape, F32, seed + 2)?, F16)?;
        let sm_scale = 1.0 / (shape[3] as f32).sqrt();
        let o = attention(&kernel, &q, &k, &v, shape, sm_scale, causal, blocks)?;
        triton_metal::device::set_default_device(triton_metal::Device::Cpu)?;
        let expected = reference(&q, &k, &v, shape[2], sm_scale, causal);
        triton_metal::device::set_default_device(device)?;
        let max_err = max_abs_diff(&mlx::astype(&o, F32)?, &expected?)?;
        println!(
            "attention {shape:?} causal={causal} blocks={blocks:?}: max |triton_metal - mlx| = {max_err:e}"
        );
        // f16 output (ulp 2^-11 near 1) plus f16 rounding of the probabilities.
        if max_err.is_nan() || max_err > 1e-2 {
            return Err(Error::Runtime {
                kernel: "attn_fwd".into(),
                msg: format!("{shape:?} causal={causal}: max error {max_err}"),
            });
        }
    }
    println!("verified against MLX");
    Ok(())
}
