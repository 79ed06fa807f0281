//! Code generator tests: MSL snapshots, limits, and emulated runs (`crate::emu`) compared
//! with f64 references on ragged random inputs, outputs poisoned with NaN / -1 bytes, in
//! forward and reverse lane order.

use std::collections::BTreeMap;

use super::*;
use crate::dtype::DType::{self, F16, F32, I32};
use crate::emu::{self, EmuBuffer, Emulator, MetalLaunch, OutputSpec};
use crate::ir::Kernel;
use crate::tl::{self, KernelBuilder, Tensor};

pub(super) fn build(name: &str, cx: &[(&str, i64)], f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    let map: BTreeMap<String, i64> = cx.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    match tl::build(name, &map, f) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    }
}

/// Deterministic uniform values in `[lo, hi)`.
pub(super) fn rnd(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((s >> 40) as f32) / (1u64 << 24) as f32;
            lo + (hi - lo) * u
        })
        .collect()
}

pub(super) fn emu_ok(test: &str) -> bool {
    match Emulator::should_run(test) {
        Ok(run) => run,
        Err(e) => panic!("{e}"),
    }
}

/// Compiles `kernel` and runs it on the emulator in both lane orders; `args` holds every
/// input by name, `outs` every output (poisoned unless an init value is given).
fn run(
    kernel: &Kernel,
    opts: &LaunchOptions,
    args: &[EmuBuffer],
    outs: &[OutputSpec],
    programs: [usize; 3],
) -> Vec<EmuBuffer> {
    let prog = match metal::compile(kernel, opts) {
        Ok(p) => p,
        Err(e) => panic!("compile failed: {e}"),
    };
    super::cuda_tests::check_cuda(kernel, opts);
    run_prog(&prog, args, outs, programs)
}

pub(super) fn run_prog(
    prog: &MetalProgram,
    args: &[EmuBuffer],
    outs: &[OutputSpec],
    programs: [usize; 3],
) -> Vec<EmuBuffer> {
    let l = emu_launch(prog, args, outs, programs);
    match emu::run_all_orders(&l) {
        Ok(v) => v,
        Err(e) => panic!("emulated run failed: {e}\n{}", prog.describe()),
    }
}

/// Runs in each lane order separately: for kernels whose result legitimately depends on
/// which program wins a race (a `cas`), so the two orders' outputs cannot be compared.
fn run_each_order(
    kernel: &Kernel,
    outs: &[OutputSpec],
    programs: [usize; 3],
) -> Vec<Vec<EmuBuffer>> {
    let prog = metal::compile(kernel, &LaunchOptions::default()).expect("compiles");
    super::cuda_tests::check_cuda(kernel, &LaunchOptions::default());
    let l = emu_launch(&prog, &[], outs, programs);
    [emu::LaneOrder::Forward, emu::LaneOrder::Reverse]
        .into_iter()
        .map(|o| match emu::run(&l.clone().lane_order(o)) {
            Ok(v) => v,
            Err(e) => panic!("emulated run ({o:?}) failed: {e}\n{}", prog.describe()),
        })
        .collect()
}

fn emu_launch(
    prog: &MetalProgram,
    args: &[EmuBuffer],
    outs: &[OutputSpec],
    programs: [usize; 3],
) -> MetalLaunch {
    let (grid, tg) = prog.launch_dims(programs);
    let mut l = MetalLaunch::new(&prog.name, &prog.source)
        .header(&prog.header)
        .grid(grid)
        .threadgroup(tg)
        .atomic_outputs(prog.atomic_outputs);
    for n in &prog.input_names {
        let b = args
            .iter()
            .find(|b| &b.name == n)
            .unwrap_or_else(|| panic!("no argument `{n}`"));
        l = l.input(b.clone());
    }
    for n in &prog.output_names {
        let o = outs
            .iter()
            .find(|o| &o.name == n)
            .unwrap_or_else(|| panic!("no output `{n}`"));
        l = l.output(o.clone());
    }
    l
}

pub(super) fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        assert!(
            err <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w} (err {err})"
        );
    }
}

pub(super) fn vector_add(k: &mut KernelBuilder) {
    let (x, y, out) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(F32, "out_ptr"),
    );
    let n = k.scalar(I32, "n_elements");
    let block = k.constexpr("BLOCK_SIZE");
    let offs = tl::program_id(0) * block + tl::arange(0, block);
    let mask = offs.lt(n);
    let a = tl::load(x + offs).mask(mask);
    let b = tl::load(y + offs).mask(mask);
    tl::store(out + offs, a + b).mask(mask);
}

