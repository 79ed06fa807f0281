//! Triton's tutorial matmul (examples/matmul.rs) at the block configurations Triton's own
//! autotuner lists, f32 and f16, 4 and 8 warps, ragged M, N and K, plain and transposed
//! operands (through strides, as a Triton user passes `a.T`), on every target: the CPU
//! interpreter (the reference), the compiled CPU executor, emulated Metal in both lane
//! orders, and CUDA (printed for sm_90 and compiled by NVRTC when it is installed).
//!
//! On Metal every configuration fits the 32 KB of threadgroup memory with the accumulator
//! in `simdgroup_matrix` fragments across the K loop. Inputs hold edge values (zeros of
//! both signs, a NaN in A, an infinity in B, tiny and large magnitudes); the output has
//! padding columns that must stay poisoned.

#[allow(dead_code)]
#[path = "../examples/matmul.rs"]
mod matmul;

use triton_metal::codegen::{self, nvrtc::Nvrtc, LaunchOptions};
use triton_metal::emu::{Emulator, LaneOrder};
use triton_metal::ir::OpId;
use triton_metal::opt::plan::Decision;
use triton_metal::opt::{Chip, HardwareProfile};
use triton_metal::runtime::{out, Target};
use triton_metal::tl::{JitKernel, Signature};
use triton_metal::{
    Array,
    DType::{self, F16, F32},
};

const M: usize = 150;
const N: usize = 133;
const K: usize = 75;
/// Output row stride: the last `LDC - N` columns are never written.
const LDC: usize = N + 3;
const POISON: f64 = -777.0;

/// Deterministic values in [-2, 2) with edge values mixed in.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let r = (s >> 11) as f64 / (1u64 << 53) as f64;
            match i % 29 {
                3 => 0.0,
                7 => -0.0,
                11 => 1.0e-4 * (r - 0.5),
                19 => 96.0 * (r - 0.5),
                _ => 4.0 * r - 2.0,
            }
        })
        .collect()
}

fn array(v: &[f64], dtype: DType, shape: &[usize]) -> Array {
    match dtype {
        F16 => {
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x)).collect();
            Array::from_slice(&h, shape).unwrap()
        }
        _ => {
            let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Array::from_slice(&f, shape).unwrap()
        }
    }
}

