//! Each example's `#[jit]` kernel builds exactly the IR of the same kernel written with the
//! builder DSL underneath it (`tl::jit` with `k.ptr`/`k.scalar`/`k.constexpr`, explicit
//! `fold`s and chained `mask`/`other`), for every constexpr set and dtype the examples use.

#[allow(dead_code)]
#[path = "../examples/dropout.rs"]
mod dropout;
#[allow(dead_code)]
#[path = "../examples/fused_softmax.rs"]
mod fused_softmax;
#[allow(dead_code)]
#[path = "../examples/layer_norm.rs"]
mod layer_norm;
#[allow(dead_code)]
#[path = "../examples/matmul.rs"]
mod matmul;
#[allow(dead_code)]
#[path = "../examples/row_sum.rs"]
mod row_sum;
#[allow(dead_code)]
#[path = "../examples/strided.rs"]
mod strided;
#[allow(dead_code)]
#[path = "../examples/vector_add.rs"]
mod vector_add;

use triton_metal::tl::{self, JitKernel, Signature};
use triton_metal::DType::{self, BF16, F16, F32, I32};
use triton_metal::Result;

fn same_ir(
    name: &str,
    macro_form: Result<JitKernel>,
    builder: Result<JitKernel>,
    cx: &[(&str, i64)],
) {
    same_ir_for(name, macro_form, builder, cx, &[]);
}

/// [`same_ir`] for arguments whose leading arrays are of `arrays` (generic pointers).
fn same_ir_for(
    name: &str,
    macro_form: Result<JitKernel>,
    builder: Result<JitKernel>,
    cx: &[(&str, i64)],
    arrays: &[DType],
) {
    let (m, b) = (
        macro_form.expect("macro form"),
        builder.expect("builder form"),
    );
    assert_eq!(m.name(), b.name(), "{name}: kernel names");
    let sig = cx
        .iter()
        .fold(Signature::new(), |s, (n, v)| s.constexpr(n, *v));
    let sig = arrays.iter().fold(sig, |s, d| s.array(*d));
    let (m, b) = (
        m.specialize(&sig).expect("macro form builds").ir(),
        b.specialize(&sig).expect("builder form builds").ir(),
    );
    assert_eq!(
        m, b,
        "{name}: the macro form's IR differs from the builder form's"
    );
    assert!(m.contains("load") && m.contains("store"), "{name}: {m}");
}

/// The builder forms: the layer `#[jit]` expands to.
mod builder {
    use super::*;

    pub fn add_kernel() -> Result<JitKernel> {
        tl::jit("add_kernel", |k| {
            let (x_ptr, y_ptr, out_ptr) = (
                k.ptr(F32, "x_ptr"),
                k.ptr(F32, "y_ptr"),
                k.ptr(F32, "output_ptr"),
            );
            let n = k.scalar(I32, "n_elements");
            let block = k.constexpr("BLOCK_SIZE");
            let pid = tl::program_id(0);
            let offsets = pid * block + tl::arange(0, block);
            let mask = offsets.lt(n);
            let x = tl::load(x_ptr + offsets).mask(mask);
            let y = tl::load(y_ptr + offsets).mask(mask);
            tl::store(out_ptr + offsets, x + y).mask(mask);
        })
    }

    pub fn softmax_kernel() -> Result<JitKernel> {
        tl::jit("softmax_kernel", |k| {
            let output_ptr = k.ptr(F32, "output_ptr");
            let input_ptr = k.ptr(F32, "input_ptr");
            let input_row_stride = k.scalar(I32, "input_row_stride");
            let output_row_stride = k.scalar(I32, "output_row_stride");
            let n_cols = k.scalar(I32, "n_cols");
            let block = k.constexpr("BLOCK_SIZE");
            let row_idx = tl::program_id(0);
            let col_offsets = tl::arange(0, block);
            let mask = col_offsets.lt(n_cols);
            let row = tl::load(input_ptr + row_idx * input_row_stride + col_offsets)
                .mask(mask)
                .other(f32::NEG_INFINITY);
            let numerator = (row - row.max(0)).exp();
            let denominator = numerator.sum(0);
            tl::store(
                output_ptr + row_idx * output_row_stride + col_offsets,
                numerator / denominator,
            )
            .mask(mask);
        })
    }

    pub fn matmul_kernel() -> Result<JitKernel> {
        tl::jit("matmul_kernel", move |k| {
            let (a_ptr, b_ptr, c_ptr) =
                (k.ptr_any("a_ptr"), k.ptr_any("b_ptr"), k.ptr_any("c_ptr"));
            let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
            let (stride_am, stride_ak) = (k.scalar(I32, "stride_am"), k.scalar(I32, "stride_ak"));
            let (stride_bk, stride_bn) = (k.scalar(I32, "stride_bk"), k.scalar(I32, "stride_bn"));
            let (stride_cm, stride_cn) = (k.scalar(I32, "stride_cm"), k.scalar(I32, "stride_cn"));
            let block_m = k.constexpr("BLOCK_SIZE_M");
            let block_n = k.constexpr("BLOCK_SIZE_N");
            let block_k = k.constexpr("BLOCK_SIZE_K");
            let group_m = k.constexpr("GROUP_SIZE_M");
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
            tl::store(c_ptrs, acc.cast(k.dtype_of("c_ptr"))).mask(c_mask);
        })
    }