pub(super) fn softmax(k: &mut KernelBuilder) {
    let (out, inp) = (k.ptr(F32, "out_ptr"), k.ptr(F32, "in_ptr"));
    let (stride, ncols) = (k.scalar(I32, "row_stride"), k.scalar(I32, "n_cols"));
    let block = k.constexpr("BLOCK");
    let row = tl::program_id(0);
    let offs = tl::arange(0, block);
    let mask = offs.lt(ncols);
    let x = tl::load(inp + row * stride + offs)
        .mask(mask)
        .other(f32::NEG_INFINITY);
    let z = x - x.max(0);
    let num = z.exp();
    let den = num.sum(0);
    tl::store(out + row * stride + offs, num / den).mask(mask);
}

pub(super) fn matmul(dtype: DType) -> impl FnOnce(&mut KernelBuilder) {
    move |k: &mut KernelBuilder| {
        let (a, b, c) = (
            k.ptr(dtype, "a_ptr"),
            k.ptr(dtype, "b_ptr"),
            k.ptr(F32, "c_ptr"),
        );
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
        let offs_m = tl::program_id(0) * bm + tl::arange(0, bm);
        let offs_n = tl::program_id(1) * bn + tl::arange(0, bn);
        let offs_k = tl::arange(0, bk);
        let acc = tl::zeros([bm, bn], F32);
        let acc: Tensor = tl::range(0, kk, bk).fold(acc, |k0, acc| {
            let ks = offs_k + k0;
            let am = offs_m.col().lt(m) & ks.row().lt(kk);
            let at = tl::load(a + offs_m.col() * kk + ks.row())
                .mask(am)
                .other(0.0);
            let bmask = ks.col().lt(kk) & offs_n.row().lt(n);
            let bt = tl::load(b + ks.col() * n + offs_n.row())
                .mask(bmask)
                .other(0.0);
            tl::dot(at, bt, acc)
        });
        let cm = offs_m.col().lt(m) & offs_n.row().lt(n);
        tl::store(c + offs_m.col() * n + offs_n.row(), acc).mask(cm);
    }
}

pub(super) fn layer_norm(k: &mut KernelBuilder) {
    let (x, y, w, b) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(F32, "w_ptr"),
        k.ptr(F32, "b_ptr"),
    );
    let n = k.scalar(I32, "N");
    let block = k.constexpr("BLOCK");
    let row = tl::program_id(0);
    let offs = tl::arange(0, block);
    let mask = offs.lt(n);
    let xs = tl::load(x + row * n + offs).mask(mask).other(0.0);
    let mean = xs.sum(0) / n;
    let xc = tl::where_(mask, xs - mean, 0.0);
    let var = (xc * xc).sum(0) / n;
    let rstd = tl::rsqrt(var + 1e-5);
    let ws = tl::load(w + offs).mask(mask);
    let bs = tl::load(b + offs).mask(mask);
    tl::store(y + row * n + offs, xc * rstd * ws + bs).mask(mask);
}

/// Per program: a `[BM, BN]` tile of a row-major `[M, N]` matrix; row sums, column maxima
/// and row argmaxes of the tile.
pub(super) fn tile_reductions(k: &mut KernelBuilder) {
    let x = k.ptr(F32, "x_ptr");
    let (rows, cols, amax) = (
        k.ptr(F32, "row_sum"),
        k.ptr(F32, "col_max"),
        k.ptr(I32, "row_argmax"),
    );
    let (m, n) = (k.scalar(I32, "M"), k.scalar(I32, "N"));
    let (bm, bn) = (k.constexpr("BM"), k.constexpr("BN"));
    let pid = tl::program_id(0);
    let offs_m = pid * bm + tl::arange(0, bm);
    let offs_n = tl::arange(0, bn);
    let mask = offs_m.col().lt(m) & offs_n.row().lt(n);
    let t = tl::load(x + offs_m.col() * n + offs_n.row())
        .mask(mask)
        .other(0.0);
    tl::store(rows + offs_m, t.sum(1)).mask(offs_m.lt(m));
    let masked = tl::where_(mask, t, f32::NEG_INFINITY);
    tl::store(cols + pid * bn + offs_n, masked.max(0)).mask(offs_n.lt(n));
    tl::store(amax + offs_m, masked.argmax(1)).mask(offs_m.lt(m));
}

