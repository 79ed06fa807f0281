//! `#[jit]` kernels build the same IR as the same kernels written with the builder.

use triton_metal::tl::{self, JitKernel, Tensor};
use triton_metal::DType::{F32, I32};
use triton_metal::{jit, Result};

fn ir(k: Result<JitKernel>, cx: &[(&str, i64)]) -> String {
    k.expect("kernel").specialize_with(cx).expect("builds").ir()
}

#[jit]
fn add_kernel(
    x_ptr: Ptr<F32>,
    y_ptr: Ptr<F32>,
    output_ptr: Ptr<F32>,
    n_elements: i32,
    BLOCK_SIZE: Constexpr,
) {
    let pid = tl::program_id(axis = 0);
    let offsets = pid * BLOCK_SIZE + tl::arange(0, BLOCK_SIZE);
    let mask = offsets < n_elements;
    let x = tl::load(x_ptr + offsets, mask = mask);
    let y = tl::load(y_ptr + offsets, mask = mask);
    tl::store(output_ptr + offsets, x + y, mask = mask);
}

fn add_builder() -> Result<JitKernel> {
    tl::jit("add_kernel", |k| {
        let x_ptr = k.ptr(F32, "x_ptr");
        let y_ptr = k.ptr(F32, "y_ptr");
        let output_ptr = k.ptr(F32, "output_ptr");
        let n_elements = k.scalar(I32, "n_elements");
        let block = k.constexpr("BLOCK_SIZE");
        let pid = tl::program_id(0);
        let offsets = pid * block + tl::arange(0, block);
        let mask = offsets.lt(n_elements);
        let x = tl::load(x_ptr + offsets).mask(mask);
        let y = tl::load(y_ptr + offsets).mask(mask);
        tl::store(output_ptr + offsets, x + y).mask(mask);
    })
}

#[test]
fn vector_add_same_ir() {
    let cx = [("BLOCK_SIZE", 128)];
    assert_eq!(ir(add_kernel(), &cx), ir(add_builder(), &cx));
}

#[jit]
fn row_sum(x_ptr: Ptr<F32>, out_ptr: Ptr<F32>, n_cols: i32, BLOCK: Constexpr) {
    let row = tl::program_id(0);
    let cols = tl::arange(0, BLOCK);
    let mut acc = tl::zeros([BLOCK], F32);
    for start in tl::range(0, n_cols, BLOCK) {
        let c = start + cols;
        acc += tl::load(x_ptr + row * n_cols + c, mask = c < n_cols, other = 0.0);
    }
    tl::store(out_ptr + row, tl::sum(acc, axis = 0));
}

fn row_sum_builder() -> Result<JitKernel> {
    tl::jit("row_sum", |k| {
        let x_ptr = k.ptr(F32, "x_ptr");
        let out_ptr = k.ptr(F32, "out_ptr");
        let n_cols = k.scalar(I32, "n_cols");
        let block = k.constexpr("BLOCK");
        let row = tl::program_id(0);
        let cols = tl::arange(0, block);
        let acc = tl::range(0, n_cols, block).fold(tl::zeros([block], F32), |start, acc| {
            let c = start + cols;
            acc + tl::load(x_ptr + row * n_cols + c)
                .mask(c.lt(n_cols))
                .other(0.0)
        });
        tl::store(out_ptr + row, tl::sum(acc, 0));
    })
}

#[test]
fn loop_carried_same_ir() {
    let cx = [("BLOCK", 64)];
    assert_eq!(ir(row_sum(), &cx), ir(row_sum_builder(), &cx));
}

/// `if`/`else` on a tensor yields the variables its branches assign; a constexpr `if` builds
/// one branch only.
#[jit]
fn branches(p: Ptr<F32>, n: i32, BIG: Constexpr) {
    let pid = tl::program_id(0);
    let mut x = tl::zeros([4], dtype = F32);
    let mut y = x + 1.0;
    if pid < n {
        x = x + 2.0;
    } else if pid == n {
        y = y * 3.0;
    } else {
        x = x - 1.0;
        y = y - 1.0;
    }
    if BIG > 2 {
        x = x * 2.0;
    }
    tl::store(p + tl::arange(0, 4), x + y);
}

fn branches_builder() -> Result<JitKernel> {
    tl::jit("branches", |k| {
        let p = k.ptr(F32, "p");
        let n = k.scalar(I32, "n");
        let big = k.constexpr("BIG");
        let pid = tl::program_id(0);
        let x = tl::zeros([4], F32);
        let y = x + 1.0;
        let (x, y) = tl::if_(
            pid.lt(n),
            || (x + 2.0, y),
            || {
                // Variables are yielded in the order the branches first assign them.
                let (y, x) = tl::if_(
                    pid.eq(n),
                    || (y * 3.0, x),
                    || {
                        let x = x - 1.0;
                        (y - 1.0, x)
                    },
                );
                (x, y)
            },
        );
        let x = if big > 2 { x * 2.0 } else { x };
        tl::store(p + tl::arange(0, 4), x + y);
    })
}