    pub fn layer_norm_kernel() -> Result<JitKernel> {
        tl::jit("layer_norm_fwd", move |k| {
            let x_ptr = k.ptr_any("X");
            let y_ptr = k.ptr_any("Y");
            let w_ptr = k.ptr_any("W");
            let b_ptr = k.ptr_any("B");
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
                tl::store(
                    y_row + cols,
                    ((x - mean) * rstd * w + b).cast(k.dtype_of("Y")),
                )
                .mask(mask);
            });
        })
    }

    pub fn dropout_kernel() -> Result<JitKernel> {
        tl::jit("seeded_dropout", |k| {
            let x_ptr = k.ptr(F32, "x_ptr");
            let output_ptr = k.ptr(F32, "output_ptr");
            let n = k.scalar(I32, "n_elements");
            let p = k.scalar(F32, "p");
            let seed = k.scalar(I32, "seed");
            let block = k.constexpr("BLOCK_SIZE");
            let offsets = tl::program_id(0) * block + tl::arange(0, block);
            let mask = offsets.lt(n);
            let x = tl::load(x_ptr + offsets).mask(mask);
            let random = tl::rand(seed, offsets);
            let x_keep = random.gt(p);
            let output = tl::where_(x_keep, x / (1.0 - p), 0.0);
            tl::store(output_ptr + offsets, output).mask(mask);
        })
    }

    pub fn row_sum_kernel() -> Result<JitKernel> {
        tl::jit("row_sum", |k| {
            let x_ptr = k.ptr(F32, "x_ptr");
            let out_ptr = k.ptr(F32, "out_ptr");
            let n_cols = k.scalar(I32, "n_cols");
            let block = k.constexpr("BLOCK_SIZE");
            let row = tl::program_id(0);
            let cols = tl::arange(0, block);
            let acc = tl::range(0, n_cols, block).fold(tl::zeros([block], F32), |start, acc| {
                let c = start + cols;
                acc + tl::load(x_ptr + row * n_cols + c)
                    .mask(c.lt(n_cols))
                    .other(0.0)
            });
            tl::store(out_ptr + row, acc.sum(0));
        })
    }

    pub fn strided_kernel() -> Result<JitKernel> {
        tl::jit("strided_kernel", |k| {
            let x_ptr = k.ptr(F32, "x_ptr");
            let output_ptr = k.ptr(F32, "output_ptr");
            let stride = k.scalar(I32, "stride");
            let n = k.scalar(I32, "n_elements");
            let block = k.constexpr("BLOCK_SIZE");
            let block_start = tl::program_id(0) * block;
            let indices = block_start + tl::arange(0, block) * stride;
            let mask = indices.lt(n);
            let x = tl::load(x_ptr + indices).mask(mask);
            tl::store(output_ptr + indices, x * 2.0).mask(mask);
        })
    }
}

#[test]
fn vector_add() {
    for b in [128, 1024] {
        let cx = [("BLOCK_SIZE", b)];
        same_ir(
            "vector_add",
            vector_add::add_kernel(),
            builder::add_kernel(),
            &cx,
        );
    }
}

#[test]
fn fused_softmax() {
    let cx = [("BLOCK_SIZE", 1024)];
    same_ir(
        "fused_softmax",
        fused_softmax::softmax_kernel(),
        builder::softmax_kernel(),
        &cx,
    );
}

#[test]
fn matmul() {
    let cx = [
        ("BLOCK_SIZE_M", 64),
        ("BLOCK_SIZE_N", 64),
        ("BLOCK_SIZE_K", 32),
        ("GROUP_SIZE_M", 8),
    ];
    for dtype in [F32, F16, BF16] {
        same_ir_for(
            "matmul",
            matmul::matmul_kernel(),
            builder::matmul_kernel(),
            &cx,
            &[dtype; 3],
        );
    }
}

#[test]
fn layer_norm() {
    let cx = [("BLOCK_SIZE", 256)];
    for dtype in [F32, F16, BF16] {
        same_ir_for(
            "layer_norm",
            layer_norm::layer_norm_kernel(),
            builder::layer_norm_kernel(),
            &cx,
            &[dtype; 4],
        );
    }
}

#[test]
fn dropout() {
    let cx = [("BLOCK_SIZE", 1024)];
    same_ir(
        "dropout",
        dropout::dropout_kernel(),
        builder::dropout_kernel(),
        &cx,
    );
}

#[test]
fn row_sum() {
    let cx = [("BLOCK_SIZE", 512)];
    same_ir(
        "row_sum",
        row_sum::row_sum_kernel(),
        builder::row_sum_kernel(),
        &cx,
    );
}

#[test]
fn strided() {
    let cx = [("BLOCK_SIZE", 256)];
    same_ir(
        "strided",
        strided::strided_kernel(),
        builder::strided_kernel(),
        &cx,
    );
}