pub(super) fn cumsum_kernel(k: &mut KernelBuilder) {
    let (x, y, z) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(F32, "z_ptr"),
    );
    let n = k.scalar(I32, "n");
    let block = k.constexpr("BLOCK");
    let offs = tl::arange(0, block);
    let xs = tl::load(x + offs).mask(offs.lt(n)).other(0.0);
    tl::store(y + offs, xs.cumsum(0)).mask(offs.lt(n));
    // The same values as a [BLOCK/8, 8] tile, scanned along rows, reversed.
    let t = xs.reshape([block / 8, 8]);
    let r = tl::cumsum_reverse(t, 1);
    let o2 = tl::arange(0, block).reshape([block / 8, 8]);
    tl::store(z + o2, r).mask(o2.lt(n));
}

#[test]
fn vector_add_msl_snapshot() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 1024)], vector_add);
    let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
    check_snapshot("vector_add", &p);
    assert_eq!(p.input_names, ["x_ptr", "y_ptr", "n_elements"]);
    assert_eq!(p.output_names, ["out_ptr"]);
    assert_eq!(p.threadgroup_mem_bytes, 0);
    assert!(
        !p.source.contains("barrier"),
        "no data moves between threads"
    );
}

#[test]
fn snapshots_softmax_matmul_reduction() {
    let k = build("softmax", &[("BLOCK", 1024)], softmax);
    let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
    // Float max: a NaN-safe butterfly (`tm_fmax` over shuffles), never `simd_max`.
    assert!(!p.source.contains("simd_max("), "{}", p.source);
    assert!(p.source.contains("tm_fmax("), "{}", p.source);
    // Float sum: `simd_sum` with -0.0 as the identity (`tm_simd_fsum`, see reduce.rs).
    assert!(p.source.contains("tm_simd_fsum("), "{}", p.source);
    assert!(p.header.contains("simd_sum("), "{}", p.header);
    check_snapshot("softmax", &p);
    let k = build("matmul", &[("BM", 32), ("BN", 32), ("BK", 16)], matmul(F32));
    let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
    assert!(
        p.source.contains("simdgroup_multiply_accumulate"),
        "{}",
        p.source
    );
    check_snapshot("matmul", &p);
    let k = build("tiles", &[("BM", 16), ("BN", 64)], tile_reductions);
    let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
    check_snapshot("tile_reductions", &p);
}

/// Compares with `src/codegen/snapshots/<name>.metal`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn check_snapshot(name: &str, p: &MetalProgram) {
    let text = format!("{}// ---- body ----\n{}", p.header, p.source);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/codegen/snapshots")
        .join(format!("{name}.metal"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() || !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert!(
        want == text,
        "MSL of `{name}` changed (UPDATE_SNAPSHOTS=1 to accept):\n{text}"
    );
}

#[test]
fn reduction_layouts_print_different_code() {
    let k = build("tiles", &[("BM", 16), ("BN", 64)], tile_reductions);
    let mut seen: Vec<String> = Vec::new();
    for l in ReductionLayout::ALL {
        let p = metal::compile(&k, &LaunchOptions::default().reduction_layout(l)).unwrap();
        assert!(
            !seen.contains(&p.source),
            "{} repeats another layout",
            l.name()
        );
        assert!(p.layouts.iter().any(|c| c.layout.starts_with(l.name())));
        seen.push(p.source);
    }
}

#[test]
fn limits_are_errors_before_launch() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 1024)], vector_add);
    let e = metal::compile(&k, &LaunchOptions::default().num_warps(64)).unwrap_err();
    assert!(e.to_string().contains("2048 threads"), "{e}");
    let e = metal::compile(&k, &LaunchOptions::default().num_warps(3)).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    // A 256x1024x16 f32 tile product stages 40 KB of operands even in 8-deep K slices.
    let k = build(
        "matmul",
        &[("BM", 256), ("BN", 1024), ("BK", 16)],
        matmul(F32),
    );
    let e = metal::compile(&k, &LaunchOptions::default()).unwrap_err();
    assert!(e.to_string().contains("threadgroup memory"), "{e}");
}

