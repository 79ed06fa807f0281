//! Quick timing of the CPU executor on the benchmark kernels (GB/s, GFLOP/s).
//! Run with `cargo run --release --example exec_speed`.

use std::collections::BTreeMap;
use std::time::Instant;

use triton_metal::exec::{execute, ExecArg};
use triton_metal::ir::Kernel;
use triton_metal::tl::{self, *};
use triton_metal::DType::*;

fn kernel(name: &str, cx: &[(&str, i64)], f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    let m: BTreeMap<String, i64> = cx.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    tl::build(name, &m, f).expect("build")
}

fn as_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) }
}

fn as_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: f32 has no padding and every bit pattern is valid.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 4) }
}

/// Repetitions per timing (`REPS`, default 20).
fn reps() -> usize {
    std::env::var("REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

/// Process CPU time (user + system) in seconds, from /proc (Linux only; 0 elsewhere).
fn cpu_time() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / 100.0
}

/// Best wall time of `reps` runs in seconds; also prints CPU seconds per run, which stays
/// meaningful when other processes share the machine.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let c0 = cpu_time();
    let best = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    let cpu = (cpu_time() - c0) / reps as f64;
    print!("[cpu {:.1} ms/run, wall {:.1} ms] ", cpu * 1e3, best * 1e3);
    best
}