fn read(a: &Array) -> Vec<f64> {
    match a.dtype() {
        F16 => a
            .to_vec::<half::f16>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect(),
        _ => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

/// One problem: A `[M, K]` and B `[K, N]` as stored (rounded to the dtype), each either
/// row-major or transposed in memory.
struct Problem {
    dtype: DType,
    a: Vec<f64>,
    b: Vec<f64>,
    a_t: bool,
    b_t: bool,
}

impl Problem {
    fn new(dtype: DType, a_t: bool, b_t: bool) -> Problem {
        let round = |v: Vec<f64>| read(&array(&v, dtype, &[v.len()]));
        let mut a = round(values(M * K, 1));
        let mut b = round(values(K * N, 2));
        a[3 * K + 5] = f64::NAN;
        b[7 * N + 9] = f64::INFINITY;
        Problem {
            dtype,
            a,
            b,
            a_t,
            b_t,
        }
    }

    /// A `[M, K]` (or its transpose in memory), B `[K, N]` (or its transpose), and the
    /// strides the kernel walks them with.
    fn operands(&self) -> (Array, Array, [i32; 4]) {
        let (m, n, k) = (M as i32, N as i32, K as i32);
        let t = |v: &[f64], rows: usize, cols: usize| -> Vec<f64> {
            (0..rows * cols)
                .map(|i| v[(i % rows) * cols + i / rows])
                .collect()
        };
        let (a, sa) = if self.a_t {
            (array(&t(&self.a, M, K), self.dtype, &[K, M]), [1, m])
        } else {
            (array(&self.a, self.dtype, &[M, K]), [k, 1])
        };
        let (b, sb) = if self.b_t {
            (array(&t(&self.b, K, N), self.dtype, &[N, K]), [1, k])
        } else {
            (array(&self.b, self.dtype, &[K, N]), [n, 1])
        };
        (a, b, [sa[0], sa[1], sb[0], sb[1]])
    }

    /// `sum_k |a_ik * b_kj|`, which bounds the rounding error of any summation order.
    fn magnitude(&self, i: usize, j: usize) -> f64 {
        (0..K)
            .map(|p| (self.a[i * K + p] * self.b[p * N + j]).abs())
            .filter(|x| x.is_finite())
            .sum()
    }

    fn reference(&self, i: usize, j: usize) -> f64 {
        (0..K).map(|p| self.a[i * K + p] * self.b[p * N + j]).sum()
    }
}

fn run(
    kernel: &JitKernel,
    p: &Problem,
    blocks: [usize; 3],
    (warps, stages): (usize, u32),
    target: Target,
) -> Vec<f64> {
    run_with(kernel, p, blocks, (warps, stages), target, None)
}

/// [`run`], with integer arguments specialised on (unit strides become facts, so loads
/// along them are vector loads) or not as `specialize` says (the target's default when
/// `None`).
fn run_with(
    kernel: &JitKernel,
    p: &Problem,
    blocks: [usize; 3],
    (warps, stages): (usize, u32),
    target: Target,
    specialize: Option<bool>,
) -> Vec<f64> {
    let (a, b, s) = p.operands();
    let programs = M.div_ceil(blocks[0]) * N.div_ceil(blocks[1]);
    let launch = kernel
        .launch()
        .grid([programs])
        .args((
            &a,
            &b,
            out(&[M, LDC], p.dtype).fill(POISON),
            M as i32,
            N as i32,
            K as i32,
            s[0],
            s[1],
            s[2],
            s[3],
            LDC as i32,
            1,
        ))
        .constexpr("BLOCK_SIZE_M", blocks[0] as i64)
        .constexpr("BLOCK_SIZE_N", blocks[1] as i64)
        .constexpr("BLOCK_SIZE_K", blocks[2] as i64)
        .constexpr("GROUP_SIZE_M", 8)
        .num_warps(warps)
        .num_stages(stages)
        .target(target);
    let launch = match specialize {
        Some(on) => launch.specialize_integers(on),
        None => launch,
    };
    let o = launch
        .run()
        .unwrap_or_else(|e| panic!("{target:?} {blocks:?} {warps} warps: {e}"));
    read(&o[0])
}

/// Every valid element close to the f64 reference (same NaN/inf pattern), and the padding
/// columns still poisoned.
fn check(what: &str, p: &Problem, got: &[f64]) {
    let half_ulp = if p.dtype == F16 { 1.0 / 1024.0 } else { 0.0 };
    for i in 0..M {
        for j in 0..LDC {
            let g = got[i * LDC + j];
            if j >= N {
                assert_eq!(g, POISON, "{what}: padding C[{i}, {j}] was written");
                continue;
            }
            let want = p.reference(i, j);
            let ok = if want.is_nan() {
                g.is_nan()
            } else if want.is_infinite() {
                g == want
            } else {
                (g - want).abs() <= 1e-5 * p.magnitude(i, j) + half_ulp * want.abs() + 1e-30
            };
            assert!(ok, "{what}: C[{i}, {j}] = {g}, want {want}");
        }
    }
}

/// The lines of the K loop (the first `for` over a trip count) of Metal `source`.
fn k_loop(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| l.trim_start().starts_with("for (uint t") && l.contains("< trips"))
    else {
        return String::new();
    };
    let indent = &lines[start][..lines[start].len() - lines[start].trim_start().len()];
    let end = (start + 1..lines.len())
        .find(|&i| lines[i] == format!("{indent}}}"))
        .unwrap_or(lines.len());
    lines[start..end].join("\n")
}

const BARRIER: &str = "threadgroup_barrier(";

/// The tutorial kernel specialised for `blocks` and `dtype` operands.
fn specialized(
    kernel: &JitKernel,
    blocks: [usize; 3],
    dtype: DType,
) -> std::sync::Arc<triton_metal::ir::Kernel> {
    let sig = Signature::new()
        .constexpr("BLOCK_SIZE_M", blocks[0] as i64)
        .constexpr("BLOCK_SIZE_N", blocks[1] as i64)
        .constexpr("BLOCK_SIZE_K", blocks[2] as i64)
        .constexpr("GROUP_SIZE_M", 8)
        .array(dtype)
        .array(dtype)
        .array(dtype);
    kernel.specialize(&sig).unwrap()
}

/// The Metal program for one configuration: within the M1's 32 KB, the accumulator in
/// fragments across the loop (loaded once as a constant, stored once after the last MMA),
/// A and B staged in `stages` threadgroup buffers (with two, one barrier per K step, else
/// two), each SIMD-group loading its A and B fragments once per 8 of K for all its MMAs.
fn check_metal_plan(
    kernel: &JitKernel,
    blocks: [usize; 3],
    warps: u32,
    dtype: DType,
    stages: usize,
) {
    let k = specialized(kernel, blocks, dtype);
    let opts = LaunchOptions::default().num_warps(warps);
    let prog = codegen::msl(&k, &opts).unwrap();
    assert!(
        prog.threadgroup_mem_bytes <= 32 * 1024,
        "{blocks:?} on {warps} warps: {} bytes",
        prog.threadgroup_mem_bytes
    );
    println!(
        "{blocks:?} on {warps} warps: {} bytes of threadgroup memory",
        prog.threadgroup_mem_bytes
    );
    let src = &prog.source;
    let mma = src.rfind("simdgroup_multiply_accumulate").unwrap();
    assert!(src.contains("make_filled_simdgroup_matrix<float, 8, 8>"));
    assert_eq!(src.matches("simdgroup_store(").count(), 1, "{src}");
    assert!(src.find("simdgroup_store(").unwrap() > mma, "{src}");
    let plan = prog.plan.to_string();
    assert_eq!(
        plan.matches(&format!("load ahead stages={stages} ;"))
            .count(),
        2,
        "{blocks:?} {dtype} on {warps} warps:\n{plan}"
    );
    // The reason names the budget either way.
    let budget = if stages == 2 {
        "fit the 32768-byte budget (profile threadgroup_memory_bytes 32768 on m1"
    } else {
        "exceed the 32768-byte budget (profile threadgroup_memory_bytes 32768 on m1"
    };
    assert!(plan.contains(budget), "{plan}");
    let body = k_loop(src);
    let per_step = if stages == 2 { 1 } else { 2 };
    assert_eq!(body.matches(BARRIER).count(), per_step, "{body}");
    // One `simdgroup_load` of A fragments and one of B per 8 of K, in loops over the
    // SIMD-group's rows and columns of C tiles, outside the loop over its MMAs.
    assert_eq!(body.matches("simdgroup_load(").count(), 2, "{body}");
    assert!(body.contains("simdgroup_load(tm_fa[tm_x]"), "{body}");
    assert!(body.contains("simdgroup_load(tm_fb[tm_y]"), "{body}");

    let cuda = LaunchOptions::default()
        .num_warps(warps)
        .target(HardwareProfile::of(Chip::Sm90));
    let prog = codegen::cuda(&k, &cuda).unwrap();
    if std::env::var_os(codegen::nvrtc::NVRTC_DIR_ENV).is_some() {
        let nvrtc = Nvrtc::from_env().unwrap();
        nvrtc
            .compile(&prog.name, &prog.standalone(), &prog.nvrtc_arch("sm_90"))
            .unwrap_or_else(|e| panic!("NVRTC, {blocks:?} on {warps} warps: {e}"));
    }
}

fn tutorial(blocks: [usize; 3], dtype: DType, stages: usize) {
    let kernel = matmul::matmul_kernel().unwrap();
    let emu = Emulator::should_run("tutorial_matmul").unwrap();
    for (warps, a_t, b_t) in [(4, false, false), (8, true, true), (4, true, false)] {
        check_metal_plan(&kernel, blocks, warps as u32, dtype, stages);
        let p = Problem::new(dtype, a_t, b_t);
        let what = |t: &str| format!("{dtype} {blocks:?} {warps} warps, A^T {a_t}, B^T {b_t}, {t}");
        let reference = run(&kernel, &p, blocks, (warps, 3), Target::Cpu);
        check(&what("interpreter"), &p, &reference);
        let mut targets = vec![("compiled CPU", Target::CpuCompiled)];
        if emu {
            targets.push(("Metal, lanes forward", Target::Emulated(LaneOrder::Forward)));
            targets.push((
                "Metal, lanes reversed",
                Target::Emulated(LaneOrder::Reverse),
            ));
        }
        for (name, t) in targets {
            let got = run(&kernel, &p, blocks, (warps, 3), t);
            check(&what(name), &p, &got);
        }
    }
}

// Staging buffers on the M1: two where two copies of A and B fit its 32 KB.

#[test]
fn tutorial_128x128x32_f32() {
    // One copy of f32 A and B takes the whole 32 KB.
    tutorial([128, 128, 32], F32, 1);
}

#[test]
fn tutorial_128x128x32_f16() {
    // Two copies of 16 KB, rows unpadded (padded ones would take 37888 bytes).
    tutorial([128, 128, 32], F16, 2);
}

#[test]
fn tutorial_64x64x64_f32() {
    tutorial([64, 64, 64], F32, 1);
}

#[test]
fn tutorial_64x64x64_f16() {
    tutorial([64, 64, 64], F16, 2);
}

/// `num_stages(1)` turns Metal's double buffering off: the printed MSL differs (one
/// staging buffer, two barriers per K step instead of one), and the results do not, bit
/// for bit, in both lane orders, both right against f64.
#[test]
fn num_stages_1_turns_metal_double_buffering_off() {
    let kernel = matmul::matmul_kernel().unwrap();
    let emu = Emulator::should_run("num_stages_1_turns_metal_double_buffering_off").unwrap();
    let blocks = [64, 64, 32];
    for dtype in [F16, F32] {
        let k = specialized(&kernel, blocks, dtype);
        let two = codegen::msl(&k, &LaunchOptions::default()).unwrap();
        let one = codegen::msl(&k, &LaunchOptions::default().num_stages(1)).unwrap();
        let (p2, p1) = (two.plan.to_string(), one.plan.to_string());
        assert_eq!(p2.matches("load ahead stages=2 ;").count(), 2, "{p2}");
        assert_eq!(
            p1.matches("load ahead stages=1 ; num_stages 1").count(),
            2,
            "{p1}"
        );
        assert!(p2.contains("dot.ring"), "{p2}");
        assert!(!p1.contains("dot.ring"), "{p1}");
        assert_ne!(two.source, one.source);
        assert_eq!(k_loop(&two.source).matches(BARRIER).count(), 1);
        assert_eq!(k_loop(&one.source).matches(BARRIER).count(), 2);
        // Metal spells one or two buffers, and two only with all of K staged at once.
        let loads: Vec<OpId> = two
            .plan
            .decisions()
            .filter(|(_, d, _)| matches!(d, Decision::Ahead { .. }))
            .map(|(op, _, _)| op)
            .collect();
        let dot = two
            .plan
            .decisions()
            .find(|(_, d, _)| matches!(d, Decision::Dot(_)))
            .map(|(op, _, _)| op)
            .unwrap();
        let mut three = two.plan.clone();
        for &l in &loads {
            three.set(l, Decision::Ahead { stages: 3 }, "test");
        }
        let e = codegen::metal::compile_with(&k, &LaunchOptions::default(), &three);
        assert!(e.unwrap_err().to_string().contains("3 staging buffers"));
        let mut sliced = two.plan.clone();
        sliced.set_k_slice(dot, 16, "test");
        let e = codegen::metal::compile_with(&k, &LaunchOptions::default(), &sliced);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("staged ahead (all of K)"));
        if !emu {
            continue;
        }
        for (a_t, b_t) in [(false, false), (true, true)] {
            let p = Problem::new(dtype, a_t, b_t);
            for order in [LaneOrder::Forward, LaneOrder::Reverse] {
                let what = format!("{dtype}, A^T {a_t}, B^T {b_t}, {order}");
                let t = Target::Emulated(order);
                let got1 = run(&kernel, &p, blocks, (4, 1), t);
                check(&format!("{what}, num_stages 1"), &p, &got1);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for spec in [false, true] {
                    let got2 = run_with(&kernel, &p, blocks, (4, 3), t, Some(spec));
                    let what = format!("{what}, num_stages 3, integers specialised {spec}");
                    check(&what, &p, &got2);
                    assert_eq!(bits(&got2), bits(&got1), "{what}");
                }
            }
        }
    }
}