#[test]
fn cache_returns_the_same_program_and_debug_names_no_attributes() {
    let k = build("add_kernel", &[("BLOCK_SIZE", 256)], vector_add);
    let a = msl(&k, &LaunchOptions::default()).unwrap();
    let b = msl(&k, &LaunchOptions::default()).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let c = msl(&k, &LaunchOptions::default().num_warps(2)).unwrap();
    assert_ne!(a.name, c.name);
    assert!(a.name.starts_with("add_kernel_"));
}

#[test]
fn emulated_vector_add() {
    if !emu_ok("emulated_vector_add") {
        return;
    }
    let n = 1000;
    let (x, y) = (rnd(n, 1, -1.0, 1.0), rnd(n, 2, -1.0, 1.0));
    for (block, warps) in [(256, 4), (64, 4), (1024, 8)] {
        let k = build("add_kernel", &[("BLOCK_SIZE", block)], vector_add);
        let out = run(
            &k,
            &LaunchOptions::default().num_warps(warps),
            &[
                EmuBuffer::new("x_ptr", &[n], &x),
                EmuBuffer::new("y_ptr", &[n], &y),
                EmuBuffer::scalar("n_elements", n as i32),
            ],
            &[OutputSpec::new("out_ptr", F32, &[n])],
            [n.div_ceil(block as usize), 1, 1],
        );
        let want: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| *a as f64 + *b as f64)
            .collect();
        assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-6, "add");
    }
}

#[test]
fn emulated_softmax() {
    if !emu_ok("emulated_softmax") {
        return;
    }
    let (rows, cols) = (5usize, 100usize);
    let x = rnd(rows * cols, 3, -4.0, 4.0);
    for (block, warps) in [(128, 4), (1024, 4), (128, 1)] {
        let k = build("softmax", &[("BLOCK", block)], softmax);
        let out = run(
            &k,
            &LaunchOptions::default().num_warps(warps),
            &[
                EmuBuffer::new("in_ptr", &[rows, cols], &x),
                EmuBuffer::scalar("row_stride", cols as i32),
                EmuBuffer::scalar("n_cols", cols as i32),
            ],
            &[OutputSpec::new("out_ptr", F32, &[rows, cols])],
            [rows, 1, 1],
        );
        let mut want = Vec::new();
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let m = row.iter().fold(f64::NEG_INFINITY, |a, b| a.max(*b as f64));
            let s: f64 = row.iter().map(|v| (*v as f64 - m).exp()).sum();
            want.extend(row.iter().map(|v| (*v as f64 - m).exp() / s));
        }
        assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-5, "softmax");
    }
}

pub(super) fn matmul_ref(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
        }
    }
    c
}

#[test]
fn emulated_matmul_tiles_and_scalar() {
    if !emu_ok("emulated_matmul_tiles_and_scalar") {
        return;
    }
    let (m, n, kk) = (37usize, 45usize, 50usize);
    let a = rnd(m * kk, 4, -1.0, 1.0);
    let b = rnd(kk * n, 5, -1.0, 1.0);
    let want = matmul_ref(&a, &b, m, n, kk);
    // (BM, BN, BK, warps): 8-multiples take simdgroup_matrix; BN = 4 takes the FMA loop.
    for (bm, bn, bk, warps, tiles) in [
        (32, 32, 16, 4, true),
        (16, 64, 32, 2, true),
        (16, 4, 16, 1, false),
    ] {
        let k = build("matmul", &[("BM", bm), ("BN", bn), ("BK", bk)], matmul(F32));
        let opts = LaunchOptions::default().num_warps(warps);
        let p = metal::compile(&k, &opts).unwrap();
        assert_eq!(p.source.contains("simdgroup_matrix"), tiles);
        let out = run_prog(
            &p,
            &[
                EmuBuffer::new("a_ptr", &[m, kk], &a),
                EmuBuffer::new("b_ptr", &[kk, n], &b),
                EmuBuffer::scalar("M", m as i32),
                EmuBuffer::scalar("N", n as i32),
                EmuBuffer::scalar("K", kk as i32),
            ],
            &[OutputSpec::new("c_ptr", F32, &[m, n])],
            [m.div_ceil(bm as usize), n.div_ceil(bn as usize), 1],
        );
        assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-5, "matmul");
    }
    // Half operands, fp32 accumulation, through the tiles.
    let ah: Vec<half::f16> = a.iter().map(|v| half::f16::from_f32(*v)).collect();
    let bh: Vec<half::f16> = b.iter().map(|v| half::f16::from_f32(*v)).collect();
    let a16: Vec<f32> = ah.iter().map(|v| v.to_f32()).collect();
    let b16: Vec<f32> = bh.iter().map(|v| v.to_f32()).collect();
    let want = matmul_ref(&a16, &b16, m, n, kk);
    let k = build(
        "matmul_f16",
        &[("BM", 32), ("BN", 32), ("BK", 16)],
        matmul(F16),
    );
    let out = run(
        &k,
        &LaunchOptions::default(),
        &[
            EmuBuffer::new("a_ptr", &[m, kk], &ah),
            EmuBuffer::new("b_ptr", &[kk, n], &bh),
            EmuBuffer::scalar("M", m as i32),
            EmuBuffer::scalar("N", n as i32),
            EmuBuffer::scalar("K", kk as i32),
        ],
        &[OutputSpec::new("c_ptr", F32, &[m, n])],
        [2, 2, 1],
    );
    assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-5, "matmul f16");
}