#[test]
fn branches_same_ir() {
    for big in [1, 3] {
        let cx = [("BIG", big)];
        assert_eq!(ir(branches(), &cx), ir(branches_builder(), &cx));
    }
}

/// Triton's early return: the rest of the kernel is the `else` branch.
#[jit]
fn early_return(p: Ptr<F32>, n: i32) {
    let pid = tl::program_id(0);
    if pid >= n {
        tl::store(p + pid, 0.0);
        return;
    }
    let v = tl::load(p + pid);
    tl::store(p + pid, v * 2.0);
}

fn early_return_builder() -> Result<JitKernel> {
    tl::jit("early_return", |k| {
        let p = k.ptr(F32, "p");
        let n = k.scalar(I32, "n");
        let pid = tl::program_id(0);
        tl::if_(
            pid.ge(n),
            || {
                tl::store(p + pid, 0.0);
            },
            || {
                let v = tl::load(p + pid);
                tl::store(p + pid, v * 2.0);
            },
        );
    })
}

#[test]
fn early_return_same_ir() {
    assert_eq!(ir(early_return(), &[]), ir(early_return_builder(), &[]));
}

/// `while` carries what its body assigns; `&&` of bool tensors is their logical and.
#[jit]
fn halvings(p: Ptr<F32>, out: Ptr<I32>) {
    let mut v = tl::load(p);
    let mut steps = tl::program_id(0) * 0;
    while v >= 2.0 && steps < 100 {
        v = v * 0.5;
        steps += 1;
    }
    tl::store(out, steps);
}

// `* 0`: an i32 scalar zero, as the `#[jit]` form writes it.
#[allow(clippy::erasing_op)]
fn halvings_builder() -> Result<JitKernel> {
    tl::jit("halvings", |k| {
        let p = k.ptr(F32, "p");
        let out = k.ptr(I32, "out");
        let v = tl::load(p);
        let steps = tl::program_id(0) * 0;
        let (_, steps) = tl::while_loop(
            (v, steps),
            |(v, steps)| v.ge(2.0) & steps.lt(100),
            |(v, steps)| (v * 0.5, steps + 1),
        );
        tl::store(out, steps);
    })
}

#[test]
fn while_same_ir() {
    assert_eq!(ir(halvings(), &[]), ir(halvings_builder(), &[]));
}

/// A helper returning a tuple, and a runtime branch inside an unrolled loop.
#[jit]
fn min_max(x: Tensor, y: Tensor) -> (Tensor, Tensor) {
    (tl::minimum(x, y), tl::maximum(x, y))
}

#[jit]
fn helpers(p: Ptr<F32>, N: Constexpr) {
    let offs = tl::arange(0, 8);
    let mut lo = tl::load(p + offs);
    let mut hi = lo;
    for i in tl::static_range(1, N) {
        let x = tl::load(p + offs + 8 * i);
        let (l, h) = min_max(x, lo);
        if tl::sum(l, axis = 0) > 0.0 {
            lo = l;
        }
        hi = tl::maximum(h, hi);
    }
    tl::store(p + offs, hi - lo);
}

fn helpers_builder() -> Result<JitKernel> {
    tl::jit("helpers", |k| {
        let p = k.ptr(F32, "p");
        let n = k.constexpr("N");
        let offs = tl::arange(0, 8);
        let mut lo = tl::load(p + offs);
        let mut hi = lo;
        for i in tl::static_range(1, n, 1) {
            let x = tl::load(p + offs + 8 * i);
            let (l, h) = (tl::minimum(x, lo), tl::maximum(x, lo));
            lo = tl::if_(tl::sum(l, 0).gt(0.0), || l, || lo);
            hi = tl::maximum(h, hi);
        }
        tl::store(p + offs, hi - lo);
    })
}

#[test]
fn helpers_and_static_loops_same_ir() {
    let cx = [("N", 3)];
    assert_eq!(ir(helpers(), &cx), ir(helpers_builder(), &cx));
}

/// The source line of a build error is the user's line in the `#[jit]` function.
#[jit]
fn bad_shapes(x_ptr: Ptr<F32>, BLOCK: Constexpr) {
    let a = tl::arange(0, BLOCK);
    let b = tl::arange(0, BLOCK * 2);
    let m = a < b; // line of the comparison error
    tl::store(x_ptr + a, a, mask = m);
}