fn main() {
    let only: Option<String> = std::env::args().nth(1);
    let want = |n: &str| only.as_deref().is_none_or(|o| n.contains(o));
    let n: usize = std::env::var("ADD_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 24);
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.001).collect();
    let y = x.clone();
    let mut out = vec![0f32; n];

    if want("copy") {
        let t = time(reps(), || out.copy_from_slice(&x));
        println!("memcpy 16M f32: {:.1} GB/s", 2.0 * 4.0 * n as f64 / t / 1e9);
    }
    if want("add") {
        let b: i64 = std::env::var("ADD_B")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1024);
        let k = kernel("add", &[("B", b)], |k| {
            let (xp, yp, op) = (k.ptr(F32, "x"), k.ptr(F32, "y"), k.ptr(F32, "o"));
            let nn = k.scalar(I32, "n");
            let b = k.constexpr("B");
            let offs = program_id(0) * b + arange(0, b);
            let m = offs.lt(nn);
            store(op + offs, load(xp + offs).mask(m) + load(yp + offs).mask(m)).mask(m);
        });
        let t = time(reps(), || {
            execute(
                &k,
                [n.div_ceil(b as usize), 1, 1],
                &mut [
                    ExecArg::from(as_bytes(&x)),
                    as_bytes(&y).into(),
                    as_bytes_mut(&mut out).into(),
                    (n as i32).into(),
                ],
            )
            .unwrap()
        });
        println!(
            "vector add 16M f32: {:.1} GB/s",
            3.0 * 4.0 * n as f64 / t / 1e9
        );
    }
    if want("rowsum") {
        let (r, c) = (4096usize, 4096usize);
        let k = kernel("rowsum", &[], |k| {
            let (xp, op) = (k.ptr(F32, "x"), k.ptr(F32, "o"));
            let row = program_id(0);
            let cols = arange(0, 4096);
            let v = load(xp + row * 4096 + cols);
            store(op + row, sum(v, 0));
        });
        let t = time(reps(), || {
            execute(
                &k,
                [r, 1, 1],
                &mut [
                    as_bytes(&x[..r * c]).into(),
                    as_bytes_mut(&mut out[..r]).into(),
                ],
            )
            .unwrap()
        });
        println!(
            "row-sum 4096^2 f32: {:.1} GB/s",
            4.0 * (r * c) as f64 / t / 1e9
        );
    }
    if want("softmax") {
        let (r, c) = (4096usize, 1024usize);
        let k = kernel("softmax", &[], |k| {
            let (op, xp) = (k.ptr(F32, "o"), k.ptr(F32, "x"));
            let ncols = k.scalar(I32, "n");
            let row = program_id(0);
            let cols = arange(0, 1024);
            let mask = cols.lt(ncols);
            let v = load(xp + row * ncols + cols)
                .mask(mask)
                .other(f32::NEG_INFINITY);
            let z = v - max(v, 0);
            let num = exp(z);
            store(op + row * ncols + cols, num / sum(num, 0)).mask(mask);
        });
        let t = time(reps(), || {
            execute(
                &k,
                [r, 1, 1],
                &mut [
                    as_bytes_mut(&mut out[..r * c]).into(),
                    as_bytes(&x[..r * c]).into(),
                    (c as i32).into(),
                ],
            )
            .unwrap()
        });
        println!(
            "softmax 4096x1024 f32: {:.1} GB/s",
            2.0 * 4.0 * (r * c) as f64 / t / 1e9
        );
    }
    if want("layernorm") {
        let (r, c) = (4096usize, 1024usize);
        let w = vec![1.0f32; c];
        let b = vec![0.0f32; c];
        let k = kernel("layer_norm", &[], |k| {
            let (op, xp, wp, bp) = (
                k.ptr(F32, "o"),
                k.ptr(F32, "x"),
                k.ptr(F32, "w"),
                k.ptr(F32, "b"),
            );
            let ncols = k.scalar(I32, "n");
            let row = program_id(0);
            let cols = arange(0, 1024);
            let mask = cols.lt(ncols);
            let v = load(xp + row * ncols + cols).mask(mask).other(0.0);
            let mean = sum(v, 0) / ncols.to(F32);
            let d = where_(mask, v - mean, 0.0);
            let var = sum(d * d, 0) / ncols.to(F32);
            let rstd = rsqrt(var + 1e-5);
            let y = d * rstd * load(wp + cols).mask(mask) + load(bp + cols).mask(mask);
            store(op + row * ncols + cols, y).mask(mask);
        });
        let t = time(reps(), || {
            execute(
                &k,
                [r, 1, 1],
                &mut [
                    as_bytes_mut(&mut out[..r * c]).into(),
                    as_bytes(&x[..r * c]).into(),
                    as_bytes(&w).into(),
                    as_bytes(&b).into(),
                    (c as i32).into(),
                ],
            )
            .unwrap()
        });
        println!(
            "layer_norm 4096x1024 f32: {:.1} GB/s",
            2.0 * 4.0 * (r * c) as f64 / t / 1e9
        );
    }
    if want("matmul") {
        let s = 1024usize;
        let (bm, bn, bk): (i64, i64, i64) = std::env::var("MM_TILE")
            .ok()
            .and_then(|s| {
                let v: Vec<i64> = s.split(',').filter_map(|x| x.parse().ok()).collect();
                (v.len() == 3).then(|| (v[0], v[1], v[2]))
            })
            .unwrap_or((64, 64, 32));
        let k = kernel("matmul", &[("BM", bm), ("BN", bn), ("BK", bk)], |k| {
            let (a_ptr, b_ptr, c_ptr) = (k.ptr(F32, "a"), k.ptr(F32, "b"), k.ptr(F32, "c"));
            let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
            let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
            let rm = program_id(0) * bm + arange(0, bm);
            let rn = program_id(1) * bn + arange(0, bn);
            let rk = arange(0, bk);
            let a_ptrs = a_ptr + (rm.col() * kk + rk.row());
            let b_ptrs = b_ptr + (rk.col() * n + rn.row());
            let acc = zeros([bm, bn], F32);
            let (acc, _, _) =
                range(0, cdiv(kk, bk), 1).fold((acc, a_ptrs, b_ptrs), |i, (acc, ap, bp)| {
                    let k_rem = kk - i * bk;
                    let a = load(ap).mask(rk.row().lt(k_rem)).other(0.0);
                    let b = load(bp).mask(rk.col().lt(k_rem)).other(0.0);
                    (dot(a, b, acc), ap + bk, bp + bk * n)
                });
            let mask = rm.col().lt(m) & rn.row().lt(n);
            store(c_ptr + rm.col() * n + rn.row(), acc).mask(mask);
        });
        let (a, b) = (&x[..s * s], &y[..s * s]);
        let grid = [s / bm as usize, s / bn as usize, 1];
        let t = time(3, || {
            execute(
                &k,
                grid,
                &mut [
                    as_bytes(a).into(),
                    as_bytes(b).into(),
                    as_bytes_mut(&mut out[..s * s]).into(),
                    (s as i32).into(),
                    (s as i32).into(),
                    (s as i32).into(),
                ],
            )
            .unwrap()
        });
        println!(
            "matmul 1024 f32: {:.1} GFLOP/s",
            2.0 * (s * s * s) as f64 / t / 1e9
        );
    }
}