#[test]
fn emulated_layer_norm() {
    if !emu_ok("emulated_layer_norm") {
        return;
    }
    let (rows, n) = (3usize, 100usize);
    let x = rnd(rows * n, 6, -2.0, 3.0);
    let w = rnd(n, 7, 0.5, 1.5);
    let b = rnd(n, 8, -0.5, 0.5);
    let k = build("layer_norm", &[("BLOCK", 128)], layer_norm);
    let out = run(
        &k,
        &LaunchOptions::default(),
        &[
            EmuBuffer::new("x_ptr", &[rows, n], &x),
            EmuBuffer::new("w_ptr", &[n], &w),
            EmuBuffer::new("b_ptr", &[n], &b),
            EmuBuffer::scalar("N", n as i32),
        ],
        &[OutputSpec::new("y_ptr", F32, &[rows, n])],
        [rows, 1, 1],
    );
    let mut want = Vec::new();
    for r in 0..rows {
        let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|v| *v as f64).collect();
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + 1e-5).sqrt();
        want.extend((0..n).map(|j| (row[j] - mean) * rstd * w[j] as f64 + b[j] as f64));
    }
    assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-5, "layer_norm");
}

#[test]
fn emulated_reductions_in_every_layout() {
    if !emu_ok("emulated_reductions_in_every_layout") {
        return;
    }
    let (m, n) = (37usize, 50usize);
    // Small integers make ties, so argmax's left-most rule is exercised.
    let x: Vec<f32> = rnd(m * n, 9, 0.0, 8.0).iter().map(|v| v.floor()).collect();
    for (bm, bn) in [(16, 64), (4, 64), (32, 64)] {
        let programs = m.div_ceil(bm as usize);
        let k = build("tiles", &[("BM", bm), ("BN", bn)], tile_reductions);
        for layout in ReductionLayout::ALL {
            for warps in [1, 4] {
                let opts = LaunchOptions::default()
                    .num_warps(warps)
                    .reduction_layout(layout);
                let out = run(
                    &k,
                    &opts,
                    &[
                        EmuBuffer::new("x_ptr", &[m, n], &x),
                        EmuBuffer::scalar("M", m as i32),
                        EmuBuffer::scalar("N", n as i32),
                    ],
                    &[
                        OutputSpec::new("row_sum", F32, &[m]),
                        OutputSpec::new("col_max", F32, &[programs * bn as usize]),
                        OutputSpec::new("row_argmax", I32, &[m]),
                    ],
                    [programs, 1, 1],
                );
                let what = format!("{} BM={bm} warps={warps}", layout.name());
                let sums: Vec<f64> = (0..m)
                    .map(|i| x[i * n..(i + 1) * n].iter().map(|v| *v as f64).sum())
                    .collect();
                assert_close(
                    &out[0].to_vec::<f32>().unwrap(),
                    &sums,
                    1e-6,
                    &format!("row sums {what}"),
                );
                let cols = out[1].to_vec::<f32>().unwrap();
                for p in 0..programs {
                    for j in 0..n {
                        let want = (p * bm as usize..((p + 1) * bm as usize).min(m))
                            .map(|i| x[i * n + j])
                            .fold(f32::NEG_INFINITY, f32::max);
                        assert_eq!(cols[p * bn as usize + j], want, "col max {what} p{p} j{j}");
                    }
                }
                let am = out[2].to_vec::<i32>().unwrap();
                for i in 0..m {
                    let row = &x[i * n..(i + 1) * n];
                    let best = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    let want = row.iter().position(|v| *v == best).unwrap() as i32;
                    assert_eq!(am[i], want, "argmax {what} row {i}");
                }
            }
        }
    }
}