#[jit]
fn bad_condition(x_ptr: Ptr<F32>, BLOCK: Constexpr) {
    let a = tl::arange(0, BLOCK);
    let mut v = tl::load(x_ptr + a);
    // The if below.
    if a > 2 {
        v = v + 1.0;
    }
    tl::store(x_ptr + a, v);
}

fn line_of(marker: &str) -> u32 {
    let src = include_str!("jit_macro.rs");
    let i = src.find(marker).expect("marker");
    src[..i].matches('\n').count() as u32 + 1
}

#[test]
fn build_errors_name_the_users_line() {
    for (k, marker, below, op) in [
        (bad_shapes(), "// line of the comparison error", 0, "lt"),
        (bad_condition(), "// The if below.", 1, "if"),
    ] {
        let err = k.unwrap().specialize_with(&[("BLOCK", 16)]).unwrap_err();
        let triton_metal::Error::Build { op: got, loc, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(got, op, "{err}");
        assert!(loc.file.ends_with("jit_macro.rs"), "{err}");
        assert_eq!(loc.line, line_of(marker) + below, "{err}");
    }
}

/// Early return, loop-carried values, `while`, `&&`, a helper and a constexpr `if`, run on
/// random data and checked against a plain Rust computation.
#[jit]
fn row_stats(x_ptr: Ptr<F32>, out_ptr: Ptr<F32>, n_rows: i32, n_cols: i32, BLOCK: Constexpr) {
    let row = tl::program_id(0);
    if row >= n_rows {
        return;
    }
    let cols = tl::arange(0, BLOCK);
    let mut acc = tl::zeros([BLOCK], dtype = F32);
    let mut lo = tl::full([BLOCK], f32::INFINITY, F32);
    let mut hi = tl::full([BLOCK], f32::NEG_INFINITY, F32);
    for start in tl::range(0, n_cols, BLOCK) {
        let c = start + cols;
        let m = c < n_cols;
        let x = tl::load(x_ptr + row * n_cols + c, mask = m, other = 0.0);
        acc += x;
        let (l, _) = min_max(tl::where_(m, x, f32::INFINITY), lo);
        let (_, h) = min_max(tl::where_(m, x, f32::NEG_INFINITY), hi);
        lo = l;
        hi = h;
    }
    let total = tl::sum(acc, axis = 0);
    let mut v = tl::abs(total) + 1.0;
    let mut steps = row * 0;
    while v >= 2.0 {
        v = v * 0.5;
        steps += 1;
    }
    let mut signed = total;
    if total > 0.0 && steps > 2 {
        signed = -total;
    }
    let out = out_ptr + row * 4;
    tl::store(out, total);
    tl::store(out + 1, steps.to(F32));
    tl::store(out + 2, signed);
    if BLOCK >= 32 {
        tl::store(out + 3, tl::max(hi, axis = 0) - tl::min(lo, axis = 0));
    } else {
        tl::store(out + 3, 0.0);
    }
}

#[test]
fn control_flow_computes_what_triton_would() {
    use triton_metal::runtime::out;
    use triton_metal::Array;
    let (rows, cols) = (5usize, 77usize);
    // Small integers: every sum is exact, whatever the reduction order.
    let mut state = 12345u32;
    let data: Vec<f32> = (0..rows * cols)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((state >> 16) % 17) as f32 - 8.0
        })
        .collect();
    let x = Array::from_slice(&data, &[rows * cols]).unwrap();
    let kernel = row_stats().unwrap();
    for block in [16i64, 32] {
        let got = kernel
            .launch()
            .grid([rows + 3])
            .args((
                &x,
                out(&[rows * 4], F32).fill(f64::NAN),
                rows as i32,
                cols as i32,
            ))
            .constexpr("BLOCK", block)
            .run()
            .unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        for r in 0..rows {
            let row = &data[r * cols..(r + 1) * cols];
            let total: f32 = row.iter().sum();
            let mut v = total.abs() + 1.0;
            let mut steps = 0;
            while v >= 2.0 {
                v *= 0.5;
                steps += 1;
            }
            let signed = if total > 0.0 && steps > 2 {
                -total
            } else {
                total
            };
            let range = if block >= 32 {
                row.iter().cloned().fold(f32::NEG_INFINITY, f32::max)
                    - row.iter().cloned().fold(f32::INFINITY, f32::min)
            } else {
                0.0
            };
            let want = [total, steps as f32, signed, range];
            assert_eq!(&got[r * 4..r * 4 + 4], &want, "row {r}, BLOCK {block}");
        }
    }
}