#[test]
fn emulated_cumsum() {
    if !emu_ok("emulated_cumsum") {
        return;
    }
    let n = 200usize;
    let x = rnd(n, 10, -1.0, 1.0);
    let k = build("scan", &[("BLOCK", 256)], cumsum_kernel);
    let out = run(
        &k,
        &LaunchOptions::default(),
        &[
            EmuBuffer::new("x_ptr", &[n], &x),
            EmuBuffer::scalar("n", n as i32),
        ],
        &[
            OutputSpec::new("y_ptr", F32, &[n]),
            OutputSpec::new("z_ptr", F32, &[n]),
        ],
        [1, 1, 1],
    );
    let mut run_sum = 0.0f64;
    let want: Vec<f64> = x
        .iter()
        .map(|v| {
            run_sum += *v as f64;
            run_sum
        })
        .collect();
    assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-5, "cumsum");
    let mut want = vec![0.0f64; n];
    for r in 0..n.div_ceil(8) {
        let mut acc = 0.0;
        for c in (0..8).rev() {
            let i = r * 8 + c;
            acc += if i < n { x[i] as f64 } else { 0.0 };
            if i < n {
                want[i] = acc;
            }
        }
    }
    assert_close(
        &out[1].to_vec::<f32>().unwrap(),
        &want,
        1e-5,
        "reverse row cumsum",
    );
}

#[test]
fn emulated_atomics() {
    if !emu_ok("emulated_atomics") {
        return;
    }
    let n = 1000usize;
    let x = rnd(n, 11, -3.0, 5.0);
    let k = build("atomics", &[("BLOCK", 128)], |k| {
        let (x, hist, total, top) = (
            k.ptr(F32, "x_ptr"),
            k.ptr(I32, "hist"),
            k.ptr(F32, "total"),
            k.ptr(F32, "top"),
        );
        let n = k.scalar(I32, "n");
        let block = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        let v = tl::load(x + offs).mask(mask).other(0.0);
        let bin = tl::floor(v + 3.0).to(I32);
        tl::atomic_add(hist + bin, 1).mask(mask);
        tl::atomic_add(total, v.sum(0));
        tl::atomic_max(top + (offs % 4), v).mask(mask);
    });
    let out = run(
        &k,
        &LaunchOptions::default(),
        &[
            EmuBuffer::new("x_ptr", &[n], &x),
            EmuBuffer::scalar("n", n as i32),
        ],
        &[
            OutputSpec::new("hist", I32, &[8]).init(0.0),
            OutputSpec::new("total", F32, &[1]).init(0.0),
            OutputSpec::new("top", F32, &[4]).init(-1e30),
        ],
        [n.div_ceil(128), 1, 1],
    );
    let mut hist = [0i32; 8];
    for v in &x {
        hist[(v + 3.0).floor() as usize] += 1;
    }
    assert_eq!(out[0].to_vec::<i32>().unwrap(), hist);
    let total: f64 = x.iter().map(|v| *v as f64).sum();
    assert_close(
        &out[1].to_vec::<f32>().unwrap(),
        &[total],
        1e-5,
        "atomic sum",
    );
    let top: Vec<f32> = (0..4)
        .map(|r| {
            (r..n)
                .step_by(4)
                .map(|i| x[i])
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect();
    assert_eq!(out[2].to_vec::<f32>().unwrap(), top);
}

#[test]
fn reverse_lane_order_catches_a_missing_barrier() {
    if !emu_ok("reverse_lane_order_catches_a_missing_barrier") {
        return;
    }
    let k = build("softmax", &[("BLOCK", 128)], softmax);
    let mut p = metal::compile(
        &k,
        &LaunchOptions::default().reduction_layout(ReductionLayout::RowMajor),
    )
    .unwrap();
    p.source = p
        .source
        .lines()
        .filter(|l| !l.contains("threadgroup_barrier"))
        .collect::<Vec<_>>()
        .join("\n");
    let x = rnd(128, 12, -1.0, 1.0);
    let (grid, tg) = p.launch_dims([1, 1, 1]);
    let l = MetalLaunch::new(&p.name, &p.source)
        .header(&p.header)
        .grid(grid)
        .threadgroup(tg)
        .input(EmuBuffer::new("in_ptr", &[1, 128], &x))
        .input(EmuBuffer::scalar("row_stride", 128i32))
        .input(EmuBuffer::scalar("n_cols", 128i32))
        .output(OutputSpec::new("out_ptr", F32, &[1, 128]));
    assert!(
        emu::run_all_orders(&l).is_err(),
        "the unsynchronised kernel went unnoticed"
    );
}

#[test]
fn debug_dump_and_source_cache_folder() {
    let dir = std::env::temp_dir().join(format!("tm-codegen-cache-{}", std::process::id()));
    let k = build("cached_kernel", &[("BLOCK_SIZE", 32)], vector_add);
    let p = msl_with(
        &k,
        &LaunchOptions::default().num_warps(1),
        &[],
        true,
        Some(&dir),
    )
    .unwrap();
    let text = std::fs::read_to_string(dir.join(format!("{}.metal", p.name))).unwrap();
    assert!(text.contains(&p.source));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emulated_atomics_every_kind() {
    if !emu_ok("emulated_atomics_every_kind") {
        return;
    }
    let k = build("atomic_kinds", &[], |k| {
        let (f, q, r) = (k.ptr(F32, "f"), k.ptr(I32, "q"), k.ptr(I32, "r"));
        let offs = tl::arange(0, 16);
        let pid = tl::program_id(0);
        let z = tl::zeros([16], I32);
        tl::atomic_add(f + z, 1.0).mask(offs.lt(10));
        tl::atomic_min(f + 1 + z, (pid * 16 + offs).to(F32) - 5.0);
        tl::atomic_add(q + z, 1);
        tl::atomic_max(q + 1 + z, pid * 16 + offs);
        tl::atomic_min(q + 2 + z, pid * 16 + offs - 7);
        tl::atomic_or(q + 3 + z, 1 << (offs % 8));
        tl::atomic_xor(q + 4 + z, 1);
        // One winner per slot: cas 0 -> pid + 1.
        let old = tl::atomic_cas(q + 6 + pid % 2, 0, pid + 1);
        tl::atomic_xchg(q + 8 + pid, old);
        // All ones, then each program clears its bit.
        tl::atomic_or(r + z, -1);
        let bit = (tl::zeros_like(pid) + 1) << (pid % 4);
        tl::atomic_and(r + 1 + z, !bit);
    });
    let progs = 64usize;
    let runs = run_each_order(
        &k,
        &[
            OutputSpec::new("f", F32, &[2]).init(0.0),
            OutputSpec::new("q", I32, &[8 + progs]).init(0.0),
            OutputSpec::new("r", I32, &[2]).init(-1.0),
        ],
        [progs, 1, 1],
    );
    for out in runs {
        let f = out[0].to_vec::<f32>().unwrap();
        let q = out[1].to_vec::<i32>().unwrap();
        let r = out[2].to_vec::<i32>().unwrap();
        assert_eq!(f, [(progs * 10) as f32, -5.0]);
        assert_eq!(q[0], (progs * 16) as i32);
        assert_eq!(q[1], (progs * 16 - 1) as i32);
        assert_eq!(q[2], -7);
        assert_eq!(q[3], 0xff);
        assert_eq!(q[4], 0, "an even number of xors");
        assert!(q[6] > 0 && q[7] > 0);
        let winners = q[8..].iter().filter(|&&v| v == 0).count();
        assert_eq!(winners, 2, "exactly one cas per slot sees 0");
        assert_eq!(r, [-1, !0xf]);
    }
}

#[test]
fn emulated_online_softmax_reduces_inside_loops() {
    if !emu_ok("emulated_online_softmax_reduces_inside_loops") {
        return;
    }
    let k = build("online_softmax", &[("BLOCK", 32)], |k| {
        let (x, y) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "y_ptr"));
        let n = k.scalar(I32, "n_cols");
        let block = k.constexpr("BLOCK");
        let row = tl::program_id(0) * n;
        let cols = tl::arange(0, block);
        let init = (
            tl::zeros_like(tl::program_id(0)).to(F32) - f32::INFINITY,
            tl::zeros_like(tl::program_id(0)).to(F32),
        );
        let (m, s): (Tensor, Tensor) = tl::range(0, n, block).fold(init, |c0, (m, s)| {
            let offs = cols + c0;
            let v = tl::load(x + row + offs)
                .mask(offs.lt(n))
                .other(f32::NEG_INFINITY);
            let m_new = tl::maximum(m, v.max(0));
            let s_new = s * tl::exp(m - m_new) + tl::exp(v - m_new).sum(0);
            (m_new, s_new)
        });
        tl::range(0, n, block).for_each(|c0| {
            let offs = cols + c0;
            let v = tl::load(x + row + offs).mask(offs.lt(n)).other(0.0);
            tl::store(y + row + offs, tl::exp(v - m) / s).mask(offs.lt(n));
        });
    });
    let (rows, cols) = (3usize, 77usize);
    let x = rnd(rows * cols, 13, -3.0, 3.0);
    let mut want = Vec::new();
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, b| a.max(*b as f64));
        let s: f64 = row.iter().map(|v| (*v as f64 - m).exp()).sum();
        want.extend(row.iter().map(|v| (*v as f64 - m).exp() / s));
    }
    for layout in ReductionLayout::ALL {
        for warps in [1, 2] {
            let out = run(
                &k,
                &LaunchOptions::default()
                    .num_warps(warps)
                    .reduction_layout(layout),
                &[
                    EmuBuffer::new("x_ptr", &[rows, cols], &x),
                    EmuBuffer::scalar("n_cols", cols as i32),
                ],
                &[OutputSpec::new("y_ptr", F32, &[rows, cols])],
                [rows, 1, 1],
            );
            assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 1e-5, layout.name());
        }
    }
}

/// Triton's tutorial matmul: pointer blocks carried through the loop and advanced by
/// `BLOCK_K * stride`, K a multiple of `BK` (no K mask).
#[test]
fn emulated_matmul_with_carried_pointers() {
    if !emu_ok("emulated_matmul_with_carried_pointers") {
        return;
    }
    let k = build("matmul_ptrs", &[("BM", 16), ("BN", 32), ("BK", 16)], |k| {
        let (a, b, c) = (
            k.ptr(F32, "a_ptr"),
            k.ptr(F32, "b_ptr"),
            k.ptr(F32, "c_ptr"),
        );
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
        let offs_m = (tl::program_id(0) * bm + tl::arange(0, bm)) % m;
        let offs_n = (tl::program_id(1) * bn + tl::arange(0, bn)) % n;
        let offs_n = tl::max_contiguous(tl::multiple_of(offs_n, [bn]), [bn]);
        let offs_k = tl::arange(0, bk);
        let a_ptrs = a + offs_m.col() * kk + offs_k.row();
        let b_ptrs = b + offs_k.col() * n + offs_n.row();
        let init = (tl::zeros([bm, bn], F32), a_ptrs, b_ptrs);
        let (acc, _, _): (Tensor, Tensor, Tensor) =
            tl::range(0, kk, bk).fold(init, |_, (acc, ap, bp)| {
                let acc = tl::dot(tl::load(ap), tl::load(bp), acc);
                (acc, ap + bk, bp + n * bk)
            });
        let rows = tl::program_id(0) * bm + tl::arange(0, bm);
        let cols = tl::program_id(1) * bn + tl::arange(0, bn);
        let mask = rows.col().lt(m) & cols.row().lt(n);
        tl::store(c + rows.col() * n + cols.row(), acc).mask(mask);
    });
    let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
    assert!(p.source.contains("tm_vload(b_ptr"), "{}", p.source);
    let (m, n, kk) = (40usize, 72usize, 48usize);
    let a = rnd(m * kk, 14, -1.0, 1.0);
    let b = rnd(kk * n, 15, -1.0, 1.0);
    let out = run_prog(
        &p,
        &[
            EmuBuffer::new("a_ptr", &[m, kk], &a),
            EmuBuffer::new("b_ptr", &[kk, n], &b),
            EmuBuffer::scalar("M", m as i32),
            EmuBuffer::scalar("N", n as i32),
            EmuBuffer::scalar("K", kk as i32),
        ],
        &[OutputSpec::new("c_ptr", F32, &[m, n])],
        [m.div_ceil(16), n.div_ceil(32), 1],
    );
    assert_close(
        &out[0].to_vec::<f32>().unwrap(),
        &matmul_ref(&a, &b, m, n, kk),
        1e-5,
        "matmul",
    );
}
